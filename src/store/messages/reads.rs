//! Reads of messages and the conversation directory: recent, page, search, an inference
//! turn's history walk, the per-agent conversation list, and an export's size estimate.

use sqlx::AssertSqlSafe;

use crate::store::{Db, StoreError, StoreResult, parse_json_column, placeholders, query};
use context_jobs::contract::{ConversationRecord, ConversationSummary, MessageCursor, search_fold};
use context_jobs::ids::TenantKey;

const MESSAGE_COLUMNS: &str = "id, sequence, role, scope, content, name, tool_call_id, created_at_ms, metadata";

type MessageRow = (String, i64, String, String, String, Option<String>, Option<String>, i64, Option<String>);

fn record_from_row(row: MessageRow) -> StoreResult<ConversationRecord> {
    let (id, sequence, role, scope, content, name, tool_call_id, created_at_ms, metadata) = row;
    let corrupt = |e: serde_json::Error| StoreError::Other(anyhow::anyhow!("corrupt message row: {e}"));
    Ok(ConversationRecord {
        id,
        scope: serde_json::from_str(&scope).map_err(corrupt)?,
        role,
        content: serde_json::from_str(&content).map_err(corrupt)?,
        name,
        tool_call_id,
        sequence,
        created_at_ms,
        metadata: parse_json_column(metadata)?,
    })
}

fn records_from_rows(rows: Vec<MessageRow>) -> StoreResult<Vec<ConversationRecord>> {
    rows.into_iter().map(record_from_row).collect()
}

/// About how many messages the tenant holds (an export's progress total): the sum of the
/// conversations' counts, far cheaper than counting the rows.
pub async fn count_estimate(db: &Db, tenant: &TenantKey) -> StoreResult<i64> {
    Ok(query("SELECT CAST(COALESCE(SUM(message_count), 0) AS BIGINT) FROM conversations WHERE tenant = $1")
        .bind(tenant.as_str())
        .fetch_scalar(db)
        .await?)
}

/// `AND role IN (…)` over parameters from `$start`, or nothing when `roles` is empty.
fn role_filter(start: usize, roles: &[&str]) -> String {
    if roles.is_empty() { String::new() } else { format!(" AND role IN ({})", placeholders(start, roles.len())) }
}

/// A filter's roles, each once: a role repeated any number of times binds one parameter
/// (tens of thousands of them reached each engine's parameter limit, at different counts).
fn distinct(roles: &[String]) -> Vec<&str> {
    let mut distinct: Vec<&str> = roles.iter().map(String::as_str).collect();
    distinct.sort_unstable();
    distinct.dedup();
    distinct
}

/// The newest `limit` messages, returned oldest first.
pub async fn recent(
    db: &Db,
    tenant: &TenantKey,
    conversation: &str,
    roles: &[String],
    limit: usize,
) -> StoreResult<Vec<ConversationRecord>> {
    let roles = distinct(roles);
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE tenant = $1 AND conversation_id = $2{} \
         ORDER BY sequence DESC LIMIT {limit}",
        role_filter(3, &roles)
    );
    let q = query(AssertSqlSafe(sql)).bind(tenant.as_str()).bind(conversation);
    let mut rows: Vec<MessageRow> = roles.iter().fold(q, |q, r| q.bind(*r)).fetch_all(db).await?;
    rows.reverse();
    records_from_rows(rows)
}

/// Up to `limit` messages with `sequence <= through`, newest first: walking a
/// conversation backwards (an inference turn loads history until its budget is spent).
pub async fn newest_through(
    db: &Db,
    tenant: &TenantKey,
    conversation: &str,
    through: i64,
    except_role: &str,
    limit: usize,
) -> StoreResult<Vec<ConversationRecord>> {
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE tenant = $1 AND conversation_id = $2 AND sequence <= $3 \
         AND role <> $4 ORDER BY sequence DESC LIMIT {limit}"
    );
    let rows = query(AssertSqlSafe(sql))
        .bind(tenant.as_str())
        .bind(conversation)
        .bind(through)
        .bind(except_role)
        .fetch_all(db)
        .await?;
    records_from_rows(rows)
}

