//! The vector projection's reads: walking a tenant's active entries in change order (the
//! projector's and the rebuild's pages), the index watermark, coverage, the stored vectors
//! recall rescores with, and the change feeds the recall index syncs from. Writes are in
//! [`super::writes`].
//!
//! Staleness is one number per tenant, `context_entry_heads.projected_seq`: every active
//! entry whose `change_seq` is at or below it has a vector of its current version. It holds
//! because every entry write takes the tenant's next change sequence under the heads row
//! lock (committed sequences form a prefix) and a rewritten entry therefore always moves
//! above everything embedded so far. The stale set is `change_seq > projected_seq`: a
//! range of the `(tenant, change_seq)` index, with nothing to mark per entry.

use sqlx::AssertSqlSafe;

use crate::store::artifacts::export_pages::PAGE_BYTES;
use crate::store::{Db, Engine, StoreResult, byte_length, placeholders, query};
use context_jobs::contract::{ContextInsightStatus, IndexWatermark};
use context_jobs::entries::status_str;
use context_jobs::ids::TenantKey;
use context_jobs::vector_codec::decode_vector;

fn active() -> &'static str {
    status_str(ContextInsightStatus::Active)
}

/// An entry version to embed (of the page's or batch's tenant).
#[derive(Debug, Clone)]
pub struct ToEmbed {
    pub id: String,
    pub version: i64,
    /// The entry's `content` JSON.
    pub content: String,
}

/// One page of a walk over a tenant's active entries in change order.
#[derive(Debug, Default)]
pub struct WalkPage {
    pub items: Vec<ToEmbed>,
    /// The change sequence where the next page starts (exclusive).
    pub next_after: i64,
    /// Every active entry with a change sequence above the walk's `after` and at or below
    /// this is in `items`: once their vectors are stored, the watermark may move here.
    pub covered_through: i64,
    /// Fewer rows than asked: the walk has reached the tenant's head.
    pub last: bool,
    /// The tenant's entry head (`source_version`), read before the page: every entry
    /// write moves it, so a writer that finds it unchanged knows the page is current.
    pub read_at: i64,
}

type WalkRow = (String, i64, i64, String);

/// The next page of active entries after change sequence `after`, in change order.
///
/// The head is read first: every sequence up to it was committed before the page's own
/// snapshot, so a short page holds every active entry up to the head — including the
/// inactive stretches a walk never sees, which the watermark must still pass.
pub async fn walk_page(db: &Db, tenant: &TenantKey, after: i64, limit: i64) -> StoreResult<WalkPage> {
    let head: Option<i64> = query("SELECT source_version FROM context_entry_heads WHERE tenant = $1")
        .bind(tenant.as_str())
        .fetch_optional_scalar(db)
        .await?;
    let rows: Vec<WalkRow> = query(
        "SELECT id, version, change_seq, content FROM context_entries \
         WHERE tenant = $1 AND change_seq > $2 AND status = $4 ORDER BY change_seq LIMIT $3",
    )
    .bind(tenant.as_str())
    .bind(after)
    .bind(limit)
    .bind(active())
    .fetch_all(db)
    .await?;
    let last = (rows.len() as i64) < limit;
    let last_seq = rows.last().map_or(after, |r| r.2);
    let read_at = head.unwrap_or(0);
    let covered_through = if last { last_seq.max(read_at) } else { last_seq };
    let items = rows.into_iter().map(|(id, version, _, content)| ToEmbed { id, version, content }).collect();
    Ok(WalkPage { items, next_after: last_seq, covered_through, last, read_at })
}

/// A tenant whose watermark is behind its head — the one projected longest ago — and its
/// watermark (the projector's next walk).
pub async fn stale_tenant(db: &Db, skip: &[TenantKey]) -> StoreResult<Option<(TenantKey, i64)>> {
    let rows: Vec<(String, i64)> = query(AssertSqlSafe(format!(
        "SELECT tenant, projected_seq FROM context_entry_heads WHERE projected_seq < source_version \
         ORDER BY projected_at_ms, tenant LIMIT {}",
        skip.len() + 1
    )))
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .find(|(tenant, _)| !skip.iter().any(|s| s.as_str() == tenant))
        .map(|(tenant, seq)| (TenantKey::from_stored(tenant), seq)))
}

/// The tenant's watermark: every active entry at or below it has a current vector.
pub async fn projected_seq(db: &Db, tenant: &TenantKey) -> StoreResult<i64> {
    let seq: Option<i64> = query("SELECT projected_seq FROM context_entry_heads WHERE tenant = $1")
        .bind(tenant.as_str())
        .fetch_optional_scalar(db)
        .await?;
    Ok(seq.unwrap_or(0))
}

