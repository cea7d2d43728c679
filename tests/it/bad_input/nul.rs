//! NUL (`\u0000`) in any string field is a 400 on both engines (PostgreSQL text cannot
//! hold it, so SQLite must refuse it too), wherever it is: a body field at any depth, a
//! path or query parameter, a credential's claim. Nothing is stored and no operation is
//! queued.

use context_jobs::contract::{
    CONTEXT_ADVANCED_OPERATIONS_PATH as ADVANCED, CONTEXT_CORRECT_PATH, CONTEXT_EXPIRE_PATH, CONTEXT_IMPORT_PATH,
    CONTEXT_INSIGHT_GET_PATH, CONTEXT_INSIGHTS_PATH, CONTEXT_MERGE_PATH, CONTEXT_OPERATIONS_PATH as OPS,
    CONTEXT_RECALL_PATH, CONVERSATION_DELETE_PATH, CONVERSATIONS_LIST_PATH, INFERENCE_PATH, MESSAGES_APPEND_PATH,
    MESSAGES_PAGE_PATH, MESSAGES_RECENT_PATH, MESSAGES_SEARCH_PATH, RETENTION_PATH,
};
use serde_json::{Value, json};

use crate::harness::jwt::{claims, jwt_app, mint};
use crate::harness::{Backend, TestApp, assert_api_error};

const NUL: &str = "x\u{0}y";

fn record(id: &str, patch: Value) -> Value {
    let mut m = json!({"id": id, "scope": {"conversationId": "c"}, "role": "user", "content": "hi"});
    merge(&mut m, patch);
    m
}

fn entry(id: &str, patch: Value) -> Value {
    let mut e = json!({
        "id": id, "kind": "fact", "content": "tea", "version": 0, "status": "active",
        "provenance": {"conversationId": "c", "messageIds": ["m1"], "observedAtMs": 7},
        "createdAtMs": 0, "updatedAtMs": 0
    });
    merge(&mut e, patch);
    e
}

fn merge(into: &mut Value, patch: Value) {
    for (k, v) in patch.as_object().unwrap() {
        match (into.get_mut(k), v) {
            (Some(existing @ Value::Object(_)), Value::Object(_)) => merge(existing, v.clone()),
            (Some(existing), _) => *existing = v.clone(),
            (None, _) => {
                into.as_object_mut().unwrap().insert(k.clone(), v.clone());
            }
        }
    }
}

fn scope(conversation: &str) -> Value {
    json!({"conversationId": conversation})
}

