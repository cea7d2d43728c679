//! The vector projection's tables: finding entries to embed (the projector's stale set,
//! the rebuild's keyset pages), writing vectors fenced by entry version, and the index
//! watermark.
//!
//! A vector is written only if its entry is still active at the embedded version (a
//! compare-and-set in the same statement batch), so a slow embedder can never attach an
//! old text's vector to a newer version. Each write takes `vector_seq` values from the
//! tenant's heads row, which orders vector writes for the recall index's sync.

use sqlx::AssertSqlSafe;

use super::{StoreResult, placeholders, row_placeholders};
use crate::auth::TenantKey;
use crate::db::Db;
use crate::with_pool;
use context_jobs::contract::IndexWatermark;

/// An entry version to embed.
#[derive(Debug, Clone)]
pub struct ToEmbed {
    pub tenant: String,
    pub id: String,
    pub version: i64,
    /// The entry's `content` JSON.
    pub content: String,
}

/// The SQL predicate of "active and its vector is not of its current version" — the one
/// owner of staleness (it is also the partial index's predicate).
pub const STALE: &str = "status = 'active' AND projected_version <> version";

/// Stale entries of any tenant, tenant by tenant, oldest change first (the projector).
pub async fn stale_batch(db: &Db, limit: usize) -> StoreResult<Vec<ToEmbed>> {
    let sql = format!(
        "SELECT tenant, id, version, content FROM context_entries WHERE {STALE} ORDER BY tenant, change_seq LIMIT $1"
    );
    let rows: Vec<(String, String, i64, String)> = with_pool!(db, pool => {
        sqlx::query_as(AssertSqlSafe(sql)).bind(limit as i64).fetch_all(pool).await?
    });
    Ok(rows.into_iter().map(|(tenant, id, version, content)| ToEmbed { tenant, id, version, content }).collect())
}

fn rebuild_filter(force: bool) -> String {
    if force { "status = 'active'".to_string() } else { STALE.to_string() }
}

/// How many entries a rebuild will embed: every active entry (`force`) or the stale ones.
pub async fn rebuild_total(db: &Db, tenant: &str, force: bool) -> StoreResult<i64> {
    let sql = format!("SELECT COUNT(*) FROM context_entries WHERE tenant = $1 AND {}", rebuild_filter(force));
    Ok(with_pool!(db, pool => sqlx::query_scalar(AssertSqlSafe(sql)).bind(tenant).fetch_one(pool).await?))
}

/// The next rebuild page in id order after `after_id`.
pub async fn rebuild_page(db: &Db, tenant: &str, force: bool, after_id: &str, limit: i64) -> StoreResult<Vec<ToEmbed>> {
    let sql = format!(
        "SELECT id, version, content FROM context_entries WHERE tenant = $1 AND id > $2 AND {} ORDER BY id LIMIT $3",
        rebuild_filter(force)
    );
    let rows: Vec<(String, i64, String)> = with_pool!(db, pool => {
        sqlx::query_as(AssertSqlSafe(sql)).bind(tenant).bind(after_id).bind(limit).fetch_all(pool).await?
    });
    Ok(rows
        .into_iter()
        .map(|(id, version, content)| ToEmbed { tenant: tenant.to_string(), id, version, content })
        .collect())
}

/// Rows per vector-writing statement (8 parameters a row).
pub const VECTOR_CHUNK: usize = 500;

pub const BUMP_VECTOR_SEQ_SQL: &str = "INSERT INTO context_entry_heads (tenant, vector_seq, projected_at_ms) VALUES ($1, $2, $3) \
     ON CONFLICT (tenant) DO UPDATE SET vector_seq = context_entry_heads.vector_seq + $2, projected_at_ms = $3 \
     RETURNING vector_seq";

/// Mark `n` (id, version) pairs — parameters `$2, $3, …` — projected where the entry is
/// still active at that version; returns the ids that matched. Written as an `IN` list
/// plus a `CASE` rather than a join with `VALUES`: the `IN` list is an index condition on
/// the primary key whatever the statistics say (a freshly imported, never analysed table
/// once made PostgreSQL nest-loop a VALUES join over the whole tenant).
pub fn mark_projected_sql(n: usize) -> String {
    let ids: Vec<String> = (0..n).map(|i| format!("${}", 2 + 2 * i)).collect();
    let arms: String = (0..n).map(|i| format!(" WHEN ${} THEN ${}", 2 + 2 * i, 3 + 2 * i)).collect();
    format!(
        "UPDATE context_entries SET projected_version = version WHERE tenant = $1 AND status = 'active' \
         AND id IN ({}) AND version = CASE id{arms} END RETURNING id",
        ids.join(", ")
    )
}

