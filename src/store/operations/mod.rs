//! The operations table: the row and its contract view ([`OperationRow`]), submission with
//! idempotency ([`submit`]), reads and listing ([`reads`]), the one writer of state changes
//! ([`transitions`]), the dispatcher's and pruner's queries ([`dispatch`]), and changes in
//! commit order for event streams ([`changes`]).

pub mod changes;
pub mod controls;
pub mod dispatch;
pub mod reads;
pub mod submit;
pub mod transitions;

use sqlx::{Decode, Type};

use super::{StoreError, StoreResult};
use context_jobs::contract::{ContextOperation, ContextOperationKind, ContextOperationState};
use context_jobs::ids::{OperationId, TenantKey};
use context_jobs::operation::view::OperationView;
use context_jobs::operation::{ErrorCode, OperationRequest, next_poll_after_ms};

pub use reads::{ListFilter, get, list, version};
pub use submit::{NewOperation, SubmitEffect, Submitted, submit};
pub use transitions::{Claimed, FenceError, Lease};

pub(crate) const COLUMNS: &str = "id, tenant, kind, state, phase, processed, total, request, request_fingerprint, \
    idempotency_key, checkpoint, result, error, error_code, artifact_ref, attempt, lease_token, \
    lease_expires_at_ms, cancel_requested, not_before_ms, pushed_at_ms, created_at_ms, updated_at_ms, \
    started_at_ms, finished_at_ms, version, priority, deadline_ms, lease_owner, attempt_started_at_ms, attempts, \
    rate_key";

/// `{alias}state = '<name>'`: the state as a literal. The scheduler's partial indexes
/// (migration 14: `operations_queued`, `operations_running`) serve a statement only when it
/// spells their predicate; a bound state hides it from both engines' planners, which then
/// pick whichever index the statistics favour (see the migration).
pub(crate) fn state_is(alias: &str, state: ContextOperationState) -> String {
    let name = state.as_str();
    debug_assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "not a plain name: {name}");
    format!("{alias}state = '{name}'")
}

/// The order a tenant's queued operations start in — highest priority, then oldest — as
/// `operations_queued` (migration 14) holds it: priority negated, so that a position in
/// the queue, `(-priority, created_at_ms)`, bounds an index range with one row comparison.
pub(crate) fn queue_order(alias: &str) -> String {
    format!("-{alias}priority, {alias}created_at_ms, {alias}id")
}

/// A queued operation's position in its tenant's queue (see [`queue_order`]).
pub(crate) fn queue_position(op: &OperationRow) -> (i64, i64) {
    (-op.priority, op.created_at_ms)
}

/// One operation row as stored.
#[derive(Debug, Clone)]
pub struct OperationRow {
    pub id: OperationId,
    pub tenant: TenantKey,
    pub kind: ContextOperationKind,
    pub state: ContextOperationState,
    pub phase: String,
    pub processed: i64,
    pub total: i64,
    pub request: String,
    pub request_fingerprint: String,
    pub idempotency_key: Option<String>,
    pub checkpoint: Option<String>,
    pub result: Option<String>,
    pub error: Option<String>,
    pub error_code: Option<String>,
    pub artifact_ref: Option<String>,
    pub attempt: i64,
    pub lease_token: Option<String>,
    pub lease_expires_at_ms: Option<i64>,
    pub cancel_requested: bool,
    pub not_before_ms: i64,
    pub pushed_at_ms: Option<i64>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    pub version: i64,
    pub priority: i64,
    pub deadline_ms: Option<i64>,
    /// The worker process holding the lease.
    pub lease_owner: Option<String>,
    pub attempt_started_at_ms: Option<i64>,
    /// JSON array of finished attempts (see [`AttemptRecord`]).
    pub attempts: Option<String>,
    pub rate_key: Option<String>,
}

pub use context_jobs::operation::view::AttemptRecord;

fn unknown(what: &str, value: &str) -> sqlx::Error {
    sqlx::Error::Decode(format!("unknown operation {what} {value:?}").into())
}

