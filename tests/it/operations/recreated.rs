//! A retention planned for a conversation that is then deleted and written again does not
//! touch the new one: sequences start at 1 again in a new conversation, and the plan's
//! `upToSequence` (made for the old one) deleted its new messages.

use context_jobs::contract::RetentionPolicy;
use context_jobs::ids::TenantKey;
use context_ops::store::messages::{append, deletes};
use context_ops::store::{Db, query};

use crate::harness::{Backend, fresh_database, message};

backend_tests!(backend: a_plan_for_a_deleted_conversation_spares_its_successor);

async fn a_plan_for_a_deleted_conversation_spares_its_successor(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&fresh_database(backend, dir.path()).await, 4).await.unwrap();
    db.migrate().await.unwrap();
    let tenant = TenantKey::new("t", "p");
    let batch = |prefix: &str, n: usize| {
        (0..n).map(|i| message("c", &format!("{prefix}{i:03}"), "user", "x")).collect::<Vec<_>>()
    };
    append(&db, &tenant, &batch("old", 100)).await.unwrap();
    // Keep the newest 10: everything up to sequence 90 goes.
    let policy = RetentionPolicy { max_messages: Some(10), ..RetentionPolicy::default() };
    let planned = deletes::plan_retention(&db, &tenant, "c", &policy).await.unwrap();
    assert_eq!((planned.plan.up_to_sequence, planned.doomed), (Some(90), 90));
    let created = planned.created_at_ms.expect("the conversation's row");

    // The conversation is deleted (as a finished delete leaves it), then written again.
    query("DELETE FROM messages WHERE tenant = 't/p'").execute(&db).await.unwrap();
    query("DELETE FROM conversations WHERE tenant = 't/p'").execute(&db).await.unwrap();
    while context_ops::store::now_ms() <= created {
        tokio::task::yield_now().await;
    }
    append(&db, &tenant, &batch("new", 50)).await.unwrap();

    let mut tx = db.begin_write().await.unwrap();
    let done = deletes::retention_batch(&mut tx, &tenant, "c", &planned.plan, Some(created), 0, 1000).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!((done.deleted, done.upper), (0, None), "the new conversation's messages are not the plan's");
    let left: i64 = query("SELECT COUNT(*) FROM messages WHERE tenant = 't/p'").fetch_scalar(&db).await.unwrap();
    assert_eq!(left, 50);

    // The conversation it was planned for: the plan applies.
    let planned = deletes::plan_retention(&db, &tenant, "c", &policy).await.unwrap();
    let mut tx = db.begin_write().await.unwrap();
    let done =
        deletes::retention_batch(&mut tx, &tenant, "c", &planned.plan, planned.created_at_ms, 0, 1000).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(done.deleted, 40);
}

/// PostgreSQL, READ COMMITTED: another deleter commits deletions inside a retention batch's
/// range between the batch's choice and its delete. The batch deletes fewer than it chose,
/// but it was a full batch: more may follow (taken for the last, the operation succeeded
/// with the rest of its plan unapplied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_another_deleter_thinned_is_still_full() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&fresh_database(Backend::Postgres, dir.path()).await, 4).await.unwrap();
    db.migrate().await.unwrap();
    let tenant = TenantKey::new("t", "p");
    let batch: Vec<_> = (0..100).map(|i| message("c", &format!("m{i:03}"), "user", "x")).collect();
    append(&db, &tenant, &batch).await.unwrap();
    let policy = RetentionPolicy { max_messages: Some(10), ..RetentionPolicy::default() };
    let planned = deletes::plan_retention(&db, &tenant, "c", &policy).await.unwrap();
    let mut other = db.begin_write().await.unwrap();
    query("DELETE FROM messages WHERE tenant = 't/p' AND sequence IN (3, 4)").execute(&mut other).await.unwrap();
    let retention = tokio::spawn({
        let (db, tenant, plan, created) = (db.clone(), tenant.clone(), planned.plan, planned.created_at_ms);
        async move {
            let mut tx = db.begin_write().await.unwrap();
            let done = deletes::retention_batch(&mut tx, &tenant, "c", &plan, created, 0, 10).await.unwrap();
            tx.commit().await.unwrap();
            done
        }
    });
    // The batch's delete waits for the other's rows.
    crate::harness::db::until_a_lock_is_awaited(&db).await;
    other.commit().await.unwrap();
    let done = retention.await.unwrap();
    assert_eq!((done.deleted, done.upper, done.full), (8, Some(10), true));
}
