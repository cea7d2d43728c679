//! Changes committed by another process reach an API process's streams: a `worker` process
//! runs what an `api` process accepted, and the api's list and operation streams show each
//! step. On PostgreSQL the api re-reads only every 20 s, so within the seconds allowed only
//! a notification (LISTEN/NOTIFY, naming the tenant) can bring them; SQLite has no channel
//! between processes, so there the periodic re-read (100 ms by default) does.

use std::time::{Duration, Instant};

use context_jobs::contract::ContextOperationState;

use super::{EventStream, list_path, op_path};
use crate::harness::Backend;
use crate::harness::fixture::Fixture;

const HEALTHY_WITHIN: Duration = Duration::from_secs(30);

async fn a_workers_changes_reach_an_api_processes_streams(backend: Backend) {
    let fx = Fixture::new(backend, 15).await;
    fx.seed("c", 3000).await;
    let recheck: &[(&str, &str)] = match backend {
        Backend::Postgres => &[("CONTEXT_OPS_WAIT_RECHECK_MS", "20000")],
        Backend::Sqlite => &[],
    };
    let mut api = fx.env.spawn_with("api", "api", recheck);
    api.wait_healthy(HEALTHY_WITHIN).await;
    let mut list = EventStream::opened(&api.api, &list_path(""), None).await;
    list.position().await;
    let id = api.api.submit_delete("c").await.id;
    let mut one = EventStream::opened(&api.api, &op_path(&id), None).await;
    assert_eq!(one.expect_operation().await.op.operation.state, ContextOperationState::Queued);
    assert_eq!(list.expect_operation().await.op.operation.state, ContextOperationState::Queued);

    // Only now can anything run it.
    let mut worker = fx.env.spawn("worker", "worker");
    let started = Instant::now();
    let mut states = Vec::new();
    while let Some(event) = one.operation().await {
        states.push(event.op.operation.state);
    }
    let finished_after = started.elapsed();
    assert_eq!(states.last(), Some(&ContextOperationState::Succeeded), "{states:?}");
    assert!(states.contains(&ContextOperationState::Running) || states.len() == 1, "{states:?}");
    // The list stream ends on the same state, as every change after queued arrives.
    loop {
        let event = list.expect_operation().await;
        assert_eq!(event.op.operation.id, id);
        if event.op.operation.state.is_terminal() {
            assert_eq!(event.op.operation.state, ContextOperationState::Succeeded);
            break;
        }
    }
    println!("{backend:?}: worker start to the terminal event on the api: {finished_after:?}");
    // The terminal event came without waiting out the api's 20 s re-read.
    assert!(finished_after < Duration::from_secs(15), "took {finished_after:?}; api log:\n{}", api.proc.log_tail(30));
    api.proc.assert_alive();
    worker.proc.assert_alive();
}

backend_tests!(backend: a_workers_changes_reach_an_api_processes_streams);
