//! The vector projection's tables: finding entries to embed (the projector's stale set,
//! the rebuild's keyset pages), writing vectors fenced by entry version, and the index
//! watermark.
//!
//! A vector is written only if its entry is still active at the embedded version (a
//! compare-and-set in the same statement), so a slow embedder can never attach an old
//! text's vector to a newer version, and never over a newer version's vector. Each write takes `vector_seq` values from the
//! tenant's heads row, which orders vector writes for the recall index's sync.

use sqlx::AssertSqlSafe;

use super::{StoreResult, placeholders};
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

pub const BUMP_VECTOR_SEQ_SQL: &str = "INSERT INTO context_entry_heads (tenant, vector_seq, projected_at_ms) VALUES ($1, $2, $3) \
     ON CONFLICT (tenant) DO UPDATE SET vector_seq = context_entry_heads.vector_seq + $2, projected_at_ms = $3 \
     RETURNING vector_seq";

/// Never replace a vector of a newer entry version with an older one (a slow batch
/// finishing after a faster one that embedded a correction).
const UPSERT_VECTOR: &str = "ON CONFLICT (tenant, entry_id) DO UPDATE SET version = excluded.version, \
     model = excluded.model, dim = excluded.dim, vector = excluded.vector, written_seq = excluded.written_seq, \
     written_at_ms = excluded.written_at_ms WHERE context_entry_vectors.version <= excluded.version";

/// PostgreSQL: the whole batch as arrays in one statement (one plan, four parameters,
/// binary-encoded vectors). Only entries still active at the embedded version get a
/// vector; those not yet marked projected are marked in the same statement.
fn write_batch_pg_sql() -> String {
    format!(
        "WITH input AS (SELECT * FROM unnest($2::text[], $3::bigint[], $4::bytea[]) WITH ORDINALITY AS u(id, version, vector, n)), \
         current AS (SELECT i.id, i.version, i.vector, i.n, e.projected_version FROM input i JOIN context_entries e \
                     ON e.tenant = $1 AND e.id = i.id AND e.version = i.version AND e.status = 'active'), \
         marked AS (UPDATE context_entries e SET projected_version = c.version FROM current c \
                    WHERE e.tenant = $1 AND e.id = c.id AND e.version = c.version AND c.projected_version <> c.version) \
         INSERT INTO context_entry_vectors (tenant, entry_id, version, model, dim, vector, written_seq, written_at_ms) \
         SELECT $1, id, version, $5, $6, vector, $7 + n, $8 FROM current {UPSERT_VECTOR}"
    )
}

/// SQLite: rows per statement (8 parameters a row, well under SQLite's 32,766).
const SQLITE_CHUNK: usize = 500;

/// Mark `n` (id, version) pairs — parameters `$2, $3, …` — projected where the entry is
/// still active at that version; returns the ids that matched. An `IN` list plus a `CASE`
/// keeps it a primary-key lookup.
fn mark_projected_sqlite_sql(n: usize) -> String {
    let ids: Vec<String> = (0..n).map(|i| format!("${}", 2 + 2 * i)).collect();
    let arms: String = (0..n).map(|i| format!(" WHEN ${} THEN ${}", 2 + 2 * i, 3 + 2 * i)).collect();
    format!(
        "UPDATE context_entries SET projected_version = version WHERE tenant = $1 AND status = 'active' \
         AND id IN ({}) AND version = CASE id{arms} END RETURNING id",
        ids.join(", ")
    )
}

fn upsert_vectors_sqlite_sql(n: usize) -> String {
    format!(
        "INSERT INTO context_entry_vectors (tenant, entry_id, version, model, dim, vector, written_seq, written_at_ms) \
         VALUES {} {UPSERT_VECTOR}",
        super::row_placeholders(1, n, 8)
    )
}

/// PostgreSQL: rows per statement. The statement holds the chunk's vectors in memory;
/// about 1 MiB at dim 256 stays within the default `work_mem` (a 5,000-row statement
/// spilled to temporary files).
const PG_CHUNK: usize = 1000;

