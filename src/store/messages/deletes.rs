//! Batched deletes of a conversation's messages, each batch one index range by sequence
//! inside the caller's transaction (with the conversation's count adjusted), for the
//! `delete` job and for retention (the job and the sweep). Batches walk from a
//! checkpointed sequence: restarting from the first sequence would re-scan the dead index
//! entries of every batch already deleted (until vacuum), making a large delete quadratic.

use crate::store::{Db, StoreResult, Tx, now_ms, query};
use context_jobs::contract::RetentionPolicy;
use context_jobs::ids::{OperationId, TenantKey};
use context_jobs::retention::{RetentionPlan, plan};

/// The first sequence after `after`, if any message is left there.
pub async fn first_after(tx: &mut Tx, tenant: &TenantKey, conversation: &str, after: i64) -> StoreResult<Option<i64>> {
    Ok(query("SELECT min(sequence) FROM messages WHERE tenant = $1 AND conversation_id = $2 AND sequence > $3")
        .bind(tenant.as_str())
        .bind(conversation)
        .bind(after)
        .fetch_scalar(&mut *tx)
        .await?)
}

/// A delete run's start, in one statement: the conversation's message count (`None`
/// when it does not exist) and its first sequence after `after`.
pub async fn count_and_first_after(
    tx: &mut Tx,
    tenant: &TenantKey,
    conversation: &str,
    after: i64,
) -> StoreResult<(Option<i64>, Option<i64>)> {
    Ok(query(
        "SELECT (SELECT message_count FROM conversations WHERE tenant = $1 AND conversation_id = $2), \
         (SELECT min(sequence) FROM messages WHERE tenant = $1 AND conversation_id = $2 AND sequence > $3)",
    )
    .bind(tenant.as_str())
    .bind(conversation)
    .bind(after)
    .fetch_one(&mut *tx)
    .await?)
}

/// Delete the messages with sequences in `first..=end`; how many, and the first sequence
/// left after `end` (where the next batch starts), if any. The conversation's count is not
/// adjusted (see [`adjust_count`]).
pub async fn delete_range(
    tx: &mut Tx,
    tenant: &TenantKey,
    conversation: &str,
    first: i64,
    end: i64,
) -> StoreResult<(i64, Option<i64>)> {
    let deleted =
        query("DELETE FROM messages WHERE tenant = $1 AND conversation_id = $2 AND sequence >= $3 AND sequence <= $4")
            .bind(tenant.as_str())
            .bind(conversation)
            .bind(first)
            .bind(end)
            .execute(&mut *tx)
            .await? as i64;
    let next = first_after(tx, tenant, conversation, end).await?;
    Ok((deleted, next))
}

