//! The test harness: a real service on a real database over real HTTP.
//!
//! `TestApp::start(Backend::Sqlite)` runs the service in-process on a fresh SQLite file;
//! `Backend::Postgres` on a fresh schema of the `context_ops_test` database (created on
//! first use). `backend_tests!(name, …)` generates one test per backend for each async fn.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

use context_ops::config::{Command, Config};
use context_ops::server::{self, Running};
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The PostgreSQL server the tests use (`TEST_POSTGRES_URL`, default the local one).
pub fn postgres_server_url() -> String {
    std::env::var("TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

pub fn redis_url() -> String {
    std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

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
    match backend {
        Backend::Sqlite => format!("sqlite:{}", dir.join(format!("{}.sqlite", unique("t"))).display()),
        Backend::Postgres => {
            let server = postgres_server_url();
            let admin = sqlx::PgPool::connect(&format!("{server}/postgres")).await.expect("connect to test PostgreSQL");
            let exists: Option<i32> =
                sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = 'context_ops_test'")
                    .fetch_optional(&admin)
                    .await
                    .unwrap();
            if exists.is_none() {
                // Concurrent test binaries may race to create it; losing the race is fine.
                let _ = sqlx::query("CREATE DATABASE context_ops_test").execute(&admin).await;
            }
            admin.close().await;
            let schema = unique("s");
            let db = sqlx::PgPool::connect(&format!("{server}/context_ops_test")).await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&db).await.unwrap();
            db.close().await;
            format!("{server}/context_ops_test?options[search_path]={schema}")
        }
    }
}

pub struct TestApp {
    pub backend: Backend,
    pub base: String,
    pub client: reqwest::Client,
    pub token: Option<String>,
    pub database_url: String,
    running: Option<Running>,
    _dir: tempfile::TempDir,
}

impl TestApp {
    pub async fn start(backend: Backend) -> Self {
        Self::start_with(backend, |_| {}).await
    }

    pub async fn start_with(backend: Backend, tweak: impl FnOnce(&mut Config)) -> Self {
        Self::start_command(backend, Command::Serve, tweak).await
    }

    /// Start with a given command: `Command::Api` runs no workers, so operations stay queued.
    pub async fn start_command(backend: Backend, command: Command, tweak: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::defaults();
        config.bind = "127.0.0.1:0".parse().unwrap();
        config.database_url = fresh_database(backend, dir.path()).await;
        config.db_max_connections = 8;
        config.queue_namespace = unique("q");
        if backend == Backend::Postgres {
            config.redis_url = Some(redis_url());
        }
        config.dispatch_interval_ms = 200;
        // The sweep deletes old messages on its own schedule; tests that want it enable it.
        config.retention_sweep_secs = 0;
        tweak(&mut config);
        let database_url = config.database_url.clone();
        let running = server::start(config, command).await.expect("service starts");
        Self {
            backend,
            base: format!("http://{}", running.addr),
            client: reqwest::Client::new(),
            token: None,
            database_url,
            running: Some(running),
            _dir: dir,
        }
    }

    /// Another service on `other`'s database and queue namespace (e.g. workers for what an
    /// API-only app queued). `other` must outlive it: it owns the SQLite file.
    pub async fn start_on(other: &TestApp, command: Command, tweak: impl FnOnce(&mut Config)) -> Self {
        let database_url = other.database_url.clone();
        let namespace = other.running().state.config.queue_namespace.clone();
        Self::start_command(other.backend, command, |config| {
            config.database_url = database_url;
            config.queue_namespace = namespace;
            tweak(config);
        })
        .await
    }

    pub fn running(&self) -> &Running {
        self.running.as_ref().unwrap()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    fn authed(&self, rb: reqwest::RequestBuilder, token: Option<&str>) -> reqwest::RequestBuilder {
        match token.or(self.token.as_deref()) {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    /// POST JSON and return `(status, body)`.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_as(None, path, body).await
    }

    pub async fn post_as(&self, token: Option<&str>, path: &str, body: &Value) -> (u16, Value) {
        let response = self.authed(self.client.post(self.url(path)), token).json(body).send().await.unwrap();
        read(response).await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.authed(self.client.get(self.url(path)), None).send().await.unwrap();
        read(response).await
    }

    pub async fn append(&self, records: Vec<Value>) -> Value {
        let (status, body) = self.post("/internal/v1/context/messages/batch", &json!({"messages": records})).await;
        assert_eq!(status, 200, "append failed: {body}");
        body
    }

    pub async fn stop(mut self) {
        if let Some(running) = self.running.take() {
            running.stop().await.unwrap();
        }
    }
}

pub async fn read(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let body = if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
    (status, body)
}

pub fn message(conversation: &str, id: &str, role: &str, text: &str) -> Value {
    json!({"id": id, "scope": {"conversationId": conversation}, "role": role, "content": text})
}

/// Assert the body is the contract's `ApiError` with `status`.
pub fn assert_api_error(status: u16, body: &Value, expected: u16) {
    assert_eq!(status, expected, "unexpected status, body {body}");
    assert_eq!(body["status"], expected, "ApiError.status mismatch: {body}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "ApiError.message missing: {body}");
    assert_eq!(body.as_object().map(|o| o.len()), Some(2), "ApiError has exactly status+message: {body}");
}

/// One test per backend for each named `async fn(TestApp)`.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    let app = $crate::common::TestApp::start($crate::common::Backend::Sqlite).await;
                    super::$name(app).await;
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    let app = $crate::common::TestApp::start($crate::common::Backend::Postgres).await;
                    super::$name(app).await;
                }
            }
        )*
    };
}
