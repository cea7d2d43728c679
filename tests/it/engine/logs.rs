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
    // The finish line is written just after the terminal state commits.
    crate::harness::wait::poll_until("the finish line", Duration::from_secs(10), || {
        let log = serve.proc.log();
        let logged = log.lines().any(|l| l.contains(&id) && l.contains("operation finished"));
        async move { if logged { Ok(()) } else { Err(log) } }
    })
    .await;
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

/// The retention sweep announces itself at startup when a policy turns it on, and only then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retention_sweep_says_so_at_startup_when_on() {
    let on = [("CONTEXT_OPS_RETENTION_SWEEP_SECS", "3600"), ("CONTEXT_OPS_RETENTION_MAX_MESSAGES", "1000")];
    let (_fx, mut serve) = engine_service(Backend::Sqlite, &on).await;
    poll_until_logged(&serve, "workers started").await;
    serve.proc.kill();
    let log = serve.proc.log();
    let line = log.lines().find(|l| l.contains("retention sweep ON")).unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains("1000"), "the policy is in the line: {line}");

    let off = [("CONTEXT_OPS_RETENTION_SWEEP_SECS", "3600")];
    let (_fx, mut serve) = engine_service(Backend::Sqlite, &off).await;
    poll_until_logged(&serve, "workers started").await;
    serve.proc.kill();
    assert!(!serve.proc.log().contains("retention sweep ON"), "{}", serve.proc.log());
}

async fn poll_until_logged(serve: &crate::harness::child::Service, text: &str) {
    crate::harness::wait::poll_until(text, Duration::from_secs(30), || {
        let log = serve.proc.log();
        async move { if log.contains(text) { Ok(()) } else { Err(log) } }
    })
    .await;
}
