//! Connecting: PostgreSQL without Redis is a start-up error, an unreachable Redis fails
//! fast without echoing its password, and the SQLite queue's migrations stay out of ours.

use std::time::{Duration, Instant};

use context_ops::config::Config;
use context_ops::queue::Queue;
use context_ops::store::Db;

use super::Env;
use crate::harness::{Backend, fresh_database};

#[tokio::test]
async fn postgres_without_redis_is_a_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_database(Backend::Postgres, dir.path()).await;
    let db = Db::connect(&url, 2).await.unwrap();
    let mut config = Config::defaults();
    config.queue.redis_url = None;
    let error = Queue::connect(&config, &db).await.err().expect("refused").to_string();
    assert!(error.contains("REDIS_URL"), "{error}");
}

#[tokio::test]
async fn unreachable_redis_fails_fast() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&format!("sqlite:{}/q.sqlite", dir.path().display()), 2).await.unwrap();
    let mut config = Config::defaults();
    config.queue.redis_url = Some("redis://:secret@127.0.0.1:1".into());
    let started = Instant::now();
    let error = format!("{:#}", Queue::connect(&config, &db).await.err().expect("refused"));
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert!(error.starts_with("cannot connect to Redis at redis://:***@127.0.0.1:1"), "{error}");
    assert!(!error.contains("secret") && !error.contains('\n'), "{error}");
}

#[tokio::test]
async fn sqlite_queue_migrations_stay_out_of_our_migration_table() {
    let env = Env::new(Backend::Sqlite).await;
    let Db::Sqlite(pool) = &env.db else { unreachable!() };
    let apalis: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _apalis_migrations").fetch_one(pool).await.unwrap();
    assert!(apalis > 0);
    // Our migrator still runs (no VersionMissing), and connecting again is a no-op.
    env.db.migrate().await.unwrap();
    Queue::connect(&env.config, &env.db).await.unwrap();
    assert_eq!(env.queue.backend_name(), "sqlite");
}
