//! Entries over real HTTP on both backends: put/get with optimistic concurrency, correct,
//! expire, merge (atomic, all or nothing), the version history, content limits and tenant
//! walls.

use context_jobs::contract::{
    CONTEXT_CORRECT_PATH as CORRECT, CONTEXT_EXPIRE_PATH as EXPIRE, CONTEXT_INSIGHT_GET_PATH as GET,
    CONTEXT_INSIGHTS_PATH as PUT, CONTEXT_MERGE_PATH as MERGE,
};
use serde_json::{Value, json};

use crate::harness::jwt::{jwt_app, tenant_token};
use crate::harness::{TestApp, assert_api_error};

fn entry(id: &str, text: &str) -> Value {
    json!({
        "id": id, "kind": "fact", "content": text, "attributes": {"source": "test"},
        "version": 0, "status": "active",
        "provenance": {"conversationId": "conv-1", "messageIds": ["m1"], "observedAtMs": 7},
        "createdAtMs": 0, "updatedAtMs": 0
    })
}

async fn put(app: &TestApp, e: Value, expected: u64) -> (u16, Value) {
    app.post(PUT, &json!({"entry": e, "expectedVersion": expected})).await
}

async fn history(app: &TestApp, id: &str) -> Value {
    let (status, body) = app.get(&format!("/internal/v1/context/entries/{id}/history")).await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn put_get_and_optimistic_concurrency(app: TestApp) {
    let (status, created) = put(&app, entry("e1", "Kafka runs on three brokers"), 0).await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["version"], 1);
    assert_eq!(created["status"], "active");
    assert_eq!(created["provenance"]["conversationId"], "conv-1");
    assert!(created["createdAtMs"].as_i64().unwrap() > 0);
    assert!(created.get("supersededBy").is_none());

    let (status, got) = app.post(GET, &json!({"entryId": "e1"})).await;
    assert_eq!(status, 200);
    assert_eq!(got, created);

    // expectedVersion 0 only creates; a stale version is 409 and writes nothing.
    let (status, body) = put(&app, entry("e1", "again"), 0).await;
    assert_api_error(status, &body, 409);
    let (status, body) = put(&app, entry("e1", "stale"), 5).await;
    assert_api_error(status, &body, 409);
    assert!(body["message"].as_str().unwrap().contains("version 1"), "{body}");
    let (_, unchanged) = app.post(GET, &json!({"entryId": "e1"})).await;
    assert_eq!(unchanged, created);
    // Replacing an entry that does not exist (found by schemathesis: a 404 the OpenAPI
    // document did not list) is a 404 and creates nothing.
    let (status, body) = put(&app, entry("e-none", "ghost"), 3).await;
    assert_api_error(status, &body, 404);
    let (status, _) = app.post(GET, &json!({"entryId": "e-none"})).await;
    assert_eq!(status, 404);

    let (status, updated) = put(&app, entry("e1", "Kafka runs on five brokers"), 1).await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["version"], 2);
    assert_eq!(updated["content"], "Kafka runs on five brokers");
    assert_eq!(updated["createdAtMs"], created["createdAtMs"]);

    let (status, body) = put(&app, entry("nope", "x"), 3).await;
    assert_api_error(status, &body, 404);
    let (status, body) = app.post(GET, &json!({"entryId": "missing"})).await;
    assert_api_error(status, &body, 404);
}

