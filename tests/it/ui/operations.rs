//! Operations driven from the dashboard: an export submitted on the Operations page runs
//! to 100 % on its progress bar and its artifact downloads from the browser with exactly the
//! API's bytes; a running delete is cancelled from its page and the UI shows `cancelled`;
//! the list catches up on what changed before its event stream opened.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use context_jobs::artifact::ArtifactDigest;
use context_jobs::contract::{
    CONTEXT_EXPORT_ARTIFACT_CHUNK_PATH as CHUNK, CONVERSATION_DELETE_PATH, ContextOperationState,
};
use serde_json::json;

use super::UiServer;
use crate::harness::{OpClient, OperationExt as _};

/// An artifact's bytes through the API's chunk endpoint, with the digest every chunk states.
async fn api_bytes(api: &OpClient, artifact: &str) -> (Vec<u8>, String) {
    let mut bytes = Vec::new();
    loop {
        let (status, chunk) = api.post(CHUNK, &json!({"artifactId": artifact, "offset": bytes.len()})).await;
        assert_eq!(status, 200, "{chunk}");
        bytes.extend(STANDARD.decode(chunk["dataBase64"].as_str().unwrap()).unwrap());
        if chunk["eof"] == true {
            return (bytes, chunk["digest"].as_str().unwrap().to_string());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_from_the_ui_downloads_the_apis_bytes() {
    let ui = UiServer::start(&[]).await;
    ui.fx.seed("exported", 1500).await;
    let run = ui.scenario("export", &[]).await;
    let id = run.result["operationId"].as_str().expect("the scenario names the export it submitted");
    let api = ui.api();
    let op = api.operation(id).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    assert_eq!(op.result_json()["messages"], 1500, "{op:?}");
    let artifact = op.artifact_ref.as_deref().expect("an export names its artifact");
    let downloaded = std::fs::read(run.work.path().join("artifact.bin")).expect("the browser's download");
    let (bytes, digest) = api_bytes(&api, artifact).await;
    assert_eq!(downloaded.len(), bytes.len(), "the download is as long as the artifact");
    assert!(downloaded == bytes, "the browser downloaded exactly the API's bytes");
    assert_eq!(ArtifactDigest::of(&downloaded), digest, "and they hash to the artifact's digest");
}

/// One message per batch and 50,000 of them: the delete is still running, however fast the
/// machine, when the browser cancels it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_a_running_delete_from_the_ui() {
    const MESSAGES: i64 = 50_000;
    let ui = UiServer::start(&[("CONTEXT_OPS_BATCH_SIZE", "1")]).await;
    ui.fx.seed("slow", MESSAGES).await;
    let api = ui.api();
    let (status, submitted) = api.post(CONVERSATION_DELETE_PATH, &json!({"scope": {"conversationId": "slow"}})).await;
    assert_eq!(status, 202, "{submitted}");
    let id = submitted["id"].as_str().unwrap().to_string();
    let running =
        api.wait_until(&id, Duration::from_secs(30), "running", |op| op.state != ContextOperationState::Queued).await;
    assert_eq!(running.state, ContextOperationState::Running, "{running:?}");
    ui.scenario("cancel_delete", &[("OPERATION_ID", &id)]).await;
    let op = api.operation(&id).await;
    assert_eq!(op.state, ContextOperationState::Cancelled, "{op:?}");
    assert!(op.processed < MESSAGES as u64, "it stopped early: {op:?}");
    assert_eq!(
        ui.fx.messages("slow").await + op.processed as i64,
        MESSAGES,
        "what it reports deleted is exactly what is gone: {op:?}"
    );
}

/// The Operations list catches up when its event stream opens (`tests/ui/list_catch_up.mjs`):
/// an operation created and finished while the page had no stream shows, succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operations_list_catches_up_when_its_stream_opens() {
    let ui = UiServer::start(&[("CONTEXT_OPS_MAX_EVENT_STREAMS", "1")]).await;
    let run = ui.scenario("list_catch_up", &[]).await;
    let id = run.result["operationId"].as_str().expect("the scenario names its delete");
    assert_eq!(ui.api().operation(id).await.state, ContextOperationState::Succeeded);
}
