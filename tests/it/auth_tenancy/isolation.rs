//! Tenant isolation: tenants B (other tenant, same project) and C (same tenant, other
//! project) use tenant A's conversation, agent and record ids and must neither see A's data
//! nor collide with it.

use serde_json::{Value, json};

use super::{APPEND, LIST, PAGE, RECENT, SEARCH, ids};
use crate::harness::TestApp;
use crate::harness::jwt::{claims, jwt_app, mint};

/// Every read returns 200 with no items for `token`.
async fn assert_sees_nothing(app: &TestApp, who: &str, token: &str, reads: &[(&str, &Value)]) {
    for (path, body) in reads {
        let (status, response) = app.post_as(Some(token), path, body).await;
        assert_eq!(status, 200, "{who} {path}: {response}");
        assert_eq!(response["items"], json!([]), "{who} must not see tenant A's data via {path} {body}");
        assert!(response.get("nextCursor").is_none(), "{who} {path}: {response}");
    }
}

/// Tenant A (t1/p1) writes; tenants B (t2/p1) and C (t1/p2) use the same conversation,
/// agent and record ids and must neither see A's data nor collide with it.
async fn tenants_are_isolated(app: TestApp) {
    let a = mint(&claims("t1", "p1"));
    let b = mint(&claims("t2", "p1"));
    let c = mint(&claims("t1", "p2"));
    let record = |id: &str, text: &str| {
        json!({"id": id, "scope": {"conversationId": "shared-id", "agentId": "agent-x"}, "role": "user",
               "content": text})
    };
    let scope = json!({"conversationId": "shared-id"});
    let recent = json!({"scope": scope});
    let page = json!({"scope": scope, "limit": 10});
    let search_all = json!({"scope": scope});
    let search_a = json!({"scope": scope, "query": "alpha"});
    let list = json!({"agentId": "agent-x"});

    let (status, body) = app
        .post_as(Some(&a), APPEND, &json!({"messages": [record("m1", "alpha one"), record("m2", "alpha two")]}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"appended": 2, "skipped": 0}));
    let (_, a_before) = app.post_as(Some(&a), RECENT, &recent).await;
    assert_eq!(ids(&a_before), ["m1", "m2"]);
    let (_, body) = app.post_as(Some(&a), SEARCH, &search_a).await;
    assert_eq!(ids(&body), ["m1", "m2"], "A finds its own messages");
    let (_, a_list_before) = app.post_as(Some(&a), LIST, &list).await;
    assert_eq!(a_list_before["items"][0]["conversationId"], "shared-id");
    assert_eq!(a_list_before["items"][0]["messageCount"], 2);

    let reads = [(RECENT, &recent), (PAGE, &page), (SEARCH, &search_all), (SEARCH, &search_a), (LIST, &list)];
    assert_sees_nothing(&app, "tenant B (other tenant, same project)", &b, &reads).await;
    assert_sees_nothing(&app, "tenant C (same tenant, other project)", &c, &reads).await;

    // B reuses A's conversation and record ids: its own, fresh records.
    let (status, body) =
        app.post_as(Some(&b), APPEND, &json!({"messages": [record("m1", "beta one"), record("m2", "beta two")]})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"appended": 2, "skipped": 0}), "same ids in another tenant are not duplicates");
    let (_, body) = app.post_as(Some(&b), RECENT, &recent).await;
    assert_eq!(ids(&body), ["m1", "m2"]);
    let seqs: Vec<i64> = body["items"].as_array().unwrap().iter().map(|i| i["sequence"].as_i64().unwrap()).collect();
    assert_eq!(seqs, [1, 2], "B's conversation has its own sequence, starting at 1");
    assert_eq!(body["items"][0]["content"], "beta one");
    assert_eq!(body["items"][1]["content"], "beta two");
    let (_, body) = app.post_as(Some(&b), SEARCH, &search_a).await;
    assert_eq!(body["items"], json!([]), "B's search must not reach A's text");
    let (_, body) = app.post_as(Some(&b), LIST, &list).await;
    assert_eq!(body["items"].as_array().unwrap().len(), 1);
    assert_eq!(body["items"][0]["messageCount"], 2, "B's count is B's alone");

    // A is unchanged: same records, same sequences, same content, same count.
    let (_, a_after) = app.post_as(Some(&a), RECENT, &recent).await;
    assert_eq!(a_after, a_before, "tenant B's append must not change tenant A's conversation");
    assert_eq!(a_after["items"][0]["content"], "alpha one");
    assert_eq!(a_after["items"][0]["sequence"], 1);
    assert_eq!(a_after["items"][1]["sequence"], 2);
    let (_, body) = app.post_as(Some(&a), PAGE, &page).await;
    assert_eq!(ids(&body), ["m1", "m2"]);
    assert_eq!(body["items"], a_before["items"]);
    let (_, a_list_after) = app.post_as(Some(&a), LIST, &list).await;
    assert_eq!(a_list_after, a_list_before, "A's conversation summary unchanged");
    // A retrying its own batch is still a no-op for A.
    let (_, body) = app
        .post_as(Some(&a), APPEND, &json!({"messages": [record("m1", "alpha one"), record("m2", "alpha two")]}))
        .await;
    assert_eq!(body, json!({"appended": 0, "skipped": 2}));
    // C still sees nothing after B wrote.
    assert_sees_nothing(&app, "tenant C after B wrote", &c, &reads).await;
    app.stop().await;
}

backend_tests!(start = jwt_app; tenants_are_isolated);
