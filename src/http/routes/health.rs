//! `/health` (liveness: the process answers; no I/O), `/health/ready` (readiness: the
//! process has started, the database and the queue answer, each within [`READY_TIMEOUT`],
//! and which one does not;
//! the recall indexes an API process loads at start are in memory),
//! both public, and `/metrics` (Prometheus text). The metrics listener serves the health
//! views too, so a worker process (no API listener) can be health-checked.

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::error::ApiJson;
use context_jobs::contract::{ApiError, HEALTH_PATH, SERVICE_NAME};

/// The readiness view.
pub const READY_PATH: &str = "/health/ready";
/// How long readiness waits for each dependency: the whole check answers within it.
pub const READY_TIMEOUT: Duration = Duration::from_millis(700);

/// Where Prometheus scrapes (not part of the API document: `super::non_api`).
pub const METRICS_PATH: &str = "/metrics";

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(health)).routes(routes!(ready))
}

pub fn authed_metrics_routes() -> Router<AppState> {
    Router::new().route(METRICS_PATH, get(authed_metrics))
}

pub fn public_metrics_routes() -> Router<AppState> {
    let (health, _) = routes().split_for_parts();
    health.route(METRICS_PATH, get(metrics))
}

/// Liveness.
#[derive(Serialize, ToSchema)]
pub struct Health {
    /// Always `ok`.
    #[schema(value_type = String, examples("ok"))]
    status: &'static str,
    #[schema(value_type = String)]
    service: &'static str,
    /// The service's version.
    #[schema(value_type = String)]
    version: &'static str,
}

/// Each dependency: `ok`, or why it is not ready (never driver text: it is public).
#[derive(Serialize, ToSchema)]
pub struct Checks {
    database: String,
    queue: String,
    /// `ok`, or how far the start-up load of recall indexes is (`loading 2 of 8 tenants`).
    #[serde(rename = "recallIndexes")]
    recall_indexes: String,
}

/// Ready: every dependency answers.
#[derive(Serialize, ToSchema)]
pub struct Readiness {
    /// Always `ready`.
    #[schema(value_type = String, examples("ready"))]
    status: &'static str,
    #[schema(value_type = String)]
    service: &'static str,
    /// Empty when ready.
    #[schema(value_type = Vec<String>)]
    down: Vec<&'static str>,
    checks: Checks,
}

/// Not ready: an `ApiError` (503) that also names the dependencies that are down.
#[derive(Serialize, ToSchema)]
pub struct NotReady {
    #[serde(flatten)]
    error: ApiError,
    #[schema(value_type = String)]
    service: &'static str,
    /// `starting` (the process has not started everything yet), `database`, `queue`,
    /// `recall_indexes` (still loading at start).
    #[schema(value_type = Vec<String>)]
    down: Vec<&'static str>,
    checks: Checks,
}

/// Liveness: the process answers (no I/O).
#[utoipa::path(
    get,
    path = HEALTH_PATH,
    operation_id = "health",
    tag = "health",
    security(()),
    responses((status = 200, description = "The process is alive.", body = Health)),
)]
async fn health() -> ApiJson<Health> {
    ApiJson(Health { status: "ok", service: SERVICE_NAME, version: env!("CARGO_PKG_VERSION") })
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

/// Readiness: the process has started everything, the database and the queue each answer
/// within 700 ms, and the recall indexes loaded at start (`recall::warm`) are in memory.
#[utoipa::path(
    get,
    path = READY_PATH,
    operation_id = "ready",
    tag = "health",
    security(()),
    responses(
        (status = 200, description = "Ready.", body = Readiness),
        (status = 503, description = "Not ready: the body names what is down.", body = NotReady,
         headers(("Retry-After" = u64, description = "Seconds to wait before asking again."))),
    ),
)]
async fn ready(State(state): State<AppState>) -> impl IntoResponse {
    let db = tokio::time::timeout(READY_TIMEOUT, async { Ok(crate::store::ping(&state.db).await?) });
    let queue = tokio::time::timeout(READY_TIMEOUT, state.queue.ping());
    let (db, queue) = tokio::join!(db, queue);
    let (db, queue) = (check(db, "database"), check(queue, "queue"));
    let indexes = match state.recall.warmup.pending() {
        None => Ok(()),
        Some((loaded, of)) => Err(format!("loading {loaded} of {of} tenants")),
    };
    let starting = match state.started.load(std::sync::atomic::Ordering::Acquire) {
        true => Ok(()),
        false => Err(String::new()),
    };
    let down: Vec<&'static str> =
        [("starting", &starting), ("database", &db), ("queue", &queue), ("recall_indexes", &indexes)]
            .into_iter()
            .filter(|(_, c)| c.is_err())
            .map(|(n, _)| n)
            .collect();
    let unavailable: Vec<&str> = down.iter().copied().filter(|d| matches!(*d, "database" | "queue")).collect();
    let mut reasons = Vec::new();
    if starting.is_err() {
        reasons.push("starting".to_string());
    }
    if !unavailable.is_empty() {
        reasons.push(format!("{} unavailable", unavailable.join(" and ")));
    }
    if let Err(loading) = &indexes {
        reasons.push(format!("recall indexes {loading}"));
    }
    let message = format!("not ready: {}", reasons.join("; "));
    let word = |c: Result<(), String>| c.err().unwrap_or_else(|| "ok".into());
    let checks = Checks { database: word(db), queue: word(queue), recall_indexes: word(indexes) };
    if down.is_empty() {
        return ApiJson(Readiness { status: "ready", service: SERVICE_NAME, down, checks }).into_response();
    }
    let status = StatusCode::SERVICE_UNAVAILABLE;
    let error = ApiError { status: status.as_u16(), message };
    let mut response = (status, ApiJson(NotReady { error, service: SERVICE_NAME, down, checks })).into_response();
    response.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from(1u64));
    response
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    ([(CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.render())
}

async fn authed_metrics(_caller: Caller, state: State<AppState>) -> impl IntoResponse {
    metrics(state).await
}
