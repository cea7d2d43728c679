//! How fast an orphan is running again. A standby process is already up when the holder is
//! SIGKILLed, so the figure is the protocol's own recovery time (lease expiry + dispatcher
//! round + delivery + claim), not process start-up (`sigkill` prints restart times).

use std::time::{Duration, Instant};

use context_jobs::contract::ContextOperationState;
use context_ops::store::now_ms;

use super::{HEALTHY_WITHIN, LEASE_SECS};
use crate::harness::Backend;
use crate::harness::fixture::Fixture;
use crate::harness::wait::mid_run;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_recovery_time() {
    const TOTAL: i64 = 200_000;
    let fx = Fixture::new(Backend::Sqlite, LEASE_SECS).await;
    fx.seed("big", TOTAL).await;

    let mut a = fx.env.spawn("serve-a", "serve");
    a.wait_healthy(HEALTHY_WITHIN).await;
    let id = a.api.submit_delete("big").await.id;
    a.api.wait_until(&id, Duration::from_secs(60), "running", mid_run).await;
    let mut b = fx.env.spawn("serve-b", "serve");
    b.wait_healthy(HEALTHY_WITHIN).await;

    a.proc.kill();
    let killed = Instant::now();
    let killed_ms = now_ms();
    let at_kill = fx.operation(&id).await;
    assert_eq!(at_kill.state, "running", "the delete finished before SIGKILL landed: {at_kill:?}");
    let lease_left_ms = at_kill.lease_expires_at_ms.unwrap_or(killed_ms) - killed_ms;

    b.api.wait_until(&id, Duration::from_secs(60), "claimed again", |op| op.version as i64 != at_kill.version).await;
    let recovery = killed.elapsed();
    assert!(fx.operation(&id).await.attempt >= 2);
    println!(
        "orphan recovery (SQLite): SIGKILL -> running again {:.2}s (lease {LEASE_SECS}s, {:.2}s of it left at the kill)",
        recovery.as_secs_f64(),
        lease_left_ms as f64 / 1000.0
    );
    assert!(
        recovery < Duration::from_secs(LEASE_SECS + 5),
        "orphan took {recovery:?} to run again (lease {LEASE_SECS}s; pushed_at_ms at the kill: {:?})",
        at_kill.pushed_at_ms
    );

    let done = b.api.wait_until(&id, Duration::from_secs(120), "finished", |op| op.state.is_terminal()).await;
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    assert_eq!(done.processed as i64, TOTAL, "{done:?}");
    assert_eq!(fx.messages("big").await, 0);
}
