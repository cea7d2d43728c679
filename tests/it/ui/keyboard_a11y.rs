//! Accessibility: axe-core finds no serious or critical violations on any page (sign-in,
//! overview, operations, one operation, controls, conversations, one conversation, entries
//! with recall results and an entry's history); and the sign-in form, the navigation and
//! the forms work from the keyboard alone (Tab, Enter), with a visible focus ring. The axe
//! scenario's screenshots are the README's pictures of each page.

use context_jobs::contract::{CONTEXT_EXPORT_PATH, CONVERSATION_DELETE_PATH, ContextOperationState, RETENTION_PATH};
use serde_json::json;

use super::UiServer;
use super::browse::seed_browsable;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axe_finds_no_serious_violations_on_any_page() {
    let ui = UiServer::start(&[]).await;
    ui.fx.seed("exported", 400).await;
    seed_browsable(&ui).await;
    let api = ui.api();
    // Finished work of three kinds and a paused one, so every page (and the README's
    // pictures, taken here) has something to show.
    let retention = json!({"scope": {"conversationId": "support-42"}, "policy": {"maxMessages": 100}});
    for (path, body) in
        [(CONVERSATION_DELETE_PATH, json!({"scope": {"conversationId": "support-43"}})), (RETENTION_PATH, retention)]
    {
        // The contract's deletion form: `id` and `state` (no `kind`).
        let (status, submitted) = api.post(path, &body).await;
        assert_eq!(status, 202, "{submitted}");
        let op = api.wait_terminal(submitted["id"].as_str().unwrap()).await;
        assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    }
    let (status, paused) = ui.admin().post("/internal/v1/context/queues/inference/pause", &json!({})).await;
    assert_eq!(status, 200, "{paused}");
    let id = api.submit(CONTEXT_EXPORT_PATH, &json!({})).await.id;
    let op = api.wait_terminal(&id).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    ui.scenario("accessibility", &[("OPERATION_ID", &id)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_and_nav_work_by_keyboard() {
    let ui = UiServer::start(&[]).await;
    seed_browsable(&ui).await;
    ui.scenario("keyboard", &[]).await;
}
