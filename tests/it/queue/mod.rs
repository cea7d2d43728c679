//! The queue against real backends: apalis-sqlite on a fresh SQLite file
//! (`Backend::Sqlite`), and apalis-redis on the local Redis with a PostgreSQL `Db`
//! (`Backend::Postgres`, the production pairing). Each test has its own queue namespace. No
//! fixed sleeps: waits are on a `Notify` or a polled condition, each under a deadline.
//!
//! `delivery`: every message delivered, early ones waiting for workers, vacuum.
//! `resilience`: panics and garbage, a clean shutdown, a backend that forgets its workers.
//! `connect`: connection errors and the SQLite queue's own migrations.
//! `tls`: Redis over TLS, verified against a configured CA.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apalis::prelude::TaskBuilder;
use context_jobs::contract::ContextOperationKind;
use context_ops::config::Config;
use context_ops::queue::{OperationHandler, Queue, QueueDepth};
use context_ops::store::Db;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::harness::wait::poll_until;
use crate::harness::{Backend, fresh_database, redis_url, unique};

mod connect;
mod delivery;
mod resilience;
mod tls;

const DEADLINE: Duration = Duration::from_secs(30);
const DELETE: ContextOperationKind = ContextOperationKind::Delete;
const EXPORT: ContextOperationKind = ContextOperationKind::Export;

struct Env {
    backend: Backend,
    config: Config,
    db: Db,
    queue: Queue,
    _dir: tempfile::TempDir,
}

impl Env {
    async fn new(backend: Backend) -> Env {
        Self::with_concurrency(backend, 4).await
    }

    async fn with_concurrency(backend: Backend, concurrency: usize) -> Env {
        // Process-wide and first come first served: once a queue test has run, in-process
        // apps' warnings go to the (captured) test output too.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
            .with_test_writer()
            .try_init();
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::defaults();
        config.queue.queue_namespace = unique("q");
        config.worker.worker_concurrency = concurrency;
        let db = match backend {
            Backend::Sqlite => {
                let db = Db::connect(&format!("sqlite:{}/q.sqlite", dir.path().display()), 4).await.unwrap();
                db.migrate().await.unwrap();
                db
            }
            Backend::Postgres => {
                config.queue.redis_url = Some(redis_url());
                let url = fresh_database(Backend::Postgres, dir.path()).await;
                Db::connect(&url, 4).await.unwrap()
            }
        };
        let queue = Queue::connect(&config, &db).await.expect("queue connects");
        Env { backend, config, db, queue, _dir: dir }
    }

    fn queue_name(&self, kind: ContextOperationKind) -> String {
        format!("{}:{}", self.config.queue.queue_namespace, kind.as_str())
    }

    /// Push a payload that bypasses `Queue::push` (and its encoding) entirely.
    async fn push_raw(&self, kind: ContextOperationKind, payload: &[u8]) {
        let task = TaskBuilder::new(payload.to_vec()).build();
        match (&self.db, self.backend) {
            (Db::Sqlite(pool), Backend::Sqlite) => {
                let mut conn = pool.acquire().await.unwrap();
                apalis_sqlite::queries::push_tasks(&mut *conn, &self.queue_name(kind), &[task]).await.unwrap();
            }
            _ => {
                let mut conn = apalis_redis::connect(redis_url()).await.unwrap();
                let config = apalis_redis::Config::default().queue(self.queue_name(kind));
                apalis_redis::queries::push_tasks(&mut conn, &config, &[task]).await.unwrap();
            }
        }
    }

    async fn wait_depth(&self, kind: ContextOperationKind, want: impl Fn(&QueueDepth) -> bool) -> QueueDepth {
        poll_until(&format!("depth of {kind:?} reaching the condition"), DEADLINE, || async {
            let depth = self.queue.depth(kind).await.unwrap();
            if want(&depth) { Ok(depth) } else { Err(format!("{depth:?}")) }
        })
        .await
    }

    /// Remove every key of this test's namespace from the shared Redis.
    async fn cleanup(self) {
        if self.backend != Backend::Postgres {
            return;
        }
        let client = redis::Client::open(redis_url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let pattern = format!("{}:*", self.config.queue.queue_namespace);
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .unwrap();
            if !keys.is_empty() {
                let _: u64 = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await.unwrap();
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        for kind in ContextOperationKind::ALL {
            let member = format!("{}:workers", self.queue_name(kind));
            let _: u64 =
                redis::cmd("ZREM").arg("core:apalis:queues:list").arg(member).query_async(&mut conn).await.unwrap();
        }
    }
}

/// Records every delivery and wakes waiters; panics for the ids in `panic_on`, sleeps for
/// the ids in `slow`.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<(ContextOperationKind, String, Instant)>>,
    started: Mutex<Vec<String>>,
    notify: Notify,
    panic_on: Vec<String>,
    slow: Vec<String>,
}

struct Handler(Arc<Recorder>);

impl OperationHandler for Handler {
    fn handle(&self, kind: ContextOperationKind, operation_id: String) -> BoxFuture<'static, ()> {
        let recorder = self.0.clone();
        async move {
            recorder.started.lock().unwrap().push(operation_id.clone());
            recorder.notify.notify_one();
            if recorder.panic_on.contains(&operation_id) {
                panic!("handler blew up on {operation_id}");
            }
            if recorder.slow.contains(&operation_id) {
                tokio::time::sleep(Duration::from_millis(1500)).await;
            }
            recorder.seen.lock().unwrap().push((kind, operation_id, Instant::now()));
            recorder.notify.notify_one();
        }
        .boxed()
    }
}

impl Recorder {
    fn with(panic_on: &[&str], slow: &[&str]) -> Arc<Recorder> {
        Arc::new(Recorder {
            panic_on: panic_on.iter().map(|s| s.to_string()).collect(),
            slow: slow.iter().map(|s| s.to_string()).collect(),
            ..Recorder::default()
        })
    }

    fn handler(self: &Arc<Self>) -> Arc<dyn OperationHandler> {
        Arc::new(Handler(self.clone()))
    }

    fn seen_ids(&self) -> Vec<String> {
        self.seen.lock().unwrap().iter().map(|(_, id, _)| id.clone()).collect()
    }

    /// Wait (on the notify, under the deadline) until `done` holds.
    async fn wait_until(&self, what: &str, done: impl Fn(&Recorder) -> bool) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while !done(self) {
            if tokio::time::timeout_at(deadline, self.notify.notified()).await.is_err() && !done(self) {
                panic!("timed out waiting for {what}; seen so far: {:?}", self.seen_ids());
            }
        }
    }

    async fn wait_for_ids(&self, ids: &[String]) {
        self.wait_until(&format!("{} deliveries", ids.len()), |r| {
            let seen = r.seen_ids();
            ids.iter().all(|id| seen.contains(id))
        })
        .await;
    }
}

async fn stop(shutdown: CancellationToken, workers: tokio::task::JoinHandle<anyhow::Result<()>>) {
    shutdown.cancel();
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(35), workers)
        .await
        .expect("workers stop within the shutdown timeout")
        .expect("supervisor task did not panic")
        .expect("workers stopped cleanly");
    eprintln!("workers stopped {:?} after cancel", started.elapsed());
}

fn percentile(mut samples: Vec<Duration>, p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * p).round() as usize]
}
