//! `GET …/operations/{id}/request`: what the operation was asked to do, as its tenant may see
//! it — the stored request shaped by the core's rule (`context_jobs::kinds::shown`: bounded,
//! records summarised, nothing secret). Tenant walls as for the operation itself.

use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::operations::load;
use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::error::{ApiJson, ApiResult, AppError};
use crate::http::extract::IdPath;
use crate::http::openapi::errors::{NotFound, ParamErrors};
use crate::store::operations::OperationRow;
use context_jobs::contract::schema::Ulid;
use context_jobs::ids::OperationId;
use context_jobs::kinds::shown::ShownRequest;
use context_jobs::operation::OperationRequest;

pub const OPERATION_REQUEST_PATH: &str = "/internal/v1/context/operations/{id}/request";

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_request))
}

/// The operation's submitted request, `{kind, request}`: every field given, with free texts
/// cut to 4 KiB (flagged `truncated`), an inline import's records as their count and size,
/// long id lists as their first 20 and their count, and no secret.
#[utoipa::path(
    get,
    path = OPERATION_REQUEST_PATH,
    operation_id = "getOperationRequest",
    tag = "operations",
    params(("id" = Ulid, Path, description = "The operation's id (a ULID).")),
    responses(
        (status = 200, description = "The request as submitted (bounded).", body = ShownRequest),
        ParamErrors,
        NotFound,
    ),
)]
async fn get_request(
    State(state): State<AppState>,
    caller: Caller,
    IdPath(id): IdPath<OperationId>,
) -> ApiResult<ApiJson<ShownRequest>> {
    let op = load(&state, &caller, &id).await?;
    Ok(ApiJson(ShownRequest::from(&stored_request(&op)?)))
}

/// The operation's stored request. One that no longer decodes is this service's fault, not
/// the caller's: a 500, its detail in the log only.
pub(super) fn stored_request(op: &OperationRow) -> ApiResult<OperationRequest> {
    op.request().map_err(|e| AppError::Internal(anyhow::anyhow!("operation {}: {e}", op.id)))
}
