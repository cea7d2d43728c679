//! Listing operations (filters, cursor pages, newest first), bad input on every operation
//! path, and the maintenance status and operation metrics.

use serde_json::json;

use super::{DELETE, OPS, RETENTION};
use crate::harness::{TestApp, assert_api_error, read};

async fn listing_filters_and_pages(app: TestApp) {
    let mut ids = Vec::new();
    for i in 0..5 {
        let body = json!({"scope": {"conversationId": format!("l{i}")}, "policy": {"maxMessages": 5}});
        ids.push(app.call::<context_jobs::contract::DeletionOperation>(RETENTION, &body, 202).await.id);
    }
    app.wait_terminal(&app.submit_delete("ld").await.id).await;
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let path = format!(
            "{OPS}?kind=retention&limit=2{}",
            if cursor.is_empty() { String::new() } else { format!("&cursor={cursor}") }
        );
        let (status, page) = app.get(&path).await;
        assert_eq!(status, 200, "{page}");
        for item in page["items"].as_array().unwrap() {
            assert_eq!(item["kind"], "retention");
            seen.push(item["id"].as_str().unwrap().to_string());
        }
        match page["nextCursor"].as_str() {
            Some(c) => cursor = c.to_string(),
            None => break,
        }
    }
    ids.reverse();
    assert_eq!(seen, ids, "newest first, each once");
    let (_, page) = app.get(&format!("{OPS}?state=succeeded&kind=delete")).await;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
}

async fn bad_input_gets_api_errors(app: TestApp) {
    for path in [
        format!("{OPS}/not-an-id"),
        format!("{OPS}/01ARZ3NDEKTSV4RRFFQ69G5FA"),
        format!("{OPS}?kind=teleport"),
        format!("{OPS}?state=sleeping"),
        format!("{OPS}?cursor=@@"),
        format!("{OPS}?bogus=1"),
    ] {
        let (status, body) = app.get(&path).await;
        assert_api_error(status, &body, 400);
    }
    let (status, body) = app.get(&format!("{OPS}/01ARZ3NDEKTSV4RRFFQ69G5FAV")).await;
    assert_api_error(status, &body, 404);
    let (status, body) = app.post(OPS, &json!({"operationId": 5})).await;
    assert_api_error(status, &body, 400);
    let (status, body) = app.post(DELETE, &json!({"scope": {"conversationId": ""}})).await;
    assert_api_error(status, &body, 400);
    let (status, body) = app.post(DELETE, &json!({"scope": {"conversationId": "x"}, "extra": true})).await;
    assert_api_error(status, &body, 400);
    let (status, body) =
        app.post("/internal/v1/context/advanced-operations", &json!({"kind": "teleport", "request": {}})).await;
    assert_api_error(status, &body, 400);
    let response = app
        .client
        .post(app.url(DELETE))
        .header("idempotency-key", "")
        .json(&json!({"scope": {"conversationId": "x"}}))
        .send()
        .await
        .unwrap();
    let (status, body) = read(response).await;
    assert_api_error(status, &body, 400);
}

async fn maintenance_status_and_metrics(app: TestApp) {
    let (status, body) = app.get("/internal/v1/context/maintenance/status").await;
    assert_eq!(status, 200);
    assert_eq!(body["projectorProcessed"], 0);
    app.wait_terminal(&app.submit_delete("m").await.id).await;
    // The recorder is process-wide, but these series exist once this test's delete is
    // counted and no concurrent test can remove them.
    let text = app.metrics().await;
    for needle in [
        "context_ops_operations_submitted_total{kind=\"delete\"}",
        "context_ops_operations_finished_total{kind=\"delete\",outcome=\"succeeded\"}",
        "context_ops_queue_wait_seconds_bucket",
        "context_ops_operation_run_duration_seconds_bucket",
    ] {
        assert!(text.contains(needle), "missing {needle} in metrics");
    }
}

backend_tests!(listing_filters_and_pages, bad_input_gets_api_errors, maintenance_status_and_metrics);
