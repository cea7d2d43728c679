//! `POST /internal/v1/context/inference` (an extension beside the contract's paths):
//! submit one Responses turn as an `inference` operation. The body is
//! [`InferenceSubmission`], validated strictly (unknown fields, bad messages, tools,
//! limits → 400; a `conversationId` with no messages to load and none given → 404).
//! Answers `202` with the operation, like every submission; `Idempotency-Key` works
//! as everywhere else.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;

use super::operations::operation_response;
use super::submit::{submit_kind, submitted_response};
use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::error::{ApiJson, ApiResult};
use context_jobs::contract::INFERENCE_PATH;
use context_jobs::kinds::inference::Inference;

pub fn routes() -> Router<AppState> {
    Router::new().route(INFERENCE_PATH, post(submit))
}

async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(submission): ApiJson<serde_json::Value>,
) -> ApiResult<Response> {
    let op = submit_kind::<Inference>(&state, &caller, &headers, submission).await?;
    Ok(submitted_response(&op, operation_response(StatusCode::ACCEPTED, &op)))
}
