//! Resuming with `Last-Event-ID`: nothing the client had comes again, nothing it missed is
//! lost, and each operation comes as it is now (changes made while away coalesce).

use context_jobs::contract::ContextOperationState;
use context_ops::config::Role;

use super::{EventStream, list_path, op_path};
use crate::harness::{Backend, TestApp};

/// API only: operations stay queued until the test changes them.
async fn api_only(backend: Backend) -> TestApp {
    TestApp::start_command(backend, Role::Api, |_| {}).await
}

async fn list_stream_resumes_where_the_client_was(backend: Backend) {
    let app = api_only(backend).await;
    let mut first = EventStream::opened(&app, &list_path(""), None).await;
    let start = first.position().await;
    let a = app.submit_delete("a").await.id;
    let b = app.submit_delete("b").await.id;
    let c = app.submit_delete("c").await.id;
    let seen: Vec<_> = [first.expect_operation().await, first.expect_operation().await, first.expect_operation().await]
        .into_iter()
        .map(|e| (e.op.operation.id, e.op.operation.version, e.id))
        .collect();
    assert_eq!(seen.iter().map(|s| s.0.clone()).collect::<Vec<_>>(), [a.clone(), b.clone(), c.clone()], "commit order");
    assert!(seen.iter().all(|s| s.1 == 1), "{seen:?}");
    let ids: Vec<&str> = seen.iter().map(|s| s.2.as_str()).collect();
    assert!(ids[0] != start && ids[0] != ids[1] && ids[1] != ids[2], "every event moves the position: {ids:?}");
    drop(first);

    // Away after `a`: b is cancelled, d is new, c did not change.
    let (status, _) = app
        .post(&format!("{}/{b}/cancel", context_jobs::contract::CONTEXT_OPERATIONS_PATH), &serde_json::json!({}))
        .await;
    assert_eq!(status, 200);
    let d = app.submit_delete("d").await.id;
    let mut again = EventStream::opened(&app, &list_path(""), Some(&seen[0].2)).await;
    let (e1, e2, e3) = (again.expect_operation().await, again.expect_operation().await, again.expect_operation().await);
    let got: Vec<_> = [&e1, &e2, &e3].iter().map(|e| (e.op.operation.id.clone(), e.op.operation.state)).collect();
    assert_eq!(
        got,
        [
            (c.clone(), ContextOperationState::Queued),
            (b.clone(), ContextOperationState::Cancelled),
            (d.clone(), ContextOperationState::Queued)
        ],
        "after a: c (unchanged since), then b as it is now (cancelled), then d, in commit order"
    );
    assert_eq!(e2.op.operation.version, 2, "b's two changes come as one, its latest");

    // Resuming from the last event: nothing again, and the next change comes next.
    let mut third = EventStream::opened(&app, &list_path(""), Some(&e3.id)).await;
    let e = app.submit_delete("e").await.id;
    let next = third.expect_operation().await;
    assert_eq!(next.op.operation.id, e, "nothing seen twice: the first event after the last one seen is new");

    // Resuming from the very start (the first stream's position) replays everything once.
    let mut replay = EventStream::opened(&app, &list_path(""), Some(&start)).await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(replay.expect_operation().await.op.operation.id);
    }
    assert_eq!(ids, [a, c, b, d, e], "each operation once, ordered by its latest change");
}

async fn a_filtered_stream_resumes_too(backend: Backend) {
    let app = api_only(backend).await;
    let mut stream = EventStream::opened(&app, &list_path("?state=cancelled&kind=delete"), None).await;
    stream.position().await;
    let kept = app.submit_delete("kept").await.id;
    let gone = app.submit_delete("gone").await.id;
    let (status, _) = app
        .post(&format!("{}/{gone}/cancel", context_jobs::contract::CONTEXT_OPERATIONS_PATH), &serde_json::json!({}))
        .await;
    assert_eq!(status, 200);
    let event = stream.expect_operation().await;
    assert_eq!(event.op.operation.id, gone, "only changes that leave an operation cancelled");
    assert_eq!(event.op.operation.state, ContextOperationState::Cancelled);
    let (status, _) = app
        .post(&format!("{}/{kept}/cancel", context_jobs::contract::CONTEXT_OPERATIONS_PATH), &serde_json::json!({}))
        .await;
    assert_eq!(status, 200);
    let mut resumed = EventStream::opened(&app, &list_path("?state=cancelled&kind=delete"), Some(&event.id)).await;
    assert_eq!(resumed.expect_operation().await.op.operation.id, kept);
}

async fn operation_stream_resumes_after_a_version(backend: Backend) {
    let app = api_only(backend).await;
    let id = app.submit_delete("c").await.id;
    let mut stream = EventStream::opened(&app, &op_path(&id), None).await;
    let first = stream.expect_operation().await;
    assert_eq!((first.id.as_str(), first.op.operation.state), ("1", ContextOperationState::Queued));
    drop(stream);
    let (status, _) = app
        .post(&format!("{}/{id}/cancel", context_jobs::contract::CONTEXT_OPERATIONS_PATH), &serde_json::json!({}))
        .await;
    assert_eq!(status, 200);
    // Resuming after version 1: version 2 (cancelled, terminal), then the end.
    let mut resumed = EventStream::opened(&app, &op_path(&id), Some("1")).await;
    let next = resumed.expect_operation().await;
    assert_eq!((next.id.as_str(), next.op.operation.state), ("2", ContextOperationState::Cancelled));
    assert!(resumed.operation().await.is_none(), "the stream ends after the terminal event");
}

backend_tests!(backend:
    list_stream_resumes_where_the_client_was,
    a_filtered_stream_resumes_too,
    operation_stream_resumes_after_a_version,
);
