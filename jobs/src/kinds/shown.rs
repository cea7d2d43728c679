//! What an operation's stored request shows to its tenant (`GET …/operations/{id}/request`,
//! the dashboard's "Request"): every field a caller gave, bounded and without secrets.
//!
//! - Bounded: free texts (a delete's reason, an inference's instructions and input) keep
//!   their first [`SHOWN_TEXT_BYTES`] with their full size and a `truncated` flag; an inline
//!   import's records become their count and bytes; long id lists keep their first
//!   [`SHOWN_LIST_ITEMS`] with their full count; tools show their names.
//! - No secrets: no kind stores a credential (an inference provider's key is configuration,
//!   never part of the request), so nothing is dropped for that reason; an inference's
//!   metadata value whose key looks like a secret's ([`SECRET_KEY_HINTS`]) is replaced by
//!   [`REDACTED`] all the same: metadata is free-form and passed on to the provider.
//!
//! The shape is `{kind, request}`, adjacently tagged like the stored request's kinds.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::OperationRequest;
use crate::contract::RetentionPolicy;

/// The most bytes of one free text shown.
pub const SHOWN_TEXT_BYTES: usize = 4096;
/// The most items of one list of ids shown.
pub const SHOWN_LIST_ITEMS: usize = 20;
/// Lowercase fragments of a metadata key whose value is not shown.
pub const SECRET_KEY_HINTS: [&str; 9] =
    ["key", "token", "secret", "password", "passwd", "credential", "auth", "cookie", "session"];
/// What replaces a value not shown.
pub const REDACTED: &str = "[redacted]";

/// A text shown up to [`SHOWN_TEXT_BYTES`] (cut at a character boundary).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ShownText {
    /// The text, or its first bytes when `truncated`.
    pub text: String,
    /// The whole text's size in bytes (UTF-8).
    pub bytes: u64,
    pub truncated: bool,
}

impl ShownText {
    pub fn new(text: &str) -> Self {
        let mut end = text.len().min(SHOWN_TEXT_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        Self { text: text[..end].to_string(), bytes: text.len() as u64, truncated: end < text.len() }
    }
}

/// A list of ids shown up to [`SHOWN_LIST_ITEMS`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ShownList {
    /// The first items, in order.
    pub items: Vec<String>,
    /// How many there are in all.
    pub count: u64,
}

impl ShownList {
    fn new<'a>(all: impl ExactSizeIterator<Item = &'a String>) -> Self {
        let count = all.len() as u64;
        Self { items: all.take(SHOWN_LIST_ITEMS).cloned().collect(), count }
    }
}

/// Records given inline: how many and their size (they are not shown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RecordsSummary {
    pub count: u64,
    /// Their size as stored (compact JSON), in bytes.
    pub bytes: u64,
}

impl RecordsSummary {
    fn of<T: Serialize>(records: &[T]) -> Self {
        let bytes = records.iter().map(|r| serde_json::to_vec(r).map_or(0, |v| v.len() as u64)).sum();
        Self { count: records.len() as u64, bytes }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ShownDelete {
    pub conversation_id: String,
    pub reason: ShownText,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ShownRetention {
    pub conversation_id: String,
    pub policy: RetentionPolicy,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ShownRebuildVector {
    pub force: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ShownExport {
    pub include_expired: bool,
    /// The conversations named by the filter (absent: none named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub conversation_ids: Option<ShownList>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub from_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub to_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ShownImport {
    /// `artifact` or `inline`.
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub artifact_ref: Option<String>,
    pub messages: RecordsSummary,
    pub entries: RecordsSummary,
    /// The rename's prefix, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub rename_prefix: Option<String>,
    /// Conversations the rename maps by name (`from → to`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub renames: Option<ShownList>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ShownInference {
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub conversation_id: Option<String>,
    pub append_reply: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub instructions: Option<ShownText>,
    /// How many messages the caller gave (history loaded from the conversation is not here).
    pub message_count: u64,
    /// Those messages as compact JSON.
    pub input: ShownText,
    /// The tools' names, in order.
    pub tools: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub tool_choice: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub max_output_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub reasoning_effort: Option<String>,
    /// Values under secret-looking keys read `[redacted]`.
    pub metadata: BTreeMap<String, String>,
}

/// An operation's request as shown: `{"kind": …, "request": …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", content = "request", rename_all = "snake_case")]
pub enum ShownRequest {
    Delete(ShownDelete),
    Retention(ShownRetention),
    RebuildVector(ShownRebuildVector),
    Export(ShownExport),
    Import(ShownImport),
    Inference(ShownInference),
}

/// Whether a metadata key names something secret.
pub fn looks_secret(key: &str) -> bool {
    let key = key.to_lowercase();
    SECRET_KEY_HINTS.iter().any(|hint| key.contains(hint))
}

impl From<&OperationRequest> for ShownRequest {
    fn from(request: &OperationRequest) -> Self {
        match request {
            OperationRequest::Delete(a) => Self::Delete(ShownDelete {
                conversation_id: a.conversation_id.clone(),
                reason: ShownText::new(&a.reason),
            }),
            OperationRequest::Retention(a) => {
                Self::Retention(ShownRetention { conversation_id: a.conversation_id.clone(), policy: a.policy.clone() })
            }
            OperationRequest::RebuildVector(a) => Self::RebuildVector(ShownRebuildVector { force: a.force }),
            OperationRequest::Export(a) => Self::Export(ShownExport {
                include_expired: a.include_expired,
                conversation_ids: (!a.filter.conversation_ids.is_empty())
                    .then(|| ShownList::new(a.filter.conversation_ids.iter())),
                agent_id: a.filter.agent_id.clone(),
                from_ms: a.filter.from_ms,
                to_ms: a.filter.to_ms,
            }),
            OperationRequest::Import(a) => {
                let renames: Vec<String> = a
                    .conversation_id_map
                    .iter()
                    .flat_map(|m| m.map.iter().map(|(from, to)| format!("{from} → {to}")))
                    .collect();
                Self::Import(ShownImport {
                    source: if a.artifact_ref.is_some() { "artifact" } else { "inline" }.to_string(),
                    artifact_ref: a.artifact_ref.clone(),
                    messages: RecordsSummary::of(&a.messages),
                    entries: RecordsSummary::of(&a.entries),
                    rename_prefix: a.conversation_id_map.as_ref().and_then(|m| m.prefix.clone()),
                    renames: (!renames.is_empty()).then(|| ShownList::new(renames.iter())),
                })
            }
            OperationRequest::Inference(job) => {
                let r = &job.request;
                let input = serde_json::to_string(&r.messages).unwrap_or_default();
                Self::Inference(ShownInference {
                    model: r.model.clone(),
                    conversation_id: job.conversation_id.clone(),
                    append_reply: job.append_reply,
                    instructions: r.instructions.as_deref().map(ShownText::new),
                    message_count: r.messages.len() as u64,
                    input: ShownText::new(&input),
                    tools: r.tools.iter().map(|t| t["name"].as_str().unwrap_or_default().to_string()).collect(),
                    tool_choice: r.tool_choice.clone(),
                    max_output_tokens: r.max_output_tokens,
                    reasoning_effort: r.reasoning_effort.clone(),
                    metadata: r
                        .metadata
                        .iter()
                        .map(|(k, v)| (k.clone(), if looks_secret(k) { REDACTED.to_string() } else { v.clone() }))
                        .collect(),
                })
            }
        }
    }
}

#[cfg(test)]
#[path = "shown_tests.rs"]
mod tests;
