//! The operations engine over real HTTP on both backends: submit → poll → succeeded for
//! delete and retention, cancel, idempotency, ETag/304, long-poll, listing, tenant walls
//! and bad input.

mod common;

use common::{Backend, TestApp, assert_api_error, message};
use context_ops::config::Command;
use serde_json::{Value, json};

const DELETE: &str = "/internal/v1/context/conversations/delete";
const RETENTION: &str = "/internal/v1/context/conversations/retention";
const OPS: &str = "/internal/v1/context/operations";
const RECENT: &str = "/internal/v1/context/messages/recent";

async fn seed(app: &TestApp, conversation: &str, n: usize) {
    let records: Vec<Value> =
        (0..n).map(|i| message(conversation, &format!("{conversation}-{i:05}"), "user", "x")).collect();
    for chunk in records.chunks(500) {
        app.append(chunk.to_vec()).await;
    }
}

/// Long-poll until the operation is terminal; returns the final operation.
async fn wait_terminal(app: &TestApp, id: &str) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut version = -1i64;
    loop {
        let path = if version < 0 {
            format!("{OPS}/{id}")
        } else {
            format!("{OPS}/{id}/wait?sinceVersion={version}&timeoutMs=5000")
        };
        let (status, op) = app.get(&path).await;
        assert_eq!(status, 200, "{op}");
        if ["succeeded", "failed", "cancelled"].contains(&op["state"].as_str().unwrap()) {
            return op;
        }
        version = op["version"].as_i64().unwrap();
        assert!(std::time::Instant::now() < deadline, "operation {id} did not finish: {op}");
    }
}

async fn count(app: &TestApp, conversation: &str) -> usize {
    let (_, body) = app.post(RECENT, &json!({"scope": {"conversationId": conversation}, "limit": 500})).await;
    body["items"].as_array().unwrap().len()
}

