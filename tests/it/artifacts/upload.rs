//! Uploads: offsets, base64 and digest are checked piece by piece and at the seal, a sealed
//! upload reads like an export, and an artifact downloaded from one deployment and uploaded
//! to a fresh one imports there to the same records — also from SQLite into PostgreSQL.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use context_jobs::artifact::ArtifactDigest;
use serde_json::json;

use super::{
    ARTIFACTS, FINALIZE, GET, IMPORTS, UPLOAD_CHUNK, UPLOADS, artifact_lines, download, export, import, join_lines,
    seed, small_config, split_header, upload,
};
use crate::harness::{Backend, OperationExt as _, TestApp, assert_api_error};

async fn uploads_check_offsets_base64_and_digest(app: TestApp) {
    let bytes = join_lines(&artifact_lines("up", 5));
    let (_, created) = app.post(UPLOADS, &json!({})).await;
    let id = created["id"].as_str().unwrap().to_string();
    let piece =
        |offset: usize, data: &[u8]| json!({"artifactId": id, "offset": offset, "dataBase64": STANDARD.encode(data)});

    // Not importable while uploading.
    let (status, body) = app.post(IMPORTS, &json!({"artifactRef": id, "idempotencyKey": "early"})).await;
    assert_api_error(status, &body, 409);

    let (status, _) = app.post(UPLOAD_CHUNK, &piece(0, &bytes[..100])).await;
    assert_eq!(status, 200);
    // A retried append of the same bytes is accepted; different bytes or a gap are not.
    let (status, info) = app.post(UPLOAD_CHUNK, &piece(0, &bytes[..100])).await;
    assert_eq!((status, info["sizeBytes"].as_u64()), (200, Some(100)));
    let (status, body) = app.post(UPLOAD_CHUNK, &piece(0, &bytes[1..101])).await;
    assert_api_error(status, &body, 409);
    let (status, body) = app.post(UPLOAD_CHUNK, &piece(150, &bytes[150..])).await;
    assert_api_error(status, &body, 409);
    assert!(body["message"].as_str().unwrap().contains("offset 100"), "{body}");
    // Bad base64, nothing, a malformed id, an unknown field: 400.
    for bad in [
        json!({"artifactId": id, "offset": 100, "dataBase64": "not base64!"}),
        json!({"artifactId": id, "offset": 100, "dataBase64": ""}),
        json!({"artifactId": "x", "offset": 100, "dataBase64": "AAAA"}),
        json!({"artifactId": id, "offset": 100, "dataBase64": "AAAA", "extra": 1}),
    ] {
        let (status, body) = app.post(UPLOAD_CHUNK, &bad).await;
        assert_api_error(status, &body, 400);
    }
    let (status, _) = app.post(UPLOAD_CHUNK, &piece(100, &bytes[100..])).await;
    assert_eq!(status, 200);

    // A wrong or malformed digest is rejected and the upload stays open.
    let wrong = ArtifactDigest::of(b"something else");
    let (status, body) = app.post(FINALIZE, &json!({"artifactId": id, "digest": wrong})).await;
    assert_api_error(status, &body, 400);
    assert!(body["message"].as_str().unwrap().contains("digest mismatch"), "{body}");
    let (status, body) = app.post(FINALIZE, &json!({"artifactId": id, "digest": "sha256:XYZ"})).await;
    assert_api_error(status, &body, 400);
    let (_, info) = app.get(&format!("{ARTIFACTS}/{id}")).await;
    assert_eq!(info["state"], "uploading");

    let digest = ArtifactDigest::of(&bytes);
    let (status, sealed) = app.post(FINALIZE, &json!({"artifactId": id, "digest": digest})).await;
    assert_eq!((status, sealed["digest"].as_str()), (200, Some(digest.as_str())), "{sealed}");
    let (status, again) = app.post(FINALIZE, &json!({"artifactId": id, "digest": digest})).await;
    assert_eq!((status, again["state"].as_str()), (200, Some("ready")), "finalising twice is a no-op");
    let (status, body) = app.post(UPLOAD_CHUNK, &piece(bytes.len(), b"more")).await;
    assert_api_error(status, &body, 409);

    // Readable like an export: whole and in chunks.
    let (status, whole) = app.post(GET, &json!({"artifactId": id})).await;
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["messages"].as_array().unwrap().len(), 5);
    assert_eq!(whole["createdAtMs"], 1_700_000_000_000i64);
    assert_eq!(download(&app, &id, 64).await, bytes);
    app.stop().await;
}

/// An artifact downloaded from one deployment, uploaded to a fresh one and imported there:
/// the new deployment exports the same records.
async fn upload_into_another_deployment(app: TestApp) {
    let other = TestApp::start(app.backend).await;
    move_between(app, other).await;
}

/// The same move from an embedded (SQLite) deployment into a PostgreSQL one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_export_imports_into_postgres() {
    let from = small_config(Backend::Sqlite).await;
    let to = small_config(Backend::Postgres).await;
    move_between(from, to).await;
}

async fn move_between(app: TestApp, other: TestApp) {
    seed(&app).await;
    let op = export(&app).await;
    let bytes = download(&app, op.artifact_ref.as_deref().unwrap(), 777).await;
    let uploaded = upload(&other, &bytes, 1000).await;
    let (status, info) = other.get(&format!("{ARTIFACTS}/{uploaded}")).await;
    assert_eq!(status, 200);
    assert_eq!((info["origin"].as_str(), info["sizeBytes"].as_u64()), (Some("upload"), Some(bytes.len() as u64)));
    let done = import(&other, json!({"artifactRef": uploaded, "idempotencyKey": "k"})).await;
    assert_eq!(done.result_json()["messages"], json!({"inserted": 44, "skipped": 0}), "{done:?}");
    assert_eq!(done.result_json()["entries"], json!({"inserted": 2, "skipped": 0}), "{done:?}");
    let (status, e1) = other.post("/internal/v1/context/entries/get", &json!({"entryId": "e-1"})).await;
    assert_eq!(status, 200);
    let (_, original) = app.post("/internal/v1/context/entries/get", &json!({"entryId": "e-1"})).await;
    assert_eq!(e1, original, "entries keep id, version, status and timestamps");
    let theirs = export(&other).await;
    let again = download(&other, theirs.artifact_ref.as_deref().unwrap(), 1 << 20).await;
    assert_eq!(split_header(&again).1, split_header(&bytes).1);
    other.stop().await;
    app.stop().await;
}

backend_tests!(start = small_config; uploads_check_offsets_base64_and_digest, upload_into_another_deployment);
