//! The pool connections a worker process's pipelined runs may hold together.
//!
//! An export, an import or a rebuild runs as stages that each hold a connection while
//! waiting on the others (`Job::CONNECTIONS`). Several such runs that each took part of
//! what they need could fill the pool and wait on each other until the pool's acquire
//! timeout failed one (an attempt spent for nothing): with the defaults, four imports and
//! four exports want 24 connections of 16. A run takes all its permits before it starts,
//! and the permits are the pool less a reserve for the API, heartbeats, progress writes and
//! single-connection runs — so the runs that hold connections always get the rest.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Connections of the pool left to everything but pipelined runs.
const RESERVE: u32 = 4;

pub struct Pipelines {
    permits: Arc<Semaphore>,
    total: u32,
}

impl Pipelines {
    /// Permits for a pool of `pool_size` connections (at least one run at a time).
    pub fn new(pool_size: u32) -> Self {
        let total = pool_size.saturating_sub(RESERVE).max(1);
        Pipelines { permits: Arc::new(Semaphore::new(total as usize)), total }
    }

    /// Wait until a run that holds `connections` at once may start; `None` (no wait) for a
    /// run of one. A run that wants more than there are takes them all.
    pub async fn acquire(&self, connections: u32) -> Option<OwnedSemaphorePermit> {
        if connections <= 1 {
            return None;
        }
        let wanted = connections.min(self.total);
        Some(self.permits.clone().acquire_many_owned(wanted).await.expect("the semaphore is never closed"))
    }
}
