//! The operation gauges of a process count what its database holds. In a process of its
//! own, so the gauges are this database's alone (in-process test apps share one metrics
//! recorder, and every app's dispatcher would overwrite them).

use std::time::Duration;

use crate::harness::db::with_pool;
use context_jobs::contract::ContextOperationState;
use context_ops::store::now_ms;

use super::{HEALTHY_WITHIN, LEASE_SECS};
use crate::harness::fixture::Fixture;
use crate::harness::wait::poll_until;
use crate::harness::{Backend, prometheus};

/// A sample the `/metrics` page must show: name, labels, value.
type Expected<'a> = (&'a str, &'a [(&'a str, &'a str)], f64);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gauges_count_what_the_database_holds() {
    let fx = Fixture::new(Backend::Sqlite, LEASE_SECS).await;
    for conversation in ["g1", "g2", "g3", "done"] {
        fx.seed(conversation, 10).await;
    }

    // Three operations queued by an API-only process, then parked an hour ahead (as a
    // backed-off retry would be) so the serving process below leaves them queued.
    let mut api = fx.env.spawn("api", "api");
    api.wait_healthy(HEALTHY_WITHIN).await;
    let mut parked = Vec::new();
    for conversation in ["g1", "g2", "g3"] {
        parked.push(api.api.submit_delete(conversation).await.id);
    }
    // Pauses made through that process show on the other's gauges: they come from the database.
    let (status, _) = api.api.post("/internal/v1/context/queues/export/pause", &serde_json::json!({})).await;
    assert_eq!(status, 200);
    let (status, _) =
        api.api.post("/internal/v1/context/queues/import/pause", &serde_json::json!({"tenant": "x/y"})).await;
    assert_eq!(status, 200);
    api.proc.kill();
    with_pool!(&fx.db, pool => {
        sqlx::query("UPDATE operations SET not_before_ms = $1 WHERE state = 'queued'")
            .bind(now_ms() + 3_600_000)
            .execute(pool)
            .await
            .unwrap();
    });
    let oldest = fx.operation(&parked[0]).await.created_at_ms;

    let mut serve = fx.env.spawn("serve", "serve");
    serve.wait_healthy(HEALTHY_WITHIN).await;
    let id = serve.api.submit_delete("done").await.id;
    let done = serve.api.wait_until(&id, Duration::from_secs(30), "finished", |op| op.state.is_terminal()).await;
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");

    let ops = "context_ops_operations";
    let paused = "context_ops_queue_paused";
    let expected: [Expected; 8] = [
        (ops, &[("kind", "delete"), ("state", "queued")], 3.0),
        (ops, &[("kind", "delete"), ("state", "succeeded")], 1.0),
        (ops, &[("kind", "delete"), ("state", "running")], 0.0),
        (ops, &[("kind", "export"), ("state", "queued")], 0.0),
        ("context_ops_oldest_queued_timestamp_seconds", &[], oldest as f64 / 1000.0),
        (paused, &[("kind", "export")], 1.0),
        (paused, &[("kind", "delete")], 0.0),
        ("context_ops_queue_paused_tenants", &[("kind", "import")], 1.0),
    ];
    // The dispatcher refreshes the gauges every round (200 ms here).
    let page = poll_until(&format!("gauges matching {expected:?}"), Duration::from_secs(10), || async {
        let page = serve.api.metrics().await;
        let matches = expected.iter().all(|(name, labels, value)| {
            prometheus::sample(&page, name, labels).is_some_and(|v| (v - value).abs() < 1e-3)
        });
        if matches {
            return Ok(page);
        }
        let lines: Vec<&str> = page
            .lines()
            .filter(|l| l.contains("context_ops_operations{") || l.contains("oldest") || l.contains("paused"))
            .collect();
        Err(lines.join("\n"))
    })
    .await;
    for status in ["pending", "scheduled", "inflight", "dead"] {
        let labels = [("kind", "delete"), ("status", status)];
        assert!(prometheus::sample(&page, "context_ops_queue_depth", &labels).is_some(), "no queue depth {labels:?}");
    }
    for id in &parked {
        let op = serve.api.operation(id).await;
        assert_eq!(op.state, ContextOperationState::Queued, "a parked operation ran: {op:?}");
    }
}
