//! How a walk's writer decides what to trust, against both real databases. Every entry
//! write moves the tenant's entry head under the heads row lock that vector writes take
//! too, so a writer that finds the head where its reader saw it skips the per-entry fence
//! and, on PostgreSQL, `COPY`s; otherwise it goes through the fenced upsert. The tests change an entry behind the heads' back (raw SQL that no service path
//! runs) to see which path a write took: a trusted write stores the vector anyway, a fenced
//! one refuses it.

use crate::harness::db::with_pool;
use context_jobs::embed::hashing_embed;
use context_jobs::ids::TenantKey;
use context_ops::store::Db;
use context_ops::store::vectors::{VectorBatch, Written, encode_all, writes};
use context_ops::store::vectors::{WalkPage, coverage, walk_page};
use serde_json::json;

use crate::harness::insights::{import, insight};
use crate::harness::{Backend, fresh_database};

const N: usize = 3_000;

async fn setup(backend: Backend, dir: &std::path::Path) -> (Db, TenantKey) {
    let db = Db::connect(&fresh_database(backend, dir).await, 4).await.unwrap();
    db.migrate().await.unwrap();
    let tenant = TenantKey::new("t", "walks");
    let items: Vec<_> = (0..N).map(|i| insight(format!("e-{i:05}"), json!(format!("entry number {i}")))).collect();
    import(&db, tenant.as_str(), &items).await;
    (db, tenant)
}

/// Write a walked page as the rebuild does: with its read position, trying the bulk path.
async fn write_page(db: &Db, tenant: &TenantKey, page: &WalkPage) -> Written {
    let vectors: Vec<Vec<f32>> = page.items.iter().map(|e| hashing_embed(&e.content, 16)).collect();
    let (dim, blobs) = encode_all(&vectors);
    let batch = VectorBatch {
        covered_through: Some(page.covered_through),
        read_at: Some(page.read_at),
        bulk: true,
        ..VectorBatch::new(tenant, "m", dim, &page.items, &blobs)
    };
    let mut tx = db.begin_write().await.unwrap();
    let written = writes::write(&mut tx, &batch).await.unwrap();
    tx.commit().await.unwrap();
    written
}

/// Expire `id` without taking a change sequence (no service path does this).
async fn expire_behind_the_heads(db: &Db, tenant: &TenantKey, id: &str) {
    with_pool!(db, pool => {
        sqlx::query("UPDATE context_entries SET status = 'expired' WHERE tenant = $1 AND id = $2")
            .bind(tenant.as_str())
            .bind(id)
            .execute(pool)
            .await
            .unwrap();
    });
}

/// Take a change sequence as every entry write does.
async fn bump_source(db: &Db, tenant: &TenantKey) {
    let mut tx = db.begin_write().await.unwrap();
    context_ops::store::entries::rows::bump_source(&mut tx, tenant, 1).await.unwrap();
    tx.commit().await.unwrap();
}

async fn vector_count(db: &Db, tenant: &TenantKey) -> i64 {
    with_pool!(db, pool => {
        sqlx::query_scalar("SELECT COUNT(*) FROM context_entry_vectors WHERE tenant = $1")
            .bind(tenant.as_str())
            .fetch_one(pool)
            .await
            .unwrap()
    })
}

async fn the_writer_trusts_only_an_unchanged_entry_head(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (db, tenant) = setup(backend, dir.path()).await;
    // Read ahead: the second and third pages are read before the first is written.
    let p1 = walk_page(&db, &tenant, 0, 1000).await.unwrap();
    let p2 = walk_page(&db, &tenant, p1.next_after, 1000).await.unwrap();
    let p3 = walk_page(&db, &tenant, p2.next_after, 1000).await.unwrap();
    assert_eq!((p1.read_at, p2.read_at, p3.read_at), (N as i64, N as i64, N as i64));
    assert_eq!((p1.covered_through, p2.covered_through, p3.covered_through), (1000, 2000, 3000));

    // An unchanged head: the read is trusted and the fence skipped (an entry expired behind
    // the head's back still gets its vector) — also after other vector writes, which
    // change no entry.
    for page in [&p1, &p2] {
        expire_behind_the_heads(&db, &tenant, &page.items[0].id).await;
        let w = write_page(&db, &tenant, page).await;
        assert_eq!((w.vectors, w.bulk_conflict), (1000, false), "trusted");
    }
    // An entry write since the read (it took a change sequence): fenced.
    expire_behind_the_heads(&db, &tenant, &p3.items[0].id).await;
    bump_source(&db, &tenant).await;
    let w3 = write_page(&db, &tenant, &p3).await;
    assert_eq!((w3.vectors, w3.bulk_conflict), (999, false), "the expired entry is refused");
    assert_eq!(vector_count(&db, &tenant).await, 2999);
    db.close().await;
}

async fn entries_with_vectors_fall_back_to_the_upsert(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (db, tenant) = setup(backend, dir.path()).await;
    let page = walk_page(&db, &tenant, 0, 2000).await.unwrap();
    assert_eq!(write_page(&db, &tenant, &page).await.vectors, 2000);
    // A forced rebuild's second walk over the same entries: half of this page has vectors.
    let again = walk_page(&db, &tenant, 1000, 2000).await.unwrap();
    assert_eq!(again.items.len(), 2000);
    let w = write_page(&db, &tenant, &again).await;
    // PostgreSQL tried `COPY` and met the primary key; SQLite has no bulk path.
    assert_eq!(w.bulk_conflict, backend == Backend::Postgres);
    assert_eq!(w.vectors, 1000, "only the entries without a vector: identical vectors are not rewritten");
    let dim: i32 = with_pool!(&db, pool => {
        sqlx::query_scalar("SELECT MIN(dim) FROM context_entry_vectors WHERE tenant = $1")
            .bind(tenant.as_str())
            .fetch_one(pool)
            .await
            .unwrap()
    });
    assert_eq!(dim, 16);
    assert_eq!(coverage(&db, &tenant).await.unwrap(), (N as i64, N as i64));
    let seqs: i64 = with_pool!(&db, pool => {
        sqlx::query_scalar("SELECT COUNT(DISTINCT written_seq) FROM context_entry_vectors WHERE tenant = $1")
            .bind(tenant.as_str())
            .fetch_one(pool)
            .await
            .unwrap()
    });
    assert_eq!(seqs, N as i64);
    db.close().await;
}

backend_tests!(backend: the_writer_trusts_only_an_unchanged_entry_head, entries_with_vectors_fall_back_to_the_upsert);
