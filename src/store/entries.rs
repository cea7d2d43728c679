//! The entries table family: the row codec, reads (get, history, export pages) and the
//! row-writing macros shared by every writer (put/correct/expire/merge in
//! [`super::entry_writes`], import through [`import_entries!`]).
//!
//! Every write of an entry row takes the next value of the tenant's `source_version`
//! (`context_entry_heads`) as its `change_seq`, and records an immutable snapshot in
//! `context_entry_versions`. The heads row is locked by the bump, so change sequences commit
//! in order — the recall index and the watermark rely on that.

use sqlx::AssertSqlSafe;

use super::{StoreError, StoreResult, now_ms, parse_json_column};
use crate::auth::TenantKey;
use crate::db::Db;
use crate::with_pool;
use context_jobs::contract::{ContextInsight, ContextProvenance};
use context_jobs::entries::{parse_kind, parse_status};

/// Columns of [`EntryRow`], in order.
pub const ENTRY_COLUMNS: &str = "id, kind, content, attributes, version, status, provenance, superseded_by, \
    expires_at_ms, created_at_ms, updated_at_ms";

/// `ENTRY_COLUMNS` of `context_entries` aliased as `e`.
pub const ENTRY_COLUMNS_E: &str = "e.id, e.kind, e.content, e.attributes, e.version, e.status, e.provenance, \
    e.superseded_by, e.expires_at_ms, e.created_at_ms, e.updated_at_ms";

pub type EntryRow =
    (String, String, String, Option<String>, i64, String, String, Option<String>, Option<i64>, i64, i64);

pub fn entry_from_row(row: EntryRow) -> StoreResult<ContextInsight> {
    let (id, kind, content, attributes, version, status, provenance, superseded_by, expires_at_ms, created, updated) =
        row;
    let corrupt = |what: &str| StoreError::Other(anyhow::anyhow!("corrupt entry row {id:?}: {what}"));
    let provenance: ContextProvenance = serde_json::from_str(&provenance).map_err(|_| corrupt("provenance"))?;
    Ok(ContextInsight {
        kind: parse_kind(&kind).ok_or_else(|| corrupt("kind"))?,
        content: serde_json::from_str(&content).map_err(|_| corrupt("content"))?,
        attributes: parse_json_column(attributes)?,
        version: version.max(0) as u64,
        status: parse_status(&status).ok_or_else(|| corrupt("status"))?,
        provenance,
        superseded_by,
        expires_at_ms,
        created_at_ms: created,
        updated_at_ms: updated,
        id,
    })
}

/// The current version of one entry.
pub async fn get(db: &Db, tenant: &TenantKey, id: &str) -> StoreResult<Option<ContextInsight>> {
    let sql = format!("SELECT {ENTRY_COLUMNS} FROM context_entries WHERE tenant = $1 AND id = $2");
    let row: Option<EntryRow> = with_pool!(db, pool => {
        sqlx::query_as(AssertSqlSafe(sql)).bind(tenant.as_str()).bind(id).fetch_optional(pool).await?
    });
    row.map(entry_from_row).transpose()
}

/// Every recorded version of an entry, oldest first: `(change, reason, snapshot)`.
pub async fn history(
    db: &Db,
    tenant: &TenantKey,
    id: &str,
) -> StoreResult<Vec<(String, Option<String>, ContextInsight)>> {
    let rows: Vec<(String, Option<String>, String)> = with_pool!(db, pool => {
        sqlx::query_as(
            "SELECT change, reason, entry FROM context_entry_versions WHERE tenant = $1 AND entry_id = $2 \
             ORDER BY version ASC",
        )
        .bind(tenant.as_str())
        .bind(id)
        .fetch_all(pool)
        .await?
    });
    rows.into_iter()
        .map(|(change, reason, entry)| {
            let entry = serde_json::from_str(&entry)
                .map_err(|e| StoreError::Other(anyhow::anyhow!("corrupt entry version of {id:?}: {e}")))?;
            Ok((change, reason, entry))
        })
        .collect()
}

