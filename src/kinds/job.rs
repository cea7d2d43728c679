//! What a job is handed and how it ends: the claimed operation's context ([`JobCtx`]: its
//! row, lease, the fenced writes a batch makes, the stop signals), the ways an attempt can
//! fall short ([`JobError`]), and a success ([`Finish`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::changes::Changes;
use crate::config::Config;
use crate::store::operations::transitions::Signals;
use crate::store::operations::{FenceError, Lease, OperationRow, transitions};
use crate::store::{Db, Engine, StoreError, Tx};
use context_jobs::ids::TenantKey;
use context_jobs::operation::{BatchPacer, ErrorCode, Progress, Transition};

/// `CONTEXT_OPS_BATCH_TARGET_MS` when unset, on PostgreSQL.
const DEFAULT_BATCH_TARGET_MS: u64 = 50;

/// How a job attempt ended, short of success.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("the lease was lost to another worker")]
    LostLease,
    #[error("cancelled")]
    Cancelled,
    /// Cancelled, with what the job had done so far (its kind's result, as JSON text).
    #[error("cancelled")]
    CancelledWith(String),
    #[error("worker shutting down")]
    ShuttingDown,
    #[error("paused")]
    Paused,
    /// Not before `until_ms`: back to the queue till then (a rate limit).
    #[error("deferred")]
    Deferred { until_ms: i64, phase: &'static str },
    #[error("transient failure: {0:#}")]
    Transient(anyhow::Error),
    #[error("{message}")]
    Permanent { code: ErrorCode, message: String },
}

impl JobError {
    pub fn permanent(code: ErrorCode, message: impl Into<String>) -> Self {
        JobError::Permanent { code, message: message.into() }
    }

    pub fn deadline_exceeded() -> Self {
        JobError::permanent(ErrorCode::DeadlineExceeded, "the operation's deadline passed before it finished")
    }

    /// A cancel becomes a cancel that reports `partial` (what was done so far) as the
    /// operation's result; anything else is unchanged.
    pub fn with_partial(self, partial: &impl Serialize) -> Self {
        match (self, serde_json::to_string(partial)) {
            (JobError::Cancelled, Ok(result)) => JobError::CancelledWith(result),
            (other, _) => other,
        }
    }

    pub fn transient(message: impl std::fmt::Display) -> Self {
        JobError::Transient(anyhow::anyhow!("{message}"))
    }
}

impl From<FenceError> for JobError {
    fn from(e: FenceError) -> Self {
        match e {
            FenceError::LostLease => JobError::LostLease,
            FenceError::Store(e) => e.into(),
        }
    }
}

/// The `error` of an operation that failed on an unexpected database error. The driver's
/// text goes to the log only: it can quote stored data and names internals.
pub const INTERNAL_DB_ERROR: &str = "internal database error (details are in the worker log)";
impl From<StoreError> for JobError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Db(e) if crate::store::is_transient(&e) => {
                tracing::warn!(error = format!("{e:#}"), "database unavailable");
                JobError::transient(crate::store::engine::transient_reason(&e))
            }
            StoreError::Invalid(m) => JobError::permanent(ErrorCode::CorruptOperation, m),
            StoreError::NotFound(m) | StoreError::Conflict(m) => JobError::permanent(ErrorCode::Internal, m),
            e @ (StoreError::Db(_) | StoreError::Other(_)) => {
                tracing::error!(error = format!("{e:#}"), "database error");
                JobError::permanent(ErrorCode::Internal, INTERNAL_DB_ERROR)
            }
        }
    }
}

impl From<sqlx::Error> for JobError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Db(e).into()
    }
}

/// How a job finished successfully.
#[derive(Debug)]
pub enum Finish<T> {
    /// The runner records `succeeded` with this result.
    Done(T),
    /// The runner records `succeeded` with this result and this final progress.
    DoneAt(T, Progress),
    /// The job's last batch already recorded `succeeded` in its own transaction (one
    /// commit instead of two): the runner writes nothing.
    Committed(T),
}

impl<T> Finish<T> {
    pub fn try_map<U, E>(self, f: impl FnOnce(T) -> Result<U, E>) -> Result<Finish<U>, E> {
        Ok(match self {
            Finish::Done(t) => Finish::Done(f(t)?),
            Finish::DoneAt(t, progress) => Finish::DoneAt(f(t)?, progress),
            Finish::Committed(t) => Finish::Committed(f(t)?),
        })
    }
}

