//! Tests of `decode.rs` (kept apart so the module stays readable).
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
    assert_eq!(decode_response(&json!({"output_text": "ok"})).unwrap().text, "ok");
}

#[test]
fn missing_status_with_structured_message_succeeds() {
    assert_eq!(decode_response(&json!({"output": [text_msg("hi")]})).unwrap().text, "hi");
}

#[test]
fn missing_status_with_top_level_error_fails() {
    let e = err(json!({"error": {"message": "provider failure"}}));
    assert!(matches!(e, ResponseDecodeError::ProviderError { message, code: None } if message == "provider failure"));
}

#[test]
fn top_level_error_wins_over_a_completed_status() {
    let e = err(json!({"status": "completed", "error": {"message": "late"}, "output": [text_msg("x")]}));
    assert!(matches!(e, ResponseDecodeError::ProviderError { .. }));
}

#[test]
fn empty_object_body_is_malformed() {
    assert!(matches!(err(json!({})), ResponseDecodeError::Malformed(_)));
}

#[test]
fn completed_but_empty_body_is_malformed_not_empty_success() {
    assert!(matches!(err(json!({"status": "completed", "output": []})), ResponseDecodeError::Malformed(_)));
}

#[test]
fn refusal_only_response_returns_refused() {
    let body = json!({"output": [refusal("I cannot comply")], "usage": {"input_tokens": 4, "output_tokens": 6},
                      "id": "resp_r", "model": "m1"});
    match err(body) {
        ResponseDecodeError::Refused { message, usage, model, response_id } => {
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
    let parts =
        json!([{"type": "refusal", "refusal": "I won't run that"}, {"type": "output_text", "text": "but here is why"}]);
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
    assert_eq!(e, ResponseDecodeError::MixedRefusalAndToolCalls { refusal: "I cannot perform that operation".into() });
}

#[test]
fn refusal_with_multiple_tool_calls_is_mixed_and_rejected() {
    let e = err(json!({"status": "completed", "output": [refusal("no"), call("c1"), call("c2")]}));
    assert!(matches!(e, ResponseDecodeError::MixedRefusalAndToolCalls { .. }));
}

#[test]
fn status_less_mixed_refusal_and_tool_call_is_still_rejected() {
    let e = err(json!({"output": [refusal("declined"), call("c1")]}));
    assert!(matches!(e, ResponseDecodeError::MixedRefusalAndToolCalls { .. }));
}

#[test]
fn empty_text_refusal_part_with_a_tool_call_is_still_mixed_and_rejected() {
    let e = err(json!({"output": [refusal(""), call("c1")]}));
    assert_eq!(e, ResponseDecodeError::MixedRefusalAndToolCalls { refusal: DEFAULT_REFUSAL.into() });
}

#[test]
fn refusal_part_with_no_refusal_field_still_declines() {
    let e = err(json!({"output": [msg(json!([{"type": "refusal"}]))]}));
    assert_eq!(
        e,
        ResponseDecodeError::Refused { message: DEFAULT_REFUSAL.into(), usage: None, model: None, response_id: None }
    );
}

#[test]
fn incomplete_status_is_an_error_carrying_the_reason() {
    let e = err(json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
                       "output": [text_msg("partial…")]}));
    assert_eq!(e, ResponseDecodeError::Incomplete { reason: Some("max_output_tokens".into()) });
    assert_eq!(err(json!({"status": "incomplete"})), ResponseDecodeError::Incomplete { reason: None });
}

#[test]
fn failed_status_is_an_error() {
    assert!(matches!(err(json!({"status": "failed"})), ResponseDecodeError::Failed { code: None, .. }));
}

#[test]
fn unknown_status_is_non_terminal_error() {
    assert_eq!(err(json!({"status": "in_progress"})), ResponseDecodeError::NonTerminal("in_progress".into()));
    assert_eq!(err(json!({"status": "queued", "output_text": "x"})), ResponseDecodeError::NonTerminal("queued".into()));
}

#[test]
fn unknown_output_item_with_no_usable_content_is_malformed() {
    let e = err(json!({"status": "completed", "output": [{"type": "web_search_call", "id": "ws_1"}]}));
    assert!(matches!(e, ResponseDecodeError::Malformed(_)));
}

#[test]
fn function_calls_and_reasoning_are_extracted_in_order() {
    let (c, r) = (call("call_1"), json!({"type": "reasoning", "id": "rs_1", "summary": []}));
    let d = decode_response(&json!({"status": "completed", "output": [r.clone(), c.clone()]})).unwrap();
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
    let e = err(json!({"status": "failed", "error": {"code": "server_error", "message": "boom"}}));
    assert_eq!(e, ResponseDecodeError::ProviderError { message: "boom".into(), code: Some("server_error".into()) });
    assert!(e.is_transient());
    let quota = err(json!({"error": {"code": "rate_limit_exceeded", "message": "slow down"}}));
    assert!(!quota.is_transient());
}

