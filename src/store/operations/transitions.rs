//! The one writer of operation state changes: each [`Transition`] of the core's state
//! machine becomes one compare-and-set `UPDATE`, whose guard is the transition's own
//! (`Transition::from`, rendered from the core's states) plus, for the lease holder's
//! writes, the lease token. Zero rows updated means the guard failed: another worker owns
//! the operation (`LostLease`), or it moved on. Terminal rows are never updated again
//! (no transition starts from a terminal state).
//!
//! Fencing: a worker whose lease expired and was taken over matches no row, learns it lost
//! the operation, and rolls its transaction back — its effects never land.

use sqlx::AssertSqlSafe;

use super::{COLUMNS, OperationRow};
use crate::store::engine::Arg;
use crate::store::{Db, Exec, StoreError, StoreResult, messages, now_ms, query};
use context_jobs::contract::{ContextOperationKind, ContextOperationState as State};
use context_jobs::ids::{OperationId, TenantKey};
use context_jobs::operation::machine::LEASE_EXPIRED_MESSAGE;
use context_jobs::operation::{ErrorCode, Transition, phase};

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

/// Numbered arguments of one statement.
#[derive(Default)]
struct Params<'q> {
    args: Vec<Arg<'q>>,
}

impl<'q> Params<'q> {
    /// Add an argument; its placeholder.
    fn p(&mut self, value: impl Into<Arg<'q>>) -> String {
        self.args.push(value.into());
        format!("${}", self.args.len())
    }

    /// `state IN (…)` over `states`.
    fn state_in(&mut self, states: &[State]) -> String {
        let list: Vec<String> = states.iter().map(|s| self.p(s.as_str())).collect();
        format!("state IN ({})", list.join(", "))
    }

    fn into_query(self, sql: String) -> crate::store::engine::Query<'q> {
        self.args.into_iter().fold(query(AssertSqlSafe(sql)), |q, a| q.bind(a))
    }
}

/// Claim an operation: `queued` (and due, not cancelled) or `running` with an expired
/// lease becomes `running` under a fresh lease. `None` when someone else holds it, it is
/// finished, or it is not due yet.
pub async fn claim(db: &Db, id: &OperationId, lease_ms: i64) -> StoreResult<Option<Claimed>> {
    let now = now_ms();
    let token = ulid::Ulid::generate().to_string();
    let t = Transition::Claim { token: &token, lease_until_ms: now + lease_ms };
    let mut p = Params::default();
    let (id_p, token_p, lease_p, now_p) = (p.p(id.as_str()), p.p(token.as_str()), p.p(now + lease_ms), p.p(now));
    let (running, queued) = (p.p(State::Running.as_str()), p.p(State::Queued.as_str()));
    let starting = p.p(t.phase().unwrap_or(phase::STARTING));
    let (p_queued, p_retrying) = (p.p(phase::QUEUED), p.p(phase::RETRYING));
    let (expired, expired_message) = (p.p(ErrorCode::LeaseExpired.as_str()), p.p(LEASE_EXPIRED_MESSAGE));
    // SET expressions see the old row: a takeover of a running operation (its lease expired)
    // is recorded as `lease_expired` while it runs again; a stale one from an earlier
    // takeover is cleared by an ordinary claim.
    let sql = format!(
        "UPDATE operations SET state = {running}, \
         phase = CASE WHEN phase IN ({p_queued}, {p_retrying}) THEN {starting} ELSE phase END, \
         error_code = CASE WHEN state = {running} THEN {expired} WHEN error_code = {expired} THEN NULL ELSE error_code END, \
         error = CASE WHEN state = {running} THEN {expired_message} WHEN error_code = {expired} THEN NULL ELSE error END, \
         lease_token = {token_p}, lease_expires_at_ms = {lease_p}, attempt = attempt + 1, version = version + 1, \
         pushed_at_ms = NULL, started_at_ms = COALESCE(started_at_ms, {now_p}), updated_at_ms = {now_p} \
         WHERE id = {id_p} AND ((state = {queued} AND not_before_ms <= {now_p} AND cancel_requested = 0) \
                                OR (state = {running} AND (lease_expires_at_ms IS NULL OR lease_expires_at_ms < {now_p}))) \
         RETURNING {COLUMNS}"
    );
    debug_assert_eq!(t.from(), &[State::Queued, State::Running]);
    let Some(operation) = p.into_query(sql).fetch_optional::<OperationRow>(db).await? else {
        return Ok(None);
    };
    let lease = Lease {
        operation_id: operation.id.clone(),
        tenant: operation.tenant.clone(),
        token,
        lease_ms,
        holds_barrier: operation.kind == ContextOperationKind::Delete,
    };
    let recovered = operation.recovered();
    Ok(Some(Claimed { operation, lease, recovered }))
}

