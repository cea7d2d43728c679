//! Export and import over real HTTP on both backends: round trips in place (`export`) and
//! into another deployment through an upload (`upload`), chunked download and the artifact
//! lifecycle (`download`), upload offset, base64 and digest checks (`upload`), corrupted
//! artifacts of every kind and inline imports (`import`), tenant walls (`tenants`), export
//! filters and renaming imports (`transfer`), and
//! SIGKILL of the real binary mid-export and mid-import (`faults`), a failed batch taking
//! the overlapping one down on PostgreSQL (`overlap`), and message keys too wide to index
//! refused by every path that writes messages (`wide_keys`).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use context_jobs::artifact::{ArtifactDigest, Encoder, Header};
use context_jobs::contract::{
    CONTEXT_EXPORT_ARTIFACT_CHUNK_PATH as CHUNK, CONTEXT_EXPORT_ARTIFACT_PATH as GET, CONTEXT_EXPORT_PATH as EXPORTS,
    CONTEXT_IMPORT_PATH as IMPORTS, CONTEXT_INSIGHTS_PATH as ENTRIES, CONTEXT_OPERATIONS_PATH as OPS, ContextOperation,
    ContextOperationState, ConversationRecord, MESSAGES_PAGE_PATH as PAGE,
};
use serde_json::{Value, json};

use crate::harness::{Backend, OpClient, OperationExt as _, TestApp, message};

mod download;
mod export;
mod faults;
mod import;
mod overlap;
mod pages;
mod pipelines;
mod tenants;
mod transfer;
mod upload;
mod wide_keys;

const ARTIFACTS: &str = "/internal/v1/context/export-artifacts";
const UPLOADS: &str = "/internal/v1/context/export-artifacts/uploads";
const UPLOAD_CHUNK: &str = "/internal/v1/context/export-artifacts/uploads/chunk";
const FINALIZE: &str = "/internal/v1/context/export-artifacts/uploads/finalize";

/// Small stored chunks and batches, and an 8 KiB cap on whole-artifact reads, so small
/// data spans several of each.
async fn small_config(backend: Backend) -> TestApp {
    TestApp::start_with(backend, |c| {
        c.artifacts.artifact_chunk_bytes = 4096;
        c.artifacts.artifact_inline_max_bytes = 8192;
        c.worker.batch_size = 10;
    })
    .await
}

/// Export and wait: the succeeded operation.
async fn export(app: &OpClient) -> ContextOperation {
    let id = app.submit(EXPORTS, &json!({})).await.id;
    let op = app.wait_terminal(&id).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(op.artifact_ref.as_deref(), op.result_json()["artifactId"].as_str(), "{op:?}");
    op
}

/// Submit an import and wait for its end.
async fn import(app: &OpClient, body: Value) -> ContextOperation {
    let id = app.submit(IMPORTS, &body).await.id;
    app.wait_terminal(&id).await
}

/// Download an artifact through the chunk endpoint, `limit` bytes at a time, checking the
/// offsets, eof and digest of every reply.
async fn download(app: &OpClient, artifact: &str, limit: usize) -> Vec<u8> {
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
async fn upload(app: &OpClient, bytes: &[u8], piece: usize) -> String {
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

/// Every message of `conversation` as the API shows it.
async fn page_all(app: &OpClient, conversation: &str) -> Vec<Value> {
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
    let tool = ConversationRecord {
        tool_call_id: Some("call-1".into()),
        name: Some("calculator".into()),
        ..message("c-a", "a-3", "tool", "42")
    };
    let mut rich = ConversationRecord {
        content: json!([{"type": "text", "text": "part one"}, {"type": "text", "text": "ünïcødé ✓"}]),
        metadata: json!({"model": "m", "tokens": 12}),
        ..message("c-a", "a-2", "assistant", "")
    };
    rich.scope.agent_id = Some("agent-1".into());
    let escapes = message("c-a", "a-4", "user", "tab\there\nnew line \\ back\\slash \r \\N \"quoted\"");
    app.append_records(&[message("c-a", "a-1", "user", "hello"), rich, tool, escapes]).await;
    let lines: Vec<_> = (0..40).map(|i| message("c-b", &format!("b-{i:03}"), "user", &format!("line {i}"))).collect();
    app.append_records(&lines).await;
    for (id, text) in [("e-1", "sky is blue"), ("e-2", "grass is green"), ("e-3", "old news")] {
        let (status, body) = app.post(ENTRIES, &json!({"entry": entry(id, text), "expectedVersion": 0})).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) =
        app.post("/internal/v1/context/entries/expire", &json!({"entryId": "e-3", "expectedVersion": 1})).await;
    assert_eq!(status, 200, "{body}");
}

/// A valid artifact of `n` messages in each conversation, one conversation after another.
fn artifact_bytes(conversations: &[&str], n: usize) -> Vec<u8> {
    let mut encoder = Encoder::new(1 << 20, &Header::new("elsewhere/p", 1_700_000_000_000));
    for conversation in conversations {
        for i in 0..n {
            let record = ConversationRecord {
                created_at_ms: 1,
                ..message(conversation, &format!("{conversation}-{i:03}"), "user", &format!("text {i}"))
            };
            encoder.message(&record).unwrap();
        }
    }
    encoder.finish().unwrap();
    encoder.take_ready().into_iter().flat_map(|(_, c)| c).collect()
}

/// A valid artifact of `n` messages in one conversation, as lines (no newlines).
fn artifact_lines(conversation: &str, n: usize) -> Vec<String> {
    String::from_utf8(artifact_bytes(&[conversation], n)).unwrap().lines().map(str::to_string).collect()
}

fn join_lines(lines: &[String]) -> Vec<u8> {
    lines.iter().flat_map(|l| format!("{l}\n").into_bytes()).collect()
}
