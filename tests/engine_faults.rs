//! The operations engine on the real binary (DESIGN.md §4, §6): a SIGTERM mid-operation
//! releases it at the next batch boundary (no lease to wait out, the attempt not counted)
//! and a new process resumes it from the checkpoint; the operation gauges of a process
//! count what its database holds.
//!
//! Child processes come from `support/child.rs`; data is seeded with SQL through the
//! service's own `Db`. Waits are long-polls and `/health` / `/metrics` polls with deadlines.

#[path = "support/child.rs"]
mod child;
mod common;
#[path = "support/op_client.rs"]
mod op_client;
#[path = "support/prometheus.rs"]
mod prometheus;
#[path = "support/seed_db.rs"]
mod seed_db;

use std::time::{Duration, Instant};

use child::ServiceEnv;
use common::{Backend, fresh_database, redis_url, unique};
use context_ops::db::Db;
use context_ops::store::now_ms;
use context_ops::with_pool;
use op_client::{OPERATIONS_PATH, get_operation, is_terminal, state, submit_delete, wait_until};
use serde_json::json;

/// Long, so that an operation left leased at shutdown would take 15 s to come back: the
/// restart assertion below tells a release from a lease expiry.
const LEASE_SECS: u64 = 15;
const TENANT: &str = "default/default";
const HEALTHY_WITHIN: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------
// Fixture and database access
// ---------------------------------------------------------------------------------------

struct Fixture {
    env: ServiceEnv,
    db: Db,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Fixture {
    async fn new(backend: Backend) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let database_url = fresh_database(backend, dir.path()).await;
        let env = ServiceEnv {
            database_url: database_url.clone(),
            redis_url: (backend == Backend::Postgres).then(redis_url),
            namespace: unique("engine"),
            lease_secs: LEASE_SECS,
            dir: dir.path().to_path_buf(),
        };
        let migrate = env.clone();
        tokio::task::spawn_blocking(move || migrate.migrate()).await.unwrap();
        let db = Db::connect(&database_url, 2).await.unwrap();
        Fixture { env, db, client: reqwest::Client::new(), _dir: dir }
    }

    async fn seed(&self, conversation: &str, n: i64) {
        seed_db::seed_conversation(&self.db, TENANT, conversation, n).await;
    }

    async fn messages(&self, conversation: &str) -> i64 {
        seed_db::message_count(&self.db, TENANT, conversation).await
    }

    async fn conversation_count(&self, conversation: &str) -> Option<i64> {
        seed_db::conversation_count(&self.db, TENANT, conversation).await
    }

    async fn operation(&self, id: &str) -> OpRow {
        with_pool!(&self.db, pool => {
            sqlx::query_as::<_, OpRow>(
                "SELECT state, phase, processed, attempt, version, lease_token, lease_expires_at_ms, created_at_ms \
                 FROM operations WHERE id = $1",
            )
            .bind(id)
            .fetch_one(pool)
            .await
            .unwrap()
        })
    }

