//! Pause and resume: a paused kind still takes submissions, which stay queued (phase
//! `paused`, not pushed until the resume); a running operation finishes its batch and is
//! released back to the queue (its attempt not counted); resuming starts everything again.
//! A pause can hold one tenant only. Pauses are persisted, shown by `GET …/queues`, and
//! need an admin.

use std::time::Duration;

use serde_json::json;

use super::{QUEUES, delete_as, seed, view};
use crate::harness::client::OperationExt;
use crate::harness::jwt::{jwt_mode, tenant_token};
use crate::harness::wait::{mid_run, poll_until};
use crate::harness::{Backend, TestApp, assert_api_error};
use context_jobs::contract::{ContextOperationKind, ContextOperationState};

const ADMIN: &str = "admin-secret-token";

async fn pausing_releases_running_work_and_holds_new_work(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.worker.batch_size = 20).await;
    seed(&app, None, "long", 3000).await;
    let running = delete_as(&app, None, "long", json!({})).await;
    app.wait_until(&running, Duration::from_secs(60), "running", mid_run).await;

    let (status, paused) = app.post(&format!("{QUEUES}/delete/pause"), &json!({})).await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["paused"], true);
    let released = app
        .wait_until(&running, Duration::from_secs(30), "released", |op| op.state == ContextOperationState::Queued)
        .await;
    assert_eq!(released.phase, "paused", "{released:?}");
    assert!(released.processed > 0 && released.processed < 3000, "stopped at a batch boundary: {released:?}");
    let row = view(&app, None, &running).await;
    assert_eq!(row["attempt"], 0, "a paused attempt is not counted: {row}");
    assert_eq!(row["attempts"][0]["outcome"], "paused", "{row}");

    let held = delete_as(&app, None, "other", json!({})).await;
    let (_, status_body) = app.get(QUEUES).await;
    let delete = status_body["kinds"].as_array().unwrap().iter().find(|k| k["kind"] == "delete").unwrap().clone();
    assert_eq!(delete["paused"], true, "{delete}");
    assert!(delete["queued"].as_u64().unwrap() >= 2, "{delete}");
    // Nothing starts while paused (a long-poll that sees no change within a second).
    let still = app.operation(&held).await;
    let unchanged =
        app.try_wait_until(&held, Duration::from_millis(1200), |op| op.state != ContextOperationState::Queued).await;
    assert!(unchanged.is_err(), "started while paused: {:?} (was {still:?})", unchanged);
    // (The pause gauge is checked in `engine_faults::gauges`: in-process apps share one recorder.)

    let (status, resumed) = app.post(&format!("{QUEUES}/delete/resume"), &json!({})).await;
    assert_eq!((status, &resumed["paused"]), (200, &json!(false)), "{resumed}");
    let done = app.wait_terminal(&running).await;
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    assert_eq!(done.result_json()["deletedMessages"], 3000, "resumed from its checkpoint: {done:?}");
    assert_eq!(app.wait_terminal(&held).await.state, ContextOperationState::Succeeded);
}

