//! The database handle: one enum over the two engines, connection setup, embedded
//! migrations, and the `with_pool!` switch that lets one query body serve both engines.
//!
//! Query text is written once: both engines accept `$N` placeholders, `ON CONFLICT`,
//! `RETURNING` and the column types we use (TEXT, BIGINT, BLOB/BYTEA via engine-specific
//! DDL only). Where an engine needs its own SQL the store branches on [`Db::engine`].

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context as _;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection as _, PgConnection, PgPool, SqlSafeStr, SqlitePool, Transaction};

#[derive(Clone, Debug)]
pub enum Db {
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Postgres,
    Sqlite,
}

/// Run one body against whichever pool `$db` holds. The body is compiled once per engine,
/// so ordinary generic sqlx code (`query(..).bind(..).fetch_all($pool)`) serves both.
#[macro_export]
macro_rules! with_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            $crate::db::Db::Postgres($pool) => $body,
            $crate::db::Db::Sqlite($pool) => $body,
        }
    };
}

/// Starting a write transaction: SQLite must take the write lock up front (`BEGIN
/// IMMEDIATE`), or two deferred transactions that both upgrade to writers fail with
/// `SQLITE_BUSY` instead of waiting.
pub trait BeginWrite {
    type Database: sqlx::Database;
    fn begin_write(&self) -> impl Future<Output = Result<Transaction<'static, Self::Database>, sqlx::Error>> + Send;
}

impl BeginWrite for PgPool {
    type Database = sqlx::Postgres;
    async fn begin_write(&self) -> Result<Transaction<'static, sqlx::Postgres>, sqlx::Error> {
        self.begin().await
    }
}

impl BeginWrite for SqlitePool {
    type Database = sqlx::Sqlite;
    async fn begin_write(&self) -> Result<Transaction<'static, sqlx::Sqlite>, sqlx::Error> {
        self.begin_with("BEGIN IMMEDIATE").await
    }
}

