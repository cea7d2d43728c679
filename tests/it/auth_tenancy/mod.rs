//! Authentication modes (open, static token, HS256 JWT, both, a separate metrics
//! listener; `modes`) and tenant isolation (`isolation`), over real HTTP. The auth layer
//! runs before any store code, so the mode tests use SQLite; the tenant-isolation test runs
//! on both backends because isolation lives in the SQL.

use context_jobs::contract::{
    CONVERSATIONS_LIST_PATH as LIST, MESSAGES_APPEND_PATH as APPEND, MESSAGES_PAGE_PATH as PAGE,
    MESSAGES_RECENT_PATH as RECENT, MESSAGES_SEARCH_PATH as SEARCH,
};
use serde_json::Value;

mod isolation;
mod modes;

fn ids(body: &Value) -> Vec<String> {
    body["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items: {body}"))
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_string())
        .collect()
}
