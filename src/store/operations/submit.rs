//! Submission: insert a queued operation in one transaction with its idempotency check
//! and any effect of its kind (a delete's append barrier), or return the operation an
//! idempotency key already names.

use sqlx::AssertSqlSafe;

use super::transitions::pause_holds;
use super::{COLUMNS, OperationRow};
use crate::store::engine::{Query, is_unique_violation};
use crate::store::messages::conversations;
use crate::store::{Db, Engine, StoreError, StoreResult, Tx, now_ms, query};
use context_jobs::contract::{ContextOperationKind, ContextOperationState};
use context_jobs::ids::{ConversationId, OperationId, TenantKey};
use context_jobs::operation::schedule::phase::{PAUSED, SCHEDULED};
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
    /// Whether the submitter should push it now: a new operation inserted marked pushed
    /// (due, and no pause holds it). One that starts later (`notBeforeMs`) is pushed by the
    /// dispatcher when it is due; one a pause holds, by the resume.
    pub fn push_now(&self) -> bool {
        self.created && self.operation.pushed_at_ms.is_some()
    }
}

/// serde_json's recursion limit: containers nested deeper do not decode.
const SERDE_JSON_DEPTH: usize = 128;

/// Insert a queued operation, or return the one an idempotency key already names (the
/// same key with a different request or options is a conflict). A due row is inserted
/// marked as pushed: the caller pushes it right after the commit, and clears the mark if
/// that fails (saving a write per operation in the common case). A row a pause holds is
/// inserted `paused` and not marked: nothing is pushed until the resume (a delivery during
/// the pause would only be dropped, after reading the scheduler's view).
pub async fn submit(db: &Db, tenant: &TenantKey, new: &NewOperation<'_>) -> StoreResult<Submitted> {
    let fingerprint = new.request.fingerprint_with(new.options);
    let request_json = serde_json::to_string(new.request).map_err(|e| StoreError::Other(e.into()))?;
    // What is stored must decode again: the stored form wraps a request in its kind's
    // envelope, a level deeper than the body it came from, so a body at serde_json's depth
    // limit was accepted and then never read back (not run, not shown, not retried). Each
    // level takes two bytes at least, so a short request (a delete's, on the hot path)
    // cannot nest that deep and is not decoded again.
    if request_json.len() >= 2 * SERDE_JSON_DEPTH {
        serde_json::from_str::<OperationRequest>(&request_json)
            .map_err(|_| StoreError::Invalid("the request is nested too deeply".into()))?;
    }
    let kind = new.request.kind();
    let id = new_operation_id();
    let now = now_ms();
    // Without a key to look up, one statement does it all, with no explicit transaction (a
    // commit in one round trip instead of four or five): the row alone, or on PostgreSQL
    // the row and the delete's barrier (SQLite has no data-modifying `WITH`).
    let one_statement =
        new.idempotency_key.is_none() && (*new.effect == SubmitEffect::None || db.engine() == Engine::Postgres);
    let barrier = match new.effect {
        SubmitEffect::MarkDeleting { conversation_id } if one_statement => Some(conversation_id),
        _ => None,
    };
    let insert = insert_statement(tenant, new, &id, &request_json, &fingerprint, now, barrier);
    if one_statement {
        return match (insert.fetch_optional(db).await?, barrier) {
            (Some(operation), _) => Ok(Submitted { operation, created: true }),
            (None, Some(conversation)) => {
                let other = conversations::holder(db, tenant, conversation).await?;
                Err(conversations::held_by(conversation, other.as_deref()))
            }
            (None, None) => Err(StoreError::Other(anyhow::anyhow!("the operation's INSERT returned no row"))),
        };
    }
    let mut tx = db.begin_write().await?;
    if let Some(key) = new.idempotency_key
        && let Some(existing) = keyed(&mut tx, tenant, key).await?
    {
        return same_request(existing, key, &fingerprint, kind);
    }
    let inserted = async {
        if let SubmitEffect::MarkDeleting { conversation_id } = new.effect {
            conversations::mark_deleting(&mut tx, tenant, conversation_id, &id).await?;
        }
        Ok::<OperationRow, StoreError>(insert.fetch_one(&mut tx).await?)
    }
    .await;
    let inserted = match inserted {
        Ok(operation) => tx.commit().await.map(|()| operation).map_err(StoreError::from),
        Err(e) => {
            // Now, not when the connection is next used: its locks go with it.
            let _ = tx.rollback().await;
            Err(e)
        }
    };
    match (inserted, new.idempotency_key) {
        (Ok(operation), _) => Ok(Submitted { operation, created: true }),
        // A submission with the same key that committed first (PostgreSQL: both looked the
        // key up before either inserted; this insert waited for the other's and found its
        // key taken, or its delete's barrier): the same key answers the same operation.
        (Err(e), Some(key))
            if matches!(&e, StoreError::Db(db_error) if is_unique_violation(db_error))
                || matches!(e, StoreError::Conflict(_)) =>
        {
            let mut tx = db.begin_write().await?;
            let existing = keyed(&mut tx, tenant, key).await?;
            tx.rollback().await?;
            match existing {
                Some(existing) => same_request(existing, key, &fingerprint, kind),
                None => Err(e),
            }
        }
        (Err(e), _) => Err(e),
    }
}

