//! Export, delete, import, export again: the records survive byte for byte, the whole
//! artifact reads as the contract's DTO, and re-importing is a no-op that reports skips.

use context_jobs::artifact::{ArtifactDigest, Header, header_line};
use context_jobs::contract::{ContextOperationKind, ContextOperationState};
use serde_json::{Value, json};

use super::{EXPORTS, GET, download, export, import, page_all, seed, small_config, split_header};
use crate::harness::{OperationExt as _, TestApp};

async fn delete_conversation(app: &TestApp, conversation: &str) {
    let id = app.submit_delete(conversation).await.id;
    assert_eq!(app.wait_terminal(&id).await.state, ContextOperationState::Succeeded);
}

async fn export_delete_import_export_round_trip(app: TestApp) {
    seed(&app).await;
    let first = export(&app).await;
    assert_eq!(first.result_json()["messages"], 44);
    assert_eq!(first.result_json()["entries"], 2, "the expired entry is left out by default");
    assert_eq!(first.kind, ContextOperationKind::Export);
    assert_eq!(first.processed, 46);
    let artifact = first.artifact_ref.clone().unwrap();
    let bytes = download(&app, &artifact, 1000).await;
    assert_eq!(first.result_json()["sizeBytes"], bytes.len());
    assert_eq!(first.result_json()["digest"], ArtifactDigest::of(&bytes));
    let (header, _) = split_header(&bytes);
    assert_eq!(header, header_line(&Header::new("default/default", first.created_at_ms)));

    // The whole artifact as the contract's DTO: the records exactly as the API shows them.
    let (status, whole) = app.post(GET, &json!({"artifactId": artifact})).await;
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["id"], artifact);
    assert_eq!(whole["schemaVersion"], 1);
    assert_eq!(whole["createdAtMs"], first.created_at_ms);
    let originals: Vec<Value> = [page_all(&app, "c-a").await, page_all(&app, "c-b").await].concat();
    assert_eq!(whole["messages"].as_array().unwrap(), &originals);
    let entry_ids: Vec<&str> = whole["entries"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(entry_ids, ["e-1", "e-2"]);

    // includeExpired puts the expired entry in too.
    let id = app.submit(EXPORTS, &json!({"includeExpired": true})).await.id;
    assert_eq!(app.wait_terminal(&id).await.result_json()["entries"], 3);

    // Delete every message, import the artifact: the same records come back.
    delete_conversation(&app, "c-a").await;
    delete_conversation(&app, "c-b").await;
    assert!(page_all(&app, "c-a").await.is_empty());
    let done = import(&app, json!({"artifactRef": artifact, "idempotencyKey": "restore-1"})).await;
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    assert_eq!(done.phase, "done");
    assert_eq!(done.result_json()["messages"], json!({"inserted": 44, "skipped": 0}));
    assert_eq!(done.result_json()["entries"], json!({"inserted": 0, "skipped": 2}), "entries were never deleted");
    let restored: Vec<Value> = [page_all(&app, "c-a").await, page_all(&app, "c-b").await].concat();
    assert_eq!(restored, originals, "ids, sequences, content and timestamps survive the round trip");

    // Exporting again gives the same records, byte for byte after the header.
    let second = export(&app).await;
    let again = download(&app, second.artifact_ref.as_deref().unwrap(), 1 << 20).await;
    assert_eq!(split_header(&again).1, split_header(&bytes).1);

    // Re-importing is a no-op that reports skips.
    let replay = import(&app, json!({"artifactRef": artifact, "idempotencyKey": "restore-2"})).await;
    assert_eq!(replay.result_json()["messages"], json!({"inserted": 0, "skipped": 44}), "{replay:?}");
    assert_eq!(page_all(&app, "c-b").await.len(), 40);
    app.stop().await;
}

backend_tests!(start = small_config; export_delete_import_export_round_trip);

/// An export's `total` is the expected record count (messages and entries) from its first
/// checkpoint on, and never below `processed`: progress reads less than 100 % until the end.
async fn export_progress_starts_at_the_expected_total(app: TestApp) {
    seed(&app).await;
    for batch in 0..6 {
        let records: Vec<_> = (0..500)
            .map(|i| crate::harness::message("bulk", &format!("b-{batch}-{i:03}"), "user", "some text to export"))
            .collect();
        app.append_records(&records).await;
    }
    let expected = 44 + 3000 + 2;
    let mut op = app.submit(EXPORTS, &json!({})).await;
    let mut exporting = Vec::new();
    while !op.state.is_terminal() {
        if op.phase == context_jobs::kinds::export::PHASE_EXPORTING {
            exporting.push((op.processed, op.total));
        }
        let version = op.version;
        op =
            app.wait_until(&op.id, std::time::Duration::from_secs(60), "a new version", |o| o.version != version).await;
    }
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!((op.processed, op.total), (expected, expected), "{op:?}");
    assert!(!exporting.is_empty(), "no snapshot in the exporting phase was seen: {op:?}");
    for (processed, total) in &exporting {
        assert_eq!(*total, expected, "every exporting snapshot: {exporting:?}");
        assert!(processed < total || *processed == expected, "{exporting:?}");
    }
    chunks_are_compressed_on_postgres(&app, op.artifact_ref.as_deref().unwrap()).await;
}

/// PostgreSQL stores the chunks lz4-compressed (migration 12); SQLite as they are.
async fn chunks_are_compressed_on_postgres(app: &TestApp, artifact: &str) {
    let context_ops::store::Db::Postgres(pool) = app.db() else { return };
    let methods: Vec<(Option<String>, i64, i32)> = sqlx::query_as(
        "SELECT pg_column_compression(data), length, pg_column_size(data) FROM artifact_chunks WHERE artifact_id = $1",
    )
    .bind(artifact)
    .fetch_all(pool)
    .await
    .unwrap();
    let full: Vec<_> = methods.iter().filter(|(_, length, _)| *length == 4096).collect();
    assert!(full.len() > 10, "{methods:?}");
    for (method, length, stored) in full {
        assert_eq!(method.as_deref(), Some("lz4"), "{methods:?}");
        assert!((*stored as i64) < length / 2, "{methods:?}");
    }
}

backend_tests!(start = small_config; export_progress_starts_at_the_expected_total);
