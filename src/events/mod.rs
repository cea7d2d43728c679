//! Event streams of operation changes, below the HTTP edge: what each stream sends and
//! when ([`operation`]: one operation until it is terminal; [`listing`]: a tenant's
//! operations, or every tenant's), and the per-process cap on open streams
//! ([`EventStreams`]). The edge (`http::routes::events`) turns [`Event`]s into Server-Sent
//! Events.
//!
//! Bounded: a stream holds at most one page of rows. It reads the database when woken (a
//! change notification, or the periodic re-read) and sends what it read before it reads
//! again, at the pace the client takes it; changes made meanwhile coalesce into the next
//! read, which sees each operation as it is then.

pub mod listing;
pub mod operation;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::changes::Changes;
use crate::metrics::EVENT_STREAMS_OPEN;
use crate::store::Db;
use crate::store::operations::OperationRow;

/// What a stream sends.
pub enum Event {
    /// An operation as it is now, and the resume token just after it.
    Operation(Box<OperationRow>, String),
    /// Only a position (an SSE message with an `id:` and no data): a client reconnecting
    /// after it resumes there.
    Position(String),
}

/// What every stream reads with and stops on.
#[derive(Clone)]
pub struct StreamCtx {
    pub db: Db,
    pub changes: Changes,
    /// The re-read when no notification came (another SQLite process, a PostgreSQL
    /// listener reconnecting).
    pub recheck: Duration,
    /// Process shutdown: every stream ends at once, so the HTTP server drains in time.
    pub shutdown: CancellationToken,
}

/// The cap on event streams open in this process.
#[derive(Clone)]
pub struct EventStreams {
    permits: Arc<Semaphore>,
    max: usize,
}

impl EventStreams {
    pub fn new(max: usize) -> Self {
        Self { permits: Arc::new(Semaphore::new(max)), max }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// A place for one more stream of `stream` (`operation` or `operations`), held until
    /// the stream is dropped; `None` when every place is taken.
    pub fn open(&self, stream: &'static str) -> Option<StreamPermit> {
        let permit = self.permits.clone().try_acquire_owned().ok();
        if permit.is_none() {
            metrics::counter!(crate::metrics::EVENT_STREAMS_REFUSED).increment(1);
        }
        let permit = permit?;
        metrics::gauge!(EVENT_STREAMS_OPEN, "stream" => stream).increment(1.0);
        Some(StreamPermit { _permit: permit, stream })
    }
}

/// One open stream's place (and its share of the open-streams gauge).
pub struct StreamPermit {
    _permit: OwnedSemaphorePermit,
    stream: &'static str,
}

impl StreamPermit {
    /// The `stream` label of this stream's metrics.
    pub fn stream(&self) -> &'static str {
        self.stream
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        metrics::gauge!(EVENT_STREAMS_OPEN, "stream" => self.stream).decrement(1.0);
    }
}

/// Wait for `woken`, the re-read interval, or shutdown (`false`: stop).
async fn pause(ctx: &StreamCtx, woken: impl Future<Output = ()>) -> bool {
    tokio::select! {
        () = woken => true,
        () = tokio::time::sleep(ctx.recheck) => true,
        () = ctx.shutdown.cancelled() => false,
    }
}
