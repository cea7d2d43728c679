//! Operations from the command line: submit (--wait), get, list, cancel, retry, forget, and
//! the exit codes a script branches on.

use context_jobs::contract::{CONTEXT_OPERATIONS_PATH as OPS, ContextOperationKind, ContextOperationState};
use context_jobs::operation::view::{OperationList, OperationView};
use context_ops::config::Role;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::response::IntoResponse as _;

use super::Cli;
use crate::harness::db::{DEFAULT_TENANT, seed_conversation};
use crate::harness::{Backend, TestApp};

/// Exit codes (docs/cli.md).
const FAILED: i32 = 1;
const USAGE: i32 = 2;
const CANCELLED: i32 = 3;
const TIMED_OUT: i32 = 4;
const REFUSED: i32 = 5;
const UNREACHABLE: i32 = 6;

async fn submit_and_wait_for_several_kinds(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.worker.batch_size = 200).await;
    let dir = tempfile::tempdir().unwrap();
    let cli = Cli::new(&app.base, dir.path());
    seed_conversation(app.db(), DEFAULT_TENANT, "doomed", 1000).await;
    seed_conversation(app.db(), DEFAULT_TENANT, "trimmed", 50).await;
    seed_conversation(app.db(), DEFAULT_TENANT, "kept", 30).await;

    let deleted: OperationView = cli.json(&["submit", "delete", "--conversation", "doomed", "--wait"]).await;
    assert_eq!(
        (deleted.operation.kind, deleted.operation.state),
        (ContextOperationKind::Delete, ContextOperationState::Succeeded)
    );
    assert_eq!(deleted.operation.result.as_ref().unwrap()["deletedMessages"], 1000);
    let trimmed: OperationView =
        cli.json(&["submit", "retention", "--conversation", "trimmed", "--max-messages", "10", "--wait"]).await;
    assert_eq!(trimmed.operation.kind, ContextOperationKind::Retention, "the full vocabulary, not the contract's");
    assert_eq!(trimmed.operation.state, ContextOperationState::Succeeded);
    let exported: OperationView =
        cli.json(&["submit", "export", "--conversation", "kept", "--wait", "--priority", "7"]).await;
    assert_eq!(exported.operation.state, ContextOperationState::Succeeded);
    assert_eq!(exported.operation.result.as_ref().unwrap()["messages"], 30);
    assert_eq!(exported.priority, 7, "scheduling flags reach the submission");
    let rebuilt: OperationView = cli.json(&["submit", "rebuild", "--force", "--wait"]).await;
    assert_eq!(rebuilt.operation.kind, ContextOperationKind::RebuildVector);
    assert_eq!(rebuilt.operation.state, ContextOperationState::Succeeded);
    // --json prints exactly what GET answers.
    let (status, got) = app.get(&format!("{OPS}/{}", exported.operation.id)).await;
    assert_eq!(status, 200);
    let printed: serde_json::Value = cli.json(&["get", &exported.operation.id]).await;
    assert_eq!(printed, got);
    // Without --json, a person's summary (no bar: stdout is not a terminal).
    let human = cli.run(&["get", &deleted.operation.id]).await.expect(0);
    assert!(human.stdout.starts_with(&format!("{}  delete  succeeded", deleted.operation.id)), "{}", human.stdout);
    assert!(human.stdout.contains("progress   1000/1000"), "{}", human.stdout);
    assert!(human.stderr.is_empty(), "no progress bar drawn off a terminal: {:?}", human.stderr);
    // The same idempotency key: the same operation.
    let first: OperationView =
        cli.json(&["submit", "delete", "--conversation", "gone", "--idempotency-key", "k-1"]).await;
    let again: OperationView =
        cli.json(&["submit", "delete", "--conversation", "gone", "--idempotency-key", "k-1"]).await;
    assert_eq!(first.operation.id, again.operation.id);
}

