//! The statements an export runs on the artifacts tables inside its own fenced
//! transactions (`create_export_artifact!`, `insert_export_chunks!`,
//! `touch_export_artifact!`, `seal_export_artifact!`), discarding an abandoned export's
//! artifact, and `relax_commit!`, which import and rebuild batches use too.

use super::StoreResult;
use crate::db::Db;
use crate::with_pool;

/// In a checkpointed batch's transaction (`$conn` = `&mut *tx`, `$db` the [`Db`]): on
/// PostgreSQL, let its commit return before its WAL is flushed to disk. Safe for export,
/// import and vector-rebuild batches: a batch's effect and its checkpoint are one
/// transaction, so a server crash loses whole batches, newest first, and the job redoes them from the checkpoint
/// that survived; the operation's final transition is an ordinary durable commit, which
/// flushes everything before it. (A fsync per batch costs more than the batch on some
/// disks.) SQLite in WAL mode with `synchronous = NORMAL` already commits this way.
/// Evaluates to `Result<(), sqlx::Error>`.
#[macro_export]
macro_rules! relax_commit {
    ($conn:expr, $db:expr) => {
        async {
            if $db.engine() == $crate::db::Engine::Postgres {
                sqlx::query("SET LOCAL synchronous_commit = off").execute($conn).await?;
            }
            Ok::<(), sqlx::Error>(())
        }
        .await
    };
}

pub const CREATE_EXPORT_SQL: &str = "INSERT INTO artifacts (id, tenant, origin, state, operation_id, created_at_ms, \
     updated_at_ms, expires_at_ms) VALUES ($1, $2, 'export', 'writing', $3, $4, $4, $5)";

/// In an export's transaction (`$conn` = `&mut *tx`): create its artifact, `writing`.
/// Evaluates to `Result<(), sqlx::Error>`.
#[macro_export]
macro_rules! create_export_artifact {
    ($conn:expr, $id:expr, $tenant:expr, $operation:expr, $retention_days:expr) => {{
        let now = $crate::store::now_ms();
        sqlx::query($crate::store::artifact_exports::CREATE_EXPORT_SQL)
            .bind($id)
            .bind($tenant)
            .bind($operation)
            .bind(now)
            .bind(now.saturating_add(i64::from($retention_days) * 86_400_000))
            .execute($conn)
            .await
            .map(|_| ())
    }};
}

/// In an export's transaction: append `$chunks` (`&[(u64, Vec<u8>)]`, offsets from the
/// encoder) to artifact `$id`. Evaluates to `Result<(), sqlx::Error>`; an artifact deleted
/// meanwhile fails the foreign key ([`is_missing_parent`]).
#[macro_export]
macro_rules! insert_export_chunks {
    ($conn:expr, $id:expr, $chunks:expr) => {
        async {
            let conn = $conn;
            let id: &str = $id;
            let chunks: &[(u64, Vec<u8>)] = $chunks;
            for (offset, data) in chunks {
                sqlx::query(
                    "INSERT INTO artifact_chunks (artifact_id, start_offset, length, data) VALUES ($1, $2, $3, $4)",
                )
                .bind(id)
                .bind(*offset as i64)
                .bind(data.len() as i64)
                .bind(data.as_slice())
                .execute(&mut *conn)
                .await?;
            }
            // The connection's buffers grew to a chunk; give that back so a pool of
            // connections that each once carried a chunk does not hold one apiece.
            sqlx::Connection::shrink_buffers(&mut *conn);
            Ok::<(), sqlx::Error>(())
        }
        .await
    };
}

/// In an export's transaction: confirm artifact `$id` is still being written, and lock
/// its row against a concurrent delete until the commit. Evaluates to
/// `Result<bool /* still there */, sqlx::Error>`.
#[macro_export]
macro_rules! touch_export_artifact {
    ($conn:expr, $id:expr) => {
        sqlx::query("UPDATE artifacts SET updated_at_ms = $2 WHERE id = $1 AND state = 'writing'")
            .bind($id)
            .bind($crate::store::now_ms())
            .execute($conn)
            .await
            .map(|r| r.rows_affected() == 1)
    };
}

/// A foreign key found no parent row: the artifact a chunk belongs to is gone.
pub fn is_missing_parent(e: &sqlx::Error) -> bool {
    // PostgreSQL foreign_key_violation; SQLite SQLITE_CONSTRAINT_FOREIGNKEY.
    matches!(e, sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("23503") | Some("787")))
}

pub const SEAL_EXPORT_SQL: &str = "UPDATE artifacts SET state = 'ready', size_bytes = $2, digest = $3, messages = $4, \
     entries = $5, updated_at_ms = $6 WHERE id = $1 AND state = 'writing'";

/// In an export's last transaction: seal its artifact with size, digest and counts.
/// Evaluates to `Result<bool /* sealed */, sqlx::Error>`.
#[macro_export]
macro_rules! seal_export_artifact {
    ($conn:expr, $id:expr, $finished:expr) => {{
        let finished: &context_jobs::artifact::Finished = $finished;
        sqlx::query($crate::store::artifact_exports::SEAL_EXPORT_SQL)
            .bind($id)
            .bind(finished.size_bytes as i64)
            .bind(finished.digest.as_str())
            .bind(finished.messages as i64)
            .bind(finished.entries as i64)
            .bind($crate::store::now_ms())
            .execute($conn)
            .await
            .map(|r| r.rows_affected() == 1)
    }};
}

/// Remove an artifact an export gave up on (failed or cancelled), whatever its state.
pub async fn discard_export(db: &Db, tenant: &str, id: &str) -> StoreResult<()> {
    with_pool!(db, pool => {
        sqlx::query("DELETE FROM artifacts WHERE tenant = $1 AND id = $2 AND origin = 'export' AND state = 'writing'")
            .bind(tenant)
            .bind(id)
            .execute(pool)
            .await?;
    });
    Ok(())
}
