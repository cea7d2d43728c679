//! The routes that are not part of the API document, in one place, each with the reason.
//! Everything else the router serves is registered in `super::api` and documented; the
//! `openapi` integration test checks that the router serves exactly the document's routes
//! plus these.

use axum::Router;

use super::health;
use crate::http::AppState;

/// `(path, why it is not in the document)`.
pub const NON_API_ROUTES: &[(&str, &str)] = &[
    (
        health::METRICS_PATH,
        "Prometheus text exposition for scrapers (behind the API's auth, or public on CONTEXT_OPS_METRICS_BIND)",
    ),
    (crate::ui::UI_PATH, "the dashboard's page: static HTML; its data comes from API calls with the user's credential"),
    (crate::ui::UI_SLASH_PATH, "the dashboard's page under its other spelling"),
    (crate::ui::UI_ASSET_PATH, "the dashboard's embedded scripts and stylesheet: static files, no data"),
];

/// The non-API routes of the API listener: the dashboard, and `/metrics` unless it has a
/// listener of its own.
pub fn routes(metrics_on_api_listener: bool) -> Router<AppState> {
    let router = crate::ui::routes();
    if metrics_on_api_listener { router.merge(health::authed_metrics_routes()) } else { router }
}
