//! What every figure of the operations bench shares: environment, a fresh PostgreSQL
//! schema, the service's configuration, seeding, and HTTP helpers over the contract paths.

use std::time::{Duration, Instant};

use context_jobs::contract::{CONTEXT_OPERATIONS_PATH, CONVERSATION_DELETE_PATH};
use context_ops::config::Config;
use serde_json::{Value, json};
use sqlx::AssertSqlSafe;

pub fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

/// A URL of a new, empty schema in database `context_ops_bench` of `server`, with the
/// connection parameters `BENCH_POSTGRES_PARAMS` (default `sslmode=disable`: on loopback TLS
/// protects nothing, docker-compose's PostgreSQL offers none, and the bare loop's Redis has
/// none; a server with `ssl = on`, as Debian's, costs ~3 % of PostgreSQL's CPU per operation
/// encrypting — set it to `""` to measure that too).
pub async fn fresh_schema(server: &str) -> anyhow::Result<String> {
    let params = env_or("BENCH_POSTGRES_PARAMS", "sslmode=disable");
    let admin = sqlx::PgPool::connect(&format!("{server}/postgres?{params}")).await?;
    let _ = sqlx::query("CREATE DATABASE context_ops_bench").execute(&admin).await;
    admin.close().await;
    let schema = format!("b_{}", ulid::Ulid::generate().to_string().to_lowercase());
    let db = sqlx::PgPool::connect(&format!("{server}/context_ops_bench?{params}")).await?;
    sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&db).await?;
    db.close().await;
    Ok(format!("{server}/context_ops_bench?options[search_path]={schema}&{params}"))
}

/// Queue namespaces this run used (deleted at its end by [`drop_namespaces`]).
static NAMESPACES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

pub fn namespace(what: &str) -> String {
    let namespace = format!("bench-{what}-{}", ulid::Ulid::generate());
    NAMESPACES.lock().unwrap_or_else(|p| p.into_inner()).push(namespace.clone());
    namespace
}

/// Delete the Redis keys of every namespace this run used. Left behind (~6,000 keys per
/// side and run), they slowed every later run's housekeeping `SCAN`, the bare loop's most.
pub async fn drop_namespaces(redis: &str) -> anyhow::Result<()> {
    let mut conn = redis::Client::open(redis)?.get_multiplexed_async_connection().await?;
    let namespaces = std::mem::take(&mut *NAMESPACES.lock().unwrap_or_else(|p| p.into_inner()));
    for namespace in namespaces {
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{namespace}*"))
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await?;
            if !keys.is_empty() {
                let _: u64 = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await?;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(())
}

/// The service's defaults, on `database_url` and `redis`, with the sweep off and the
/// bench's worker concurrency.
pub fn config(database_url: String, redis: &str, namespace: &str) -> Config {
    let mut config = Config::defaults();
    config.http.bind = "127.0.0.1:0".parse().unwrap();
    config.database.database_url = database_url;
    config.queue.redis_url = Some(redis.to_string());
    config.queue.queue_namespace = namespace.to_string();
    config.retention.retention_sweep_secs = 0;
    config.worker.worker_concurrency = env_or("BENCH_WORKER_CONCURRENCY", "8").parse().unwrap_or(8);
    config
}

/// `n` messages in conversation `conversation` of tenant `default/default`, written by SQL.
pub async fn seed(pool: &sqlx::PgPool, conversation: &str, n: i64) -> anyhow::Result<()> {
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
    // Hint bits, visibility map and statistics set now: otherwise whichever side reads fresh
    // rows first pays for setting them (and autovacuum, where it is on, may do it for the
    // other side meanwhile).
    sqlx::query("VACUUM ANALYZE messages").execute(pool).await?;
    Ok(())
}

/// Submit a delete of `conversation` at `base` (`http://host:port`); the operation JSON.
pub async fn submit_delete(
    client: &reqwest::Client,
    base: &str,
    token: Option<&str>,
    conversation: &str,
) -> anyhow::Result<Value> {
    let mut request = client
        .post(format!("{base}{CONVERSATION_DELETE_PATH}"))
        .json(&json!({"scope": {"conversationId": conversation}}));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await?;
    anyhow::ensure!(response.status() == 202, "delete answered {}", response.status());
    Ok(response.json().await?)
}

/// Long-poll operation `op` until it is terminal; the terminal operation.
pub async fn wait_terminal(
    client: &reqwest::Client,
    base: &str,
    token: Option<&str>,
    mut op: Value,
    within: Duration,
) -> anyhow::Result<Value> {
    let deadline = Instant::now() + within;
    loop {
        if matches!(op["state"].as_str(), Some("succeeded" | "failed" | "cancelled")) {
            return Ok(op);
        }
        anyhow::ensure!(Instant::now() < deadline, "not terminal within {within:?}: {op}");
        let id = op["id"].as_str().unwrap_or_default();
        let version = op["version"].as_i64().unwrap_or_default();
        let mut request =
            client.get(format!("{base}{CONTEXT_OPERATIONS_PATH}/{id}/wait?sinceVersion={version}&timeoutMs=10000"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        op = request.send().await?.error_for_status()?.json().await?;
    }
}

/// The `q`-quantile (0..=1) of `samples` (sorted in place), in milliseconds.
pub fn quantile_ms(samples: &mut [Duration], q: f64) -> f64 {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples[i.min(samples.len() - 1)].as_secs_f64() * 1000.0
}
