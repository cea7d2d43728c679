//! The per-process cache of recall indexes, one per tenant, kept in sync with the database
//! by change sequence. Each recall first syncs its tenant's index (usually one indexed query
//! that returns nothing), so a recall sees every entry write committed before it started.
//!
//! Sync reads entries with `change_seq` above the index's mark, then vectors with
//! `written_seq` above its mark — two range scans of their own indexes, whatever the
//! planner's statistics. Both sequences are taken under the tenant's heads row lock, so what
//! a reader sees committed is always a prefix: a mark never skips a write. A vector read
//! before its entry waits in the index until the next sync's entries bring it (or show it
//! will never come: then it is dropped). Indexes are bounded in number (least recently
//! used goes first) and rebuilt from scratch after eviction or a restart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use crate::store::vectors::reads;
use crate::store::{Db, StoreResult};
use context_jobs::contract::ContextInsightStatus;
use context_jobs::entries::{parse_status, stored_entry_text};
use context_jobs::ids::TenantKey;
use context_jobs::recall_index::{IndexedEntry, RecallIndex};
use context_jobs::text::terms;
use context_jobs::vector_codec::decode_vector;

/// Tenants whose indexes stay in memory at once.
pub const MAX_TENANTS: usize = 32;
/// Rows per sync query, at most (a page is also cut by bytes: `reads::SyncPage`).
const SYNC_PAGE: i64 = 5000;

pub struct TenantIndex {
    pub index: RecallIndex,
    change_seq: i64,
    vector_seq: i64,
    /// A first sync has completed.
    built: bool,
}

struct Cached {
    data: Arc<RwLock<TenantIndex>>,
    /// One sync at a time per tenant.
    sync: Arc<tokio::sync::Mutex<()>>,
    used: u64,
}

/// Indexes built from nothing at once per process (first recalls of many tenants).
const COLD_BUILDS: usize = 2;

pub struct RecallIndexes {
    model: String,
    dim: usize,
    tenants: Mutex<(HashMap<String, Cached>, u64)>,
    cold_builds: tokio::sync::Semaphore,
}

impl RecallIndexes {
    pub fn new(model: &str, dim: usize) -> Self {
        Self {
            model: model.to_string(),
            dim,
            tenants: Mutex::new((HashMap::new(), 0)),
            cold_builds: tokio::sync::Semaphore::new(COLD_BUILDS),
        }
    }

    fn slot(&self, tenant: &str) -> (Arc<RwLock<TenantIndex>>, Arc<tokio::sync::Mutex<()>>) {
        let mut guard = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        let (map, clock) = &mut *guard;
        *clock += 1;
        // The least recently used index that no recall is syncing goes. One being built or
        // synced stays: evicted, its recall went on building an index nobody kept (a burst
        // of first recalls of many tenants built them all at once, past the bound, and the
        // cache thrashed). While every index is in use the map holds more for a moment (the
        // next look trims it back); the cold builds themselves are limited (`COLD_BUILDS`).
        let room = if map.contains_key(tenant) { MAX_TENANTS } else { MAX_TENANTS - 1 };
        while map.len() > room
            && let Some(oldest) = map
                .iter()
                .filter(|(name, c)| name.as_str() != tenant && c.sync.try_lock().is_ok())
                .min_by_key(|(_, c)| c.used)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        let dim = self.dim;
        let cached = map.entry(tenant.to_string()).or_insert_with(|| Cached {
            data: Arc::new(RwLock::new(TenantIndex {
                index: RecallIndex::new(dim),
                change_seq: 0,
                vector_seq: 0,
                built: false,
            })),
            sync: Arc::new(tokio::sync::Mutex::new(())),
            used: 0,
        });
        cached.used = *clock;
        (cached.data.clone(), cached.sync.clone())
    }

