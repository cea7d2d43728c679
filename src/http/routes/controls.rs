//! Queue controls and status: `GET …/queues` (per kind: queued, running, recent outcomes,
//! queue wait and run time percentiles, throughput by minute, pauses, limits — the
//! caller's own operations, or every tenant's for an admin), and pausing or resuming a
//! kind for everyone or one tenant (`POST …/queues/{kind}/pause|resume`, admin only).

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::http::AppState;
use crate::http::auth::{Caller, parse_tenant};
use crate::http::body::OptionalJson;
use crate::http::error::{ApiJson, ApiResult, AppError};
use crate::http::extract::{ApiQuery, IdPath, PathId};
use crate::http::openapi::errors::{Forbidden, ParamErrors};
use crate::store::now_ms;
use crate::store::operations::controls::{self, KindFigures};
use crate::store::operations::transitions;
use crate::store::operations::transitions::OWNER_SILENCE_MS;
use context_jobs::contract::ContextOperationKind;

pub const QUEUES_PATH: &str = "/internal/v1/context/queues";
pub const QUEUE_PAUSE_PATH: &str = "/internal/v1/context/queues/{kind}/pause";
pub const QUEUE_RESUME_PATH: &str = "/internal/v1/context/queues/{kind}/resume";

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(status)).routes(routes!(pause)).routes(routes!(resume))
}

impl PathId for ContextOperationKind {
    fn from_path(segment: &str) -> Result<Self, AppError> {
        ContextOperationKind::parse(segment).ok_or_else(|| {
            AppError::BadRequest(format!("unknown kind {:?}", segment.chars().take(64).collect::<String>()))
        })
    }
}

/// p50 and p95 of ascending samples (milliseconds).
#[derive(Serialize, ToSchema)]
struct Percentiles {
    #[schema(required = true)]
    p50: Option<i64>,
    #[schema(required = true)]
    p95: Option<i64>,
}

fn percentiles(sorted: &[i64]) -> Percentiles {
    let at = |q: f64| (!sorted.is_empty()).then(|| sorted[((sorted.len() - 1) as f64 * q).round() as usize]);
    Percentiles { p50: at(0.50), p95: at(0.95) }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct KindStatus {
    kind: ContextOperationKind,
    /// Paused for everyone.
    paused: bool,
    /// Tenants it is paused for (admins see every one; a tenant sees its own).
    paused_tenants: Vec<String>,
    queued: u64,
    running: u64,
    succeeded_last_hour: u64,
    failed_last_hour: u64,
    cancelled_last_hour: u64,
    retries_last_hour: u64,
    recoveries_last_hour: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    oldest_queued_age_ms: Option<i64>,
    queue_wait_ms: Percentiles,
    run_ms: Percentiles,
    /// Operations finished per minute over the last hour, oldest first.
    finished_per_minute: Vec<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    max_running: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    max_running_per_tenant: Option<u64>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct Worker {
    holder: String,
    started_at_ms: i64,
    seen_at_ms: i64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct QueuesStatus {
    /// `tenant`: the caller's operations; `all`: every tenant's (admins).
    #[schema(value_type = String)]
    scope: &'static str,
    kinds: Vec<KindStatus>,
    /// Live worker processes (admins).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    workers: Option<Vec<Worker>>,
}

#[derive(Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct StatusQuery {
    /// An admin may narrow the figures to one tenant.
    tenant: Option<String>,
}

/// Per kind: queued, running, the last hour's outcomes, waits, run times, throughput,
/// pauses and limits — over the caller's operations, or every tenant's for an admin.
#[utoipa::path(
    get,
    path = QUEUES_PATH,
    operation_id = "queueStatus",
    tag = "queues",
    params(StatusQuery),
    responses((status = 200, description = "Figures per kind.", body = QueuesStatus), ParamErrors, Forbidden),
)]
async fn status(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<StatusQuery>,
) -> ApiResult<ApiJson<QueuesStatus>> {
    // An admin sees every tenant unless they name one.
    let tenant = match q.tenant.as_deref() {
        None if caller.admin => None,
        named => caller.scope(named)?,
    };
    let pauses = controls::pauses(&state.db).await?;
    let now = now_ms();
    let mut kinds = Vec::new();
    for kind in ContextOperationKind::ALL {
        let f: KindFigures = controls::kind_figures(&state.db, kind, tenant.as_ref().map(|t| t.as_str())).await?;
        let paused_tenants = pauses
            .iter()
            .filter(|(k, t)| k == kind.as_str() && !t.is_empty())
            .filter(|(_, t)| caller.admin || *t == caller.tenant.as_str())
            .map(|(_, t)| t.clone())
            .collect();
        kinds.push(KindStatus {
            kind,
            paused: pauses.iter().any(|(k, t)| k == kind.as_str() && t.is_empty()),
            paused_tenants,
            queued: f.queued,
            running: f.running,
            succeeded_last_hour: f.succeeded_last_hour,
            failed_last_hour: f.failed_last_hour,
            cancelled_last_hour: f.cancelled_last_hour,
            retries_last_hour: f.retries_last_hour,
            recoveries_last_hour: f.recoveries_last_hour,
            oldest_queued_age_ms: f.oldest_queued_created_at_ms.map(|c| (now - c).max(0)),
            queue_wait_ms: percentiles(&f.waits_ms),
            run_ms: percentiles(&f.runs_ms),
            finished_per_minute: f.finished_per_minute,
            max_running: state.scheduling.max_running.get(kind),
            max_running_per_tenant: state.scheduling.max_running_per_tenant.get(kind),
        });
    }
    let workers = if caller.admin {
        let live = controls::live_workers(&state.db, OWNER_SILENCE_MS).await?;
        Some(
            live.into_iter()
                .map(|(holder, started_at_ms, seen_at_ms)| Worker { holder, started_at_ms, seen_at_ms })
                .collect(),
        )
    } else {
        None
    };
    Ok(ApiJson(QueuesStatus { scope: if tenant.is_some() { "tenant" } else { "all" }, kinds, workers }))
}

