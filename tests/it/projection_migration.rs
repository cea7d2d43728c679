//! Migration 7 moves staleness from the per-entry `projected_version` column to the
//! per-tenant watermark, on both real databases: an existing deployment's watermark lands
//! just below its oldest stale entry, and a fully projected tenant's at its head.

use crate::harness::db::with_pool;
use context_jobs::ids::TenantKey;
use context_ops::store::Db;
use context_ops::store::vectors::watermark;

use crate::harness::{Backend, fresh_database};

async fn migration_keeps_the_watermark(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&fresh_database(backend, dir.path()).await, 2).await.unwrap();
    db.migrate_until(6).await.unwrap();
    // Tenant a: entries 1..=10, entry 4 and 7 not projected (and 2, stale but expired).
    // Tenant b: everything projected. Tenant c: nothing ever written but its head row.
    with_pool!(&db, pool => {
        for (tenant, seq, status, projected) in (1..=10)
            .map(|i| ("t/a", i, if i == 2 { "expired" } else { "active" }, if [2, 4, 7].contains(&i) { 0 } else { 1 }))
            .chain((1..=5).map(|i| ("t/b", i, "active", 1)))
        {
            sqlx::query(
                "INSERT INTO context_entries (tenant, id, kind, content, version, status, conversation_id, provenance, \
                 created_at_ms, updated_at_ms, change_seq, projected_version) \
                 VALUES ($1, $2, 'fact', '\"x\"', 1, $3, 'c', '{}', 0, 0, $4, $5)",
            )
            .bind(tenant)
            .bind(format!("e{seq}"))
            .bind(status)
            .bind(seq)
            .bind(projected)
            .execute(pool)
            .await
            .unwrap();
        }
        for (tenant, source) in [("t/a", 10_i64), ("t/b", 5), ("t/c", 0)] {
            sqlx::query("INSERT INTO context_entry_heads (tenant, source_version) VALUES ($1, $2)")
                .bind(tenant)
                .bind(source)
                .execute(pool)
                .await
                .unwrap();
        }
    });
    db.migrate().await.unwrap();
    let lags = |t: &'static str| {
        let db = db.clone();
        async move {
            let m = watermark(&db, &TenantKey::new("t", t)).await.unwrap();
            (m.projected_version, m.source_version, m.lag)
        }
    };
    assert_eq!(lags("a").await, (3, 10, 7), "just below the oldest stale active entry");
    assert_eq!(lags("b").await, (5, 5, 0));
    assert_eq!(lags("c").await, (0, 0, 0));
    let column: Option<i64> = with_pool!(&db, pool => {
        sqlx::query_scalar("SELECT projected_version FROM context_entries LIMIT 1").fetch_optional(pool).await.ok().flatten()
    });
    assert_eq!(column, None, "the per-entry column is gone");
    db.close().await;
}

backend_tests!(backend: migration_keeps_the_watermark);
