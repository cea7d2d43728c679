//! The `context-ops` binary: `serve`, `api`, `worker`, `migrate`, `health`, `openapi`, and
//! the client (`op …`).

use context_ops::config::{Command, cli};
use context_ops::{server, telemetry};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let parsed = cli::parse();
    let result = match parsed.command {
        Command::Op(args) => return context_ops::cli::run(*args).await,
        Command::Health(args) => cli::health(&args).await,
        Command::Openapi => {
            print!("{}", context_ops::http::openapi::document_json());
            Ok(())
        }
        command => {
            bound_allocator_retention();
            let (config, role) = command.into_config();
            telemetry::init(config.log.log_json);
            run(config, role).await
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One clear line, not a backtrace; each cause once.
            eprintln!("context-ops: error: {}", cli::one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// glibc serves a large allocation with its own mapping (returned on free) only below a
/// threshold that it raises to the size of each such block freed — after an export's 1 MiB
/// chunks and pages, blocks that size come from the heap, and freed ones stay resident.
/// Measured (`cargo bench --bench artifacts`, 1,000,000 messages): peak RSS above idle
/// 42–43 MiB with the moving threshold, 22–26 MiB with it fixed at glibc's initial 128 KiB.
fn bound_allocator_retention() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets an allocator parameter; any value is valid to pass.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
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
