//! Input that one engine stored or answered and the other failed on with a 500, now
//! refused (or served) alike: a relation id longer than a resource id may be (its first
//! agent id is an indexed column PostgreSQL caps), a message cursor hiding a NUL inside
//! its base64, a role filter repeating one role tens of thousands of times (past SQLite's
//! parameter limit), an imported entry version no later write could add one to, and
//! imported entry times that are negative.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use context_jobs::contract::{CONTEXT_IMPORT_PATH, MESSAGES_APPEND_PATH, MESSAGES_PAGE_PATH, MESSAGES_RECENT_PATH};
use context_jobs::entries::MAX_IMPORTED_VERSION;
use serde_json::{Value, json};

use crate::harness::{TestApp, assert_api_error};

fn message(id: &str, role: &str, scope: Value) -> Value {
    json!({"id": id, "scope": scope, "role": role, "content": "hi"})
}

/// 3,000 characters that do not compress (PostgreSQL compresses a repetitive index value
/// below its limit first).
fn incompressible() -> String {
    let bytes: Vec<u8> = (0..2_250).map(|_| fastrand::u8(..)).collect();
    URL_SAFE_NO_PAD.encode(bytes)
}

async fn edges_are_refused_or_served_alike(app: TestApp) {
    // A relation id is a resource id: at most 191 characters, not blank.
    for ids in [json!([incompressible()]), json!(["a".repeat(192)]), json!(["  "])] {
        let scope = json!({"conversationId": "c", "relations": {"agentIds": ids}});
        let (status, body) = app.post(MESSAGES_APPEND_PATH, &json!({"messages": [message("m", "user", scope)]})).await;
        assert_api_error(status, &body, 400);
        assert!(body["message"].as_str().unwrap().contains("relations.agentIds"), "{body}");
        let import = json!({"messages": [message("m", "user", json!({"conversationId": "c", "relations": {"agentIds": ids}}))], "idempotencyKey": "rel"});
        let (status, body) = app.post(CONTEXT_IMPORT_PATH, &import).await;
        assert_api_error(status, &body, 400);
    }
    assert!(app.recent("c", 10).await.is_empty(), "nothing stored");

    // Stored: two users' messages and an assistant's, with a 191-character relation id.
    let scope = json!({"conversationId": "c", "relations": {"agentIds": ["a".repeat(191)]}});
    let batch = json!({"messages": [
        message("m1", "user", scope.clone()), message("m2", "assistant", scope.clone()), message("m3", "user", scope),
    ]});
    let (status, body) = app.post(MESSAGES_APPEND_PATH, &batch).await;
    assert_eq!(status, 200, "{body}");

    // A cursor is the service's own: one naming a NUL id (inside the base64) is a 400.
    for payload in
        [r#"{"sequence":0,"id":"\u0000"}"#.to_string(), format!(r#"{{"sequence":0,"id":"{}"}}"#, "m".repeat(192))]
    {
        let cursor = URL_SAFE_NO_PAD.encode(payload);
        let (status, body) =
            app.post(MESSAGES_PAGE_PATH, &json!({"scope": {"conversationId": "c"}, "cursor": cursor})).await;
        assert_api_error(status, &body, 400);
    }

    // One role 40,000 times filters as the role once, on both engines.
    let roles = vec!["user"; 40_000];
    for path in [MESSAGES_RECENT_PATH, MESSAGES_PAGE_PATH] {
        let (status, body) = app.post(path, &json!({"scope": {"conversationId": "c"}, "roles": roles})).await;
        assert_eq!(status, 200, "{path}: {body}");
        let items = body["items"].as_array();
        let ids: Vec<&str> =
            items.unwrap_or_else(|| panic!("{body}")).iter().map(|m| m["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["m1", "m3"], "{path}");
    }

    // An imported entry keeps its version, up to 2^53 - 1.
    let entry = |id: &str, version: u64| {
        json!({
            "id": id, "kind": "fact", "content": "tea", "version": version, "status": "active",
            "provenance": {"conversationId": "c"}, "createdAtMs": 0, "updatedAtMs": 0
        })
    };
    for (i, version) in [MAX_IMPORTED_VERSION + 1, i64::MAX as u64, u64::MAX].into_iter().enumerate() {
        let import = json!({"entries": [entry("e", version)], "idempotencyKey": format!("v{i}")});
        let (status, body) = app.post(CONTEXT_IMPORT_PATH, &import).await;
        assert_api_error(status, &body, 400);
        assert!(body["message"].as_str().unwrap().contains("version"), "{body}");
    }
    let import = json!({"entries": [entry("e", MAX_IMPORTED_VERSION)], "idempotencyKey": "vmax"});
    let (status, body) = app.post(CONTEXT_IMPORT_PATH, &import).await;
    assert_eq!(status, 202, "{body}");

    // Its times are not negative (recall's recency of an `updatedAtMs` near i64::MIN
    // overflowed: a 500 in a debug build, the newest-looking entry in a release one).
    for (field, value) in [("createdAtMs", i64::MIN), ("updatedAtMs", i64::MIN), ("expiresAtMs", -1)] {
        let mut bad = entry("t", 1);
        bad[field] = json!(value);
        let import = json!({"entries": [bad], "idempotencyKey": format!("t-{field}")});
        let (status, body) = app.post(CONTEXT_IMPORT_PATH, &import).await;
        assert_api_error(status, &body, 400);
        assert!(body["message"].as_str().unwrap().contains(field), "{body}");
    }
}

backend_tests!(edges_are_refused_or_served_alike);
