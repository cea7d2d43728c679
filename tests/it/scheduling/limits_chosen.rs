//! A claim under concurrency limits counts what runs in its own statement: two workers that
//! chose different heads off two views (each read before the other's claim) must not both
//! start one past a limit of one. The scheduler's view is read before the claim, so a limit
//! checked off the view alone let both through.

use context_jobs::contract::ContextOperationKind;
use context_jobs::ids::OperationId;
use context_ops::store::operations::transitions::{ClaimLimits, claim_chosen};
use context_ops::store::{Db, query};

use crate::harness::{Backend, fresh_database};

backend_tests!(backend: a_claim_counts_what_runs_under_its_limits);

const DELETE: ContextOperationKind = ContextOperationKind::Delete;

async fn claim(db: &Db, id: &str, limits: &ClaimLimits) -> bool {
    let id = OperationId::from_stored(id);
    claim_chosen(db, DELETE, &id, "worker-1", 15_000, limits).await.unwrap().is_some()
}

async fn a_claim_counts_what_runs_under_its_limits(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&fresh_database(backend, dir.path()).await, 4).await.unwrap();
    db.migrate().await.unwrap();
    for (i, (id, tenant)) in [("a1", "a/p"), ("a2", "a/p"), ("b1", "b/p"), ("c1", "c/p")].into_iter().enumerate() {
        query(
            "INSERT INTO operations (id, tenant, kind, state, phase, request, request_fingerprint, created_at_ms, updated_at_ms) \
             VALUES ($1, $2, 'delete', 'queued', 'queued', '{}', 'f', $3, $3)",
        )
        .bind(id)
        .bind(tenant)
        .bind(i as i64 + 1)
        .execute(&db)
        .await
        .unwrap();
    }
    let global = ClaimLimits { max_running: Some(2), ..ClaimLimits::default() };
    let per_tenant = ClaimLimits { max_running_per_tenant: Some(1), ..ClaimLimits::default() };
    // Tenant a runs one: a second of a's is over the per-tenant limit, b's is not.
    assert!(claim(&db, "a1", &per_tenant).await);
    assert!(!claim(&db, "a2", &per_tenant).await, "a second of tenant a's past a per-tenant limit of one");
    assert!(claim(&db, "b1", &per_tenant).await);
    // Two run: a third is over the kind's limit of two, whichever tenant it is.
    assert!(!claim(&db, "c1", &global).await, "a third past a limit of two");
    assert!(!claim(&db, "a2", &global).await);
    // Under no limit it starts; a claim does not take what is running already.
    assert!(claim(&db, "c1", &ClaimLimits::default()).await);
    assert!(!claim(&db, "a1", &ClaimLimits::default()).await, "a1 runs already");
    let running: i64 =
        query("SELECT COUNT(*) FROM operations WHERE state = 'running'").fetch_scalar(&db).await.unwrap();
    assert_eq!(running, 3);
}
