//! SIGKILL in the middle of a `rebuild_vector` operation, on the real binary, both
//! backends: the restarted service resumes from the keyset checkpoint and finishes with
//! `processed == total`, and every active entry has exactly one vector, of its current
//! version (non-active entries have none). Entries are seeded with SQL, not over HTTP.

use std::time::Duration;

use crate::harness::db::with_pool;
use context_jobs::contract::{ContextInsight, ContextInsightStatus, ContextOperationState};
use context_jobs::ids::TenantKey;
use context_ops::store::Db;
use context_ops::store::vectors::{coverage, watermark};
use serde_json::{Value, json};

use crate::harness::child::Service;
use crate::harness::fixture::Fixture;
use crate::harness::insights::{import, insight};
use crate::harness::wait::mid_run;
use crate::harness::{Backend, OperationExt as _};

const ENTRIES: usize = 40_000;

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

/// `serve`, healthy, with small batches (many checkpoints to land between) and no
/// projector (the rebuild does all the work, so what is projected is exactly what the
/// operation committed).
async fn spawn(fx: &Fixture, name: &str) -> Service {
    let env = [("CONTEXT_OPS_BATCH_SIZE", "500"), ("CONTEXT_OPS_PROJECTOR_INTERVAL_MS", "0")];
    let mut service = fx.env.spawn_with(name, "serve", &env);
    service.wait_healthy(Duration::from_secs(30)).await;
    service
}

async fn sigkill_mid_rebuild(backend: Backend) {
    let fx = Fixture::new(backend, 3).await;
    let db = &fx.db;
    let tenant = TenantKey::default_tenant();
    seed(db, &tenant).await;
    let active = (0..ENTRIES).filter(|i| !i.is_multiple_of(10)).count() as i64;
    assert_eq!(coverage(db, &tenant).await.unwrap(), (active, 0));

    let mut a = spawn(&fx, "serve-a").await;
    let id = a.api.submit("/internal/v1/context/projections/vector/rebuild", &json!({"force": true})).await.id;
    let seen = a.api.wait_until(&id, Duration::from_secs(60), "got going", mid_run).await;
    assert_eq!(seen.state, ContextOperationState::Running, "finished before it could be killed: {seen:?}");
    a.proc.kill();

    // At the kill: exactly the committed batches are projected, no more, no less.
    let at_kill = fx.operation(&id).await;
    let (processed, total) = (at_kill.processed, at_kill.total);
    assert_eq!(at_kill.state, "running");
    assert_eq!(total, active);
    assert!(processed > 0 && processed < total, "killed outside the middle: {processed}/{total}");
    assert_eq!(
        coverage(db, &tenant).await.unwrap(),
        (active, processed),
        "checkpoint and vectors diverged at the kill"
    );

    let b = spawn(&fx, "serve-b").await;
    let done = b
        .api
        .wait_until(&id, Duration::from_secs(120), "finished after the restart", |op| op.state.is_terminal())
        .await;
    println!("[{backend:?}] rebuild killed at {processed}/{total}, resumed: {done:?}");
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    assert_eq!((done.processed as i64, done.total as i64), (active, active), "{done:?}");
    assert_eq!(
        done.result_json()["written"].as_i64(),
        Some(active),
        "every active entry embedded exactly once overall"
    );
    assert_eq!(coverage(db, &tenant).await.unwrap(), (active, active));
    let vectors: i64 = with_pool!(db, pool => {
        sqlx::query_scalar("SELECT COUNT(*) FROM context_entry_vectors").fetch_one(pool).await.unwrap()
    });
    assert_eq!(vectors, active, "one vector per active entry, none for the others");
    assert_eq!(watermark(db, &tenant).await.unwrap().lag, 0, "the watermark reached the head");
    assert!(fx.operation(&id).await.attempt >= 2, "resumed by a second claim");
}

backend_tests!(backend: sigkill_mid_rebuild);
