//! The queue against real backends: apalis-sqlite on a fresh SQLite file, and apalis-redis on
//! the local Redis (with a PostgreSQL `Db`, the production pairing). Each test has its own
//! queue namespace. No fixed sleeps: waits are on a `Notify` or a polled condition, each
//! under a deadline.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apalis::prelude::TaskBuilder;
use context_jobs::contract::ContextOperationKind;
use context_ops::config::Config;
use context_ops::db::Db;
use context_ops::queue::{OperationHandler, Queue, QueueDepth};
use futures::FutureExt as _;
use futures::future::BoxFuture;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(30);
const DELETE: ContextOperationKind = ContextOperationKind::Delete;
const EXPORT: ContextOperationKind = ContextOperationKind::Export;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Redis,
}

struct Env {
    backend: Backend,
    config: Config,
    db: Db,
    queue: Queue,
    _dir: tempfile::TempDir,
}

impl Env {
    async fn new(backend: Backend) -> Env {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
            .with_test_writer()
            .try_init();
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::defaults();
        config.queue_namespace = common::unique("q");
        config.worker_concurrency = 4;
        let db = match backend {
            Backend::Sqlite => {
                let db = Db::connect(&format!("sqlite:{}/q.sqlite", dir.path().display()), 4).await.unwrap();
                db.migrate().await.unwrap();
                db
            }
            Backend::Redis => {
                config.redis_url = Some(common::redis_url());
                let url = common::fresh_database(common::Backend::Postgres, dir.path()).await;
                Db::connect(&url, 4).await.unwrap()
            }
        };
        let queue = Queue::connect(&config, &db).await.expect("queue connects");
        Env { backend, config, db, queue, _dir: dir }
    }

