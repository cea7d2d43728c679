//! SIGTERM mid-delete: released at a batch boundary, resumed by the next process.

use std::time::{Duration, Instant};

use context_jobs::contract::ContextOperationState;
use serde_json::json;

use super::{HEALTHY_WITHIN, LEASE_SECS};
use crate::harness::fixture::Fixture;
use crate::harness::wait::mid_run;
use crate::harness::{Backend, OperationExt as _};

async fn sigterm_releases_and_a_new_process_resumes(backend: Backend) {
    const TOTAL: i64 = 200_000;
    const OTHER: i64 = 100;
    let fx = Fixture::new(backend, LEASE_SECS).await;
    fx.seed("big", TOTAL).await;
    fx.seed("other", OTHER).await;

    let mut a = fx.env.spawn("serve-a", "serve");
    a.wait_healthy(HEALTHY_WITHIN).await;
    let id = a.api.submit_delete("big").await.id;
    let seen = a.api.wait_until(&id, Duration::from_secs(60), "running", mid_run).await;
    assert_eq!(seen.state, ContextOperationState::Running, "finished before the SIGTERM: {seen:?}");
    let claimed = fx.operation(&id).await;
    assert_eq!(claimed.attempt, 1, "{claimed:?}");

    a.proc.signal("TERM");
    let signalled = Instant::now();
    let Some(status) = a.proc.wait_exit(Duration::from_secs(30)).await else {
        panic!("serve-a still running 30 s after SIGTERM; log tail:\n{}", a.proc.log_tail(30));
    };
    let exited_after = signalled.elapsed();
    assert!(status.success(), "serve-a exited with {status}; log tail:\n{}", a.proc.log_tail(30));
    assert!(a.proc.log().contains("released at shutdown"), "no release logged:\n{}", a.proc.log_tail(30));

    let released = fx.operation(&id).await;
    assert_eq!(released.state, "queued", "{released:?}");
    assert_eq!(released.lease_token, None, "{released:?}");
    assert_eq!(released.lease_expires_at_ms, None, "{released:?}");
    // `Finish::Release`: back to queued, this attempt not counted — the next claim is
    // attempt 1 again, so a deploy does not eat into the retry budget.
    assert_eq!(released.attempt, claimed.attempt - 1, "a released attempt is not counted: {released:?}");
    assert_eq!(released.phase, "deleting", "{released:?}");
    assert!(released.processed > 0 && released.processed < TOTAL, "released outside the middle: {released:?}");
    // The checkpoint and the deletions committed together: exactly `processed` are gone.
    assert_eq!(fx.messages("big").await, TOTAL - released.processed);
    assert_eq!(fx.conversation_count("big").await, Some(TOTAL - released.processed));

    let restarted = Instant::now();
    let mut b = fx.env.spawn("serve-b", "serve");
    b.wait_healthy(HEALTHY_WITHIN).await;
    let healthy_after = restarted.elapsed();
    // Nothing writes the released row until the new process claims it.
    b.api.wait_until(&id, Duration::from_secs(30), "claimed again", |op| op.version as i64 != released.version).await;
    let running_again = restarted.elapsed();
    let sigterm_to_running = signalled.elapsed();
    let reclaimed = fx.operation(&id).await;
    assert_eq!(reclaimed.attempt, 1, "{reclaimed:?}");
    println!(
        "[{backend:?}] SIGTERM at {}/{TOTAL}: exit after {:.2}s; restart -> healthy {:.2}s, \
         restart -> running again {:.2}s; SIGTERM -> running again {:.2}s (lease {LEASE_SECS}s)",
        released.processed,
        exited_after.as_secs_f64(),
        healthy_after.as_secs_f64(),
        running_again.as_secs_f64(),
        sigterm_to_running.as_secs_f64(),
    );
    // No lease to wait out: a dispatcher round after start-up, not LEASE_SECS.
    assert!(
        running_again < healthy_after + Duration::from_secs(3),
        "running again {running_again:?} after the restart (healthy after {healthy_after:?})"
    );

    let done = b.api.wait_until(&id, Duration::from_secs(120), "finished", |op| op.state.is_terminal()).await;
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    assert_eq!(done.result_json()["deletedMessages"], json!(TOTAL), "{done:?}");
    assert_eq!(done.processed as i64, TOTAL, "{done:?}");
    assert_eq!(fx.messages("big").await, 0);
    assert_eq!(fx.conversation_count("big").await, None);
    assert_eq!(fx.messages("other").await, OTHER);
    assert_eq!(fx.operation(&id).await.attempt, 1, "one counted attempt");
}

backend_tests!(backend: sigterm_releases_and_a_new_process_resumes);
