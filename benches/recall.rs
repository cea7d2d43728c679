//! Recall latency and rebuild throughput at scale, on both backends.
//!
//! `cargo bench --bench recall [sqlite|postgres]`
//!
//! For each backend and each size (`BENCH_RECALL_SIZES`, default `10000,100000`) the
//! service runs in-process (`server::start`) on a fresh database into which N active
//! entries of one tenant are seeded with SQL (no vectors). Then:
//!
//! 1. rebuild: `POST …/projections/vector/rebuild {force:true}`, timed submit → succeeded,
//!    in entries/s; beside it, the baseline: the same embedder alone (`Embedder::embed`)
//!    on the same entries' texts in the same batch size — the target is a ratio ≥ 0.5;
//!    and a second baseline, the storage ceiling: the same vectors bulk-loaded into a bare
//!    copy of the vectors table (PostgreSQL binary `COPY`; SQLite one prepared row insert
//!    stepped per row on its own API, as the service writes), in
//!    the same batches — no rebuild that stores them can beat it;
//! 2. recall: the first query (which loads the tenant's in-memory index), then
//!    `BENCH_RECALL_QUERIES` (default 300) queries one at a time over HTTP with default
//!    weights and limit 20 — p50/p99 (target: p99 ≤ 50 ms at 100,000 on PostgreSQL);
//! 3. after a process start: the service restarted on the same database loads the recall
//!    indexes before it reports ready (`recall::warm`); the first recall after ready, beside
//!    the first recall of a process started without the load (which builds the index) —
//!    the target is ≤ 50 ms at 100,000.
//!
//! `BENCH_RECALL_EMBEDDER=openai` runs the same with the OpenAI-compatible embeddings
//! client against an in-process server answering with the hashing embedder's vectors
//! (`recall/fake_embeddings.rs`): the rebuild as it runs against a remote model.
//!
//! PostgreSQL: a fresh `context_ops_bench_recall` database (dropped afterwards), Redis for
//! the queue; `ANALYZE` after seeding and after the rebuild (autovacuum would do it in
//! production; the test server runs without it).

#[path = "recall/ceiling.rs"]
mod ceiling;
#[path = "recall/fake_embeddings.rs"]
mod fake_embeddings;

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use context_jobs::contract::content_text;
use context_ops::config::{Config, Role};
use context_ops::embedder::Embedder;
use context_ops::server;
use context_ops::store::Db;
use context_ops::store::query;
use serde_json::{Value, json};
use sqlx::AssertSqlSafe;

const TENANT: &str = "default/default";
const PG_DATABASE: &str = "context_ops_bench_recall";
const VOCABULARY: usize = 20_000;

/// A deterministic corpus: words drawn Zipf-like from a synthetic vocabulary, so a few
/// words are everywhere and most are rare — the shape BM25 postings have in real text.
struct Corpus {
    words: Vec<String>,
    rng: fastrand::Rng,
}

impl Corpus {
    fn new() -> Self {
        let syllables =
            ["ka", "lo", "mi", "ne", "ru", "sa", "te", "vo", "zu", "pi", "do", "ge", "ha", "ju", "wy", "xo"];
        let words = (0..VOCABULARY)
            .map(|i| {
                let (mut n, mut w) = (i + 16, String::new());
                while n > 0 {
                    w.push_str(syllables[n % 16]);
                    n /= 16;
                }
                w
            })
            .collect();
        Self { words, rng: fastrand::Rng::with_seed(42) }
    }

    /// Zipf-ish rank: the inverse of a power-law CDF.
    fn word(&mut self) -> &str {
        let u = self.rng.f64();
        let rank = ((VOCABULARY as f64).powf(u) - 1.0) as usize;
        &self.words[rank.min(VOCABULARY - 1)]
    }

    fn text(&mut self, min: usize, max: usize) -> String {
        let n = self.rng.usize(min..=max);
        (0..n).map(|_| self.word().to_string()).collect::<Vec<_>>().join(" ")
    }
}

