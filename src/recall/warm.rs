//! Loading recall indexes when an API process starts, so the first recall of a busy tenant
//! does not pay for building its index (about a second per 100,000 entries). The most
//! recently projected tenants (`CONTEXT_OPS_RECALL_WARM_TENANTS`, default 8, at most the
//! cache's size) are synced one after another on a task of their own; until that is done
//! the process reports not ready (`/health/ready`), so a load balancer sends it no traffic
//! before its indexes are warm. A failure is logged and ends the warm-up: readiness never
//! waits on it for longer than the loads take.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::Recall;
use super::index_cache::MAX_TENANTS;
use crate::store::vectors::reads::recently_projected_tenants;

/// How far the start-up load is. Starts finished: only [`spawn`] makes a process wait.
#[derive(Default)]
pub struct Warmup {
    loading: AtomicBool,
    total: AtomicUsize,
    done: AtomicUsize,
}

impl Warmup {
    /// `Some((loaded, of))` while indexes are still loading.
    pub fn pending(&self) -> Option<(usize, usize)> {
        self.loading
            .load(Ordering::Acquire)
            .then(|| (self.done.load(Ordering::Acquire), self.total.load(Ordering::Acquire)))
    }

    fn finish(&self) {
        self.loading.store(false, Ordering::Release);
    }
}

/// Load up to `tenants` indexes in the background; the process is not ready until then.
/// Detached: the task ends when the load does (or at shutdown), which is no failure of the
/// process.
pub fn spawn(recall: Recall, tenants: usize, shutdown: CancellationToken) {
    let tenants = tenants.min(MAX_TENANTS);
    if tenants == 0 {
        return;
    }
    let warmup = recall.warmup.clone();
    warmup.loading.store(true, Ordering::Release);
    tokio::spawn(async move {
        tokio::select! {
            () = load(&recall, tenants, &warmup) => {}
            () = shutdown.cancelled() => {}
        }
        warmup.finish();
    });
}

async fn load(recall: &Recall, tenants: usize, warmup: &Arc<Warmup>) {
    let started = Instant::now();
    let keys = match recently_projected_tenants(&recall.db, tenants).await {
        Ok(keys) => keys,
        Err(e) => {
            tracing::warn!(error = %e, "recall warm-up: cannot list tenants; indexes load on first recall");
            return;
        }
    };
    warmup.total.store(keys.len(), Ordering::Release);
    let mut entries = 0;
    for tenant in &keys {
        match recall.indexes.synced(&recall.db, tenant).await {
            Ok(index) => entries += index.read().unwrap_or_else(|p| p.into_inner()).index.len(),
            Err(e) => {
                tracing::warn!(error = %e, "recall warm-up stopped; the rest load on first recall");
                return;
            }
        }
        warmup.done.fetch_add(1, Ordering::AcqRel);
    }
    tracing::info!(tenants = keys.len(), entries, ms = started.elapsed().as_millis() as u64, "recall indexes loaded");
}
