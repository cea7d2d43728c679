//! HTTP handlers, one file per resource. Paths are the contract's constants (and this
//! service's own beside them).
//!
//! Every API route is registered in [`api`] through utoipa-axum's `routes!`, which takes
//! the path and the methods from the handler's `#[utoipa::path]` annotation: the router and
//! the OpenAPI document (`crate::http::openapi`) come from this one list. Routes that are
//! not API are in [`non_api`], the one list of exclusions.

pub mod artifacts;
pub mod controls;
pub mod entries;
pub mod events;
pub mod health;
pub mod inference;
pub mod listing;
pub mod long_poll;
pub mod messages;
pub mod non_api;
pub mod operation_request;
pub mod operations;
pub mod recall;
pub mod submissions;
pub mod submit;
pub mod transfers;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::http::AppState;

/// Every API route, with its documentation.
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(crate::http::openapi::openapi_json))
        .merge(health::routes())
        .merge(messages::routes())
        .merge(submissions::routes())
        .merge(operations::routes())
        .merge(long_poll::routes())
        .merge(operation_request::routes())
        .merge(events::routes())
        .merge(listing::routes())
        .merge(controls::routes())
        .merge(inference::routes())
        .merge(entries::routes())
        .merge(recall::routes())
        .merge(artifacts::routes())
        .merge(transfers::routes())
}
