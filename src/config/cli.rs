//! The command line as the binary sees it: parsing with errors in one line that name the
//! flag and its environment variable, error chains printed once each, and the `health`
//! subcommand's probe.

use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory as _, Parser as _};

use super::{Cli, HealthArgs};

/// Parse the command line; on a usage error print one line and exit 2 (help and version
/// print as usual).
pub fn parse() -> Cli {
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => e.exit(),
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
        Err(e) => exit_usage(&e),
    }
}

/// Print a usage error on one line and exit 2.
pub(super) fn exit_usage(e: &clap::Error) -> ! {
    eprintln!("context-ops: error: {}", usage_error(e));
    std::process::exit(2)
}

/// `invalid value 'abc' for --batch-size / CONTEXT_OPS_BATCH_SIZE: invalid digit found in
/// string`; other usage errors as clap words them, on one line.
fn usage_error(e: &clap::Error) -> String {
    let text = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    if let (ErrorKind::ValueValidation | ErrorKind::InvalidValue, Some(arg)) = (e.kind(), text(ContextKind::InvalidArg))
    {
        let flag = arg.split_whitespace().next().unwrap_or(&arg).to_string();
        let named = match env_of(&flag) {
            Some(env) => format!("{flag} / {env}"),
            None => flag,
        };
        let value = text(ContextKind::InvalidValue).unwrap_or_default();
        let reason = std::error::Error::source(e).map(|s| format!(": {s}")).unwrap_or_default();
        return format!("invalid value '{value}' for {named}{reason}");
    }
    let rendered = e.render().to_string();
    let first = rendered.lines().find(|l| !l.trim().is_empty()).unwrap_or("invalid command line");
    first.trim_start_matches("error: ").to_string()
}

/// The environment variable of the flag `--name`, looked up in every subcommand.
fn env_of(flag: &str) -> Option<String> {
    let long = flag.strip_prefix("--")?;
    let command = Cli::command();
    command.get_subcommands().flat_map(|c| c.get_arguments()).find_map(|arg| {
        (arg.get_long() == Some(long)).then(|| arg.get_env().map(|env| env.to_string_lossy().into_owned())).flatten()
    })
}

/// An error and its causes on one line, each text once: drivers often repeat their
/// message in their source (`database "x" does not exist` twice).
pub fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out.replace('\n', " ")
}

/// `context-ops health`: GET the target; ready (2xx) is `Ok`.
pub async fn health(args: &HealthArgs) -> anyhow::Result<()> {
    let url = args.target();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(3)).build()?;
    let response = client.get(&url).send().await.map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    anyhow::ensure!(status.is_success(), "{url} answered {status}: {}", body.trim());
    println!("{url}: {}", body.trim());
    Ok(())
}
