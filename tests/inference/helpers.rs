//! Shared by the inference tests: an app pointed at a fake provider, submit/wait helpers,
//! and the checks every provider request must pass.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Backend, TestApp};
use crate::fake::{FakeProvider, Received};
use context_ops::config::Config;

pub const INFER: &str = "/internal/v1/context/inference";
pub const OPS: &str = "/internal/v1/context/operations";
pub const RECENT: &str = "/internal/v1/context/messages/recent";
/// The provider key the tests configure; it must never show up anywhere but the
/// `Authorization` header the fake receives.
pub const KEY: &str = "sk-test-Zq8JwT3BlbkFJ0secretkey42";

/// The service on `backend` with the provider pointed at `fake`.
pub async fn app_on(backend: Backend, fake: &FakeProvider, tweak: impl FnOnce(&mut Config)) -> TestApp {
    let url = fake.url.clone();
    TestApp::start_with(backend, move |c| {
        c.responses_base_url = url;
        c.responses_api_key = Some(KEY.into());
        c.responses_timeout_ms = 20_000;
        c.responses_max_attempts = 3;
        tweak(c);
    })
    .await
}

pub async fn app(fake: &FakeProvider) -> TestApp {
    app_on(Backend::Sqlite, fake, |_| {}).await
}

pub fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

/// A minimal valid submission.
pub fn turn(text: &str) -> Value {
    json!({"model": "gpt-test", "messages": [user(text)]})
}

/// Submit; asserts 202 and returns the operation id.
pub async fn submit(app: &TestApp, body: &Value) -> String {
    let (status, op) = app.post(INFER, body).await;
    assert_eq!(status, 202, "{op}");
    assert_eq!(op["kind"], "inference", "{op}");
    op["id"].as_str().unwrap().to_string()
}

/// Long-poll `base` until the operation is terminal.
pub async fn wait_terminal_at(client: &reqwest::Client, base: &str, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut version = -1i64;
    loop {
        let url = if version < 0 {
            format!("{base}{OPS}/{id}")
        } else {
            format!("{base}{OPS}/{id}/wait?sinceVersion={version}&timeoutMs=5000")
        };
        let response = client.get(url).send().await.unwrap();
        let (status, op) = crate::common::read(response).await;
        assert_eq!(status, 200, "{op}");
        if ["succeeded", "failed", "cancelled"].contains(&op["state"].as_str().unwrap()) {
            return op;
        }
        version = op["version"].as_i64().unwrap();
        assert!(Instant::now() < deadline, "operation {id} did not finish: {op}");
    }
}

pub async fn wait_terminal(app: &TestApp, id: &str) -> Value {
    wait_terminal_at(&app.client, &app.base, id).await
}

/// Submit and wait for the end.
pub async fn run_turn(app: &TestApp, body: &Value) -> Value {
    let id = submit(app, body).await;
    wait_terminal(app, &id).await
}

/// What every request to the provider must look like.
pub fn assert_well_formed(received: &[Received]) {
    assert!(!received.is_empty());
    for r in received {
        assert_eq!(r.body["store"], json!(false), "store must be false on every request: {}", r.body);
        assert_eq!(r.authorization.as_deref(), Some(format!("Bearer {KEY}").as_str()));
        assert!(r.body["model"].is_string(), "{}", r.body);
        assert!(r.body["input"].is_array(), "{}", r.body);
    }
}

/// A failed operation with `code`, whose error names no secret.
pub fn assert_failed(op: &Value, code: &str) {
    assert_eq!(op["state"], "failed", "{op}");
    assert_eq!(op["errorCode"], code, "{op}");
    let error = op["error"].as_str().unwrap_or_else(|| panic!("no error message: {op}"));
    assert!(!error.is_empty() && !error.contains(KEY), "{error}");
}

/// The conversation's messages, oldest first.
pub async fn history(app: &TestApp, conversation: &str) -> Vec<Value> {
    let (status, body) = app.post(RECENT, &json!({"scope": {"conversationId": conversation}, "limit": 500})).await;
    assert_eq!(status, 200, "{body}");
    body["items"].as_array().unwrap().clone()
}

/// The service on an existing SQLite database (`database_url`), run as `command`.
pub async fn app_on_command(command: context_ops::config::Command, fake: &FakeProvider, database_url: &str) -> TestApp {
    let (url, database_url) = (fake.url.clone(), database_url.to_string());
    TestApp::start_command(Backend::Sqlite, command, move |c| {
        c.database_url = database_url;
        c.responses_base_url = url;
        c.responses_api_key = Some(KEY.into());
    })
    .await
}
