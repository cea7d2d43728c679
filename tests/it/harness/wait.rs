//! Every wait, each under a deadline: [`OpClient::wait_until`] long-polls an operation
//! (`GET …/operations/{id}/wait?sinceVersion=…`) until a predicate holds — the one wait
//! for operations, in-process or in a child process — and [`poll_until`] re-checks a
//! condition that has no event to wait on (a row another process writes, a sweep on its
//! own schedule, a `/metrics` value).

use std::future::Future;
use std::time::{Duration, Instant};

use context_jobs::contract::{CONTEXT_OPERATIONS_PATH, ContextOperation, ContextOperationState};

use super::client::{OpClient, read};

/// How long [`OpClient::wait_terminal`] waits: generous, as every test runs beside others.
const TERMINAL_WITHIN: Duration = Duration::from_secs(120);

/// How often [`poll_until`] re-checks.
const POLL_EVERY: Duration = Duration::from_millis(25);

impl OpClient {
    /// Long-poll until `done(op)` holds; `Err(last seen)` at the deadline.
    pub async fn try_wait_until(
        &self,
        id: &str,
        within: Duration,
        done: impl Fn(&ContextOperation) -> bool,
    ) -> Result<ContextOperation, ContextOperation> {
        let deadline = Instant::now() + within;
        let mut op = self.operation(id).await;
        loop {
            if done(&op) {
                return Ok(op);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(op);
            }
            let timeout_ms = left.as_millis().clamp(1, 10_000);
            let path =
                format!("{CONTEXT_OPERATIONS_PATH}/{id}/wait?sinceVersion={}&timeoutMs={timeout_ms}", op.version);
            let response = self.request(reqwest::Method::GET, &path).timeout(Duration::from_secs(40)).send().await;
            let (status, body) = read(response.unwrap()).await;
            assert_eq!(status, 200, "{body}");
            op = serde_json::from_value(body.clone()).unwrap_or_else(|e| panic!("{e} in {body}"));
        }
    }

    /// Long-poll until `done(op)` holds, or panic with the last state seen after `within`.
    pub async fn wait_until(
        &self,
        id: &str,
        within: Duration,
        what: &str,
        done: impl Fn(&ContextOperation) -> bool,
    ) -> ContextOperation {
        match self.try_wait_until(id, within, done).await {
            Ok(op) => op,
            Err(last) => panic!("operation {id} not {what} within {within:?}; last seen {last:?}"),
        }
    }

    /// Long-poll until the operation is succeeded, failed or cancelled.
    pub async fn wait_terminal(&self, id: &str) -> ContextOperation {
        self.wait_until(id, TERMINAL_WITHIN, "terminal", |op| op.state.is_terminal()).await
    }
}

/// Running and part-way (at least one batch committed), or already over: the moment a
/// fault test interrupts an operation.
pub fn mid_run(op: &ContextOperation) -> bool {
    op.state.is_terminal() || (op.state == ContextOperationState::Running && op.processed > 0)
}

/// Re-check `check` until it returns `Ok`, or panic with `what` and its last `Err` (what
/// it saw) after `within`.
pub async fn poll_until<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + within;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(seen) => assert!(Instant::now() < deadline, "{what} within {within:?}; last seen: {seen}"),
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Wait until Redis counts one subscriber on namespace `namespace`'s change channel (a
/// change relay subscribed), asking through `conn`.
pub async fn relay_subscribed(conn: &redis::aio::MultiplexedConnection, namespace: &str) {
    let channel = format!("{namespace}:operation-changes");
    poll_until("the relay subscribed", Duration::from_secs(10), || {
        let (mut conn, channel) = (conn.clone(), channel.clone());
        async move {
            let (_, n): (String, u64) =
                redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel).query_async(&mut conn).await.unwrap();
            if n == 1 { Ok(()) } else { Err(format!("{n} subscribers")) }
        }
    })
    .await;
}

/// A condition that never holds ends the test at the deadline, naming what it waited for
/// and what it saw last (every wait above relies on this instead of hanging).
#[tokio::test]
#[should_panic(expected = "the impossible within 50ms; last seen: still not")]
async fn poll_until_gives_up_at_the_deadline_with_what_it_saw() {
    poll_until("the impossible", Duration::from_millis(50), || async { Err::<(), _>("still not".to_string()) }).await;
}
