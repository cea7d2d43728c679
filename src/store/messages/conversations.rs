//! The conversation rows: the deletion barrier a delete holds (appends answer 409 while it
//! is set) and the sweep's walk over every conversation.

use sqlx::AssertSqlSafe;

use crate::store::{Exec, StoreError, StoreResult, Tx, query};
use context_jobs::ids::{ConversationId, OperationId, TenantKey};

/// The barrier's one statement: the conversation keeps the barrier it has (or takes
/// operation `id_p`'s) and returns who holds it now. A conversation without a row gets one
/// (empty, no agent: listed nowhere), so appends made before the delete runs are refused
/// too — without it they were accepted, then deleted by the delete they preceded.
pub fn mark_deleting_sql(tenant_p: &str, conversation_p: &str, id_p: &str, now_p: &str) -> String {
    format!(
        "INSERT INTO conversations (tenant, conversation_id, created_at_ms, updated_at_ms, deleting_operation) \
         VALUES ({tenant_p}, {conversation_p}, {now_p}, {now_p}, {id_p}) \
         ON CONFLICT (tenant, conversation_id) DO UPDATE \
         SET deleting_operation = COALESCE(conversations.deleting_operation, excluded.deleting_operation) \
         RETURNING deleting_operation"
    )
}

/// Refuse appends to `conversation` until operation `id` ends; one another delete holds is
/// a conflict.
pub async fn mark_deleting(
    tx: &mut Tx,
    tenant: &TenantKey,
    conversation: &ConversationId,
    id: &OperationId,
) -> StoreResult<()> {
    let holder: Option<String> = query(AssertSqlSafe(mark_deleting_sql("$1", "$2", "$3", "$4")))
        .bind(tenant.as_str())
        .bind(conversation.as_str())
        .bind(id.as_str())
        .bind(crate::store::now_ms())
        .fetch_optional_scalar(&mut *tx)
        .await?;
    match holder {
        Some(other) if other != id.as_str() => Err(held_by(conversation, Some(&other))),
        _ => Ok(()),
    }
}

/// The operation whose barrier `conversation` holds, as a submission that found it held
/// learns it (outside the statement that found it: `None` when it ended meanwhile).
pub async fn holder<'a>(
    ex: impl Into<Exec<'a>>,
    tenant: &TenantKey,
    conversation: &ConversationId,
) -> StoreResult<Option<String>> {
    let holder: Option<Option<String>> =
        query("SELECT deleting_operation FROM conversations WHERE tenant = $1 AND conversation_id = $2")
            .bind(tenant.as_str())
            .bind(conversation.as_str())
            .fetch_optional_scalar(ex)
            .await?;
    Ok(holder.flatten())
}

/// The conflict of a delete submitted while operation `other` deletes the conversation
/// (`None`: it ended between the statement that found it and the look-up of its id).
pub fn held_by(conversation: &ConversationId, other: Option<&str>) -> StoreError {
    let by = other.map_or_else(|| "another operation".to_string(), |other| format!("operation {other}"));
    StoreError::Conflict(format!("conversation {conversation:?} is already being deleted by {by}"))
}

/// Clear the appends barrier operation `id` may hold (its terminal transition runs this).
pub async fn release_barrier<'a>(ex: impl Into<Exec<'a>>, tenant: &TenantKey, id: &OperationId) -> StoreResult<()> {
    query("UPDATE conversations SET deleting_operation = NULL WHERE tenant = $1 AND deleting_operation = $2")
        .bind(tenant.as_str())
        .bind(id.as_str())
        .execute(ex)
        .await?;
    Ok(())
}

/// The next page of conversations no delete holds, after `after` in `(tenant, id)` order:
/// the retention sweep's walk over every tenant.
pub async fn sweep_page<'a>(
    ex: impl Into<Exec<'a>>,
    after: &(String, String),
    limit: i64,
) -> StoreResult<Vec<(String, String)>> {
    Ok(query(
        "SELECT tenant, conversation_id FROM conversations WHERE deleting_operation IS NULL \
         AND (tenant > $1 OR (tenant = $1 AND conversation_id > $2)) ORDER BY tenant, conversation_id LIMIT $3",
    )
    .bind(after.0.as_str())
    .bind(after.1.as_str())
    .bind(limit)
    .fetch_all(ex)
    .await?)
}
