//! Export and import over real HTTP on both backends: round trips (in place, and into
//! another deployment through an upload), chunked download and upload with their offset,
//! base64 and digest checks, corrupted artifacts of every kind, inline imports and their
//! idempotency, tenant walls, and SIGKILL of the real binary mid-export and mid-import.

#[path = "support/child.rs"]
mod child;
mod common;

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use common::{Backend, TestApp, assert_api_error, message};
use context_jobs::artifact::{ArtifactDigest, Encoder, Header, header_line};
use context_jobs::contract::{ConversationRecord, ConversationScope};
use serde_json::{Value, json};

const OPS: &str = "/internal/v1/context/operations";
const EXPORTS: &str = "/internal/v1/context/exports";
const IMPORTS: &str = "/internal/v1/context/imports";
const GET: &str = "/internal/v1/context/export-artifacts/get";
const CHUNK: &str = "/internal/v1/context/export-artifacts/chunk";
const ARTIFACTS: &str = "/internal/v1/context/export-artifacts";
const UPLOADS: &str = "/internal/v1/context/export-artifacts/uploads";
const UPLOAD_CHUNK: &str = "/internal/v1/context/export-artifacts/uploads/chunk";
const FINALIZE: &str = "/internal/v1/context/export-artifacts/uploads/finalize";
const PAGE: &str = "/internal/v1/context/messages";
const ENTRIES: &str = "/internal/v1/context/entries";
const DELETE: &str = "/internal/v1/context/conversations/delete";

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// Long-poll until the operation is terminal.
async fn wait_terminal(app: &TestApp, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut version = -1i64;
    loop {
        let path = if version < 0 {
            format!("{OPS}/{id}")
        } else {
            format!("{OPS}/{id}/wait?sinceVersion={version}&timeoutMs=5000")
        };
        let (status, op) = app.get(&path).await;
        assert_eq!(status, 200, "{op}");
        if ["succeeded", "failed", "cancelled"].contains(&op["state"].as_str().unwrap()) {
            return op;
        }
        version = op["version"].as_i64().unwrap();
        assert!(Instant::now() < deadline, "operation {id} did not finish: {op}");
    }
}

async fn submit(app: &TestApp, path: &str, body: &Value) -> String {
    let (status, op) = app.post(path, body).await;
    assert_eq!(status, 202, "{path}: {op}");
    op["id"].as_str().unwrap().to_string()
}

/// Export and wait: the succeeded operation.
async fn export(app: &TestApp) -> Value {
    let id = submit(app, EXPORTS, &json!({})).await;
    let op = wait_terminal(app, &id).await;
    assert_eq!(op["state"], "succeeded", "{op}");
    assert_eq!(op["artifactRef"], op["result"]["artifactId"], "{op}");
    op
}

async fn import(app: &TestApp, body: Value) -> Value {
    let id = submit(app, IMPORTS, &body).await;
    wait_terminal(app, &id).await
}

/// Download an artifact through the chunk endpoint, `limit` bytes at a time, checking the
/// offsets, eof and digest of every reply.
async fn download(app: &TestApp, artifact: &str, limit: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut digest = None;
    loop {
        let (status, chunk) =
            app.post(CHUNK, &json!({"artifactId": artifact, "offset": bytes.len(), "limit": limit})).await;
        assert_eq!(status, 200, "{chunk}");
        assert_eq!(chunk["offset"], bytes.len());
        let data = STANDARD.decode(chunk["dataBase64"].as_str().unwrap()).unwrap();
        assert!(data.len() <= limit);
        bytes.extend_from_slice(&data);
        assert_eq!(chunk["nextOffset"], bytes.len());
        let d = chunk["digest"].as_str().unwrap().to_string();
        assert_eq!(digest.get_or_insert(d.clone()), &d, "the digest is the same in every chunk");
        if chunk["eof"] == true {
            break;
        }
        assert!(!data.is_empty(), "a non-final chunk carries data");
    }
    assert_eq!(digest.unwrap(), ArtifactDigest::of(&bytes), "the digest is SHA-256 of the bytes");
    bytes
}

/// Upload `bytes` in pieces of `piece` and seal it with its digest; returns the artifact id.
async fn upload(app: &TestApp, bytes: &[u8], piece: usize) -> String {
    let (status, created) = app.post(UPLOADS, &json!({})).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["state"], "uploading");
    let id = created["id"].as_str().unwrap().to_string();
    for (i, part) in bytes.chunks(piece).enumerate() {
        let body = json!({"artifactId": id, "offset": i * piece, "dataBase64": STANDARD.encode(part)});
        let (status, info) = app.post(UPLOAD_CHUNK, &body).await;
        assert_eq!(status, 200, "{info}");
        assert_eq!(info["sizeBytes"], i * piece + part.len());
    }
    let (status, sealed) = app.post(FINALIZE, &json!({"artifactId": id, "digest": ArtifactDigest::of(bytes)})).await;
    assert_eq!(status, 200, "{sealed}");
    assert_eq!(sealed["state"], "ready");
    id
}

