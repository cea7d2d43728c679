//! The entries store interface other jobs build on, against both real databases:
//! `store::entries::rows::import` inside a caller's write transaction and `export_page` keyset pages.

use context_jobs::contract::{ContextInsight, ContextInsightKind, ContextInsightStatus, ContextProvenance};
use context_jobs::ids::TenantKey;
use context_ops::store::Db;
use context_ops::store::{entries, now_ms};
use serde_json::json;

use crate::harness::{Backend, fresh_database};

fn entry(id: &str, status: ContextInsightStatus, version: u64, expires_at_ms: Option<i64>) -> ContextInsight {
    ContextInsight {
        id: id.into(),
        kind: ContextInsightKind::Fact,
        content: json!(format!("content of {id}")),
        attributes: json!({"k": id}),
        version,
        status,
        provenance: ContextProvenance {
            conversation_id: "conv-1".into(),
            message_ids: vec!["m1".into()],
            extractor_ref: Some("x".into()),
            observed_at_ms: 5,
        },
        superseded_by: (status == ContextInsightStatus::Merged).then(|| "target".into()),
        expires_at_ms,
        created_at_ms: 1_000,
        updated_at_ms: 2_000,
    }
}

async fn db(backend: Backend, dir: &std::path::Path) -> Db {
    let url = fresh_database(backend, dir).await;
    let db = Db::connect(&url, 4).await.unwrap();
    db.migrate().await.unwrap();
    db
}

async fn import(db: &Db, tenant: &TenantKey, items: &[ContextInsight]) -> (u64, u64) {
    let mut tx = db.begin_write().await.unwrap();
    let counts = entries::rows::import(&mut tx, tenant, items).await.unwrap();
    tx.commit().await.unwrap();
    counts
}

async fn import_then_export(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = db(backend, dir.path()).await;
    let tenant = TenantKey::new("t", "p");
    let other = TenantKey::new("t", "other");
    let past = now_ms() - 1_000;
    let items = vec![
        entry("e3", ContextInsightStatus::Active, 4, None),
        entry("e1", ContextInsightStatus::Merged, 2, None),
        entry("e2", ContextInsightStatus::Expired, 3, None),
        entry("e4", ContextInsightStatus::Active, 1, Some(past)),
        entry("e1", ContextInsightStatus::Active, 9, None),
    ];
    assert_eq!(import(&db, &tenant, &items).await, (4, 1), "the repeated e1 is skipped");
    assert_eq!(import(&db, &tenant, &items[..2]).await, (0, 2), "existing ids are skipped");
    assert_eq!(import(&db, &other, &items[..1]).await, (1, 0), "tenants are separate");

    let all = entries::reads::export_page(&db, &tenant, true, &Default::default(), None, 100).await.unwrap();
    assert_eq!(all.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), ["e1", "e2", "e3", "e4"]);
    assert_eq!(all[0], items[1], "kept exactly as given");
    assert_eq!(all[2], items[0]);
    let live = entries::reads::export_page(&db, &tenant, false, &Default::default(), None, 100).await.unwrap();
    assert_eq!(live.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), ["e1", "e3"]);
    let page = entries::reads::export_page(&db, &tenant, true, &Default::default(), Some("e2"), 1).await.unwrap();
    assert_eq!(page.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), ["e3"]);

    let history = entries::reads::history(&db, &tenant, "e3").await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].0, "import");
    assert_eq!(history[0].2, items[0]);
    db.close().await;
}

backend_tests!(backend: import_then_export);
