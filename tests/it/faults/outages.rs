//! Dependencies going away under a running service: submissions answer within a second
//! whatever Redis does, lost work runs again within seconds of Redis coming back (also
//! when it lost its data), and with PostgreSQL gone every request fails fast while
//! `/health/ready` names the dependency that is down.

use std::time::{Duration, Instant};

use context_jobs::contract::{CONTEXT_OPERATIONS_PATH, ContextOperationState};
use serde_json::Value;

use super::proxy::Proxy;
use super::{HEALTHY_WITHIN, LEASE_SECS};
use crate::harness::child::{Service, free_port, start_redis};
use crate::harness::fixture::Fixture;
use crate::harness::wait::poll_until;
use crate::harness::{Backend, OpClient, read};

/// The repush age is left at its production default (60 s), so nothing here can pass by
/// waiting it out.
const REPUSH_DEFAULT: (&str, &str) = ("CONTEXT_OPS_REPUSH_AFTER_MS", "60000");

/// `GET path` and how long the answer took.
async fn timed_get(api: &OpClient, path: &str) -> (u16, Value, Duration) {
    let started = Instant::now();
    let response = api.client.get(api.url(path)).timeout(Duration::from_secs(30)).send().await.unwrap();
    let (status, body) = read(response).await;
    (status, body, started.elapsed())
}

/// Wait until every operation in `ids` succeeded; how long that took.
async fn all_succeed(service: &Service, ids: &[String], within: Duration) -> Duration {
    let started = Instant::now();
    for id in ids {
        let left = within.saturating_sub(started.elapsed());
        let done = service.api.wait_until(id, left, "succeeded", |op| op.state.is_terminal()).await;
        assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_submissions_answer_fast_and_work_resumes() {
    let redis_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut redis = start_redis(redis_dir.path(), "redis-1", port);
    let fx = Fixture::with_redis(Backend::Postgres, LEASE_SECS, Some(format!("redis://127.0.0.1:{port}"))).await;
    let names: Vec<String> = (0..5).map(|i| format!("c{i}")).collect();
    for name in &names {
        fx.seed(name, 50).await;
    }
    let mut serve = fx.env.spawn_with("serve", "serve", &[REPUSH_DEFAULT]);
    serve.wait_healthy(HEALTHY_WITHIN).await;

    redis.kill();
    let mut ids = Vec::new();
    let mut slowest = Duration::ZERO;
    for name in &names {
        let started = Instant::now();
        ids.push(serve.api.submit_delete(name).await.id);
        slowest = slowest.max(started.elapsed());
    }
    let (status, body, ready_took) = timed_get(&serve.api, "/health/ready").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["down"], serde_json::json!(["queue"]), "{body}");
    assert_eq!((body["status"].as_u64(), body["message"].is_string()), (Some(503), true), "an ApiError: {body}");
    assert!(ready_took < Duration::from_secs(1), "/health/ready took {ready_took:?}");
    let (status, _, live_took) = timed_get(&serve.api, "/health").await;
    assert_eq!(status, 200);
    assert!(slowest < Duration::from_secs(1), "a submission with Redis down took {slowest:?}");
    for id in &ids {
        assert_eq!(serve.api.operation(id).await.state, ContextOperationState::Queued);
    }

    redis = start_redis(redis_dir.path(), "redis-2", port);
    let recovered = all_succeed(&serve, &ids, Duration::from_secs(30)).await;
    println!(
        "Redis down: slowest submission {:.0} ms, /health/ready {:.0} ms, /health {:.1} ms; \
         all {} done {:.2}s after Redis came back",
        slowest.as_secs_f64() * 1e3,
        ready_took.as_secs_f64() * 1e3,
        live_took.as_secs_f64() * 1e3,
        ids.len(),
        recovered.as_secs_f64()
    );
    assert!(recovered < Duration::from_secs(5), "work resumed {recovered:?} after Redis came back");
    serve.proc.assert_alive();
    drop(redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_fails_fast_and_readiness_names_it() {
    let fx = Fixture::new(Backend::Postgres, LEASE_SECS).await;
    let proxy = Proxy::start("127.0.0.1:5432".parse().unwrap()).await;
    let mut env = fx.env.clone();
    env.database_url = env.database_url.replacen("127.0.0.1:5432", &format!("127.0.0.1:{}", proxy.port), 1);
    assert_ne!(env.database_url, fx.env.database_url, "the test PostgreSQL is on 127.0.0.1:5432");
    let acquire = context_ops::config::Config::defaults().database.db_acquire_timeout_ms.to_string();
    let mut serve = env.spawn_with("serve", "serve", &[("CONTEXT_OPS_DB_ACQUIRE_TIMEOUT_MS", acquire.as_str())]);
    let body = serve.wait_ready(HEALTHY_WITHIN).await;
    assert_eq!(body["status"], "ready", "{body}");

    proxy.cut();
    // The port is closed once the aborted accept task has dropped its listener.
    poll_until("the proxy to refuse connections", Duration::from_secs(5), || async {
        match tokio::net::TcpStream::connect(("127.0.0.1", proxy.port)).await {
            Err(_) => Ok(()),
            Ok(_) => Err("still accepting".to_string()),
        }
    })
    .await;
    let (status, body, ready_took) = timed_get(&serve.api, "/health/ready").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["down"], serde_json::json!(["database"]), "{body}");
    assert!(ready_took < Duration::from_secs(1), "/health/ready took {ready_took:?}");
    let (status, _, live_took) = timed_get(&serve.api, "/health").await;
    assert_eq!(status, 200, "liveness does not depend on the database");
    let (status, body, list_took) = timed_get(&serve.api, CONTEXT_OPERATIONS_PATH).await;
    assert_eq!(status, 503, "{body}");
    assert!(list_took < Duration::from_secs(1), "a request with PostgreSQL down took {list_took:?}");
    println!(
        "PostgreSQL down: /health/ready {:.0} ms, /health {:.1} ms, a listing 503 in {:.0} ms",
        ready_took.as_secs_f64() * 1e3,
        live_took.as_secs_f64() * 1e3,
        list_took.as_secs_f64() * 1e3
    );

    proxy.restore().await;
    poll_until("readiness after PostgreSQL is back", Duration::from_secs(10), || {
        let api = serve.api.clone();
        async move {
            let (status, body, _) = timed_get(&api, "/health/ready").await;
            if status == 200 { Ok(()) } else { Err(body.to_string()) }
        }
    })
    .await;
    serve.proc.assert_alive();
}