/// `(header line, the rest)` of an artifact.
fn split_header(bytes: &[u8]) -> (String, &[u8]) {
    let newline = bytes.iter().position(|&b| b == b'\n').expect("a header line");
    (String::from_utf8(bytes[..newline].to_vec()).unwrap(), &bytes[newline + 1..])
}

async fn page_all(app: &TestApp, conversation: &str) -> Vec<Value> {
    let (status, body) = app.post(PAGE, &json!({"scope": {"conversationId": conversation}, "limit": 500})).await;
    assert_eq!(status, 200, "{body}");
    body["items"].as_array().unwrap().clone()
}

fn entry(id: &str, text: &str) -> Value {
    json!({
        "id": id, "kind": "fact", "content": text, "attributes": {"source": "test"},
        "version": 0, "status": "active",
        "provenance": {"conversationId": "c-a", "messageIds": ["a-1"], "observedAtMs": 7},
        "createdAtMs": 0, "updatedAtMs": 0
    })
}

/// Two conversations with varied records, and three entries (one expired).
async fn seed(app: &TestApp) {
    let mut tool = message("c-a", "a-3", "tool", "42");
    tool["toolCallId"] = json!("call-1");
    tool["name"] = json!("calculator");
    let mut rich = message("c-a", "a-2", "assistant", "");
    rich["content"] = json!([{"type": "text", "text": "part one"}, {"type": "text", "text": "ünïcødé ✓"}]);
    rich["metadata"] = json!({"model": "m", "tokens": 12});
    rich["scope"]["agentId"] = json!("agent-1");
    let escapes = message("c-a", "a-4", "user", "tab\there\nnew line \\ back\\slash \r \\N \"quoted\"");
    app.append(vec![message("c-a", "a-1", "user", "hello"), rich, tool, escapes]).await;
    app.append((0..40).map(|i| message("c-b", &format!("b-{i:03}"), "user", &format!("line {i}"))).collect()).await;
    for (id, text) in [("e-1", "sky is blue"), ("e-2", "grass is green"), ("e-3", "old news")] {
        let (status, body) = app.post(ENTRIES, &json!({"entry": entry(id, text), "expectedVersion": 0})).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) =
        app.post("/internal/v1/context/entries/expire", &json!({"entryId": "e-3", "expectedVersion": 1})).await;
    assert_eq!(status, 200, "{body}");
}

async fn delete_conversation(app: &TestApp, conversation: &str) {
    let id = submit(app, DELETE, &json!({"scope": {"conversationId": conversation}})).await;
    assert_eq!(wait_terminal(app, &id).await["state"], "succeeded");
}

fn record(conversation: &str, id: &str, text: &str) -> ConversationRecord {
    ConversationRecord {
        id: id.into(),
        scope: ConversationScope::conversation(conversation),
        role: "user".into(),
        content: json!(text),
        name: None,
        tool_call_id: None,
        sequence: 0,
        created_at_ms: 1,
        metadata: Value::Null,
    }
}

/// A valid artifact of `n` messages in one conversation, as lines (no newlines).
fn artifact_lines(conversation: &str, n: usize) -> Vec<String> {
    let mut encoder = Encoder::new(1 << 20, &Header::new("elsewhere/p", 1_700_000_000_000));
    for i in 0..n {
        encoder.message(&record(conversation, &format!("{conversation}-{i:03}"), &format!("text {i}"))).unwrap();
    }
    encoder.finish().unwrap();
    let bytes: Vec<u8> = encoder.take_ready().into_iter().flat_map(|(_, c)| c).collect();
    String::from_utf8(bytes).unwrap().lines().map(str::to_string).collect()
}

fn join_lines(lines: &[String]) -> Vec<u8> {
    lines.iter().flat_map(|l| format!("{l}\n").into_bytes()).collect()
}

// ---------------------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------------------

