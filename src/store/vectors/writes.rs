//! Writing vectors inside the caller's write transaction, fenced by entry version, and
//! moving the tenant's projection watermark (`vectors.rs` says what it means) in the same
//! commit.
//!
//! A vector is written only if its entry is still active at the embedded version, so a slow
//! embedder can never attach a vector to an entry that moved on or went away; and never over
//! a newer version's vector. A vector identical to the stored one (same version, model and
//! bytes — a forced rebuild under an unchanged model) is left alone: no rewrite, no new
//! `written_seq` for every recall index to re-read.
//!
//! Every vector write and every entry write takes the tenant's heads row lock, and every
//! entry write moves the tenant's entry head (`source_version`). A writer that finds the
//! entry head where its reader saw it knows every entry it read is still current, and skips
//! the per-entry fence (the usual case for a rebuild or the projector).
//! On PostgreSQL it then tries the bulk path, `COPY`, under a savepoint: the primary key
//! itself detects an entry that already has a vector, and the batch falls back to the
//! upsert. Otherwise every row goes through the fenced upsert (a join with the entries in
//! the same statement). Each write takes `vector_seq` values from the heads row, which
//! orders vector writes for the recall index's sync.

use sqlx::AssertSqlSafe;

use super::reads::ToEmbed;
use crate::store::engine::pg_copy::CopyBinary;
use crate::store::engine::sqlite_rows::{Arg as SqlArg, execute_rows};
use crate::store::engine::{PgTx, is_unique_violation};
use crate::store::{Engine, StoreResult, Tx, now_ms, query};
use context_jobs::ids::TenantKey;

/// Replace only with a newer version, or the same version under another model or with
/// other bytes.
const UPSERT_VECTOR: &str = "ON CONFLICT (tenant, entry_id) DO UPDATE SET version = excluded.version, \
     model = excluded.model, dim = excluded.dim, vector = excluded.vector, written_seq = excluded.written_seq, \
     written_at_ms = excluded.written_at_ms WHERE context_entry_vectors.version < excluded.version \
     OR (context_entry_vectors.version = excluded.version AND (context_entry_vectors.model <> excluded.model \
         OR context_entry_vectors.vector <> excluded.vector))";

/// The fence, for both engines' statements (the tenant, the entry id and the embedded
/// version as SQL expressions): only entries still active at the embedded version. A scalar
/// subquery is never flattened into a join, so it stays a primary-key probe per row
/// whatever the table statistics say (right after a bulk import there may be none, and a
/// join could become a scan of the tenant).
fn fence(tenant: &str, id: &str, version: &str) -> String {
    format!(
        "(SELECT e.version FROM context_entries e WHERE e.tenant = {tenant} AND e.id = {id} AND e.status = 'active') \
         = {version}"
    )
}

/// Take `$2` values of the tenant's vector sequence and move its watermark up to `$4`
/// (never down: two walks may finish out of order). Returns the last value taken and the
/// tenant's entry head, both read under the row lock.
fn take_vector_seq_sql(max: &str) -> String {
    format!(
        "INSERT INTO context_entry_heads (tenant, vector_seq, projected_at_ms, projected_seq) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (tenant) DO UPDATE SET vector_seq = context_entry_heads.vector_seq + $2, projected_at_ms = $3, \
         projected_seq = {max}(context_entry_heads.projected_seq, $4) RETURNING vector_seq, source_version"
    )
}

/// Move the watermark only (a page with nothing to embed: the walk passed inactive
/// entries).
fn advance_watermark_sql(max: &str) -> String {
    format!(
        "UPDATE context_entry_heads SET projected_seq = {max}(projected_seq, $2) WHERE tenant = $1 AND projected_seq < $2"
    )
}

/// PostgreSQL: a chunk as arrays in one statement (one plan, binary-encoded vectors).
const WRITE_PG: &str = "INSERT INTO context_entry_vectors \
     (tenant, entry_id, version, model, dim, vector, written_seq, written_at_ms) \
     SELECT $1, i.id, i.version, $6, $7, i.vector, i.seq, $8 \
     FROM unnest($2::text[], $3::bigint[], $4::bytea[], $5::bigint[]) AS i(id, version, vector, seq)";

const COPY_PG: &str = "COPY context_entry_vectors \
     (tenant, entry_id, version, model, dim, vector, written_seq, written_at_ms) FROM STDIN (FORMAT binary)";

