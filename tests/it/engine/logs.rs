//! The log says what operations did, once each: one info line when an operation starts and
//! one when it finishes (kind, id, outcome, duration, processed), none per batch.

use std::time::Duration;

use context_jobs::contract::ContextOperationState;
use serde_json::Value;

use super::{engine_service, seed};
use crate::harness::Backend;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_info_line_per_operation_start_and_finish() {
    // Small batches: a per-batch line would show up 5 times.
    let env = [("CONTEXT_OPS_LOG_JSON", "true"), ("CONTEXT_OPS_BATCH_SIZE", "100")];
    let (_fx, mut serve) = engine_service(Backend::Sqlite, &env).await;
    seed(&serve.api, "c-a", 500).await;
    let id = serve.api.submit_delete("c-a").await.id;
    let done = serve.api.wait_until(&id, Duration::from_secs(60), "finished", |op| op.state.is_terminal()).await;
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    serve.proc.kill();
    let lines: Vec<Value> = serve
        .proc
        .log()
        .lines()
        .filter(|l| l.contains(&id))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .filter(|l: &Value| l["level"] == "INFO")
        .collect();
    let messages: Vec<&str> = lines.iter().map(|l| l["fields"]["message"].as_str().unwrap_or("")).collect();
    assert_eq!(messages, ["operation started", "operation finished"], "{lines:#?}");
    let finish = &lines[1]["fields"];
    assert_eq!(finish["kind"], "delete", "{finish}");
    assert_eq!(finish["outcome"], "succeeded", "{finish}");
    assert_eq!(finish["processed"], 500, "{finish}");
    assert!(finish["duration_ms"].is_u64(), "{finish}");
    assert_eq!(lines[0]["fields"]["kind"], "delete", "{:?}", lines[0]);
}
