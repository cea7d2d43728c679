//! Listing operations (`GET …/operations`: newest first, cursor-paged, filtered by kind,
//! state, creation time and id prefix; admins may list another tenant or every tenant) and
//! bulk actions over a filter (`POST …/operations/bulk`: cancel, retry or forget every
//! match; a filter is required, and each call says how many it matched and changed).

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::{Deserialize, Serialize};

use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::error::{ApiJson, ApiResult, AppError};
use crate::http::extract::{ApiQuery, decode_list_cursor};
use crate::store::now_ms;
use crate::store::operations::transitions::{self, BulkAction, BulkFilter};
use crate::store::operations::{self as ops, ListFilter};
use context_jobs::contract::{
    CONTEXT_OPERATIONS_PATH, ContextOperationKind, ContextOperationState, ListCursor, clamp_page_size,
};
use context_jobs::ids::OperationId;
use context_jobs::operation::view::OperationList;

pub fn routes() -> Router<AppState> {
    Router::new().route(&format!("{CONTEXT_OPERATIONS_PATH}/bulk"), post(bulk))
}

fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

pub(super) fn parse_kind(k: &str) -> ApiResult<ContextOperationKind> {
    ContextOperationKind::parse(k).ok_or_else(|| AppError::BadRequest(format!("unknown kind {:?}", truncate(k))))
}

pub(super) fn parse_state(s: &str) -> ApiResult<ContextOperationState> {
    ContextOperationState::parse(s).ok_or_else(|| AppError::BadRequest(format!("unknown state {:?}", truncate(s))))
}

/// An id prefix is upper-case ULID text (Crockford base32): anything else matches nothing.
fn id_prefix(q: &str) -> ApiResult<String> {
    let prefix = q.trim().to_ascii_uppercase();
    if prefix.is_empty() || prefix.len() > 26 || !prefix.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(AppError::BadRequest("q must be the start of an operation id (1-26 letters and digits)".into()));
    }
    Ok(prefix)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListQuery {
    kind: Option<String>,
    state: Option<String>,
    cursor: Option<String>,
    limit: Option<usize>,
    tenant: Option<String>,
    created_after_ms: Option<i64>,
    created_before_ms: Option<i64>,
    /// The start of an operation id.
    q: Option<String>,
}

pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<Response> {
    let tenant = caller.scope(q.tenant.as_deref())?;
    let kind = q.kind.as_deref().map(parse_kind).transpose()?;
    let op_state = q.state.as_deref().map(parse_state).transpose()?;
    let prefix = q.q.as_deref().map(id_prefix).transpose()?;
    let cursor = q.cursor.as_deref().map(|c| decode_list_cursor::<OperationId>(c, "operations")).transpose()?;
    let limit = clamp_page_size(q.limit);
    let filter = ListFilter {
        tenant: tenant.as_ref(),
        kind,
        state: op_state,
        created_after_ms: q.created_after_ms,
        created_before_ms: q.created_before_ms,
        id_prefix: prefix.as_deref(),
        before: cursor.as_ref().map(|(t, id)| (*t, id)),
        limit,
    };
    let mut rows = ops::list(&state.db, &filter).await?;
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next = more.then(|| rows.last().map(|r| ListCursor::encode(r.created_at_ms, r.id.as_str()))).flatten();
    let now = now_ms();
    Ok(ApiJson(OperationList { items: rows.iter().map(|r| r.to_view(now)).collect(), next_cursor: next })
        .into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BulkRequest {
    /// `cancel`, `retry` or `forget`.
    action: String,
    filter: BulkFilterBody,
    /// Count what would change, change nothing.
    #[serde(default)]
    dry_run: bool,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BulkFilterBody {
    kind: Option<String>,
    state: Option<String>,
    tenant: Option<String>,
    created_after_ms: Option<i64>,
    created_before_ms: Option<i64>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BulkResponse {
    action: String,
    dry_run: bool,
    matched: u64,
    changed: u64,
}

async fn bulk(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<BulkRequest>,
) -> ApiResult<ApiJson<BulkResponse>> {
    let action = match request.action.as_str() {
        "cancel" => BulkAction::Cancel,
        "retry" => BulkAction::Retry,
        "forget" => BulkAction::Forget,
        other => {
            return Err(AppError::BadRequest(format!("unknown action {:?}: cancel, retry or forget", truncate(other))));
        }
    };
    let f = request.filter;
    if f.kind.is_none()
        && f.state.is_none()
        && f.tenant.is_none()
        && f.created_after_ms.is_none()
        && f.created_before_ms.is_none()
    {
        return Err(AppError::BadRequest(
            "a bulk action needs a filter: kind, state, tenant, createdAfterMs or createdBeforeMs".into(),
        ));
    }
    let filter = BulkFilter {
        tenant: caller.scope(f.tenant.as_deref())?,
        kind: f.kind.as_deref().map(parse_kind).transpose()?,
        state: f.state.as_deref().map(parse_state).transpose()?,
        created_after_ms: f.created_after_ms,
        created_before_ms: f.created_before_ms,
    };
    let now = now_ms();
    let scheduling = state.scheduling.clone();
    let plan = |kind: &str, request: &str| {
        let kind = ContextOperationKind::parse(kind)?;
        let entry = crate::kinds::entry_of(kind);
        let request = serde_json::from_str(request).ok()?;
        let effect = (entry.effect)(&request)?;
        let timeout = scheduling.default_timeout_ms.get(kind).map(|t| t as i64);
        let schedule = context_jobs::operation::SubmitOptions::default().resolve(now, timeout).ok()?;
        Some((entry.resumable, schedule, effect))
    };
    // Retried work is unpushed: the dispatcher's next round pushes it.
    let outcome = transitions::bulk(&state.db, action, &filter, request.dry_run, plan).await?;
    if outcome.changed > 0 {
        state.changes.committed_many(filter.tenant.as_ref());
    }
    Ok(ApiJson(BulkResponse {
        action: request.action,
        dry_run: request.dry_run,
        matched: outcome.matched,
        changed: outcome.changed,
    }))
}
