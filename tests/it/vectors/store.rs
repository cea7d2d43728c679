//! Writing vectors, against both real databases: a vector lands only for an entry still
//! active at the embedded version, batches larger than one statement's chunk keep every
//! row and a distinct `written_seq`, an identical re-embedding rewrites nothing, a
//! re-embedding under another model replaces the vectors in place (one per entry), and the
//! projection watermark follows walks in change order.

use crate::harness::db::with_pool;
use context_jobs::contract::{ContextInsight, ContextInsightStatus};
use context_jobs::embed::hashing_embed;
use context_jobs::ids::TenantKey;
use context_ops::store::Db;
use context_ops::store::vectors::{ToEmbed, coverage, walk_page, watermark};
use context_ops::store::vectors::{VectorBatch, encode_all, writes};
use serde_json::json;

use crate::harness::insights::{import, insight};
use crate::harness::{Backend, fresh_database};

const ACTIVE: usize = 1_201;

fn entry(id: String, status: ContextInsightStatus) -> ContextInsight {
    ContextInsight { version: 2, status, ..insight(id, json!("some content")) }
}

fn to_embed(id: &str, version: i64) -> ToEmbed {
    ToEmbed { id: id.into(), version, content: "\"some content\"".into() }
}

/// Store `batch`'s vectors (each embeds its id) in one transaction, moving the watermark
/// to `covered` when given.
async fn write_covering(db: &Db, tenant: &TenantKey, model: &str, batch: &[ToEmbed], covered: Option<i64>) -> u64 {
    let (dim, blobs) = encode_all(&batch.iter().map(|e| hashing_embed(&e.id, 32)).collect::<Vec<_>>());
    let vectors = VectorBatch { covered_through: covered, ..VectorBatch::new(tenant, model, dim, batch, &blobs) };
    let mut tx = db.begin_write().await.unwrap();
    let n = writes::write(&mut tx, &vectors).await.unwrap().vectors;
    tx.commit().await.unwrap();
    n
}

async fn write(db: &Db, tenant: &TenantKey, model: &str, batch: &[ToEmbed]) -> u64 {
    write_covering(db, tenant, model, batch, None).await
}

/// One number from SQL with the tenant as `$1`.
async fn scalar(db: &Db, sql: &str, tenant: &TenantKey) -> i64 {
    with_pool!(db, pool => sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).bind(tenant.as_str()).fetch_one(pool).await.unwrap())
}

