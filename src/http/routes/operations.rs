//! The operation resource. Contract paths: `operations` (POST `{operationId}`) and
//! `maintenance/status`, answered in the contract's vocabulary
//! (`context_jobs::operation::contract_form`); submissions are in `super::submissions` and
//! beside each kind's own endpoint. REST-style extras returning the same JSON in the full
//! vocabulary: `GET operations/{id}` (ETag, 304, Retry-After), `POST operations/{id}/cancel`,
//! `POST operations/{id}/retry`, and `DELETE operations/{id}` (forget). The long poll is
//! `super::long_poll`, the listing and bulk actions `super::listing`.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::submit::submitted_response;
use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::body::OptionalJson;
use crate::http::error::{ApiJson, ApiResult, AppError};
use crate::http::extract::IdPath;
use crate::http::openapi::errors::{AuthErrors, BodyErrors, Conflict, NotFound, ParamErrors};
use crate::http::openapi::schemas::ContractOperationView;
use crate::store::operations::{self as ops, OperationRow, SubmitEffect, dispatch, transitions};
use crate::store::{maintenance, now_ms};
use context_jobs::contract::schema::Ulid;
use context_jobs::contract::{
    CONTEXT_OPERATIONS_PATH, ContextMaintenanceStatus, GetContextOperationRequest, MAINTENANCE_STATUS_PATH,
};
use context_jobs::ids::OperationId;
use context_jobs::operation::contract_form::contract_form;
use context_jobs::operation::view::OperationView;
use context_jobs::operation::{SubmitOptions, Transition, etag, retry_after_secs};

/// One operation (REST form), and what can be done to it.
pub const OPERATION_PATH: &str = "/internal/v1/context/operations/{id}";
pub const OPERATION_CANCEL_PATH: &str = "/internal/v1/context/operations/{id}/cancel";
pub const OPERATION_RETRY_PATH: &str = "/internal/v1/context/operations/{id}/retry";

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_by_body))
        .routes(routes!(get_one, forget))
        .routes(routes!(cancel))
        .routes(routes!(retry))
        .routes(routes!(maintenance_get, maintenance_post))
}

pub async fn load(state: &AppState, caller: &Caller, id: &OperationId) -> ApiResult<OperationRow> {
    ops::get(&state.db, &caller.tenant, id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("operation {id} not found")))
}

/// The operation as JSON with its polling headers: ETag always, Retry-After while live —
/// in the full vocabulary (the REST forms and this service's own paths).
pub fn operation_response(status: StatusCode, op: &OperationRow) -> Response {
    respond(status, op, op.to_view(now_ms()))
}

/// The operation on one of the contract's own paths: in the contract's vocabulary
/// (`context_jobs::operation::contract_form`), so a client built on the contract's DTOs
/// parses it whatever the kind and state.
pub fn contract_operation_response(status: StatusCode, op: &OperationRow) -> Response {
    let mut view = op.to_view(now_ms());
    view.operation = contract_form(view.operation);
    respond(status, op, view)
}

fn respond(status: StatusCode, op: &OperationRow, view: OperationView) -> Response {
    let mut response = (status, ApiJson(&view)).into_response();
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag(op.id.as_str(), view.operation.version)) {
        headers.insert(header::ETAG, v);
    }
    if let Some(ms) = view.operation.next_poll_after_ms {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs(ms)));
    }
    response
}

/// An operation by id (the contract's form: its vocabulary).
#[utoipa::path(
    post,
    path = CONTEXT_OPERATIONS_PATH,
    operation_id = "getOperationByBody",
    tag = "operations",
    request_body = GetContextOperationRequest,
    responses(
        (status = 200, description = "The operation.", body = ContractOperationView,
         headers(("ETag" = String, description = "`\"{id}.{version}\"`: changes with every change of the operation."),
                 ("Retry-After" = u64, description = "Seconds before polling again, while it is not finished."))),
        BodyErrors,
        NotFound,
    ),
)]
async fn get_by_body(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<GetContextOperationRequest>,
) -> ApiResult<Response> {
    let id = OperationId::parse(&request.operation_id)?;
    let op = load(&state, &caller, &id).await?;
    Ok(contract_operation_response(StatusCode::OK, &op))
}

