//! The runner: for each delivered "look at operation X", claim it (a compare-and-set),
//! keep its lease alive, run its job, and record how it ended. Duplicate deliveries lose
//! the claim and are dropped; a panicking job is caught and retried like a transient
//! failure; a lost lease means another worker owns the operation and we write nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{JobCtx, JobError};
use crate::config::Config;
use crate::db::Db;
use crate::metrics as m;
use crate::queue::OperationHandler;
use crate::store::leases::{self, Finish};
use crate::store::now_ms;
use context_jobs::contract::ContextOperationKind;
use context_jobs::operation::{OperationRequest, error_code, retry_backoff_ms, should_retry};

#[derive(Clone)]
pub struct Runner {
    pub db: Db,
    pub config: Arc<Config>,
    pub shutdown: CancellationToken,
}

impl OperationHandler for Runner {
    fn handle(&self, kind: ContextOperationKind, operation_id: String) -> BoxFuture<'static, ()> {
        let runner = self.clone();
        async move {
            if let Err(e) = runner.run(kind, &operation_id).await {
                tracing::warn!(operation = %operation_id, error = format!("{e:#}"), "could not run operation; the dispatcher will retry");
            }
        }
        .boxed()
    }
}

impl Runner {
    async fn run(&self, kind: ContextOperationKind, id: &str) -> anyhow::Result<()> {
        let lease_ms = self.config.lease().as_millis() as i64;
        let Some(claimed) = leases::claim(&self.db, id, lease_ms).await? else {
            metrics::counter!(m::DUPLICATE_DELIVERIES, "kind" => kind.as_str()).increment(1);
            return Ok(());
        };
        let op = claimed.operation;
        let lease = claimed.lease;
        if claimed.recovered {
            metrics::counter!(m::LEASE_RECOVERIES, "kind" => op.kind.as_str()).increment(1);
            tracing::info!(operation = %op.id, attempt = op.attempt, "recovered an operation whose lease expired");
        }
        if op.attempt == 1 {
            let wait = (now_ms() - op.created_at_ms).max(0) as f64 / 1000.0;
            metrics::histogram!(m::QUEUE_WAIT, "kind" => op.kind.as_str()).record(wait);
        }
        // Every claim counts an attempt, so an operation that kills its worker each time
        // (a crash loop) still ends.
        if op.attempt > i64::from(self.config.max_attempts) {
            let message = op.error.clone().unwrap_or_else(|| "the worker died on every attempt".into());
            leases::finish(&self.db, &lease, Finish::Failed { code: error_code::RETRIES_EXHAUSTED, message: &message })
                .await?;
            record_finished(op.kind, "failed");
            return Ok(());
        }
        let started = Instant::now();
        let ctx = JobCtx {
            db: self.db.clone(),
            config: self.config.clone(),
            operation: op.clone(),
            lease: lease.clone(),
            shutdown: self.shutdown.clone(),
            finished: Default::default(),
        };
        let heartbeat = spawn_heartbeat(self.db.clone(), lease.clone(), self.config.lease() / 3);
        // Run the job in its own task so a panic is caught here, not in the queue worker.
        let outcome = tokio::spawn(async move {
            let outcome = run_job(&ctx).await;
            (outcome, ctx.finished.load(std::sync::atomic::Ordering::SeqCst))
        })
        .await;
        heartbeat.abort();
        let (outcome, already_finished) = match outcome {
            Ok(pair) => pair,
            Err(join) => (Err(JobError::Transient(anyhow::anyhow!("the job panicked: {join}"))), false),
        };
        metrics::histogram!(m::RUN_DURATION, "kind" => op.kind.as_str()).record(started.elapsed().as_secs_f64());
        let attempt = op.attempt.max(0) as u32;
        let result = match &outcome {
            Ok(_) if already_finished => Ok("succeeded"),
            Ok(result) => leases::finish(&self.db, &lease, Finish::Succeeded { result }).await.map(|_| "succeeded"),
            Err(JobError::LostLease) => {
                tracing::warn!(operation = %op.id, "lost the lease; another worker owns the operation");
                return Ok(());
            }
            Err(JobError::Cancelled) => leases::finish(&self.db, &lease, Finish::Cancelled).await.map(|_| "cancelled"),
            Err(JobError::ShuttingDown) => {
                leases::finish(&self.db, &lease, Finish::Release).await?;
                tracing::info!(operation = %op.id, "released at shutdown; another worker resumes it from its checkpoint");
                return Ok(());
            }
            Err(JobError::Permanent { code, message }) => {
                leases::finish(&self.db, &lease, Finish::Failed { code, message }).await.map(|_| "failed")
            }
            Err(JobError::Transient(e)) => {
                // The top error only: sqlx repeats its message in the source chain.
                let message = e.to_string();
                if should_retry(attempt, self.config.max_attempts) {
                    let delay = retry_backoff_ms(attempt, 1000, 60_000, fastrand::f64()) as i64;
                    metrics::counter!(m::RETRIES, "kind" => op.kind.as_str()).increment(1);
                    tracing::warn!(operation = %op.id, attempt, delay_ms = delay, error = %message, "transient failure; retrying");
                    let code = error_code::TRANSIENT;
                    leases::finish(
                        &self.db,
                        &lease,
                        Finish::Retry { not_before_ms: now_ms() + delay, code, message: &message },
                    )
                    .await
                    .map(|_| "retrying")
                } else {
                    let code = error_code::RETRIES_EXHAUSTED;
                    leases::finish(&self.db, &lease, Finish::Failed { code, message: &message }).await.map(|_| "failed")
                }
            }
        };
        match result {
            Ok("retrying") => {}
            Ok(outcome) => record_finished(op.kind, outcome),
            Err(leases::FenceError::LostLease) => tracing::warn!(operation = %op.id, "lost the lease before finishing"),
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }
}

fn record_finished(kind: ContextOperationKind, outcome: &'static str) {
    metrics::counter!(m::OPERATIONS_FINISHED, "kind" => kind.as_str(), "outcome" => outcome).increment(1);
}

/// Renew the lease every `every` while a job runs, so long single steps keep it.
fn spawn_heartbeat(db: Db, lease: leases::Lease, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tick.tick().await;
            match leases::heartbeat(&db, &lease).await {
                Ok(_) => {}
                Err(leases::FenceError::LostLease) => return,
                Err(e) => tracing::warn!(operation = %lease.operation_id, error = %e, "heartbeat failed"),
            }
        }
    })
}

async fn run_job(ctx: &JobCtx) -> Result<Value, JobError> {
    let request = ctx.operation.request()?;
    match request {
        OperationRequest::Delete { conversation_id, .. } => super::delete::run(ctx, &conversation_id).await,
        OperationRequest::Retention { conversation_id, policy } => {
            super::retention::run(ctx, &conversation_id, &policy).await
        }
        OperationRequest::RebuildVector(job) => super::rebuild_vector::run(ctx, &job).await,
        OperationRequest::Export(job) => super::export::run(ctx, &job).await,
        OperationRequest::Import(job) => super::import::run(ctx, &job).await,
        OperationRequest::Inference(job) => super::inference::run(ctx, &job).await,
    }
}
