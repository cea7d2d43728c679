//! The background projector: embeds entries whose version is newer than their vector, in
//! batches, so recall's vector side catches up with writes without anyone asking. Every
//! worker process runs the loop; one of them runs each tick, chosen by a compare-and-set
//! on the `maintenance` row `projector` (as the retention sweep is). A tick drains up to
//! `MAX_BATCHES_PER_TICK` batches; what is left waits for the next tick.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::embedder::{EmbedError, Embedder};
use crate::store::vectors::reads::stale_tenant;
use crate::store::vectors::{VectorBatch, encode_all, walk_page, writes};
use crate::store::{Db, StoreError, StoreResult, maintenance};
use context_jobs::ids::TenantKey;

const PROJECTOR_NAME: &str = maintenance::PROJECTOR;
const BATCH: usize = 500;
const MAX_BATCHES_PER_TICK: usize = 20;
/// Tenants whose embedding may fail in one tick before it ends.
const MAX_FAILURES_PER_TICK: usize = 3;
/// How long a tenant whose entries the provider refused (a permanent error: an input over
/// the model's limit) waits before this process tries it again. It would otherwise be
/// first in line at every tick (its projection time does not move), and a few such
/// tenants took every tick's turns from the rest.
const REFUSED_RETRY: Duration = Duration::from_secs(60);
/// A tick's claim, renewed every third of it while the tick runs: a dead holder's lapses
/// soon. A tick of many batches (each up to 500 texts, several provider requests of up to
/// 60 s) once outlived a claim that was never renewed, and a second process ran the tick
/// beside it (paying for the same embeddings twice).
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
        let mut refused = Refused::default();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tick.tick() => {}
            }
            match run_tick(&db, &embedder, &holder, interval_ms as i64, &mut refused).await {
                Ok(Some(n)) if n > 0 => tracing::debug!(embedded = n, "projector tick"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "projector tick failed"),
            }
        }
    })
}

/// Tenants whose entries the provider refused, each with when to try it again (this
/// process's view: another process's tick tries it once before deferring it too).
#[derive(Default)]
struct Refused(HashMap<TenantKey, Instant>);

impl Refused {
    /// The tenants still waiting; the others are forgotten.
    fn waiting(&mut self) -> Vec<TenantKey> {
        let now = Instant::now();
        self.0.retain(|_, until| *until > now);
        self.0.keys().cloned().collect()
    }
}

/// One tick if this process wins it: `Some(vectors written)`, or `None` when another
/// process holds the tick or it is not due.
async fn run_tick(
    db: &Db,
    embedder: &Embedder,
    holder: &str,
    period_ms: i64,
    refused: &mut Refused,
) -> StoreResult<Option<u64>> {
    if !maintenance::try_begin(db, PROJECTOR_NAME, holder, period_ms, TICK_LEASE_MS).await? {
        return Ok(None);
    }
    let lost = Arc::new(AtomicBool::new(false));
    let renewing = spawn_renewal(db.clone(), holder.to_string(), lost.clone());
    let outcome = drain(db, embedder, &lost, refused).await;
    renewing.abort();
    let written = *outcome.as_ref().unwrap_or(&0);
    maintenance::finish(db, PROJECTOR_NAME, holder, written as i64).await?;
    metrics::counter!(crate::metrics::PROJECTOR_VECTORS).increment(written);
    outcome.map(Some)
}

/// Renew the tick's claim every third of it; `lost` is set once a renewal fails (the claim
/// may have lapsed and another process may run the tick: this one stops at its next batch).
fn spawn_renewal(db: Db, holder: String, lost: Arc<AtomicBool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(TICK_LEASE_MS as u64 / 3)).await;
            if !matches!(maintenance::renew(&db, PROJECTOR_NAME, &holder, TICK_LEASE_MS).await, Ok(true)) {
                lost.store(true, Ordering::Relaxed);
                return;
            }
        }
    })
}

async fn drain(db: &Db, embedder: &Embedder, lost: &AtomicBool, refused: &mut Refused) -> StoreResult<u64> {
    let mut written = 0u64;
    // Tenants skipped for the rest of this tick: refused ones (for `REFUSED_RETRY`), and
    // those whose embedding failed transiently in it.
    let mut skip = refused.waiting();
    let mut failures = 0;
    let mut first_error = None;
    for _ in 0..MAX_BATCHES_PER_TICK {
        if lost.load(Ordering::Relaxed) {
            tracing::warn!("projector: the tick's claim could not be renewed; the rest waits for the next tick");
            break;
        }
        // One tenant's next stale page: the walk from its watermark.
        let Some((tenant, watermark)) = stale_tenant(db, &skip).await? else { break };
        let page = walk_page(db, &tenant, watermark, BATCH as i64).await?;
        let texts = crate::store::vectors::texts(&page.items);
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let vectors = match embedder.embed(&refs).await {
            Ok(vectors) => vectors,
            Err(e) => {
                let permanent = matches!(e, EmbedError::Permanent(_));
                tracing::warn!(tenant = %tenant, error = %format!("{e:#}"), permanent, "projector: embedding failed; the tenant waits");
                if permanent {
                    refused.0.insert(tenant.clone(), Instant::now() + REFUSED_RETRY);
                }
                failures += 1;
                skip.push(tenant);
                first_error.get_or_insert(StoreError::Other(e.into()));
                // A provider that is down (or refuses the key or the model) fails every
                // tenant: stop after a few. The refused wait, so the next tick goes on.
                if failures >= MAX_FAILURES_PER_TICK {
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
