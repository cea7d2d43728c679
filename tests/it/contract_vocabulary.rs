//! A client built on the contract's own DTOs parses every answer of the contract's paths,
//! whatever kind and state the operation is in: the operation DTOs below mirror
//! `agent-context-contract` 0.2.2 exactly (four kinds, four states; serde rejects any other
//! value), and every other answer is read with the service's contract types, which are the
//! contract's. Retention answers a `DeletionOperation` like delete; `cancelled` reads as
//! `failed` with `errorCode: "cancelled"`; `retention` and `inference` read as `delete` and
//! `import` — on the contract's paths only: the REST forms keep the full vocabulary.

use context_jobs::contract::{
    AppendResponse, CONTEXT_ADVANCED_OPERATIONS_PATH as ADVANCED, CONTEXT_CORRECT_PATH, CONTEXT_EXPIRE_PATH,
    CONTEXT_EXPORT_ARTIFACT_CHUNK_PATH, CONTEXT_EXPORT_ARTIFACT_PATH, CONTEXT_EXPORT_PATH, CONTEXT_IMPORT_PATH,
    CONTEXT_INSIGHT_GET_PATH, CONTEXT_INSIGHTS_PATH, CONTEXT_MERGE_PATH, CONTEXT_OPERATIONS_PATH as OPS,
    CONTEXT_RECALL_PATH, CONVERSATION_DELETE_PATH, CONVERSATIONS_LIST_PATH, ContextExportArtifact,
    ContextExportArtifactChunk, ContextInsight, ContextMaintenanceStatus, ConversationsResponse, INFERENCE_PATH,
    MAINTENANCE_STATUS_PATH, MESSAGES_APPEND_PATH, MESSAGES_PAGE_PATH, MESSAGES_RECENT_PATH, MESSAGES_SEARCH_PATH,
    MessagePage, MessagesResponse, RETENTION_PATH, RecallContextResponse, VECTOR_REBUILD_PATH,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::harness::{TestApp, message};

/// The contract's `ContextOperationKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Delete,
    Export,
    Import,
    RebuildVector,
}

/// The contract's `ContextOperationState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum State {
    Queued,
    Running,
    Succeeded,
    Failed,
}

/// The contract's `ContextOperation`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // read by Debug only: parsing is the point
struct Operation {
    id: String,
    kind: Kind,
    state: State,
    phase: String,
    processed: u64,
    total: u64,
    #[serde(default)]
    artifact_ref: Option<String>,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    error_code: Option<String>,
    created_at_ms: i64,
    updated_at_ms: i64,
    version: u64,
    #[serde(default)]
    next_poll_after_ms: Option<u64>,
}

/// The contract's `DeletionOperation`; its `state` is a string there, read here as a
/// contract state all the same.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct Deletion {
    id: String,
    state: String,
    deleted_messages: u64,
    created_at_ms: i64,
    #[serde(default)]
    next_poll_after_ms: Option<u64>,
    #[serde(default)]
    error_code: Option<String>,
}

/// A contract client: POST a body to a contract path, expect `status`, parse `T`.
async fn call<T: DeserializeOwned>(app: &TestApp, path: &str, body: Value, status: u16) -> T {
    let (got, reply) = app.post(path, &body).await;
    assert_eq!(got, status, "{path}: {reply}");
    serde_json::from_value(reply.clone())
        .unwrap_or_else(|e| panic!("a contract client cannot parse {path}: {e} in {reply}"))
}

async fn deletion(app: &TestApp, path: &str, body: Value) -> Deletion {
    let d: Deletion = call(app, path, body, 202).await;
    serde_json::from_value::<State>(json!(d.state)).unwrap_or_else(|e| panic!("{path}: state {:?}: {e}", d.state));
    d
}

/// The operation as the contract's `POST …/operations` shows it, once terminal.
async fn settled(app: &TestApp, id: &str) -> Operation {
    app.wait_terminal(id).await;
    call(app, OPS, json!({"operationId": id}), 200).await
}

