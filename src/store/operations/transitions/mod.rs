//! The one writer of operation state changes: each [`Transition`] of the core's state
//! machine becomes one compare-and-set `UPDATE`, whose guard is the transition's own
//! (`Transition::from`, rendered from the core's states) plus, for the lease holder's
//! writes, the lease token. Zero rows updated means the guard failed: another worker owns
//! the operation (`LostLease`), or it moved on. Terminal rows are never updated again
//! (no transition starts from a terminal state except the API's explicit retry).
//!
//! Fencing: a worker whose lease expired and was taken over matches no row, learns it lost
//! the operation, and rolls its transaction back — its effects never land.
//!
//! - this file: the lease holder's transitions ([`apply`]) and the attempt history;
//! - [`claim`]: claiming the next by fair share, holding queued work, recovering orphans;
//! - [`shares`]: what a claim records besides: the fair share's tie-break, why work waits;
//! - [`api`]: the API's and dispatcher's transitions (cancel, retry, expire, bulk).
//! - [`view`]: the scheduler's view of a kind's queues, and this process's recent copy;
//! - [`combine`]: claims off that copy that arrive together, made in one statement.

mod api;
mod claim;
mod combine;
mod shares;
mod view;

pub use api::{BulkAction, BulkFilter, BulkOutcome, bulk, cancel, expire_overdue, requeue, set_paused};
pub use claim::{ClaimLimits, Next, OWNER_SILENCE_MS, claim_chosen, claim_next, recover, scheduler_reads};
pub use view::ViewCache;

use std::sync::LazyLock;

use super::OperationRow;
use crate::store::engine::{Params, Query};
use crate::store::{Engine, Exec, StoreError, messages, now_ms};
use context_jobs::contract::ContextOperationState as State;
use context_jobs::ids::{OperationId, TenantKey};
use context_jobs::operation::Transition;

/// A held lease: the operation and the token that fences our writes.
#[derive(Debug, Clone)]
pub struct Lease {
    pub operation_id: OperationId,
    pub tenant: TenantKey,
    pub token: String,
    pub lease_ms: i64,
    /// Whether the operation may hold a conversation's deletion barrier (only deletes
    /// take one), which its terminal transition releases.
    pub holds_barrier: bool,
}

impl Lease {
    /// The lease's expiry if renewed now.
    pub fn renewed_until(&self) -> i64 {
        now_ms() + self.lease_ms
    }
}

/// Why a fenced write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    #[error("the lease was lost to another worker")]
    LostLease,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for FenceError {
    fn from(e: sqlx::Error) -> Self {
        FenceError::Store(StoreError::Db(e))
    }
}

pub struct Claimed {
    pub operation: OperationRow,
    pub lease: Lease,
    /// The previous holder's lease had expired: this claim recovers an orphan.
    pub recovered: bool,
}

/// What a lease holder learns from a heartbeat or a checkpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Signals {
    pub cancel_requested: bool,
    /// The kind is paused (for everyone or for the operation's tenant).
    pub paused: bool,
}

impl Signals {
    /// Whether the job should stop at this boundary.
    pub fn stops(&self) -> bool {
        self.cancel_requested || self.paused
    }
}

/// Attempts kept in a row's history (the oldest go first).
const MAX_ATTEMPTS_KEPT: i64 = 50;

/// The SQL value of `attempts` with one more record appended: the attempt the row holds
/// now (`attempt`, `attempt_started_at_ms`, `lease_owner`), finished at `now` with
/// `outcome`. SET expressions see the old row, so this records the attempt being ended.
pub(super) fn append_attempt<'q>(
    engine: Engine,
    p: &mut Params<'q>,
    now: i64,
    outcome: &'q str,
    code: Option<&'q str>,
    error: Option<String>,
) -> String {
    let (now, outcome, code, error) = (p.p(now), p.p(outcome), p.p(code), p.p(error));
    let fields = format!(
        "'attempt', attempt, 'startedAtMs', attempt_started_at_ms, 'finishedAtMs', CAST({now} AS BIGINT), \
         'outcome', CAST({outcome} AS TEXT), 'errorCode', CAST({code} AS TEXT), 'error', CAST({error} AS TEXT), \
         'worker', lease_owner"
    );
    match engine {
        Engine::Postgres => format!(
            "(CASE WHEN jsonb_array_length(COALESCE(attempts, '[]')::jsonb) >= {MAX_ATTEMPTS_KEPT} \
               THEN (attempts::jsonb - 0) ELSE COALESCE(attempts, '[]')::jsonb END \
             || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object({fields}))))::text"
        ),
        Engine::Sqlite => format!(
            "json_insert(CASE WHEN json_array_length(COALESCE(attempts, '[]')) >= {MAX_ATTEMPTS_KEPT} \
               THEN json_remove(attempts, '$[0]') ELSE COALESCE(attempts, '[]') END, \
             '$[#]', json_object({fields}))"
        ),
    }
}

