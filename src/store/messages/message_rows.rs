//! The engine-specific halves of an append ([`MessageRows`], on a connection inside a
//! transaction): "which of these ids exist" and the bulk insert, whose best forms differ —
//! PostgreSQL binds whole columns as arrays (`= ANY($n)`, `UNNEST`) or goes by binary
//! `COPY`, SQLite uses bounded multi-row statements.

use std::collections::HashSet;

use sqlx::AssertSqlSafe;

use super::stored::StoredMessage;
use crate::store::engine::is_unique_violation;
use crate::store::engine::pg_copy::CopyBinary;
use crate::store::{placeholders, row_placeholders};

/// The engine-specific halves of an append, on a connection inside a transaction.
pub(super) trait MessageRows {
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
    /// scans the whole conversation by the sequence index for every batch). Each attempt is
    /// a subtransaction, so the caller spends one of its transaction's few on it
    /// (`PgTx::take_subtransaction`) and checks ids once they are spent (a plan on the
    /// primary key once autovacuum has analyzed the table, as it does in production).
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
            Err(e) if is_unique_violation(&e) => {
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
            return copy_messages(self, tenant, &[(conversation, first_sequence, rows)], now).await;
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
pub(super) const PG_COPY_MIN_ROWS: usize = 32;

/// A conversation's rows for [`copy_messages`]: its id, the first sequence, the rows.
pub(super) type Group<'a, 'r> = (&'a str, i64, &'a [StoredMessage<'r>]);

/// `COPY` the rows of `groups` into messages in one statement, each group's sequences from
/// its first. A duplicate id fails the statement with 23505, as the `INSERT` would.
pub(super) async fn copy_messages(
    conn: &mut sqlx::PgConnection,
    tenant: &str,
    groups: &[Group<'_, '_>],
    now: i64,
) -> Result<(), sqlx::Error> {
    let sql = format!("COPY messages ({COLUMN_LIST}) FROM STDIN (FORMAT binary)");
    let mut sink = conn.copy_in_raw(&sql).await?;
    let mut copy = CopyBinary::streamed();
    for &(conversation, first_sequence, rows) in groups {
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
            copy.send_full(&mut sink).await?;
        }
    }
    copy.send_rest(sink).await?;
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
