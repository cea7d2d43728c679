//! Persistence: every SQL statement of the service lives under this module, written once
//! for both engines ([`engine::query`]), grouped by what it owns. Store functions take the
//! tenant key first: no query runs unscoped.
//!
//! - `engine/` — the two engines, transactions, the statement runner, engine-specific bulk
//!   paths (PostgreSQL `COPY`, SQLite's row API).
//! - `operations/` — operation rows: submission, reads, the one transition writer, dispatch.
//! - `messages/` — messages and conversations: append, reads, batched deletes.
//! - `entries/` — entries and their history.
//! - `vectors/` — the vector projection: walks, watermark, writes.
//! - `artifacts/` — artifacts and their chunks: reads, uploads, what an export writes.
//! - `maintenance` — exclusive periodic ticks shared by every process.
//! - `queue_jobs` — the embedded queue's own tables (apalis-sqlite), beside apalis.
//! - `rate_limits` — the embedded deployment's provider rate limiter.

pub mod artifacts;
pub mod engine;
pub mod entries;
pub mod maintenance;
pub mod messages;
pub mod operations;
pub mod queue_jobs;
pub mod rate_limits;
pub mod spares;
pub mod vectors;

use std::time::{SystemTime, UNIX_EPOCH};

pub use engine::{Db, Engine, Exec, Tx, is_transient, query};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl StoreError {
    /// A database error worth retrying (see [`is_transient`]).
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Db(e) if is_transient(e))
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// `$start, $start+1, …` for `n` parameters: the only dynamic part of any SQL text we build.
pub(crate) fn placeholders(start: usize, n: usize) -> String {
    (start..start + n).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}

/// `($a, $b, …), ($c, …)` for `rows` rows of `cols` parameters starting at `$start`.
pub(crate) fn row_placeholders(start: usize, rows: usize, cols: usize) -> String {
    (0..rows).map(|r| format!("({})", placeholders(start + r * cols, cols))).collect::<Vec<_>>().join(", ")
}

/// The stored length in bytes of a text or blob `column`, as SQL: both engines read it
/// from the value's header (PostgreSQL without detoasting it; SQLite 3.43+ without loading
/// it — the bundled SQLite is 3.51), so sizing a page does not read its text.
pub(crate) fn byte_length(column: &str) -> String {
    format!("octet_length({column})")
}

/// JSON text for a stored column; `Null` is stored as SQL NULL.
pub(crate) fn json_column(v: &serde_json::Value) -> Option<String> {
    (!v.is_null()).then(|| v.to_string())
}

pub(crate) fn parse_json_column(s: Option<String>) -> StoreResult<serde_json::Value> {
    match s {
        None => Ok(serde_json::Value::Null),
        Some(s) => serde_json::from_str(&s).map_err(|e| StoreError::Other(anyhow::anyhow!("corrupt JSON column: {e}"))),
    }
}

/// The database answers (readiness of `/health`).
pub async fn ping(db: &Db) -> StoreResult<()> {
    query("SELECT 1").execute(db).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn placeholder_lists() {
        assert_eq!(super::placeholders(3, 2), "$3, $4");
        assert_eq!(super::row_placeholders(1, 2, 2), "($1, $2), ($3, $4)");
    }
}