async fn correct_expire_and_history(app: TestApp) {
    put(&app, entry("e1", "The deploy window is Monday"), 0).await_ok().await;
    let (status, corrected) =
        app.post(CORRECT, &json!({"entryId": "e1", "expectedVersion": 1, "content": "The deploy window is Tuesday", "reason": "typo"})).await;
    assert_eq!(status, 200, "{corrected}");
    assert_eq!((corrected["version"].as_u64(), corrected["status"].as_str()), (Some(2), Some("active")));
    assert_eq!(corrected["content"], "The deploy window is Tuesday");
    let (status, body) = app.post(CORRECT, &json!({"entryId": "e1", "expectedVersion": 1, "content": "late"})).await;
    assert_api_error(status, &body, 409);

    let (status, expired) =
        app.post(EXPIRE, &json!({"entryId": "e1", "expectedVersion": 2, "reason": "outdated"})).await;
    assert_eq!(status, 200, "{expired}");
    assert_eq!((expired["version"].as_u64(), expired["status"].as_str()), (Some(3), Some("expired")));
    // Expired entries do not change any more.
    let (status, body) = app.post(EXPIRE, &json!({"entryId": "e1", "expectedVersion": 3})).await;
    assert_api_error(status, &body, 409);
    let (status, body) = app.post(CORRECT, &json!({"entryId": "e1", "expectedVersion": 3, "content": "x"})).await;
    assert_api_error(status, &body, 409);

    let h = history(&app, "e1").await;
    let items = h["items"].as_array().unwrap();
    let summary: Vec<(u64, &str, &str, &str)> = items
        .iter()
        .map(|i| {
            (
                i["version"].as_u64().unwrap(),
                i["change"].as_str().unwrap(),
                i["entry"]["status"].as_str().unwrap(),
                i["entry"]["content"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (1, "create", "corrected", "The deploy window is Monday"),
            (2, "correct", "active", "The deploy window is Tuesday"),
            (3, "expire", "expired", "The deploy window is Tuesday"),
        ]
    );
    assert_eq!(items[1]["reason"], "typo");
    assert_eq!(items[2]["reason"], "outdated");

    let (status, body) = app.post(EXPIRE, &json!({"entryId": "e1", "expectedVersion": 0})).await;
    assert_api_error(status, &body, 400);
}

async fn merge_is_all_or_nothing(app: TestApp) {
    for (id, text) in [("a", "Alice likes tea"), ("b", "Alice drinks green tea"), ("c", "Alice hates coffee")] {
        put(&app, entry(id, text), 0).await_ok().await;
    }
    put(&app, entry("b", "Alice drinks green tea daily"), 1).await_ok().await; // b is at version 2

    // A stale expected version for one source: 409, and nothing at all changed.
    let merged = entry("ab", "Alice likes green tea");
    let (status, body) = app
        .post(
            MERGE,
            &json!({"sourceEntryIds": ["a", "b"], "mergedEntry": merged, "expectedVersions": {"a": 1, "b": 1}}),
        )
        .await;
    assert_api_error(status, &body, 409);
    // A listed 0 is no version an entry is ever at: a 400, not "any version".
    let (status, body) = app
        .post(MERGE, &json!({"sourceEntryIds": ["a", "b"], "mergedEntry": merged, "expectedVersions": {"b": 0}}))
        .await;
    assert_api_error(status, &body, 400);
    let (_, a) = app.post(GET, &json!({"entryId": "a"})).await;
    assert_eq!((a["version"].as_u64(), a["status"].as_str()), (Some(1), Some("active")));
    let (status, body) = app.post(GET, &json!({"entryId": "ab"})).await;
    assert_api_error(status, &body, 404);

    // A missing source: 404, nothing changed either.
    let (status, body) = app.post(MERGE, &json!({"sourceEntryIds": ["a", "zz"], "mergedEntry": merged})).await;
    assert_api_error(status, &body, 404);
    let (_, a) = app.post(GET, &json!({"entryId": "a"})).await;
    assert_eq!(a["status"], "active");

    // The new entry must be new.
    let (status, body) = app.post(MERGE, &json!({"sourceEntryIds": ["a", "b"], "mergedEntry": entry("c", "x")})).await;
    assert_api_error(status, &body, 409);
    let (_, b) = app.post(GET, &json!({"entryId": "b"})).await;
    assert_eq!((b["version"].as_u64(), b["status"].as_str()), (Some(2), Some("active")));

    let (status, created) = app
        .post(
            MERGE,
            &json!({"sourceEntryIds": ["a", "b"], "mergedEntry": merged, "expectedVersions": {"a": 1, "b": 2}}),
        )
        .await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(
        (created["id"].as_str(), created["version"].as_u64(), created["status"].as_str()),
        (Some("ab"), Some(1), Some("active"))
    );
    for (id, version) in [("a", 2), ("b", 3)] {
        let (_, s) = app.post(GET, &json!({"entryId": id})).await;
        assert_eq!(s["status"], "merged", "{s}");
        assert_eq!(s["supersededBy"], "ab");
        assert_eq!(s["version"], version);
        let h = history(&app, id).await;
        assert_eq!(h["items"].as_array().unwrap().last().unwrap()["change"], "merged");
    }
    // Merged sources cannot be merged again.
    let (status, body) = app.post(MERGE, &json!({"sourceEntryIds": ["a"], "mergedEntry": entry("a2", "x")})).await;
    assert_api_error(status, &body, 409);

    // Bad merge requests are 400 before anything is read.
    for bad in [
        json!({"sourceEntryIds": [], "mergedEntry": entry("n", "x")}),
        json!({"sourceEntryIds": ["c", "c"], "mergedEntry": entry("n", "x")}),
        json!({"sourceEntryIds": ["c"], "mergedEntry": entry("c", "x")}),
        json!({"sourceEntryIds": ["c"], "mergedEntry": entry("n", "x"), "expectedVersions": {"q": 1}}),
    ] {
        let (status, body) = app.post(MERGE, &bad).await;
        assert_api_error(status, &body, 400);
    }
}

async fn limits_and_bad_input(app: TestApp) {
    let big = "x".repeat(64 * 1024 + 1);
    let (status, body) = put(&app, entry("big", &big), 0).await;
    assert_api_error(status, &body, 413);
    let (status, body) = app.post(CORRECT, &json!({"entryId": "big", "expectedVersion": 1, "content": big})).await;
    assert_api_error(status, &body, 413);
    let (status, body) = put(&app, entry("", "x"), 0).await;
    assert_api_error(status, &body, 400);
    let (status, body) = put(&app, entry(&"i".repeat(192), "x"), 0).await;
    assert_api_error(status, &body, 400);
    let mut no_content = entry("n", "x");
    no_content["content"] = Value::Null;
    let (status, body) = put(&app, no_content, 0).await;
    assert_api_error(status, &body, 400);
    let (status, body) = app.post(PUT, &json!({"entry": entry("n", "x"), "surprise": 1})).await;
    assert_api_error(status, &body, 400);
    let (status, body) = app.post(PUT, &json!({"entry": {"id": "n"}})).await;
    assert_eq!(status / 100, 4, "{body}");
    assert_eq!(body["status"], status);
    // Nothing was stored by any of them.
    let (status, _) = app.post(GET, &json!({"entryId": "n"})).await;
    assert_eq!(status, 404);
}

async fn tenants_are_walls(app: TestApp) {
    let (alpha, beta) = (tenant_token("alpha"), tenant_token("beta"));
    let (status, _) =
        app.post_as(Some(&alpha), PUT, &json!({"entry": entry("shared", "alpha's"), "expectedVersion": 0})).await;
    assert_eq!(status, 200);
    let (status, body) = app.post_as(Some(&beta), GET, &json!({"entryId": "shared"})).await;
    assert_api_error(status, &body, 404);
    let (status, body) = app.post_as(Some(&beta), EXPIRE, &json!({"entryId": "shared", "expectedVersion": 1})).await;
    assert_api_error(status, &body, 404);
    let (status, body) =
        app.post_as(Some(&beta), MERGE, &json!({"sourceEntryIds": ["shared"], "mergedEntry": entry("m", "x")})).await;
    assert_api_error(status, &body, 404);
    // The same id is free in the other tenant.
    let (status, theirs) =
        app.post_as(Some(&beta), PUT, &json!({"entry": entry("shared", "beta's"), "expectedVersion": 0})).await;
    assert_eq!((status, theirs["version"].as_u64()), (200, Some(1)));
    let (_, ours) = app.post_as(Some(&alpha), GET, &json!({"entryId": "shared"})).await;
    assert_eq!(ours["content"], "alpha's");
}

/// `put(…).await_ok()`: the write must succeed.
trait AwaitOk {
    async fn await_ok(self) -> Value;
}
impl<F: Future<Output = (u16, Value)>> AwaitOk for F {
    async fn await_ok(self) -> Value {
        let (status, body) = self.await;
        assert_eq!(status, 200, "{body}");
        body
    }
}

backend_tests!(
    put_get_and_optimistic_concurrency,
    correct_expire_and_history,
    merge_is_all_or_nothing,
    limits_and_bad_input
);

backend_tests!(start = jwt_app; tenants_are_walls);
