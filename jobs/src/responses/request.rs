//! The request direction of the Responses codec: chat-style messages in, a
//! `POST /v1/responses` body out, plus the strict validation applied to what a
//! caller hands us before anything is shaped.
//!
//! This module is the single owner of the `store` policy
//! ([`STORE_RESPONSE_SERVER_SIDE`]); every body built here carries it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Whether a response is kept server-side by the provider (`store`).
///
/// Always `false`: every request replays the full history, so a stored copy buys
/// nothing and would leave an unaudited copy of prompts and outputs with the
/// provider. The provider defaults `store` to `true`, which is why the field is
/// sent explicitly on every body rather than left to the default.
pub const STORE_RESPONSE_SERVER_SIDE: bool = false;

/// Metadata limits the provider enforces; checking them here turns a late `400`
/// into an early, precise validation error.
const MAX_METADATA_PAIRS: usize = 16;
const MAX_METADATA_KEY_CHARS: usize = 64;
const MAX_METADATA_VALUE_CHARS: usize = 512;

/// Roles a chat-style message may carry. Anything else must be an already-typed
/// Responses item (with a string `type`).
const KNOWN_ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

/// What a caller asks for; [`build_request_body`] turns it into the wire body.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponsesRequest {
    pub model: String,
    /// Chat-style messages and/or already-typed Responses items, in order.
    #[serde(default)]
    pub messages: Vec<Value>,
    /// Extra instructions placed *before* the text of any system messages.
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
}

/// Split chat-style messages into the Responses `(instructions, input)` pair.
///
/// - `system` / `developer` text joins, with a blank line, into `instructions`
///   (`None` when there is none).
/// - `user` / `assistant` become `{"role", "content": <text>}` input items.
/// - `tool` messages with a `tool_call_id` become `function_call_output` items,
///   the shape the provider expects when a tool turn is continued.
/// - Anything carrying a `type` field is already a Responses item and passes
///   through untouched, in order — reasoning and function-call echoes must reach
///   the provider verbatim.
///
/// Messages that fit none of these are dropped: this function cannot fail, so
/// callers reject them first with [`validate_chat_message`].
#[must_use]
pub fn build_responses_input(messages: &[Value]) -> (Option<String>, Vec<Value>) {
    let mut instructions: Vec<String> = Vec::new();
    let mut input = Vec::with_capacity(messages.len());
    for message in messages {
        if message.get("type").is_some() {
            input.push(message.clone());
            continue;
        }
        match message["role"].as_str() {
            Some("system" | "developer") => {
                let text = content_text(&message["content"]);
                // An empty system message adds nothing but stray separators.
                if !text.is_empty() {
                    instructions.push(text);
                }
            }
            Some(role @ ("user" | "assistant")) => {
                input.push(json!({"role": role, "content": content_text(&message["content"])}));
            }
            Some("tool") => {
                if let Some(call_id) = message["tool_call_id"].as_str() {
                    input.push(json!({
                        "type": "function_call_output",
                        "call_id": call_id,
                        "output": content_text(&message["content"]),
                    }));
                }
            }
            _ => {}
        }
    }
    let instructions = (!instructions.is_empty()).then(|| instructions.join("\n\n"));
    (instructions, input)
}

/// The plain text of a message's `content`: a string as-is, an array of parts as
/// the parts' text joined by newlines (a part may be `{"text": ..}` or a bare
/// string), anything else as empty.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            parts.iter().filter_map(|p| p.as_str().or_else(|| p["text"].as_str())).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

/// Strict check of one message before it is shaped. Either an already-typed
/// Responses item (a string `type`), or a chat message whose `role` is known and
/// whose `content` is a string, an array of parts, or null. A `tool` message must
/// name the call it answers, or it could not be sent at all.
pub fn validate_chat_message(message: &Value) -> Result<(), String> {
    let Some(obj) = message.as_object() else {
        return Err("a message must be a JSON object".to_string());
    };
    if let Some(kind) = obj.get("type") {
        return match kind.as_str() {
            Some(k) if !k.is_empty() => Ok(()),
            _ => Err("a message's `type` must be a non-empty string".to_string()),
        };
    }
    let role = match obj.get("role").and_then(Value::as_str) {
        Some(r) if KNOWN_ROLES.contains(&r) => r,
        Some(r) => return Err(format!("unknown message role {r:?}")),
        None => return Err("a message needs a string `role` or a `type`".to_string()),
    };
    match obj.get("content") {
        None | Some(Value::Null | Value::String(_) | Value::Array(_)) => {}
        Some(_) => return Err("message `content` must be a string, an array, or null".to_string()),
    }
    if role == "tool" && obj.get("tool_call_id").and_then(Value::as_str).is_none_or(str::is_empty) {
        return Err("a `tool` message needs a non-empty string `tool_call_id`".to_string());
    }
    Ok(())
}

