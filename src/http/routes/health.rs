//! `/health` (liveness: the process answers; no I/O), `/health/ready` (readiness: the
//! database and the queue answer, each within [`READY_TIMEOUT`], and which one does not),
//! both public, and `/metrics` (Prometheus text). The metrics listener serves the health
//! views too, so a worker process (no API listener) can be health-checked.

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::json;

use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::error::ApiJson;
use context_jobs::contract::{HEALTH_PATH, SERVICE_NAME};

/// The readiness view.
pub const READY_PATH: &str = "/health/ready";
/// How long readiness waits for each dependency: the whole check answers within it.
pub const READY_TIMEOUT: Duration = Duration::from_millis(700);

pub fn routes() -> Router<AppState> {
    Router::new().route(HEALTH_PATH, get(health)).route(READY_PATH, get(ready))
}

pub fn authed_metrics_routes() -> Router<AppState> {
    Router::new().route("/metrics", get(authed_metrics))
}

pub fn public_metrics_routes() -> Router<AppState> {
    routes().route("/metrics", get(metrics))
}

async fn health() -> impl IntoResponse {
    ApiJson(json!({"status": "ok", "service": SERVICE_NAME, "version": env!("CARGO_PKG_VERSION")}))
}

/// `"ok"`, or why the dependency is not ready (never driver text: it is public).
fn check(result: Result<anyhow::Result<()>, tokio::time::error::Elapsed>, what: &str) -> Result<(), String> {
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => {
            tracing::warn!(error = format!("{e:#}"), "readiness: {what} unavailable");
            Err("unavailable".into())
        }
        Err(_) => Err(format!("no answer within {} ms", READY_TIMEOUT.as_millis())),
    }
}

async fn ready(State(state): State<AppState>) -> impl IntoResponse {
    let db = tokio::time::timeout(READY_TIMEOUT, async { Ok(crate::store::ping(&state.db).await?) });
    let queue = tokio::time::timeout(READY_TIMEOUT, state.queue.ping());
    let (db, queue) = tokio::join!(db, queue);
    let checks = [("database", check(db, "database")), ("queue", check(queue, "queue"))];
    let ready = checks.iter().all(|(_, c)| c.is_ok());
    let mut body = serde_json::Map::new();
    for (name, result) in &checks {
        body.insert((*name).into(), json!(result.as_ref().err().map_or("ok", String::as_str)));
    }
    let down: Vec<&str> = checks.iter().filter(|(_, c)| c.is_err()).map(|(n, _)| *n).collect();
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let body = json!({
        "status": if ready { "ready" } else { "unavailable" },
        "service": SERVICE_NAME,
        "down": down,
        "checks": body,
    });
    (status, Json(body))
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    ([(CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.render())
}

async fn authed_metrics(_caller: Caller, state: State<AppState>) -> impl IntoResponse {
    metrics(state).await
}
