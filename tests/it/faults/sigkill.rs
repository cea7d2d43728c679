//! SIGKILL in the middle of a delete: the restarted binary resumes from the checkpoint,
//! within a lease and a dispatcher round, and deletes exactly what was left — with fixed
//! batches, and with batches paced by time (sizes that change from batch to batch, and
//! start again from the batch size after the restart).

use std::time::{Duration, Instant};

use context_jobs::contract::{ContextOperation, ContextOperationState};
use serde_json::json;

use super::{HEALTHY_WITHIN, LEASE_SECS};
use crate::harness::fixture::Fixture;
use crate::harness::wait::mid_run;
use crate::harness::{Backend, OperationExt as _};

async fn sigkill_mid_delete_resumes_exactly(backend: Backend) {
    kill_mid_delete(backend, &[], 1).await;
}

/// Batches of 2,000 rows (the children's batch size) paced to 4 ms: they grow and shrink
/// around a few thousand rows, so the kill still lands mid-run, after several batches.
async fn sigkill_mid_paced_delete_resumes_exactly(backend: Backend) {
    kill_mid_delete(backend, &[("CONTEXT_OPS_BATCH_TARGET_MS", "4")], 10_000).await;
}

/// Kill the delete's process once it has deleted at least `kill_after` messages.
async fn kill_mid_delete(backend: Backend, env: &[(&str, &str)], kill_after: u64) {
    const TOTAL: i64 = 200_000;
    const OTHER: i64 = 1_000;
    let fx = Fixture::new(backend, LEASE_SECS).await;
    fx.seed("big", TOTAL).await;
    fx.seed("other", OTHER).await;

    let mut a = fx.env.spawn_with("serve-a", "serve", env);
    a.wait_healthy(HEALTHY_WITHIN).await;
    let id = a.api.submit_delete("big").await.id;
    let far_enough = |op: &ContextOperation| mid_run(op) && (op.state.is_terminal() || op.processed >= kill_after);
    let seen = a.api.wait_until(&id, Duration::from_secs(60), "running", far_enough).await;
    assert_eq!(seen.state, ContextOperationState::Running, "the delete ended before it could be killed: {seen:?}");

    a.proc.kill();
    let killed = Instant::now();
    let at_kill = fx.operation(&id).await;
    assert_eq!(at_kill.state, "running", "the delete finished before SIGKILL landed: {at_kill:?}");
    assert!(at_kill.processed > 0 && at_kill.processed < TOTAL, "killed outside the middle: {at_kill:?}");
    // The checkpoint and the deletions commit together: exactly `processed` are gone.
    assert_eq!(fx.messages("big").await, TOTAL - at_kill.processed, "checkpoint and effect diverged at the kill");
    assert_eq!(fx.conversation_count("big").await, Some(TOTAL - at_kill.processed));

    let restarted = Instant::now();
    let mut b = fx.env.spawn_with("serve-b", "serve", env);
    b.wait_healthy(HEALTHY_WITHIN).await;
    let healthy_after = restarted.elapsed();
    // The dead process cannot write, so the first version change is the new claim.
    let again = b
        .api
        .wait_until(&id, Duration::from_secs(60), "claimed again", |op| op.version as i64 != at_kill.version)
        .await;
    let running_again = restarted.elapsed();
    let since_kill = killed.elapsed();
    let reclaimed = fx.operation(&id).await;
    assert!(reclaimed.attempt >= 2, "a version change that is not a new claim: {reclaimed:?} / {again:?}");
    println!(
        "[{backend:?}] SIGKILL at {}/{TOTAL}; restart -> healthy {:.2}s, restart -> running again {:.2}s \
         (kill -> running again {:.2}s, lease {LEASE_SECS}s)",
        at_kill.processed,
        healthy_after.as_secs_f64(),
        running_again.as_secs_f64(),
        since_kill.as_secs_f64(),
    );
    // Orphan recovery is the dispatcher's job: lease expiry plus a round, not the queue's
    // own 30 s orphan timeout (which is what a lost recovery would fall back to).
    assert!(
        since_kill < Duration::from_secs(LEASE_SECS + 5) + healthy_after,
        "running again only {since_kill:?} after the kill (pushed_at_ms at the kill: {:?})",
        at_kill.pushed_at_ms
    );

    let done = b.api.wait_until(&id, Duration::from_secs(120), "finished", |op| op.state.is_terminal()).await;
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    assert_eq!(done.result_json()["deletedMessages"], json!(TOTAL), "{done:?}");
    assert_eq!(done.processed as i64, TOTAL, "{done:?}");
    assert_eq!(fx.messages("big").await, 0);
    assert_eq!(fx.conversation_count("big").await, None, "the conversation row goes with the last batch");
    assert_eq!(fx.messages("other").await, OTHER);
    assert_eq!(fx.conversation_count("other").await, Some(OTHER));
    let row = fx.operation(&id).await;
    assert_eq!(row.state, "succeeded");
    assert!(row.attempt >= 2, "attempt {} after a SIGKILL", row.attempt);
}

backend_tests!(backend: sigkill_mid_delete_resumes_exactly, sigkill_mid_paced_delete_resumes_exactly);