/// One page of the tenant's current entry rows in id order, after `after_id`. All statuses
/// are included unless `include_expired` is false, which omits `expired` entries and
/// entries whose `expiresAtMs` has passed.
pub async fn export_page(
    db: &Db,
    tenant: &TenantKey,
    include_expired: bool,
    after_id: Option<&str>,
    limit: usize,
) -> StoreResult<Vec<ContextInsight>> {
    let filter = if include_expired {
        "AND $3 = $3"
    } else {
        "AND status <> 'expired' AND (expires_at_ms IS NULL OR expires_at_ms >= $3)"
    };
    let sql = format!(
        "SELECT {ENTRY_COLUMNS} FROM context_entries WHERE tenant = $1 AND id > $2 {filter} ORDER BY id ASC LIMIT $4"
    );
    let rows: Vec<EntryRow> = with_pool!(db, pool => {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(after_id.unwrap_or(""))
            .bind(now_ms())
            .bind(limit as i64)
            .fetch_all(pool)
            .await?
    });
    rows.into_iter().map(entry_from_row).collect()
}

/// The stored form of an entry's columns, computed once per written row.
pub struct EntryColumns {
    pub kind: &'static str,
    pub content: String,
    pub attributes: Option<String>,
    pub version: i64,
    pub status: &'static str,
    pub provenance: String,
    pub snapshot: String,
}

pub fn entry_columns(e: &ContextInsight) -> EntryColumns {
    EntryColumns {
        kind: context_jobs::entries::kind_str(e.kind),
        content: e.content.to_string(),
        attributes: super::json_column(&e.attributes),
        version: e.version.min(i64::MAX as u64) as i64,
        status: context_jobs::entries::status_str(e.status),
        provenance: serde_json::to_string(&e.provenance).unwrap_or_default(),
        snapshot: serde_json::to_string(e).unwrap_or_default(),
    }
}

/// Rows per multi-row INSERT: 14 parameters a row stays far below both engines' limits.
pub const INSERT_CHUNK: usize = 200;

pub const BUMP_SOURCE_SQL: &str = "INSERT INTO context_entry_heads (tenant, source_version) VALUES ($1, $2) \
     ON CONFLICT (tenant) DO UPDATE SET source_version = context_entry_heads.source_version + $2 \
     RETURNING source_version";

pub fn insert_entries_sql(rows: usize) -> String {
    format!(
        "INSERT INTO context_entries (tenant, id, kind, content, attributes, version, status, conversation_id, \
         provenance, superseded_by, expires_at_ms, created_at_ms, updated_at_ms, change_seq) \
         VALUES {} ON CONFLICT (tenant, id) DO NOTHING RETURNING id",
        super::row_placeholders(1, rows, 14)
    )
}

pub fn insert_versions_sql(rows: usize) -> String {
    format!(
        "INSERT INTO context_entry_versions (tenant, entry_id, version, change, reason, entry, recorded_at_ms) \
         VALUES {} ON CONFLICT (tenant, entry_id, version) DO NOTHING",
        super::row_placeholders(1, rows, 7)
    )
}

/// In a write transaction on `$conn` (`&mut *tx`): take `n` change sequences for the
/// tenant. Evaluates to `Result<i64 /* the first */, sqlx::Error>`.
#[doc(hidden)]
#[macro_export]
macro_rules! bump_entry_source {
    ($conn:expr, $tenant:expr, $n:expr) => {{
        let n: i64 = $n;
        let last: Result<i64, sqlx::Error> =
            sqlx::query_scalar($crate::store::entries::BUMP_SOURCE_SQL).bind($tenant).bind(n).fetch_one($conn).await;
        last.map(|last| last - n + 1)
    }};
}

