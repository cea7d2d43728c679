//! In-process change notifications for operation rows: long-polls watch one operation
//! and wake when this process commits a change to it. Changes committed by other
//! processes are not seen here; the waiters' periodic re-read covers them.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::Notify;
use tokio::sync::futures::Notified;

/// Wakes this process's long polls on one operation after it commits a change to that
/// operation's row (claim, finish, cancel, inference checkpoints). Only the waiters of that
/// operation wake, so many open polls do not all re-read on every change. Changes made by
/// other processes are still seen by the waiters' periodic re-read; this only removes the
/// poll interval from the common single-process path.
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
