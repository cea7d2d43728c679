//! Retry (`POST …/operations/{id}/retry`): a failed or cancelled operation goes back to
//! `queued` with a fresh attempt budget, resuming from its checkpoint where its kind can
//! (delete, export…) and starting over where it cannot (inference); its attempt history
//! stays readable. Only failed or cancelled operations can be retried (409), only one's own
//! (404), and new scheduling options are validated like a submission's.

use std::time::Duration;

use serde_json::{Value, json};

use super::{delete_as, view};
use crate::harness::client::OperationExt;
use crate::harness::db::{DEFAULT_TENANT, message_count, seed_conversation};
use crate::harness::fake_responses::{FakeProvider, Step, completed_text};
use crate::harness::jwt::{jwt_mode, tenant_token};
use crate::harness::wait::mid_run;
use crate::harness::{Backend, TestApp, assert_api_error, message};
use context_jobs::contract::{
    CONTEXT_EXPORT_ARTIFACT_PATH, CONTEXT_EXPORT_PATH, CONTEXT_OPERATIONS_PATH as OPS, ContextOperationState,
    INFERENCE_PATH, MESSAGES_APPEND_PATH,
};

fn retry_path(id: &str) -> String {
    format!("{OPS}/{id}/retry")
}

async fn a_failed_delete_resumes_from_its_checkpoint(backend: Backend) {
    const TOTAL: i64 = 10_000;
    let app = TestApp::start_with(backend, |c| c.worker.batch_size = 10).await;
    seed_conversation(app.db(), DEFAULT_TENANT, "big", TOTAL).await;
    let id = delete_as(&app, None, "big", json!({"timeoutMs": 400})).await;
    let failed = app.wait_terminal(&id).await;
    assert_eq!(failed.error_code.as_deref(), Some("deadline_exceeded"), "{failed:?}");
    assert!(failed.processed > 0 && (failed.processed as i64) < TOTAL, "{failed:?}");

    let (status, requeued) = app.post(&retry_path(&id), &json!({"priority": 8})).await;
    assert_eq!(status, 202, "{requeued}");
    assert_eq!((&requeued["state"], &requeued["priority"]), (&json!("queued"), &json!(8)), "{requeued}");
    assert_eq!(requeued["processed"], failed.processed, "the checkpoint is kept: {requeued}");
    assert!(requeued.get("deadlineMs").is_none() && requeued.get("errorCode").is_none(), "{requeued}");
    let done = app.wait_terminal(&id).await;
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    assert_eq!(done.result_json()["deletedMessages"], TOTAL, "{done:?}");
    assert_eq!(message_count(app.db(), DEFAULT_TENANT, "big").await, 0);
    let row = view(&app, None, &id).await;
    let outcomes: Vec<&Value> = row["attempts"].as_array().unwrap().iter().map(|a| &a["outcome"]).collect();
    assert_eq!(outcomes, [&json!("failed"), &json!("succeeded")], "{row}");
    assert_eq!(row["attempts"][0]["errorCode"], "deadline_exceeded", "{row}");
    assert_eq!(row["attempt"], 1, "a fresh attempt budget: {row}");
    // Terminal and succeeded: not retryable.
    let (status, body) = app.post(&retry_path(&id), &json!({})).await;
    assert_api_error(status, &body, 409);
}

/// A failed delete retried after another delete removed the conversation and it was written
/// again (at sequences below the first delete's checkpoint): the retry deletes what is there
/// now. It resumed from its checkpoint and found nothing after it, removed the conversation
/// row and succeeded with the new messages left behind, and every later append failed.
async fn a_retried_delete_deletes_a_conversation_written_again(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.worker.batch_size = 10).await;
    seed_conversation(app.db(), DEFAULT_TENANT, "big", 10_000).await;
    let id = delete_as(&app, None, "big", json!({"timeoutMs": 400})).await;
    let failed = app.wait_terminal(&id).await;
    assert_eq!(failed.error_code.as_deref(), Some("deadline_exceeded"), "{failed:?}");
    assert!(failed.processed >= 10, "its checkpoint is past the first batch: {failed:?}");
    let other = delete_as(&app, None, "big", json!({})).await;
    assert_eq!(app.wait_terminal(&other).await.state, ContextOperationState::Succeeded);
    let again: Vec<_> = (0..5).map(|i| message("big", &format!("new{i}"), "user", "again")).collect();
    app.append_records(&again).await;

    let (status, body) = app.post(&retry_path(&id), &json!({})).await;
    assert_eq!(status, 202, "{body}");
    let done = app.wait_terminal(&id).await;
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    assert_eq!(message_count(app.db(), DEFAULT_TENANT, "big").await, 0, "the conversation's messages are gone");
    assert_eq!(done.result_json()["deletedMessages"], failed.processed + 5, "{done:?}");
    assert_eq!(done.total, done.processed, "a full progress bar: {done:?}");
    let (status, body) =
        app.post(MESSAGES_APPEND_PATH, &json!({"messages": [message("big", "later", "user", "hi")]})).await;
    assert_eq!(status, 200, "the conversation takes appends again: {body}");
}

