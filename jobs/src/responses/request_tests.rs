//! Tests of `request.rs` (kept apart so the module stays readable).
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
    let (instructions, input) = build_responses_input(&[json!({"role": "user", "content": "x"})]);
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
    assert_eq!(input[1], json!({"type": "function_call_output", "call_id": "c9", "output": "42"}));
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
    assert_eq!(validate_tools(&[good.clone(), json!({"type": "function", "name": "g"})]), Ok(()));
    for bad in [
        json!("f"),
        json!({"type": "web_search", "name": "f"}),
        json!({"type": "function"}),
        json!({"type": "function", "name": ""}),
        json!({"type": "function", "name": 1}),
        json!({"type": "function", "name": "f", "parameters": "{}"}),
    ] {
        assert!(validate_tools(&[good.clone(), bad.clone()]).is_err(), "{bad}");
    }
}

#[test]
fn validate_metadata_enforces_provider_limits() {
    let at_limit: BTreeMap<_, _> = (0..16).map(|i| (format!("k{i}"), "v".to_string())).collect();
    assert_eq!(validate_metadata(&at_limit), Ok(()));
    let too_many: BTreeMap<_, _> = (0..17).map(|i| (format!("k{i}"), "v".to_string())).collect();
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
    assert!(validate_request(&ResponsesRequest { model: " ".into(), ..ok.clone() }).is_err());
    let bad_msg = ResponsesRequest { messages: vec![json!({"role": "narrator"})], ..ok.clone() };
    assert!(validate_request(&bad_msg).unwrap_err().starts_with("message 0"));
    assert!(validate_request(&ResponsesRequest { tools: vec![json!({})], ..ok.clone() }).is_err());
}

#[test]
fn minimal_body_omits_optional_fields_but_always_sends_store_false() {
    let req = ResponsesRequest { model: "m".into(), ..Default::default() };
    assert_eq!(build_request_body(&req), json!({"model": "m", "input": [], "store": false}));
}

#[test]
fn full_body_carries_every_field() {
    let tool = json!({"type": "function", "name": "f", "parameters": {"type": "object"}});
    let req = ResponsesRequest {
        model: "gpt-x".into(),
        messages: vec![json!({"role": "system", "content": "sys"}), json!({"role": "user", "content": "hi"})],
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
    let mut req = ResponsesRequest { model: "m".into(), instructions: Some("only".into()), ..Default::default() };
    assert_eq!(build_request_body(&req)["instructions"], "only");
    req.instructions = Some(String::new());
    req.messages = vec![json!({"role": "developer", "content": "dev"})];
    assert_eq!(build_request_body(&req)["instructions"], "dev");
}

#[test]
fn request_serde_is_camel_case_with_defaults() {
    let req: ResponsesRequest =
        serde_json::from_value(json!({"model": "m", "maxOutputTokens": 9, "reasoningEffort": "high"})).unwrap();
    assert_eq!(req.max_output_tokens, Some(9));
    assert_eq!(req.reasoning_effort.as_deref(), Some("high"));
    assert!(req.messages.is_empty() && req.metadata.is_empty());
    let back = serde_json::to_value(&req).unwrap();
    assert_eq!(back["toolChoice"], Value::Null);
    assert_eq!(serde_json::from_value::<ResponsesRequest>(back).unwrap(), req);
}
