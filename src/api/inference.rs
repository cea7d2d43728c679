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
use super::submit::{idempotency_key, submit_operation, submitted_response};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{ApiJson, ApiResult, AppError};
use crate::store::messages;
use crate::store::operations::SubmitEffect;
use context_jobs::contract::{ContextOperationKind, INFERENCE_PATH};
use context_jobs::kinds::inference::InferenceSubmission;
use context_jobs::operation::OperationRequest;

pub fn routes() -> Router<AppState> {
    Router::new().route(INFERENCE_PATH, post(submit))
}

async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(submission): ApiJson<InferenceSubmission>,
) -> ApiResult<Response> {
    let key = idempotency_key(&headers)?;
    let payload = prepare(&state, &caller, submission).await?;
    let kind = ContextOperationKind::Inference;
    let op = submit_operation(&state, &caller, kind, &payload, key.as_deref(), SubmitEffect::None).await?;
    Ok(submitted_response(&op, operation_response(StatusCode::ACCEPTED, &op)))
}

/// Validate a submission and turn it into the stored request (shared with
/// `advanced-operations`). History alone must have something to send: a conversation
/// this tenant cannot see, or one without messages, is a 404 when no new messages
/// are given.
pub async fn prepare(
    state: &AppState,
    caller: &Caller,
    submission: InferenceSubmission,
) -> ApiResult<OperationRequest> {
    let job = submission.into_job().map_err(AppError::BadRequest)?;
    if let (Some(conversation), true) = (job.conversation_id.as_deref(), job.request.messages.is_empty()) {
        let newest = messages::recent(&state.db, &caller.tenant, conversation, &[], 1).await?;
        if newest.is_empty() {
            return Err(AppError::NotFound(format!("conversation {conversation:?} has no messages to load")));
        }
    }
    Ok(OperationRequest::Inference(job))
}
