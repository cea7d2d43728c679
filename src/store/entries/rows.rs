//! The row writers every entry write goes through, inside the caller's transaction:
//! taking the tenant's next change sequences, inserting entry rows with their version
//! snapshots, and recording a new version. Import uses them as they are.
//!
//! Every write of an entry row takes the next value of the tenant's `source_version`
//! (`context_entry_heads`) as its `change_seq`, and records an immutable snapshot in
//! `context_entry_versions`. The heads row is locked by the bump, so change sequences commit
//! in order — the recall index and the watermark rely on that.

use std::collections::HashSet;

use sqlx::AssertSqlSafe;

use super::{EntryColumns, entry_columns};
use crate::store::{StoreResult, Tx, now_ms, query, row_placeholders};
use context_jobs::contract::ContextInsight;
use context_jobs::ids::TenantKey;

/// Rows per multi-row INSERT: 14 parameters a row stays far below both engines' limits.
const INSERT_CHUNK: usize = 200;

const BUMP_SOURCE_SQL: &str = "INSERT INTO context_entry_heads (tenant, source_version) VALUES ($1, $2) \
     ON CONFLICT (tenant) DO UPDATE SET source_version = context_entry_heads.source_version + $2 \
     RETURNING source_version";

fn insert_entries_sql(rows: usize) -> String {
    format!(
        "INSERT INTO context_entries (tenant, id, kind, content, attributes, version, status, conversation_id, \
         provenance, superseded_by, expires_at_ms, created_at_ms, updated_at_ms, change_seq) \
         VALUES {} ON CONFLICT (tenant, id) DO NOTHING RETURNING id",
        row_placeholders(1, rows, 14)
    )
}

fn insert_versions_sql(rows: usize) -> String {
    format!(
        "INSERT INTO context_entry_versions (tenant, entry_id, version, change, reason, entry, recorded_at_ms) \
         VALUES {} ON CONFLICT (tenant, entry_id, version) DO NOTHING",
        row_placeholders(1, rows, 7)
    )
}

/// Take `n` change sequences for the tenant; returns the first.
pub async fn bump_source(tx: &mut Tx, tenant: &TenantKey, n: i64) -> StoreResult<i64> {
    let last: i64 = query(BUMP_SOURCE_SQL).bind(tenant.as_str()).bind(n).fetch_scalar(&mut *tx).await?;
    Ok(last - n + 1)
}

/// Record one new version snapshot of `entry`.
pub async fn record_version(
    tx: &mut Tx,
    tenant: &TenantKey,
    entry: &ContextInsight,
    change: &str,
    reason: Option<&str>,
) -> StoreResult<()> {
    query(AssertSqlSafe(insert_versions_sql(1)))
        .bind(tenant.as_str())
        .bind(entry.id.as_str())
        .bind(entry.version as i64)
        .bind(change)
        .bind(reason)
        .bind(entry_columns(entry).snapshot)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Insert entry rows exactly as given (distinct ids, at most `INSERT_CHUNK`), with change
/// sequences from `first_seq` and no vector yet, plus version snapshots tagged `change`
/// for the rows that went in; ids that exist already are left alone (their sequence
/// numbers go unused). Returns the ids inserted.
pub async fn insert_rows(
    tx: &mut Tx,
    tenant: &TenantKey,
    rows: &[&ContextInsight],
    first_seq: i64,
    change: &str,
    reason: Option<&str>,
) -> StoreResult<HashSet<String>> {
    if rows.is_empty() {
        return Ok(HashSet::new());
    }
    let cols: Vec<EntryColumns> = rows.iter().map(|e| entry_columns(e)).collect();
    let mut q = query(AssertSqlSafe(insert_entries_sql(rows.len())));
    for (i, (e, c)) in rows.iter().zip(&cols).enumerate() {
        q = q
            .bind(tenant.as_str())
            .bind(e.id.as_str())
            .bind(c.kind)
            .bind(c.content.as_str())
            .bind(c.attributes.as_deref())
            .bind(c.version)
            .bind(c.status)
            .bind(e.provenance.conversation_id.as_str())
            .bind(c.provenance.as_str())
            .bind(e.superseded_by.as_deref())
            .bind(e.expires_at_ms)
            .bind(e.created_at_ms)
            .bind(e.updated_at_ms)
            .bind(first_seq + i as i64);
    }
    let inserted: Vec<(String,)> = q.fetch_all(&mut *tx).await?;
    let inserted: HashSet<String> = inserted.into_iter().map(|r| r.0).collect();
    let recorded: Vec<_> = rows.iter().zip(&cols).filter(|(e, _)| inserted.contains(&e.id)).collect();
    if recorded.is_empty() {
        return Ok(inserted);
    }
    let now = now_ms();
    let mut q = query(AssertSqlSafe(insert_versions_sql(recorded.len())));
    for (e, c) in recorded {
        q = q
            .bind(tenant.as_str())
            .bind(e.id.as_str())
            .bind(c.version)
            .bind(change)
            .bind(reason)
            .bind(c.snapshot.as_str())
            .bind(now);
    }
    q.execute(&mut *tx).await?;
    Ok(inserted)
}

/// Import entries inside the caller's write transaction: insert those whose id does not
/// exist yet for the tenant, keeping id, version, status and every other field as given,
/// with a history row each (change `import`), committed durably (`Tx::durable_commit`);
/// ids that exist already (or repeat earlier in
/// the slice) are skipped. Active imported entries are stale until the projector embeds
/// them. Returns `(inserted, skipped)`. Entries should be validated first
/// (`context_jobs::entries::validate_entry`).
pub async fn import(tx: &mut Tx, tenant: &TenantKey, entries: &[ContextInsight]) -> StoreResult<(u64, u64)> {
    let mut inserted = 0u64;
    let mut skipped = 0u64;
    let mut seen = HashSet::new();
    if !entries.is_empty() {
        tx.durable_commit().await?;
    }
    for chunk in entries.chunks(INSERT_CHUNK) {
        // Existing ids are found by the primary key as the rows go in (`ON CONFLICT DO
        // NOTHING`), not by a lookup first, which would depend on statistics.
        let fresh: Vec<&ContextInsight> = chunk.iter().filter(|e| seen.insert(e.id.clone())).collect();
        if fresh.is_empty() {
            skipped += chunk.len() as u64;
            continue;
        }
        let first = bump_source(tx, tenant, fresh.len() as i64).await?;
        let added = insert_rows(tx, tenant, &fresh, first, "import", None).await?;
        inserted += added.len() as u64;
        skipped += (chunk.len() - added.len()) as u64;
    }
    Ok((inserted, skipped))
}
