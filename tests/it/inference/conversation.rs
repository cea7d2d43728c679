//! Turns over a stored conversation: history loaded (newest within the budget, tenant
//! scoped), `appendReply` appending exactly once (also under idempotent resubmission and
//! when resumed after the reply was checkpointed), a tool turn continued through the
//! conversation, strict validation, and the same flow on PostgreSQL + Redis.

use context_jobs::contract::{ContextOperationState, ConversationRecord};
use context_ops::config::Role;
use serde_json::{Value, json};

use super::{INFER, OPS, app_on, app_on_command, assert_well_formed, run_turn, submit, turn, user};
use crate::harness::fake_responses::{
    FakeProvider, Step, call_item, completed, completed_text, reasoning_item, text_item,
};
use crate::harness::jwt::{jwt_mode, tenant_token};
use crate::harness::{Backend, OperationExt as _, TestApp, assert_api_error, fresh_database, message, read};

fn tool_message(conversation: &str, id: &str, call_id: &str, output: &str) -> ConversationRecord {
    ConversationRecord { tool_call_id: Some(call_id.into()), ..message(conversation, id, "tool", output) }
}

async fn append_reply_with_history(backend: Backend) {
    let first = completed(vec![reasoning_item("rs_1"), text_item("checking"), call_item("call_1", "lookup")]);
    let fake = FakeProvider::start(vec![Step::ok(first), Step::ok(completed_text("It is 42."))]).await;
    let app = app_on(backend, &fake, |_| {}).await;
    app.append_records(&[
        message("chat", "m1", "system", "Be kind."),
        message("chat", "m2", "user", "u1"),
        message("chat", "m3", "assistant", "a1"),
        message("chat", "m4", "event", "joined"),
        message("other", "o1", "user", "not this conversation"),
    ])
    .await;
    let body = json!({"model": "gpt-test", "conversationId": "chat", "messages": [user("what is it?")],
                      "tools": [{"type": "function", "name": "lookup"}], "appendReply": true});
    let send = || async {
        let response =
            app.client.post(app.url(INFER)).header("idempotency-key", "turn-1").json(&body).send().await.unwrap();
        read(response).await
    };
    let (status, op) = send().await;
    assert_eq!(status, 202, "{op}");
    let id = op["id"].as_str().unwrap().to_string();
    let op = app.wait_terminal(&id).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!((op.processed, op.total), (1, 1), "one turn, done: {op:?}");
    let reply_id = format!("{id}:reply");
    assert_eq!(op.result_json()["appendedMessageId"], reply_id);
    let sent = &fake.received()[0].body;
    assert_eq!(sent["instructions"], "Be kind.");
    assert_eq!(
        sent["input"],
        json!([{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"}, user("what is it?")])
    );

    // A resubmission with the same key is the same operation: no new call, no new reply.
    let (status, again) = send().await;
    assert_eq!((status, again["id"].as_str()), (202, Some(id.as_str())), "{again}");
    let stored = app.recent("chat", 500).await;
    let replies: Vec<&ConversationRecord> = stored.iter().filter(|m| m.id == reply_id).collect();
    assert_eq!(replies.len(), 1, "{stored:?}");
    let reply = replies[0];
    assert_eq!(stored.last().unwrap().id, reply_id, "the reply is the newest message");
    assert_eq!((reply.role.as_str(), reply.content.as_str()), ("assistant", Some("checking")));
    assert_eq!(reply.metadata["inference"]["operationId"], id.as_str());
    assert_eq!(reply.metadata["inference"]["echo"][0]["id"], "rs_1");

    // The agent runs the tool, records the result, and continues from the conversation
    // alone: the stored reply replays its reasoning and call before the tool result.
    app.append_records(&[tool_message("chat", "m6", "call_1", "42")]).await;
    let op = run_turn(&app, &json!({"model": "gpt-test", "conversationId": "chat", "appendReply": true})).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    // The caller's earlier new message was not stored (only replies are appended).
    let echo = &reply.metadata["inference"]["echo"];
    assert_eq!(
        fake.received()[1].body["input"],
        json!([{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"},
               {"role": "assistant", "content": "checking"}, echo[0], echo[1],
               {"type": "function_call_output", "call_id": "call_1", "output": "42"}])
    );
    assert_eq!(echo[1]["call_id"], "call_1");
    assert_eq!(fake.received().len(), 2);
    assert_well_formed(&fake.received());
    assert_eq!(app.recent("other", 500).await.len(), 1, "other conversations untouched");
    app.stop().await;
}

// `postgres` is the end-to-end run on the production stack: PostgreSQL store, Redis queue.
backend_tests!(backend: append_reply_with_history);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_keeps_the_newest_messages_within_the_budget() {
    let fake = FakeProvider::start(vec![Step::ok(completed_text("ok"))]).await;
    let app = app_on(Backend::Sqlite, &fake, |c| c.provider.inference_history_bytes = 200).await;
    app.append_records(&[
        message("long", "m1", "user", "oldest"),
        message("long", "m2", "assistant", &"x".repeat(300)),
        message("long", "m3", "user", "recent"),
        message("long", "m4", "assistant", "newest"),
    ])
    .await;
    let op = run_turn(&app, &json!({"model": "gpt-test", "conversationId": "long"})).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(
        fake.received()[0].body["input"],
        json!([{"role": "user", "content": "recent"}, {"role": "assistant", "content": "newest"}]),
        "the 300-byte message does not fit, so it and everything older stay out"
    );
    app.stop().await;
}

/// A worker died after checkpointing the reply and even after appending it, but before
/// finishing. The next worker finishes from the checkpoint: no provider call, no second
/// reply, and the result is the checkpointed one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumed_after_the_reply_was_checkpointed_finishes_without_a_call() {
    let fake = FakeProvider::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let database_url = fresh_database(Backend::Sqlite, dir.path()).await;
    let api = app_on_command(Role::Api, &fake, &database_url).await;
    api.append_records(&[message("c", "m1", "user", "hello")]).await;
    let id = submit(&api, &json!({"model": "gpt-test", "conversationId": "c", "appendReply": true})).await;
    let reply_id = format!("{id}:reply");
    let result = json!({"outcome": "completed", "text": "from the checkpoint", "toolCalls": [], "echo": [],
                        "model": "m", "usage": null, "responseId": "resp_ck", "providerAttempts": 1});
    let checkpoint = json!({"providerAttempts": 1, "historyThrough": 1, "result": result});
    api.append_records(&[message("c", &reply_id, "assistant", "from the checkpoint")]).await;
    let pool = sqlx::SqlitePool::connect(&database_url).await.unwrap();
    let updated = sqlx::query(
        "UPDATE operations SET state = 'running', phase = 'appending_reply', checkpoint = $1, attempt = 1, \
         lease_token = 'dead-worker', lease_expires_at_ms = 1, pushed_at_ms = NULL WHERE id = $2",
    )
    .bind(checkpoint.to_string())
    .bind(id.as_str())
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(updated.rows_affected(), 1);
    pool.close().await;
    api.stop().await;

    let app = app_on_command(Role::Serve, &fake, &database_url).await;
    let op = app.wait_terminal(&id).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(op.result_json()["text"], "from the checkpoint");
    assert_eq!(op.result_json()["providerAttempts"], 1);
    assert_eq!(op.result_json()["appendedMessageId"], reply_id.as_str());
    assert_eq!(fake.received().len(), 0, "the provider is not called again");
    let stored = app.recent("c", 500).await;
    assert_eq!(stored.iter().filter(|m| m.id == reply_id).count(), 1, "{stored:?}");
    assert_eq!(stored.len(), 2);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_submissions_are_rejected_and_store_nothing() {
    // No workers: accepted operations stay queued and no provider is called.
    let app = TestApp::start_command(Backend::Sqlite, Role::Api, |_| {}).await;
    app.append_records(&[message("known", "m1", "user", "hi")]).await;
    let bad = vec![
        json!({"messages": [user("no model")]}),
        json!({"model": "", "messages": [user("x")]}),
        json!({"model": "m"}),
        json!({"model": "m", "messages": []}),
        json!({"model": "m", "messages": [user("x")], "appendReply": true}),
        json!({"model": "m", "messages": [user("x")], "unknown": 1}),
        json!({"model": "m", "messages": [{"role": "narrator", "content": "x"}]}),
        json!({"model": "m", "messages": [{"role": "tool", "content": "no call id"}]}),
        json!({"model": "m", "messages": [{"role": "user", "content": 5}]}),
        json!({"model": "m", "messages": "hi"}),
        json!({"model": "m", "messages": [user("x")], "maxOutputTokens": 8}),
        json!({"model": "m", "messages": [user("x")], "maxOutputTokens": -1}),
        json!({"model": "m", "messages": [user("x")], "reasoningEffort": "extreme"}),
        json!({"model": "m", "messages": [user("x")], "tools": [{"type": "function"}]}),
        json!({"model": "m", "messages": [user("x")], "tools": [{"type": "web_search", "name": "w"}]}),
        json!({"model": "m", "messages": [user("x")], "toolChoice": "required"}),
        json!({"model": "m", "messages": [user("x")], "conversationId": ""}),
        json!({"model": "m", "messages": [user("x")], "metadata": {"k": "v".repeat(513)}}),
        json!([1, 2]),
    ];
    for body in bad {
        let (status, error) = app.post(INFER, &body).await;
        assert_api_error(status, &error, 400);
    }
    // History alone must have something to load: an unknown or empty conversation is 404.
    let (status, error) = app.post(INFER, &json!({"model": "m", "conversationId": "nope"})).await;
    assert_api_error(status, &error, 404);
    let response = app.client.post(app.url(INFER)).body("{}").send().await.unwrap();
    let (status, error) = read(response).await;
    assert_api_error(status, &error, 415);
    let response =
        app.client.post(app.url(INFER)).header("content-type", "application/json").body("{").send().await.unwrap();
    let (status, error) = read(response).await;
    assert_api_error(status, &error, 400);
    let (_, listed) = app.get(&format!("{OPS}?kind=inference")).await;
    assert_eq!(listed["items"], json!([]), "nothing stored for rejected submissions");

    // Accepted: messages only; history only; and through advanced-operations.
    submit(&app, &turn("x")).await;
    submit(&app, &json!({"model": "m", "conversationId": "known", "appendReply": true})).await;
    let (status, op) =
        app.post("/internal/v1/context/advanced-operations", &json!({"kind": "inference", "request": turn("y")})).await;
    // advanced-operations is a contract path: the contract's vocabulary (inference reads as
    // import there); the REST form says what it is.
    assert_eq!((status, op["kind"].as_str()), (202, Some("import")), "{op}");
    let (_, rest) = app.get(&format!("{OPS}/{}", op["id"].as_str().unwrap())).await;
    assert_eq!(rest["kind"], "inference", "{rest}");
    let (status, error) = app
        .post("/internal/v1/context/advanced-operations", &json!({"kind": "inference", "request": {"model": "m"}}))
        .await;
    assert_api_error(status, &error, 400);
    // Idempotency: same key and body → same operation; same key, other body → 409.
    let post_keyed = |body: Value| {
        let request = app.client.post(app.url(INFER)).header("idempotency-key", "k1").json(&body);
        async move { read(request.send().await.unwrap()).await }
    };
    let (s1, a) = post_keyed(turn("same")).await;
    let (s2, b) = post_keyed(turn("same")).await;
    assert_eq!((s1, s2), (202, 202));
    assert_eq!(a["id"], b["id"]);
    let (status, error) = post_keyed(turn("different")).await;
    assert_api_error(status, &error, 409);
    let (_, listed) = app.get(&format!("{OPS}?kind=inference")).await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 4);
    app.stop().await;
}

/// Tenants are walls: another tenant's conversation is invisible to history loading and
/// its operations are 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_and_replies_stay_inside_the_tenant() {
    let fake = FakeProvider::start(vec![]).await;
    fake.always(Step::ok(completed_text("reply")));
    let app = app_on(Backend::Sqlite, &fake, jwt_mode).await;
    let (a, b) = (tenant_token("tenant-a"), tenant_token("tenant-b"));
    let append = json!({"messages": [message("shared-name", "m1", "user", "A's secret")]});
    let (status, _) = app.post_as(Some(&a), "/internal/v1/context/messages/batch", &append).await;
    assert_eq!(status, 200);
    let history_only = json!({"model": "m", "conversationId": "shared-name", "appendReply": true});
    let (status, error) = app.post_as(Some(&b), INFER, &history_only).await;
    assert_api_error(status, &error, 404);
    let (status, op_a) = app.post_as(Some(&a), INFER, &history_only).await;
    assert_eq!(status, 202, "{op_a}");
    let with_message =
        json!({"model": "m", "conversationId": "shared-name", "messages": [user("B asks")], "appendReply": true});
    let (status, op_b) = app.post_as(Some(&b), INFER, &with_message).await;
    assert_eq!(status, 202, "{op_b}");
    for (op, who) in [(&op_a, &a), (&op_b, &b)] {
        let done = app.as_caller(who).wait_terminal(op["id"].as_str().unwrap()).await;
        assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    }
    let other = format!("{OPS}/{}", op_a["id"].as_str().unwrap());
    let response = app.client.get(app.url(&other)).bearer_auth(&b).send().await.unwrap();
    assert_eq!(response.status(), 404);
    let inputs: Vec<Value> = fake.received().iter().map(|r| r.body["input"].clone()).collect();
    assert!(inputs.contains(&json!([{"role": "user", "content": "A's secret"}])), "{inputs:?}");
    assert!(inputs.contains(&json!([user("B asks")])), "B's turn sees none of A's history: {inputs:?}");
    let recent = |t: &str| {
        let request = app
            .client
            .post(app.url("/internal/v1/context/messages/recent"))
            .bearer_auth(t)
            .json(&json!({"scope": {"conversationId": "shared-name"}}));
        async move { read(request.send().await.unwrap()).await.1["items"].as_array().unwrap().len() }
    };
    assert_eq!(recent(&a).await, 2, "A's message and A's reply");
    assert_eq!(recent(&b).await, 1, "only B's reply");
    app.stop().await;
}
