//! The pool connections a worker process's pipelined runs may hold together.
//!
//! An export, an import or a rebuild runs as stages that each hold a connection while
//! waiting on the others (`Job::CONNECTIONS`). Several such runs that each took part of
//! what they need could fill the pool and wait on each other until the pool's acquire
//! timeout failed one (an attempt spent for nothing): with the defaults, four imports and
//! four exports want 24 connections of 16. A delivery of such a kind takes all its run's
//! permits before it claims an operation (what waits stays queued), and the permits are the
//! pool less a reserve for the API, heartbeats, progress writes and single-connection runs
//! — so the runs that hold connections get the rest.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::store::Db;

/// Connections of the pool left to everything but pipelined runs.
const RESERVE: u32 = 4;

/// The share, or none: SQLite's stages do not hold a connection while they wait (a write
/// waits for this process's write turn before it takes one), so its runs cannot hold part
/// of the pool while waiting on each other.
pub struct Pipelines(Option<Share>);

struct Share {
    permits: Arc<Semaphore>,
    total: u32,
}

impl Pipelines {
    /// The share of `db`'s pool (its real size: SQLite's is capped below the setting).
    pub fn for_pool(db: &Db) -> Self {
        let Db::Postgres(pool) = db else { return Pipelines(None) };
        let total = pool.options().get_max_connections().saturating_sub(RESERVE).max(1);
        Pipelines(Some(Share { permits: Arc::new(Semaphore::new(total as usize)), total }))
    }

    /// Wait until a run that holds `connections` at once may start; `None` (no wait) for a
    /// run of one, and on SQLite. A run that wants more than the whole share takes it all:
    /// it still starts, alone.
    pub async fn acquire(&self, connections: u32) -> Option<OwnedSemaphorePermit> {
        let share = self.0.as_ref().filter(|_| connections > 1)?;
        let wanted = connections.min(share.total);
        Some(share.permits.clone().acquire_many_owned(wanted).await.expect("the semaphore is never closed"))
    }
}