/// Store a batch of vectors (`(entry, vector)`, one tenant) inside the caller's write
/// transaction, for entries still active at the embedded version (a compare-and-set:
/// a slow embedder never attaches an old text's vector to a newer version). Returns how
/// many were written.
pub trait WriteVectors {
    fn write_vectors(
        &mut self,
        tenant: &str,
        items: &[(&ToEmbed, Vec<f32>)],
        model: &str,
    ) -> impl std::future::Future<Output = Result<u64, sqlx::Error>> + Send;
}

/// Take `n` values of the tenant's vector sequence; returns the first.
macro_rules! take_vector_seq {
    ($conn:expr, $tenant:expr, $n:expr, $now:expr) => {{
        let last: i64 = sqlx::query_scalar(BUMP_VECTOR_SEQ_SQL)
            .bind($tenant)
            .bind($n as i64)
            .bind($now)
            .fetch_one(&mut *$conn)
            .await?;
        last - $n as i64 + 1
    }};
}

impl WriteVectors for sqlx::PgConnection {
    async fn write_vectors(
        &mut self,
        tenant: &str,
        items: &[(&ToEmbed, Vec<f32>)],
        model: &str,
    ) -> Result<u64, sqlx::Error> {
        if items.is_empty() {
            return Ok(0);
        }
        let now = super::now_ms();
        let sql = write_batch_pg_sql();
        // `n` from WITH ORDINALITY starts at 1.
        let mut before = take_vector_seq!(self, tenant, items.len(), now) - 1;
        let mut written = 0;
        for chunk in items.chunks(PG_CHUNK) {
            let ids: Vec<&str> = chunk.iter().map(|(e, _)| e.id.as_str()).collect();
            let versions: Vec<i64> = chunk.iter().map(|(e, _)| e.version).collect();
            let vectors: Vec<Vec<u8>> = chunk.iter().map(|(_, v)| context_jobs::embed::encode_vector(v)).collect();
            let dim = chunk[0].1.len() as i64;
            written += sqlx::query(AssertSqlSafe(sql.as_str()))
                .bind(tenant)
                .bind(ids)
                .bind(versions)
                .bind(vectors)
                .bind(model)
                .bind(dim)
                .bind(before)
                .bind(now)
                .execute(&mut *self)
                .await?
                .rows_affected();
            before += chunk.len() as i64;
        }
        Ok(written)
    }
}

impl WriteVectors for sqlx::SqliteConnection {
    // SQLite has no arrays: multi-row statements, a chunk at a time.
    async fn write_vectors(
        &mut self,
        tenant: &str,
        items: &[(&ToEmbed, Vec<f32>)],
        model: &str,
    ) -> Result<u64, sqlx::Error> {
        if items.is_empty() {
            return Ok(0);
        }
        let now = super::now_ms();
        let mut seq = take_vector_seq!(self, tenant, items.len(), now);
        let mut written = 0;
        for chunk in items.chunks(SQLITE_CHUNK) {
            let mut q =
                sqlx::query_scalar::<_, String>(AssertSqlSafe(mark_projected_sqlite_sql(chunk.len()))).bind(tenant);
            for (e, _) in chunk {
                q = q.bind(e.id.as_str()).bind(e.version);
            }
            let current: std::collections::HashSet<String> = q.fetch_all(&mut *self).await?.into_iter().collect();
            let kept: Vec<_> = chunk.iter().filter(|(e, _)| current.contains(&e.id)).collect();
            if kept.is_empty() {
                continue;
            }
            let mut q = sqlx::query(AssertSqlSafe(upsert_vectors_sqlite_sql(kept.len())));
            for (e, v) in &kept {
                q = q
                    .bind(tenant)
                    .bind(e.id.as_str())
                    .bind(e.version)
                    .bind(model)
                    .bind(v.len() as i64)
                    .bind(context_jobs::embed::encode_vector(v))
                    .bind(seq)
                    .bind(now);
                seq += 1;
            }
            written += q.execute(&mut *self).await?.rows_affected();
        }
        Ok(written)
    }
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
