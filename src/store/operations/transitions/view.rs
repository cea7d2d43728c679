//! The scheduler's view of a kind's queues: every tenant with queued work, its due head,
//! running count, last claim and pause (one query, [`fetch`]), turned into the core's
//! `schedule` inputs ([`View::queues`]), and this process's short-lived copy of it
//! ([`ViewCache`]).
//!
//! Why a cache: the query walks the index ranges of queued and running rows
//! (`operations_queued`, `operations_running`), and on a busy table those ranges hold the
//! index entries of every version a claim or a finish left behind until vacuum reaches
//! them. Per claim it cost 1.7 ms and ~3,200 buffer reads (pg_stat_statements, 3,000 empty
//! deletes of one tenant) — half of PostgreSQL's time per operation. Kinds without a
//! concurrency limit claim off a view at most [`VIEW_TTL`] old (fair share between tenants
//! is then as fresh as that; the claim's own statement still checks that the row is due
//! and not paused); kinds with a limit, and every hold, read it fresh so limits and pauses
//! hold exactly.

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use crate::store::operations::{queue_order, state_is};
use crate::store::{Db, StoreResult, query};
use context_jobs::contract::{ContextOperationKind, ContextOperationState as State};
use context_jobs::operation::schedule::{KindLimits, TenantQueue};
use sqlx::AssertSqlSafe;

use super::ClaimLimits;
use super::combine::ClaimCombiner;

/// How old a cached view may be when an unlimited kind claims off it.
pub const VIEW_TTL: Duration = Duration::from_millis(200);

/// One tenant's row: `(tenant, head id, running, last claim, paused, the kind's running,
/// the kind paused for everyone, the head's queue position)`.
type QueueRow = (String, Option<String>, i64, Option<i64>, i64, i64, i64, Option<i64>, Option<i64>);

/// Tenants a view holds at most: those with a due head and no pause first, the least
/// recently served first among them. (The first tenants by name once filled it, due or not: past 1,000
/// tenants with queued work, the rest were never served while those waited for a
/// scheduled start or a resume.)
const MAX_TENANTS: usize = 1000;

/// Every tenant with queued work of `kind`, found with one index seek per tenant (a loose
/// index scan: the next tenant after the last, `ORDER BY … LIMIT 1` rather than `MIN`,
/// which PostgreSQL computes by reading every row when it expects few), each with its due
/// head (priority, then age; found once per tenant, then its queue position by id),
/// running count, last claim and pause. The head's "due" rule is the claim's
/// (`claim.rs::due`), spelled here with this statement's binds. States are literals so
/// that the partial indexes serve every read (see [`state_is`]).
static QUEUES_SQL: LazyLock<String> = LazyLock::new(|| {
    let queued = |alias| state_is(alias, State::Queued);
    let running = |alias| state_is(alias, State::Running);
    format!(
        "WITH RECURSIVE t(tenant) AS ( \
           SELECT (SELECT tenant FROM operations WHERE kind = $1 AND {q} ORDER BY tenant LIMIT 1) \
           UNION ALL \
           SELECT (SELECT o.tenant FROM operations o WHERE o.kind = $1 AND {qo} AND o.tenant > t.tenant \
                   ORDER BY o.tenant LIMIT 1) \
           FROM t WHERE t.tenant IS NOT NULL), \
         heads AS MATERIALIZED (SELECT t.tenant, \
           (SELECT o.id FROM operations o WHERE o.kind = $1 AND {qo} AND o.tenant = t.tenant \
              AND o.not_before_ms <= $2 AND o.cancel_requested = 0 AND (o.deadline_ms IS NULL OR o.deadline_ms > $2) \
              ORDER BY {order} LIMIT 1) AS head \
           FROM t WHERE t.tenant IS NOT NULL), \
         chosen AS (SELECT hd.tenant, hd.head FROM heads hd \
           ORDER BY hd.head IS NULL, \
             EXISTS (SELECT 1 FROM queue_controls p WHERE p.kind = $1 AND p.tenant = hd.tenant AND p.paused = 1), \
             (SELECT s.last_claim_ms FROM queue_shares s WHERE s.kind = $1 AND s.tenant = hd.tenant) NULLS FIRST, \
             hd.tenant LIMIT {MAX_TENANTS}) \
         SELECT q.tenant, q.head, \
           (SELECT COUNT(*) FROM operations r WHERE r.kind = $1 AND {rr} AND r.tenant = q.tenant), \
           (SELECT s.last_claim_ms FROM queue_shares s WHERE s.kind = $1 AND s.tenant = q.tenant), \
           (SELECT COUNT(*) FROM queue_controls c WHERE c.kind = $1 AND c.tenant = q.tenant AND c.paused = 1), \
           (SELECT COUNT(*) FROM operations r WHERE r.kind = $1 AND {rr}), \
           (SELECT COUNT(*) FROM queue_controls c WHERE c.kind = $1 AND c.tenant = '' AND c.paused = 1), \
           (SELECT -h.priority FROM operations h WHERE h.id = q.head), \
           (SELECT h.created_at_ms FROM operations h WHERE h.id = q.head) \
         FROM chosen q",
        q = queued(""),
        qo = queued("o."),
        rr = running("r."),
        order = queue_order("o."),
    )
});

/// The view's statement (binds: kind, now).
pub fn queues_sql() -> &'static str {
    QUEUES_SQL.as_str()
}

/// The scheduler's view of one kind, as read at one moment.
#[derive(Debug, Clone, Default)]
pub struct View {
    rows: Vec<QueueRow>,
    /// Per tenant, the queue position of its head as read, then of this process's last claim
    /// off this copy: its next claims search from there (see [`View::start`]).
    starts: HashMap<String, (i64, i64)>,
}

