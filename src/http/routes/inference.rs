//! `POST /internal/v1/context/inference` (an extension beside the contract's paths):
//! submit one Responses turn as an `inference` operation. The body is
//! [`InferenceSubmission`], validated strictly (unknown fields, bad messages, tools,
//! limits → 400; a `conversationId` with no messages to load and none given → 404).
//! Answers `202` with the operation, like every submission; `Idempotency-Key` works
//! as everywhere else.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::operations::operation_response;
use super::submit::{submit_kind, submitted_response};
use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::error::{ApiJson, ApiResult};
use crate::http::openapi::errors::SubmitErrors;
use crate::http::openapi::schemas::SubmitInference;
use context_jobs::contract::INFERENCE_PATH;
use context_jobs::kinds::inference::Inference;
use context_jobs::operation::view::OperationView;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(submit))
}

/// Submit one Responses turn as an `inference` operation.
#[utoipa::path(
    post,
    path = INFERENCE_PATH,
    operation_id = "submitInference",
    tag = "inference",
    params(("Idempotency-Key" = Option<String>, Header, description = "Submitting again with the same key returns the same operation; with a different request, 409.")),
    request_body = SubmitInference,
    responses(
        (status = 202, description = "Submitted (or the operation an idempotency key already names).", body = OperationView,
         headers(("Location" = String, description = "The operation: `…/operations/{id}`."),
                 ("Retry-After" = u64, description = "Seconds before polling, while it is not finished."),
                 ("ETag" = String, description = "`\"{id}.{version}\"`: changes with every change of the operation."))),
        SubmitErrors,
    ),
)]
async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(submission): ApiJson<serde_json::Value>,
) -> ApiResult<Response> {
    let op = submit_kind::<Inference>(&state, &caller, &headers, submission).await?;
    Ok(submitted_response(&op, operation_response(StatusCode::ACCEPTED, &op)))
}
