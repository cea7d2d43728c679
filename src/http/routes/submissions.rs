//! The contract's generic and conversation-level submissions: `conversations/delete` and
//! `conversations/retention` (answered as the contract's `DeletionOperation`), and
//! `advanced-operations` (any kind by name, with the body that kind's own endpoint takes).
//! All answer `202` with `Location` and `Retry-After`, in the contract's vocabulary.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::operations::contract_operation_response;
use super::submit::{idempotency_key, submit_ctx, submit_kind, submit_prepared, submitted_response};
use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::error::{ApiJson, ApiResult, AppError};
use crate::http::openapi::errors::SubmitErrors;
use crate::http::openapi::schemas::{AdvancedSubmission, SubmitDelete, SubmitRetention, Submitted};
use crate::store::now_ms;
use crate::store::operations::OperationRow;
use context_jobs::contract::{
    CONTEXT_ADVANCED_OPERATIONS_PATH, CONVERSATION_DELETE_PATH, ContextOperationKind, DeletionOperation, RETENTION_PATH,
};
use context_jobs::kinds::delete::Delete;
use context_jobs::kinds::retention::Retention;
use context_jobs::operation::contract_form::deletion_form;
use context_jobs::operation::{SubmitOptions, validate_idempotency_key};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(delete_conversation)).routes(routes!(retention)).routes(routes!(advanced))
}

fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

/// A contract path's answer for a conversation deletion (`delete`, `retention`).
fn deletion_response(op: &OperationRow) -> Response {
    submitted_response(op, ApiJson(deletion_form(op.to_contract(now_ms()))).into_response())
}

/// Delete a conversation: its messages in checkpointed batches, then the conversation.
/// Appends to it answer 409 until the delete is over.
#[utoipa::path(
    post,
    path = CONVERSATION_DELETE_PATH,
    operation_id = "deleteConversation",
    tag = "operations",
    params(("Idempotency-Key" = Option<String>, Header, description = "Submitting again with the same key returns the same operation; with a different request, 409.")),
    request_body = SubmitDelete,
    responses(
        (status = 202, description = "Submitted (or the operation an idempotency key already names).", body = DeletionOperation,
         headers(("Location" = String, description = "The operation: `…/operations/{id}`."),
                 ("Retry-After" = u64, description = "Seconds before polling, while it is not finished."))),
        SubmitErrors,
    ),
)]
async fn delete_conversation(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(request): ApiJson<serde_json::Value>,
) -> ApiResult<Response> {
    let op = submit_kind::<Delete>(&state, &caller, &headers, request).await?;
    Ok(deletion_response(&op))
}

/// Apply a retention policy to one conversation (a `retention` operation; the contract shows
/// it as a deletion).
#[utoipa::path(
    post,
    path = RETENTION_PATH,
    operation_id = "applyRetention",
    tag = "operations",
    params(("Idempotency-Key" = Option<String>, Header, description = "Submitting again with the same key returns the same operation; with a different request, 409.")),
    request_body = SubmitRetention,
    responses(
        (status = 202, description = "Submitted (or the operation an idempotency key already names).", body = DeletionOperation,
         headers(("Location" = String, description = "The operation: `…/operations/{id}`."),
                 ("Retry-After" = u64, description = "Seconds before polling, while it is not finished."))),
        SubmitErrors,
    ),
)]
async fn retention(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(request): ApiJson<serde_json::Value>,
) -> ApiResult<Response> {
    let op = submit_kind::<Retention>(&state, &caller, &headers, request).await?;
    Ok(deletion_response(&op))
}

/// The body of `advanced-operations` (documented as `AdvancedSubmission`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AdvancedRequest {
    kind: String,
    request: serde_json::Value,
    #[serde(default)]
    idempotency_key: Option<String>,
    #[serde(default)]
    priority: Option<i64>,
    #[serde(default)]
    deadline_ms: Option<i64>,
    #[serde(default)]
    timeout_ms: Option<i64>,
    #[serde(default)]
    not_before_ms: Option<i64>,
}

/// Generic submission: `{kind, request, idempotencyKey?}` where `request` is the body the
/// kind's own endpoint takes. Same validation, same result (the kinds' dispatch table).
#[utoipa::path(
    post,
    path = CONTEXT_ADVANCED_OPERATIONS_PATH,
    operation_id = "submitOperation",
    tag = "operations",
    params(("Idempotency-Key" = Option<String>, Header, description = "Used when the body gives no `idempotencyKey`.")),
    request_body = AdvancedSubmission,
    responses(
        Submitted,
        SubmitErrors,
    ),
)]
async fn advanced(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(body): ApiJson<AdvancedRequest>,
) -> ApiResult<Response> {
    let kind = ContextOperationKind::parse(&body.kind)
        .ok_or_else(|| AppError::BadRequest(format!("unknown operation kind {:?}", truncate(&body.kind))))?;
    let key = match body.idempotency_key {
        Some(k) => Some(validate_idempotency_key(&k).map_err(AppError::BadRequest)?),
        None => idempotency_key(&headers)?,
    };
    let prepared = (crate::kinds::entry_of(kind).prepare)(&submit_ctx(&state, &caller), body.request).await?;
    let options = SubmitOptions {
        priority: body.priority,
        deadline_ms: body.deadline_ms,
        timeout_ms: body.timeout_ms,
        not_before_ms: body.not_before_ms,
    };
    let op = submit_prepared(&state, &caller, prepared, key, &options).await?;
    Ok(submitted_response(&op, contract_operation_response(StatusCode::ACCEPTED, &op)))
}