/// Read the view of `kind` now.
pub async fn fetch(db: &Db, kind: ContextOperationKind, now: i64) -> StoreResult<View> {
    let rows = query(AssertSqlSafe(queues_sql())).bind(kind.as_str()).bind(now).fetch_all(db).await?;
    let starts = rows.iter().filter_map(|r: &QueueRow| Some((r.0.clone(), (r.7?, r.8?)))).collect();
    Ok(View { rows, starts })
}

impl View {
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The core's inputs: each tenant's queue, and the kind's figures under `limits`.
    pub fn queues<'v>(&'v self, limits: &ClaimLimits) -> (Vec<TenantQueue<'v>>, KindLimits) {
        let weight = |t: &str| limits.weights.iter().find(|(w, _)| w == t).map_or(1, |(_, n)| *n);
        let queues = self
            .rows
            .iter()
            .map(|(tenant, head, running, last, paused, ..)| TenantQueue {
                tenant,
                head: head.as_deref(),
                running: (*running).max(0) as u32,
                weight: weight(tenant),
                last_claim_ms: last.unwrap_or(0),
                paused: *paused > 0,
            })
            .collect();
        let (running, paused) = self.rows.first().map_or((0, false), |r| (r.5, r.6 > 0));
        let kind = KindLimits {
            paused,
            running: running.max(0) as u32,
            max_running: limits.max_running,
            max_running_per_tenant: limits.max_running_per_tenant,
        };
        (queues, kind)
    }

    /// Where a claim of `tenant`'s off this copy starts searching its queue: the position of
    /// the last claim off it, or of the head the view read. What precedes the head was not
    /// due when the view was read, and a claim takes the first due operation no concurrent
    /// claim holds, so what precedes the last claim's was taken, held, or not yet due when
    /// it ran; the search no longer walks the index entries that claims leave behind until
    /// vacuum removes them (after 6,000 claims of one tenant, ~70 pages per claim). What the start skips — a later submission of
    /// higher priority, a scheduled one that fell due, a claim that rolled back — is found
    /// by the first claim off the next copy, at most [`VIEW_TTL`] later.
    pub fn start(&self, tenant: &str) -> Option<(i64, i64)> {
        self.starts.get(tenant).copied()
    }

    /// This process claimed one of `tenant`'s operations, at queue position `position`, at
    /// `now`: count it running and served, so the next picks off this copy share fairly too,
    /// and start the tenant's next search there.
    fn claimed(&mut self, tenant: &str, position: (i64, i64), now: i64) {
        let start = self.starts.entry(tenant.to_owned()).or_insert(position);
        *start = (*start).max(position);
        for row in &mut self.rows {
            row.5 += 1;
            if row.0 == tenant {
                row.2 += 1;
                row.3 = Some(now);
            }
        }
    }
}

/// How old a copy may be while another claim of the process reads the view again.
const STALE_LIMIT: Duration = Duration::from_secs(2);

/// This process's recent views, by kind, and the kinds whose view is being read again;
/// and the claims made off them, combined (`combine.rs`).
#[derive(Default)]
pub struct ViewCache {
    views: Mutex<Views>,
    pub(super) claims: ClaimCombiner,
}

#[derive(Default)]
struct Views {
    copies: HashMap<ContextOperationKind, (Instant, View)>,
    refreshing: HashSet<ContextOperationKind>,
}

/// Clears the refresh mark of a kind however the read ends.
struct Refreshing<'c>(&'c ViewCache, ContextOperationKind);

impl Drop for Refreshing<'_> {
    fn drop(&mut self) {
        self.0.views().refreshing.remove(&self.1);
    }
}

impl ViewCache {
    /// How many claims of `kind` off the copies wait for the combined claim in flight;
    /// `None` when none is (tests, diagnostics).
    pub fn claims_waiting(&self, kind: ContextOperationKind) -> Option<usize> {
        self.claims.waiting(kind)
    }

    fn views(&self) -> std::sync::MutexGuard<'_, Views> {
        self.views.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The view of `kind`, read again when the copy is older than [`VIEW_TTL`]. One claim
    /// at a time reads it: the process's other concurrent claims meanwhile use the copy (up
    /// to [`STALE_LIMIT`] old) instead of each running the same query — every worker slot
    /// found the copy expired at once and read it again, ~20 reads a second per process.
    pub async fn get(&self, db: &Db, kind: ContextOperationKind, now: i64) -> StoreResult<View> {
        let _refreshing = {
            let mut views = self.views();
            if let Some((at, view)) = views.copies.get(&kind) {
                let age = at.elapsed();
                if age < VIEW_TTL || age < STALE_LIMIT && views.refreshing.contains(&kind) {
                    return Ok(view.clone());
                }
            }
            views.refreshing.insert(kind);
            Refreshing(self, kind)
        };
        let view = fetch(db, kind, now).await?;
        self.put(kind, view.clone());
        Ok(view)
    }

    /// Keep `view` (just read) as the copy of `kind`.
    pub fn put(&self, kind: ContextOperationKind, view: View) {
        self.views().copies.insert(kind, (Instant::now(), view));
    }

    /// Note a claim of `tenant`'s at queue position `position` (see [`View::claimed`]).
    pub fn claimed(&self, kind: ContextOperationKind, tenant: &str, position: (i64, i64), now: i64) {
        if let Some((_, view)) = self.views().copies.get_mut(&kind) {
            view.claimed(tenant, position, now);
        }
    }

    /// Forget the copy of `kind` (it proved stale).
    pub fn forget(&self, kind: ContextOperationKind) {
        self.views().copies.remove(&kind);
    }
}
