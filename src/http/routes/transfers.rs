//! Submitting exports and imports (contract paths `exports` and `imports`). Both are
//! operations: `202`, `Location`, poll until done. Their validation is the kinds' own
//! (`crate::kinds::export`, `crate::kinds::import`), shared with `advanced-operations`.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;

use super::operations::contract_operation_response;
use super::submit::{submit_kind, submitted_response};
use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::body::AppendJson;
use crate::http::error::{ApiJson, ApiResult};
use context_jobs::contract::{CONTEXT_EXPORT_PATH, CONTEXT_IMPORT_PATH};
use context_jobs::kinds::export::Export;
use context_jobs::kinds::import::Import;

pub fn routes() -> Router<AppState> {
    Router::new().route(CONTEXT_EXPORT_PATH, post(export)).route(CONTEXT_IMPORT_PATH, post(import))
}

async fn export(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(request): ApiJson<serde_json::Value>,
) -> ApiResult<Response> {
    let op = submit_kind::<Export>(&state, &caller, &headers, request).await?;
    Ok(submitted_response(&op, contract_operation_response(StatusCode::ACCEPTED, &op)))
}

/// The import's idempotency key is the body's `idempotencyKey` (the header's must match).
async fn import(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    AppendJson(request): AppendJson<serde_json::Value>,
) -> ApiResult<Response> {
    let op = submit_kind::<Import>(&state, &caller, &headers, request).await?;
    Ok(submitted_response(&op, contract_operation_response(StatusCode::ACCEPTED, &op)))
}
