//! The operations resource. Contract paths: `conversations/delete`, `conversations/retention`,
//! `operations` (POST `{operationId}`), `maintenance/status`. Beside them, REST-style
//! extras returning the same JSON: `GET operations/{id}` (ETag, 304, Retry-After),
//! `GET operations/{id}/wait` (long poll), `GET operations` (cursor-paged list),
//! `POST operations/{id}/cancel`, `DELETE operations/{id}` (forget), and
//! `POST advanced-operations` (generic submission by kind).

use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use serde_json::json;

use super::submit::{idempotency_key, submit_operation, submitted_response};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{ApiJson, ApiResult, AppError};
use crate::store::maintenance;
use crate::store::now_ms;
use crate::store::operations::{self as ops, ListFilter, OperationRow, SubmitEffect};
use crate::worker::retention::SWEEP_NAME;
use context_jobs::contract::{
    CONTEXT_ADVANCED_OPERATIONS_PATH, CONTEXT_OPERATIONS_PATH, CONVERSATION_DELETE_PATH, ContextMaintenanceStatus,
    ContextOperationKind, ContextOperationState, DeleteConversationRequest, DeletionOperation,
    GetContextOperationRequest, MAINTENANCE_STATUS_PATH, RETENTION_PATH, RetentionRequest, clamp_page_size,
    validate_scope,
};
use context_jobs::operation::{OperationRequest, etag, retry_after_secs};
use context_jobs::retention::validate_policy;

const MAX_WAIT_MS: u64 = 30_000;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route(CONVERSATION_DELETE_PATH, post(delete_conversation))
        .route(RETENTION_PATH, post(retention))
        .route(CONTEXT_OPERATIONS_PATH, post(get_by_body).get(list))
        .route(&format!("{CONTEXT_OPERATIONS_PATH}/{{id}}"), get(get_one).delete(forget))
        .route(&format!("{CONTEXT_OPERATIONS_PATH}/{{id}}/wait"), get(wait))
        .route(&format!("{CONTEXT_OPERATIONS_PATH}/{{id}}/cancel"), post(cancel))
        .route(CONTEXT_ADVANCED_OPERATIONS_PATH, post(advanced))
        .route(MAINTENANCE_STATUS_PATH, get(maintenance).post(maintenance))
}

/// Operation ids are ULIDs; anything else is malformed input, not an unknown id.
pub fn parse_operation_id(id: &str) -> ApiResult<&str> {
    if id.len() == 26 && ulid::Ulid::from_string(id).is_ok() {
        Ok(id)
    } else {
        Err(AppError::BadRequest(format!("malformed operation id {:?}", truncate(id))))
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

pub async fn load(state: &AppState, caller: &Caller, id: &str) -> ApiResult<OperationRow> {
    let id = parse_operation_id(id)?;
    ops::get(&state.db, &caller.tenant, id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("operation {id} not found")))
}

/// The operation as JSON with its polling headers: ETag always, Retry-After while live.
pub fn operation_response(status: StatusCode, op: &OperationRow) -> Response {
    let view = op.to_contract(now_ms());
    let mut response = (status, ApiJson(&view)).into_response();
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag(&op.id, view.version)) {
        headers.insert(header::ETAG, v);
    }
    if let Some(ms) = view.next_poll_after_ms {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs(ms)));
    }
    response
}

async fn delete_conversation(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(request): ApiJson<DeleteConversationRequest>,
) -> ApiResult<Response> {
    validate_scope(&request.scope).map_err(AppError::BadRequest)?;
    let conversation_id = request.scope.conversation_id.clone();
    let payload = OperationRequest::Delete { conversation_id: conversation_id.clone(), reason: request.reason };
    let effect = SubmitEffect::MarkDeleting { conversation_id: &conversation_id };
    let key = idempotency_key(&headers)?;
    let op = submit_operation(&state, &caller, ContextOperationKind::Delete, &payload, key.as_deref(), effect).await?;
    let view = op.to_contract(now_ms());
    let body = DeletionOperation {
        id: view.id.clone(),
        state: view.state.as_str().to_string(),
        deleted_messages: view.processed,
        created_at_ms: view.created_at_ms,
        next_poll_after_ms: view.next_poll_after_ms,
        error_code: view.error_code.clone(),
    };
    Ok(submitted_response(&op, ApiJson(body).into_response()))
}

