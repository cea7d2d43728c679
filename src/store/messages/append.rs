//! The one sequence-assignment path for messages. The append endpoint and the import job
//! both insert messages through [`append_in`], inside their own write transaction, so
//! "skip ids that exist, give the rest the next sequences in batch order, bump the
//! conversation" is written once.
//!
//! Sequence assignment: the conversation row is upserted first (`ON CONFLICT … DO UPDATE …
//! RETURNING next_sequence`). On PostgreSQL that row lock serialises concurrent writers to
//! one conversation (different conversations run in parallel); on SQLite `BEGIN IMMEDIATE`
//! serialises all writers. Either way no two transactions see the same `next_sequence`.
//! Conversations are taken in key order so two multi-conversation batches cannot deadlock.
//!
//! The two statements whose best form differs by engine — "which of these ids exist" and
//! the bulk insert — are [`MessageRows`] methods on each engine's connection: PostgreSQL
//! binds whole columns as arrays (`= ANY($n)`, `UNNEST`), SQLite uses bounded
//! multi-row statements.

use std::collections::{BTreeMap, HashSet};

use sqlx::AssertSqlSafe;

use super::stored::{StoredMessage, StoredMessages};
use crate::store::engine::pg_copy::CopyBinary;
use crate::store::{Db, StoreError, StoreResult, Tx, now_ms, placeholders, query, row_placeholders};
use context_jobs::contract::{AppendResponse, ConversationRecord};
use context_jobs::ids::TenantKey;

const UPSERT_CONVERSATION_SQL: &str = "INSERT INTO conversations (tenant, conversation_id, agent_id, created_at_ms, updated_at_ms) \
     VALUES ($1, $2, $3, $4, $4) \
     ON CONFLICT (tenant, conversation_id) DO UPDATE SET updated_at_ms = conversations.updated_at_ms \
     RETURNING next_sequence, deleting_operation";

const ADVANCE_CONVERSATION_SQL: &str = "UPDATE conversations SET next_sequence = $3, message_count = message_count + $4, \
     updated_at_ms = $5, agent_id = COALESCE(agent_id, $6) WHERE tenant = $1 AND conversation_id = $2";

/// Group a batch by conversation (key order), keeping batch order inside each group and
/// dropping ids repeated within the batch. Returns the groups and how many were dropped.
fn group_by_conversation(records: &StoredMessages) -> (BTreeMap<&str, Vec<StoredMessage<'_>>>, usize) {
    let mut groups: BTreeMap<&str, Vec<StoredMessage<'_>>> = BTreeMap::new();
    let mut seen = HashSet::new();
    let mut repeated = 0usize;
    for r in records.iter() {
        if seen.insert((r.conversation_id, r.id)) {
            groups.entry(r.conversation_id).or_default().push(r);
        } else {
            repeated += 1;
        }
    }
    (groups, repeated)
}

/// Inside the caller's write transaction: append `records` (validated) for `tenant`.
/// Records whose id exists in their conversation, or repeats earlier in the batch, are
/// skipped. A conversation being deleted is a `StoreError::Conflict`.
pub async fn append_in(tx: &mut Tx, tenant: &TenantKey, records: &StoredMessages) -> StoreResult<AppendResponse> {
    let locked = lock_conversations(tx, tenant, records).await?;
    insert_locked(tx, tenant, locked).await
}

/// A batch grouped by conversation whose conversation rows this transaction has locked
/// (made by [`lock_conversations`], written by [`insert_locked`]).
pub struct Locked<'a> {
    conversations: Vec<LockedConversation<'a>>,
    /// Ids repeated within the batch (dropped).
    repeated: usize,
    now: i64,
}

struct LockedConversation<'a> {
    id: &'a str,
    agent: Option<&'a str>,
    next_sequence: i64,
    rows: Vec<StoredMessage<'a>>,
}

