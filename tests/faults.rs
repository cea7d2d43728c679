//! Fault tests on the real binary: `context-ops` runs as child processes that are killed
//! (SIGKILL), frozen (SIGSTOP/SIGCONT) and left without their Redis, and the operation
//! protocol (DESIGN.md §4) must still end every operation exactly once — the database is
//! the truth, checkpoints commit with their effects, writes are fenced by the lease.
//!
//! Data is seeded with SQL (`generate_series` / a recursive CTE), not over HTTP. Waits use
//! the long-poll endpoint and `/health` with deadlines; the one fixed sleep is explained
//! where it is.

#[path = "support/child.rs"]
mod child;
mod common;
#[path = "support/op_client.rs"]
mod op_client;
#[path = "support/seed_db.rs"]
mod seed_db;

use std::time::{Duration, Instant};

use child::{ServiceEnv, start_redis};
use common::{Backend, fresh_database, redis_url, unique};
use context_ops::db::Db;
use context_ops::store::now_ms;
use context_ops::with_pool;
use op_client::{get_operation, is_terminal, mid_run, processed, state, submit_delete, try_wait_until, wait_until};
use serde_json::json;

const LEASE_SECS: u64 = 3;
const TENANT: &str = "default/default";

// ---------------------------------------------------------------------------------------
// Direct database access (seeding and checks)
// ---------------------------------------------------------------------------------------

struct TestDb(Db);

macro_rules! on_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        with_pool!(&$db.0, $pool => $body)
    };
}

/// The columns of an operation row the tests look at.
#[derive(Debug, Clone, sqlx::FromRow)]
struct OpRow {
    state: String,
    processed: i64,
    version: i64,
    attempt: i64,
    lease_expires_at_ms: Option<i64>,
    pushed_at_ms: Option<i64>,
}

impl TestDb {
    async fn connect(url: &str) -> TestDb {
        TestDb(Db::connect(url, 2).await.unwrap())
    }

    async fn seed(&self, conversation: &str, n: i64) {
        seed_db::seed_conversation(&self.0, TENANT, conversation, n).await;
    }

    async fn messages(&self, conversation: &str) -> i64 {
        seed_db::message_count(&self.0, TENANT, conversation).await
    }

    async fn conversation_count(&self, conversation: &str) -> Option<i64> {
        seed_db::conversation_count(&self.0, TENANT, conversation).await
    }

    async fn operation(&self, id: &str) -> OpRow {
        on_pool!(self, pool => {
            sqlx::query_as::<_, OpRow>(
                "SELECT state, processed, version, attempt, lease_expires_at_ms, pushed_at_ms FROM operations WHERE id = $1",
            )
            .bind(id)
            .fetch_one(pool)
            .await
            .unwrap()
        })
    }

    async fn states(&self) -> Vec<(String, i64, i64)> {
        on_pool!(self, pool => {
            sqlx::query_as::<_, (String, i64, i64)>(
                "SELECT state, COUNT(*), COUNT(pushed_at_ms) FROM operations GROUP BY state ORDER BY state",
            )
            .fetch_all(pool)
            .await
            .unwrap()
        })
    }

    /// PostgreSQL sessions of this database that are not idle, for a diagnosis.
    async fn pg_activity(&self) -> String {
        let Db::Postgres(pool) = &self.0 else {
            return String::new();
        };
        let rows: Vec<String> = sqlx::query_scalar(
            "SELECT concat_ws(' | ', state, wait_event_type, wait_event, left(query, 120)) \
             FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'",
        )
        .fetch_all(pool)
        .await
        .unwrap_or_default();
        rows.join("\n")
    }
}

// ---------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------
// Fixture
// ---------------------------------------------------------------------------------------

struct Fixture {
    env: ServiceEnv,
    db: TestDb,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Fixture {
    /// A fresh, migrated database; PostgreSQL fixtures use `redis` (default: the shared one).
    async fn new(backend: Backend, redis: Option<String>) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let database_url = fresh_database(backend, dir.path()).await;
        let redis_url = match backend {
            Backend::Postgres => Some(redis.unwrap_or_else(redis_url)),
            Backend::Sqlite => None,
        };
        let env = ServiceEnv {
            database_url: database_url.clone(),
            redis_url,
            namespace: unique("faults"),
            lease_secs: LEASE_SECS,
            dir: dir.path().to_path_buf(),
        };
        let migrate = env.clone();
        tokio::task::spawn_blocking(move || migrate.migrate()).await.unwrap();
        let db = TestDb::connect(&database_url).await;
        Fixture { env, db, client: reqwest::Client::new(), _dir: dir }
    }
}

