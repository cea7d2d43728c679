//! (a) Throughput of empty operations over HTTP (8 clients) beside the bare apalis-redis
//! loop (our queue module, no database) on the same Redis, and beside PostgreSQL's own
//! floor: the three row writes every operation's life makes durable, alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use context_jobs::contract::ContextOperationKind;
use context_jobs::ids::OperationId;
use context_ops::config::Role;
use context_ops::queue::{OperationHandler, Queue};
use context_ops::server;
use context_ops::store::Db;
use futures::future::BoxFuture;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::common::{config, fresh_schema, namespace, submit_delete};
use super::machine_cpu::{cpu_ms_per, machine_busy};

/// One side's figures: items per second, and machine CPU per item (see `machine_busy`).
pub struct Rate {
    pub per_sec: f64,
    pub cpu_ms: Option<f64>,
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

/// Baseline: push `n` no-op messages from 8 tasks and consume them.
pub async fn bare_queue(redis: &str, server: &str, n: usize) -> anyhow::Result<Rate> {
    let db = Db::connect(&fresh_schema(server).await?, 4).await?;
    let cfg = config(String::new(), redis, &namespace("bare"));
    let queue = Queue::connect(&cfg, &db).await?;
    let counter = Arc::new(Counter { seen: AtomicUsize::new(0), target: n, done: Notify::new() });
    let shutdown = CancellationToken::new();
    let (started, busy) = (Instant::now(), machine_busy());
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
    let (elapsed, cpu_ms) = (started.elapsed().as_secs_f64(), cpu_ms_per(busy, machine_busy(), n));
    shutdown.cancel();
    let _ = workers.await;
    Ok(Rate { per_sec: n as f64 / elapsed, cpu_ms })
}

/// PostgreSQL's floor: from 8 connections, each operation as three committed statements on
/// the service's own `operations` table (its indexes and triggers): insert it queued, claim
/// it (a compare-and-set on its version) and finish it (one on its lease). Plain SQL, no
/// HTTP, no queue, no job: what the durable protocol costs on this server before anything
/// else, so a figure below it says how much of ours is the database's share.
pub async fn postgres_floor(server: &str, n: usize) -> anyhow::Result<Rate> {
    let url = fresh_schema(server).await?;
    let db = Db::connect(&url, 8).await?;
    db.migrate().await?;
    let Db::Postgres(pool) = db else { anyhow::bail!("expected PostgreSQL") };
    let lifecycle = |prefix: &'static str, count: usize| {
        let clients = (0..8).map(|c| {
            let pool = pool.clone();
            tokio::spawn(async move {
                for i in (c..count).step_by(8) {
                    let id = format!("{prefix}-{i:08}");
                    let tenant = format!("tenant-{c}");
                    let now = context_ops::store::now_ms();
                    sqlx::query(
                        "INSERT INTO operations (id, tenant, kind, state, phase, request, request_fingerprint, \
                         created_at_ms, updated_at_ms, pushed_at_ms) \
                         VALUES ($1, $2, 'delete', 'queued', 'queued', '{}', 'fp', $3, $3, $3)",
                    )
                    .bind(&id)
                    .bind(&tenant)
                    .bind(now)
                    .execute(&pool)
                    .await?;
                    let claimed = sqlx::query(
                        "UPDATE operations SET state = 'running', phase = 'deleting', lease_token = 'lease', \
                         lease_owner = 'floor', lease_expires_at_ms = $2, attempt = attempt + 1, \
                         attempt_started_at_ms = $2, started_at_ms = $2, updated_at_ms = $2, \
                         version = version + 1 WHERE id = $1 AND version = 1",
                    )
                    .bind(&id)
                    .bind(now)
                    .execute(&pool)
                    .await?;
                    let finished = sqlx::query(
                        "UPDATE operations SET state = 'succeeded', phase = 'done', result = '{}', \
                         lease_token = NULL, lease_expires_at_ms = NULL, finished_at_ms = $2, \
                         updated_at_ms = $2, version = version + 1 \
                         WHERE id = $1 AND lease_token = 'lease' AND version = 2",
                    )
                    .bind(&id)
                    .bind(now)
                    .execute(&pool)
                    .await?;
                    anyhow::ensure!(claimed.rows_affected() == 1 && finished.rows_affected() == 1, "{id} lost a write");
                }
                anyhow::Ok(())
            })
        });
        futures::future::join_all(clients)
    };
    // Warmed and analyzed as the engine's side is.
    for joined in lifecycle("warm", (n / 5).max(100)).await {
        joined??;
    }
    sqlx::query("ANALYZE operations").execute(&pool).await?;
    let (started, busy) = (Instant::now(), machine_busy());
    for joined in lifecycle("floor", n).await {
        joined??;
    }
    let (elapsed, cpu_ms) = (started.elapsed().as_secs_f64(), cpu_ms_per(busy, machine_busy(), n));
    pool.close().await;
    Ok(Rate { per_sec: n as f64 / elapsed, cpu_ms })
}

/// Ours: submit `n` deletes of empty conversations over HTTP from 8 clients and wait until
/// all have succeeded.
pub async fn engine(redis: &str, server: &str, n: usize) -> anyhow::Result<Rate> {
    let url = fresh_schema(server).await?;
    let running = server::start(config(url, redis, &namespace("ops")), Role::Serve).await?;
    let base = format!("http://{}", running.addr);
    let client = reqwest::Client::new();
    let Db::Postgres(pool) = running.state.db.clone() else { anyhow::bail!("expected PostgreSQL") };
    // Warm up into a steady state: connections open, and the table has statistics, as
    // autovacuum keeps them in production (a fresh table's first plans, cached per
    // connection, can pick the wrong index until its first ANALYZE).
    let warm = (n / 5).max(100);
    submit_all(&client, &base, "warm", warm).await;
    wait_succeeded(&pool, warm).await?;
    sqlx::query("ANALYZE operations").execute(&pool).await?;
    let (started, busy) = (Instant::now(), machine_busy());
    submit_all(&client, &base, "empty", n).await;
    println!("    (submitted {n} in {:.2} s)", started.elapsed().as_secs_f64());
    wait_succeeded(&pool, warm + n).await?;
    let (elapsed, cpu_ms) = (started.elapsed().as_secs_f64(), cpu_ms_per(busy, machine_busy(), n));
    running.stop().await?;
    Ok(Rate { per_sec: n as f64 / elapsed, cpu_ms })
}

/// Submit `n` deletes of empty conversations from 8 clients.
async fn submit_all(client: &reqwest::Client, base: &str, prefix: &str, n: usize) {
    let submits = (0..8).map(|c| {
        let (client, base, prefix) = (client.clone(), base.to_string(), prefix.to_string());
        tokio::spawn(async move {
            for i in (c..n).step_by(8) {
                submit_delete(&client, &base, None, &format!("{prefix}-{i}")).await.unwrap();
            }
        })
    });
    futures::future::join_all(submits).await;
}

/// Until no operation is queued or running, then check that `n` succeeded. (Counting the
/// succeeded rows every poll read the whole table each time: ~5 % of a core by the end of a
/// run, charged to the engine's side; this reads the unfinished rows' index range.)
async fn wait_succeeded(pool: &sqlx::PgPool, n: usize) -> anyhow::Result<()> {
    loop {
        let unfinished: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM operations WHERE state IN ('queued', 'running'))")
                .fetch_one(pool)
                .await?;
        if !unfinished {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let done: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM operations WHERE state = 'succeeded'").fetch_one(pool).await?;
    anyhow::ensure!(done as usize >= n, "only {done} of {n} operations succeeded");
    Ok(())
}
