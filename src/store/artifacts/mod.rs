//! The artifacts table family: artifact rows and their byte chunks. Rows, listing,
//! deletion and expiry here; reading bytes in [`chunks`]; uploads in [`uploads`]; what an
//! export writes in [`exports`] and how it reads its pages in [`export_pages`].
//!
//! Every read is scoped by tenant and ignores expired artifacts (the pruner deletes them
//! later; until then they are already invisible). Chunks are contiguous and keyed by their
//! start offset, so the chunk holding byte `n` is the last one starting at or before `n`.

pub mod chunks;
pub mod export_filter;
pub mod export_pages;
pub mod exports;
pub mod uploads;

use sqlx::AssertSqlSafe;

use crate::store::{Db, StoreError, StoreResult, now_ms, query};
use context_jobs::artifact::{ArtifactInfo, state};
use context_jobs::ids::{ArtifactId, TenantKey};

pub use chunks::{ChunkReader, SpareChunks, digest_prefix, read_range};

const COLUMNS: &str = "id, tenant, origin, state, operation_id, size_bytes, digest, messages, entries, \
    created_at_ms, updated_at_ms, expires_at_ms";

type Row =
    (String, String, String, String, Option<String>, i64, Option<String>, Option<i64>, Option<i64>, i64, i64, i64);

/// One artifact row.
#[derive(Debug, Clone)]
pub struct ArtifactRow {
    pub id: ArtifactId,
    pub tenant: TenantKey,
    pub origin: String,
    pub state: String,
    pub operation_id: Option<String>,
    pub size_bytes: i64,
    pub digest: Option<String>,
    pub messages: Option<i64>,
    pub entries: Option<i64>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub expires_at_ms: i64,
}

impl From<Row> for ArtifactRow {
    fn from(r: Row) -> Self {
        let (id, tenant, origin, state, operation_id, size_bytes, digest, messages, entries, created, updated, expires) =
            r;
        Self {
            id: ArtifactId::from_stored(id),
            tenant: TenantKey::from_stored(tenant),
            origin,
            state,
            operation_id,
            size_bytes,
            digest,
            messages,
            entries,
            created_at_ms: created,
            updated_at_ms: updated,
            expires_at_ms: expires,
        }
    }
}

impl ArtifactRow {
    pub fn is_ready(&self) -> bool {
        self.state == state::READY
    }

    /// The metadata wire shape (the one owner is `context_jobs::artifact::ArtifactInfo`).
    pub fn info(&self) -> ArtifactInfo {
        ArtifactInfo {
            id: self.id.to_string(),
            origin: self.origin.clone(),
            state: self.state.clone(),
            size_bytes: self.size_bytes.max(0) as u64,
            digest: self.digest.clone(),
            messages: self.messages.map(|n| n.max(0) as u64),
            entries: self.entries.map(|n| n.max(0) as u64),
            operation_id: self.operation_id.clone(),
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            expires_at_ms: self.expires_at_ms,
        }
    }
}

/// A live (unexpired) artifact of `tenant`.
pub async fn get(db: &Db, tenant: &TenantKey, id: &ArtifactId) -> StoreResult<Option<ArtifactRow>> {
    let sql = format!("SELECT {COLUMNS} FROM artifacts WHERE tenant = $1 AND id = $2 AND expires_at_ms > $3");
    let row: Option<Row> =
        query(AssertSqlSafe(sql)).bind(tenant.as_str()).bind(id.as_str()).bind(now_ms()).fetch_optional(db).await?;
    Ok(row.map(ArtifactRow::from))
}

/// [`get`], or `NotFound`.
pub async fn require(db: &Db, tenant: &TenantKey, id: &ArtifactId) -> StoreResult<ArtifactRow> {
    get(db, tenant, id).await?.ok_or_else(|| StoreError::NotFound(format!("artifact {id} not found")))
}

/// The tenant's live artifacts, newest first, strictly before `(created_at_ms, id)`.
/// Returns one more row than `limit` when more exist.
pub async fn list(
    db: &Db,
    tenant: &TenantKey,
    before: Option<(i64, &str)>,
    limit: usize,
) -> StoreResult<Vec<ArtifactRow>> {
    let (at, id) = before.unwrap_or((i64::MAX, ""));
    let sql = format!(
        "SELECT {COLUMNS} FROM artifacts WHERE tenant = $1 AND expires_at_ms > $2 \
         AND (created_at_ms < $3 OR (created_at_ms = $3 AND id < $4 AND $4 <> '')) \
         ORDER BY created_at_ms DESC, id DESC LIMIT {}",
        limit + 1
    );
    let rows: Vec<Row> =
        query(AssertSqlSafe(sql)).bind(tenant.as_str()).bind(now_ms()).bind(at).bind(id).fetch_all(db).await?;
    Ok(rows.into_iter().map(ArtifactRow::from).collect())
}

/// Delete an artifact and its chunks. An export still writing it fails at its next batch
/// (`artifact_not_found`): deleting is how a client throws away an export it no longer wants.
pub async fn delete(db: &Db, tenant: &TenantKey, id: &ArtifactId) -> StoreResult<()> {
    let deleted = query("DELETE FROM artifacts WHERE tenant = $1 AND id = $2 AND expires_at_ms > $3")
        .bind(tenant.as_str())
        .bind(id.as_str())
        .bind(now_ms())
        .execute(db)
        .await?;
    if deleted == 0 {
        return Err(StoreError::NotFound(format!("artifact {id} not found")));
    }
    Ok(())
}

/// Delete artifacts that expired before `now` (any tenant): the maintenance loop's job.
pub async fn prune_expired(db: &Db, now: i64) -> StoreResult<u64> {
    Ok(query("DELETE FROM artifacts WHERE expires_at_ms <= $1").bind(now).execute(db).await?)
}
