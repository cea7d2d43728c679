//! The reply direction of the Responses codec: a response body in, a typed
//! [`DecodedResponse`] or [`ResponseDecodeError`] out.
//!
//! Decoding is fail-closed. HTTP `2xx` says only that the request was accepted;
//! whether the turn finished is in the body. [`decode_response`] returns `Ok`
//! only when the body shows affirmative output (assistant text or tool calls)
//! and nothing that contradicts it (an error, a non-completed status, a refusal).
//! Every other body gets its own error variant, with a stable
//! [`error_code`](ResponseDecodeError::error_code), so a caller can never mistake
//! a truncated, failed, refused or empty body for an empty-but-fine reply.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::operation::ErrorCode;

/// Used when a refusal part carries no text: the decline still counts.
const DEFAULT_REFUSAL: &str = "(the model refused without a message)";

/// Token accounting for one turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Input tokens served from the provider's prompt cache, when reported.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub cached_tokens: Option<u32>,
    /// Output tokens spent on hidden reasoning, when reported.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub reasoning_tokens: Option<u32>,
}

/// A completed turn with affirmative output.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedResponse {
    /// Assistant text from every `message` item's text parts, concatenated; the
    /// top-level `output_text` convenience field is used only when there is none.
    pub text: String,
    /// Raw `function_call` items, in output order.
    pub tool_calls: Vec<Value>,
    /// Raw `reasoning` and `function_call` items in output order. Kept as raw
    /// JSON because continuing a tool turn must send them back verbatim.
    pub echo: Vec<Value>,
    pub model: Option<String>,
    pub usage: Option<TokenUsage>,
    /// The provider's `id` for this response.
    pub response_id: Option<String>,
}

/// Why a body is not a usable completed turn.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResponseDecodeError {
    /// The model declined (a `refusal` part) and requested no tool calls. The
    /// message is the refusal plus any accompanying text.
    ///
    /// A refusal is the turn's answer, not a transport failure, so it keeps what
    /// a caller reports about any answer: usage, model and response id.
    #[error("the model refused the request: {message}")]
    Refused { message: String, usage: Option<TokenUsage>, model: Option<String>, response_id: Option<String> },
    /// The model both declined and requested tool calls. There is no sane partial
    /// reading of that, so the whole turn is rejected and no call may run.
    #[error("the model both refused and requested tool calls; the turn is rejected: {refusal}")]
    MixedRefusalAndToolCalls { refusal: String },
    /// A top-level `error` is present. It wins over any status, including
    /// `completed` and `failed`.
    #[error("the provider reported an error: {message}")]
    ProviderError { message: String, code: Option<String> },
    /// `status: "failed"` with no top-level `error` to explain it.
    #[error("the response failed: {message}")]
    Failed { message: String, code: Option<String> },
    /// `status: "incomplete"`: truncated, e.g. by `max_output_tokens` or a
    /// content filter. Partial output is not a finished turn.
    #[error("the response is incomplete ({})", reason.as_deref().unwrap_or("no reason given"))]
    Incomplete { reason: Option<String> },
    /// `status: "cancelled"`: terminal, and it will not finish on its own, so it
    /// is kept apart from the statuses that are merely still running.
    #[error("the response was cancelled")]
    Cancelled,
    /// A status that is not terminal (`queued`, `in_progress`) or not known.
    #[error("the response ended with non-terminal status {0:?}")]
    NonTerminal(String),
    /// Nothing contradicts success, but nothing affirms it either.
    #[error("malformed response body: {0}")]
    Malformed(String),
}

impl ResponseDecodeError {
    /// A stable, machine-readable code for logs, metrics and API errors.
    #[must_use]
    pub fn error_code(&self) -> ErrorCode {
        match self {
            Self::Refused { .. } => ErrorCode::Refused,
            Self::MixedRefusalAndToolCalls { .. } => ErrorCode::MixedRefusalToolCalls,
            Self::ProviderError { .. } => ErrorCode::ProviderError,
            Self::Failed { .. } => ErrorCode::ProviderFailed,
            Self::Incomplete { .. } => ErrorCode::Incomplete,
            Self::Cancelled => ErrorCode::ProviderCancelled,
            Self::NonTerminal(_) => ErrorCode::NonTerminal,
            Self::Malformed(_) => ErrorCode::MalformedResponse,
        }
    }

    /// Whether repeating the same request may succeed. Only a provider-side
    /// `server_error` qualifies — the case the official clients retry. Every
    /// other outcome would just repeat (and re-bill) the same answer.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Self::ProviderError { code, .. } | Self::Failed { code, .. } => code.as_deref() == Some("server_error"),
            _ => false,
        }
    }
}