/// The operation idempotency key `key` names in `tenant`, if any.
async fn keyed(tx: &mut Tx, tenant: &TenantKey, key: &str) -> StoreResult<Option<OperationRow>> {
    let sql = format!("SELECT {COLUMNS} FROM operations WHERE tenant = $1 AND idempotency_key = $2");
    Ok(query(AssertSqlSafe(sql)).bind(tenant.as_str()).bind(key).fetch_optional(&mut *tx).await?)
}

/// The operation a repeated idempotency key names, if its request is the same (else a
/// conflict).
fn same_request(
    existing: OperationRow,
    key: &str,
    fingerprint: &str,
    kind: ContextOperationKind,
) -> StoreResult<Submitted> {
    if existing.request_fingerprint != fingerprint || existing.kind != kind {
        return Err(StoreError::Conflict(format!(
            "idempotency key {key:?} was already used for a different request (operation {})",
            existing.id
        )));
    }
    Ok(Submitted { operation: existing, created: false })
}

/// The `INSERT` of a new queued row, returning it. With `barrier` (PostgreSQL), the same
/// statement first marks the delete's barrier on the conversation and inserts nothing when
/// another operation holds it.
fn insert_statement<'q>(
    tenant: &'q TenantKey,
    new: &NewOperation<'q>,
    id: &'q OperationId,
    request_json: &'q str,
    fingerprint: &'q str,
    now: i64,
    barrier: Option<&'q ConversationId>,
) -> Query<'q> {
    let due = new.schedule.not_before_ms <= now;
    let (mark, unless_held) = match barrier {
        Some(_) => (
            format!("WITH mark AS ({}) ", conversations::mark_deleting_sql("$2", "$15", "$1", "$9")),
            " WHERE NOT EXISTS (SELECT 1 FROM mark WHERE deleting_operation <> $1)",
        ),
        None => (String::new(), ""),
    };
    // Work a pause holds is `paused` (as the pause marked what was queued before it) and not
    // marked pushed ($10, the push mark of due work).
    let held = pause_holds("$3", "$2");
    let sql = format!(
        "{mark}INSERT INTO operations (id, tenant, kind, state, phase, request, request_fingerprint, idempotency_key, \
         created_at_ms, updated_at_ms, pushed_at_ms, priority, deadline_ms, not_before_ms, rate_key) \
         SELECT $1, $2, $3, $4, CASE WHEN {held} THEN '{PAUSED}' ELSE $5 END, $6, $7, $8, $9, $9, \
         CASE WHEN {held} THEN NULL ELSE $10 END, $11, $12, $13, $14{unless_held} RETURNING {COLUMNS}"
    );
    let insert = query(AssertSqlSafe(sql))
        .bind(id.as_str())
        .bind(tenant.as_str())
        .bind(new.request.kind().as_str())
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
        .bind(new.rate_key);
    match barrier {
        Some(conversation) => insert.bind(conversation.as_str()),
        None => insert,
    }
}

/// A new operation id: a ULID, strictly increasing within this process, so operations
/// submitted in the same millisecond still list in submission order.
fn new_operation_id() -> OperationId {
    static GENERATOR: std::sync::Mutex<ulid::Generator> = std::sync::Mutex::new(ulid::Generator::new());
    let mut generator = GENERATOR.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // 2^80 ids in one millisecond: fall back to a random one.
    OperationId::from_ulid(generator.generate().unwrap_or_else(|_| ulid::Ulid::generate()))
}
