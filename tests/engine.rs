//! The operations engine in-process (DESIGN.md §4): transient failures are retried with
//! backoff and give up at the attempt budget, duplicate deliveries run an operation once,
//! an undecodable or crash-looping operation ends instead of looping, and pruning removes
//! old terminal operations only.
//!
//! The transient failure is real: a PostgreSQL session holds row locks the worker's
//! `DELETE` waits on, and the test terminates the worker's backend (`pg_terminate_backend`,
//! SQLSTATE 57P01) once `pg_blocking_pids` shows it waiting.

mod common;
#[path = "support/prometheus.rs"]
mod prometheus;

use std::time::{Duration, Instant};

use common::{Backend, TestApp, assert_api_error, message};
use context_jobs::contract::ContextOperationKind;
use context_ops::config::Command;
use context_ops::store::{leases, now_ms};
use context_ops::with_pool;
use serde_json::{Value, json};
use sqlx::Connection as _;

const DELETE: &str = "/internal/v1/context/conversations/delete";
const OPS: &str = "/internal/v1/context/operations";
const RETRIES: &str = "context_ops_operation_retries_total";
const DUPLICATES: &str = "context_ops_duplicate_deliveries_total";

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

async fn seed(app: &TestApp, conversation: &str, n: usize) {
    let records: Vec<Value> =
        (0..n).map(|i| message(conversation, &format!("{conversation}-{i:04}"), "user", "x")).collect();
    app.append(records).await;
}

async fn submit_delete(app: &TestApp, conversation: &str) -> String {
    let (status, op) = app.post(DELETE, &json!({"scope": {"conversationId": conversation}})).await;
    assert_eq!(status, 202, "{op}");
    op["id"].as_str().unwrap().to_string()
}

async fn get_op(app: &TestApp, id: &str) -> Value {
    let (status, op) = app.get(&format!("{OPS}/{id}")).await;
    assert_eq!(status, 200, "{op}");
    op
}

/// Long-poll until the operation is terminal.
async fn wait_terminal(app: &TestApp, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut op = get_op(app, id).await;
    while !["succeeded", "failed", "cancelled"].contains(&op["state"].as_str().unwrap()) {
        assert!(Instant::now() < deadline, "operation {id} did not finish: {op}");
        let path = format!("{OPS}/{id}/wait?sinceVersion={}&timeoutMs=5000", op["version"]);
        let (status, next) = app.get(&path).await;
        assert_eq!(status, 200, "{next}");
        op = next;
    }
    op
}

/// The stored columns the API does not show.
#[derive(Debug, Clone, sqlx::FromRow)]
struct OpRow {
    state: String,
    phase: String,
    processed: i64,
    attempt: i64,
    error_code: Option<String>,
    error: Option<String>,
    lease_token: Option<String>,
    not_before_ms: i64,
    updated_at_ms: i64,
    version: i64,
}

async fn op_row(app: &TestApp, id: &str) -> OpRow {
    with_pool!(&app.running().state.db, pool => {
        sqlx::query_as::<_, OpRow>(
            "SELECT state, phase, processed, attempt, error_code, error, lease_token, not_before_ms, \
             updated_at_ms, version FROM operations WHERE id = $1",
        )
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
    })
}

