//! Append throughput: the real service over HTTP against what the engine itself can do.
//!
//! `cargo bench --bench append [sqlite|postgres]`
//!
//! For each backend the service runs in-process (`server::start`, as the tests do) on a
//! fresh database, and 4 concurrent clients (one conversation each) append
//! `BENCH_MESSAGES` messages (default 200,000) in batches of 100 through
//! `POST /internal/v1/context/messages/batch`. In the same run and on the same engine a
//! baseline loads the same rows, with the same column values, into an identical fresh
//! `messages` table:
//!
//! - PostgreSQL: one `COPY messages (…) FROM STDIN` stream;
//! - SQLite: a prepared `INSERT` per row, one transaction per 100-row batch.
//!
//! The report is the ratio ours/baseline; absolute numbers depend on the machine. Beside it,
//! the latency of our append requests: p50, p99 and max (target: SQLite p99 under 10 ms),
//! and each side's machine CPU per message (every process: service, clients, database),
//! which moves less than the rates when the host's load does.
//!
//! The latency target is for an agent fleet's appends — `BENCH_CLIENTS=8 BENCH_BATCH=2`
//! (a turn or two per request) — where requests do not queue behind each other's bulk: with
//! 100-message requests one SQLite writer serialises ~4 ms of inserts per request, so 8
//! closed-loop clients wait ~30 ms for each other whatever the service does (Little's law).
//!
//! Environment: `BENCH_MESSAGES`, `BENCH_CLIENTS` (default 4), `BENCH_BATCH` (default 100), `BENCH_POSTGRES_URL` (server URL without a database,
//! default `TEST_POSTGRES_URL` or `postgres://postgres@127.0.0.1:5432`),
//! `BENCH_POSTGRES_PARAMS` (connection parameters for the service and the baseline alike,
//! default `sslmode=disable`, as in the other benches: on loopback TLS protects nothing, and
//! with Debian's `ssl = on` both sides would encrypt every row — set it to `""` to measure
//! that too), `BENCH_REDIS_URL` (default `TEST_REDIS_URL` or `redis://127.0.0.1:6379`).

use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use context_jobs::contract::{ConversationRecord, ConversationScope, MESSAGES_APPEND_PATH, search_text};
use context_ops::config::{Config, Role};
use context_ops::server;
use serde_json::{Value, json};
use sqlx::postgres::PgConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{AssertSqlSafe, Connection as _};

#[path = "shared/machine_cpu.rs"]
mod machine_cpu;
use machine_cpu::{cpu_ms_per, machine_busy};

/// Concurrent clients (`BENCH_CLIENTS`, default 4).
fn clients() -> usize {
    std::env::var("BENCH_CLIENTS").ok().and_then(|v| v.trim().parse().ok()).filter(|n| *n > 0).unwrap_or(4)
}
/// Messages per request (`BENCH_BATCH`, default 100).
fn batch() -> usize {
    std::env::var("BENCH_BATCH").ok().and_then(|v| v.trim().parse().ok()).filter(|n| *n > 0).unwrap_or(100)
}
const TENANT: &str = "default/default";
const TOKEN: &str = "bench-service-token";
/// Issue 16's goal, read with `BENCH_CLIENTS=8` (batches of 100).
const POSTGRES_TARGET_RATIO: f64 = 0.8;
const PG_DATABASE: &str = "context_ops_bench";

/// The workload: per client, its conversation and its messages in append order.
struct Workload {
    total: usize,
    conversations: Vec<(String, Vec<ConversationRecord>)>,
}

impl Workload {
    fn new(total: usize) -> Self {
        const FILLER: &str = "The quick brown fox jumps over the lazy dog while the agent keeps \
                              its context durable and searchable, turn after turn.";
        let clients = clients();
        let conversations = (0..clients)
            .map(|c| {
                let n = total / clients + usize::from(c < total % clients);
                let conversation = format!("bench-conversation-{c}");
                let records = (0..n)
                    .map(|i| {
                        let mut text = format!("Client {c} message {i:07}: {FILLER}");
                        text.truncate(100);
                        ConversationRecord {
                            id: format!("msg-{c}-{i:07}"),
                            scope: ConversationScope {
                                conversation_id: conversation.clone(),
                                user_id: None,
                                agent_id: None,
                                agent_space_id: None,
                                runtime_type: None,
                                relations: Default::default(),
                            },
                            role: "user".into(),
                            content: Value::String(text),
                            name: None,
                            tool_call_id: None,
                            sequence: 0,
                            created_at_ms: 0,
                            metadata: Value::Null,
                        }
                    })
                    .collect();
                (conversation, records)
            })
            .collect();
        Self { total, conversations }
    }

