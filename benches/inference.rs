//! Inference overhead: what running a Responses turn as a pollable operation costs on top
//! of the provider's own latency.
//!
//! `cargo bench --bench inference [sqlite|postgres]`
//!
//! A fake provider (`tests/it/harness/fake_responses.rs`, a real HTTP server on 127.0.0.1)
//! answers every call after a fixed `BENCH_PROVIDER_MS` (default 100 ms). In the same run:
//!
//! - baseline: `BENCH_OPS` (default 200) direct `POST /v1/responses` calls to the fake,
//!   `BENCH_CONCURRENCY` (default 8) at a time: the provider latency as a client sees it;
//! - ours: the same number of inference operations against the service (in-process, as
//!   the tests run it), each timed from submit until the long-poll
//!   (`GET …/operations/{id}/wait`) returns it `succeeded`, with the same concurrency.
//!
//! The report is the overhead of ours over the baseline, in % of the mean (target ≤ 10 %),
//! with p50/p95 beside it. `worker_concurrency` (per kind) is set to the client
//! concurrency so no operation waits for a worker slot; `dispatch_interval_ms` stays at
//! its default (submissions push directly; the dispatcher only recovers).

// The test harness's fake provider; the bench uses only part of it.
#[allow(dead_code)]
#[path = "../tests/it/harness/fake_responses.rs"]
mod fake;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use context_ops::config::{Config, Role};
use context_ops::server;
use fake::{FakeProvider, Step, completed_text};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

const OPS_PATH: &str = "/internal/v1/context/operations";
const INFER_PATH: &str = "/internal/v1/context/inference";

fn env_number(name: &str, default: u64) -> anyhow::Result<u64> {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().with_context(|| format!("{name} must be a positive integer")),
        Err(_) => Ok(default),
    }
}

struct Stats {
    mean: f64,
    p50: f64,
    p95: f64,
    max: f64,
    wall: Duration,
}

fn stats(mut samples: Vec<Duration>, wall: Duration) -> Stats {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let pick = |q: f64| ms(samples[((samples.len() - 1) as f64 * q).round() as usize]);
    Stats {
        mean: samples.iter().map(|d| ms(*d)).sum::<f64>() / samples.len() as f64,
        p50: pick(0.5),
        p95: pick(0.95),
        max: pick(1.0),
        wall,
    }
}

/// Run `n` timed tasks, `concurrency` at a time.
async fn timed<F, Fut>(n: usize, concurrency: usize, task: F) -> anyhow::Result<(Vec<Duration>, Duration)>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let gate = Arc::new(Semaphore::new(concurrency));
    let started = Instant::now();
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        let permit = gate.clone().acquire_owned().await?;
        let fut = task(i);
        handles.push(tokio::spawn(async move {
            let t0 = Instant::now();
            let out = fut.await;
            drop(permit);
            out.map(|()| t0.elapsed())
        }));
    }
    let mut samples = Vec::with_capacity(n);
    for h in handles {
        samples.push(h.await??);
    }
    Ok((samples, started.elapsed()))
}

/// Submit one turn and long-poll it to the end.
async fn one_operation(client: reqwest::Client, base: String, i: usize) -> anyhow::Result<()> {
    let body = json!({"model": "bench-model", "messages": [{"role": "user", "content": format!("question {i}")}]});
    let op: Value =
        client.post(format!("{base}{INFER_PATH}")).json(&body).send().await?.error_for_status()?.json().await?;
    let id = op["id"].as_str().context("no operation id")?.to_string();
    let mut version = op["version"].as_i64().unwrap_or(0);
    loop {
        let url = format!("{base}{OPS_PATH}/{id}/wait?sinceVersion={version}&timeoutMs=30000");
        let op: Value = client.get(url).send().await?.error_for_status()?.json().await?;
        match op["state"].as_str() {
            Some("succeeded") => return Ok(()),
            Some("failed" | "cancelled") => bail!("operation {id} ended {}: {op}", op["state"]),
            _ => version = op["version"].as_i64().unwrap_or(version),
        }
    }
}

/// Queue wait (created → claimed) and run time (claimed → finished) of the succeeded
/// operations submitted since `since_ms` (the warm-up excluded), in ms, from the rows
/// themselves: (mean, p95, max) of each.
async fn phases(db: &context_ops::store::Db, since_ms: i64) -> anyhow::Result<[(f64, f64, f64); 2]> {
    let sql = "SELECT started_at_ms - created_at_ms, finished_at_ms - started_at_ms FROM operations \
               WHERE state = 'succeeded' AND created_at_ms >= $1";
    let rows: Vec<(i64, i64)> = match db {
        context_ops::store::Db::Postgres(pool) => sqlx::query_as(sql).bind(since_ms).fetch_all(pool).await?,
        context_ops::store::Db::Sqlite(pool) => sqlx::query_as(sql).bind(since_ms).fetch_all(pool).await?,
    };
    ensure!(!rows.is_empty(), "no succeeded operations");
    let summary = |mut v: Vec<i64>| {
        v.sort_unstable();
        let mean = v.iter().sum::<i64>() as f64 / v.len() as f64;
        (mean, v[(v.len() - 1) * 95 / 100] as f64, v[v.len() - 1] as f64)
    };
    Ok([summary(rows.iter().map(|r| r.0).collect()), summary(rows.iter().map(|r| r.1).collect())])
}

