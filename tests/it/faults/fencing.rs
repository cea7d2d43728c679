//! A frozen worker is fenced: another process takes its operation over once the lease
//! expires, and when the frozen one wakes (SIGCONT) its writes do not land.

use std::time::{Duration, Instant};

use context_jobs::contract::ContextOperationState;
use context_ops::store::Db;

use super::{HEALTHY_WITHIN, LEASE_SECS};
use crate::harness::Backend;
use crate::harness::fixture::Fixture;
use crate::harness::wait::mid_run;

/// PostgreSQL sessions of this database that are not idle, for a diagnosis.
async fn pg_activity(db: &Db) -> String {
    let Db::Postgres(pool) = db else {
        return String::new();
    };
    let rows: Vec<String> = sqlx::query_scalar(
        "SELECT concat_ws(' | ', state, wait_event_type, wait_event, left(query, 120)) \
         FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    rows.join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_worker_is_fenced() {
    const TOTAL: i64 = 100_000;
    let fx = Fixture::new(Backend::Postgres, LEASE_SECS).await;
    fx.seed("big", TOTAL).await;

    let mut a = fx.env.spawn("serve-a", "serve");
    a.wait_healthy(HEALTHY_WITHIN).await;
    let id = a.api.submit_delete("big").await.id;
    a.api.wait_until(&id, Duration::from_secs(60), "running", mid_run).await;
    // Frozen first, then B starts: B's start-up must not race the rest of A's delete.
    a.proc.signal("STOP");
    let stopped = Instant::now();
    let at_stop = fx.operation(&id).await;
    assert_eq!(at_stop.state, "running", "the delete finished before A was frozen: {at_stop:?}");
    assert_eq!(at_stop.attempt, 1, "A holds the first attempt: {at_stop:?}");
    let mut b = fx.env.spawn("serve-b", "serve");
    b.wait_healthy(HEALTHY_WITHIN).await;

    // B takes over once A's lease expires, while A is still frozen.
    let done = match b.api.try_wait_until(&id, Duration::from_secs(60), |op| op.state.is_terminal()).await {
        Ok(done) => done,
        Err(last) => panic!(
            "B did not finish the operation while A was frozen; last seen {last:?}\nPostgreSQL sessions:\n{}",
            pg_activity(&fx.db).await
        ),
    };
    let takeover = stopped.elapsed();
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    assert_eq!(done.processed as i64, TOTAL, "{done:?}");
    let before = fx.operation(&id).await;
    assert!(before.attempt >= 2, "B must have claimed it: {before:?}");

    a.proc.signal("CONT");
    a.wait_healthy(HEALTHY_WITHIN).await;
    // The one fixed wait: A's stale attempt ends with writes that must *not* happen, and
    // there is no event to wait for when nothing happens. Two lease periods cover A's
    // in-flight batch, its next heartbeat tick (every lease/3) and its finish attempt.
    tokio::time::sleep(Duration::from_secs(2 * LEASE_SECS)).await;

    let after = b.api.operation(&id).await;
    let row = fx.operation(&id).await;
    assert_eq!(after.state, ContextOperationState::Succeeded, "{after:?}");
    assert_eq!(after.processed as i64, TOTAL, "{after:?}");
    assert_eq!(after.version, done.version, "A wrote after it was fenced: {after:?}");
    assert_eq!(row.version, before.version, "A wrote after it was fenced: {row:?}");
    assert_eq!(fx.messages("big").await, 0);
    // A did try: its resumed batch (or, if PostgreSQL ended its frozen transaction, its
    // retry bookkeeping) hit the fence and was refused.
    let fenced = a.proc.log().lines().filter(|l| l.contains("lost the lease")).count();
    assert!(fenced >= 1, "A never reached the fence after SIGCONT:\n{}", a.proc.log_tail(30));
    println!(
        "A frozen at {}/{TOTAL}; B finished {:.2}s later (lease {LEASE_SECS}s); A logged {fenced} fenced write(s) after SIGCONT",
        at_stop.processed,
        takeover.as_secs_f64()
    );
}