/// How many active entries a walk from `after` will embed.
pub async fn active_after(db: &Db, tenant: &TenantKey, after: i64) -> StoreResult<i64> {
    Ok(query("SELECT COUNT(*) FROM context_entries WHERE tenant = $1 AND change_seq > $2 AND status = $3")
        .bind(tenant.as_str())
        .bind(after)
        .bind(active())
        .fetch_scalar(db)
        .await?)
}

/// The tenant's index watermark: `sourceVersion` counts entry writes; `projectedVersion`
/// is the highest change sequence up to which every active entry has a current vector;
/// `lag` their difference; `updatedAtMs` when a vector was last written for the tenant.
pub async fn watermark(db: &Db, tenant: &TenantKey) -> StoreResult<IndexWatermark> {
    let head: Option<(i64, i64, i64)> =
        query("SELECT source_version, projected_seq, projected_at_ms FROM context_entry_heads WHERE tenant = $1")
            .bind(tenant.as_str())
            .fetch_optional(db)
            .await?;
    let (source, projected, updated_at_ms) = head.unwrap_or((0, 0, 0));
    let projected = projected.clamp(0, source.max(0));
    Ok(IndexWatermark {
        projected_version: projected as u64,
        source_version: source as u64,
        lag: (source - projected) as u64,
        updated_at_ms,
    })
}

/// Active entries and how many of them have exactly one vector of their current version
/// (the rebuild's postcondition; used by tests and the docs' checks).
pub async fn coverage(db: &Db, tenant: &TenantKey) -> StoreResult<(i64, i64)> {
    let active_count: i64 = query("SELECT COUNT(*) FROM context_entries WHERE tenant = $1 AND status = $2")
        .bind(tenant.as_str())
        .bind(active())
        .fetch_scalar(db)
        .await?;
    let covered: i64 = query(
        "SELECT COUNT(*) FROM context_entries e JOIN context_entry_vectors v \
         ON v.tenant = e.tenant AND v.entry_id = e.id AND v.version = e.version \
         WHERE e.tenant = $1 AND e.status = $2",
    )
    .bind(tenant.as_str())
    .bind(active())
    .fetch_scalar(db)
    .await?;
    Ok((active_count, covered))
}

/// `(id, version, vector)` of the stored vectors of `ids` under `model`, for rescoring.
pub async fn vectors_of(
    db: &Db,
    tenant: &TenantKey,
    model: &str,
    ids: &[String],
) -> StoreResult<Vec<(String, i64, Vec<f32>)>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT entry_id, version, vector, dim FROM context_entry_vectors \
         WHERE tenant = $1 AND model = $2 AND entry_id IN ({})",
        placeholders(3, ids.len())
    );
    let q = query(AssertSqlSafe(sql)).bind(tenant.as_str()).bind(model);
    let rows: Vec<(String, i64, Vec<u8>, i32)> = ids.iter().fold(q, |q, id| q.bind(id)).fetch_all(db).await?;
    Ok(rows
        .into_iter()
        .filter_map(|(id, version, blob, dim)| Some((id, version, decode_vector(&blob, dim as usize)?)))
        .collect())
}

/// An entry row as the recall index takes it: `(id, version, status, expires_at_ms,
/// conversation_id, updated_at_ms, content, change_seq)`.
pub type EntryChange = (String, i64, String, Option<i64>, String, i64, String, i64);

/// A vector as the recall index takes it: `(entry_id, version, vector, dim, written_seq)`.
pub type VectorWrite = (String, i64, Vec<u8>, i32, i64);

/// One page of a recall index's sync, in sequence order: at most the `limit` rows asked
/// for, and fewer once their `content` or `vector` bytes reach [`PAGE_BYTES`] (an entry
/// may hold ~80 KiB: 5,000 of them were 400 MB read at once). `more`: the page was full
/// or cut, so read on after its last row.
pub struct SyncPage<T> {
    pub rows: Vec<T>,
    pub more: bool,
}

