//! Hybrid recall (`…/recall`, see `crate::recall`) and the vector projection's rebuild
//! (`…/projections/vector/rebuild`, also reachable as kind `rebuild_vector` of
//! `advanced-operations`).

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::operations::contract_operation_response;
use super::submit::{submit_kind, submitted_response};
use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::error::{ApiJson, ApiResult};
use crate::http::openapi::errors::{BodyErrors, SubmitErrors};
use crate::http::openapi::schemas::{SubmitRebuildVector, Submitted};
use context_jobs::contract::{CONTEXT_RECALL_PATH, RecallContextRequest, RecallContextResponse, VECTOR_REBUILD_PATH};
use context_jobs::kinds::rebuild_vector::RebuildVector;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(recall)).routes(routes!(rebuild))
}

/// Hybrid recall over the tenant's active entries: lexical, vector and recency scores.
#[utoipa::path(
    post,
    path = CONTEXT_RECALL_PATH,
    operation_id = "recall",
    tag = "recall",
    request_body = RecallContextRequest,
    responses((status = 200, description = "The best entries, with their scores.", body = RecallContextResponse), BodyErrors),
)]
async fn recall(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<RecallContextRequest>,
) -> ApiResult<ApiJson<RecallContextResponse>> {
    Ok(ApiJson(state.recall.recall(&caller.tenant, &request).await?))
}

/// Rebuild the vector projection (a `rebuild_vector` operation).
#[utoipa::path(
    post,
    path = VECTOR_REBUILD_PATH,
    operation_id = "rebuildVectors",
    tag = "recall",
    params(("Idempotency-Key" = Option<String>, Header, description = "Submitting again with the same key returns the same operation; with a different request, 409.")),
    request_body = SubmitRebuildVector,
    responses(
        Submitted,
        SubmitErrors,
    ),
)]
async fn rebuild(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(request): ApiJson<serde_json::Value>,
) -> ApiResult<Response> {
    let op = submit_kind::<RebuildVector>(&state, &caller, &headers, request).await?;
    Ok(submitted_response(&op, contract_operation_response(StatusCode::ACCEPTED, &op)))
}
