//! `GET …/operations/{id}/wait`: the long poll. It answers as soon as the operation's
//! version differs from `sinceVersion` (or it is terminal), or after `timeoutMs` (at most
//! 30 s) with the unchanged operation. A change made in this process (or in another, through
//! the Redis relay: `crate::changes::relay`) wakes it at once; otherwise it re-reads every
//! `CONTEXT_OPS_WAIT_RECHECK_MS`.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::operations::{load, operation_response};
use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::error::{ApiResult, AppError};
use crate::http::extract::{ApiQuery, IdPath};
use crate::http::openapi::errors::{NotFound, ParamErrors};
use crate::store::operations::{self as ops, OperationRow};
use context_jobs::contract::schema::Ulid;
use context_jobs::ids::OperationId;
use context_jobs::operation::view::OperationView;

const MAX_WAIT_MS: u64 = 30_000;

pub const OPERATION_WAIT_PATH: &str = "/internal/v1/context/operations/{id}/wait";

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(wait))
}

#[derive(Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct WaitQuery {
    /// Return as soon as the version differs from this (default: the current version).
    since_version: Option<i64>,
    /// How long to wait at most (ms, capped at 30000; default 30000).
    timeout_ms: Option<u64>,
}

/// Long poll: answers as soon as the operation's version changes (or it is terminal),
/// or after `timeoutMs` (capped at 30 s) with the unchanged operation.
#[utoipa::path(
    get,
    path = OPERATION_WAIT_PATH,
    operation_id = "waitOperation",
    tag = "operations",
    params(("id" = Ulid, Path, description = "The operation's id (a ULID)."), WaitQuery),
    responses(
        (status = 200, description = "The operation, changed or not.", body = OperationView,
         headers(("ETag" = String, description = "`\"{id}.{version}\"`: changes with every change of the operation."),
                 ("Retry-After" = u64, description = "Seconds before polling again, while it is not finished."))),
        ParamErrors,
        NotFound,
    ),
)]
async fn wait(
    State(state): State<AppState>,
    caller: Caller,
    IdPath(id): IdPath<OperationId>,
    ApiQuery(query): ApiQuery<WaitQuery>,
) -> ApiResult<Response> {
    // Watching before the first read: a change committed after the read wakes us (from this
    // process, or on PostgreSQL from any; anything else is seen by the periodic re-read).
    let watch = state.changes.watch(&id);
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
            () = tokio::time::sleep(Duration::from_millis(state.config.http.wait_recheck_ms).min(deadline - now)) => false,
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
                Err(e) if e.is_transient() => false,
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
