//! Artifacts and messages from the command line: an export downloaded by a CLI that is
//! killed part-way and run again (the partial file continues; the digest is checked), a
//! file of other bytes refused before anything is written to it and a forged partial file
//! reported as a digest mismatch (exit 7), an upload (and one
//! resumed by id), `import --file`, and `append` / `recent` / `search`.

use std::time::Duration;

use base64::Engine as _;
use context_jobs::artifact::{ARTIFACT_UPLOAD_CHUNK_PATH, ARTIFACT_UPLOADS_PATH, ArtifactInfo};
use context_jobs::contract::{AppendResponse, ContextOperationState, MAX_APPEND_BYTES, MessagesResponse};
use context_jobs::operation::view::OperationView;
use serde_json::{Value, json};

use super::Cli;
use crate::harness::child::Proc;
use crate::harness::db::{DEFAULT_TENANT, seed_conversation};
use crate::harness::wait::poll_until;
use crate::harness::{Backend, TestApp};

const DIGEST_MISMATCH: i32 = 7;

/// A succeeded export of `messages` seeded messages: its artifact's id and digest.
async fn exported(app: &TestApp, cli: &Cli, messages: i64) -> (String, String) {
    seed_conversation(app.db(), DEFAULT_TENANT, "big", messages).await;
    let op: OperationView = cli.json(&["submit", "export", "--conversation", "big", "--wait"]).await;
    assert_eq!(op.operation.state, ContextOperationState::Succeeded, "{op:?}");
    let result = op.operation.result.unwrap();
    (result["artifactId"].as_str().unwrap().to_string(), result["digest"].as_str().unwrap().to_string())
}