async fn vectors_are_written_only_for_current_versions(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&fresh_database(backend, dir.path()).await, 4).await.unwrap();
    db.migrate().await.unwrap();
    let tenant = TenantKey::new("t", "p");
    let mut items: Vec<ContextInsight> =
        (0..ACTIVE).map(|i| entry(format!("a-{i:05}"), ContextInsightStatus::Active)).collect();
    items.push(entry("gone".into(), ContextInsightStatus::Expired));
    import(&db, tenant.as_str(), &items).await;
    assert_eq!(coverage(&db, &tenant).await.unwrap(), (ACTIVE as i64, 0));
    let source = ACTIVE as u64 + 1;
    let mark = watermark(&db, &tenant).await.unwrap();
    assert_eq!((mark.projected_version, mark.source_version, mark.lag), (0, source, source));

    // A walk in change order: a full page covers up to its last entry; the short page at
    // the end covers up to the head, past the trailing inactive entry it never returns.
    let first = walk_page(&db, &tenant, 0, 1000).await.unwrap();
    assert_eq!((first.items.len(), first.last, first.covered_through), (1000, false, 1000));
    let rest = walk_page(&db, &tenant, first.next_after, 1000).await.unwrap();
    assert_eq!((rest.items.len(), rest.last, rest.covered_through), (ACTIVE - 1000, true, source as i64));
    assert!(rest.items.iter().all(|e| e.id != "gone"));
    let empty = walk_page(&db, &tenant, rest.next_after, 1000).await.unwrap();
    assert_eq!((empty.items.len(), empty.last, empty.covered_through), (0, true, source as i64));

    // More than one statement's worth on either engine, plus an entry that is not active;
    // the watermark moves with the vectors, in the same transaction.
    let mut batch: Vec<ToEmbed> = items.iter().map(|e| to_embed(&e.id, 2)).collect();
    assert_eq!(write_covering(&db, &tenant, "m1", &batch[..1000], Some(1000)).await, 1000);
    assert_eq!(watermark(&db, &tenant).await.unwrap().lag, source - 1000);
    assert_eq!(write_covering(&db, &tenant, "m1", &batch[1000..], Some(source as i64)).await, ACTIVE as u64 - 1000);
    assert_eq!(coverage(&db, &tenant).await.unwrap(), (ACTIVE as i64, ACTIVE as i64));
    assert_eq!(watermark(&db, &tenant).await.unwrap().lag, 0);
    // An older walk finishing late never moves the watermark back.
    assert_eq!(write_covering(&db, &tenant, "m1", &[], Some(5)).await, 0);
    assert_eq!(watermark(&db, &tenant).await.unwrap().projected_version, source);
    let seqs = scalar(&db, "SELECT COUNT(DISTINCT written_seq) FROM context_entry_vectors WHERE tenant = $1", &tenant);
    assert_eq!(seqs.await, ACTIVE as i64, "each vector write has its own sequence number");
    let max_seq = "SELECT MAX(written_seq) FROM context_entry_vectors WHERE tenant = $1";
    let before = scalar(&db, max_seq, &tenant).await;
    assert_eq!(write(&db, &tenant, "m1", &batch).await, 0, "identical vectors are not rewritten");
    assert_eq!(scalar(&db, max_seq, &tenant).await, before, "nothing for the recall index to re-read");

    // An entry changes (a correction bumps its version and takes the next change
    // sequence) while its old text is embedded.
    let next_seq = source as i64 + 1;
    with_pool!(&db, pool => {
        sqlx::query("UPDATE context_entries SET version = 3, change_seq = $2 WHERE tenant = $1 AND id = 'a-00001'")
            .bind(tenant.as_str())
            .bind(next_seq)
            .execute(pool)
            .await
            .unwrap();
        sqlx::query("UPDATE context_entry_heads SET source_version = $2 WHERE tenant = $1")
            .bind(tenant.as_str())
            .bind(next_seq)
            .execute(pool)
            .await
            .unwrap();
    });
    assert_eq!(watermark(&db, &tenant).await.unwrap().lag, 1, "the changed entry is above the watermark");
    assert_eq!(write(&db, &tenant, "m1", &[to_embed("a-00001", 2)]).await, 0, "the old version's vector is refused");
    assert_eq!(coverage(&db, &tenant).await.unwrap(), (ACTIVE as i64, ACTIVE as i64 - 1));
    let stale = walk_page(&db, &tenant, source as i64, 1000).await.unwrap();
    assert_eq!(stale.items.iter().map(|e| (e.id.as_str(), e.version)).collect::<Vec<_>>(), [("a-00001", 3)]);
    assert_eq!(write_covering(&db, &tenant, "m1", &stale.items, Some(stale.covered_through)).await, 1);
    assert_eq!(write(&db, &tenant, "m1", &[to_embed("a-00001", 2)]).await, 0, "never back to an older version");
    let v = "SELECT version FROM context_entry_vectors WHERE tenant = $1 AND entry_id = 'a-00001'";
    assert_eq!(scalar(&db, v, &tenant).await, 3);
    assert_eq!(coverage(&db, &tenant).await.unwrap(), (ACTIVE as i64, ACTIVE as i64));
    assert_eq!(watermark(&db, &tenant).await.unwrap().lag, 0);

    // Re-embedding everything under another model (a forced rebuild): in place, one each.
    batch[1].version = 3;
    assert_eq!(write(&db, &tenant, "m2", &batch).await, ACTIVE as u64);
    assert_eq!(coverage(&db, &tenant).await.unwrap(), (ACTIVE as i64, ACTIVE as i64));
    let m2 = "SELECT COUNT(*) FROM context_entry_vectors WHERE tenant = $1 AND model = 'm2'";
    assert_eq!(scalar(&db, m2, &tenant).await, ACTIVE as i64);
    let all = "SELECT COUNT(*) FROM context_entry_vectors WHERE tenant = $1";
    assert_eq!(scalar(&db, all, &tenant).await, ACTIVE as i64);
    // Another tenant's entries of the same ids are untouched.
    let other = TenantKey::new("t", "other");
    assert_eq!(write(&db, &other, "m1", &[to_embed("a-00002", 2)]).await, 0, "no such entry in that tenant");
}

backend_tests!(backend: vectors_are_written_only_for_current_versions);