/// PostgreSQL: rows per upsert statement. The statement holds the chunk's vectors in
/// memory; well within the default `work_mem` at dim 256.
const PG_CHUNK: usize = 1000;

/// SQLite: one row per step (`sqlite_rows`), fenced or not.
fn write_sqlite_sql(fenced: bool) -> String {
    let check = if fenced { fence("?1", "?2", "?3") } else { "true".to_string() };
    format!(
        "INSERT INTO context_entry_vectors (tenant, entry_id, version, model, dim, vector, written_seq, written_at_ms) \
         SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8 WHERE {check} {UPSERT_VECTOR}"
    )
}

/// One tenant's vectors to store, encoded for storage (`vector_codec`), with what the
/// writer knows of how their entries were read.
pub struct VectorBatch<'a> {
    pub tenant: &'a TenantKey,
    pub model: &'a str,
    pub dim: usize,
    pub entries: &'a [ToEmbed],
    /// `encode_vector` of each entry's vector, in order.
    pub blobs: &'a [Vec<u8>],
    /// The walk saw every active entry up to this change sequence, and this batch holds
    /// the rest of them: the watermark moves here in the same commit.
    pub covered_through: Option<i64>,
    /// The tenant's entry head read before the entries were (`WalkPage::read_at`).
    pub read_at: Option<i64>,
    /// Try PostgreSQL's bulk path (most entries are expected to have no vector yet).
    pub bulk: bool,
}

impl<'a> VectorBatch<'a> {
    /// A batch with nothing known of how its entries were read: fenced, watermark unmoved.
    pub fn new(
        tenant: &'a TenantKey,
        model: &'a str,
        dim: usize,
        entries: &'a [ToEmbed],
        blobs: &'a [Vec<u8>],
    ) -> Self {
        Self { tenant, model, dim, entries, blobs, covered_through: None, read_at: None, bulk: false }
    }
}

/// What one write did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Vectors stored.
    pub vectors: u64,
    /// The bulk path was tried and found entries that already had a vector.
    pub bulk_conflict: bool,
}

/// Encode vectors for storage (`VectorBatch::blobs`); `dim` is the first one's length.
pub fn encode_all(vectors: &[Vec<f32>]) -> (usize, Vec<Vec<u8>>) {
    (
        vectors.first().map_or(0, Vec::len),
        vectors.iter().map(|v| context_jobs::vector_codec::encode_vector(v)).collect(),
    )
}

/// Take the batch's vector sequence values (moving the watermark), or only move the
/// watermark when there is nothing to write (`None`). Returns the first value taken and
/// whether no entry has changed since the batch was read.
async fn take_heads(tx: &mut Tx, batch: &VectorBatch<'_>) -> Result<Option<(i64, bool)>, sqlx::Error> {
    let max = match tx.engine() {
        Engine::Postgres => "GREATEST",
        Engine::Sqlite => "MAX",
    };
    let n = batch.entries.len() as i64;
    let covered = batch.covered_through.unwrap_or(0);
    if n == 0 {
        if covered > 0 {
            query(AssertSqlSafe(advance_watermark_sql(max)))
                .bind(batch.tenant.as_str())
                .bind(covered)
                .execute(&mut *tx)
                .await?;
        }
        return Ok(None);
    }
    tx.durable_commit().await?;
    let (last, source): (i64, i64) = query(AssertSqlSafe(take_vector_seq_sql(max)))
        .bind(batch.tenant.as_str())
        .bind(n)
        .bind(now_ms())
        .bind(covered)
        .fetch_one(&mut *tx)
        .await?;
    Ok(Some((last - n + 1, batch.read_at == Some(source))))
}

/// Store a batch inside the caller's write transaction, for entries still active at the
/// embedded version, moving the watermark as `covered_through` says.
pub async fn write(tx: &mut Tx, batch: &VectorBatch<'_>) -> StoreResult<Written> {
    let Some((first, unchanged)) = take_heads(tx, batch).await? else { return Ok(Written::default()) };
    Ok(match tx {
        Tx::Postgres(conn) => write_pg(conn, batch, first, unchanged).await?,
        Tx::Sqlite(conn) => write_sqlite(conn, batch, first, unchanged).await?,
    })
}