async fn export_delete_import_export_round_trip(app: TestApp) {
    seed(&app).await;
    let first = export(&app).await;
    assert_eq!(first["result"]["messages"], 44);
    assert_eq!(first["result"]["entries"], 2, "the expired entry is left out by default");
    assert_eq!(first["kind"], "export");
    assert_eq!(first["processed"], 46);
    let artifact = first["artifactRef"].as_str().unwrap().to_string();
    let bytes = download(&app, &artifact, 1000).await;
    assert_eq!(first["result"]["sizeBytes"], bytes.len());
    assert_eq!(first["result"]["digest"], ArtifactDigest::of(&bytes));
    let (header, _) = split_header(&bytes);
    assert_eq!(header, header_line(&Header::new("default/default", first["createdAtMs"].as_i64().unwrap())));

    // The whole artifact as the contract's DTO: the records exactly as the API shows them.
    let (status, whole) = app.post(GET, &json!({"artifactId": artifact})).await;
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["id"], artifact);
    assert_eq!(whole["schemaVersion"], 1);
    assert_eq!(whole["createdAtMs"], first["createdAtMs"]);
    let originals: Vec<Value> = [page_all(&app, "c-a").await, page_all(&app, "c-b").await].concat();
    assert_eq!(whole["messages"].as_array().unwrap(), &originals);
    let entry_ids: Vec<&str> = whole["entries"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(entry_ids, ["e-1", "e-2"]);

    // includeExpired puts the expired entry in too.
    let id = submit(&app, EXPORTS, &json!({"includeExpired": true})).await;
    assert_eq!(wait_terminal(&app, &id).await["result"]["entries"], 3);

    // Delete every message, import the artifact: the same records come back.
    delete_conversation(&app, "c-a").await;
    delete_conversation(&app, "c-b").await;
    assert!(page_all(&app, "c-a").await.is_empty());
    let done = import(&app, json!({"artifactRef": artifact, "idempotencyKey": "restore-1"})).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["phase"], "done");
    assert_eq!(done["result"]["messages"], json!({"inserted": 44, "skipped": 0}));
    assert_eq!(done["result"]["entries"], json!({"inserted": 0, "skipped": 2}), "entries were never deleted");
    let restored: Vec<Value> = [page_all(&app, "c-a").await, page_all(&app, "c-b").await].concat();
    assert_eq!(restored, originals, "ids, sequences, content and timestamps survive the round trip");

    // Exporting again gives the same records, byte for byte after the header.
    let second = export(&app).await;
    let again = download(&app, second["artifactRef"].as_str().unwrap(), 1 << 20).await;
    assert_eq!(split_header(&again).1, split_header(&bytes).1);

    // Re-importing is a no-op that reports skips.
    let replay = import(&app, json!({"artifactRef": artifact, "idempotencyKey": "restore-2"})).await;
    assert_eq!(replay["result"]["messages"], json!({"inserted": 0, "skipped": 44}), "{replay}");
    assert_eq!(page_all(&app, "c-b").await.len(), 40);
    app.stop().await;
}

/// An artifact downloaded from one deployment, uploaded to a fresh one and imported there:
/// the new deployment exports the same records.
async fn upload_into_another_deployment(app: TestApp) {
    seed(&app).await;
    let op = export(&app).await;
    let bytes = download(&app, op["artifactRef"].as_str().unwrap(), 777).await;
    let other = TestApp::start(app.backend).await;
    let uploaded = upload(&other, &bytes, 1000).await;
    let (status, info) = other.get(&format!("{ARTIFACTS}/{uploaded}")).await;
    assert_eq!(status, 200);
    assert_eq!((info["origin"].as_str(), info["sizeBytes"].as_u64()), (Some("upload"), Some(bytes.len() as u64)));
    let done = import(&other, json!({"artifactRef": uploaded, "idempotencyKey": "k"})).await;
    assert_eq!(done["result"]["messages"], json!({"inserted": 44, "skipped": 0}), "{done}");
    assert_eq!(done["result"]["entries"], json!({"inserted": 2, "skipped": 0}), "{done}");
    let (status, e1) = other.post("/internal/v1/context/entries/get", &json!({"entryId": "e-1"})).await;
    assert_eq!(status, 200);
    let (_, original) = app.post("/internal/v1/context/entries/get", &json!({"entryId": "e-1"})).await;
    assert_eq!(e1, original, "entries keep id, version, status and timestamps");
    let theirs = export(&other).await;
    let again = download(&other, theirs["artifactRef"].as_str().unwrap(), 1 << 20).await;
    assert_eq!(split_header(&again).1, split_header(&bytes).1);
    other.stop().await;
    app.stop().await;
}

// ---------------------------------------------------------------------------------------
// Download, listing, deletion
// ---------------------------------------------------------------------------------------

async fn chunked_download_and_artifact_lifecycle(app: TestApp) {
    let records: Vec<Value> =
        (0..300).map(|i| message("big", &format!("m{i:04}"), "user", &"x".repeat(100 + i % 50))).collect();
    app.append(records).await;
    let op = export(&app).await;
    let artifact = op["artifactRef"].as_str().unwrap().to_string();
    let size = op["result"]["sizeBytes"].as_u64().unwrap();
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
    assert_eq!(list["items"][0]["id"], second["artifactRef"]);
    let cursor = list["nextCursor"].as_str().unwrap();
    let (_, rest) = app.get(&format!("{ARTIFACTS}?limit=1&cursor={cursor}")).await;
    assert_eq!(rest["items"][0]["id"], artifact.as_str());
    assert_eq!(rest["items"][0]["origin"], "export");
    assert_eq!(rest["items"][0]["state"], "ready");
    assert_eq!(rest["items"][0]["messages"], 300);
    assert_eq!(rest["items"][0]["operationId"], op["id"]);
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
    let id = second["artifactRef"].as_str().unwrap();
    with_db(&app, |db| async move {
        db.exec("UPDATE artifacts SET expires_at_ms = 1 WHERE id = $1", id).await;
    })
    .await;
    let (status, body) = app.get(&format!("{ARTIFACTS}/{id}")).await;
    assert_api_error(status, &body, 404);
    let db = app.running().state.db.clone();
    assert_eq!(context_ops::store::artifacts::prune_expired(&db, context_ops::store::now_ms()).await.unwrap(), 1);
    app.stop().await;
}

