//! Recall and the vector projection over real HTTP on both backends: hybrid scores with
//! their breakdown, filters (conversation, active, unexpired), deterministic ties, the
//! background projector and the index watermark in `maintenance/status`, the
//! `rebuild_vector` operation on both submission paths, and bad input.

use std::time::Duration;

use context_jobs::contract::{
    CONTEXT_ADVANCED_OPERATIONS_PATH as ADVANCED, CONTEXT_EXPIRE_PATH as EXPIRE, CONTEXT_INSIGHTS_PATH as PUT,
    CONTEXT_RECALL_PATH as RECALL, ContextInsight, ContextInsightStatus, ContextOperationState,
    MAINTENANCE_STATUS_PATH as STATUS, VECTOR_REBUILD_PATH as REBUILD,
};
use context_jobs::ids::TenantKey;
use context_ops::store::Db;
use serde_json::{Value, json};

use crate::harness::insights::{import, insight};
use crate::harness::jwt::{jwt_mode, tenant_token};
use crate::harness::wait::poll_until;
use crate::harness::{Backend, OperationExt as _, TestApp, assert_api_error, read};

fn entry(id: &str, conversation: &str, text: &str) -> Value {
    json!({
        "id": id, "kind": "fact", "content": text, "version": 0, "status": "active",
        "provenance": {"conversationId": conversation}, "createdAtMs": 0, "updatedAtMs": 0
    })
}