    /// The request bodies of each client, serialized up front so the clients measure the
    /// service rather than their own JSON encoding.
    fn request_bodies(&self) -> Vec<Vec<Vec<u8>>> {
        self.conversations
            .iter()
            .map(|(_, records)| {
                records
                    .chunks(batch())
                    .map(|chunk| {
                        let messages: Vec<Value> = chunk
                            .iter()
                            .map(|r| {
                                json!({
                                    "id": r.id,
                                    "scope": {"conversationId": r.scope.conversation_id},
                                    "role": r.role,
                                    "content": r.content,
                                })
                            })
                            .collect();
                        serde_json::to_vec(&json!({ "messages": messages })).expect("serializable")
                    })
                    .collect()
            })
            .collect()
    }

    /// Batches in round-robin order over the conversations: (conversation, first sequence,
    /// records).
    fn batches(&self) -> Vec<(&str, i64, &[ConversationRecord])> {
        let per_conversation: Vec<Vec<_>> = self
            .conversations
            .iter()
            .map(|(conversation, records)| {
                records
                    .chunks(batch())
                    .enumerate()
                    .map(|(b, chunk)| (conversation.as_str(), (b * batch()) as i64 + 1, chunk))
                    .collect()
            })
            .collect();
        let rounds = per_conversation.iter().map(Vec::len).max().unwrap_or(0);
        (0..rounds).flat_map(|round| per_conversation.iter().filter_map(move |b| b.get(round).copied())).collect()
    }
}

/// The stored column values of one record, computed as the service computes them.
struct Columns {
    scope: String,
    content: String,
    search_text: String,
}

fn columns(r: &ConversationRecord) -> Columns {
    Columns {
        scope: serde_json::to_string(&r.scope).expect("serializable"),
        content: r.content.to_string(),
        search_text: search_text(&r.content),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

fn rate(messages: usize, elapsed: Duration) -> f64 {
    messages as f64 / elapsed.as_secs_f64()
}

/// One side's figures: messages per second, and the machine's CPU per message in
/// microseconds (every process: the service, the clients and the database; see
/// `machine_cpu`), steadier than the rate on a host whose load moves it.
struct Side {
    per_sec: f64,
    cpu_us: Option<f64>,
}

/// Time and machine CPU of a phase, from [`Phase::start`] to [`Phase::end`].
struct Phase(Instant, Option<Duration>);

impl Phase {
    fn start() -> Self {
        Phase(Instant::now(), machine_busy())
    }

    fn end(self, messages: usize) -> Side {
        let cpu_us = cpu_ms_per(self.1, machine_busy(), messages).map(|ms| ms * 1000.0);
        Side { per_sec: rate(messages, self.0.elapsed()), cpu_us }
    }
}

// ------------------------------------------------------------------------------ ours

/// Start the service on `database_url` and append the workload over HTTP.
/// Request latencies, sorted.
struct Latencies(Vec<Duration>);

impl Latencies {
    fn at(&self, q: f64) -> Duration {
        let i = ((self.0.len() as f64 * q).ceil() as usize).clamp(1, self.0.len()) - 1;
        self.0[i]
    }
    fn summary(&self) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        format!(
            "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            ms(self.at(0.50)),
            ms(self.at(0.99)),
            ms(*self.0.last().unwrap_or(&Duration::ZERO))
        )
    }
}

async fn run_service(
    database_url: &str,
    redis_url: Option<String>,
    workload: &Workload,
) -> anyhow::Result<(Side, Latencies)> {
    let mut config = Config::defaults();
    config.http.bind = "127.0.0.1:0".parse()?;
    config.metrics.metrics_bind = None;
    config.database.database_url = database_url.to_owned();
    config.queue.redis_url = redis_url;
    config.queue.queue_namespace = format!("context-ops-bench-{}", ulid::Ulid::generate());
    config.auth.service_token = Some(TOKEN.into());
    config.auth.jwt_secret = None;
    let running = server::start(config, Role::Serve).await.context("service starts")?;
    let url = format!("http://{}{MESSAGES_APPEND_PATH}", running.addr);

    let bodies = workload.request_bodies();
    let phase = Phase::start();
    let clients = bodies.into_iter().map(|batches| {
        let url = url.clone();
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut latencies = Vec::with_capacity(batches.len());
            for body in batches {
                let sent = Instant::now();
                let response = client
                    .post(&url)
                    .bearer_auth(TOKEN)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body)
                    .send()
                    .await?;
                let status = response.status();
                let text = response.text().await?;
                ensure!(status.is_success(), "append failed with {status}: {text}");
                let reply: Value = serde_json::from_str(&text)?;
                ensure!(reply["skipped"] == 0, "append skipped messages unexpectedly: {text}");
                latencies.push(sent.elapsed());
            }
            anyhow::Ok(latencies)
        })
    });
    let mut latencies = Vec::new();
    for result in futures::future::join_all(clients).await {
        latencies.extend(result.context("client task panicked")??);
    }
    let ours = phase.end(workload.total);
    running.stop().await?;
    latencies.sort();
    Ok((ours, Latencies(latencies)))
}

