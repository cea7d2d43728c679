//! Change notifications for operation rows, per process: long-polls and single-operation
//! event streams watch one operation ([`Changes::watch`]), and list event streams watch a
//! tenant's operations or every tenant's ([`Changes::watch_tenant`]). They wake when a
//! change commits — in this process ([`Changes::committed`], called after the commit) or,
//! on PostgreSQL, in any process ([`Changes::spawn_listener`]: a trigger notifies every
//! listener with the operation id and its tenant). The waiters' periodic re-read covers
//! anything missed (a listener reconnecting, SQLite with separate processes).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::PgPool;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::store::{Engine, operations};
use context_jobs::ids::{OperationId, TenantKey};

type Watchers = Mutex<HashMap<String, Arc<Notify>>>;
/// Tenant watches by registration number: the tenant watched (`None`: every tenant).
type TenantWatchMap = HashMap<u64, (Option<TenantKey>, Arc<Notify>)>;
type TenantWatchers = Mutex<TenantWatchMap>;

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
    tenant_watchers: TenantWatchers,
    next_watch: AtomicU64,
}

impl Changes {
    pub fn new(engine: Engine) -> Self {
        Self {
            inner: Arc::new(Inner {
                local: engine == Engine::Sqlite,
                watchers: Mutex::default(),
                tenant_watchers: Mutex::default(),
                next_watch: AtomicU64::new(0),
            }),
        }
    }

    fn tenant_watchers(&self) -> std::sync::MutexGuard<'_, TenantWatchMap> {
        self.inner.tenant_watchers.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn watchers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.inner.watchers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Announce that this process committed a change to operation `id`.
    pub fn committed(&self, id: &OperationId) {
        if self.inner.local {
            self.changed(id.as_str());
            // The tenant is not at hand here: every tenant watch of this process reads
            // (one cheap indexed read per stream; a stream coalesces wake-ups).
            self.tenant_changed(None);
        }
    }

    /// Wake this process's watches of `tenant`'s operations and of every tenant's
    /// (`None`: every watch).
    pub fn tenant_changed(&self, tenant: Option<&str>) {
        for (watched, notify) in self.tenant_watchers().values() {
            let wakes = match (watched, tenant) {
                (None, _) | (_, None) => true,
                (Some(w), Some(t)) => w.as_str() == t,
            };
            if wakes {
                // A permit: a watch busy reading when this arrives reads once more after.
                notify.notify_one();
            }
        }
    }

    /// Watch changes to `tenant`'s operations (`None`: every tenant's); the registration
    /// ends when the watch is dropped.
    pub fn watch_tenant(&self, tenant: Option<TenantKey>) -> TenantWatch {
        let key = self.inner.next_watch.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        self.tenant_watchers().insert(key, (tenant, notify.clone()));
        TenantWatch { changes: self.clone(), key, notify }
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
                    Err(e) = operations::follow_changes(&pool, |id, tenant| {
                        changes.changed(id);
                        changes.tenant_changed(tenant);
                    }) => e,
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
    /// The operation watched.
    pub fn operation_id(&self) -> OperationId {
        OperationId::from_stored(self.id.clone())
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
        let mut watchers = self.changes.watchers();
        // The map's reference and ours: nobody else watches this operation.
        if Arc::strong_count(&self.notify) <= 2 {
            watchers.remove(&self.id);
        }
    }
}

/// A registration for change notifications of a tenant's operations (or every tenant's).
/// Wake-ups coalesce: however many changes arrive while the holder is busy, the next
/// [`TenantWatch::changed`] returns once, at once.
pub struct TenantWatch {
    changes: Changes,
    key: u64,
    notify: Arc<Notify>,
}

impl TenantWatch {
    /// Resolves on the next change announced (or at once if one came since the last call).
    pub async fn changed(&self) {
        self.notify.notified().await;
    }
}

impl Drop for TenantWatch {
    fn drop(&mut self) {
        self.changes.tenant_watchers().remove(&self.key);
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
    async fn tenant_watches_wake_for_their_tenant_coalesce_and_deregister() {
        let changes = Changes::new(Engine::Postgres);
        let (a, b) = (TenantKey::new("a", "p"), TenantKey::new("b", "p"));
        let (wa, wb, all) =
            (changes.watch_tenant(Some(a.clone())), changes.watch_tenant(Some(b)), changes.watch_tenant(None));
        let quick = Duration::from_millis(50);
        // Three changes while nobody waits: one wake-up each for a and every-tenant, then quiet.
        for _ in 0..3 {
            changes.tenant_changed(Some(a.as_str()));
        }
        assert!(tokio::time::timeout(quick, wa.changed()).await.is_ok());
        assert!(tokio::time::timeout(quick, wa.changed()).await.is_err(), "wake-ups did not coalesce");
        assert!(tokio::time::timeout(quick, all.changed()).await.is_ok());
        assert!(tokio::time::timeout(quick, wb.changed()).await.is_err(), "another tenant's watch woke");
        // A change of unknown tenant (SQLite's local commits) wakes every watch.
        changes.committed(&OperationId::from_stored("op"));
        assert!(tokio::time::timeout(quick, wb.changed()).await.is_err(), "PostgreSQL: the trigger announces");
        changes.tenant_changed(None);
        assert!(tokio::time::timeout(quick, wb.changed()).await.is_ok());
        drop((wa, wb));
        assert_eq!(changes.tenant_watchers().len(), 1);
        drop(all);
        assert!(changes.tenant_watchers().is_empty());
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
