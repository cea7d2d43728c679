//! The contract's message endpoints over real HTTP, on SQLite and on PostgreSQL: append
//! (idempotent, server-assigned sequences, limits), recent, page, search, conversation
//! listing, bad input, health and the request metrics.

use context_jobs::contract::{
    AppendResponse, CONTEXT_OPERATIONS_PATH as OPS, CONVERSATION_DELETE_PATH as DELETE,
    CONVERSATIONS_LIST_PATH as LIST, ConversationRecord, ConversationScope, MESSAGES_APPEND_PATH as APPEND,
    MESSAGES_PAGE_PATH as PAGE, MESSAGES_RECENT_PATH as RECENT, MESSAGES_SEARCH_PATH as SEARCH,
};
use serde_json::{Value, json};

use crate::harness::{TestApp, assert_api_error, message, read};

fn ids(body: &Value) -> Vec<String> {
    body["items"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap().to_string()).collect()
}

fn sequences(body: &Value) -> Vec<i64> {
    body["items"].as_array().unwrap().iter().map(|i| i["sequence"].as_i64().unwrap()).collect()
}

async fn append_assigns_sequences_and_is_idempotent(app: TestApp) {
    let batch = vec![
        message("c1", "m1", "user", "hello"),
        // Caller-set sequence and time, metadata, name and agent.
        ConversationRecord {
            scope: ConversationScope { agent_id: Some("a1".into()), ..ConversationScope::conversation("c1") },
            content: json!([{"type": "text", "text": "hi"}]),
            sequence: 999,
            created_at_ms: 1234,
            metadata: json!({"k": "v"}),
            name: Some("bot".into()),
            ..message("c1", "m2", "assistant", "")
        },
    ];
    let first = app.append_records(&batch).await;
    assert_eq!(first, AppendResponse { appended: 2, skipped: 0 });
    // A retried batch appends nothing and reports skips.
    let retry = app.append_records(&batch).await;
    assert_eq!(retry, AppendResponse { appended: 0, skipped: 2 });
    // A batch repeating an id inside itself counts the repeat as skipped.
    let dup = app.append_records(&[message("c1", "m3", "user", "x"), message("c1", "m3", "user", "x")]).await;
    assert_eq!(dup, AppendResponse { appended: 1, skipped: 1 });

    let (status, body) = app.post(RECENT, &json!({"scope": {"conversationId": "c1"}})).await;
    assert_eq!(status, 200);
    assert_eq!(ids(&body), ["m1", "m2", "m3"]);
    assert_eq!(sequences(&body), [1, 2, 3], "caller sequence ignored, server assigns 1..");
    let m2 = &body["items"][1];
    assert_eq!(m2["createdAtMs"], 1234, "caller createdAtMs kept");
    assert!(body["items"][0]["createdAtMs"].as_i64().unwrap() > 1_600_000_000_000, "server sets createdAtMs");
    assert_eq!(m2["metadata"], json!({"k": "v"}));
    assert_eq!(m2["name"], "bot");
    assert_eq!(m2["scope"], json!({"conversationId": "c1", "agentId": "a1"}));
    assert_eq!(m2["content"], json!([{"type": "text", "text": "hi"}]));
    assert!(body["items"][0].get("metadata").is_none(), "null metadata omitted as in the contract");
}

async fn recent_limits_roles_and_clamps(app: TestApp) {
    let records: Vec<ConversationRecord> = (0..600)
        .map(|i| message("c", &format!("m{i:04}"), if i % 2 == 0 { "user" } else { "assistant" }, &format!("t{i}")))
        .collect();
    app.append_records(&records[..500]).await;
    app.append_records(&records[500..]).await;
    let (_, body) = app.post(RECENT, &json!({"scope": {"conversationId": "c"}, "limit": 3})).await;
    assert_eq!(ids(&body), ["m0597", "m0598", "m0599"], "newest three, oldest first");
    let (_, body) = app.post(RECENT, &json!({"scope": {"conversationId": "c"}})).await;
    assert_eq!(body["items"].as_array().unwrap().len(), 50, "default page size");
    let (_, body) = app.post(RECENT, &json!({"scope": {"conversationId": "c"}, "limit": 10000})).await;
    assert_eq!(body["items"].as_array().unwrap().len(), 500, "clamped to MAX_PAGE_SIZE");
    let (_, body) =
        app.post(RECENT, &json!({"scope": {"conversationId": "c"}, "limit": 4, "roles": ["assistant"]})).await;
    assert_eq!(ids(&body), ["m0593", "m0595", "m0597", "m0599"]);
    let (status, body) = app.post(RECENT, &json!({"scope": {"conversationId": "c"}, "roles": ["wizard"]})).await;
    assert_api_error(status, &body, 400);
}

