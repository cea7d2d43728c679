//! The `delete` job: remove a conversation's messages in bounded, checkpointed batches.
//! Each batch deletes, adjusts the conversation's count and records progress in one
//! transaction fenced by the lease, so a crash resumes with nothing deleted twice or
//! counted twice. The final batch removes the conversation row itself.

use serde_json::{Value, json};

use super::{JobCtx, JobError};
use crate::db::BeginWrite as _;
use crate::store::leases::Progress;
use crate::{fenced_checkpoint, with_pool};

pub async fn run(ctx: &JobCtx, conversation_id: &str) -> Result<Value, JobError> {
    let tenant = ctx.operation.tenant.as_str();
    let mut processed = ctx.operation.processed;
    let mut total = ctx.operation.total;
    if ctx.operation.phase == "starting" && processed == 0 {
        // The total is fixed at the start: appends are refused while the delete runs.
        total = with_pool!(&ctx.db, pool => {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM messages WHERE tenant = $1 AND conversation_id = $2")
                .bind(tenant)
                .bind(conversation_id)
                .fetch_one(pool)
                .await?
        });
    }
    let batch = ctx.batch_size();
    loop {
        let (deleted, cancel) = with_pool!(&ctx.db, pool => {
            let mut tx = pool.begin_write().await?;
            let deleted = sqlx::query(
                "DELETE FROM messages WHERE tenant = $1 AND conversation_id = $2 AND id IN \
                 (SELECT id FROM messages WHERE tenant = $1 AND conversation_id = $2 ORDER BY sequence LIMIT $3)",
            )
            .bind(tenant)
            .bind(conversation_id)
            .bind(batch)
            .execute(&mut *tx)
            .await?
            .rows_affected() as i64;
            if deleted < batch {
                // Last batch: the conversation goes too (only if this operation holds it).
                sqlx::query("DELETE FROM conversations WHERE tenant = $1 AND conversation_id = $2 AND deleting_operation = $3")
                    .bind(tenant)
                    .bind(conversation_id)
                    .bind(ctx.lease.operation_id.as_str())
                    .execute(&mut *tx)
                    .await?;
            } else {
                sqlx::query("UPDATE conversations SET message_count = message_count - $3 WHERE tenant = $1 AND conversation_id = $2")
                    .bind(tenant)
                    .bind(conversation_id)
                    .bind(deleted)
                    .execute(&mut *tx)
                    .await?;
            }
            let progress = Progress {
                phase: "deleting",
                processed: processed + deleted,
                total: total.max(processed + deleted),
                checkpoint: None,
            };
            let cancel = fenced_checkpoint!(&mut *tx, &ctx.lease, &progress)?;
            tx.commit().await?;
            (deleted, cancel)
        });
        processed += deleted;
        total = total.max(processed);
        metrics::counter!(crate::metrics::ITEMS_PROCESSED, "kind" => "delete").increment(deleted as u64);
        if deleted < batch {
            return Ok(json!({"deletedMessages": processed}));
        }
        ctx.boundary(cancel)?;
    }
}
