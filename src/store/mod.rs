//! Persistence: one file per table family, each written once for both engines through
//! [`crate::with_pool!`]. Store functions take the tenant key first: no query runs unscoped.

pub mod append;
pub mod artifact_exports;
pub mod artifacts;
pub mod changes;
pub mod entries;
pub mod entry_writes;
pub mod export_pages;
pub mod fenced;
pub mod leases;
pub mod maintenance;
pub mod messages;
pub mod operations;
pub mod pg_copy;
pub mod recall_index;
pub mod sqlite_rows;
pub mod vector_writes;
pub mod vectors;

use std::time::{SystemTime, UNIX_EPOCH};

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

pub type StoreResult<T> = Result<T, StoreError>;

/// Errors worth retrying: the database was unreachable, overloaded or restarting, or two
/// writers collided in a way the engine asks us to retry.
pub fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed => true,
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            // PostgreSQL: serialization/deadlock, admin shutdown, too many connections;
            // SQLite: BUSY (5) and LOCKED (6) in their extended forms.
            matches!(code.as_ref(), "40001" | "40P01" | "57P01" | "57P02" | "57P03" | "53300")
                || code.starts_with("08")
                // SQLite BUSY/LOCKED and their extended codes; PostgreSQL SQLSTATEs are five
                // characters and never match these.
                || matches!(code.as_ref(), "5" | "261" | "517" | "773" | "6" | "262" | "518")
        }
        _ => false,
    }
}

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

#[cfg(test)]
mod tests {
    #[test]
    fn placeholder_lists() {
        assert_eq!(super::placeholders(3, 2), "$3, $4");
        assert_eq!(super::row_placeholders(1, 2, 2), "($1, $2), ($3, $4)");
    }
}
