//! (e) Recovery after SIGKILL with the default settings: the real binary (PostgreSQL +
//! Redis) runs a delete of `n` messages; a second process is already up (a standby); the
//! first is SIGKILLed mid-run, and the figure is how long until the standby runs the
//! operation again — beside the default lease, which is what recovery waited for before
//! worker processes announced themselves.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use context_ops::config::Config;

use super::common::{fresh_schema, namespace, seed, submit_delete};

/// A child process and its port, killed when dropped.
struct Proc(Child, u16);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn command(url: &str, redis: &str, ns: &str, args: &[&str], port: u16) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_context-ops"));
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATABASE_URL", url)
        .env("REDIS_URL", redis)
        .env("CONTEXT_OPS_QUEUE_NAMESPACE", ns)
        .env("CONTEXT_OPS_BIND", format!("127.0.0.1:{port}"))
        .env("CONTEXT_OPS_RETENTION_SWEEP_SECS", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

async fn healthy(client: &reqwest::Client, base: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if client.get(format!("{base}/health")).send().await.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    anyhow::bail!("{base} not healthy within 30 s")
}

async fn row(pool: &sqlx::PgPool, id: &str) -> anyhow::Result<(String, i64, i64)> {
    Ok(sqlx::query_as("SELECT state, attempt, processed FROM operations WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await?)
}

/// SIGKILL → running again.
pub async fn after_sigkill(redis: &str, server: &str, n: i64) -> anyhow::Result<Duration> {
    let url = fresh_schema(server).await?;
    let ns = namespace("kill");
    let migrated = command(&url, redis, &ns, &["migrate"], 0).status()?;
    anyhow::ensure!(migrated.success(), "context-ops migrate failed");
    let pool = sqlx::PgPool::connect(&url).await?;
    seed(&pool, "big", n).await?;

    let client = reqwest::Client::new();
    // Both processes up first; whichever claims the delete is killed, the other is the standby.
    let mut procs = Vec::new();
    for _ in 0..2 {
        let port = free_port();
        procs.push(Proc(command(&url, redis, &ns, &["serve"], port).spawn()?, port));
        healthy(&client, &format!("http://127.0.0.1:{port}")).await?;
    }
    let base = format!("http://127.0.0.1:{}", procs[0].1);
    let op = submit_delete(&client, &base, None, "big").await?;
    let id = op["id"].as_str().unwrap_or_default().to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !matches!(row(&pool, &id).await?, (s, _, p) if s == "running" && p > 0) {
        anyhow::ensure!(Instant::now() < deadline, "the delete did not start");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // The holder is `host-<pid>-<ulid>` (HOSTNAME is cleared above).
    let owner: String =
        sqlx::query_scalar("SELECT lease_owner FROM operations WHERE id = $1").bind(&id).fetch_one(&pool).await?;
    let pid: u32 =
        owner.split('-').nth(1).and_then(|p| p.parse().ok()).ok_or_else(|| anyhow::anyhow!("owner {owner}"))?;
    let holder = procs.iter_mut().find(|p| p.0.id() == pid).ok_or_else(|| anyhow::anyhow!("no process {pid}"))?;
    holder.0.kill()?;
    let killed = Instant::now();
    let (state, _, _) = row(&pool, &id).await?;
    anyhow::ensure!(state == "running", "the delete finished before the kill ({state}); raise BENCH_RECOVERY_MESSAGES");
    loop {
        let (state, attempt, _) = row(&pool, &id).await?;
        if state == "running" && attempt >= 2 || state == "succeeded" {
            break;
        }
        anyhow::ensure!(killed.elapsed() < Duration::from_secs(120), "not recovered within 120 s ({state})");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(killed.elapsed())
}

/// The default lease.
pub fn default_lease() -> Duration {
    Duration::from_secs(Config::defaults().worker.lease_secs)
}
