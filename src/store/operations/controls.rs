//! Queue controls and the operators' view: worker processes announcing themselves (a
//! silent owner's leases are recovered), the pauses in force, and per-kind figures for the
//! admin status (counts by state, recent outcomes, queue wait and run time percentiles,
//! throughput by minute, the oldest queued operation).

use crate::store::{Db, StoreResult, now_ms, query};
use context_jobs::contract::{ContextOperationKind, ContextOperationState as State};

/// Announce worker process `holder` (every second; see `OWNER_SILENCE_MS`).
pub async fn announce_worker(db: &Db, holder: &str) -> StoreResult<()> {
    let now = now_ms();
    query(
        "INSERT INTO worker_heartbeats (holder, started_at_ms, seen_at_ms) VALUES ($1, $2, $2) \
         ON CONFLICT (holder) DO UPDATE SET seen_at_ms = excluded.seen_at_ms",
    )
    .bind(holder)
    .bind(now)
    .execute(db)
    .await?;
    Ok(())
}

/// A worker process stops (graceful shutdown): forget it; forget long-gone ones too.
pub async fn forget_worker(db: &Db, holder: &str) -> StoreResult<()> {
    query("DELETE FROM worker_heartbeats WHERE holder = $1 OR seen_at_ms < $2")
        .bind(holder)
        .bind(now_ms() - 86_400_000)
        .execute(db)
        .await?;
    Ok(())
}

/// Worker processes seen in the last `within_ms`: `(holder, started_at_ms, seen_at_ms)`.
pub async fn live_workers(db: &Db, within_ms: i64) -> StoreResult<Vec<(String, i64, i64)>> {
    Ok(query("SELECT holder, started_at_ms, seen_at_ms FROM worker_heartbeats WHERE seen_at_ms >= $1 ORDER BY holder")
        .bind(now_ms() - within_ms)
        .fetch_all(db)
        .await?)
}

/// Pauses in force: `(kind, tenant)`, tenant `""` for everyone.
pub async fn pauses(db: &Db) -> StoreResult<Vec<(String, String)>> {
    Ok(query("SELECT kind, tenant FROM queue_controls WHERE paused = 1 ORDER BY kind, tenant").fetch_all(db).await?)
}

/// One kind's figures for the admin status, over `tenant` (or every tenant).
#[derive(Debug, Clone, Default)]
pub struct KindFigures {
    pub queued: u64,
    pub running: u64,
    pub succeeded_last_hour: u64,
    pub failed_last_hour: u64,
    pub cancelled_last_hour: u64,
    pub oldest_queued_created_at_ms: Option<i64>,
    /// Queue wait (creation → first start) and run time (first start → finish) of the
    /// operations finished in the last hour, milliseconds, ascending.
    pub waits_ms: Vec<i64>,
    pub runs_ms: Vec<i64>,
    /// Finished per minute over the last hour, oldest minute first (60 buckets).
    pub finished_per_minute: Vec<u64>,
    /// Among those finished in the last hour: attempts retried after a transient failure,
    /// and attempts taken over from a worker that died.
    pub retries_last_hour: u64,
    pub recoveries_last_hour: u64,
}

/// The figures of `kind`, over `tenant` (`None`: every tenant).
pub async fn kind_figures(db: &Db, kind: ContextOperationKind, tenant: Option<&str>) -> StoreResult<KindFigures> {
    let now = now_ms();
    let hour_ago = now - 3_600_000;
    // `$3 = ''` means every tenant.
    let scope = tenant.unwrap_or("");
    let counts: Vec<(String, i64)> = query(
        "SELECT state, COUNT(*) FROM operations WHERE kind = $1 AND ($2 = '' OR tenant = $2) \
         AND (state IN ($3, $4) OR finished_at_ms >= $5) GROUP BY state",
    )
    .bind(kind.as_str())
    .bind(scope)
    .bind(State::Queued.as_str())
    .bind(State::Running.as_str())
    .bind(hour_ago)
    .fetch_all(db)
    .await?;
    let count = |s: State| counts.iter().find(|(st, _)| st == s.as_str()).map_or(0, |c| c.1.max(0) as u64);
    let oldest: Option<i64> =
        query("SELECT MIN(created_at_ms) FROM operations WHERE kind = $1 AND ($2 = '' OR tenant = $2) AND state = $3")
            .bind(kind.as_str())
            .bind(scope)
            .bind(State::Queued.as_str())
            .fetch_scalar(db)
            .await?;
    let finished: Vec<(i64, Option<i64>, i64, Option<String>)> = query(
        "SELECT created_at_ms, started_at_ms, finished_at_ms, attempts FROM operations WHERE kind = $1 \
         AND ($2 = '' OR tenant = $2) AND finished_at_ms >= $3 ORDER BY finished_at_ms LIMIT 100000",
    )
    .bind(kind.as_str())
    .bind(scope)
    .bind(hour_ago)
    .fetch_all(db)
    .await?;
    let mut waits: Vec<i64> = finished.iter().filter_map(|(c, s, _, _)| s.map(|s| (s - c).max(0))).collect();
    let mut runs: Vec<i64> = finished.iter().filter_map(|(_, s, f, _)| s.map(|s| (f - s).max(0))).collect();
    let (mut retries, mut recoveries) = (0u64, 0u64);
    for (_, _, _, attempts) in &finished {
        let history: Vec<context_jobs::operation::view::AttemptRecord> =
            attempts.as_deref().and_then(|a| serde_json::from_str(a).ok()).unwrap_or_default();
        retries += history.iter().filter(|a| a.outcome == "retrying").count() as u64;
        recoveries += history.iter().filter(|a| a.outcome == "lease_expired").count() as u64;
    }
    waits.sort_unstable();
    runs.sort_unstable();
    let mut per_minute = vec![0u64; 60];
    for (_, _, f, _) in &finished {
        let slot = ((f - hour_ago) / 60_000).clamp(0, 59) as usize;
        per_minute[slot] += 1;
    }
    Ok(KindFigures {
        queued: count(State::Queued),
        running: count(State::Running),
        succeeded_last_hour: count(State::Succeeded),
        failed_last_hour: count(State::Failed),
        cancelled_last_hour: count(State::Cancelled),
        oldest_queued_created_at_ms: oldest,
        waits_ms: waits,
        runs_ms: runs,
        finished_per_minute: per_minute,
        retries_last_hour: retries,
        recoveries_last_hour: recoveries,
    })
}
