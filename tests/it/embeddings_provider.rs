//! The OpenAI-compatible embedder against an in-test fake `/v1/embeddings` server: the
//! projector and recall use it (bearer key, model, `dimensions`, vectors placed by
//! `index`), a provider outage is a 503 for vector recall (lexical-only recall still
//! works), and a refusing provider fails a rebuild with `embedding_failed`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use context_jobs::contract::ContextOperationState;
use context_jobs::embed::{MAX_INPUT_BYTES, MAX_REQUEST_BYTES, hashing_embed};
use serde_json::{Value, json};

use crate::harness::wait::poll_until;
use crate::harness::{Backend, TestApp, assert_api_error};

#[derive(Clone, Default)]
struct Fake {
    /// 200 = answer normally; anything else is returned as that status.
    status: Arc<AtomicU16>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// A request as the fake saw it: `Authorization` header and JSON body.
type Seen = (Option<String>, Value);

async fn embeddings(State(fake): State<Fake>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_string);
    fake.seen.lock().unwrap().push((auth, body.clone()));
    let status = fake.status.load(Ordering::SeqCst);
    // An input the provider refuses: 400. So are inputs over the model's limits, one
    // (`MAX_INPUT_BYTES`) or all of a request's together (`MAX_REQUEST_BYTES`), as OpenAI's.
    let texts: Vec<&str> =
        body["input"].as_array().map(|i| i.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let poisoned = texts.iter().any(|t| t.contains("POISON"));
    let too_long = texts.iter().any(|t| t.len() > MAX_INPUT_BYTES)
        || texts.iter().map(|t| t.len()).sum::<usize>() > MAX_REQUEST_BYTES + MAX_INPUT_BYTES;
    let status = if poisoned || too_long { 400 } else { status };
    if status != 200 {
        return (StatusCode::from_u16(status).unwrap(), Json(json!({"error": {"message": "nope"}}))).into_response();
    }
    let dim = body["dimensions"].as_u64().unwrap() as usize;
    let inputs = body["input"].as_array().unwrap();
    // Reversed order: the client must place vectors by `index`, not by position. Scaled by 3:
    // the client normalises.
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .rev()
        .map(|(i, t)| {
            let v: Vec<f32> = hashing_embed(t.as_str().unwrap(), dim).iter().map(|x| x * 3.0).collect();
            json!({"object": "embedding", "index": i, "embedding": v})
        })
        .collect();
    Json(json!({"object": "list", "data": data, "model": body["model"]})).into_response()
}

async fn start_fake() -> (Fake, SocketAddr) {
    let fake = Fake::default();
    fake.status.store(200, Ordering::SeqCst);
    let app = axum::Router::new().route("/v1/embeddings", post(embeddings)).with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (fake, addr)
}

/// The OpenAI-compatible embedder pointed at the fake on `addr`, projecting every 50 ms.
fn use_fake(c: &mut context_ops::config::Config, addr: SocketAddr) {
    c.embedder.embedder = context_ops::config::EmbedderKind::Openai;
    c.embedder.embeddings_base_url = Some(format!("http://{addr}"));
    c.embedder.embeddings_api_key = Some("sk-test-key".into());
    c.embedder.embeddings_model = "fake-embed-1".into();
    c.embedder.embedding_dim = 64;
    c.embedder.projector_interval_ms = 50;
}

async fn wait_lag_zero(app: &TestApp, source: u64) {
    poll_until("the projection to catch up", Duration::from_secs(30), || async {
        let (_, body) = app.get("/internal/v1/context/maintenance/status").await;
        let w = &body["indexWatermark"];
        if w["sourceVersion"] == source && w["lag"] == 0 { Ok(()) } else { Err(body.to_string()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_compatible_embedder() {
    let (fake, addr) = start_fake().await;
    let app = TestApp::start_with(Backend::Sqlite, |c| use_fake(c, addr)).await;
    for (id, text) in [("k", "Kafka brokers cluster"), ("t", "green tea preference"), ("p", "postgres backups nightly")]
    {
        let entry = json!({"id": id, "kind": "fact", "content": text, "version": 0, "status": "active",
                           "provenance": {"conversationId": "c"}, "createdAtMs": 0, "updatedAtMs": 0});
        let (status, body) = app.post("/internal/v1/context/entries", &json!({"entry": entry})).await;
        assert_eq!(status, 200, "{body}");
    }
    // Forty entries longer than a model takes (≈10 KB each, ≈400 KB together): each is
    // embedded by its start, in requests the provider accepts.
    for i in 0..40 {
        let text = format!("long entry {i} ") + &"many words of context ".repeat(460);
        let entry = json!({"id": format!("long-{i}"), "kind": "fact", "content": text, "version": 0,
                           "status": "active", "provenance": {"conversationId": "c"}, "createdAtMs": 0, "updatedAtMs": 0});
        let (status, body) = app.post("/internal/v1/context/entries", &json!({"entry": entry})).await;
        assert_eq!(status, 200, "{body}");
    }
    wait_lag_zero(&app, 43).await;
    {
        let seen = fake.seen.lock().unwrap();
        let (auth, body) = seen.first().expect("the projector called the provider");
        assert_eq!(auth.as_deref(), Some("Bearer sk-test-key"));
        assert_eq!(body["model"], "fake-embed-1");
        assert_eq!(body["dimensions"], 64);
        let inputs: Vec<&str> =
            seen.iter().flat_map(|(_, b)| b["input"].as_array().unwrap().iter().filter_map(Value::as_str)).collect();
        assert!(inputs.contains(&"Kafka brokers cluster"), "{inputs:?}");
    }
    let (status, r) = app.post("/internal/v1/context/recall", &json!({"query": "kafka cluster"})).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["items"][0]["entry"]["id"], "k");
    let vector = r["items"][0]["score"]["vector"].as_f64().unwrap();
    assert!(vector > 0.3 && vector <= 1.0, "the provider's (normalised) vectors are used: {r}");

    // Provider down: vector recall is 503; lexical-only recall needs no embedding.
    fake.status.store(503, Ordering::SeqCst);
    let (status, body) = app.post("/internal/v1/context/recall", &json!({"query": "kafka cluster"})).await;
    assert_api_error(status, &body, 503);
    let (status, r) =
        app.post("/internal/v1/context/recall", &json!({"query": "kafka cluster", "vectorWeight": 0})).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["items"][0]["entry"]["id"], "k");

    // Provider refuses: the rebuild fails permanently with a stable code.
    fake.status.store(400, Ordering::SeqCst);
    let op = app.submit("/internal/v1/context/projections/vector/rebuild", &json!({"force": true})).await;
    let op = app.wait_terminal(&op.id).await;
    assert_eq!(
        (op.state, op.error_code.as_deref()),
        (ContextOperationState::Failed, Some("embedding_failed")),
        "{op:?}"
    );
    assert!(!op.error.as_deref().unwrap().contains("sk-test-key"));
    app.stop().await;
}

/// Tenants whose entries the provider refuses do not hold the other tenants' projection
/// back: the projector picked such a tenant first on every tick and failed there, and
/// three of them ended every tick before it reached anyone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_the_provider_refuses_does_not_stop_the_others() {
    let (_fake, addr) = start_fake().await;
    let app = TestApp::start_with(Backend::Sqlite, |c| {
        crate::harness::jwt::jwt_mode(c);
        use_fake(c, addr);
    })
    .await;
    // Tenants `a`, `b` and `c` are first in the projector's order (none ever projected; by
    // name), and the provider refuses their entries.
    let token = crate::harness::jwt::tenant_token;
    let (a, b, c, d) = (token("a"), token("b"), token("c"), token("d"));
    for (token, text) in [(&a, "POISON pill"), (&b, "POISON too"), (&c, "POISON three"), (&d, "green tea preference")] {
        let entry = json!({"id": "e", "kind": "fact", "content": text, "version": 0, "status": "active",
                           "provenance": {"conversationId": "c"}, "createdAtMs": 0, "updatedAtMs": 0});
        let (status, body) = app.post_as(Some(token), "/internal/v1/context/entries", &json!({"entry": entry})).await;
        assert_eq!(status, 200, "{body}");
    }
    let lag = |token: String| {
        let app = &app;
        async move {
            let (_, body) = app.get_as(Some(&token), "/internal/v1/context/maintenance/status").await;
            body["indexWatermark"]["lag"].as_i64().unwrap_or(-1)
        }
    };
    poll_until("tenant d projected", Duration::from_secs(30), || async {
        match lag(d.clone()).await {
            0 => Ok(()),
            other => Err(format!("lag {other}")),
        }
    })
    .await;
    for refused in [a, b, c] {
        assert_eq!(lag(refused).await, 1, "the refused entry stays stale");
    }
    app.stop().await;
}
