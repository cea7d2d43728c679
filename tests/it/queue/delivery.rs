//! Delivery: a burst and single messages all delivered to the right kind (with latency
//! figures), messages pushed before any worker wait for one, and vacuum deletes finished
//! messages only.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use context_jobs::contract::ContextOperationKind;
use context_jobs::ids::OperationId;
use context_ops::queue::{Queue, QueueDepth};
use context_ops::store::Db;
use tokio_util::sync::CancellationToken;

use super::{DELETE, EXPORT, Env, Recorder, percentile, stop};
use crate::harness::{Backend, redis_url};

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
        env.queue.push(kind, &OperationId::from_stored(id.clone())).await.unwrap();
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
            pusher.push(DELETE, &OperationId::from_stored(id.clone())).await.unwrap();
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

async fn messages_wait_for_workers(backend: Backend) {
    let env = Env::new(backend).await;
    env.queue.push(ContextOperationKind::Import, &OperationId::from_stored("early-1")).await.unwrap();
    env.queue.push(ContextOperationKind::Retention, &OperationId::from_stored("early-2")).await.unwrap();
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
async fn vacuum_deletes_finished_messages(backend: Backend) {
    let env = Env::new(backend).await;
    let recorder = Recorder::with(&[], &[]);
    let shutdown = CancellationToken::new();
    let workers = env.queue.spawn_workers(recorder.handler(), shutdown.clone());
    let ids: Vec<String> = (0..10).map(|i| format!("v-{i}")).collect();
    for id in &ids {
        env.queue.push(ContextOperationKind::Inference, &OperationId::from_stored(id.clone())).await.unwrap();
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
            let client = redis::Client::open(redis_url()).unwrap();
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

backend_tests!(backend: delivers_every_message, messages_wait_for_workers, vacuum_deletes_finished_messages);
