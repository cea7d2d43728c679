//! The database engines: one enum over the two pools ([`Db`]) and their write
//! transactions ([`Tx`]), connection setup, embedded migrations, and [`query`], which runs
//! one statement text on either engine.
//!
//! Query text is written once: both engines accept `$N` placeholders, `ON CONFLICT`,
//! `RETURNING` and the column types we use (TEXT, BIGINT, BLOB/BYTEA via engine-specific
//! DDL only). Where an engine needs its own SQL the store matches on [`Tx`] or [`Db`].

mod errors;
pub mod pg_copy;
mod query;
mod socket;
pub mod sqlite_rows;
mod tx;

pub use errors::{is_transient, is_unique_violation, transient_reason};
pub use query::{Arg, Exec, Params, Query, Row, query};
pub use tx::{PgTx, SqliteTx, Tx};

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context as _;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection as _, PgConnection, PgPool, SqlSafeStr, SqlitePool};

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

/// How long a PostgreSQL request waits for a pool connection by default. With the server
/// down, sqlx retries the refused connection until this deadline, so it is also how long
/// every request takes to answer 503: short, so callers and health checks learn fast.
pub const PG_ACQUIRE_TIMEOUT: Duration = Duration::from_millis(800);

impl Db {
    /// Connect to `url` (`postgres://…` or `sqlite:…`), failing fast with one clear line.
    pub async fn connect(url: &str, max_connections: u32) -> anyhow::Result<Db> {
        Self::connect_with(url, max_connections, PG_ACQUIRE_TIMEOUT).await
    }

    /// [`Self::connect`] with the PostgreSQL pool's acquire timeout (SQLite waits on its
    /// write lock instead, and keeps its own 30 s).
    pub async fn connect_with(url: &str, max_connections: u32, pg_acquire_timeout: Duration) -> anyhow::Result<Db> {
        let shown = redact_url(url);
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let options = PgConnectOptions::from_str(url)
                .with_context(|| format!("invalid DATABASE_URL {shown}"))?
                // A process frozen inside a transaction (SIGSTOP, VM pause, half-open TCP)
                // would keep its row locks and block, forever, the worker that took over its
                // lease; PostgreSQL ends such a session and rolls it back instead. No
                // transaction of ours waits on anything but the database between statements.
                // Every commit waits for its WAL flush, whatever the role's or the server's
                // default, unless a batch relaxes it (`Tx::relax_commit`): an entry write
                // must be durable before it is visible (`Tx::durable_commit`).
                .options([
                    ("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION_TIMEOUT),
                    ("synchronous_commit", "on"),
                ]);
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
                .acquire_timeout(pg_acquire_timeout)
                // sqlx pings a connection (a round trip) before it hands it out and again
                // when it takes it back: an empty operation's three checkouts made 6 of its
                // 13 PostgreSQL round trips pings. The ping after a checkout is sqlx's own
                // and stays; the one before is made only for a connection idle long enough
                // to have been cut (a server restart, a proxy's idle timeout). A hot one that
                // died fails its statement, as it would have failed between a ping and the
                // statement, and is not pooled again (tests/it/pool.rs).
                .test_before_acquire(false)
                .before_acquire(|conn, meta| {
                    Box::pin(async move {
                        if meta.idle_for >= PING_IF_IDLE {
                            conn.ping().await?;
                        }
                        Ok(true)
                    })
                })
                .after_connect({
                    let options = options.clone();
                    move |_, _| {
                        socket::harden(&options);
                        Box::pin(async { Ok(()) })
                    }
                })
                // sqlx grows a connection's buffers to its largest message and keeps them:
                // after an export's chunk commits (4 MiB of parameters) or an import batch,
                // every pooled connection would hold megabytes for the rest of its life.
                .after_release(|conn, _| {
                    Box::pin(async move {
                        conn.shrink_buffers();
                        Ok(true)
                    })
                })
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

    /// Start a write transaction.
    pub async fn begin_write(&self) -> Result<Tx, sqlx::Error> {
        Ok(match self {
            Db::Postgres(pool) => Tx::Postgres(tx::PgTx::new(pool.begin().await?)),
            Db::Sqlite(pool) => Tx::Sqlite(SqliteTx::begin(pool).await?),
        })
    }

    /// Apply our embedded migrations (the engine's own directory, same version numbers).
    pub async fn migrate(&self) -> anyhow::Result<()> {
        self.migrate_until(i64::MAX).await
    }

    /// Apply the migrations up to `version` (tests of a later migration start from here).
    #[doc(hidden)]
    pub async fn migrate_until(&self, version: i64) -> anyhow::Result<()> {
        let _lock = self.migration_lock().await?;
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
        match self {
            Db::Postgres(pool) => migrator.run(pool).await,
            Db::Sqlite(pool) => migrator.run(pool).await,
        }
        .context("database migration failed")?;
        Ok(())
    }

    /// Hold this while migrating. PostgreSQL needs nothing (sqlx takes an advisory lock),
    /// but SQLite has no such lock: processes starting together on a fresh file raced
    /// through the migrations (both inserting version 1 into the migrations table). An
    /// exclusive lock on a file beside the database serializes them; it is released when
    /// the returned file is dropped. In-memory databases are one process's own.
    pub async fn migration_lock(&self) -> anyhow::Result<Option<std::fs::File>> {
        let Db::Sqlite(pool) = self else { return Ok(None) };
        let database = pool.connect_options().get_filename().to_path_buf();
        if database.as_os_str().is_empty() || database.to_string_lossy().contains(":memory:") {
            return Ok(None);
        }
        let mut path = database.into_os_string();
        path.push(".migrate-lock");
        let lock = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
            let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
            file.lock()?;
            Ok(file)
        });
        let file = lock.await?.context("cannot lock the SQLite database for migrating")?;
        Ok(Some(file))
    }