/// Poll the row (a worker transition has no long-poll of its own) until `done` holds.
async fn wait_row(app: &TestApp, id: &str, what: &str, done: impl Fn(&OpRow) -> bool) -> OpRow {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let row = op_row(app, id).await;
        if done(&row) {
            return row;
        }
        assert!(Instant::now() < deadline, "operation {id} not {what}: {row:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn message_count(app: &TestApp, conversation: &str) -> i64 {
    with_pool!(&app.running().state.db, pool => {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM messages WHERE conversation_id = $1")
            .bind(conversation)
            .fetch_one(pool)
            .await
            .unwrap()
    })
}

/// The process-wide value of a counter (all in-process apps of this binary share the
/// recorder, so tests compare against a value read before they acted).
async fn metric(app: &TestApp, name: &str, labels: &[(&str, &str)]) -> f64 {
    let response = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    prometheus::sample(&response.text().await.unwrap(), name, labels).unwrap_or(0.0)
}

async fn wait_metric_at_least(app: &TestApp, name: &str, labels: &[(&str, &str)], at_least: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let value = metric(app, name, labels).await;
        if value >= at_least {
            return;
        }
        assert!(Instant::now() < deadline, "{name}{labels:?} is {value}, expected ≥ {at_least}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------
// A PostgreSQL session that blocks the worker
// ---------------------------------------------------------------------------------------

/// An external session holding `FOR UPDATE` locks on part of a conversation, and a second
/// one to watch and terminate the worker's backend with.
struct Locker {
    holder: sqlx::PgConnection,
    holder_pid: i32,
    probe: sqlx::PgConnection,
    /// Backends already terminated (one may linger in `pg_stat_activity` for a moment).
    terminated: Vec<i32>,
}

impl Locker {
    /// Lock the messages of `conversation` with a sequence above `above`.
    async fn lock(app: &TestApp, conversation: &str, above: i64) -> Locker {
        let mut holder = sqlx::PgConnection::connect(&app.database_url).await.unwrap();
        sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
        let locked: Vec<i64> =
            sqlx::query_scalar("SELECT sequence FROM messages WHERE conversation_id = $1 AND sequence > $2 FOR UPDATE")
                .bind(conversation)
                .bind(above)
                .fetch_all(&mut holder)
                .await
                .unwrap();
        assert!(!locked.is_empty(), "nothing to lock in {conversation}");
        let holder_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut holder).await.unwrap();
        let probe = sqlx::PgConnection::connect(&app.database_url).await.unwrap();
        Locker { holder, holder_pid, probe, terminated: Vec::new() }
    }

    /// The backend whose statement waits on our locks (a `DELETE FROM messages`).
    async fn wait_blocked(&mut self) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let blocked: Vec<(i32, String)> = sqlx::query_as(
                "SELECT pid, query FROM pg_stat_activity \
                 WHERE $1 = ANY(pg_blocking_pids(pid)) AND pid <> ALL($2)",
            )
            .bind(self.holder_pid)
            .bind(&self.terminated)
            .fetch_all(&mut self.probe)
            .await
            .unwrap();
            if let [(pid, query)] = &blocked[..] {
                assert!(query.starts_with("DELETE FROM messages"), "blocked: {query}");
                return *pid;
            }
            assert!(blocked.len() <= 1, "several sessions wait on us: {blocked:?}");
            assert!(Instant::now() < deadline, "no worker statement waited on the lock");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn terminate(&mut self, pid: i32) {
        let done: bool =
            sqlx::query_scalar("SELECT pg_terminate_backend($1)").bind(pid).fetch_one(&mut self.probe).await.unwrap();
        assert!(done, "backend {pid} was not terminated");
        self.terminated.push(pid);
    }

    async fn release(mut self) {
        sqlx::query("ROLLBACK").execute(&mut self.holder).await.unwrap();
    }
}

/// 100 messages, locks on those above 50, a delete in batches of 10: the worker commits
/// five batches and then waits on the lock until its backend is terminated. Returns the
/// operation id, the locker (still holding) and the retry counter read before the failure.
async fn delete_until_terminated(app: &TestApp) -> (String, Locker, f64) {
    seed(app, "locked", 100).await;
    let mut locker = Locker::lock(app, "locked", 50).await;
    let retries_before = metric(app, RETRIES, &[("kind", "delete")]).await;
    let id = submit_delete(app, "locked").await;
    let worker = locker.wait_blocked().await;
    let blocked = op_row(app, &id).await;
    assert_eq!(
        (blocked.state.as_str(), blocked.processed, blocked.attempt),
        ("running", 50, 1),
        "five batches committed before the lock: {blocked:?}"
    );
    locker.terminate(worker).await;
    (id, locker, retries_before)
}

fn small_batches(max_attempts: u32) -> impl FnOnce(&mut context_ops::config::Config) {
    move |config| {
        config.batch_size = 10;
        config.max_attempts = max_attempts;
    }
}

// ---------------------------------------------------------------------------------------
// 1. Transient failures
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_backend_is_retried_with_backoff() {
    let app = TestApp::start_with(Backend::Postgres, small_batches(5)).await;
    let (id, mut locker, retries_before) = delete_until_terminated(&app).await;

    let retrying = wait_row(&app, &id, "re-queued", |r| r.state != "running").await;
    println!("recorded: {:?} {:?}", retrying.error_code, retrying.error);
    assert_eq!(retrying.state, "queued", "{retrying:?}");
    assert_eq!(retrying.phase, "retrying", "{retrying:?}");
    assert_eq!(retrying.error_code.as_deref(), Some("transient"), "{retrying:?}");
    assert!(
        retrying.error.as_deref().is_some_and(|e| e.contains("administrator command")),
        "the cause is recorded: {retrying:?}"
    );
    assert_eq!(retrying.lease_token, None, "{retrying:?}");
    assert_eq!((retrying.attempt, retrying.processed), (1, 50), "{retrying:?}");
    // Attempt 1 backs off 1 s minus up to 25 % jitter, timed from just before the write.
    let backoff = retrying.not_before_ms - retrying.updated_at_ms;
    assert!((700..=1000).contains(&backoff), "backoff {backoff} ms: {retrying:?}");
    let op = get_op(&app, &id).await;
    assert_eq!(op["version"], json!(retrying.version), "moved on already: {op}");
    assert_eq!((&op["state"], &op["phase"]), (&json!("queued"), &json!("retrying")), "{op}");
    assert_eq!(op["errorCode"], "transient", "{op}");
    assert!(op["nextPollAfterMs"].as_u64().is_some_and(|ms| ms >= 500), "{op}");

    // The retry claims it no earlier than `not_before` (and waits on the lock again).
    locker.wait_blocked().await;
    let second = op_row(&app, &id).await;
    assert_eq!((second.state.as_str(), second.attempt), ("running", 2), "{second:?}");
    // Nothing but the claim has touched `updated_at_ms` since (no batch commits).
    assert!(
        second.updated_at_ms >= retrying.not_before_ms,
        "claimed before the backoff ended: {second:?} / {retrying:?}"
    );
    locker.release().await;

    let done = wait_terminal(&app, &id).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["result"]["deletedMessages"], 100, "{done}");
    assert_eq!(done["processed"], 100, "resumed from the checkpoint: {done}");
    assert!(done.get("errorCode").is_none(), "success clears the error: {done}");
    assert_eq!(op_row(&app, &id).await.attempt, 2);
    assert_eq!(message_count(&app, "locked").await, 0);
    assert!(metric(&app, RETRIES, &[("kind", "delete")]).await > retries_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failure_without_attempts_left_fails() {
    let app = TestApp::start_with(Backend::Postgres, small_batches(1)).await;
    let (id, locker, retries_before) = delete_until_terminated(&app).await;

    let done = wait_terminal(&app, &id).await;
    assert_eq!(done["state"], "failed", "{done}");
    assert_eq!(done["errorCode"], "retries_exhausted", "{done}");
    assert!(done["error"].as_str().is_some_and(|e| e.contains("administrator command")), "{done}");
    assert_eq!(done["processed"], 50, "{done}");
    let row = op_row(&app, &id).await;
    assert_eq!((row.attempt, row.lease_token.as_deref()), (1, None), "{row:?}");
    locker.release().await;
    assert_eq!(message_count(&app, "locked").await, 50, "nothing deleted after the failure");
    // The conversation barrier went with the failure: appends are accepted again.
    app.append(vec![message("locked", "after", "user", "again")]).await;
    assert_eq!(metric(&app, RETRIES, &[("kind", "delete")]).await, retries_before);
}

// ---------------------------------------------------------------------------------------
// 2. Duplicate deliveries
// ---------------------------------------------------------------------------------------

async fn duplicate_deliveries_run_once(backend: Backend) {
    let app = TestApp::start_with(backend, |c| c.batch_size = 5).await;
    seed(&app, "dup", 30).await;
    let labels = [("kind", "delete")];
    let duplicates_before = metric(&app, DUPLICATES, &labels).await;
    let id = submit_delete(&app, "dup").await;
    for _ in 0..5 {
        app.running().state.queue.push(ContextOperationKind::Delete, &id).await.unwrap();
    }
    let done = wait_terminal(&app, &id).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["result"]["deletedMessages"], 30, "{done}");
    assert_eq!(done["processed"], 30, "{done}");
    assert_eq!(op_row(&app, &id).await.attempt, 1, "claimed once");
    assert_eq!(message_count(&app, "dup").await, 0);
    // Six deliveries, one claim: the other five are counted as duplicates.
    wait_metric_at_least(&app, DUPLICATES, &labels, duplicates_before + 5.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_deliveries_run_once_sqlite() {
    duplicate_deliveries_run_once(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_deliveries_run_once_postgres() {
    duplicate_deliveries_run_once(Backend::Postgres).await;
}

// ---------------------------------------------------------------------------------------
// 3. Operations that must not loop: an undecodable request, a crash loop
// ---------------------------------------------------------------------------------------

async fn undecodable_and_crash_looping_operations_end(backend: Backend) {
    // Queued by an API-only app, altered in the database, then run by a serving app.
    let api = TestApp::start_command(backend, Command::Api, |_| {}).await;
    seed(&api, "corrupt", 5).await;
    seed(&api, "looping", 5).await;
    let corrupt = submit_delete(&api, "corrupt").await;
    let looping = submit_delete(&api, "looping").await;
    let max_attempts = i64::from(api.running().state.config.max_attempts);
    with_pool!(&api.running().state.db, pool => {
        sqlx::query("UPDATE operations SET request = '{\"kind\":\"delete\"}' WHERE id = $1")
            .bind(corrupt.as_str())
            .execute(pool)
            .await
            .unwrap();
        // What a worker that died on every attempt leaves: running, the budget spent, the
        // lease expired.
        sqlx::query(
            "UPDATE operations SET state = 'running', phase = 'deleting', attempt = $2, lease_token = 'died', \
             lease_expires_at_ms = $3, pushed_at_ms = NULL, started_at_ms = $3 WHERE id = $1",
        )
        .bind(looping.as_str())
        .bind(max_attempts)
        .bind(now_ms() - 1)
        .execute(pool)
        .await
        .unwrap();
    });

    let serve = TestApp::start_on(&api, Command::Serve, |_| {}).await;
    let done = wait_terminal(&serve, &corrupt).await;
    assert_eq!(done["state"], "failed", "{done}");
    assert_eq!(done["errorCode"], "corrupt_operation", "{done}");
    assert!(done["error"].as_str().is_some_and(|e| e.contains("does not decode")), "{done}");
    assert_eq!(op_row(&serve, &corrupt).await.attempt, 1, "never retried");

    let done = wait_terminal(&serve, &looping).await;
    assert_eq!(done["state"], "failed", "{done}");
    assert_eq!(done["errorCode"], "retries_exhausted", "{done}");
    assert_eq!(op_row(&serve, &looping).await.attempt, max_attempts + 1);
    assert_eq!(message_count(&serve, "corrupt").await, 5);
    assert_eq!(message_count(&serve, "looping").await, 5, "the job did not run again");
    // Both released their conversation.
    serve.append(vec![message("corrupt", "after", "user", "x"), message("looping", "after", "user", "x")]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_and_crash_looping_operations_end_sqlite() {
    undecodable_and_crash_looping_operations_end(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_and_crash_looping_operations_end_postgres() {
    undecodable_and_crash_looping_operations_end(Backend::Postgres).await;
}

// ---------------------------------------------------------------------------------------
// 4. Pruning
// ---------------------------------------------------------------------------------------

async fn pruning_removes_old_terminal_operations_only(backend: Backend) {
    let app = TestApp::start(backend).await;
    seed(&app, "p", 3).await;
    let id = submit_delete(&app, "p").await;
    let done = wait_terminal(&app, &id).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    let db = &app.running().state.db;
    // `updatedAtMs` of a terminal operation is its finish time; the cutoff is exclusive.
    let finished = done["updatedAtMs"].as_i64().unwrap();
    assert_eq!(leases::prune(db, finished).await.unwrap(), 0);
    get_op(&app, &id).await;
    assert_eq!(leases::prune(db, now_ms() + 1).await.unwrap(), 1);
    let (status, body) = app.get(&format!("{OPS}/{id}")).await;
    assert_api_error(status, &body, 404);

    // Nothing runs in an API-only app: a queued operation stays queued, a cancelled one is
    // terminal at once.
    let api = TestApp::start_command(backend, Command::Api, |_| {}).await;
    seed(&api, "q1", 1).await;
    seed(&api, "q2", 1).await;
    let queued = submit_delete(&api, "q1").await;
    let cancelled = submit_delete(&api, "q2").await;
    let (status, op) = api.post(&format!("{OPS}/{cancelled}/cancel"), &json!({})).await;
    assert_eq!((status, &op["state"]), (200, &json!("cancelled")), "{op}");
    let db = &api.running().state.db;
    assert_eq!(leases::prune(db, now_ms() + 1).await.unwrap(), 1);
    assert_eq!(get_op(&api, &queued).await["state"], "queued");
    let (status, body) = api.get(&format!("{OPS}/{cancelled}")).await;
    assert_api_error(status, &body, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_removes_old_terminal_operations_only_sqlite() {
    pruning_removes_old_terminal_operations_only(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_removes_old_terminal_operations_only_postgres() {
    pruning_removes_old_terminal_operations_only(Backend::Postgres).await;
}
