//! `GET …/operations/{id}/request` on an API-only service (operations stay queued): every
//! kind's request comes back under its kind with its fields; an inline import's records as
//! their count and bytes; a long instruction cut and flagged; secret-looking metadata
//! redacted; another tenant, an unknown id → 404, a malformed id → 400, all `ApiError`.

use context_ops::config::Role;
use serde_json::{Value, json};

use super::OPS;
use crate::harness::jwt::{jwt_mode, tenant_token};
use crate::harness::{Backend, TestApp, assert_api_error, message};

const ADVANCED: &str = "/internal/v1/context/advanced-operations";

/// Submit `request` as `kind`; the operation's shown request.
async fn submitted(app: &TestApp, kind: &str, request: Value) -> (String, Value) {
    let (status, op) = app.post(ADVANCED, &json!({"kind": kind, "request": request})).await;
    assert_eq!(status, 202, "{kind}: {op}");
    let id = op["id"].as_str().unwrap().to_string();
    let (status, shown) = app.get(&format!("{OPS}/{id}/request")).await;
    assert_eq!(status, 200, "{kind}: {shown}");
    assert_eq!(shown["kind"], kind, "{shown}");
    (id, shown["request"].clone())
}

async fn every_kind_shown_bounded_and_walled(backend: Backend) {
    let app = TestApp::start_command(backend, Role::Api, jwt_mode).await.with_token(tenant_token("alpha"));

    let (delete_id, r) =
        submitted(&app, "delete", json!({"scope": {"conversationId": "d1"}, "reason": "asked to forget"})).await;
    assert_eq!(
        r,
        json!({"conversationId": "d1", "reason": {"text": "asked to forget", "bytes": 15, "truncated": false}})
    );

    let (_, r) = submitted(
        &app,
        "retention",
        json!({"scope": {"conversationId": "r1"}, "policy": {"maxAgeDays": 3, "maxMessages": 10}}),
    )
    .await;
    assert_eq!(r, json!({"conversationId": "r1", "policy": {"maxAgeDays": 3, "maxMessages": 10}}));

    let (_, r) = submitted(&app, "rebuild_vector", json!({"force": true})).await;
    assert_eq!(r, json!({"force": true}));

    let (_, r) = submitted(
        &app,
        "export",
        json!({"includeExpired": true, "filter": {"conversationIds": ["e1", "e2"], "agentId": "agent-7", "fromMs": 5}}),
    )
    .await;
    assert_eq!(
        r,
        json!({"includeExpired": true, "conversationIds": {"items": ["e1", "e2"], "count": 2},
               "agentId": "agent-7", "fromMs": 5})
    );

    // An inline import: its records are counted and sized, never shown.
    let records: Vec<_> = (0..3).map(|i| message("i1", &format!("i1-{i}"), "user", &"z".repeat(2000))).collect();
    let (_, r) = submitted(&app, "import", json!({"messages": records, "idempotencyKey": "imp-1"})).await;
    assert_eq!(r["source"], "inline");
    assert_eq!(r["messages"]["count"], 3);
    assert!(r["messages"]["bytes"].as_u64().unwrap() > 6000, "{r}");
    assert_eq!(r["entries"], json!({"count": 0, "bytes": 0}));
    assert!(!r.to_string().contains("zzzz"), "no record content: {r}");

    // An inference: a long instruction is cut and flagged; a secret-looking metadata value
    // is not shown.
    let (_, r) = submitted(
        &app,
        "inference",
        json!({"model": "gpt-x", "messages": [{"role": "user", "content": "hello"}], "instructions": "w".repeat(10_000),
               "conversationId": "c9", "maxOutputTokens": 64, "reasoningEffort": "low",
               "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
               "metadata": {"team": "ops", "apiToken": "tok-123"}}),
    )
    .await;
    assert_eq!((r["model"].clone(), r["conversationId"].clone()), (json!("gpt-x"), json!("c9")));
    assert_eq!(r["appendReply"], false);
    assert_eq!(r["instructions"]["truncated"], true);
    assert_eq!(r["instructions"]["bytes"], 10_000);
    assert_eq!(r["instructions"]["text"].as_str().unwrap().len(), 4096);
    assert_eq!(r["messageCount"], 1);
    let text = r["input"]["text"].as_str().unwrap();
    assert_eq!((r["input"]["bytes"].as_u64(), r["input"]["truncated"].clone()), (Some(35), json!(false)));
    assert_eq!(text.len(), 35, "whole: {text}");
    let input: Value = serde_json::from_str(text).unwrap();
    assert_eq!(input, json!([{"role": "user", "content": "hello"}]), "the whole input, as JSON");
    assert_eq!(r["tools"], json!(["lookup"]));
    assert_eq!((r["maxOutputTokens"].clone(), r["reasoningEffort"].clone()), (json!(64), json!("low")));
    assert_eq!(r["metadata"], json!({"team": "ops", "apiToken": "[redacted]"}));
    assert!(!r.to_string().contains("tok-123"));

    // Tenant walls, unknown and malformed ids.
    let (status, body) = app.get_as(Some(&tenant_token("beta")), &format!("{OPS}/{delete_id}/request")).await;
    assert_api_error(status, &body, 404);
    let (status, body) = app.get(&format!("{OPS}/01ARZ3NDEKTSV4RRFFQ69G5FAV/request")).await;
    assert_api_error(status, &body, 404);
    let (status, body) = app.get(&format!("{OPS}/not-an-id/request")).await;
    assert_api_error(status, &body, 400);
    app.stop().await;
}

backend_tests!(backend: every_kind_shown_bounded_and_walled);
