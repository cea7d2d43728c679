//! Submission: insert a queued operation in one transaction with its idempotency check
//! and any effect of its kind (a delete's append barrier), or return the operation an
//! idempotency key already names.

use sqlx::AssertSqlSafe;

use super::{COLUMNS, OperationRow};
use crate::store::{Db, StoreError, StoreResult, messages, now_ms, query};
use context_jobs::contract::ContextOperationState;
use context_jobs::ids::{ConversationId, OperationId, TenantKey};
use context_jobs::operation::schedule::phase::SCHEDULED;
use context_jobs::operation::{OperationRequest, Schedule, SubmitOptions, phase};

/// What a submission stores besides the row, in the same transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmitEffect {
    None,
    /// Refuse appends to this conversation until the operation ends.
    MarkDeleting {
        conversation_id: ConversationId,
    },
}

/// Everything a submission stores.
pub struct NewOperation<'a> {
    pub request: &'a OperationRequest,
    pub options: &'a SubmitOptions,
    pub schedule: Schedule,
    pub idempotency_key: Option<&'a str>,
    pub effect: &'a SubmitEffect,
    /// What a rate limit keys the operation by (an inference turn's model).
    pub rate_key: Option<&'a str>,
}

pub struct Submitted {
    pub operation: OperationRow,
    /// False when an idempotency key returned an existing operation.
    pub created: bool,
}

impl Submitted {
    /// Whether the submitter should push it now: a new operation that is due. One that
    /// starts later (`notBeforeMs`) is pushed by the dispatcher when it is due.
    pub fn push_now(&self, now_ms: i64) -> bool {
        self.created && self.operation.not_before_ms <= now_ms
    }
}

/// Insert a queued operation, or return the one an idempotency key already names (the
/// same key with a different request or options is a conflict). A due row is inserted
/// marked as pushed: the caller pushes it right after the commit, and clears the mark if
/// that fails (saving a write per operation in the common case).
pub async fn submit(db: &Db, tenant: &TenantKey, new: &NewOperation<'_>) -> StoreResult<Submitted> {
    let fingerprint = new.request.fingerprint_with(new.options);
    let request_json = serde_json::to_string(new.request).map_err(|e| StoreError::Other(e.into()))?;
    let kind = new.request.kind();
    let id = new_operation_id();
    let now = now_ms();
    let mut tx = db.begin_write().await?;
    if let Some(key) = new.idempotency_key {
        let sql = format!("SELECT {COLUMNS} FROM operations WHERE tenant = $1 AND idempotency_key = $2");
        let existing: Option<OperationRow> =
            query(AssertSqlSafe(sql)).bind(tenant.as_str()).bind(key).fetch_optional(&mut tx).await?;
        if let Some(existing) = existing {
            if existing.request_fingerprint != fingerprint || existing.kind != kind {
                return Err(StoreError::Conflict(format!(
                    "idempotency key {key:?} was already used for a different request (operation {})",
                    existing.id
                )));
            }
            return Ok(Submitted { operation: existing, created: false });
        }
    }
    if let SubmitEffect::MarkDeleting { conversation_id } = new.effect {
        messages::conversations::mark_deleting(&mut tx, tenant, conversation_id, &id).await?;
    }
    let due = new.schedule.not_before_ms <= now;
    let sql = format!(
        "INSERT INTO operations (id, tenant, kind, state, phase, request, request_fingerprint, idempotency_key, \
         created_at_ms, updated_at_ms, pushed_at_ms, priority, deadline_ms, not_before_ms, rate_key) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10, $11, $12, $13, $14) RETURNING {COLUMNS}"
    );
    let operation: OperationRow = query(AssertSqlSafe(sql))
        .bind(id.as_str())
        .bind(tenant.as_str())
        .bind(kind.as_str())
        .bind(ContextOperationState::Queued.as_str())
        .bind(if due { phase::QUEUED } else { SCHEDULED })
        .bind(request_json)
        .bind(fingerprint)
        .bind(new.idempotency_key)
        .bind(now)
        .bind(due.then_some(now))
        .bind(new.schedule.priority)
        .bind(new.schedule.deadline_ms)
        .bind(new.schedule.not_before_ms)
        .bind(new.rate_key)
        .fetch_one(&mut tx)
        .await?;
    tx.commit().await?;
    Ok(Submitted { operation, created: true })
}

/// A new operation id: a ULID, strictly increasing within this process, so operations
/// submitted in the same millisecond still list in submission order.
fn new_operation_id() -> OperationId {
    static GENERATOR: std::sync::Mutex<ulid::Generator> = std::sync::Mutex::new(ulid::Generator::new());
    let mut generator = GENERATOR.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // 2^80 ids in one millisecond: fall back to a random one.
    OperationId::from_ulid(generator.generate().unwrap_or_else(|_| ulid::Ulid::generate()))
}