// ---------------------------------------------------------------------------------------
// Uploads
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Corrupted artifacts
// ---------------------------------------------------------------------------------------

async fn corrupted_artifacts_fail_and_write_nothing(app: TestApp) {
    // 30 records and batches of 10 (see the tweak below): every corruption sits after at
    // least one full batch, so "nothing written" proves validation runs first.
    let lines = artifact_lines("bad", 30);
    let mut cases: Vec<(&str, Vec<String>, &str, u64)> = Vec::new();
    let mut garbage = lines.clone();
    garbage[25] = "{\"type\":\"message\",\"id\":".into();
    cases.push(("a line that is not JSON", garbage, "artifact_bad_line", 26));
    let mut wizard = lines.clone();
    wizard[20] = wizard[20].replace("\"role\":\"user\"", "\"role\":\"wizard\"");
    cases.push(("an invalid record", wizard, "artifact_bad_line", 21));
    let mut unknown = lines.clone();
    unknown.insert(15, r#"{"type":"vector","id":"v"}"#.into());
    cases.push(("an unknown record type", unknown, "artifact_bad_line", 16));
    cases.push(("no trailer", lines[..31].to_vec(), "artifact_truncated", 32));
    let mut miscounted = lines.clone();
    miscounted.remove(29);
    cases.push(("a record missing", miscounted, "artifact_truncated", 31));
    let mut v9 = lines.clone();
    v9[0] = header_line(&Header { schema_version: 9, ..Header::new("t", 1) });
    cases.push(("schema version 9", v9, "artifact_unknown_schema", 1));

    for (what, case, code, line) in cases {
        let id = upload(&app, &join_lines(&case), 500).await;
        let op = import(&app, json!({"artifactRef": id, "idempotencyKey": format!("k-{what}")})).await;
        assert_eq!(op["state"], "failed", "{what}: {op}");
        assert_eq!(op["errorCode"], code, "{what}: {op}");
        assert!(op["error"].as_str().unwrap().contains(&format!("line {line}:")), "{what}: {op}");
        assert_eq!(op["processed"], 0, "{what}: {op}");
        assert!(page_all(&app, "bad").await.is_empty(), "{what}: nothing may be written");
    }

    // Bytes altered at rest after sealing: the digest no longer matches.
    let id = upload(&app, &join_lines(&lines), 1 << 20).await;
    with_db(&app, |db| {
        let id = id.clone();
        async move { db.tamper(&id, b"text 7", b"text 8").await }
    })
    .await;
    let op = import(&app, json!({"artifactRef": id, "idempotencyKey": "tampered"})).await;
    assert_eq!((op["state"].as_str(), op["errorCode"].as_str()), (Some("failed"), Some("artifact_bad_digest")), "{op}");
    assert!(page_all(&app, "bad").await.is_empty());

    // The same bytes untouched import fine, in several batches.
    let id = upload(&app, &join_lines(&lines), 1 << 20).await;
    let op = import(&app, json!({"artifactRef": id, "idempotencyKey": "good"})).await;
    assert_eq!(op["result"]["messages"], json!({"inserted": 30, "skipped": 0}), "{op}");
    let stored = page_all(&app, "bad").await;
    let sequences: Vec<i64> = stored.iter().map(|m| m["sequence"].as_i64().unwrap()).collect();
    assert_eq!(sequences, (1..=30).collect::<Vec<_>>());
    app.stop().await;
}

// ---------------------------------------------------------------------------------------
// Import requests
// ---------------------------------------------------------------------------------------

async fn inline_import_sequences_idempotency_and_validation(app: TestApp) {
    app.append(vec![message("mix", "x1", "user", "one"), message("mix", "x2", "user", "two")]).await;
    let body = json!({
        "idempotencyKey": "inline-1",
        "messages": [message("mix", "y1", "user", "three"), message("mix", "x1", "user", "dup"),
                     message("mix", "y2", "assistant", "four")],
        "entries": [entry("ie-1", "imported fact")],
    });
    let id = submit(&app, IMPORTS, &body).await;
    // The same key and body return the same operation; a different body is a conflict.
    let (status, same) = app.post(IMPORTS, &body).await;
    assert_eq!((status, same["id"].as_str()), (202, Some(id.as_str())));
    let mut changed = body.clone();
    changed["messages"][0]["content"] = json!("other");
    let (status, conflict) = app.post(IMPORTS, &changed).await;
    assert_api_error(status, &conflict, 409);
    let op = wait_terminal(&app, &id).await;
    assert_eq!(op["state"], "succeeded", "{op}");
    assert_eq!(op["result"]["messages"], json!({"inserted": 2, "skipped": 1}));
    assert_eq!(op["result"]["entries"], json!({"inserted": 1, "skipped": 0}));
    let stored: Vec<(String, i64)> = page_all(&app, "mix")
        .await
        .iter()
        .map(|m| (m["id"].as_str().unwrap().to_string(), m["sequence"].as_i64().unwrap()))
        .collect();
    let expected = [("x1", 1), ("x2", 2), ("y1", 3), ("y2", 4)].map(|(i, s)| (i.to_string(), s));
    assert_eq!(stored, expected, "after the existing messages, in the given order");
    let (status, e) = app.post("/internal/v1/context/entries/get", &json!({"entryId": "ie-1"})).await;
    assert_eq!((status, e["content"].as_str()), (200, Some("imported fact")));

    // The generic submission path takes the same request.
    let advanced =
        json!({"kind": "import", "request": {"idempotencyKey": "adv", "messages": [message("mix", "z", "user", "z")]}});
    let (status, adv) = app.post("/internal/v1/context/advanced-operations", &advanced).await;
    assert_eq!(status, 202, "{adv}");
    assert_eq!(wait_terminal(&app, adv["id"].as_str().unwrap()).await["result"]["messages"]["inserted"], 1);
    let (status, adv) =
        app.post("/internal/v1/context/advanced-operations", &json!({"kind": "export", "request": {}})).await;
    assert_eq!(status, 202, "{adv}");

    // Exactly one source, a key, the append limits, well-formed ids: else 400, no operation.
    let artifact = ulid::Ulid::generate().to_string();
    let too_many: Vec<Value> = (0..501).map(|i| message("mix", &format!("n{i}"), "user", "x")).collect();
    for bad in [
        json!({"idempotencyKey": "k"}),
        json!({"idempotencyKey": "k", "artifactRef": artifact, "messages": [message("mix", "a", "user", "x")]}),
        json!({"messages": [message("mix", "a", "user", "x")]}),
        json!({"idempotencyKey": "", "messages": [message("mix", "a", "user", "x")]}),
        json!({"idempotencyKey": "k", "messages": too_many}),
        json!({"idempotencyKey": "k", "messages": [message("mix", "a", "wizard", "x")]}),
        json!({"idempotencyKey": "k", "entries": [entry("", "x")]}),
        json!({"idempotencyKey": "k", "artifactRef": "not-an-id"}),
        json!({"idempotencyKey": "k", "messages": [], "surprise": true}),
    ] {
        let (status, body) = app.post(IMPORTS, &bad).await;
        assert_api_error(status, &body, 400);
    }
    let (status, body) = app.post(IMPORTS, &json!({"idempotencyKey": "k", "artifactRef": artifact})).await;
    assert_api_error(status, &body, 404);
    let (status, body) = app.post(EXPORTS, &json!({"includeExpired": "yes"})).await;
    assert_api_error(status, &body, 400);
    let (_, list) = app.get(&format!("{OPS}?kind=import")).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 2, "rejected requests left no operation: {list}");
    app.stop().await;
}

