//! Writing vectors, against both real databases: a vector lands only for an entry still
//! active at the embedded version, batches larger than one statement's chunk keep every
//! row and a distinct `written_seq`, and a re-embedding under another model replaces the
//! vectors in place (one per entry).

mod common;

use common::{Backend, fresh_database};
use context_jobs::contract::{ContextInsight, ContextInsightKind, ContextInsightStatus, ContextProvenance};
use context_jobs::embed::hashing_embed;
use context_ops::auth::TenantKey;
use context_ops::db::{BeginWrite as _, Db};
use context_ops::store::vectors::{ToEmbed, coverage};
use context_ops::worker::projector::write_batch;
use context_ops::{import_entries, with_pool};
use serde_json::json;

const ACTIVE: usize = 1_201;

fn entry(id: String, status: ContextInsightStatus) -> ContextInsight {
    ContextInsight {
        id,
        kind: ContextInsightKind::Fact,
        content: json!("some content"),
        attributes: json!({}),
        version: 2,
        status,
        provenance: ContextProvenance {
            conversation_id: "conv".into(),
            message_ids: vec![],
            extractor_ref: None,
            observed_at_ms: 0,
        },
        superseded_by: None,
        expires_at_ms: None,
        created_at_ms: 1,
        updated_at_ms: 1,
    }
}

fn to_embed(tenant: &TenantKey, id: &str, version: i64) -> ToEmbed {
    ToEmbed { tenant: tenant.as_str().to_string(), id: id.into(), version, content: "\"some content\"".into() }
}

async fn write(db: &Db, model: &str, batch: &[ToEmbed]) -> u64 {
    let vectors = batch.iter().map(|e| hashing_embed(&e.id, 32)).collect();
    write_batch(db, model, batch, vectors).await.unwrap()
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
    with_pool!(&db, pool => {
        let mut tx = pool.begin_write().await.unwrap();
        import_entries!(&mut *tx, tenant.as_str(), &items).unwrap();
        tx.commit().await.unwrap();
    });
    assert_eq!(coverage(&db, &tenant).await.unwrap(), (ACTIVE as i64, 0));

    // More than one statement's worth on either engine, plus an entry that is not active.
    let mut batch: Vec<ToEmbed> = items.iter().map(|e| to_embed(&tenant, &e.id, 2)).collect();
    assert_eq!(write(&db, "m1", &batch).await, ACTIVE as u64, "every active entry, not the expired one");
    assert_eq!(coverage(&db, &tenant).await.unwrap(), (ACTIVE as i64, ACTIVE as i64));
    let seqs = scalar(&db, "SELECT COUNT(DISTINCT written_seq) FROM context_entry_vectors WHERE tenant = $1", &tenant);
    assert_eq!(seqs.await, ACTIVE as i64, "each vector write has its own sequence number");
    let stale =
        "SELECT COUNT(*) FROM context_entries WHERE tenant = $1 AND status = 'active' AND projected_version <> version";
    assert_eq!(scalar(&db, stale, &tenant).await, 0);

    // An entry changes (a correction bumps its version) while its old text is embedded.
    with_pool!(&db, pool => {
        sqlx::query("UPDATE context_entries SET version = 3 WHERE tenant = $1 AND id = 'a-00001'")
            .bind(tenant.as_str())
            .execute(pool)
            .await
            .unwrap();
    });
    assert_eq!(write(&db, "m1", &[to_embed(&tenant, "a-00001", 2)]).await, 0, "the old version's vector is refused");
    assert_eq!(scalar(&db, stale, &tenant).await, 1, "the changed entry stays stale");
    assert_eq!(write(&db, "m1", &[to_embed(&tenant, "a-00001", 3)]).await, 1);
    assert_eq!(write(&db, "m1", &[to_embed(&tenant, "a-00001", 2)]).await, 0, "never back to an older version");
    let v = "SELECT version FROM context_entry_vectors WHERE tenant = $1 AND entry_id = 'a-00001'";
    assert_eq!(scalar(&db, v, &tenant).await, 3);
    assert_eq!(scalar(&db, stale, &tenant).await, 0);

    // Re-embedding everything under another model (a forced rebuild): in place, one each.
    batch[1].version = 3;
    assert_eq!(write(&db, "m2", &batch).await, ACTIVE as u64);
    assert_eq!(coverage(&db, &tenant).await.unwrap(), (ACTIVE as i64, ACTIVE as i64));
    let m2 = "SELECT COUNT(*) FROM context_entry_vectors WHERE tenant = $1 AND model = 'm2'";
    assert_eq!(scalar(&db, m2, &tenant).await, ACTIVE as i64);
    let all = "SELECT COUNT(*) FROM context_entry_vectors WHERE tenant = $1";
    assert_eq!(scalar(&db, all, &tenant).await, ACTIVE as i64);
    // Another tenant's entries of the same ids are untouched.
    let other = TenantKey::new("t", "other");
    assert_eq!(write(&db, "m1", &[to_embed(&other, "a-00002", 2)]).await, 0, "no such entry in that tenant");
}

#[tokio::test]
async fn vectors_are_written_only_for_current_versions_sqlite() {
    vectors_are_written_only_for_current_versions(Backend::Sqlite).await;
}

#[tokio::test]
async fn vectors_are_written_only_for_current_versions_postgres() {
    vectors_are_written_only_for_current_versions(Backend::Postgres).await;
}
