//! Deliveries: duplicates of a delivery run the operation once (and are counted), and
//! operations that must not loop — an undecodable request, a crash loop — end (a crash loop
//! whose cancel was requested ends cancelled).

use crate::harness::db::with_pool;
use context_jobs::contract::{ContextOperationKind, ContextOperationState};
use context_jobs::ids::OperationId;
use context_ops::config::Role;
use context_ops::store::now_ms;

use super::{engine_service, metric, seed, wait_metric_at_least};
use crate::harness::db::{DEFAULT_TENANT, message_count, operation_row};
use crate::harness::{Backend, OperationExt as _, TestApp, message};

const DUPLICATES: &str = "context_ops_duplicate_deliveries_total";

async fn duplicate_deliveries_run_once(backend: Backend) {
    let (fx, service) = engine_service(backend, &[("CONTEXT_OPS_BATCH_SIZE", "5")]).await;
    let api = &service.api;
    // A handle on the service's queue, as another process has one.
    let queue = fx.queue().await;
    seed(api, "dup", 30).await;
    let labels = [("kind", "delete")];
    let duplicates_before = metric(api, DUPLICATES, &labels).await;
    let id = api.submit_delete("dup").await.id;
    for _ in 0..5 {
        queue.push(ContextOperationKind::Delete, &OperationId::from_stored(id.clone())).await.unwrap();
    }
    let done = api.wait_terminal(&id).await;
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    assert_eq!(done.result_json()["deletedMessages"], 30, "{done:?}");
    assert_eq!(done.processed, 30, "{done:?}");
    assert_eq!(operation_row(&fx.db, &id).await.attempt, 1, "claimed once");
    assert_eq!(message_count(&fx.db, DEFAULT_TENANT, "dup").await, 0);
    // Six deliveries, one claim: the other five are counted as duplicates.
    wait_metric_at_least(api, DUPLICATES, &labels, duplicates_before + 5.0).await;
}

async fn undecodable_and_crash_looping_operations_end(backend: Backend) {
    // Queued by an API-only app, altered in the database, then run by a serving app.
    let api = TestApp::start_command(backend, Role::Api, |_| {}).await;
    seed(&api, "corrupt", 5).await;
    seed(&api, "looping", 5).await;
    let corrupt = api.submit_delete("corrupt").await.id;
    let looping = api.submit_delete("looping").await.id;
    seed(&api, "cancelled", 5).await;
    let cancelled = api.submit_delete("cancelled").await.id;
    let max_attempts = i64::from(api.running().state.config.worker.max_attempts);
    with_pool!(api.db(), pool => {
        sqlx::query("UPDATE operations SET request = '{\"kind\":\"delete\"}' WHERE id = $1")
            .bind(corrupt.as_str())
            .execute(pool)
            .await
            .unwrap();
        // What a worker that died on every attempt leaves: running, the budget spent, the
        // lease expired; the second one with a cancel requested while its worker was dead.
        for (id, cancel) in [(&looping, 0), (&cancelled, 1)] {
            sqlx::query(
                "UPDATE operations SET state = 'running', phase = 'deleting', attempt = $2, lease_token = 'died', \
                 lease_expires_at_ms = $3, pushed_at_ms = NULL, started_at_ms = $3, cancel_requested = $4 \
                 WHERE id = $1",
            )
            .bind(id.as_str())
            .bind(max_attempts)
            .bind(now_ms() - 1)
            .bind(cancel)
            .execute(pool)
            .await
            .unwrap();
        }
    });

    let serve = TestApp::start_on(&api, Role::Serve, |_| {}).await;
    let done = serve.wait_terminal(&corrupt).await;
    assert_eq!(done.state, ContextOperationState::Failed, "{done:?}");
    assert_eq!(done.error_code.as_deref(), Some("corrupt_operation"), "{done:?}");
    assert!(done.error.as_deref().is_some_and(|e| e.contains("does not decode")), "{done:?}");
    assert_eq!(operation_row(serve.db(), &corrupt).await.attempt, 1, "never retried");

    let done = serve.wait_terminal(&looping).await;
    assert_eq!(done.state, ContextOperationState::Failed, "{done:?}");
    assert_eq!(done.error_code.as_deref(), Some("retries_exhausted"), "{done:?}");
    assert_eq!(operation_row(serve.db(), &looping).await.attempt, max_attempts + 1);
    assert_eq!(message_count(serve.db(), DEFAULT_TENANT, "corrupt").await, 5);
    assert_eq!(message_count(serve.db(), DEFAULT_TENANT, "looping").await, 5, "the job did not run again");
    // Its cancel is what ends the one that was asked to stop.
    let done = serve.wait_terminal(&cancelled).await;
    assert_eq!((done.state, done.error_code.as_deref()), (ContextOperationState::Cancelled, None), "{done:?}");
    assert_eq!(message_count(serve.db(), DEFAULT_TENANT, "cancelled").await, 5, "the job did not run again");
    // All released their conversation.
    let after = ["corrupt", "looping", "cancelled"].map(|c| message(c, "after", "user", "x"));
    serve.append_records(&after).await;
}

backend_tests!(backend: duplicate_deliveries_run_once, undecodable_and_crash_looping_operations_end);
