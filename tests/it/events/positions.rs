//! A list stream whose filter matches nothing moves its position on anyway: a read that
//! finds nothing after its position moves it to the present, when nothing matching changed
//! meanwhile. A stream filtered to a state that no change reached kept its old position for
//! as long as it was open, and every read walked every change of the tenant since then.

use context_jobs::contract::{ContextOperationKind, ContextOperationState};
use context_jobs::ids::TenantKey;
use context_ops::store::operations::changes::{self, ChangeFilter};
use context_ops::store::{Db, query};

use crate::harness::{Backend, fresh_database};

backend_tests!(backend: an_empty_read_moves_the_position_to_the_present);

async fn insert(db: &Db, id: &str, state: &str) {
    query(
        "INSERT INTO operations (id, tenant, kind, state, phase, request, request_fingerprint, created_at_ms, updated_at_ms) \
         VALUES ($1, 't/p', 'delete', $2, $2, '{}', 'f', 1, 1)",
    )
    .bind(id)
    .bind(state)
    .execute(db)
    .await
    .unwrap();
}

async fn an_empty_read_moves_the_position_to_the_present(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&fresh_database(backend, dir.path()).await, 4).await.unwrap();
    db.migrate().await.unwrap();
    let failed = ChangeFilter {
        tenant: Some(TenantKey::from_stored("t/p")),
        kind: Some(ContextOperationKind::Delete),
        state: Some(ContextOperationState::Failed),
    };
    let start = changes::head(&db).await.unwrap();
    for i in 0..5 {
        insert(&db, &format!("ok{i}"), "succeeded").await;
    }
    // Nothing failed: the position moves past the five changes, and says it is caught up.
    let page = changes::after(&db, &failed, &start, 10).await.unwrap();
    assert!(page.changes.is_empty() && page.caught_up);
    assert_ne!(page.next, start, "the position moved to the present");
    let unfiltered = ChangeFilter { state: None, ..failed.clone() };
    assert!(changes::after(&db, &unfiltered, &page.next, 10).await.unwrap().changes.is_empty(), "past all five");
    // A matching change after it is read from there; nothing is skipped.
    insert(&db, "bad", "failed").await;
    let page = changes::after(&db, &failed, &page.next, 10).await.unwrap();
    let ids: Vec<&str> = page.changes.iter().map(|c| c.row.id.as_str()).collect();
    assert_eq!(ids, ["bad"]);
}
