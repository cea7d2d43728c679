//! HTTP handlers, one file per resource. Paths are the contract's constants.

pub mod health;
pub mod messages;
pub mod operations;
pub mod submit;

use axum::Router;

use crate::app::AppState;

pub fn routes() -> Router<AppState> {
    Router::new().merge(health::routes()).merge(messages::routes()).merge(operations::routes())
}
