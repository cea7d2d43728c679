//! Transient failures, for real: a PostgreSQL session holds row locks the worker's
//! `DELETE` waits on, and the test terminates the worker's backend (`pg_terminate_backend`,
//! SQLSTATE 57P01) once `pg_blocking_pids` shows it waiting. The operation is re-queued
//! with backoff and resumes from its checkpoint, or fails once the attempts are spent.

use std::time::Duration;

use context_jobs::contract::ContextOperationState;
use sqlx::Connection as _;

use super::{engine_service, metric, seed};
use crate::harness::db::{DEFAULT_TENANT, OpRow, message_count, operation_row};
use crate::harness::wait::poll_until;
use crate::harness::{Backend, OpClient, OperationExt as _, message};
use context_ops::store::Db;

const RETRIES: &str = "context_ops_operation_retries_total";

/// Poll the row (a worker transition has no long-poll of its own) until `done` holds.
async fn wait_row(db: &Db, id: &str, what: &str, done: impl Fn(&OpRow) -> bool) -> OpRow {
    poll_until(&format!("operation {id} {what}"), Duration::from_secs(20), || async {
        let row = operation_row(db, id).await;
        if done(&row) { Ok(row) } else { Err(format!("{row:?}")) }
    })
    .await
}

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
    async fn lock(database_url: &str, conversation: &str, above: i64) -> Locker {
        let mut holder = sqlx::PgConnection::connect(database_url).await.unwrap();
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
        let probe = sqlx::PgConnection::connect(database_url).await.unwrap();
        Locker { holder, holder_pid, probe, terminated: Vec::new() }
    }

    /// The backend whose statement waits on our locks (a `DELETE FROM messages`).
    async fn wait_blocked(&mut self) -> i32 {
        let (holder, terminated) = (self.holder_pid, self.terminated.clone());
        let probe = &mut self.probe;
        let probe = tokio::sync::Mutex::new(probe);
        poll_until("a worker statement waiting on the lock", Duration::from_secs(20), || async {
            let blocked: Vec<(i32, String)> = sqlx::query_as(
                "SELECT pid, query FROM pg_stat_activity \
                 WHERE $1 = ANY(pg_blocking_pids(pid)) AND pid <> ALL($2)",
            )
            .bind(holder)
            .bind(&terminated)
            .fetch_all(&mut **probe.lock().await)
            .await
            .unwrap();
            if let [(pid, query)] = &blocked[..] {
                assert!(query.starts_with("DELETE FROM messages"), "blocked: {query}");
                return Ok(*pid);
            }
            assert!(blocked.len() <= 1, "several sessions wait on us: {blocked:?}");
            Err("none".to_string())
        })
        .await
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
async fn delete_until_terminated(api: &OpClient, db: &Db, database_url: &str) -> (String, Locker, f64) {
    seed(api, "locked", 100).await;
    let mut locker = Locker::lock(database_url, "locked", 50).await;
    let retries_before = metric(api, RETRIES, &[("kind", "delete")]).await;
    let id = api.submit_delete("locked").await.id;
    let worker = locker.wait_blocked().await;
    let blocked = operation_row(db, &id).await;
    assert_eq!(
        (blocked.state.as_str(), blocked.processed, blocked.attempt),
        ("running", 50, 1),
        "five batches committed before the lock: {blocked:?}"
    );
    locker.terminate(worker).await;
    (id, locker, retries_before)
}

/// Batches of 10 and `max_attempts`; a process of its own (see the module doc of `engine`).
fn small_batches(max_attempts: &str) -> [(&'static str, &str); 2] {
    [("CONTEXT_OPS_BATCH_SIZE", "10"), ("CONTEXT_OPS_MAX_ATTEMPTS", max_attempts)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_backend_is_retried_with_backoff() {
    let (fx, service) = engine_service(Backend::Postgres, &small_batches("5")).await;
    let api = &service.api;
    let (id, mut locker, retries_before) = delete_until_terminated(api, &fx.db, &fx.env.database_url).await;

    let retrying = wait_row(&fx.db, &id, "re-queued", |r| r.state != "running").await;
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
    let op = api.operation(&id).await;
    assert_eq!(op.version as i64, retrying.version, "moved on already: {op:?}");
    assert_eq!((op.state, op.phase.as_str()), (ContextOperationState::Queued, "retrying"), "{op:?}");
    assert_eq!(op.error_code.as_deref(), Some("transient"), "{op:?}");
    assert!(op.next_poll_after_ms.is_some_and(|ms| ms >= 500), "{op:?}");

    // The retry claims it no earlier than `not_before` (and waits on the lock again).
    locker.wait_blocked().await;
    let second = operation_row(&fx.db, &id).await;
    assert_eq!((second.state.as_str(), second.attempt), ("running", 2), "{second:?}");
    // Nothing but the claim has touched `updated_at_ms` since (no batch commits).
    assert!(
        second.updated_at_ms >= retrying.not_before_ms,
        "claimed before the backoff ended: {second:?} / {retrying:?}"
    );
    locker.release().await;

    let done = api.wait_terminal(&id).await;
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    assert_eq!(done.result_json()["deletedMessages"], 100, "{done:?}");
    assert_eq!(done.processed, 100, "resumed from the checkpoint: {done:?}");
    assert!(done.error_code.is_none(), "success clears the error: {done:?}");
    assert_eq!(operation_row(&fx.db, &id).await.attempt, 2);
    assert_eq!(message_count(&fx.db, DEFAULT_TENANT, "locked").await, 0);
    assert!(metric(api, RETRIES, &[("kind", "delete")]).await > retries_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failure_without_attempts_left_fails() {
    let (fx, service) = engine_service(Backend::Postgres, &small_batches("1")).await;
    let api = &service.api;
    let (id, locker, retries_before) = delete_until_terminated(api, &fx.db, &fx.env.database_url).await;

    let done = api.wait_terminal(&id).await;
    assert_eq!(done.state, ContextOperationState::Failed, "{done:?}");
    assert_eq!(done.error_code.as_deref(), Some("retries_exhausted"), "{done:?}");
    assert!(done.error.as_deref().is_some_and(|e| e.contains("administrator command")), "{done:?}");
    assert_eq!(done.processed, 50, "{done:?}");
    let row = operation_row(&fx.db, &id).await;
    assert_eq!((row.attempt, row.lease_token.as_deref()), (1, None), "{row:?}");
    locker.release().await;
    assert_eq!(message_count(&fx.db, DEFAULT_TENANT, "locked").await, 50, "nothing deleted after the failure");
    // The conversation barrier went with the failure: appends are accepted again.
    api.append_records(&[message("locked", "after", "user", "again")]).await;
    assert_eq!(metric(api, RETRIES, &[("kind", "delete")]).await, retries_before);
}
