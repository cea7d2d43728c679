//! Deadlines and scheduled starts: a running operation past its deadline stops at its next
//! batch boundary (an export between pages; inference: the call is aborted) and fails `deadline_exceeded`, with what
//! it committed kept; a queued one past it never starts; a per-kind default applies when a
//! submission gives none; `notBeforeMs` holds a start back (phase `scheduled`).

use std::time::Duration;

use serde_json::json;

use super::{QUEUES, delete_as, view};
use crate::harness::db::{DEFAULT_TENANT, message_count, seed_conversation};
use crate::harness::fake_responses::{FakeProvider, Step};
use crate::harness::{Backend, TestApp, assert_api_error};
use context_jobs::contract::{CONTEXT_EXPORT_PATH, CONVERSATION_DELETE_PATH, ContextOperationState, INFERENCE_PATH};
use context_ops::store::now_ms;

async fn a_running_operation_stops_at_a_batch_boundary_past_its_deadline(backend: Backend) {
    const TOTAL: i64 = 60_000;
    let app = TestApp::start_with(backend, |c| c.worker.batch_size = 10).await;
    seed_conversation(app.db(), DEFAULT_TENANT, "big", TOTAL).await;
    let id = delete_as(&app, None, "big", json!({"timeoutMs": 700})).await;
    let done = app.wait_terminal(&id).await;
    assert_eq!(done.state, ContextOperationState::Failed, "{done:?}");
    assert_eq!(done.error_code.as_deref(), Some("deadline_exceeded"), "{done:?}");
    let left = message_count(app.db(), DEFAULT_TENANT, "big").await;
    assert!(done.processed > 0 && left > 0, "stopped part-way: {done:?}, {left} left");
    assert_eq!(done.processed as i64 + left, TOTAL, "what it reports is what it committed");
    let row = view(&app, None, &id).await;
    let deadline = row["deadlineMs"].as_i64().unwrap();
    assert!(row["finishedAtMs"].as_i64().unwrap() >= deadline, "{row}");
    assert_eq!(row["attempts"][0]["errorCode"], "deadline_exceeded", "{row}");
}

/// An export checks its deadline between pages too: it used to run to the end, seal the
/// artifact, and only then fail `deadline_exceeded`.
async fn an_export_stops_at_a_page_boundary_past_its_deadline(backend: Backend) {
    const TOTAL: i64 = 200_000;
    let app = TestApp::start_with(backend, |c| {
        c.worker.batch_size = 10;
        c.artifacts.artifact_chunk_bytes = 4096;
    })
    .await;
    seed_conversation(app.db(), DEFAULT_TENANT, "big", TOTAL).await;
    let id = app.submit(CONTEXT_EXPORT_PATH, &json!({"timeoutMs": 300})).await.id;
    let done = app.wait_terminal(&id).await;
    assert_eq!(done.state, ContextOperationState::Failed, "{done:?}");
    assert_eq!(done.error_code.as_deref(), Some("deadline_exceeded"), "{done:?}");
    assert!(done.processed > 0 && done.processed < TOTAL as u64, "stopped part-way: {done:?}");
}

async fn a_queued_operation_past_its_deadline_never_starts(backend: Backend) {
    let app = TestApp::start(backend).await;
    let (status, body) = app.post(&format!("{QUEUES}/delete/pause"), &json!({})).await;
    assert_eq!(status, 200, "{body}");
    let id = delete_as(&app, None, "held", json!({"timeoutMs": 400})).await;
    let done = app.wait_terminal(&id).await;
    assert_eq!(done.state, ContextOperationState::Failed, "{done:?}");
    assert_eq!(done.error_code.as_deref(), Some("deadline_exceeded"), "{done:?}");
    let row = view(&app, None, &id).await;
    assert!(row.get("startedAtMs").is_none() && row.get("attempts").is_none(), "it never started: {row}");
}

async fn a_deadline_aborts_the_inference_call(backend: Backend) {
    let fake = FakeProvider::start(vec![Step::Hang]).await;
    let url = fake.url.clone();
    let app = TestApp::start_with(backend, move |c| {
        c.provider.responses_base_url = url;
        c.provider.responses_api_key = Some("sk-test-deadline".to_string().into());
        c.provider.responses_timeout_ms = 60_000;
    })
    .await;
    let body = json!({"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "timeoutMs": 1000});
    let id = app.submit(INFERENCE_PATH, &body).await.id;
    fake.wait_requests(1, Duration::from_secs(30)).await;
    let done = app.wait_terminal(&id).await;
    assert_eq!(done.error_code.as_deref(), Some("deadline_exceeded"), "{done:?}");
    fake.wait_until("the hung call dropped", Duration::from_secs(10), |f| f.dropped() == 1).await;
}

async fn a_kind_default_applies_and_not_before_holds_the_start(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.scheduler.default_timeout_ms = "delete=60000".into()).await;
    let before = now_ms();
    let defaulted = delete_as(&app, None, "a", json!({})).await;
    let row = view(&app, None, &defaulted).await;
    let deadline = row["deadlineMs"].as_i64().unwrap_or_else(|| panic!("no default deadline: {row}"));
    assert!((before + 60_000..=now_ms() + 60_000).contains(&deadline), "{row}");
    // A submission's own deadline wins over the default.
    let own = delete_as(&app, None, "b", json!({"deadlineMs": before + 600_000})).await;
    assert_eq!(view(&app, None, &own).await["deadlineMs"], before + 600_000);

    let start = now_ms() + 1500;
    let scheduled = delete_as(&app, None, "c", json!({"notBeforeMs": start})).await;
    let row = view(&app, None, &scheduled).await;
    assert_eq!(
        (&row["state"], &row["phase"], &row["notBeforeMs"]),
        (&json!("queued"), &json!("scheduled"), &json!(start))
    );
    // The default timeout runs from the scheduled start.
    assert_eq!(row["deadlineMs"], start + 60_000, "{row}");
    assert_eq!(app.wait_terminal(&scheduled).await.state, ContextOperationState::Succeeded);
    let started = view(&app, None, &scheduled).await["startedAtMs"].as_i64().unwrap();
    assert!(started >= start, "started {}ms early", start - started);

    let soon = now_ms() + 60_000;
    for bad in [
        json!({"deadlineMs": soon, "timeoutMs": 1000}),
        json!({"timeoutMs": 0}),
        json!({"timeoutMs": "1s"}),
        json!({"deadlineMs": before - 1}),
        json!({"notBeforeMs": soon + 400 * 86_400_000}),
        json!({"notBeforeMs": soon, "deadlineMs": soon - 1}),
    ] {
        let mut body = json!({"scope": {"conversationId": "bad"}});
        body.as_object_mut().unwrap().extend(bad.as_object().unwrap().clone());
        let (status, error) = app.post(CONVERSATION_DELETE_PATH, &body).await;
        assert_api_error(status, &error, 400);
    }
    let (_, listed) = app.get(&format!("{}?limit=100", context_jobs::contract::CONTEXT_OPERATIONS_PATH)).await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 3, "nothing stored for a refused submission");
}

backend_tests!(
    backend: a_running_operation_stops_at_a_batch_boundary_past_its_deadline,
    an_export_stops_at_a_page_boundary_past_its_deadline,
    a_queued_operation_past_its_deadline_never_starts,
    a_deadline_aborts_the_inference_call,
    a_kind_default_applies_and_not_before_holds_the_start,
);