/// Everything a job needs: the claimed row, its lease, and the signals to stop on.
pub struct JobCtx {
    pub db: Db,
    pub config: Arc<Config>,
    pub operation: OperationRow,
    pub lease: Lease,
    /// Process shutdown: checkpoint and release at the next boundary.
    pub shutdown: CancellationToken,
    pub changes: Changes,
    /// Provider rate limits (inference).
    pub limiter: crate::ratelimit::RateLimiter,
    /// The `processed` of the last progress committed (the runner's finish line).
    pub processed: Arc<AtomicI64>,
}

impl JobCtx {
    pub fn tenant(&self) -> &TenantKey {
        &self.operation.tenant
    }

    /// The checkpoint the last attempt committed, if any.
    pub fn checkpoint<C: DeserializeOwned>(&self) -> Result<Option<C>, JobError> {
        let Some(saved) = &self.operation.checkpoint else { return Ok(None) };
        serde_json::from_str(saved).map(Some).map_err(|e| {
            let kind = self.operation.kind.as_str();
            JobError::permanent(ErrorCode::CorruptOperation, format!("bad {kind} checkpoint: {e}"))
        })
    }

    pub async fn begin(&self) -> Result<Tx, JobError> {
        Ok(self.db.begin_write().await?)
    }

    /// Inside a batch's transaction: record `progress` and extend the lease, fenced by the
    /// token. Returns whether a cancel was requested.
    pub async fn checkpoint_in(&self, tx: &mut Tx, progress: &Progress) -> Result<Signals, JobError> {
        let lease_until_ms = self.lease.renewed_until();
        let signals = transitions::apply(tx, &self.lease, &Transition::Checkpoint { progress, lease_until_ms }).await?;
        self.processed.store(progress.processed, Ordering::Relaxed);
        Ok(signals)
    }

    /// Inside a batch's transaction: its checkpoint, or for the last batch (`finished`
    /// given) the operation's success with that result, committed with the batch's effect.
    /// A last batch that only checkpointed would leave finished work looking unfinished to
    /// a run that recovers the operation before its success is written
    /// ([`Self::before_first_batch`] would then cancel or fail it).
    pub async fn checkpoint_or_succeed(
        &self,
        tx: &mut Tx,
        progress: &Progress,
        finished: Option<&impl Serialize>,
    ) -> Result<Signals, JobError> {
        match finished {
            Some(result) => {
                self.succeed_in(tx, progress, result).await?;
                Ok(Signals::default())
            }
            None => self.checkpoint_in(tx, progress).await,
        }
    }

    /// Inside the last batch's transaction: finish `succeeded` with `result` together with
    /// the batch's effect (and release what the operation holds). Return
    /// [`Finish::Committed`] after the commit.
    pub async fn succeed_in(&self, tx: &mut Tx, progress: &Progress, result: &impl Serialize) -> Result<(), JobError> {
        self.succeed_with(tx, &self.lease, progress, result).await
    }

    /// [`Self::succeed_in`] after the batch itself removed the row that held the
    /// operation's deletion barrier (a delete's last batch): the release would match
    /// nothing, so the terminal write skips that statement.
    pub async fn succeed_in_released(
        &self,
        tx: &mut Tx,
        progress: &Progress,
        result: &impl Serialize,
    ) -> Result<(), JobError> {
        let lease = Lease { holds_barrier: false, ..self.lease.clone() };
        self.succeed_with(tx, &lease, progress, result).await
    }

    async fn succeed_with(
        &self,
        tx: &mut Tx,
        lease: &Lease,
        progress: &Progress,
        result: &impl Serialize,
    ) -> Result<(), JobError> {
        let result = encode(result)?;
        let t = Transition::Succeed { result: &result, progress: Some(progress) };
        transitions::apply(tx, lease, &t).await?;
        self.processed.store(progress.processed, Ordering::Relaxed);
        Ok(())
    }

    /// Commit a batch's transaction and announce the change.
    pub async fn commit(&self, tx: Tx) -> Result<(), JobError> {
        tx.commit().await?;
        self.changes.committed(&self.operation.id, &self.operation.tenant);
        Ok(())
    }

    /// Commit `progress` alone (a job's plan, before its first batch) — one statement,
    /// fenced — then stop at this boundary if asked to.
    pub async fn save_progress(&self, progress: &Progress) -> Result<(), JobError> {
        let lease_until_ms = self.lease.renewed_until();
        let t = Transition::Checkpoint { progress, lease_until_ms };
        let signals = transitions::apply(&self.db, &self.lease, &t).await?;
        self.processed.store(progress.processed, Ordering::Relaxed);
        self.changes.committed(&self.operation.id, &self.operation.tenant);
        self.boundary(signals)
    }

