//! Claims combined: the claims of one kind that this process's worker slots make off its
//! cached scheduler view (`claim.rs`, `view.rs`) while a claim of that kind is in flight
//! wait for it, and then go to the database together — one statement (and one commit) per
//! tenant for all of them (flat combining). A lone claim goes at once, as before; under
//! load, slots that would each have sent a claim share one. Measured on the `operations`
//! bench, where a claim was the costliest statement of an operation: docs/operations-engine.md.
//!
//! Each lane (kind) is drained by one task at a time, spawned by the claim that found the
//! lane idle; the claims stay with the task, not with their callers, so a caller that
//! stops waiting cannot strand what was claimed for it: the task releases it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use super::{Claimed, FenceError, apply, claim};
use crate::store::operations::queue_position;
use crate::store::{Db, StoreResult};
use context_jobs::contract::ContextOperationKind;
use context_jobs::operation::Transition;

/// How long one combined claim statement may take before its claims are answered `None`
/// (they decide off a fresh view, on other connections). A claim takes about a millisecond;
/// this bounds what a connection cut without a word (a half-open TCP connection) or a long
/// table lock holds every claim of the kind in this process to. What such a statement
/// claims after all runs nowhere and is recovered when its lease expires.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// The claims waiting, per kind.
#[derive(Default, Clone)]
pub struct ClaimCombiner {
    lanes: Arc<Mutex<HashMap<ContextOperationKind, Lane>>>,
}

#[derive(Default)]
struct Lane {
    /// A task is draining this lane: new claims wait for it.
    draining: bool,
    waiting: Vec<Waiting>,
}

struct Waiting {
    tenant: String,
    from: Option<(i64, i64)>,
    reply: oneshot::Sender<Option<Claimed>>,
}

impl ClaimCombiner {
    fn lanes(&self) -> std::sync::MutexGuard<'_, HashMap<ContextOperationKind, Lane>> {
        self.lanes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many claims of `kind` wait for the statement in flight; `None` when none is.
    pub fn waiting(&self, kind: ContextOperationKind) -> Option<usize> {
        self.lanes().get(&kind).filter(|lane| lane.draining).map(|lane| lane.waiting.len())
    }

    /// Claim `tenant`'s first due operation of `kind` (from queue position `from` on, that
    /// no pause holds) for `owner`, together with the claims of the same kind that arrive
    /// meanwhile. `None` when nothing due was left for this claim (or its statement failed:
    /// the caller decides again off a fresh view, which meets the failure itself). Every
    /// claim of one process passes the same `owner` and `lease_ms`.
    pub async fn claim(
        &self,
        db: &Db,
        kind: ContextOperationKind,
        tenant: &str,
        from: Option<(i64, i64)>,
        owner: &str,
        lease_ms: i64,
    ) -> StoreResult<Option<Claimed>> {
        let (reply, claimed) = oneshot::channel();
        let start = {
            let mut lanes = self.lanes();
            let lane = lanes.entry(kind).or_default();
            lane.waiting.push(Waiting { tenant: tenant.to_owned(), from, reply });
            !std::mem::replace(&mut lane.draining, true)
        };
        if start {
            // Made before the spawn: a task dropped before its first poll (a runtime
            // shutting down) still leaves the lane idle.
            let idle_at_exit = IdleAtExit(Some((self.clone(), kind)));
            tokio::spawn(self.clone().drain(db.clone(), kind, owner.to_owned(), lease_ms, idle_at_exit));
        }
        Ok(claimed.await.ok().flatten())
    }

    /// Serve `kind`'s lane until no claim waits: each round takes every claim waiting.
    async fn drain(
        self,
        db: Db,
        kind: ContextOperationKind,
        owner: String,
        lease_ms: i64,
        mut unexpected_exit: IdleAtExit,
    ) {
        loop {
            let round = {
                let mut lanes = self.lanes();
                let lane = lanes.entry(kind).or_default();
                if lane.waiting.is_empty() {
                    // Idle under the same lock a new claim checks it with.
                    lane.draining = false;
                    unexpected_exit.0 = None;
                    return;
                }
                std::mem::take(&mut lane.waiting)
            };
            serve(&db, kind, round, &owner, lease_ms).await;
        }
    }
}