    async fn execute(&self, sql: &'static str, bind: i64) {
        with_pool!(&self.db, pool => {
            sqlx::query(sql).bind(bind).execute(pool).await.unwrap();
        });
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
struct OpRow {
    state: String,
    phase: String,
    processed: i64,
    attempt: i64,
    version: i64,
    lease_token: Option<String>,
    lease_expires_at_ms: Option<i64>,
    created_at_ms: i64,
}

// ---------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------
// 1. SIGTERM mid-delete: released at a batch boundary, resumed by the next process
// ---------------------------------------------------------------------------------------

async fn sigterm_releases_and_a_new_process_resumes(backend: Backend) {
    const TOTAL: i64 = 200_000;
    const OTHER: i64 = 100;
    let fx = Fixture::new(backend).await;
    fx.seed("big", TOTAL).await;
    fx.seed("other", OTHER).await;

    let mut a = fx.env.spawn("serve-a", "serve");
    a.wait_healthy(&fx.client, HEALTHY_WITHIN).await;
    let id = submit_delete(&fx.client, &a.base, "big").await;
    let seen = wait_until(&fx.client, &a.base, &id, Duration::from_secs(60), "running", |op| {
        is_terminal(op) || (state(op) == "running" && op["processed"].as_i64() > Some(0))
    })
    .await;
    assert_eq!(state(&seen), "running", "finished before the SIGTERM: {seen}");
    let claimed = fx.operation(&id).await;
    assert_eq!(claimed.attempt, 1, "{claimed:?}");

    a.proc.signal("TERM");
    let signalled = Instant::now();
    let Some(status) = a.proc.wait_exit(Duration::from_secs(30)).await else {
        panic!("serve-a still running 30 s after SIGTERM; log tail:\n{}", a.proc.log_tail(30));
    };
    let exited_after = signalled.elapsed();
    assert!(status.success(), "serve-a exited with {status}; log tail:\n{}", a.proc.log_tail(30));
    assert!(a.proc.log().contains("released at shutdown"), "no release logged:\n{}", a.proc.log_tail(30));

    let released = fx.operation(&id).await;
    assert_eq!(released.state, "queued", "{released:?}");
    assert_eq!(released.lease_token, None, "{released:?}");
    assert_eq!(released.lease_expires_at_ms, None, "{released:?}");
    // `Finish::Release`: back to queued, this attempt not counted — the next claim is
    // attempt 1 again, so a deploy does not eat into the retry budget.
    assert_eq!(released.attempt, claimed.attempt - 1, "a released attempt is not counted: {released:?}");
    assert_eq!(released.phase, "deleting", "{released:?}");
    assert!(released.processed > 0 && released.processed < TOTAL, "released outside the middle: {released:?}");
    // The checkpoint and the deletions committed together: exactly `processed` are gone.
    assert_eq!(fx.messages("big").await, TOTAL - released.processed);
    assert_eq!(fx.conversation_count("big").await, Some(TOTAL - released.processed));

    let restarted = Instant::now();
    let mut b = fx.env.spawn("serve-b", "serve");
    b.wait_healthy(&fx.client, HEALTHY_WITHIN).await;
    let healthy_after = restarted.elapsed();
    // Nothing writes the released row until the new process claims it.
    wait_until(&fx.client, &b.base, &id, Duration::from_secs(30), "claimed again", |op| {
        op["version"].as_i64() != Some(released.version)
    })
    .await;
    let running_again = restarted.elapsed();
    let sigterm_to_running = signalled.elapsed();
    let reclaimed = fx.operation(&id).await;
    assert_eq!(reclaimed.attempt, 1, "{reclaimed:?}");
    println!(
        "[{backend:?}] SIGTERM at {}/{TOTAL}: exit after {:.2}s; restart -> healthy {:.2}s, \
         restart -> running again {:.2}s; SIGTERM -> running again {:.2}s (lease {LEASE_SECS}s)",
        released.processed,
        exited_after.as_secs_f64(),
        healthy_after.as_secs_f64(),
        running_again.as_secs_f64(),
        sigterm_to_running.as_secs_f64(),
    );
    // No lease to wait out: a dispatcher round after start-up, not LEASE_SECS.
    assert!(
        running_again < healthy_after + Duration::from_secs(3),
        "running again {running_again:?} after the restart (healthy after {healthy_after:?})"
    );

    let done = wait_until(&fx.client, &b.base, &id, Duration::from_secs(120), "finished", is_terminal).await;
    assert_eq!(state(&done), "succeeded", "{done}");
    assert_eq!(done["result"]["deletedMessages"], json!(TOTAL), "{done}");
    assert_eq!(done["processed"], json!(TOTAL), "{done}");
    assert_eq!(fx.messages("big").await, 0);
    assert_eq!(fx.conversation_count("big").await, None);
    assert_eq!(fx.messages("other").await, OTHER);
    assert_eq!(fx.operation(&id).await.attempt, 1, "one counted attempt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_and_a_new_process_resumes_sqlite() {
    sigterm_releases_and_a_new_process_resumes(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_and_a_new_process_resumes_postgres() {
    sigterm_releases_and_a_new_process_resumes(Backend::Postgres).await;
}

// ---------------------------------------------------------------------------------------
// 2. Gauges
// ---------------------------------------------------------------------------------------

/// In its own process, so the gauges are this database's alone (in-process test apps share
/// one metrics recorder, and every app's dispatcher would overwrite them).
/// A sample the `/metrics` page must show: name, labels, value.
type Expected<'a> = (&'a str, &'a [(&'a str, &'a str)], f64);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gauges_count_what_the_database_holds() {
    let fx = Fixture::new(Backend::Sqlite).await;
    for conversation in ["g1", "g2", "g3", "done"] {
        fx.seed(conversation, 10).await;
    }

    // Three operations queued by an API-only process, then parked an hour ahead (as a
    // backed-off retry would be) so the serving process below leaves them queued.
    let mut api = fx.env.spawn("api", "api");
    api.wait_healthy(&fx.client, HEALTHY_WITHIN).await;
    let mut parked = Vec::new();
    for conversation in ["g1", "g2", "g3"] {
        parked.push(submit_delete(&fx.client, &api.base, conversation).await);
    }
    api.proc.kill();
    fx.execute("UPDATE operations SET not_before_ms = $1 WHERE state = 'queued'", now_ms() + 3_600_000).await;
    let oldest = fx.operation(&parked[0]).await.created_at_ms;

    let mut serve = fx.env.spawn("serve", "serve");
    serve.wait_healthy(&fx.client, HEALTHY_WITHIN).await;
    let id = submit_delete(&fx.client, &serve.base, "done").await;
    let done = wait_until(&fx.client, &serve.base, &id, Duration::from_secs(30), "finished", is_terminal).await;
    assert_eq!(state(&done), "succeeded", "{done}");

    let ops = "context_ops_operations";
    let expected: [Expected; 5] = [
        (ops, &[("kind", "delete"), ("state", "queued")], 3.0),
        (ops, &[("kind", "delete"), ("state", "succeeded")], 1.0),
        (ops, &[("kind", "delete"), ("state", "running")], 0.0),
        (ops, &[("kind", "export"), ("state", "queued")], 0.0),
        ("context_ops_oldest_queued_timestamp_seconds", &[], oldest as f64 / 1000.0),
    ];
    // The dispatcher refreshes the gauges every round (200 ms here).
    let deadline = Instant::now() + Duration::from_secs(10);
    let page = loop {
        let page = fx.client.get(format!("{}/metrics", serve.base)).send().await.unwrap().text().await.unwrap();
        let matches = expected.iter().all(|(name, labels, value)| {
            prometheus::sample(&page, name, labels).is_some_and(|v| (v - value).abs() < 1e-3)
        });
        if matches {
            break page;
        }
        assert!(
            Instant::now() < deadline,
            "gauges never matched {expected:?}:\n{}",
            page.lines()
                .filter(|l| l.contains("context_ops_operations{") || l.contains("oldest"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for status in ["pending", "scheduled", "inflight", "dead"] {
        let labels = [("kind", "delete"), ("status", status)];
        assert!(prometheus::sample(&page, "context_ops_queue_depth", &labels).is_some(), "no queue depth {labels:?}");
    }
    for id in &parked {
        let op = get_operation(&fx.client, &serve.base, id).await;
        assert_eq!(state(&op), "queued", "a parked operation ran: {op}");
    }
}

// ---------------------------------------------------------------------------------------
// 3. SIGTERM with a long-poll open: answered at once, not after its 30 s
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_open_long_polls() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let fx = Fixture::new(Backend::Sqlite).await;
    // API only: the operation stays queued, so only a timeout or shutdown ends the wait.
    let mut api = fx.env.spawn("api", "api");
    api.wait_healthy(&fx.client, HEALTHY_WITHIN).await;
    let id = submit_delete(&fx.client, &api.base, "nothing").await;

    // A raw connection, so the request is on the wire before the barrier below.
    let mut poll = tokio::net::TcpStream::connect(api.base.trim_start_matches("http://")).await.unwrap();
    let request =
        format!("GET {OPERATIONS_PATH}/{id}/wait?timeoutMs=30000 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    poll.write_all(request.as_bytes()).await.unwrap();
    // Barrier: a later connection answered, so the server has accepted and read ours.
    api.wait_healthy(&fx.client, HEALTHY_WITHIN).await;

    api.proc.signal("TERM");
    let signalled = Instant::now();
    let Some(status) = api.proc.wait_exit(Duration::from_secs(30)).await else {
        panic!("api still running 30 s after SIGTERM");
    };
    let exited_after = signalled.elapsed();
    assert!(status.success(), "api exited with {status}");
    println!("SIGTERM with a 30 s long-poll open: exit after {:.2}s", exited_after.as_secs_f64());
    assert!(exited_after < Duration::from_secs(5), "the open long-poll held the shutdown for {exited_after:?}");
    let mut response = String::new();
    poll.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "long-poll answer: {response}");
    assert!(response.contains("\"state\":\"queued\""), "{response}");
}

// ---------------------------------------------------------------------------------------
// 4. Long-polls wake on changes another process commits (PostgreSQL LISTEN/NOTIFY)
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_polls_wake_on_changes_committed_by_another_process() {
    let fx = Fixture::new(Backend::Postgres).await;
    fx.seed("c", 1).await;
    // Two API-only processes (nothing runs the operation), whose periodic re-read is slowed
    // to 20 s: within the few seconds allowed below, only a notification can answer.
    let slow = [("CONTEXT_OPS_WAIT_RECHECK_MS", "20000")];
    let mut a = fx.env.spawn_with("api-a", "api", &slow);
    let mut b = fx.env.spawn_with("api-b", "api", &slow);
    a.wait_healthy(&fx.client, HEALTHY_WITHIN).await;
    b.wait_healthy(&fx.client, HEALTHY_WITHIN).await;
    let id = submit_delete(&fx.client, &a.base, "c").await;
    let op = get_operation(&fx.client, &a.base, &id).await;
    assert_eq!(state(&op), "queued", "{op}");

    let url = format!("{}{OPERATIONS_PATH}/{id}/wait?sinceVersion={}&timeoutMs=15000", a.base, op["version"]);
    let started = Instant::now();
    let wait = tokio::spawn(fx.client.get(url).timeout(Duration::from_secs(30)).send());
    // The wait parks on `a` for this long before anything changes (the scenario, not a
    // synchronisation): it cannot answer earlier, the operation being unchanged until then.
    let parked = Duration::from_millis(500);
    tokio::time::sleep(parked).await;
    let cancel = fx.client.post(format!("{}{OPERATIONS_PATH}/{id}/cancel", b.base)).send().await.unwrap();
    assert_eq!(cancel.status().as_u16(), 200);
    let cancelled_at = started.elapsed();

    let response = wait.await.unwrap().unwrap();
    let answered_at = started.elapsed();
    assert_eq!(response.status().as_u16(), 200);
    let seen: serde_json::Value = response.json().await.unwrap();
    assert_eq!(state(&seen), "cancelled", "the wait on `a` answered with the change made on `b`: {seen}");
    assert!(answered_at >= parked, "answered before the change ({answered_at:?}): {seen}");
    assert!(
        answered_at < cancelled_at + Duration::from_secs(3),
        "the change on `b` reached the wait on `a` only after {:?} (re-read every 20 s); log:\n{}",
        answered_at - cancelled_at,
        a.proc.log_tail(30)
    );
    a.proc.assert_alive();
    b.proc.assert_alive();
}