/// The first half of [`append_in`]: upsert and lock every conversation of the batch (key
/// order) and read its next sequence. Once this returns, no other transaction can take
/// these conversations' sequences until this one ends — which lets the import start its
/// next batch's transaction here (see `kinds::import::pipeline`).
pub async fn lock_conversations<'a>(
    tx: &mut Tx,
    tenant: &TenantKey,
    records: &'a StoredMessages,
) -> StoreResult<Locked<'a>> {
    let now = now_ms();
    let (groups, repeated) = group_by_conversation(records);
    let mut conversations = Vec::with_capacity(groups.len());
    for (id, rows) in groups {
        let agent = rows.iter().find_map(|r| r.agent);
        let (next_sequence, deleting): (i64, Option<String>) = query(UPSERT_CONVERSATION_SQL)
            .bind(tenant.as_str())
            .bind(id)
            .bind(agent)
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
        if let Some(op) = deleting {
            return Err(StoreError::Conflict(format!(
                "conversation {id:?} is being deleted by operation {op}; retry after it finishes"
            )));
        }
        conversations.push(LockedConversation { id, agent, next_sequence, rows });
    }
    Ok(Locked { conversations, repeated, now })
}

/// The second half of [`append_in`]: insert the new rows of each locked conversation and
/// advance it.
pub async fn insert_locked(tx: &mut Tx, tenant: &TenantKey, locked: Locked<'_>) -> StoreResult<AppendResponse> {
    let Locked { conversations, repeated: mut skipped, now } = locked;
    let tenant = tenant.as_str();
    let mut appended = 0usize;
    for LockedConversation { id: conversation, agent, next_sequence, rows: group } in conversations {
        // Common case first: every id is new. Where the engine can insert all rows and
        // learn of a duplicate from the unique index itself, it does so (see
        // `insert_if_all_new`); a conversation that never had a message (sequences start
        // at 1) has nothing to skip; otherwise check which ids exist.
        let all_new = next_sequence > 1
            && match tx {
                Tx::Postgres(c) => c.insert_if_all_new(tenant, conversation, next_sequence, now, &group).await?,
                Tx::Sqlite(c) => c.insert_if_all_new(tenant, conversation, next_sequence, now, &group).await?,
            };
        let fresh: Vec<StoredMessage<'_>> = if all_new {
            group.clone()
        } else {
            let existing = if next_sequence == 1 {
                HashSet::new()
            } else {
                let ids: Vec<&str> = group.iter().map(|r| r.id).collect();
                match tx {
                    Tx::Postgres(c) => c.existing_message_ids(tenant, conversation, &ids).await?,
                    Tx::Sqlite(c) => c.existing_message_ids(tenant, conversation, &ids).await?,
                }
            };
            let fresh: Vec<StoredMessage<'_>> = group.iter().copied().filter(|r| !existing.contains(r.id)).collect();
            if !fresh.is_empty() {
                match tx {
                    Tx::Postgres(c) => c.insert_messages(tenant, conversation, next_sequence, now, &fresh).await?,
                    Tx::Sqlite(c) => c.insert_messages(tenant, conversation, next_sequence, now, &fresh).await?,
                }
            }
            fresh
        };
        skipped += group.len() - fresh.len();
        if fresh.is_empty() {
            continue;
        }
        query(ADVANCE_CONVERSATION_SQL)
            .bind(tenant)
            .bind(conversation)
            .bind(next_sequence + fresh.len() as i64)
            .bind(fresh.len() as i64)
            .bind(now)
            .bind(agent)
            .execute(&mut *tx)
            .await?;
        appended += fresh.len();
    }
    Ok(AppendResponse { appended, skipped })
}

/// Append a validated batch atomically, in its own transaction.
pub async fn append(db: &Db, tenant: &TenantKey, records: &[ConversationRecord]) -> StoreResult<AppendResponse> {
    let rows: StoredMessages = records.iter().collect();
    let mut tx = db.begin_write().await?;
    let response = append_in(&mut tx, tenant, &rows).await?;
    tx.commit().await?;
    Ok(response)
}

/// The engine-specific halves of an append, on a connection inside a transaction.
trait MessageRows {
    /// Which of `ids` exist in the conversation.
    fn existing_message_ids(
        &mut self,
        tenant: &str,
        conversation: &str,
        ids: &[&str],
    ) -> impl Future<Output = Result<HashSet<String>, sqlx::Error>> + Send;