// ---------------------------------------------------------------------------- SQLite

fn sqlite_options(path: &std::path::Path) -> SqliteConnectOptions {
    // The service's own settings (src/db.rs), so the baseline runs on the same engine setup.
    SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(30))
        .foreign_keys(true)
}

async fn bench_sqlite(workload: &Workload) -> anyhow::Result<(Side, Side, Latencies)> {
    let dir = tempfile::tempdir()?;
    let ours_path = dir.path().join("ours.sqlite");
    let (ours, latencies) = run_service(&format!("sqlite:{}", ours_path.display()), None, workload).await?;

    // The baseline table: the DDL SQLite recorded for the service's `messages` table and
    // its indexes, replayed in a fresh file.
    let mut conn = sqlx::SqliteConnection::connect_with(&sqlite_options(&ours_path)).await?;
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM messages").fetch_one(&mut conn).await?;
    ensure!(stored as usize == workload.total, "service stored {stored} of {} messages", workload.total);
    let ddl: Vec<String> = sqlx::query_scalar(
        "SELECT sql FROM sqlite_master WHERE tbl_name = 'messages' AND sql IS NOT NULL \
         ORDER BY type = 'index', name",
    )
    .fetch_all(&mut conn)
    .await?;
    let sample = sample_row_sqlite(&mut conn).await?;
    conn.close().await?;

    let base_path = dir.path().join("baseline.sqlite");
    let mut conn = sqlx::SqliteConnection::connect_with(&sqlite_options(&base_path)).await?;
    for statement in ddl {
        sqlx::raw_sql(AssertSqlSafe(statement)).execute(&mut conn).await?;
    }
    let batches = workload.batches();
    let phase = Phase::start();
    for (conversation, first_sequence, records) in batches {
        let now = now_ms();
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        for (i, r) in records.iter().enumerate() {
            let c = columns(r);
            sqlx::query(
                "INSERT INTO messages (tenant, conversation_id, id, sequence, role, scope, content, \
                 search_text, name, tool_call_id, created_at_ms, metadata) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            )
            .bind(TENANT)
            .bind(conversation)
            .bind(r.id.as_str())
            .bind(first_sequence + i as i64)
            .bind(r.role.as_str())
            .bind(c.scope)
            .bind(c.content)
            .bind(c.search_text)
            .bind(None::<&str>)
            .bind(None::<&str>)
            .bind(now)
            .bind(None::<&str>)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
    }
    let baseline = phase.end(workload.total);
    check_same_row(&sample, &sample_row_sqlite(&mut conn).await?, "SQLite");
    conn.close().await?;
    Ok((ours, baseline, latencies))
}

// ------------------------------------------------------------------------ PostgreSQL

fn postgres_server_url() -> String {
    std::env::var("BENCH_POSTGRES_URL")
        .or_else(|_| std::env::var("TEST_POSTGRES_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

fn redis_url() -> String {
    std::env::var("BENCH_REDIS_URL")
        .or_else(|_| std::env::var("TEST_REDIS_URL"))
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// Escape one value for `COPY … FROM STDIN` text format.
fn copy_text(out: &mut String, value: &str) {
    for ch in value.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            _ => out.push(ch),
        }
    }
}

/// A best-effort `CHECKPOINT`, so each measured phase starts with a clean WAL.
async fn checkpoint(conn: &mut PgConnection) {
    let _ = sqlx::query("CHECKPOINT").execute(conn).await;
}

async fn bench_postgres(workload: &Workload) -> anyhow::Result<(Side, Side, Latencies)> {
    let server = postgres_server_url();
    let mut admin = PgConnection::connect(&format!("{server}/postgres"))
        .await
        .with_context(|| format!("cannot connect to PostgreSQL at {server}"))?;
    sqlx::query(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {PG_DATABASE} WITH (FORCE)")))
        .execute(&mut admin)
        .await?;
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {PG_DATABASE}"))).execute(&mut admin).await?;
    admin.close().await?;

    let params = std::env::var("BENCH_POSTGRES_PARAMS").unwrap_or_else(|_| "sslmode=disable".into());
    let db_url = format!("{server}/{PG_DATABASE}?{params}");
    let mut conn = PgConnection::connect(&db_url).await?;
    let autovacuum: String = sqlx::query_scalar("SHOW autovacuum").fetch_one(&mut conn).await?;
    if autovacuum != "on" {
        println!(
            "note: autovacuum is {autovacuum} on this server, so the fresh `messages` table is \
             never ANALYZEd while the benchmark runs and query plans see no statistics"
        );
    }
    sqlx::raw_sql("CREATE SCHEMA ours; CREATE SCHEMA baseline").execute(&mut conn).await?;
    checkpoint(&mut conn).await;

    let (ours, latencies) =
        run_service(&format!("{db_url}&options[search_path]=ours"), Some(redis_url()), workload).await?;

    // The baseline table: a structural copy (columns, constraints, indexes) of the
    // service's migrated `messages` table.
    sqlx::raw_sql(
        "CREATE TABLE baseline.messages (LIKE ours.messages INCLUDING ALL); \
         SET search_path = ours",
    )
    .execute(&mut conn)
    .await?;
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM messages").fetch_one(&mut conn).await?;
    ensure!(stored as usize == workload.total, "service stored {stored} of {} messages", workload.total);
    let sample = sample_row_pg(&mut conn).await?;
    sqlx::raw_sql("SET search_path = baseline").execute(&mut conn).await?;
    checkpoint(&mut conn).await;

    let batches = workload.batches();
    let phase = Phase::start();
    let now = now_ms();
    let mut copy = conn
        .copy_in_raw(
            "COPY messages (tenant, conversation_id, id, sequence, role, scope, content, \
             search_text, created_at_ms) FROM STDIN",
        )
        .await?;
    let mut chunk = String::with_capacity(1 << 20);
    for (conversation, first_sequence, records) in batches {
        for (i, r) in records.iter().enumerate() {
            let c = columns(r);
            for value in [TENANT, conversation, r.id.as_str()] {
                copy_text(&mut chunk, value);
                chunk.push('\t');
            }
            chunk.push_str(&(first_sequence + i as i64).to_string());
            chunk.push('\t');
            for value in [&r.role, &c.scope, &c.content, &c.search_text] {
                copy_text(&mut chunk, value);
                chunk.push('\t');
            }
            chunk.push_str(&now.to_string());
            chunk.push('\n');
        }
        if chunk.len() >= 1 << 20 {
            copy.send(chunk.as_bytes()).await?;
            chunk.clear();
        }
    }
    if !chunk.is_empty() {
        copy.send(chunk.as_bytes()).await?;
    }
    let copied = copy.finish().await?;
    let baseline = phase.end(workload.total);
    ensure!(copied as usize == workload.total, "COPY loaded {copied} of {} rows", workload.total);
    check_same_row(&sample, &sample_row_pg(&mut conn).await?, "PostgreSQL");
    conn.close().await?;
    Ok((ours, baseline, latencies))
}

// ---------------------------------------------------------------------- row check

type SampleRow = (String, String, String, i64, String, String, String, String);

const SAMPLE_ROW_SQL: &str = "SELECT tenant, conversation_id, id, sequence, role, scope, content, search_text \
     FROM messages WHERE conversation_id = 'bench-conversation-0' AND sequence = 1";

/// One stored row (all columns but the timestamp), to check the baseline wrote what the
/// service writes.
async fn sample_row_sqlite(conn: &mut sqlx::SqliteConnection) -> anyhow::Result<SampleRow> {
    Ok(sqlx::query_as(SAMPLE_ROW_SQL).fetch_one(conn).await?)
}

async fn sample_row_pg(conn: &mut PgConnection) -> anyhow::Result<SampleRow> {
    Ok(sqlx::query_as(SAMPLE_ROW_SQL).fetch_one(conn).await?)
}

fn check_same_row(ours: &SampleRow, baseline: &SampleRow, backend: &str) {
    if ours != baseline {
        eprintln!(
            "warning: {backend} baseline row differs from the service's row:\n  ours:     {ours:?}\n  baseline: {baseline:?}"
        );
    }
}

// ---------------------------------------------------------------------------- main

struct Outcome {
    backend: &'static str,
    baseline: &'static str,
    result: anyhow::Result<(Side, Side, Latencies)>,
}

fn main() -> anyhow::Result<()> {
    let total = match std::env::var("BENCH_MESSAGES") {
        Ok(v) => usize::from_str(v.trim()).context("BENCH_MESSAGES must be a positive integer")?,
        Err(_) => 200_000,
    };
    ensure!(total > 0, "BENCH_MESSAGES must be positive");
    // `cargo bench` passes `--bench`; bare words select backends.
    let mut selected = Vec::new();
    for arg in std::env::args().skip(1).filter(|a| !a.starts_with('-')) {
        match arg.to_ascii_lowercase().as_str() {
            "sqlite" => selected.push("sqlite"),
            "postgres" | "postgresql" | "pg" => selected.push("postgresql"),
            other => bail!("unknown backend {other:?}: expected sqlite or postgres"),
        }
    }
    let wanted = |name: &str| selected.is_empty() || selected.contains(&name);

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let workload = Workload::new(total);
    println!(
        "append benchmark: {total} messages, {} clients (one conversation each), \
         {} messages per request, ~100-char contents",
        clients(),
        batch()
    );

    let mut outcomes = Vec::new();
    if wanted("sqlite") {
        println!("running sqlite …");
        outcomes.push(Outcome {
            backend: "sqlite",
            baseline: "prepared INSERT, 1 tx / 100 rows",
            result: runtime.block_on(bench_sqlite(&workload)),
        });
    }
    if wanted("postgresql") {
        println!("running postgresql …");
        outcomes.push(Outcome {
            backend: "postgresql",
            baseline: "COPY FROM STDIN",
            result: runtime.block_on(bench_postgres(&workload)),
        });
    }

    println!();
    println!("{:<11} {:>14} {:>17} {:>7}  baseline", "backend", "ours msgs/s", "baseline msgs/s", "ratio");
    let mut failed = false;
    for o in &outcomes {
        match &o.result {
            Ok((ours, baseline, latencies)) => {
                println!(
                    "{:<11} {:>14.0} {:>17.0} {:>7.3}  {}",
                    o.backend,
                    ours.per_sec,
                    baseline.per_sec,
                    ours.per_sec / baseline.per_sec,
                    o.baseline
                );
                println!("{:<11} append requests: {}", "", latencies.summary());
                if let (Some(a), Some(b)) = (ours.cpu_us, baseline.cpu_us) {
                    println!(
                        "{:<11} machine CPU per message: ours {a:.1} µs, baseline {b:.1} µs (baseline ÷ ours {:.3})",
                        "",
                        b / a
                    );
                }
            }
            Err(e) => {
                failed = true;
                println!("{:<11} failed: {e:#}", o.backend);
            }
        }
    }
    println!();
    if let Some(Outcome { result: Ok((_, _, latencies)), .. }) = outcomes.iter().find(|o| o.backend == "sqlite") {
        let p99 = latencies.at(0.99);
        let verdict = if p99 < Duration::from_millis(10) { "met" } else { "NOT met" };
        println!("target: SQLite append p99 < 10 ms — {verdict} ({:.2} ms)", p99.as_secs_f64() * 1e3);
    }
    if let Some(Outcome { result: Ok((ours, baseline, _)), .. }) = outcomes.iter().find(|o| o.backend == "postgresql") {
        let ratio = ours.per_sec / baseline.per_sec;
        let verdict = if ratio >= POSTGRES_TARGET_RATIO { "met" } else { "NOT met" };
        println!("target: PostgreSQL ratio >= {POSTGRES_TARGET_RATIO} — {verdict} ({ratio:.3})");
    } else {
        println!("target: PostgreSQL ratio >= {POSTGRES_TARGET_RATIO} — not measured");
    }
    ensure!(!failed, "a benchmark run failed");
    Ok(())
}
