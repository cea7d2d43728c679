//! Each authentication mode over every message endpoint: open mode (one tenant, no
//! credentials), the exact static token, only valid gateway JWTs, both together (separate
//! tenants), and a separate public metrics listener. `/health` is public in every mode.

use jsonwebtoken::{Algorithm, Header};
use serde_json::{Value, json};

use super::{APPEND, LIST, PAGE, RECENT, SEARCH, ids};
use crate::harness::jwt::{JWT_SECRET, claims, jwt_mode, mint, mint_with, now_secs};
use crate::harness::{Backend, TestApp, assert_api_error, message, read, unique};

/// One valid request body for every authenticated message endpoint.
fn every_endpoint() -> Vec<(&'static str, Value)> {
    let scope = json!({"conversationId": "c"});
    vec![
        (APPEND, json!({"messages": [message("c", "m", "user", "x")]})),
        (RECENT, json!({"scope": scope})),
        (PAGE, json!({"scope": scope})),
        (SEARCH, json!({"scope": scope, "query": "x"})),
        (LIST, json!({"agentId": "a"})),
    ]
}

/// POST with a raw `Authorization` header value (not necessarily `Bearer …`).
async fn post_with_header(app: &TestApp, authorization: &str, path: &str, body: &Value) -> (u16, Value) {
    let response =
        app.client.post(app.url(path)).header("authorization", authorization).json(body).send().await.unwrap();
    read(response).await
}

