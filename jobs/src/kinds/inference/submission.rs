//! The body of `POST /internal/v1/context/inference` and its strict validation: what a
//! caller may ask for, checked before anything is stored, turned into the stored job.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::InferenceJob;
use crate::contract::validate_resource_id;
use crate::responses::{ResponsesRequest, validate_chat_message, validate_metadata, validate_tools};

/// Most messages one submission may carry (history loaded from a conversation is
/// bounded by the history budget instead).
pub const MAX_INFERENCE_MESSAGES: usize = 500;
/// The provider's limit on tools per request.
pub const MAX_TOOLS: usize = 128;
/// The provider rejects a smaller `max_output_tokens`; refusing it here gives the
/// caller a 400 now instead of a failed operation later.
pub const MIN_MAX_OUTPUT_TOKENS: u32 = 16;
/// Accepted `reasoningEffort` values.
pub const REASONING_EFFORTS: [&str; 6] = ["none", "minimal", "low", "medium", "high", "xhigh"];

/// What a caller submits. Unknown fields are rejected (a misspelt `appendReply` must
/// not silently do nothing).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InferenceSubmission {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::contract::schema::ResourceId))]
    pub model: String,
    /// New messages for this turn (chat-style, or typed Responses items such as
    /// `function_call_output`), after any loaded history.
    #[serde(default)]
    pub messages: Vec<Value>,
    /// Load this conversation's newest messages (within the history budget) first.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::contract::schema::ResourceId>))]
    pub conversation_id: Option<String>,
    #[serde(default)]
    pub instructions: Option<String>,
    #[serde(default)]
    pub tools: Vec<Value>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Append the assistant reply to `conversationId` (requires it).
    #[serde(default)]
    pub append_reply: bool,
}

impl InferenceSubmission {
    /// Validate everything and produce the stored job; `Err` is a 400 message.
    pub fn into_job(self) -> Result<InferenceJob, String> {
        validate_resource_id("model", &self.model)?;
        if let Some(c) = &self.conversation_id {
            validate_resource_id("conversationId", c)?;
        }
        if self.messages.is_empty() && self.conversation_id.is_none() {
            return Err("give `messages`, a `conversationId` to load history from, or both".into());
        }
        if self.append_reply && self.conversation_id.is_none() {
            return Err("`appendReply` needs a `conversationId` to append to".into());
        }
        if self.messages.len() > MAX_INFERENCE_MESSAGES {
            return Err(format!(
                "at most {MAX_INFERENCE_MESSAGES} messages per submission, got {}",
                self.messages.len()
            ));
        }
        for (i, m) in self.messages.iter().enumerate() {
            validate_chat_message(m).map_err(|e| format!("messages[{i}]: {e}"))?;
        }
        if self.tools.len() > MAX_TOOLS {
            return Err(format!("at most {MAX_TOOLS} tools, got {}", self.tools.len()));
        }
        validate_tools(&self.tools)?;
        let mut names = HashSet::new();
        for tool in &self.tools {
            let name = tool["name"].as_str().unwrap_or_default();
            if !names.insert(name) {
                return Err(format!("tool name {name:?} is used twice"));
            }
        }
        if let Some(choice) = &self.tool_choice {
            validate_tool_choice(choice, &names)?;
        }
        if let Some(max) = self.max_output_tokens
            && max < MIN_MAX_OUTPUT_TOKENS
        {
            return Err(format!("maxOutputTokens must be at least {MIN_MAX_OUTPUT_TOKENS}"));
        }
        if let Some(effort) = &self.reasoning_effort
            && !REASONING_EFFORTS.contains(&effort.as_str())
        {
            return Err(format!("unknown reasoningEffort {effort:?}; expected one of {REASONING_EFFORTS:?}"));
        }
        validate_metadata(&self.metadata)?;
        Ok(InferenceJob {
            request: ResponsesRequest {
                model: self.model,
                messages: self.messages,
                instructions: self.instructions,
                tools: self.tools,
                tool_choice: self.tool_choice,
                max_output_tokens: self.max_output_tokens,
                reasoning_effort: self.reasoning_effort,
                metadata: self.metadata,
            },
            conversation_id: self.conversation_id,
            append_reply: self.append_reply,
        })
    }
}

