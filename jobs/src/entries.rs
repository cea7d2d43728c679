//! Context-entry rules as pure functions: the limits an entry must respect, the text an
//! entry is indexed and embedded by, and the stable string forms of kind and status that
//! the store writes. The HTTP shell, the store, import and recall all use these.

use serde_json::Value;

use crate::contract::{ContextInsight, ContextInsightKind, ContextInsightStatus, content_text};

/// Largest serialised `content` of one entry.
pub const MAX_ENTRY_CONTENT_BYTES: usize = 64 * 1024;
/// Largest serialised `attributes` of one entry.
pub const MAX_ENTRY_ATTRIBUTES_BYTES: usize = 16 * 1024;
/// Most source entries one merge may combine.
pub const MAX_MERGE_SOURCES: usize = 100;
/// Longest `reason` stored with a correction or expiry.
pub const MAX_REASON_BYTES: usize = 1024;

/// Why an entry (or an id) is not acceptable; `PayloadTooLarge` maps to 413, the rest to 400.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryRuleError {
    Invalid(String),
    PayloadTooLarge(String),
}

impl std::fmt::Display for EntryRuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Invalid(m) | Self::PayloadTooLarge(m) => f.write_str(m),
        }
    }
}

pub fn validate_id(what: &str, id: &str) -> Result<(), EntryRuleError> {
    crate::contract::validate_resource_id(what, id).map_err(EntryRuleError::Invalid)
}

pub fn validate_content(content: &Value) -> Result<(), EntryRuleError> {
    if content.is_null() {
        return Err(EntryRuleError::Invalid("entry content must not be null".into()));
    }
    let bytes = content.to_string().len();
    if bytes > MAX_ENTRY_CONTENT_BYTES {
        return Err(EntryRuleError::PayloadTooLarge(format!(
            "entry content is {bytes} bytes; the limit is {MAX_ENTRY_CONTENT_BYTES}"
        )));
    }
    Ok(())
}

pub fn validate_reason(reason: &str) -> Result<(), EntryRuleError> {
    if reason.len() > MAX_REASON_BYTES {
        return Err(EntryRuleError::PayloadTooLarge(format!("reason is longer than {MAX_REASON_BYTES} bytes")));
    }
    Ok(())
}

/// The caller-controlled parts of an entry: id, content, attributes, provenance.
pub fn validate_entry(entry: &ContextInsight) -> Result<(), EntryRuleError> {
    validate_id("entry id", &entry.id)?;
    validate_content(&entry.content)?;
    let attributes = entry.attributes.to_string().len();
    if !entry.attributes.is_null() && attributes > MAX_ENTRY_ATTRIBUTES_BYTES {
        return Err(EntryRuleError::PayloadTooLarge(format!(
            "entry attributes are {attributes} bytes; the limit is {MAX_ENTRY_ATTRIBUTES_BYTES}"
        )));
    }
    validate_id("provenance.conversationId", &entry.provenance.conversation_id)?;
    // An artifact refuses a negative time (see below): an entry written with one could be
    // exported but not read back or imported.
    if entry.expires_at_ms.is_some_and(|at| at < 0) {
        return Err(EntryRuleError::Invalid("expiresAtMs must not be negative".into()));
    }
    Ok(())
}

/// The highest `version` an imported entry may carry (JavaScript's largest exact integer,
/// 2^53 − 1): the service stores what an import gives and every later write adds one to a
/// signed 64-bit column, and JSON clients read larger numbers inexactly anyway.
pub const MAX_IMPORTED_VERSION: u64 = (1 << 53) - 1;

/// The version an import stores an entry at: the one given, except 0 — what a put body
/// carries, where the version is the server's — stored as 1, an entry's first version.
/// (At 0 no later write could name it: `expectedVersion` 0 means "create".)
pub fn imported_version(version: u64) -> u64 {
    version.max(1)
}

/// An imported entry: [`validate_entry`] (which checks `expiresAtMs`), and its `version`
/// and times, which an import keeps (a time must not be negative, as a message's `createdAtMs` must not: recall's
/// recency of `updatedAtMs` near `i64::MIN` overflowed).
pub fn validate_imported_entry(entry: &ContextInsight) -> Result<(), EntryRuleError> {
    validate_entry(entry)?;
    for (what, at) in [("createdAtMs", entry.created_at_ms), ("updatedAtMs", entry.updated_at_ms)] {
        if at < 0 {
            return Err(EntryRuleError::Invalid(format!("{what} must not be negative")));
        }
    }
    if entry.version > MAX_IMPORTED_VERSION {
        return Err(EntryRuleError::Invalid(format!(
            "entry version {} is above the largest an import keeps, {MAX_IMPORTED_VERSION}",
            entry.version
        )));
    }
    Ok(())
}

