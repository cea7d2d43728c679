//! A write transaction spends few PostgreSQL subtransactions (`store::PgTx`): an append or
//! import batch into many existing conversations tries each conversation's insert under a
//! savepoint only while the transaction's budget lasts, and checks ids past it. A backend
//! caches 64 subtransaction ids; one more overflows its snapshot entry, and every snapshot
//! in the cluster then reads `pg_subtrans` while the transaction stays open. A batch's
//! conversations that never had a message go in together (one `COPY`, one advance) and
//! come out numbered as one by one.

use context_jobs::contract::ConversationRecord;
use context_jobs::ids::TenantKey;
use context_ops::store::messages::{StoredMessages, append_in};
use context_ops::store::{Db, Tx, query};

use crate::harness::db::{DEFAULT_TENANT, conversation_count, message_count, seed_conversation};
use crate::harness::{Backend, fresh_database, message};

/// What a backend caches before its snapshot entry overflows (`PGPROC_MAX_CACHED_SUBXIDS`).
const CACHED_SUBTRANSACTIONS: i64 = 64;

/// Transaction ids this transaction holds: its own and one per subtransaction that wrote
/// (each keeps the lock on its id until the top-level transaction ends).
async fn transaction_ids_held(tx: &mut Tx) -> i64 {
    let Tx::Postgres(conn) = tx else { unreachable!("a PostgreSQL transaction") };
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND pid = pg_backend_pid() AND granted",
    )
    .fetch_one(&mut **conn)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_batch_into_many_existing_conversations_stays_within_the_cached_subtransactions() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&fresh_database(Backend::Postgres, dir.path()).await, 2).await.unwrap();
    db.migrate().await.unwrap();
    let conversations: Vec<String> = (0..100).map(|i| format!("c{i:03}")).collect();
    for c in &conversations {
        seed_conversation(&db, DEFAULT_TENANT, c, 2).await;
    }
    // One new message in each; the second half also repeats an id they hold (`m1`), which
    // sends those conversations to the checked path whichever way they are tried.
    let mut records: Vec<ConversationRecord> = conversations.iter().map(|c| message(c, "new", "user", "hi")).collect();
    records.extend(conversations[50..].iter().map(|c| message(c, "m1", "user", "again")));
    let stored: StoredMessages = records.iter().collect();
    let tenant = TenantKey::default_tenant();

    let mut tx = db.begin_write().await.unwrap();
    let first = append_in(&mut tx, &tenant, &stored).await.unwrap();
    // A second batch in the same transaction (as an import's first transaction writes
    // many) finds the budget spent already.
    let newer: Vec<ConversationRecord> = conversations.iter().map(|c| message(c, "newer", "user", "hi")).collect();
    let again: StoredMessages = newer.iter().collect();
    let second = append_in(&mut tx, &tenant, &again).await.unwrap();
    // New conversations beside existing ones: the new go in together (one `COPY`, one
    // advance), each numbered from 1; the existing one past the budget as above.
    let mut mixed: Vec<ConversationRecord> =
        (0..3).flat_map(|c| (0..40).map(move |i| message(&format!("n{c}"), &format!("x{i}"), "user", "new"))).collect();
    mixed.push(message("c000", "newest", "user", "hi"));
    mixed.push(message("n1", "x5", "user", "a repeat within the batch"));
    let third = append_in(&mut tx, &tenant, &mixed.iter().collect()).await.unwrap();
    assert_eq!((third.appended, third.skipped), (121, 1));
    let held = transaction_ids_held(&mut tx).await;
    assert!(
        held <= CACHED_SUBTRANSACTIONS,
        "{held} transaction ids held: the backend's subtransaction cache overflowed"
    );
    // Both ways (savepoint, or ids checked) store the same.
    assert_eq!((first.appended, first.skipped), (100, 50));
    assert_eq!((second.appended, second.skipped), (100, 0));
    tx.commit().await.unwrap();
    assert_eq!(message_count(&db, DEFAULT_TENANT, "c000").await, 5);
    for c in &conversations[1..] {
        assert_eq!(message_count(&db, DEFAULT_TENANT, c).await, 4, "{c}");
    }
    for c in ["n0", "n1", "n2"] {
        assert_eq!(message_count(&db, DEFAULT_TENANT, c).await, 40, "{c}");
        assert_eq!(conversation_count(&db, DEFAULT_TENANT, c).await, Some(40), "{c}");
        let sequences: Vec<i64> = query("SELECT sequence FROM messages WHERE conversation_id = $1 ORDER BY sequence")
            .bind(c)
            .fetch_all::<(i64,)>(&db)
            .await
            .unwrap()
            .into_iter()
            .map(|(s,)| s)
            .collect();
        assert_eq!(sequences, (1..=40).collect::<Vec<_>>(), "{c}");
    }
    // Each new conversation was advanced past its rows: the next message is the 41st.
    context_ops::store::messages::append(&db, &tenant, &[message("n2", "later", "user", "hi")]).await.unwrap();
    let (later,): (i64,) = query("SELECT sequence FROM messages WHERE conversation_id = 'n2' AND id = 'later'")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(later, 41);
}
