//! Imports: a corrupted artifact of every kind fails before anything is written (bad line,
//! bad record, unknown type, truncation, miscount, unknown schema, altered bytes); inline
//! imports keep the given order after existing messages, are idempotent by key and are
//! validated before any operation exists.

use crate::harness::db::with_pool;
use context_jobs::artifact::{Header, header_line};
use context_jobs::contract::ContextOperationState;
use context_ops::store::Db;
use serde_json::json;

use super::{EXPORTS, IMPORTS, OPS, artifact_lines, entry, import, join_lines, page_all, small_config, upload};
use crate::harness::{OperationExt as _, TestApp, assert_api_error, message};

/// Replace `from` by `to` (same length) inside the artifact's first chunk, behind the
/// service's back.
async fn tamper(db: &Db, artifact: &str, from: &[u8], to: &[u8]) {
    let mut data: Vec<u8> = with_pool!(db, pool => {
        sqlx::query_scalar("SELECT data FROM artifact_chunks WHERE artifact_id = $1 AND start_offset = 0")
            .bind(artifact)
            .fetch_one(pool)
            .await
            .unwrap()
    });
    let at = data.windows(from.len()).position(|w| w == from).expect("the bytes to tamper with");
    data[at..at + to.len()].copy_from_slice(to);
    with_pool!(db, pool => {
        sqlx::query("UPDATE artifact_chunks SET data = $2 WHERE artifact_id = $1 AND start_offset = 0")
            .bind(artifact)
            .bind(data.as_slice())
            .execute(pool)
            .await
            .unwrap();
    });
}

async fn corrupted_artifacts_fail_and_write_nothing(app: TestApp) {
    // 30 records and batches of 10 (see `small_config`): every corruption sits after at
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
    // A NUL late in the artifact (PostgreSQL cannot store it): the validating pass refuses
    // it like the importing pass would, so nothing is written on either engine.
    let mut nul = lines.clone();
    nul[28] = nul[28].replace("\"id\":\"bad-027\"", "\"id\":\"bad-\\u0000\"");
    assert!(nul[28].contains("\\u0000"), "{}", nul[28]);
    cases.push(("a NUL in a late message id", nul, "artifact_bad_line", 29));
    let mut nul_content = lines.clone();
    nul_content[27] = nul_content[27].replace("text 26", "text\\u000026");
    cases.push(("a NUL in a late message's content", nul_content, "artifact_bad_line", 28));
    let mut v9 = lines.clone();
    v9[0] = header_line(&Header { schema_version: 9, ..Header::new("t", 1) });
    cases.push(("schema version 9", v9, "artifact_unknown_schema", 1));

    for (what, case, code, line) in cases {
        let id = upload(&app, &join_lines(&case), 500).await;
        let op = import(&app, json!({"artifactRef": id, "idempotencyKey": format!("k-{what}")})).await;
        assert_eq!(op.state, ContextOperationState::Failed, "{what}: {op:?}");
        assert_eq!(op.error_code.as_deref(), Some(code), "{what}: {op:?}");
        assert!(op.error.as_deref().unwrap().contains(&format!("line {line}:")), "{what}: {op:?}");
        assert_eq!(op.processed, 0, "{what}: {op:?}");
        assert!(page_all(&app, "bad").await.is_empty(), "{what}: nothing may be written");
    }

    // Bytes altered at rest after sealing: the digest no longer matches. Every line still
    // decodes, so on PostgreSQL the first batch (at least) is written while the artifact
    // validates, and must roll back.
    let id = upload(&app, &join_lines(&lines), 1 << 20).await;
    tamper(app.db(), &id, b"text 7", b"text 8").await;
    let op = import(&app, json!({"artifactRef": id, "idempotencyKey": "tampered"})).await;
    assert_eq!(
        (op.state, op.error_code.as_deref()),
        (ContextOperationState::Failed, Some("artifact_bad_digest")),
        "{op:?}"
    );
    assert!(page_all(&app, "bad").await.is_empty());

    // The same bytes untouched import fine, in several batches.
    let id = upload(&app, &join_lines(&lines), 1 << 20).await;
    let op = import(&app, json!({"artifactRef": id, "idempotencyKey": "good"})).await;
    assert_eq!(op.result_json()["messages"], json!({"inserted": 30, "skipped": 0}), "{op:?}");
    let stored = page_all(&app, "bad").await;
    let sequences: Vec<i64> = stored.iter().map(|m| m["sequence"].as_i64().unwrap()).collect();
    assert_eq!(sequences, (1..=30).collect::<Vec<_>>());
    app.stop().await;
}

