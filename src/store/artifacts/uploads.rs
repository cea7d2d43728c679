//! Uploads of an artifact made elsewhere: create an empty `uploading` artifact, append
//! bytes at the offset received so far (a retried append of stored bytes is a no-op), and
//! seal it once its bytes hash to the digest the client names.

use sqlx::AssertSqlSafe;

use super::{ArtifactRow, COLUMNS, Row, digest_prefix, get, read_range, require};
use crate::store::{Db, StoreError, StoreResult, now_ms, query};
use context_jobs::artifact::{origin, state};
use context_jobs::ids::{ArtifactId, TenantKey};

fn expiry(now: i64, retention_days: u32) -> i64 {
    now.saturating_add(i64::from(retention_days) * 86_400_000)
}

/// Start an upload: an empty artifact in state `uploading`.
pub async fn create(db: &Db, tenant: &TenantKey, retention_days: u32) -> StoreResult<ArtifactRow> {
    let id = ArtifactId::from_ulid(ulid::Ulid::generate());
    let now = now_ms();
    let sql = format!(
        "INSERT INTO artifacts (id, tenant, origin, state, created_at_ms, updated_at_ms, expires_at_ms) \
         VALUES ($1, $2, $3, $4, $5, $5, $6) RETURNING {COLUMNS}"
    );
    let row: Row = query(AssertSqlSafe(sql))
        .bind(id.as_str())
        .bind(tenant.as_str())
        .bind(origin::UPLOAD)
        .bind(state::UPLOADING)
        .bind(now)
        .bind(expiry(now, retention_days))
        .fetch_one(db)
        .await?;
    Ok(row.into())
}

/// Append `data` to an upload at `offset`, which must equal the bytes received so far. A
/// retried append of bytes already stored at that offset is accepted as a no-op.
pub async fn append(
    db: &Db,
    tenant: &TenantKey,
    id: &ArtifactId,
    offset: u64,
    data: &[u8],
) -> StoreResult<ArtifactRow> {
    let now = now_ms();
    let mut tx = db.begin_write().await?;
    let grown = query(
        "UPDATE artifacts SET size_bytes = size_bytes + $4, updated_at_ms = $5 WHERE tenant = $1 AND id = $2 \
         AND state = $6 AND size_bytes = $3 AND expires_at_ms > $5",
    )
    .bind(tenant.as_str())
    .bind(id.as_str())
    .bind(offset as i64)
    .bind(data.len() as i64)
    .bind(now)
    .bind(state::UPLOADING)
    .execute(&mut tx)
    .await?
        == 1;
    if grown {
        query("INSERT INTO artifact_chunks (artifact_id, start_offset, length, data) VALUES ($1, $2, $3, $4)")
            .bind(id.as_str())
            .bind(offset as i64)
            .bind(data.len() as i64)
            .bind(data)
            .execute(&mut tx)
            .await?;
        tx.commit().await?;
    } else {
        drop(tx);
    }
    let row = require(db, tenant, id).await?;
    if grown {
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
    if end <= size && read_range(db, tenant, id, offset, data.len()).await? == data {
        return Ok(row);
    }
    Err(StoreError::Conflict(format!(
        "artifact {id} has {size} bytes: the next append must be at offset {size}, not {offset}"
    )))
}

/// Seal an upload: its bytes must hash to `expected` (else `Invalid`, and it stays open).
/// Sealing an artifact already sealed with the same digest is a no-op.
pub async fn seal(db: &Db, tenant: &TenantKey, id: &ArtifactId, expected: &str) -> StoreResult<ArtifactRow> {
    let row = require(db, tenant, id).await?;
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
    let actual = digest_prefix(db, tenant, id, size).await?.finish();
    if actual != expected {
        return Err(StoreError::Invalid(format!(
            "digest mismatch: the {size} bytes received hash to {actual}, not {expected}; the upload stays open"
        )));
    }
    let sealed = query(
        "UPDATE artifacts SET state = $6, digest = $4, updated_at_ms = $5 \
         WHERE tenant = $1 AND id = $2 AND state = $7 AND size_bytes = $3",
    )
    .bind(tenant.as_str())
    .bind(id.as_str())
    .bind(size as i64)
    .bind(expected)
    .bind(now_ms())
    .bind(state::READY)
    .bind(state::UPLOADING)
    .execute(db)
    .await?;
    if sealed != 1 {
        return Err(StoreError::Conflict(format!("artifact {id} changed while it was being finalised; retry")));
    }
    get(db, tenant, id).await?.ok_or_else(|| StoreError::NotFound(format!("artifact {id} not found")))
}
