//! Entries for store-level tests: a plain active fact to adjust with struct update syntax,
//! and an import of entries exactly as given (the path export/import takes).

use context_jobs::contract::{ContextInsight, ContextInsightKind, ContextInsightStatus, ContextProvenance};
use context_jobs::ids::TenantKey;
use context_ops::store::{Db, entries};
use serde_json::{Value, json};

/// An active `fact` at version 1 in conversation `c`, created and updated at 1 ms.
pub fn insight(id: impl Into<String>, content: Value) -> ContextInsight {
    ContextInsight {
        id: id.into(),
        kind: ContextInsightKind::Fact,
        content,
        attributes: json!({}),
        version: 1,
        status: ContextInsightStatus::Active,
        provenance: ContextProvenance {
            conversation_id: "c".into(),
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

/// Import new `entries` into `tenant` in one write transaction (change sequences in
/// order); every one must go in.
pub async fn import(db: &Db, tenant: &str, entries: &[ContextInsight]) {
    let mut tx = db.begin_write().await.unwrap();
    let (inserted, _) = entries::rows::import(&mut tx, &TenantKey::from_stored(tenant), entries).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(inserted as usize, entries.len(), "every entry is new");
}
