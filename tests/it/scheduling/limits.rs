//! Concurrency limits hold across worker processes: two real `context-ops serve` binaries,
//! each with four worker slots, share `CONTEXT_OPS_MAX_RUNNING=delete=3` and
//! `CONTEXT_OPS_MAX_RUNNING_PER_TENANT=delete=2`. Eight deletes (six of tenant a, two of b)
//! never run more than three at once, nor more than two of a's; the ones held back say why
//! (`waiting_for_concurrency`) and start as slots free.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::Backend;
use crate::harness::child::Service;
use crate::harness::db::seed_conversation;
use crate::harness::fixture::Fixture;
use crate::harness::jwt::{JWT_SECRET, tenant_token};
use crate::harness::wait::poll_until;
use context_jobs::contract::{CONTEXT_OPERATIONS_PATH as OPS, CONVERSATION_DELETE_PATH, ContextOperationState};

/// Each delete takes 600 fenced batches of 10, so the held operations wait long enough to
/// be seen (with 60 batches of 100, all eight deletes once ended within 0.3 s on SQLite,
/// before the first poll).
const MESSAGES: i64 = 6_000;

fn spawn(fx: &Fixture, name: &str) -> Service {
    fx.env.spawn_with(
        name,
        "serve",
        &[
            ("CONTEXT_OPS_JWT_SECRET", JWT_SECRET),
            ("CONTEXT_OPS_WORKER_CONCURRENCY", "4"),
            ("CONTEXT_OPS_BATCH_SIZE", "10"),
            ("CONTEXT_OPS_MAX_RUNNING", "delete=3"),
            ("CONTEXT_OPS_MAX_RUNNING_PER_TENANT", "delete=2"),
        ],
    )
}

/// The most intervals `[start, end)` open at one moment.
fn most_at_once(intervals: &[(i64, i64)]) -> usize {
    let mut edges: Vec<(i64, i32)> = intervals.iter().flat_map(|&(s, e)| [(s, 1), (e, -1)]).collect();
    // An end and a start at the same millisecond: the end first (a slot freed, then taken).
    edges.sort();
    let (mut open, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        open += d;
        most = most.max(open);
    }
    most as usize
}

async fn limits_hold_across_two_worker_processes(backend: Backend) {
    let fx = Fixture::new(backend, 15).await;
    let (a, b) = (tenant_token("a"), tenant_token("b"));
    for i in 0..6 {
        seed_conversation(&fx.db, "a/p", &format!("a{i}"), MESSAGES).await;
    }
    for i in 0..2 {
        seed_conversation(&fx.db, "b/p", &format!("b{i}"), MESSAGES).await;
    }
    let mut one = spawn(&fx, "serve-1");
    let mut two = spawn(&fx, "serve-2");
    one.wait_healthy(Duration::from_secs(30)).await;
    two.wait_healthy(Duration::from_secs(30)).await;
    let mut ids = Vec::new();
    for (token, prefix, n) in [(&a, "a", 6), (&b, "b", 2)] {
        let client = one.api.as_caller(token);
        for i in 0..n {
            let body = json!({"scope": {"conversationId": format!("{prefix}{i}")}});
            let (status, op) = client.post(CONVERSATION_DELETE_PATH, &body).await;
            assert_eq!(status, 202, "{op}");
            ids.push((token.clone(), op["id"].as_str().unwrap().to_string()));
        }
    }
    // While a's work is held back by its limit, the held operations say so.
    let client_a = two.api.as_caller(&a);
    let a_ids: Vec<String> = ids.iter().filter(|(t, _)| t == &a).map(|(_, id)| id.clone()).collect();
    poll_until("a held operation says why it waits", Duration::from_secs(30), || async {
        for id in &a_ids {
            let (_, op) = client_a.get(&format!("{OPS}/{id}")).await;
            if op["state"] == "queued" && op["phase"] == "waiting_for_concurrency" {
                return Ok(());
            }
        }
        Err("no queued operation of tenant a in phase waiting_for_concurrency".to_string())
    })
    .await;

    let mut runs: Vec<(String, i64, i64, String)> = Vec::new();
    for (token, id) in &ids {
        let client = one.api.as_caller(token);
        let done = client.wait_terminal(id).await;
        assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
        let (_, op): (u16, Value) = client.get(&format!("{OPS}/{id}")).await;
        let attempt = &op["attempts"][0];
        let (start, end) = (attempt["startedAtMs"].as_i64().unwrap(), attempt["finishedAtMs"].as_i64().unwrap());
        runs.push((op["tenant"].as_str().unwrap_or_default().to_string(), start, end, attempt["worker"].to_string()));
    }
    let all: Vec<(i64, i64)> = runs.iter().map(|r| (r.1, r.2)).collect();
    let of_a: Vec<(i64, i64)> = runs.iter().filter(|r| r.0 == "a/p").map(|r| (r.1, r.2)).collect();
    assert_eq!(of_a.len(), 6, "the view names each operation's tenant: {runs:?}");
    assert!(most_at_once(&all) <= 3, "{} deletes ran at once (limit 3): {runs:?}", most_at_once(&all));
    assert!(most_at_once(&of_a) <= 2, "{} of a's ran at once (limit 2 per tenant): {runs:?}", most_at_once(&of_a));
    assert!(most_at_once(&all) >= 2, "the limit is not one at a time: {runs:?}");
    one.proc.assert_alive();
    two.proc.assert_alive();
}

backend_tests!(backend: limits_hold_across_two_worker_processes);
