//! Messages and the conversation directory: idempotent append with server-assigned
//! sequences, recent/page/search reads, and the per-agent conversation list.
//!
//! Sequence assignment: the append transaction first upserts the conversation row with
//! `ON CONFLICT … DO UPDATE … RETURNING next_sequence`. On PostgreSQL that row lock
//! serialises concurrent appends to one conversation (appends to different conversations
//! run in parallel); on SQLite `BEGIN IMMEDIATE` serialises all writers. Either way no two
//! appends see the same `next_sequence`.

use std::collections::{BTreeMap, HashSet};

use sqlx::AssertSqlSafe;

use super::{StoreError, StoreResult, json_column, now_ms, parse_json_column, placeholders, row_placeholders};
use crate::auth::TenantKey;
use crate::db::{BeginWrite as _, Db};
use crate::with_pool;
use context_jobs::contract::{
    AppendResponse, ConversationRecord, ConversationSummary, MessageCursor, content_text, search_fold,
};

const MESSAGE_COLUMNS: &str =
    "id, sequence, role, scope, content, name, tool_call_id, created_at_ms, metadata";

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

/// Append a validated batch atomically. Records whose id already exists in their
/// conversation (or repeats earlier in the batch) are skipped, not rewritten.
pub async fn append(db: &Db, tenant: &TenantKey, records: &[ConversationRecord]) -> StoreResult<AppendResponse> {
    let now = now_ms();
    // Group by conversation, keeping batch order inside each; conversations are locked in
    // key order so two multi-conversation batches cannot deadlock each other.
    let mut groups: BTreeMap<&str, Vec<&ConversationRecord>> = BTreeMap::new();
    let mut seen = HashSet::new();
    let mut skipped = 0usize;
    for r in records {
        if seen.insert((r.scope.conversation_id.as_str(), r.id.as_str())) {
            groups.entry(r.scope.conversation_id.as_str()).or_default().push(r);
        } else {
            skipped += 1;
        }
    }
    let mut appended = 0usize;
    with_pool!(db, pool => {
        let mut tx = pool.begin_write().await?;
        for (conversation, group) in &groups {
            let agent = group.iter().find_map(|r| r.scope.listing_agent());
            let (next_sequence, deleting): (i64, Option<String>) = sqlx::query_as(
                "INSERT INTO conversations (tenant, conversation_id, agent_id, created_at_ms, updated_at_ms) \
                 VALUES ($1, $2, $3, $4, $4) \
                 ON CONFLICT (tenant, conversation_id) DO UPDATE SET updated_at_ms = conversations.updated_at_ms \
                 RETURNING next_sequence, deleting_operation",
            )
            .bind(tenant.as_str())
            .bind(*conversation)
            .bind(agent)
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
            if let Some(op) = deleting {
                return Err(StoreError::Conflict(format!(
                    "conversation {conversation:?} is being deleted by operation {op}; retry after it finishes"
                )));
            }
            let sql = format!(
                "SELECT id FROM messages WHERE tenant = $1 AND conversation_id = $2 AND id IN ({})",
                placeholders(3, group.len())
            );
            let mut query = sqlx::query_scalar::<_, String>(AssertSqlSafe(sql)).bind(tenant.as_str()).bind(*conversation);
            for r in group {
                query = query.bind(r.id.as_str());
            }
            let existing: HashSet<String> = query.fetch_all(&mut *tx).await?.into_iter().collect();
            let fresh: Vec<&&ConversationRecord> = group.iter().filter(|r| !existing.contains(&r.id)).collect();
            skipped += group.len() - fresh.len();
            if fresh.is_empty() {
                continue;
            }
            let sql = format!(
                "INSERT INTO messages (tenant, conversation_id, id, sequence, role, scope, content, search_text, \
                 name, tool_call_id, created_at_ms, metadata) VALUES {}",
                row_placeholders(1, fresh.len(), 12)
            );
            let mut query = sqlx::query(AssertSqlSafe(sql));
            for (i, r) in fresh.iter().enumerate() {
                let created = if r.created_at_ms > 0 { r.created_at_ms } else { now };
                query = query
                    .bind(tenant.as_str())
                    .bind(*conversation)
                    .bind(r.id.as_str())
                    .bind(next_sequence + i as i64)
                    .bind(r.role.as_str())
                    .bind(serde_json::to_string(&r.scope).unwrap_or_default())
                    .bind(r.content.to_string())
                    .bind(search_fold(&content_text(&r.content)))
                    .bind(r.name.as_deref())
                    .bind(r.tool_call_id.as_deref())
                    .bind(created)
                    .bind(json_column(&r.metadata));
            }
            query.execute(&mut *tx).await?;
            sqlx::query(
                "UPDATE conversations SET next_sequence = $3, message_count = message_count + $4, \
                 updated_at_ms = $5, agent_id = COALESCE(agent_id, $6) WHERE tenant = $1 AND conversation_id = $2",
            )
            .bind(tenant.as_str())
            .bind(*conversation)
            .bind(next_sequence + fresh.len() as i64)
            .bind(fresh.len() as i64)
            .bind(now)
            .bind(agent)
            .execute(&mut *tx)
            .await?;
            appended += fresh.len();
        }
        tx.commit().await?;
        Ok::<_, StoreError>(())
    })?;
    Ok(AppendResponse { appended, skipped })
}

