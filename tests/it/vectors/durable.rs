//! Writes that take a tenant's entry or vector sequence commit durably on PostgreSQL, even
//! inside a batch transaction relaxed to commit before its WAL flush: an asynchronous
//! commit is visible before it is durable, so another process's recall index could take
//! its sequence as a mark that a server crash then hands out again (`Tx::durable_commit`).

use context_jobs::embed::hashing_embed;
use context_jobs::ids::TenantKey;
use context_ops::store::entries;
use context_ops::store::vectors::{ToEmbed, VectorBatch, encode_all, writes};
use context_ops::store::{Db, Tx};
use serde_json::json;

use crate::harness::insights::insight;
use crate::harness::{Backend, fresh_database};

async fn synchronous_commit(tx: &mut Tx) -> String {
    let Tx::Postgres(tx) = tx else { unreachable!("PostgreSQL only") };
    sqlx::query_scalar("SHOW synchronous_commit").fetch_one(&mut **tx).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_takers_commit_durably_in_relaxed_batches() {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_database(Backend::Postgres, dir.path()).await;
    // A database whose default does not wait for the flush: the service's sessions still do.
    let db = Db::connect(&url, 1).await.unwrap();
    let Db::Postgres(pool) = &db else { unreachable!("PostgreSQL only") };
    let name: String = sqlx::query_scalar("SELECT current_database()").fetch_one(pool).await.unwrap();
    let alter = format!("ALTER DATABASE \"{name}\" SET synchronous_commit = off");
    sqlx::query(sqlx::AssertSqlSafe(alter)).execute(pool).await.unwrap();
    drop(db);
    let db = Db::connect(&url, 4).await.unwrap();
    db.migrate().await.unwrap();
    let tenant = TenantKey::new("t", "p");
    let mut tx = db.begin_write().await.unwrap();
    assert_eq!(synchronous_commit(&mut tx).await, "on", "the session's own setting");
    tx.rollback().await.unwrap();

    // A relaxed batch that writes no entries stays relaxed (the control).
    let mut tx = db.begin_write().await.unwrap();
    tx.relax_commit().await.unwrap();
    assert_eq!(synchronous_commit(&mut tx).await, "off");
    entries::rows::import(&mut tx, &tenant, &[]).await.unwrap();
    assert_eq!(synchronous_commit(&mut tx).await, "off");
    tx.rollback().await.unwrap();

    // Entries imported (change sequences taken): durable.
    let mut tx = db.begin_write().await.unwrap();
    tx.relax_commit().await.unwrap();
    let imported = entries::rows::import(&mut tx, &tenant, &[insight("e1", json!("tea"))]).await.unwrap();
    assert_eq!(imported, (1, 0));
    assert_eq!(synchronous_commit(&mut tx).await, "on");
    tx.commit().await.unwrap();

    // Vectors written (vector sequences taken): durable.
    let batch = [ToEmbed { id: "e1".into(), version: 1, content: "\"tea\"".into() }];
    let (dim, blobs) = encode_all(&[hashing_embed("e1", 32)]);
    let mut tx = db.begin_write().await.unwrap();
    tx.relax_commit().await.unwrap();
    let written = writes::write(&mut tx, &VectorBatch::new(&tenant, "m", dim, &batch, &blobs)).await.unwrap();
    assert_eq!(written.vectors, 1);
    assert_eq!(synchronous_commit(&mut tx).await, "on");
    tx.commit().await.unwrap();
}