// ---------------------------------------------------------------------------------------
// Tenants
// ---------------------------------------------------------------------------------------

const JWT_SECRET: &str = "0123456789abcdef0123456789abcdef";

fn token(tenant: &str) -> String {
    let exp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 600;
    let claims =
        json!({"aud": "agent-context-infra", "sub": "svc", "tenant_id": tenant, "project_id": "p", "exp": exp});
    jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()).unwrap(),
    )
    .unwrap()
}

async fn send_as(
    app: &TestApp,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut request = app.client.request(method, app.url(path)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(body);
    }
    common::read(request.send().await.unwrap()).await
}

async fn another_tenants_artifacts_are_404(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.jwt_secret = Some(JWT_SECRET.into())).await.with_token(token("alpha"));
    app.append(vec![message("secret", "s1", "user", "alpha only")]).await;
    let op = export(&app).await;
    let artifact = op["artifactRef"].as_str().unwrap().to_string();
    let op_id = op["id"].as_str().unwrap().to_string();
    let uploaded = upload(&app, &join_lines(&artifact_lines("u", 2)), 1000).await;
    let beta = token("beta");
    let post = reqwest::Method::POST;
    let get = reqwest::Method::GET;
    let probes: Vec<(reqwest::Method, String, Option<Value>)> = vec![
        (post.clone(), GET.into(), Some(json!({"artifactId": artifact}))),
        (post.clone(), CHUNK.into(), Some(json!({"artifactId": artifact}))),
        (get.clone(), format!("{ARTIFACTS}/{artifact}"), None),
        (reqwest::Method::DELETE, format!("{ARTIFACTS}/{artifact}"), None),
        (post.clone(), IMPORTS.into(), Some(json!({"artifactRef": artifact, "idempotencyKey": "steal"}))),
        (post.clone(), UPLOAD_CHUNK.into(), Some(json!({"artifactId": uploaded, "offset": 0, "dataBase64": "AAAA"}))),
        (post.clone(), FINALIZE.into(), Some(json!({"artifactId": uploaded, "digest": ArtifactDigest::of(b"")}))),
        (get.clone(), format!("{OPS}/{op_id}"), None),
    ];
    for (method, path, body) in probes {
        let (status, body) = send_as(&app, &beta, method, &path, body.as_ref()).await;
        assert_api_error(status, &body, 404);
    }
    let (status, list) = send_as(&app, &beta, reqwest::Method::GET, ARTIFACTS, None).await;
    assert_eq!((status, list["items"].as_array().map(Vec::len)), (200, Some(0)), "{list}");
    // Beta's own export holds none of alpha's data.
    let (status, theirs) = send_as(&app, &beta, post, EXPORTS, Some(&json!({}))).await;
    assert_eq!(status, 202);
    let id = theirs["id"].as_str().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let (_, op) =
            send_as(&app, &beta, reqwest::Method::GET, &format!("{OPS}/{id}/wait?timeoutMs=2000"), None).await;
        if op["state"] == "succeeded" {
            break op;
        }
        assert!(Instant::now() < deadline, "{op}");
    };
    assert_eq!(done["result"]["messages"], 0);
    // Alpha's artifact is untouched.
    assert_eq!(download(&app, &artifact, 1 << 20).await.len() as u64, op["result"]["sizeBytes"].as_u64().unwrap());
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_artifacts_are_404_sqlite() {
    another_tenants_artifacts_are_404(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_artifacts_are_404_postgres() {
    another_tenants_artifacts_are_404(Backend::Postgres).await;
}

// ---------------------------------------------------------------------------------------
// Direct database access (seeding, tampering, checks)
// ---------------------------------------------------------------------------------------

enum TestDb {
    Pg(sqlx::PgPool),
    Lite(sqlx::SqlitePool),
}

macro_rules! on_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            TestDb::Pg($pool) => $body,
            TestDb::Lite($pool) => $body,
        }
    };
}

