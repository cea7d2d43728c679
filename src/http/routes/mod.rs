//! HTTP handlers, one file per resource. Paths are the contract's constants.

pub mod artifacts;
pub mod controls;
pub mod entries;
pub mod events;
pub mod health;
pub mod inference;
pub mod listing;
pub mod messages;
pub mod operations;
pub mod recall;
pub mod submit;
pub mod transfers;

use axum::Router;

use crate::http::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .merge(health::routes())
        .merge(messages::routes())
        .merge(operations::routes())
        .merge(events::routes())
        .merge(listing::routes())
        .merge(controls::routes())
        .merge(inference::routes())
        .merge(entries::routes())
        .merge(recall::routes())
        .merge(artifacts::routes())
        .merge(transfers::routes())
}
