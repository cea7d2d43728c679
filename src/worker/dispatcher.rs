//! Loops every worker process runs beside its queue workers: the dispatcher (re-push
//! queued operations that were never or long ago pushed, and running ones whose lease
//! expired, and wake kinds whose work a concurrency limit holds — safe with any number of
//! processes, each row is taken by compare-and-set),
//! the gauges, pruning of old terminal operations, and the retention sweep.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::changes::Changes;
use crate::config::Config;
use crate::metrics as m;
use crate::queue::Queue;
use crate::store::operations::{dispatch, transitions};
use crate::store::{Db, artifacts, now_ms};
use context_jobs::contract::{ContextOperationKind, ContextOperationState};
use context_jobs::ids::TenantKey;
use context_jobs::operation::ErrorCode;

pub fn spawn(
    db: Db,
    queue: Queue,
    config: Arc<Config>,
    changes: Changes,
    holder: String,
    shutdown: CancellationToken,
) -> JoinHandle<anyhow::Result<()>> {
    // Housekeeping (pruning, the queue's vacuum: a SCAN of Redis) runs on a task of its own:
    // on a busy Redis a vacuum took seconds, and in this loop it held back every push.
    spawn_housekeeping(db.clone(), queue.clone(), config.clone(), shutdown.clone());
    // Validated at start (`Config::validate`).
    let scheduling = config.scheduling().unwrap_or_default();
    let repush = dispatch::Repush {
        after_ms: config.queue.repush_after_ms as i64,
        limited: ContextOperationKind::ALL
            .into_iter()
            .filter(|&k| super::runner::claim_limits(&scheduling, k).limited())
            .collect(),
        wake_every_ms: config.queue.dispatch_interval_ms as i64,
    };
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(config.queue.dispatch_interval_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_sweep_check = 0i64;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tick.tick() => {}
            }
            if let Err(e) = dispatch_once(&db, &queue, &changes, &repush).await {
                tracing::warn!(error = format!("{e:#}"), "dispatcher round failed");
            }
            if let Err(e) = update_gauges(&db, &queue).await {
                tracing::debug!(error = format!("{e:#}"), "gauge refresh failed");
            }
            let now = now_ms();
            if let Some(policy) = config.retention.sweep_policy()
                && now - last_sweep_check > 5_000
            {
                last_sweep_check = now;
                let period = config.retention.retention_sweep_secs as i64 * 1000;
                match super::sweep::sweep_tick(&db, &holder, period, &policy).await {
                    Ok(Some(run)) => {
                        changes.committed_many(None);
                        tracing::info!(
                            operations = run.operations,
                            planned_messages = run.planned,
                            "retention sweep submitted its retention operations"
                        )
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(error = %e, "retention sweep failed"),
                }
            }
        }
    })
}

/// Every ten minutes until `shutdown`: prune old operations and expired artifacts, vacuum
/// the queue's finished messages.
fn spawn_housekeeping(db: Db, queue: Queue, config: Arc<Config>, shutdown: CancellationToken) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(600));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let keep = i64::from(config.worker.operation_retention_days) * 86_400_000;
            let now = now_ms();
            match dispatch::prune(&db, now - keep).await {
                Ok(n) => metrics::counter!(m::PRUNED).increment(n),
                Err(e) => tracing::warn!(error = %e, "pruning old operations failed"),
            }
            match artifacts::prune_expired(&db, now).await {
                Ok(n) if n > 0 => tracing::info!(artifacts = n, "expired artifacts deleted"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "pruning expired artifacts failed"),
            }
            if let Err(e) = queue.vacuum(Duration::from_secs(3600)).await {
                tracing::debug!(error = format!("{e:#}"), "queue vacuum failed");
            }
        }
    });
}

/// One dispatcher round; returns how many operations were pushed.
pub async fn dispatch_once(
    db: &Db,
    queue: &Queue,
    changes: &Changes,
    repush: &dispatch::Repush,
) -> anyhow::Result<usize> {
    // Queued work past its deadline never starts.
    for (id, tenant, kind) in transitions::expire_overdue(db, 500).await? {
        changes.committed(&id, &tenant);
        tracing::info!(operation = %id, kind = kind.as_str(), "deadline passed before it started; failed");
        metrics::counter!(m::OPERATIONS_FINISHED, "kind" => kind.as_str(), "outcome" => ContextOperationState::Failed.as_str())
            .increment(1);
    }
    // Redis lost its data (restart without persistence, flush): every message pushed before
    // is gone, so push every unfinished operation again now rather than after the repush age.
    match queue.lost_messages().await {
        Ok(true) => {
            let n = dispatch::unmark_all(db).await?;
            if n > 0 {
                tracing::warn!(operations = n, "the queue lost its messages; pushing unfinished operations again");
            }
        }
        Ok(false) => {}
        Err(e) => tracing::debug!(error = format!("{e:#}"), "cannot check the queue marker"),
    }
    let due = dispatch::take_dispatchable(db, repush, 500).await?;
    push_taken(db, queue, &due).await
}

