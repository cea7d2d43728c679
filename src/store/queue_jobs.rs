//! The embedded queue's own tables (apalis-sqlite's `Jobs` and `Workers`): the statements
//! our queue code runs on them beside apalis — depth by state, vacuum of finished messages
//! and long-gone workers, and releasing what a stopped worker held. apalis-sqlite keeps
//! every message as a row of `Jobs` (`job_type` = queue name) moving `Pending → Queued`
//! (fetched) `→ Running` (locked) `→ Done`.

use sqlx::SqlitePool;

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

/// `(pending, scheduled, inflight, dead)` messages of `queue` at `now_secs`.
pub async fn depth(pool: &SqlitePool, queue: &str, now_secs: i64) -> Result<(i64, i64, i64, i64), sqlx::Error> {
    sqlx::query_as(DEPTH).bind(queue).bind(now_secs).fetch_one(pool).await
}

/// Delete finished messages of `queue` done at or before `cutoff_secs`.
pub async fn vacuum_jobs(pool: &SqlitePool, queue: &str, cutoff_secs: i64) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query(VACUUM_JOBS).bind(queue).bind(cutoff_secs).execute(pool).await?.rows_affected())
}

/// Forget workers of `queue` last seen before `cutoff_secs` that hold nothing.
pub async fn vacuum_workers(pool: &SqlitePool, queue: &str, cutoff_secs: i64) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query(VACUUM_WORKERS).bind(queue).bind(cutoff_secs).execute(pool).await?.rows_affected())
}

/// Put back what worker `worker` of `queue` still holds.
pub async fn release_worker(pool: &SqlitePool, queue: &str, worker: &str) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query(RELEASE).bind(queue).bind(worker).execute(pool).await?.rows_affected())
}
