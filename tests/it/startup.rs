//! The real `context-ops` binary as a child process: startup failures are one clear line
//! and a non-zero exit, `migrate` works on a fresh SQLite file, and `serve` comes up in
//! open mode and exits 0 on SIGTERM.

use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::harness::child::{Proc, binary, free_port};

/// The binary with `args` and a clean environment, listening on any port.
fn command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = binary(dir, args);
    cmd.env("CONTEXT_OPS_BIND", "127.0.0.1:0");
    cmd
}

struct Finished {
    status: ExitStatus,
    elapsed: Duration,
    stdout: String,
    stderr: String,
}

/// Run `cmd` in `dir` until it exits by itself (within `timeout`), with what it wrote.
async fn run(cmd: Command, dir: &Path, timeout: Duration) -> Finished {
    let started = Instant::now();
    let mut proc = Proc::spawn("context-ops", cmd, dir);
    let Some(status) = proc.wait_exit(timeout).await else {
        panic!("context-ops did not exit within {timeout:?}; stderr so far:\n{}", proc.log());
    };
    Finished { status, elapsed: started.elapsed(), stdout: proc.stdout(), stderr: proc.log() }
}

fn non_empty_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.trim().is_empty()).collect()
}

/// A failed startup: non-zero exit, nothing on stdout, exactly one stderr line, no panic.
fn assert_one_line_failure(run: &Finished) -> String {
    assert!(!run.status.success(), "must exit non-zero, got {:?}; stderr:\n{}", run.status, run.stderr);
    assert_eq!(run.status.code(), Some(1), "a clean error exit, not a signal or panic code: {}", run.stderr);
    for marker in ["panicked", "backtrace", "RUST_BACKTRACE"] {
        assert!(!run.stderr.contains(marker), "no panic output expected ({marker}):\n{}", run.stderr);
    }
    let lines = non_empty_lines(&run.stderr);
    assert_eq!(lines.len(), 1, "exactly one stderr line expected:\n{}", run.stderr);
    assert!(run.stdout.trim().is_empty(), "nothing on stdout expected: {}", run.stdout);
    let line = lines[0].to_string();
    assert!(line.contains("error"), "{line}");
    line
}

#[tokio::test]
async fn unsupported_database_url_fails_fast_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    for subcommand in ["serve", "migrate"] {
        let mut cmd = command(dir.path(), &[subcommand]);
        cmd.env("DATABASE_URL", "mysql://x");
        let run = run(cmd, dir.path(), Duration::from_secs(5)).await;
        let line = assert_one_line_failure(&run);
        assert!(line.contains("DATABASE_URL"), "{subcommand}: the line must name the variable: {line}");
        assert!(line.contains("mysql://x"), "{subcommand}: the line must show the offending value: {line}");
    }
}

#[tokio::test]
async fn invalid_configuration_fails_with_one_line_without_echoing_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = command(dir.path(), &["serve"]);
    cmd.env("DATABASE_URL", format!("sqlite:{}", dir.path().join("x.sqlite").display()));
    cmd.env("CONTEXT_OPS_JWT_SECRET", "short-s3cret");
    let run = run(cmd, dir.path(), Duration::from_secs(5)).await;
    let line = assert_one_line_failure(&run);
    assert!(line.contains("CONTEXT_OPS_JWT_SECRET"), "{line}");
    assert!(!run.stderr.contains("short-s3cret"), "the secret must not be printed: {}", run.stderr);
    assert!(!dir.path().join("x.sqlite").exists(), "configuration is validated before the database is touched");
}

#[tokio::test]
async fn unreachable_postgres_fails_with_one_redacted_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = command(dir.path(), &["serve"]);
    // Port 1 refuses connections; the pool retries until its 10 s acquire timeout.
    cmd.env("DATABASE_URL", "postgres://postgres:hunter2@127.0.0.1:1/nope");
    let run = run(cmd, dir.path(), Duration::from_secs(40)).await;
    let line = assert_one_line_failure(&run);
    assert!(line.contains("cannot connect"), "{line}");
    assert!(line.contains("postgres://postgres:***@127.0.0.1:1/nope"), "the redacted URL is shown: {line}");
    assert!(!run.stderr.contains("hunter2"), "the password must not be printed: {}", run.stderr);
}

