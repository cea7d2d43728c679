//! Submitting exports and imports (contract paths `exports` and `imports`). Both are
//! operations: `202`, `Location`, poll until done. The validation lives here once and
//! `advanced-operations` calls the same functions.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;

use super::body::AppendJson;
use super::operations::operation_response;
use super::submit::{idempotency_key, submit_operation, submitted_response, validate_key};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{ApiJson, ApiResult, AppError};
use crate::store::artifacts;
use crate::store::operations::SubmitEffect;
use context_jobs::contract::{
    CONTEXT_EXPORT_PATH, CONTEXT_IMPORT_PATH, ContextOperationKind, ExportContextRequest, ImportContextRequest,
    MAX_APPEND_MESSAGES, validate_append,
};
use context_jobs::entries::{EntryRuleError, validate_entry};
use context_jobs::kinds::export::ExportJob;
use context_jobs::kinds::import::ImportJob;
use context_jobs::operation::OperationRequest;

pub fn routes() -> Router<AppState> {
    Router::new().route(CONTEXT_EXPORT_PATH, post(export)).route(CONTEXT_IMPORT_PATH, post(import))
}

pub fn export_payload(request: ExportContextRequest) -> OperationRequest {
    OperationRequest::Export(ExportJob { include_expired: request.include_expired })
}

/// Validate an import request: exactly one source; an `artifactRef` must name a ready
/// artifact of the caller's tenant (else 404/409); inline records obey the append limits.
/// Returns the payload and the (required) idempotency key.
pub async fn import_payload(
    state: &AppState,
    caller: &Caller,
    request: ImportContextRequest,
) -> ApiResult<(OperationRequest, String)> {
    let key = validate_key(request.idempotency_key)?;
    let inline = !request.messages.is_empty() || !request.entries.is_empty();
    match (&request.artifact_ref, inline) {
        (Some(_), true) => {
            return Err(AppError::BadRequest(
                "give exactly one source: artifactRef or inline messages/entries, not both".into(),
            ));
        }
        (None, false) => {
            return Err(AppError::BadRequest("nothing to import: give artifactRef or inline messages/entries".into()));
        }
        (Some(id), false) => {
            let id = super::artifacts::parse_artifact_id(id)?;
            let row = artifacts::get(&state.db, caller.tenant.as_str(), id)
                .await?
                .ok_or_else(|| AppError::NotFound(format!("artifact {id} not found")))?;
            if !row.is_ready() {
                return Err(AppError::Conflict(format!(
                    "artifact {id} is {}; it can be imported once ready",
                    row.state
                )));
            }
        }
        (None, true) => {
            if !request.messages.is_empty() {
                validate_append(&request.messages).map_err(AppError::BadRequest)?;
            }
            if request.entries.len() > MAX_APPEND_MESSAGES {
                return Err(AppError::BadRequest(format!(
                    "an inline import carries at most {MAX_APPEND_MESSAGES} entries, got {}",
                    request.entries.len()
                )));
            }
            for (i, entry) in request.entries.iter().enumerate() {
                validate_entry(entry).map_err(|e| match e {
                    EntryRuleError::Invalid(m) => AppError::BadRequest(format!("entries[{i}]: {m}")),
                    EntryRuleError::PayloadTooLarge(m) => AppError::PayloadTooLarge(format!("entries[{i}]: {m}")),
                })?;
            }
        }
    }
    let job = ImportJob { artifact_ref: request.artifact_ref, messages: request.messages, entries: request.entries };
    Ok((OperationRequest::Import(job), key))
}

async fn export(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(request): ApiJson<ExportContextRequest>,
) -> ApiResult<Response> {
    let key = idempotency_key(&headers)?;
    let payload = export_payload(request);
    let op =
        submit_operation(&state, &caller, ContextOperationKind::Export, &payload, key.as_deref(), SubmitEffect::None)
            .await?;
    Ok(submitted_response(&op, operation_response(StatusCode::ACCEPTED, &op)))
}

async fn import(
    State(state): State<AppState>,
    caller: Caller,
    AppendJson(request): AppendJson<ImportContextRequest>,
) -> ApiResult<Response> {
    let (payload, key) = import_payload(&state, &caller, request).await?;
    let op = submit_operation(&state, &caller, ContextOperationKind::Import, &payload, Some(&key), SubmitEffect::None)
        .await?;
    Ok(submitted_response(&op, operation_response(StatusCode::ACCEPTED, &op)))
}
