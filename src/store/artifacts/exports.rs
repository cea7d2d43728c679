//! The statements an export runs on the artifacts tables inside its own fenced
//! transactions — create its artifact, append chunks, confirm it is still wanted, seal it
//! — and discarding an abandoned export's artifact.

use sqlx::PgConnection;

use crate::store::engine::pg_copy::{COPY_PIECE, CopyBinary};
use crate::store::{Db, StoreResult, Tx, now_ms, query};
use context_jobs::artifact::{Finished, origin, state};
use context_jobs::ids::{ArtifactId, OperationId, TenantKey};

/// Create an export's artifact, `writing`, expiring after `retention_days`.
pub async fn create(
    tx: &mut Tx,
    id: &ArtifactId,
    tenant: &TenantKey,
    operation: &OperationId,
    retention_days: u32,
) -> StoreResult<()> {
    let now = now_ms();
    query(
        "INSERT INTO artifacts (id, tenant, origin, state, operation_id, created_at_ms, updated_at_ms, expires_at_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $6, $7)",
    )
    .bind(id.as_str())
    .bind(tenant.as_str())
    .bind(origin::EXPORT)
    .bind(state::WRITING)
    .bind(operation.as_str())
    .bind(now)
    .bind(now.saturating_add(i64::from(retention_days) * 86_400_000))
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Append `chunks` (`(offset, bytes)` from the encoder) to artifact `id`. An artifact
/// deleted meanwhile fails the foreign key ([`is_missing_parent`]).
pub async fn insert_chunks(tx: &mut Tx, id: &ArtifactId, chunks: &[(u64, Vec<u8>)]) -> Result<(), sqlx::Error> {
    if let Tx::Postgres(c) = tx {
        copy_chunks(c, id, chunks).await?;
    } else {
        for (offset, data) in chunks {
            query("INSERT INTO artifact_chunks (artifact_id, start_offset, length, data) VALUES ($1, $2, $3, $4)")
                .bind(id.as_str())
                .bind(*offset as i64)
                .bind(data.len() as i64)
                .bind(data.as_slice())
                .execute(&mut *tx)
                .await?;
        }
    }
    // The connection's buffers grew to a chunk; give that back now rather than only when
    // the pool gets the connection back (`Db::connect_with`'s release hook): the commit may still
    // wait for the one before it while holding this connection.
    match tx {
        Tx::Postgres(c) => sqlx::Connection::shrink_buffers(&mut **c),
        Tx::Sqlite(c) => sqlx::Connection::shrink_buffers(&mut ***c),
    }
    Ok(())
}

/// PostgreSQL: the chunks by binary `COPY`, each chunk's bytes sent from the chunk itself
/// in pieces of [`COPY_PIECE`].
/// Why: a bound 1 MiB parameter is copied twice (into sqlx's argument buffer, then into
/// its `Bind` message), each copy a fresh mapping faulted in page by page — most of the
/// page faults left in an export (docs/artifacts.md).
async fn copy_chunks(conn: &mut PgConnection, id: &ArtifactId, chunks: &[(u64, Vec<u8>)]) -> Result<(), sqlx::Error> {
    let mut sink = conn
        .copy_in_raw("COPY artifact_chunks (artifact_id, start_offset, length, data) FROM STDIN (FORMAT binary)")
        .await?;
    let mut copy = CopyBinary::new(64);
    for (offset, data) in chunks {
        copy.row(4).bytes(id.as_str().as_bytes()).int8(*offset as i64).int8(data.len() as i64).field_len(data.len());
        sink.send(copy.take()).await?;
        for piece in data.chunks(COPY_PIECE) {
            sink.send(piece).await?;
        }
    }
    copy.send_rest(sink).await?;
    Ok(())
}

/// A foreign key found no parent row: the artifact a chunk belongs to is gone.
pub fn is_missing_parent(e: &sqlx::Error) -> bool {
    // PostgreSQL foreign_key_violation; SQLite SQLITE_CONSTRAINT_FOREIGNKEY.
    matches!(e, sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("23503") | Some("787")))
}

/// Confirm `tenant`'s artifact `id` is still being written, and lock its row against a
/// concurrent delete until the commit. `false` when it is gone. (The id comes from the
/// export's own checkpoint; the tenant is checked all the same, as every artifact query
/// is scoped.)
pub async fn touch(tx: &mut Tx, tenant: &TenantKey, id: &ArtifactId) -> StoreResult<bool> {
    Ok(query("UPDATE artifacts SET updated_at_ms = $2 WHERE id = $1 AND state = $3 AND tenant = $4")
        .bind(id.as_str())
        .bind(now_ms())
        .bind(state::WRITING)
        .bind(tenant.as_str())
        .execute(&mut *tx)
        .await?
        == 1)
}

/// Seal the artifact with its size, digest and counts. `false` when it is gone.
pub async fn seal(tx: &mut Tx, tenant: &TenantKey, id: &ArtifactId, finished: &Finished) -> StoreResult<bool> {
    Ok(query(
        "UPDATE artifacts SET state = $7, size_bytes = $2, digest = $3, messages = $4, entries = $5, \
         updated_at_ms = $6 WHERE id = $1 AND state = $8 AND tenant = $9",
    )
    .bind(id.as_str())
    .bind(finished.size_bytes as i64)
    .bind(finished.digest.as_str())
    .bind(finished.messages as i64)
    .bind(finished.entries as i64)
    .bind(now_ms())
    .bind(state::READY)
    .bind(state::WRITING)
    .bind(tenant.as_str())
    .execute(&mut *tx)
    .await?
        == 1)
}

/// An export's artifact is still there, unfinished (a retry may resume it).
pub async fn is_writing(db: &Db, tenant: &TenantKey, id: &ArtifactId) -> StoreResult<bool> {
    let found: Option<String> = query(
        "SELECT id FROM artifacts WHERE tenant = $1 AND id = $2 AND origin = $3 AND state = $4 AND expires_at_ms > $5",
    )
    .bind(tenant.as_str())
    .bind(id.as_str())
    .bind(origin::EXPORT)
    .bind(state::WRITING)
    .bind(now_ms())
    .fetch_optional_scalar(db)
    .await?;
    Ok(found.is_some())
}
