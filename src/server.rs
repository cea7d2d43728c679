//! Starting and stopping the service: connect, migrate, bind, serve until shutdown.
//! Used by `main` and by the integration tests (which bind port 0).

use std::net::SocketAddr;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, Role};
use crate::http::{AppState, metrics_router, router};
use crate::queue::Queue;
use crate::store::Db;
use crate::store::engine::redact_url;
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

    /// Run until `signal` fires or a task ends by itself (a failure: serving and workers
    /// only end when asked), then stop everything. A task's failure is the result.
    pub async fn until(mut self, signal: impl Future<Output = ()>) -> anyhow::Result<()> {
        let tasks = std::mem::take(&mut self.tasks);
        let mut pending: futures::stream::FuturesUnordered<_> = tasks.into_iter().collect();
        let failure = tokio::select! {
            _ = signal => {
                tracing::info!("shutting down");
                None
            }
            Some(ended) = futures::StreamExt::next(&mut pending) => Some(match ended {
                Ok(Ok(())) => anyhow::anyhow!("a service task stopped unexpectedly"),
                Ok(Err(e)) => e,
                Err(e) => anyhow::anyhow!("a service task panicked: {e}"),
            }),
        };
        self.shutdown.cancel();
        while let Some(ended) = futures::StreamExt::next(&mut pending).await {
            if let Ok(Err(e)) | Err(e) = ended.map_err(anyhow::Error::from) {
                tracing::warn!(error = format!("{e:#}"), "task failed during shutdown");
            }
        }
        self.state.db.close().await;
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

pub async fn connect(config: &Config) -> anyhow::Result<Db> {
    let db = Db::connect_with(
        &config.database.database_url,
        config.database.db_max_connections,
        std::time::Duration::from_millis(config.database.db_acquire_timeout_ms),
    )
    .await?;
    db.migrate().await?;
    Ok(db)
}

/// Connect, migrate and start what `role` asks for.
pub async fn start(config: Config, role: Role) -> anyhow::Result<Running> {
    config.validate()?;
    if role.runs_api() {
        config.check_exposure()?;
    }
    let db = connect(&config).await?;
    tracing::info!(database = %redact_url(&config.database.database_url), "database ready");
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
    let shutdown = state.shutdown.clone();
    let mut tasks = Vec::new();
    let mut addr = config.http.bind;
    let mut metrics_addr = None;
    // Bind every listener before spawning anything, so a failed bind leaks nothing.
    let api_listener = match role.runs_api() {
        true => Some(
            TcpListener::bind(config.http.bind)
                .await
                .with_context(|| format!("cannot listen on {}", config.http.bind))?,
        ),
        false => None,
    };
    let metrics_listener = match config.metrics.metrics_bind {
        Some(bind) => {
            Some(TcpListener::bind(bind).await.with_context(|| format!("cannot listen on {bind} for metrics"))?)
        }
        None => None,
    };
    if let Some(listener) = api_listener {
        addr = listener.local_addr()?;
        tracing::info!(%addr, "API listening");
        // Not ready until the busiest tenants' recall indexes are loaded (set before serving).
        let warm = config.embedder.recall_warm_tenants;
        crate::recall::warm::spawn(state.recall.clone(), warm, shutdown.clone());
        tasks.push(serve(listener, router(state.clone()), shutdown.clone()));
    }
    if let Some(listener) = metrics_listener {
        let bound = listener.local_addr()?;
        metrics_addr = Some(bound);
        tracing::info!(addr = %bound, "metrics listening");
        tasks.push(serve(listener, metrics_router(state.clone()), shutdown.clone()));
    }
    // Changes committed here reach other processes' long-polls and streams (production);
    // a process serving the API also hears theirs.
    if let Some(redis) = state.queue.redis_client() {
        tasks.extend(state.changes.spawn_relay(
            redis,
            &config.queue.queue_namespace,
            role.runs_api(),
            shutdown.clone(),
        )?);
    }
    if role.runs_workers() {
        let holder = format!(
            "{}-{}-{}",
            std::env::var("HOSTNAME").unwrap_or_else(|_| "host".into()),
            std::process::id(),
            ulid::Ulid::generate()
        );
        // Announced before any worker can claim: a lease owner nobody has heard of is dead.
        crate::store::operations::controls::announce_worker(&state.db, &holder).await?;
        let runner = Runner {
            db: state.db.clone(),
            config: state.config.clone(),
            shutdown: shutdown.clone(),
            changes: state.changes.clone(),
            holder: holder.as_str().into(),
            scheduling: state.scheduling.clone(),
            limiter: crate::ratelimit::RateLimiter::new(
                &state.db,
                state.queue.redis().map(|conn| (conn, state.queue.namespace().to_string())),
                state.scheduling.rate_limits.clone(),
            ),
            views: Arc::default(),
            pipelines: Arc::new(crate::worker::pipelines::Pipelines::for_pool(&state.db)),
        };
        let workers = state.queue.spawn_workers(Arc::new(runner), shutdown.clone());
        let stopped = CancellationToken::new();
        tasks.push(crate::worker::liveness::spawn(state.db.clone(), holder.clone(), shutdown.clone(), stopped.clone()));
        tasks.push(tokio::spawn(async move {
            let ended = workers.await;
            stopped.cancel();
            ended.context("queue workers panicked")?
        }));
        tasks.push(crate::worker::projector::spawn(
            state.db.clone(),
            state.embedder().clone(),
            config.embedder.projector_interval_ms,
            holder.clone(),
            shutdown.clone(),
        ));
        tasks.push(dispatcher::spawn(
            state.db.clone(),
            state.queue.clone(),
            state.config.clone(),
            state.changes.clone(),
            holder,
            shutdown.clone(),
        ));
        tracing::info!(concurrency = config.worker.worker_concurrency, "workers started");
        match config.retention.sweep_policy() {
            Some(policy) => tracing::info!(
                every_secs = config.retention.retention_sweep_secs,
                max_age_days = policy.max_age_days,
                max_messages = policy.max_messages,
                "retention sweep ON: every conversation of every tenant is trimmed to this policy; \
                 each trim is a retention operation its tenant can list"
            ),
            None => tracing::debug!("retention sweep off (no CONTEXT_OPS_RETENTION_MAX_* policy)"),
        }
    }
    state.started.store(true, std::sync::atomic::Ordering::Release);
    Ok(Running { addr, metrics_addr, state, shutdown, tasks })
}

fn serve(listener: TcpListener, app: axum::Router, shutdown: CancellationToken) -> JoinHandle<anyhow::Result<()>> {
    tokio::spawn(async move {
        axum::serve(crate::http::malformed::ApiErrorListener(listener), app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await
            .context("HTTP server failed")
    })
}

/// Resolves on SIGINT or SIGTERM. Call it (not await it) before starting, so a signal
/// arriving during startup is not lost to the default action.
pub fn shutdown_signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    async move {
        let ctrl_c = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        #[cfg(unix)]
        let term = async move {
            match term {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    }
}
