//! SIGKILL in the middle of a `rebuild_vector` operation, on the real binary, both
//! backends: the restarted service resumes from the keyset checkpoint and finishes with
//! `processed == total`, and every active entry has exactly one vector, of its current
//! version (non-active entries have none). Entries are seeded with SQL, not over HTTP.

#[path = "support/child.rs"]
mod child;
mod common;
#[path = "support/insights.rs"]
mod insights;

use std::time::{Duration, Instant};

use child::{Proc, Service, ServiceEnv, free_port};
use common::{Backend, fresh_database, redis_url, unique};
use context_jobs::contract::{ContextInsight, ContextInsightStatus};
use context_ops::auth::TenantKey;
use context_ops::db::Db;
use context_ops::store::vectors::{coverage, watermark};
use context_ops::with_pool;
use insights::{import, insight};
use serde_json::{Value, json};

const ENTRIES: usize = 40_000;
const OPS: &str = "/internal/v1/context/operations";

fn seed_entry(i: usize) -> ContextInsight {
    ContextInsight {
        attributes: Value::Null,
        version: 1 + (i % 3) as u64,
        // Every tenth entry is not active: it must never get a vector.
        status: if i.is_multiple_of(10) { ContextInsightStatus::Merged } else { ContextInsightStatus::Active },
        ..insight(format!("e{i:06}"), json!(format!("note {i} about topic {} and detail {}", i % 97, i % 13)))
    }
}

async fn seed(db: &Db, tenant: &TenantKey) {
    let all: Vec<ContextInsight> = (0..ENTRIES).map(seed_entry).collect();
    for chunk in all.chunks(5_000) {
        import(db, tenant.as_str(), chunk).await;
    }
}

fn spawn(env: &ServiceEnv, name: &str) -> Service {
    let port = free_port();
    let mut cmd = env.command("serve", port);
    // Small batches (many checkpoints to land between) and no projector (the rebuild does
    // all the work, so what is projected is exactly what the operation committed).
    cmd.env("CONTEXT_OPS_BATCH_SIZE", "500").env("CONTEXT_OPS_PROJECTOR_INTERVAL_MS", "0");
    Service { proc: Proc::spawn(name, cmd, &env.dir), base: format!("http://127.0.0.1:{port}") }
}

async fn operation(client: &reqwest::Client, base: &str, id: &str) -> Value {
    let response = client.get(format!("{base}{OPS}/{id}/wait?timeoutMs=1000")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

async fn sigkill_mid_rebuild(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let env = ServiceEnv {
        database_url: fresh_database(backend, dir.path()).await,
        redis_url: (backend == Backend::Postgres).then(redis_url),
        namespace: unique("rebuild"),
        lease_secs: 3,
        dir: dir.path().to_path_buf(),
    };
    let db = Db::connect(&env.database_url, 4).await.unwrap();
    db.migrate().await.unwrap();
    let tenant = TenantKey::default_tenant();
    seed(&db, &tenant).await;
    let active = (0..ENTRIES).filter(|i| !i.is_multiple_of(10)).count() as i64;
    assert_eq!(coverage(&db, &tenant).await.unwrap(), (active, 0));

    let client = reqwest::Client::new();
    let mut a = spawn(&env, "serve-a");
    a.wait_healthy(&client, Duration::from_secs(30)).await;
    let response = client
        .post(format!("{}/internal/v1/context/projections/vector/rebuild", a.base))
        .json(&json!({"force": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let id = response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let op = operation(&client, &a.base, &id).await;
        assert_ne!(op["state"], "succeeded", "finished before it could be killed: {op}");
        if op["state"] == "running" && op["processed"].as_i64().unwrap() > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "never got going: {op}");
    }
    a.proc.kill();

    // At the kill: exactly the committed batches are projected, no more, no less.
    let (state, processed, total): (String, i64, i64) = with_pool!(&db, pool => {
        sqlx::query_as("SELECT state, processed, total FROM operations WHERE id = $1").bind(id.as_str()).fetch_one(pool).await.unwrap()
    });
    assert_eq!(state, "running");
    assert_eq!(total, active);
    assert!(processed > 0 && processed < total, "killed outside the middle: {processed}/{total}");
    assert_eq!(
        coverage(&db, &tenant).await.unwrap(),
        (active, processed),
        "checkpoint and vectors diverged at the kill"
    );

    let mut b = spawn(&env, "serve-b");
    b.wait_healthy(&client, Duration::from_secs(30)).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let done = loop {
        let op = operation(&client, &b.base, &id).await;
        if ["succeeded", "failed", "cancelled"].contains(&op["state"].as_str().unwrap()) {
            break op;
        }
        assert!(Instant::now() < deadline, "did not finish after the restart: {op}");
    };
    println!("[{backend:?}] rebuild killed at {processed}/{total}, resumed: {done}");
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!((done["processed"].as_i64(), done["total"].as_i64()), (Some(active), Some(active)), "{done}");
    assert_eq!(done["result"]["written"].as_i64(), Some(active), "every active entry embedded exactly once overall");
    assert_eq!(coverage(&db, &tenant).await.unwrap(), (active, active));
    let vectors: i64 = with_pool!(&db, pool => {
        sqlx::query_scalar("SELECT COUNT(*) FROM context_entry_vectors").fetch_one(pool).await.unwrap()
    });
    assert_eq!(vectors, active, "one vector per active entry, none for the others");
    assert_eq!(watermark(&db, &tenant).await.unwrap().lag, 0, "the watermark reached the head");
    let attempt: i64 = with_pool!(&db, pool => {
        sqlx::query_scalar("SELECT attempt FROM operations WHERE id = $1").bind(id.as_str()).fetch_one(pool).await.unwrap()
    });
    assert!(attempt >= 2, "resumed by a second claim");
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_rebuild_sqlite() {
    sigkill_mid_rebuild(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_rebuild_postgres() {
    sigkill_mid_rebuild(Backend::Postgres).await;
}
