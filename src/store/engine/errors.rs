//! Which database errors are transient, and the fixed words an operation shows for them
//! (driver text stays in the log); which one is a duplicate key.

/// Errors worth retrying: the database was unreachable, overloaded or restarting, or two
/// writers collided in a way the engine asks us to retry.
pub fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed => true,
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            // PostgreSQL: serialization/deadlock, admin shutdown, too many connections.
            matches!(code.as_ref(), "40001" | "40P01" | "57P01" | "57P02" | "57P03" | "53300")
                || code.starts_with("08")
                // SQLite BUSY/LOCKED and their extended codes; PostgreSQL SQLSTATEs are five
                // characters and never match these.
                || matches!(code.as_ref(), "5" | "261" | "517" | "773" | "6" | "262" | "518")
        }
        _ => false,
    }
}

/// Why a transient error (see [`is_transient`]) happened, in fixed words: what an
/// operation's `error` says while it waits to retry. The driver's own text stays in the log
/// (it can name internals and quote data).
pub fn transient_reason(e: &sqlx::Error) -> &'static str {
    match e {
        sqlx::Error::PoolTimedOut => "timed out waiting for a database connection",
        sqlx::Error::PoolClosed => "the database pool is closed",
        sqlx::Error::Io(_) => "the database connection failed (I/O error)",
        sqlx::Error::Database(db) => match db.code().unwrap_or_default().as_ref() {
            "40001" => "the database aborted the transaction (serialization failure)",
            "40P01" => "the database aborted the transaction (deadlock detected)",
            "57P01" | "57P02" | "57P03" => {
                "the database terminated the connection (administrator command, crash or restart)"
            }
            "53300" => "the database has too many connections",
            code if code.starts_with("08") => "the database connection failed",
            _ => "the database is busy (locked by another writer)",
        },
        _ => "the database was unavailable",
    }
}

/// A unique index refused the write (PostgreSQL 23505): what the optimistic bulk inserts
/// catch to fall back to their checked paths.
pub fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505"))
}