/// The URL with any password replaced, for log lines and error messages.
pub fn redact_url(url: &str) -> String {
    let Some(scheme) = url.find("://") else { return url.to_string() };
    let rest = &url[scheme + 3..];
    // The userinfo ends at the last '@' before the path starts.
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else { return url.to_string() };
    match rest[..at].split_once(':') {
        Some((user, _password)) => format!("{}://{}:***@{}", &url[..scheme], user, &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// PostgreSQL `idle_in_transaction_session_timeout` of every connection (see `Db::connect`).
const IDLE_IN_TRANSACTION_TIMEOUT: &str = "5s";

impl Db {
    /// Connect to `url` (`postgres://…` or `sqlite:…`), failing fast with one clear line.
    pub async fn connect(url: &str, max_connections: u32) -> anyhow::Result<Db> {
        let shown = redact_url(url);
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let options = PgConnectOptions::from_str(url)
                .with_context(|| format!("invalid DATABASE_URL {shown}"))?
                // A process frozen inside a transaction (SIGSTOP, VM pause, half-open TCP)
                // would keep its row locks and block, forever, the worker that took over its
                // lease; PostgreSQL ends such a session and rolls it back instead. No
                // transaction of ours waits on anything but the database between statements.
                .options([("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION_TIMEOUT)]);
            // One direct attempt first: the pool would retry a refused connection until its
            // acquire timeout and then report only "pool timed out", hiding the cause.
            let probe = tokio::time::timeout(Duration::from_secs(10), PgConnection::connect_with(&options))
                .await
                .map_err(|_| anyhow::anyhow!("timed out after 10 s"))
                .and_then(|r| r.map_err(anyhow::Error::from))
                .with_context(|| format!("cannot connect to PostgreSQL at {shown}"))?;
            let _ = probe.close().await;
            let pool = PgPoolOptions::new()
                .max_connections(max_connections)
                // A few connections kept open: a burst (a rebuild's reader and writer beside
                // the API) then finds them ready. A connection made mid-burst was measured
                // to answer its first large result ~90 ms late. Opened at start-up (tens of
                // milliseconds; a lazily filled pool was found still cold when the burst came).
                .min_connections(max_connections.min(WARM_CONNECTIONS))
                .acquire_timeout(Duration::from_secs(10))
                .after_connect(|conn, _| Box::pin(crate::nodelay::disable_nagle(conn)))
                .connect_with(options)
                .await
                .with_context(|| format!("cannot connect to PostgreSQL at {shown}"))?;
            Ok(Db::Postgres(pool))
        } else if url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(url)
                .with_context(|| format!("invalid DATABASE_URL {shown}"))?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(30))
                .foreign_keys(true);
            let pool = SqlitePoolOptions::new()
                .max_connections(max_connections.min(8))
                .acquire_timeout(Duration::from_secs(30))
                .connect_with(options)
                .await
                .with_context(|| format!("cannot open SQLite database {shown}"))?;
            Ok(Db::Sqlite(pool))
        } else {
            anyhow::bail!("unsupported DATABASE_URL {shown}: expected postgres://… or sqlite:…")
        }
    }

    pub fn engine(&self) -> Engine {
        match self {
            Db::Postgres(_) => Engine::Postgres,
            Db::Sqlite(_) => Engine::Sqlite,
        }
    }

    /// Apply our embedded migrations (the engine's own directory, same version numbers).
    pub async fn migrate(&self) -> anyhow::Result<()> {
        self.migrate_until(i64::MAX).await
    }

    /// Apply the migrations up to `version` (tests of a later migration start from here).
    #[doc(hidden)]
    pub async fn migrate_until(&self, version: i64) -> anyhow::Result<()> {
        let set = match self.engine() {
            Engine::Postgres => POSTGRES_MIGRATIONS,
            Engine::Sqlite => SQLITE_MIGRATIONS,
        };
        let migrations = set
            .iter()
            .filter(|m| m.0 <= version)
            .map(|(version, name, sql)| {
                Migration::new(*version, (*name).into(), MigrationType::Simple, sql.into_sql_str(), false)
            })
            .collect();
        let migrator = Migrator::with_migrations(migrations);
        with_pool!(self, pool => migrator.run(pool).await).context("database migration failed")?;
        Ok(())
    }

    pub async fn close(&self) {
        with_pool!(self, pool => pool.close().await)
    }
}

/// PostgreSQL connections each pool keeps open when idle.
const WARM_CONNECTIONS: u32 = 6;

type MigrationSet = &'static [(i64, &'static str, &'static str)];

const POSTGRES_MIGRATIONS: MigrationSet = &[
    (1, "messages", include_str!("../migrations/postgres/0001_messages.sql")),
    (2, "operations", include_str!("../migrations/postgres/0002_operations.sql")),
    (3, "entries", include_str!("../migrations/postgres/0003_entries.sql")),
    (4, "artifacts", include_str!("../migrations/postgres/0004_artifacts.sql")),
    (5, "deleting_index", include_str!("../migrations/postgres/0005_deleting_index.sql")),
    (6, "operation_notify", include_str!("../migrations/postgres/0006_operation_notify.sql")),
    (7, "projection_watermark", include_str!("../migrations/postgres/0007_projection_watermark.sql")),
];

const SQLITE_MIGRATIONS: MigrationSet = &[
    (1, "messages", include_str!("../migrations/sqlite/0001_messages.sql")),
    (2, "operations", include_str!("../migrations/sqlite/0002_operations.sql")),
    (3, "entries", include_str!("../migrations/sqlite/0003_entries.sql")),
    (4, "artifacts", include_str!("../migrations/sqlite/0004_artifacts.sql")),
    (5, "deleting_index", include_str!("../migrations/sqlite/0005_deleting_index.sql")),
    (6, "operation_notify", include_str!("../migrations/sqlite/0006_operation_notify.sql")),
    (7, "projection_watermark", include_str!("../migrations/sqlite/0007_projection_watermark.sql")),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact_url("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact_url("sqlite:ctx.sqlite"), "sqlite:ctx.sqlite");
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("postgres://u:p@h/db?x=a@b"), "postgres://u:***@h/db?x=a@b");
    }

    #[test]
    fn both_engines_have_the_same_migration_versions() {
        let pg: Vec<_> = POSTGRES_MIGRATIONS.iter().map(|m| m.0).collect();
        let lite: Vec<_> = SQLITE_MIGRATIONS.iter().map(|m| m.0).collect();
        assert_eq!(pg, lite);
    }
}
