//! Beyond the contract (optional fields a contract client never sends): what an export
//! takes ([`ExportFilter`]: some conversations, one agent's, a time range) and how an
//! import renames conversations on the way in ([`ConversationIdMap`]: a prefix or an
//! explicit map), so "copy this conversation elsewhere" and "export one user's data" need
//! no hand-edited JSONL.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{ContextInsight, ConversationRecord, validate_resource_id};

/// The most conversations one export filter may name.
pub const MAX_EXPORT_CONVERSATIONS: usize = 1000;

/// Which records an export takes; every part given must hold (absent: everything).
/// Messages: of the named conversations, of the agent's conversations (the conversation's
/// listing agent, as `conversations:list` sees it), created in `[fromMs, toMs)`. Entries:
/// whose `provenance.conversationId` passes the same conversation and agent tests, created
/// in the same range.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportFilter {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conversation_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Inclusive, epoch milliseconds (`createdAtMs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_ms: Option<i64>,
    /// Exclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_ms: Option<i64>,
}

impl ExportFilter {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// `Err` is a 400 message.
    pub fn validate(&self) -> Result<(), String> {
        if self.conversation_ids.len() > MAX_EXPORT_CONVERSATIONS {
            return Err(format!("filter.conversationIds names at most {MAX_EXPORT_CONVERSATIONS} conversations"));
        }
        for id in &self.conversation_ids {
            validate_resource_id("filter.conversationIds[]", id)?;
        }
        if let Some(agent) = &self.agent_id {
            validate_resource_id("filter.agentId", agent)?;
        }
        if let (Some(from), Some(to)) = (self.from_ms, self.to_ms)
            && from >= to
        {
            return Err("filter.fromMs must be before filter.toMs".into());
        }
        Ok(())
    }
}

/// How an import renames conversations: an id named in `map` becomes its value; any other
/// gets `prefix` in front (when given). Messages move with their conversation (its
/// `scope.conversationId`), entries with their `provenance.conversationId`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConversationIdMap {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub map: BTreeMap<String, String>,
}

impl ConversationIdMap {
    pub fn is_empty(&self) -> bool {
        self.prefix.is_none() && self.map.is_empty()
    }

    /// `Err` is a 400 message.
    pub fn validate(&self) -> Result<(), String> {
        if self.is_empty() {
            return Err("conversationIdMap must give a prefix or a map".into());
        }
        if let Some(prefix) = &self.prefix {
            super::nul::check_text("conversationIdMap.prefix", prefix)?;
            if prefix.is_empty() {
                return Err("conversationIdMap.prefix must not be empty".into());
            }
        }
        for (from, to) in &self.map {
            validate_resource_id("conversationIdMap.map key", from)?;
            validate_resource_id("conversationIdMap.map value", to)?;
        }
        Ok(())
    }

    /// The new id of conversation `id`. The result is validated where it is used (a
    /// prefix can make an id too long).
    pub fn rename(&self, id: &str) -> String {
        match (self.map.get(id), &self.prefix) {
            (Some(to), _) => to.clone(),
            (None, Some(prefix)) => format!("{prefix}{id}"),
            (None, None) => id.to_string(),
        }
    }

    /// Move a message to its renamed conversation; `Err` if the new id is not valid.
    pub fn message(&self, record: &mut ConversationRecord) -> Result<(), String> {
        record.scope.conversation_id = self.rename(&record.scope.conversation_id);
        validate_resource_id("the renamed conversationId", &record.scope.conversation_id)
    }

    /// Move an entry's provenance to the renamed conversation.
    pub fn entry(&self, entry: &mut ContextInsight) -> Result<(), String> {
        entry.provenance.conversation_id = self.rename(&entry.provenance.conversation_id);
        validate_resource_id("the renamed provenance.conversationId", &entry.provenance.conversation_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_validate() {
        assert!(ExportFilter::default().is_empty());
        let f = ExportFilter { conversation_ids: vec!["c".into()], ..Default::default() };
        assert!(!f.is_empty() && f.validate().is_ok());
        assert!(ExportFilter { from_ms: Some(5), to_ms: Some(5), ..Default::default() }.validate().is_err());
        assert!(ExportFilter { agent_id: Some("a\0".into()), ..Default::default() }.validate().is_err());
        let many =
            ExportFilter { conversation_ids: vec!["c".into(); MAX_EXPORT_CONVERSATIONS + 1], ..Default::default() };
        assert!(many.validate().is_err());
    }

    #[test]
    fn maps_rename_by_map_then_prefix() {
        let m = ConversationIdMap { prefix: Some("copy-".into()), map: [("a".to_string(), "b".to_string())].into() };
        assert!(m.validate().is_ok());
        assert_eq!(m.rename("a"), "b");
        assert_eq!(m.rename("x"), "copy-x");
        let only_map = ConversationIdMap { prefix: None, map: [("a".to_string(), "b".to_string())].into() };
        assert_eq!(only_map.rename("x"), "x");
        assert!(ConversationIdMap::default().validate().is_err());
        let long = ConversationIdMap { prefix: Some("p".repeat(191)), map: BTreeMap::new() };
        let mut record: ConversationRecord = serde_json::from_value(
            serde_json::json!({"id": "m", "scope": {"conversationId": "c"}, "role": "user", "content": "x"}),
        )
        .unwrap();
        assert!(long.message(&mut record).is_err(), "a prefix that makes the id too long is refused");
    }
}