impl TestDb {
    async fn connect(url: &str) -> TestDb {
        if url.starts_with("sqlite:") {
            use std::str::FromStr as _;
            let options =
                sqlx::sqlite::SqliteConnectOptions::from_str(url).unwrap().busy_timeout(Duration::from_secs(30));
            TestDb::Lite(sqlx::sqlite::SqlitePoolOptions::new().max_connections(2).connect_with(options).await.unwrap())
        } else {
            TestDb::Pg(sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(url).await.unwrap())
        }
    }

    /// Replace `from` by `to` (same length) inside the artifact's first chunk.
    async fn tamper(&self, artifact: &str, from: &[u8], to: &[u8]) {
        let mut data: Vec<u8> = on_pool!(self, pool => {
            sqlx::query_scalar("SELECT data FROM artifact_chunks WHERE artifact_id = $1 AND start_offset = 0")
                .bind(artifact)
                .fetch_one(pool)
                .await
                .unwrap()
        });
        let at = data.windows(from.len()).position(|w| w == from).expect("the bytes to tamper with");
        data[at..at + to.len()].copy_from_slice(to);
        on_pool!(self, pool => {
            sqlx::query("UPDATE artifact_chunks SET data = $2 WHERE artifact_id = $1 AND start_offset = 0")
                .bind(artifact)
                .bind(data.as_slice())
                .execute(pool)
                .await
                .unwrap();
        });
    }

    async fn exec(&self, sql: &'static str, arg: &str) {
        on_pool!(self, pool => { sqlx::query(sql).bind(arg).execute(pool).await.unwrap(); });
    }

    /// `n` messages in each of `conversations` (sequences 1..=n), as appends leave them.
    async fn seed(&self, conversations: &[&str], n: i64) {
        for conversation in conversations {
            let scope = json!({"conversationId": conversation}).to_string();
            on_pool!(self, pool => {
                sqlx::query(
                    "INSERT INTO conversations (tenant, conversation_id, next_sequence, message_count, created_at_ms, updated_at_ms) \
                     VALUES ('default/default', $1, $2, $3, 1, 1)",
                )
                .bind(*conversation)
                .bind(n + 1)
                .bind(n)
                .execute(pool)
                .await
                .unwrap();
            });
            let columns = "INSERT INTO messages (tenant, conversation_id, id, sequence, role, scope, content, search_text, created_at_ms)";
            let select = "SELECT 'default/default', $1, $1 || '-' || g, g, 'user', $2, \
                          '\"message ' || g || ' of a conversation that is long enough to matter\"', 'message ' || g, 1000 + g";
            let sql = match self {
                TestDb::Pg(_) => format!("{columns} {select} FROM generate_series(1, $3::BIGINT) AS g"),
                TestDb::Lite(_) => format!(
                    "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < $3) {columns} {select} FROM s"
                ),
            };
            on_pool!(self, pool => {
                sqlx::query(sqlx::AssertSqlSafe(sql)).bind(*conversation).bind(scope.as_str()).bind(n).execute(pool).await.unwrap();
            });
        }
    }

