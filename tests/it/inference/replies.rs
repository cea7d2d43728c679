//! What each provider body makes of the operation: a completed turn, tool calls with
//! their echo (and continuing that tool turn), a refusal as an answer, and every
//! decoder failure failing once with its stable code.

use std::time::Duration;

use context_jobs::contract::ContextOperationState;
use serde_json::json;

use super::{KEY, app, assert_failed, assert_well_formed, run_turn, turn, user};
use crate::harness::OperationExt as _;
use crate::harness::fake_responses::{
    FakeProvider, Step, call_item, completed, completed_text, reasoning_item, refusal_item, text_item,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_turn_reports_text_usage_model_and_response_id() {
    let fake = FakeProvider::start(vec![Step::ok(completed_text("Paris."))]).await;
    let app = app(&fake).await;
    let body = json!({"model": "gpt-test", "instructions": "Answer briefly.",
                      "messages": [{"role": "system", "content": "You are terse."}, user("Capital of France?")],
                      "maxOutputTokens": 64, "reasoningEffort": "low", "metadata": {"run": "r1"}});
    let op = run_turn(&app, &body).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    let result = op.result_json();
    assert_eq!(result["outcome"], "completed");
    assert_eq!(result["text"], "Paris.");
    assert_eq!(result["model"], "fake-model-1");
    assert_eq!(result["responseId"], "resp_fake");
    assert_eq!(result["usage"]["inputTokens"], 12);
    assert_eq!(result["usage"]["outputTokens"], 5);
    assert_eq!(result["providerAttempts"], 1);
    assert_eq!(result["toolCalls"], json!([]));
    assert!(result.get("appendedMessageId").is_none(), "{result}");

    let received = fake.received();
    assert_well_formed(&received);
    assert_eq!(received.len(), 1);
    let sent = &received[0].body;
    assert_eq!(
        *sent,
        json!({"model": "gpt-test", "instructions": "Answer briefly.\n\nYou are terse.",
               "input": [{"role": "user", "content": "Capital of France?"}], "max_output_tokens": 64,
               "reasoning": {"effort": "low"}, "metadata": {"run": "r1"}, "store": false})
    );
    // The recorder is process-wide, but these series exist once this test's turn is
    // counted, and no label of any test carries the key.
    let metrics = app.metrics().await;
    for name in [
        "context_ops_inference_tokens_total{direction=\"input\"}",
        "context_ops_inference_outcomes_total{outcome=\"completed\"}",
        "context_ops_inference_provider_requests_total{status_class=\"2xx\"}",
        "context_ops_inference_provider_request_duration_seconds_bucket",
    ] {
        assert!(metrics.contains(name), "metrics lack {name}");
    }
    assert!(!metrics.contains(KEY));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_keep_reasoning_in_order_and_the_echo_continues_the_turn() {
    let output = vec![
        reasoning_item("rs_1"),
        call_item("call_a", "lookup"),
        reasoning_item("rs_2"),
        call_item("call_b", "fetch"),
    ];
    let fake = FakeProvider::start(vec![Step::ok(completed(output.clone())), Step::ok(completed_text("done"))]).await;
    let app = app(&fake).await;
    let tools = json!([{"type": "function", "name": "lookup", "parameters": {"type": "object"}},
                       {"type": "function", "name": "fetch"}]);
    let op =
        run_turn(&app, &json!({"model": "gpt-test", "messages": [user("go")], "tools": tools, "toolChoice": "auto"}))
            .await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    let result = op.result_json();
    assert_eq!(result["outcome"], "completed");
    assert_eq!(result["text"], "");
    assert_eq!(result["toolCalls"], json!([output[1], output[3]]));
    assert_eq!(result["echo"], json!(output), "reasoning and calls, verbatim, in output order");
    assert_eq!(fake.received()[0].body["tools"], tools);
    assert_eq!(fake.received()[0].body["tool_choice"], "auto");

    // Continue: the echo goes back verbatim, then the tool results.
    let mut messages = vec![user("go")];
    messages.extend(result["echo"].as_array().unwrap().iter().cloned());
    messages.push(json!({"role": "tool", "tool_call_id": "call_a", "content": "A"}));
    messages.push(json!({"type": "function_call_output", "call_id": "call_b", "output": "B"}));
    let op = run_turn(&app, &json!({"model": "gpt-test", "messages": messages, "tools": tools})).await;
    assert_eq!(op.result_json()["text"], "done", "{op:?}");
    let received = fake.received();
    assert_well_formed(&received);
    let input = received[1].body["input"].as_array().unwrap().clone();
    assert_eq!(input.len(), 7);
    assert_eq!(input[0], user("go"));
    assert_eq!(input[1..5], output[..]);
    assert_eq!(input[5], json!({"type": "function_call_output", "call_id": "call_a", "output": "A"}));
    assert_eq!(input[6], json!({"type": "function_call_output", "call_id": "call_b", "output": "B"}));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_the_answer_and_the_operation_succeeds() {
    let body = json!({"id": "resp_r", "status": "completed", "model": "fake-model-1",
                      "output": [refusal_item("I can't help with that.")],
                      "usage": {"input_tokens": 4, "output_tokens": 6}});
    let fake = FakeProvider::start(vec![Step::ok(body)]).await;
    let app = app(&fake).await;
    let op = run_turn(&app, &turn("do something bad")).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert!(op.error_code.is_none(), "{op:?}");
    assert_eq!(op.result_json()["outcome"], "refused");
    assert_eq!(op.result_json()["text"], "I can't help with that.");
    assert_eq!(op.result_json()["responseId"], "resp_r");
    assert_eq!(op.result_json()["usage"]["outputTokens"], 6);
    assert_eq!(op.result_json()["toolCalls"], json!([]));
    assert_eq!(fake.received().len(), 1);
    app.stop().await;
}

/// Every body the decoder rejects fails the operation at once (one request), with its
/// code. Run one after another against one app so each request maps to its case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decoder_failures_fail_at_once_with_stable_codes() {
    let fake = FakeProvider::start(vec![]).await;
    let app = app(&fake).await;
    let cases = vec![
        ("mixed_refusal_tool_calls", Step::ok(completed(vec![refusal_item("no"), call_item("c1", "rm")]))),
        (
            "incomplete",
            Step::ok(json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
                            "output": [text_item("partial")]})),
        ),
        ("provider_failed", Step::ok(json!({"status": "failed", "output": []}))),
        ("non_terminal", Step::ok(json!({"status": "in_progress", "output": []}))),
        ("provider_cancelled", Step::ok(json!({"status": "cancelled", "output": [text_item("x")]}))),
        (
            "provider_error",
            Step::ok(json!({"status": "completed", "output": [text_item("x")],
                            "error": {"code": "invalid_prompt", "message": "flagged"}})),
        ),
        ("malformed_response", Step::raw(200, "{not json")),
        ("malformed_response", Step::ok(json!({"status": "completed", "output": []}))),
        ("malformed_response", Step::ok(json!([text_item("x")]))),
    ];
    for (i, (code, step)) in cases.into_iter().enumerate() {
        fake.then(step);
        let op = run_turn(&app, &turn("hi")).await;
        assert_failed(&op, code);
        assert!(op.result.is_none(), "{op:?}");
        assert!(op.error.as_deref().unwrap().contains("provider attempts: 1"), "{op:?}");
        assert_eq!(fake.received().len(), i + 1, "{code} must not be retried");
    }
    assert_well_formed(&fake.received());
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_reply_with_server_error_is_retried() {
    let failed = json!({"status": "failed", "error": {"code": "server_error", "message": "try again"}});
    let fake = FakeProvider::start(vec![Step::ok(failed), Step::ok(completed_text("second time"))]).await;
    let app = app(&fake).await;
    let op = run_turn(&app, &turn("hi")).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(op.result_json()["text"], "second time");
    assert_eq!(op.result_json()["providerAttempts"], 2);
    let received = fake.wait_requests(2, Duration::from_secs(1)).await;
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].body, received[1].body, "a retry sends the same request");
    assert_well_formed(&received);
    app.stop().await;
}

