//! How fast an orphan is running again, with the default settings (lease 15 s, dispatch
//! every second, re-push after a minute): a SIGKILLed worker stops announcing itself, so
//! after `OWNER_SILENCE_MS` its operations are recovered without waiting for the lease. A
//! standby process is already up when the holder is killed, so the figure is the
//! protocol's recovery time, not process start-up (`sigkill` prints restart times).

use std::time::{Duration, Instant};

use context_jobs::contract::ContextOperationState;
use context_ops::config::Config;

use super::HEALTHY_WITHIN;
use crate::harness::Backend;
use crate::harness::child::Service;
use crate::harness::fixture::Fixture;
use crate::harness::wait::mid_run;

/// The bound for a SIGKILLed worker's operation to run again.
const RECOVERED_WITHIN: Duration = Duration::from_secs(5);

/// `serve` with the default lease, dispatch interval and re-push delay (the shared test
/// environment shortens them).
fn spawn_with_defaults(fx: &Fixture, name: &str) -> Service {
    let defaults = Config::defaults();
    let dispatch = defaults.queue.dispatch_interval_ms.to_string();
    let repush = defaults.queue.repush_after_ms.to_string();
    let lease = defaults.worker.lease_secs.to_string();
    fx.env.spawn_with(
        name,
        "serve",
        &[
            ("CONTEXT_OPS_DISPATCH_INTERVAL_MS", dispatch.as_str()),
            ("CONTEXT_OPS_REPUSH_AFTER_MS", repush.as_str()),
            ("CONTEXT_OPS_LEASE_SECS", lease.as_str()),
        ],
    )
}

async fn a_killed_workers_operation_runs_again_within_5s(backend: Backend) {
    const TOTAL: i64 = 200_000;
    let fx = Fixture::new(backend, Config::defaults().worker.lease_secs).await;
    fx.seed("big", TOTAL).await;

    let mut a = spawn_with_defaults(&fx, "serve-a");
    a.wait_healthy(HEALTHY_WITHIN).await;
    let id = a.api.submit_delete("big").await.id;
    a.api.wait_until(&id, Duration::from_secs(60), "running", mid_run).await;
    let mut b = spawn_with_defaults(&fx, "serve-b");
    b.wait_healthy(HEALTHY_WITHIN).await;

    a.proc.kill();
    let killed = Instant::now();
    let at_kill = fx.operation(&id).await;
    assert_eq!(at_kill.state, "running", "the delete finished before SIGKILL landed: {at_kill:?}");

    // A batch commit the killed process had already sent may still land (a new version,
    // the same attempt): running again is the next attempt's claim.
    let mut seen = at_kill.version;
    loop {
        let op = b.api.wait_until(&id, Duration::from_secs(60), "claimed again", |op| op.version as i64 != seen).await;
        if fx.operation(&id).await.attempt >= 2 {
            break;
        }
        seen = op.version as i64;
    }
    let recovery = killed.elapsed();
    println!("orphan recovery ({backend:?}, defaults): SIGKILL -> running again {:.2}s", recovery.as_secs_f64());
    assert!(recovery < RECOVERED_WITHIN, "orphan took {recovery:?} to run again with the default settings");

    let done = b.api.wait_until(&id, Duration::from_secs(120), "finished", |op| op.state.is_terminal()).await;
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    assert_eq!(done.processed as i64, TOTAL, "{done:?}");
    assert_eq!(fx.messages("big").await, 0);
}

backend_tests!(backend: a_killed_workers_operation_runs_again_within_5s);
