//! Starting and stopping the service: connect, migrate, bind, serve until shutdown.
//! Used by `main` and by the integration tests (which bind port 0).

use std::net::SocketAddr;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::app::{AppState, metrics_router, router};
use crate::config::{Command, Config};
use crate::db::{Db, redact_url};
use crate::queue::Queue;
use crate::worker::dispatcher;
use crate::worker::runner::Runner;
use std::sync::Arc;

/// A started service.
pub struct Running {
    pub addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub state: AppState,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<anyhow::Result<()>>>,
}

impl Running {
    /// Ask everything to stop and wait for it.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        for task in self.tasks {
            task.await.context("service task panicked")??;
        }
        self.state.db.close().await;
        Ok(())
    }

    /// Wait until a task ends by itself (an error) or `signal` fires, then stop.
    pub async fn until(self, signal: impl Future<Output = ()>) -> anyhow::Result<()> {
        signal.await;
        tracing::info!("shutting down");
        self.stop().await
    }
}

pub async fn connect(config: &Config) -> anyhow::Result<Db> {
    let db = Db::connect(&config.database_url, config.db_max_connections).await?;
    db.migrate().await?;
    Ok(db)
}

/// Connect, migrate and start what `command` asks for.
pub async fn start(config: Config, command: Command) -> anyhow::Result<Running> {
    config.validate()?;
    let db = connect(&config).await?;
    tracing::info!(database = %redact_url(&config.database_url), "database ready");
    let queue = Queue::connect(&config, &db).await?;
    tracing::info!(queue = queue.backend_name(), "queue ready");
    let state = AppState::new(db, queue, config.clone())?;
    if state.auth.is_open() {
        tracing::warn!(
            "OPEN MODE: no AGENT_CONTEXT_SERVICE_TOKEN or CONTEXT_OPS_JWT_SECRET configured; \
             every request is accepted as the default tenant. Do not expose this listener."
        );
    } else {
        tracing::info!(mode = state.auth.mode(), "authentication enabled");
    }
    let shutdown = CancellationToken::new();
    let mut tasks = Vec::new();
    let mut addr = config.bind;
    let mut metrics_addr = None;
    if command.runs_api() {
        let listener = TcpListener::bind(config.bind)
            .await
            .with_context(|| format!("cannot listen on {}", config.bind))?;
        addr = listener.local_addr()?;
        tracing::info!(%addr, "API listening");
        tasks.push(serve(listener, router(state.clone()), shutdown.clone()));
        if let Some(bind) = config.metrics_bind {
            let listener =
                TcpListener::bind(bind).await.with_context(|| format!("cannot listen on {bind} for metrics"))?;
            metrics_addr = Some(listener.local_addr()?);
            tasks.push(serve(listener, metrics_router(state.clone()), shutdown.clone()));
        }
    }
    if command.runs_workers() {
        let holder = format!(
            "{}-{}-{}",
            std::env::var("HOSTNAME").unwrap_or_else(|_| "host".into()),
            std::process::id(),
            ulid::Ulid::generate()
        );
        let runner = Runner { db: state.db.clone(), config: state.config.clone(), shutdown: shutdown.clone() };
        tasks.push(state.queue.spawn_workers(Arc::new(runner), shutdown.clone()));
        tasks.push(dispatcher::spawn(
            state.db.clone(),
            state.queue.clone(),
            state.config.clone(),
            holder,
            shutdown.clone(),
        ));
        tracing::info!(concurrency = config.worker_concurrency, "workers started");
    }
    Ok(Running { addr, metrics_addr, state, shutdown, tasks })
}

fn serve(listener: TcpListener, app: axum::Router, shutdown: CancellationToken) -> JoinHandle<anyhow::Result<()>> {
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await
            .context("HTTP server failed")
    })
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
