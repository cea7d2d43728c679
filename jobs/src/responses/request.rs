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
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.as_str().or_else(|| p["text"].as_str()))
            .collect::<Vec<_>>()
            .join("\n"),
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
    if role == "tool"
        && obj
            .get("tool_call_id")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
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
        if obj
            .get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
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
        return Err(format!(
            "metadata has {} pairs; at most {MAX_METADATA_PAIRS} allowed",
            metadata.len()
        ));
    }
    for (key, value) in metadata {
        if key.chars().count() > MAX_METADATA_KEY_CHARS {
            return Err(format!(
                "metadata key {key:?} is longer than {MAX_METADATA_KEY_CHARS} characters"
            ));
        }
        if value.chars().count() > MAX_METADATA_VALUE_CHARS {
            return Err(format!(
                "metadata value for {key:?} is longer than {MAX_METADATA_VALUE_CHARS} characters"
            ));
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
    let instructions = match (
        req.instructions.as_deref().filter(|s| !s.is_empty()),
        system_text,
    ) {
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
mod tests {
    use super::*;

    #[test]
    fn build_input_splits_system_to_instructions_and_passes_typed_items() {
        let msgs = vec![
            json!({"role": "system", "content": "be terse"}),
            json!({"role": "user", "content": "hi"}),
            json!({"role": "assistant", "content": "hello"}),
            json!({"type": "function_call_output", "call_id": "c1", "output": "ok"}),
        ];
        let (instructions, input) = build_responses_input(&msgs);
        assert_eq!(instructions.as_deref(), Some("be terse"));
        assert_eq!(input.len(), 3);
        assert_eq!(input[0], json!({"role": "user", "content": "hi"}));
        assert_eq!(input[1], json!({"role": "assistant", "content": "hello"}));
        assert_eq!(input[2], msgs[3], "typed items pass through untouched");
    }

    #[test]
    fn build_input_joins_multiple_system_messages_and_treats_developer_as_system() {
        let msgs = vec![
            json!({"role": "system", "content": "one"}),
            json!({"role": "developer", "content": "two"}),
            json!({"role": "user", "content": "go"}),
        ];
        let (instructions, input) = build_responses_input(&msgs);
        assert_eq!(instructions.as_deref(), Some("one\n\ntwo"));
        assert_eq!(input.len(), 1);
        assert_eq!(input[0]["role"], "user");
    }

    #[test]
    fn build_input_has_no_instructions_when_no_system_message() {
        let (instructions, input) =
            build_responses_input(&[json!({"role": "user", "content": "x"})]);
        assert_eq!(instructions, None);
        assert_eq!(input.len(), 1);
    }

    #[test]
    fn array_content_joins_part_text_with_newlines() {
        let msgs = vec![
            json!({"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
            json!({"role": "user", "content": [{"type": "input_text", "text": "x"}, "y", {"type": "image"}]}),
            json!({"role": "assistant", "content": null}),
        ];
        let (instructions, input) = build_responses_input(&msgs);
        assert_eq!(instructions.as_deref(), Some("a\nb"));
        assert_eq!(input[0]["content"], "x\ny");
        assert_eq!(input[1]["content"], "");
    }

    #[test]
    fn tool_message_becomes_function_call_output_in_order() {
        let msgs = vec![
            json!({"type": "function_call", "call_id": "c9", "name": "f", "arguments": "{}"}),
            json!({"role": "tool", "tool_call_id": "c9", "content": "42"}),
            json!({"role": "user", "content": "thanks"}),
        ];
        let (_, input) = build_responses_input(&msgs);
        assert_eq!(
            input[1],
            json!({"type": "function_call_output", "call_id": "c9", "output": "42"})
        );
        assert_eq!(input[2]["role"], "user");
    }

    #[test]
    fn unshapeable_messages_are_dropped_and_empty_system_text_is_skipped() {
        let msgs = vec![
            json!({"role": "narrator", "content": "x"}),
            json!({"role": "tool", "content": "no call id"}),
            json!({"role": "system", "content": ""}),
            json!("not an object"),
        ];
        assert_eq!(build_responses_input(&msgs), (None, vec![]));
    }

    #[test]
    fn validate_chat_message_accepts_known_shapes() {
        for m in [
            json!({"role": "system", "content": "s"}),
            json!({"role": "developer", "content": [{"type": "text", "text": "d"}]}),
            json!({"role": "user", "content": "u"}),
            json!({"role": "assistant", "content": null}),
            json!({"role": "assistant"}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "out"}),
            json!({"type": "reasoning", "id": "rs_1", "summary": []}),
        ] {
            assert_eq!(validate_chat_message(&m), Ok(()), "{m}");
        }
    }

    #[test]
    fn validate_chat_message_rejects_bad_shapes() {
        for m in [
            json!("text"),
            json!({"content": "no role"}),
            json!({"role": "narrator", "content": "x"}),
            json!({"role": 3, "content": "x"}),
            json!({"role": "user", "content": 5}),
            json!({"role": "user", "content": {"text": "x"}}),
            json!({"role": "tool", "content": "x"}),
            json!({"role": "tool", "tool_call_id": "", "content": "x"}),
            json!({"type": 7}),
            json!({"type": ""}),
        ] {
            assert!(validate_chat_message(&m).is_err(), "{m}");
        }
    }

    #[test]
    fn validate_tools_requires_named_function_tools() {
        let good = json!({"type": "function", "name": "f", "parameters": {"type": "object"}});
        assert_eq!(
            validate_tools(&[good.clone(), json!({"type": "function", "name": "g"})]),
            Ok(())
        );
        for bad in [
            json!("f"),
            json!({"type": "web_search", "name": "f"}),
            json!({"type": "function"}),
            json!({"type": "function", "name": ""}),
            json!({"type": "function", "name": 1}),
            json!({"type": "function", "name": "f", "parameters": "{}"}),
        ] {
            assert!(
                validate_tools(&[good.clone(), bad.clone()]).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn validate_metadata_enforces_provider_limits() {
        let at_limit: BTreeMap<_, _> = (0..16)
            .map(|i| (format!("k{i}"), "v".to_string()))
            .collect();
        assert_eq!(validate_metadata(&at_limit), Ok(()));
        let too_many: BTreeMap<_, _> = (0..17)
            .map(|i| (format!("k{i}"), "v".to_string()))
            .collect();
        assert!(validate_metadata(&too_many).is_err());
        // Limits count characters, not bytes.
        let wide_ok = BTreeMap::from([("é".repeat(64), "ü".repeat(512))]);
        assert_eq!(validate_metadata(&wide_ok), Ok(()));
        assert!(validate_metadata(&BTreeMap::from([("k".repeat(65), String::new())])).is_err());
        assert!(validate_metadata(&BTreeMap::from([("k".into(), "v".repeat(513))])).is_err());
    }

    #[test]
    fn validate_request_checks_model_messages_tools_and_metadata() {
        let ok = ResponsesRequest {
            model: "gpt-x".into(),
            messages: vec![json!({"role": "user", "content": "hi"})],
            ..Default::default()
        };
        assert_eq!(validate_request(&ok), Ok(()));
        assert!(
            validate_request(&ResponsesRequest {
                model: " ".into(),
                ..ok.clone()
            })
            .is_err()
        );
        let bad_msg = ResponsesRequest {
            messages: vec![json!({"role": "narrator"})],
            ..ok.clone()
        };
        assert!(
            validate_request(&bad_msg)
                .unwrap_err()
                .starts_with("message 0")
        );
        assert!(
            validate_request(&ResponsesRequest {
                tools: vec![json!({})],
                ..ok.clone()
            })
            .is_err()
        );
    }

    #[test]
    fn minimal_body_omits_optional_fields_but_always_sends_store_false() {
        let req = ResponsesRequest {
            model: "m".into(),
            ..Default::default()
        };
        assert_eq!(
            build_request_body(&req),
            json!({"model": "m", "input": [], "store": false})
        );
    }

    #[test]
    fn full_body_carries_every_field() {
        let tool = json!({"type": "function", "name": "f", "parameters": {"type": "object"}});
        let req = ResponsesRequest {
            model: "gpt-x".into(),
            messages: vec![
                json!({"role": "system", "content": "sys"}),
                json!({"role": "user", "content": "hi"}),
            ],
            instructions: Some("extra".into()),
            tools: vec![tool.clone()],
            tool_choice: Some(json!("auto")),
            max_output_tokens: Some(256),
            reasoning_effort: Some("low".into()),
            metadata: BTreeMap::from([("job".into(), "j1".into())]),
        };
        let body = build_request_body(&req);
        assert_eq!(
            body,
            json!({
                "model": "gpt-x",
                "instructions": "extra\n\nsys",
                "input": [{"role": "user", "content": "hi"}],
                "tools": [tool],
                "tool_choice": "auto",
                "max_output_tokens": 256,
                "reasoning": {"effort": "low"},
                "metadata": {"job": "j1"},
                "store": false,
            })
        );
    }

    #[test]
    fn extra_instructions_alone_are_used_and_empty_extra_is_ignored() {
        let mut req = ResponsesRequest {
            model: "m".into(),
            instructions: Some("only".into()),
            ..Default::default()
        };
        assert_eq!(build_request_body(&req)["instructions"], "only");
        req.instructions = Some(String::new());
        req.messages = vec![json!({"role": "developer", "content": "dev"})];
        assert_eq!(build_request_body(&req)["instructions"], "dev");
    }

    #[test]
    fn request_serde_is_camel_case_with_defaults() {
        let req: ResponsesRequest = serde_json::from_value(
            json!({"model": "m", "maxOutputTokens": 9, "reasoningEffort": "high"}),
        )
        .unwrap();
        assert_eq!(req.max_output_tokens, Some(9));
        assert_eq!(req.reasoning_effort.as_deref(), Some("high"));
        assert!(req.messages.is_empty() && req.metadata.is_empty());
        let back = serde_json::to_value(&req).unwrap();
        assert_eq!(back["toolChoice"], Value::Null);
        assert_eq!(
            serde_json::from_value::<ResponsesRequest>(back).unwrap(),
            req
        );
    }
}
