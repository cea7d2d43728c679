//! The scheduler's view holds at most 1,000 tenants: those with due work and no pause
//! first, the least recently served first among them. It once held the first 1,000 by name,
//! due or not, so a tenant later in the alphabet was never served while those waited for a
//! scheduled start or a resume.

use context_jobs::contract::ContextOperationKind;
use context_ops::store::operations::transitions::{ClaimLimits, Next, ViewCache, claim_next};
use context_ops::store::{Db, query};

use crate::harness::{Backend, fresh_database};

backend_tests!(backend: a_tenant_past_the_first_thousand_is_served);

async fn a_tenant_past_the_first_thousand_is_served(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&fresh_database(backend, dir.path()).await, 4).await.unwrap();
    db.migrate().await.unwrap();
    // 1,200 tenants whose work starts tomorrow, named before the one with work due now.
    query(
        "WITH RECURSIVE n(i) AS (SELECT CAST(1 AS BIGINT) UNION ALL SELECT i + 1 FROM n WHERE i < 1200) \
         INSERT INTO operations (id, tenant, kind, state, phase, request, request_fingerprint, created_at_ms, \
           updated_at_ms, not_before_ms) \
         SELECT 'later' || i, 'a' || (10000 + i) || '/p', 'delete', 'queued', 'scheduled', '{}', 'f', i, i, $1 FROM n",
    )
    .bind(context_ops::store::now_ms() + 86_400_000)
    .execute(&db)
    .await
    .unwrap();
    query(
        "INSERT INTO operations (id, tenant, kind, state, phase, request, request_fingerprint, created_at_ms, updated_at_ms) \
         VALUES ('due', 'zz/p', 'delete', 'queued', 'queued', '{}', 'f', 1, 1)",
    )
    .execute(&db)
    .await
    .unwrap();
    for limits in [ClaimLimits::default(), ClaimLimits { max_running: Some(4), ..ClaimLimits::default() }] {
        let views = ViewCache::default();
        match claim_next(&db, ContextOperationKind::Delete, "worker-1", 15_000, &limits, &views, None).await.unwrap() {
            Next::Claimed(claimed) => assert_eq!(claimed.operation.id.as_str(), "due"),
            _ => panic!("the due operation of the 1,201st tenant was not claimed ({limits:?})"),
        }
        query("UPDATE operations SET state = 'queued', lease_token = NULL WHERE id = 'due'")
            .execute(&db)
            .await
            .unwrap();
    }

    // The same 1,200 tenants with their work due now, each paused: never claimed, never
    // served, they would sort first by their last claim.
    query("UPDATE operations SET not_before_ms = 0, phase = 'paused' WHERE id <> 'due'").execute(&db).await.unwrap();
    query(
        "INSERT INTO queue_controls (kind, tenant, paused, updated_at_ms) \
         SELECT DISTINCT 'delete', tenant, 1, 1 FROM operations WHERE id <> 'due'",
    )
    .execute(&db)
    .await
    .unwrap();
    let views = ViewCache::default();
    match claim_next(&db, ContextOperationKind::Delete, "worker-1", 15_000, &ClaimLimits::default(), &views, None)
        .await
        .unwrap()
    {
        Next::Claimed(claimed) => assert_eq!(claimed.operation.id.as_str(), "due"),
        _ => panic!("the due operation behind 1,200 paused tenants was not claimed"),
    }
}