async fn delete_runs_to_completion(app: TestApp) {
    seed(&app, "doomed", 1200).await;
    seed(&app, "kept", 7).await;
    let response = app
        .client
        .post(app.url(DELETE))
        .json(&json!({"scope": {"conversationId": "doomed"}, "reason": "user request"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let location = response.headers()["location"].to_str().unwrap().to_string();
    assert!(response.headers().contains_key("retry-after"));
    let (_, body) = common::read(response).await;
    let id = body["id"].as_str().unwrap().to_string();
    assert_eq!(location, format!("{OPS}/{id}"));
    assert_eq!(body["deletedMessages"], 0);
    assert!(body["createdAtMs"].as_i64().unwrap() > 0);
    let op = wait_terminal(&app, &id).await;
    assert_eq!(op["state"], "succeeded", "{op}");
    assert_eq!(op["kind"], "delete");
    assert_eq!(op["result"]["deletedMessages"], 1200);
    assert_eq!(op["processed"], 1200);
    assert_eq!(op["total"], 1200);
    assert!(op.get("nextPollAfterMs").is_none(), "terminal operations carry no poll hint");
    assert_eq!(count(&app, "doomed").await, 0);
    assert_eq!(count(&app, "kept").await, 7, "other conversations untouched");
    // The contract's POST form answers the same operation.
    let (status, same) = app.post(OPS, &json!({"operationId": id})).await;
    assert_eq!(status, 200);
    assert_eq!(same, op);
    // Appends work again after the delete, starting a fresh conversation.
    app.append(vec![message("doomed", "new", "user", "again")]).await;
    assert_eq!(count(&app, "doomed").await, 1);
}

async fn retention_keeps_the_newest(app: TestApp) {
    seed(&app, "r", 30).await;
    let (status, op) =
        app.post(RETENTION, &json!({"scope": {"conversationId": "r"}, "policy": {"maxMessages": 10}})).await;
    assert_eq!(status, 202, "{op}");
    assert_eq!(op["kind"], "retention");
    let op = wait_terminal(&app, op["id"].as_str().unwrap()).await;
    assert_eq!(op["state"], "succeeded", "{op}");
    assert_eq!(op["result"]["deletedMessages"], 20);
    let (_, body) = app.post(RECENT, &json!({"scope": {"conversationId": "r"}, "limit": 500})).await;
    let seqs: Vec<i64> = body["items"].as_array().unwrap().iter().map(|m| m["sequence"].as_i64().unwrap()).collect();
    assert_eq!(seqs, (21..=30).collect::<Vec<_>>());
    let (status, body) =
        app.post(RETENTION, &json!({"scope": {"conversationId": "r"}, "policy": {"maxAgeDays": 0}})).await;
    assert_api_error(status, &body, 400);
}

async fn cancel_running_stops_at_a_batch_boundary(app: TestApp) {
    seed(&app, "slow", 3000).await;
    let (_, op) = app.post(DELETE, &json!({"scope": {"conversationId": "slow"}})).await;
    let id = op["id"].as_str().unwrap().to_string();
    // Wait until it is running, then cancel.
    let mut version = 0;
    loop {
        let (_, op) = app.get(&format!("{OPS}/{id}/wait?sinceVersion={version}&timeoutMs=5000")).await;
        version = op["version"].as_i64().unwrap();
        if op["state"] == "running" {
            break;
        }
        assert_eq!(op["state"], "queued", "{op}");
    }
    let (status, cancelled) = app.post(&format!("{OPS}/{id}/cancel"), &json!({})).await;
    assert_eq!(status, 200, "{cancelled}");
    let op = wait_terminal(&app, &id).await;
    assert_eq!(op["state"], "cancelled", "{op}");
    let processed = op["processed"].as_u64().unwrap();
    assert!(processed < 3000, "stopped early: {op}");
    let left = {
        let (_, body) = app.post("/internal/v1/context/conversations:list", &json!({"agentId": "none"})).await;
        assert!(body["items"].as_array().unwrap().is_empty());
        // Page through what is left.
        let mut n = 0;
        let mut cursor: Option<String> = None;
        loop {
            let mut req = json!({"scope": {"conversationId": "slow"}, "limit": 500});
            if let Some(c) = &cursor {
                req["cursor"] = json!(c);
            }
            let (_, page) = app.post("/internal/v1/context/messages", &req).await;
            n += page["items"].as_array().unwrap().len();
            match page["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.into()),
                None => break n,
            }
        }
    };
    assert_eq!(left as u64 + processed, 3000, "processed counts exactly what was deleted");
    // Cancel is idempotent and terminal states never change.
    let (status, again) = app.post(&format!("{OPS}/{id}/cancel"), &json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(again["state"], "cancelled");
    assert_eq!(again["version"], op["version"]);
    // The barrier is gone: appends work again.
    app.append(vec![message("slow", "after", "user", "x")]).await;
}

async fn queued_cancel_idempotency_etag_and_tenants(backend: Backend) {
    // API only: nothing runs, so operations stay queued.
    let app = TestApp::start_command(backend, Command::Api, |c| {
        c.jwt_secret = Some("0123456789abcdef0123456789abcdef".into())
    })
    .await;
    let token = |tenant: &str| {
        let claims = json!({"aud": "agent-context-infra", "sub": "svc", "tenant_id": tenant, "project_id": "p",
                            "exp": 4_000_000_000u64});
        jsonwebtoken::encode(
            &jsonwebtoken::Header::default(),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(b"0123456789abcdef0123456789abcdef").unwrap(),
        )
        .unwrap()
    };
    let app = app.with_token(token("alpha"));
    let other = token("beta");
    seed(&app, "q", 3).await;

    let submit = |key: &'static str, conversation: &'static str| {
        app.client
            .post(app.url(DELETE))
            .bearer_auth(app.token.as_deref().unwrap())
            .header("idempotency-key", key)
            .json(&json!({"scope": {"conversationId": conversation}}))
            .send()
    };
    let (status, first) = common::read(submit("k1", "q").await.unwrap()).await;
    assert_eq!(status, 202);
    let id = first["id"].as_str().unwrap().to_string();
    let (status, replay) = common::read(submit("k1", "q").await.unwrap()).await;
    assert_eq!(status, 202);
    assert_eq!(replay["id"], first["id"], "same key, same request: same operation");
    let (status, body) = common::read(submit("k1", "other-conversation").await.unwrap()).await;
    assert_api_error(status, &body, 409);

    // Appends to a conversation with a pending delete are refused.
    let (status, body) = app
        .post("/internal/v1/context/messages/batch", &json!({"messages": [message("q", "late", "user", "x")]}))
        .await;
    assert_api_error(status, &body, 409);

    // ETag / If-None-Match.
    let response = app
        .client
        .get(app.url(&format!("{OPS}/{id}")))
        .bearer_auth(app.token.as_deref().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let etag = response.headers()["etag"].to_str().unwrap().to_string();
    assert!(response.headers().contains_key("retry-after"));
    let (_, op) = common::read(response).await;
    assert_eq!(op["state"], "queued");
    assert!(op["nextPollAfterMs"].as_u64().unwrap() > 0);
    let not_modified = app
        .client
        .get(app.url(&format!("{OPS}/{id}")))
        .bearer_auth(app.token.as_deref().unwrap())
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(not_modified.status(), 304);

    // Long poll with no change returns after the timeout with the same version.
    let started = std::time::Instant::now();
    let (status, same) = app.get(&format!("{OPS}/{id}/wait?sinceVersion={}&timeoutMs=300", op["version"])).await;
    assert_eq!(status, 200);
    assert_eq!(same["version"], op["version"]);
    assert!(started.elapsed() >= std::time::Duration::from_millis(300));

    // Another tenant sees nothing, on every endpoint.
    for (method, path) in [
        ("GET", format!("{OPS}/{id}")),
        ("GET", format!("{OPS}/{id}/wait?timeoutMs=10")),
        ("POST", format!("{OPS}/{id}/cancel")),
        ("DELETE", format!("{OPS}/{id}")),
        ("POST", OPS.to_string()),
    ] {
        let rb = match method {
            "GET" => app.client.get(app.url(&path)),
            "DELETE" => app.client.delete(app.url(&path)),
            _ => app.client.post(app.url(&path)).json(&json!({"operationId": id})),
        };
        let (status, body) = common::read(rb.bearer_auth(&other).send().await.unwrap()).await;
        assert_api_error(status, &body, 404);
    }
    let (status, listed) = app
        .post_as(
            Some(&other),
            "/internal/v1/context/advanced-operations",
            &json!({
        "kind": "delete", "request": {"scope": {"conversationId": "q"}}, "idempotencyKey": "k1"}),
        )
        .await;
    assert_eq!(status, 202, "{listed}");
    assert_ne!(listed["id"], first["id"], "idempotency keys are per tenant");
    let response = app.client.get(app.url(OPS)).bearer_auth(&other).send().await.unwrap();
    let (_, list) = common::read(response).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "beta lists only its own: {list}");

    // Forget refuses a live operation; cancel makes it terminal at once; then forget works.
    let forget =
        || app.client.delete(app.url(&format!("{OPS}/{id}"))).bearer_auth(app.token.as_deref().unwrap()).send();
    let (status, body) = common::read(forget().await.unwrap()).await;
    assert_api_error(status, &body, 409);
    let (status, cancelled) = app.post(&format!("{OPS}/{id}/cancel"), &json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(cancelled["state"], "cancelled");
    assert!(cancelled["version"].as_i64().unwrap() > op["version"].as_i64().unwrap());
    // The barrier is released with the cancel.
    app.append(vec![message("q", "late", "user", "x")]).await;
    assert_eq!(forget().await.unwrap().status(), 204);
    let (status, body) = app.get(&format!("{OPS}/{id}")).await;
    assert_api_error(status, &body, 404);
    app.stop().await;
}

async fn listing_filters_and_pages(app: TestApp) {
    let mut ids = Vec::new();
    for i in 0..5 {
        let (_, op) = app
            .post(RETENTION, &json!({"scope": {"conversationId": format!("l{i}")}, "policy": {"maxMessages": 5}}))
            .await;
        ids.push(op["id"].as_str().unwrap().to_string());
    }
    let (_, op) = app.post(DELETE, &json!({"scope": {"conversationId": "ld"}})).await;
    wait_terminal(&app, op["id"].as_str().unwrap()).await;
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
    let (status, body) = common::read(response).await;
    assert_api_error(status, &body, 400);
}

async fn maintenance_status_and_metrics(app: TestApp) {
    let (status, body) = app.get("/internal/v1/context/maintenance/status").await;
    assert_eq!(status, 200);
    assert_eq!(body["projectorProcessed"], 0);
    let (_, op) = app.post(DELETE, &json!({"scope": {"conversationId": "m"}})).await;
    wait_terminal(&app, op["id"].as_str().unwrap()).await;
    let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    for needle in [
        "context_ops_operations_submitted_total{kind=\"delete\"}",
        "context_ops_operations_finished_total{kind=\"delete\",outcome=\"succeeded\"}",
        "context_ops_queue_wait_seconds_bucket",
        "context_ops_operation_run_duration_seconds_bucket",
    ] {
        assert!(text.contains(needle), "missing {needle} in metrics");
    }
}

backend_tests!(
    delete_runs_to_completion,
    retention_keeps_the_newest,
    listing_filters_and_pages,
    bad_input_gets_api_errors,
    maintenance_status_and_metrics,
);

// One message per batch: 3,000 transactions, so the cancel lands mid-run however fast the
// machine (300 batches of 10 once finished on SQLite before the cancel arrived).
mod cancel_running {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        let app = super::TestApp::start_with(super::Backend::Sqlite, |c| c.batch_size = 1).await;
        super::cancel_running_stops_at_a_batch_boundary(app).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        let app = super::TestApp::start_with(super::Backend::Postgres, |c| c.batch_size = 1).await;
        super::cancel_running_stops_at_a_batch_boundary(app).await;
    }
}

mod queued_operations {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::queued_cancel_idempotency_etag_and_tenants(super::Backend::Sqlite).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::queued_cancel_idempotency_etag_and_tenants(super::Backend::Postgres).await;
    }
}

async fn retention_sweep(backend: Backend) {
    let app = TestApp::start_with(backend, |c| {
        c.retention_sweep_secs = 1;
        c.retention_max_messages = 5;
        c.retention_max_age_days = 0;
    })
    .await;
    seed(&app, "sweep-a", 12).await;
    seed(&app, "sweep-b", 3).await;
    // The sweep runs on its own schedule: poll its reported figures (an external loop, so
    // polling with a deadline is the condition to await).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, status) = app.get("/internal/v1/context/maintenance/status").await;
        if status["retentionProcessed"].as_u64().unwrap_or(0) >= 7 {
            assert!(status["retentionLastRunMs"].as_i64().unwrap() > 0);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "sweep never ran: {status}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(count(&app, "sweep-a").await, 5);
    assert_eq!(count(&app, "sweep-b").await, 3);
    app.stop().await;
}

async fn sweep_ticks_are_exclusive(backend: Backend) {
    let app = TestApp::start(backend).await;
    let db = app.running().state.db.clone();
    let policy = context_jobs::contract::RetentionPolicy { max_age_days: None, max_messages: Some(1) };
    let tick = |holder: &'static str| {
        let db = db.clone();
        let policy = policy.clone();
        tokio::spawn(async move {
            context_ops::worker::retention::sweep_tick(&db, holder, 3_600_000, &policy, 100).await.unwrap()
        })
    };
    let (a, b, c) = tokio::join!(tick("a"), tick("b"), tick("c"));
    let ran = [a.unwrap(), b.unwrap(), c.unwrap()].iter().filter(|r| r.is_some()).count();
    assert_eq!(ran, 1, "exactly one holder runs a tick");
    // The period has not passed: nobody runs the next tick yet.
    assert!(tick("d").await.unwrap().is_none());
    app.stop().await;
}

mod sweep {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::retention_sweep(super::Backend::Sqlite).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::retention_sweep(super::Backend::Postgres).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn exclusive_sqlite() {
        super::sweep_ticks_are_exclusive(super::Backend::Sqlite).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn exclusive_postgres() {
        super::sweep_ticks_are_exclusive(super::Backend::Postgres).await;
    }
}
