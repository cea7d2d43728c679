//! The `context-ops` binary: `serve`, `api`, `worker`, `migrate`.

use clap::Parser;
use context_ops::config::{Cli, Command};
use context_ops::{server, telemetry};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    telemetry::init(cli.config.log_json);
    match run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One clear line, not a backtrace.
            eprintln!("context-ops: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    cli.config.validate()?;
    if cli.command == Command::Migrate {
        let db = server::connect(&cli.config).await?;
        db.close().await;
        tracing::info!("migrations applied");
        return Ok(());
    }
    let signal = server::shutdown_signal();
    let running = server::start(cli.config, cli.command).await?;
    running.until(signal).await
}
