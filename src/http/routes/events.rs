//! Server-Sent Events of operation changes (the streams themselves are `crate::events`):
//!
//! - `GET …/operations/{id}/events`: the operation now, then each change, `id:` its
//!   version; the stream ends after the terminal state. `Last-Event-ID` (or
//!   `?lastEventId=`) is a version the client has: only newer ones come, and a client that
//!   already has the terminal version gets `204` (which tells an `EventSource` to stop).
//! - `GET …/operations/events?kind=&state=&tenant=`: changes to the caller's operations
//!   (an admin may name another tenant, or `*`), `id:` an opaque position. Without
//!   `Last-Event-ID` the stream starts now and first sends its position (`id:` alone).
//!
//! Each event's data is the operation's JSON exactly as `GET …/operations/{id}` answers it.
//! Idle streams send `: heartbeat` comments. A process keeps at most
//! `CONTEXT_OPS_MAX_EVENT_STREAMS` open; one more is `503` with `Retry-After`.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt as _};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::listing::{parse_kind, parse_state};
use crate::events::{self, Event, StreamCtx, StreamPermit};
use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::error::{ApiResult, AppError};
use crate::http::extract::{ApiQuery, IdPath};
use crate::http::openapi::errors::{Forbidden, NotFound, ParamErrors};
use crate::store::now_ms;
use crate::store::operations::changes::{self, ChangeFilter};
use context_jobs::contract::CONTEXT_OPERATIONS_PATH;
use context_jobs::contract::schema::Ulid;
use context_jobs::ids::OperationId;
use context_jobs::operation::change_position::ChangePosition;

/// The stream of the caller's operations, and of one operation.
pub const OPERATIONS_EVENTS_PATH: &str = "/internal/v1/context/operations/events";
pub const OPERATION_EVENTS_PATH: &str = "/internal/v1/context/operations/{id}/events";

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_events)).routes(routes!(operation_events))
}

const LAST_EVENT_ID: &str = "last-event-id";

/// One event of a stream as an SSE client reads it (the document's schema of
/// `text/event-stream`; the events themselves are written by [`sse`]).
#[derive(ToSchema)]
#[allow(dead_code)] // documentation only
struct StreamEvent {
    /// The operation's version (one operation's stream) or an opaque position (the stream of
    /// all operations): what `Last-Event-ID` resumes from.
    id: Option<String>,
    /// The event type: `message`.
    event: Option<String>,
    /// The operation's JSON, exactly as `GET …/operations/{id}` answers it (an
    /// `OperationView`); absent from a position-only event.
    #[schema(content_media_type = "application/json")]
    data: Option<String>,
}

#[derive(Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct OperationEventsQuery {
    /// A version the client has (when it cannot send `Last-Event-ID`).
    last_event_id: Option<String>,
}

#[derive(Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ListEventsQuery {
    /// Only this kind.
    #[param(value_type = Option<context_jobs::contract::ContextOperationKind>)]
    kind: Option<String>,
    /// Only operations entering this state.
    #[param(value_type = Option<context_jobs::contract::ContextOperationState>)]
    state: Option<String>,
    /// Another tenant's operations (`tenantId/projectId`), or every tenant's (`*`): admins only.
    tenant: Option<String>,
    /// A position the client had (when it cannot send `Last-Event-ID`).
    last_event_id: Option<String>,
}

/// The resume token: the `Last-Event-ID` header (an `EventSource` reconnecting sends it),
/// else the `lastEventId` query parameter (a page resuming a stream it had before).
fn last_event_id(headers: &HeaderMap, query: Option<String>) -> ApiResult<Option<String>> {
    match headers.get(LAST_EVENT_ID) {
        Some(v) => {
            let v = v.to_str().map_err(|_| AppError::BadRequest("Last-Event-ID must be visible ASCII".into()))?;
            Ok(Some(v.trim().to_string()).filter(|v| !v.is_empty()))
        }
        None => Ok(query.filter(|v| !v.trim().is_empty())),
    }
}

fn stream_ctx(state: &AppState) -> StreamCtx {
    StreamCtx {
        db: state.db.clone(),
        changes: state.changes.clone(),
        recheck: Duration::from_millis(state.config.http.wait_recheck_ms),
        shutdown: state.shutdown.clone(),
    }
}

fn open(state: &AppState, stream: &'static str) -> ApiResult<StreamPermit> {
    state.events.open(stream).ok_or_else(|| {
        AppError::Busy(format!(
            "this process has {} event streams open, its limit (CONTEXT_OPS_MAX_EVENT_STREAMS); retry shortly, \
             or poll GET {CONTEXT_OPERATIONS_PATH}/{{id}}/wait",
            state.events.max()
        ))
    })
}