#[tokio::test]
async fn migrate_creates_and_migrates_a_fresh_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fresh.sqlite");
    assert!(!file.exists());
    let url = format!("sqlite:{}", file.display());
    for attempt in ["first", "repeated"] {
        let mut cmd = command(dir.path(), &["migrate"]);
        cmd.env("DATABASE_URL", &url);
        let run = run(cmd, dir.path(), Duration::from_secs(30)).await;
        assert!(run.status.success(), "{attempt} migrate failed ({:?}):\n{}", run.status, run.stderr);
        assert!(run.stderr.contains("migrations applied"), "{attempt}: {}", run.stderr);
        assert!(run.elapsed < Duration::from_secs(30));
    }
    assert!(file.exists(), "migrate creates the SQLite file");

    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('conversations', 'messages') ORDER BY name",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(tables, ["conversations", "messages"]);
    let applied: Vec<(i64, bool)> = sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
        .fetch_all(&pool)
        .await
        .unwrap();
    let expected: Vec<(i64, bool)> = migration_versions("sqlite").into_iter().map(|v| (v, true)).collect();
    assert!(expected.first() == Some(&(1, true)), "migration files start at 0001: {expected:?}");
    assert_eq!(applied, expected, "every migration file applied successfully, once, even after a second run");
    pool.close().await;
}

/// Versions of `migrations/<engine>/NNNN_name.sql`, ascending.
fn migration_versions(engine: &str) -> Vec<i64> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations").join(engine);
    let mut versions: Vec<i64> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|entry| {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let stem = name.strip_suffix(".sql")?;
            Some(stem.split('_').next()?.parse().unwrap_or_else(|_| panic!("bad migration name {name}")))
        })
        .collect();
    versions.sort_unstable();
    versions
}

/// Start `serve` and wait for `/health` to answer 200. The port is picked by binding and
/// releasing it, so another process may take it in between: then try another one.
async fn start_serving(dir: &Path, client: &reqwest::Client) -> (Proc, String) {
    let url = format!("sqlite:{}", dir.join("x.sqlite").display());
    for attempt in 0..3 {
        let port = free_port();
        let mut cmd = command(dir, &["serve"]);
        cmd.env("DATABASE_URL", &url).env("CONTEXT_OPS_BIND", format!("127.0.0.1:{port}"));
        let mut child = Proc::spawn(&format!("serve-{attempt}"), cmd, dir);
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.wait_exit(Duration::ZERO).await {
                let stderr = child.log();
                assert!(stderr.contains("cannot listen"), "serve exited early ({status:?}):\n{stderr}");
                break; // port taken meanwhile: retry with another
            }
            assert!(Instant::now() < deadline, "/health never answered 200; stderr:\n{}", child.log());
            let health = client.get(format!("{base}/health")).timeout(Duration::from_secs(2)).send().await;
            if health.as_ref().is_ok_and(|r| r.status() == 200) {
                let body: serde_json::Value = health.unwrap().json().await.unwrap();
                assert_eq!(body["status"], "ok", "{body}");
                assert_eq!(body["service"], context_jobs::contract::SERVICE_NAME, "{body}");
                return (child, base);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    panic!("could not start serve on a free port in 3 attempts");
}

#[tokio::test]
async fn serve_starts_in_open_mode_and_exits_zero_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let (mut child, base) = start_serving(dir.path(), &client).await;
    assert!(dir.path().join("x.sqlite").exists(), "serve creates and migrates the database");
    let stderr = child.log();
    assert!(stderr.contains("OPEN MODE"), "open mode must be warned about at startup:\n{stderr}");
    assert!(stderr.contains("WARN"), "the open-mode line is a warning:\n{stderr}");

    // Really serving the API, without credentials.
    let response = client
        .post(format!("{base}/internal/v1/context/messages/batch"))
        .json(&serde_json::json!({"messages": [{"id": "m", "scope": {"conversationId": "c"}, "role": "user",
                                                "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);

    child.signal("TERM");
    let Some(status) = child.wait_exit(Duration::from_secs(10)).await else {
        panic!("context-ops did not exit within 10 s of SIGTERM; stderr so far:\n{}", child.log());
    };
    let stderr = child.log();
    assert!(status.success(), "SIGTERM must be a clean exit 0, got {status:?}:\n{stderr}");
    assert!(stderr.contains("shutting down"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
