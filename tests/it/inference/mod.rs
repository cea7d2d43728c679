//! The `inference` operation end to end: the real service (in-process on SQLite for most
//! cases, one run on PostgreSQL + Redis, and the real binary for the log and SIGKILL
//! cases) against a scripted fake Responses provider on 127.0.0.1
//! (`harness::fake_responses`), which also asserts what it received.
//!
//! - `replies`: what each provider body makes of the operation (decoder outcomes).
//! - `retries`: HTTP statuses, hints, timeouts and cancellation of the in-flight call.
//! - `conversation`: history loading, `appendReply` exactly once, resumption, validation,
//!   tenancy, and the PostgreSQL + Redis run.
//! - `process`: the binary — the key never logged or stored; SIGKILL mid-call, resume.
//!
//! Here: an app pointed at a fake provider, submit/run helpers, and the checks every
//! provider request must pass.

use context_jobs::contract::{
    CONTEXT_OPERATIONS_PATH as OPS, ContextOperation, ContextOperationKind, ContextOperationState,
    INFERENCE_PATH as INFER,
};
use context_ops::config::{Config, Role};
use serde_json::{Value, json};

use crate::harness::fake_responses::{FakeProvider, Received};
use crate::harness::{Backend, TestApp};

mod conversation;
mod process;
mod replies;
mod retries;

/// The provider key the tests configure; it must never show up anywhere but the
/// `Authorization` header the fake receives.
const KEY: &str = "sk-test-Zq8JwT3BlbkFJ0secretkey42";

/// The service on `backend` with the provider pointed at `fake`.
async fn app_on(backend: Backend, fake: &FakeProvider, tweak: impl FnOnce(&mut Config)) -> TestApp {
    let url = fake.url.clone();
    TestApp::start_with(backend, move |c| {
        c.provider.responses_base_url = url;
        c.provider.responses_api_key = Some(KEY.into());
        c.provider.responses_timeout_ms = 20_000;
        c.provider.responses_max_attempts = 3;
        tweak(c);
    })
    .await
}

async fn app(fake: &FakeProvider) -> TestApp {
    app_on(Backend::Sqlite, fake, |_| {}).await
}

/// The service on an existing SQLite database (`database_url`), run as `command`.
async fn app_on_command(command: Role, fake: &FakeProvider, database_url: &str) -> TestApp {
    let (url, database_url) = (fake.url.clone(), database_url.to_string());
    TestApp::start_command(Backend::Sqlite, command, move |c| {
        c.database.database_url = database_url;
        c.provider.responses_base_url = url;
        c.provider.responses_api_key = Some(KEY.into());
    })
    .await
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

/// A minimal valid submission.
fn turn(text: &str) -> Value {
    json!({"model": "gpt-test", "messages": [user(text)]})
}

/// Submit; asserts 202 and returns the operation id.
async fn submit(app: &TestApp, body: &Value) -> String {
    let op = app.submit(INFER, body).await;
    assert_eq!(op.kind, ContextOperationKind::Inference, "{op:?}");
    op.id
}

/// Submit and wait for the end.
async fn run_turn(app: &TestApp, body: &Value) -> ContextOperation {
    let id = submit(app, body).await;
    app.wait_terminal(&id).await
}

/// What every request to the provider must look like.
fn assert_well_formed(received: &[Received]) {
    assert!(!received.is_empty());
    for r in received {
        assert_eq!(r.body["store"], json!(false), "store must be false on every request: {}", r.body);
        assert_eq!(r.authorization.as_deref(), Some(format!("Bearer {KEY}").as_str()));
        assert!(r.body["model"].is_string(), "{}", r.body);
        assert!(r.body["input"].is_array(), "{}", r.body);
    }
}

/// A failed operation with `code`, whose error names no secret.
fn assert_failed(op: &ContextOperation, code: &str) {
    assert_eq!(op.state, ContextOperationState::Failed, "{op:?}");
    assert_eq!(op.error_code.as_deref(), Some(code), "{op:?}");
    let error = op.error.as_deref().unwrap_or_else(|| panic!("no error message: {op:?}"));
    assert!(!error.is_empty() && !error.contains(KEY), "{error}");
}
