//! Submitting an operation: the one path every kind's endpoint goes through. Insert the
//! row (or find the idempotent original), then push to the kind's queue after commit. A
//! failed push leaves the row queued and unmarked: the dispatcher pushes it later.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{ApiResult, AppError};
use crate::metrics as m;
use crate::store::leases;
use crate::store::operations::{self as ops, OperationRow, SubmitEffect};
use context_jobs::contract::{CONTEXT_OPERATIONS_PATH, ContextOperationKind, MAX_RESOURCE_ID_CHARS};
use context_jobs::operation::OperationRequest;

pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";

pub fn validate_key(key: String) -> ApiResult<String> {
    if key.trim().is_empty() || key.chars().count() > MAX_RESOURCE_ID_CHARS {
        return Err(AppError::BadRequest(format!("idempotency key must be 1..={MAX_RESOURCE_ID_CHARS} characters")));
    }
    Ok(key)
}

/// The `Idempotency-Key` header, validated.
pub fn idempotency_key(headers: &HeaderMap) -> ApiResult<Option<String>> {
    match headers.get(IDEMPOTENCY_HEADER) {
        None => Ok(None),
        Some(v) => {
            let s = v.to_str().map_err(|_| AppError::BadRequest("idempotency key must be visible ASCII".into()))?;
            validate_key(s.to_string()).map(Some)
        }
    }
}

pub async fn submit_operation(
    state: &AppState,
    caller: &Caller,
    kind: ContextOperationKind,
    request: &OperationRequest,
    key: Option<&str>,
    effect: SubmitEffect<'_>,
) -> ApiResult<OperationRow> {
    let submitted = ops::submit(&state.db, &caller.tenant, request, kind, key, effect).await?;
    let op = submitted.operation;
    if !submitted.created {
        metrics::counter!(m::IDEMPOTENT_REPLAYS, "kind" => kind.as_str()).increment(1);
        return Ok(op);
    }
    metrics::counter!(m::OPERATIONS_SUBMITTED, "kind" => kind.as_str()).increment(1);
    if let Err(e) = state.queue.push(kind, &op.id).await {
        tracing::warn!(operation = %op.id, error = format!("{e:#}"), "queue push failed; the dispatcher will push it");
        if let Err(e) = leases::clear_pushed(&state.db, &op.id).await {
            // Still marked: the dispatcher re-pushes it after CONTEXT_OPS_REPUSH_AFTER_MS.
            tracing::warn!(operation = %op.id, error = %e, "could not clear the push mark");
        }
    }
    Ok(op)
}

/// 202 with `Location` (or 200 for an idempotent replay of a finished operation stays
/// 202: the client's flow is the same), `Retry-After`, and the body given.
pub fn submitted_response(op: &OperationRow, mut body: Response) -> Response {
    *body.status_mut() = StatusCode::ACCEPTED;
    let headers = body.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("{CONTEXT_OPERATIONS_PATH}/{}", op.id)) {
        headers.insert(header::LOCATION, v);
    }
    if !headers.contains_key(header::RETRY_AFTER) && !op.state.is_terminal() {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(1u64));
    }
    body
}