/// An operation by id, with `ETag`; `If-None-Match` with the current tag answers 304.
#[utoipa::path(
    get,
    path = OPERATION_PATH,
    operation_id = "getOperation",
    tag = "operations",
    params(
        ("id" = Ulid, Path, description = "The operation's id (a ULID)."),
        ("If-None-Match" = Option<String>, Header, description = "An `ETag` seen before: 304 while it is still current."),
    ),
    responses(
        (status = 200, description = "The operation.", body = OperationView,
         headers(("ETag" = String, description = "`\"{id}.{version}\"`: changes with every change of the operation."),
                 ("Retry-After" = u64, description = "Seconds before polling again, while it is not finished."))),
        (status = 304, description = "Unchanged since the `If-None-Match` tag.",
         headers(("ETag" = String, description = "The current tag."))),
        ParamErrors,
        NotFound,
    ),
)]
async fn get_one(
    State(state): State<AppState>,
    caller: Caller,
    IdPath(id): IdPath<OperationId>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let op = load(&state, &caller, &id).await?;
    let tag = etag(op.id.as_str(), op.version.max(0) as u64);
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
    if matches {
        let mut response = operation_response(StatusCode::NOT_MODIFIED, &op);
        *response.body_mut() = axum::body::Body::empty();
        response.headers_mut().remove(header::CONTENT_TYPE);
        return Ok(response);
    }
    Ok(operation_response(StatusCode::OK, &op))
}

/// Cancel (idempotent): a queued operation is cancelled at once, a running one stops at its
/// next batch boundary; a finished one stays as it is.
#[utoipa::path(
    post,
    path = OPERATION_CANCEL_PATH,
    operation_id = "cancelOperation",
    tag = "operations",
    params(("id" = Ulid, Path, description = "The operation's id (a ULID).")),
    responses(
        (status = 200, description = "The operation after the request.", body = OperationView,
         headers(("ETag" = String, description = "`\"{id}.{version}\"`: changes with every change of the operation."),
                 ("Retry-After" = u64, description = "Seconds before polling again, while it is not finished."))),
        ParamErrors,
        NotFound,
    ),
)]
async fn cancel(State(state): State<AppState>, caller: Caller, IdPath(id): IdPath<OperationId>) -> ApiResult<Response> {
    let cancelled_now = transitions::cancel(&state.db, &caller.tenant, &id).await?;
    state.changes.committed(&id, &caller.tenant);
    let op = load(&state, &caller, &id).await?;
    if let (true, Some(outcome)) = (cancelled_now, Transition::CancelQueued.outcome()) {
        metrics::counter!(crate::metrics::OPERATIONS_FINISHED, "kind" => op.kind.as_str(), "outcome" => outcome)
            .increment(1);
    }
    Ok(operation_response(StatusCode::OK, &op))
}