async fn a_pause_can_hold_one_tenant_and_needs_an_admin(backend: Backend) {
    let app = TestApp::start_with(backend, |c| {
        jwt_mode(c);
        c.auth.admin_token = Some(ADMIN.to_string().into());
    })
    .await;
    let (a, b) = (tenant_token("a"), tenant_token("b"));
    let (status, body) = app.post_as(Some(&a), &format!("{QUEUES}/delete/pause"), &json!({})).await;
    assert_api_error(status, &body, 403);
    let (status, body) = app.post_as(Some(ADMIN), &format!("{QUEUES}/delete/pause"), &json!({"tenant": "a/p"})).await;
    assert_eq!(status, 200, "{body}");
    let held = delete_as(&app, Some(&a), "x", json!({})).await;
    let free = delete_as(&app, Some(&b), "y", json!({})).await;
    assert_eq!(app.as_caller(&b).wait_terminal(&free).await.state, ContextOperationState::Succeeded);
    // Marked `paused` from its submission on.
    let client = app.as_caller(&a);
    let marked = client.wait_until(&held, Duration::from_secs(10), "marked paused", |op| op.phase == "paused").await;
    assert_eq!(marked.state, ContextOperationState::Queued, "{marked:?}");
    // A tenant sees its own pause in the status, not others'.
    let (_, mine) = app.get_as(Some(&a), QUEUES).await;
    assert_eq!(mine["scope"], "tenant");
    let delete = mine["kinds"].as_array().unwrap().iter().find(|k| k["kind"] == "delete").unwrap().clone();
    assert_eq!((&delete["paused"], &delete["pausedTenants"]), (&json!(false), &json!(["a/p"])), "{delete}");
    let (_, theirs) = app.get_as(Some(&b), QUEUES).await;
    let delete = theirs["kinds"].as_array().unwrap().iter().find(|k| k["kind"] == "delete").unwrap().clone();
    assert_eq!(delete["pausedTenants"], json!([]), "{delete}");
    let (status, _) = app.post_as(Some(ADMIN), &format!("{QUEUES}/delete/resume"), &json!({"tenant": "a/p"})).await;
    assert_eq!(status, 200);
    assert_eq!(app.as_caller(&a).wait_terminal(&held).await.state, ContextOperationState::Succeeded);
    let (status, body) = app.post_as(Some(ADMIN), &format!("{QUEUES}/nope/pause"), &json!({})).await;
    assert_api_error(status, &body, 400);
}

/// Every operation submitted during a pause starts promptly after the resume — not only
/// the one a dropped delivery marked `paused` — without waiting for the re-push age (60 s
/// by default, which this app keeps).
async fn everything_submitted_during_a_pause_starts_at_the_resume(backend: Backend) {
    let app = TestApp::start(backend).await;
    let (status, _) = app.post(&format!("{QUEUES}/delete/pause"), &json!({})).await;
    assert_eq!(status, 200);
    let mut held = Vec::new();
    for i in 0..6 {
        held.push(delete_as(&app, None, &format!("during-pause-{i}"), json!({})).await);
    }
    // Each says why it waits from its submission on; none was pushed.
    app.wait_until(&held[0], Duration::from_secs(10), "marked paused", |op| op.phase == "paused").await;
    let (status, _) = app.post(&format!("{QUEUES}/delete/resume"), &json!({})).await;
    assert_eq!(status, 200);
    let resumed = context_ops::store::now_ms();
    for id in &held {
        let outcome =
            app.try_wait_until(id, Duration::from_secs(10), |op| op.state == ContextOperationState::Succeeded).await;
        if let Err(last) = outcome {
            let row = crate::harness::db::operation_row(app.db(), id).await;
            panic!("{id} not succeeded 10 s after the resume (at {resumed}): {last:?}; row {row:?}");
        }
    }
}

/// The resume itself pushes the held work: with the dispatcher's next round a minute
/// away, the operations a pause held still start at once (fair-share claims: tenant B's one
/// operation behind A's backlog is among the first to run).
async fn the_resume_starts_held_work_without_the_dispatcher(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.queue.dispatch_interval_ms = 60_000).await;
    let (status, _) = app.post(&format!("{QUEUES}/delete/pause"), &json!({})).await;
    assert_eq!(status, 200);
    let mut held = Vec::new();
    for i in 0..5 {
        held.push(delete_as(&app, None, &format!("held-{i}"), json!({})).await);
    }
    // Nothing was pushed during the pause (nor is left in the queue): only a push can start
    // them now.
    let queue = app.running().state.queue.clone();
    poll_until("the paused deliveries dropped", Duration::from_secs(10), || {
        let queue = queue.clone();
        async move {
            let d = queue.depth(ContextOperationKind::Delete).await.map_err(|e| e.to_string())?;
            if d.pending + d.inflight == 0 { Ok(()) } else { Err(format!("{d:?}")) }
        }
    })
    .await;
    let (status, _) = app.post(&format!("{QUEUES}/delete/resume"), &json!({})).await;
    assert_eq!(status, 200);
    for id in &held {
        app.wait_until(id, Duration::from_secs(10), "succeeded after the resume", |op| {
            op.state == ContextOperationState::Succeeded
        })
        .await;
    }
}

