//! The artifacts table family: artifact rows and their byte chunks. Reads (metadata,
//! listing, byte ranges, a chunk-at-a-time reader), uploads (create, append at an offset,
//! seal with a digest), deletion and expiry. What an export writes is in
//! [`super::artifact_exports`].
//!
//! Every read is scoped by tenant and ignores expired artifacts (the pruner deletes them
//! later; until then they are already invisible). Chunks are contiguous and keyed by their
//! start offset, so the chunk holding byte `n` is the last one starting at or before `n`.

use sqlx::AssertSqlSafe;

use super::{StoreError, StoreResult, now_ms};
use crate::auth::TenantKey;
use crate::db::{BeginWrite as _, Db};
use crate::with_pool;
use context_jobs::artifact::{ArtifactDigest, ArtifactInfo, origin, state};

const COLUMNS: &str = "id, tenant, origin, state, operation_id, size_bytes, digest, messages, entries, \
    created_at_ms, updated_at_ms, expires_at_ms";

type Row =
    (String, String, String, String, Option<String>, i64, Option<String>, Option<i64>, Option<i64>, i64, i64, i64);

/// One artifact row.
#[derive(Debug, Clone)]
pub struct ArtifactRow {
    pub id: String,
    pub tenant: String,
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
            id,
            tenant,
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
            id: self.id.clone(),
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
pub async fn get(db: &Db, tenant: &str, id: &str) -> StoreResult<Option<ArtifactRow>> {
    let sql = format!("SELECT {COLUMNS} FROM artifacts WHERE tenant = $1 AND id = $2 AND expires_at_ms > $3");
    let row: Option<Row> = with_pool!(db, pool => {
        sqlx::query_as(AssertSqlSafe(sql)).bind(tenant).bind(id).bind(now_ms()).fetch_optional(pool).await?
    });
    Ok(row.map(ArtifactRow::from))
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
    let rows: Vec<Row> = with_pool!(db, pool => {
        sqlx::query_as(AssertSqlSafe(sql)).bind(tenant.as_str()).bind(now_ms()).bind(at).bind(id).fetch_all(pool).await?
    });
    Ok(rows.into_iter().map(ArtifactRow::from).collect())
}

/// Delete an artifact and its chunks. An export still writing it fails at its next batch
/// (`artifact_not_found`): deleting is how a client throws away an export it no longer wants.
pub async fn delete(db: &Db, tenant: &TenantKey, id: &str) -> StoreResult<()> {
    let deleted = with_pool!(db, pool => {
        sqlx::query("DELETE FROM artifacts WHERE tenant = $1 AND id = $2 AND expires_at_ms > $3")
            .bind(tenant.as_str())
            .bind(id)
            .bind(now_ms())
            .execute(pool)
            .await?
            .rows_affected()
    });
    if deleted == 0 {
        return Err(StoreError::NotFound(format!("artifact {id} not found")));
    }
    Ok(())
}

/// Delete artifacts that expired before `now` (any tenant): the maintenance loop's job.
pub async fn prune_expired(db: &Db, now: i64) -> StoreResult<u64> {
    Ok(with_pool!(db, pool => {
        sqlx::query("DELETE FROM artifacts WHERE expires_at_ms <= $1").bind(now).execute(pool).await?.rows_affected()
    }))
}

/// The chunk holding byte `offset`: `(start_offset, bytes)`, or `None` past the end.
async fn chunk_at(db: &Db, tenant: &str, id: &str, offset: u64) -> StoreResult<Option<(i64, Vec<u8>)>> {
    let found: Option<(i64, Vec<u8>)> = with_pool!(db, pool => {
        sqlx::query_as(
            "SELECT c.start_offset, c.data FROM artifact_chunks c JOIN artifacts a ON a.id = c.artifact_id \
             WHERE a.tenant = $1 AND c.artifact_id = $2 AND c.start_offset <= $3 \
             ORDER BY c.start_offset DESC LIMIT 1",
        )
        .bind(tenant)
        .bind(id)
        .bind(offset as i64)
        .fetch_optional(pool)
        .await?
    });
    Ok(found.filter(|(start, data)| (*start as u64) + data.len() as u64 > offset))
}

/// Reads an artifact's bytes in order from an offset, one stored chunk at a time: memory
/// is one chunk whatever the artifact's size.
pub struct ChunkReader {
    db: Db,
    tenant: String,
    id: String,
    next: u64,
}

impl ChunkReader {
    pub fn new(db: &Db, tenant: &str, id: &str, from: u64) -> Self {
        Self { db: db.clone(), tenant: tenant.to_string(), id: id.to_string(), next: from }
    }

    /// The offset of the next byte [`Self::next_piece`] returns.
    pub fn position(&self) -> u64 {
        self.next
    }