async fn get_as(app: &TestApp, token: Option<&str>, path: &str) -> (u16, String) {
    let mut rb = app.client.get(app.url(path));
    if let Some(t) = token {
        rb = rb.bearer_auth(t);
    }
    let response = rb.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

async fn assert_health_is_public(app: &TestApp) {
    let (status, body) = app.get("/health").await;
    assert_eq!(status, 200, "/health must not need credentials: {body}");
    assert_eq!(body["status"], "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_mode_accepts_requests_without_credentials() {
    let app = TestApp::start(Backend::Sqlite).await;
    assert!(app.running().state.auth.is_open());
    for (path, body) in every_endpoint() {
        let (status, response) = app.post(path, &body).await;
        assert_eq!(status, 200, "{path} without credentials in open mode: {response}");
    }
    let (_, body) = app.post(RECENT, &json!({"scope": {"conversationId": "c"}})).await;
    assert_eq!(ids(&body), ["m"]);
    // Any presented credential is ignored: everyone is the one default tenant.
    let (status, body) = app.post_as(Some("whatever"), RECENT, &json!({"scope": {"conversationId": "c"}})).await;
    assert_eq!(status, 200);
    assert_eq!(ids(&body), ["m"], "open mode has a single tenant");
    assert_health_is_public(&app).await;
    let (status, text) = get_as(&app, None, "/metrics").await;
    assert_eq!(status, 200, "open mode serves /metrics without credentials: {text}");
    assert!(text.contains("context_ops_http_requests_total"), "{text}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_token_mode_requires_the_exact_token() {
    let token = unique("tok");
    let configured = token.clone();
    let app = TestApp::start_with(Backend::Sqlite, |config| config.auth.service_token = Some(configured.into())).await;
    assert_eq!(app.running().state.auth.mode(), "static-token");

    // Every message endpoint refuses a request without credentials, before touching the body.
    for (path, body) in every_endpoint() {
        let (status, response) = app.post(path, &body).await;
        assert_api_error(status, &response, 401);
    }
    let recent = json!({"scope": {"conversationId": "c"}});
    let truncated = &token[..token.len() - 1];
    let extended = format!("{token}x");
    let a_jwt = mint(&claims("t1", "p1"));
    for wrong in ["wrong", truncated, extended.as_str(), a_jwt.as_str()] {
        let (status, body) = app.post_as(Some(wrong), RECENT, &recent).await;
        assert_api_error(status, &body, 401);
    }
    for header in [format!("Basic {token}"), token.clone(), "Bearer ".to_string(), "Bearer".to_string()] {
        let (status, body) = post_with_header(&app, &header, RECENT, &recent).await;
        assert_api_error(status, &body, 401);
    }
    // Nothing was written by the refused appends.
    let (status, body) = app.post_as(Some(&token), RECENT, &recent).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["items"], json!([]), "a 401 append must not write");

    for (path, body) in every_endpoint() {
        let (status, response) = app.post_as(Some(&token), path, &body).await;
        assert_eq!(status, 200, "{path} with the right token: {response}");
    }
    let (_, body) = app.post_as(Some(&token), RECENT, &recent).await;
    assert_eq!(ids(&body), ["m"]);

    assert_health_is_public(&app).await;
    // No separate metrics listener: /metrics is behind the same credentials as the API.
    assert!(app.running().metrics_addr.is_none());
    let (status, text) = get_as(&app, None, "/metrics").await;
    assert_api_error(status, &serde_json::from_str(&text).unwrap(), 401);
    let (status, text) = get_as(&app, Some("wrong"), "/metrics").await;
    assert_api_error(status, &serde_json::from_str(&text).unwrap(), 401);
    let (status, text) = get_as(&app, Some(&token), "/metrics").await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("context_ops_http_requests_total"), "Prometheus text expected: {text}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_mode_accepts_only_valid_gateway_tokens() {
    let app = TestApp::start_with(Backend::Sqlite, jwt_mode).await;
    assert_eq!(app.running().state.auth.mode(), "jwt");
    let recent = json!({"scope": {"conversationId": "c"}});

    let valid = mint(&claims("t1", "p1"));
    let (status, body) =
        app.post_as(Some(&valid), APPEND, &json!({"messages": [message("c", "m", "user", "x")]})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"appended": 1, "skipped": 0}));
    let (status, body) = app.post_as(Some(&valid), RECENT, &recent).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ids(&body), ["m"]);
    for (path, body) in every_endpoint() {
        let (status, response) = app.post_as(Some(&valid), path, &body).await;
        assert_eq!(status, 200, "{path} with a valid JWT: {response}");
    }
    // camelCase claim names are accepted too, and name the same tenant.
    let camel = json!({"aud": "agent-context-infra", "sub": "svc", "tenantId": "t1", "projectId": "p1",
                       "exp": now_secs() + 600});
    let (status, body) = app.post_as(Some(&mint(&camel)), RECENT, &recent).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ids(&body), ["m"]);

    let with = |patch: Value| {
        let mut c = claims("t1", "p1");
        for (k, v) in patch.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };
    let without = |key: &str| {
        let mut c = claims("t1", "p1");
        c.as_object_mut().unwrap().remove(key);
        c
    };
    let rejected: Vec<(&str, String)> = vec![
        ("wrong audience", mint(&with(json!({"aud": "someone-else"})))),
        ("missing audience", mint(&without("aud"))),
        ("expired", mint(&with(json!({"exp": now_secs() - 600})))),
        ("missing exp", mint(&without("exp"))),
        ("wrong secret", mint_with(&Header::default(), "ffffffffffffffffffffffffffffffff", &claims("t1", "p1"))),
        ("HS512 instead of HS256", mint_with(&Header::new(Algorithm::HS512), JWT_SECRET, &claims("t1", "p1"))),
        ("missing tenant claim", mint(&without("tenant_id"))),
        ("missing project claim", mint(&without("project_id"))),
        ("missing subject", mint(&without("sub"))),
        ("empty tenant", mint(&claims("", "p1"))),
        ("'/' in tenant", mint(&claims("t1/p1", "x"))),
        ("'/' in project", mint(&claims("t1", "p1/x"))),
        ("not valid for another hour (nbf)", mint(&with(json!({"nbf": now_secs() + 3600})))),
        ("not valid for two minutes (nbf past the leeway)", mint(&with(json!({"nbf": now_secs() + 120})))),
        ("NUL in tenant", mint(&claims("t\u{0}1", "p1"))),
        ("NUL in project", mint(&claims("t1", "p\u{0}1"))),
        ("NUL in subject", mint(&with(json!({"sub": "s\u{0}"})))),
        ("not a JWT", "tok-not-a-jwt".into()),
        ("tampered signature", format!("{}x", &valid[..valid.len() - 1])),
    ];
    for (what, token) in &rejected {
        let (status, body) = app.post_as(Some(token), RECENT, &recent).await;
        assert_eq!(status, 401, "{what} must be refused: {body}");
        assert_api_error(status, &body, 401);
    }
    let (status, body) = app.post(RECENT, &recent).await;
    assert_api_error(status, &body, 401);
    // `nbf` has the same leeway as `exp`: a clock a little behind the gateway's is fine.
    for nbf in [now_secs() - 600, now_secs() + 30] {
        let (status, body) = app.post_as(Some(&mint(&with(json!({"nbf": nbf})))), RECENT, &recent).await;
        assert_eq!(status, 200, "nbf {nbf} is within the leeway: {body}");
    }

    assert_health_is_public(&app).await;
    let (status, text) = get_as(&app, None, "/metrics").await;
    assert_api_error(status, &serde_json::from_str(&text).unwrap(), 401);
    let (status, text) = get_as(&app, Some(&valid), "/metrics").await;
    assert_eq!(status, 200, "{text}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_and_jwt_together_accept_either_in_separate_tenants() {
    let token = unique("tok");
    let configured = token.clone();
    let app = TestApp::start_with(Backend::Sqlite, |config| {
        config.auth.service_token = Some(configured.into());
        config.auth.jwt_secret = Some(JWT_SECRET.into());
    })
    .await;
    assert_eq!(app.running().state.auth.mode(), "static-token+jwt");
    let jwt = mint(&claims("t1", "p1"));
    let recent = json!({"scope": {"conversationId": "c"}});
    let (status, body) =
        app.post_as(Some(&token), APPEND, &json!({"messages": [message("c", "by-token", "user", "x")]})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) =
        app.post_as(Some(&jwt), APPEND, &json!({"messages": [message("c", "by-jwt", "user", "x")]})).await;
    assert_eq!(status, 200, "{body}");
    let (_, body) = app.post_as(Some(&token), RECENT, &recent).await;
    assert_eq!(ids(&body), ["by-token"], "the static token is the default tenant");
    let (_, body) = app.post_as(Some(&jwt), RECENT, &recent).await;
    assert_eq!(ids(&body), ["by-jwt"], "the JWT caller is tenant t1/p1");
    let (status, body) = app.post_as(Some("wrong"), RECENT, &recent).await;
    assert_api_error(status, &body, 401);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_metrics_listener_is_public_and_api_listener_drops_metrics() {
    let token = unique("tok");
    let configured = token.clone();
    let app = TestApp::start_with(Backend::Sqlite, |config| {
        config.auth.service_token = Some(configured.into());
        config.metrics.metrics_bind = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let metrics_addr = app.running().metrics_addr.expect("metrics listener bound");
    assert_ne!(metrics_addr, app.running().addr);
    assert_ne!(metrics_addr.port(), 0);
    // Generate some traffic on the API listener so there is something to export.
    let (status, _) = app.post_as(Some(&token), RECENT, &json!({"scope": {"conversationId": "c"}})).await;
    assert_eq!(status, 200);

    let response = app.client.get(format!("http://{metrics_addr}/metrics")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200, "metrics listener needs no credentials");
    let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let text = response.text().await.unwrap();
    assert!(
        text.contains(r#"context_ops_http_requests_total{route="/internal/v1/context/messages/recent""#),
        "API traffic is exported on the metrics listener: {text}"
    );
    // The public listener serves nothing but /metrics.
    let response = app
        .client
        .post(format!("http://{metrics_addr}{RECENT}"))
        .json(&json!({"scope": {"conversationId": "c"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 404, "the API must not be reachable on the metrics listener");
    // With a metrics listener, the API listener no longer serves /metrics at all.
    let (status, text) = get_as(&app, Some(&token), "/metrics").await;
    assert_api_error(status, &serde_json::from_str(&text).unwrap(), 404);
    app.stop().await;
}
