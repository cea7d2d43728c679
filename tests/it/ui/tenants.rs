//! Who the browser is: tenant walls — the first tenant sees its operations; a second
//! tenant, signed in the same way, sees none of them (an empty list, "not found" at the
//! first tenant's operation URL, no conversations of the first's) and signing out leaves no
//! credential in the browser — and open mode, which needs no sign-in and says so in a
//! visible banner.

use context_jobs::contract::{CONTEXT_EXPORT_PATH, ContextOperationState};
use serde_json::json;

use super::UiServer;
use crate::harness::message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_tenant_sees_none_of_the_firsts_operations() {
    let ui = UiServer::start(&[]).await;
    let api = ui.api();
    let mut record = message("private-talk", "m1", "user", "the first tenant's secret plan");
    record.scope.agent_id = Some("helpdesk".into());
    api.append_records(&[record]).await;
    let id = api.submit(CONTEXT_EXPORT_PATH, &json!({})).await.id;
    let op = api.wait_terminal(&id).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    ui.scenario("tenants", &[("OPERATION_ID", &id)]).await;
    // The wall is the API's: the other tenant's own calls answer the same.
    let other = ui.serve.api.as_caller(&crate::harness::jwt::tenant_token("globex"));
    let (status, body) = other.get(&format!("/internal/v1/context/operations/{id}")).await;
    crate::harness::assert_api_error(status, &body, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_mode_needs_no_sign_in_and_shows_its_banner() {
    let ui = UiServer::open().await;
    ui.scenario("open_mode", &[]).await;
}
