//! What every stream promises: the terminal event ends an operation's stream; the data is
//! exactly `GET …/operations/{id}`; idle streams send heartbeats; tenant walls (and an
//! admin's scope) as in the listing; a cap on open streams answered 503; shutdown ends
//! streams at once; bad input is a 400.

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use context_jobs::contract::{CONTEXT_OPERATIONS_PATH as OPS, ContextOperationState};
use context_ops::cli::sse::Frame;
use context_ops::config::Role;
use serde_json::json;

use super::{EventStream, WITHIN, list_path, op_path};
use crate::harness::db::{DEFAULT_TENANT, seed_conversation};
use crate::harness::jwt::{claims, jwt_mode, mint, tenant_token};
use crate::harness::wait::poll_until;
use crate::harness::{Backend, TestApp, assert_api_error};

async fn the_terminal_event_ends_the_stream(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.worker.batch_size = 100).await;
    seed_conversation(app.db(), DEFAULT_TENANT, "doomed", 1000).await;
    let id = app.submit_delete("doomed").await.id;
    let mut stream = EventStream::opened(&app, &op_path(&id), None).await;
    let mut events = Vec::new();
    while let Some(event) = stream.operation().await {
        events.push(event);
    }
    let last = events.last().expect("at least the current state");
    assert_eq!(last.op.operation.state, ContextOperationState::Succeeded, "the stream ended on the terminal state");
    let versions: Vec<u64> = events.iter().map(|e| e.op.operation.version).collect();
    assert!(versions.windows(2).all(|w| w[0] < w[1]), "versions only grow: {versions:?}");
    assert!(events.iter().all(|e| e.id == e.op.operation.version.to_string()), "id: is the version");
    assert!(events[..events.len() - 1].iter().all(|e| !e.op.operation.state.is_terminal()));
    // The data is the operation exactly as GET answers it.
    let (status, got) = app.get(&format!("{OPS}/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(last.raw, got, "an event's data is GET …/operations/{{id}}'s JSON");
    // A client that has the terminal version is told there is nothing more: 204.
    let response = app.request(reqwest::Method::GET, &op_path(&id)).header("last-event-id", &last.id).send().await;
    assert_eq!(response.unwrap().status(), 204);
    // One that has an older one gets the terminal state, then the end.
    let mut late = EventStream::opened(&app, &op_path(&id), Some("1")).await;
    assert_eq!(late.expect_operation().await.op.operation.version, last.op.operation.version);
    assert!(late.operation().await.is_none());
    // The query parameter works as the header does.
    let query = format!("{}?lastEventId={}", op_path(&id), last.id);
    assert_eq!(app.request(reqwest::Method::GET, &query).send().await.unwrap().status(), 204);
}

async fn idle_streams_send_heartbeats(backend: Backend) {
    let app = TestApp::start_command(backend, Role::Api, |c| c.http.events_heartbeat_ms = 50).await;
    let id = app.submit_delete("quiet").await.id;
    for path in [list_path(""), op_path(&id)] {
        let mut stream = EventStream::opened(&app, &path, None).await;
        let mut heartbeats = 0;
        while heartbeats < 3 {
            match stream.frame(WITHIN).await {
                Some(Frame::Comment(text)) => {
                    assert_eq!(text, "heartbeat");
                    heartbeats += 1;
                }
                Some(Frame::Message(_)) => {}
                None => panic!("{path}: the stream ended"),
            }
        }
    }
}

async fn streams_keep_tenant_walls(backend: Backend) {
    const ADMIN: &str = "admin-secret-token";
    let app = TestApp::start_command(backend, Role::Api, |c| {
        jwt_mode(c);
        c.auth.admin_token = Some(ADMIN.to_string().into());
    })
    .await;
    let (a, b) = (app.as_caller(&tenant_token("a")), app.as_caller(&tenant_token("b")));
    let mut admin_claims = claims("ops", "p");
    admin_claims["admin"] = json!(true);
    let admin_jwt = app.as_caller(&mint(&admin_claims));
    let admin_token = app.as_caller(ADMIN);

    let mut a_stream = EventStream::opened(&a, &list_path(""), None).await;
    a_stream.position().await;
    let mut everyone = EventStream::opened(&admin_jwt, &list_path("?tenant=*"), None).await;
    everyone.position().await;
    let mut only_b = EventStream::opened(&admin_token, &list_path("?tenant=b/p"), None).await;
    only_b.position().await;

    let theirs = b.submit_delete("x").await.id;
    let mine = a.submit_delete("x").await.id;
    let first = a_stream.expect_operation().await;
    assert_eq!(first.op.operation.id, mine, "tenant a's stream shows none of b's operations");
    assert_eq!(first.op.tenant, "a/p");
    let all = [everyone.expect_operation().await, everyone.expect_operation().await];
    assert_eq!(all.map(|e| e.op.operation.id), [theirs.clone(), mine.clone()], "an admin's `*` sees every tenant");
    assert_eq!(only_b.expect_operation().await.op.operation.id, theirs);

    // One operation's stream: another tenant's id is 404, like an unknown one — admins too
    // (as GET …/operations/{id}).
    for caller in [&b, &admin_jwt] {
        let (status, body) = EventStream::open(caller, &op_path(&mine), None).await.err().expect("refused");
        assert_api_error(status, &body, 404);
    }
    // Another tenant's listing needs an admin.
    for query in ["?tenant=b/p", "?tenant=*"] {
        let (status, body) = EventStream::open(&a, &list_path(query), None).await.err().expect("refused");
        assert_api_error(status, &body, 403);
    }
    let (status, body) = EventStream::open(&app, &list_path(""), None).await.err().expect("no credentials");
    assert_api_error(status, &body, 401);
}

async fn open_streams_are_capped_per_process(backend: Backend) {
    let app = TestApp::start_command(backend, Role::Api, |c| c.http.max_event_streams = 2).await;
    let id = app.submit_delete("c").await.id;
    let first = EventStream::opened(&app, &list_path(""), None).await;
    let _second = EventStream::opened(&app, &op_path(&id), None).await;
    let response = app.request(reqwest::Method::GET, &list_path("")).send().await.unwrap();
    assert_eq!(response.headers().get("retry-after").map(|v| v.to_str().unwrap()), Some("1"));
    let (status, body) = crate::harness::read(response).await;
    assert_api_error(status, &body, 503);
    assert!(body["message"].as_str().unwrap().contains("CONTEXT_OPS_MAX_EVENT_STREAMS"), "{body}");
    let (status, body) = EventStream::open(&app, &op_path(&id), None).await.err().expect("over the cap");
    assert_api_error(status, &body, 503);
    // A client that goes away gives its place back.
    drop(first);
    poll_until("a closed stream's place freed", WITHIN, || async {
        EventStream::open(&app, &list_path(""), None).await.map(drop).map_err(|(s, b)| format!("{s} {b}"))
    })
    .await;
}

async fn shutdown_ends_open_streams(backend: Backend) {
    let app = TestApp::start_command(backend, Role::Api, |_| {}).await;
    let id = app.submit_delete("c").await.id;
    let mut list = EventStream::opened(&app, &list_path(""), None).await;
    list.position().await;
    let mut one = EventStream::opened(&app, &op_path(&id), None).await;
    one.expect_operation().await;
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(20), app.stop()).await.expect("the service stopped with streams open");
    let stopped = started.elapsed();
    println!("stop with two event streams open: {:.2}s", stopped.as_secs_f64());
    assert!(stopped < Duration::from_secs(5), "open streams held the shutdown for {stopped:?}");
    assert!(list.operation().await.is_none(), "the list stream ended");
    assert!(one.operation().await.is_none(), "the operation's stream ended");
}

