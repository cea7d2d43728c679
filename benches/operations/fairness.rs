//! (d) Fairness: tenant B's one delete, submitted behind tenant A's backlog of `n` queued
//! deletes of the same kind. The kind is paused while the backlog is built (so all of it
//! is queued at once) and resumed; the figure is how long after the resume B's operation
//! has succeeded, beside how long A's backlog takes to drain — where B would finish in
//! FIFO order.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use context_ops::config::Role;
use context_ops::server;
use context_ops::store::Db;
use jsonwebtoken::{EncodingKey, Header};
use serde_json::{Value, json};

use super::common::{config, fresh_schema, namespace, submit_delete, wait_terminal};
use super::machine_cpu::{cpu_ms_per, machine_busy};

const SECRET: &str = "bench-secret-0123456789abcdef0123";
const QUEUES: &str = "/internal/v1/context/queues";

fn token(tenant: &str, admin: bool) -> anyhow::Result<String> {
    let exp = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() + 3600;
    let claims = json!({"aud": "agent-context-infra", "sub": "bench", "tenant_id": tenant,
                        "project_id": "p", "exp": exp, "admin": admin});
    Ok(jsonwebtoken::encode(&Header::default(), &claims, &EncodingKey::from_secret(SECRET.as_bytes())?)?)
}

async fn control(client: &reqwest::Client, base: &str, admin: &str, action: &str) -> anyhow::Result<()> {
    let r = client.post(format!("{base}{QUEUES}/delete/{action}")).bearer_auth(admin).json(&json!({})).send().await?;
    anyhow::ensure!(r.status().is_success(), "{action} answered {}", r.status());
    Ok(())
}

pub struct Fairness {
    /// Resume → B's operation started (its `startedAtMs`).
    pub b_started: Duration,
    /// Resume → B's operation succeeded.
    pub b_done: Duration,
    /// Resume → the last of A's succeeded.
    pub a_drained: Duration,
    /// How long A's backlog took to submit into the pause, and the machine's CPU per
    /// submission meanwhile (see `machine_busy`).
    pub backlog_submitted: Duration,
    pub submit_cpu_ms: Option<f64>,
}

pub async fn behind_backlog(redis: &str, server: &str, n: usize) -> anyhow::Result<Fairness> {
    let url = fresh_schema(server).await?;
    let mut cfg = config(url, redis, &namespace("fair"));
    cfg.auth.jwt_secret = Some(SECRET.into());
    let running = server::start(cfg, Role::Serve).await?;
    let base = format!("http://{}", running.addr);
    let client = reqwest::Client::new();
    let (a, b, admin) = (token("a", false)?, token("b", false)?, token("ops", true)?);

    control(&client, &base, &admin, "pause").await?;
    let (submitting, busy) = (Instant::now(), machine_busy());
    let submits = (0..8).map(|c| {
        let (client, base, a) = (client.clone(), base.clone(), a.clone());
        tokio::spawn(async move {
            for i in (c..n).step_by(8) {
                submit_delete(&client, &base, Some(&a), &format!("a-{i}")).await.unwrap();
            }
        })
    });
    futures::future::join_all(submits).await;
    let (backlog_submitted, submit_cpu_ms) = (submitting.elapsed(), cpu_ms_per(busy, machine_busy(), n));
    let op: Value = submit_delete(&client, &base, Some(&b), "b-0").await?;

    let resumed = Instant::now();
    let resumed_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
    control(&client, &base, &admin, "resume").await?;
    let done = wait_terminal(&client, &base, Some(&b), op, Duration::from_secs(600)).await?;
    let b_done = resumed.elapsed();
    anyhow::ensure!(done["state"] == json!("succeeded"), "{done}");
    let started_ms = done["startedAtMs"].as_i64().ok_or_else(|| anyhow::anyhow!("no startedAtMs: {done}"))?;
    let b_started = Duration::from_millis((started_ms - resumed_ms).max(0) as u64);
    let Db::Postgres(pool) = running.state.db.clone() else { anyhow::bail!("expected PostgreSQL") };
    loop {
        let left: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM operations WHERE state <> 'succeeded'").fetch_one(&pool).await?;
        if left == 0 {
            break;
        }
        anyhow::ensure!(resumed.elapsed() < Duration::from_secs(900), "A's backlog did not drain");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let a_drained = resumed.elapsed();
    running.stop().await?;
    Ok(Fairness { b_started, b_done, a_drained, backlog_submitted, submit_cpu_ms })
}
