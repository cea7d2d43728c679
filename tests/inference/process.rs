//! The real binary as a child process: its logs (at `RUST_LOG=trace`), operation rows
//! and metrics never contain the provider key; and a worker SIGKILLed mid-call is
//! recovered by the next process, which repeats the call and appends the reply once.

use std::time::Duration;

use serde_json::{Value, json};
use sqlx::Row as _;

use crate::child::{Proc, Service, ServiceEnv, free_port};
use crate::common::{Backend, fresh_database, message, unique};
use crate::fake::{FakeProvider, Step, completed_text};
use crate::helpers::{INFER, KEY, RECENT, assert_failed, assert_well_formed, wait_terminal_at};

fn service_env(dir: &std::path::Path, database_url: String) -> ServiceEnv {
    ServiceEnv { database_url, redis_url: None, namespace: unique("q"), lease_secs: 2, dir: dir.to_path_buf() }
}

/// Start `serve` with the provider settings on a fresh port and wait until healthy.
async fn spawn(env: &ServiceEnv, name: &str, fake: &FakeProvider, rust_log: &str, client: &reqwest::Client) -> Service {
    let port = free_port();
    let mut cmd = env.command("serve", port);
    cmd.env("RESPONSES_BASE_URL", &fake.url)
        .env("RESPONSES_API_KEY", KEY)
        .env("RESPONSES_MAX_ATTEMPTS", "1")
        .env("RESPONSES_TIMEOUT_MS", "60000")
        .env("RUST_LOG", rust_log);
    let mut service = Service { proc: Proc::spawn(name, cmd, &env.dir), base: format!("http://127.0.0.1:{port}") };
    service.wait_healthy(client, Duration::from_secs(30)).await;
    service
}

async fn post(client: &reqwest::Client, base: &str, path: &str, body: &Value) -> (u16, Value) {
    crate::common::read(client.post(format!("{base}{path}")).json(body).send().await.unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_is_never_logged_stored_or_exported() {
    let dir = tempfile::tempdir().unwrap();
    let database_url = fresh_database(Backend::Sqlite, dir.path()).await;
    let env = service_env(dir.path(), database_url.clone());
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
    let client = reqwest::Client::new();
    let mut service = spawn(&env, "serve", &fake, "trace", &client).await;
    let mut ops = Vec::new();
    for text in ["one", "two", "three", "four"] {
        let (status, op) = post(
            &client,
            &service.base,
            INFER,
            &json!({"model": "m", "messages": [{"role": "user", "content": text}]}),
        )
        .await;
        assert_eq!(status, 202, "{op}");
        ops.push(wait_terminal_at(&client, &service.base, op["id"].as_str().unwrap()).await);
    }
    assert_failed(&ops[0], "provider_rejected");
    assert!(ops[0]["error"].as_str().unwrap().contains("[redacted]"), "{}", ops[0]);
    assert_eq!(ops[1]["state"], "succeeded", "{}", ops[1]);
    assert_failed(&ops[2], "retries_exhausted");
    assert_failed(&ops[3], "malformed_response");
    // The key was really used…
    assert_well_formed(&fake.received());
    // …and appears nowhere we keep or show.
    let metrics = client.get(format!("{}/metrics", service.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("context_ops_inference_outcomes_total"), "metrics were captured");
    assert!(!metrics.contains(KEY));
    for op in &ops {
        assert!(!op.to_string().contains(KEY), "{op}");
    }
    service.proc.assert_alive();
    service.proc.kill();
    let log = service.proc.log();
    assert!(log.contains("TRACE") && log.contains("DEBUG"), "trace logs were captured");
    assert!(log.contains("/v1/responses") || log.contains("inference"), "the calls were logged about");
    for (n, line) in log.lines().enumerate() {
        assert!(!line.contains(KEY), "log line {n} carries the key: {line}");
    }
    let pool = sqlx::SqlitePool::connect(&database_url).await.unwrap();
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
    let dir = tempfile::tempdir().unwrap();
    let env = service_env(dir.path(), fresh_database(Backend::Sqlite, dir.path()).await);
    let fake = FakeProvider::start(vec![Step::Hang, Step::ok(completed_text("survived"))]).await;
    let client = reqwest::Client::new();
    let mut first = spawn(&env, "first", &fake, "info,sqlx=warn", &client).await;
    let batch = json!({"messages": [message("c", "m1", "user", "hello"), message("c", "m2", "assistant", "hi")]});
    let (status, _) = post(&client, &first.base, "/internal/v1/context/messages/batch", &batch).await;
    assert_eq!(status, 200);
    let body = json!({"model": "m", "conversationId": "c", "messages": [{"role": "user", "content": "still there?"}],
                      "appendReply": true});
    let (status, op) = post(&client, &first.base, INFER, &body).await;
    assert_eq!(status, 202, "{op}");
    let id = op["id"].as_str().unwrap().to_string();
    fake.wait_requests(1, Duration::from_secs(20)).await;
    first.proc.kill();
    fake.wait_until("the dead worker's request dropped", Duration::from_secs(10), |f| f.dropped() == 1).await;

    let second = spawn(&env, "second", &fake, "info,sqlx=warn", &client).await;
    let op = wait_terminal_at(&client, &second.base, &id).await;
    assert_eq!(op["state"], "succeeded", "{op}");
    assert_eq!(op["result"]["text"], "survived");
    assert_eq!(op["result"]["providerAttempts"], 2, "the crashed call counts");
    let received = fake.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].body, received[1].body, "the resumed call sends the same history");
    assert_well_formed(&received);
    let (_, recent) = post(&client, &second.base, RECENT, &json!({"scope": {"conversationId": "c"}})).await;
    let ids: Vec<&str> = recent["items"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    let reply = format!("{id}:reply");
    assert_eq!(ids, vec!["m1", "m2", reply.as_str()], "the reply is appended exactly once");
}