async fn bad_input_is_a_400(backend: Backend) {
    let app = TestApp::start_command(backend, Role::Api, |_| {}).await;
    let id = app.submit_delete("c").await.id;
    let other_engine = match backend {
        Backend::Sqlite => context_jobs::operation::change_position::ChangePosition::Snapshot {
            seen: context_jobs::operation::change_position::PgSnapshot::parse("5:9:").unwrap(),
            batch: None,
        },
        Backend::Postgres => context_jobs::operation::change_position::ChangePosition::Seq(3),
    }
    .encode();
    // A snapshot PostgreSQL's own input function refuses (a 32-bit transaction id of 0
    // inside the 64-bit one): a 400 as well, not a stream that ends at its first read.
    let forged = URL_SAFE_NO_PAD.encode("p:4294967296:4294967296:");
    for (path, last) in [
        (op_path(&id), Some("x")),
        (list_path(""), Some(forged.as_str())),
        (op_path(&id), Some("-1")),
        (list_path(""), Some("not-a-position")),
        (list_path(""), Some(other_engine.as_str())),
        (list_path("?kind=nope"), None),
        (list_path("?state=nope"), None),
        (list_path("?since=1"), None),
        (format!("{OPS}/not-an-id/events"), None),
    ] {
        let (status, body) = EventStream::open(&app, &path, last).await.err().expect("refused");
        assert_api_error(status, &body, 400);
    }
    let unknown = ulid::Ulid::generate().to_string();
    let (status, body) = EventStream::open(&app, &op_path(&unknown), None).await.err().expect("unknown");
    assert_api_error(status, &body, 404);
}

backend_tests!(backend:
    the_terminal_event_ends_the_stream,
    idle_streams_send_heartbeats,
    streams_keep_tenant_walls,
    open_streams_are_capped_per_process,
    shutdown_ends_open_streams,
    bad_input_is_a_400,
);
