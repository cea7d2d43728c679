//! The `retention` job for one conversation: plan once (`context_jobs::retention::plan`),
//! store the plan in the checkpoint, and delete by that fixed predicate in fenced batches,
//! so a resumed run removes exactly what was planned; batches sized by time (`BatchPacer`).
//! The last (short) batch commits the operation's success with its deletes.

use std::time::Instant;

use super::{Job, Prepared, SubmitCtx, SubmitError};
use crate::kinds::job::{Finish, JobCtx, JobError, encode};
use crate::store::messages::deletes;
use context_jobs::contract::RetentionRequest;
use context_jobs::kinds::retention::{
    PHASE_DELETING, PHASE_PLANNED, Retention, RetentionArgs, RetentionCheckpoint, RetentionResult,
};
use context_jobs::operation::Progress;

impl Job for Retention {
    async fn prepare(_: &SubmitCtx<'_>, submission: RetentionRequest) -> Result<Prepared, SubmitError> {
        Ok(Prepared::plain::<Retention>(Retention::args(submission)?))
    }

    async fn run(ctx: &JobCtx, args: RetentionArgs) -> Result<Finish<RetentionResult>, JobError> {
        let tenant = ctx.tenant();
        let conversation = args.conversation_id.as_str();
        let mut processed = ctx.operation.processed;
        let mut total = ctx.operation.total;
        let mut at = match ctx.checkpoint::<RetentionCheckpoint>()? {
            Some(at) => at,
            None => {
                let planned = deletes::plan_retention(&ctx.db, tenant, conversation, &args.policy).await?;
                let (plan, conversation_created_at_ms) = (planned.plan, planned.created_at_ms);
                total = planned.doomed;
                let at = RetentionCheckpoint { plan, after_sequence: 0, conversation_created_at_ms };
                let progress = Progress { phase: PHASE_PLANNED, processed: 0, total, checkpoint: Some(encode(&at)?) };
                let nothing_yet = RetentionResult { deleted_messages: 0, plan };
                ctx.save_progress(&progress).await.map_err(|e| e.with_partial(&nothing_yet))?;
                at
            }
        };
        let so_far = |processed: i64, plan| RetentionResult { deleted_messages: processed.max(0) as u64, plan };
        if !at.plan.is_noop() {
            ctx.before_first_batch().await.map_err(|e| e.with_partial(&so_far(processed, at.plan)))?;
        }
        let mut pacer = ctx.batch_pacer();
        while !at.plan.is_noop() {
            let (began, batch) = (Instant::now(), pacer.size());
            let mut tx = ctx.begin().await?;
            let generation = at.conversation_created_at_ms;
            let deletes::RetentionBatch { deleted, upper, full } =
                deletes::retention_batch(&mut tx, tenant, conversation, &at.plan, generation, at.after_sequence, batch)
                    .await?;
            let next = RetentionCheckpoint { after_sequence: upper.unwrap_or(at.after_sequence), ..at };
            let progress = Progress {
                phase: PHASE_DELETING,
                processed: processed + deleted,
                total: total.max(processed + deleted),
                checkpoint: Some(encode(&next)?),
            };
            // A short batch is the last: the operation succeeds in its commit.
            let last = upper.is_none() || !full;
            let finished = last.then(|| so_far(processed + deleted, at.plan));
            let signals = ctx.checkpoint_or_succeed(&mut tx, &progress, finished.as_ref()).await?;
            ctx.commit(tx).await?;
            pacer.record(deleted, began.elapsed().as_millis() as u64);
            processed += deleted;
            total = total.max(processed);
            metrics::counter!(crate::metrics::ITEMS_PROCESSED, "kind" => "retention").increment(deleted as u64);
            if let Some(result) = finished {
                return Ok(Finish::Committed(result));
            }
            at.after_sequence = next.after_sequence;
            ctx.boundary(signals).map_err(|e| e.with_partial(&so_far(processed, at.plan)))?;
        }
        Ok(Finish::Done(so_far(processed, at.plan)))
    }
}
