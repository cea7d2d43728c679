//! A cancel requested while an operation runs, after its job's last boundary, and then
//! the lease holder puts the operation back in the queue — a retry after a transient
//! failure, a release at shutdown or for a pause, a rate limit's deferral: the operation
//! ends `cancelled`, with its delete barrier released. (Written `queued` with the request
//! set, it was never claimed again: it stayed queued, and its conversation refused appends,
//! until someone cancelled it a second time.)

use context_jobs::contract::ContextOperationKind;
use context_jobs::ids::{OperationId, TenantKey};
use context_jobs::operation::schedule::phase::{PAUSED, WAITING_FOR_RATE_LIMIT};
use context_jobs::operation::{ErrorCode, Transition};
use context_ops::store::operations::transitions::{ClaimLimits, Claimed, Next, ViewCache, apply, cancel, claim_next};
use context_ops::store::{Db, now_ms, query};

use crate::harness::{Backend, fresh_database};

backend_tests!(backend:
    a_cancel_requested_before_a_return_to_the_queue_ends_the_operation_cancelled,
    migration_16_ends_operations_stranded_before_the_fix,
);

const TENANT: &str = "acme/prod";

async fn a_cancel_requested_before_a_return_to_the_queue_ends_the_operation_cancelled(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&fresh_database(backend, dir.path()).await, 4).await.unwrap();
    db.migrate().await.unwrap();
    let tenant = TenantKey::from_stored(TENANT);
    let later = now_ms() + 60_000;
    let returns = [
        Transition::Retry { not_before_ms: later, code: ErrorCode::Internal, message: "the database went away" },
        Transition::Release { phase: None },
        Transition::Release { phase: Some(PAUSED) },
        Transition::Defer { not_before_ms: later, phase: WAITING_FOR_RATE_LIMIT },
    ];
    for (i, back) in returns.iter().enumerate() {
        let claimed = running_delete(&db, &format!("op{i}"), &format!("c{i}")).await;
        let id = claimed.operation.id.clone();
        assert!(!cancel(&db, &tenant, &id).await.unwrap(), "a running operation is flagged, not cancelled");
        let signals = apply(&db, &claimed.lease, back).await.unwrap();
        assert!(signals.cancel_requested, "{back:?}: the write says it cancelled instead");
        let (state, phase, finished, lease): (String, String, Option<i64>, Option<String>) =
            query("SELECT state, phase, finished_at_ms, lease_token FROM operations WHERE id = $1")
                .bind(id.as_str())
                .fetch_one(&db)
                .await
                .unwrap();
        assert_eq!((state.as_str(), phase.as_str()), ("cancelled", "cancelled"), "{back:?}");
        assert!(finished.is_some() && lease.is_none(), "{back:?}: {finished:?} {lease:?}");
        assert_eq!(barrier(&db, &format!("c{i}")).await, None, "{back:?}: the barrier is released");
        let outcome: String = query(match backend {
            Backend::Postgres => "SELECT attempts::jsonb -> -1 ->> 'outcome' FROM operations WHERE id = $1",
            Backend::Sqlite => "SELECT json_extract(attempts, '$[#-1].outcome') FROM operations WHERE id = $1",
        })
        .bind(id.as_str())
        .fetch_scalar(&db)
        .await
        .unwrap();
        assert_eq!(outcome, "cancelled", "{back:?}: the attempt's history says how it ended");
    }

    // Without a request, the same return puts the operation back in the queue, barrier held.
    let claimed = running_delete(&db, "op9", "c9").await;
    let signals = apply(&db, &claimed.lease, &returns[0]).await.unwrap();
    assert!(!signals.cancel_requested);
    let state: String = query("SELECT state FROM operations WHERE id = 'op9'").fetch_scalar(&db).await.unwrap();
    assert_eq!(state, "queued");
    assert_eq!(barrier(&db, "c9").await.as_deref(), Some("op9"));
    // Cancelled from the queue now, it keeps no earlier attempt's error (its attempts do).
    let error = || async {
        let row: (Option<String>, Option<String>) =
            query("SELECT error, error_code FROM operations WHERE id = 'op9'").fetch_one(&db).await.unwrap();
        row
    };
    assert_eq!(error().await, (Some("the database went away".into()), Some("internal".into())));
    assert!(cancel(&db, &tenant, &claimed.operation.id).await.unwrap(), "a queued operation is cancelled at once");
    assert_eq!(error().await, (None, None));

    // And a lease holder that lost its lease still writes nothing, cancel requested or not.
    let claimed = running_delete(&db, "op10", "c10").await;
    cancel(&db, &tenant, &claimed.operation.id).await.unwrap();
    let stale = context_ops::store::operations::transitions::Lease { token: "stale".into(), ..claimed.lease.clone() };
    assert!(apply(&db, &stale, &returns[0]).await.is_err(), "a stale lease wrote");
    let state: String = query("SELECT state FROM operations WHERE id = 'op10'").fetch_scalar(&db).await.unwrap();
    assert_eq!(state, "running");
}

