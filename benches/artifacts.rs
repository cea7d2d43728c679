//! Export and import throughput and memory: the real binary against what PostgreSQL's own
//! bulk paths do with the same rows, in one run.
//!
//! `cargo bench --bench artifacts`
//!
//! A fresh database is seeded with SQL (`generate_series`): `BENCH_MESSAGES` messages
//! (default 1,000,000) in conversations of 1,000. The service (`context-ops serve`, the
//! release binary) runs as a child process on it, and:
//!
//! - export: `POST …/exports` until the operation succeeds, beside the baseline
//!   `COPY (SELECT <the columns export reads> … ORDER BY conversation_id, sequence) TO STDOUT`
//!   read to the end;
//! - import: the messages are truncated and the export's artifact imported (`POST
//!   …/imports`, validation pass included) until it succeeds, beside the baseline `COPY
//!   messages_copy FROM STDIN` of the same rows into an identical table (same indexes);
//! - memory: each phase runs on a freshly started child, whose idle RSS is measured after
//!   start-up; its `/proc/<pid>/status` is sampled every 10 ms during the phase, and the peak
//!   (sampled `VmRSS` or the kernel's `VmHWM`, whichever is higher) is reported above idle;
//!   beside it, the service's CPU time and minor page faults over the phase (from
//!   `/proc/<pid>/stat`: steadier than wall-clock rates on a shared host).
//!
//! Targets (issue 16): ≥ 0.8× the baseline's messages/s for both, ≤ 32 MiB above idle for both.
//! Absolute figures depend on the machine; the ratios are what the run reports.
//!
//! Environment: `BENCH_MESSAGES`, `BENCH_POSTGRES_URL` (server URL without a database,
//! default `TEST_POSTGRES_URL` or `postgres://postgres@127.0.0.1:5432`),
//! `BENCH_POSTGRES_PARAMS` (connection parameters for the service and the baselines alike,
//! default `sslmode=disable`: on loopback TLS protects nothing, and sqlx leaves Nagle's
//! algorithm on, so with TLS large statements stall on delayed ACKs — set it to `""` to
//! measure that too), `BENCH_REDIS_URL` (default `TEST_REDIS_URL` or
//! `redis://127.0.0.1:6379`), `BENCH_RUST_LOG` (the service's log filter, default `warn`;
//! `context_ops=debug` logs the export pipeline's waits and each import batch's write time
//! to `$TMPDIR/context-ops-bench-artifacts.log`).

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use futures::StreamExt as _;
use serde_json::{Value, json};
use sqlx::postgres::PgConnection;
use sqlx::{AssertSqlSafe, Connection as _};

const BIN: &str = env!("CARGO_BIN_EXE_context-ops");
const DATABASE: &str = "context_ops_bench_artifacts";
const PER_CONVERSATION: i64 = 1000;
const TARGET_RATIO: f64 = 0.8;
const TARGET_RSS_MIB: f64 = 32.0;
const EXPORT_COLUMNS: &str = "id, sequence, role, scope, content, name, tool_call_id, created_at_ms, metadata";
const ALL_COLUMNS: &str = "tenant, conversation_id, id, sequence, role, scope, content, search_text, name, tool_call_id, created_at_ms, metadata";

fn env_or(name: &str, fallback: &str, default: &str) -> String {
    std::env::var(name).or_else(|_| std::env::var(fallback)).unwrap_or_else(|_| default.to_string())
}