/// One operation's changes as Server-Sent Events: `data:` the operation's JSON exactly as
/// `GET …/operations/{id}` answers it (an `OperationView`), `id:` its version; the stream
/// ends after the terminal state; `: heartbeat` comments while idle.
#[utoipa::path(
    get,
    path = OPERATION_EVENTS_PATH,
    operation_id = "operationEvents",
    tag = "operations",
    params(
        ("id" = Ulid, Path, description = "The operation's id (a ULID)."),
        ("Last-Event-ID" = Option<String>, Header, description = "A version the client has: only newer ones come."),
        OperationEventsQuery,
    ),
    responses(
        (status = 200, description = "The event stream (`data:` an `OperationView`, `id:` its version).",
         content_type = "text/event-stream", body = StreamEvent),
        (status = 204, description = "The client already has the terminal version: nothing more will come."),
        ParamErrors,
        NotFound,
    ),
)]
async fn operation_events(
    State(state): State<AppState>,
    caller: Caller,
    IdPath(id): IdPath<OperationId>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<OperationEventsQuery>,
) -> ApiResult<Response> {
    let seen = match last_event_id(&headers, query.last_event_id)? {
        Some(v) => Some(v.parse::<i64>().ok().filter(|v| *v >= 0).ok_or_else(|| {
            AppError::BadRequest("Last-Event-ID must be a version of this operation (a whole number)".into())
        })?),
        None => None,
    };
    let op = super::operations::load(&state, &caller, &id).await?;
    if op.state.is_terminal() && seen.is_some_and(|v| v >= op.version) {
        // Nothing more will ever come; 204 ends an EventSource's reconnecting.
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let permit = open(&state, "operation")?;
    let stream = permit.stream();
    let events = events::operation::events(stream_ctx(&state), caller.tenant.clone(), op, seen, permit);
    Ok(sse(&state, stream, events))
}

/// Changes to the caller's operations as Server-Sent Events, in commit order across
/// processes: `data:` the operation's JSON (an `OperationView`), `id:` an opaque position;
/// without `Last-Event-ID` the stream starts now and first sends its position alone.
#[utoipa::path(
    get,
    path = OPERATIONS_EVENTS_PATH,
    operation_id = "operationsEvents",
    tag = "operations",
    params(
        ("Last-Event-ID" = Option<String>, Header, description = "A position the client had: resume after it."),
        ListEventsQuery,
    ),
    responses(
        (status = 200, description = "The event stream (`data:` an `OperationView`, `id:` a position).",
         content_type = "text/event-stream", body = StreamEvent),
        ParamErrors,
        Forbidden,
    ),
)]
async fn list_events(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<ListEventsQuery>,
) -> ApiResult<Response> {
    let filter = ChangeFilter {
        tenant: caller.scope(query.tenant.as_deref())?,
        kind: query.kind.as_deref().map(parse_kind).transpose()?,
        state: query.state.as_deref().map(parse_state).transpose()?,
    };
    let resume = match last_event_id(&headers, query.last_event_id)? {
        Some(token) => {
            let position = ChangePosition::decode(&token).ok_or_else(|| {
                AppError::BadRequest("Last-Event-ID is not a position of this service's event streams".into())
            })?;
            changes::check(&state.db, &position)?;
            Some(position)
        }
        None => None,
    };
    let permit = open(&state, "operations")?;
    let stream = permit.stream();
    let ctx = stream_ctx(&state);
    // Watching before the head is read: a change committed in between wakes the stream.
    let watch = events::listing::watch(&ctx, &filter);
    let (from, announce) = match resume {
        Some(position) => (position, false),
        None => (changes::head(&state.db).await?, true),
    };
    let events = events::listing::events(ctx, filter, watch, from, announce, permit);
    Ok(sse(&state, stream, events))
}

/// The stream as Server-Sent Events, with heartbeats.
fn sse(state: &AppState, stream: &'static str, events: impl Stream<Item = Event> + Send + 'static) -> Response {
    let events = events.map(move |event| {
        Ok::<_, Infallible>(match event {
            Event::Operation(row, token) => {
                metrics::counter!(crate::metrics::EVENTS_SENT, "stream" => stream).increment(1);
                // The one owner of the operation's JSON: what GET …/operations/{id} answers.
                match SseEvent::default().id(token).json_data(row.to_view(now_ms())) {
                    Ok(event) => event,
                    Err(e) => {
                        tracing::error!(operation = %row.id, error = %e, "operation does not serialize");
                        SseEvent::default().comment("an operation could not be sent")
                    }
                }
            }
            Event::Position(token) => SseEvent::default().id(token),
        })
    });
    let heartbeat = Duration::from_millis(state.config.http.events_heartbeat_ms);
    let mut response =
        Sse::new(events).keep_alive(KeepAlive::new().interval(heartbeat).text("heartbeat")).into_response();
    // Proxies that buffer responses (nginx) would hold events back.
    response.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