/// `"auto"`, `"none"`, `"required"` (with tools), or `{"type": "function", "name": <a
/// given tool>}`.
fn validate_tool_choice(choice: &Value, tools: &HashSet<&str>) -> Result<(), String> {
    match choice {
        Value::String(s) if s == "auto" || s == "none" => Ok(()),
        Value::String(s) if s == "required" && !tools.is_empty() => Ok(()),
        Value::String(s) if s == "required" => Err("toolChoice \"required\" needs tools".into()),
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            match o.get("name").and_then(Value::as_str) {
                Some(name) if tools.contains(name) => Ok(()),
                Some(name) => Err(format!("toolChoice names {name:?}, which is not among the tools")),
                None => Err("toolChoice of type function needs a string `name`".into()),
            }
        }
        _ => Err(r#"toolChoice must be "auto", "none", "required" or {"type": "function", "name": …}"#.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> InferenceSubmission {
        InferenceSubmission {
            model: "gpt-x".into(),
            messages: vec![json!({"role": "user", "content": "hi"})],
            ..Default::default()
        }
    }

    #[test]
    fn a_full_submission_becomes_the_job() {
        let tool = json!({"type": "function", "name": "f", "parameters": {"type": "object"}});
        let s: InferenceSubmission = serde_json::from_value(json!({
            "model": "gpt-x", "messages": [{"role": "user", "content": "hi"}], "conversationId": "c1",
            "instructions": "be brief", "tools": [tool], "toolChoice": {"type": "function", "name": "f"},
            "maxOutputTokens": 64, "reasoningEffort": "low", "metadata": {"k": "v"}, "appendReply": true,
        }))
        .unwrap();
        let job = s.into_job().unwrap();
        assert_eq!(job.conversation_id.as_deref(), Some("c1"));
        assert!(job.append_reply);
        assert_eq!(job.request.max_output_tokens, Some(64));
        assert_eq!(job.request.reasoning_effort.as_deref(), Some("low"));
        assert_eq!(job.request.instructions.as_deref(), Some("be brief"));
        assert_eq!(job.request.tools.len(), 1);
    }

    #[test]
    fn history_alone_is_enough() {
        let s = InferenceSubmission { messages: vec![], conversation_id: Some("c".into()), ..base() };
        assert!(s.into_job().is_ok());
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let e =
            serde_json::from_value::<InferenceSubmission>(json!({"model": "m", "messages": [], "apendReply": true}));
        assert!(e.is_err());
        assert!(serde_json::from_value::<InferenceSubmission>(json!({"messages": []})).is_err());
        assert!(serde_json::from_value::<InferenceSubmission>(json!({"model": "m", "maxOutputTokens": -1})).is_err());
    }

    #[test]
    fn every_rule_rejects_with_a_message() {
        let tool = json!({"type": "function", "name": "f"});
        let cases: Vec<(InferenceSubmission, &str)> = vec![
            (InferenceSubmission { model: " ".into(), ..base() }, "model"),
            (InferenceSubmission { model: "m".repeat(200), ..base() }, "model"),
            (InferenceSubmission { messages: vec![], ..base() }, "messages"),
            (InferenceSubmission { append_reply: true, ..base() }, "appendReply"),
            (InferenceSubmission { conversation_id: Some(String::new()), ..base() }, "conversationId"),
            (InferenceSubmission { messages: vec![json!({"role": "narrator"})], ..base() }, "messages[0]"),
            (InferenceSubmission { messages: vec![json!({"role": "user"}); 501], ..base() }, "at most 500"),
            (InferenceSubmission { tools: vec![json!({"type": "function"})], ..base() }, "tool 0"),
            (InferenceSubmission { tools: vec![tool.clone(), tool.clone()], ..base() }, "twice"),
            (InferenceSubmission { tools: vec![tool.clone(); 129], ..base() }, "at most 128"),
            (InferenceSubmission { tool_choice: Some(json!("required")), ..base() }, "needs tools"),
            (InferenceSubmission { tool_choice: Some(json!("sometimes")), ..base() }, "toolChoice"),
            (
                InferenceSubmission {
                    tools: vec![tool.clone()],
                    tool_choice: Some(json!({"type": "function", "name": "g"})),
                    ..base()
                },
                "not among",
            ),
            (InferenceSubmission { max_output_tokens: Some(15), ..base() }, "maxOutputTokens"),
            (InferenceSubmission { reasoning_effort: Some("max".into()), ..base() }, "reasoningEffort"),
            (
                InferenceSubmission { metadata: (0..17).map(|i| (format!("k{i}"), String::new())).collect(), ..base() },
                "metadata",
            ),
        ];
        for (s, needle) in cases {
            let e = s.clone().into_job().expect_err(needle);
            assert!(e.contains(needle), "{e:?} should mention {needle:?}");
        }
        assert!(
            InferenceSubmission { tools: vec![tool], tool_choice: Some(json!("required")), ..base() }
                .into_job()
                .is_ok()
        );
    }
}
