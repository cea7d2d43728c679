//! Operations engine throughput, each figure beside a baseline measured in the same run.
//!
//! `cargo bench --bench operations`
//!
//! (a) `BENCH_OPERATIONS` (default 5,000) delete operations on empty conversations,
//!     submitted over HTTP by 8 clients to the service (PostgreSQL + Redis, in-process),
//!     timed until all have succeeded — beside a bare apalis-redis loop (our queue module,
//!     no database) pushing and consuming the same number of no-op messages on the same Redis.
//! (b) A delete operation of `BENCH_DELETE_MESSAGES` (default 1,000,000) messages beside one
//!     `DELETE FROM messages WHERE tenant = … AND conversation_id = …` on an identical copy.
//!
//! Environment: `BENCH_POSTGRES_URL` (server URL, default `postgres://postgres@127.0.0.1:5432`),
//! `BENCH_REDIS_URL` (default `redis://127.0.0.1:6379`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use context_jobs::contract::ContextOperationKind;
use context_jobs::ids::OperationId;
use context_ops::config::{Config, Role};
use context_ops::queue::{OperationHandler, Queue};
use context_ops::server;
use context_ops::store::Db;
use futures::future::BoxFuture;
use serde_json::json;
use sqlx::AssertSqlSafe;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

async fn fresh_schema(server: &str) -> anyhow::Result<String> {
    let admin = sqlx::PgPool::connect(&format!("{server}/postgres")).await?;
    let _ = sqlx::query("CREATE DATABASE context_ops_bench").execute(&admin).await;
    admin.close().await;
    let schema = format!("b_{}", ulid::Ulid::generate().to_string().to_lowercase());
    let db = sqlx::PgPool::connect(&format!("{server}/context_ops_bench")).await?;
    sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&db).await?;
    db.close().await;
    Ok(format!("{server}/context_ops_bench?options[search_path]={schema}"))
}

fn config(database_url: String, redis: &str, namespace: &str) -> Config {
    let mut config = Config::defaults();
    config.http.bind = "127.0.0.1:0".parse().unwrap();
    config.database.database_url = database_url;
    config.queue.redis_url = Some(redis.to_string());
    config.queue.queue_namespace = namespace.to_string();
    config.retention.retention_sweep_secs = 0;
    config.worker.worker_concurrency = env_or("BENCH_WORKER_CONCURRENCY", "8").parse().unwrap_or(8);
    config.queue.dispatch_interval_ms = 500;
    config
}

struct Counter {
    seen: AtomicUsize,
    target: usize,
    done: Notify,
}

impl OperationHandler for Counter {
    fn handle(&self, _kind: ContextOperationKind, _id: String) -> BoxFuture<'static, ()> {
        if self.seen.fetch_add(1, Ordering::SeqCst) + 1 >= self.target {
            self.done.notify_one();
        }
        Box::pin(async {})
    }
}

/// (a) baseline: push `n` no-op messages and consume them, on the bare queue.
async fn bare_queue(redis: &str, server: &str, n: usize) -> anyhow::Result<f64> {
    let db = Db::connect(&fresh_schema(server).await?, 4).await?;
    let cfg = config(String::new(), redis, &format!("bench-bare-{}", ulid::Ulid::generate()));
    let queue = Queue::connect(&cfg, &db).await?;
    let counter = Arc::new(Counter { seen: AtomicUsize::new(0), target: n, done: Notify::new() });
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let workers = queue.spawn_workers(counter.clone(), shutdown.clone());
    let pushes = (0..8).map(|c| {
        let queue = queue.clone();
        tokio::spawn(async move {
            for i in (c..n).step_by(8) {
                queue.push(ContextOperationKind::Delete, &OperationId::from_stored(format!("{i:026}"))).await.unwrap();
            }
        })
    });
    futures::future::join_all(pushes).await;
    counter.done.notified().await;
    let elapsed = started.elapsed().as_secs_f64();
    shutdown.cancel();
    let _ = workers.await;
    Ok(n as f64 / elapsed)
}