fn placeholders(rows: usize, cols: usize) -> String {
    (0..rows)
        .map(|r| format!("({})", (1..=cols).map(|c| format!("${}", r * cols + c)).collect::<Vec<_>>().join(", ")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Seed `n` active entries (no vectors) with multi-row INSERTs; returns their texts.
async fn seed(db: &Db, n: usize) -> anyhow::Result<Vec<String>> {
    let mut corpus = Corpus::new();
    let now = context_ops::store::now_ms();
    let texts: Vec<String> = (0..n).map(|_| corpus.text(8, 24)).collect();
    const ROWS: usize = 1000;
    for (chunk_no, chunk) in texts.chunks(ROWS).enumerate() {
        let sql = format!(
            "INSERT INTO context_entries (tenant, id, kind, content, version, status, conversation_id, provenance, \
             created_at_ms, updated_at_ms, change_seq) VALUES {}",
            placeholders(chunk.len(), 11)
        );
        {
            let mut q = query(AssertSqlSafe(sql));
            for (j, text) in chunk.iter().enumerate() {
                let i = chunk_no * ROWS + j;
                let conversation = format!("conv-{}", i % 100);
                q = q
                    .bind(TENANT)
                    .bind(format!("entry-{i:07}"))
                    .bind("fact")
                    .bind(Value::String(text.clone()).to_string())
                    .bind(1_i64)
                    .bind("active")
                    .bind(conversation.clone())
                    .bind(json!({"conversationId": conversation}).to_string())
                    .bind(now - (i as i64 % 1000) * 3_600_000)
                    .bind(now - (i as i64 % 1000) * 3_600_000)
                    .bind(i as i64 + 1);
            }
            q.execute(db).await?;
        }
    }
    query("INSERT INTO context_entry_heads (tenant, source_version) VALUES ($1, $2)")
        .bind(TENANT)
        .bind(n as i64)
        .execute(db)
        .await?;
    if let Db::Postgres(pool) = db {
        sqlx::query("ANALYZE").execute(pool).await?;
    }
    Ok(texts)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

async fn wait_succeeded(client: &reqwest::Client, base: &str, id: &str) -> anyhow::Result<Value> {
    loop {
        let op: Value = client
            .get(format!("{base}/internal/v1/context/operations/{id}/wait?timeoutMs=5000"))
            .send()
            .await?
            .json()
            .await?;
        match op["state"].as_str() {
            Some("succeeded") => return Ok(op),
            Some("failed" | "cancelled") => anyhow::bail!("rebuild ended {op}"),
            _ => {}
        }
    }
}

async fn database(backend: &str, dir: &std::path::Path) -> anyhow::Result<String> {
    if backend == "sqlite" {
        return Ok(format!("sqlite:{}", dir.join("recall.sqlite").display()));
    }
    let server = postgres_server();
    drop_database().await?;
    let admin = sqlx::PgPool::connect(&format!("{server}/postgres")).await.context("connect to PostgreSQL")?;
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {PG_DATABASE}"))).execute(&admin).await?;
    admin.close().await;
    Ok(format!("{server}/{PG_DATABASE}"))
}

async fn run(backend: &str, n: usize, queries: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut config = Config::defaults();
    config.http.bind = "127.0.0.1:0".parse()?;
    config.database.database_url = database(backend, dir.path()).await?;
    config.embedder.projector_interval_ms = 0;
    config.retention.retention_sweep_secs = 0;
    config.queue.queue_namespace = format!("bench-recall-{}", ulid::Ulid::generate());
    if std::env::var("BENCH_RECALL_EMBEDDER").is_ok_and(|e| e == "openai") {
        config.embedder.embedder = context_ops::config::EmbedderKind::Openai;
        config.embedder.embeddings_base_url = Some(fake_embeddings::start().await?);
    }
    if backend == "postgres" {
        config.queue.redis_url = Some(
            std::env::var("BENCH_REDIS_URL")
                .or_else(|_| std::env::var("TEST_REDIS_URL"))
                .unwrap_or_else(|_| "redis://127.0.0.1:6379".into()),
        );
    }
    let batch = config.worker.batch_size as usize;
    let running = server::start(config.clone(), Role::Serve).await?;
    let base = format!("http://{}", running.addr);
    let db = running.state.db.clone();
    let started = Instant::now();
    let texts = seed(&db, n).await?;
    let seeded = started.elapsed();

    // Baseline: the embedder alone on the same texts, in the rebuild's batch size.
    let embedder = Embedder::from_config(&config)?;
    let contents: Vec<String> = texts.iter().map(|t| content_text(&Value::String(t.clone()))).collect();
    let t0 = Instant::now();
    let mut vectors = Vec::with_capacity(n);
    for chunk in contents.chunks(batch) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        vectors.extend(std::hint::black_box(embedder.embed(&refs).await?));
    }
    let embed_rate = n as f64 / t0.elapsed().as_secs_f64();
    // Second baseline, the storage ceiling: the same vectors bulk-loaded into a bare copy
    // of the vectors table in the same batches, with nothing checked.
    let ceiling_rate = n as f64 / ceiling::load(&db, &vectors, batch).await?.as_secs_f64();
    drop(vectors);

    let client = reqwest::Client::new();
    let t0 = Instant::now();
    let op: Value = client
        .post(format!("{base}/internal/v1/context/projections/vector/rebuild"))
        .json(&json!({"force": true}))
        .send()
        .await?
        .json()
        .await?;
    let op = wait_succeeded(&client, &base, op["id"].as_str().context("operation id")?).await?;
    let rebuild_secs = t0.elapsed().as_secs_f64();
    ensure!(op["processed"] == n, "rebuild processed {}", op["processed"]);
    let rebuild_rate = n as f64 / rebuild_secs;
    if let Db::Postgres(pool) = &db {
        // The vectors table was empty at the last ANALYZE (autovacuum would catch up).
        sqlx::query("ANALYZE").execute(pool).await?;
    }

    let mut corpus = Corpus::new();
    corpus.rng = fastrand::Rng::with_seed(7);
    let query_texts: Vec<String> = (0..queries).map(|_| corpus.text(2, 5)).collect();
    let recall = |q: &str| {
        let request = client.post(format!("{base}/internal/v1/context/recall")).json(&json!({"query": q, "limit": 20}));
        async move {
            let response = request.send().await?;
            ensure!(response.status() == 200, "recall failed: {}", response.text().await?);
            let body: Value = response.json().await?;
            anyhow::Ok(body["items"].as_array().map_or(0, Vec::len))
        }
    };
    let t0 = Instant::now();
    recall("warm up the index").await?;
    let cold = t0.elapsed();
    let mut latencies = Vec::with_capacity(queries);
    let mut returned = 0;
    for q in &query_texts {
        let t0 = Instant::now();
        returned += recall(q).await?;
        latencies.push(t0.elapsed());
    }
    latencies.sort();
    let (p50, p99) = (percentile(&latencies, 0.50), percentile(&latencies, 0.99));
    // The in-memory candidate scan alone, on the same queries (the part that grows with N).
    let index = running.state.recall.indexes.synced(&db, &context_jobs::ids::TenantKey::from_stored(TENANT)).await?;
    let mut scans = Vec::with_capacity(queries);
    for q in &query_texts {
        let terms = context_jobs::recall::query_terms(q);
        let vector = embedder.embed(&[q.as_str()]).await?.pop();
        let t0 = Instant::now();
        let guard = index.read().unwrap();
        std::hint::black_box(guard.index.candidates(&context_jobs::recall_index::Query {
            terms: &terms,
            vector: vector.as_deref(),
            conversation_id: None,
            now_ms: context_ops::store::now_ms(),
            weights: context_jobs::recall::Weights { lexical: 0.35, vector: 0.65 },
            candidates: 56,
        }));
        drop(guard);
        scans.push(t0.elapsed());
    }
    scans.sort();
    let (s50, s99) = (percentile(&scans, 0.50), percentile(&scans, 0.99));
    println!(
        "{backend:>8} {:>6} {n:>7} entries | seed {:>6.1}s | rebuild {rebuild_rate:>8.0}/s vs embedder alone {embed_rate:>8.0}/s \
         = {:.2} (target >= 0.5); vs bare bulk load of the vectors {ceiling_rate:>8.0}/s = {:.2} | recall cold {:>6.0} ms, p50 {:>5.1} ms, p99 {:>5.1} ms over {queries} queries \
         ({:.1} items avg); index scan alone p50 {:.1} ms, p99 {:.1} ms{}",
        format!("{:?}", config.embedder.embedder).to_lowercase(),
        seeded.as_secs_f64(),
        rebuild_rate / embed_rate,
        rebuild_rate / ceiling_rate,
        cold.as_secs_f64() * 1e3,
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        returned as f64 / queries as f64,
        s50.as_secs_f64() * 1e3,
        s99.as_secs_f64() * 1e3,
        if backend == "postgres" && n >= 100_000 { " (target p99 <= 50 ms)" } else { "" }
    );
    running.stop().await?;

    // 3. The first recall after a process start: with the start-up load of recall indexes
    // (timed from ready) beside the same process without it (the first recall loads).
    let mut warm_config = config.clone();
    warm_config.embedder.recall_warm_tenants = 8;
    let (warm_ready, warm_first) = first_recall_after_start(&client, warm_config, &query_texts[0]).await?;
    let mut cold_config = config.clone();
    cold_config.embedder.recall_warm_tenants = 0;
    let (_, cold_first) = first_recall_after_start(&client, cold_config, &query_texts[0]).await?;
    println!(
        "{backend:>8} {n:>7} entries | after a process start: ready in {:.0} ms with the index load; first recall {:.1} ms \
         vs {:.1} ms when the first recall loads the index = {:.3} (target <= 50 ms)",
        warm_ready.as_secs_f64() * 1e3,
        warm_first.as_secs_f64() * 1e3,
        cold_first.as_secs_f64() * 1e3,
        warm_first.as_secs_f64() / cold_first.as_secs_f64(),
    );
    if backend == "postgres" {
        drop_database().await?;
    }
    Ok(())
}

/// Start the service on `config`'s existing database, wait until `/health/ready` answers
/// 200, then time one recall: `(start → ready, the first recall)`.
async fn first_recall_after_start(
    client: &reqwest::Client,
    config: Config,
    query: &str,
) -> anyhow::Result<(Duration, Duration)> {
    let t0 = Instant::now();
    let running = server::start(config, Role::Serve).await?;
    let base = format!("http://{}", running.addr);
    while client.get(format!("{base}/health/ready")).send().await?.status() != 200 {
        ensure!(t0.elapsed() < Duration::from_secs(120), "not ready within 120 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ready = t0.elapsed();
    let t1 = Instant::now();
    let response = client
        .post(format!("{base}/internal/v1/context/recall"))
        .json(&json!({"query": query, "limit": 20}))
        .send()
        .await?;
    ensure!(response.status() == 200, "recall failed: {}", response.text().await?);
    let first = t1.elapsed();
    running.stop().await?;
    Ok((ready, first))
}

fn postgres_server() -> String {
    std::env::var("BENCH_POSTGRES_URL")
        .or_else(|_| std::env::var("TEST_POSTGRES_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

async fn drop_database() -> anyhow::Result<()> {
    let admin = sqlx::PgPool::connect(&format!("{}/postgres", postgres_server())).await?;
    sqlx::query(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {PG_DATABASE} WITH (FORCE)"))).execute(&admin).await?;
    admin.close().await;
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let only: Vec<String> = std::env::args().skip(1).filter(|a| a == "sqlite" || a == "postgres").collect();
    let backends: Vec<&str> =
        if only.is_empty() { vec!["sqlite", "postgres"] } else { only.iter().map(String::as_str).collect() };
    let sizes: Vec<usize> = std::env::var("BENCH_RECALL_SIZES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .map(|s| s.trim().parse())
        .collect::<Result<_, _>>()
        .context("BENCH_RECALL_SIZES")?;
    let queries: usize = std::env::var("BENCH_RECALL_QUERIES").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    for backend in backends {
        for &n in &sizes {
            run(backend, n, queries).await?;
        }
    }
    Ok(())
}
