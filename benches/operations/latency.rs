//! (c) Submit → succeeded of one empty operation at a time (p50/p99), beside the bare
//! apalis-redis round trip (push one message, wait until its handler ran) on the same Redis.

use std::sync::Arc;
use std::time::{Duration, Instant};

use context_jobs::contract::ContextOperationKind;
use context_jobs::ids::OperationId;
use context_ops::config::Role;
use context_ops::queue::{OperationHandler, Queue};
use context_ops::server;
use context_ops::store::Db;
use futures::future::BoxFuture;
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::common::{config, fresh_schema, namespace, quantile_ms, submit_delete, wait_terminal};

/// Unsent operations warm connections and caches first.
const WARM_UP: usize = 20;

pub struct Latency {
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl Latency {
    fn of(mut samples: Vec<Duration>) -> Self {
        Self { p50_ms: quantile_ms(&mut samples, 0.5), p99_ms: quantile_ms(&mut samples, 0.99) }
    }
}

struct Ping(Notify);

impl OperationHandler for Ping {
    fn handle(&self, _kind: ContextOperationKind, _id: String) -> BoxFuture<'static, ()> {
        self.0.notify_one();
        Box::pin(async {})
    }
}

/// Baseline: `n` sequential push → handled round trips on the bare queue.
pub async fn bare_round_trip(redis: &str, server: &str, n: usize) -> anyhow::Result<Latency> {
    let db = Db::connect(&fresh_schema(server).await?, 4).await?;
    let cfg = config(String::new(), redis, &namespace("bare-rt"));
    let queue = Queue::connect(&cfg, &db).await?;
    let ping = Arc::new(Ping(Notify::new()));
    let shutdown = CancellationToken::new();
    let workers = queue.spawn_workers(ping.clone(), shutdown.clone());
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + WARM_UP {
        let started = Instant::now();
        queue.push(ContextOperationKind::Delete, &OperationId::from_stored(format!("{i:026}"))).await?;
        tokio::time::timeout(Duration::from_secs(10), ping.0.notified()).await?;
        if i >= WARM_UP {
            samples.push(started.elapsed());
        }
    }
    shutdown.cancel();
    let _ = workers.await;
    Ok(Latency::of(samples))
}

/// Ours: `n` sequential deletes of empty conversations, each submitted over HTTP and
/// long-polled until it succeeded.
pub async fn submit_to_done(redis: &str, server: &str, n: usize) -> anyhow::Result<Latency> {
    let url = fresh_schema(server).await?;
    let running = server::start(config(url, redis, &namespace("rt")), Role::Serve).await?;
    let base = format!("http://{}", running.addr);
    let client = reqwest::Client::new();
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + WARM_UP {
        let started = Instant::now();
        let op = submit_delete(&client, &base, None, &format!("rt-{i}")).await?;
        let done = wait_terminal(&client, &base, None, op, Duration::from_secs(10)).await?;
        anyhow::ensure!(done["state"] == json!("succeeded"), "{done}");
        if i >= WARM_UP {
            samples.push(started.elapsed());
        }
    }
    running.stop().await?;
    Ok(Latency::of(samples))
}