    /// The next bytes (the rest of the chunk holding the current offset), `None` at the end.
    pub async fn next_piece(&mut self) -> StoreResult<Option<Vec<u8>>> {
        let Some((start, mut data)) = chunk_at(&self.db, &self.tenant, &self.id, self.next).await? else {
            return Ok(None);
        };
        let skip = (self.next - start as u64) as usize;
        if skip > 0 {
            data.drain(..skip);
        }
        self.next += data.len() as u64;
        Ok(Some(data))
    }
}

/// Up to `limit` bytes from `offset`.
pub async fn read_range(db: &Db, tenant: &str, id: &str, offset: u64, limit: usize) -> StoreResult<Vec<u8>> {
    let mut reader = ChunkReader::new(db, tenant, id, offset);
    let mut out = Vec::new();
    while out.len() < limit {
        let Some(piece) = reader.next_piece().await? else { break };
        let take = piece.len().min(limit - out.len());
        out.extend_from_slice(&piece[..take]);
    }
    Ok(out)
}

/// SHA-256 of the first `upto` bytes, streamed a chunk at a time.
pub async fn digest_prefix(db: &Db, tenant: &str, id: &str, upto: u64) -> StoreResult<ArtifactDigest> {
    let mut reader = ChunkReader::new(db, tenant, id, 0);
    let mut digest = ArtifactDigest::new();
    while reader.position() < upto {
        let at = reader.position();
        let Some(piece) = reader.next_piece().await? else {
            return Err(StoreError::Other(anyhow::anyhow!("artifact {id} holds {at} bytes, expected at least {upto}")));
        };
        let take = piece.len().min((upto - at) as usize);
        digest.update(&piece[..take]);
    }
    Ok(digest)
}

fn expiry(now: i64, retention_days: u32) -> i64 {
    now.saturating_add(i64::from(retention_days) * 86_400_000)
}

/// Start an upload: an empty artifact in state `uploading`.
pub async fn create_upload(db: &Db, tenant: &TenantKey, retention_days: u32) -> StoreResult<ArtifactRow> {
    let id = ulid::Ulid::generate().to_string();
    let now = now_ms();
    let sql = format!(
        "INSERT INTO artifacts (id, tenant, origin, state, created_at_ms, updated_at_ms, expires_at_ms) \
         VALUES ($1, $2, $3, $4, $5, $5, $6) RETURNING {COLUMNS}"
    );
    let row: Row = with_pool!(db, pool => {
        sqlx::query_as(AssertSqlSafe(sql))
            .bind(id.as_str())
            .bind(tenant.as_str())
            .bind(origin::UPLOAD)
            .bind(state::UPLOADING)
            .bind(now)
            .bind(expiry(now, retention_days))
            .fetch_one(pool)
            .await?
    });
    Ok(row.into())
}

/// Append `data` to an upload at `offset`, which must equal the bytes received so far. A
/// retried append of bytes already stored at that offset is accepted as a no-op.
pub async fn append_upload(
    db: &Db,
    tenant: &TenantKey,
    id: &str,
    offset: u64,
    data: &[u8],
) -> StoreResult<ArtifactRow> {
    let now = now_ms();
    let appended = with_pool!(db, pool => {
        let mut tx = pool.begin_write().await?;
        let grown = sqlx::query(
            "UPDATE artifacts SET size_bytes = size_bytes + $4, updated_at_ms = $5 WHERE tenant = $1 AND id = $2 \
             AND state = 'uploading' AND size_bytes = $3 AND expires_at_ms > $5",
        )
        .bind(tenant.as_str())
        .bind(id)
        .bind(offset as i64)
        .bind(data.len() as i64)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if grown {
            sqlx::query("INSERT INTO artifact_chunks (artifact_id, start_offset, length, data) VALUES ($1, $2, $3, $4)")
                .bind(id)
                .bind(offset as i64)
                .bind(data.len() as i64)
                .bind(data)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        }
        Ok::<_, StoreError>(grown)
    })?;
    let row =
        get(db, tenant.as_str(), id).await?.ok_or_else(|| StoreError::NotFound(format!("artifact {id} not found")))?;
    if appended {
        return Ok(row);
    }
    if row.state != state::UPLOADING {
        return Err(StoreError::Conflict(format!(
            "artifact {id} is {}; only an uploading artifact takes bytes",
            row.state
        )));
    }
    let size = row.size_bytes.max(0) as u64;
    let end = offset.saturating_add(data.len() as u64);
    if end <= size && read_range(db, tenant.as_str(), id, offset, data.len()).await? == data {
        return Ok(row);
    }
    Err(StoreError::Conflict(format!(
        "artifact {id} has {size} bytes: the next append must be at offset {size}, not {offset}"
    )))
}

/// Seal an upload: its bytes must hash to `expected` (else `Invalid`, and it stays open).
/// Sealing an artifact already sealed with the same digest is a no-op.
pub async fn seal_upload(db: &Db, tenant: &TenantKey, id: &str, expected: &str) -> StoreResult<ArtifactRow> {
    let row =
        get(db, tenant.as_str(), id).await?.ok_or_else(|| StoreError::NotFound(format!("artifact {id} not found")))?;
    if row.is_ready() && row.origin == origin::UPLOAD && row.digest.as_deref() == Some(expected) {
        return Ok(row);
    }
    if row.state != state::UPLOADING {
        return Err(StoreError::Conflict(format!(
            "artifact {id} is {}; only an uploading artifact can be finalised",
            row.state
        )));
    }
    let size = row.size_bytes.max(0) as u64;
    let actual = digest_prefix(db, tenant.as_str(), id, size).await?.finish();
    if actual != expected {
        return Err(StoreError::Invalid(format!(
            "digest mismatch: the {size} bytes received hash to {actual}, not {expected}; the upload stays open"
        )));
    }
    let sealed = with_pool!(db, pool => {
        sqlx::query(
            "UPDATE artifacts SET state = 'ready', digest = $4, updated_at_ms = $5 \
             WHERE tenant = $1 AND id = $2 AND state = 'uploading' AND size_bytes = $3",
        )
        .bind(tenant.as_str())
        .bind(id)
        .bind(size as i64)
        .bind(expected)
        .bind(now_ms())
        .execute(pool)
        .await?
        .rows_affected()
    });
    if sealed != 1 {
        return Err(StoreError::Conflict(format!("artifact {id} changed while it was being finalised; retry")));
    }
    get(db, tenant.as_str(), id).await?.ok_or_else(|| StoreError::NotFound(format!("artifact {id} not found")))
}
