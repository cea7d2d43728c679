//! Resilience: a panicking handler and undecodable payloads do not stop the worker, a
//! shutdown lets running handlers finish (and stops promptly when many finish at once),
//! and workers restart when the backend forgets them (a shutdown then still waits for the
//! handlers the failed worker left running).

use std::sync::Arc;
use std::time::{Duration, Instant};

use context_jobs::contract::ContextOperationKind;
use context_jobs::ids::OperationId;
use context_ops::queue::{OperationHandler, QueueDepth};
use context_ops::store::Db;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::{DEADLINE, DELETE, EXPORT, Env, Recorder, stop};
use crate::harness::{Backend, redis_url};

async fn panics_and_garbage_do_not_stop_the_worker(backend: Backend) {
    let env = Env::new(backend).await;
    let recorder = Recorder::with(&["boom"], &[]);
    let shutdown = CancellationToken::new();
    let workers = env.queue.spawn_workers(recorder.handler(), shutdown.clone());

    env.queue.push(DELETE, &OperationId::from_stored("boom")).await.unwrap();
    env.push_raw(DELETE, b"\xff\xfe not json at all").await;
    env.push_raw(DELETE, br#"{"unexpected": true}"#).await;
    env.push_raw(DELETE, br#"{"operationId": ""}"#).await;
    for i in 0..5 {
        env.queue.push(DELETE, &OperationId::from_stored(format!("after-{i}"))).await.unwrap();
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

    env.queue.push(EXPORT, &OperationId::from_stored("slow")).await.unwrap();
    recorder.wait_until("the slow handler to start", |r| r.started.lock().unwrap().contains(&"slow".to_owned())).await;
    stop(shutdown, workers).await;
    assert_eq!(recorder.seen_ids(), vec!["slow".to_owned()], "the running handler finished before the stop");
    // It was acknowledged on the way out, not left in flight.
    assert_eq!(env.queue.depth(EXPORT).await.unwrap(), QueueDepth::default());

    // A message pushed after the stop stays queued.
    env.queue.push(EXPORT, &OperationId::from_stored("later")).await.unwrap();
    assert_eq!(env.queue.depth(EXPORT).await.unwrap().pending, 1);
    env.cleanup().await;
}

/// Eight handlers that finish together as the shutdown starts: their eight acknowledgements
/// all go to apalis at once. apalis sends each on a channel it drains only while it runs
/// (4 places here); a worker stopped with sends still waiting on it never finished (it
/// waits for its tasks before it closes, and its tasks for the drain), and shutdown hung
/// for its 30 s timeout, then failed ("did not finish its running handlers within 30s").
async fn handlers_that_finish_together_at_shutdown_stop_promptly(backend: Backend) {
    let env = Env::with_concurrency(backend, 8).await;
    let gates = Arc::new(Gates::default());
    let shutdown = CancellationToken::new();
    let workers = env.queue.spawn_workers(Arc::new(GatesHandler(gates.clone())), shutdown.clone());
    let ids: Vec<String> = (0..8).map(|i| format!("op{i}")).collect();
    for id in &ids {
        env.queue.push(DELETE, &OperationId::from_stored(id.as_str())).await.unwrap();
    }
    for id in &ids {
        gates.wait_started(id).await;
    }
    shutdown.cancel();
    for id in &ids {
        gates.open(id);
    }
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(35), workers)
        .await
        .expect("workers stop within the shutdown timeout")
        .expect("supervisor task did not panic")
        .expect("workers stopped cleanly");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "the stop took {took:?}");
    assert_eq!(gates.finished().len(), 8);
    // Acknowledged, or (when apalis could not) released back to the queue: none is left
    // held by the stopped worker.
    let depth = env.queue.depth(DELETE).await.unwrap();
    assert_eq!(depth.inflight, 0, "{depth:?}");
    env.cleanup().await;
}

async fn workers_restart_after_the_backend_forgets_them(backend: Backend) {
    let env = Env::new(backend).await;
    let recorder = Recorder::with(&[], &[]);
    let shutdown = CancellationToken::new();
    let workers = env.queue.spawn_workers(recorder.handler(), shutdown.clone());
    env.queue.push(DELETE, &OperationId::from_stored("before")).await.unwrap();
    recorder.wait_for_ids(&["before".to_owned()]).await;
    env.wait_depth(DELETE, |d| d.inflight == 0).await;

    forget_workers(&env).await;

    env.queue.push(DELETE, &OperationId::from_stored("after")).await.unwrap();
    recorder.wait_for_ids(&["after".to_owned()]).await;
    stop(shutdown, workers).await;
    env.cleanup().await;
}

/// A worker restarted while one of its handlers runs (the backend forgot it) leaves that
/// handler running: a shutdown still waits for it. (The worker's dropped future took the
/// handler's in-flight count with it, so the stop returned while it ran, unreleased.)
async fn a_shutdown_waits_for_handlers_of_a_restarted_worker(backend: Backend) {
    let env = Env::new(backend).await;
    let gates = Arc::new(Gates::default());
    let shutdown = CancellationToken::new();
    let workers = env.queue.spawn_workers(Arc::new(GatesHandler(gates.clone())), shutdown.clone());
    env.queue.push(DELETE, &OperationId::from_stored("first")).await.unwrap();
    gates.wait_started("first").await;
    forget_workers(&env).await;
    // The next delivery comes from the restarted worker (the old one failed on its fetch).
    env.queue.push(DELETE, &OperationId::from_stored("second")).await.unwrap();
    gates.wait_started("second").await;

    shutdown.cancel();
    gates.open("second");
    tokio::pin!(workers);
    // Bounded look for the failure: the supervisor returning while `first` still runs.
    tokio::select! {
        stopped = &mut workers => panic!("the workers stopped while a handler ran: {stopped:?}"),
        () = tokio::time::sleep(Duration::from_millis(500)) => {}
    }
    gates.open("first");
    tokio::time::timeout(Duration::from_secs(35), workers)
        .await
        .expect("workers stop within the shutdown timeout")
        .expect("supervisor task did not panic")
        .expect("workers stopped cleanly");
    assert_eq!(gates.finished(), ["second", "first"]);
    env.cleanup().await;
}

/// Handlers that wait for their own id's gate.
#[derive(Default)]
struct Gates {
    started: std::sync::Mutex<Vec<String>>,
    finished: std::sync::Mutex<Vec<String>>,
    gates: std::sync::Mutex<std::collections::HashMap<String, Arc<Semaphore>>>,
    changed: tokio::sync::Notify,
}

impl Gates {
    fn gate(&self, id: &str) -> Arc<Semaphore> {
        self.gates.lock().unwrap().entry(id.to_owned()).or_insert_with(|| Arc::new(Semaphore::new(0))).clone()
    }

    fn open(&self, id: &str) {
        self.gate(id).add_permits(1);
    }

    fn finished(&self) -> Vec<String> {
        self.finished.lock().unwrap().clone()
    }

    async fn wait_started(&self, id: &str) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.started.lock().unwrap().iter().any(|s| s == id) {
                return;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                panic!("{id} did not start");
            }
        }
    }
}

