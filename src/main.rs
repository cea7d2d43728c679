//! The `context-ops` binary: `serve`, `api`, `worker`, `migrate`.

use clap::Parser;
use context_ops::config::Cli;
use context_ops::{server, telemetry};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let (config, role) = cli.command.into_config();
    telemetry::init(config.log.log_json);
    match run(config, role).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One clear line, not a backtrace.
            eprintln!("context-ops: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(config: context_ops::config::Config, role: Option<context_ops::config::Role>) -> anyhow::Result<()> {
    config.validate()?;
    let Some(role) = role else {
        let db = server::connect(&config).await?;
        db.close().await;
        tracing::info!("migrations applied");
        return Ok(());
    };
    let signal = server::shutdown_signal();
    let running = server::start(config, role).await?;
    running.until(signal).await
}