    /// Insert all `rows` (sequences from `first_sequence`) if none of their ids exists yet,
    /// returning `true`; `false` (nothing written) sends the caller to the checked path.
    fn insert_if_all_new(
        &mut self,
        tenant: &str,
        conversation: &str,
        first_sequence: i64,
        now: i64,
        rows: &[StoredMessage<'_>],
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Insert `rows` with sequences `first_sequence, first_sequence + 1, …` in order.
    fn insert_messages(
        &mut self,
        tenant: &str,
        conversation: &str,
        first_sequence: i64,
        now: i64,
        rows: &[StoredMessage<'_>],
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
}

/// The creation time a row is stored with: its own, else the write's.
fn created_at(r: &StoredMessage<'_>, now: i64) -> i64 {
    if r.created_at_ms > 0 { r.created_at_ms } else { now }
}

/// The stored columns of a message row, in the order both inserts write them.
const COLUMN_LIST: &str = "tenant, conversation_id, id, sequence, role, scope, content, search_text, name, tool_call_id, created_at_ms, metadata";

impl MessageRows for sqlx::PgConnection {
    /// Optimistic bulk insert under a savepoint: the primary key itself detects a duplicate
    /// (23505), and the savepoint undoes the attempt. This avoids the "which ids exist"
    /// query, whose plan PostgreSQL gets badly wrong on a table without statistics (it
    /// scans the whole conversation by the sequence index for every batch).
    async fn insert_if_all_new(
        &mut self,
        tenant: &str,
        conversation: &str,
        first_sequence: i64,
        now: i64,
        rows: &[StoredMessage<'_>],
    ) -> Result<bool, sqlx::Error> {
        sqlx::query("SAVEPOINT append_all_new").execute(&mut *self).await?;
        match self.insert_messages(tenant, conversation, first_sequence, now, rows).await {
            Ok(()) => Ok(true),
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("23505") => {
                sqlx::query("ROLLBACK TO SAVEPOINT append_all_new").execute(&mut *self).await?;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    async fn existing_message_ids(
        &mut self,
        tenant: &str,
        conversation: &str,
        ids: &[&str],
    ) -> Result<HashSet<String>, sqlx::Error> {
        let found: Vec<String> =
            sqlx::query_scalar("SELECT id FROM messages WHERE tenant = $1 AND conversation_id = $2 AND id = ANY($3)")
                .bind(tenant)
                .bind(conversation)
                .bind(ids)
                .fetch_all(&mut *self)
                .await?;
        Ok(found.into_iter().collect())
    }

    async fn insert_messages(
        &mut self,
        tenant: &str,
        conversation: &str,
        first_sequence: i64,
        now: i64,
        rows: &[StoredMessage<'_>],
    ) -> Result<(), sqlx::Error> {
        if rows.len() >= PG_COPY_MIN_ROWS {
            return copy_messages(self, tenant, conversation, first_sequence, now, rows).await;
        }
        // One statement whatever the row count: each column is one array parameter.
        let sequences: Vec<i64> = (0..rows.len() as i64).map(|i| first_sequence + i).collect();
        let sql = format!(
            "INSERT INTO messages ({COLUMN_LIST}) SELECT $1, $2, * FROM UNNEST($3::text[], $4::int8[], $5::text[], \
             $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::int8[], $12::text[])"
        );
        sqlx::query(AssertSqlSafe(sql))
            .bind(tenant)
            .bind(conversation)
            .bind(rows.iter().map(|c| c.id).collect::<Vec<_>>())
            .bind(sequences)
            .bind(rows.iter().map(|c| c.role).collect::<Vec<_>>())
            .bind(rows.iter().map(|c| c.scope).collect::<Vec<_>>())
            .bind(rows.iter().map(|c| c.content).collect::<Vec<_>>())
            .bind(rows.iter().map(|c| c.search_text).collect::<Vec<_>>())
            .bind(rows.iter().map(|c| c.name).collect::<Vec<_>>())
            .bind(rows.iter().map(|c| c.tool_call_id).collect::<Vec<_>>())
            .bind(rows.iter().map(|c| created_at(c, now)).collect::<Vec<_>>())
            .bind(rows.iter().map(|c| c.metadata).collect::<Vec<_>>())
            .execute(&mut *self)
            .await?;
        Ok(())
    }
}

/// From this many rows a PostgreSQL insert goes by binary `COPY`, which logs a page of
/// tuples per WAL record where `INSERT … SELECT` logs one per row (import batches wrote
/// ~2x slower than `COPY` into the same table). Below it the prepared `INSERT` wins: `COPY`
/// costs an extra round trip (the server's `CopyInResponse`) and a parse per statement.
const PG_COPY_MIN_ROWS: usize = 32;

/// `COPY` `rows` into messages, sequences from `first_sequence`. A duplicate id fails the
/// statement with 23505, as the `INSERT` would.
async fn copy_messages(
    conn: &mut sqlx::PgConnection,
    tenant: &str,
    conversation: &str,
    first_sequence: i64,
    now: i64,
    rows: &[StoredMessage<'_>],
) -> Result<(), sqlx::Error> {
    let bytes: usize = rows.iter().map(|c| c.content.len() + c.search_text.len() + c.scope.len() + 96).sum();
    let mut copy = CopyBinary::new(bytes);
    for (i, c) in rows.iter().enumerate() {
        copy.row(12)
            .bytes(tenant.as_bytes())
            .bytes(conversation.as_bytes())
            .bytes(c.id.as_bytes())
            .int8(first_sequence + i as i64)
            .bytes(c.role.as_bytes())
            .bytes(c.scope.as_bytes())
            .bytes(c.content.as_bytes())
            .bytes(c.search_text.as_bytes())
            .opt_bytes(c.name.map(str::as_bytes))
            .opt_bytes(c.tool_call_id.map(str::as_bytes))
            .int8(created_at(c, now))
            .opt_bytes(c.metadata.map(str::as_bytes));
    }
    let sql = format!("COPY messages ({COLUMN_LIST}) FROM STDIN (FORMAT binary)");
    let mut sink = conn.copy_in_raw(&sql).await?;
    sink.send(copy.finish()).await?;
    sink.finish().await?;
    Ok(())
}

/// SQLite binds at most 32,766 parameters per statement: stay well below it.
const SQLITE_IDS_PER_QUERY: usize = 500;
const SQLITE_ROWS_PER_INSERT: usize = 500;

impl MessageRows for sqlx::SqliteConnection {
    /// SQLite plans the id check on the primary key; the checked path is as cheap.
    async fn insert_if_all_new(
        &mut self,
        _tenant: &str,
        _conversation: &str,
        _first_sequence: i64,
        _now: i64,
        _rows: &[StoredMessage<'_>],
    ) -> Result<bool, sqlx::Error> {
        Ok(false)
    }

    async fn existing_message_ids(
        &mut self,
        tenant: &str,
        conversation: &str,
        ids: &[&str],
    ) -> Result<HashSet<String>, sqlx::Error> {
        let mut found = HashSet::new();
        for part in ids.chunks(SQLITE_IDS_PER_QUERY) {
            let sql = format!(
                "SELECT id FROM messages WHERE tenant = $1 AND conversation_id = $2 AND id IN ({})",
                placeholders(3, part.len())
            );
            let mut query = sqlx::query_scalar::<_, String>(AssertSqlSafe(sql)).bind(tenant).bind(conversation);
            for id in part {
                query = query.bind(*id);
            }
            found.extend(query.fetch_all(&mut *self).await?);
        }
        Ok(found)
    }

    async fn insert_messages(
        &mut self,
        tenant: &str,
        conversation: &str,
        first_sequence: i64,
        now: i64,
        rows: &[StoredMessage<'_>],
    ) -> Result<(), sqlx::Error> {
        for (n, part) in rows.chunks(SQLITE_ROWS_PER_INSERT).enumerate() {
            let sql = format!("INSERT INTO messages ({COLUMN_LIST}) VALUES {}", row_placeholders(1, part.len(), 12));
            let first = first_sequence + (n * SQLITE_ROWS_PER_INSERT) as i64;
            let mut query = sqlx::query(AssertSqlSafe(sql));
            for (i, c) in part.iter().enumerate() {
                query = query
                    .bind(tenant)
                    .bind(conversation)
                    .bind(c.id)
                    .bind(first + i as i64)
                    .bind(c.role)
                    .bind(c.scope)
                    .bind(c.content)
                    .bind(c.search_text)
                    .bind(c.name)
                    .bind(c.tool_call_id)
                    .bind(created_at(c, now))
                    .bind(c.metadata);
            }
            query.execute(&mut *self).await?;
        }
        Ok(())
    }
}
