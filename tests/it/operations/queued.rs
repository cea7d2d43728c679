//! Queued operations on an API-only service (nothing runs them): idempotency keys (per
//! tenant), the conversation barrier, ETag / `If-None-Match`, a long-poll timing out, tenant
//! walls on every operation endpoint, cancel and forget.

use context_ops::config::Role;
use serde_json::json;

use super::{DELETE, OPS, seed};
use crate::harness::jwt::{jwt_mode, tenant_token};
use crate::harness::{Backend, TestApp, assert_api_error, message, read};

async fn queued_cancel_idempotency_etag_and_tenants(backend: Backend) {
    // API only: nothing runs, so operations stay queued.
    let app = TestApp::start_command(backend, Role::Api, jwt_mode).await.with_token(tenant_token("alpha"));
    let other = tenant_token("beta");
    seed(&app, "q", 3).await;

    let submit = |key: &'static str, conversation: &'static str| {
        app.client
            .post(app.url(DELETE))
            .bearer_auth(app.token.as_deref().unwrap())
            .header("idempotency-key", key)
            .json(&json!({"scope": {"conversationId": conversation}}))
            .send()
    };
    let (status, first) = read(submit("k1", "q").await.unwrap()).await;
    assert_eq!(status, 202);
    let id = first["id"].as_str().unwrap().to_string();
    let (status, replay) = read(submit("k1", "q").await.unwrap()).await;
    assert_eq!(status, 202);
    assert_eq!(replay["id"], first["id"], "same key, same request: same operation");
    let (status, body) = read(submit("k1", "other-conversation").await.unwrap()).await;
    assert_api_error(status, &body, 409);

    // Appends to a conversation with a pending delete are refused.
    let (status, body) = app
        .post("/internal/v1/context/messages/batch", &json!({"messages": [message("q", "late", "user", "x")]}))
        .await;
    assert_api_error(status, &body, 409);
    // So is a second delete of it (no key), naming the first.
    let (status, body) = app.post(DELETE, &json!({"scope": {"conversationId": "q"}})).await;
    assert_api_error(status, &body, 409);
    assert!(body["message"].as_str().unwrap().contains(&id), "{body}");
    // A conversation never written is held too: an append made before its delete runs would
    // be accepted, then deleted by it.
    let never = json!({"scope": {"conversationId": "never-written"}});
    let (status, held) = app.post(DELETE, &never).await;
    assert_eq!(status, 202, "{held}");
    let (status, body) = app.post(DELETE, &never).await;
    assert_api_error(status, &body, 409);
    assert!(body["message"].as_str().unwrap().contains(held["id"].as_str().unwrap()), "{body}");
    let (status, body) = app
        .post("/internal/v1/context/messages/batch", &json!({"messages": [message("never-written", "m", "user", "x")]}))
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
    let (_, op) = read(response).await;
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
        let (status, body) = read(rb.bearer_auth(&other).send().await.unwrap()).await;
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
    let (_, list) = read(response).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "beta lists only its own: {list}");

    // Forget refuses a live operation; cancel makes it terminal at once; then forget works.
    let forget =
        || app.client.delete(app.url(&format!("{OPS}/{id}"))).bearer_auth(app.token.as_deref().unwrap()).send();
    let (status, body) = read(forget().await.unwrap()).await;
    assert_api_error(status, &body, 409);
    let (status, cancelled) = app.post(&format!("{OPS}/{id}/cancel"), &json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(cancelled["state"], "cancelled");
    assert!(cancelled["version"].as_i64().unwrap() > op["version"].as_i64().unwrap());
    // The barrier is released with the cancel.
    app.append_records(&[message("q", "late", "user", "x")]).await;
    assert_eq!(forget().await.unwrap().status(), 204);
    // A new delete takes the barrier again.
    let (status, body) = app.post(DELETE, &json!({"scope": {"conversationId": "q"}})).await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = app
        .post("/internal/v1/context/messages/batch", &json!({"messages": [message("q", "later", "user", "x")]}))
        .await;
    assert_api_error(status, &body, 409);
    let (status, body) = app.get(&format!("{OPS}/{id}")).await;
    assert_api_error(status, &body, 404);
    app.stop().await;
}

backend_tests!(backend: queued_cancel_idempotency_etag_and_tenants);