pub fn upsert_vectors_sql(n: usize) -> String {
    format!(
        "INSERT INTO context_entry_vectors (tenant, entry_id, version, model, dim, vector, written_seq, written_at_ms) \
         VALUES {} ON CONFLICT (tenant, entry_id) DO UPDATE SET version = excluded.version, model = excluded.model, \
         dim = excluded.dim, vector = excluded.vector, written_seq = excluded.written_seq, written_at_ms = excluded.written_at_ms",
        row_placeholders(1, n, 8)
    )
}

/// Inside a write transaction on `$conn` (`&mut *tx`): store the vectors of `$items`
/// (`&[(&ToEmbed, Vec<f32>)]`, one tenant, at most `VECTOR_CHUNK`) for entries still
/// active at the embedded version. Evaluates to `Result<u64 /* written */, sqlx::Error>`.
#[macro_export]
macro_rules! write_vectors {
    ($conn:expr, $tenant:expr, $items:expr, $model:expr) => {
        async {
            let conn = $conn;
            let tenant: &str = $tenant;
            let items: &[(&$crate::store::vectors::ToEmbed, Vec<f32>)] = $items;
            let model: &str = $model;
            if items.is_empty() {
                return Ok::<u64, sqlx::Error>(0);
            }
            let now = $crate::store::now_ms();
            let last: i64 = sqlx::query_scalar($crate::store::vectors::BUMP_VECTOR_SEQ_SQL)
                .bind(tenant)
                .bind(items.len() as i64)
                .bind(now)
                .fetch_one(&mut *conn)
                .await?;
            let first = last - items.len() as i64 + 1;
            let mut q = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(
                $crate::store::vectors::mark_projected_sql(items.len()),
            ))
            .bind(tenant);
            for (e, _) in items {
                q = q.bind(e.id.as_str()).bind(e.version);
            }
            let current: std::collections::HashSet<String> = q.fetch_all(&mut *conn).await?.into_iter().collect();
            let kept: Vec<&(&$crate::store::vectors::ToEmbed, Vec<f32>)> =
                items.iter().filter(|(e, _)| current.contains(&e.id)).collect();
            if kept.is_empty() {
                return Ok(0);
            }
            let mut q = sqlx::query(sqlx::AssertSqlSafe($crate::store::vectors::upsert_vectors_sql(kept.len())));
            for (i, (e, v)) in kept.iter().enumerate() {
                q = q
                    .bind(tenant)
                    .bind(e.id.as_str())
                    .bind(e.version)
                    .bind(model)
                    .bind(v.len() as i64)
                    .bind(context_jobs::embed::encode_vector(v))
                    .bind(first + i as i64)
                    .bind(now);
            }
            q.execute(&mut *conn).await?;
            Ok(kept.len() as u64)
        }
    };
}

/// The tenant's index watermark: `sourceVersion` counts entry writes; `projectedVersion`
/// is the highest change sequence up to which every active entry has a current vector;
/// `lag` their difference; `updatedAtMs` when a vector was last written for the tenant.
pub async fn watermark(db: &Db, tenant: &TenantKey) -> StoreResult<IndexWatermark> {
    let sql = format!("SELECT MIN(change_seq) FROM context_entries WHERE tenant = $1 AND {STALE}");
    let (head, oldest_stale): (Option<(i64, i64)>, Option<i64>) = with_pool!(db, pool => {
        let head = sqlx::query_as("SELECT source_version, projected_at_ms FROM context_entry_heads WHERE tenant = $1")
            .bind(tenant.as_str())
            .fetch_optional(pool)
            .await?;
        let oldest = sqlx::query_scalar(AssertSqlSafe(sql)).bind(tenant.as_str()).fetch_one(pool).await?;
        (head, oldest)
    });
    let (source, updated_at_ms) = head.unwrap_or((0, 0));
    let projected = oldest_stale.map(|s| s - 1).unwrap_or(source).clamp(0, source);
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
    with_pool!(db, pool => {
        let active: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM context_entries WHERE tenant = $1 AND status = 'active'")
            .bind(tenant.as_str())
            .fetch_one(pool)
            .await?;
        let covered: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM context_entries e JOIN context_entry_vectors v \
             ON v.tenant = e.tenant AND v.entry_id = e.id AND v.version = e.version \
             WHERE e.tenant = $1 AND e.status = 'active'",
        )
        .bind(tenant.as_str())
        .fetch_one(pool)
        .await?;
        Ok((active, covered))
    })
}

/// `(version, vector)` of the stored vectors of `ids` under `model`, for rescoring.
pub async fn vectors_of(
    db: &Db,
    tenant: &TenantKey,
    model: &str,
    ids: &[String],
) -> StoreResult<Vec<(String, i64, Vec<u8>)>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT entry_id, version, vector FROM context_entry_vectors WHERE tenant = $1 AND model = $2 AND entry_id IN ({})",
        placeholders(3, ids.len())
    );
    Ok(with_pool!(db, pool => {
        let mut q = sqlx::query_as(AssertSqlSafe(sql)).bind(tenant.as_str()).bind(model);
        for id in ids {
            q = q.bind(id.as_str());
        }
        q.fetch_all(pool).await?
    }))
}
