//! Pipelined runs (export, import, rebuild) take every pool connection they hold at once
//! before they start (`worker::pipelines`): many at a time on a small pool wait for their
//! turn instead of each taking part of the pool and waiting on the others until its acquire
//! timeout fails one of them (an attempt spent for nothing).

use context_jobs::contract::ContextOperationState;
use serde_json::json;

use super::{EXPORTS, IMPORTS};
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
    for id in &ids {
        let op = app.wait_terminal(id).await;
        assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
        let row = operation_row(app.db(), id).await;
        assert_eq!(row.attempt, 1, "{id} took {} attempts (last error {:?})", row.attempt, row.error);
    }
    app.stop().await;
}
