//! Work a full concurrency limit holds back: each held operation shows why once its own
//! delivery found the limit full, and the
//! dispatcher neither pushes it again one by one (thousands of held operations took every
//! round's places from orphans and new work, and each delivery read the scheduler's view
//! for nothing) nor forgets it — one operation per limited kind is pushed as a wake-up, at
//! most once per interval, for a slot freed where no worker went on.

use context_jobs::contract::ContextOperationKind;
use context_jobs::ids::OperationId;
use context_ops::store::operations::dispatch::{Repush, take_dispatchable};
use context_ops::store::operations::transitions::{ClaimLimits, Next, ViewCache, claim_next};
use context_ops::store::{Db, now_ms, query};

use crate::harness::{Backend, fresh_database};

backend_tests!(backend:
    a_full_limit_marks_every_operation_it_holds,
    held_work_is_woken_not_pushed_again_one_by_one,
);

const DELETE: ContextOperationKind = ContextOperationKind::Delete;

async fn database(backend: Backend, dir: &std::path::Path) -> Db {
    let db = Db::connect(&fresh_database(backend, dir).await, 4).await.unwrap();
    db.migrate().await.unwrap();
    db
}

/// A delete row: `state`, `phase`, created at `created`, pushed at `pushed`.
async fn row(db: &Db, id: &str, tenant: &str, state: &str, phase: &str, created: i64, pushed: Option<i64>) {
    query(
        "INSERT INTO operations (id, tenant, kind, state, phase, request, request_fingerprint, created_at_ms, \
         updated_at_ms, pushed_at_ms, lease_token, lease_expires_at_ms) \
         VALUES ($1, $2, 'delete', $3, $4, '{}', 'f', $5, $5, $6, $7, $8)",
    )
    .bind(id)
    .bind(tenant)
    .bind(state)
    .bind(phase)
    .bind(created)
    .bind(pushed)
    .bind((state == "running").then_some("t"))
    .bind((state == "running").then_some(created + 1))
    .execute(db)
    .await
    .unwrap();
}

async fn phases(db: &Db) -> Vec<(String, String)> {
    query("SELECT id, phase FROM operations WHERE state = 'queued' ORDER BY id").fetch_all(db).await.unwrap()
}

async fn a_full_limit_marks_every_operation_it_holds(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = database(backend, dir.path()).await;
    let now = now_ms();
    row(&db, "r1", "a/p", "running", "deleting", now, None).await;
    // The lease is live: the running one counts against the limit.
    query("UPDATE operations SET lease_expires_at_ms = $1").bind(now + 60_000).execute(&db).await.unwrap();
    for (i, (id, tenant)) in [("q1", "a/p"), ("q2", "b/p"), ("q3", "b/p")].into_iter().enumerate() {
        row(&db, id, tenant, "queued", "queued", now + i as i64, Some(now)).await;
    }
    let limits = ClaimLimits { max_running: Some(1), ..ClaimLimits::default() };
    let claim = |named: &'static str| {
        let (db, limits) = (db.clone(), limits.clone());
        async move {
            let named = OperationId::from_stored(named);
            match claim_next(&db, DELETE, "w", 15_000, &limits, &ViewCache::default(), Some(&named)).await.unwrap() {
                Next::Held(held) => {
                    let mut ids: Vec<_> = held.iter().map(|(id, _)| id.as_str().to_string()).collect();
                    ids.sort();
                    ids
                }
                Next::Nothing => Vec::new(),
                Next::Claimed(c) => panic!("claimed {} past a full limit", c.operation.id),
            }
        }
    };
    // q3's delivery: the scheduler's head (q1) and q3 say why they wait (and are announced).
    assert_eq!(claim("q3").await, ["q1", "q3"]);
    assert_eq!(phases(&db).await[1], ("q2".to_string(), "queued".to_string()), "not yet delivered");
    // q2's delivery marks q2; a delivery of what says so already changes nothing.
    assert_eq!(claim("q2").await, ["q2"]);
    assert!(claim("q3").await.is_empty());
    for (id, phase) in phases(&db).await {
        assert_eq!(phase, "waiting_for_concurrency", "{id}");
    }
}

async fn held_work_is_woken_not_pushed_again_one_by_one(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = database(backend, dir.path()).await;
    let now = now_ms();
    let long_ago = now - 3_600_000;
    // 600 held operations, pushed long ago (past the repush age), older than the rest.
    for i in 0..600 {
        row(&db, &format!("h{i:03}"), "a/p", "queued", "waiting_for_concurrency", long_ago + i, Some(long_ago)).await;
    }
    // An orphan (its claim cleared the mark; its lease expired) and a submission whose push
    // failed (never pushed), both newer.
    row(&db, "orphan", "b/p", "running", "deleting", now - 60_000, None).await;
    row(&db, "fresh", "b/p", "queued", "queued", now - 1_000, None).await;
    let limited = Repush { after_ms: 60_000, limited: vec![DELETE], wake_every_ms: 60_000 };
    let taken: Vec<String> =
        take_dispatchable(&db, &limited, 500).await.unwrap().into_iter().map(|d| d.id.as_str().to_string()).collect();
    assert_eq!(taken.len(), 3, "the orphan, the fresh one and one wake-up: {:?}…", &taken[..taken.len().min(5)]);
    assert!(taken.contains(&"orphan".to_string()) && taken.contains(&"fresh".to_string()), "{taken:?}");
    assert_eq!(taken.iter().filter(|id| id.starts_with('h')).count(), 1, "{taken:?}");
    // Within the wake-up interval: nothing more.
    assert!(take_dispatchable(&db, &limited, 500).await.unwrap().is_empty());
    // Past it, one more wake-up of the kind, no more.
    // (A negative interval: the wake-up just sent counts as long ago, whatever the clock.)
    let soon = Repush { wake_every_ms: -1_000, ..limited.clone() };
    let again = take_dispatchable(&db, &soon, 500).await.unwrap();
    assert_eq!(again.len(), 1, "one wake-up per kind");

    // Where the kind has no limit (configured), stale work is pushed again by age as before —
    // after what was never pushed.
    query("UPDATE operations SET pushed_at_ms = NULL WHERE id = 'fresh'").execute(&db).await.unwrap();
    let unlimited = Repush { after_ms: 60_000, ..Repush::default() };
    let taken = take_dispatchable(&db, &unlimited, 10).await.unwrap();
    assert_eq!(taken.len(), 10);
    assert!(taken.iter().any(|d| d.id.as_str() == "fresh"), "never pushed goes first");
}