async fn page_walks_every_message_once_and_rejects_bad_cursors(app: TestApp) {
    let records: Vec<ConversationRecord> = (0..23).map(|i| message("p", &format!("m{i:02}"), "user", "x")).collect();
    app.append_records(&records).await;
    let mut cursor: Option<String> = None;
    let mut seen = Vec::new();
    loop {
        let mut req = json!({"scope": {"conversationId": "p"}, "limit": 5});
        if let Some(c) = &cursor {
            req["cursor"] = json!(c);
        }
        let (status, body) = app.post(PAGE, &req).await;
        assert_eq!(status, 200, "{body}");
        seen.extend(ids(&body));
        match body.get("nextCursor").and_then(Value::as_str) {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    let expected: Vec<String> = (0..23).map(|i| format!("m{i:02}")).collect();
    assert_eq!(seen, expected);
    for bad in ["not-base64!!", "bm90IGpzb24", "eyJzZXF1ZW5jZSI6MSwiaWQiOiJhIiwieCI6MX0"] {
        let (status, body) = app.post(PAGE, &json!({"scope": {"conversationId": "p"}, "cursor": bad})).await;
        assert_api_error(status, &body, 400);
    }
}

async fn search_is_case_insensitive_substring_with_limits(app: TestApp) {
    app.append_records(&[
        message("s", "1", "user", "The Quick brown fox"),
        message("s", "2", "assistant", "nothing here"),
        ConversationRecord {
            content: json!([{"type": "text", "text": "a QUICK reply"}]),
            ..message("s", "3", "assistant", "")
        },
        message("s", "4", "user", "100% literal_match"),
        message("s", "5", "user", "Ünïcode ÄRGER"),
    ])
    .await;
    let (_, body) = app.post(SEARCH, &json!({"scope": {"conversationId": "s"}, "query": "quick"})).await;
    assert_eq!(ids(&body), ["1", "3"]);
    let (_, body) =
        app.post(SEARCH, &json!({"scope": {"conversationId": "s"}, "query": "quick", "role": "assistant"})).await;
    assert_eq!(ids(&body), ["3"]);
    let (_, body) = app.post(SEARCH, &json!({"scope": {"conversationId": "s"}, "query": "0% l"})).await;
    assert_eq!(ids(&body), ["4"], "% is literal");
    let (_, body) = app.post(SEARCH, &json!({"scope": {"conversationId": "s"}, "query": "t_r"})).await;
    assert!(ids(&body).is_empty(), "_ is literal");
    let (_, body) = app.post(SEARCH, &json!({"scope": {"conversationId": "s"}, "query": "är"})).await;
    assert_eq!(ids(&body), ["5"], "Unicode case folding");
    let long = "q".repeat(4097);
    let (status, body) = app.post(SEARCH, &json!({"scope": {"conversationId": "s"}, "query": long})).await;
    assert_api_error(status, &body, 400);
}

async fn append_limits_reject_the_whole_batch(app: TestApp) {
    let too_many: Vec<ConversationRecord> = (0..501).map(|i| message("l", &format!("m{i}"), "user", "x")).collect();
    let (status, body) = app.post(APPEND, &json!({"messages": too_many})).await;
    assert_api_error(status, &body, 400);
    let huge = "x".repeat(5 * 1024 * 1024);
    let big = vec![message("l", "a", "user", &huge), message("l", "b", "user", &huge)];
    let (status, body) = app.post(APPEND, &json!({"messages": big})).await;
    assert_api_error(status, &body, 413);
    let mixed = vec![message("l", "ok", "user", "x"), message("l", "bad", "wizard", "x")];
    let (status, body) = app.post(APPEND, &json!({"messages": mixed})).await;
    assert_api_error(status, &body, 400);
    let (status, body) = app.post(APPEND, &json!({"messages": []})).await;
    assert_api_error(status, &body, 400);
    // Nothing of any rejected batch was written.
    let (_, body) = app.post(RECENT, &json!({"scope": {"conversationId": "l"}})).await;
    assert_eq!(body["items"], json!([]));
}

async fn malformed_requests_get_api_errors(app: TestApp) {
    let raw = |body: &'static str, content_type: Option<&'static str>| {
        let mut rb = app.client.post(app.url(APPEND)).body(body);
        if let Some(ct) = content_type {
            rb = rb.header("content-type", ct);
        }
        rb.send()
    };
    let (status, body) = read(raw("{not json", Some("application/json")).await.unwrap()).await;
    assert_api_error(status, &body, 400);
    let (status, body) = read(raw("{}", Some("text/plain")).await.unwrap()).await;
    assert_api_error(status, &body, 415);
    // Media types are case-insensitive, parameters allowed.
    let recent = app.client.post(app.url(RECENT)).header("content-type", "Application/JSON; charset=utf-8");
    let (status, body) = read(recent.body(r#"{"scope":{"conversationId":"l"}}"#).send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = read(raw(r#"{"messages": 5}"#, Some("application/json")).await.unwrap()).await;
    assert_api_error(status, &body, 400);
    // The contract denies unknown fields on ListConversationsRequest.
    let (status, body) = app.post(LIST, &json!({"agentId": "a", "bogus": 1})).await;
    assert_api_error(status, &body, 400);
    let (status, body) = app.get("/internal/v1/nope").await;
    assert_api_error(status, &body, 404);
    let (status, body) = app.get(APPEND).await;
    assert_api_error(status, &body, 405);
    let (status, body) = app.post(RECENT, &json!({"scope": {"conversationId": ""}})).await;
    assert_api_error(status, &body, 400);
}

async fn conversations_list_per_agent(app: TestApp) {
    let scoped = |conv: &str, id: &str, agent: &str| ConversationRecord {
        scope: ConversationScope { agent_id: Some(agent.into()), ..ConversationScope::conversation(conv) },
        ..message(conv, id, "user", "x")
    };
    app.append_records(&[scoped("c-a", "1", "agent-1"), scoped("c-a", "2", "agent-1")]).await;
    // Timestamps are in milliseconds: let the clock pass c-a's before c-b is written, or
    // the two tie and the order falls back to the conversation id.
    let written = context_ops::store::now_ms();
    while context_ops::store::now_ms() <= written {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    app.append_records(&[scoped("c-b", "1", "agent-1")]).await;
    app.append_records(&[scoped("c-c", "1", "agent-2")]).await;
    let (status, body) = app.post(LIST, &json!({"agentId": "agent-1"})).await;
    assert_eq!(status, 200);
    let items = body["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["conversationId"], "c-b", "most recently updated first");
    assert_eq!(items[1]["conversationId"], "c-a");
    assert_eq!(items[1]["messageCount"], 2);
    assert_eq!(items[1]["agentId"], "agent-1");
    assert!(items[1]["updatedAtMs"].as_i64().unwrap() >= items[1]["createdAtMs"].as_i64().unwrap());
    let (_, body) = app.post(LIST, &json!({"agentId": "agent-1", "limit": 1})).await;
    assert_eq!(body["items"].as_array().unwrap().len(), 1);
}

async fn concurrent_appends_get_strictly_increasing_sequences(app: TestApp) {
    let app = std::sync::Arc::new(app);
    let mut tasks = Vec::new();
    for client in 0..8 {
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            for batch in 0..10 {
                let records: Vec<ConversationRecord> =
                    (0..20).map(|i| message("hot", &format!("c{client}-b{batch}-m{i}"), "user", "x")).collect();
                app.append_records(&records).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut cursor: Option<String> = None;
    let mut all = Vec::new();
    loop {
        let mut req = json!({"scope": {"conversationId": "hot"}, "limit": 500});
        if let Some(c) = &cursor {
            req["cursor"] = json!(c);
        }
        let (_, body) = app.post(PAGE, &req).await;
        all.extend(sequences(&body));
        match body.get("nextCursor").and_then(Value::as_str) {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(all.len(), 1600);
    assert_eq!(all, (1..=1600).collect::<Vec<i64>>(), "gap-free, strictly increasing");
}

async fn health_and_metrics(app: TestApp) {
    let (status, body) = app.get("/health").await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "ok");
    app.append_records(&[message("m", "1", "user", "x")]).await;
    // The recorder is process-wide, but the series exists once this test's append is
    // counted and no concurrent test can remove it.
    let text = app.metrics().await;
    assert!(
        text.contains(
            r#"context_ops_http_requests_total{route="/internal/v1/context/messages/batch",method="POST",status="200"}"#
        ),
        "request counter labelled by route template: {text}"
    );
    assert!(text.contains("context_ops_http_request_duration_seconds_bucket"), "latency histogram");
    // A method of the client's own making is counted as `other`, not as a series of its own
    // (anyone could grow the registry, before authentication, one method at a time).
    let made_up = format!("BREW{}", fastrand::u32(..));
    let method = reqwest::Method::from_bytes(made_up.as_bytes()).unwrap();
    app.request(method, "/nowhere").send().await.unwrap();
    let text = app.metrics().await;
    assert!(!text.contains(&made_up), "a series for the made-up method {made_up}");
    assert!(text.contains(r#"route="unmatched",method="other""#), "{text}");
}

/// Batches of 32 or more messages for one conversation take PostgreSQL's bulk path (binary
/// `COPY`): every column round-trips as the row-by-row path stores it, and a batch mixing
/// stored and new ids skips exactly the stored ones (the bulk attempt fails on the key and
/// falls back), on both engines.
async fn bulk_appends_store_every_column_and_skip_existing_ids(app: TestApp) {
    let record = |i: usize| {
        let base = message("bulk", &format!("b{i:03}"), if i.is_multiple_of(2) { "user" } else { "tool" }, "");
        ConversationRecord {
            content: if i.is_multiple_of(3) {
                json!(format!("Text {i}: Ünïcode\ttab"))
            } else {
                json!([{"type": "text", "text": format!("part {i}")}])
            },
            name: (i.is_multiple_of(4)).then(|| format!("name-{i}")),
            tool_call_id: (!i.is_multiple_of(2)).then(|| format!("call-{i}")),
            created_at_ms: if i.is_multiple_of(5) { 1_700_000_000_000 + i as i64 } else { 0 },
            metadata: if i.is_multiple_of(7) { json!({"i": i, "nested": {"ok": true}}) } else { Value::Null },
            ..base
        }
    };
    let first: Vec<ConversationRecord> = (0..40).map(record).collect();
    assert_eq!(app.append_records(&first).await, AppendResponse { appended: 40, skipped: 0 });
    // 40 stored ids again, plus 60 new ones: only the new ones are appended, in order.
    let second: Vec<ConversationRecord> = (0..100).map(record).collect();
    assert_eq!(app.append_records(&second).await, AppendResponse { appended: 60, skipped: 40 });
    // All new again, on a conversation that has messages: the bulk path's common case.
    let third: Vec<ConversationRecord> = (100..150).map(record).collect();
    assert_eq!(app.append_records(&third).await, AppendResponse { appended: 50, skipped: 0 });

    let (status, body) = app.post(RECENT, &json!({"scope": {"conversationId": "bulk"}, "limit": 200})).await;
    assert_eq!(status, 200, "{body}");
    let items = body["items"].as_array().unwrap();
    assert_eq!(items.len(), 150);
    for (n, item) in items.iter().enumerate() {
        let want = record(n);
        assert_eq!(item["id"], want.id.as_str());
        assert_eq!(item["sequence"], n as i64 + 1);
        assert_eq!(item["role"], want.role.as_str());
        assert_eq!(item["content"], want.content, "{item}");
        assert_eq!(item.get("name").and_then(Value::as_str), want.name.as_deref(), "{item}");
        assert_eq!(item.get("toolCallId").and_then(Value::as_str), want.tool_call_id.as_deref(), "{item}");
        assert_eq!(item.get("metadata").cloned().unwrap_or(Value::Null), want.metadata, "{item}");
        if want.created_at_ms > 0 {
            assert_eq!(item["createdAtMs"], want.created_at_ms);
        }
        assert_eq!(item["scope"], json!({"conversationId": "bulk"}));
    }
    // The stored search text is the same folded text the small-batch path writes.
    let (status, body) =
        app.post(SEARCH, &json!({"scope": {"conversationId": "bulk"}, "query": "ünïcode", "limit": 200})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ids(&body).len(), 50, "every third message: {body}");
}

/// A conversation a delete holds refuses appends — one message (row path) or a bulk batch
/// (PostgreSQL's one-pass path, which backs out and lets the checked path answer) — with a
/// 409 naming the operation, and stores nothing; the cancel releases it. A new conversation
/// in the same batch is not written either: the batch is one transaction, whose one-pass
/// attempt of several conversations backs out as a whole (a mixed batch of new ids, after the
/// cancel, goes through it).
async fn appends_to_a_conversation_being_deleted_are_refused(app: TestApp) {
    let batch = |conversation: &str, from: usize, n: usize| -> Vec<ConversationRecord> {
        (from..from + n).map(|i| message(conversation, &format!("m{i:03}"), "user", "x")).collect()
    };
    assert_eq!(app.append_records(&batch("held", 0, 40)).await, AppendResponse { appended: 40, skipped: 0 });
    // Scheduled an hour ahead, so the delete holds the conversation without running.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let body = json!({"scope": {"conversationId": "held"}, "notBeforeMs": now + 3_600_000});
    let (status, op) = app.post(DELETE, &body).await;
    assert_eq!(status, 202, "{op}");
    let id = op["id"].as_str().unwrap();
    let mut mixed = batch("fresh", 0, 40);
    mixed.extend(batch("held", 40, 40));
    for messages in [batch("held", 40, 1), batch("held", 40, 40), mixed] {
        let (status, body) = app.post(APPEND, &json!({"messages": messages})).await;
        assert_api_error(status, &body, 409);
        assert!(body["message"].as_str().unwrap().contains(id), "names the delete: {body}");
    }
    for (conversation, stored) in [("held", 40), ("fresh", 0)] {
        let (_, body) = app.post(RECENT, &json!({"scope": {"conversationId": conversation}, "limit": 200})).await;
        assert_eq!(ids(&body).len(), stored, "{conversation}: {body}");
    }
    let (status, cancelled) = app.post(&format!("{OPS}/{id}/cancel"), &json!({})).await;
    assert_eq!(status, 200, "{cancelled}");
    let mut mixed = batch("fresh", 0, 40);
    mixed.extend(batch("held", 40, 40));
    assert_eq!(app.append_records(&mixed).await, AppendResponse { appended: 80, skipped: 0 });
    for (conversation, stored) in [("held", 80), ("fresh", 40)] {
        let (_, body) = app.post(RECENT, &json!({"scope": {"conversationId": conversation}, "limit": 200})).await;
        assert_eq!(sequences(&body), (1..=stored).collect::<Vec<i64>>(), "no sequence spent by a refused batch");
    }
}

backend_tests!(
    append_assigns_sequences_and_is_idempotent,
    recent_limits_roles_and_clamps,
    page_walks_every_message_once_and_rejects_bad_cursors,
    search_is_case_insensitive_substring_with_limits,
    append_limits_reject_the_whole_batch,
    malformed_requests_get_api_errors,
    conversations_list_per_agent,
    concurrent_appends_get_strictly_increasing_sequences,
    health_and_metrics,
    bulk_appends_store_every_column_and_skip_existing_ids,
    appends_to_a_conversation_being_deleted_are_refused,
);
