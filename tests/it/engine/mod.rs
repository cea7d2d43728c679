//! The operations engine (DESIGN.md §4): transient failures are retried with backoff and
//! give up at the attempt budget (`retries`), duplicate deliveries run an operation once
//! and an undecodable or crash-looping operation ends instead of looping (`deliveries`),
//! and pruning removes old terminal operations only (`pruning`).
//!
//! The tests that assert on a counter (retries, duplicate deliveries) run the service as a
//! child process: the Prometheus recorder is process-wide, so in this test process every
//! concurrent test's operations would move the same counters; a child's `/metrics` counts
//! only what its test did.

use std::time::Duration;

use crate::harness::child::Service;
use crate::harness::fixture::Fixture;
use crate::harness::wait::poll_until;
use crate::harness::{Backend, OpClient, message, prometheus};

mod deliveries;
mod logs;
mod pruning;
mod retries;

/// The service's default lease.
const LEASE_SECS: u64 = 15;

/// `n` messages in `conversation`.
async fn seed(api: &OpClient, conversation: &str, n: usize) {
    let records: Vec<_> =
        (0..n).map(|i| message(conversation, &format!("{conversation}-{i:04}"), "user", "x")).collect();
    api.append_records(&records).await;
}

/// `serve` on a fresh database with extra `env`, healthy.
async fn engine_service(backend: Backend, env: &[(&str, &str)]) -> (Fixture, Service) {
    let fx = Fixture::new(backend, LEASE_SECS).await;
    let mut service = fx.env.spawn_with("serve", "serve", env);
    service.wait_healthy(Duration::from_secs(30)).await;
    (fx, service)
}

/// The value of a counter on `api`'s `/metrics` (0 before it is first counted).
async fn metric(api: &OpClient, name: &str, labels: &[(&str, &str)]) -> f64 {
    prometheus::sample(&api.metrics().await, name, labels).unwrap_or(0.0)
}

async fn wait_metric_at_least(api: &OpClient, name: &str, labels: &[(&str, &str)], at_least: f64) {
    poll_until(&format!("{name}{labels:?} ≥ {at_least}"), Duration::from_secs(10), || async {
        let value = metric(api, name, labels).await;
        if value >= at_least { Ok(()) } else { Err(format!("{value}")) }
    })
    .await;
}