async fn list_cancel_retry_forget_and_exit_codes(backend: Backend) {
    // API only: operations stay queued until the test acts on them.
    let app = TestApp::start_command(backend, Role::Api, |_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let cli = Cli::new(&app.base, dir.path());
    let mut ids = Vec::new();
    for c in ["a", "b", "c"] {
        let op: OperationView = cli.json(&["submit", "delete", "--conversation", c]).await;
        assert_eq!(op.operation.state, ContextOperationState::Queued);
        ids.push(op.operation.id);
    }
    let page: OperationList = cli.json(&["list", "--kind", "delete", "--limit", "2"]).await;
    assert_eq!(page.items.iter().map(|o| o.operation.id.clone()).collect::<Vec<_>>(), [ids[2].clone(), ids[1].clone()]);
    let cursor = page.next_cursor.expect("a next page");
    let rest: OperationList = cli.json(&["list", "--kind", "delete", "--limit", "2", "--cursor", &cursor]).await;
    assert_eq!(rest.items.len(), 1);
    assert_eq!(rest.items[0].operation.id, ids[0]);
    let all: OperationList = cli.json(&["list", "--limit", "1", "--all"]).await;
    assert_eq!(all.items.len(), 3, "--all follows the cursor");
    let none: OperationList = cli.json(&["list", "--state", "running"]).await;
    assert!(none.items.is_empty());

    // Still queued (no workers): a bounded wait times out.
    let timed_out = cli.run(&["wait", &ids[0], "--timeout", "300ms", "--json"]).await.expect(TIMED_OUT);
    assert_eq!(timed_out.json::<OperationView>().operation.state, ContextOperationState::Queued);
    let cancelled: OperationView = cli.json(&["cancel", &ids[0]]).await;
    assert_eq!(cancelled.operation.state, ContextOperationState::Cancelled);
    let waited = cli.run(&["wait", &ids[0], "--json"]).await.expect(CANCELLED);
    assert_eq!(waited.json::<OperationView>().operation.state, ContextOperationState::Cancelled);
    let retried: OperationView = cli.json(&["retry", &ids[0]]).await;
    assert_eq!(retried.operation.state, ContextOperationState::Queued);
    // Forgetting a live operation is refused (409), then allowed once it is over.
    let refused = cli.run(&["forget", &ids[0]]).await.expect(REFUSED);
    assert!(refused.stderr.contains("409"), "{}", refused.stderr);
    cli.json::<OperationView>(&["cancel", &ids[0]]).await;
    cli.run(&["forget", &ids[0]]).await.expect(0);
    let gone = cli.run(&["get", &ids[0]]).await.expect(REFUSED);
    assert!(gone.stderr.contains("404"), "{}", gone.stderr);

    // Usage errors, an unreachable service.
    cli.run(&["submit", "delete"]).await.expect(USAGE);
    cli.run(&["wait", &ids[1], "--timeout", "soon"]).await.expect(USAGE);
    cli.run(&["list", "--kind", "nope"]).await.expect(REFUSED);
    let mut offline = Cli::new("http://127.0.0.1:9", dir.path());
    offline.token = None;
    let down = offline.run(&["list"]).await.expect(UNREACHABLE);
    assert!(down.stderr.contains("cannot reach http://127.0.0.1:9"), "{}", down.stderr);
}

async fn a_failed_operation_exits_1(backend: Backend) {
    let app = TestApp::start(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let cli = Cli::new(&app.base, dir.path());
    // Not an artifact: the import fails on its first line.
    let junk = dir.path().join("junk.jsonl");
    std::fs::write(&junk, "this is not an artifact\n").unwrap();
    let ran = cli.run(&["import", "--file", junk.to_str().unwrap(), "--json"]).await.expect(FAILED);
    let op: OperationView = ran.json();
    assert_eq!((op.operation.kind, op.operation.state), (ContextOperationKind::Import, ContextOperationState::Failed));
    assert!(op.operation.error_code.is_some(), "{op:?}");
    assert!(ran.stderr.contains("the operation failed"), "{}", ran.stderr);
}

async fn credentials_come_from_the_services_own_variables(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.auth.service_token = Some("s3cret-token".to_string().into())).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cli = Cli::new(&app.base, dir.path());
    let denied = cli.run(&["list"]).await.expect(REFUSED);
    assert!(denied.stderr.contains("401"), "{}", denied.stderr);
    cli.token = Some("s3cret-token".into());
    let page: OperationList = cli.json(&["list"]).await;
    assert!(page.items.is_empty());
    // A flag wins over the variable.
    cli.run(&["list", "--token", "wrong"]).await.expect(REFUSED);
}

async fn wait_falls_back_to_long_polls_when_streams_are_refused(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.http.max_event_streams = 1).await;
    let dir = tempfile::tempdir().unwrap();
    let cli = Cli::new(&app.base, dir.path());
    seed_conversation(app.db(), DEFAULT_TENANT, "doomed", 500).await;
    // The process's one stream is taken: the CLI's stream is answered 503.
    let held = crate::events::EventStream::opened(&app, &crate::events::list_path(""), None).await;
    let (status, _) = app.get(&crate::events::list_path("")).await;
    assert_eq!(status, 503);
    let done: OperationView = cli.json(&["submit", "delete", "--conversation", "doomed", "--wait"]).await;
    assert_eq!(done.operation.state, ContextOperationState::Succeeded);
    assert_eq!(done.operation.result.as_ref().unwrap()["deletedMessages"], 500);
    drop(held);
}