    /// Every message as `(conversation, id, sequence, content, created)`, in order.
    async fn messages(&self) -> Vec<(String, String, i64, String, i64)> {
        on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT conversation_id, id, sequence, content, created_at_ms FROM messages ORDER BY conversation_id, sequence",
            )
            .fetch_all(pool)
            .await
            .unwrap()
        })
    }

    async fn conversation_counts(&self) -> Vec<(String, i64, i64)> {
        on_pool!(self, pool => {
            sqlx::query_as("SELECT conversation_id, message_count, next_sequence FROM conversations ORDER BY conversation_id")
                .fetch_all(pool)
                .await
                .unwrap()
        })
    }

    async fn wipe_messages(&self) {
        on_pool!(self, pool => {
            sqlx::query("DELETE FROM messages").execute(pool).await.unwrap();
            sqlx::query("DELETE FROM conversations").execute(pool).await.unwrap();
        });
    }

    async fn operation(&self, id: &str) -> (String, i64, i64, Option<String>) {
        on_pool!(self, pool => {
            sqlx::query_as("SELECT state, processed, attempt, checkpoint FROM operations WHERE id = $1")
                .bind(id)
                .fetch_one(pool)
                .await
                .unwrap()
        })
    }
}

async fn with_db<F, Fut>(app: &TestApp, f: F)
where
    F: FnOnce(std::sync::Arc<TestDb>) -> Fut,
    Fut: Future<Output = ()>,
{
    let db = std::sync::Arc::new(TestDb::connect(&app.database_url).await);
    f(db.clone()).await;
    on_pool!(&*db, pool => pool.close().await);
}

// ---------------------------------------------------------------------------------------
// SIGKILL of the real binary mid-export and mid-import
// ---------------------------------------------------------------------------------------

const FAULT_CONVERSATIONS: [&str; 3] = ["alpha", "bravo", "charlie"];
const FAULT_EACH: i64 = 20_000;

/// The binary with small chunks and batches, so a run spans many committed batches.
fn spawn(env: &child::ServiceEnv, name: &str) -> child::Service {
    let port = child::free_port();
    let mut cmd = env.command("serve", port);
    cmd.env("CONTEXT_OPS_ARTIFACT_CHUNK_BYTES", "65536").env("CONTEXT_OPS_BATCH_SIZE", "1000");
    child::Service { proc: child::Proc::spawn(name, cmd, &env.dir), base: format!("http://127.0.0.1:{port}") }
}

async fn http(client: &reqwest::Client, base: &str, path: &str, body: Option<&Value>) -> Value {
    let request = match body {
        Some(b) => client.post(format!("{base}{path}")).json(b),
        None => client.get(format!("{base}{path}")),
    };
    let response = request.timeout(Duration::from_secs(60)).send().await.unwrap();
    let status = response.status().as_u16();
    let value: Value = response.json().await.unwrap();
    assert!(status < 300, "{path}: {status} {value}");
    value
}

/// Long-poll until `done(op)` holds.
async fn poll_until(
    client: &reqwest::Client,
    base: &str,
    id: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut op = http(client, base, &format!("{OPS}/{id}"), None).await;
    while !done(&op) {
        assert!(Instant::now() < deadline, "operation {id} not {what}; last seen {op}");
        op = http(client, base, &format!("{OPS}/{id}/wait?sinceVersion={}&timeoutMs=5000", op["version"]), None).await;
    }
    op
}

fn terminal(op: &Value) -> bool {
    matches!(op["state"].as_str(), Some("succeeded" | "failed" | "cancelled"))
}

async fn fetch(client: &reqwest::Client, base: &str, artifact: &str) -> Vec<u8> {
    let mut bytes = Vec::new();
    loop {
        let chunk =
            http(client, base, CHUNK, Some(&json!({"artifactId": artifact, "offset": bytes.len(), "limit": 4 << 20})))
                .await;
        bytes.extend(STANDARD.decode(chunk["dataBase64"].as_str().unwrap()).unwrap());
        if chunk["eof"] == true {
            assert_eq!(chunk["digest"].as_str().unwrap(), ArtifactDigest::of(&bytes));
            return bytes;
        }
    }
}

