//! The HTTP wire contract of the Context service: paths, limits and DTOs, shaped exactly as
//! `agent-context-contract` 0.2.2 shapes them so a client built on those DTOs works
//! unchanged. This module is the one owner of every contract wire shape; the HTTP shell, the
//! artifact format and the workers all use these types.

mod cursor;
mod entries;
mod message_rules;
mod messages;
pub mod nul;
mod operations;
#[cfg(feature = "openapi")]
pub mod schema;
mod transfer;

pub use cursor::*;
pub use entries::*;
pub use message_rules::*;
pub use messages::*;
pub use operations::*;
pub use transfer::*;

pub const SERVICE_NAME: &str = "agent-context-infra";
pub const DEFAULT_PORT: u16 = 5120;
pub const AUDIENCE: &str = "agent-context-infra";
pub const MAX_RESOURCE_ID_CHARS: usize = 191;
pub const SERVICE_TOKEN_ENV: &str = "AGENT_CONTEXT_SERVICE_TOKEN";

pub const HEALTH_PATH: &str = "/health";
pub const MESSAGES_APPEND_PATH: &str = "/internal/v1/context/messages/batch";
pub const MESSAGES_RECENT_PATH: &str = "/internal/v1/context/messages/recent";
pub const MESSAGES_SEARCH_PATH: &str = "/internal/v1/context/messages/search";
pub const MESSAGES_PAGE_PATH: &str = "/internal/v1/context/messages";
pub const CONVERSATIONS_LIST_PATH: &str = "/internal/v1/context/conversations:list";
pub const CONVERSATION_DELETE_PATH: &str = "/internal/v1/context/conversations/delete";
pub const RETENTION_PATH: &str = "/internal/v1/context/conversations/retention";
pub const CONTEXT_OPERATIONS_PATH: &str = "/internal/v1/context/operations";
pub const MAINTENANCE_STATUS_PATH: &str = "/internal/v1/context/maintenance/status";
pub const CONTEXT_INSIGHTS_PATH: &str = "/internal/v1/context/entries";
pub const CONTEXT_INSIGHT_GET_PATH: &str = "/internal/v1/context/entries/get";
pub const CONTEXT_RECALL_PATH: &str = "/internal/v1/context/recall";
pub const CONTEXT_MERGE_PATH: &str = "/internal/v1/context/entries/merge";
pub const CONTEXT_CORRECT_PATH: &str = "/internal/v1/context/entries/correct";
pub const CONTEXT_EXPIRE_PATH: &str = "/internal/v1/context/entries/expire";
pub const CONTEXT_EXPORT_PATH: &str = "/internal/v1/context/exports";
pub const CONTEXT_IMPORT_PATH: &str = "/internal/v1/context/imports";
pub const VECTOR_REBUILD_PATH: &str = "/internal/v1/context/projections/vector/rebuild";
pub const CONTEXT_ADVANCED_OPERATIONS_PATH: &str = "/internal/v1/context/advanced-operations";
pub const CONTEXT_EXPORT_ARTIFACT_PATH: &str = "/internal/v1/context/export-artifacts/get";
pub const CONTEXT_EXPORT_ARTIFACT_CHUNK_PATH: &str = "/internal/v1/context/export-artifacts/chunk";
/// Not in the contract (an extension of this service): submit one Responses turn as an
/// `inference` operation. Body: `context_jobs::kinds::inference::InferenceSubmission`.
pub const INFERENCE_PATH: &str = "/internal/v1/context/inference";

/// Upper bound the server enforces on any page size.
pub const MAX_PAGE_SIZE: usize = 500;
/// Default page size when a request omits `limit`.
pub const DEFAULT_PAGE_SIZE: usize = 50;
/// Maximum number of records accepted by one atomic append.
pub const MAX_APPEND_MESSAGES: usize = 500;
/// Maximum serialized payload bytes accepted by one atomic append.
pub const MAX_APPEND_BYTES: usize = 8 * 1024 * 1024;
pub const MAX_SEARCH_QUERY_BYTES: usize = 4 * 1024;

/// Error body shared by every non-2xx response.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

/// Clamp a requested page size to the contract's bounds (absent → default, 0 → 1).
pub fn clamp_page_size(limit: Option<usize>) -> usize {
    limit.unwrap_or(DEFAULT_PAGE_SIZE).clamp(1, MAX_PAGE_SIZE)
}

/// Scope derived from a verified gateway-issued internal credential.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthorizedScope {
    pub tenant_id: String,
    pub project_id: String,
    pub subject: String,
}
