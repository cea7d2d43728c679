//! Submitting an operation: the one path every kind's endpoint goes through. The kind
//! prepares the submission (`crate::kinds`), the store inserts the row (or finds the
//! idempotent original), and the operation is pushed to its kind's queue after the commit.
//! A failed push leaves the row queued and unmarked: the dispatcher pushes it later.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;

use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::error::{ApiResult, AppError};
use crate::kinds::{Job, Prepared, SubmitCtx};
use crate::metrics as m;
use crate::store::now_ms;
use crate::store::operations::{self as ops, NewOperation, OperationRow, dispatch};
use context_jobs::contract::CONTEXT_OPERATIONS_PATH;
use context_jobs::operation::{SubmitOptions, validate_idempotency_key};

pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";

/// The `Idempotency-Key` header, validated.
pub fn idempotency_key(headers: &HeaderMap) -> ApiResult<Option<String>> {
    match headers.get(IDEMPOTENCY_HEADER) {
        None => Ok(None),
        Some(v) => {
            let s = v.to_str().map_err(|_| AppError::BadRequest("idempotency key must be visible ASCII".into()))?;
            validate_idempotency_key(s).map(Some).map_err(AppError::BadRequest)
        }
    }
}

/// What a submission is checked against: the caller's tenant.
pub fn submit_ctx<'a>(state: &'a AppState, caller: &'a Caller) -> SubmitCtx<'a> {
    SubmitCtx { db: &state.db, tenant: &caller.tenant, config: &state.config }
}

/// Submit one kind's own endpoint body (with the scheduling options beside its fields).
pub async fn submit_kind<J: Job>(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    body: serde_json::Value,
) -> ApiResult<OperationRow> {
    let (submission, options) = crate::http::body::submission::<J::Submission>(body)?;
    let prepared = J::prepare(&submit_ctx(state, caller), submission).await?;
    submit_prepared(state, caller, prepared, idempotency_key(headers)?, &options).await
}

/// Store a prepared submission and push it. An idempotency key the body carries wins over
/// the header's; two different ones are a 400.
pub async fn submit_prepared(
    state: &AppState,
    caller: &Caller,
    prepared: Prepared,
    header_key: Option<String>,
    options: &SubmitOptions,
) -> ApiResult<OperationRow> {
    let key = match (prepared.idempotency_key, header_key) {
        (Some(body), Some(header)) if body != header => {
            return Err(AppError::BadRequest(
                "two different idempotency keys: the request's idempotencyKey is the one".into(),
            ));
        }
        (body, header) => body.or(header),
    };
    let kind = prepared.request.kind();
    let now = now_ms();
    let default_timeout = state.scheduling.default_timeout_ms.get(kind).map(|t| t as i64);
    let schedule = options.resolve(now, default_timeout).map_err(AppError::BadRequest)?;
    let new = NewOperation {
        request: &prepared.request,
        options,
        schedule,
        idempotency_key: key.as_deref(),
        effect: &prepared.effect,
        rate_key: prepared.rate_key.as_deref(),
    };
    let submitted = ops::submit(&state.db, &caller.tenant, &new).await?;
    if !submitted.created {
        metrics::counter!(m::IDEMPOTENT_REPLAYS, "kind" => kind.as_str()).increment(1);
        return Ok(submitted.operation);
    }
    metrics::counter!(m::OPERATIONS_SUBMITTED, "kind" => kind.as_str()).increment(1);
    state.changes.committed(&submitted.operation.id, &submitted.operation.tenant);
    let push = submitted.push_now();
    let op = submitted.operation;
    if !push {
        // Scheduled for later (the dispatcher pushes it when it is due), or held by a
        // pause (the resume pushes it).
        return Ok(op);
    }
    if let Err(e) = state.queue.push(kind, &op.id).await {
        tracing::warn!(operation = %op.id, error = format!("{e:#}"), "queue push failed; the dispatcher will push it");
        if let Err(e) = dispatch::clear_pushed(&state.db, &op.id).await {
            // Still marked: the dispatcher re-pushes it after CONTEXT_OPS_REPUSH_AFTER_MS.
            tracing::warn!(operation = %op.id, error = %e, "could not clear the push mark");
        }
    }
    Ok(op)
}

/// 202 with `Location`, `Retry-After` (while live), and the body given.
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
