//! Application state and the HTTP router: what every handler shares, and the one place
//! the routes, the error fallbacks and the middleware are put together.

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::auth::Authenticator;
use crate::config::Config;
use crate::db::Db;
use crate::error::{AppError, api_error_response};
use crate::queue::Queue;
use context_jobs::contract::MAX_APPEND_BYTES;

#[derive(Clone)]
pub struct AppState {
    pub db: Db,
    pub auth: Arc<Authenticator>,
    pub config: Arc<Config>,
    pub metrics: PrometheusHandle,
    pub queue: Queue,
    /// The vector projection's embedder (recall embeds queries with it).
    pub embedder: Arc<crate::embedder::Embedder>,
    /// In-memory recall indexes, one per recently used tenant.
    pub recall_index: Arc<crate::store::recall_index::RecallIndexes>,
    /// Process shutdown (the token `server::start` stops everything with): long-polls
    /// answer at once, so the HTTP server drains in time.
    pub shutdown: tokio_util::sync::CancellationToken,
}

impl AppState {
    pub fn new(db: Db, queue: Queue, config: Config) -> anyhow::Result<Self> {
        let auth = Authenticator::new(config.service_token.clone(), config.jwt_secret.as_deref())?;
        let embedder = crate::embedder::Embedder::from_config(&config)?;
        let recall_index = crate::store::recall_index::RecallIndexes::new(embedder.model(), embedder.dim());
        Ok(Self {
            db,
            auth: Arc::new(auth),
            config: Arc::new(config),
            metrics: crate::metrics::handle(),
            queue,
            embedder: Arc::new(embedder),
            recall_index: Arc::new(recall_index),
            shutdown: tokio_util::sync::CancellationToken::new(),
        })
    }
}

/// The full API router. `/metrics` is included (behind auth) unless a separate metrics
/// listener is configured.
pub fn router(state: AppState) -> Router {
    let mut router = crate::api::routes();
    if state.config.metrics_bind.is_none() {
        router = router.merge(crate::api::health::authed_metrics_routes());
    }
    router
        .fallback(|| async { api_error_response(StatusCode::NOT_FOUND, "no such endpoint") })
        .method_not_allowed_fallback(|| async { AppError::MethodNotAllowed })
        // The append limit is on serialized bytes; everything else is far smaller.
        .layer(DefaultBodyLimit::max(MAX_APPEND_BYTES))
        .layer(middleware::from_fn(crate::metrics::track_http))
        .with_state(state)
}

/// The public metrics-only router for `CONTEXT_OPS_METRICS_BIND`.
pub fn metrics_router(state: AppState) -> Router {
    crate::api::health::public_metrics_routes().with_state(state)
}
