//! Pipelined runs (export, import, rebuild) take every pool connection they hold at once
//! before they are claimed (`worker::pipelines`): many at a time on a small pool wait,
//! queued, for their turn instead of each taking part of the pool and waiting on the others until its acquire
//! timeout fails one of them (an attempt spent for nothing).

use context_jobs::contract::ContextOperationState;
use serde_json::json;

use super::{EXPORTS, IMPORTS};
use context_ops::store::query;

use crate::harness::db::operation_row;
use crate::harness::{Backend, TestApp, message};

#[tokio::test]
async fn exports_and_imports_at_once_on_a_small_pool_each_succeed_at_the_first_attempt() {
    let app = TestApp::start_with(Backend::Postgres, |c| {
        c.database.db_max_connections = 6;
        c.worker.worker_concurrency = 4;
        c.worker.batch_size = 200;
        c.artifacts.artifact_chunk_bytes = 16 << 10;
    })
    .await;
    for c in 0..4 {
        for part in 0..10 {
            let records: Vec<_> = (0..100)
                .map(|i| {
                    message(&format!("c{c}"), &format!("m{}", part * 100 + i), "user", &format!("line {i} of {c}"))
                })
                .collect();
            app.append_records(&records).await;
        }
    }
    let mut exports = Vec::new();
    for _ in 0..4 {
        exports.push(app.submit(EXPORTS, &json!({})).await.id);
    }
    let mut artifacts = Vec::new();
    for id in &exports {
        let op = app.wait_terminal(id).await;
        assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
        artifacts.push(op.artifact_ref.clone().expect("an artifact"));
    }
    // Four imports (renamed apart) and four more exports, all at once.
    let mut ids = exports.clone();
    for (i, artifact) in artifacts.iter().enumerate() {
        let body = json!({"artifactRef": artifact, "idempotencyKey": format!("i{i}"),
                          "conversationIdMap": {"prefix": format!("copy{i}-")}});
        ids.push(app.submit(IMPORTS, &body).await.id);
    }
    for _ in 0..4 {
        ids.push(app.submit(EXPORTS, &json!({})).await.id);
    }
    // The share of a pool of 6 is 2 connections, so one run at a time: the others wait
    // queued (cancellable, and free for another process), not claimed.
    let db = app.db().clone();
    let watching = tokio::spawn(async move {
        let mut most = 0i64;
        loop {
            let (running, queued): (i64, i64) = query(
                "SELECT COALESCE(SUM(CASE WHEN state = 'running' THEN 1 ELSE 0 END), 0), \
                 COALESCE(SUM(CASE WHEN state = 'queued' THEN 1 ELSE 0 END), 0) FROM operations",
            )
            .fetch_one(&db)
            .await
            .unwrap();
            most = most.max(running);
            if running + queued == 0 {
                return most;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    });
    for id in &ids {
        let op = app.wait_terminal(id).await;
        assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
        let row = operation_row(app.db(), id).await;
        assert_eq!(row.attempt, 1, "{id} took {} attempts (last error {:?})", row.attempt, row.error);
    }
    assert_eq!(watching.await.unwrap(), 1, "pipelined runs claimed at once on a share of one run");
    app.stop().await;
}
