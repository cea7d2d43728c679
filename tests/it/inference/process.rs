//! The real binary as a child process: its logs (at `RUST_LOG=trace`), operation rows
//! and metrics never contain the provider key; and a worker SIGKILLed mid-call is
//! recovered by the next process, which repeats the call and appends the reply once.

use std::time::Duration;

use context_jobs::contract::ContextOperationState;
use serde_json::json;
use sqlx::Row as _;

use super::{INFER, KEY, OPS, assert_failed, assert_well_formed};
use crate::harness::child::Service;
use crate::harness::fake_responses::{FakeProvider, Step, completed_text};
use crate::harness::fixture::Fixture;
use crate::harness::{Backend, OperationExt as _, message};

/// Start `serve` with the provider settings on a fresh port and wait until healthy.
async fn spawn(fx: &Fixture, name: &str, fake: &FakeProvider, rust_log: &str) -> Service {
    let env = [
        ("RESPONSES_BASE_URL", fake.url.as_str()),
        ("RESPONSES_API_KEY", KEY),
        ("RESPONSES_MAX_ATTEMPTS", "1"),
        ("RESPONSES_TIMEOUT_MS", "60000"),
        ("RUST_LOG", rust_log),
    ];
    let mut service = fx.env.spawn_with(name, "serve", &env);
    service.wait_healthy(Duration::from_secs(30)).await;
    service
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_is_never_logged_stored_or_exported() {
    let fx = Fixture::new(Backend::Sqlite, 2).await;
    // The provider echoes the key back in errors, as real ones do with a bad key.
    let echoed =
        json!({"error": {"message": format!("Incorrect API key provided: {KEY}."), "code": "invalid_api_key"}});
    let fake = FakeProvider::start(vec![
        Step::status(401, echoed),
        Step::ok(completed_text("fine")),
        Step::raw(500, &format!("<html>proxy error for key {KEY}</html>")),
        Step::raw(200, &format!("not json {KEY}")),
    ])
    .await;
    let mut service = spawn(&fx, "serve", &fake, "trace").await;
    let mut ops = Vec::new();
    for text in ["one", "two", "three", "four"] {
        let op =
            service.api.submit(INFER, &json!({"model": "m", "messages": [{"role": "user", "content": text}]})).await;
        ops.push(service.api.wait_terminal(&op.id).await);
    }
    assert_failed(&ops[0], "provider_rejected");
    assert!(ops[0].error.as_deref().unwrap().contains("[redacted]"), "{:?}", ops[0]);
    assert_eq!(ops[1].state, ContextOperationState::Succeeded, "{:?}", ops[1]);
    assert_failed(&ops[2], "retries_exhausted");
    assert_failed(&ops[3], "malformed_response");
    // The key was really used…
    assert_well_formed(&fake.received());
    // …and appears nowhere we keep or show.
    let metrics = service.api.metrics().await;
    assert!(metrics.contains("context_ops_inference_outcomes_total"), "metrics were captured");
    assert!(!metrics.contains(KEY));
    for op in &ops {
        let (_, shown) = service.api.get(&format!("{OPS}/{}", op.id)).await;
        assert!(!shown.to_string().contains(KEY), "{shown}");
    }
    service.proc.assert_alive();
    service.proc.kill();
    let log = service.proc.log();
    assert!(log.contains("TRACE") && log.contains("DEBUG"), "trace logs were captured");
    assert!(log.contains("/v1/responses") || log.contains("inference"), "the calls were logged about");
    for (n, line) in log.lines().enumerate() {
        assert!(!line.contains(KEY), "log line {n} carries the key: {line}");
    }
    let pool = sqlx::SqlitePool::connect(&fx.env.database_url).await.unwrap();
    let rows = sqlx::query("SELECT * FROM operations").fetch_all(&pool).await.unwrap();
    assert_eq!(rows.len(), 4);
    for row in rows {
        for i in 0..row.len() {
            if let Ok(Some(text)) = row.try_get::<Option<String>, _>(i) {
                assert!(!text.contains(KEY), "operations column {i} stores the key: {text}");
            }
        }
    }
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_call_resumes_and_appends_the_reply_once() {
    let fx = Fixture::new(Backend::Sqlite, 2).await;
    let fake = FakeProvider::start(vec![Step::Hang, Step::ok(completed_text("survived"))]).await;
    let mut first = spawn(&fx, "first", &fake, "info,sqlx=warn").await;
    first.api.append_records(&[message("c", "m1", "user", "hello"), message("c", "m2", "assistant", "hi")]).await;
    let body = json!({"model": "m", "conversationId": "c", "messages": [{"role": "user", "content": "still there?"}],
                      "appendReply": true});
    let id = first.api.submit(INFER, &body).await.id;
    fake.wait_requests(1, Duration::from_secs(20)).await;
    first.proc.kill();
    fake.wait_until("the dead worker's request dropped", Duration::from_secs(10), |f| f.dropped() == 1).await;

    let second = spawn(&fx, "second", &fake, "info,sqlx=warn").await;
    let op = second.api.wait_terminal(&id).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(op.result_json()["text"], "survived");
    assert_eq!(op.result_json()["providerAttempts"], 2, "the crashed call counts");
    let received = fake.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].body, received[1].body, "the resumed call sends the same history");
    assert_well_formed(&received);
    let recent = second.api.recent("c", 50).await;
    let ids: Vec<&str> = recent.iter().map(|m| m.id.as_str()).collect();
    let reply = format!("{id}:reply");
    assert_eq!(ids, vec!["m1", "m2", reply.as_str()], "the reply is appended exactly once");
}