/// One page in `(sequence, id)` order after `cursor`, with the cursor of the next page
/// when more rows exist.
pub async fn page(
    db: &Db,
    tenant: &TenantKey,
    conversation: &str,
    roles: &[String],
    cursor: Option<&MessageCursor>,
    limit: usize,
) -> StoreResult<(Vec<ConversationRecord>, Option<MessageCursor>)> {
    let (after_seq, after_id) = cursor.map(|c| (c.sequence, c.id.as_str())).unwrap_or((i64::MIN, ""));
    let roles = distinct(roles);
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE tenant = $1 AND conversation_id = $2 \
         AND (sequence > $3 OR (sequence = $3 AND id > $4)){} ORDER BY sequence ASC, id ASC LIMIT {}",
        role_filter(5, &roles),
        limit + 1
    );
    let q = query(AssertSqlSafe(sql)).bind(tenant.as_str()).bind(conversation).bind(after_seq).bind(after_id);
    let mut rows: Vec<MessageRow> = roles.iter().fold(q, |q, r| q.bind(*r)).fetch_all(db).await?;
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next = if more { rows.last().map(|r| MessageCursor { sequence: r.1, id: r.0.clone() }) } else { None };
    Ok((records_from_rows(rows)?, next))
}

fn like_pattern(query: &str) -> String {
    let mut pattern = String::with_capacity(query.len() + 2);
    pattern.push('%');
    for ch in search_fold(query).chars() {
        if matches!(ch, '\\' | '%' | '_') {
            pattern.push('\\');
        }
        pattern.push(ch);
    }
    pattern.push('%');
    pattern
}

/// Case-insensitive substring search over `content_text`: the newest `limit` matches,
/// returned oldest first.
pub async fn search(
    db: &Db,
    tenant: &TenantKey,
    conversation: &str,
    text: Option<&str>,
    role: Option<&str>,
    limit: usize,
) -> StoreResult<Vec<ConversationRecord>> {
    let pattern = like_pattern(text.unwrap_or(""));
    let role_clause = if role.is_some() { " AND role = $4" } else { "" };
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE tenant = $1 AND conversation_id = $2 \
         AND search_text LIKE $3 ESCAPE '\\'{role_clause} ORDER BY sequence DESC LIMIT {limit}"
    );
    let mut q = query(AssertSqlSafe(sql)).bind(tenant.as_str()).bind(conversation).bind(pattern);
    if let Some(role) = role {
        q = q.bind(role);
    }
    let mut rows: Vec<MessageRow> = q.fetch_all(db).await?;
    rows.reverse();
    records_from_rows(rows)
}

/// An agent's conversations, most recently updated first.
pub async fn list_conversations(
    db: &Db,
    tenant: &TenantKey,
    agent_id: &str,
    limit: usize,
) -> StoreResult<Vec<ConversationSummary>> {
    let rows: Vec<(String, String, i64, i64, i64)> = query(
        "SELECT conversation_id, agent_id, message_count, created_at_ms, updated_at_ms FROM conversations \
         WHERE tenant = $1 AND agent_id = $2 ORDER BY updated_at_ms DESC, conversation_id ASC LIMIT $3",
    )
    .bind(tenant.as_str())
    .bind(agent_id)
    .bind(limit as i64)
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(conversation_id, agent_id, count, created_at_ms, updated_at_ms)| ConversationSummary {
            conversation_id,
            agent_id,
            message_count: count.max(0) as u64,
            created_at_ms,
            updated_at_ms,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn like_patterns_escape_wildcards_and_fold_case() {
        assert_eq!(super::like_pattern("A_b%"), "%a\\_b\\%%");
        assert_eq!(super::like_pattern(""), "%%");
    }
}