    fn queue_name(&self, kind: ContextOperationKind) -> String {
        format!("{}:{}", self.config.queue_namespace, kind.as_str())
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
                let mut conn = apalis_redis::connect(common::redis_url()).await.unwrap();
                let config = apalis_redis::Config::default().queue(self.queue_name(kind));
                apalis_redis::queries::push_tasks(&mut conn, &config, &[task]).await.unwrap();
            }
        }
    }

    async fn wait_depth(&self, kind: ContextOperationKind, want: impl Fn(&QueueDepth) -> bool) -> QueueDepth {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let depth = self.queue.depth(kind).await.unwrap();
            if want(&depth) {
                return depth;
            }
            assert!(Instant::now() < deadline, "depth of {kind:?} never reached the condition: {depth:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Remove every key of this test's namespace from the shared Redis.
    async fn cleanup(self) {
        if self.backend != Backend::Redis {
            return;
        }
        let client = redis::Client::open(common::redis_url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let pattern = format!("{}:*", self.config.queue_namespace);
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

async fn delivers_every_message(backend: Backend) {
    let env = Env::new(backend).await;
    let recorder = Recorder::with(&[], &[]);
    let shutdown = CancellationToken::new();
    let workers = env.queue.spawn_workers(recorder.handler(), shutdown.clone());

    let mut expected = HashMap::new();
    let mut pushed_at = HashMap::new();
    for i in 0..50 {
        let kind = if i % 2 == 0 { DELETE } else { EXPORT };
        let id = format!("op-{i:02}");
        pushed_at.insert(id.clone(), Instant::now());
        env.queue.push(kind, &id).await.unwrap();
        expected.insert(id, kind);
    }
    let ids: Vec<String> = expected.keys().cloned().collect();
    recorder.wait_for_ids(&ids).await;

    let seen = recorder.seen.lock().unwrap().clone();
    for (id, kind) in &expected {
        let deliveries: Vec<_> = seen.iter().filter(|(_, s, _)| s == id).collect();
        assert!(!deliveries.is_empty(), "{id} never delivered");
        assert!(deliveries.iter().all(|(k, _, _)| k == kind), "{id} delivered to the wrong kind: {deliveries:?}");
    }
    assert!(seen.iter().all(|(_, id, _)| expected.contains_key(id)), "unexpected deliveries: {seen:?}");
    let latencies: Vec<Duration> = seen.iter().map(|(_, id, at)| at.duration_since(pushed_at[id])).collect();
    eprintln!(
        "[{backend:?}] burst of 50: push→handle p50 {:?}, max {:?}, duplicates {}",
        percentile(latencies.clone(), 0.5),
        percentile(latencies, 1.0),
        seen.len() - expected.len()
    );

    for kind in [DELETE, EXPORT] {
        let depth = env.wait_depth(kind, |d| d.pending == 0 && d.inflight == 0).await;
        assert_eq!(depth, QueueDepth::default(), "{kind:?}");
    }

    // Single messages: pushed by this Queue (wakes the worker at once) and by a second
    // Queue handle, as an API process would (found by the 250 ms poll).
    let other = Queue::connect(&env.config, &env.db).await.unwrap();
    for (label, pusher) in [("same handle", &env.queue), ("other handle", &other)] {
        let mut samples = Vec::new();
        for i in 0..10 {
            let id = format!("single-{label}-{i}");
            let before = Instant::now();
            pusher.push(DELETE, &id).await.unwrap();
            recorder.wait_for_ids(std::slice::from_ref(&id)).await;
            samples.push(before.elapsed());
            // Let the worker go idle (acknowledged, nothing held) before the next push.
            env.wait_depth(DELETE, |d| d.inflight == 0).await;
        }
        eprintln!(
            "[{backend:?}] single message, {label}: push→handle p50 {:?}, max {:?}",
            percentile(samples.clone(), 0.5),
            percentile(samples, 1.0)
        );
    }

    stop(shutdown, workers).await;
    env.cleanup().await;
}

async fn panics_and_garbage_do_not_stop_the_worker(backend: Backend) {
    let env = Env::new(backend).await;
    let recorder = Recorder::with(&["boom"], &[]);
    let shutdown = CancellationToken::new();
    let workers = env.queue.spawn_workers(recorder.handler(), shutdown.clone());

    env.queue.push(DELETE, "boom").await.unwrap();
    env.push_raw(DELETE, b"\xff\xfe not json at all").await;
    env.push_raw(DELETE, br#"{"unexpected": true}"#).await;
    env.push_raw(DELETE, br#"{"operationId": ""}"#).await;
    for i in 0..5 {
        env.queue.push(DELETE, &format!("after-{i}")).await.unwrap();
    }
    let after: Vec<String> = (0..5).map(|i| format!("after-{i}")).collect();
    recorder.wait_for_ids(&after).await;
    assert!(recorder.started.lock().unwrap().contains(&"boom".to_owned()), "the panicking id ran");
    assert!(!recorder.seen_ids().contains(&"boom".to_owned()));

    // Everything, garbage included, was acknowledged: nothing pending, nothing held.
    env.wait_depth(DELETE, |d| d.pending == 0 && d.inflight == 0).await;
    if let Db::Sqlite(pool) = &env.db {
        let workers: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM Workers WHERE worker_type = $1")
            .bind(env.queue_name(DELETE))
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(workers, 1, "the worker never restarted");
    }

    stop(shutdown, workers).await;
    env.cleanup().await;
}

async fn shutdown_lets_running_handlers_finish(backend: Backend) {
    let env = Env::new(backend).await;
    let recorder = Recorder::with(&[], &["slow"]);
    let shutdown = CancellationToken::new();
    let workers = env.queue.spawn_workers(recorder.handler(), shutdown.clone());

    env.queue.push(EXPORT, "slow").await.unwrap();
    recorder.wait_until("the slow handler to start", |r| r.started.lock().unwrap().contains(&"slow".to_owned())).await;
    stop(shutdown, workers).await;
    assert_eq!(recorder.seen_ids(), vec!["slow".to_owned()], "the running handler finished before the stop");
    // It was acknowledged on the way out, not left in flight.
    assert_eq!(env.queue.depth(EXPORT).await.unwrap(), QueueDepth::default());

    // A message pushed after the stop stays queued.
    env.queue.push(EXPORT, "later").await.unwrap();
    assert_eq!(env.queue.depth(EXPORT).await.unwrap().pending, 1);
    env.cleanup().await;
}

async fn messages_wait_for_workers(backend: Backend) {
    let env = Env::new(backend).await;
    env.queue.push(ContextOperationKind::Import, "early-1").await.unwrap();
    env.queue.push(ContextOperationKind::Retention, "early-2").await.unwrap();
    let depth = env.queue.depth(ContextOperationKind::Import).await.unwrap();
    assert_eq!(depth, QueueDepth { pending: 1, ..QueueDepth::default() });
    assert_eq!(env.queue.depth(ContextOperationKind::Retention).await.unwrap().pending, 1);

    // A separate handle, as after a restart, picks them up.
    let queue = Queue::connect(&env.config, &env.db).await.unwrap();
    let recorder = Recorder::with(&[], &[]);
    let shutdown = CancellationToken::new();
    let workers = queue.spawn_workers(recorder.handler(), shutdown.clone());
    recorder.wait_for_ids(&["early-1".to_owned(), "early-2".to_owned()]).await;
    let seen = recorder.seen.lock().unwrap().clone();
    assert!(seen.iter().any(|(k, id, _)| *k == ContextOperationKind::Import && id == "early-1"));
    assert!(seen.iter().any(|(k, id, _)| *k == ContextOperationKind::Retention && id == "early-2"));
    stop(shutdown, workers).await;
    env.cleanup().await;
}

/// The backend forgets the worker (Redis restarted without persistence; the `Workers` row
/// gone): the worker's next call fails, the supervisor restarts it under a new name, and
/// delivery goes on.
async fn workers_restart_after_the_backend_forgets_them(backend: Backend) {
    let env = Env::new(backend).await;
    let recorder = Recorder::with(&[], &[]);
    let shutdown = CancellationToken::new();
    let workers = env.queue.spawn_workers(recorder.handler(), shutdown.clone());
    env.queue.push(DELETE, "before").await.unwrap();
    recorder.wait_for_ids(&["before".to_owned()]).await;
    env.wait_depth(DELETE, |d| d.inflight == 0).await;

    match &env.db {
        Db::Sqlite(pool) => {
            sqlx::query("DELETE FROM Workers WHERE worker_type = $1 AND NOT EXISTS (SELECT 1 FROM Jobs WHERE lock_by = Workers.id)")
                .bind(env.queue_name(DELETE))
                .execute(pool)
                .await
                .unwrap();
            // Its finished rows still reference it: detach them so the row can go.
            sqlx::query("UPDATE Jobs SET lock_by = NULL WHERE job_type = $1")
                .bind(env.queue_name(DELETE))
                .execute(pool)
                .await
                .unwrap();
            sqlx::query("DELETE FROM Workers WHERE worker_type = $1")
                .bind(env.queue_name(DELETE))
                .execute(pool)
                .await
                .unwrap();
        }
        Db::Postgres(_) => {
            let client = redis::Client::open(common::redis_url()).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let pattern = format!("{}:*", env.queue_name(DELETE));
            let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query_async(&mut conn).await.unwrap();
            if !keys.is_empty() {
                let _: u64 = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await.unwrap();
            }
        }
    }

    env.queue.push(DELETE, "after").await.unwrap();
    recorder.wait_for_ids(&["after".to_owned()]).await;
    stop(shutdown, workers).await;
    env.cleanup().await;
}

async fn vacuum_deletes_finished_messages(backend: Backend) {
    let env = Env::new(backend).await;
    let recorder = Recorder::with(&[], &[]);
    let shutdown = CancellationToken::new();
    let workers = env.queue.spawn_workers(recorder.handler(), shutdown.clone());
    let ids: Vec<String> = (0..10).map(|i| format!("v-{i}")).collect();
    for id in &ids {
        env.queue.push(ContextOperationKind::Inference, id).await.unwrap();
    }
    recorder.wait_for_ids(&ids).await;
    env.wait_depth(ContextOperationKind::Inference, |d| d.inflight == 0 && d.pending == 0).await;

    assert_eq!(env.queue.vacuum(Duration::from_secs(3600)).await.unwrap(), 0, "nothing is an hour old");
    assert_eq!(env.queue.vacuum(Duration::ZERO).await.unwrap(), 10);
    assert_eq!(env.queue.vacuum(Duration::ZERO).await.unwrap(), 0);
    let left: u64 = match &env.db {
        Db::Sqlite(pool) => sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM Jobs WHERE job_type = $1")
            .bind(env.queue_name(ContextOperationKind::Inference))
            .fetch_one(pool)
            .await
            .unwrap() as u64,
        Db::Postgres(_) => {
            let client = redis::Client::open(common::redis_url()).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let q = env.queue_name(ContextOperationKind::Inference);
            let done: u64 = redis::cmd("SCARD").arg(format!("{q}:done")).query_async(&mut conn).await.unwrap();
            let data: u64 = redis::cmd("HLEN").arg(format!("{q}:data")).query_async(&mut conn).await.unwrap();
            done + data
        }
    };
    assert_eq!(left, 0, "finished messages are gone");
    stop(shutdown, workers).await;
    env.cleanup().await;
}

macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name(super::Backend::Sqlite).await;
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn redis() {
                    super::$name(super::Backend::Redis).await;
                }
            }
        )*
    };
}

on_both_backends!(
    delivers_every_message,
    panics_and_garbage_do_not_stop_the_worker,
    shutdown_lets_running_handlers_finish,
    messages_wait_for_workers,
    vacuum_deletes_finished_messages,
    workers_restart_after_the_backend_forgets_them,
);

#[tokio::test]
async fn postgres_without_redis_is_a_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let url = common::fresh_database(common::Backend::Postgres, dir.path()).await;
    let db = Db::connect(&url, 2).await.unwrap();
    let config = Config { redis_url: None, ..Config::defaults() };
    let error = Queue::connect(&config, &db).await.err().expect("refused").to_string();
    assert!(error.contains("REDIS_URL"), "{error}");
}

#[tokio::test]
async fn unreachable_redis_fails_fast() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&format!("sqlite:{}/q.sqlite", dir.path().display()), 2).await.unwrap();
    let config = Config { redis_url: Some("redis://:secret@127.0.0.1:1".into()), ..Config::defaults() };
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