struct GatesHandler(Arc<Gates>);

impl OperationHandler for GatesHandler {
    fn handle(&self, _: ContextOperationKind, id: String) -> BoxFuture<'static, ()> {
        let gates = self.0.clone();
        async move {
            gates.started.lock().unwrap().push(id.clone());
            gates.changed.notify_waiters();
            gates.gate(&id).acquire().await.expect("never closed").forget();
            gates.finished.lock().unwrap().push(id);
        }
        .boxed()
    }
}

/// Make the backend forget this test's workers, as a Redis flush or a lost registration
/// does: their next fetch fails and the supervisor restarts them.
async fn forget_workers(env: &Env) {
    match &env.db {
        Db::Sqlite(pool) => {
            // Its rows still reference it: detach them so the row can go — in one
            // transaction, or the worker could lock a row again in between.
            let mut tx = pool.begin().await.unwrap();
            sqlx::query("UPDATE Jobs SET lock_by = NULL WHERE job_type = $1")
                .bind(env.queue_name(DELETE))
                .execute(&mut *tx)
                .await
                .unwrap();
            sqlx::query("DELETE FROM Workers WHERE worker_type = $1")
                .bind(env.queue_name(DELETE))
                .execute(&mut *tx)
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
        Db::Postgres(_) => {
            let client = redis::Client::open(redis_url()).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let pattern = format!("{}:*", env.queue_name(DELETE));
            let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query_async(&mut conn).await.unwrap();
            if !keys.is_empty() {
                let _: u64 = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await.unwrap();
            }
        }
    }
}

backend_tests!(
    backend: panics_and_garbage_do_not_stop_the_worker,
    shutdown_lets_running_handlers_finish,
    handlers_that_finish_together_at_shutdown_stop_promptly,
    workers_restart_after_the_backend_forgets_them,
    a_shutdown_waits_for_handlers_of_a_restarted_worker,
);