/// `columns` of the first `limit` rows of `from_where` in `order`, up to the row at which
/// their running total of `size` (bytes) reaches `PAGE_BYTES` — that row included — and
/// that total as a last column; one statement (one snapshot), whose rows past the cut are
/// never sent. The engines take it differently, each at its cheapest (the recall bench's
/// index load at 100,000 entries):
/// - PostgreSQL totals the page's rows as they are: a large value stays a pointer to its
///   TOAST rows, and `octet_length` reads its header. Totalling the sizes apart and then
///   reading the kept range again cost ~30 % more (two passes over the heap).
/// - SQLite would copy each of the page's rows whole into a temporary table to total them,
///   every value read in full: for 5,000 rows of ~80 KiB, 400 MB per page again. It totals
///   the sizes apart (`octet_length` reads a value's header) and then reads the kept range.
fn sync_page_sql(engine: Engine, columns: &str, from_where: &str, order: &str, size: &str) -> String {
    let size = byte_length(size);
    match engine {
        Engine::Postgres => format!(
            "SELECT {columns}, running FROM (SELECT {columns}, \
             CAST(SUM({size}) OVER (ORDER BY {order} ROWS UNBOUNDED PRECEDING) AS BIGINT) AS running, \
             CAST({size} AS BIGINT) AS size FROM (SELECT {columns} {from_where} ORDER BY {order} LIMIT $3) AS page) \
             AS sized WHERE running - size < {PAGE_BYTES} ORDER BY {order}"
        ),
        Engine::Sqlite => format!(
            "WITH sized AS (SELECT {order} AS seq, CAST({size} AS BIGINT) AS size {from_where} ORDER BY {order} LIMIT $3), \
             kept AS (SELECT seq, running FROM (SELECT seq, size, \
             CAST(SUM(size) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) AS BIGINT) AS running FROM sized) AS totals \
             WHERE running - size < {PAGE_BYTES}), \
             cut AS (SELECT MAX(seq) AS until, MAX(running) AS running FROM kept) \
             SELECT {columns}, (SELECT running FROM cut) {from_where} AND {order} <= (SELECT until FROM cut) \
             ORDER BY {order}"
        ),
    }
}

/// Split off each row's running total: the page, and whether to read on after it.
fn sync_page<T>(rows: Vec<(T, i64)>, limit: i64) -> SyncPage<T> {
    let more = rows.len() as i64 >= limit || rows.last().is_some_and(|(_, running)| *running >= PAGE_BYTES as i64);
    SyncPage { rows: rows.into_iter().map(|(row, _)| row).collect(), more }
}

/// An [`EntryChange`] and its page's running byte total.
type RunningEntryChange = (String, i64, String, Option<i64>, String, i64, String, i64, i64);

const ENTRY_CHANGE_COLUMNS: &str =
    "id, version, status, expires_at_ms, conversation_id, updated_at_ms, content, change_seq";

/// The tenant's entry rows written after change sequence `after`, in change order (the
/// recall index's sync: one range of the `(tenant, change_seq)` index), a bounded page.
pub async fn entries_changed_after(
    db: &Db,
    tenant: &TenantKey,
    after: i64,
    limit: i64,
) -> StoreResult<SyncPage<EntryChange>> {
    let sql = sync_page_sql(
        db.engine(),
        ENTRY_CHANGE_COLUMNS,
        "FROM context_entries WHERE tenant = $1 AND change_seq > $2",
        "change_seq",
        "content",
    );
    let rows: Vec<RunningEntryChange> =
        query(AssertSqlSafe(sql)).bind(tenant.as_str()).bind(after).bind(limit).fetch_all(db).await?;
    let rows = rows.into_iter().map(|(a, b, c, d, e, f, g, h, running)| ((a, b, c, d, e, f, g, h), running)).collect();
    Ok(sync_page(rows, limit))
}

/// The tenant's vectors under `model` written after vector sequence `after`, in write
/// order, a bounded page.
pub async fn vectors_written_after(
    db: &Db,
    tenant: &TenantKey,
    model: &str,
    after: i64,
    limit: i64,
) -> StoreResult<SyncPage<VectorWrite>> {
    let sql = sync_page_sql(
        db.engine(),
        "entry_id, version, vector, dim, written_seq",
        "FROM context_entry_vectors WHERE tenant = $1 AND written_seq > $2 AND model = $4",
        "written_seq",
        "vector",
    );
    let rows: Vec<(String, i64, Vec<u8>, i32, i64, i64)> =
        query(AssertSqlSafe(sql)).bind(tenant.as_str()).bind(after).bind(limit).bind(model).fetch_all(db).await?;
    let rows = rows.into_iter().map(|(a, b, c, d, e, running)| ((a, b, c, d, e), running)).collect();
    Ok(sync_page(rows, limit))
}

/// Up to `limit` tenants with entries, most recently projected first: the recall indexes
/// an API process loads at start (`recall::warm`). One row per tenant in the heads table.
pub async fn recently_projected_tenants(db: &Db, limit: usize) -> StoreResult<Vec<TenantKey>> {
    let rows: Vec<(String,)> = query(
        "SELECT tenant FROM context_entry_heads WHERE source_version > 0 \
         ORDER BY projected_at_ms DESC, source_version DESC, tenant LIMIT $1",
    )
    .bind(limit as i64)
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|(t,)| TenantKey::from_stored(t)).collect())
}
