//! Listing operations (`GET …/operations`: newest first, cursor-paged, filtered by kind,
//! state, creation time and id prefix; admins may list another tenant or every tenant) and
//! bulk actions over a filter (`POST …/operations/bulk`: cancel, retry or forget every
//! match; a filter is required, and each call says how many it matched and changed).

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::error::{ApiJson, ApiResult, AppError};
use crate::http::extract::{ApiQuery, decode_list_cursor};
use crate::http::openapi::errors::{BodyErrors, Forbidden, ParamErrors};
use crate::store::now_ms;
use crate::store::operations::transitions::{self, BulkAction, BulkFilter};
use crate::store::operations::{self as ops, ListFilter};
use context_jobs::contract::{
    CONTEXT_OPERATIONS_PATH, ContextOperationKind, ContextOperationState, ListCursor, clamp_page_size,
};
use context_jobs::ids::OperationId;
use context_jobs::operation::view::OperationList;

pub const BULK_PATH: &str = "/internal/v1/context/operations/bulk";

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list)).routes(routes!(bulk))
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

#[derive(Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this kind.
    #[param(value_type = Option<ContextOperationKind>)]
    kind: Option<String>,
    /// Only this state.
    #[param(value_type = Option<ContextOperationState>)]
    state: Option<String>,
    /// The `nextCursor` of the previous page.
    cursor: Option<String>,
    /// Page size (default 50, at most 500).
    limit: Option<usize>,
    /// Another tenant's operations (`tenantId/projectId`), or every tenant's (`*`): admins only.
    tenant: Option<String>,
    /// Created at or after this time (epoch ms).
    created_after_ms: Option<i64>,
    /// Created before this time (epoch ms).
    created_before_ms: Option<i64>,
    /// The start of an operation id.
    q: Option<String>,
}

/// The caller's operations, newest first, filtered and cursor-paged (an admin may list
/// another tenant's or every tenant's).
#[utoipa::path(
    get,
    path = CONTEXT_OPERATIONS_PATH,
    operation_id = "listOperations",
    tag = "operations",
    params(ListQuery),
    responses((status = 200, description = "One page.", body = OperationList), ParamErrors, Forbidden),
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<ApiJson<OperationList>> {
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
    Ok(ApiJson(OperationList { items: rows.iter().map(|r| r.to_view(now)).collect(), next_cursor: next }))
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BulkRequest {
    action: BulkAction,
    filter: BulkFilterBody,
    /// Count what would change, change nothing.
    #[serde(default)]
    dry_run: bool,
}

/// Which operations: at least one part is required; every part given must hold.
#[derive(Deserialize, Default, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BulkFilterBody {
    #[schema(value_type = Option<ContextOperationKind>)]
    kind: Option<String>,
    #[schema(value_type = Option<ContextOperationState>)]
    state: Option<String>,
    /// Another tenant (`tenantId/projectId`) or every tenant (`*`): admins only.
    tenant: Option<String>,
    created_after_ms: Option<i64>,
    created_before_ms: Option<i64>,
}

/// What a bulk action did.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct BulkResponse {
    action: BulkAction,
    dry_run: bool,
    matched: u64,
    changed: u64,
}

/// Cancel, retry or forget every operation a filter matches (a filter is required;
/// `dryRun` counts without changing anything).
#[utoipa::path(
    post,
    path = BULK_PATH,
    operation_id = "bulkOperations",
    tag = "operations",
    request_body = BulkRequest,
    responses((status = 200, description = "Matched and changed counts.", body = BulkResponse), BodyErrors, Forbidden),
)]
async fn bulk(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<BulkRequest>,
) -> ApiResult<ApiJson<BulkResponse>> {
    let action = request.action;
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