    pub async fn close(&self) {
        match self {
            Db::Postgres(pool) => pool.close().await,
            Db::Sqlite(pool) => pool.close().await,
        }
    }
}

/// PostgreSQL connections each pool keeps open when idle.
const WARM_CONNECTIONS: u32 = 6;

/// A pooled PostgreSQL connection idle this long is pinged before it is handed out.
const PING_IF_IDLE: Duration = Duration::from_secs(1);

type MigrationSet = &'static [(i64, &'static str, &'static str)];

const POSTGRES_MIGRATIONS: MigrationSet = &[
    (1, "messages", include_str!("../../../migrations/postgres/0001_messages.sql")),
    (2, "operations", include_str!("../../../migrations/postgres/0002_operations.sql")),
    (3, "entries", include_str!("../../../migrations/postgres/0003_entries.sql")),
    (4, "artifacts", include_str!("../../../migrations/postgres/0004_artifacts.sql")),
    (5, "deleting_index", include_str!("../../../migrations/postgres/0005_deleting_index.sql")),
    (6, "operation_notify", include_str!("../../../migrations/postgres/0006_operation_notify.sql")),
    (7, "projection_watermark", include_str!("../../../migrations/postgres/0007_projection_watermark.sql")),
    (8, "queue_control", include_str!("../../../migrations/postgres/0008_queue_control.sql")),
    (9, "operation_changes", include_str!("../../../migrations/postgres/0009_operation_changes.sql")),
    (11, "changes_on_redis", include_str!("../../../migrations/postgres/0011_changes_on_redis.sql")),
    (
        12,
        "artifact_chunk_compression",
        include_str!("../../../migrations/postgres/0012_artifact_chunk_compression.sql"),
    ),
    (13, "operation_partial_indexes", include_str!("../../../migrations/postgres/0013_operation_partial_indexes.sql")),
    (14, "operation_queue_indexes", include_str!("../../../migrations/postgres/0014_operation_queue_indexes.sql")),
    (15, "bytewise_keys", include_str!("../../../migrations/postgres/0015_bytewise_keys.sql")),
    (16, "stranded_cancels", include_str!("../../../migrations/postgres/0016_stranded_cancels.sql")),
];

const SQLITE_MIGRATIONS: MigrationSet = &[
    (1, "messages", include_str!("../../../migrations/sqlite/0001_messages.sql")),
    (2, "operations", include_str!("../../../migrations/sqlite/0002_operations.sql")),
    (3, "entries", include_str!("../../../migrations/sqlite/0003_entries.sql")),
    (4, "artifacts", include_str!("../../../migrations/sqlite/0004_artifacts.sql")),
    (5, "deleting_index", include_str!("../../../migrations/sqlite/0005_deleting_index.sql")),
    (6, "operation_notify", include_str!("../../../migrations/sqlite/0006_operation_notify.sql")),
    (7, "projection_watermark", include_str!("../../../migrations/sqlite/0007_projection_watermark.sql")),
    (8, "queue_control", include_str!("../../../migrations/sqlite/0008_queue_control.sql")),
    (9, "operation_changes", include_str!("../../../migrations/sqlite/0009_operation_changes.sql")),
    (11, "changes_on_redis", include_str!("../../../migrations/sqlite/0011_changes_on_redis.sql")),
    (12, "artifact_chunk_compression", include_str!("../../../migrations/sqlite/0012_artifact_chunk_compression.sql")),
    (13, "operation_partial_indexes", include_str!("../../../migrations/sqlite/0013_operation_partial_indexes.sql")),
    (14, "operation_queue_indexes", include_str!("../../../migrations/sqlite/0014_operation_queue_indexes.sql")),
    (15, "bytewise_keys", include_str!("../../../migrations/sqlite/0015_bytewise_keys.sql")),
    (16, "stranded_cancels", include_str!("../../../migrations/sqlite/0016_stranded_cancels.sql")),
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

    /// Every file under `migrations/` is in its engine's list (a file left out is never
    /// applied, and nothing else would say so).
    #[test]
    fn every_migration_file_is_registered() {
        for (engine, set) in [("postgres", POSTGRES_MIGRATIONS), ("sqlite", SQLITE_MIGRATIONS)] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations").join(engine);
            let mut files: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|name| name.ends_with(".sql"))
                .collect();
            files.sort();
            let registered: Vec<String> = set.iter().map(|(v, name, _)| format!("{v:04}_{name}.sql")).collect();
            assert_eq!(files, registered, "migrations/{engine} and its list in src/store/engine/mod.rs differ");
        }
    }

    #[test]
    fn both_engines_have_the_same_migration_versions() {
        let pg: Vec<_> = POSTGRES_MIGRATIONS.iter().map(|m| m.0).collect();
        let lite: Vec<_> = SQLITE_MIGRATIONS.iter().map(|m| m.0).collect();
        assert_eq!(pg, lite);
    }
}