/// The outcome an attempt-ending transition records in the history.
fn attempt_outcome(t: &Transition<'_>) -> &'static str {
    match t {
        Transition::Retry { .. } => "retrying",
        Transition::Release { phase: Some(_) } => "paused",
        Transition::Release { phase: None } => "released",
        Transition::Defer { .. } => "deferred",
        t => t.to().as_str(),
    }
}

fn exec_engine(ex: &Exec<'_>) -> Engine {
    match ex {
        Exec::Db(db) => db.engine(),
        Exec::Tx(tx) => tx.engine(),
    }
}

/// The `RETURNING` of a heartbeat or checkpoint: the cancel flag and whether the kind is
/// paused for the operation (a correlated look at the pauses).
const SIGNALS: &str = " RETURNING cancel_requested, (SELECT COUNT(*) FROM queue_controls c \
    WHERE c.kind = operations.kind AND c.paused = 1 AND (c.tenant = '' OR c.tenant = operations.tenant))";

/// What an operation that succeeded or was cancelled sets: an earlier attempt's error (a
/// retry's, a recovery's note) is not why it ended, and its attempts keep it.
pub(super) const NO_ERROR: &str = "error = NULL, error_code = NULL";

/// The `UPDATE` of a transition written by the lease holder.
fn fenced_statement<'q>(engine: Engine, lease: &'q Lease, t: &Transition<'q>, now: i64) -> Query<'q> {
    let mut p = Params::default();
    let (id, token) = (p.p(lease.operation_id.as_str()), p.p(lease.token.as_str()));
    let to = t.to();
    let mut set = Vec::new();
    if t.ends_attempt() {
        let code = t.error_code().map(|c| c.as_str());
        let error = match t {
            Transition::Fail { message, .. } | Transition::Retry { message, .. } => Some(truncate(message, 500)),
            _ => None,
        };
        set.push(format!("attempts = {}", append_attempt(engine, &mut p, now, attempt_outcome(t), code, error)));
    }
    if to != State::Running {
        set.push(format!("state = {}", p.p(to.as_str())));
    }
    if let Some(phase) = t.phase() {
        set.push(format!("phase = {}", p.p(phase.to_string())));
    }
    match *t {
        Transition::Heartbeat { lease_until_ms } => set.push(format!("lease_expires_at_ms = {}", p.p(lease_until_ms))),
        Transition::Checkpoint { progress, lease_until_ms } => {
            set.push(format!("processed = {}", p.p(progress.processed)));
            set.push(format!("total = {}", p.p(progress.total)));
            set.push(format!("checkpoint = {}", p.p(progress.checkpoint.as_deref())));
            set.push(format!("lease_expires_at_ms = {}", p.p(lease_until_ms)));
        }
        Transition::SetArtifact { artifact_id } => set.push(format!("artifact_ref = {}", p.p(artifact_id))),
        Transition::Succeed { result, progress } => {
            if let Some(progress) = progress {
                set.push(format!("processed = {}", p.p(progress.processed)));
                set.push(format!("total = {}", p.p(progress.total)));
                if let Some(checkpoint) = progress.checkpoint.as_deref() {
                    set.push(format!("checkpoint = {}", p.p(checkpoint)));
                }
            }
            set.push(format!("result = {}", p.p(result)));
            set.push(NO_ERROR.into());
        }
        Transition::Fail { code, message } | Transition::Retry { code, message, .. } => {
            set.push(format!("error_code = {}", p.p(code.as_str())));
            set.push(format!("error = {}", p.p(truncate(message, 2000))));
        }
        Transition::Cancelled { result } => {
            if let Some(result) = result {
                set.push(format!("result = {}", p.p(result)));
            }
            set.push(NO_ERROR.into());
        }
        Transition::Release { .. } => {}
        Transition::Defer { not_before_ms, .. } => set.push(format!("not_before_ms = {}", p.p(not_before_ms))),
        _ => unreachable!("not a lease holder's transition: {t:?}"),
    }
    if let Transition::Retry { not_before_ms, .. } = *t {
        set.push(format!("not_before_ms = {}", p.p(not_before_ms)));
    }
    if matches!(t, Transition::Release { .. } | Transition::Defer { .. }) {
        // A release does not count the attempt (deploys, pauses and rate limits must not
        // eat the budget).
        set.push("attempt = attempt - 1".into());
    }
    if to != State::Running {
        set.push("lease_token = NULL, lease_expires_at_ms = NULL, lease_owner = NULL".into());
    }
    if to == State::Queued {
        // Unpushed: the next dispatcher round pushes it again once it is due.
        set.push("pushed_at_ms = NULL".into());
    }
    if t.is_terminal() {
        set.push(format!("finished_at_ms = {}", p.p(now)));
    }
    if t.bumps_version() {
        set.push(format!("updated_at_ms = {}, version = version + 1", p.p(now)));
    }
    let mut guard = p.state_in(t.from());
    if returns_to_queue(t) {
        // See `apply`: with a cancel requested, the operation ends `cancelled` instead.
        guard.push_str(" AND cancel_requested = 0");
    }
    let returning = if returns_signals(t) { SIGNALS } else { "" };
    let sql = format!(
        "UPDATE operations SET {} WHERE id = {id} AND lease_token = {token} AND {guard}{returning}",
        set.join(", ")
    );
    p.into_query(sql)
}

/// A pause (of the kind, or of the operation's tenant) holds this `operations` row: the
/// one spelling of that rule for resume, claims, the dispatcher and marking work `paused`.
pub(in crate::store::operations) static PAUSE_HOLDS: LazyLock<String> =
    LazyLock::new(|| pause_holds("operations.kind", "operations.tenant"));

/// A pause holds work of kind `kind` and tenant `tenant` (SQL expressions: columns of the
/// row at hand, or a new row's bound values).
pub(in crate::store::operations) fn pause_holds(kind: &str, tenant: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM queue_controls c WHERE c.kind = {kind} \
         AND c.paused = 1 AND (c.tenant = '' OR c.tenant = {tenant}))"
    )
}

