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

/// Used when a refusal part carries no text: the decline still counts.
const DEFAULT_REFUSAL: &str = "(the model refused without a message)";

/// Token accounting for one turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Input tokens served from the provider's prompt cache, when reported.
    #[serde(default)]
    pub cached_tokens: Option<u32>,
    /// Output tokens spent on hidden reasoning, when reported.
    #[serde(default)]
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
    Refused {
        message: String,
        usage: Option<TokenUsage>,
        model: Option<String>,
        response_id: Option<String>,
    },
    /// The model both declined and requested tool calls. There is no sane partial
    /// reading of that, so the whole turn is rejected and no call may run.
    #[error("the model both refused and requested tool calls; the turn is rejected: {refusal}")]
    MixedRefusalAndToolCalls { refusal: String },
    /// A top-level `error` is present. It wins over any status, including
    /// `completed` and `failed`.
    #[error("the provider reported an error: {message}")]
    ProviderError {
        message: String,
        code: Option<String>,
    },
    /// `status: "failed"` with no top-level `error` to explain it.
    #[error("the response failed: {message}")]
    Failed {
        message: String,
        code: Option<String>,
    },
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
    pub fn error_code(&self) -> &'static str {
        match self {
            Self::Refused { .. } => "refused",
            Self::MixedRefusalAndToolCalls { .. } => "mixed_refusal_tool_calls",
            Self::ProviderError { .. } => "provider_error",
            Self::Failed { .. } => "provider_failed",
            Self::Incomplete { .. } => "incomplete",
            Self::Cancelled => "provider_cancelled",
            Self::NonTerminal(_) => "non_terminal",
            Self::Malformed(_) => "malformed_response",
        }
    }

    /// Whether repeating the same request may succeed. Only a provider-side
    /// `server_error` qualifies — the case the official clients retry. Every
    /// other outcome would just repeat (and re-bill) the same answer.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Self::ProviderError { code, .. } | Self::Failed { code, .. } => {
                code.as_deref() == Some("server_error")
            }
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
        return Err(ResponseDecodeError::Malformed(
            "the body is not a JSON object".to_string(),
        ));
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
                let reason = json["incomplete_details"]["reason"]
                    .as_str()
                    .map(str::to_string);
                return Err(ResponseDecodeError::Incomplete { reason });
            }
            "cancelled" => return Err(ResponseDecodeError::Cancelled),
            other => return Err(ResponseDecodeError::NonTerminal(other.to_string())),
        },
        // A status that is present but not a string cannot be read as
        // "completed"; treating it as absent would fail open.
        other => {
            return Err(ResponseDecodeError::Malformed(format!(
                "`status` is not a string: {other}"
            )));
        }
    }

    let output = decode_output(json);
    if let Some(refusal) = output.refusal {
        if !output.tool_calls.is_empty() {
            return Err(ResponseDecodeError::MixedRefusalAndToolCalls { refusal });
        }
        let message = if output.text.is_empty() {
            refusal
        } else {
            format!("{refusal}\n\n{}", output.text)
        };
        return Err(ResponseDecodeError::Refused {
            message,
            usage,
            model: json["model"].as_str().map(str::to_string),
            response_id: json["id"].as_str().map(str::to_string),
        });
    }
    if output.text.is_empty() && output.tool_calls.is_empty() {
        return Err(ResponseDecodeError::Malformed(
            "no assistant text and no tool calls".to_string(),
        ));
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
            let message = o
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("an error object with no message")
                .to_string();
            Some((
                message,
                o.get("code").and_then(Value::as_str).map(str::to_string),
            ))
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
    let refusal = refused.then(|| {
        if refusal_text.is_empty() {
            DEFAULT_REFUSAL.to_string()
        } else {
            refusal_text
        }
    });
    Output {
        text,
        tool_calls,
        echo,
        refusal,
    }
}

/// Decode a `usage` object (pass the sub-object, not the whole body). Accepts
/// the Responses names (`input_tokens` / `output_tokens`) and, from lenient
/// servers, the Chat Completions names (`prompt_tokens` / `completion_tokens`).
/// Both counts are required; the details are optional. Counts beyond `u32`
/// saturate so an absurd value cannot wrap into a small one.
#[must_use]
pub fn decode_usage(usage: &Value) -> Option<TokenUsage> {
    let count = |names: [&str; 2]| names.iter().find_map(|n| usage[*n].as_u64()).map(saturate);
    let detail = |sections: [&str; 2], field: &str| {
        sections
            .iter()
            .find_map(|s| usage[*s][field].as_u64())
            .map(saturate)
    };
    Some(TokenUsage {
        input_tokens: count(["input_tokens", "prompt_tokens"])?,
        output_tokens: count(["output_tokens", "completion_tokens"])?,
        cached_tokens: detail(
            ["input_tokens_details", "prompt_tokens_details"],
            "cached_tokens",
        ),
        reasoning_tokens: detail(
            ["output_tokens_details", "completion_tokens_details"],
            "reasoning_tokens",
        ),
    })
}

fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(parts: Value) -> Value {
        json!({"type": "message", "content": parts})
    }
    fn text_msg(t: &str) -> Value {
        msg(json!([{"type": "output_text", "text": t}]))
    }
    fn call(id: &str) -> Value {
        json!({"type": "function_call", "call_id": id, "name": "f", "arguments": "{}"})
    }
    fn refusal(r: &str) -> Value {
        msg(json!([{"type": "refusal", "refusal": r}]))
    }
    fn err(body: Value) -> ResponseDecodeError {
        decode_response(&body).expect_err("body must not decode as success")
    }

    // ---- ported from the seed codec ----

    #[test]
    fn completed_message_extracts_text_and_usage() {
        let body = json!({
            "id": "resp_1", "status": "completed", "model": "gpt-5.6-sol",
            "output": [text_msg("the answer")],
            "usage": {"input_tokens": 11, "output_tokens": 7},
        });
        let d = decode_response(&body).expect("completed success");
        assert_eq!(d.text, "the answer");
        assert_eq!(d.model.as_deref(), Some("gpt-5.6-sol"));
        assert_eq!(d.response_id.as_deref(), Some("resp_1"));
        assert_eq!(d.usage.unwrap().input_tokens, 11);
        assert!(d.tool_calls.is_empty());
    }

    #[test]
    fn missing_status_with_output_text_succeeds() {
        assert_eq!(
            decode_response(&json!({"output_text": "ok"})).unwrap().text,
            "ok"
        );
    }

    #[test]
    fn missing_status_with_structured_message_succeeds() {
        assert_eq!(
            decode_response(&json!({"output": [text_msg("hi")]}))
                .unwrap()
                .text,
            "hi"
        );
    }

    #[test]
    fn missing_status_with_top_level_error_fails() {
        let e = err(json!({"error": {"message": "provider failure"}}));
        assert!(
            matches!(e, ResponseDecodeError::ProviderError { message, code: None } if message == "provider failure")
        );
    }

    #[test]
    fn top_level_error_wins_over_a_completed_status() {
        let e = err(
            json!({"status": "completed", "error": {"message": "late"}, "output": [text_msg("x")]}),
        );
        assert!(matches!(e, ResponseDecodeError::ProviderError { .. }));
    }

    #[test]
    fn empty_object_body_is_malformed() {
        assert!(matches!(err(json!({})), ResponseDecodeError::Malformed(_)));
    }

    #[test]
    fn completed_but_empty_body_is_malformed_not_empty_success() {
        assert!(matches!(
            err(json!({"status": "completed", "output": []})),
            ResponseDecodeError::Malformed(_)
        ));
    }

    #[test]
    fn refusal_only_response_returns_refused() {
        let body = json!({"output": [refusal("I cannot comply")], "usage": {"input_tokens": 4, "output_tokens": 6},
                          "id": "resp_r", "model": "m1"});
        match err(body) {
            ResponseDecodeError::Refused {
                message,
                usage,
                model,
                response_id,
            } => {
                assert_eq!(message, "I cannot comply");
                assert_eq!(usage.unwrap().output_tokens, 6);
                assert_eq!(model.as_deref(), Some("m1"));
                assert_eq!(response_id.as_deref(), Some("resp_r"));
            }
            other => panic!("expected Refused, got {other:?}"),
        }
    }

    #[test]
    fn refusal_with_text_returns_refused_including_the_text() {
        let parts = json!([{"type": "refusal", "refusal": "I won't run that"}, {"type": "output_text", "text": "but here is why"}]);
        match err(json!({"output": [msg(parts)]})) {
            ResponseDecodeError::Refused { message, .. } => {
                assert_eq!(message, "I won't run that\n\nbut here is why")
            }
            other => panic!("expected Refused, got {other:?}"),
        }
    }

    #[test]
    fn refusal_with_a_tool_call_is_mixed_and_rejected_never_executed() {
        let rm = json!({"type": "function_call", "call_id": "call_1", "name": "run_command",
                        "arguments": "{\"command\":\"rm -rf /\"}"});
        let e = err(json!({"output": [refusal("I cannot perform that operation"), rm]}));
        assert_eq!(
            e,
            ResponseDecodeError::MixedRefusalAndToolCalls {
                refusal: "I cannot perform that operation".into()
            }
        );
    }

    #[test]
    fn refusal_with_multiple_tool_calls_is_mixed_and_rejected() {
        let e =
            err(json!({"status": "completed", "output": [refusal("no"), call("c1"), call("c2")]}));
        assert!(matches!(
            e,
            ResponseDecodeError::MixedRefusalAndToolCalls { .. }
        ));
    }

    #[test]
    fn status_less_mixed_refusal_and_tool_call_is_still_rejected() {
        let e = err(json!({"output": [refusal("declined"), call("c1")]}));
        assert!(matches!(
            e,
            ResponseDecodeError::MixedRefusalAndToolCalls { .. }
        ));
    }

    #[test]
    fn empty_text_refusal_part_with_a_tool_call_is_still_mixed_and_rejected() {
        let e = err(json!({"output": [refusal(""), call("c1")]}));
        assert_eq!(
            e,
            ResponseDecodeError::MixedRefusalAndToolCalls {
                refusal: DEFAULT_REFUSAL.into()
            }
        );
    }

    #[test]
    fn refusal_part_with_no_refusal_field_still_declines() {
        let e = err(json!({"output": [msg(json!([{"type": "refusal"}]))]}));
        assert_eq!(
            e,
            ResponseDecodeError::Refused {
                message: DEFAULT_REFUSAL.into(),
                usage: None,
                model: None,
                response_id: None,
            }
        );
    }

    #[test]
    fn incomplete_status_is_an_error_carrying_the_reason() {
        let e = err(
            json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
                           "output": [text_msg("partial…")]}),
        );
        assert_eq!(
            e,
            ResponseDecodeError::Incomplete {
                reason: Some("max_output_tokens".into())
            }
        );
        assert_eq!(
            err(json!({"status": "incomplete"})),
            ResponseDecodeError::Incomplete { reason: None }
        );
    }

    #[test]
    fn failed_status_is_an_error() {
        assert!(matches!(
            err(json!({"status": "failed"})),
            ResponseDecodeError::Failed { code: None, .. }
        ));
    }

    #[test]
    fn unknown_status_is_non_terminal_error() {
        assert_eq!(
            err(json!({"status": "in_progress"})),
            ResponseDecodeError::NonTerminal("in_progress".into())
        );
        assert_eq!(
            err(json!({"status": "queued", "output_text": "x"})),
            ResponseDecodeError::NonTerminal("queued".into())
        );
    }

    #[test]
    fn unknown_output_item_with_no_usable_content_is_malformed() {
        let e = err(
            json!({"status": "completed", "output": [{"type": "web_search_call", "id": "ws_1"}]}),
        );
        assert!(matches!(e, ResponseDecodeError::Malformed(_)));
    }

    #[test]
    fn function_calls_and_reasoning_are_extracted_in_order() {
        let (c, r) = (
            call("call_1"),
            json!({"type": "reasoning", "id": "rs_1", "summary": []}),
        );
        let d = decode_response(&json!({"status": "completed", "output": [r.clone(), c.clone()]}))
            .unwrap();
        assert_eq!(d.tool_calls, vec![c.clone()]);
        assert_eq!(d.echo, vec![r, c]);
        assert_eq!(d.text, "");
    }

    #[test]
    fn chat_completions_usage_names_are_accepted() {
        let d = decode_response(&json!({"status": "completed", "output_text": "hi",
                                        "usage": {"prompt_tokens": 3, "completion_tokens": 5}}))
        .unwrap();
        let u = d.usage.unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (3, 5));
    }

    // ---- beyond the seed ----

    #[test]
    fn cancelled_is_its_own_terminal_error() {
        let e = err(json!({"status": "cancelled", "output": [text_msg("x")]}));
        assert_eq!(e, ResponseDecodeError::Cancelled);
        assert_eq!(e.error_code(), "provider_cancelled");
        assert!(!e.is_transient());
    }

    #[test]
    fn failed_reply_with_error_object_is_provider_error_with_code() {
        let e =
            err(json!({"status": "failed", "error": {"code": "server_error", "message": "boom"}}));
        assert_eq!(
            e,
            ResponseDecodeError::ProviderError {
                message: "boom".into(),
                code: Some("server_error".into())
            }
        );
        assert!(e.is_transient());
        let quota = err(json!({"error": {"code": "rate_limit_exceeded", "message": "slow down"}}));
        assert!(!quota.is_transient());
    }

    #[test]
    fn odd_error_shapes_still_fail_closed() {
        assert_eq!(
            err(json!({"error": "plain"})),
            ResponseDecodeError::ProviderError {
                message: "plain".into(),
                code: None
            }
        );
        assert!(matches!(
            err(json!({"error": {}, "output_text": "x"})),
            ResponseDecodeError::ProviderError { .. }
        ));
        assert!(matches!(
            err(json!({"error": false, "output_text": "x"})),
            ResponseDecodeError::ProviderError { .. }
        ));
        let e = err(json!({"error": {"message": "m", "code": 429}}));
        assert_eq!(
            e,
            ResponseDecodeError::ProviderError {
                message: "m".into(),
                code: None
            }
        );
    }

    #[test]
    fn non_object_bodies_are_malformed() {
        for body in [
            json!([]),
            json!([text_msg("x")]),
            json!("ok"),
            json!(3),
            json!(null),
            json!(true),
        ] {
            assert!(matches!(err(body), ResponseDecodeError::Malformed(_)));
        }
    }

    #[test]
    fn non_string_status_is_malformed_not_absent() {
        assert!(matches!(
            err(json!({"status": 1, "output_text": "x"})),
            ResponseDecodeError::Malformed(_)
        ));
        assert_eq!(
            decode_response(&json!({"status": null, "output_text": "x"}))
                .unwrap()
                .text,
            "x"
        );
    }

    #[test]
    fn output_text_fallback_only_applies_when_messages_have_no_text() {
        let d =
            decode_response(&json!({"output": [text_msg("a"), text_msg("b")], "output_text": "z"}))
                .unwrap();
        assert_eq!(d.text, "ab");
    }

    #[test]
    fn error_codes_are_stable() {
        let cases = [
            (
                ResponseDecodeError::Refused {
                    message: String::new(),
                    usage: None,
                    model: None,
                    response_id: None,
                },
                "refused",
            ),
            (
                ResponseDecodeError::MixedRefusalAndToolCalls {
                    refusal: String::new(),
                },
                "mixed_refusal_tool_calls",
            ),
            (
                ResponseDecodeError::ProviderError {
                    message: String::new(),
                    code: None,
                },
                "provider_error",
            ),
            (
                ResponseDecodeError::Failed {
                    message: String::new(),
                    code: None,
                },
                "provider_failed",
            ),
            (
                ResponseDecodeError::Incomplete { reason: None },
                "incomplete",
            ),
            (ResponseDecodeError::Cancelled, "provider_cancelled"),
            (
                ResponseDecodeError::NonTerminal("queued".into()),
                "non_terminal",
            ),
            (
                ResponseDecodeError::Malformed(String::new()),
                "malformed_response",
            ),
        ];
        for (e, code) in cases {
            assert_eq!(e.error_code(), code);
            assert!(!e.is_transient(), "{e:?}");
            assert!(!e.to_string().is_empty());
        }
        let failed = ResponseDecodeError::Failed {
            message: String::new(),
            code: Some("server_error".into()),
        };
        assert!(failed.is_transient());
    }

    #[test]
    fn usage_details_are_read_under_either_naming() {
        let u = decode_usage(&json!({"input_tokens": 100, "output_tokens": 50,
            "input_tokens_details": {"cached_tokens": 80}, "output_tokens_details": {"reasoning_tokens": 30}}));
        assert_eq!(
            u,
            Some(TokenUsage {
                input_tokens: 100,
                output_tokens: 50,
                cached_tokens: Some(80),
                reasoning_tokens: Some(30)
            })
        );
        let chat = decode_usage(&json!({"prompt_tokens": 1, "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 1}, "completion_tokens_details": {"reasoning_tokens": 0}})).unwrap();
        assert_eq!(
            (chat.cached_tokens, chat.reasoning_tokens),
            (Some(1), Some(0))
        );
        let bare = decode_usage(&json!({"input_tokens": 1, "output_tokens": 2})).unwrap();
        assert_eq!((bare.cached_tokens, bare.reasoning_tokens), (None, None));
    }

    #[test]
    fn usage_needs_both_counts_and_ignores_non_integers() {
        assert_eq!(decode_usage(&json!({"input_tokens": 1})), None);
        assert_eq!(
            decode_usage(&json!({"input_tokens": -1, "output_tokens": 2})),
            None
        );
        assert_eq!(
            decode_usage(&json!({"input_tokens": 1.5, "output_tokens": 2})),
            None
        );
        assert_eq!(decode_usage(&Value::Null), None);
    }

    #[test]
    fn oversized_usage_counts_saturate_instead_of_wrapping() {
        let u = decode_usage(
            &json!({"input_tokens": u64::MAX, "output_tokens": 4_294_967_296u64,
            "input_tokens_details": {"cached_tokens": 5_000_000_000u64}}),
        )
        .unwrap();
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.cached_tokens),
            (u32::MAX, u32::MAX, Some(u32::MAX))
        );
    }

    #[test]
    fn token_usage_serde_is_camel_case() {
        let u = TokenUsage {
            input_tokens: 1,
            output_tokens: 2,
            cached_tokens: Some(3),
            reasoning_tokens: None,
        };
        let v = serde_json::to_value(&u).unwrap();
        assert_eq!(
            v,
            json!({"inputTokens": 1, "outputTokens": 2, "cachedTokens": 3, "reasoningTokens": null})
        );
        assert_eq!(
            serde_json::from_value::<TokenUsage>(json!({"inputTokens": 1, "outputTokens": 2}))
                .unwrap()
                .cached_tokens,
            None
        );
    }
}
