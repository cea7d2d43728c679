//! The HTTP edge: application state, the router (routes, error fallbacks, middleware), the
//! caller's identity ([`auth`]), the one error type ([`error`]), and one handler file per
//! resource ([`routes`]). Nothing below the edge (store, workers, kinds) imports it.

pub mod auth;
pub mod body;
pub mod error;
pub mod extract;
pub mod malformed;
pub mod openapi;
pub mod routes;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::changes::Changes;
use crate::config::Config;
use crate::embedder::Embedder;
use crate::queue::Queue;
use crate::recall::Recall;
use crate::store::Db;
use auth::Authenticator;
use context_jobs::contract::MAX_APPEND_BYTES;
use error::{AppError, api_error_response};

#[derive(Clone)]
pub struct AppState {
    pub db: Db,
    pub auth: Arc<Authenticator>,
    pub config: Arc<Config>,
    /// The scheduler's settings, parsed once.
    pub scheduling: Arc<crate::config::Scheduling>,
    pub metrics: PrometheusHandle,
    pub queue: Queue,
    /// Hybrid recall (its embedder and the per-process index cache).
    pub recall: Recall,
    /// Operation change notifications of this process (long-polls wait on them).
    pub changes: Changes,
    /// Process shutdown (the token `server::start` stops everything with): long-polls
    /// answer and event streams end at once, so the HTTP server drains in time.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// The cap on event streams open in this process.
    pub events: crate::events::EventStreams,
}

impl AppState {
    pub fn new(db: Db, queue: Queue, config: Config) -> anyhow::Result<Self> {
        let auth = Authenticator::new(&config.auth)?;
        let embedder = Arc::new(Embedder::from_config(&config)?);
        Ok(Self {
            changes: Changes::new(),
            events: crate::events::EventStreams::new(config.http.max_event_streams),
            recall: Recall::new(db.clone(), embedder),
            db,
            auth: Arc::new(auth),
            scheduling: Arc::new(config.scheduling()?),
            config: Arc::new(config),
            metrics: crate::metrics::handle(),
            queue,
            shutdown: tokio_util::sync::CancellationToken::new(),
        })
    }

    /// The embedder of the vector projection (recall embeds queries with it).
    pub fn embedder(&self) -> &Arc<Embedder> {
        &self.recall.embedder
    }
}

/// What the router's fallback answers (with 404) to a path no route has.
pub const NO_SUCH_ENDPOINT: &str = "no such endpoint";

/// The full API router: every documented route ([`routes::api`]) and the non-API ones
/// ([`routes::non_api`]: the dashboard under `/ui`, and `/metrics`, behind auth, unless a
/// separate metrics listener is configured).
pub fn router(state: AppState) -> Router {
    let (api, _) = routes::api().split_for_parts();
    api.merge(routes::non_api::routes(state.config.metrics.metrics_bind.is_none()))
        .fallback(|| async { api_error_response(StatusCode::NOT_FOUND, NO_SUCH_ENDPOINT) })
        .method_not_allowed_fallback(|| async { AppError::MethodNotAllowed })
        // The append limit is on serialized bytes; everything else is far smaller.
        .layer(DefaultBodyLimit::max(MAX_APPEND_BYTES))
        .layer(middleware::from_fn(crate::metrics::track_http))
        .with_state(state)
}

/// The public metrics-only router for `CONTEXT_OPS_METRICS_BIND`.
pub fn metrics_router(state: AppState) -> Router {
    routes::health::public_metrics_routes().with_state(state)
}
