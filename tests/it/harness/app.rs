//! The service in-process on a real database over real HTTP.
//!
//! `TestApp::start(Backend::Sqlite)` runs it on a fresh SQLite file; `Backend::Postgres` on
//! a fresh schema of the `context_ops_test` database (created on first use) with the local
//! Redis, under its own queue namespace. `backend_tests!` generates one test per backend
//! for each async fn.

use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};

use context_ops::config::{Config, Role};
use context_ops::server::{self, Running};
use context_ops::store::Db;

use super::client::OpClient;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// SQLite store, apalis-sqlite queue in the same file.
    Sqlite,
    /// PostgreSQL store, Redis queue (the production pairing).
    Postgres,
}

/// The PostgreSQL server the tests use (`TEST_POSTGRES_URL`, default the local one).
fn postgres_server_url() -> String {
    std::env::var("TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

pub fn redis_url() -> String {
    std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A name no other test (or earlier run) uses: schemas, queue namespaces, tokens.
pub fn unique(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        ulid::Ulid::generate().to_string().to_lowercase()
    )
}

/// A database URL of a fresh, empty database for `backend`. `dir` keeps SQLite files.
pub async fn fresh_database(backend: Backend, dir: &std::path::Path) -> String {
    fresh_database_in(backend, dir, "context_ops_test", "").await
}

/// Like [`fresh_database`], but PostgreSQL's default collation is linguistic (ICU `en-US`:
/// `a < B < b`), as a production database created with `en_US.UTF-8` has it; the test
/// server's own databases use `C.UTF-8`, which orders text as bytes already.
pub async fn fresh_linguistic_database(backend: Backend, dir: &std::path::Path) -> String {
    fresh_database_in(
        backend,
        dir,
        "context_ops_test_icu",
        " TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'",
    )
    .await
}

/// A new schema in PostgreSQL database `name` (created `WITH {options}` if missing).
async fn fresh_database_in(backend: Backend, dir: &std::path::Path, name: &str, options: &str) -> String {
    match backend {
        Backend::Sqlite => format!("sqlite:{}", dir.join(format!("{}.sqlite", unique("t"))).display()),
        Backend::Postgres => {
            let server = postgres_server_url();
            let admin = sqlx::PgPool::connect(&format!("{server}/postgres")).await.expect("connect to test PostgreSQL");
            let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
                .bind(name)
                .fetch_optional(&admin)
                .await
                .unwrap();
            if exists.is_none() {
                // Concurrent tests may race to create it; losing the race is fine.
                let _ =
                    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}{options}"))).execute(&admin).await;
            }
            admin.close().await;
            let schema = unique("s");
            let db = sqlx::PgPool::connect(&format!("{server}/{name}")).await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&db).await.unwrap();
            db.close().await;
            format!("{server}/{name}?options[search_path]={schema}")
        }
    }
}

/// A running in-process service. Derefs to its [`OpClient`] (`app.post(…)`,
/// `app.operation(…)`, `app.wait_terminal(…)`).
pub struct TestApp {
    pub backend: Backend,
    pub api: OpClient,
    pub database_url: String,
    running: Option<Running>,
    _dir: tempfile::TempDir,
}

impl Deref for TestApp {
    type Target = OpClient;
    fn deref(&self) -> &OpClient {
        &self.api
    }
}

impl TestApp {
    pub async fn start(backend: Backend) -> Self {
        Self::start_with(backend, |_| {}).await
    }

    pub async fn start_with(backend: Backend, tweak: impl FnOnce(&mut Config)) -> Self {
        Self::start_command(backend, Role::Serve, tweak).await
    }

    /// Start with a given command: `Role::Api` runs no workers, so operations stay queued.
    pub async fn start_command(backend: Backend, command: Role, tweak: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::defaults();
        config.http.bind = "127.0.0.1:0".parse().unwrap();
        config.database.database_url = fresh_database(backend, dir.path()).await;
        config.database.db_max_connections = 8;
        // Many apps share a 2-core machine here: a pool wait is contention, not an outage
        // (`faults::outages` runs the binary with the production default).
        config.database.db_acquire_timeout_ms = 5000;
        config.queue.queue_namespace = unique("q");
        if backend == Backend::Postgres {
            config.queue.redis_url = Some(redis_url());
        }
        config.queue.dispatch_interval_ms = 200;
        // The sweep deletes old messages on its own schedule; tests that want it enable it.
        config.retention.retention_sweep_secs = 0;
        // Fixed batches: a test that sets a batch size wants that many rows per batch (to
        // stop mid-run); `operations::pacing` tests batches paced by time.
        config.worker.batch_target_ms = Some(0);
        tweak(&mut config);
        let database_url = config.database.database_url.clone();
        let running = server::start(config, command).await.expect("service starts");
        Self {
            backend,
            api: OpClient::new(format!("http://{}", running.addr)),
            database_url,
            running: Some(running),
            _dir: dir,
        }
    }

    /// Another service on `other`'s database and queue namespace (e.g. workers for what an
    /// API-only app queued). `other` must outlive it: it owns the SQLite file.
    pub async fn start_on(other: &TestApp, command: Role, tweak: impl FnOnce(&mut Config)) -> Self {
        let database_url = other.database_url.clone();
        let namespace = other.running().state.config.queue.queue_namespace.clone();
        Self::start_command(other.backend, command, |config| {
            config.database.database_url = database_url;
            config.queue.queue_namespace = namespace;
            tweak(config);
        })
        .await
    }

    pub fn running(&self) -> &Running {
        self.running.as_ref().unwrap()
    }

    /// The service's own database handle.
    pub fn db(&self) -> &Db {
        &self.running().state.db
    }

    /// Every request without its own token carries `token`.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.api.token = Some(token.into());
        self
    }

    pub async fn stop(mut self) {
        if let Some(running) = self.running.take() {
            running.stop().await.unwrap();
        }
    }
}

/// One test per backend (`…::sqlite`, `…::postgres`) for each named async fn:
///
/// - `backend_tests!(a, b)`: `async fn(TestApp)`, the app started with defaults;
/// - `backend_tests!(start = f; a, b)`: `async fn(TestApp)`, the app from `f(Backend)`;
/// - `backend_tests!(backend: a, b)`: `async fn(Backend)`, the test starts what it needs.
macro_rules! backend_tests {
    (backend: $($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name($crate::harness::Backend::Sqlite).await;
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name($crate::harness::Backend::Postgres).await;
                }
            }
        )*
    };
    (start = $start:ident; $($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name(super::$start($crate::harness::Backend::Sqlite).await).await;
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name(super::$start($crate::harness::Backend::Postgres).await).await;
                }
            }
        )*
    };
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name($crate::harness::TestApp::start($crate::harness::Backend::Sqlite).await).await;
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name($crate::harness::TestApp::start($crate::harness::Backend::Postgres).await).await;
                }
            }
        )*
    };
}