#[derive(Deserialize, Default, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PauseRequest {
    /// Pause for this tenant only (`tenantId/projectId`); absent: for everyone.
    #[serde(default)]
    tenant: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct PauseResponse {
    kind: ContextOperationKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    tenant: Option<String>,
    paused: bool,
    /// Queued operations whose phase changed.
    marked: u64,
}

async fn set_paused(
    state: &AppState,
    caller: &Caller,
    kind: ContextOperationKind,
    body: PauseRequest,
    paused: bool,
) -> ApiResult<ApiJson<PauseResponse>> {
    caller.require_admin()?;
    let tenant = body.tenant.as_deref().map(parse_tenant).transpose()?;
    let marked = transitions::set_paused(&state.db, kind, tenant.as_ref(), paused).await?;
    crate::metrics::set_paused(kind, tenant.is_none(), paused);
    if marked > 0 {
        state.changes.committed_many(tenant.as_ref());
    }
    if !paused {
        // Work submitted during the pause was not pushed, and deliveries that raced it were
        // dropped: push the held work now (on a task of its own; the first page starts
        // every tenant's head by fair share).
        crate::worker::dispatcher::spawn_resume_pushes(state.db.clone(), state.queue.clone(), kind, tenant.clone());
    }
    tracing::info!(kind = kind.as_str(), tenant = ?body.tenant, paused, marked, "queue control changed");
    Ok(ApiJson(PauseResponse { kind, tenant: body.tenant, paused, marked }))
}

/// Pause a kind for everyone, or for one tenant (admins): its queued work waits with phase `paused`.
#[utoipa::path(
    post,
    path = QUEUE_PAUSE_PATH,
    operation_id = "pauseQueue",
    tag = "queues",
    security(("adminToken" = []), ("gatewayJwt" = [])),
    params(("kind" = ContextOperationKind, Path, description = "The operation kind.")),
    request_body(content = Option<PauseRequest>, description = "Optional: `{\"tenant\": \"tenantId/projectId\"}`."),
    responses((status = 200, description = "The pause as it now is.", body = PauseResponse), ParamErrors, Forbidden),
)]
async fn pause(
    State(state): State<AppState>,
    caller: Caller,
    IdPath(kind): IdPath<ContextOperationKind>,
    OptionalJson(body): OptionalJson<PauseRequest>,
) -> ApiResult<ApiJson<PauseResponse>> {
    set_paused(&state, &caller, kind, body, true).await
}

/// Resume a paused kind, for everyone or for one tenant (admins).
#[utoipa::path(
    post,
    path = QUEUE_RESUME_PATH,
    operation_id = "resumeQueue",
    tag = "queues",
    security(("adminToken" = []), ("gatewayJwt" = [])),
    params(("kind" = ContextOperationKind, Path, description = "The operation kind.")),
    request_body(content = Option<PauseRequest>, description = "Optional: `{\"tenant\": \"tenantId/projectId\"}`."),
    responses((status = 200, description = "The pause as it now is.", body = PauseResponse), ParamErrors, Forbidden),
)]
async fn resume(
    State(state): State<AppState>,
    caller: Caller,
    IdPath(kind): IdPath<ContextOperationKind>,
    OptionalJson(body): OptionalJson<PauseRequest>,
) -> ApiResult<ApiJson<PauseResponse>> {
    set_paused(&state, &caller, kind, body, false).await
}
