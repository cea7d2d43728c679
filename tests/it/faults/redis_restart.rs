//! A Redis restart (no persistence) loses queue messages, never operations.

use std::time::{Duration, Instant};

use crate::harness::db::with_pool;
use context_jobs::contract::ContextOperationState;
use context_ops::store::Db;
use serde_json::json;

use super::{HEALTHY_WITHIN, LEASE_SECS};
use crate::harness::child::{free_port, start_redis};
use crate::harness::fixture::Fixture;
use crate::harness::wait::poll_until;
use crate::harness::{Backend, OperationExt as _};

/// `(state, operations, operations with a push time)` by state.
async fn states(db: &Db) -> Vec<(String, i64, i64)> {
    with_pool!(db, pool => {
        sqlx::query_as::<_, (String, i64, i64)>(
            "SELECT state, COUNT(*), COUNT(pushed_at_ms) FROM operations GROUP BY state ORDER BY state",
        )
        .fetch_all(pool)
        .await
        .unwrap()
    })
}

/// A private Redis so the shared one is untouched. The worker is frozen while the 20
/// operations are submitted and Redis is killed and restarted empty, so every message is
/// lost and every operation must come back through the dispatcher, which sees the loss
/// (its marker key is gone) and pushes them again at once — the repush age is left at its
/// 60 s default, so waiting it out cannot pass; the worker and the API both live through
/// the restart on their existing connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_loses_no_operation() {
    const CONVERSATIONS: usize = 20;
    const EACH: i64 = 100;
    let redis_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut redis = start_redis(redis_dir.path(), "redis-1", port);
    let fx = Fixture::with_redis(Backend::Postgres, LEASE_SECS, Some(format!("redis://127.0.0.1:{port}"))).await;
    let names: Vec<String> = (0..CONVERSATIONS).map(|i| format!("c{i:02}")).collect();
    for name in &names {
        fx.seed(name, EACH).await;
    }

    let mut api = fx.env.spawn("api", "api");
    api.wait_healthy(HEALTHY_WITHIN).await;
    let mut worker = fx.env.spawn_with("worker", "worker", &[("CONTEXT_OPS_REPUSH_AFTER_MS", "60000")]);
    // The worker has no listener; wait until it has started (its log says so).
    poll_until("the worker to start", HEALTHY_WITHIN, || {
        worker.proc.assert_alive();
        let started = worker.proc.log().contains("workers started");
        let tail = worker.proc.log_tail(30);
        async move { if started { Ok(()) } else { Err(tail) } }
    })
    .await;
    worker.proc.signal("STOP");

    let mut ids = Vec::new();
    for name in &names {
        ids.push(api.api.submit_delete(name).await.id);
    }
    let submitted = Instant::now();
    assert_eq!(states(&fx.db).await, vec![("queued".to_string(), CONVERSATIONS as i64, CONVERSATIONS as i64)]);

    redis.kill();
    redis = start_redis(redis_dir.path(), "redis-2", port);
    worker.proc.signal("CONT");
    let resumed = Instant::now();

    for (id, name) in ids.iter().zip(&names) {
        let done = api.api.wait_until(id, Duration::from_secs(120), "finished", |op| op.state.is_terminal()).await;
        assert_eq!(done.state, ContextOperationState::Succeeded, "{name}: {done:?}");
        assert_eq!(done.result_json()["deletedMessages"], json!(EACH), "{name}: {done:?}");
        assert_eq!(fx.messages(name).await, 0, "{name}");
    }
    let recovered = resumed.elapsed();
    let restarts = worker.proc.log().lines().filter(|l| l.contains("restarting")).count();
    println!(
        "all {CONVERSATIONS} operations succeeded {:.1}s after submission across a Redis restart, \
         {:.2}s after the worker resumed (queue-worker restarts in the worker process: {restarts})",
        submitted.elapsed().as_secs_f64(),
        recovered.as_secs_f64()
    );
    assert!(recovered < Duration::from_secs(5), "lost work ran again {recovered:?} after Redis came back");
    worker.proc.assert_alive();
    api.proc.assert_alive();
    drop(redis);
}
