//! Long-polls on the real binary: a SIGTERM answers an open one at once (not after its
//! 30 s), and in production a change another process commits wakes it (the Redis relay).

use std::time::{Duration, Instant};

use context_jobs::contract::{CONTEXT_OPERATIONS_PATH, ContextOperationState};

use super::{HEALTHY_WITHIN, LEASE_SECS};
use crate::harness::Backend;
use crate::harness::fixture::Fixture;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_open_long_polls() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let fx = Fixture::new(Backend::Sqlite, LEASE_SECS).await;
    // API only: the operation stays queued, so only a timeout or shutdown ends the wait.
    let mut api = fx.env.spawn("api", "api");
    api.wait_healthy(HEALTHY_WITHIN).await;
    let id = api.api.submit_delete("nothing").await.id;

    // A raw connection, so the request is on the wire before the barrier below.
    let mut poll = tokio::net::TcpStream::connect(api.api.base.trim_start_matches("http://")).await.unwrap();
    let request = format!(
        "GET {CONTEXT_OPERATIONS_PATH}/{id}/wait?timeoutMs=30000 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    );
    poll.write_all(request.as_bytes()).await.unwrap();
    // Barrier: a later connection answered, so the server has accepted and read ours.
    api.wait_healthy(HEALTHY_WITHIN).await;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_polls_wake_on_changes_committed_by_another_process() {
    let fx = Fixture::new(Backend::Postgres, LEASE_SECS).await;
    fx.seed("c", 1).await;
    // Two API-only processes (nothing runs the operation), whose periodic re-read is slowed
    // to 20 s: within the few seconds allowed below, only a notification can answer.
    let slow = [("CONTEXT_OPS_WAIT_RECHECK_MS", "20000")];
    let mut a = fx.env.spawn_with("api-a", "api", &slow);
    let mut b = fx.env.spawn_with("api-b", "api", &slow);
    a.wait_healthy(HEALTHY_WITHIN).await;
    b.wait_healthy(HEALTHY_WITHIN).await;
    let id = a.api.submit_delete("c").await.id;
    let op = a.api.operation(&id).await;
    assert_eq!(op.state, ContextOperationState::Queued, "{op:?}");

    let url = a.api.url(&format!("{CONTEXT_OPERATIONS_PATH}/{id}/wait?sinceVersion={}&timeoutMs=15000", op.version));
    let started = Instant::now();
    let wait = tokio::spawn(a.api.client.get(url).timeout(Duration::from_secs(30)).send());
    // The wait parks on `a` for this long before anything changes (the scenario, not a
    // synchronisation): it cannot answer earlier, the operation being unchanged until then.
    let parked = Duration::from_millis(500);
    tokio::time::sleep(parked).await;
    let cancel = b.api.client.post(b.api.url(&format!("{CONTEXT_OPERATIONS_PATH}/{id}/cancel"))).send().await.unwrap();
    assert_eq!(cancel.status().as_u16(), 200);
    let cancelled_at = started.elapsed();

    let response = wait.await.unwrap().unwrap();
    let answered_at = started.elapsed();
    assert_eq!(response.status().as_u16(), 200);
    let seen: serde_json::Value = response.json().await.unwrap();
    assert_eq!(seen["state"], "cancelled", "the wait on `a` answered with the change made on `b`: {seen}");
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