/// Upsert the batch, fenced or not, in `PG_CHUNK` statements; row `i` takes sequence
/// value `first + i`.
async fn upsert_pg(
    conn: &mut sqlx::PgConnection,
    batch: &VectorBatch<'_>,
    first: i64,
    fenced: bool,
) -> Result<u64, sqlx::Error> {
    let check = if fenced { fence("$1", "i.id", "i.version") } else { "true".to_string() };
    let sql = format!("{WRITE_PG} WHERE {check} {UPSERT_VECTOR}");
    let now = now_ms();
    let mut written = 0;
    for (k, (entries, blobs)) in batch.entries.chunks(PG_CHUNK).zip(batch.blobs.chunks(PG_CHUNK)).enumerate() {
        let ids: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
        let versions: Vec<i64> = entries.iter().map(|e| e.version).collect();
        let start = first + (k * PG_CHUNK) as i64;
        let seqs: Vec<i64> = (start..start + entries.len() as i64).collect();
        written += sqlx::query(AssertSqlSafe(sql.as_str()))
            .bind(batch.tenant.as_str())
            .bind(ids)
            .bind(versions)
            .bind(blobs)
            .bind(seqs)
            .bind(batch.model)
            .bind(batch.dim as i64)
            .bind(now)
            .execute(&mut *conn)
            .await?
            .rows_affected();
    }
    Ok(written)
}

/// `COPY` the whole batch (entries known current); row `i` takes `first + i`.
async fn copy_pg(conn: &mut sqlx::PgConnection, batch: &VectorBatch<'_>, first: i64) -> Result<u64, sqlx::Error> {
    let now = now_ms();
    let mut sink = conn.copy_in_raw(COPY_PG).await?;
    let mut copy = CopyBinary::streamed();
    for (i, (e, blob)) in batch.entries.iter().zip(batch.blobs).enumerate() {
        copy.row(8)
            .bytes(batch.tenant.as_str().as_bytes())
            .bytes(e.id.as_bytes())
            .int8(e.version)
            .bytes(batch.model.as_bytes())
            .int4(batch.dim as i32)
            .bytes(blob)
            .int8(first + i as i64)
            .int8(now);
        copy.send_full(&mut sink).await?;
    }
    copy.send_rest(sink).await
}

/// PostgreSQL: entries known current go in by `COPY` (under a savepoint: the primary key
/// itself detects an entry that already has a vector, and the batch falls back to the
/// unfenced upsert — which it also takes once the transaction's subtransactions are
/// spent); otherwise the fenced upsert.
async fn write_pg(tx: &mut PgTx, batch: &VectorBatch<'_>, first: i64, unchanged: bool) -> Result<Written, sqlx::Error> {
    let bulk = unchanged && batch.bulk && tx.take_subtransaction();
    let conn: &mut sqlx::PgConnection = tx;
    if bulk {
        sqlx::query("SAVEPOINT vectors_bulk").execute(&mut *conn).await?;
        match copy_pg(conn, batch, first).await {
            Ok(vectors) => {
                sqlx::query("RELEASE SAVEPOINT vectors_bulk").execute(&mut *conn).await?;
                return Ok(Written { vectors, bulk_conflict: false });
            }
            Err(e) if is_unique_violation(&e) => {
                sqlx::query("ROLLBACK TO SAVEPOINT vectors_bulk").execute(&mut *conn).await?;
                let vectors = upsert_pg(conn, batch, first, false).await?;
                return Ok(Written { vectors, bulk_conflict: true });
            }
            Err(e) => return Err(e),
        }
    }
    let vectors = upsert_pg(conn, batch, first, !unchanged).await?;
    Ok(Written { vectors, bulk_conflict: false })
}

/// SQLite: one prepared row stepped per entry (`sqlite_rows`), fenced unless known current.
async fn write_sqlite(
    conn: &mut sqlx::SqliteConnection,
    batch: &VectorBatch<'_>,
    first: i64,
    unchanged: bool,
) -> Result<Written, sqlx::Error> {
    let now = now_ms();
    let rows: Vec<[SqlArg<'_>; 8]> = batch
        .entries
        .iter()
        .zip(batch.blobs)
        .enumerate()
        .map(|(i, (e, blob))| {
            [
                SqlArg::Text(batch.tenant.as_str()),
                SqlArg::Text(&e.id),
                SqlArg::Int(e.version),
                SqlArg::Text(batch.model),
                SqlArg::Int(batch.dim as i64),
                SqlArg::Blob(blob),
                SqlArg::Int(first + i as i64),
                SqlArg::Int(now),
            ]
        })
        .collect();
    let vectors = execute_rows(conn, &write_sqlite_sql(!unchanged), rows.iter().map(|r| &r[..])).await?;
    Ok(Written { vectors, bulk_conflict: false })
}