    /// Before a run's first batch: a cancel requested while the operation had no live
    /// worker (its holder died and this run took it over), a pause made meanwhile, or a
    /// deadline that passed stops it here, before more work, rather than after one more
    /// batch. Each batched kind calls it before the first batch of a run that may be a
    /// recovery, where no earlier check (a plan saved with `save_progress`) came first.
    /// Finished work never reaches it as work left: a last batch commits the success with
    /// its effect (delete, retention, rebuild) or a checkpoint that says it is done (import,
    /// export).
    pub async fn before_first_batch(&self) -> Result<(), JobError> {
        let signals = if self.operation.recovered() {
            // A recovery takes a running row whatever the pauses say (the orphan must end
            // or go back to the queue): ask now, with a heartbeat.
            let t = Transition::Heartbeat { lease_until_ms: self.lease.renewed_until() };
            transitions::apply(&self.db, &self.lease, &t).await?
        } else {
            // Any other claim checked the pauses itself and returned the cancel flag.
            Signals { cancel_requested: self.operation.cancel_requested, paused: false }
        };
        self.boundary(signals)
    }

    /// Called after each committed batch: stop if cancellation was requested, the kind was
    /// paused, the deadline passed or the process is shutting down (the committed
    /// checkpoint is where the next run resumes).
    pub fn boundary(&self, signals: Signals) -> Result<(), JobError> {
        if signals.cancel_requested {
            return Err(JobError::Cancelled);
        }
        if self.past_deadline() {
            return Err(JobError::deadline_exceeded());
        }
        if signals.paused {
            return Err(JobError::Paused);
        }
        if self.shutdown.is_cancelled() {
            return Err(JobError::ShuttingDown);
        }
        Ok(())
    }

    /// The operation's deadline has passed.
    pub fn past_deadline(&self) -> bool {
        self.operation.deadline_ms.is_some_and(|d| crate::store::now_ms() >= d)
    }

    /// How long until the deadline (`None`: no deadline).
    pub fn until_deadline(&self) -> Option<std::time::Duration> {
        let d = self.operation.deadline_ms?;
        Some(std::time::Duration::from_millis((d - crate::store::now_ms()).max(0) as u64))
    }

    pub fn batch_size(&self) -> i64 {
        i64::from(self.config.worker.batch_size)
    }

    /// Batch sizes paced towards `CONTEXT_OPS_BATCH_TARGET_MS` (delete and retention).
    /// Unset, batches grow on PostgreSQL only: there a batch's fixed cost is round trips
    /// and a commit (growing took a 1,000,000-message delete from 200 transactions to 17,
    /// ratio to one `DELETE` 0.81–0.88 → 1.07–1.14), while on SQLite it costs no round trip
    /// and holds the database's one write lock, so its time is every other writer's wait:
    /// growing there took a 200,000-message delete from 314–349 to 288–302 ms and each
    /// batch from ~8 ms to ~30 ms (docs/operations-engine.md).
    pub fn batch_pacer(&self) -> BatchPacer {
        let target = self.config.worker.batch_target_ms.unwrap_or(match self.db.engine() {
            Engine::Postgres => DEFAULT_BATCH_TARGET_MS,
            Engine::Sqlite => 0,
        });
        BatchPacer::new(self.batch_size(), target)
    }
}

/// A checkpoint or result as stored JSON text.
pub fn encode(value: &impl Serialize) -> Result<String, JobError> {
    serde_json::to_string(value).map_err(|e| JobError::permanent(ErrorCode::Internal, format!("cannot encode: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Database errors reach an operation's `error` in fixed words only.
    #[test]
    fn store_errors_never_carry_driver_text() {
        let driver = || sqlx::Error::Protocol("relation \"messages\" does not exist at secret row".into());
        match JobError::from(StoreError::Db(driver())) {
            JobError::Permanent { code, message } => {
                assert_eq!((code, message.as_str()), (ErrorCode::Internal, INTERNAL_DB_ERROR));
            }
            other => panic!("{other:?}"),
        }
        match JobError::from(StoreError::Other(anyhow::anyhow!("corrupt JSON column: secret"))) {
            JobError::Permanent { message, .. } => assert_eq!(message, INTERNAL_DB_ERROR),
            other => panic!("{other:?}"),
        }
        match JobError::from(StoreError::Db(sqlx::Error::PoolTimedOut)) {
            JobError::Transient(e) => assert_eq!(e.to_string(), "timed out waiting for a database connection"),
            other => panic!("{other:?}"),
        }
    }
}
