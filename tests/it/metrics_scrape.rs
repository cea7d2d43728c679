//! A scrape of a live `serve` (a child process: its recorder counts only this test's
//! requests) passes `promtool check metrics` (HELP on every metric, the linter's naming
//! rules), counters exist at zero before anything happened, and labels keep to their
//! meaning: `status` alone on HTTP requests, `kind` only operation kinds.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use context_jobs::contract::{ContextOperationKind, ContextOperationState};

use crate::harness::fixture::Fixture;
use crate::harness::{Backend, message, prometheus};

/// `promtool check metrics` on `page`: its exit status and what it said.
fn promtool(page: &str) -> (i32, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs (Debian's `prometheus` package; .ci/run installs it when missing)");
    child.stdin.take().unwrap().write_all(page.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), said)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_scrape_passes_promtool() {
    let fx = Fixture::new(Backend::Sqlite, 15).await;
    let mut serve = fx.env.spawn("serve", "serve");
    serve.wait_healthy(Duration::from_secs(30)).await;
    let api = &serve.api;

    let first = api.metrics().await;
    for kind in ContextOperationKind::ALL {
        let labels = [("kind", kind.as_str())];
        assert_eq!(prometheus::sample(&first, "context_ops_operations_submitted_total", &labels), Some(0.0), "{first}");
        let finished = [("kind", kind.as_str()), ("outcome", ContextOperationState::Succeeded.as_str())];
        assert_eq!(prometheus::sample(&first, "context_ops_operations_finished_total", &finished), Some(0.0));
    }
    assert_eq!(prometheus::sample(&first, "context_ops_messages_appended_total", &[]), Some(0.0), "{first}");

    // Some traffic: appends, an operation that the projector and workers act on, a 404.
    api.append_records(&[message("c", "m1", "user", "hello"), message("c", "m2", "user", "again")]).await;
    let id = api.submit_delete("c").await.id;
    api.wait_until(&id, Duration::from_secs(30), "done", |op| op.state.is_terminal()).await;
    let (status, _) = api.get("/no/such/route").await;
    assert_eq!(status, 404);

    let page = api.metrics().await;
    let (code, said) = promtool(&page);
    assert_eq!(code, 0, "promtool check metrics: {said}\n{page}");
    assert!(said.trim().is_empty(), "promtool found problems: {said}");
    for line in page.lines().filter(|l| l.starts_with("context_ops_http_requests_total")) {
        assert!(line.contains("status=\"") && !line.contains("status_class"), "`status` only: {line}");
    }
    let kinds: Vec<&str> = ContextOperationKind::ALL.iter().map(|k| k.as_str()).collect();
    for line in page.lines().filter(|l| l.contains("kind=\"")) {
        let kind = line.split("kind=\"").nth(1).and_then(|rest| rest.split('"').next()).unwrap();
        assert!(kinds.contains(&kind), "`kind` is an operation kind: {line}");
    }
    assert_eq!(prometheus::sample(&page, "context_ops_messages_appended_total", &[]), Some(2.0));
    for line in page.lines().filter(|l| l.starts_with("context_ops_")) {
        let family = line.split(['{', ' ']).next().unwrap();
        let base = family.trim_end_matches("_bucket").trim_end_matches("_sum").trim_end_matches("_count");
        assert!(
            page.contains(&format!("# HELP {family} ")) || page.contains(&format!("# HELP {base} ")),
            "no HELP for {family}"
        );
    }
}