/// After a resume of `kind` (for `tenant`, or everyone): push a message for every queued
/// operation the pause held, in pages, on a task of its own — work submitted during the
/// pause was not pushed (and deliveries that raced the pause were dropped): only pushes
/// start work. What is still queued after them (see `transitions::set_paused`), or after a
/// failed push, the dispatcher pushes at its next round (the resume cleared the marks).
pub fn spawn_resume_pushes(db: Db, queue: Queue, kind: ContextOperationKind, tenant: Option<TenantKey>) {
    tokio::spawn(async move {
        let mut after = (-1, String::new());
        loop {
            let page = match dispatch::resumable_page(&db, kind, tenant.as_ref(), &after, RESUME_PAGE).await {
                Ok(page) => page,
                Err(e) => return tracing::warn!(kind = kind.as_str(), error = %e, "reading resumed work failed"),
            };
            let Some(last) = page.last() else { return };
            after = (last.0, last.1.to_string());
            let ids: Vec<_> = page.into_iter().map(|(_, id)| id).collect();
            if let Err(e) = queue.push_many(kind, &ids).await {
                return tracing::warn!(
                    kind = kind.as_str(),
                    error = format!("{e:#}"),
                    "pushing resumed work failed; the dispatcher will"
                );
            }
            metrics::counter!(m::DISPATCHED, "kind" => kind.as_str(), "reason" => m::DISPATCHED_RESUMED)
                .increment(ids.len() as u64);
            if ids.len() < RESUME_PAGE as usize {
                return;
            }
        }
    });
}

/// Operations a resume pushes per round trip.
const RESUME_PAGE: i64 = 1000;

/// Push operations taken (and marked pushed) by `take_dispatchable`: orphans one by one
/// (each a recovery), the rest in one round trip per kind. How many were pushed; what could
/// not be pushed is unmarked, so the next round (not one after the repush age) tries again.
async fn push_taken(db: &Db, queue: &Queue, due: &[dispatch::Dispatchable]) -> anyhow::Result<usize> {
    let mut pushed = 0;
    let mut failed: Vec<&str> = Vec::new();
    for op in due.iter().filter(|op| op.orphaned) {
        if failed.is_empty() {
            match queue.push_recovery(op.kind, &op.id).await {
                Ok(()) => {
                    pushed += 1;
                    metrics::counter!(m::DISPATCHED, "kind" => op.kind.as_str(), "reason" => ErrorCode::LeaseExpired.as_str())
                        .increment(1);
                    continue;
                }
                Err(e) => tracing::warn!(operation = %op.id, error = format!("{e:#}"), "dispatcher push failed"),
            }
        }
        failed.push(op.id.as_str());
    }
    for kind in ContextOperationKind::ALL {
        let ids: Vec<_> = due.iter().filter(|op| !op.orphaned && op.kind == kind).map(|op| op.id.clone()).collect();
        if ids.is_empty() {
            continue;
        }
        if failed.is_empty() {
            match queue.push_many(kind, &ids).await {
                Ok(()) => {
                    pushed += ids.len();
                    metrics::counter!(m::DISPATCHED, "kind" => kind.as_str(), "reason" => ContextOperationState::Queued.as_str())
                        .increment(ids.len() as u64);
                    continue;
                }
                Err(e) => tracing::warn!(kind = kind.as_str(), error = format!("{e:#}"), "dispatcher push failed"),
            }
        }
        failed.extend(due.iter().filter(|op| !op.orphaned && op.kind == kind).map(|op| op.id.as_str()));
    }
    if !failed.is_empty() {
        dispatch::unmark(db, &failed).await?;
    }
    Ok(pushed)
}

async fn update_gauges(db: &Db, queue: &Queue) -> anyhow::Result<()> {
    let (counts, oldest) = dispatch::census(db).await?;
    let pauses = crate::store::operations::controls::pauses(db).await?;
    for kind in ContextOperationKind::ALL {
        let of_kind = pauses.iter().filter(|(k, _)| k == kind.as_str());
        let everyone = of_kind.clone().any(|(_, t)| t.is_empty());
        metrics::gauge!(m::QUEUE_PAUSED, "kind" => kind.as_str()).set(if everyone { 1.0 } else { 0.0 });
        let tenants = of_kind.filter(|(_, t)| !t.is_empty()).count();
        metrics::gauge!(m::QUEUE_PAUSED_TENANTS, "kind" => kind.as_str()).set(tenants as f64);
        for state in ContextOperationState::ALL {
            let n = counts.iter().find(|(k, s, _)| k == kind.as_str() && s == state.as_str()).map(|c| c.2).unwrap_or(0);
            metrics::gauge!(m::OPERATIONS_GAUGE, "kind" => kind.as_str(), "state" => state.as_str()).set(n as f64);
        }
        let depth = queue.depth(kind).await?;
        for (status, v) in [
            ("pending", depth.pending),
            ("scheduled", depth.scheduled),
            ("inflight", depth.inflight),
            ("dead", depth.dead),
        ] {
            metrics::gauge!(m::QUEUE_DEPTH, "kind" => kind.as_str(), "status" => status).set(v as f64);
        }
    }
    metrics::gauge!(m::OLDEST_QUEUED).set(oldest.map(|ms| ms as f64 / 1000.0).unwrap_or(0.0));
    Ok(())
}
