//! Reading an export: chunked download across stored chunks (offsets, limits, eof, bad
//! ids), the whole-artifact cap, listing newest first, deletion, and expiry with pruning.

use crate::harness::db::with_pool;
use serde_json::json;

use super::{ARTIFACTS, CHUNK, GET, download, export, small_config};
use crate::harness::{OperationExt as _, TestApp, assert_api_error, message};

async fn chunked_download_and_artifact_lifecycle(app: TestApp) {
    let records: Vec<_> =
        (0..300).map(|i| message("big", &format!("m{i:04}"), "user", &"x".repeat(100 + i % 50))).collect();
    app.append_records(&records).await;
    let op = export(&app).await;
    let artifact = op.artifact_ref.clone().unwrap();
    let size = op.result_json()["sizeBytes"].as_u64().unwrap();
    assert!(size > 3 * 4096, "several stored chunks: {size}");

    // Too big to return whole (the test caps it at 8 KiB): 413 naming the chunk path.
    let (status, body) = app.post(GET, &json!({"artifactId": artifact})).await;
    assert_api_error(status, &body, 413);
    assert!(body["message"].as_str().unwrap().contains("/export-artifacts/chunk"), "{body}");

    // Pieces that straddle stored chunks reassemble to the digest.
    let bytes = download(&app, &artifact, 3000).await;
    assert_eq!(bytes.len() as u64, size);
    // Default limit (1 MiB) returns it all at once; an oversized limit is capped, not refused.
    let (_, all) = app.post(CHUNK, &json!({"artifactId": artifact})).await;
    assert_eq!((all["eof"].as_bool(), all["nextOffset"].as_u64()), (Some(true), Some(size)));
    let (_, capped) = app.post(CHUNK, &json!({"artifactId": artifact, "limit": 1u64 << 40})).await;
    assert_eq!(capped["nextOffset"], size);
    // At the end: empty and eof. Past the end, limit 0, bad ids: 400.
    let (status, end) = app.post(CHUNK, &json!({"artifactId": artifact, "offset": size})).await;
    assert_eq!((status, end["dataBase64"].as_str(), end["eof"].as_bool()), (200, Some(""), Some(true)));
    let (status, body) = app.post(CHUNK, &json!({"artifactId": artifact, "offset": size + 1})).await;
    assert_api_error(status, &body, 400);
    let (status, body) = app.post(CHUNK, &json!({"artifactId": artifact, "limit": 0})).await;
    assert_api_error(status, &body, 400);
    let (status, body) = app.post(CHUNK, &json!({"artifactId": artifact, "offset": -1})).await;
    assert_api_error(status, &body, 400);
    let (status, body) = app.post(CHUNK, &json!({"artifactId": "nope"})).await;
    assert_api_error(status, &body, 400);
    let unknown = ulid::Ulid::generate().to_string();
    let (status, body) = app.post(CHUNK, &json!({"artifactId": unknown})).await;
    assert_api_error(status, &body, 404);

    // Listed (newest first, paged) with metadata, then deleted.
    let second = export(&app).await;
    let (status, list) = app.get(&format!("{ARTIFACTS}?limit=1")).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["items"][0]["id"].as_str(), second.artifact_ref.as_deref());
    let cursor = list["nextCursor"].as_str().unwrap();
    let (_, rest) = app.get(&format!("{ARTIFACTS}?limit=1&cursor={cursor}")).await;
    assert_eq!(rest["items"][0]["id"], artifact.as_str());
    assert_eq!(rest["items"][0]["origin"], "export");
    assert_eq!(rest["items"][0]["state"], "ready");
    assert_eq!(rest["items"][0]["messages"], 300);
    assert_eq!(rest["items"][0]["operationId"], op.id.as_str());
    assert!(rest.get("nextCursor").is_none());
    let (status, body) = app.get(&format!("{ARTIFACTS}?cursor=garbage")).await;
    assert_api_error(status, &body, 400);
    let response = app.client.delete(app.url(&format!("{ARTIFACTS}/{artifact}"))).send().await.unwrap();
    assert_eq!(response.status(), 204);
    let (status, body) = app.get(&format!("{ARTIFACTS}/{artifact}")).await;
    assert_api_error(status, &body, 404);
    let (status, body) = app.post(CHUNK, &json!({"artifactId": artifact})).await;
    assert_api_error(status, &body, 404);
    let response = app.client.delete(app.url(&format!("{ARTIFACTS}/{artifact}"))).send().await.unwrap();
    assert_eq!(response.status(), 404);

    // An expired artifact is gone at once, and the pruner deletes its rows.
    let id = second.artifact_ref.as_deref().unwrap();
    with_pool!(app.db(), pool => {
        sqlx::query("UPDATE artifacts SET expires_at_ms = 1 WHERE id = $1").bind(id).execute(pool).await.unwrap();
    });
    let (status, body) = app.get(&format!("{ARTIFACTS}/{id}")).await;
    assert_api_error(status, &body, 404);
    assert_eq!(context_ops::store::artifacts::prune_expired(app.db(), context_ops::store::now_ms()).await.unwrap(), 1);
    app.stop().await;
}

backend_tests!(start = small_config; chunked_download_and_artifact_lifecycle);