/// The REST form: the full vocabulary.
async fn rest(app: &TestApp, id: &str) -> Value {
    let (status, op) = app.get(&format!("{OPS}/{id}")).await;
    assert_eq!(status, 200, "{op}");
    op
}

fn entry(id: &str, text: &str) -> Value {
    json!({
        "id": id, "kind": "fact", "content": text, "version": 0, "status": "active",
        "provenance": {"conversationId": "c", "messageIds": ["m1"], "observedAtMs": 7},
        "createdAtMs": 0, "updatedAtMs": 0
    })
}

async fn every_contract_path_parses(app: TestApp) {
    let scope = json!({"conversationId": "c", "agentId": "a"});
    let records = [message("c", "m1", "user", "tea please"), message("c", "m2", "assistant", "green tea")];
    let mut records = records.map(|r| serde_json::to_value(r).unwrap());
    records.iter_mut().for_each(|r| r["scope"] = scope.clone());
    let _: AppendResponse = call(&app, MESSAGES_APPEND_PATH, json!({"messages": records}), 200).await;
    let _: MessagesResponse = call(&app, MESSAGES_RECENT_PATH, json!({"scope": scope}), 200).await;
    let _: MessagePage = call(&app, MESSAGES_PAGE_PATH, json!({"scope": scope, "limit": 1}), 200).await;
    let _: MessagesResponse = call(&app, MESSAGES_SEARCH_PATH, json!({"scope": scope, "query": "tea"}), 200).await;
    let listed: ConversationsResponse = call(&app, CONVERSATIONS_LIST_PATH, json!({"agentId": "a"}), 200).await;
    assert_eq!(listed.items.len(), 1);

    for (id, text) in [("e1", "tea is green"), ("e2", "tea is hot"), ("e3", "coffee")] {
        let _: ContextInsight = call(&app, CONTEXT_INSIGHTS_PATH, json!({"entry": entry(id, text)}), 200).await;
    }
    let _: ContextInsight = call(&app, CONTEXT_INSIGHT_GET_PATH, json!({"entryId": "e1"}), 200).await;
    let correct = json!({"entryId": "e1", "expectedVersion": 1, "content": "tea is very green", "reason": "r"});
    let _: ContextInsight = call(&app, CONTEXT_CORRECT_PATH, correct, 200).await;
    let _: ContextInsight =
        call(&app, CONTEXT_EXPIRE_PATH, json!({"entryId": "e3", "expectedVersion": 1, "reason": "r"}), 200).await;
    let merge = json!({"sourceEntryIds": ["e1", "e2"], "mergedEntry": entry("e4", "tea"), "expectedVersions": {}});
    let _: ContextInsight = call(&app, CONTEXT_MERGE_PATH, merge, 200).await;
    let _: RecallContextResponse = call(&app, CONTEXT_RECALL_PATH, json!({"query": "tea"}), 200).await;

    // Every kind, through the contract's paths.
    let export: Operation = call(&app, CONTEXT_EXPORT_PATH, json!({}), 202).await;
    let export = settled(&app, &export.id).await;
    assert_eq!((export.kind, export.state), (Kind::Export, State::Succeeded), "{export:?}");
    let artifact = export.artifact_ref.clone().unwrap();
    let _: ContextExportArtifact = call(&app, CONTEXT_EXPORT_ARTIFACT_PATH, json!({"artifactId": artifact}), 200).await;
    let _: ContextExportArtifactChunk =
        call(&app, CONTEXT_EXPORT_ARTIFACT_CHUNK_PATH, json!({"artifactId": artifact}), 200).await;
    let import: Operation =
        call(&app, CONTEXT_IMPORT_PATH, json!({"artifactRef": artifact, "idempotencyKey": "k"}), 202).await;
    assert_eq!(settled(&app, &import.id).await.kind, Kind::Import);
    let rebuild: Operation = call(&app, VECTOR_REBUILD_PATH, json!({}), 202).await;
    assert_eq!(settled(&app, &rebuild.id).await.kind, Kind::RebuildVector);

    let retention =
        deletion(&app, RETENTION_PATH, json!({"scope": {"conversationId": "c"}, "policy": {"maxMessages": 1}})).await;
    let shown = settled(&app, &retention.id).await;
    assert_eq!((shown.kind, shown.state, shown.processed), (Kind::Delete, State::Succeeded, 1), "{shown:?}");
    assert_eq!(rest(&app, &retention.id).await["kind"], "retention");
    let advanced: Operation =
        call(&app, ADVANCED, json!({"kind": "retention", "request": {"scope": {"conversationId": "c"}}}), 202).await;
    assert_eq!(advanced.kind, Kind::Delete);
    settled(&app, &advanced.id).await;

    // Inference (the provider refuses connections: it fails, which the contract can say).
    let (status, inference) = app.post(INFERENCE_PATH, &json!({"model": "m", "conversationId": "c"})).await;
    assert_eq!((status, inference["kind"].as_str()), (202, Some("inference")), "its own path: full vocabulary");
    let shown = settled(&app, inference["id"].as_str().unwrap()).await;
    assert_eq!(shown.kind, Kind::Import, "{shown:?}");
    let advanced: Operation =
        call(&app, ADVANCED, json!({"kind": "inference", "request": {"model": "m", "conversationId": "c"}}), 202).await;
    settled(&app, &advanced.id).await;

    // Cancelled: `failed` with errorCode `cancelled` on the contract form, also for a
    // deletion and on a replay of its submission.
    let not_yet = json!({"notBeforeMs": context_ops::store::now_ms() + 3_600_000});
    let mut later = json!({"scope": {"conversationId": "c"}});
    merge_into(&mut later, &not_yet);
    let delete = deletion(&app, CONVERSATION_DELETE_PATH, later.clone()).await;
    let mut export_later = json!({});
    merge_into(&mut export_later, &not_yet);
    let queued: Operation = call(&app, CONTEXT_EXPORT_PATH, export_later, 202).await;
    for id in [&delete.id, &queued.id] {
        let (status, cancelled) = app.post(&format!("{OPS}/{id}/cancel"), &json!({})).await;
        assert_eq!((status, cancelled["state"].as_str()), (200, Some("cancelled")), "REST: full vocabulary");
        let shown = settled(&app, id).await;
        assert_eq!((shown.state, shown.error_code.as_deref()), (State::Failed, Some("cancelled")), "{shown:?}");
    }
    let replay = app.request(reqwest::Method::POST, CONVERSATION_DELETE_PATH).header("idempotency-key", "d1");
    let first = crate::harness::read(replay.try_clone().unwrap().json(&later).send().await.unwrap()).await;
    assert_eq!(first.0, 202, "{first:?}");
    let id = first.1["id"].as_str().unwrap().to_string();
    app.post(&format!("{OPS}/{id}/cancel"), &json!({})).await;
    let (status, again) = crate::harness::read(replay.json(&later).send().await.unwrap()).await;
    assert_eq!(status, 202);
    let again: Deletion = serde_json::from_value(again).unwrap();
    assert_eq!(
        (again.id.as_str(), again.state.as_str(), again.error_code.as_deref()),
        (id.as_str(), "failed", Some("cancelled"))
    );

    let _: ContextMaintenanceStatus = call(&app, MAINTENANCE_STATUS_PATH, json!({}), 200).await;
    // The REST listing keeps the full vocabulary.
    let (_, listed) = app.get(&format!("{OPS}?state=cancelled")).await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 3, "{listed}");
    app.stop().await;
}

fn merge_into(into: &mut Value, from: &Value) {
    for (k, v) in from.as_object().unwrap() {
        into[k] = v.clone();
    }
}

/// A provider that refuses connections, tried once: inference fails fast.
async fn no_provider(backend: crate::harness::Backend) -> TestApp {
    TestApp::start_with(backend, |c| {
        c.provider.responses_base_url = "http://127.0.0.1:9".into();
        c.provider.responses_max_attempts = 1;
    })
    .await
}

backend_tests!(start = no_provider; every_contract_path_parses);
