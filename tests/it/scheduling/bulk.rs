//! Bulk actions by filter (`POST …/operations/bulk`): cancel, retry and forget every
//! operation a filter matches (kind, state, time range; another tenant or every tenant for
//! an admin), each call reporting what it matched and changed, a dry run changing nothing,
//! a repeat changing nothing more — and no filter at all refused with 400. No worker runs
//! here, so what is submitted stays queued until an action moves it.

use serde_json::{Value, json};

use super::delete_as;
use crate::harness::jwt::{claims, jwt_mode, mint, tenant_token};
use crate::harness::{Backend, TestApp, assert_api_error};
use context_jobs::contract::{CONTEXT_OPERATIONS_PATH as OPS, RETENTION_PATH};
use context_ops::config::Role;
use context_ops::store::{now_ms, query};

const BULK: &str = "/internal/v1/context/operations/bulk";

async fn bulk(app: &TestApp, token: &str, body: Value) -> (u64, u64) {
    let (status, out) = app.post_as(Some(token), BULK, &body).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["action"], body["action"]);
    (out["matched"].as_u64().unwrap(), out["changed"].as_u64().unwrap())
}

/// The states of `token`'s operations of `kind`, oldest first.
async fn states(app: &TestApp, token: &str, query: &str) -> Vec<String> {
    let (status, list) = app.get_as(Some(token), &format!("{OPS}?limit=100&{query}")).await;
    assert_eq!(status, 200, "{list}");
    let mut states: Vec<String> =
        list["items"].as_array().unwrap().iter().map(|op| op["state"].as_str().unwrap().to_string()).collect();
    states.reverse();
    states
}

async fn cancel_retry_and_forget_by_filter(backend: Backend) {
    let app = TestApp::start_command(backend, Role::Api, jwt_mode).await;
    let (a, b) = (tenant_token("a"), tenant_token("b"));
    for i in 0..3 {
        delete_as(&app, Some(&a), &format!("early{i}"), json!({})).await;
    }
    let mark = now_ms() + 1;
    while now_ms() <= mark {
        tokio::task::yield_now().await;
    }
    for i in 0..2 {
        delete_as(&app, Some(&a), &format!("late{i}"), json!({})).await;
    }
    let (status, _) = app.post_as(Some(&a), RETENTION_PATH, &json!({"scope": {"conversationId": "r"}})).await;
    assert_eq!(status, 202);
    let theirs = delete_as(&app, Some(&b), "b0", json!({})).await;

    let cancel = json!({"action": "cancel", "filter": {"kind": "delete", "createdBeforeMs": mark}});
    let mut dry = cancel.clone();
    dry["dryRun"] = json!(true);
    assert_eq!(bulk(&app, &a, dry).await, (3, 3), "a dry run counts");
    assert_eq!(states(&app, &a, "kind=delete").await, ["queued"; 5], "and changes nothing");
    assert_eq!(bulk(&app, &a, cancel.clone()).await, (3, 3));
    assert_eq!(bulk(&app, &a, cancel).await, (3, 0), "a repeat changes nothing more");
    assert_eq!(states(&app, &a, "kind=delete").await, ["cancelled", "cancelled", "cancelled", "queued", "queued"]);
    assert_eq!(states(&app, &a, "kind=retention").await, ["queued"], "other kinds untouched");
    assert_eq!(states(&app, &b, "").await, ["queued"], "other tenants untouched");

    assert_eq!(bulk(&app, &a, json!({"action": "retry", "filter": {"state": "cancelled"}})).await, (3, 3));
    assert_eq!(states(&app, &a, "kind=delete").await, ["queued"; 5]);
    assert_eq!(bulk(&app, &a, json!({"action": "retry", "filter": {"state": "cancelled"}})).await, (0, 0));

    // Forget takes terminal operations only.
    assert_eq!(bulk(&app, &a, json!({"action": "forget", "filter": {"kind": "delete"}})).await, (5, 0));
    assert_eq!(bulk(&app, &a, json!({"action": "cancel", "filter": {"createdAfterMs": mark}})).await, (3, 3));
    assert_eq!(bulk(&app, &a, json!({"action": "forget", "filter": {"state": "cancelled"}})).await, (3, 3));
    assert_eq!(states(&app, &a, "").await, ["queued"; 3], "the three early deletes are left");
    let (status, gone) = app.get_as(Some(&b), &format!("{OPS}/{theirs}")).await;
    assert_eq!((status, &gone["state"]), (200, &json!("queued")), "{gone}");

    // A running operation is flagged once: a repeat (or a dry run after it) changes nothing.
    let running = delete_as(&app, Some(&a), "running", json!({})).await;
    query("UPDATE operations SET state = 'running', lease_token = 't' WHERE id = $1")
        .bind(running.as_str())
        .execute(app.db())
        .await
        .unwrap();
    let cancel = json!({"action": "cancel", "filter": {"state": "running"}});
    assert_eq!(bulk(&app, &a, cancel.clone()).await, (1, 1));
    let mut dry = cancel.clone();
    dry["dryRun"] = json!(true);
    assert_eq!(bulk(&app, &a, dry).await, (1, 0), "a dry run counts what a call would change");
    assert_eq!(bulk(&app, &a, cancel).await, (1, 0), "a repeat changes nothing more");
    let (_, flagged) = app.get_as(Some(&a), &format!("{OPS}/{running}")).await;
    assert_eq!((&flagged["state"], &flagged["cancelRequested"]), (&json!("running"), &json!(true)), "{flagged}");
}

