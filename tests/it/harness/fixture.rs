//! A fresh, migrated database for child processes ([`Fixture`]), with the test's own
//! handle on it: seeding and reading what the API does not show, in the default tenant
//! (the binaries run in open mode).

use context_ops::config::Config;
use context_ops::queue::Queue;
use context_ops::store::Db;

use super::app::{Backend, fresh_database, redis_url, unique};
use super::child::ServiceEnv;
use super::db::{self, DEFAULT_TENANT, OpRow};

/// A fresh, migrated database, how to run the binary on it, and the test's own handle on
/// it (for seeding and for reading what the API does not show).
pub struct Fixture {
    pub env: ServiceEnv,
    pub db: Db,
    _dir: tempfile::TempDir,
}

impl Fixture {
    /// On PostgreSQL, the queue is the shared Redis under a fresh namespace.
    pub async fn new(backend: Backend, lease_secs: u64) -> Fixture {
        Self::with_redis(backend, lease_secs, None).await
    }

    /// [`Self::new`] with a Redis of the test's own (PostgreSQL only).
    pub async fn with_redis(backend: Backend, lease_secs: u64, redis: Option<String>) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let database_url = fresh_database(backend, dir.path()).await;
        let env = ServiceEnv {
            database_url: database_url.clone(),
            redis_url: (backend == Backend::Postgres).then(|| redis.unwrap_or_else(redis_url)),
            namespace: unique("q"),
            lease_secs,
            dir: dir.path().to_path_buf(),
        };
        let migrate = env.clone();
        tokio::task::spawn_blocking(move || migrate.migrate()).await.unwrap();
        let db = Db::connect(&database_url, 2).await.unwrap();
        Fixture { env, db, _dir: dir }
    }

    /// A handle on the services' queue, as each of their processes has one.
    pub async fn queue(&self) -> Queue {
        let mut config = Config::defaults();
        config.queue.queue_namespace = self.env.namespace.clone();
        config.queue.redis_url = self.env.redis_url.clone();
        Queue::connect(&config, &self.db).await.expect("queue connects")
    }

    /// `n` messages in `conversation` (sequences 1..=n), seeded with SQL.
    pub async fn seed(&self, conversation: &str, n: i64) {
        db::seed_conversation(&self.db, DEFAULT_TENANT, conversation, n).await;
    }

    /// Messages left in `conversation`.
    pub async fn messages(&self, conversation: &str) -> i64 {
        db::message_count(&self.db, DEFAULT_TENANT, conversation).await
    }

    /// The conversation row's `message_count`; `None` once the row is gone.
    pub async fn conversation_count(&self, conversation: &str) -> Option<i64> {
        db::conversation_count(&self.db, DEFAULT_TENANT, conversation).await
    }

    pub async fn operation(&self, id: &str) -> OpRow {
        db::operation_row(&self.db, id).await
    }
}
