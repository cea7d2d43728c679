//! PostgreSQL's one-pass append for the common case, a batch whose ids are all new: each
//! conversation's sequences are reserved and its counts advanced by one upsert, then its
//! rows are written. A duplicate id (the primary key's 23505), a conversation being
//! deleted, or any other surprise answers `None`, and the caller rolls the transaction back
//! and takes the checked path ([`super::append::append_in`]), which decides what to skip and
//! which error to give — so both paths store and answer exactly the same.
//!
//! Why: the checked path locks each conversation with one statement, inserts under a
//! savepoint (a subtransaction, so that a duplicate can be undone) and advances the
//! conversation with another; here a request is `BEGIN`, one upsert and the rows per
//! conversation, and `COMMIT`.

use sqlx::PgConnection;

use super::append::{RESERVE_CONVERSATION_SQL, group_by_conversation};
use super::message_rows::MessageRows;
use super::stored::StoredMessages;
use crate::store::engine::is_unique_violation;
use crate::store::{StoreResult, now_ms};
use context_jobs::contract::AppendResponse;
use context_jobs::ids::TenantKey;

/// Append `records` when all their ids are new, inside the caller's transaction; `None`
/// when the transaction must be rolled back and the batch appended by the checked path.
pub(super) async fn append_all_new(
    conn: &mut PgConnection,
    tenant: &TenantKey,
    records: &StoredMessages,
) -> StoreResult<Option<AppendResponse>> {
    let now = now_ms();
    let (groups, repeated) = group_by_conversation(records);
    let mut appended = 0usize;
    for (conversation, rows) in groups {
        let agent = rows.iter().find_map(|r| r.agent);
        let first: Option<i64> = sqlx::query_scalar(RESERVE_CONVERSATION_SQL)
            .bind(tenant.as_str())
            .bind(conversation)
            .bind(agent)
            .bind(now)
            .bind(rows.len() as i64)
            .fetch_optional(&mut *conn)
            .await?;
        let Some(first) = first else { return Ok(None) };
        match conn.insert_messages(tenant.as_str(), conversation, first, now, &rows).await {
            Ok(()) => appended += rows.len(),
            Err(e) if is_unique_violation(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Some(AppendResponse { appended, skipped: repeated }))
}