async fn sigkill_mid_export_and_mid_import(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let database_url = common::fresh_database(backend, dir.path()).await;
    let env = child::ServiceEnv {
        database_url: database_url.clone(),
        redis_url: (backend == Backend::Postgres).then(common::redis_url),
        namespace: common::unique("artifacts"),
        lease_secs: 3,
        dir: dir.path().to_path_buf(),
    };
    let migrate = env.clone();
    tokio::task::spawn_blocking(move || migrate.migrate()).await.unwrap();
    let db = TestDb::connect(&database_url).await;
    db.seed(&FAULT_CONVERSATIONS, FAULT_EACH).await;
    let total = FAULT_CONVERSATIONS.len() as i64 * FAULT_EACH;
    let original = db.messages().await;
    let client = reqwest::Client::new();
    let healthy = Duration::from_secs(30);
    let started = Instant::now();
    let lap = |what: &str| println!("[{backend:?}] {:>6.1}s {what}", started.elapsed().as_secs_f64());

    // Export, SIGKILLed after some batches committed.
    let mut a = spawn(&env, "serve-a");
    a.wait_healthy(&client, healthy).await;
    let export_id = http(&client, &a.base, EXPORTS, Some(&json!({}))).await["id"].as_str().unwrap().to_string();
    let seen =
        poll_until(&client, &a.base, &export_id, "part-way", |op| terminal(op) || op["processed"].as_i64() > Some(0))
            .await;
    a.proc.kill();
    let (state, at_kill, _, checkpoint) = db.operation(&export_id).await;
    assert_eq!(state, "running", "the export finished before SIGKILL landed: {seen}");
    assert!(at_kill > 0 && at_kill < total, "killed outside the middle: {at_kill}");
    let carry =
        serde_json::from_str::<Value>(&checkpoint.unwrap()).unwrap()["encoder"]["carry"].as_str().unwrap().len();
    println!("[{backend:?}] export SIGKILLed at {at_kill}/{total} records (checkpointed carry: {carry} base64 chars)");

    let mut b = spawn(&env, "serve-b");
    b.wait_healthy(&client, healthy).await;
    let resumed = poll_until(&client, &b.base, &export_id, "finished", terminal).await;
    assert_eq!(resumed["state"], "succeeded", "{resumed}");
    assert_eq!(resumed["result"]["messages"], total);
    assert!(db.operation(&export_id).await.2 >= 2, "the export was resumed by a second attempt");
    let crashed = fetch(&client, &b.base, resumed["artifactRef"].as_str().unwrap()).await;
    lap("resumed export finished");

    // An uninterrupted export of the same data: the same bytes once the header (which
    // carries each operation's own creation time) is the crashed operation's.
    let clean_id = http(&client, &b.base, EXPORTS, Some(&json!({}))).await["id"].as_str().unwrap().to_string();
    let clean = poll_until(&client, &b.base, &clean_id, "finished", terminal).await;
    let clean_bytes = fetch(&client, &b.base, clean["artifactRef"].as_str().unwrap()).await;
    lap("uninterrupted export finished");
    let header = header_line(&Header::new("default/default", resumed["createdAtMs"].as_i64().unwrap()));
    let mut expected = format!("{header}\n").into_bytes();
    expected.extend_from_slice(split_header(&clean_bytes).1);
    assert!(crashed == expected, "the resumed export differs from an uninterrupted one");
    assert_eq!(resumed["result"]["digest"].as_str().unwrap(), ArtifactDigest::of(&expected));

    // Import into an empty store, SIGKILLed mid-import.
    db.wipe_messages().await;
    let body = json!({"artifactRef": resumed["artifactRef"], "idempotencyKey": "restore"});
    let import_id = http(&client, &b.base, IMPORTS, Some(&body)).await["id"].as_str().unwrap().to_string();
    let seen = poll_until(&client, &b.base, &import_id, "importing", |op| {
        terminal(op) || (op["phase"] == "importing" && op["processed"].as_i64() > Some(0))
    })
    .await;
    b.proc.kill();
    let (state, at_kill, _, _) = db.operation(&import_id).await;
    assert_eq!(state, "running", "the import finished before SIGKILL landed: {seen}");
    assert!(at_kill > 0 && at_kill < total, "killed outside the middle: {at_kill}");
    println!("[{backend:?}] import SIGKILLed at {at_kill}/{total} records");

    let mut c = spawn(&env, "serve-c");
    c.wait_healthy(&client, healthy).await;
    // The same idempotency key names the same operation.
    let again = http(&client, &c.base, IMPORTS, Some(&body)).await;
    assert_eq!(again["id"].as_str(), Some(import_id.as_str()));
    let done = poll_until(&client, &c.base, &import_id, "finished", terminal).await;
    lap("resumed import finished");
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["result"]["messages"], json!({"inserted": total, "skipped": 0}), "{done}");
    assert!(db.operation(&import_id).await.2 >= 2, "the import was resumed by a second attempt");
    assert!(db.messages().await == original, "exactly the original messages, no duplicates, same sequences");
    let counts = db.conversation_counts().await;
    let expected: Vec<(String, i64, i64)> =
        FAULT_CONVERSATIONS.iter().map(|c| (c.to_string(), FAULT_EACH, FAULT_EACH + 1)).collect();
    assert_eq!(counts, expected);
    c.proc.assert_alive();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_export_and_mid_import_sqlite() {
    sigkill_mid_export_and_mid_import(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_export_and_mid_import_postgres() {
    sigkill_mid_export_and_mid_import(Backend::Postgres).await;
}

// ---------------------------------------------------------------------------------------

async fn small_config(backend: Backend) -> TestApp {
    TestApp::start_with(backend, |c| {
        c.artifact_chunk_bytes = 4096;
        c.artifact_inline_max_bytes = 8192;
        c.batch_size = 10;
    })
    .await
}

macro_rules! small_backend_tests {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name(super::small_config(super::Backend::Sqlite).await).await;
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name(super::small_config(super::Backend::Postgres).await).await;
                }
            }
        )*
    };
}

small_backend_tests!(
    export_delete_import_export_round_trip,
    upload_into_another_deployment,
    chunked_download_and_artifact_lifecycle,
    uploads_check_offsets_base64_and_digest,
    corrupted_artifacts_fail_and_write_nothing,
    inline_import_sequences_idempotency_and_validation,
);
