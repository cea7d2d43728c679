//! What the service accepts, it can read back: an inference request nested to serde_json's
//! depth limit (its stored form, one level deeper, never decoded: 202, then a 500 to show it
//! and a failed run), and an entry with a negative `expiresAtMs` (stored, then its export
//! would not decode). Both are 400s now, with nothing stored. And bodies over the limit on
//! the routes whose body is optional (retry, pause, resume) answer 413 like every other route.

use context_jobs::contract::{
    CONTEXT_INSIGHT_GET_PATH, CONTEXT_INSIGHTS_PATH, CONTEXT_MERGE_PATH, CONTEXT_OPERATIONS_PATH as OPS, INFERENCE_PATH,
};
use serde_json::{Value, json};

use crate::harness::{TestApp, assert_api_error, read};

/// A body whose one message's content nests `depth` arrays; the whole body is `depth + 3`
/// containers deep (the body, `messages`, the message).
fn deep_turn(depth: usize) -> String {
    format!(r#"{{"model":"m","messages":[{{"role":"user","content":{}{}}}]}}"#, "[".repeat(depth), "]".repeat(depth))
}

fn entry(id: &str, expires_at_ms: i64) -> Value {
    json!({
        "id": id, "kind": "fact", "content": "x", "version": 0, "status": "active",
        "provenance": {"conversationId": "c"}, "expiresAtMs": expires_at_ms, "createdAtMs": 0, "updatedAtMs": 0
    })
}

/// `body` sent as it is, as JSON.
async fn post_raw(app: &TestApp, path: &str, body: String) -> (u16, Value) {
    let request = app.request(reqwest::Method::POST, path).header("content-type", "application/json").body(body);
    read(request.send().await.unwrap()).await
}

async fn what_is_accepted_reads_back(app: TestApp) {
    // 127 containers: the most serde_json reads, so the body itself parses.
    let (status, body) = post_raw(&app, INFERENCE_PATH, deep_turn(124)).await;
    assert_api_error(status, &body, 400);
    assert!(body["message"].as_str().unwrap().contains("nested too deeply"), "{body}");
    let (_, listed) = app.get(OPS).await;
    assert_eq!(listed["items"], json!([]), "nothing stored: {listed}");
    // One level less is stored, and its request reads back.
    let (status, body) = post_raw(&app, INFERENCE_PATH, deep_turn(123)).await;
    assert_eq!(status, 202, "{body}");
    let (status, shown) = app.get(&format!("{OPS}/{}/request", body["id"].as_str().unwrap())).await;
    assert_eq!(status, 200, "{shown}");

    let (status, body) = app.post(CONTEXT_INSIGHTS_PATH, &json!({"entry": entry("e1", -1)})).await;
    assert_api_error(status, &body, 400);
    assert!(body["message"].as_str().unwrap().contains("expiresAtMs"), "{body}");
    let (status, body) = app.post(CONTEXT_INSIGHT_GET_PATH, &json!({"entryId": "e1"})).await;
    assert_api_error(status, &body, 404);
    for id in ["a", "b"] {
        let (status, body) = app.post(CONTEXT_INSIGHTS_PATH, &json!({"entry": entry(id, 0)})).await;
        assert_eq!(status, 200, "{body}");
    }
    let merge = json!({"sourceEntryIds": ["a", "b"], "mergedEntry": entry("ab", -5)});
    let (status, body) = app.post(CONTEXT_MERGE_PATH, &merge).await;
    assert_api_error(status, &body, 400);
    let (status, body) = app.post(CONTEXT_INSIGHT_GET_PATH, &json!({"entryId": "ab"})).await;
    assert_api_error(status, &body, 404);
}

async fn optional_bodies_over_the_limit_answer_413(app: TestApp) {
    // Just past the limit: what the server does not read fits the sockets' buffers, so the
    // client reads the 413 instead of a broken pipe (a lingering close).
    let huge = format!(r#"{{"pad":"{}"}}"#, "x".repeat(context_jobs::contract::MAX_APPEND_BYTES));
    for path in [
        format!("{OPS}/01ARZ3NDEKTSV4RRFFQ69G5FAV/retry"),
        "/internal/v1/context/queues/delete/pause".to_string(),
        "/internal/v1/context/queues/delete/resume".to_string(),
    ] {
        let (status, body) = post_raw(&app, &path, huge.clone()).await;
        assert_api_error(status, &body, 413);
    }
}

backend_tests!(what_is_accepted_reads_back, optional_bodies_over_the_limit_answer_413);
