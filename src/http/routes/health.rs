//! `/health` (public, checks the database) and `/metrics` (Prometheus text).

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::json;

use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::error::{ApiJson, ApiResult, AppError};
use context_jobs::contract::{HEALTH_PATH, SERVICE_NAME};

pub fn routes() -> Router<AppState> {
    Router::new().route(HEALTH_PATH, get(health))
}

pub fn authed_metrics_routes() -> Router<AppState> {
    Router::new().route("/metrics", get(authed_metrics))
}

pub fn public_metrics_routes() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

async fn health(State(state): State<AppState>) -> ApiResult<impl IntoResponse> {
    crate::store::ping(&state.db).await.map_err(|e| AppError::Unavailable(e.into()))?;
    Ok(ApiJson(json!({"status": "ok", "service": SERVICE_NAME, "version": env!("CARGO_PKG_VERSION")})))
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    ([(CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.render())
}

async fn authed_metrics(_caller: Caller, state: State<AppState>) -> impl IntoResponse {
    metrics(state).await
}
