//! Operations run to their end: a delete to completion (with the submission's headers and
//! the contract's POST form), retention keeping the newest, and a cancel landing mid-run at
//! a batch boundary (reporting what was removed so far).

use context_jobs::contract::{ContextOperationKind, ContextOperationState, DeletionOperation};
use serde_json::json;

use super::{DELETE, OPS, RETENTION, count, seed};
use crate::harness::{Backend, OperationExt as _, TestApp, assert_api_error, message, read};

async fn delete_runs_to_completion(app: TestApp) {
    seed(&app, "doomed", 1200).await;
    seed(&app, "kept", 7).await;
    let response = app
        .client
        .post(app.url(DELETE))
        .json(&json!({"scope": {"conversationId": "doomed"}, "reason": "user request"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let location = response.headers()["location"].to_str().unwrap().to_string();
    assert!(response.headers().contains_key("retry-after"));
    let (_, body) = read(response).await;
    let id = body["id"].as_str().unwrap().to_string();
    assert_eq!(location, format!("{OPS}/{id}"));
    assert_eq!(body["deletedMessages"], 0);
    assert!(body["createdAtMs"].as_i64().unwrap() > 0);
    let op = app.wait_terminal(&id).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(op.kind, ContextOperationKind::Delete);
    assert_eq!(op.result_json()["deletedMessages"], 1200);
    assert_eq!(op.processed, 1200);
    assert_eq!(op.total, 1200);
    assert!(op.next_poll_after_ms.is_none(), "terminal operations carry no poll hint");
    assert_eq!(count(&app, "doomed").await, 0);
    assert_eq!(count(&app, "kept").await, 7, "other conversations untouched");
    // The contract's POST form answers the same operation, to the byte.
    let (status, same) = app.post(OPS, &json!({"operationId": id})).await;
    assert_eq!(status, 200);
    let (status, rest) = app.get(&format!("{OPS}/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(same, rest);
    // Appends work again after the delete, starting a fresh conversation.
    app.append_records(&[message("doomed", "new", "user", "again")]).await;
    assert_eq!(count(&app, "doomed").await, 1);
}

async fn retention_keeps_the_newest(app: TestApp) {
    seed(&app, "r", 30).await;
    let body = json!({"scope": {"conversationId": "r"}, "policy": {"maxMessages": 10}});
    // A contract path: the contract's `DeletionOperation`, like `conversations/delete`.
    let submitted: DeletionOperation = app.call(RETENTION, &body, 202).await;
    assert_eq!((submitted.state.as_str(), submitted.deleted_messages), ("queued", 0));
    let op = app.wait_terminal(&submitted.id).await;
    assert_eq!(op.kind, ContextOperationKind::Retention, "the REST form keeps the full vocabulary");
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(op.result_json()["deletedMessages"], 20);
    let seqs: Vec<i64> = app.recent("r", 500).await.iter().map(|m| m.sequence).collect();
    assert_eq!(seqs, (21..=30).collect::<Vec<_>>());
    let (status, body) =
        app.post(RETENTION, &json!({"scope": {"conversationId": "r"}, "policy": {"maxAgeDays": 0}})).await;
    assert_api_error(status, &body, 400);
}

async fn cancel_running_stops_at_a_batch_boundary(app: TestApp) {
    seed(&app, "slow", 3000).await;
    let id = app.submit_delete("slow").await.id;
    // Wait until it is running, then cancel.
    let op = app
        .wait_until(&id, std::time::Duration::from_secs(60), "started", |op| op.state != ContextOperationState::Queued)
        .await;
    assert_eq!(op.state, ContextOperationState::Running, "{op:?}");
    let (status, cancelled) = app.post(&format!("{OPS}/{id}/cancel"), &json!({})).await;
    assert_eq!(status, 200, "{cancelled}");
    let op = app.wait_terminal(&id).await;
    assert_eq!(op.state, ContextOperationState::Cancelled, "{op:?}");
    let processed = op.processed;
    assert!(processed < 3000, "stopped early: {op:?}");
    assert_eq!(op.result_json()["deletedMessages"], processed, "a cancelled delete reports what it removed: {op:?}");
    let left = {
        let (_, body) = app.post("/internal/v1/context/conversations:list", &json!({"agentId": "none"})).await;
        assert!(body["items"].as_array().unwrap().is_empty());
        // Page through what is left.
        let mut n = 0;
        let mut cursor: Option<String> = None;
        loop {
            let mut req = json!({"scope": {"conversationId": "slow"}, "limit": 500});
            if let Some(c) = &cursor {
                req["cursor"] = json!(c);
            }
            let (_, page) = app.post("/internal/v1/context/messages", &req).await;
            n += page["items"].as_array().unwrap().len();
            match page["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.into()),
                None => break n,
            }
        }
    };
    assert_eq!(left as u64 + processed, 3000, "processed counts exactly what was deleted");
    // Cancel is idempotent and terminal states never change.
    let (status, again) = app.post(&format!("{OPS}/{id}/cancel"), &json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(again["state"], "cancelled");
    assert_eq!(again["version"], op.version);
    // The barrier is gone: appends work again.
    app.append_records(&[message("slow", "after", "user", "x")]).await;
}

backend_tests!(delete_runs_to_completion, retention_keeps_the_newest);

/// One message per batch: 3,000 transactions, so the cancel lands mid-run however fast the
/// machine (300 batches of 10 once finished on SQLite before the cancel arrived).
async fn one_message_batches(backend: Backend) -> TestApp {
    TestApp::start_with(backend, |c| c.worker.batch_size = 1).await
}

/// A retention cancelled mid-run reports, as its result, what it deleted so far (and its
/// plan), like a delete.
async fn cancelled_retention_reports_counts_so_far(app: TestApp) {
    seed(&app, "old", 3000).await;
    let body = json!({"scope": {"conversationId": "old"}, "policy": {"maxMessages": 1}});
    let op: DeletionOperation = app.call(RETENTION, &body, 202).await;
    let op = app.wait_until(&op.id, std::time::Duration::from_secs(60), "deleting", |op| op.processed > 0).await;
    let (status, cancelled) = app.post(&format!("{OPS}/{}/cancel", op.id), &json!({})).await;
    assert_eq!(status, 200, "{cancelled}");
    let op = app.wait_terminal(&op.id).await;
    assert_eq!(op.state, ContextOperationState::Cancelled, "{op:?}");
    assert!(op.processed > 0 && op.processed < 2999, "stopped mid-run: {op:?}");
    assert_eq!(op.result_json()["deletedMessages"], op.processed, "{op:?}");
    assert_eq!(op.result_json()["plan"]["upToSequence"], 2999, "the plan is reported too: {op:?}");
}

backend_tests!(start = one_message_batches; cancel_running_stops_at_a_batch_boundary, cancelled_retention_reports_counts_so_far);