const HEALTHY_WITHIN: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------
// 1. SIGKILL in the middle of a delete: the restarted binary resumes from the checkpoint
// ---------------------------------------------------------------------------------------

async fn sigkill_mid_delete_resumes_exactly(backend: Backend) {
    const TOTAL: i64 = 200_000;
    const OTHER: i64 = 1_000;
    let fx = Fixture::new(backend, None).await;
    fx.db.seed("big", TOTAL).await;
    fx.db.seed("other", OTHER).await;

    let mut a = fx.env.spawn("serve-a", "serve");
    a.wait_healthy(&fx.client, HEALTHY_WITHIN).await;
    let id = submit_delete(&fx.client, &a.base, "big").await;
    let seen = wait_until(&fx.client, &a.base, &id, Duration::from_secs(60), "running", mid_run).await;
    assert_eq!(state(&seen), "running", "the delete ended before it could be killed: {seen}");

    a.proc.kill();
    let killed = Instant::now();
    let at_kill = fx.db.operation(&id).await;
    assert_eq!(at_kill.state, "running", "the delete finished before SIGKILL landed: {at_kill:?}");
    assert!(at_kill.processed > 0 && at_kill.processed < TOTAL, "killed outside the middle: {at_kill:?}");
    // The checkpoint and the deletions commit together: exactly `processed` are gone.
    assert_eq!(fx.db.messages("big").await, TOTAL - at_kill.processed, "checkpoint and effect diverged at the kill");
    assert_eq!(fx.db.conversation_count("big").await, Some(TOTAL - at_kill.processed));

    let restarted = Instant::now();
    let mut b = fx.env.spawn("serve-b", "serve");
    b.wait_healthy(&fx.client, HEALTHY_WITHIN).await;
    let healthy_after = restarted.elapsed();
    // The dead process cannot write, so the first version change is the new claim.
    let again = wait_until(&fx.client, &b.base, &id, Duration::from_secs(60), "claimed again", |op| {
        op["version"].as_i64() != Some(at_kill.version)
    })
    .await;
    let running_again = restarted.elapsed();
    let since_kill = killed.elapsed();
    let reclaimed = fx.db.operation(&id).await;
    assert!(reclaimed.attempt >= 2, "a version change that is not a new claim: {reclaimed:?} / {again}");
    println!(
        "[{backend:?}] SIGKILL at {}/{TOTAL}; restart -> healthy {:.2}s, restart -> running again {:.2}s \
         (kill -> running again {:.2}s, lease {LEASE_SECS}s)",
        at_kill.processed,
        healthy_after.as_secs_f64(),
        running_again.as_secs_f64(),
        since_kill.as_secs_f64(),
    );
    // Orphan recovery is the dispatcher's job: lease expiry plus a round, not the queue's
    // own 30 s orphan timeout (which is what a lost recovery would fall back to).
    assert!(
        since_kill < Duration::from_secs(LEASE_SECS + 5) + healthy_after,
        "running again only {since_kill:?} after the kill (pushed_at_ms at the kill: {:?})",
        at_kill.pushed_at_ms
    );

    let done = wait_until(&fx.client, &b.base, &id, Duration::from_secs(120), "finished", is_terminal).await;
    assert_eq!(state(&done), "succeeded", "{done}");
    assert_eq!(done["result"]["deletedMessages"], json!(TOTAL), "{done}");
    assert_eq!(processed(&done), TOTAL, "{done}");
    assert_eq!(fx.db.messages("big").await, 0);
    assert_eq!(fx.db.conversation_count("big").await, None, "the conversation row goes with the last batch");
    assert_eq!(fx.db.messages("other").await, OTHER);
    assert_eq!(fx.db.conversation_count("other").await, Some(OTHER));
    let row = fx.db.operation(&id).await;
    assert_eq!(row.state, "succeeded");
    assert!(row.attempt >= 2, "attempt {} after a SIGKILL", row.attempt);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_delete_resumes_exactly_sqlite() {
    sigkill_mid_delete_resumes_exactly(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_delete_resumes_exactly_postgres() {
    sigkill_mid_delete_resumes_exactly(Backend::Postgres).await;
}

// ---------------------------------------------------------------------------------------
// 2. A frozen worker is fenced: when it wakes, its writes do not land
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_worker_is_fenced() {
    const TOTAL: i64 = 100_000;
    let fx = Fixture::new(Backend::Postgres, None).await;
    fx.db.seed("big", TOTAL).await;

    let mut a = fx.env.spawn("serve-a", "serve");
    a.wait_healthy(&fx.client, HEALTHY_WITHIN).await;
    let id = submit_delete(&fx.client, &a.base, "big").await;
    wait_until(&fx.client, &a.base, &id, Duration::from_secs(60), "running", mid_run).await;
    // Frozen first, then B starts: B's start-up must not race the rest of A's delete.
    a.proc.signal("STOP");
    let stopped = Instant::now();
    let at_stop = fx.db.operation(&id).await;
    assert_eq!(at_stop.state, "running", "the delete finished before A was frozen: {at_stop:?}");
    assert_eq!(at_stop.attempt, 1, "A holds the first attempt: {at_stop:?}");
    let mut b = fx.env.spawn("serve-b", "serve");
    b.wait_healthy(&fx.client, HEALTHY_WITHIN).await;

    // B takes over once A's lease expires, while A is still frozen.
    let done = match try_wait_until(&fx.client, &b.base, &id, Duration::from_secs(60), is_terminal).await {
        Ok(done) => done,
        Err(last) => panic!(
            "B did not finish the operation while A was frozen; last seen {last}\nPostgreSQL sessions:\n{}",
            fx.db.pg_activity().await
        ),
    };
    let takeover = stopped.elapsed();
    assert_eq!(state(&done), "succeeded", "{done}");
    assert_eq!(processed(&done), TOTAL, "{done}");
    let before = fx.db.operation(&id).await;
    assert!(before.attempt >= 2, "B must have claimed it: {before:?}");

    a.proc.signal("CONT");
    a.wait_healthy(&fx.client, HEALTHY_WITHIN).await;
    // The one fixed wait: A's stale attempt ends with writes that must *not* happen, and
    // there is no event to wait for when nothing happens. Two lease periods cover A's
    // in-flight batch, its next heartbeat tick (every lease/3) and its finish attempt.
    tokio::time::sleep(Duration::from_secs(2 * LEASE_SECS)).await;

    let after = get_operation(&fx.client, &b.base, &id).await;
    let row = fx.db.operation(&id).await;
    assert_eq!(state(&after), "succeeded", "{after}");
    assert_eq!(processed(&after), TOTAL, "{after}");
    assert_eq!(after["version"], done["version"], "A wrote after it was fenced: {after}");
    assert_eq!(row.version, before.version, "A wrote after it was fenced: {row:?}");
    assert_eq!(fx.db.messages("big").await, 0);
    // A did try: its resumed batch (or, if PostgreSQL ended its frozen transaction, its
    // retry bookkeeping) hit the fence and was refused.
    let fenced = a.proc.log().lines().filter(|l| l.contains("lost the lease")).count();
    assert!(fenced >= 1, "A never reached the fence after SIGCONT:\n{}", a.proc.log_tail(30));
    println!(
        "A frozen at {}/{TOTAL}; B finished {:.2}s later (lease {LEASE_SECS}s); A logged {fenced} fenced write(s) after SIGCONT",
        at_stop.processed,
        takeover.as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------
// 3. How fast an orphan is running again
// ---------------------------------------------------------------------------------------

/// A standby process is already up when the holder is SIGKILLed, so the figure is the
/// protocol's own recovery time (lease expiry + dispatcher round + delivery + claim), not
/// process start-up (`sigkill_mid_delete_resumes_exactly` prints restart times).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_recovery_time() {
    const TOTAL: i64 = 200_000;
    let fx = Fixture::new(Backend::Sqlite, None).await;
    fx.db.seed("big", TOTAL).await;

    let mut a = fx.env.spawn("serve-a", "serve");
    a.wait_healthy(&fx.client, HEALTHY_WITHIN).await;
    let id = submit_delete(&fx.client, &a.base, "big").await;
    wait_until(&fx.client, &a.base, &id, Duration::from_secs(60), "running", mid_run).await;
    let mut b = fx.env.spawn("serve-b", "serve");
    b.wait_healthy(&fx.client, HEALTHY_WITHIN).await;

    a.proc.kill();
    let killed = Instant::now();
    let killed_ms = now_ms();
    let at_kill = fx.db.operation(&id).await;
    assert_eq!(at_kill.state, "running", "the delete finished before SIGKILL landed: {at_kill:?}");
    let lease_left_ms = at_kill.lease_expires_at_ms.unwrap_or(killed_ms) - killed_ms;

    wait_until(&fx.client, &b.base, &id, Duration::from_secs(60), "claimed again", |op| {
        op["version"].as_i64() != Some(at_kill.version)
    })
    .await;
    let recovery = killed.elapsed();
    assert!(fx.db.operation(&id).await.attempt >= 2);
    println!(
        "orphan recovery (SQLite): SIGKILL -> running again {:.2}s (lease {LEASE_SECS}s, {:.2}s of it left at the kill)",
        recovery.as_secs_f64(),
        lease_left_ms as f64 / 1000.0
    );
    assert!(
        recovery < Duration::from_secs(LEASE_SECS + 5),
        "orphan took {recovery:?} to run again (lease {LEASE_SECS}s; pushed_at_ms at the kill: {:?})",
        at_kill.pushed_at_ms
    );

    let done = wait_until(&fx.client, &b.base, &id, Duration::from_secs(120), "finished", is_terminal).await;
    assert_eq!(state(&done), "succeeded", "{done}");
    assert_eq!(processed(&done), TOTAL, "{done}");
    assert_eq!(fx.db.messages("big").await, 0);
}

// ---------------------------------------------------------------------------------------
// 4. A Redis restart (no persistence) loses queue messages, never operations
// ---------------------------------------------------------------------------------------

/// A private Redis so the shared one is untouched. The worker is frozen while the 20
/// operations are submitted and Redis is killed and restarted empty, so every message is
/// lost and every operation must come back through the dispatcher's re-push; the worker and
/// the API both live through the restart on their existing connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_loses_no_operation() {
    const CONVERSATIONS: usize = 20;
    const EACH: i64 = 100;
    let redis_dir = tempfile::tempdir().unwrap();
    let port = child::free_port();
    let mut redis = start_redis(redis_dir.path(), "redis-1", port);
    let fx = Fixture::new(Backend::Postgres, Some(format!("redis://127.0.0.1:{port}"))).await;
    let names: Vec<String> = (0..CONVERSATIONS).map(|i| format!("c{i:02}")).collect();
    for name in &names {
        fx.db.seed(name, EACH).await;
    }

    let mut api = fx.env.spawn("api", "api");
    api.wait_healthy(&fx.client, HEALTHY_WITHIN).await;
    let mut worker = fx.env.spawn("worker", "worker");
    // The worker has no listener; wait until it has started (its log says so).
    let deadline = Instant::now() + HEALTHY_WITHIN;
    while !worker.proc.log().contains("workers started") {
        worker.proc.assert_alive();
        assert!(Instant::now() < deadline, "worker did not start: {}", worker.proc.log_tail(30));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    worker.proc.signal("STOP");

    let mut ids = Vec::new();
    for name in &names {
        ids.push(submit_delete(&fx.client, &api.base, name).await);
    }
    let submitted = Instant::now();
    assert_eq!(fx.db.states().await, vec![("queued".to_string(), CONVERSATIONS as i64, CONVERSATIONS as i64)]);

    redis.kill();
    redis = start_redis(redis_dir.path(), "redis-2", port);
    worker.proc.signal("CONT");

    for (id, name) in ids.iter().zip(&names) {
        let done = wait_until(&fx.client, &api.base, id, Duration::from_secs(120), "finished", is_terminal).await;
        assert_eq!(state(&done), "succeeded", "{name}: {done}");
        assert_eq!(done["result"]["deletedMessages"], json!(EACH), "{name}: {done}");
        assert_eq!(fx.db.messages(name).await, 0, "{name}");
    }
    let restarts = worker.proc.log().lines().filter(|l| l.contains("restarting")).count();
    println!(
        "all {CONVERSATIONS} operations succeeded {:.1}s after submission across a Redis restart \
         (queue-worker restarts in the worker process: {restarts})",
        submitted.elapsed().as_secs_f64()
    );
    worker.proc.assert_alive();
    api.proc.assert_alive();
    drop(redis);
}
