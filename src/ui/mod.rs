//! The operator dashboard (`/ui`): static files embedded in the binary at build time and
//! served as they are — plain ES modules, no build step, no CDN (docs/ui.md says why).
//! This module owns the asset table, the routes serving it, and the headers every asset is
//! served with: its content type, `Cache-Control: no-cache`, a strict
//! `Content-Security-Policy` (no inline scripts or styles, connections to this origin only)
//! and `X-Content-Type-Options: nosniff`.
//!
//! The files are public: they hold no data. Every figure the pages show comes from an
//! ordinary API call carrying the user's own credential, so tenant walls and admin powers
//! are the API's, unchanged.

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::http::error::api_error_response;
use crate::http::extract::IdPath;

/// The dashboard's page (`index.html`).
pub const UI_PATH: &str = "/ui";
/// The page again, as a browser or a proxy may spell it (a bookmark of `/ui/`).
pub const UI_SLASH_PATH: &str = "/ui/";
/// One of its files, by name (`/ui/app.js`).
pub const UI_ASSET_PATH: &str = "/ui/{file}";

/// Same origin only; nothing inline; no plugins, no framing, no `<base>` rewriting.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// An embedded file: its name under `/ui/` and its text.
pub struct Asset {
    pub name: &'static str,
    pub body: &'static str,
}

macro_rules! assets {
    ($($name:literal),* $(,)?) => {
        &[$(Asset { name: $name, body: include_str!(concat!("assets/", $name)) }),*]
    };
}

/// Every file of the dashboard. A new page module is one more line here (and its import
/// in `app.js`); the `ui_assets` integration test fails on a file referenced but missing.
pub const ASSETS: &[Asset] = assets![
    "index.html",
    "style.css",
    "app.js",
    "api.js",
    "widgets.js",
    "overview.js",
    "operations.js",
    "operation.js",
    "controls.js",
    "conversations.js",
    "entries.js",
    "export_form.js",
];

/// The content type a file is served with, by its extension.
pub fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

/// The embedded file of that name.
pub fn asset(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

/// `/ui` and `/ui/{file}` (public; listed in `http::routes::non_api`).
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new().route(UI_PATH, get(index)).route(UI_SLASH_PATH, get(index)).route(UI_ASSET_PATH, get(file))
}

async fn index() -> Response {
    serve(asset("index.html").expect("index.html is embedded"))
}

async fn file(IdPath(name): IdPath<String>) -> Response {
    match asset(&name) {
        Some(a) => serve(a),
        None => api_error_response(StatusCode::NOT_FOUND, format!("no dashboard file {:?}", truncate(&name))),
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

fn serve(asset: &'static Asset) -> Response {
    let mut response = asset.body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(asset.name)));
    // Revalidate every time: a new binary's files are seen at once (they are small).
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_has_a_known_content_type() {
        for a in ASSETS {
            assert_ne!(content_type(a.name), "application/octet-stream", "{} has no content type", a.name);
            assert!(!a.body.is_empty(), "{} is empty", a.name);
        }
    }
}
