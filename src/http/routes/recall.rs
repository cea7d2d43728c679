//! Hybrid recall (`…/recall`, see `crate::recall`) and the vector projection's rebuild
//! (`…/projections/vector/rebuild`, also reachable as kind `rebuild_vector` of
//! `advanced-operations`).

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;

use super::operations::contract_operation_response;
use super::submit::{submit_kind, submitted_response};
use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::error::{ApiJson, ApiResult};
use context_jobs::contract::{CONTEXT_RECALL_PATH, RecallContextRequest, RecallContextResponse, VECTOR_REBUILD_PATH};
use context_jobs::kinds::rebuild_vector::RebuildVector;

pub fn routes() -> Router<AppState> {
    Router::new().route(CONTEXT_RECALL_PATH, post(recall)).route(VECTOR_REBUILD_PATH, post(rebuild))
}

async fn recall(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<RecallContextRequest>,
) -> ApiResult<ApiJson<RecallContextResponse>> {
    Ok(ApiJson(state.recall.recall(&caller.tenant, &request).await?))
}

async fn rebuild(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(request): ApiJson<serde_json::Value>,
) -> ApiResult<Response> {
    let op = submit_kind::<RebuildVector>(&state, &caller, &headers, request).await?;
    Ok(submitted_response(&op, contract_operation_response(StatusCode::ACCEPTED, &op)))
}