/// The `UPDATE` of a transition written by the lease holder.
fn fenced_statement<'q>(lease: &'q Lease, t: &Transition<'q>, now: i64) -> crate::store::engine::Query<'q> {
    let mut p = Params::default();
    let (id, token) = (p.p(lease.operation_id.as_str()), p.p(lease.token.as_str()));
    let to = t.to();
    let mut set = Vec::new();
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
            set.push("error = NULL, error_code = NULL".into());
        }
        Transition::Fail { code, message } | Transition::Retry { code, message, .. } => {
            set.push(format!("error_code = {}", p.p(code.as_str())));
            set.push(format!("error = {}", p.p(truncate(message, 2000))));
        }
        Transition::Cancelled | Transition::Release => {}
        Transition::Claim { .. } | Transition::CancelQueued | Transition::RequestCancel => {
            unreachable!("not a lease holder's transition: {t:?}")
        }
    }
    if let Transition::Retry { not_before_ms, .. } = *t {
        set.push(format!("not_before_ms = {}", p.p(not_before_ms)));
    }
    if matches!(t, Transition::Release) {
        // A release does not count the attempt (deploys must not eat the budget).
        set.push("attempt = attempt - 1".into());
    }
    if to != State::Running {
        set.push("lease_token = NULL, lease_expires_at_ms = NULL".into());
    }
    if to == State::Queued {
        // Unpushed: the next dispatcher round pushes it again at once.
        set.push("pushed_at_ms = NULL".into());
    }
    if t.is_terminal() {
        set.push(format!("finished_at_ms = {}", p.p(now)));
    }
    if t.bumps_version() {
        set.push(format!("updated_at_ms = {}, version = version + 1", p.p(now)));
    }
    let guard = p.state_in(t.from());
    let returning = if matches!(t, Transition::Heartbeat { .. } | Transition::Checkpoint { .. }) {
        " RETURNING cancel_requested"
    } else {
        ""
    };
    let sql = format!(
        "UPDATE operations SET {} WHERE id = {id} AND lease_token = {token} AND {guard}{returning}",
        set.join(", ")
    );
    p.into_query(sql)
}

/// Apply the lease holder's transition `t`, on the pool or inside the caller's
/// transaction (with that transaction's effects). Returns whether a cancel was requested
/// (a heartbeat's or checkpoint's answer; `false` for the others). A terminal transition
/// of an operation holding a conversation's deletion barrier releases it in the same
/// transaction.
pub async fn apply<'a>(ex: impl Into<Exec<'a>>, lease: &Lease, t: &Transition<'_>) -> Result<bool, FenceError> {
    debug_assert!(t.fenced(), "{t:?} is not a lease holder's transition");
    let now = now_ms();
    let statement = fenced_statement(lease, t, now);
    let returns_flag = matches!(t, Transition::Heartbeat { .. } | Transition::Checkpoint { .. });
    let mut ex = ex.into();
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
    let cancel = if returns_flag {
        let flag: Option<i64> = statement.fetch_optional_scalar(target.reborrow()).await?;
        flag.ok_or(FenceError::LostLease)? != 0
    } else {
        if statement.execute(target.reborrow()).await? != 1 {
            return Err(FenceError::LostLease);
        }
        false
    };
    if releases {
        messages::conversations::release_barrier(target, &lease.tenant, &lease.operation_id).await?;
    }
    if let Some(tx) = own {
        tx.commit().await?;
    }
    Ok(cancel)
}

/// Cancel (API): a queued operation becomes `cancelled` at once (releasing any barrier it
/// holds); a running one is flagged and stops at its next batch boundary; a terminal one is
/// left unchanged (idempotent). Returns whether this call cancelled a queued operation.
pub async fn cancel(db: &Db, tenant: &TenantKey, id: &OperationId) -> StoreResult<bool> {
    let now = now_ms();
    let mut tx = db.begin_write().await?;
    let queued = Transition::CancelQueued;
    let mut p = Params::default();
    let (id_p, tenant_p) = (p.p(id.as_str()), p.p(tenant.as_str()));
    let sql = format!(
        "UPDATE operations SET state = {}, phase = {}, cancel_requested = 1, finished_at_ms = {now_p}, \
         updated_at_ms = {now_p}, version = version + 1 WHERE id = {id_p} AND tenant = {tenant_p} AND {}",
        p.p(queued.to().as_str()),
        p.p(queued.phase().unwrap_or(phase::CANCELLED).to_string()),
        p.state_in(queued.from()),
        now_p = p.p(now),
    );
    let cancelled = p.into_query(sql).execute(&mut tx).await? == 1;
    if cancelled {
        messages::conversations::release_barrier(&mut tx, tenant, id).await?;
    } else {
        let flag = Transition::RequestCancel;
        let mut p = Params::default();
        let (id_p, tenant_p, now_p) = (p.p(id.as_str()), p.p(tenant.as_str()), p.p(now));
        let sql = format!(
            "UPDATE operations SET cancel_requested = 1, updated_at_ms = {now_p}, version = version + 1 \
             WHERE id = {id_p} AND tenant = {tenant_p} AND {} AND cancel_requested = 0",
            p.state_in(flag.from())
        );
        p.into_query(sql).execute(&mut tx).await?;
    }
    tx.commit().await?;
    Ok(cancelled)
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
