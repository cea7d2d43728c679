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
    // Port 1 refuses connections: the direct probe fails at once.
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

/// A usage error: exit 2 and one stderr line.
fn assert_usage_error(run: &Finished) -> String {
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    let lines = non_empty_lines(&run.stderr);
    assert_eq!(lines.len(), 1, "exactly one stderr line expected:\n{}", run.stderr);
    lines[0].to_string()
}

#[tokio::test]
async fn a_bad_value_names_the_flag_and_the_variable_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = command(dir.path(), &["serve"]);
    cmd.env("CONTEXT_OPS_BATCH_SIZE", "abc");
    let line = assert_usage_error(&run(cmd, dir.path(), Duration::from_secs(5)).await);
    assert!(line.contains("--batch-size") && line.contains("CONTEXT_OPS_BATCH_SIZE"), "{line}");
    assert!(line.contains("'abc'"), "{line}");
    let cmd = command(dir.path(), &["worker", "--lease-secs", "soon"]);
    let line = assert_usage_error(&run(cmd, dir.path(), Duration::from_secs(5)).await);
    assert!(line.contains("--lease-secs") && line.contains("CONTEXT_OPS_LEASE_SECS"), "{line}");
    // The same for a group the subcommand takes from the environment only (`api` runs no
    // workers, yet reads their settings): clap's own three lines before.
    let mut cmd = command(dir.path(), &["api"]);
    cmd.env("CONTEXT_OPS_BATCH_SIZE", "abc");
    let line = assert_usage_error(&run(cmd, dir.path(), Duration::from_secs(5)).await);
    assert!(line.contains("--batch-size") && line.contains("CONTEXT_OPS_BATCH_SIZE"), "{line}");
}

/// A value the type takes but the service cannot run with is one line too (a zero dispatch
/// interval panicked in the dispatcher's task, after the process had reported ready; a
/// pool of 2 or 3 starved every import).
#[tokio::test]
async fn values_the_service_cannot_run_with_fail_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    for (variable, value, said) in [
        ("CONTEXT_OPS_DISPATCH_INTERVAL_MS", "0", "CONTEXT_OPS_DISPATCH_INTERVAL_MS must be at least 1"),
        // Too small for an export's or an import's three connections at once.
        ("CONTEXT_OPS_DB_MAX_CONNECTIONS", "3", "CONTEXT_OPS_DB_MAX_CONNECTIONS must be at least 4"),
    ] {
        let mut cmd = command(dir.path(), &["serve"]);
        cmd.env("DATABASE_URL", format!("sqlite:{}", dir.path().join("x.sqlite").display()));
        cmd.env(variable, value);
        let failed = run(cmd, dir.path(), Duration::from_secs(5)).await;
        let line = assert_one_line_failure(&failed);
        assert!(line.contains(said), "{line}");
    }
}

#[tokio::test]
async fn a_driver_message_is_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = command(dir.path(), &["migrate"]);
    cmd.env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/no_such_database_here");
    let run = run(cmd, dir.path(), Duration::from_secs(20)).await;
    let line = assert_one_line_failure(&run);
    assert_eq!(line.matches("does not exist").count(), 1, "{line}");
}

#[tokio::test]
async fn each_subcommand_help_shows_only_its_options() {
    let dir = tempfile::tempdir().unwrap();
    let help = |sub: &'static str| {
        let out = command(dir.path(), &[sub, "--help"]).output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let (serve, worker, migrate, health) = (help("serve"), help("worker"), help("migrate"), help("health"));
    for heading in ["HTTP API:", "Database:", "Queue:", "Authentication:"] {
        assert!(serve.contains(heading), "serve groups by concern: {heading}\n{serve}");
    }
    assert!(!worker.contains("--bind ") && !worker.contains("Authentication:"), "{worker}");
    assert!(!migrate.contains("--redis-url") && !migrate.contains("--bind "), "{migrate}");
    assert!(!health.contains("--database-url") && health.contains("--url"), "{health}");
}

#[tokio::test]
async fn open_mode_on_a_public_address_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("x.sqlite").display());
    let port = free_port();
    let bind = format!("0.0.0.0:{port}");
    let mut cmd = command(dir.path(), &["serve"]);
    cmd.env("DATABASE_URL", &url).env("CONTEXT_OPS_BIND", &bind);
    let line = assert_one_line_failure(&run(cmd, dir.path(), Duration::from_secs(10)).await);
    assert!(line.contains("open mode") && line.contains("CONTEXT_OPS_ALLOW_OPEN"), "{line}");
    assert!(!dir.path().join("x.sqlite").exists(), "refused before the database is touched");

    let mut cmd = command(dir.path(), &["serve"]);
    cmd.env("DATABASE_URL", &url).env("CONTEXT_OPS_BIND", &bind).env("CONTEXT_OPS_ALLOW_OPEN", "true");
    let mut serve = Proc::spawn("serve-open", cmd, dir.path());
    // `context-ops health` finds the process from the same variables (0.0.0.0 → loopback).
    let health = || {
        let mut cmd = command(dir.path(), &["health"]);
        cmd.env("CONTEXT_OPS_BIND", &bind);
        cmd.output().unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        serve.assert_alive();
        let out = health();
        if out.status.success() {
            assert!(String::from_utf8_lossy(&out.stdout).contains("ready"));
            break;
        }
        assert!(Instant::now() < deadline, "never ready: {}", String::from_utf8_lossy(&out.stderr));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    serve.kill();
    let out = health();
    assert_eq!(out.status.code(), Some(1), "nothing listening: health fails");
    assert_eq!(non_empty_lines(&String::from_utf8_lossy(&out.stderr)).len(), 1);
}

#[tokio::test]
async fn a_worker_is_health_checked_on_its_metrics_listener() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut cmd = command(dir.path(), &["worker"]);
    cmd.env("DATABASE_URL", format!("sqlite:{}", dir.path().join("w.sqlite").display()))
        .env("CONTEXT_OPS_METRICS_BIND", &metrics);
    let mut worker = Proc::spawn("worker", cmd, dir.path());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        worker.assert_alive();
        let mut cmd = command(dir.path(), &["health"]);
        let out = cmd.env("CONTEXT_OPS_METRICS_BIND", &metrics).output().unwrap();
        if out.status.success() {
            let said = String::from_utf8_lossy(&out.stdout).to_string();
            assert!(said.contains(&format!("http://{metrics}/health/ready")), "{said}");
            break;
        }
        assert!(Instant::now() < deadline, "never ready: {}", String::from_utf8_lossy(&out.stderr));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
