//! Child processes for fault tests: the real `context-ops` binary (on a
//! [`Fixture`](super::fixture::Fixture)'s database, or bare for start-up tests) and a
//! private `redis-server`, each killed and reaped when its guard is dropped (also when the
//! test panics). Output goes to files per process, so a test can read it and a failure can
//! show its tail.

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::client::OpClient;

const BIN: &str = env!("CARGO_BIN_EXE_context-ops");

/// Variables the binary reads; removed so the parent's environment cannot leak in.
const CLEARED: &[&str] =
    &["DATABASE_URL", "REDIS_URL", "AGENT_CONTEXT_SERVICE_TOKEN", "RUST_LOG", "RUST_BACKTRACE", "HOSTNAME"];

/// The binary with `args`, run from `dir` (so a default SQLite file could never land in
/// the source tree), none of the parent's configuration, and backtraces on (so a panic
/// would be loud).
pub fn binary(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args).current_dir(dir);
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(|k| k.starts_with("CONTEXT_OPS_") || CLEARED.contains(&k)) {
            cmd.env_remove(key);
        }
    }
    cmd.env("RUST_BACKTRACE", "1");
    // Fixed batches, as in-process apps (`TestApp`): tests that size batches rely on them.
    cmd.env("CONTEXT_OPS_BATCH_TARGET_MS", "0");
    cmd
}

/// A free TCP port on 127.0.0.1 (bound to port 0, read, released).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    listener.local_addr().unwrap().port()
}

/// A running child process. Dropping it sends SIGKILL (which also ends a stopped process)
/// and reaps it.
pub struct Proc {
    pub name: String,
    child: Option<Child>,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Proc {
    /// Run `cmd` with its stdout in `dir/{name}.out` and its stderr in `dir/{name}.log`.
    pub fn spawn(name: &str, mut cmd: Command, dir: &Path) -> Proc {
        let stdout = dir.join(format!("{name}.out"));
        let stderr = dir.join(format!("{name}.log"));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(File::create(&stdout).expect("create stdout file"))
            .stderr(File::create(&stderr).expect("create log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Proc { name: name.to_string(), child: Some(child), stdout, stderr }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("process is alive").id()
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Send a signal by name (`STOP`, `CONT`, …) with `kill(1)`.
    pub fn signal(&self, signal: &str) {
        let status =
            Command::new("kill").arg(format!("-{signal}")).arg(self.pid().to_string()).status().expect("run kill");
        assert!(status.success(), "kill -{signal} {} failed", self.pid());
    }

    /// Wait up to `within` for the process to exit by itself (after a SIGTERM, say) and reap
    /// it; `None` while it is still running at the deadline.
    pub async fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.as_mut()?.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Panics with the log tail if the process has exited.
    pub fn assert_alive(&mut self) {
        if let Some(child) = self.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            panic!("{} exited early with {status}; log tail:\n{}", self.name, self.log_tail(40));
        }
    }

    /// What it wrote to stderr (the binary logs there).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// The last `lines` of its output, stdout (where `redis-server` logs) before stderr.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.stdout() + &self.log();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if std::thread::panicking() && self.child.is_some() {
            eprintln!("---- {} log tail ----\n{}\n----", self.name, self.log_tail(30));
        }
        self.kill();
    }
}

/// How to run the service: every test process shares these, differing only in port.
#[derive(Clone)]
pub struct ServiceEnv {
    pub database_url: String,
    pub(super) redis_url: Option<String>,
    pub(super) namespace: String,
    pub(super) lease_secs: u64,
    pub(super) dir: PathBuf,
}

impl ServiceEnv {
    fn command(&self, subcommand: &str, port: u16) -> Command {
        let mut cmd = binary(&self.dir, &[subcommand]);
        cmd.env("DATABASE_URL", &self.database_url)
            .env("CONTEXT_OPS_QUEUE_NAMESPACE", &self.namespace)
            .env("CONTEXT_OPS_BIND", format!("127.0.0.1:{port}"))
            .env("CONTEXT_OPS_LEASE_SECS", self.lease_secs.to_string())
            .env("CONTEXT_OPS_DISPATCH_INTERVAL_MS", "200")
            // Lost pushes (the Redis-restart test) are re-pushed after 2 s, not 60 s.
            .env("CONTEXT_OPS_REPUSH_AFTER_MS", "2000")
            .env("CONTEXT_OPS_BATCH_SIZE", "2000")
            .env("CONTEXT_OPS_RETENTION_SWEEP_SECS", "0")
            .env("CONTEXT_OPS_DB_MAX_CONNECTIONS", "6")
            // A pool wait on the shared machine is contention, not an outage (the outage
            // test runs with the production default).
            .env("CONTEXT_OPS_DB_ACQUIRE_TIMEOUT_MS", "5000")
            .env("RUST_LOG", "info,sqlx=warn");
        if let Some(redis) = &self.redis_url {
            cmd.env("REDIS_URL", redis);
        }
        cmd
    }

