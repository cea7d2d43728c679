use serde_json::json;

use super::*;

fn shown(stored: Value) -> Value {
    let request: OperationRequest = serde_json::from_value(stored).unwrap();
    serde_json::to_value(ShownRequest::from(&request)).unwrap()
}

#[test]
fn short_texts_are_whole_and_long_ones_cut_at_a_character_boundary() {
    let short = ShownText::new("why");
    assert_eq!((short.text.as_str(), short.bytes, short.truncated), ("why", 3, false));
    // 'é' is two bytes: 4095 ASCII bytes then 'é' would straddle the limit.
    let long = format!("{}é{}", "a".repeat(SHOWN_TEXT_BYTES - 1), "b".repeat(10_000));
    let cut = ShownText::new(&long);
    assert!(cut.truncated);
    assert_eq!(cut.bytes, long.len() as u64);
    assert_eq!(cut.text, "a".repeat(SHOWN_TEXT_BYTES - 1));
    let exact = "c".repeat(SHOWN_TEXT_BYTES);
    assert!(!ShownText::new(&exact).truncated, "exactly the limit is whole");
}

#[test]
fn small_kinds_show_every_field_under_their_kind() {
    assert_eq!(
        shown(json!({"kind": "delete", "conversationId": "c1", "reason": "gdpr"})),
        json!({"kind": "delete", "request": {"conversationId": "c1",
               "reason": {"text": "gdpr", "bytes": 4, "truncated": false}}})
    );
    assert_eq!(
        shown(json!({"kind": "retention", "conversationId": "c2", "policy": {"maxAgeDays": 3, "maxMessages": null}})),
        json!({"kind": "retention", "request": {"conversationId": "c2", "policy": {"maxAgeDays": 3, "maxMessages": null}}})
    );
    assert_eq!(
        shown(json!({"kind": "rebuild_vector", "force": true})),
        json!({"kind": "rebuild_vector", "request": {"force": true}})
    );
}

#[test]
fn an_export_filter_shows_its_parts_and_bounds_its_ids() {
    let ids: Vec<String> = (0..50).map(|i| format!("c{i}")).collect();
    let v = shown(json!({"kind": "export", "includeExpired": true,
                         "filter": {"conversationIds": ids, "agentId": "a", "fromMs": 1, "toMs": 9}}));
    assert_eq!(v["kind"], "export");
    let r = &v["request"];
    assert_eq!((r["includeExpired"].clone(), r["agentId"].clone()), (json!(true), json!("a")));
    assert_eq!((r["fromMs"].clone(), r["toMs"].clone()), (json!(1), json!(9)));
    assert_eq!(r["conversationIds"]["count"], 50);
    assert_eq!(r["conversationIds"]["items"].as_array().unwrap().len(), SHOWN_LIST_ITEMS);
    assert_eq!(r["conversationIds"]["items"][0], "c0");
    let plain = shown(json!({"kind": "export", "includeExpired": false}));
    assert_eq!(plain, json!({"kind": "export", "request": {"includeExpired": false}}));
}

#[test]
fn an_inline_import_is_summarised_not_dumped() {
    let message = json!({"id": "m1", "scope": {"conversationId": "c"}, "role": "user",
                         "content": "x".repeat(10_000), "sequence": 0, "createdAtMs": 0, "metadata": null});
    let stored = json!({"kind": "import", "messages": [message.clone(), message.clone()], "entries": []});
    let v = shown(stored.clone());
    let request: OperationRequest = serde_json::from_value(stored).unwrap();
    let OperationRequest::Import(args) = request else { unreachable!() };
    let bytes: usize = args.messages.iter().map(|m| serde_json::to_vec(m).unwrap().len()).sum();
    assert!(bytes > 20_000);
    assert_eq!(
        v,
        json!({"kind": "import", "request": {"source": "inline",
               "messages": {"count": 2, "bytes": bytes}, "entries": {"count": 0, "bytes": 0}}})
    );
    assert!(!v.to_string().contains("xxxx"), "no record's content is shown");
}

#[test]
fn an_artifact_import_shows_its_source_and_rename() {
    let v = shown(json!({"kind": "import", "artifactRef": "01ARZ3NDEKTSV4RRFFQ69G5FAV", "messages": [], "entries": [],
                         "conversationIdMap": {"prefix": "old-", "map": {"a": "b"}}}));
    let r = &v["request"];
    assert_eq!(r["source"], "artifact");
    assert_eq!(r["artifactRef"], "01ARZ3NDEKTSV4RRFFQ69G5FAV");
    assert_eq!(r["renamePrefix"], "old-");
    assert_eq!(r["renames"], json!({"items": ["a → b"], "count": 1}));
}

#[test]
fn an_inference_shows_its_turn_bounded_with_secret_looking_metadata_redacted() {
    let long = "y".repeat(3 * SHOWN_TEXT_BYTES);
    let v = shown(json!({"kind": "inference", "request": {
        "model": "gpt-x", "messages": [{"role": "user", "content": long}], "instructions": "be brief",
        "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
        "toolChoice": "auto", "maxOutputTokens": 64, "reasoningEffort": "low",
        "metadata": {"team": "ops", "apiKey": "sk-live-1", "X-Auth": "bearer", "sessionId": "s"}},
        "conversationId": "c1", "appendReply": true}));
    assert_eq!(v["kind"], "inference");
    let r = &v["request"];
    assert_eq!(
        (r["model"].clone(), r["conversationId"].clone(), r["appendReply"].clone()),
        (json!("gpt-x"), json!("c1"), json!(true))
    );
    assert_eq!(r["instructions"], json!({"text": "be brief", "bytes": 8, "truncated": false}));
    assert_eq!(r["messageCount"], 1);
    assert_eq!(r["input"]["truncated"], true);
    assert!(r["input"]["bytes"].as_u64().unwrap() > (3 * SHOWN_TEXT_BYTES) as u64);
    assert_eq!(r["input"]["text"].as_str().unwrap().len(), SHOWN_TEXT_BYTES);
    let text = r["input"]["text"].as_str().unwrap();
    assert!(
        text.starts_with("[{") && text.contains(r#""content":"yyy"#),
        "the start of the messages' JSON: {}",
        &text[..40]
    );
    assert_eq!(r["tools"], json!(["lookup"]));
    assert_eq!(
        (r["toolChoice"].clone(), r["maxOutputTokens"].clone(), r["reasoningEffort"].clone()),
        (json!("auto"), json!(64), json!("low"))
    );
    assert_eq!(r["metadata"], json!({"team": "ops", "apiKey": REDACTED, "X-Auth": REDACTED, "sessionId": REDACTED}));
    assert!(!v.to_string().contains("sk-live"));
}

#[test]
fn secret_looking_keys_are_recognised_whatever_their_case() {
    for key in ["api_key", "TOKEN", "clientSecret", "password", "Authorization", "cookie"] {
        assert!(looks_secret(key), "{key}");
    }
    for key in ["team", "user", "trace"] {
        assert!(!looks_secret(key), "{key}");
    }
}
