//! The runner: for each delivered "look at operation X", claim it (a compare-and-set),
//! keep its lease alive, run its kind's job, and write what the core's state machine
//! decides after the outcome. Duplicate deliveries lose the claim and are dropped; a
//! panicking job is caught and retried like a transient failure; a lost lease means
//! another worker owns the operation and we write nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::pipelines::Pipelines;
use super::{Finish, JobCtx, JobError};
use crate::changes::Changes;
use crate::config::{Config, Scheduling};
use crate::metrics as m;
use crate::queue::{OperationHandler, OperationMessage};
use crate::store::operations::transitions::{ClaimLimits, Next, Signals, ViewCache};
use crate::store::operations::{Claimed, FenceError, Lease, dispatch, transitions};
use crate::store::{Db, now_ms};
use context_jobs::contract::{ContextOperationKind, ContextOperationState};
use context_jobs::ids::OperationId;
use context_jobs::operation::machine::{crash_loop_message, over_budget};
use context_jobs::operation::{AttemptEnd, ErrorCode, RetryPolicy, Transition, decide};

#[derive(Clone)]
pub struct Runner {
    pub db: Db,
    pub config: Arc<Config>,
    pub shutdown: CancellationToken,
    pub changes: Changes,
    /// This worker process's name: the lease owner it announces (`worker_heartbeats`).
    pub holder: Arc<str>,
    pub scheduling: Arc<Scheduling>,
    pub limiter: crate::ratelimit::RateLimiter,
    /// This process's recent scheduler views (claims of unlimited kinds read them).
    pub views: Arc<ViewCache>,
    /// The connections this process's pipelined runs may hold together.
    pub pipelines: Arc<Pipelines>,
}

impl OperationHandler for Runner {
    fn handle(&self, kind: ContextOperationKind, operation_id: String) -> BoxFuture<'static, ()> {
        self.handle_message(kind, OperationMessage { operation_id, recover: false })
    }

    fn handle_message(&self, kind: ContextOperationKind, message: OperationMessage) -> BoxFuture<'static, ()> {
        let runner = self.clone();
        async move {
            let Ok(id) = OperationId::parse(&message.operation_id) else {
                tracing::warn!(operation = %message.operation_id, "a queue message names no operation id; dropped");
                return;
            };
            if let Err(e) = runner.deliver(kind, &id, message.recover).await {
                tracing::warn!(operation = %id, error = format!("{e:#}"), "could not run operation; the dispatcher will retry");
            }
        }
        .boxed()
    }
}

impl Runner {
    fn policy(&self) -> RetryPolicy {
        RetryPolicy { max_attempts: self.config.worker.max_attempts, ..RetryPolicy::default() }
    }

    /// Write `t` for the lease holder and announce it; `None` when the lease was lost (see
    /// `transitions::apply` for what the signals say).
    async fn write(&self, lease: &Lease, t: &Transition<'_>) -> anyhow::Result<Option<Signals>> {
        match transitions::apply(&self.db, lease, t).await {
            Ok(signals) => {
                self.changes.committed(&lease.operation_id, &lease.tenant);
                Ok(Some(signals))
            }
            Err(FenceError::LostLease) => Ok(None),
            Err(FenceError::Store(e)) => Err(e.into()),
        }
    }

    fn limits(&self, kind: ContextOperationKind) -> ClaimLimits {
        claim_limits(&self.scheduling, kind)
    }

    /// One delivery: recover the named orphan, or start the next operation of the kind by
    /// fair share. With concurrency limits, each finished operation frees a slot that work
    /// held back may be waiting for: the worker goes on to the next while there is one.
    async fn deliver(&self, kind: ContextOperationKind, hint: &OperationId, recover: bool) -> anyhow::Result<()> {
        // A pipelined kind waits for its share of the pool before it claims anything, so
        // what waits stays queued: cancellable at once, expiring at its deadline, and free
        // for another process to claim.
        let permits = tokio::select! {
            permits = self.pipelines.acquire(crate::kinds::entry_of(kind).connections) => Some(permits),
            _ = self.shutdown.cancelled() => None,
        };
        if permits.is_none() || self.shutdown.is_cancelled() {
            // Shutting down: start nothing. The row is unmarked so that a dispatcher round
            // (another process's, or the next start's) pushes it again at once — an orphan
            // to recover too (it is `running`), or its recovery waited out the repush age.
            if recover {
                dispatch::unmark_running(&self.db, hint).await?;
            } else {
                dispatch::clear_pushed(&self.db, hint).await?;
            }
            return Ok(());
        }
        let lease_ms = self.config.lease().as_millis() as i64;
        let limits = self.limits(kind);
        let limited = limits.limited();
        let mut claimed = if recover {
            transitions::recover(&self.db, hint, &self.holder, lease_ms).await?
        } else {
            self.claim_next(kind, lease_ms, &limits, Some(hint)).await?
        };
        if claimed.is_none() {
            // Nothing to start: another worker took it, it finished, or work is held back.
            metrics::counter!(m::DUPLICATE_DELIVERIES, "kind" => kind.as_str()).increment(1);
            if recover {
                // Not an orphan after all (its owner answered again): drop the push mark the
                // recovery set, or the owner's real death would wait out the repush age.
                dispatch::unmark_running(&self.db, hint).await?;
            }
        }
        while let Some(next) = claimed.take() {
            self.run(next).await?;
            if limited && !self.shutdown.is_cancelled() {
                claimed = self.claim_next(kind, lease_ms, &limits, None).await?;
            }
        }
        Ok(())
    }

