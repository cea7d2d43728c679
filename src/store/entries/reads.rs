//! Reads of entries: one entry, a batch by id (recall's rows), its history, an export's
//! pages.

use sqlx::AssertSqlSafe;

use super::{ENTRY_COLUMNS, EntryRow, entry_from_row};
use crate::store::artifacts::export_pages::PAGE_BYTES;
use crate::store::engine::Query;
use crate::store::{Db, StoreError, StoreResult, byte_length, now_ms, placeholders, query};
use context_jobs::contract::{ContextInsight, ExportFilter};
use context_jobs::entries::status_str;
use context_jobs::ids::TenantKey;

/// The current version of one entry.
pub async fn get(db: &Db, tenant: &TenantKey, id: &str) -> StoreResult<Option<ContextInsight>> {
    let sql = format!("SELECT {ENTRY_COLUMNS} FROM context_entries WHERE tenant = $1 AND id = $2");
    let row: Option<EntryRow> = query(AssertSqlSafe(sql)).bind(tenant.as_str()).bind(id).fetch_optional(db).await?;
    row.map(entry_from_row).transpose()
}

/// The current versions of the entries `ids` (those that exist), in no particular order.
pub async fn get_many(db: &Db, tenant: &TenantKey, ids: &[String]) -> StoreResult<Vec<ContextInsight>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT {ENTRY_COLUMNS} FROM context_entries WHERE tenant = $1 AND id IN ({})",
        placeholders(2, ids.len())
    );
    let q = query(AssertSqlSafe(sql)).bind(tenant.as_str());
    let rows: Vec<EntryRow> = ids.iter().fold(q, |q, id| q.bind(id)).fetch_all(db).await?;
    rows.into_iter().map(entry_from_row).collect()
}

/// Every recorded version of an entry, oldest first: `(change, reason, snapshot)`.
pub async fn history(
    db: &Db,
    tenant: &TenantKey,
    id: &str,
) -> StoreResult<Vec<(String, Option<String>, ContextInsight)>> {
    let rows: Vec<(String, Option<String>, String)> = query(
        "SELECT change, reason, entry FROM context_entry_versions WHERE tenant = $1 AND entry_id = $2 \
         ORDER BY version ASC",
    )
    .bind(tenant.as_str())
    .bind(id)
    .fetch_all(db)
    .await?;
    rows.into_iter()
        .map(|(change, reason, entry)| {
            let entry = serde_json::from_str(&entry)
                .map_err(|e| StoreError::Other(anyhow::anyhow!("corrupt entry version of {id:?}: {e}")))?;
            Ok((change, reason, entry))
        })
        .collect()
}

/// One page of the tenant's current entry rows in id order, after `after_id`: up to
/// `limit` rows, and fewer once their JSON text reaches `PAGE_BYTES` (an entry may hold
/// ~80 KiB: 5,000 of them were 400 MB read at once); empty when none is left. All statuses
/// are included unless `include_expired` is false, which omits `expired` entries and
/// entries whose `expiresAtMs` has passed.
pub async fn export_page(
    db: &Db,
    tenant: &TenantKey,
    include_expired: bool,
    only: &ExportFilter,
    after_id: Option<&str>,
    limit: usize,
) -> StoreResult<Vec<ContextInsight>> {
    let filter = export_filter(include_expired, 4);
    let only = crate::store::artifacts::export_filter::predicate(db.engine(), tenant, only);
    // First the ids and sizes (the sizes from the stored lengths, without the text), then
    // the rows up to the one that reaches the byte budget.
    let length = byte_length;
    let size = format!(
        "CAST({} + COALESCE({}, 0) + {} AS BIGINT)",
        length("content"),
        length("attributes"),
        length("provenance")
    );
    let sizes_sql = format!(
        "SELECT id, {size} FROM context_entries WHERE tenant = $1 AND id > $2{filter}{only} ORDER BY id ASC LIMIT $3"
    );
    let rows_sql = format!(
        "SELECT {ENTRY_COLUMNS} FROM context_entries WHERE tenant = $1 AND id > $2 AND id <= $3{filter}{only} \
         ORDER BY id ASC"
    );
    // One moment for both reads' expiry.
    let now = now_ms();
    let mut after = after_id.unwrap_or("").to_string();
    loop {
        let q = query(AssertSqlSafe(sizes_sql.as_str())).bind(tenant.as_str()).bind(after.as_str()).bind(limit as i64);
        let sizes: Vec<(String, i64)> = unexpired(q, include_expired, now).fetch_all(db).await?;
        let mut bytes = 0usize;
        let Some(last) = sizes
            .iter()
            .position(|(_, n)| {
                bytes += (*n).max(0) as usize;
                bytes >= PAGE_BYTES
            })
            .or_else(|| sizes.len().checked_sub(1))
        else {
            return Ok(Vec::new());
        };
        let until = sizes[last].0.as_str();
        let q = query(AssertSqlSafe(rows_sql.as_str())).bind(tenant.as_str()).bind(after.as_str()).bind(until);
        let rows: Vec<EntryRow> = unexpired(q, include_expired, now).fetch_all(db).await?;
        if !rows.is_empty() {
            return rows.into_iter().map(entry_from_row).collect();
        }
        // Every entry of that range left the export between the two reads (expired, or its
        // conversation deleted under an agent filter): an empty page would end the export,
        // so read on after it.
        after = until.to_string();
    }
}

/// `export_filter`'s binds, when it filters.
fn unexpired(q: Query<'_>, include_expired: bool, now: i64) -> Query<'_> {
    if include_expired {
        q
    } else {
        q.bind(status_str(context_jobs::contract::ContextInsightStatus::Expired)).bind(now)
    }
}

/// How many entries an export will write (its expected total, with the messages).
pub async fn export_count(db: &Db, tenant: &TenantKey, include_expired: bool, only: &ExportFilter) -> StoreResult<i64> {
    let filter = export_filter(include_expired, 2);
    let only = crate::store::artifacts::export_filter::predicate(db.engine(), tenant, only);
    let sql = format!("SELECT COUNT(*) FROM context_entries WHERE tenant = $1{filter}{only}");
    let mut q = query(AssertSqlSafe(sql)).bind(tenant.as_str());
    if !include_expired {
        q = q.bind(status_str(context_jobs::contract::ContextInsightStatus::Expired)).bind(now_ms());
    }
    Ok(q.fetch_scalar(db).await?)
}

/// The entries an export leaves out unless `include_expired`: expired by status or by time
/// (two parameters from `$start`: the expired status, now).
fn export_filter(include_expired: bool, start: usize) -> String {
    if include_expired {
        String::new()
    } else {
        format!(" AND status <> ${start} AND (expires_at_ms IS NULL OR expires_at_ms >= ${})", start + 1)
    }
}
