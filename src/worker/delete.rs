//! The `delete` job: remove a conversation's messages in bounded, checkpointed batches.
//! Each batch deletes, adjusts the conversation's count and records progress in one
//! transaction fenced by the lease, so a crash resumes with nothing deleted twice or
//! counted twice. The final batch removes the conversation row and finishes the operation
//! in the same transaction.
//!
//! Batches walk the conversation by sequence from the checkpoint (`afterSequence`), one
//! index range each. Starting every batch from the conversation's first sequence instead
//! would re-scan the index entries of every row already deleted (dead until vacuum), making
//! a large delete quadratic.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{JobCtx, JobError};
use crate::db::BeginWrite as _;
use crate::store::leases::Progress;
use crate::{fenced_checkpoint, fenced_succeed, with_pool};
use context_jobs::operation::error_code;

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Checkpoint {
    /// Every message with a sequence at or below this is deleted.
    after_sequence: i64,
}

pub async fn run(ctx: &JobCtx, conversation_id: &str) -> Result<Value, JobError> {
    let tenant = ctx.operation.tenant.as_str();
    let mut processed = ctx.operation.processed;
    let mut at: Checkpoint = match &ctx.operation.checkpoint {
        Some(saved) => serde_json::from_str(saved)
            .map_err(|e| JobError::permanent(error_code::CORRUPT_OPERATION, format!("bad delete checkpoint: {e}")))?,
        None => Checkpoint::default(),
    };
    let mut total = ctx.operation.total;
    if ctx.operation.checkpoint.is_none() && processed == 0 {
        // Appends are refused while the delete runs, so the count is the total.
        let count: Option<i64> = with_pool!(&ctx.db, pool => {
            sqlx::query_scalar("SELECT message_count FROM conversations WHERE tenant = $1 AND conversation_id = $2")
                .bind(tenant)
                .bind(conversation_id)
                .fetch_optional(pool)
                .await?
        });
        total = count.unwrap_or(0).max(0);
    }
    let batch = ctx.batch_size();
    loop {
        let result = with_pool!(&ctx.db, pool => {
            let mut tx = pool.begin_write().await?;
            // The next range of `batch` sequence numbers from the first remaining one: one
            // index range, at most `batch` rows (fewer where retention left gaps).
            let first: Option<i64> = sqlx::query_scalar(
                "SELECT min(sequence) FROM messages WHERE tenant = $1 AND conversation_id = $2 AND sequence > $3",
            )
            .bind(tenant)
            .bind(conversation_id)
            .bind(at.after_sequence)
            .fetch_one(&mut *tx)
            .await?;
            let end = first.map(|f| f.saturating_add(batch - 1)).unwrap_or(i64::MAX - 1);
            let deleted = match first {
                None => 0,
                Some(first) => sqlx::query(
                    "DELETE FROM messages WHERE tenant = $1 AND conversation_id = $2 AND sequence >= $3 AND sequence <= $4",
                )
                .bind(tenant)
                .bind(conversation_id)
                .bind(first)
                .bind(end)
                .execute(&mut *tx)
                .await?
                .rows_affected() as i64,
            };
            // Nothing after the checkpoint at all (an empty conversation, or a resumed run
            // whose last batch had committed): nothing after `end` either.
            let more: Option<i64> = match first {
                None => None,
                Some(_) => sqlx::query_scalar(
                    "SELECT sequence FROM messages WHERE tenant = $1 AND conversation_id = $2 AND sequence > $3 \
                     ORDER BY sequence LIMIT 1",
                )
                .bind(tenant)
                .bind(conversation_id)
                .bind(end)
                .fetch_optional(&mut *tx)
                .await?,
            };
            let last = more.is_none();
            let next = Checkpoint { after_sequence: end };
            let progress = Progress {
                phase: "deleting",
                processed: processed + deleted,
                total: total.max(processed + deleted),
                checkpoint: Some(serde_json::to_string(&next).unwrap_or_default()),
            };
            if last {
                // Last batch: the conversation goes too (only if this operation holds it),
                // and the operation finishes in this same commit.
                sqlx::query("DELETE FROM conversations WHERE tenant = $1 AND conversation_id = $2 AND deleting_operation = $3")
                    .bind(tenant)
                    .bind(conversation_id)
                    .bind(ctx.lease.operation_id.as_str())
                    .execute(&mut *tx)
                    .await?;
                let result = json!({"deletedMessages": progress.processed});
                fenced_succeed!(tx, &ctx.lease, &progress, &result)?;
                tx.commit().await?;
                ctx.mark_finished();
                metrics::counter!(crate::metrics::ITEMS_PROCESSED, "kind" => "delete").increment(deleted as u64);
                return Ok(result);
            }
            sqlx::query("UPDATE conversations SET message_count = message_count - $3 WHERE tenant = $1 AND conversation_id = $2")
                .bind(tenant)
                .bind(conversation_id)
                .bind(deleted)
                .execute(&mut *tx)
                .await?;
            let cancel = fenced_checkpoint!(&mut *tx, &ctx.lease, &progress)?;
            tx.commit().await?;
            (deleted, cancel, next)
        });
        let (deleted, cancel, next) = result;
        processed += deleted;
        total = total.max(processed);
        at = next;
        metrics::counter!(crate::metrics::ITEMS_PROCESSED, "kind" => "delete").increment(deleted as u64);
        ctx.boundary(cancel)?;
    }
}