async fn retention(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(request): ApiJson<RetentionRequest>,
) -> ApiResult<Response> {
    validate_scope(&request.scope).map_err(AppError::BadRequest)?;
    validate_policy(&request.policy).map_err(AppError::BadRequest)?;
    let payload =
        OperationRequest::Retention { conversation_id: request.scope.conversation_id, policy: request.policy };
    let key = idempotency_key(&headers)?;
    let op = submit_operation(
        &state,
        &caller,
        ContextOperationKind::Retention,
        &payload,
        key.as_deref(),
        SubmitEffect::None,
    )
    .await?;
    Ok(submitted_response(&op, operation_response(StatusCode::ACCEPTED, &op)))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AdvancedRequest {
    kind: String,
    request: serde_json::Value,
    #[serde(default)]
    idempotency_key: Option<String>,
}

/// Generic submission: `{kind, request, idempotencyKey?}` where `request` is the body the
/// kind's own endpoint takes. Same validation, same result.
async fn advanced(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(body): ApiJson<AdvancedRequest>,
) -> ApiResult<Response> {
    let kind = ContextOperationKind::parse(&body.kind)
        .ok_or_else(|| AppError::BadRequest(format!("unknown operation kind {:?}", truncate(&body.kind))))?;
    let mut key = match body.idempotency_key {
        Some(k) => Some(super::submit::validate_key(k)?),
        None => idempotency_key(&headers)?,
    };
    let bad = |e: serde_json::Error| AppError::BadRequest(format!("invalid request for kind {}: {e}", kind.as_str()));
    let (payload, conversation) = match kind {
        ContextOperationKind::Delete => {
            let r: DeleteConversationRequest = serde_json::from_value(body.request).map_err(bad)?;
            validate_scope(&r.scope).map_err(AppError::BadRequest)?;
            let c = r.scope.conversation_id.clone();
            (OperationRequest::Delete { conversation_id: c.clone(), reason: r.reason }, Some(c))
        }
        ContextOperationKind::Retention => {
            let r: RetentionRequest = serde_json::from_value(body.request).map_err(bad)?;
            validate_scope(&r.scope).map_err(AppError::BadRequest)?;
            validate_policy(&r.policy).map_err(AppError::BadRequest)?;
            (OperationRequest::Retention { conversation_id: r.scope.conversation_id, policy: r.policy }, None)
        }
        ContextOperationKind::Inference => {
            let s = serde_json::from_value(body.request).map_err(bad)?;
            (super::inference::prepare(&state, &caller, s).await?, None)
        }
        ContextOperationKind::RebuildVector => {
            let r = serde_json::from_value(body.request).map_err(bad)?;
            (super::recall::rebuild_payload(r), None)
        }
        ContextOperationKind::Export => {
            let r = serde_json::from_value(body.request).map_err(bad)?;
            (super::transfers::export_payload(r), None)
        }
        ContextOperationKind::Import => {
            let r = serde_json::from_value(body.request).map_err(bad)?;
            let (payload, request_key) = super::transfers::import_payload(&state, &caller, r).await?;
            if key.as_deref().is_some_and(|outer| outer != request_key) {
                return Err(AppError::BadRequest(
                    "two different idempotency keys: the request's idempotencyKey is the one".into(),
                ));
            }
            key = Some(request_key);
            (payload, None)
        }
    };
    let effect = match &conversation {
        Some(c) => SubmitEffect::MarkDeleting { conversation_id: c },
        None => SubmitEffect::None,
    };
    let op = submit_operation(&state, &caller, kind, &payload, key.as_deref(), effect).await?;
    Ok(submitted_response(&op, operation_response(StatusCode::ACCEPTED, &op)))
}

async fn get_by_body(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<GetContextOperationRequest>,
) -> ApiResult<Response> {
    let op = load(&state, &caller, &request.operation_id).await?;
    Ok(operation_response(StatusCode::OK, &op))
}

async fn get_one(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let op = load(&state, &caller, &id).await?;
    let tag = etag(&op.id, op.version.max(0) as u64);
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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WaitQuery {
    /// Return as soon as the version differs from this (default: the current version).
    since_version: Option<i64>,
    timeout_ms: Option<u64>,
}

/// Long poll: answers as soon as the operation's version changes (or it is terminal),
/// or after `timeoutMs` (capped at 30 s) with the unchanged operation.
async fn wait(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    query: Result<Query<WaitQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let Query(query) = query.map_err(|e| AppError::BadRequest(e.body_text()))?;
    // Watching before the first read: a change committed after the read wakes us (from this
    // process, or on PostgreSQL from any; anything else is seen by the periodic re-read).
    let watch = crate::store::changes::Watch::new(parse_operation_id(&id)?);
    let mut changed = watch.armed();
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(query.timeout_ms.unwrap_or(MAX_WAIT_MS).min(MAX_WAIT_MS));
    let mut current = until_readable(deadline, || load(&state, &caller, &id)).await?;
    let since = query.since_version.unwrap_or(current.version);
    while current.version == since && !current.state.is_terminal() {
        let now = tokio::time::Instant::now();
        if now >= deadline {
            break;
        }
        let notified = tokio::select! {
            () = &mut changed => true,
            () = tokio::time::sleep(Duration::from_millis(state.config.wait_recheck_ms).min(deadline - now)) => false,
            // Shutting down: answer now (the client polls again) rather than hold the
            // HTTP server's graceful drain for up to the whole wait.
            () = state.shutdown.cancelled() => break,
        };
        changed = watch.armed();
        // Woken: read the row. Timed out: a cheap version check first. A read that fails
        // transiently (SQLite busy, say) is no news: the wait goes on and reads again.
        let moved = notified
            || match ops::version(&state.db, &caller.tenant, &current.id).await {
                Ok(Some(v)) => v != current.version,
                Ok(None) => true,
                Err(e) if is_transient_store(&e) => false,
                Err(e) => return Err(e.into()),
            };
        if moved {
            match load(&state, &caller, &current.id).await {
                Ok(op) => current = op,
                Err(AppError::Unavailable(e)) => {
                    tracing::debug!(error = format!("{e:#}"), "long-poll re-read failed; reading again");
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(operation_response(StatusCode::OK, &current))
}

/// Read with `read` until it succeeds, a non-transient error, or `deadline`: a long-poll
/// may wait out a momentary database hiccup instead of answering 503.
async fn until_readable<F, Fut>(deadline: tokio::time::Instant, read: F) -> ApiResult<OperationRow>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ApiResult<OperationRow>>,
{
    loop {
        match read().await {
            Err(AppError::Unavailable(e)) if tokio::time::Instant::now() < deadline => {
                tracing::debug!(error = format!("{e:#}"), "long-poll read failed; reading again");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

fn is_transient_store(e: &crate::store::StoreError) -> bool {
    matches!(e, crate::store::StoreError::Db(db) if crate::store::is_transient(db))
}

async fn cancel(State(state): State<AppState>, caller: Caller, Path(id): Path<String>) -> ApiResult<Response> {
    let id = parse_operation_id(&id)?;
    let (op, cancelled_now) = ops::cancel(&state.db, &caller.tenant, id).await?;
    let op = op.ok_or_else(|| AppError::NotFound(format!("operation {id} not found")))?;
    if cancelled_now {
        metrics::counter!(crate::metrics::OPERATIONS_FINISHED, "kind" => op.kind.as_str(), "outcome" => "cancelled")
            .increment(1);
    }
    Ok(operation_response(StatusCode::OK, &op))
}

async fn forget(State(state): State<AppState>, caller: Caller, Path(id): Path<String>) -> ApiResult<StatusCode> {
    let id = parse_operation_id(&id)?;
    ops::forget(&state.db, &caller.tenant, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ListQuery {
    kind: Option<String>,
    state: Option<String>,
    cursor: Option<String>,
    limit: Option<usize>,
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let Query(q) = query.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let kind = q
        .kind
        .as_deref()
        .map(|k| {
            ContextOperationKind::parse(k)
                .ok_or_else(|| AppError::BadRequest(format!("unknown kind {:?}", truncate(k))))
        })
        .transpose()?;
    let op_state = q
        .state
        .as_deref()
        .map(|s| {
            ContextOperationState::parse(s)
                .ok_or_else(|| AppError::BadRequest(format!("unknown state {:?}", truncate(s))))
        })
        .transpose()?;
    let cursor = q.cursor.as_deref().map(decode_cursor).transpose()?;
    let limit = clamp_page_size(q.limit);
    let filter = ListFilter { kind, state: op_state, before: cursor.as_ref().map(|(t, id)| (*t, id.as_str())), limit };
    let mut rows = ops::list(&state.db, &caller.tenant, &filter).await?;
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next = more.then(|| rows.last().map(|r| encode_cursor(r.created_at_ms, &r.id))).flatten();
    let now = now_ms();
    let items: Vec<_> = rows.iter().map(|r| r.to_contract(now)).collect();
    let mut body = json!({"items": items});
    if let Some(next) = next {
        body["nextCursor"] = json!(next);
    }
    Ok(ApiJson(body).into_response())
}

fn encode_cursor(created_at_ms: i64, id: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{created_at_ms}:{id}"))
}

fn decode_cursor(s: &str) -> ApiResult<(i64, String)> {
    let bad = || AppError::BadRequest("invalid operations cursor".into());
    let raw = URL_SAFE_NO_PAD.decode(s).map_err(|_| bad())?;
    let text = String::from_utf8(raw).map_err(|_| bad())?;
    let (at, id) = text.split_once(':').ok_or_else(bad)?;
    let at: i64 = at.parse().map_err(|_| bad())?;
    parse_operation_id(id).map_err(|_| bad())?;
    Ok((at, id.to_string()))
}

/// Retention-sweep and projector figures are global (counts only, no tenant data); the
/// index watermark is the caller's tenant's.
async fn maintenance(State(state): State<AppState>, caller: Caller) -> ApiResult<ApiJson<ContextMaintenanceStatus>> {
    let (last, processed) = maintenance::status(&state.db, SWEEP_NAME).await?;
    let (projector_last, projector_processed) =
        maintenance::status(&state.db, crate::worker::projector::PROJECTOR_NAME).await?;
    let watermark = crate::store::vectors::watermark(&state.db, &caller.tenant).await?;
    Ok(ApiJson(ContextMaintenanceStatus {
        projector_last_run_ms: projector_last,
        projector_processed: projector_processed.max(0) as u64,
        retention_last_run_ms: last,
        retention_processed: processed.max(0) as u64,
        index_watermark: Some(watermark),
    }))
}
