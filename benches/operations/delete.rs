//! (b) A delete operation of `n` messages beside one `DELETE … WHERE conversation_id = …`
//! on an identical copy of the rows.

use std::time::{Duration, Instant};

use context_ops::config::Role;
use context_ops::server;
use context_ops::store::Db;
use serde_json::json;

use super::common::{config, fresh_schema, namespace, seed, submit_delete, wait_terminal};

/// Seconds: (ours as the client saw it, ours server-side — created to finished —, baseline).
pub async fn delete(redis: &str, server: &str, n: i64) -> anyhow::Result<(f64, f64, f64)> {
    let url = fresh_schema(server).await?;
    let running = server::start(config(url, redis, &namespace("del")), Role::Serve).await?;
    let Db::Postgres(pool) = running.state.db.clone() else { anyhow::bail!("expected PostgreSQL") };
    seed(&pool, "ours", n).await?;
    seed(&pool, "baseline", n).await?;
    let client = reqwest::Client::new();
    let base = format!("http://{}", running.addr);
    // Each side starts right after a checkpoint: the first change of a page after one
    // writes the whole page to the WAL, so a checkpoint that happened to start during one
    // side (the seeding wrote ~1 GB of WAL) made that side pay for every page it touched.
    sqlx::query("CHECKPOINT").execute(&pool).await?;
    let started = Instant::now();
    let op = submit_delete(&client, &base, None, "ours").await?;
    let done = wait_terminal(&client, &base, None, op, Duration::from_secs(600)).await?;
    let ours = started.elapsed().as_secs_f64();
    anyhow::ensure!(done["state"] == json!("succeeded"), "delete ended {done}");
    let server_side =
        (done["updatedAtMs"].as_i64().unwrap_or(0) - done["createdAtMs"].as_i64().unwrap_or(0)) as f64 / 1e3;
    sqlx::query("CHECKPOINT").execute(&pool).await?;
    let started = Instant::now();
    let deleted = sqlx::query("DELETE FROM messages WHERE tenant = 'default/default' AND conversation_id = 'baseline'")
        .execute(&pool)
        .await?
        .rows_affected();
    let baseline = started.elapsed().as_secs_f64();
    anyhow::ensure!(deleted as i64 == n);
    running.stop().await?;
    Ok((ours, server_side, baseline))
}
