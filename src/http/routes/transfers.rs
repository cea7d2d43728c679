//! Submitting exports and imports (contract paths `exports` and `imports`). Both are
//! operations: `202`, `Location`, poll until done. Their validation is the kinds' own
//! (`crate::kinds::export`, `crate::kinds::import`), shared with `advanced-operations`.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::operations::contract_operation_response;
use super::submit::{submit_kind, submitted_response};
use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::body::AppendJson;
use crate::http::error::{ApiJson, ApiResult};
use crate::http::openapi::errors::SubmitErrors;
use crate::http::openapi::schemas::{SubmitExport, SubmitImport, Submitted};
use context_jobs::contract::{CONTEXT_EXPORT_PATH, CONTEXT_IMPORT_PATH};
use context_jobs::kinds::export::Export;
use context_jobs::kinds::import::Import;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(export)).routes(routes!(import))
}

/// Export the tenant's messages and entries (or a filtered part) to an artifact.
#[utoipa::path(
    post,
    path = CONTEXT_EXPORT_PATH,
    operation_id = "submitExport",
    tag = "operations",
    params(("Idempotency-Key" = Option<String>, Header, description = "Submitting again with the same key returns the same operation; with a different request, 409.")),
    request_body = SubmitExport,
    responses(
        Submitted,
        SubmitErrors,
    ),
)]
async fn export(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(request): ApiJson<serde_json::Value>,
) -> ApiResult<Response> {
    let op = submit_kind::<Export>(&state, &caller, &headers, request).await?;
    Ok(submitted_response(&op, contract_operation_response(StatusCode::ACCEPTED, &op)))
}

/// Import messages and entries from an artifact or inline records. The import's
/// idempotency key is the body's `idempotencyKey` (the header's must match).
#[utoipa::path(
    post,
    path = CONTEXT_IMPORT_PATH,
    operation_id = "submitImport",
    tag = "operations",
    params(("Idempotency-Key" = Option<String>, Header, description = "Must equal the body's `idempotencyKey` when given.")),
    request_body = SubmitImport,
    responses(
        Submitted,
        SubmitErrors,
    ),
)]
async fn import(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    AppendJson(request): AppendJson<serde_json::Value>,
) -> ApiResult<Response> {
    let op = submit_kind::<Import>(&state, &caller, &headers, request).await?;
    Ok(submitted_response(&op, contract_operation_response(StatusCode::ACCEPTED, &op)))
}
