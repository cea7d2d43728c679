//! Delete and retention batches paced by time (`CONTEXT_OPS_BATCH_TARGET_MS`): with a target
//! every batch beats, each batch doubles up to 64 times the batch size, so 2,000 messages in
//! batches starting at 10 take 9 checkpointed transactions instead of 200 — counted by the
//! operation's `version`, which every write of its row moves — and remove exactly the same.
//! Unset, the target paces PostgreSQL only. (Every other test runs with fixed batches: a
//! test that sets a batch size wants that many rows per batch, to stop mid-run.)

use context_jobs::contract::{ContextOperationState, DeletionOperation};
use serde_json::json;

use super::{DELETE, RETENTION, count, seed};
use crate::harness::{Backend, OperationExt as _, TestApp};

/// Batches of 10 rows, every batch quick against a 10 s target.
async fn paced(backend: Backend) -> TestApp {
    TestApp::start_with(backend, |c| {
        c.worker.batch_size = 10;
        c.worker.batch_target_ms = Some(10_000);
    })
    .await
}

/// Writes of the operation's row besides its batches: the submission and the claim.
const OTHER_WRITES: u64 = 2;

async fn delete_batches_grow_while_quick(app: TestApp) {
    seed(&app, "big", 2000).await;
    seed(&app, "kept", 3).await;
    let op: DeletionOperation =
        app.call(DELETE, &json!({"scope": {"conversationId": "big"}, "reason": "paced"}), 202).await;
    let op = app.wait_terminal(&op.id).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(op.result_json()["deletedMessages"], 2000);
    assert_eq!((op.processed, op.total), (2000, 2000));
    // 10, 20, 40, 80, 160, 320, 640, 640, 640 (the bound: 64 × 10): 9 batches.
    assert!(op.version <= 9 + OTHER_WRITES, "batches grew: version {}", op.version);
    assert_eq!(count(&app, "big").await, 0);
    assert_eq!(count(&app, "kept").await, 3, "other conversations untouched");
}

async fn retention_batches_grow_while_quick(app: TestApp) {
    seed(&app, "old", 2000).await;
    let body = json!({"scope": {"conversationId": "old"}, "policy": {"maxMessages": 1}});
    let op: DeletionOperation = app.call(RETENTION, &body, 202).await;
    let op = app.wait_terminal(&op.id).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(op.result_json()["deletedMessages"], 1999);
    // The plan's write, 9 batches (10 … 640, 640 and a short last one), the finish.
    assert!(op.version <= 11 + OTHER_WRITES, "batches grew: version {}", op.version);
    let left: Vec<i64> = app.recent("old", 500).await.iter().map(|m| m.sequence).collect();
    assert_eq!(left, [2000]);
}

/// The same delete with fixed batches: one checkpoint per 10 rows.
async fn fixed_batches_take_one_transaction_per_batch(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.worker.batch_size = 10).await;
    seed(&app, "big", 2000).await;
    let op: DeletionOperation =
        app.call(DELETE, &json!({"scope": {"conversationId": "big"}, "reason": "fixed"}), 202).await;
    let op = app.wait_terminal(&op.id).await;
    assert_eq!(op.result_json()["deletedMessages"], 2000, "{op:?}");
    assert!(op.version >= 200, "one write per batch of 10: version {}", op.version);
}

/// Unset, the target is 50 ms on PostgreSQL and fixed batches on SQLite, where a batch
/// holds the one write lock (`JobCtx::batch_pacer`).
async fn the_default_paces_postgresql_only(backend: Backend) {
    let app = TestApp::start_with(backend, |c| {
        c.worker.batch_size = 10;
        c.worker.batch_target_ms = None;
    })
    .await;
    seed(&app, "big", 2000).await;
    let op: DeletionOperation =
        app.call(DELETE, &json!({"scope": {"conversationId": "big"}, "reason": "default"}), 202).await;
    let op = app.wait_terminal(&op.id).await;
    assert_eq!(op.result_json()["deletedMessages"], 2000, "{op:?}");
    match backend {
        // 10-row batches beat 25 ms even on a loaded machine; a stall only slows the growth.
        Backend::Postgres => assert!(op.version < 150, "batches grew: version {}", op.version),
        Backend::Sqlite => assert!(op.version >= 200, "fixed batches of 10: version {}", op.version),
    }
}

backend_tests!(start = paced; delete_batches_grow_while_quick, retention_batches_grow_while_quick);

backend_tests!(backend: fixed_batches_take_one_transaction_per_batch, the_default_paces_postgresql_only);
