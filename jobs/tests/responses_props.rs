//! Property tests for the Responses codec: whatever a provider (or a broken
//! proxy) sends, decoding never panics and never fails open, and the request and
//! retry helpers stay within their stated bounds.

use context_jobs::responses::{
    HttpDisposition, ResponseDecodeError, ResponsesRequest, RetryHeaders, backoff_ms, build_request_body,
    build_responses_input, classify_http, decode_response,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Strings biased towards the words the decoder reacts to, so random bodies hit
/// the interesting branches instead of only the malformed one.
fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "", "completed", "failed", "incomplete", "cancelled", "queued", "in_progress",
            "message", "output_text", "refusal", "function_call", "reasoning", "text",
            "server_error", "insufficient_quota",
        ])
        .prop_map(str::to_string),
        1 => "\\PC{0,8}",
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "status", "error", "output", "output_text", "type", "content", "text", "refusal",
            "usage", "input_tokens", "output_tokens", "model", "id", "incomplete_details",
            "reason", "code", "message",
        ])
        .prop_map(str::to_string),
        1 => "[a-z_]{0,6}",
    ]
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        word().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn part() -> impl Strategy<Value = Value> {
    prop_oneof![
        word().prop_map(|t| json!({"type": "output_text", "text": t})),
        word().prop_map(|r| json!({"type": "refusal", "refusal": r})),
        Just(json!({"type": "refusal"})),
        word().prop_map(|t| json!({"type": "mystery", "text": t})),
        arb_json(),
    ]
}

fn item() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => prop::collection::vec(part(), 0..4).prop_map(|p| json!({"type": "message", "role": "assistant", "content": p})),
        2 => "[a-z]{1,4}".prop_map(|id| json!({"type": "function_call", "call_id": id, "name": "f", "arguments": "{}"})),
        1 => Just(json!({"type": "reasoning", "id": "rs_1", "summary": []})),
        1 => arb_json(),
    ]
}

fn near_valid_body() -> impl Strategy<Value = Value> {
    (
        prop::option::of(prop_oneof![word().prop_map(Value::String), arb_json()]),
        prop::option::of(prop_oneof![
            Just(json!({"code": "server_error", "message": "boom"})),
            word().prop_map(Value::String),
            arb_json(),
        ]),
        prop::option::of(prop::collection::vec(item(), 0..5)),
        prop::option::of(word()),
        prop::option::of((any::<u64>(), any::<u64>())),
    )
        .prop_map(|(status, error, output, output_text, usage)| {
            let mut body = Map::new();
            if let Some(s) = status {
                body.insert("status".into(), s);
            }
            if let Some(e) = error {
                body.insert("error".into(), e);
            }
            if let Some(o) = output {
                body.insert("output".into(), Value::Array(o));
            }
            if let Some(t) = output_text {
                body.insert("output_text".into(), Value::String(t));
            }
            if let Some((i, o)) = usage {
                body.insert("usage".into(), json!({"input_tokens": i, "output_tokens": o}));
            }
            Value::Object(body)
        })
}

fn has_refusal_part(body: &Value) -> bool {
    body["output"].as_array().into_iter().flatten().any(|item| {
        item["type"] == "message" && item["content"].as_array().into_iter().flatten().any(|p| p["type"] == "refusal")
    })
}

/// The fail-closed contract, checked on any body.
fn check_decode(body: &Value) -> Result<(), TestCaseError> {
    match decode_response(body) {
        Ok(d) => {
            prop_assert!(body.is_object());
            prop_assert!(!d.text.is_empty() || !d.tool_calls.is_empty());
            prop_assert!(!has_refusal_part(body), "Ok despite a refusal part");
            prop_assert!(body["error"].is_null(), "Ok despite a top-level error");
            prop_assert!(body["status"].is_null() || body["status"] == "completed");
            prop_assert!(d.tool_calls.iter().all(|c| c["type"] == "function_call"));
            prop_assert!(d.tool_calls.len() <= d.echo.len());
        }
        Err(e) => {
            prop_assert!(!e.error_code().as_str().is_empty());
            if let ResponseDecodeError::Refused { message, .. }
            | ResponseDecodeError::MixedRefusalAndToolCalls { refusal: message } = &e
            {
                prop_assert!(!message.is_empty());
                prop_assert!(has_refusal_part(body));
            }
            if !body["error"].is_null() && body.is_object() {
                let is_provider_error = matches!(e, ResponseDecodeError::ProviderError { .. });
                prop_assert!(is_provider_error, "a top-level error must win, got {:?}", e);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_json_never_panics_or_fails_open(body in arb_json()) {
        check_decode(&body)?;
    }

    #[test]
    fn near_valid_bodies_never_fail_open(body in near_valid_body()) {
        check_decode(&body)?;
    }

    #[test]
    fn request_shaping_never_panics_and_always_sends_store_false(
        messages in prop::collection::vec(arb_json(), 0..6),
        instructions in prop::option::of(word()),
    ) {
        let (_, input) = build_responses_input(&messages);
        prop_assert!(input.len() <= messages.len());
        let req = ResponsesRequest { model: "m".into(), messages, instructions, ..Default::default() };
        let body = build_request_body(&req);
        prop_assert_eq!(&body["store"], &json!(false));
        prop_assert!(body["input"].is_array());
    }

    #[test]
    fn retry_decisions_stay_bounded(
        status in 100u16..600,
        attempt in 0u32..20,
        max_attempts in 0u32..6,
        jitter in any::<f64>(),
        retry_after_ms in prop::option::of("\\PC{0,8}|[0-9]{1,6}(\\.[0-9]{1,3})?"),
        retry_after in prop::option::of("\\PC{0,8}|[0-9]{1,3}(\\.[0-9])?"),
        x_should_retry in prop::option::of(prop::sample::select(vec!["true", "false", "TRUE", "x"]).prop_map(str::to_string)),
        body in arb_json(),
    ) {
        let headers = RetryHeaders { retry_after_ms, retry_after, x_should_retry };
        match classify_http(status, &headers, &body, attempt, max_attempts, jitter) {
            HttpDisposition::Retry { after_ms } => {
                prop_assert!(attempt + 1 < max_attempts);
                prop_assert!((1..=60_000).contains(&after_ms));
            }
            HttpDisposition::Fail { code } => prop_assert!(!code.as_str().is_empty()),
        }
        let b = backoff_ms(attempt, jitter);
        prop_assert!((375..=8_000).contains(&b));
    }
}