/// Every body probe: `(what, path, body)`, each with one NUL somewhere.
fn body_probes() -> Vec<(&'static str, &'static str, Value)> {
    let append = |m: Value| json!({"messages": [record("ok", json!({})), m]});
    vec![
        ("message id", MESSAGES_APPEND_PATH, append(record(NUL, json!({})))),
        ("scope.conversationId", MESSAGES_APPEND_PATH, append(record("m", json!({"scope": scope(NUL)})))),
        ("scope.userId", MESSAGES_APPEND_PATH, append(record("m", json!({"scope": {"userId": NUL}})))),
        ("scope.agentId", MESSAGES_APPEND_PATH, append(record("m", json!({"scope": {"agentId": NUL}})))),
        ("scope.agentSpaceId", MESSAGES_APPEND_PATH, append(record("m", json!({"scope": {"agentSpaceId": NUL}})))),
        ("scope.runtimeType", MESSAGES_APPEND_PATH, append(record("m", json!({"scope": {"runtimeType": NUL}})))),
        (
            "scope.relations",
            MESSAGES_APPEND_PATH,
            append(record("m", json!({"scope": {"relations": {"agentIds": [NUL]}}}))),
        ),
        ("name", MESSAGES_APPEND_PATH, append(record("m", json!({"name": NUL})))),
        ("toolCallId", MESSAGES_APPEND_PATH, append(record("m", json!({"toolCallId": NUL})))),
        ("content", MESSAGES_APPEND_PATH, append(record("m", json!({"content": [{"type": "text", "text": NUL}]})))),
        ("metadata value", MESSAGES_APPEND_PATH, append(record("m", json!({"metadata": {"k": NUL}})))),
        ("metadata key", MESSAGES_APPEND_PATH, append(record("m", json!({"metadata": {NUL: 1}})))),
        ("recent conversationId", MESSAGES_RECENT_PATH, json!({"scope": scope(NUL)})),
        ("page conversationId", MESSAGES_PAGE_PATH, json!({"scope": scope(NUL)})),
        ("search conversationId", MESSAGES_SEARCH_PATH, json!({"scope": scope(NUL), "query": "a"})),
        ("search query", MESSAGES_SEARCH_PATH, json!({"scope": scope("c"), "query": NUL})),
        ("conversations:list agentId", CONVERSATIONS_LIST_PATH, json!({"agentId": NUL})),
        ("entry id (put)", CONTEXT_INSIGHTS_PATH, json!({"entry": entry(NUL, json!({}))})),
        ("entry content (put)", CONTEXT_INSIGHTS_PATH, json!({"entry": entry("e", json!({"content": NUL}))})),
        (
            "entry attributes (put)",
            CONTEXT_INSIGHTS_PATH,
            json!({"entry": entry("e", json!({"attributes": {"a": NUL}}))}),
        ),
        (
            "entry provenance (put)",
            CONTEXT_INSIGHTS_PATH,
            json!({"entry": entry("e", json!({"provenance": {"messageIds": [NUL]}}))}),
        ),
        ("entry id (get)", CONTEXT_INSIGHT_GET_PATH, json!({"entryId": NUL})),
        (
            "entry id (correct)",
            CONTEXT_CORRECT_PATH,
            json!({"entryId": NUL, "expectedVersion": 1, "content": "x", "reason": "r"}),
        ),
        (
            "reason (correct)",
            CONTEXT_CORRECT_PATH,
            json!({"entryId": "e", "expectedVersion": 1, "content": "x", "reason": NUL}),
        ),
        ("entry id (expire)", CONTEXT_EXPIRE_PATH, json!({"entryId": NUL, "expectedVersion": 1, "reason": "r"})),
        (
            "source entry id (merge)",
            CONTEXT_MERGE_PATH,
            json!({"sourceEntryIds": [NUL], "mergedEntry": entry("e2", json!({})), "expectedVersions": {}}),
        ),
        ("recall query", CONTEXT_RECALL_PATH, json!({"query": NUL})),
        ("delete conversationId", CONVERSATION_DELETE_PATH, json!({"scope": scope(NUL)})),
        ("delete reason", CONVERSATION_DELETE_PATH, json!({"scope": scope("c"), "reason": NUL})),
        ("retention conversationId", RETENTION_PATH, json!({"scope": scope(NUL)})),
        (
            "import idempotencyKey",
            CONTEXT_IMPORT_PATH,
            json!({"messages": [record("m", json!({}))], "idempotencyKey": NUL}),
        ),
        (
            "inline import message id",
            CONTEXT_IMPORT_PATH,
            json!({"messages": [record(NUL, json!({}))], "idempotencyKey": "k1"}),
        ),
        (
            "inline import entry content",
            CONTEXT_IMPORT_PATH,
            json!({"entries": [entry("e", json!({"content": {"deep": [NUL]}}))], "idempotencyKey": "k2"}),
        ),
        (
            "advanced-operations idempotencyKey",
            ADVANCED,
            json!({"kind": "retention", "request": {"scope": scope("c")}, "idempotencyKey": NUL}),
        ),
        ("advanced-operations request", ADVANCED, json!({"kind": "delete", "request": {"scope": scope(NUL)}})),
        ("inference conversationId", INFERENCE_PATH, json!({"model": "m", "conversationId": NUL})),
        ("inference message", INFERENCE_PATH, json!({"model": "m", "messages": [{"role": "user", "content": NUL}]})),
        ("inference instructions", INFERENCE_PATH, json!({"model": "m", "messages": [], "instructions": NUL})),
        ("operations POST form", OPS, json!({"operationId": NUL})),
    ]
}

async fn nul_is_refused_everywhere(app: TestApp) {
    for (what, path, body) in body_probes() {
        let (status, reply) = app.post(path, &body).await;
        assert_api_error(status, &reply, 400);
        assert!(reply["message"].as_str().unwrap().contains("NUL"), "{what}: {reply}");
    }
    // Path and query parameters.
    for path in [
        "/internal/v1/context/entries/%00/history".to_string(),
        "/internal/v1/context/entries/a%00b/history".to_string(),
        format!("{OPS}?tenant=t%00/p"),
        format!("{OPS}?kind=%00"),
        "/internal/v1/context/export-artifacts?cursor=%00".to_string(),
    ] {
        let (status, reply) = app.get(&path).await;
        assert_api_error(status, &reply, 400);
    }
    // Nothing was stored, nothing queued.
    assert!(app.recent("c", 10).await.is_empty(), "no message stored");
    let (status, listed) = app.get(OPS).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["items"], json!([]), "no operation queued");
    // The same fields without NUL are fine (the probes fail for the NUL alone).
    let (status, reply) =
        app.post(MESSAGES_APPEND_PATH, &json!({"messages": [record("m", json!({"name": "x\\u0000y"}))]})).await;
    assert_eq!(status, 200, "an escaped backslash is not a NUL: {reply}");
}

backend_tests!(nul_is_refused_everywhere);

/// A gateway token whose tenant, project or subject holds NUL is refused (401), as any
/// malformed credential is.
async fn nul_in_a_credential_is_unauthorized(backend: Backend) {
    let app = jwt_app(backend).await;
    let recent = json!({"scope": scope("c")});
    for (key, value) in [("tenant_id", "t\u{0}"), ("project_id", "p\u{0}"), ("sub", "s\u{0}")] {
        let mut c = claims("t1", "p1");
        c[key] = json!(value);
        let (status, reply) = app.post_as(Some(&mint(&c)), MESSAGES_RECENT_PATH, &recent).await;
        assert_api_error(status, &reply, 401);
    }
    app.stop().await;
}

backend_tests!(backend: nul_in_a_credential_is_unauthorized);