    /// The next operation of `kind` by fair share, announcing a hold it wrote.
    async fn claim_next(
        &self,
        kind: ContextOperationKind,
        lease_ms: i64,
        limits: &ClaimLimits,
        named: Option<&OperationId>,
    ) -> anyhow::Result<Option<Claimed>> {
        Ok(match transitions::claim_next(&self.db, kind, &self.holder, lease_ms, limits, &self.views, named).await? {
            Next::Claimed(claimed) => Some(*claimed),
            Next::Held(held) => {
                for (id, tenant) in &held {
                    self.changes.committed(id, tenant);
                }
                None
            }
            Next::Nothing => None,
        })
    }

    async fn run(&self, claimed: Claimed) -> anyhow::Result<()> {
        self.changes.committed(&claimed.operation.id, &claimed.operation.tenant);
        let op = claimed.operation;
        let lease = claimed.lease;
        let kind = op.kind;
        if claimed.recovered {
            metrics::counter!(m::LEASE_RECOVERIES, "kind" => kind.as_str()).increment(1);
            tracing::info!(operation = %op.id, attempt = op.attempt, "recovered an operation whose lease expired");
        }
        if op.attempt == 1 {
            let wait = (now_ms() - op.created_at_ms).max(0) as f64 / 1000.0;
            metrics::histogram!(m::QUEUE_WAIT, "kind" => kind.as_str()).record(wait);
        }
        let policy = self.policy();
        let attempt = op.attempt.max(0) as u32;
        // Every claim counts an attempt, so an operation that kills its worker each time
        // (a crash loop) still ends: cancelled if that was asked for meanwhile (the job does
        // not run again to report what it had done: `processed` says), else failed.
        if over_budget(attempt, &policy) {
            let message = crash_loop_message(op.error.as_deref()).to_string();
            let t = if op.cancel_requested {
                Transition::Cancelled { result: None }
            } else {
                Transition::Fail { code: ErrorCode::RetriesExhausted, message: &message }
            };
            if self.write(&lease, &t).await?.is_some()
                && let Some(outcome) = t.outcome()
            {
                finished(kind, &op.id, outcome, Duration::ZERO, op.processed);
            }
            return Ok(());
        }
        tracing::info!(kind = kind.as_str(), operation = %op.id, attempt, "operation started");
        let started = Instant::now();
        let ctx = JobCtx {
            db: self.db.clone(),
            config: self.config.clone(),
            operation: op.clone(),
            lease: lease.clone(),
            shutdown: self.shutdown.clone(),
            changes: self.changes.clone(),
            limiter: self.limiter.clone(),
            processed: Arc::new(AtomicI64::new(op.processed)),
        };
        let progress = ctx.processed.clone();
        let heartbeat = spawn_heartbeat(self.db.clone(), lease.clone(), self.config.lease() / 3);
        // Run the job in its own task so a panic is caught here, not in the queue worker.
        let joined = tokio::spawn(async move { (crate::kinds::entry_of(kind).run)(&ctx).await }).await;
        heartbeat.abort();
        let elapsed = started.elapsed();
        metrics::histogram!(m::RUN_DURATION, "kind" => kind.as_str()).record(elapsed.as_secs_f64());
        let outcome = joined.unwrap_or_else(|join| Err(JobError::transient(format!("the job panicked: {join}"))));
        // The top error only: sqlx repeats its message in the source chain.
        let message = match &outcome {
            Err(JobError::Transient(e)) => e.to_string(),
            Err(JobError::Permanent { message, .. }) => message.clone(),
            _ => String::new(),
        };
        let end = match &outcome {
            Ok(Finish::Done(result)) => AttemptEnd::Succeeded { result, committed: false, progress: None },
            Ok(Finish::DoneAt(result, last)) => {
                AttemptEnd::Succeeded { result, committed: false, progress: Some(last) }
            }
            Ok(Finish::Committed(result)) => AttemptEnd::Succeeded { result, committed: true, progress: None },
            Err(JobError::LostLease) => AttemptEnd::LostLease,
            Err(JobError::Cancelled) => AttemptEnd::Cancelled { result: None },
            Err(JobError::CancelledWith(result)) => AttemptEnd::Cancelled { result: Some(result) },
            Err(JobError::ShuttingDown) => AttemptEnd::ShuttingDown,
            Err(JobError::Paused) => AttemptEnd::Paused,
            Err(JobError::Deferred { until_ms, phase }) => AttemptEnd::Deferred { until_ms: *until_ms, phase },
            Err(JobError::Permanent { code, .. }) => AttemptEnd::Permanent { code: *code, message: &message },
            Err(JobError::Transient(_)) => AttemptEnd::Transient { message: &message },
        };
        let processed = match &outcome {
            Ok(Finish::DoneAt(_, last)) => last.processed,
            _ => progress.load(Ordering::Relaxed),
        };
        match (&end, decide(&end, attempt, &policy, fastrand::f64(), now_ms())) {
            (AttemptEnd::Succeeded { .. }, None) => {
                finished(kind, &op.id, ContextOperationState::Succeeded.as_str(), elapsed, processed)
            }
            (_, None) => tracing::warn!(operation = %op.id, "lost the lease; another worker owns the operation"),
            (_, Some(t)) => {
                let Some(signals) = self.write(&lease, &t).await? else {
                    tracing::warn!(operation = %op.id, "lost the lease before finishing");
                    return Ok(());
                };
                if t.to() == ContextOperationState::Queued && signals.cancel_requested {
                    tracing::info!(operation = %op.id, "cancelled: its cancel was requested before it went back to the queue");
                    finished(kind, &op.id, ContextOperationState::Cancelled.as_str(), elapsed, processed);
                    return Ok(());
                }
                match &t {
                    Transition::Retry { not_before_ms, .. } => {
                        metrics::counter!(m::RETRIES, "kind" => kind.as_str()).increment(1);
                        let delay_ms = not_before_ms - now_ms();
                        tracing::warn!(operation = %op.id, attempt, delay_ms, error = %message, "transient failure; retrying");
                    }
                    Transition::Release { phase: Some(_) } => {
                        tracing::info!(operation = %op.id, "released: its kind is paused");
                    }
                    Transition::Defer { not_before_ms, .. } => {
                        let wait_ms = not_before_ms - now_ms();
                        tracing::info!(operation = %op.id, wait_ms, "held back by a rate limit; back in the queue");
                    }
                    Transition::Release { phase: None } => {
                        tracing::info!(operation = %op.id, "released at shutdown; another worker resumes it from its checkpoint");
                    }
                    t => {
                        if let Some(outcome) = t.outcome() {
                            finished(kind, &op.id, outcome, elapsed, processed);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// The concurrency limits and weights a claim of `kind` works under, from the configuration.
pub fn claim_limits(s: &Scheduling, kind: ContextOperationKind) -> ClaimLimits {
    let max = |v: Option<u64>| v.map(|v| v.min(u64::from(u32::MAX)) as u32);
    ClaimLimits {
        max_running: max(s.max_running.get(kind)),
        max_running_per_tenant: max(s.max_running_per_tenant.get(kind)),
        weights: s.weights.clone(),
    }
}

/// Count a finished operation and log its one finish line.
fn finished(kind: ContextOperationKind, id: &OperationId, outcome: &'static str, took: Duration, processed: i64) {
    metrics::counter!(m::OPERATIONS_FINISHED, "kind" => kind.as_str(), "outcome" => outcome).increment(1);
    tracing::info!(kind = kind.as_str(), operation = %id, outcome, duration_ms = took.as_millis() as u64, processed, "operation finished");
}

/// Renew the lease every `every` while a job runs, so long single steps keep it.
fn spawn_heartbeat(db: Db, lease: Lease, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tick.tick().await;
            let t = Transition::Heartbeat { lease_until_ms: lease.renewed_until() };
            match transitions::apply(&db, &lease, &t).await {
                Ok(_) => {}
                Err(FenceError::LostLease) => return,
                Err(e) => tracing::warn!(operation = %lease.operation_id, error = %e, "heartbeat failed"),
            }
        }
    })
}