/// Each tool must be a flat function tool: `{"type": "function", "name": <non-empty>,
/// "parameters": <object>?}`.
pub fn validate_tools(tools: &[Value]) -> Result<(), String> {
    for (i, tool) in tools.iter().enumerate() {
        let Some(obj) = tool.as_object() else {
            return Err(format!("tool {i} must be a JSON object"));
        };
        if obj.get("type").and_then(Value::as_str) != Some("function") {
            return Err(format!("tool {i} must have type \"function\""));
        }
        if obj.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(format!("tool {i} needs a non-empty string `name`"));
        }
        if obj.get("parameters").is_some_and(|p| !p.is_object()) {
            return Err(format!("tool {i}: `parameters` must be a JSON object"));
        }
    }
    Ok(())
}

/// The provider's metadata limits: at most 16 pairs, keys up to 64 characters,
/// values up to 512.
pub fn validate_metadata(metadata: &BTreeMap<String, String>) -> Result<(), String> {
    if metadata.len() > MAX_METADATA_PAIRS {
        return Err(format!("metadata has {} pairs; at most {MAX_METADATA_PAIRS} allowed", metadata.len()));
    }
    for (key, value) in metadata {
        if key.chars().count() > MAX_METADATA_KEY_CHARS {
            return Err(format!("metadata key {key:?} is longer than {MAX_METADATA_KEY_CHARS} characters"));
        }
        if value.chars().count() > MAX_METADATA_VALUE_CHARS {
            return Err(format!("metadata value for {key:?} is longer than {MAX_METADATA_VALUE_CHARS} characters"));
        }
    }
    Ok(())
}

/// Every check above, plus a non-empty model, applied to a whole request.
pub fn validate_request(req: &ResponsesRequest) -> Result<(), String> {
    if req.model.trim().is_empty() {
        return Err("`model` must be a non-empty string".to_string());
    }
    for (i, message) in req.messages.iter().enumerate() {
        validate_chat_message(message).map_err(|e| format!("message {i}: {e}"))?;
    }
    validate_tools(&req.tools)?;
    validate_metadata(&req.metadata)
}

/// The JSON body for `POST /v1/responses`. Optional fields are omitted rather
/// than sent as null; `store` is always present (see
/// [`STORE_RESPONSE_SERVER_SIDE`]).
#[must_use]
pub fn build_request_body(req: &ResponsesRequest) -> Value {
    let (system_text, input) = build_responses_input(&req.messages);
    let instructions = match (req.instructions.as_deref().filter(|s| !s.is_empty()), system_text) {
        (Some(extra), Some(system)) => Some(format!("{extra}\n\n{system}")),
        (Some(extra), None) => Some(extra.to_string()),
        (None, system) => system,
    };
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    if let Some(instructions) = instructions {
        body.insert("instructions".into(), json!(instructions));
    }
    body.insert("input".into(), Value::Array(input));
    if !req.tools.is_empty() {
        body.insert("tools".into(), Value::Array(req.tools.clone()));
    }
    if let Some(choice) = &req.tool_choice {
        body.insert("tool_choice".into(), choice.clone());
    }
    if let Some(max) = req.max_output_tokens {
        body.insert("max_output_tokens".into(), json!(max));
    }
    if let Some(effort) = &req.reasoning_effort {
        body.insert("reasoning".into(), json!({"effort": effort}));
    }
    if !req.metadata.is_empty() {
        body.insert("metadata".into(), json!(req.metadata));
    }
    body.insert("store".into(), json!(STORE_RESPONSE_SERVER_SIDE));
    Value::Object(body)
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