async fn put(app: &TestApp, id: &str, conversation: &str, text: &str) -> Value {
    let (status, body) = app.post(PUT, &json!({"entry": entry(id, conversation, text), "expectedVersion": 0})).await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn recall(app: &TestApp, body: Value) -> Value {
    let (status, response) = app.post(RECALL, &body).await;
    assert_eq!(status, 200, "{response}");
    response
}

fn ids(response: &Value) -> Vec<String> {
    response["items"].as_array().unwrap().iter().map(|i| i["entry"]["id"].as_str().unwrap().to_string()).collect()
}

/// Poll `maintenance/status` until the watermark has no lag at `source` writes.
async fn wait_projected(app: &TestApp, source: u64) {
    poll_until("the projection to catch up", Duration::from_secs(30), || async {
        let (status, body) = app.get(STATUS).await;
        assert_eq!(status, 200, "{body}");
        let w = &body["indexWatermark"];
        if w["sourceVersion"] == source && w["lag"] == 0 { Ok(()) } else { Err(body.to_string()) }
    })
    .await;
}

async fn hybrid_recall_with_projector(app: TestApp) {
    put(&app, "kafka", "ops", "Kafka runs on three brokers in the eu-west cluster").await;
    put(&app, "postgres", "ops", "The primary PostgreSQL database is backed up nightly").await;
    put(&app, "tea", "chat", "Alice prefers green tea over coffee").await;
    put(&app, "brokers", "chat", "Insurance brokers called about the renewal").await;
    put(&app, "gone", "ops", "Kafka brokers were once on version two").await;
    let (status, _) = app.post(EXPIRE, &json!({"entryId": "gone", "expectedVersion": 1})).await;
    assert_eq!(status, 200);
    wait_projected(&app, 6).await;
    // The tick that wrote the last vectors records its count when it finishes.
    let status = poll_until("the projector to report", Duration::from_secs(30), || async {
        let (_, status) = app.get(STATUS).await;
        if status["projectorProcessed"].as_u64().unwrap() >= 4 { Ok(status) } else { Err(status.to_string()) }
    })
    .await;
    assert!(status["projectorLastRunMs"].as_i64().unwrap() > 0, "{status}");
    assert_eq!(status["indexWatermark"]["projectedVersion"], 6);
    assert!(status["indexWatermark"]["updatedAtMs"].as_i64().unwrap() > 0);

    let r = recall(&app, json!({"query": "kafka brokers cluster"})).await;
    let found = ids(&r);
    assert_eq!(found[0], "kafka", "{r}");
    assert!(found.contains(&"brokers".to_string()), "a partial match is still a match: {r}");
    assert!(!found.contains(&"gone".to_string()), "expired entries are never recalled: {r}");
    assert!(!found.contains(&"tea".to_string()), "no shared term, no match: {r}");
    let top = &r["items"][0]["score"];
    let (lex, vec, rec, fin) = (
        top["lexical"].as_f64().unwrap(),
        top["vector"].as_f64().unwrap(),
        top["recency"].as_f64().unwrap(),
        top["finalScore"].as_f64().unwrap(),
    );
    assert_eq!(lex, 1.0, "the best lexical match is normalised to 1: {top}");
    assert!(vec > 0.3 && vec <= 1.0, "{top}");
    assert!(rec > 0.99 && rec <= 1.0, "{top}");
    assert!((fin - (0.35 * lex + 0.65 * vec + 0.05 * rec)).abs() < 1e-9, "{top}");
    assert_eq!(r["indexWatermark"]["lag"], 0);
    assert_eq!(r["items"][0]["entry"]["version"], 1);

    // Conversation filter, limit, and lexical-only scoring.
    let r = recall(&app, json!({"query": "kafka brokers", "conversationId": "chat"})).await;
    assert_eq!(ids(&r), ["brokers"]);
    let r = recall(&app, json!({"query": "kafka brokers cluster", "limit": 1})).await;
    assert_eq!(ids(&r), ["kafka"]);
    let r = recall(&app, json!({"query": "nightly backup", "lexicalWeight": 1.0, "vectorWeight": 0.0})).await;
    assert_eq!(ids(&r), ["postgres"]);
    assert_eq!(r["items"][0]["score"]["vector"], 0.0);
    let r = recall(&app, json!({"query": "quantum chromodynamics"})).await;
    assert!(ids(&r).is_empty(), "{r}");

    // A write shows up in the very next recall (lexically at once; its vector when projected).
    put(&app, "kafka2", "ops", "Kafka brokers cluster upgrade planned").await;
    let r = recall(&app, json!({"query": "kafka upgrade", "lexicalWeight": 1.0, "vectorWeight": 0.0})).await;
    assert_eq!(ids(&r)[0], "kafka2");
    wait_projected(&app, 7).await;
    let r = recall(&app, json!({"query": "kafka upgrade"})).await;
    assert!(r["items"][0]["score"]["vector"].as_f64().unwrap() > 0.3, "{r}");

    // Bad input is a 400, never a partial answer.
    for bad in [
        json!({"query": "  "}),
        json!({"query": "x", "lexicalWeight": -1}),
        json!({"query": "x".repeat(4097)}),
        json!({"query": "x", "conversationId": ""}),
        json!({"query": "x", "surprise": true}),
    ] {
        let (status, body) = app.post(RECALL, &bad).await;
        assert_api_error(status, &body, 400);
    }
}

async fn ties_break_by_id_and_only_live_entries(app: TestApp) {
    let db = Db::connect(&app.database_url, 2).await.unwrap();
    let tenant = TenantKey::default_tenant();
    let past = context_ops::store::now_ms() - 1;
    let make = |id: &str, status: ContextInsightStatus, expires: Option<i64>| ContextInsight {
        attributes: Value::Null,
        version: 3,
        status,
        expires_at_ms: expires,
        created_at_ms: 1_000,
        updated_at_ms: 1_000,
        ..insight(id, json!("identical twin text about sailing"))
    };
    let items = vec![
        make("twin-b", ContextInsightStatus::Active, None),
        make("twin-a", ContextInsightStatus::Active, None),
        make("twin-c", ContextInsightStatus::Active, Some(past)),
        make("twin-d", ContextInsightStatus::Merged, None),
        make("twin-e", ContextInsightStatus::Corrected, None),
    ];
    import(&db, tenant.as_str(), &items).await;
    wait_projected(&app, 5).await;
    for _ in 0..3 {
        let r = recall(&app, json!({"query": "sailing twin"})).await;
        assert_eq!(ids(&r), ["twin-a", "twin-b"], "equal scores order by id; only active, unexpired entries: {r}");
        assert_eq!(r["items"][0]["score"], r["items"][1]["score"]);
        assert_eq!(r["items"][0]["entry"]["version"], 3, "imported versions are kept");
    }
    db.close().await;
}

async fn rebuild_operation_on_both_paths(backend: Backend) {
    // No projector: the watermark lags until a rebuild runs.
    let app = TestApp::start_with(backend, |c| {
        c.embedder.projector_interval_ms = 0;
        c.worker.batch_size = 2;
    })
    .await;
    for i in 0..5 {
        put(&app, &format!("e{i}"), "c", &format!("note number {i} about rust lifetimes")).await;
    }
    let (_, status) = app.get(STATUS).await;
    assert_eq!(
        status["indexWatermark"],
        json!({"projectedVersion": 0, "sourceVersion": 5, "lag": 5, "updatedAtMs": 0})
    );
    assert!(status["projectorLastRunMs"].is_null());
    let r = recall(&app, json!({"query": "rust lifetimes"})).await;
    assert_eq!(ids(&r).len(), 5, "lexical recall works before any vector exists");
    assert!(r["items"].as_array().unwrap().iter().all(|i| i["score"]["vector"] == 0.0));
    assert_eq!(r["indexWatermark"]["lag"], 5);

    let response = app.client.post(app.url(REBUILD)).json(&json!({})).send().await.unwrap();
    assert_eq!(response.status(), 202);
    assert!(response.headers().contains_key("location"));
    let (_, op) = read(response).await;
    assert_eq!(op["kind"], "rebuild_vector");
    let op = app.wait_terminal(op["id"].as_str().unwrap()).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!((op.processed, op.total), (5, 5));
    assert_eq!(op.result_json()["written"], 5);
    wait_projected(&app, 5).await;
    let r = recall(&app, json!({"query": "rust lifetimes"})).await;
    assert!(r["items"].as_array().unwrap().iter().all(|i| i["score"]["vector"].as_f64().unwrap() > 0.3), "{r}");

    // Not forced: nothing is stale, nothing to do. Forced (generic path): everything again.
    let op = app.submit(REBUILD, &json!({"force": false})).await;
    let op = app.wait_terminal(&op.id).await;
    assert_eq!((op.state, op.processed), (ContextOperationState::Succeeded, 0), "{op:?}");
    let op = app.submit(ADVANCED, &json!({"kind": "rebuild_vector", "request": {"force": true}})).await;
    let op = app.wait_terminal(&op.id).await;
    assert_eq!((op.state, op.processed, op.total), (ContextOperationState::Succeeded, 5, 5), "{op:?}");

    let (status, body) = app.post(REBUILD, &json!({"force": "yes"})).await;
    assert_api_error(status, &body, 400);
    let (status, body) = app.post(ADVANCED, &json!({"kind": "rebuild_vector", "request": {"everything": true}})).await;
    assert_api_error(status, &body, 400);
    app.stop().await;
}

async fn watermark_is_per_tenant(backend: Backend) {
    let app = TestApp::start_with(backend, |c| {
        jwt_mode(c);
        c.embedder.projector_interval_ms = 0;
    })
    .await;
    let (alpha, beta) = (tenant_token("alpha"), tenant_token("beta"));
    for i in 0..3 {
        let (status, _) = app
            .post_as(
                Some(&alpha),
                PUT,
                &json!({"entry": entry(&format!("a{i}"), "c", "alpha secret plans"), "expectedVersion": 0}),
            )
            .await;
        assert_eq!(status, 200);
    }
    let (_, a) = app.post_as(Some(&alpha), STATUS, &json!({})).await;
    let (_, b) = app.post_as(Some(&beta), STATUS, &json!({})).await;
    assert_eq!(a["indexWatermark"]["sourceVersion"], 3);
    assert_eq!(b["indexWatermark"]["sourceVersion"], 0);
    let (_, r) = app.post_as(Some(&beta), RECALL, &json!({"query": "alpha secret plans"})).await;
    assert_eq!(r["items"], json!([]), "another tenant's entries are never recalled");
    app.stop().await;
}

backend_tests!(hybrid_recall_with_projector, ties_break_by_id_and_only_live_entries);
backend_tests!(backend: rebuild_operation_on_both_paths, watermark_is_per_tenant);