    /// The tenant's index, brought up to date with everything committed so far.
    pub async fn synced(&self, db: &Db, tenant: &TenantKey) -> StoreResult<Arc<RwLock<TenantIndex>>> {
        let (data, sync) = self.slot(tenant.as_str());
        let _one_at_a_time = sync.lock().await;
        let (mut change_seq, mut vector_seq, built) = {
            let d = data.read().unwrap_or_else(|p| p.into_inner());
            (d.change_seq, d.vector_seq, d.built)
        };
        // A build from nothing holds a whole index in the making: a few at a time. (Built
        // once, a tenant without entries is not cold again: its recalls do not queue here.)
        let _cold = match built {
            false => Some(self.cold_builds.acquire().await.expect("never closed")),
            true => None,
        };
        loop {
            let page = reads::entries_changed_after(db, tenant, change_seq, SYNC_PAGE).await?;
            // Tokenising is the costly part: do it before taking the write lock.
            let prepared: Vec<_> = page
                .rows
                .into_iter()
                .map(|r| {
                    let text = terms(&stored_entry_text(&r.6));
                    (r, text)
                })
                .collect();
            if let Some(last) = prepared.last() {
                change_seq = last.0.7;
            }
            let mut d = data.write().unwrap_or_else(|p| p.into_inner());
            for ((id, version, status, expires, conversation, updated, _, _), text) in prepared {
                d.index.upsert(IndexedEntry {
                    id: &id,
                    version: version as u64,
                    active: parse_status(&status) == Some(ContextInsightStatus::Active),
                    expires_at_ms: expires,
                    conversation_id: &conversation,
                    updated_at_ms: updated,
                    terms: text,
                });
            }
            d.change_seq = change_seq;
            if !page.more {
                // Every entry change committed before this sync is in: a vector that
                // waited for its entry has had it (`drop_waiting_vectors`).
                d.index.drop_waiting_vectors();
                break;
            }
        }
        loop {
            let page = reads::vectors_written_after(db, tenant, &self.model, vector_seq, SYNC_PAGE).await?;
            let decoded: Vec<(String, i64, Option<Vec<f32>>)> = page
                .rows
                .into_iter()
                .map(|(id, v, blob, dim, seq)| {
                    vector_seq = vector_seq.max(seq);
                    (id, v, decode_vector(&blob, dim as usize))
                })
                .collect();
            let mut d = data.write().unwrap_or_else(|p| p.into_inner());
            for (id, version, v) in &decoded {
                if let Some(v) = v {
                    d.index.set_vector(id, *version as u64, v);
                }
            }
            d.vector_seq = vector_seq;
            if !page.more {
                d.built = true;
                break;
            }
        }
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_being_synced_is_not_evicted() {
        let indexes = RecallIndexes::new("m", 8);
        let (_, busy) = indexes.slot("busy");
        let syncing = busy.try_lock().unwrap();
        for i in 0..MAX_TENANTS + 5 {
            indexes.slot(&format!("t{i}"));
        }
        let held = |name: &str| indexes.tenants.lock().unwrap().0.contains_key(name);
        assert!(held("busy"), "the index being synced was evicted");
        assert!(!held("t0"), "the least recently used idle one goes");
        drop(syncing);
        for i in 0..MAX_TENANTS {
            indexes.slot(&format!("u{i}"));
        }
        assert!(!held("busy"), "once idle, it may go");
        assert_eq!(indexes.tenants.lock().unwrap().0.len(), MAX_TENANTS);

        // A burst: every index in use at once. The map holds them all for the moment, and
        // the next look, once they are idle, trims it back to the bound.
        let guards: Vec<_> =
            (0..MAX_TENANTS + 10).map(|i| indexes.slot(&format!("v{i}")).1.try_lock_owned().unwrap()).collect();
        assert_eq!(indexes.tenants.lock().unwrap().0.len(), MAX_TENANTS + 10);
        drop(guards);
        indexes.slot("v0");
        assert_eq!(indexes.tenants.lock().unwrap().0.len(), MAX_TENANTS);
    }
}