/// A submission a pause holds answers `paused` at once and is not pushed: a delivery
/// would only be dropped by a worker, after reading the scheduler's view (the `operations`
/// bench's fairness run submits 10,000 into a pause). The resume pushes it.
async fn a_submission_into_a_pause_is_marked_paused_and_not_pushed(backend: Backend) {
    let app = TestApp::start(backend).await;
    let free = delete_as(&app, None, "before-the-pause", json!({})).await;
    assert_eq!(app.wait_terminal(&free).await.state, ContextOperationState::Succeeded);
    let (status, _) = app.post(&format!("{QUEUES}/delete/pause"), &json!({})).await;
    assert_eq!(status, 200);
    let mut held = Vec::new();
    for i in 0..3 {
        let id = delete_as(&app, None, &format!("into-the-pause-{i}"), json!({})).await;
        let op = app.operation(&id).await;
        assert_eq!((op.state, op.phase.as_str()), (ContextOperationState::Queued, "paused"), "{op:?}");
        let row = crate::harness::db::operation_row(app.db(), &id).await;
        assert_eq!(row.pushed_at_ms, None, "a held submission is not marked pushed: {row:?}");
        held.push(id);
    }
    // Scheduled for later, it is held too (as the pause marks work scheduled before it).
    let later = context_ops::store::now_ms() + 3_600_000;
    let scheduled = delete_as(&app, None, "later", json!({"notBeforeMs": later})).await;
    assert_eq!(app.operation(&scheduled).await.phase, "paused");
    assert_eq!(crate::harness::db::operation_row(app.db(), &scheduled).await.pushed_at_ms, None);

    let (status, _) = app.post(&format!("{QUEUES}/delete/resume"), &json!({})).await;
    assert_eq!(status, 200);
    let row = crate::harness::db::operation_row(app.db(), &scheduled).await;
    assert_eq!((row.phase.as_str(), row.pushed_at_ms), ("queued", None), "not due: left to the dispatcher: {row:?}");
    for id in &held {
        assert_eq!(app.wait_terminal(id).await.state, ContextOperationState::Succeeded);
    }
}

/// Work marked `paused` that no pause holds any more — a submission that read the pause
/// while its resume committed beside it, so the resume's reset missed the new row — is
/// pushed by the dispatcher (its next round), not left queued for good.
async fn paused_work_no_pause_holds_is_pushed_by_the_dispatcher(backend: Backend) {
    let app = TestApp::start(backend).await;
    let (status, _) = app.post(&format!("{QUEUES}/delete/pause"), &json!({})).await;
    assert_eq!(status, 200);
    let held = delete_as(&app, None, "left-marked", json!({})).await;
    assert_eq!(app.operation(&held).await.phase, "paused");
    // The pause ends without the resume's reset and push (the race above, staged).
    crate::harness::db::with_pool!(app.db(), pool => {
        sqlx::query("DELETE FROM queue_controls").execute(pool).await.unwrap().rows_affected()
    });
    let done = app
        .try_wait_until(&held, Duration::from_secs(10), |op| op.state == ContextOperationState::Succeeded)
        .await
        .unwrap_or_else(|last| panic!("still held with no pause: {last:?}"));
    assert_eq!(done.state, ContextOperationState::Succeeded);
}

backend_tests!(
    backend: pausing_releases_running_work_and_holds_new_work,
    a_submission_into_a_pause_is_marked_paused_and_not_pushed,
    paused_work_no_pause_holds_is_pushed_by_the_dispatcher,
    a_pause_can_hold_one_tenant_and_needs_an_admin,
    everything_submitted_during_a_pause_starts_at_the_resume,
    the_resume_starts_held_work_without_the_dispatcher
);
