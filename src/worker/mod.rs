//! The worker side of the operation protocol: the runner that claims an operation, keeps
//! its lease alive and maps a job's outcome to the final transition; one file per job
//! kind; and the dispatcher and maintenance loops every worker process runs.

pub mod delete;
pub mod dispatcher;
pub mod export;
pub mod import;
pub mod inference;
pub mod projector;
pub mod rebuild_vector;
pub mod retention;
pub mod runner;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::db::BeginWrite as _;
use crate::db::Db;
use crate::store::StoreError;
use crate::store::leases::{FenceError, Lease, Progress};
use crate::store::operations::OperationRow;
use context_jobs::operation::error_code;

/// How a job attempt ended, short of success.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("the lease was lost to another worker")]
    LostLease,
    #[error("cancelled")]
    Cancelled,
    #[error("worker shutting down")]
    ShuttingDown,
    #[error("transient failure: {0:#}")]
    Transient(anyhow::Error),
    #[error("{message}")]
    Permanent { code: &'static str, message: String },
}

impl JobError {
    pub fn permanent(code: &'static str, message: impl Into<String>) -> Self {
        JobError::Permanent { code, message: message.into() }
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

impl From<StoreError> for JobError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Db(e) if crate::store::is_transient(&e) => JobError::Transient(e.into()),
            StoreError::Db(e) => JobError::permanent(error_code::INTERNAL, format!("database error: {e}")),
            StoreError::Invalid(m) => JobError::permanent(error_code::CORRUPT_OPERATION, m),
            other => JobError::permanent(error_code::INTERNAL, other.to_string()),
        }
    }
}

impl From<sqlx::Error> for JobError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Db(e).into()
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
    /// Set when the job committed its own success (`fenced_succeed!`) with its last batch.
    pub finished: std::sync::atomic::AtomicBool,
}

impl JobCtx {
    /// Commit `progress` alone (a job's plan, before its first batch) in its own fenced
    /// transaction, then stop at this boundary if asked to.
    pub async fn save_progress(&self, progress: &Progress) -> Result<(), JobError> {
        let cancel = crate::with_pool!(&self.db, pool => {
            let mut tx = pool.begin_write().await?;
            let cancel = crate::fenced_checkpoint!(&mut *tx, &self.lease, progress)?;
            tx.commit().await?;
            cancel
        });
        self.boundary(cancel)
    }

    /// Called after each committed batch: stop if cancellation was requested or the
    /// process is shutting down (the committed checkpoint is where the next run resumes).
    pub fn boundary(&self, cancel_requested: bool) -> Result<(), JobError> {
        if cancel_requested {
            return Err(JobError::Cancelled);
        }
        if self.shutdown.is_cancelled() {
            return Err(JobError::ShuttingDown);
        }
        Ok(())
    }

    /// Record that the job's last transaction already finished the operation.
    pub fn mark_finished(&self) {
        self.finished.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn batch_size(&self) -> i64 {
        i64::from(self.config.batch_size)
    }
}