/// Insert entry rows exactly as given (`$rows`: `&[&ContextInsight]`, distinct ids, at most
/// `INSERT_CHUNK`), with change sequences from `$first_seq` and no vector yet, plus version
/// snapshots tagged `$change` for the rows that went in; ids that exist already are left
/// alone (their sequence numbers go unused). Evaluates to `Result<HashSet<String> /* the
/// inserted ids */, sqlx::Error>`.
#[doc(hidden)]
#[macro_export]
macro_rules! insert_entry_rows {
    ($conn:expr, $tenant:expr, $rows:expr, $first_seq:expr, $change:expr, $reason:expr) => {
        async {
            let conn = $conn;
            let tenant: &str = $tenant;
            let rows: &[&context_jobs::contract::ContextInsight] = $rows;
            let first_seq: i64 = $first_seq;
            let change: &str = $change;
            let reason: Option<&str> = $reason;
            if rows.is_empty() {
                return Ok::<std::collections::HashSet<String>, sqlx::Error>(Default::default());
            }
            let cols: Vec<$crate::store::entries::EntryColumns> =
                rows.iter().map(|e| $crate::store::entries::entry_columns(e)).collect();
            let sql = $crate::store::entries::insert_entries_sql(rows.len());
            let mut q = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql));
            for (i, (e, c)) in rows.iter().zip(&cols).enumerate() {
                q = q
                    .bind(tenant)
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
            let inserted: std::collections::HashSet<String> = q.fetch_all(&mut *conn).await?.into_iter().collect();
            let recorded: Vec<_> = rows.iter().zip(&cols).filter(|(e, _)| inserted.contains(&e.id)).collect();
            if recorded.is_empty() {
                return Ok(inserted);
            }
            let now = $crate::store::now_ms();
            let sql = $crate::store::entries::insert_versions_sql(recorded.len());
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
            for (e, c) in recorded {
                q = q
                    .bind(tenant)
                    .bind(e.id.as_str())
                    .bind(c.version)
                    .bind(change)
                    .bind(reason)
                    .bind(c.snapshot.as_str())
                    .bind(now);
            }
            q.execute(&mut *conn).await?;
            Ok(inserted)
        }
    };
}

/// Inside the caller's write transaction (`$tx` = `&mut *tx`, either engine): insert the
/// entries whose id does not exist yet for the tenant, keeping id, version, status and every
/// other field as given, with a history row each (change `import`); ids that exist already
/// (or repeat earlier in the slice) are skipped. Active imported entries are stale until the
/// projector embeds them. Evaluates to `Result<(u64 /* inserted */, u64 /* skipped */),
/// sqlx::Error>`. Entries should be validated first (`context_jobs::entries::validate_entry`).
#[macro_export]
macro_rules! import_entries {
    ($tx:expr, $tenant:expr, $entries:expr) => {
        async {
            let conn = $tx;
            let tenant: &str = $tenant;
            let entries: &[context_jobs::contract::ContextInsight] = $entries;
            let mut inserted = 0u64;
            let mut skipped = 0u64;
            let mut seen = std::collections::HashSet::new();
            for chunk in entries.chunks($crate::store::entries::INSERT_CHUNK) {
                // Existing ids are found by the primary key as the rows go in (`ON CONFLICT
                // DO NOTHING`), not by a lookup first, which would depend on statistics.
                let fresh: Vec<&context_jobs::contract::ContextInsight> =
                    chunk.iter().filter(|e| seen.insert(e.id.clone())).collect();
                if fresh.is_empty() {
                    skipped += chunk.len() as u64;
                    continue;
                }
                let first = $crate::bump_entry_source!(&mut *conn, tenant, fresh.len() as i64)?;
                let added = $crate::insert_entry_rows!(&mut *conn, tenant, &fresh, first, "import", None).await?;
                inserted += added.len() as u64;
                skipped += (chunk.len() - added.len()) as u64;
            }
            Ok::<(u64, u64), sqlx::Error>((inserted, skipped))
        }
        .await
    };
}