async fn an_interrupted_download_continues_and_a_mismatch_is_reported(backend: Backend) {
    let app = TestApp::start(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let cli = Cli::new(&app.base, dir.path());
    let (artifact, digest) = exported(&app, &cli, 5000).await;
    let info: ArtifactInfo =
        serde_json::from_value(app.get(&format!("{}/{artifact}", context_jobs::artifact::ARTIFACTS_PATH)).await.1)
            .unwrap();
    let file = dir.path().join("export.jsonl");
    let path = file.to_str().unwrap();

    // 1 KiB a request: hundreds of requests, killed once some bytes are on disk.
    let mut download =
        Proc::spawn("download", cli.command(&["download", &artifact, "-o", path, "--chunk-size", "1024"]), dir.path());
    let partial = poll_until("the download wrote its first bytes", Duration::from_secs(60), || async {
        match std::fs::metadata(&file).map(|m| m.len()) {
            Ok(n) if n > 0 => Ok(n),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    download.kill();
    let partial = std::fs::metadata(&file).unwrap().len().max(partial);
    assert!(partial < info.size_bytes, "killed before the end: {partial} of {} bytes", info.size_bytes);

    let ran = cli.run(&["download", &artifact, "-o", path, "--json"]).await.expect(0);
    let done: Value = ran.json();
    assert_eq!(done["resumedFrom"], partial, "the partial file was continued, not restarted");
    assert_eq!(done["sizeBytes"], info.size_bytes);
    assert_eq!(done["digest"], digest.as_str(), "the whole file's digest is the artifact's");
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(context_jobs::artifact::ArtifactDigest::of(&bytes), digest);
    // Running it again on the complete file only verifies it.
    let again: Value = cli.json(&["download", &artifact, "-o", path]).await;
    assert_eq!(again["resumedFrom"], info.size_bytes);

    // A file of other bytes is not continued: the mismatch is reported before anything is
    // written to it (it was continued, the artifact's tail appended, then the digest failed).
    let wrong = dir.path().join("wrong.jsonl");
    let other = b"{\"type\":\"header\",\"schemaVersion\":9}\n";
    std::fs::write(&wrong, other).unwrap();
    let ran = cli.run(&["download", &artifact, "-o", wrong.to_str().unwrap()]).await.expect(DIGEST_MISMATCH);
    assert!(ran.stderr.contains("is not a partial download of artifact"), "{}", ran.stderr);
    assert_eq!(std::fs::read(&wrong).unwrap(), other, "the other file is left as it was");
    // Same first bytes, other bytes after: continued, then the whole file's digest differs.
    let mut forged = bytes[..bytes.len() / 2].to_vec();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    std::fs::write(&wrong, &forged).unwrap();
    let ran = cli.run(&["download", &artifact, "-o", wrong.to_str().unwrap()]).await.expect(DIGEST_MISMATCH);
    assert!(ran.stderr.contains("does not match artifact"), "{}", ran.stderr);
    assert!(ran.stderr.contains(&digest), "names the expected digest: {}", ran.stderr);
    // --restart starts over and succeeds.
    let restarted: Value = cli.json(&["download", &artifact, "-o", wrong.to_str().unwrap(), "--restart"]).await;
    assert_eq!((restarted["resumedFrom"].as_u64(), restarted["digest"].as_str()), (Some(0), Some(digest.as_str())));
    // A file longer than the artifact is not a partial download of it.
    let mut longer = bytes.clone();
    longer.extend_from_slice(b"tail");
    std::fs::write(&wrong, &longer).unwrap();
    cli.run(&["download", &artifact, "-o", wrong.to_str().unwrap()]).await.expect(DIGEST_MISMATCH);
}

async fn upload_resume_and_import_a_file(backend: Backend) {
    let app = TestApp::start(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let cli = Cli::new(&app.base, dir.path());
    let (artifact, digest) = exported(&app, &cli, 300).await;
    let file = dir.path().join("export.jsonl");
    let path = file.to_str().unwrap();
    cli.json::<Value>(&["download", &artifact, "-o", path]).await;

    // upload prints the new artifact's id, and it holds the same bytes.
    let ran = cli.run(&["upload", path, "--chunk-size", "4096"]).await.expect(0);
    let uploaded = ran.stdout.trim().to_string();
    let (status, info) = app.get(&format!("{}/{uploaded}", context_jobs::artifact::ARTIFACTS_PATH)).await;
    assert_eq!(status, 200, "{info}");
    assert_eq!((info["state"].as_str(), info["digest"].as_str()), (Some("ready"), Some(digest.as_str())));

    // An upload that stopped part-way continues by its id.
    let bytes = std::fs::read(&file).unwrap();
    let (status, started) = app.post(ARTIFACT_UPLOADS_PATH, &json!({})).await;
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap().to_string();
    let half = &bytes[..bytes.len() / 2];
    let data = base64::engine::general_purpose::STANDARD.encode(half);
    let (status, body) =
        app.post(ARTIFACT_UPLOAD_CHUNK_PATH, &json!({"artifactId": id, "offset": 0, "dataBase64": data})).await;
    assert_eq!(status, 200, "{body}");
    let resumed: ArtifactInfo = cli.json(&["upload", path, "--artifact", &id]).await;
    assert_eq!((resumed.id.as_str(), resumed.state.as_str()), (id.as_str(), "ready"));
    assert_eq!(resumed.digest.as_deref(), Some(digest.as_str()));
    assert_eq!(resumed.size_bytes, bytes.len() as u64);

    // import --file: upload, import under new ids, wait.
    let op: OperationView = cli.json(&["import", "--file", path, "--prefix", "copy-"]).await;
    assert_eq!(op.operation.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(op.operation.result.as_ref().unwrap()["messages"]["inserted"], 300);
    let copied: MessagesResponse = cli.json(&["recent", "--conversation", "copy-big", "--limit", "500"]).await;
    assert_eq!(copied.items.len(), 300);
}

async fn append_recent_and_search(backend: Backend) {
    let app = TestApp::start(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let cli = Cli::new(&app.base, dir.path());
    let file = dir.path().join("messages.jsonl");
    let lines: Vec<String> = (0..1200)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"id": format!("m{i}"), "scope": {"conversationId": "chat"}, "role": role,
                   "content": format!("message number {i}")})
            .to_string()
        })
        .collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let path = file.to_str().unwrap();
    let appended: AppendResponse = cli.json(&["append", path]).await;
    assert_eq!((appended.appended, appended.skipped), (1200, 0), "in batches of at most 500");
    let again: AppendResponse = cli.json(&["append", path, "--batch", "100"]).await;
    assert_eq!((again.appended, again.skipped), (0, 1200), "appends are idempotent by id");
    let recent: MessagesResponse =
        cli.json(&["recent", "--conversation", "chat", "--limit", "3", "--role", "user"]).await;
    let ids: Vec<_> = recent.items.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["m1194", "m1196", "m1198"]);
    let found: MessagesResponse = cli.json(&["search", "NUMBER 1199", "--conversation", "chat"]).await;
    assert_eq!(found.items.len(), 1);
    assert_eq!(found.items[0].id, "m1199");
    let human = cli.run(&["recent", "--conversation", "chat", "--limit", "1"]).await.expect(0);
    assert_eq!(human.stdout.trim(), "1200  assistant  message number 1199");
    // A line that is not a record: a usage error naming the line, nothing sent for it.
    std::fs::write(&file, format!("{}\nnot json\n", lines[0])).unwrap();
    let bad = cli.run(&["append", path]).await.expect(2);
    assert!(bad.stderr.contains("messages.jsonl:2"), "{}", bad.stderr);
    // 500 lines that fit the 8 MiB limit as read, not as sent (each record gains its
    // `sequence` and `createdAtMs`): the batch is cut by what is sent, so no 413.
    let big = |i: usize| {
        let line = json!({"id": format!("b{i:03}"), "scope": {"conversationId": "big"}, "role": "user", "content": ""})
            .to_string();
        let pad = 16_770 - line.len();
        json!({"id": format!("b{i:03}"), "scope": {"conversationId": "big"}, "role": "user", "content": "x".repeat(pad)})
            .to_string()
    };
    let lines: Vec<String> = (0..500).map(big).collect();
    assert!(lines.iter().map(|l| l.len() + 1).sum::<usize>() + 64 < MAX_APPEND_BYTES, "the lines fit as read");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let appended: AppendResponse = cli.json(&["append", path]).await;
    assert_eq!((appended.appended, appended.skipped), (500, 0));
}

backend_tests!(backend:
    an_interrupted_download_continues_and_a_mismatch_is_reported,
    upload_resume_and_import_a_file,
    append_recent_and_search,
);