impl<'r, R: sqlx::Row> sqlx::FromRow<'r, R> for OperationRow
where
    &'static str: sqlx::ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    Option<String>: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    Option<i64>: Decode<'r, R::Database> + Type<R::Database>,
{
    fn from_row(row: &'r R) -> Result<Self, sqlx::Error> {
        let kind: String = row.try_get("kind")?;
        let state: String = row.try_get("state")?;
        Ok(OperationRow {
            id: OperationId::from_stored(row.try_get::<String, _>("id")?),
            tenant: TenantKey::from_stored(row.try_get::<String, _>("tenant")?),
            kind: ContextOperationKind::parse(&kind).ok_or_else(|| unknown("kind", &kind))?,
            state: ContextOperationState::parse(&state).ok_or_else(|| unknown("state", &state))?,
            phase: row.try_get("phase")?,
            processed: row.try_get("processed")?,
            total: row.try_get("total")?,
            request: row.try_get("request")?,
            request_fingerprint: row.try_get("request_fingerprint")?,
            idempotency_key: row.try_get("idempotency_key")?,
            checkpoint: row.try_get("checkpoint")?,
            result: row.try_get("result")?,
            error: row.try_get("error")?,
            error_code: row.try_get("error_code")?,
            artifact_ref: row.try_get("artifact_ref")?,
            attempt: row.try_get("attempt")?,
            lease_token: row.try_get("lease_token")?,
            lease_expires_at_ms: row.try_get("lease_expires_at_ms")?,
            cancel_requested: row.try_get::<i64, _>("cancel_requested")? != 0,
            not_before_ms: row.try_get("not_before_ms")?,
            pushed_at_ms: row.try_get("pushed_at_ms")?,
            created_at_ms: row.try_get("created_at_ms")?,
            updated_at_ms: row.try_get("updated_at_ms")?,
            started_at_ms: row.try_get("started_at_ms")?,
            finished_at_ms: row.try_get("finished_at_ms")?,
            version: row.try_get("version")?,
            priority: row.try_get("priority")?,
            deadline_ms: row.try_get("deadline_ms")?,
            lease_owner: row.try_get("lease_owner")?,
            attempt_started_at_ms: row.try_get("attempt_started_at_ms")?,
            attempts: row.try_get("attempts")?,
            rate_key: row.try_get("rate_key")?,
        })
    }
}

impl OperationRow {
    /// The operation as this service shows it: the contract's fields and the scheduling
    /// and attempt details.
    pub fn to_view(&self, now: i64) -> OperationView {
        OperationView {
            operation: self.to_contract(now),
            priority: self.priority,
            deadline_ms: self.deadline_ms,
            not_before_ms: (self.not_before_ms > now && self.state == ContextOperationState::Queued)
                .then_some(self.not_before_ms),
            attempt: self.attempt,
            started_at_ms: self.started_at_ms,
            finished_at_ms: self.finished_at_ms,
            lease_owner: self.lease_owner.clone(),
            cancel_requested: self.cancel_requested && !self.state.is_terminal(),
            attempts: self.attempt_history(),
            tenant: self.tenant.to_string(),
        }
    }

    /// The contract's `ContextOperation` view (the one owner of that wire shape).
    pub fn to_contract(&self, now: i64) -> ContextOperation {
        let parse = |s: &Option<String>| s.as_deref().and_then(|s| serde_json::from_str(s).ok());
        ContextOperation {
            id: self.id.to_string(),
            kind: self.kind,
            state: self.state,
            phase: self.phase.clone(),
            processed: self.processed.max(0) as u64,
            total: self.total.max(0) as u64,
            artifact_ref: self.artifact_ref.clone(),
            result: parse(&self.result),
            error: self.error.clone(),
            error_code: self.error_code.clone(),
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            version: self.version.max(0) as u64,
            next_poll_after_ms: next_poll_after_ms(self.state, self.not_before_ms, now),
        }
    }

    /// The stored request, decoded (`Invalid` when it no longer decodes).
    pub fn request(&self) -> StoreResult<OperationRequest> {
        serde_json::from_str(&self.request)
            .map_err(|e| StoreError::Invalid(format!("stored request does not decode: {e}")))
    }

    /// The finished attempts, oldest first (empty when none or unreadable).
    pub fn attempt_history(&self) -> Vec<AttemptRecord> {
        self.attempts.as_deref().and_then(|a| serde_json::from_str(a).ok()).unwrap_or_default()
    }

    /// Whether a worker's lease of this row was taken over (the claim recorded it).
    pub fn recovered(&self) -> bool {
        self.error_code.as_deref() == Some(ErrorCode::LeaseExpired.as_str())
    }
}