fn returns_signals(t: &Transition<'_>) -> bool {
    matches!(t, Transition::Heartbeat { .. } | Transition::Checkpoint { .. })
}

/// The lease holder puts the operation back in the queue: a retry, a release (shutdown,
/// pause), a deferral (rate limit).
fn returns_to_queue(t: &Transition<'_>) -> bool {
    t.to() == State::Queued
}

/// Apply the lease holder's transition `t`, on the pool or inside the caller's
/// transaction (with that transaction's effects). Returns what a heartbeat or checkpoint
/// learns (cancel requested, paused; nothing for the others). A terminal transition of an
/// operation holding a conversation's deletion barrier releases it in the same
/// transaction.
///
/// A transition back to the queue of an operation whose cancel was requested (the request
/// came after the job's last boundary: a transient failure, a shutdown, a pause, a rate
/// limit) ends it `cancelled` instead, as the job would have at its next boundary: claims
/// never take a queued row with the request set, so writing `queued` stranded it there —
/// and a delete's barrier with it. Then the returned `cancel_requested` is set.
pub async fn apply<'a>(ex: impl Into<Exec<'a>>, lease: &Lease, t: &Transition<'_>) -> Result<Signals, FenceError> {
    let mut ex = ex.into();
    match write(ex.reborrow(), lease, t).await {
        Err(FenceError::LostLease) if returns_to_queue(t) => {
            write(ex, lease, &Transition::Cancelled { result: None }).await?;
            Ok(Signals { cancel_requested: true, paused: false })
        }
        written => written,
    }
}

/// [`apply`] of `t` alone.
async fn write(mut ex: Exec<'_>, lease: &Lease, t: &Transition<'_>) -> Result<Signals, FenceError> {
    debug_assert!(t.fenced(), "{t:?} is not a lease holder's transition");
    let now = now_ms();
    let statement = fenced_statement(exec_engine(&ex), lease, t, now);
    let releases = t.is_terminal() && lease.holds_barrier;
    // One statement on the pool needs no explicit transaction (a commit in one round trip);
    // a release of the barrier goes with the transition in one.
    let mut own = match (&ex, releases) {
        (Exec::Db(db), true) => Some(db.begin_write().await?),
        _ => None,
    };
    let mut target = match own.as_mut() {
        Some(tx) => Exec::Tx(tx),
        None => ex.reborrow(),
    };
    let signals = if returns_signals(t) {
        let row: Option<(i64, i64)> = statement.fetch_optional(target.reborrow()).await?;
        let (cancel, paused) = row.ok_or(FenceError::LostLease)?;
        Signals { cancel_requested: cancel != 0, paused: paused > 0 }
    } else {
        if statement.execute(target.reborrow()).await? != 1 {
            return Err(FenceError::LostLease);
        }
        Signals::default()
    };
    if releases {
        messages::conversations::release_barrier(target, &lease.tenant, &lease.operation_id).await?;
    }
    if let Some(tx) = own {
        tx.commit().await?;
    }
    Ok(signals)
}

pub(super) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