/// Marks the lane idle when its task ends otherwise than by finding it empty: a task that
/// panicked or was dropped with the runtime must not leave later claims waiting for a drain
/// that never comes. Claims still waiting then are answered `None` (their senders dropped)
/// and decide off a fresh view.
struct IdleAtExit(Option<(ClaimCombiner, ContextOperationKind)>);

impl Drop for IdleAtExit {
    fn drop(&mut self) {
        if let Some((combiner, kind)) = self.0.take() {
            let mut lanes = combiner.lanes();
            let lane = lanes.entry(kind).or_default();
            lane.draining = false;
            lane.waiting.clear();
        }
    }
}

/// One statement per tenant for the claims of one round.
async fn serve(db: &Db, kind: ContextOperationKind, round: Vec<Waiting>, owner: &str, lease_ms: i64) {
    let mut tenants: Vec<(String, Vec<Waiting>)> = Vec::new();
    for waiting in round {
        match tenants.iter_mut().find(|(tenant, _)| *tenant == waiting.tenant) {
            Some((_, group)) => group.push(waiting),
            None => tenants.push((waiting.tenant.clone(), vec![waiting])),
        }
    }
    for (tenant, group) in tenants {
        // The earliest position any of them searches from (a position only bounds where
        // the search starts: an earlier one finds the same operations).
        let from = group.iter().map(|w| w.from).reduce(|a, b| a.zip(b).map(|(a, b)| a.min(b))).flatten();
        let count = group.len() as i64;
        let statement = claim::claim_first_due(db, kind, &tenant, from, count, owner, lease_ms);
        let mut claimed = match tokio::time::timeout(STATEMENT_TIMEOUT, statement).await {
            Ok(Ok(claimed)) => claimed,
            Ok(Err(e)) => {
                tracing::debug!(kind = kind.as_str(), error = %e, "a combined claim failed");
                Vec::new()
            }
            Err(_) => {
                tracing::warn!(kind = kind.as_str(), "a combined claim took over {STATEMENT_TIMEOUT:?}; given up");
                Vec::new()
            }
        };
        // The earliest claims get the queue's front.
        claimed.sort_by_cached_key(|c| (queue_position(&c.operation), c.operation.id.clone()));
        let mut claimed = claimed.into_iter();
        for waiting in group {
            if let Err(Some(orphan)) = waiting.reply.send(claimed.next()) {
                release(db, orphan).await;
            }
        }
        // Never more rows than claims (the statement's `LIMIT`); should one come, it runs
        // nowhere, so it goes back.
        for orphan in claimed {
            release(db, orphan).await;
        }
    }
}

/// Put back an operation claimed for a caller that stopped waiting, attempt uncounted.
async fn release(db: &Db, orphan: Claimed) {
    match apply(db, &orphan.lease, &Transition::Release { phase: None }).await {
        Ok(_) | Err(FenceError::LostLease) => {}
        Err(FenceError::Store(e)) => {
            // Its lease expires and recovery takes it, as after a crash.
            tracing::warn!(operation = %orphan.operation.id, error = %e, "could not release an unwanted claim");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_that_ends_unexpectedly_leaves_the_lane_idle_and_answers_its_waiting_claims() {
        let combiner = ClaimCombiner::default();
        let kind = ContextOperationKind::Delete;
        let (reply, mut answer) = oneshot::channel();
        {
            let mut lanes = combiner.lanes();
            let lane = lanes.entry(kind).or_default();
            lane.draining = true;
            lane.waiting.push(Waiting { tenant: "t".into(), from: None, reply });
        }
        assert_eq!(combiner.waiting(kind), Some(1));
        drop(IdleAtExit(Some((combiner.clone(), kind))));
        assert_eq!(combiner.waiting(kind), None, "idle: the next claim starts a drain");
        assert!(matches!(answer.try_recv(), Err(oneshot::error::TryRecvError::Closed)));
    }

    #[test]
    fn a_drain_that_found_its_lane_empty_leaves_the_lane_to_the_next() {
        let combiner = ClaimCombiner::default();
        let kind = ContextOperationKind::Export;
        combiner.lanes().entry(kind).or_default().draining = true;
        drop(IdleAtExit(None));
        assert_eq!(combiner.waiting(kind), Some(0), "a disarmed guard changes nothing");
    }
}