/// (a) ours: submit `n` deletes of empty conversations over HTTP and wait for all.
async fn engine(redis: &str, server: &str, n: usize) -> anyhow::Result<f64> {
    let url = fresh_schema(server).await?;
    let running =
        server::start(config(url, redis, &format!("bench-ops-{}", ulid::Ulid::generate())), Role::Serve).await?;
    let base = format!("http://{}/internal/v1/context/conversations/delete", running.addr);
    let client = reqwest::Client::new();
    let started = Instant::now();
    let submits = (0..8).map(|c| {
        let (client, base) = (client.clone(), base.clone());
        tokio::spawn(async move {
            for i in (c..n).step_by(8) {
                let r = client
                    .post(&base)
                    .json(&json!({"scope": {"conversationId": format!("empty-{i}")}}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 202);
            }
        })
    });
    futures::future::join_all(submits).await;
    println!("    (submitted {n} in {:.2} s)", started.elapsed().as_secs_f64());
    let db = running.state.db.clone();
    let Db::Postgres(pool) = &db else { anyhow::bail!("expected PostgreSQL") };
    loop {
        let done: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM operations WHERE state = 'succeeded'").fetch_one(pool).await?;
        if done as usize >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    running.stop().await?;
    Ok(n as f64 / elapsed)
}

async fn seed(pool: &sqlx::PgPool, conversation: &str, n: i64) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO conversations (tenant, conversation_id, next_sequence, message_count, created_at_ms, updated_at_ms) \
         VALUES ('default/default', $1, $2 + 1, $2, 0, 0)",
    )
    .bind(conversation)
    .bind(n)
    .execute(pool)
    .await?;
    sqlx::query(
        "INSERT INTO messages (tenant, conversation_id, id, sequence, role, scope, content, search_text, created_at_ms) \
         SELECT 'default/default', $1, 'm' || g, g, 'user', '{\"conversationId\":\"' || $1 || '\"}', '\"hello\"', 'hello', \
         1700000000000 + g FROM generate_series(1, $2) g",
    )
    .bind(conversation)
    .bind(n)
    .execute(pool)
    .await?;
    sqlx::query("ANALYZE messages").execute(pool).await?;
    Ok(())
}

/// (b) a delete operation of `n` messages vs one DELETE statement, in seconds.
async fn delete(redis: &str, server: &str, n: i64) -> anyhow::Result<(f64, f64)> {
    let url = fresh_schema(server).await?;
    let running =
        server::start(config(url, redis, &format!("bench-del-{}", ulid::Ulid::generate())), Role::Serve).await?;
    let Db::Postgres(pool) = running.state.db.clone() else { anyhow::bail!("expected PostgreSQL") };
    seed(&pool, "ours", n).await?;
    seed(&pool, "baseline", n).await?;
    let started = Instant::now();
    let delete_url = format!("http://{}/internal/v1/context/conversations/delete", running.addr);
    let r: serde_json::Value = reqwest::Client::new()
        .post(&delete_url)
        .json(&json!({"scope": {"conversationId": "ours"}}))
        .send()
        .await?
        .json()
        .await?;
    let id = r["id"].as_str().unwrap().to_string();
    loop {
        let state: String =
            sqlx::query_scalar("SELECT state FROM operations WHERE id = $1").bind(&id).fetch_one(&pool).await?;
        if state == "succeeded" {
            break;
        }
        anyhow::ensure!(state == "queued" || state == "running", "delete ended {state}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ours = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let deleted = sqlx::query("DELETE FROM messages WHERE tenant = 'default/default' AND conversation_id = 'baseline'")
        .execute(&pool)
        .await?
        .rows_affected();
    let baseline = started.elapsed().as_secs_f64();
    anyhow::ensure!(deleted as i64 == n);
    running.stop().await?;
    Ok((ours, baseline))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let server = env_or("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432");
    let redis = env_or("BENCH_REDIS_URL", "redis://127.0.0.1:6379");
    let n: usize = env_or("BENCH_OPERATIONS", "5000").parse()?;
    let m: i64 = env_or("BENCH_DELETE_MESSAGES", "1000000").parse()?;

    let bare = bare_queue(&redis, &server, n).await?;
    let ours = engine(&redis, &server, n).await?;
    println!("(a) {n} operations, PostgreSQL + Redis");
    println!("    bare apalis-redis loop : {bare:>10.0} jobs/s");
    println!("    context-ops operations : {ours:>10.0} ops/s   ratio {:.2} (target >= 0.25)", ours / bare);

    let (ours, baseline) = delete(&redis, &server, m).await?;
    println!("(b) delete of {m} messages, PostgreSQL");
    println!("    one DELETE statement   : {baseline:>10.2} s ({:.0} rows/s)", m as f64 / baseline);
    println!(
        "    delete operation       : {ours:>10.2} s ({:.0} rows/s)   ratio {:.2} (target >= 0.5)",
        m as f64 / ours,
        baseline / ours
    );
    Ok(())
}
