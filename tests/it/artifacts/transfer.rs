//! Import into another place: export filters (conversation ids, agent, time range) and an
//! import that renames conversations (a prefix or an explicit map), end to end on both
//! engines — one user's data exported and copied under new ids beside the original, moved
//! into a fresh deployment, and a rename that would make an id invalid refused before
//! anything is written.

use context_jobs::artifact::{Decoder, Record};
use context_jobs::contract::{ContextOperationState, ConversationRecord};
use serde_json::{Value, json};

use super::{ENTRIES, EXPORTS, download, entry, import, page_all, small_config, upload};
use crate::harness::{OperationExt as _, TestApp, assert_api_error, message};

/// `(conversation, id)` of each record.
type Ids = Vec<(String, String)>;

/// `(conversation, message id)` of its messages and `(provenance conversation, entry id)`
/// of its entries: what an artifact holds.
fn contents(bytes: &[u8]) -> (Ids, Ids) {
    let mut decoder = Decoder::new();
    let mut out = Vec::new();
    decoder.feed(bytes, &mut out).unwrap();
    decoder.finish().unwrap();
    let (mut messages, mut entries) = (Vec::new(), Vec::new());
    for d in out {
        match d.record {
            Record::Message(m) => messages.push((m.scope.conversation_id, m.id)),
            Record::Entry(e) => entries.push((e.provenance.conversation_id, e.id)),
        }
    }
    (messages, entries)
}

async fn export_with(app: &TestApp, filter: Value) -> Vec<u8> {
    let id = app.submit(EXPORTS, &json!({"filter": filter})).await.id;
    let op = app.wait_terminal(&id).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(op.total, op.processed, "a filtered export's total is what it wrote: {op:?}");
    download(app, op.artifact_ref.as_deref().unwrap(), 1 << 20).await
}

fn at(conversation: &str, id: &str, agent: Option<&str>, created_at_ms: i64) -> ConversationRecord {
    let mut m = ConversationRecord { created_at_ms, ..message(conversation, id, "user", id) };
    m.scope.agent_id = agent.map(str::to_string);
    m
}

async fn seed(app: &TestApp) {
    app.append_records(&[
        at("alice-1", "a1", Some("alice"), 1_000),
        at("alice-1", "a2", Some("alice"), 2_000),
        at("alice-2", "a3", Some("alice"), 3_000),
        at("bob-1", "b1", Some("bob"), 1_500),
    ])
    .await;
    for (id, conversation) in [("e-alice", "alice-1"), ("e-bob", "bob-1")] {
        let mut e = entry(id, "a fact");
        e["provenance"]["conversationId"] = json!(conversation);
        let (status, body) = app.post(ENTRIES, &json!({"entry": e})).await;
        assert_eq!(status, 200, "{body}");
    }
}

fn pairs(items: &[(&str, &str)]) -> Ids {
    items.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

async fn filters_and_renames(app: TestApp) {
    seed(&app).await;
    // By conversation ids: its messages, and the entries it is the provenance of.
    let one = export_with(&app, json!({"conversationIds": ["alice-1"]})).await;
    assert_eq!(contents(&one), (pairs(&[("alice-1", "a1"), ("alice-1", "a2")]), pairs(&[("alice-1", "e-alice")])));
    // By agent: every conversation listed under it.
    let agent = export_with(&app, json!({"agentId": "alice"})).await;
    let (messages, entries) = contents(&agent);
    assert_eq!(messages, pairs(&[("alice-1", "a1"), ("alice-1", "a2"), ("alice-2", "a3")]));
    assert_eq!(entries, pairs(&[("alice-1", "e-alice")]));
    // By time, [fromMs, toMs), combined with an agent.
    let window = export_with(&app, json!({"agentId": "alice", "fromMs": 1_500, "toMs": 3_000})).await;
    assert_eq!(contents(&window).0, pairs(&[("alice-1", "a2")]));
    // Nothing matches: a valid, empty artifact.
    assert_eq!(contents(&export_with(&app, json!({"conversationIds": ["nobody"]})).await), (vec![], vec![]));
    // Bad filters are 400s, nothing queued.
    for bad in [json!({"fromMs": 5, "toMs": 5}), json!({"agentId": ""}), json!({"surprise": 1})] {
        let (status, body) = app.post(EXPORTS, &json!({"filter": bad})).await;
        assert_api_error(status, &body, 400);
    }

    // Copy alice's data beside the original under a prefix, in the same deployment.
    let copy = upload(&app, &agent, 1 << 20).await;
    let body = json!({"artifactRef": copy, "idempotencyKey": "copy", "conversationIdMap": {"prefix": "copy-"}});
    let op = import(&app, body).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(op.result_json()["messages"], json!({"inserted": 3, "skipped": 0}), "{op:?}");
    let copied: Vec<String> = page_all(&app, "copy-alice-1").await.iter().map(|m| m["id"].to_string()).collect();
    assert_eq!(copied, ["\"a1\"", "\"a2\""]);
    assert_eq!(page_all(&app, "copy-alice-2").await[0]["scope"]["agentId"], "alice");
    assert_eq!(page_all(&app, "alice-1").await.len(), 2, "the original is untouched");

    // Move one conversation into a fresh deployment under an explicit new id.
    let other = small_config(app.backend).await;
    let moved = upload(&other, &one, 1 << 20).await;
    let map = json!({"map": {"alice-1": "archive/alice"}});
    let op = import(&other, json!({"artifactRef": moved, "idempotencyKey": "m", "conversationIdMap": map})).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(page_all(&other, "archive/alice").await.len(), 2);
    let (status, e) = other.post("/internal/v1/context/entries/get", &json!({"entryId": "e-alice"})).await;
    assert_eq!((status, &e["provenance"]["conversationId"]), (200, &json!("archive/alice")), "{e}");

    // A rename that makes an id too long fails validation, before anything is written.
    let too_long = json!({"prefix": "p".repeat(185)});
    let op =
        import(&other, json!({"artifactRef": moved, "idempotencyKey": "long", "conversationIdMap": too_long})).await;
    assert_eq!(
        (op.state, op.error_code.as_deref()),
        (ContextOperationState::Failed, Some("artifact_bad_line")),
        "{op:?}"
    );
    assert_eq!(op.processed, 0, "{op:?}");
    // Inline records are renamed at submission, and refused there when a rename is bad.
    let inline = json!({"messages": [message("x", "i1", "user", "hi")], "idempotencyKey": "in",
                        "conversationIdMap": {"map": {"x": "y"}}});
    let op = import(&other, inline).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(page_all(&other, "y").await.len(), 1);
    assert!(page_all(&other, "x").await.is_empty());
    let bad = json!({"messages": [message("x", "i2", "user", "hi")], "idempotencyKey": "in2",
                     "conversationIdMap": {"prefix": "p".repeat(191)}});
    let (status, body) = other.post(super::IMPORTS, &bad).await;
    assert_api_error(status, &body, 400);
    let (status, body) = other
        .post(super::IMPORTS, &json!({"artifactRef": moved, "idempotencyKey": "e", "conversationIdMap": {}}))
        .await;
    assert_api_error(status, &body, 400);
    other.stop().await;
    app.stop().await;
}

backend_tests!(start = small_config; filters_and_renames);