async fn refused_without_a_filter_and_across_tenants(backend: Backend) {
    let app = TestApp::start_command(backend, Role::Api, jwt_mode).await;
    let (a, b) = (tenant_token("a"), tenant_token("b"));
    let mut admin_claims = claims("ops", "p");
    admin_claims["admin"] = json!(true);
    let admin = mint(&admin_claims);
    delete_as(&app, Some(&a), "x", json!({})).await;
    delete_as(&app, Some(&b), "y", json!({})).await;
    for body in [
        json!({"action": "cancel", "filter": {}}),
        json!({"action": "cancel"}),
        json!({"action": "explode", "filter": {"kind": "delete"}}),
        json!({"action": "cancel", "filter": {"kind": "nope"}}),
        json!({"action": "cancel", "filter": {"state": "sleeping"}}),
        json!({"action": "cancel", "filter": {"color": "red"}}),
        json!({"action": "cancel", "filter": {"tenant": "no-slash"}}),
    ] {
        let (status, error) = app.post_as(Some(&admin), BULK, &body).await;
        assert_api_error(status, &error, 400);
    }
    let (status, error) = app.post_as(Some(&a), BULK, &json!({"action": "cancel", "filter": {"tenant": "b/p"}})).await;
    assert_api_error(status, &error, 403);
    let (status, error) = app.post_as(Some(&a), BULK, &json!({"action": "cancel", "filter": {"tenant": "*"}})).await;
    assert_api_error(status, &error, 403);
    // The caller's own tenant named explicitly is no admin power.
    assert_eq!(bulk(&app, &a, json!({"action": "cancel", "filter": {"tenant": "a/p"}, "dryRun": true})).await, (1, 1));
    assert_eq!(bulk(&app, &admin, json!({"action": "cancel", "filter": {"tenant": "b/p"}})).await, (1, 1));
    assert_eq!(states(&app, &a, "").await, ["queued"]);
    assert_eq!(bulk(&app, &admin, json!({"action": "cancel", "filter": {"tenant": "*"}})).await, (2, 1));
    assert_eq!(states(&app, &a, "").await, ["cancelled"]);
}

backend_tests!(backend: cancel_retry_and_forget_by_filter, refused_without_a_filter_and_across_tenants);
