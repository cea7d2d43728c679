//! The embedded backend (apalis-sqlite) on the service's own SQLite file, through a small
//! pool of its own: migrations, push, depth, vacuum, workers.
//!
//! apalis-sqlite keeps every message as a row of `Jobs` (`job_type` = queue name) moving
//! `Pending → Queued` (fetched) `→ Running` (locked) `→ Done`, and its workers in `Workers`.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use apalis::prelude::{BackendExt as _, TaskBuilder, WorkerBuilder, WorkerBuilderExt as _, WorkerContext};
use apalis_sqlite::{Config as SqliteConfig, SqliteStorage};
use futures::FutureExt as _;
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::{ConnectOptions as _, SqlitePool};
use tokio::sync::Notify;

use super::worker::{Deliver, Envelope, LenientCodec, WakeOrInterval, WorkerRun};
use super::{HEARTBEAT_INTERVAL, MISSED_HEARTBEATS, QueueDepth};
use crate::store::{Db, queue_jobs};

/// apalis-sqlite's migrations are tracked here, apart from `_sqlx_migrations` (ours).
const APALIS_MIGRATIONS_TABLE: &str = "_apalis_migrations";

/// Connections of the queue's own pool (six kinds' workers poll through it).
const QUEUE_CONNECTIONS: u32 = 4;

pub(super) struct SqliteQueue {
    pool: SqlitePool,
}

fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() as i64
}

fn apalis_config(queue: &str) -> SqliteConfig {
    SqliteConfig::default()
        .queue(queue)
        .batch_size(1)
        .heartbeat_interval(HEARTBEAT_INTERVAL)
        .missed_heartbeats(MISSED_HEARTBEATS)
}

impl SqliteQueue {
    /// `pool` is the service's; the queue opens its own connections to the same file with
    /// statement logging off: apalis' polling statements wait on the write lock behind
    /// every export batch and would flood the log with sqlx's slow-statement warnings,
    /// which stay on for the service's own statements.
    pub(super) async fn connect(db: &Db, pool: SqlitePool) -> anyhow::Result<Self> {
        let options = (*pool.connect_options()).clone();
        // An in-memory database is its connections' own: share them.
        let pool = if options.get_filename().to_string_lossy().contains(":memory:") {
            pool
        } else {
            SqlitePoolOptions::new()
                .max_connections(QUEUE_CONNECTIONS)
                .acquire_timeout(Duration::from_secs(30))
                .connect_with(options.disable_statement_logging())
                .await
                .context("cannot open the SQLite queue's connections")?
        };
        let _lock = db.migration_lock().await?;
        let mut migrator = SqliteStorage::migrations();
        migrator.dangerous_set_table_name(APALIS_MIGRATIONS_TABLE);
        migrator.run(&pool).await.context("apalis-sqlite queue migration failed")?;
        Ok(Self { pool })
    }

    pub(super) async fn push(&self, queue: &str, payloads: Vec<Vec<u8>>) -> anyhow::Result<()> {
        let tasks: Vec<_> = payloads.into_iter().map(|p| TaskBuilder::new(p).build()).collect();
        let mut conn = self.pool.acquire().await?;
        apalis_sqlite::queries::push_tasks(&mut *conn, queue, &tasks).await?;
        Ok(())
    }

    pub(super) async fn depth(&self, queue: &str) -> anyhow::Result<QueueDepth> {
        let (pending, scheduled, inflight, dead) = queue_jobs::depth(&self.pool, queue, now_secs()).await?;
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(QueueDepth { pending: n(pending), scheduled: n(scheduled), inflight: n(inflight), dead: n(dead) })
    }

    pub(super) async fn vacuum(&self, queue: &str, older_than: Duration) -> anyhow::Result<u64> {
        let cutoff = now_secs().saturating_sub(older_than.as_secs() as i64);
        let jobs = queue_jobs::vacuum_jobs(&self.pool, queue, cutoff).await?;
        // A live worker refreshes `last_seen` every heartbeat; give the dead ones at least
        // ten minutes (and never less than `older_than`) before forgetting them.
        let worker_cutoff = cutoff.min(now_secs() - 600);
        queue_jobs::vacuum_workers(&self.pool, queue, worker_cutoff).await?;
        Ok(jobs)
    }

    pub(super) async fn release_worker(&self, queue: &str, worker: &str) -> anyhow::Result<u64> {
        Ok(queue_jobs::release_worker(&self.pool, queue, worker).await?)
    }

    pub(super) fn worker(
        &self,
        queue: &str,
        name: &str,
        deliver: Deliver,
        concurrency: usize,
        wake: Arc<Notify>,
    ) -> (WorkerContext, WorkerRun) {
        let backend = SqliteStorage::<Envelope>::new(&self.pool)
            .with_config(apalis_config(queue))
            .with_codec(LenientCodec)
            .poll_with_strategy(WakeOrInterval::new(wake, 0));
        let ctx = WorkerContext::new(name);
        let worker = WorkerBuilder::new(ctx.clone())
            .backend(backend)
            .concurrency(concurrency)
            .build(move |envelope: Envelope| deliver.call(envelope));
        (ctx, worker.run().boxed())
    }
}
