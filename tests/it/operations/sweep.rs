//! The retention sweep: off unless a policy is configured; when on, it submits a
//! `retention` operation for every conversation its policy trims (listed like any other),
//! on its own schedule, and one tick runs in exactly one holder at a time.

use std::time::Duration;

use context_jobs::contract::{ContextOperationKind, ContextOperationState};
use context_ops::config::Config;

use super::{OPS, count, seed};
use crate::harness::wait::poll_until;
use crate::harness::{Backend, OperationExt as _, TestApp};

async fn retention_sweep(backend: Backend) {
    let app = TestApp::start_with(backend, |c| {
        c.retention.retention_sweep_secs = 1;
        c.retention.retention_max_messages = 5;
        c.retention.retention_max_age_days = 0;
    })
    .await;
    seed(&app, "sweep-a", 12).await;
    seed(&app, "sweep-b", 3).await;
    // The sweep runs on its own schedule: poll its reported figures.
    poll_until("the sweep to run", Duration::from_secs(30), || async {
        let (_, status) = app.get("/internal/v1/context/maintenance/status").await;
        if status["retentionProcessed"].as_u64().unwrap_or(0) >= 7 {
            assert!(status["retentionLastRunMs"].as_i64().unwrap() > 0);
            return Ok(());
        }
        Err(status.to_string())
    })
    .await;
    // The trim is an operation of the tenant, listed with its kind, and it ran.
    let (status, listed) = app.get(&format!("{OPS}?kind=retention")).await;
    assert_eq!(status, 200, "{listed}");
    let items = listed["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "one operation, for the one conversation trimmed: {listed}");
    let id = items[0]["id"].as_str().unwrap();
    let op = app.wait_terminal(id).await;
    assert_eq!((op.kind, op.state), (ContextOperationKind::Retention, ContextOperationState::Succeeded), "{op:?}");
    assert_eq!(op.result_json()["deletedMessages"], 7, "{op:?}");
    assert_eq!(count(&app, "sweep-a").await, 5);
    assert_eq!(count(&app, "sweep-b").await, 3);
    app.stop().await;
}

/// A fresh install deletes nothing on its own: the default configuration has no sweep
/// policy, so the sweep is off (and says so only when on).
#[test]
fn the_sweep_is_off_by_default() {
    let config = Config::defaults();
    assert!(config.retention.retention_sweep_secs > 0, "the period alone does not turn it on");
    assert_eq!(config.retention.sweep_policy(), None);
    let mut on = Config::defaults();
    on.retention.retention_max_age_days = 90;
    let policy = on.retention.sweep_policy().expect("a policy turns it on");
    assert_eq!((policy.max_age_days, policy.max_messages), (Some(90), None));
}

async fn sweep_ticks_are_exclusive(backend: Backend) {
    let app = TestApp::start(backend).await;
    let db = app.db().clone();
    let policy = context_jobs::contract::RetentionPolicy { max_age_days: None, max_messages: Some(1) };
    let tick = |holder: &'static str| {
        let db = db.clone();
        let policy = policy.clone();
        tokio::spawn(
            async move { context_ops::worker::sweep::sweep_tick(&db, holder, 3_600_000, &policy).await.unwrap() },
        )
    };
    let (a, b, c) = tokio::join!(tick("a"), tick("b"), tick("c"));
    let ran = [a.unwrap(), b.unwrap(), c.unwrap()].iter().filter(|r| r.is_some()).count();
    assert_eq!(ran, 1, "exactly one holder runs a tick");
    // The period has not passed: nobody runs the next tick yet.
    assert!(tick("d").await.unwrap().is_none());
    app.stop().await;
}

backend_tests!(backend: retention_sweep, sweep_ticks_are_exclusive);