    /// Apply the migrations (`context-ops migrate`) so the test can seed before starting.
    pub(super) fn migrate(&self) {
        let out = self.command("migrate", 0).output().expect("run context-ops migrate");
        assert!(
            out.status.success(),
            "migrate failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Start `subcommand` (`serve`, `api`, `worker`) on a fresh port.
    pub fn spawn(&self, name: &str, subcommand: &str) -> Service {
        self.spawn_with(name, subcommand, &[])
    }

    /// [`Self::spawn`] with extra environment variables.
    pub fn spawn_with(&self, name: &str, subcommand: &str, env: &[(&str, &str)]) -> Service {
        let port = free_port();
        let mut cmd = self.command(subcommand, port);
        cmd.envs(env.iter().copied());
        let proc = Proc::spawn(name, cmd, &self.dir);
        Service { proc, api: OpClient::new(format!("http://127.0.0.1:{port}")) }
    }
}

/// A service process and a client of it (meaningful for `serve` and `api`).
pub struct Service {
    pub proc: Proc,
    pub api: OpClient,
}

impl Service {
    /// Poll `/health` until it answers 200 (or panic with the log after `within`).
    pub async fn wait_healthy(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            self.proc.assert_alive();
            let ok = self
                .api
                .client
                .get(self.api.url("/health"))
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} not healthy within {within:?}; log tail:\n{}",
                self.proc.name,
                self.proc.log_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Service {
    /// [`Self::wait_healthy`], then poll `/health/ready` until it answers 200 (an API
    /// process loads recall indexes before it is ready); its body.
    pub async fn wait_ready(&mut self, within: Duration) -> serde_json::Value {
        let deadline = Instant::now() + within;
        self.wait_healthy(within).await;
        loop {
            let (status, body) = self.api.get("/health/ready").await;
            if status == 200 {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready within {within:?}: {body}\nlog tail:\n{}",
                self.proc.name,
                self.proc.log_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A private, non-persistent `redis-server` on `port`.
pub fn start_redis(dir: &Path, name: &str, port: u16) -> Proc {
    start_redis_with(dir, name, port, &[])
}

/// [`start_redis`] with more `redis-server` arguments (e.g. a TLS port beside `port`, which
/// stays plain: readiness is its `PING`).
pub fn start_redis_with(dir: &Path, name: &str, port: u16, args: &[&str]) -> Proc {
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--daemonize", "no"])
        .args(args)
        .current_dir(dir);
    let mut proc = Proc::spawn(name, cmd, dir);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !redis_pings(port) {
        proc.assert_alive();
        assert!(Instant::now() < deadline, "redis-server on {port} did not answer; log:\n{}", proc.log_tail(20));
        std::thread::sleep(Duration::from_millis(20));
    }
    proc
}

/// One raw `PING` over RESP.
fn redis_pings(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(stream.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
}
