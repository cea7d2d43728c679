//! The conversation rows: the deletion barrier a delete holds (appends answer 409 while it
//! is set), message counts, and the sweep's walk over every conversation.

use crate::store::{Exec, StoreError, StoreResult, Tx, query};
use context_jobs::ids::{ConversationId, OperationId, TenantKey};

/// Refuse appends to `conversation` until operation `id` ends. A conversation that does not
/// exist has nothing to guard; one another delete holds is a conflict.
pub async fn mark_deleting(
    tx: &mut Tx,
    tenant: &TenantKey,
    conversation: &ConversationId,
    id: &OperationId,
) -> StoreResult<()> {
    let marked = query(
        "UPDATE conversations SET deleting_operation = $3 \
         WHERE tenant = $1 AND conversation_id = $2 AND deleting_operation IS NULL",
    )
    .bind(tenant.as_str())
    .bind(conversation.as_str())
    .bind(id.as_str())
    .execute(&mut *tx)
    .await?;
    if marked == 0 {
        let busy: Option<Option<String>> =
            query("SELECT deleting_operation FROM conversations WHERE tenant = $1 AND conversation_id = $2")
                .bind(tenant.as_str())
                .bind(conversation.as_str())
                .fetch_optional_scalar(&mut *tx)
                .await?;
        if let Some(Some(other)) = busy {
            return Err(StoreError::Conflict(format!(
                "conversation {conversation:?} is already being deleted by operation {other}"
            )));
        }
    }
    Ok(())
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

/// The conversation's message count (`None` when it does not exist).
pub async fn message_count<'a>(
    ex: impl Into<Exec<'a>>,
    tenant: &TenantKey,
    conversation: &str,
) -> StoreResult<Option<i64>> {
    Ok(query("SELECT message_count FROM conversations WHERE tenant = $1 AND conversation_id = $2")
        .bind(tenant.as_str())
        .bind(conversation)
        .fetch_optional_scalar(ex)
        .await?)
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
