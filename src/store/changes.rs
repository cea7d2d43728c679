//! Change notifications for operation rows: long-polls watch one operation and wake when
//! a change to it commits — in this process ([`changed`], called after the commit) or, on
//! PostgreSQL, in any process ([`spawn_listener`]: a trigger notifies channel
//! [`CHANNEL`] with the operation id). The waiters' periodic re-read covers anything
//! missed (a listener reconnecting).

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};

use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::db::Db;

/// The PostgreSQL channel the `operations_changed` trigger notifies (migration 6).
pub const CHANNEL: &str = "context_ops_operations";

/// Announce that this process committed a change to operation `id`. On SQLite, wake this
/// process's watchers of it at once; on PostgreSQL the trigger's notification does that,
/// for every process — waking here too would only read the row twice.
pub fn committed(db: &Db, id: &str) {
    if matches!(db, Db::Sqlite(_)) {
        changed(id);
    }
}

/// Wake this process's long-polls on operation `id`: only the waiters of that operation,
/// so many open polls do not all re-read on every change.
pub fn changed(id: &str) {
    let watchers = watchers().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(notify) = watchers.get(id) {
        notify.notify_waiters();
    }
}

type Watchers = Mutex<HashMap<String, Arc<Notify>>>;

fn watchers() -> &'static Watchers {
    static WATCHERS: OnceLock<Watchers> = OnceLock::new();
    WATCHERS.get_or_init(Default::default)
}

/// A registration for [`changed`] notifications of one operation; deregisters when the
/// last watch of that operation is dropped.
pub struct Watch {
    id: String,
    notify: Arc<Notify>,
}

impl Watch {
    pub fn new(id: &str) -> Self {
        let mut watchers = watchers().lock().unwrap_or_else(|p| p.into_inner());
        let notify = watchers.entry(id.to_string()).or_default().clone();
        Self { id: id.to_string(), notify }
    }

    /// A notification future, already enabled: a change committed after this call wakes it
    /// even if it is first polled later.
    pub fn armed(&self) -> Pin<Box<Notified<'_>>> {
        let mut notified = Box::pin(self.notify.notified());
        notified.as_mut().enable();
        notified
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut watchers = watchers().lock().unwrap_or_else(|p| p.into_inner());
        // The map's reference and ours: nobody else watches this operation.
        if Arc::strong_count(&self.notify) <= 2 {
            watchers.remove(&self.id);
        }
    }
}

/// PostgreSQL: relay notifications of operation changes committed by any process to this
/// process's watchers, until `shutdown`. Reconnects (after a pause) when the connection
/// drops; what changes meanwhile is found by the waiters' re-read.
pub fn spawn_listener(pool: PgPool, shutdown: CancellationToken) -> JoinHandle<anyhow::Result<()>> {
    tokio::spawn(async move {
        loop {
            let failed = tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                Err(e) = relay(&pool) => e,
            };
            tracing::warn!(error = %failed, "operation change listener failed; long-polls fall back to re-reading until it is back");
            tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    })
}

/// Relay notifications to the watchers until the connection fails.
async fn relay(pool: &PgPool) -> Result<Infallible, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    loop {
        changed(listener.recv().await?.payload());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_change_wakes_only_its_operations_watchers_and_drops_deregister() {
        let (a1, a2, b) = (Watch::new("op-a"), Watch::new("op-a"), Watch::new("op-b"));
        let (mut wa1, mut wa2, mut wb) = (a1.armed(), a2.armed(), b.armed());
        // Committed after arming, before the waits are first polled: still delivered.
        changed("op-a");
        let quick = Duration::from_millis(50);
        assert!(tokio::time::timeout(quick, &mut wa1).await.is_ok());
        assert!(tokio::time::timeout(quick, &mut wa2).await.is_ok());
        assert!(tokio::time::timeout(quick, &mut wb).await.is_err(), "another operation's watcher slept on");
        drop((wa1, wa2, wb));
        drop(a1);
        assert!(watchers().lock().unwrap().contains_key("op-a"), "a2 still watches");
        drop(a2);
        assert!(!watchers().lock().unwrap().contains_key("op-a"));
        drop(b);
        assert!(!watchers().lock().unwrap().contains_key("op-b"));
    }
}
