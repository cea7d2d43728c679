//! PostgreSQL writes two import batches at once (`kinds::import::pipeline`): the next
//! batch's transaction starts once the one before holds its conversations' locks, and
//! commits only on top of that one's commit. Here the earlier batch fails while the later
//! one has written its rows and waits: the later one must roll back, the checkpoint stays
//! at the last committed batch, and the retry imports everything in artifact order.

use std::time::Duration;

use context_jobs::contract::ContextOperationState;
use context_ops::store::Db;
use serde_json::json;

use super::{IMPORTS, artifact_bytes, page_all, upload};
use crate::harness::db::{DEFAULT_TENANT, message_count, operation_row};
use crate::harness::wait::poll_until;
use crate::harness::{Backend, OperationExt as _, TestApp, message};

/// The app's backends as `(pid, state, query)`, but `except`.
async fn sessions(probe: &sqlx::PgPool, except: i32) -> Vec<(i32, String, String)> {
    sqlx::query_as(
        "SELECT pid, state, query FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> $1",
    )
    .bind(except)
    .fetch_all(probe)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_batch_takes_the_overlapping_one_down() {
    // Only batch 1 is written while the artifact validates (`kinds::import::validating`);
    // batches 2 and 3 are the overlapping pair.
    let app = TestApp::start_with(Backend::Postgres, |c| {
        c.worker.batch_size = 10;
        c.artifacts.import_validating_batches = 1;
    })
    .await;
    let Db::Postgres(pool) = app.db().clone() else { unreachable!("a PostgreSQL app") };
    // `b` has a message already, so the import appends after it.
    app.append_records(&[message("b", "b-pre", "user", "before")]).await;
    // Batches of 10: a, b, c — one conversation each.
    let uploaded = upload(&app, &artifact_bytes(&["a", "b", "c"], 10), 1 << 16).await;

    // Another session inserts b's first id and keeps its transaction open: batch 2 locks
    // b's conversation row, then its COPY waits on that id.
    let mut holder = pool.acquire().await.unwrap().detach();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query(
        "INSERT INTO messages (tenant, conversation_id, id, sequence, role, scope, content, search_text, created_at_ms) \
         VALUES ($1, 'b', 'b-000', 1000, 'user', '{}', '\"x\"', 'x', 1)",
    )
    .bind(DEFAULT_TENANT)
    .execute(&mut holder)
    .await
    .unwrap();
    let holder_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut holder).await.unwrap();

    let id = app.submit(IMPORTS, &json!({"artifactRef": uploaded, "idempotencyKey": "k"})).await.id;
    // Batch 2 waits on the holder; batch 3 has copied c's rows and advanced c, and waits
    // (idle in its transaction) for batch 2 to commit.
    let blocked = poll_until("batch 2 blocked and batch 3 written", Duration::from_secs(20), || async {
        let all = sessions(&pool, holder_pid).await;
        let blocked: Vec<i32> =
            sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))")
                .bind(holder_pid)
                .fetch_all(&pool)
                .await
                .unwrap();
        let waiting =
            all.iter().filter(|(_, state, q)| state == "idle in transaction" && q.starts_with("UPDATE conversations"));
        match (&blocked[..], waiting.count()) {
            ([pid], 1) => Ok(*pid),
            _ => Err(format!("blocked {blocked:?}; sessions {all:?}")),
        }
    })
    .await;
    let row = operation_row(app.db(), &id).await;
    assert_eq!((row.state.as_str(), row.processed), ("running", 10), "batch 1 committed: {row:?}");

    // Batch 2 fails (its backend is terminated): batch 3 must not commit.
    let done: bool =
        sqlx::query_scalar("SELECT pg_terminate_backend($1)").bind(blocked).fetch_one(&pool).await.unwrap();
    assert!(done);
    let retrying = poll_until("the import re-queued", Duration::from_secs(20), || async {
        let row = operation_row(app.db(), &id).await;
        if row.error_code.is_some() { Ok(row) } else { Err(format!("{row:?}")) }
    })
    .await;
    assert_eq!(retrying.error_code.as_deref(), Some("transient"), "{retrying:?}");
    assert_eq!(retrying.processed, 10, "the checkpoint stays at batch 1: {retrying:?}");
    for (conversation, count) in [("a", 10), ("b", 1), ("c", 0)] {
        assert_eq!(message_count(app.db(), DEFAULT_TENANT, conversation).await, count, "{conversation}");
    }

    // The holder gives up its row; the retry resumes after batch 1 and keeps the order.
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    let op = app.wait_terminal(&id).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(op.result_json()["messages"], json!({"inserted": 30, "skipped": 0}), "{op:?}");
    for (conversation, first) in [("a", 1), ("b", 2), ("c", 1)] {
        let items = page_all(&app, conversation).await;
        let items = &items[items.len() - 10..];
        for (i, m) in items.iter().enumerate() {
            assert_eq!(m["id"], format!("{conversation}-{i:03}"), "{conversation}: {items:?}");
            assert_eq!(m["sequence"], first + i as i64, "{conversation}: {items:?}");
        }
    }
    app.stop().await;
}