/// PostgreSQL, READ COMMITTED: the lease holder puts a running operation back in the queue
/// (a retry's write, not yet committed) while a cancel arrives. The cancel waits for the
/// row, then sees it queued — and cancels it. (As two statements, "cancel if queued" saw it
/// running and "flag if running" then saw it queued: neither matched, the API answered as
/// if nothing were to do, and the operation ran again.) SQLite's one writer cannot
/// interleave them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_racing_a_return_to_the_queue_is_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&fresh_database(Backend::Postgres, dir.path()).await, 4).await.unwrap();
    db.migrate().await.unwrap();
    let tenant = TenantKey::from_stored(TENANT);
    let claimed = running_delete(&db, "raced", "cr").await;
    let id = claimed.operation.id.clone();
    let mut retry = db.begin_write().await.unwrap();
    let back = Transition::Retry { not_before_ms: now_ms() + 60_000, code: ErrorCode::Transient, message: "gone" };
    let signals = apply(&mut retry, &claimed.lease, &back).await.unwrap();
    assert!(!signals.cancel_requested, "no cancel yet when the retry was written");
    let cancelling = tokio::spawn({
        let (db, tenant, id) = (db.clone(), tenant.clone(), id.clone());
        async move { cancel(&db, &tenant, &id).await.unwrap() }
    });
    // The cancel is waiting for the retry's row lock.
    crate::harness::db::until_a_lock_is_awaited(&db).await;
    retry.commit().await.unwrap();
    assert!(cancelling.await.unwrap(), "the cancel found the operation queued and cancelled it");
    let (state, cancel_requested): (String, i64) =
        query("SELECT state, cancel_requested FROM operations WHERE id = $1")
            .bind(id.as_str())
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!((state.as_str(), cancel_requested), ("cancelled", 1));
    assert_eq!(barrier(&db, "cr").await, None, "the barrier went with it");
}

/// What the bug left behind — a queued delete with its cancel requested, holding its
/// conversation's barrier — ends `cancelled` with the barrier released when the database is
/// migrated; a queued delete without a request is left as it is.
async fn migration_16_ends_operations_stranded_before_the_fix(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&fresh_database(backend, dir.path()).await, 4).await.unwrap();
    db.migrate_until(15).await.unwrap();
    queued_delete(&db, "stranded", "cs").await;
    query("UPDATE operations SET cancel_requested = 1, phase = 'retrying' WHERE id = 'stranded'")
        .execute(&db)
        .await
        .unwrap();
    queued_delete(&db, "waiting", "cw").await;
    let before = now_ms();
    db.migrate().await.unwrap();
    let (state, phase, finished, version): (String, String, Option<i64>, i64) =
        query("SELECT state, phase, finished_at_ms, version FROM operations WHERE id = 'stranded'")
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!((state.as_str(), phase.as_str(), version), ("cancelled", "cancelled", 2));
    assert!(finished.is_some_and(|at| at >= before - 1_000 && at <= now_ms() + 1_000), "{finished:?} vs {before}");
    assert_eq!(barrier(&db, "cs").await, None);
    let (state, version): (String, i64) =
        query("SELECT state, version FROM operations WHERE id = 'waiting'").fetch_one(&db).await.unwrap();
    assert_eq!((state.as_str(), version), ("queued", 1));
    assert_eq!(barrier(&db, "cw").await.as_deref(), Some("waiting"));
}

/// A queued delete of `conversation`, holding its barrier.
async fn queued_delete(db: &Db, id: &str, conversation: &str) {
    query(
        "INSERT INTO conversations (tenant, conversation_id, created_at_ms, updated_at_ms, deleting_operation) \
         VALUES ($1, $2, 1, 1, $3)",
    )
    .bind(TENANT)
    .bind(conversation)
    .bind(id)
    .execute(db)
    .await
    .unwrap();
    query(
        "INSERT INTO operations (id, tenant, kind, state, phase, request, request_fingerprint, created_at_ms, updated_at_ms) \
         VALUES ($1, $2, 'delete', 'queued', 'queued', '{}', 'f', 1, 1)",
    )
    .bind(id)
    .bind(TENANT)
    .execute(db)
    .await
    .unwrap();
}

/// A delete of `conversation` (which it holds the barrier of), claimed: the only queued
/// operation, so the claim takes it.
async fn running_delete(db: &Db, id: &str, conversation: &str) -> Claimed {
    queued_delete(db, id, conversation).await;
    let views = ViewCache::default();
    match claim_next(db, ContextOperationKind::Delete, "worker-1", 15_000, &ClaimLimits::default(), &views, None)
        .await
        .unwrap()
    {
        Next::Claimed(claimed) if claimed.operation.id == OperationId::from_stored(id) => *claimed,
        _ => panic!("the claim did not take {id}"),
    }
}

async fn barrier(db: &Db, conversation: &str) -> Option<String> {
    query("SELECT deleting_operation FROM conversations WHERE tenant = $1 AND conversation_id = $2")
        .bind(TENANT)
        .bind(conversation)
        .fetch_scalar(db)
        .await
        .unwrap()
}