/// The service as a child process, killed when dropped.
struct Service {
    child: Child,
    base: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Service {
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// `VmRSS` and `VmHWM` of `pid`, in KiB.
fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// `(minor page faults, CPU seconds in user and kernel mode)` of `pid` so far. Its CPU
/// time is steadier than wall-clock rates on a shared host (steal is not in it), and the
/// faults count the fresh memory it touched.
fn cpu_and_faults(pid: u32) -> Option<(u64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): state is the first.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let number = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
    // USER_HZ: 100 ticks per second on Linux, whatever the kernel's own tick.
    Some((number(7)?, (number(11)? + number(12)?) as f64 / 100.0))
}

/// Samples a process's RSS until stopped; the maximum seen.
struct Sampler {
    stop: Arc<AtomicBool>,
    max_kib: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
    at_start: Option<(u64, f64)>,
}

/// What a [`Sampler`] saw: peak memory, and the faults and CPU time it took.
struct Sampled {
    rss_mib: f64,
    hwm_mib: f64,
    faults: u64,
    cpu_secs: f64,
}

impl Sampler {
    fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let max_kib = Arc::new(AtomicU64::new(0));
        let (s, m) = (stop.clone(), max_kib.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Some((rss, _)) = memory_kib(pid) {
                    m.fetch_max(rss, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Self { stop, max_kib, thread: Some(thread), at_start: cpu_and_faults(pid) }
    }

    fn finish(mut self, pid: u32) -> Sampled {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let hwm = memory_kib(pid).map(|m| m.1).unwrap_or(0);
        let ((f0, c0), (f1, c1)) = (self.at_start.unwrap_or_default(), cpu_and_faults(pid).unwrap_or_default());
        Sampled {
            rss_mib: self.max_kib.load(Ordering::Relaxed) as f64 / 1024.0,
            hwm_mib: hwm as f64 / 1024.0,
            faults: f1.saturating_sub(f0),
            cpu_secs: c1 - c0,
        }
    }
}

async fn admin(server: &str) -> anyhow::Result<PgConnection> {
    PgConnection::connect(&format!("{server}/postgres")).await.context("connect to PostgreSQL")
}

async fn fresh_database(server: &str, params: &str) -> anyhow::Result<String> {
    let mut conn = admin(server).await?;
    sqlx::query(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"))).execute(&mut conn).await?;
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {DATABASE}"))).execute(&mut conn).await?;
    Ok(if params.is_empty() { format!("{server}/{DATABASE}") } else { format!("{server}/{DATABASE}?{params}") })
}

fn migrate(database_url: &str) -> anyhow::Result<()> {
    let out = Command::new(BIN).arg("migrate").env("DATABASE_URL", database_url).env("RUST_LOG", "warn").output()?;
    ensure!(out.status.success(), "migrate failed: {}", String::from_utf8_lossy(&out.stderr));
    Ok(())
}

async fn seed(conn: &mut PgConnection, total: i64) -> anyhow::Result<()> {
    let conversations = (total + PER_CONVERSATION - 1) / PER_CONVERSATION;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64;
    sqlx::query(
        "INSERT INTO conversations (tenant, conversation_id, next_sequence, message_count, created_at_ms, updated_at_ms) \
         SELECT 'default/default', 'conv-' || lpad(c::text, 6, '0'), $2 + 1, $2, $3, $3 FROM generate_series(1, $1) AS c",
    )
    .bind(conversations)
    .bind(PER_CONVERSATION)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    // Rows as the append path stores them: JSON scope and content, folded search text.
    sqlx::query(
        "INSERT INTO messages (tenant, conversation_id, id, sequence, role, scope, content, search_text, created_at_ms) \
         SELECT 'default/default', conv, 'msg-' || g, s, CASE WHEN s % 2 = 0 THEN 'assistant' ELSE 'user' END, \
                '{\"conversationId\":\"' || conv || '\"}', \
                '\"Message ' || g || ': the quick brown fox jumps over the lazy dog while the agent keeps its context.\"', \
                'message ' || g || ': the quick brown fox jumps over the lazy dog while the agent keeps its context.', \
                $3 + g \
         FROM (SELECT g, 'conv-' || lpad((((g - 1) / $2) + 1)::text, 6, '0') AS conv, ((g - 1) % $2) + 1 AS s \
               FROM generate_series(1, $1) AS g) AS rows",
    )
    .bind(total)
    .bind(PER_CONVERSATION)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    // Set hint bits and statistics now, so neither side pays for the first read of fresh rows.
    sqlx::query("VACUUM ANALYZE").execute(&mut *conn).await?;
    Ok(())
}

fn start_service(database_url: &str, redis_url: &str) -> anyhow::Result<Service> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let log = std::fs::File::create(std::env::temp_dir().join("context-ops-bench-artifacts.log"))?;
    let child = Command::new(BIN)
        .arg("serve")
        .env("DATABASE_URL", database_url)
        .env("REDIS_URL", redis_url)
        .env("CONTEXT_OPS_QUEUE_NAMESPACE", format!("bench-artifacts-{}", std::process::id()))
        .env("CONTEXT_OPS_BIND", format!("127.0.0.1:{port}"))
        .env("CONTEXT_OPS_RETENTION_SWEEP_SECS", "0")
        .env("CONTEXT_OPS_PROJECTOR_INTERVAL_MS", "0")
        .env("RUST_LOG", std::env::var("BENCH_RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()
        .context("spawn context-ops")?;
    Ok(Service { child, base: format!("http://127.0.0.1:{port}") })
}

async fn wait_healthy(client: &reqwest::Client, service: &Service) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if client.get(format!("{}/health", service.base)).send().await.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("the service did not become healthy")
}

/// Submit an operation and long-poll it to the end; the succeeded operation.
async fn run_operation(client: &reqwest::Client, base: &str, path: &str, body: Value) -> anyhow::Result<Value> {
    let response = client.post(format!("{base}{path}")).json(&body).send().await?;
    ensure!(response.status().as_u16() == 202, "submit {path}: {}", response.text().await?);
    let mut op: Value = response.json().await?;
    let id = op["id"].as_str().context("operation id")?.to_string();
    while !matches!(op["state"].as_str(), Some("succeeded" | "failed" | "cancelled")) {
        let url =
            format!("{base}/internal/v1/context/operations/{id}/wait?sinceVersion={}&timeoutMs=10000", op["version"]);
        let response = client.get(url).send().await?;
        // An error answer (the database gone, say) must end the bench, not spin on it.
        ensure!(response.status().is_success(), "waiting on {id}: {}", response.text().await?);
        op = response.json().await?;
    }
    ensure!(op["state"] == "succeeded", "{path} did not succeed: {op}");
    Ok(op)
}

struct Figure {
    name: &'static str,
    /// Submission accepted → operation finished, from the operation's own timestamps.
    ours_secs: f64,
    /// What the client saw, including the long-poll's notification delay.
    client_secs: f64,
    baseline_secs: f64,
    /// The service's RSS at rest before the phase, and its peak during it.
    idle_mib: f64,
    peak_mib: f64,
}

/// Start the service, wait until it is healthy and settled; it and its idle RSS (MiB).
async fn fresh_service(client: &reqwest::Client, database_url: &str, redis: &str) -> anyhow::Result<(Service, f64)> {
    let service = start_service(database_url, redis)?;
    wait_healthy(client, &service).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_mib = memory_kib(service.pid()).map(|m| m.0 as f64 / 1024.0).unwrap_or(0.0);
    println!("service idle RSS: {idle_mib:.1} MiB");
    Ok((service, idle_mib))
}

/// `updatedAtMs - createdAtMs` of a finished operation, in seconds.
fn operation_secs(op: &Value) -> f64 {
    (op["updatedAtMs"].as_i64().unwrap_or(0) - op["createdAtMs"].as_i64().unwrap_or(0)) as f64 / 1000.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let total: i64 = std::env::var("BENCH_MESSAGES").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let server = env_or("BENCH_POSTGRES_URL", "TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432");
    let redis = env_or("BENCH_REDIS_URL", "TEST_REDIS_URL", "redis://127.0.0.1:6379");
    let params = std::env::var("BENCH_POSTGRES_PARAMS").unwrap_or_else(|_| "sslmode=disable".into());
    let database_url = fresh_database(&server, &params).await?;
    migrate(&database_url)?;
    let mut conn = PgConnection::connect(&database_url).await?;
    let seeded = Instant::now();
    seed(&mut conn, total).await?;
    println!("seeded {total} messages in {:.1}s", seeded.elapsed().as_secs_f64());

    let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build()?;
    let (service, idle_mib) = fresh_service(&client, &database_url, &redis).await?;
    let mut figures = Vec::new();

    // Export beside COPY TO.
    let sampler = Sampler::start(service.pid());
    let started = Instant::now();
    let op = run_operation(&client, &service.base, "/internal/v1/context/exports", json!({})).await?;
    let export_secs = started.elapsed().as_secs_f64();
    let export = sampler.finish(service.pid());
    ensure!(op["result"]["messages"].as_i64() == Some(total), "export count: {op}");
    let artifact = op["artifactRef"].as_str().context("artifactRef")?.to_string();
    let size_mib = op["result"]["sizeBytes"].as_f64().unwrap_or(0.0) / 1048576.0;
    let started = Instant::now();
    let mut bytes = 0usize;
    {
        let sql = format!(
            "COPY (SELECT {EXPORT_COLUMNS} FROM messages WHERE tenant = 'default/default' \
             ORDER BY conversation_id, sequence) TO STDOUT"
        );
        let mut stream = conn.copy_out_raw(&sql).await?;
        while let Some(piece) = stream.next().await {
            bytes += piece?.len();
        }
    }
    let copy_out_secs = started.elapsed().as_secs_f64();
    println!(
        "export: {export_secs:.2}s for {size_mib:.0} MiB of artifact; COPY TO STDOUT {copy_out_secs:.2}s for {:.0} MiB; \
         peak RSS {:.1} MiB sampled, VmHWM {:.1} MiB; service CPU {:.2}s, {} minor page faults",
        bytes as f64 / 1048576.0,
        export.rss_mib,
        export.hwm_mib,
        export.cpu_secs,
        export.faults
    );
    figures.push(Figure {
        name: "export",
        ours_secs: operation_secs(&op),
        client_secs: export_secs,
        baseline_secs: copy_out_secs,
        idle_mib,
        peak_mib: export.rss_mib.max(export.hwm_mib),
    });

    // The same rows, every column, for the COPY FROM baseline (untimed).
    let dump = std::env::temp_dir().join(format!("context-ops-bench-{}.copy", std::process::id()));
    {
        let mut file = tokio::fs::File::create(&dump).await?;
        let sql = format!("COPY (SELECT {ALL_COLUMNS} FROM messages ORDER BY conversation_id, sequence) TO STDOUT");
        let mut stream = conn.copy_out_raw(&sql).await?;
        while let Some(piece) = stream.next().await {
            tokio::io::AsyncWriteExt::write_all(&mut file, &piece?).await?;
        }
        tokio::io::AsyncWriteExt::flush(&mut file).await?;
    }

    // Import beside COPY FROM, on a fresh process: its peak is measured from its own idle
    // RSS, not from what the export left allocated.
    drop(service);
    let (service, idle_mib) = fresh_service(&client, &database_url, &redis).await?;
    sqlx::query("TRUNCATE messages, conversations").execute(&mut conn).await?;
    let sampler = Sampler::start(service.pid());
    let started = Instant::now();
    let body = json!({"artifactRef": artifact, "idempotencyKey": "bench-import"});
    let op = run_operation(&client, &service.base, "/internal/v1/context/imports", body).await?;
    let import_secs = started.elapsed().as_secs_f64();
    let import = sampler.finish(service.pid());
    ensure!(op["result"]["messages"]["inserted"].as_i64() == Some(total), "import count: {op}");
    sqlx::query("CREATE TABLE messages_copy (LIKE messages INCLUDING ALL)").execute(&mut conn).await?;
    let started = Instant::now();
    {
        let mut copy = conn.copy_in_raw(&format!("COPY messages_copy ({ALL_COLUMNS}) FROM STDIN")).await?;
        copy.read_from(tokio::fs::File::open(&dump).await?).await?;
        let rows = copy.finish().await?;
        ensure!(rows == total as u64, "COPY FROM loaded {rows} rows");
    }
    let copy_in_secs = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&dump);
    println!(
        "import: {import_secs:.2}s (validation pass included); COPY FROM STDIN {copy_in_secs:.2}s; \
         peak RSS {:.1} MiB sampled, VmHWM {:.1} MiB; service CPU {:.2}s, {} minor page faults",
        import.rss_mib, import.hwm_mib, import.cpu_secs, import.faults
    );
    figures.push(Figure {
        name: "import",
        ours_secs: operation_secs(&op),
        client_secs: import_secs,
        baseline_secs: copy_in_secs,
        idle_mib,
        peak_mib: import.rss_mib.max(import.hwm_mib),
    });

    println!("\n{total} messages on PostgreSQL, connection parameters {params:?}");
    println!(
        "{:<8} {:>12} {:>14} {:>7} {:>16} {:>16} {:>9}",
        "", "ours msg/s", "baseline msg/s", "ratio", "client-seen ratio", "peak above idle", "verdict"
    );
    for f in &figures {
        let ours = total as f64 / f.ours_secs;
        let baseline = total as f64 / f.baseline_secs;
        let ratio = ours / baseline;
        let client_ratio = f.baseline_secs / f.client_secs;
        let above = f.peak_mib - f.idle_mib;
        let ok = ratio >= TARGET_RATIO && above <= TARGET_RSS_MIB;
        println!(
            "{:<8} {ours:>12.0} {baseline:>14.0} {ratio:>6.2}x {client_ratio:>16.2}x {above:>12.1} MiB {:>9}",
            f.name,
            if ok { "ok" } else { "MISSED" }
        );
    }
    println!(
        "ours = submission accepted -> operation finished (its createdAtMs/updatedAtMs); client-seen adds the long-poll's notification delay"
    );
    println!("targets: ratio >= {TARGET_RATIO}x, peak <= {TARGET_RSS_MIB} MiB above idle");
    drop(service);
    conn.close().await?;
    Ok(())
}