#[test]
fn odd_error_shapes_still_fail_closed() {
    assert_eq!(
        err(json!({"error": "plain"})),
        ResponseDecodeError::ProviderError { message: "plain".into(), code: None }
    );
    assert!(matches!(err(json!({"error": {}, "output_text": "x"})), ResponseDecodeError::ProviderError { .. }));
    assert!(matches!(err(json!({"error": false, "output_text": "x"})), ResponseDecodeError::ProviderError { .. }));
    let e = err(json!({"error": {"message": "m", "code": 429}}));
    assert_eq!(e, ResponseDecodeError::ProviderError { message: "m".into(), code: None });
}

#[test]
fn non_object_bodies_are_malformed() {
    for body in [json!([]), json!([text_msg("x")]), json!("ok"), json!(3), json!(null), json!(true)] {
        assert!(matches!(err(body), ResponseDecodeError::Malformed(_)));
    }
}

#[test]
fn non_string_status_is_malformed_not_absent() {
    assert!(matches!(err(json!({"status": 1, "output_text": "x"})), ResponseDecodeError::Malformed(_)));
    assert_eq!(decode_response(&json!({"status": null, "output_text": "x"})).unwrap().text, "x");
}

#[test]
fn output_text_fallback_only_applies_when_messages_have_no_text() {
    let d = decode_response(&json!({"output": [text_msg("a"), text_msg("b")], "output_text": "z"})).unwrap();
    assert_eq!(d.text, "ab");
}

#[test]
fn error_codes_are_stable() {
    let cases = [
        (
            ResponseDecodeError::Refused { message: String::new(), usage: None, model: None, response_id: None },
            "refused",
        ),
        (ResponseDecodeError::MixedRefusalAndToolCalls { refusal: String::new() }, "mixed_refusal_tool_calls"),
        (ResponseDecodeError::ProviderError { message: String::new(), code: None }, "provider_error"),
        (ResponseDecodeError::Failed { message: String::new(), code: None }, "provider_failed"),
        (ResponseDecodeError::Incomplete { reason: None }, "incomplete"),
        (ResponseDecodeError::Cancelled, "provider_cancelled"),
        (ResponseDecodeError::NonTerminal("queued".into()), "non_terminal"),
        (ResponseDecodeError::Malformed(String::new()), "malformed_response"),
    ];
    for (e, code) in cases {
        assert_eq!(e.error_code(), code);
        assert!(!e.is_transient(), "{e:?}");
        assert!(!e.to_string().is_empty());
    }
    let failed = ResponseDecodeError::Failed { message: String::new(), code: Some("server_error".into()) };
    assert!(failed.is_transient());
}

#[test]
fn usage_details_are_read_under_either_naming() {
    let u = decode_usage(&json!({"input_tokens": 100, "output_tokens": 50,
        "input_tokens_details": {"cached_tokens": 80}, "output_tokens_details": {"reasoning_tokens": 30}}));
    assert_eq!(
        u,
        Some(TokenUsage { input_tokens: 100, output_tokens: 50, cached_tokens: Some(80), reasoning_tokens: Some(30) })
    );
    let chat = decode_usage(&json!({"prompt_tokens": 1, "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 1}, "completion_tokens_details": {"reasoning_tokens": 0}}))
    .unwrap();
    assert_eq!((chat.cached_tokens, chat.reasoning_tokens), (Some(1), Some(0)));
    let bare = decode_usage(&json!({"input_tokens": 1, "output_tokens": 2})).unwrap();
    assert_eq!((bare.cached_tokens, bare.reasoning_tokens), (None, None));
}

#[test]
fn usage_needs_both_counts_and_ignores_non_integers() {
    assert_eq!(decode_usage(&json!({"input_tokens": 1})), None);
    assert_eq!(decode_usage(&json!({"input_tokens": -1, "output_tokens": 2})), None);
    assert_eq!(decode_usage(&json!({"input_tokens": 1.5, "output_tokens": 2})), None);
    assert_eq!(decode_usage(&Value::Null), None);
}

#[test]
fn oversized_usage_counts_saturate_instead_of_wrapping() {
    let u = decode_usage(&json!({"input_tokens": u64::MAX, "output_tokens": 4_294_967_296u64,
        "input_tokens_details": {"cached_tokens": 5_000_000_000u64}}))
    .unwrap();
    assert_eq!((u.input_tokens, u.output_tokens, u.cached_tokens), (u32::MAX, u32::MAX, Some(u32::MAX)));
}

#[test]
fn token_usage_serde_is_camel_case() {
    let u = TokenUsage { input_tokens: 1, output_tokens: 2, cached_tokens: Some(3), reasoning_tokens: None };
    let v = serde_json::to_value(&u).unwrap();
    assert_eq!(v, json!({"inputTokens": 1, "outputTokens": 2, "cachedTokens": 3, "reasoningTokens": null}));
    assert_eq!(
        serde_json::from_value::<TokenUsage>(json!({"inputTokens": 1, "outputTokens": 2})).unwrap().cached_tokens,
        None
    );
}
