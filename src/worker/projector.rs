//! The background projector: embeds entries whose version is newer than their vector, in
//! batches, so recall's vector side catches up with writes without anyone asking. Every
//! worker process runs the loop; one of them runs each tick, chosen by a compare-and-set
//! on the `maintenance` row `projector` (as the retention sweep is). A tick drains up to
//! `MAX_BATCHES_PER_TICK` batches; what is left waits for the next tick.

use std::collections::HashMap;
use std::sync::Arc;
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
/// Transient embedding failures (a provider down or overloaded) in one tick before it ends.
const MAX_FAILURES_PER_TICK: usize = 3;
/// How long a tenant whose entries the provider refused (a permanent error: an input over
/// the model's limit) waits before this process tries it again. It would otherwise be
/// first in line at every tick (its projection time does not move), and a few such
/// tenants took every tick's turns from the rest.
const REFUSED_RETRY: Duration = Duration::from_secs(60);
/// A tick's claim, renewed before each batch: longer than one batch (a provider's request
/// may take up to 60 s), short enough that a dead holder's claim lapses soon. A tick of
/// many batches once outlived a claim that was never renewed, and a second process ran the
/// tick beside it (paying for the same embeddings twice).
const TICK_LEASE_MS: i64 = 90_000;

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
    let outcome = drain(db, embedder, holder, refused).await;
    let written = *outcome.as_ref().unwrap_or(&0);
    maintenance::finish(db, PROJECTOR_NAME, holder, written as i64).await?;
    metrics::counter!(crate::metrics::PROJECTOR_VECTORS).increment(written);
    outcome.map(Some)
}

async fn drain(db: &Db, embedder: &Embedder, holder: &str, refused: &mut Refused) -> StoreResult<u64> {
    let mut written = 0u64;
    // Tenants skipped for the rest of this tick: refused ones (for `REFUSED_RETRY`), and
    // those whose embedding failed transiently in it.
    let mut skip = refused.waiting();
    let mut transient = 0;
    let mut first_error = None;
    for batch in 0..MAX_BATCHES_PER_TICK {
        if batch > 0 && !maintenance::renew(db, PROJECTOR_NAME, holder, TICK_LEASE_MS).await? {
            tracing::warn!("projector: the tick's claim ran out; the rest waits for the next tick");
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
                } else {
                    transient += 1;
                }
                skip.push(tenant);
                first_error.get_or_insert(StoreError::Other(e.into()));
                // A provider that is down fails every tenant: stop after a few.
                if transient >= MAX_FAILURES_PER_TICK {
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