/// Retry a `failed` or `cancelled` operation: back to `queued` with a fresh attempt budget,
/// resuming from its checkpoint where its kind can (else from the start). The body may give
/// new scheduling options (`priority`, `deadlineMs`, `timeoutMs`, `notBeforeMs`).
#[utoipa::path(
    post,
    path = OPERATION_RETRY_PATH,
    operation_id = "retryOperation",
    tag = "operations",
    params(("id" = Ulid, Path, description = "The operation's id (a ULID).")),
    request_body(content = Option<SubmitOptions>, description = "New scheduling options (optional; no body: the defaults)."),
    responses(
        (status = 202, description = "Queued again.", body = OperationView,
         headers(("Location" = String, description = "The operation: `…/operations/{id}`."),
                 ("Retry-After" = u64, description = "Seconds before polling, while it is not finished."),
                 ("ETag" = String, description = "`\"{id}.{version}\"`: changes with every change of the operation."))),
        ParamErrors,
        NotFound,
        Conflict,
    ),
)]
async fn retry(
    State(state): State<AppState>,
    caller: Caller,
    IdPath(id): IdPath<OperationId>,
    OptionalJson(options): OptionalJson<SubmitOptions>,
) -> ApiResult<Response> {
    let op = load(&state, &caller, &id).await?;
    let entry = crate::kinds::entry_of(op.kind);
    let default_timeout = state.scheduling.default_timeout_ms.get(op.kind).map(|t| t as i64);
    let schedule = options.resolve(now_ms(), default_timeout).map_err(AppError::BadRequest)?;
    let effect = (entry.effect)(&super::operation_request::stored_request(&op)?).unwrap_or(SubmitEffect::None);
    if !transitions::requeue(&state.db, &caller.tenant, &id, entry.resumable, &schedule, &effect, true).await? {
        return Err(AppError::Conflict(format!(
            "operation {id} is {}; only a failed or cancelled operation can be retried",
            op.state.as_str()
        )));
    }
    state.changes.committed(&id, &caller.tenant);
    let op = load(&state, &caller, &id).await?;
    if op.not_before_ms <= now_ms()
        && let Err(e) = state.queue.push(op.kind, &op.id).await
    {
        tracing::warn!(operation = %op.id, error = format!("{e:#}"), "queue push failed; the dispatcher will push it");
        dispatch::clear_pushed(&state.db, &op.id).await?;
    }
    Ok(submitted_response(&op, operation_response(StatusCode::ACCEPTED, &op)))
}

/// Forget a finished operation (its row; its artifact stays until it expires or is deleted).
#[utoipa::path(
    delete,
    path = OPERATION_PATH,
    operation_id = "forgetOperation",
    tag = "operations",
    params(("id" = Ulid, Path, description = "The operation's id (a ULID).")),
    responses((status = 204, description = "Forgotten."), ParamErrors, NotFound, Conflict),
)]
async fn forget(
    State(state): State<AppState>,
    caller: Caller,
    IdPath(id): IdPath<OperationId>,
) -> ApiResult<StatusCode> {
    dispatch::forget(&state.db, &caller.tenant, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Retention-sweep and projector figures are global (counts only, no tenant data); the
/// index watermark is the caller's tenant's.
#[utoipa::path(
    get,
    path = MAINTENANCE_STATUS_PATH,
    operation_id = "maintenanceStatus",
    tag = "operations",
    responses((status = 200, description = "Maintenance figures.", body = ContextMaintenanceStatus), AuthErrors),
)]
async fn maintenance_get(state: State<AppState>, caller: Caller) -> ApiResult<ApiJson<ContextMaintenanceStatus>> {
    maintenance(state, caller).await
}

/// The contract's form of the same read (a POST; any body is ignored).
#[utoipa::path(
    post,
    path = MAINTENANCE_STATUS_PATH,
    operation_id = "maintenanceStatusByPost",
    tag = "operations",
    responses((status = 200, description = "Maintenance figures.", body = ContextMaintenanceStatus), AuthErrors),
)]
async fn maintenance_post(state: State<AppState>, caller: Caller) -> ApiResult<ApiJson<ContextMaintenanceStatus>> {
    maintenance(state, caller).await
}

async fn maintenance(State(state): State<AppState>, caller: Caller) -> ApiResult<ApiJson<ContextMaintenanceStatus>> {
    let (last, processed) = maintenance::status(&state.db, maintenance::RETENTION_SWEEP).await?;
    let (projector_last, projector_processed) = maintenance::status(&state.db, maintenance::PROJECTOR).await?;
    let watermark = crate::store::vectors::watermark(&state.db, &caller.tenant).await?;
    Ok(ApiJson(ContextMaintenanceStatus {
        projector_last_run_ms: projector_last,
        projector_processed: projector_processed.max(0) as u64,
        retention_last_run_ms: last,
        retention_processed: processed.max(0) as u64,
        index_watermark: Some(watermark),
    }))
}
