//! A cancel that arrives while its operation's worker is dead (SIGKILLed mid-delete): the
//! process that takes the orphan over ends it `cancelled` before it deletes anything more,
//! reporting what was deleted before the kill, and the conversation's barrier goes with it.
//! A pause made meanwhile sends the orphan back to the queue the same way.

use std::time::Duration;

use context_jobs::contract::{ContextOperationKind, ContextOperationState};
use context_jobs::ids::{OperationId, TenantKey};
use context_ops::store::operations::transitions;
use serde_json::json;

use super::{HEALTHY_WITHIN, LEASE_SECS};
use crate::harness::db::DEFAULT_TENANT;
use crate::harness::fixture::Fixture;
use crate::harness::wait::mid_run;
use crate::harness::{Backend, OperationExt as _};

async fn a_cancel_sent_while_the_worker_is_dead_stops_the_orphan_before_more_work(backend: Backend) {
    let (fx, id) = killed_mid_delete(backend).await;

    // No process is alive: the cancel (the API's own store call) can only flag the row.
    let tenant = TenantKey::from_stored(DEFAULT_TENANT);
    let cancelled_at_once =
        transitions::cancel(&fx.db, &tenant, &OperationId::from_stored(id.as_str())).await.expect("cancel");
    assert!(!cancelled_at_once, "a running operation is flagged, not cancelled at once");
    let at_cancel = fx.operation(&id).await;
    assert_eq!(at_cancel.state, "running", "{at_cancel:?}");
    assert!(at_cancel.processed > 0 && at_cancel.processed < TOTAL, "killed outside the middle: {at_cancel:?}");

    let mut b = fx.env.spawn("serve-b", "serve");
    b.wait_healthy(HEALTHY_WITHIN).await;
    let done = b.api.wait_until(&id, Duration::from_secs(60), "finished", |op| op.state.is_terminal()).await;
    assert_eq!(done.state, ContextOperationState::Cancelled, "{done:?}");
    // The recovery's note (`lease_expired`) is not why it ended; the attempts keep it.
    assert_eq!((done.error.as_deref(), done.error_code.as_deref()), (None, None), "{done:?}");
    let row = fx.operation(&id).await;
    assert!(row.attempt >= 2, "the orphan was taken over by a new attempt: {row:?}");
    // Not one batch more: what was deleted at the kill is all that is gone.
    assert_eq!(done.processed as i64, at_cancel.processed, "{done:?}");
    assert_eq!(done.result_json()["deletedMessages"], json!(at_cancel.processed), "{done:?}");
    assert_eq!(fx.messages("big").await, TOTAL - at_cancel.processed);
    // The barrier went with the cancel: the conversation takes appends again.
    let (status, body) = b
        .api
        .post(
            context_jobs::contract::MESSAGES_APPEND_PATH,
            &json!({"messages": [crate::harness::message("big", "after", "user", "hello")]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    b.proc.assert_alive();
}

/// The kind paused while the worker is dead: the recovery releases the orphan (`queued`,
/// phase `paused`) before any further batch (before, it deleted one batch more first), and
/// the resume finishes it.
async fn a_pause_made_while_the_worker_is_dead_releases_the_orphan_before_more_work(backend: Backend) {
    let (fx, id) = killed_mid_delete(backend).await;
    transitions::set_paused(&fx.db, ContextOperationKind::Delete, None, true).await.expect("pause");
    let at_pause = fx.operation(&id).await;
    assert_eq!(at_pause.state, "running", "{at_pause:?}");

    let mut b = fx.env.spawn("serve-b", "serve");
    b.wait_healthy(HEALTHY_WITHIN).await;
    let held = b.api.wait_until(&id, Duration::from_secs(60), "released", |op| op.phase == "paused").await;
    assert_eq!(held.state, ContextOperationState::Queued, "{held:?}");
    assert_eq!(held.processed as i64, at_pause.processed, "not one batch more: {held:?}");
    assert_eq!(fx.messages("big").await, TOTAL - at_pause.processed);

    transitions::set_paused(&fx.db, ContextOperationKind::Delete, None, false).await.expect("resume");
    let done = b.api.wait_until(&id, Duration::from_secs(60), "finished", |op| op.state.is_terminal()).await;
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    assert_eq!(done.result_json()["deletedMessages"], json!(TOTAL), "{done:?}");
    assert_eq!(fx.messages("big").await, 0);
    b.proc.assert_alive();
}

const TOTAL: i64 = 200_000;

/// A delete of `big` (`TOTAL` messages) whose only process was SIGKILLed mid-run.
async fn killed_mid_delete(backend: Backend) -> (Fixture, String) {
    let fx = Fixture::new(backend, LEASE_SECS).await;
    fx.seed("big", TOTAL).await;
    let mut a = fx.env.spawn("serve-a", "serve");
    a.wait_healthy(HEALTHY_WITHIN).await;
    let id = a.api.submit_delete("big").await.id;
    let seen = a.api.wait_until(&id, Duration::from_secs(60), "running", mid_run).await;
    assert_eq!(seen.state, ContextOperationState::Running, "the delete ended before it could be killed: {seen:?}");
    a.proc.kill();
    (fx, id)
}

backend_tests!(backend:
    a_cancel_sent_while_the_worker_is_dead_stops_the_orphan_before_more_work,
    a_pause_made_while_the_worker_is_dead_releases_the_orphan_before_more_work,
);
