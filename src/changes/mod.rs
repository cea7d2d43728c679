//! Change notifications for operation rows: long-polls and single-operation event streams
//! watch one operation ([`Changes::watch`]), list event streams watch a tenant's operations
//! or every tenant's ([`Changes::watch_tenant`]). Every writer announces its commit
//! ([`Changes::committed`], after the commit): this process's watches wake at once, and in
//! production the announcement is published on Redis ([`relay`]) so every API process's
//! watches wake too. The waiters' periodic re-read covers anything missed (a relay
//! reconnecting, SQLite with separate processes).
//!
//! Why not PostgreSQL `NOTIFY`: a notifying transaction takes a database-wide lock at
//! commit and holds it through the WAL flush, so every operation change queued behind every
//! other (pgbench here, 8 clients, one-row UPDATE: 1,200–1,460 tps without, 370–460 with a
//! `pg_notify` in the transaction). Redis is there in production anyway.

pub mod relay;

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::Notify;
use tokio::sync::futures::Notified;

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
    /// Where announcements go beyond this process (production: Redis), once attached.
    relay: OnceLock<relay::Outbox>,
    watchers: Watchers,
    tenant_watchers: TenantWatchers,
    next_watch: AtomicU64,
}

impl Changes {
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                relay: OnceLock::new(),
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

    /// Announce that this process committed a change to operation `id` of `tenant`.
    pub fn committed(&self, id: &OperationId, tenant: &TenantKey) {
        self.changed(id.as_str());
        self.tenant_changed(Some(tenant.as_str()));
        self.publish(relay::Change::Operation { id: id.as_str(), tenant: tenant.as_str() });
    }

    /// Announce changes to many operations at once (a bulk action, a pause): of `tenant`,
    /// or of every tenant. Every watch of an operation wakes and re-reads (rare actions).
    pub fn committed_many(&self, tenant: Option<&TenantKey>) {
        self.wake_many(tenant.map(TenantKey::as_str));
        self.publish(relay::Change::Many { tenant: tenant.map(TenantKey::as_str) });
    }

    fn wake_many(&self, tenant: Option<&str>) {
        for notify in self.watchers().values() {
            notify.notify_waiters();
        }
        self.tenant_changed(tenant);
    }

    fn publish(&self, change: relay::Change<'_>) {
        if let Some(outbox) = self.inner.relay.get() {
            outbox.send(change);
        }
    }

    /// Apply a change another process announced.
    fn received(&self, change: relay::Change<'_>) {
        match change {
            relay::Change::Operation { id, tenant } => {
                self.changed(id);
                self.tenant_changed(Some(tenant));
            }
            relay::Change::Many { tenant } => self.wake_many(tenant),
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
}

impl Default for Changes {
    fn default() -> Self {
        Self::new()
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
        // Ours is let go under the lock (a placeholder takes its place): two last watches of
        // one operation dropped together each saw the other's reference, and neither
        // removed the entry, which then stayed for good.
        drop(std::mem::take(&mut self.notify));
        // Only the map's reference left: nobody else watches this operation.
        if watchers.get(&self.id).is_some_and(|n| Arc::strong_count(n) == 1) {
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

    const QUICK: Duration = Duration::from_millis(50);

    #[tokio::test]
    async fn a_change_wakes_only_its_operations_watchers_and_drops_deregister() {
        let changes = Changes::new();
        let tenant = TenantKey::new("t", "p");
        let (a, b) = (OperationId::from_stored("op-a"), OperationId::from_stored("op-b"));
        let (a1, a2, wb) = (changes.watch(&a), changes.watch(&a), changes.watch(&b));
        let (mut wa1, mut wa2, mut wbn) = (a1.armed(), a2.armed(), wb.armed());
        // Committed after arming, before the waits are first polled: still delivered.
        changes.committed(&a, &tenant);
        assert!(tokio::time::timeout(QUICK, &mut wa1).await.is_ok());
        assert!(tokio::time::timeout(QUICK, &mut wa2).await.is_ok());
        assert!(tokio::time::timeout(QUICK, &mut wbn).await.is_err(), "another operation's watcher slept on");
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
        let changes = Changes::new();
        let (a, b) = (TenantKey::new("a", "p"), TenantKey::new("b", "p"));
        let (wa, wb, all) =
            (changes.watch_tenant(Some(a.clone())), changes.watch_tenant(Some(b.clone())), changes.watch_tenant(None));
        // Three changes while nobody waits: one wake-up each for a and every-tenant, then quiet.
        for i in 0..3 {
            changes.committed(&OperationId::from_stored(format!("op-{i}")), &a);
        }
        assert!(tokio::time::timeout(QUICK, wa.changed()).await.is_ok());
        assert!(tokio::time::timeout(QUICK, wa.changed()).await.is_err(), "wake-ups did not coalesce");
        assert!(tokio::time::timeout(QUICK, all.changed()).await.is_ok());
        assert!(tokio::time::timeout(QUICK, wb.changed()).await.is_err(), "another tenant's watch woke");
        // Many of b's at once (a bulk action): b's and every-tenant watches, not a's.
        changes.committed_many(Some(&b));
        assert!(tokio::time::timeout(QUICK, wb.changed()).await.is_ok());
        assert!(tokio::time::timeout(QUICK, all.changed()).await.is_ok());
        assert!(tokio::time::timeout(QUICK, wa.changed()).await.is_err(), "a bulk action of b woke a");
        // Every tenant's (a pause for everyone).
        changes.committed_many(None);
        assert!(tokio::time::timeout(QUICK, wa.changed()).await.is_ok());
        drop((wa, wb));
        assert_eq!(changes.tenant_watchers().len(), 1);
        drop(all);
        assert!(changes.tenant_watchers().is_empty());
    }

    #[tokio::test]
    async fn a_bulk_change_wakes_every_operation_watch() {
        let changes = Changes::new();
        let watch = changes.watch(&OperationId::from_stored("op"));
        let mut woken = watch.armed();
        changes.committed_many(Some(&TenantKey::new("t", "p")));
        assert!(tokio::time::timeout(QUICK, &mut woken).await.is_ok());
    }

    #[tokio::test]
    async fn changes_received_from_other_processes_wake_like_local_ones() {
        let changes = Changes::new();
        let tenant = TenantKey::new("t", "p");
        let (watch, tenant_watch) =
            (changes.watch(&OperationId::from_stored("op")), changes.watch_tenant(Some(tenant)));
        let mut woken = watch.armed();
        changes.received(relay::Change::Operation { id: "other", tenant: "t/p" });
        assert!(tokio::time::timeout(QUICK, &mut woken).await.is_err(), "another operation's change woke it");
        assert!(tokio::time::timeout(QUICK, tenant_watch.changed()).await.is_ok());
        changes.received(relay::Change::Operation { id: "op", tenant: "t/p" });
        assert!(tokio::time::timeout(QUICK, &mut woken).await.is_ok());
    }
}
