//! The `delete` job: remove a conversation's messages in bounded, checkpointed batches.
//! Each batch deletes, adjusts the conversation's count and records progress in one
//! transaction fenced by the lease, so a crash resumes with nothing deleted twice or
//! counted twice. The final batch removes the conversation row and finishes the operation
//! in the same transaction. Batches walk the conversation by sequence from its first
//! remaining message, one index range each, sized by time (`BatchPacer`).

use std::time::Instant;

use super::{Job, Prepared, SubmitCtx, SubmitError};
use crate::kinds::job::{Finish, JobCtx, JobError, encode};
use crate::store::messages::deletes;
use crate::store::operations::SubmitEffect;
use context_jobs::contract::DeleteConversationRequest;
use context_jobs::ids::ConversationId;
use context_jobs::kinds::delete::{Delete, DeleteArgs, DeleteCheckpoint, DeleteResult, PHASE_DELETING};
use context_jobs::operation::Progress;

impl Job for Delete {
    async fn prepare(_: &SubmitCtx<'_>, submission: DeleteConversationRequest) -> Result<Prepared, SubmitError> {
        let args = Delete::args(submission)?;
        Ok(Prepared { effect: Delete::effect(&args), ..Prepared::plain::<Delete>(args) })
    }

    /// Appends to the conversation are refused until the delete ends.
    fn effect(args: &DeleteArgs) -> SubmitEffect {
        SubmitEffect::MarkDeleting { conversation_id: ConversationId::from_stored(args.conversation_id.as_str()) }
    }

    async fn run(ctx: &JobCtx, args: DeleteArgs) -> Result<Finish<DeleteResult>, JobError> {
        let tenant = ctx.tenant();
        let conversation = args.conversation_id.as_str();
        let mut processed = ctx.operation.processed;
        let mut total = ctx.operation.total;
        let so_far = |processed: i64| DeleteResult { deleted_messages: processed.max(0) as u64 };
        ctx.before_first_batch().await.map_err(|e| e.with_partial(&so_far(processed)))?;
        // Batches grow while they are quick (`BatchPacer`); each range is a full batch for
        // the pacer, gaps left by retention included: its time is what counts.
        let mut pacer = ctx.batch_pacer();
        // Where the next batch starts: looked up once, then learnt from each batch's delete.
        let mut first = None;
        let mut started = false;
        loop {
            let began = Instant::now();
            let mut tx = ctx.begin().await?;
            if !started {
                started = true;
                // From the start, not from the checkpoint's `afterSequence`, on a resumed run
                // too: what an earlier run deleted is gone (appends are refused meanwhile), but
                // a retried delete may find the conversation deleted by another and written
                // again, at lower sequences than its checkpoint — skipped, they were left
                // without their conversation row and every later append failed on them.
                // Appends are refused while the delete runs, so what is there is what is
                // left: the total is what was deleted before and that.
                let count;
                (count, first) = deletes::count_and_first_after(&mut tx, tenant, conversation, 0).await?;
                total = processed + count.unwrap_or(0).max(0);
            }
            // Nothing left at all (an empty conversation, or a resumed run whose last batch
            // had committed): nothing after the batch either.
            let (end, deleted, more) = match first {
                None => (i64::MAX - 1, 0, false),
                Some(start) => {
                    let end = Delete::batch_end(start, pacer.size());
                    let (deleted, next) = deletes::delete_range(&mut tx, tenant, conversation, start, end).await?;
                    first = next;
                    (end, deleted, next.is_some())
                }
            };
            let next = DeleteCheckpoint { after_sequence: end };
            let progress = Progress {
                phase: PHASE_DELETING,
                processed: processed + deleted,
                total: total.max(processed + deleted),
                checkpoint: Some(encode(&next)?),
            };
            metrics::counter!(crate::metrics::ITEMS_PROCESSED, "kind" => "delete").increment(deleted as u64);
            if !more {
                // Last batch: the conversation goes too (only if this operation holds it,
                // which releases the barrier with the row), and the operation finishes in
                // this same commit.
                deletes::remove_conversation(&mut tx, tenant, conversation, &ctx.operation.id).await?;
                let result = DeleteResult { deleted_messages: progress.processed.max(0) as u64 };
                ctx.succeed_in_released(&mut tx, &progress, &result).await?;
                ctx.commit(tx).await?;
                return Ok(Finish::Committed(result));
            }
            // Not the last batch: its effect and checkpoint are one transaction, so a
            // database crash that loses it loses both and the job redoes it; only the
            // final commit (above) must be durable. Saves a WAL flush per batch.
            tx.relax_commit().await?;
            deletes::adjust_count(&mut tx, tenant, conversation, deleted).await?;
            let signals = ctx.checkpoint_in(&mut tx, &progress).await?;
            ctx.commit(tx).await?;
            pacer.record(pacer.size(), began.elapsed().as_millis() as u64);
            processed += deleted;
            total = total.max(processed);
            ctx.boundary(signals).map_err(|e| e.with_partial(&so_far(processed)))?;
        }
    }
}
