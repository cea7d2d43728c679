//! SIGKILL of the real binary mid-export and mid-import: the resumed export is byte for
//! byte an uninterrupted one, and the resumed import restores exactly the original
//! messages, no duplicates, same sequences.

use std::time::{Duration, Instant};

use crate::harness::db::with_pool;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use context_jobs::artifact::{ArtifactDigest, Header, header_line};
use context_jobs::contract::{ContextExportArtifactChunk, ContextOperationState};
use context_ops::store::Db;
use serde_json::{Value, json};

use super::{CHUNK, EXPORTS, IMPORTS, split_header};
use crate::harness::child::Service;
use crate::harness::fixture::Fixture;
use crate::harness::{Backend, OpClient, OperationExt as _};

const CONVERSATIONS: [&str; 3] = ["alpha", "bravo", "charlie"];
const EACH: i64 = 20_000;
/// Whole runs of 60,000 records, each wait bounded by this.
const WITHIN: Duration = Duration::from_secs(180);

/// `n` messages in each of `conversations` (sequences 1..=n), as appends leave them, with
/// content long enough that an export spans many chunks.
async fn seed(db: &Db, conversations: &[&str], n: i64) {
    for conversation in conversations {
        let scope = json!({"conversationId": conversation}).to_string();
        with_pool!(db, pool => {
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
        let sql = match db {
            Db::Postgres(_) => format!("{columns} {select} FROM generate_series(1, $3::BIGINT) AS g"),
            Db::Sqlite(_) => format!(
                "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < $3) {columns} {select} FROM s"
            ),
        };
        with_pool!(db, pool => {
            sqlx::query(sqlx::AssertSqlSafe(sql)).bind(*conversation).bind(scope.as_str()).bind(n).execute(pool).await.unwrap();
        });
    }
}

/// Every message as `(conversation, id, sequence, content, created)`, in order.
async fn messages(db: &Db) -> Vec<(String, String, i64, String, i64)> {
    with_pool!(db, pool => {
        sqlx::query_as(
            "SELECT conversation_id, id, sequence, content, created_at_ms FROM messages ORDER BY conversation_id, sequence",
        )
        .fetch_all(pool)
        .await
        .unwrap()
    })
}

async fn conversation_counts(db: &Db) -> Vec<(String, i64, i64)> {
    with_pool!(db, pool => {
        sqlx::query_as("SELECT conversation_id, message_count, next_sequence FROM conversations ORDER BY conversation_id")
            .fetch_all(pool)
            .await
            .unwrap()
    })
}

async fn wipe_messages(db: &Db) {
    with_pool!(db, pool => {
        sqlx::query("DELETE FROM messages").execute(pool).await.unwrap();
        sqlx::query("DELETE FROM conversations").execute(pool).await.unwrap();
    });
}

/// `serve` with small chunks and batches, so a run spans many committed batches; healthy.
async fn spawn(fx: &Fixture, name: &str) -> Service {
    let env = [("CONTEXT_OPS_ARTIFACT_CHUNK_BYTES", "65536"), ("CONTEXT_OPS_BATCH_SIZE", "1000")];
    let mut service = fx.env.spawn_with(name, "serve", &env);
    service.wait_healthy(Duration::from_secs(30)).await;
    service
}

/// The artifact's bytes, in 4 MiB chunks, checked against the digest.
async fn fetch(api: &OpClient, artifact: &str) -> Vec<u8> {
    let mut bytes = Vec::new();
    loop {
        let request = json!({"artifactId": artifact, "offset": bytes.len(), "limit": 4 << 20});
        let chunk: ContextExportArtifactChunk = api.call(CHUNK, &request, 200).await;
        bytes.extend(STANDARD.decode(&chunk.data_base64).unwrap());
        if chunk.eof {
            assert_eq!(chunk.digest, ArtifactDigest::of(&bytes));
            return bytes;
        }
    }
}

async fn sigkill_mid_export_and_mid_import(backend: Backend) {
    let fx = Fixture::new(backend, 3).await;
    let db = &fx.db;
    seed(db, &CONVERSATIONS, EACH).await;
    let total = CONVERSATIONS.len() as i64 * EACH;
    let original = messages(db).await;
    let started = Instant::now();
    let lap = |what: &str| println!("[{backend:?}] {:>6.1}s {what}", started.elapsed().as_secs_f64());
    let terminal = |op: &context_jobs::contract::ContextOperation| op.state.is_terminal();

    // Export, SIGKILLed after some batches committed.
    let mut a = spawn(&fx, "serve-a").await;
    let export_id = a.api.submit(EXPORTS, &json!({})).await.id;
    let seen = a.api.wait_until(&export_id, WITHIN, "part-way", |op| terminal(op) || op.processed > 0).await;
    a.proc.kill();
    let at_kill = fx.operation(&export_id).await;
    assert_eq!(at_kill.state, "running", "the export finished before SIGKILL landed: {seen:?}");
    assert!(at_kill.processed > 0 && at_kill.processed < total, "killed outside the middle: {}", at_kill.processed);
    let checkpoint: Value = serde_json::from_str(&at_kill.checkpoint.unwrap()).unwrap();
    let carry = checkpoint["encoder"]["carry"].as_str().unwrap().len();
    println!(
        "[{backend:?}] export SIGKILLed at {}/{total} records (checkpointed carry: {carry} base64 chars)",
        at_kill.processed
    );

    let mut b = spawn(&fx, "serve-b").await;
    let resumed = b.api.wait_until(&export_id, WITHIN, "finished", terminal).await;
    assert_eq!(resumed.state, ContextOperationState::Succeeded, "{resumed:?}");
    assert_eq!(resumed.result_json()["messages"], total);
    assert!(fx.operation(&export_id).await.attempt >= 2, "the export was resumed by a second attempt");
    let resumed_artifact = resumed.artifact_ref.clone().unwrap();
    let crashed = fetch(&b.api, &resumed_artifact).await;
    lap("resumed export finished");

    // An uninterrupted export of the same data: the same bytes once the header (which
    // carries each operation's own creation time) is the crashed operation's.
    let clean_id = b.api.submit(EXPORTS, &json!({})).await.id;
    let clean = b.api.wait_until(&clean_id, WITHIN, "finished", terminal).await;
    let clean_bytes = fetch(&b.api, clean.artifact_ref.as_deref().unwrap()).await;
    lap("uninterrupted export finished");
    let header = header_line(&Header::new("default/default", resumed.created_at_ms));
    let mut expected = format!("{header}\n").into_bytes();
    expected.extend_from_slice(split_header(&clean_bytes).1);
    assert!(crashed == expected, "the resumed export differs from an uninterrupted one");
    assert_eq!(resumed.result_json()["digest"].as_str().unwrap(), ArtifactDigest::of(&expected));

    // Import into an empty store, SIGKILLed mid-import.
    wipe_messages(db).await;
    let body = json!({"artifactRef": resumed_artifact, "idempotencyKey": "restore"});
    let import_id = b.api.submit(IMPORTS, &body).await.id;
    let seen = b
        .api
        .wait_until(&import_id, WITHIN, "importing", |op| terminal(op) || (op.phase == "importing" && op.processed > 0))
        .await;
    b.proc.kill();
    let at_kill = fx.operation(&import_id).await;
    assert_eq!(at_kill.state, "running", "the import finished before SIGKILL landed: {seen:?}");
    assert!(at_kill.processed > 0 && at_kill.processed < total, "killed outside the middle: {}", at_kill.processed);
    println!("[{backend:?}] import SIGKILLed at {}/{total} records", at_kill.processed);

    let mut c = spawn(&fx, "serve-c").await;
    // The same idempotency key names the same operation.
    let again = c.api.submit(IMPORTS, &body).await;
    assert_eq!(again.id, import_id);
    let done = c.api.wait_until(&import_id, WITHIN, "finished", terminal).await;
    lap("resumed import finished");
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    assert_eq!(done.result_json()["messages"], json!({"inserted": total, "skipped": 0}), "{done:?}");
    assert!(fx.operation(&import_id).await.attempt >= 2, "the import was resumed by a second attempt");
    assert!(messages(db).await == original, "exactly the original messages, no duplicates, same sequences");
    let expected: Vec<(String, i64, i64)> = CONVERSATIONS.iter().map(|c| (c.to_string(), EACH, EACH + 1)).collect();
    assert_eq!(conversation_counts(db).await, expected);
    c.proc.assert_alive();
}

backend_tests!(backend: sigkill_mid_export_and_mid_import);
