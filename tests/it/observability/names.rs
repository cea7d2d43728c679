//! Every metric the dashboard and the alert rules query is one a live `serve` exports, with
//! the label values they select: a child process (a recorder of its own) after real traffic
//! — appends, a delete, an inference turn the fake provider first answers 429 — scraped once
//! the dispatcher's gauges count it. A renamed metric or label value fails here, not on an
//! operator's empty panel or silent alert.

use std::collections::HashSet;
use std::time::Duration;

use context_jobs::contract::{ContextOperationState, INFERENCE_PATH};
use serde_json::json;

use super::{ALERTS, DASHBOARD, Selector, dashboard, read, selectors};
use crate::harness::fake_responses::{FakeProvider, Step, completed_text};
use crate::harness::fixture::Fixture;
use crate::harness::wait::poll_until;
use crate::harness::{Backend, message, prometheus};

const PROVIDER_REQUESTS: &str = "context_ops_inference_provider_requests_total";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_alerts_query_only_what_a_live_serve_exports() {
    let fx = Fixture::new(Backend::Sqlite, 15).await;
    let limited = Step::status(429, json!({"error": {"code": "rate_limit_exceeded", "message": "slow down"}}))
        .header("retry-after-ms", "50");
    let fake = FakeProvider::start(vec![limited, Step::ok(completed_text("fine"))]).await;
    let env = [
        ("RESPONSES_BASE_URL", fake.url.as_str()),
        ("RESPONSES_API_KEY", "sk-test-observability"),
        ("RESPONSES_MAX_ATTEMPTS", "3"),
    ];
    let mut serve = fx.env.spawn_with("serve", "serve", &env);
    serve.wait_healthy(Duration::from_secs(30)).await;
    let api = &serve.api;

    api.append_records(&[message("c", "m1", "user", "hello"), message("c", "m2", "user", "again")]).await;
    let delete = api.submit_delete("c").await.id;
    let turn =
        api.submit(INFERENCE_PATH, &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})).await;
    for id in [&delete, &turn.id] {
        let op = api.wait_terminal(id).await;
        assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    }
    assert_eq!(fake.received().len(), 2, "a 429, then the reply");
    // The gauges are the dispatcher's, refreshed on its own schedule.
    let page = poll_until("the operations gauge counts both operations", Duration::from_secs(30), || async {
        let page = api.metrics().await;
        match prometheus::sample(&page, "context_ops_operations", &[("state", "succeeded")]) {
            Some(2.0) => Ok(page),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // A 429 is a status class of its own (the provider alert selects it), not a 4xx.
    assert_eq!(prometheus::sample(&page, PROVIDER_REQUESTS, &[("status_class", "429")]), Some(1.0), "{page}");
    assert_eq!(prometheus::sample(&page, PROVIDER_REQUESTS, &[("status_class", "2xx")]), Some(1.0));
    assert_eq!(prometheus::sample(&page, PROVIDER_REQUESTS, &[("status_class", "4xx")]), None);

    let samples: HashSet<&str> =
        page.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split(['{', ' ']).next()).collect();
    let families: HashSet<&str> =
        page.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split(' ').next()).collect();
    let exported = |sel: &Selector| {
        samples.contains(sel.metric.as_str())
            && sel.equals.iter().all(|(l, v)| prometheus::sample(&page, &sel.metric, &[(l, v)]).is_some())
    };

    // Queries: a sample of that exact name (a histogram's `_bucket`, not its family name)
    // and of every fixed label value.
    let board = dashboard::board();
    let mut queried = 0;
    for expr in dashboard::expressions(&board) {
        for sel in selectors(&expr) {
            assert!(exported(&sel), "{DASHBOARD} queries {sel:?}, which serve does not export:\n{expr}");
            queried += 1;
        }
    }
    let rules = read(ALERTS);
    let exprs: Vec<&str> = rules.split("expr:").skip(1).map(|e| e.split("\n        for:").next().unwrap()).collect();
    assert_eq!(exprs.len(), 8, "one expression per rule");
    for expr in exprs {
        for sel in selectors(expr) {
            assert!(exported(&sel), "{ALERTS} queries {sel:?}, which serve does not export:\n{expr}");
            queried += 1;
        }
    }
    assert!(queried >= 40, "{queried} selectors checked");
    // Prose (descriptions, comments) may name a histogram by its family.
    for text in [read(DASHBOARD), rules] {
        for sel in selectors(&text) {
            let name = sel.metric.as_str();
            assert!(samples.contains(name) || families.contains(name), "{name} is not a metric serve exports");
        }
    }
}