/// A successful reply that echoes the API key (in its text, a tool call, reasoning, an
/// id) is stored with the key scrubbed everywhere: the result, the appended reply and its
/// metadata — on both engines. A NUL in the reply (which PostgreSQL cannot store) is
/// replaced, so the turn succeeds on both alike.
async fn a_reply_echoing_the_key_is_scrubbed(backend: crate::harness::Backend) {
    let echo = completed(vec![
        reasoning_item(&format!("rs_{KEY}")),
        text_item(&format!("Your key is {KEY}, and a NUL: \u{0}.")),
        call_item(&format!("call_{KEY}"), "lookup"),
    ]);
    let fake = FakeProvider::start(vec![Step::ok(echo)]).await;
    let app = super::app_on(backend, &fake, |_| {}).await;
    app.append_records(&[crate::harness::message("chat", "m1", "user", "hi")]).await;
    let body = json!({"model": "gpt-test", "conversationId": "chat", "appendReply": true});
    let op = run_turn(&app, &body).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(op.result_json()["text"], "Your key is [redacted], and a NUL: \u{fffd}.");
    let (status, raw) = app.get(&format!("{}/{}", super::OPS, op.id)).await;
    assert_eq!(status, 200);
    assert!(!raw.to_string().contains(KEY), "the operation shows the key: {raw}");
    let stored = app.recent("chat", 10).await;
    assert_eq!(stored.len(), 2, "{stored:?}");
    let reply = serde_json::to_string(&stored[1]).unwrap();
    assert!(reply.contains("[redacted]"), "{reply}");
    assert!(!reply.contains(KEY), "the stored reply or its metadata holds the key: {reply}");
    app.stop().await;
}

backend_tests!(backend: a_reply_echoing_the_key_is_scrubbed);