/// Decode a Responses body. Checks run in a fixed order, and the order is the
/// contract: a non-object body is malformed; a top-level `error` wins; then the
/// status (`failed`, `incomplete`, `cancelled`, anything else not `completed`);
/// then a refusal (alone or mixed with tool calls); and only then is `Ok`
/// possible, and only with text or tool calls. An absent status is accepted
/// (lenient local servers omit it), but only together with such output.
pub fn decode_response(json: &Value) -> Result<DecodedResponse, ResponseDecodeError> {
    if !json.is_object() {
        return Err(ResponseDecodeError::Malformed("the body is not a JSON object".to_string()));
    }
    let usage = decode_usage(&json["usage"]);

    if let Some((message, code)) = top_level_error(&json["error"]) {
        return Err(ResponseDecodeError::ProviderError { message, code });
    }
    match &json["status"] {
        Value::Null => {}
        Value::String(s) => match s.as_str() {
            "completed" => {}
            "failed" => {
                return Err(ResponseDecodeError::Failed {
                    message: "status \"failed\" with no error detail".to_string(),
                    code: None,
                });
            }
            "incomplete" => {
                let reason = json["incomplete_details"]["reason"].as_str().map(str::to_string);
                return Err(ResponseDecodeError::Incomplete { reason });
            }
            "cancelled" => return Err(ResponseDecodeError::Cancelled),
            other => return Err(ResponseDecodeError::NonTerminal(other.to_string())),
        },
        // A status that is present but not a string cannot be read as
        // "completed"; treating it as absent would fail open.
        other => {
            return Err(ResponseDecodeError::Malformed(format!("`status` is not a string: {other}")));
        }
    }

    let output = decode_output(json);
    if let Some(refusal) = output.refusal {
        if !output.tool_calls.is_empty() {
            return Err(ResponseDecodeError::MixedRefusalAndToolCalls { refusal });
        }
        let message = if output.text.is_empty() { refusal } else { format!("{refusal}\n\n{}", output.text) };
        return Err(ResponseDecodeError::Refused {
            message,
            usage,
            model: json["model"].as_str().map(str::to_string),
            response_id: json["id"].as_str().map(str::to_string),
        });
    }
    if output.text.is_empty() && output.tool_calls.is_empty() {
        return Err(ResponseDecodeError::Malformed("no assistant text and no tool calls".to_string()));
    }
    Ok(DecodedResponse {
        text: output.text,
        tool_calls: output.tool_calls,
        echo: output.echo,
        model: json["model"].as_str().map(str::to_string),
        usage,
        response_id: json["id"].as_str().map(str::to_string),
    })
}

/// `(message, code)` for a present `error`; `None` only when it is absent or
/// null. Any non-null shape counts, so an odd error body still fails closed.
fn top_level_error(error: &Value) -> Option<(String, Option<String>)> {
    match error {
        Value::Null => None,
        Value::String(s) => Some((s.clone(), None)),
        Value::Object(o) => {
            let message =
                o.get("message").and_then(Value::as_str).unwrap_or("an error object with no message").to_string();
            Some((message, o.get("code").and_then(Value::as_str).map(str::to_string)))
        }
        other => Some((other.to_string(), None)),
    }
}

struct Output {
    text: String,
    tool_calls: Vec<Value>,
    echo: Vec<Value>,
    /// `Some` when any `message` item holds a refusal-typed part.
    refusal: Option<String>,
}

fn decode_output(json: &Value) -> Output {
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    let mut echo = Vec::new();
    let mut refusal_text = String::new();
    let mut refused = false;
    for item in json["output"].as_array().into_iter().flatten() {
        match item["type"].as_str() {
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    if part["type"] == "refusal" {
                        // The part's presence is the decline; its text is optional.
                        // Keying on the text would let an empty refusal fail open.
                        refused = true;
                        refusal_text.push_str(part["refusal"].as_str().unwrap_or_default());
                    } else if let Some(t) = part["text"].as_str() {
                        text.push_str(t);
                    }
                }
            }
            Some("function_call") => {
                tool_calls.push(item.clone());
                echo.push(item.clone());
            }
            // The provider needs the reasoning that produced a call sent back with it.
            Some("reasoning") => echo.push(item.clone()),
            _ => {}
        }
    }
    if text.is_empty()
        && let Some(t) = json["output_text"].as_str()
    {
        text.push_str(t);
    }
    let refusal = refused.then(|| if refusal_text.is_empty() { DEFAULT_REFUSAL.to_string() } else { refusal_text });
    Output { text, tool_calls, echo, refusal }
}

/// Decode a `usage` object (pass the sub-object, not the whole body). Accepts
/// the Responses names (`input_tokens` / `output_tokens`) and, from lenient
/// servers, the Chat Completions names (`prompt_tokens` / `completion_tokens`).
/// Both counts are required; the details are optional. Counts beyond `u32`
/// saturate so an absurd value cannot wrap into a small one.
#[must_use]
pub fn decode_usage(usage: &Value) -> Option<TokenUsage> {
    let count = |names: [&str; 2]| names.iter().find_map(|n| usage[*n].as_u64()).map(saturate);
    let detail =
        |sections: [&str; 2], field: &str| sections.iter().find_map(|s| usage[*s][field].as_u64()).map(saturate);
    Some(TokenUsage {
        input_tokens: count(["input_tokens", "prompt_tokens"])?,
        output_tokens: count(["output_tokens", "completion_tokens"])?,
        cached_tokens: detail(["input_tokens_details", "prompt_tokens_details"], "cached_tokens"),
        reasoning_tokens: detail(["output_tokens_details", "completion_tokens_details"], "reasoning_tokens"),
    })
}

fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
