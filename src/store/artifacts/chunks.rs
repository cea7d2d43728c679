//! Reading an artifact's bytes: the chunk holding an offset, a chunk-at-a-time reader
//! (memory is one chunk whatever the artifact's size), byte ranges, and the digest of a
//! prefix (a resumed export rebuilds its running hash from what it stored).

use sqlx::Row as _;
use sqlx::pool::PoolConnection;

use crate::store::spares::Spares;
use crate::store::{Db, StoreError, StoreResult, query};
use context_jobs::artifact::ArtifactDigest;
use context_jobs::ids::{ArtifactId, TenantKey};

const CHUNK_AT_SQL: &str = "SELECT c.start_offset, c.data FROM artifact_chunks c JOIN artifacts a ON a.id = c.artifact_id \
     WHERE a.tenant = $1 AND c.artifact_id = $2 AND c.start_offset <= $3 ORDER BY c.start_offset DESC LIMIT 1";

/// The last chunk starting at or before byte `offset`: `(start_offset, bytes)`.
async fn chunk_at(db: &Db, tenant: &TenantKey, id: &ArtifactId, offset: u64) -> StoreResult<Option<(i64, Vec<u8>)>> {
    Ok(query(CHUNK_AT_SQL).bind(tenant.as_str()).bind(id.as_str()).bind(offset as i64).fetch_optional(db).await?)
}

/// The bytes of the chunk starting at `start` from byte `at` on; `None` when it ends
/// before `at` (past the artifact's end).
fn rest_of(start: i64, data: &[u8], at: u64) -> Option<&[u8]> {
    let skip = at.checked_sub(u64::try_from(start).ok()?)?;
    data.get(usize::try_from(skip).ok()?..).filter(|rest| !rest.is_empty())
}

/// Reads an artifact's bytes in order from an offset, one stored chunk at a time.
pub struct ChunkReader {
    db: Db,
    tenant: TenantKey,
    id: ArtifactId,
    next: u64,
    /// PostgreSQL, for [`Self::next_piece_into`]: one connection for the whole read.
    held: Option<PoolConnection<sqlx::Postgres>>,
}

impl ChunkReader {
    pub fn new(db: &Db, tenant: &TenantKey, id: &ArtifactId, from: u64) -> Self {
        Self { db: db.clone(), tenant: tenant.clone(), id: id.clone(), next: from, held: None }
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
        let Some(rest) = rest_of(start, &data, self.next).map(<[u8]>::len) else { return Ok(None) };
        data.drain(..data.len() - rest);
        self.next += data.len() as u64;
        Ok(Some(data))
    }

    /// [`Self::next_piece`] written into `buf` (emptied first; its capacity reused).
    ///
    /// Why, for a reader of a whole artifact (the import's two passes): a fresh 1 MiB
    /// vector per chunk, and a pooled connection whose receive buffer is shrunk on every
    /// release and grown again, were two new mappings faulted in page by page per chunk.
    /// On PostgreSQL this holds one connection for the reader's life, so its buffer stays
    /// grown to a chunk, and copies the bytes into `buf`.
    pub async fn next_piece_into(&mut self, mut buf: Vec<u8>) -> StoreResult<Option<Vec<u8>>> {
        let Db::Postgres(pool) = &self.db else { return self.next_piece().await };
        let conn = match &mut self.held {
            Some(conn) => conn,
            held => held.insert(pool.acquire().await?),
        };
        let row = sqlx::query(CHUNK_AT_SQL)
            .bind(self.tenant.as_str())
            .bind(self.id.as_str())
            .bind(self.next as i64)
            .fetch_optional(&mut **conn)
            .await?;
        // At the end, the connection goes back at once: the caller may query on (an
        // artifact whose chunks ended early is looked up) while its own budget of
        // connections (`worker::pipelines`) counts this one.
        let Some(row) = row else {
            self.held = None;
            return Ok(None);
        };
        let Some(rest) = rest_of(row.try_get(0)?, row.try_get(1)?, self.next) else {
            self.held = None;
            return Ok(None);
        };
        buf.clear();
        buf.extend_from_slice(rest);
        self.next += buf.len() as u64;
        Ok(Some(buf))
    }
}

/// Buffers a reader's consumer is done with, for [`ChunkReader::next_piece_into`] to fill
/// again (the reader runs a couple of chunks ahead).
pub type SpareChunks = Spares<Vec<u8>, 3>;

/// Up to `limit` bytes from `offset`.
pub async fn read_range(
    db: &Db,
    tenant: &TenantKey,
    id: &ArtifactId,
    offset: u64,
    limit: usize,
) -> StoreResult<Vec<u8>> {
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
pub async fn digest_prefix(db: &Db, tenant: &TenantKey, id: &ArtifactId, upto: u64) -> StoreResult<ArtifactDigest> {
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
