//! Change notifications for operation rows, per process: long-polls watch one operation
//! and wake when a change to it commits — in this process ([`Changes::committed`], called
//! after the commit) or, on PostgreSQL, in any process ([`Changes::spawn_listener`]: a
//! trigger notifies every listener with the operation id). The waiters' periodic re-read
//! covers anything missed (a listener reconnecting).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::PgPool;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::store::{Engine, operations};
use context_jobs::ids::OperationId;

type Watchers = Mutex<HashMap<String, Arc<Notify>>>;

/// The process's change notifications (cheap to clone; one per service).
#[derive(Clone)]
pub struct Changes {
    inner: Arc<Inner>,
}

struct Inner {
    /// Whether this process must wake its own watchers after its commits: on PostgreSQL
    /// the trigger's notification does that for every process (waking here too would only
    /// read the row twice).
    local: bool,
    watchers: Watchers,
}

impl Changes {
    pub fn new(engine: Engine) -> Self {
        Self { inner: Arc::new(Inner { local: engine == Engine::Sqlite, watchers: Mutex::default() }) }
    }

    fn watchers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.inner.watchers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Announce that this process committed a change to operation `id`.
    pub fn committed(&self, id: &OperationId) {
        if self.inner.local {
            self.changed(id.as_str());
        }
    }

    /// Wake this process's watchers of operation `id` (only those, so many open polls do
    /// not all re-read on every change).
    pub fn changed(&self, id: &str) {
        if let Some(notify) = self.watchers().get(id) {
            notify.notify_waiters();
        }
    }

    /// Watch operation `id`; the registration ends when the last watch of it is dropped.
    pub fn watch(&self, id: &OperationId) -> Watch {
        let notify = self.watchers().entry(id.to_string()).or_default().clone();
        Watch { changes: self.clone(), id: id.to_string(), notify }
    }

    /// PostgreSQL: relay notifications of operation changes committed by any process to
    /// this process's watchers, until `shutdown`. Reconnects (after a pause) when the
    /// connection drops; what changes meanwhile is found by the waiters' re-read.
    pub fn spawn_listener(&self, pool: PgPool, shutdown: CancellationToken) -> JoinHandle<anyhow::Result<()>> {
        let changes = self.clone();
        tokio::spawn(async move {
            loop {
                let failed = tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    Err(e) = operations::follow_changes(&pool, |id| changes.changed(id)) => e,
                };
                tracing::warn!(error = %failed, "operation change listener failed; long-polls fall back to re-reading until it is back");
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        })
    }
}

/// A registration for change notifications of one operation.
pub struct Watch {
    changes: Changes,
    id: String,
    notify: Arc<Notify>,
}

impl Watch {
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
        let mut watchers = self.changes.watchers();
        // The map's reference and ours: nobody else watches this operation.
        if Arc::strong_count(&self.notify) <= 2 {
            watchers.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_change_wakes_only_its_operations_watchers_and_drops_deregister() {
        let changes = Changes::new(Engine::Sqlite);
        let (a, b) = (OperationId::from_stored("op-a"), OperationId::from_stored("op-b"));
        let (a1, a2, wb) = (changes.watch(&a), changes.watch(&a), changes.watch(&b));
        let (mut wa1, mut wa2, mut wbn) = (a1.armed(), a2.armed(), wb.armed());
        // Committed after arming, before the waits are first polled: still delivered.
        changes.committed(&a);
        let quick = Duration::from_millis(50);
        assert!(tokio::time::timeout(quick, &mut wa1).await.is_ok());
        assert!(tokio::time::timeout(quick, &mut wa2).await.is_ok());
        assert!(tokio::time::timeout(quick, &mut wbn).await.is_err(), "another operation's watcher slept on");
        drop((wa1, wa2, wbn));
        drop(a1);
        assert!(changes.watchers().contains_key("op-a"), "a2 still watches");
        drop(a2);
        assert!(!changes.watchers().contains_key("op-a"));
        drop(wb);
        assert!(!changes.watchers().contains_key("op-b"));
    }

    #[tokio::test]
    async fn on_postgres_the_trigger_announces_commits() {
        let changes = Changes::new(Engine::Postgres);
        let id = OperationId::from_stored("op");
        let watch = changes.watch(&id);
        let mut woken = watch.armed();
        changes.committed(&id);
        assert!(tokio::time::timeout(Duration::from_millis(50), &mut woken).await.is_err());
        changes.changed("op");
        assert!(tokio::time::timeout(Duration::from_millis(50), &mut woken).await.is_ok());
    }
}
