//! Pruning removes old terminal operations only: a finished one after its cutoff, a
//! cancelled one, never a queued one.

use context_jobs::contract::{CONTEXT_OPERATIONS_PATH as OPS, ContextOperationState};
use context_ops::config::Role;
use context_ops::store::now_ms;
use context_ops::store::operations::dispatch;
use serde_json::json;

use super::seed;
use crate::harness::{Backend, TestApp, assert_api_error};

async fn pruning_removes_old_terminal_operations_only(backend: Backend) {
    let app = TestApp::start(backend).await;
    seed(&app, "p", 3).await;
    let id = app.submit_delete("p").await.id;
    let done = app.wait_terminal(&id).await;
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    let db = app.db();
    // `updatedAtMs` of a terminal operation is its finish time; the cutoff is exclusive.
    let finished = done.updated_at_ms;
    assert_eq!(dispatch::prune(db, finished).await.unwrap(), 0);
    app.operation(&id).await;
    assert_eq!(dispatch::prune(db, now_ms() + 1).await.unwrap(), 1);
    let (status, body) = app.get(&format!("{OPS}/{id}")).await;
    assert_api_error(status, &body, 404);

    // Nothing runs in an API-only app: a queued operation stays queued, a cancelled one is
    // terminal at once.
    let api = TestApp::start_command(backend, Role::Api, |_| {}).await;
    seed(&api, "q1", 1).await;
    seed(&api, "q2", 1).await;
    let queued = api.submit_delete("q1").await.id;
    let cancelled = api.submit_delete("q2").await.id;
    let (status, op) = api.post(&format!("{OPS}/{cancelled}/cancel"), &json!({})).await;
    assert_eq!((status, &op["state"]), (200, &json!("cancelled")), "{op}");
    let db = api.db();
    assert_eq!(dispatch::prune(db, now_ms() + 1).await.unwrap(), 1);
    assert_eq!(api.operation(&queued).await.state, ContextOperationState::Queued);
    let (status, body) = api.get(&format!("{OPS}/{cancelled}")).await;
    assert_api_error(status, &body, 404);
}

backend_tests!(backend: pruning_removes_old_terminal_operations_only);
