//! The retention sweep: it trims every conversation to the configured policy on its own
//! schedule, and one tick runs in exactly one holder at a time.

use std::time::Duration;

use super::{count, seed};
use crate::harness::wait::poll_until;
use crate::harness::{Backend, TestApp};

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
    assert_eq!(count(&app, "sweep-a").await, 5);
    assert_eq!(count(&app, "sweep-b").await, 3);
    app.stop().await;
}

async fn sweep_ticks_are_exclusive(backend: Backend) {
    let app = TestApp::start(backend).await;
    let db = app.db().clone();
    let policy = context_jobs::contract::RetentionPolicy { max_age_days: None, max_messages: Some(1) };
    let tick = |holder: &'static str| {
        let db = db.clone();
        let policy = policy.clone();
        tokio::spawn(async move {
            context_ops::worker::sweep::sweep_tick(&db, holder, 3_600_000, &policy, 100).await.unwrap()
        })
    };
    let (a, b, c) = tokio::join!(tick("a"), tick("b"), tick("c"));
    let ran = [a.unwrap(), b.unwrap(), c.unwrap()].iter().filter(|r| r.is_some()).count();
    assert_eq!(ran, 1, "exactly one holder runs a tick");
    // The period has not passed: nobody runs the next tick yet.
    assert!(tick("d").await.unwrap().is_none());
    app.stop().await;
}

backend_tests!(backend: retention_sweep, sweep_ticks_are_exclusive);
