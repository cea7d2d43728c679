//! The embedded backend (apalis-sqlite) on the service's own SQLite pool: migrations, push,
//! depth, vacuum, workers.
//!
//! apalis-sqlite keeps every message as a row of `Jobs` (`job_type` = queue name) moving
//! `Pending → Queued` (fetched) `→ Running` (locked) `→ Done`, and its workers in `Workers`.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use apalis::prelude::{BackendExt as _, TaskBuilder, WorkerBuilder, WorkerBuilderExt as _, WorkerContext};
use apalis_sqlite::{Config as SqliteConfig, SqliteStorage};
use futures::FutureExt as _;
use sqlx::SqlitePool;
use tokio::sync::Notify;

use super::worker::{Deliver, Envelope, LenientCodec, WakeOrInterval, WorkerRun};
use super::{HEARTBEAT_INTERVAL, MISSED_HEARTBEATS, QueueDepth};

/// apalis-sqlite's migrations are tracked here, apart from `_sqlx_migrations` (ours).
const APALIS_MIGRATIONS_TABLE: &str = "_apalis_migrations";

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

const DEPTH: &str = "SELECT
    COALESCE(SUM(CASE WHEN (status = 'Pending' AND run_at <= $2)
                        OR (status = 'Failed' AND attempts < max_attempts) THEN 1 ELSE 0 END), 0),
    COALESCE(SUM(CASE WHEN status = 'Pending' AND run_at > $2 THEN 1 ELSE 0 END), 0),
    COALESCE(SUM(CASE WHEN status IN ('Queued', 'Running') THEN 1 ELSE 0 END), 0),
    COALESCE(SUM(CASE WHEN status = 'Killed'
                        OR (status = 'Failed' AND attempts >= max_attempts) THEN 1 ELSE 0 END), 0)
  FROM Jobs WHERE job_type = $1";

// apalis' own `vacuum_before` compares an integer `run_at` with a datetime string (always
// true in SQLite, so it deletes regardless of age) and runs a full `VACUUM`: not used.
const VACUUM_JOBS: &str = "DELETE FROM Jobs
  WHERE job_type = $1
    AND (status IN ('Done', 'Killed') OR (status = 'Failed' AND attempts >= max_attempts))
    AND COALESCE(done_at, run_at) <= $2";

const VACUUM_WORKERS: &str = "DELETE FROM Workers
  WHERE worker_type = $1 AND last_seen < $2
    AND NOT EXISTS (SELECT 1 FROM Jobs WHERE Jobs.lock_by = Workers.id)";

const RELEASE: &str = "UPDATE Jobs SET status = 'Pending', lock_by = NULL, lock_at = NULL
  WHERE job_type = $1 AND lock_by = $2 AND status IN ('Queued', 'Running')";

impl SqliteQueue {
    pub(super) async fn connect(pool: SqlitePool) -> anyhow::Result<Self> {
        let mut migrator = SqliteStorage::migrations();
        migrator.dangerous_set_table_name(APALIS_MIGRATIONS_TABLE);
        migrator.run(&pool).await.context("apalis-sqlite queue migration failed")?;
        Ok(Self { pool })
    }

    pub(super) async fn push(&self, queue: &str, payload: Vec<u8>) -> anyhow::Result<()> {
        let task = TaskBuilder::new(payload).build();
        let mut conn = self.pool.acquire().await?;
        apalis_sqlite::queries::push_tasks(&mut *conn, queue, &[task]).await?;
        Ok(())
    }

    pub(super) async fn depth(&self, queue: &str) -> anyhow::Result<QueueDepth> {
        let (pending, scheduled, inflight, dead): (i64, i64, i64, i64) =
            sqlx::query_as(DEPTH).bind(queue).bind(now_secs()).fetch_one(&self.pool).await?;
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(QueueDepth { pending: n(pending), scheduled: n(scheduled), inflight: n(inflight), dead: n(dead) })
    }

    pub(super) async fn vacuum(&self, queue: &str, older_than: Duration) -> anyhow::Result<u64> {
        let cutoff = now_secs().saturating_sub(older_than.as_secs() as i64);
        let jobs = sqlx::query(VACUUM_JOBS).bind(queue).bind(cutoff).execute(&self.pool).await?.rows_affected();
        // A live worker refreshes `last_seen` every heartbeat; give the dead ones at least
        // ten minutes (and never less than `older_than`) before forgetting them.
        let worker_cutoff = cutoff.min(now_secs() - 600);
        sqlx::query(VACUUM_WORKERS).bind(queue).bind(worker_cutoff).execute(&self.pool).await?;
        Ok(jobs)
    }

    pub(super) async fn release_worker(&self, queue: &str, worker: &str) -> anyhow::Result<u64> {
        Ok(sqlx::query(RELEASE).bind(queue).bind(worker).execute(&self.pool).await?.rows_affected())
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