/// `AND role IN (…)` over parameters from `$start`, or nothing when `roles` is empty.
fn role_filter(start: usize, roles: &[String]) -> String {
    if roles.is_empty() {
        String::new()
    } else {
        format!(" AND role IN ({})", placeholders(start, roles.len()))
    }
}

/// The newest `limit` messages, returned oldest first.
pub async fn recent(
    db: &Db,
    tenant: &TenantKey,
    conversation: &str,
    roles: &[String],
    limit: usize,
) -> StoreResult<Vec<ConversationRecord>> {
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE tenant = $1 AND conversation_id = $2{} \
         ORDER BY sequence DESC LIMIT {limit}",
        role_filter(3, roles)
    );
    let mut rows = with_pool!(db, pool => {
        let mut q = sqlx::query_as::<_, MessageRow>(AssertSqlSafe(sql)).bind(tenant.as_str()).bind(conversation);
        for r in roles {
            q = q.bind(r.as_str());
        }
        q.fetch_all(pool).await?
    });
    rows.reverse();
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
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE tenant = $1 AND conversation_id = $2 \
         AND (sequence > $3 OR (sequence = $3 AND id > $4)){} ORDER BY sequence ASC, id ASC LIMIT {}",
        role_filter(5, roles),
        limit + 1
    );
    let mut rows = with_pool!(db, pool => {
        let mut q = sqlx::query_as::<_, MessageRow>(AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(conversation)
            .bind(after_seq)
            .bind(after_id);
        for r in roles {
            q = q.bind(r.as_str());
        }
        q.fetch_all(pool).await?
    });
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next = if more {
        rows.last().map(|r| MessageCursor { sequence: r.1, id: r.0.clone() })
    } else {
        None
    };
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
    query: Option<&str>,
    role: Option<&str>,
    limit: usize,
) -> StoreResult<Vec<ConversationRecord>> {
    let pattern = like_pattern(query.unwrap_or(""));
    let role_clause = if role.is_some() { " AND role = $4" } else { "" };
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE tenant = $1 AND conversation_id = $2 \
         AND search_text LIKE $3 ESCAPE '\\'{role_clause} ORDER BY sequence DESC LIMIT {limit}"
    );
    let mut rows = with_pool!(db, pool => {
        let mut q = sqlx::query_as::<_, MessageRow>(AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(conversation)
            .bind(pattern.as_str());
        if let Some(role) = role {
            q = q.bind(role);
        }
        q.fetch_all(pool).await?
    });
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
    let rows: Vec<(String, String, i64, i64, i64)> = with_pool!(db, pool => {
        sqlx::query_as(
            "SELECT conversation_id, agent_id, message_count, created_at_ms, updated_at_ms FROM conversations \
             WHERE tenant = $1 AND agent_id = $2 ORDER BY updated_at_ms DESC, conversation_id ASC LIMIT $3",
        )
        .bind(tenant.as_str())
        .bind(agent_id)
        .bind(limit as i64)
        .fetch_all(pool)
        .await?
    });
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