async fn a_cancelled_export_resumes_its_artifact(backend: Backend) {
    let app = TestApp::start_with(backend, |c| {
        c.artifacts.artifact_chunk_bytes = 4096;
        c.worker.batch_size = 10;
    })
    .await;
    seed_conversation(app.db(), DEFAULT_TENANT, "c", 20_000).await;
    let id = app.submit(CONTEXT_EXPORT_PATH, &json!({})).await.id;
    let running = app.wait_until(&id, Duration::from_secs(60), "part-way", mid_run).await;
    let (status, body) = app.post(&format!("{OPS}/{id}/cancel"), &json!({})).await;
    assert!(status == 200 || status == 202, "{status} {body}");
    let cancelled = app.wait_terminal(&id).await;
    assert_eq!(cancelled.state, ContextOperationState::Cancelled, "finished before the cancel landed: {cancelled:?}");
    let artifact = running.artifact_ref.clone().expect("the export names its artifact as it starts");

    let (status, body) = app.post(&retry_path(&id), &json!({})).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["processed"], cancelled.processed, "{body}");
    let done = app.wait_terminal(&id).await;
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    assert_eq!(done.result_json()["artifactId"], artifact.as_str(), "resumed the same artifact, not a new one");
    assert_eq!(done.result_json()["messages"], 20_000, "{done:?}");
    // Its content is what an uninterrupted export writes.
    let fresh = app.submit(CONTEXT_EXPORT_PATH, &json!({})).await.id;
    let fresh = app.wait_terminal(&fresh).await;
    let fetch = async |artifact: &str| {
        let (status, body) = app.post(CONTEXT_EXPORT_ARTIFACT_PATH, &json!({"artifactId": artifact})).await;
        assert_eq!(status, 200, "{body}");
        body
    };
    let (resumed, whole) = (fetch(&artifact).await, fetch(fresh.artifact_ref.as_deref().unwrap()).await);
    assert_eq!(resumed["messages"], whole["messages"]);
    assert_eq!(resumed["entries"], whole["entries"]);
}

async fn inference_starts_over(backend: Backend) {
    let fake = FakeProvider::start(vec![Step::status(400, json!({"error": {"message": "bad model"}}))]).await;
    fake.always(Step::ok(completed_text("second time lucky")));
    let url = fake.url.clone();
    let app = TestApp::start_with(backend, move |c| {
        c.provider.responses_base_url = url;
        c.provider.responses_api_key = Some("sk-test-retry".to_string().into());
    })
    .await;
    let body = json!({"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]});
    let id = app.submit(INFERENCE_PATH, &body).await.id;
    assert_eq!(app.wait_terminal(&id).await.state, ContextOperationState::Failed);
    let (status, _) = app.post(&retry_path(&id), &json!({})).await;
    assert_eq!(status, 202);
    let done = app.wait_terminal(&id).await;
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    assert_eq!(done.result_json()["text"], "second time lucky", "{done:?}");
    assert_eq!(fake.received().len(), 2, "one call per run");
}

async fn retry_is_refused_where_it_does_not_apply(backend: Backend) {
    let app = TestApp::start_command(backend, context_ops::config::Role::Api, jwt_mode).await;
    let (a, b) = (tenant_token("a"), tenant_token("b"));
    let queued = delete_as(&app, Some(&a), "q", json!({})).await;
    let (status, body) = app.post_as(Some(&a), &retry_path(&queued), &json!({})).await;
    assert_api_error(status, &body, 409);
    let (status, body) = app.post_as(Some(&b), &retry_path(&queued), &json!({})).await;
    assert_api_error(status, &body, 404);
    let (status, body) = app.post_as(Some(&a), &format!("{OPS}/{queued}/cancel"), &json!({})).await;
    assert!(status < 300, "{body}");
    for bad in [json!({"priority": 11}), json!({"timeoutMs": -5}), json!({"unknown": 1}), json!([1]), json!("x")] {
        let (status, body) = app.post_as(Some(&a), &retry_path(&queued), &bad).await;
        assert_api_error(status, &body, 400);
    }
    assert_eq!(view(&app, Some(&a), &queued).await["state"], "cancelled", "a refused retry changes nothing");
    let (status, body) = app.post_as(Some(&a), &retry_path("not-an-id"), &json!({})).await;
    assert_api_error(status, &body, 400);
}

backend_tests!(
    backend: a_failed_delete_resumes_from_its_checkpoint,
    a_retried_delete_deletes_a_conversation_written_again,
    a_cancelled_export_resumes_its_artifact,
    inference_starts_over,
    retry_is_refused_where_it_does_not_apply,
);
