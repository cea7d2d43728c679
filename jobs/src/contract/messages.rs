//! Conversation records and the message endpoints' request/response shapes, plus the one
//! reading of message text (`content_text`); their rules are `message_rules`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Many-to-many domain associations carried on a scope.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ResourceRelations {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<crate::contract::schema::ResourceId>))]
    pub agent_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<crate::contract::schema::ResourceId>))]
    pub runtime_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<crate::contract::schema::ResourceId>))]
    pub user_ids: Vec<String>,
}

impl ResourceRelations {
    pub fn is_empty(&self) -> bool {
        self.agent_ids.is_empty() && self.runtime_ids.is_empty() && self.user_ids.is_empty()
    }
}

/// Identifies the conversation a record belongs to; `conversation_id` is the partition key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ConversationScope {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::contract::schema::ResourceId))]
    pub conversation_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::contract::schema::ResourceId>))]
    pub user_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::contract::schema::ResourceId>))]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::contract::schema::ResourceId>))]
    pub agent_space_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::contract::schema::ResourceId>))]
    pub runtime_type: Option<String>,
    #[serde(default, skip_serializing_if = "ResourceRelations::is_empty")]
    pub relations: ResourceRelations,
}

impl ConversationScope {
    pub fn conversation(conversation_id: impl Into<String>) -> Self {
        Self { conversation_id: conversation_id.into(), ..Default::default() }
    }

    /// The agent this conversation is listed under: the scope's `agentId`, else the first
    /// related agent.
    pub fn listing_agent(&self) -> Option<&str> {
        self.agent_id.as_deref().or_else(|| self.relations.agent_ids.first().map(String::as_str))
    }
}

/// One durable conversation message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ConversationRecord {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::contract::schema::ResourceId))]
    pub id: String,
    pub scope: ConversationScope,
    #[cfg_attr(feature = "openapi", schema(value_type = crate::contract::schema::MessageRole))]
    pub role: String,
    pub content: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default)]
    pub sequence: i64,
    #[serde(default)]
    pub created_at_ms: i64,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub metadata: Value,
}

impl ConversationRecord {
    /// A message `id` of `role` in `conversation`, as a writer sends one: no name, tool
    /// call or metadata; the service assigns its sequence and, at 0, its time.
    pub fn new(id: impl Into<String>, conversation: impl Into<String>, role: &str, content: Value) -> Self {
        Self {
            id: id.into(),
            scope: ConversationScope::conversation(conversation),
            role: role.into(),
            content,
            name: None,
            tool_call_id: None,
            sequence: 0,
            created_at_ms: 0,
            metadata: Value::Null,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AppendMessagesRequest {
    pub messages: Vec<ConversationRecord>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AppendResponse {
    pub appended: usize,
    pub skipped: usize,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RecentMessagesRequest {
    pub scope: ConversationScope,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<crate::contract::schema::MessageRole>))]
    pub roles: Vec<String>,
}

/// Records in chronological order, oldest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MessagesResponse {
    pub items: Vec<ConversationRecord>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PageMessagesRequest {
    pub scope: ConversationScope,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<crate::contract::schema::MessageRole>))]
    pub roles: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MessagePage {
    pub items: Vec<ConversationRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListConversationsRequest {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::contract::schema::ResourceId))]
    pub agent_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ConversationSummary {
    pub conversation_id: String,
    pub agent_id: String,
    pub message_count: u64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ConversationsResponse {
    pub items: Vec<ConversationSummary>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SearchMessagesRequest {
    pub scope: ConversationScope,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::contract::schema::MessageRole>))]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// The roles a record may carry.
pub const MESSAGE_ROLES: [&str; 5] = ["user", "assistant", "tool", "system", "event"];

/// Extract plain text from a message `content` value: a string, or an array of parts
/// whose `text` (or bare string) values are joined by newlines.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(value) => value.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str).or_else(|| part.as_str()))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// What a message's substring search runs over: its content's text, folded.
pub fn search_text(content: &Value) -> String {
    match content {
        // Without the copy `content_text` makes of a string.
        Value::String(s) => search_fold(s),
        other => search_fold(&content_text(other)),
    }
}

/// The normalised form substring search runs over; queries are folded the same way.
pub fn search_fold(text: &str) -> String {
    text.to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scope_serialises_camel_case_and_omits_absent_provenance() {
        let value = serde_json::to_value(ConversationScope::conversation("conv-1")).unwrap();
        assert_eq!(value, json!({"conversationId": "conv-1"}));
    }

    #[test]
    fn content_text_reads_strings_and_part_arrays() {
        assert_eq!(content_text(&json!("hello")), "hello");
        assert_eq!(content_text(&json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])), "a\nb");
        assert_eq!(content_text(&Value::Null), "");
        assert_eq!(content_text(&json!({"k": 1})), "{\"k\":1}");
        for content in [json!("HeLLo ΣΑΣ"), json!([{"type": "text", "text": "A"}, "B"]), Value::Null] {
            assert_eq!(search_text(&content), search_fold(&content_text(&content)), "{content}");
        }
    }

    #[test]
    fn a_message_round_trips_through_json() {
        let record = ConversationRecord {
            id: "m-1".into(),
            scope: ConversationScope::conversation("conv-1"),
            role: "assistant".into(),
            content: json!("done"),
            name: None,
            tool_call_id: None,
            sequence: 7,
            created_at_ms: 1_700_000_000_000,
            metadata: Value::Null,
        };
        let encoded = serde_json::to_value(&record).unwrap();
        assert_eq!(encoded["createdAtMs"], 1_700_000_000_000_i64);
        let decoded: ConversationRecord = serde_json::from_value(encoded).unwrap();
        assert_eq!(decoded, record);
    }
}