async fn inline_import_sequences_idempotency_and_validation(app: TestApp) {
    app.append_records(&[message("mix", "x1", "user", "one"), message("mix", "x2", "user", "two")]).await;
    let body = json!({
        "idempotencyKey": "inline-1",
        "messages": [message("mix", "y1", "user", "three"), message("mix", "x1", "user", "dup"),
                     message("mix", "y2", "assistant", "four")],
        "entries": [entry("ie-1", "imported fact")],
    });
    let id = app.submit(IMPORTS, &body).await.id;
    // The same key and body return the same operation; a different body is a conflict.
    let (status, same) = app.post(IMPORTS, &body).await;
    assert_eq!((status, same["id"].as_str()), (202, Some(id.as_str())));
    let mut changed = body.clone();
    changed["messages"][0]["content"] = json!("other");
    let (status, conflict) = app.post(IMPORTS, &changed).await;
    assert_api_error(status, &conflict, 409);
    let op = app.wait_terminal(&id).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(op.result_json()["messages"], json!({"inserted": 2, "skipped": 1}));
    assert_eq!(op.result_json()["entries"], json!({"inserted": 1, "skipped": 0}));
    let stored: Vec<(String, i64)> = page_all(&app, "mix")
        .await
        .iter()
        .map(|m| (m["id"].as_str().unwrap().to_string(), m["sequence"].as_i64().unwrap()))
        .collect();
    let expected = [("x1", 1), ("x2", 2), ("y1", 3), ("y2", 4)].map(|(i, s)| (i.to_string(), s));
    assert_eq!(stored, expected, "after the existing messages, in the given order");
    let (status, e) = app.post("/internal/v1/context/entries/get", &json!({"entryId": "ie-1"})).await;
    assert_eq!((status, e["content"].as_str()), (200, Some("imported fact")));
    // Given at version 0 (as a put body carries it), stored at 1, so it can be corrected.
    assert_eq!(e["version"], 1, "{e}");
    let correct = json!({"entryId": "ie-1", "expectedVersion": 1, "content": "corrected fact"});
    let (status, corrected) = app.post("/internal/v1/context/entries/correct", &correct).await;
    assert_eq!((status, &corrected["version"]), (200, &json!(2)), "{corrected}");

    // The generic submission path takes the same request.
    let advanced =
        json!({"kind": "import", "request": {"idempotencyKey": "adv", "messages": [message("mix", "z", "user", "z")]}});
    let adv = app.submit("/internal/v1/context/advanced-operations", &advanced).await;
    assert_eq!(app.wait_terminal(&adv.id).await.result_json()["messages"]["inserted"], 1);
    let (status, adv) =
        app.post("/internal/v1/context/advanced-operations", &json!({"kind": "export", "request": {}})).await;
    assert_eq!(status, 202, "{adv}");

    // Exactly one source, a key, the append limits, well-formed ids: else 400, no operation.
    let artifact = ulid::Ulid::generate().to_string();
    let too_many: Vec<_> = (0..501).map(|i| message("mix", &format!("n{i}"), "user", "x")).collect();
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

backend_tests!(
    start = small_config;
    corrupted_artifacts_fail_and_write_nothing,
    inline_import_sequences_idempotency_and_validation,
);

/// An artifact deleted while its import reads it fails the import `artifact_not_found` (its
/// chunks ran out before its size), not `artifact_truncated` as if the artifact were
/// malformed. PostgreSQL only: the test holds the chunk table's lock so that the import's
/// first read waits while the artifact is deleted (SQLite's readers never wait for a
/// writer, so there is no moment to stage).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_deleted_during_its_import_is_not_found() {
    use sqlx::Connection as _;

    let app = small_config(crate::harness::Backend::Postgres).await;
    let records: Vec<_> = (0..30).map(|i| message("gone", &format!("m{i}"), "user", "hello")).collect();
    app.append_records(&records).await;
    let artifact = super::export(&app).await.result_json()["artifactId"].as_str().unwrap().to_string();

    let mut blocker = sqlx::PgConnection::connect(&app.database_url).await.unwrap();
    sqlx::raw_sql("BEGIN; LOCK TABLE artifact_chunks IN ACCESS EXCLUSIVE MODE").execute(&mut blocker).await.unwrap();
    let id = app.submit(IMPORTS, &json!({"artifactRef": artifact, "idempotencyKey": "gone"})).await.id;
    crate::harness::wait::poll_until(
        "the import's read waits on the chunks",
        std::time::Duration::from_secs(10),
        || {
            let url = app.database_url.clone();
            async move {
                let mut conn = sqlx::PgConnection::connect(&url).await.map_err(|e| e.to_string())?;
                let waiting: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
                 WHERE c.relname = 'artifact_chunks' AND NOT l.granted \
                 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                )
                .fetch_one(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
                if waiting > 0 { Ok(()) } else { Err("no reader waits".to_string()) }
            }
        },
    )
    .await;
    sqlx::query("DELETE FROM artifacts WHERE id = $1").bind(&artifact).execute(&mut blocker).await.unwrap();
    sqlx::raw_sql("COMMIT").execute(&mut blocker).await.unwrap();

    let op = app.wait_terminal(&id).await;
    assert_eq!(op.state, ContextOperationState::Failed, "{op:?}");
    assert_eq!(op.error_code.as_deref(), Some("artifact_not_found"), "{op:?}");
    assert!(op.error.as_deref().unwrap().contains("deleted during the import"), "{op:?}");
    app.stop().await;
}