/// `message_count -= deleted`.
pub async fn adjust_count(tx: &mut Tx, tenant: &TenantKey, conversation: &str, deleted: i64) -> StoreResult<()> {
    query("UPDATE conversations SET message_count = message_count - $3 WHERE tenant = $1 AND conversation_id = $2")
        .bind(tenant.as_str())
        .bind(conversation)
        .bind(deleted)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Remove the conversation row, if operation `holder` holds its deletion barrier.
pub async fn remove_conversation(
    tx: &mut Tx,
    tenant: &TenantKey,
    conversation: &str,
    holder: &OperationId,
) -> StoreResult<()> {
    query("DELETE FROM conversations WHERE tenant = $1 AND conversation_id = $2 AND deleting_operation = $3")
        .bind(tenant.as_str())
        .bind(conversation)
        .bind(holder.as_str())
        .execute(&mut *tx)
        .await?;
    Ok(())
}

fn bounds(plan: &RetentionPlan) -> (i64, i64) {
    (plan.older_than_ms.unwrap_or(i64::MIN), plan.up_to_sequence.unwrap_or(-1))
}

/// A retention plan for one conversation, as made now.
pub struct PlannedRetention {
    /// The fixed predicate.
    pub plan: RetentionPlan,
    /// How many messages it removes now.
    pub doomed: i64,
    /// The conversation's creation time (`None`: no row), which its batches check.
    pub created_at_ms: Option<i64>,
}

/// Plan retention for one conversation.
pub async fn plan_retention(
    db: &Db,
    tenant: &TenantKey,
    conversation: &str,
    policy: &RetentionPolicy,
) -> StoreResult<PlannedRetention> {
    let created_at_ms: Option<i64> =
        query("SELECT created_at_ms FROM conversations WHERE tenant = $1 AND conversation_id = $2")
            .bind(tenant.as_str())
            .bind(conversation)
            .fetch_optional_scalar(db)
            .await?;
    let count: i64 = query("SELECT COUNT(*) FROM messages WHERE tenant = $1 AND conversation_id = $2")
        .bind(tenant.as_str())
        .bind(conversation)
        .fetch_scalar(db)
        .await?;
    let nth = match policy.max_messages {
        Some(max) if count > i64::from(max) => {
            query(
                "SELECT sequence FROM messages WHERE tenant = $1 AND conversation_id = $2 \
                 ORDER BY sequence DESC LIMIT 1 OFFSET $3",
            )
            .bind(tenant.as_str())
            .bind(conversation)
            .bind(i64::from(max))
            .fetch_optional_scalar::<i64>(db)
            .await?
        }
        _ => None,
    };
    let plan = plan(policy, now_ms(), count.max(0) as u64, |_| nth);
    let (older, upto) = bounds(&plan);
    let doomed: i64 = query(
        "SELECT COUNT(*) FROM messages WHERE tenant = $1 AND conversation_id = $2 \
         AND (created_at_ms < $3 OR sequence <= $4)",
    )
    .bind(tenant.as_str())
    .bind(conversation)
    .bind(older)
    .bind(upto)
    .fetch_scalar(db)
    .await?;
    Ok(PlannedRetention { plan, doomed, created_at_ms })
}

/// One retention batch: how many messages it deleted, the last sequence it covered
/// (`None`: nothing was left — also when the conversation is no longer the one planned
/// for), and whether it found a whole batch to delete (else it was the last).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionBatch {
    pub deleted: i64,
    pub upper: Option<i64>,
    /// The batch's range held `batch` doomed messages when it was chosen. The last batch
    /// is told by this, not by how many the delete removed: another deleter committing in
    /// the range between the two statements (PostgreSQL) made a full batch look short, and
    /// the operation succeeded with the rest of its plan unapplied.
    pub full: bool,
}

/// Delete the next batch by `plan` after sequence `after` (and adjust the count), of a
/// conversation created at `created_at_ms` (the one planned for).
pub async fn retention_batch(
    tx: &mut Tx,
    tenant: &TenantKey,
    conversation: &str,
    plan: &RetentionPlan,
    created_at_ms: Option<i64>,
    after: i64,
    batch: i64,
) -> StoreResult<RetentionBatch> {
    let (older, upto) = bounds(plan);
    let (upper, picked): (Option<i64>, i64) = query(
        "SELECT max(sequence), COUNT(*) FROM (SELECT sequence FROM messages WHERE tenant = $1 AND conversation_id = $2 \
         AND sequence > $3 AND (created_at_ms < $4 OR sequence <= $5) \
         AND ($7 IS NULL OR EXISTS (SELECT 1 FROM conversations c WHERE c.tenant = $1 AND c.conversation_id = $2 \
           AND c.created_at_ms = $7)) ORDER BY sequence LIMIT $6) b",
    )
    .bind(tenant.as_str())
    .bind(conversation)
    .bind(after)
    .bind(older)
    .bind(upto)
    .bind(batch)
    .bind(created_at_ms)
    .fetch_one(&mut *tx)
    .await?;
    let Some(upper) = upper else { return Ok(RetentionBatch { deleted: 0, upper: None, full: false }) };
    let deleted = query(
        "DELETE FROM messages WHERE tenant = $1 AND conversation_id = $2 AND sequence > $3 AND sequence <= $4 \
         AND (created_at_ms < $5 OR sequence <= $6)",
    )
    .bind(tenant.as_str())
    .bind(conversation)
    .bind(after)
    .bind(upper)
    .bind(older)
    .bind(upto)
    .execute(&mut *tx)
    .await? as i64;
    adjust_count(tx, tenant, conversation, deleted).await?;
    Ok(RetentionBatch { deleted, upper: Some(upper), full: picked >= batch })
}
