//! The real `context-ops` binary as a child process: startup failures are one clear line
//! and a non-zero exit, `migrate` works on a fresh SQLite file, and `serve` comes up in
//! open mode and exits 0 on SIGTERM.

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_context-ops");

/// Variables the binary reads; cleared so the parent's environment cannot leak in.
const CLEARED: &[&str] = &["DATABASE_URL", "REDIS_URL", "AGENT_CONTEXT_SERVICE_TOKEN", "RUST_LOG", "RUST_BACKTRACE"];

/// The binary with a clean environment, run from `dir` (so a default SQLite file could
/// never land in the source tree). Backtraces are requested so that a panic would be loud.
fn binary(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args).current_dir(dir);
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(|k| k.starts_with("CONTEXT_OPS_") || CLEARED.contains(&k)) {
            cmd.env_remove(key);
        }
    }
    cmd.env("RUST_BACKTRACE", "1").env("CONTEXT_OPS_BIND", "127.0.0.1:0");
    cmd
}

/// A running child whose output is collected in the background. Dropping it (also when
/// the test panics) kills and reaps the child.
struct ChildGuard {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

fn collect(mut pipe: impl Read + Send + 'static, sink: Arc<Mutex<String>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
    })
}

struct Finished {
    status: ExitStatus,
    elapsed: Duration,
    stdout: String,
    stderr: String,
}

impl ChildGuard {
    fn spawn(mut cmd: Command) -> Self {
        let mut child =
            cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn context-ops");
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            collect(child.stdout.take().unwrap(), stdout.clone()),
            collect(child.stderr.take().unwrap(), stderr.clone()),
        ];
        Self { child, stdout, stderr, readers, status: None }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status
    }

    /// Wait up to `timeout` for the child to exit by itself (polling: it is an external
    /// process), then collect everything it wrote.
    fn finish(mut self, timeout: Duration) -> Finished {
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.try_status() {
                break status;
            }
            assert!(
                started.elapsed() < timeout,
                "context-ops did not exit within {timeout:?}; stderr so far:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let elapsed = started.elapsed();
        for reader in self.readers.drain(..) {
            reader.join().unwrap();
        }
        Finished {
            status,
            elapsed,
            stdout: self.stdout.lock().unwrap().clone(),
            stderr: self.stderr.lock().unwrap().clone(),
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if self.try_status().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
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

#[test]
fn unsupported_database_url_fails_fast_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    for command in ["serve", "migrate"] {
        let mut cmd = binary(dir.path(), &[command]);
        cmd.env("DATABASE_URL", "mysql://x");
        let run = ChildGuard::spawn(cmd).finish(Duration::from_secs(5));
        let line = assert_one_line_failure(&run);
        assert!(line.contains("DATABASE_URL"), "{command}: the line must name the variable: {line}");
        assert!(line.contains("mysql://x"), "{command}: the line must show the offending value: {line}");
    }
}

#[test]
fn invalid_configuration_fails_with_one_line_without_echoing_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = binary(dir.path(), &["serve"]);
    cmd.env("DATABASE_URL", format!("sqlite:{}", dir.path().join("x.sqlite").display()));
    cmd.env("CONTEXT_OPS_JWT_SECRET", "short-s3cret");
    let run = ChildGuard::spawn(cmd).finish(Duration::from_secs(5));
    let line = assert_one_line_failure(&run);
    assert!(line.contains("CONTEXT_OPS_JWT_SECRET"), "{line}");
    assert!(!run.stderr.contains("short-s3cret"), "the secret must not be printed: {}", run.stderr);
    assert!(!dir.path().join("x.sqlite").exists(), "configuration is validated before the database is touched");
}

#[test]
fn unreachable_postgres_fails_with_one_redacted_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = binary(dir.path(), &["serve"]);
    // Port 1 refuses connections; the pool retries until its 10 s acquire timeout.
    cmd.env("DATABASE_URL", "postgres://postgres:hunter2@127.0.0.1:1/nope");
    let run = ChildGuard::spawn(cmd).finish(Duration::from_secs(40));
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
        let mut cmd = binary(dir.path(), &["migrate"]);
        cmd.env("DATABASE_URL", &url);
        let run = ChildGuard::spawn(cmd).finish(Duration::from_secs(30));
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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Start `serve` and wait for `/health` to answer 200. The port is picked by binding and
/// releasing it, so another process may take it in between: then try another one.
async fn start_serving(dir: &Path, client: &reqwest::Client) -> (ChildGuard, String) {
    let url = format!("sqlite:{}", dir.join("x.sqlite").display());
    for _ in 0..3 {
        let port = free_port();
        let mut cmd = binary(dir, &["serve"]);
        cmd.env("DATABASE_URL", &url).env("CONTEXT_OPS_BIND", format!("127.0.0.1:{port}"));
        let mut child = ChildGuard::spawn(cmd);
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_status() {
                let stderr = child.stderr();
                assert!(stderr.contains("cannot listen"), "serve exited early ({status:?}):\n{stderr}");
                break; // port taken meanwhile: retry with another
            }
            assert!(Instant::now() < deadline, "/health never answered 200; stderr:\n{}", child.stderr());
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
    let (child, base) = start_serving(dir.path(), &client).await;
    assert!(dir.path().join("x.sqlite").exists(), "serve creates and migrates the database");
    let stderr = child.stderr();
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

    let kill = Command::new("kill").args(["-TERM", &child.pid().to_string()]).status().unwrap();
    assert!(kill.success(), "kill -TERM failed");
    let run = tokio::task::spawn_blocking(move || child.finish(Duration::from_secs(10))).await.unwrap();
    assert!(run.status.success(), "SIGTERM must be a clean exit 0, got {:?}:\n{}", run.status, run.stderr);
    assert!(run.stderr.contains("shutting down"), "{}", run.stderr);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
}