/// A service (or a proxy in front of it) without the event stream's route answers it 404,
/// or a proxy that does not stream ends every stream at once: `wait` follows with
/// long-polls, as for a refused stream (it exited 5 on the 404, and reconnected at once,
/// without end, to the empty streams).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_falls_back_to_long_polls_where_streams_do_not_work() {
    let app = TestApp::start(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let id = app.api.submit_delete("gone").await.id;
    for (stream_status, stream_body) in [(404, r#"{"status":404,"message":"no such route"}"#), (200, "")] {
        let (url, streams) = proxy(&app.base, stream_status, stream_body).await;
        let cli = Cli::new(&url, dir.path());
        let done: OperationView = cli.json(&["wait", id.as_str(), "--timeout", "30s"]).await;
        assert_eq!(done.operation.state, ContextOperationState::Succeeded, "streams answered {stream_status}");
        let tries = streams.load(std::sync::atomic::Ordering::Relaxed);
        assert!((1..=3).contains(&tries), "{tries} stream requests answered {stream_status}");
    }
}

/// A proxy to `upstream` that answers every `…/events` with `status` and `body`; its URL,
/// and how many stream requests it answered.
async fn proxy(upstream: &str, status: u16, body: &'static str) -> (String, Arc<AtomicUsize>) {
    let upstream = upstream.to_string();
    let streams = Arc::new(AtomicUsize::new(0));
    let counted = streams.clone();
    let proxy = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let (upstream, counted) = (upstream.clone(), counted.clone());
        async move {
            let path = request.uri().path_and_query().map(|p| p.as_str().to_string()).unwrap_or_default();
            if request.uri().path().ends_with("/events") {
                counted.fetch_add(1, Ordering::Relaxed);
                let status = axum::http::StatusCode::from_u16(status).unwrap();
                return (status, [("content-type", "text/event-stream")], body).into_response();
            }
            let mut forward = reqwest::Client::new().request(request.method().clone(), format!("{upstream}{path}"));
            for (name, value) in request.headers() {
                if name != axum::http::header::HOST {
                    forward = forward.header(name, value);
                }
            }
            let body = axum::body::to_bytes(request.into_body(), usize::MAX).await.unwrap();
            let answer = forward.body(body).send().await.unwrap();
            let status = answer.status();
            (status, answer.bytes().await.unwrap()).into_response()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, proxy).await });
    (url, streams)
}

backend_tests!(backend:
    submit_and_wait_for_several_kinds,
    wait_falls_back_to_long_polls_when_streams_are_refused,
    list_cancel_retry_forget_and_exit_codes,
    a_failed_operation_exits_1,
    credentials_come_from_the_services_own_variables,
);