/// The text an entry is indexed (BM25) and embedded by: the contract's `content_text`.
pub fn entry_text(content: &Value) -> String {
    content_text(content)
}

/// `entry_text` of stored `content` JSON; unparseable content has no text. Most content is
/// a JSON string, decoded straight to its text without building a `Value`.
pub fn stored_entry_text(json: &str) -> String {
    if json.starts_with('"')
        && let Ok(text) = serde_json::from_str::<String>(json)
    {
        return text;
    }
    serde_json::from_str(json).map(|c| entry_text(&c)).unwrap_or_default()
}

pub fn kind_str(kind: ContextInsightKind) -> &'static str {
    match kind {
        ContextInsightKind::Fact => "fact",
        ContextInsightKind::Preference => "preference",
        ContextInsightKind::Decision => "decision",
        ContextInsightKind::Task => "task",
        ContextInsightKind::Summary => "summary",
        ContextInsightKind::Custom => "custom",
    }
}

pub fn parse_kind(s: &str) -> Option<ContextInsightKind> {
    use ContextInsightKind::*;
    [Fact, Preference, Decision, Task, Summary, Custom].into_iter().find(|k| kind_str(*k) == s)
}

pub fn status_str(status: ContextInsightStatus) -> &'static str {
    match status {
        ContextInsightStatus::Active => "active",
        ContextInsightStatus::Corrected => "corrected",
        ContextInsightStatus::Merged => "merged",
        ContextInsightStatus::Expired => "expired",
    }
}

pub fn parse_status(s: &str) -> Option<ContextInsightStatus> {
    use ContextInsightStatus::*;
    [Active, Corrected, Merged, Expired].into_iter().find(|k| status_str(*k) == s)
}

/// Whether recall may return an entry: active and not past its `expiresAtMs`.
pub fn is_live(status: ContextInsightStatus, expires_at_ms: Option<i64>, now_ms: i64) -> bool {
    status == ContextInsightStatus::Active && expires_at_ms.is_none_or(|t| t > now_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_text_matches_the_value_path() {
        for json in [
            r#""plain \u00e9 text""#,
            r#"[{"text":"a"},"b"]"#,
            "null",
            "42",
            r#"{"k":1}"#,
            "not json",
            r#""unterminated"#,
        ] {
            let via_value = serde_json::from_str(json).map(|c| entry_text(&c)).unwrap_or_default();
            assert_eq!(stored_entry_text(json), via_value, "{json}");
        }
        assert_eq!(stored_entry_text(r#""caf\u00e9""#), "café");
    }
    use serde_json::json;

    #[test]
    fn kind_and_status_strings_match_serde() {
        for k in ["fact", "preference", "decision", "task", "summary", "custom"] {
            let kind = parse_kind(k).unwrap();
            assert_eq!(serde_json::to_value(kind).unwrap(), json!(k));
        }
        for s in ["active", "corrected", "merged", "expired"] {
            let status = parse_status(s).unwrap();
            assert_eq!(serde_json::to_value(status).unwrap(), json!(s));
        }
        assert_eq!(parse_kind("nope"), None);
    }

    #[test]
    fn content_limits() {
        assert!(validate_content(&json!("ok")).is_ok());
        assert!(matches!(validate_content(&Value::Null), Err(EntryRuleError::Invalid(_))));
        let big = "x".repeat(MAX_ENTRY_CONTENT_BYTES);
        assert!(matches!(validate_content(&json!(big)), Err(EntryRuleError::PayloadTooLarge(_))));
        assert!(validate_id("id", " ").is_err());
        assert!(validate_id("id", &"a".repeat(192)).is_err());
    }

    #[test]
    fn liveness() {
        assert!(is_live(ContextInsightStatus::Active, None, 5));
        assert!(is_live(ContextInsightStatus::Active, Some(6), 5));
        assert!(!is_live(ContextInsightStatus::Active, Some(5), 5));
        assert!(!is_live(ContextInsightStatus::Merged, None, 5));
    }
}