async fn bench(
    backend: &str,
    ops: usize,
    concurrency: usize,
    provider_ms: u64,
) -> anyhow::Result<(Stats, Stats, [(f64, f64, f64); 2])> {
    let fake = FakeProvider::start(vec![]).await;
    fake.always(Step::ok(completed_text("benchmark answer")).after(Duration::from_millis(provider_ms)));
    let dir = tempfile::tempdir()?;
    let mut config = Config::defaults();
    config.http.bind = "127.0.0.1:0".parse()?;
    config.database.database_url = match backend {
        "sqlite" => format!("sqlite:{}", dir.path().join("bench.sqlite").display()),
        _ => {
            let server =
                std::env::var("BENCH_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into());
            let schema = format!("bench_inference_{}", std::process::id());
            let admin = sqlx::PgPool::connect(&format!("{server}/postgres")).await?;
            let _ = sqlx::query("CREATE DATABASE context_ops_bench").execute(&admin).await;
            admin.close().await;
            let db = sqlx::PgPool::connect(&format!("{server}/context_ops_bench")).await?;
            for sql in [format!("DROP SCHEMA IF EXISTS {schema} CASCADE"), format!("CREATE SCHEMA {schema}")] {
                sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&db).await?;
            }
            db.close().await;
            config.queue.redis_url =
                Some(std::env::var("BENCH_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into()));
            format!("{server}/context_ops_bench?options[search_path]={schema}")
        }
    };
    config.queue.queue_namespace = format!("bench-inference-{}", std::process::id());
    config.worker.worker_concurrency = concurrency;
    config.provider.responses_base_url = fake.url.clone();
    config.provider.responses_api_key = Some("bench-key".into());
    config.retention.retention_sweep_secs = 0;
    let running = server::start(config, Role::Serve).await?;
    let base = format!("http://{}", running.addr);
    let client = reqwest::Client::new();

    let direct = |i: usize| {
        let (client, url) = (client.clone(), format!("{}/v1/responses", fake.url));
        async move {
            let body = json!({"model": "bench-model", "input": [{"role": "user", "content": format!("q {i}")}], "store": false});
            client.post(url).json(&body).send().await?.error_for_status()?.bytes().await?;
            Ok(())
        }
    };
    // Warm up connections and pools on both paths, at the measured concurrency (a
    // sequential warm-up leaves the pools one connection deep).
    timed(2 * concurrency, concurrency, direct).await?;
    timed(2 * concurrency, concurrency, |i| one_operation(client.clone(), base.clone(), i)).await?;
    let (samples, wall) = timed(ops, concurrency, direct).await?;
    let baseline = stats(samples, wall);
    let measured_from = context_ops::store::now_ms();
    let (samples, wall) = timed(ops, concurrency, |i| one_operation(client.clone(), base.clone(), i)).await?;
    let ours = stats(samples, wall);
    ensure!(fake.received().len() >= 2 * ops + 4 * concurrency, "every call reached the fake provider");
    let breakdown = phases(&running.state.db, measured_from).await?;
    running.stop().await?;
    Ok((baseline, ours, breakdown))
}

fn main() -> anyhow::Result<()> {
    let ops = env_number("BENCH_OPS", 200)? as usize;
    let concurrency = env_number("BENCH_CONCURRENCY", 8)? as usize;
    let provider_ms = env_number("BENCH_PROVIDER_MS", 100)?;
    ensure!(ops > 0 && concurrency > 0, "BENCH_OPS and BENCH_CONCURRENCY must be positive");
    let mut backends = Vec::new();
    for arg in std::env::args().skip(1).filter(|a| !a.starts_with('-')) {
        match arg.to_ascii_lowercase().as_str() {
            "sqlite" => backends.push("sqlite"),
            "postgres" | "postgresql" | "pg" => backends.push("postgres"),
            other => bail!("unknown backend {other:?}: expected sqlite or postgres"),
        }
    }
    if backends.is_empty() {
        backends.push("sqlite");
    }
    // Errors only (set RUST_LOG for more): a failing run should say why.
    if std::env::var_os("RUST_LOG").is_none() {
        // SAFETY: still single-threaded: the runtime starts below.
        unsafe { std::env::set_var("RUST_LOG", "error") };
    }
    context_ops::telemetry::init(false);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    println!("inference benchmark: {ops} operations, concurrency {concurrency}, provider answers in {provider_ms} ms");
    for backend in backends {
        let (baseline, ours, [queue_wait, run]) = runtime.block_on(bench(backend, ops, concurrency, provider_ms))?;
        let overhead = (ours.mean / baseline.mean - 1.0) * 100.0;
        println!("\n[{backend}]");
        println!("  {:<38} {:>9} {:>9} {:>9} {:>9} {:>8}", "", "mean ms", "p50 ms", "p95 ms", "max ms", "wall s");
        for (name, s) in
            [("baseline: direct provider call", &baseline), ("ours: submit → succeeded (long-poll)", &ours)]
        {
            println!(
                "  {name:<38} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8.2}",
                s.mean,
                s.p50,
                s.p95,
                s.max,
                s.wall.as_secs_f64()
            );
        }
        println!(
            "  overhead: {overhead:+.1} % of the mean (p50 {:+.1} %), target ≤ 10 % — {}",
            (ours.p50 / baseline.p50 - 1.0) * 100.0,
            if overhead <= 10.0 { "met" } else { "NOT met" }
        );
        let phase = |(mean, p95, max): (f64, f64, f64)| format!("mean {mean:.1} / p95 {p95:.0} / max {max:.0} ms");
        println!("  where it goes (from the rows): queue wait {}", phase(queue_wait));
        println!("                                run        {} (provider {provider_ms} ms)", phase(run));
        println!("  the rest is submit + long-poll delivery");
    }
    Ok(())
}
