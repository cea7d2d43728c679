//! Readiness at start: a process is not ready (`/health/ready`) until it has started
//! everything (`starting`), and an API process loads the recall indexes of its most
//! recently active tenants and is not ready (`recall_indexes`) until they are in memory.

use std::time::{Duration, Instant};

use context_ops::store::query;
use serde_json::{Value, json};

use crate::harness::Backend;
use crate::harness::child::Service;
use crate::harness::fixture::Fixture;
use crate::harness::insights::{import, insight};

const WITHIN: Duration = Duration::from_secs(30);

/// `n` entries of `tenant`, ids `{prefix}-{i}`.
async fn seed(fx: &Fixture, tenant: &str, prefix: &str, n: usize) {
    let entries: Vec<_> =
        (0..n).map(|i| insight(format!("{prefix}-{i}"), json!({"text": format!("fact {i}")}))).collect();
    import(&fx.db, tenant, &entries).await;
}

/// Poll `/health/ready` until it answers 503 with exactly `down` (other reasons, such as
/// `starting`, may show for a moment first); its body. It must not become ready meanwhile.
async fn not_ready(serve: &mut Service, down: Value) -> Value {
    serve.wait_healthy(WITHIN).await;
    let deadline = Instant::now() + WITHIN;
    loop {
        let (status, body) = serve.api.get("/health/ready").await;
        assert_eq!(status, 503, "ready while it should not be: {body}");
        if body["down"] == down {
            return body;
        }
        assert!(Instant::now() < deadline, "never down for {down} alone: {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `log` without its terminal colours.
fn plain(log: &str) -> String {
    let mut out = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|c| c.is_ascii_alphabetic());
        } else {
            out.push(c);
        }
    }
    out
}

async fn loads_recent_tenants_before_ready(backend: Backend) {
    let fx = Fixture::new(backend, 15).await;
    seed(&fx, "acme/one", "a", 300).await;
    seed(&fx, "default/default", "d", 200).await;
    let mut serve = fx.env.spawn_with("serve", "serve", &[("CONTEXT_OPS_RECALL_WARM_TENANTS", "8")]);
    let body = serve.wait_ready(WITHIN).await;
    assert_eq!(body["checks"]["recallIndexes"], "ok", "{body}");
    let log = plain(&serve.proc.log());
    let line =
        log.lines().find(|l| l.contains("recall indexes loaded")).unwrap_or_else(|| panic!("no load logged:\n{log}"));
    assert!(line.contains("tenants=2") && line.contains("entries=500"), "{line}");

    // Off: nothing is loaded at start.
    let mut cold = fx.env.spawn_with("cold", "serve", &[("CONTEXT_OPS_RECALL_WARM_TENANTS", "0")]);
    cold.wait_ready(WITHIN).await;
    assert!(!cold.proc.log().contains("recall indexes loaded"), "{}", cold.proc.log());
}

backend_tests!(backend: loads_recent_tenants_before_ready);

/// While the load cannot finish (the heads table is locked), the process answers 503 with
/// `recall_indexes` down; once the lock goes, it becomes ready by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_while_indexes_load() {
    let fx = Fixture::new(Backend::Postgres, 15).await;
    seed(&fx, "acme/one", "a", 50).await;
    let mut lock = fx.db.begin_write().await.unwrap();
    query("LOCK TABLE context_entry_heads IN ACCESS EXCLUSIVE MODE").execute(&mut lock).await.unwrap();

    let mut serve = fx.env.spawn("serve", "serve");
    let body = not_ready(&mut serve, json!(["recall_indexes"])).await;
    assert_eq!(body["status"], 503, "an ApiError: {body}");
    assert!(body["message"].as_str().unwrap().starts_with("not ready: recall indexes loading"), "{body}");
    assert_eq!(body["checks"]["database"], "ok", "{body}");

    drop(lock); // rolls back, releasing the lock
    let body = serve.wait_ready(WITHIN).await;
    assert_eq!(body["down"], json!([]), "{body}");
}

/// The API answers before the workers are announced; until start-up is done the process is
/// not ready (`starting`), so nothing is sent to a process that may still fail to start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_while_starting() {
    let fx = Fixture::new(Backend::Postgres, 15).await;
    let mut lock = fx.db.begin_write().await.unwrap();
    query("LOCK TABLE worker_heartbeats IN ACCESS EXCLUSIVE MODE").execute(&mut lock).await.unwrap();

    let mut serve = fx.env.spawn("serve", "serve");
    let body = not_ready(&mut serve, json!(["starting"])).await;
    assert_eq!(body["message"], "not ready: starting", "{body}");

    drop(lock); // rolls back: the worker is announced and start-up completes
    let body = serve.wait_ready(WITHIN).await;
    assert_eq!(body["down"], json!([]), "{body}");
}
