//! Provider rate limits for inference, shared by every worker (the database embedded, Redis
//! on PostgreSQL): the configured rate paces the calls so a provider enforcing a higher
//! quota never answers 429, and a 429 that does arrive holds the model for everyone for its
//! `retry-after`.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::fake_responses::{FakeProvider, Step, completed_text};
use crate::harness::wait::poll_until;
use crate::harness::{Backend, TestApp};
use context_jobs::contract::{ContextOperationState, INFERENCE_PATH};

/// The service on `backend` calling `fake`, with rate limit rules `rules`.
async fn limited_app(backend: Backend, fake: &FakeProvider, rules: &str) -> TestApp {
    let (url, rules) = (fake.url.clone(), rules.to_string());
    TestApp::start_with(backend, move |c| {
        c.provider.responses_base_url = url;
        c.provider.responses_api_key = Some("sk-test-rate".to_string().into());
        c.scheduler.rate_limits = rules;
        c.worker.worker_concurrency = 4;
    })
    .await
}

fn turn(i: usize) -> serde_json::Value {
    json!({"model": "gpt-test", "messages": [{"role": "user", "content": format!("turn {i}")}]})
}

/// The most requests that arrived within any window of `per`.
fn busiest(arrivals: &[Instant], per: Duration) -> usize {
    (0..arrivals.len())
        .map(|i| arrivals[i..].iter().take_while(|a| a.duration_since(arrivals[i]) < per).count())
        .max()
        .unwrap_or(0)
}

async fn the_configured_rate_keeps_a_fleet_under_the_providers_quota(backend: Backend) {
    const TURNS: usize = 16;
    let fake = FakeProvider::start(Vec::new()).await;
    fake.always(Step::ok(completed_text("ok")));
    // The provider takes 10 requests a second; we allow 4 a second (a burst of 4, then one
    // every 250 ms): at most 7 in any second, whatever the 4 worker slots would do.
    fake.quota(10, Duration::from_secs(1));
    let app = limited_app(backend, &fake, "model=gpt-test rps=4").await;
    let mut ids = Vec::new();
    for i in 0..TURNS {
        ids.push(app.submit(INFERENCE_PATH, &turn(i)).await.id);
    }
    for id in &ids {
        let done = app.wait_terminal(id).await;
        assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    }
    assert_eq!(fake.rejected(), 0, "the provider answered 429 {} times", fake.rejected());
    let arrivals: Vec<Instant> = fake.received().iter().map(|r| r.at).collect();
    assert_eq!(arrivals.len(), TURNS, "one call per turn");
    let in_a_second = busiest(&arrivals, Duration::from_secs(1));
    assert!(in_a_second <= 8, "{in_a_second} calls within one second (limit 4/s with a burst of 4)");
    // 4 at once, then 12 more at 250 ms: three seconds (less scheduling jitter).
    let span = arrivals[TURNS - 1].duration_since(arrivals[0]);
    assert!(span >= Duration::from_millis(2500), "16 calls in {span:?}: not paced");
    let metrics = app.metrics().await;
    assert!(
        metrics.lines().any(|l| l.starts_with("context_ops_rate_limit_waits_total") && !l.ends_with(" 0")),
        "no rate-limit wait counted"
    );
}

async fn a_429_holds_the_model_for_everyone(backend: Backend) {
    let fake = FakeProvider::start(vec![
        Step::status(429, json!({"error": {"message": "slow down"}})).header("retry-after", "1.5"),
    ])
    .await;
    fake.always(Step::ok(completed_text("ok")));
    let app = limited_app(backend, &fake, "").await;
    let first = app.submit(INFERENCE_PATH, &turn(0)).await.id;
    let rejected = fake.wait_requests(1, Duration::from_secs(30)).await[0].at;
    // The hold is recorded once the worker has read the 429 (the fake saw the request
    // earlier; a turn admitted before that could not know of it).
    let state = &app.running().state;
    let limiter = context_ops::ratelimit::RateLimiter::new(
        &state.db,
        state.queue.redis().map(|conn| (conn, state.queue.namespace().to_string())),
        state.scheduling.rate_limits.clone(),
    );
    poll_until("the 429's hold recorded", Duration::from_secs(30), || async {
        match limiter.blocked_until_ms("gpt-test").await {
            Ok(Some(_)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // Submitted after the 429: it waits out the same hold instead of calling at once.
    let second = app.submit(INFERENCE_PATH, &turn(1)).await.id;
    for id in [&first, &second] {
        assert_eq!(app.wait_terminal(id).await.state, ContextOperationState::Succeeded);
    }
    let received = fake.received();
    assert_eq!(received.len(), 3, "the 429, the retry and the second turn");
    for later in &received[1..] {
        let after = later.at.duration_since(rejected);
        assert!(after >= Duration::from_millis(1400), "a call {after:?} after the 429 (retry-after 1.5 s)");
    }
}

/// A turn that used far more tokens than estimated (and than its limit's window) leaves its
/// debt on the limit until the debt is paid: in Redis, the key lives at least that long
/// (it expired after one window and a second, and the next burst was admitted in full).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_settled_debt_outlives_the_window_in_redis() {
    use context_jobs::ids::TenantKey;
    use context_jobs::operation::rate_limit::{keys_for, parse_rules};
    let client = redis::Client::open(crate::harness::app::redis_url()).unwrap();
    let conn = redis::aio::ConnectionManager::new(client).await.unwrap();
    let namespace = format!("settle-test-{}", ulid::Ulid::generate());
    let dir = tempfile::tempdir().unwrap();
    let db = context_ops::store::Db::connect(&crate::harness::fresh_database(Backend::Sqlite, dir.path()).await, 2)
        .await
        .unwrap();
    let rules = parse_rules("model=m tps=2000").unwrap();
    let key = format!("{namespace}:{}", keys_for(&rules, "acme/prod", "m")[0].0);
    let limiter = context_ops::ratelimit::RateLimiter::new(&db, Some((conn.clone(), namespace)), rules);
    let tenant = TenantKey::from_stored("acme/prod");
    let admitted = limiter.admit(&tenant, "m", 1_500).await.unwrap().expect("the first turn fits");
    // 8,500 tokens more than charged: 4.25 s of the limit's time ahead.
    limiter.settle(&admitted, 10_000).await.unwrap();
    let ttl_ms: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut conn.clone()).await.unwrap();
    assert!(ttl_ms > 4_250, "the key expires in {ttl_ms} ms, before its debt of ~4.25 s is paid");
    let wait = limiter.admit(&tenant, "m", 1).await.unwrap().expect_err("the debt holds the next turn");
    assert!(wait > 3_000, "held {wait} ms");
}

backend_tests!(backend: the_configured_rate_keeps_a_fleet_under_the_providers_quota, a_429_holds_the_model_for_everyone);
