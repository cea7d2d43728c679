//! The retry policy against real HTTP failures: `retry-after` honoured, 5xx retried until
//! the budget is spent, 4xx and `insufficient_quota` failing at once, a hanging provider
//! timing out, and a cancel aborting the in-flight request.

use std::time::Duration;

use context_jobs::contract::ContextOperationState;
use serde_json::json;

use super::{OPS, app, app_on, assert_failed, assert_well_formed, run_turn, submit, turn};
use crate::harness::fake_responses::{FakeProvider, Step, completed_text};
use crate::harness::{Backend, OperationExt as _};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_then_success_waits_as_long_as_retry_after_says() {
    let limited = Step::status(429, json!({"error": {"code": "rate_limit_exceeded", "message": "slow down"}}))
        .header("retry-after", "1");
    let fake = FakeProvider::start(vec![limited, Step::ok(completed_text("ok"))]).await;
    let app = app(&fake).await;
    let op = run_turn(&app, &turn("hi")).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(op.result_json()["providerAttempts"], 2);
    let received = fake.received();
    assert_eq!(received.len(), 2);
    let gap = received[1].at - received[0].at;
    // Our own backoff would be ≤ 500 ms; the server asked for 1 s.
    assert!(gap >= Duration::from_millis(1000), "retried after {gap:?}, before retry-after");
    assert!(gap < Duration::from_millis(4000), "retried after {gap:?}");
    assert_well_formed(&received);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_retried_until_the_budget_is_spent() {
    let fake = FakeProvider::start(vec![]).await;
    fake.always(Step::status(500, json!({"error": {"message": "upstream broke"}})));
    let app = app(&fake).await;
    let op = run_turn(&app, &turn("hi")).await;
    assert_failed(&op, "retries_exhausted");
    let error = op.error.as_deref().unwrap();
    assert!(error.contains("HTTP 500") && error.contains("upstream broke"), "{error}");
    assert!(error.contains("provider attempts: 3"), "{error}");
    let received = fake.received();
    assert_eq!(received.len(), 3, "RESPONSES_MAX_ATTEMPTS = 3");
    // Exponential backoff: ~500 ms then ~1 s (jitter shortens by at most 25 %).
    assert!(received[1].at - received[0].at >= Duration::from_millis(375));
    assert!(received[2].at - received[1].at >= Duration::from_millis(750));
    assert_well_formed(&received);
    app.stop().await;
}

/// The retry budget is the operation's, not each run's: a run that starts with calls
/// already failed (earlier runs that went back to the queue — a rate limit's deferral)
/// spends only what is left. (Each run started a fresh budget: two operations whose 429s
/// kept blocking each other's model deferred back and forth for good.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_budget_carries_over_runs() {
    let fake = FakeProvider::start(vec![]).await;
    fake.always(Step::status(500, json!({"error": {"message": "upstream broke"}})));
    let app = app(&fake).await;
    let queues = "/internal/v1/context/queues/inference";
    let (status, body) = app.post(&format!("{queues}/pause"), &json!({})).await;
    assert_eq!(status, 200, "{body}");
    let id = submit(&app, &turn("hi")).await;
    // As two earlier runs leave it: two calls made, both failed and retried.
    context_ops::store::query("UPDATE operations SET checkpoint = $1 WHERE id = $2")
        .bind(r#"{"providerAttempts":2,"failedCalls":2}"#)
        .bind(id.as_str())
        .execute(app.db())
        .await
        .unwrap();
    let (status, body) = app.post(&format!("{queues}/resume"), &json!({})).await;
    assert_eq!(status, 200, "{body}");
    let op = app.wait_terminal(&id).await;
    assert_failed(&op, "retries_exhausted");
    assert_eq!(fake.received().len(), 1, "one call was left of RESPONSES_MAX_ATTEMPTS = 3");
    let error = op.error.as_deref().unwrap();
    assert!(error.contains("provider attempts: 3"), "{error}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors_and_insufficient_quota_fail_without_a_retry() {
    let fake = FakeProvider::start(vec![]).await;
    let app = app(&fake).await;
    let cases = vec![
        ("provider_rejected", Step::status(400, json!({"error": {"message": "bad tool schema"}}))),
        ("provider_rejected", Step::status(401, json!({"error": {"message": "who are you"}}))),
        (
            "insufficient_quota",
            // Even a server saying "retry" cannot make an out-of-credit call worth repeating.
            Step::status(429, json!({"error": {"code": "insufficient_quota", "message": "pay up"}}))
                .header("x-should-retry", "true"),
        ),
        ("provider_rejected", Step::status(503, json!({"error": {"message": "no"}})).header("x-should-retry", "false")),
    ];
    for (i, (code, step)) in cases.into_iter().enumerate() {
        fake.then(step);
        let op = run_turn(&app, &turn("hi")).await;
        assert_failed(&op, code);
        assert_eq!(fake.received().len(), i + 1, "{code} must not be retried");
    }
    let op = run_turn(&app, &turn("hi")).await;
    assert_eq!(op.state, ContextOperationState::Failed, "the script is empty: the fake answers 418");
    assert_well_formed(&fake.received());
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_provider_times_out_on_every_attempt() {
    let fake = FakeProvider::start(vec![]).await;
    fake.always(Step::Hang);
    let app = app_on(Backend::Sqlite, &fake, |c| {
        c.provider.responses_timeout_ms = 300;
        c.provider.responses_max_attempts = 2;
    })
    .await;
    let op = run_turn(&app, &turn("hi")).await;
    assert_failed(&op, "timeout");
    let received = fake.received();
    assert_eq!(received.len(), 2);
    // The client gave up on each hanging request (the fake saw both dropped).
    fake.wait_until("both requests dropped", Duration::from_secs(5), |f| f.dropped() == 2).await;
    assert_well_formed(&received);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_the_call_aborts_the_request() {
    let fake = FakeProvider::start(vec![Step::Hang]).await;
    let app = app(&fake).await;
    let id = submit(&app, &turn("think hard")).await;
    fake.wait_requests(1, Duration::from_secs(10)).await;
    assert_eq!(fake.dropped(), 0);
    let (status, op) = app.post(&format!("{OPS}/{id}/cancel"), &json!({})).await;
    assert_eq!(status, 200, "{op}");
    let op = app.wait_terminal(&id).await;
    assert_eq!(op.state, ContextOperationState::Cancelled, "{op:?}");
    assert!(op.result.is_none());
    fake.wait_until("the in-flight request dropped", Duration::from_secs(5), |f| f.dropped() == 1).await;
    assert_eq!(fake.received().len(), 1, "no retry after a cancel");
    app.stop().await;
}

/// A call longer than the lease keeps the lease (the runner's heartbeat and the cancel
/// poll renew it): no other worker takes the operation over and calls again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_longer_than_the_lease_keeps_the_lease() {
    let slow = Step::ok(completed_text("worth the wait")).after(Duration::from_millis(5_000));
    let fake = FakeProvider::start(vec![slow]).await;
    let app = app_on(Backend::Sqlite, &fake, |c| c.worker.lease_secs = 2).await;
    let op = run_turn(&app, &turn("slow one")).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(op.result_json()["providerAttempts"], 1);
    assert_eq!(fake.received().len(), 1, "the operation was never taken over");
    app.stop().await;
}
