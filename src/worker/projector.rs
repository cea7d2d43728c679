//! The background projector: embeds entries whose version is newer than their vector, in
//! batches, so recall's vector side catches up with writes without anyone asking. Every
//! worker process runs the loop; one of them runs each tick, chosen by a compare-and-set
//! on the `maintenance` row `projector` (as the retention sweep is). A tick drains up to
//! `MAX_BATCHES_PER_TICK` batches; what is left waits for the next tick.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::embedder::Embedder;
use crate::store::vectors::reads::stale_tenant;
use crate::store::vectors::{VectorBatch, encode_all, walk_page, writes};
use crate::store::{Db, StoreError, StoreResult, maintenance};
use context_jobs::ids::TenantKey;

const PROJECTOR_NAME: &str = maintenance::PROJECTOR;
const BATCH: usize = 500;
const MAX_BATCHES_PER_TICK: usize = 20;
/// Tenants whose embedding may fail in one tick before it ends.
const MAX_FAILURES_PER_TICK: usize = 3;
/// A tick's claim: long enough for its batches, short enough that a dead holder's claim
/// lapses quickly.
const TICK_LEASE_MS: i64 = 30_000;

pub fn spawn(
    db: Db,
    embedder: Arc<Embedder>,
    interval_ms: u64,
    holder: String,
    shutdown: CancellationToken,
) -> JoinHandle<anyhow::Result<()>> {
    tokio::spawn(async move {
        if interval_ms == 0 {
            shutdown.cancelled().await;
            return Ok(());
        }
        let mut tick = tokio::time::interval(Duration::from_millis(interval_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tick.tick() => {}
            }
            match run_tick(&db, &embedder, &holder, interval_ms as i64).await {
                Ok(Some(n)) if n > 0 => tracing::debug!(embedded = n, "projector tick"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "projector tick failed"),
            }
        }
    })
}

/// One tick if this process wins it: `Some(vectors written)`, or `None` when another
/// process holds the tick or it is not due.
pub async fn run_tick(db: &Db, embedder: &Embedder, holder: &str, period_ms: i64) -> StoreResult<Option<u64>> {
    if !maintenance::try_begin(db, PROJECTOR_NAME, holder, period_ms, TICK_LEASE_MS).await? {
        return Ok(None);
    }
    let outcome = drain(db, embedder).await;
    let written = *outcome.as_ref().unwrap_or(&0);
    maintenance::finish(db, PROJECTOR_NAME, holder, written as i64).await?;
    metrics::counter!(crate::metrics::PROJECTOR_VECTORS).increment(written);
    outcome.map(Some)
}

async fn drain(db: &Db, embedder: &Embedder) -> StoreResult<u64> {
    let mut written = 0u64;
    // Tenants whose embedding failed this tick, skipped for the rest of it: a tenant whose
    // entry the provider refuses is first in line again at every tick (its projection time
    // does not move), and failing the tick there held every other tenant back for good.
    let mut failed: Vec<TenantKey> = Vec::new();
    let mut first_error = None;
    for _ in 0..MAX_BATCHES_PER_TICK {
        // One tenant's next stale page: the walk from its watermark.
        let Some((tenant, watermark)) = stale_tenant(db, &failed).await? else { break };
        let page = walk_page(db, &tenant, watermark, BATCH as i64).await?;
        let texts = crate::store::vectors::texts(&page.items);
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let vectors = match embedder.embed(&refs).await {
            Ok(vectors) => vectors,
            Err(e) => {
                tracing::warn!(tenant = %tenant, error = %format!("{e:#}"), "projector: embedding failed; the tenant waits for the next tick");
                failed.push(tenant);
                first_error.get_or_insert(StoreError::Other(e.into()));
                // A provider that is down fails every tenant: stop after a few.
                if failed.len() >= MAX_FAILURES_PER_TICK {
                    break;
                }
                continue;
            }
        };
        let (dim, blobs) = encode_all(&vectors);
        let batch = VectorBatch {
            covered_through: Some(page.covered_through),
            read_at: Some(page.read_at),
            bulk: true,
            ..VectorBatch::new(&tenant, embedder.model(), dim, &page.items, &blobs)
        };
        let mut tx = db.begin_write().await?;
        written += writes::write(&mut tx, &batch).await?.vectors;
        tx.commit().await?;
    }
    match first_error {
        Some(e) if written == 0 => Err(e),
        _ => Ok(written),
    }
}
