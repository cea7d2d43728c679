//! The operations table: submission with idempotency, reads and listing, cancel and
//! forget, and every worker-side transition. Every transition is a compare-and-set: on
//! `version` for claims, on the lease token (fencing) for everything a worker writes, on
//! `state` for cancel. Terminal rows are never updated again.

use sqlx::{AssertSqlSafe, Row as _};

use super::{StoreError, StoreResult, now_ms};
use crate::auth::TenantKey;
use crate::db::{BeginWrite as _, Db};
use crate::with_pool;
use context_jobs::contract::{ContextOperation, ContextOperationKind, ContextOperationState};
use context_jobs::operation::{OperationRequest, next_poll_after_ms};

pub const COLUMNS: &str = "id, tenant, kind, state, phase, processed, total, request, request_fingerprint, \
    idempotency_key, checkpoint, result, error, error_code, artifact_ref, attempt, lease_token, \
    lease_expires_at_ms, cancel_requested, not_before_ms, pushed_at_ms, created_at_ms, updated_at_ms, \
    started_at_ms, finished_at_ms, version";

/// One operation row as stored.
#[derive(Debug, Clone)]
pub struct OperationRow {
    pub id: String,
    pub tenant: String,
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
}

/// Decode an operation row of either engine (expanded once per engine by `with_pool!`).
macro_rules! operation_from_row {
    ($row:expr) => {{
        let row = $row;
        let kind: String = row.try_get("kind")?;
        let state: String = row.try_get("state")?;
        OperationRow {
            id: row.try_get("id")?,
            tenant: row.try_get("tenant")?,
            kind: ContextOperationKind::parse(&kind)
                .ok_or_else(|| StoreError::Other(anyhow::anyhow!("unknown operation kind {kind:?}")))?,
            state: ContextOperationState::parse(&state)
                .ok_or_else(|| StoreError::Other(anyhow::anyhow!("unknown operation state {state:?}")))?,
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
        }
    }};
}
pub(crate) use operation_from_row;

impl OperationRow {
    /// The contract's `ContextOperation` view (the one owner of that wire shape).
    pub fn to_contract(&self, now: i64) -> ContextOperation {
        let parse = |s: &Option<String>| s.as_deref().and_then(|s| serde_json::from_str(s).ok());
        ContextOperation {
            id: self.id.clone(),
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

    pub fn request(&self) -> StoreResult<OperationRequest> {
        serde_json::from_str(&self.request)
            .map_err(|e| StoreError::Invalid(format!("stored request does not decode: {e}")))
    }
}

/// What a submission stores besides the row, in the same transaction.
pub enum SubmitEffect<'a> {
    None,
    /// Refuse appends to this conversation until the operation ends.
    MarkDeleting {
        conversation_id: &'a str,
    },
}

pub struct Submitted {
    pub operation: OperationRow,
    /// False when an idempotency key returned an existing operation.
    pub created: bool,
}

/// Insert a queued operation, or return the one an idempotency key already names (the
/// same key with a different request is a conflict).
pub async fn submit(
    db: &Db,
    tenant: &TenantKey,
    request: &OperationRequest,
    kind: ContextOperationKind,
    idempotency_key: Option<&str>,
    effect: SubmitEffect<'_>,
) -> StoreResult<Submitted> {
    let fingerprint = request.fingerprint();
    let request_json = serde_json::to_string(request).map_err(|e| StoreError::Other(e.into()))?;
    let id = new_operation_id();
    let now = now_ms();
    with_pool!(db, pool => {
        let mut tx = pool.begin_write().await?;
        if let Some(key) = idempotency_key {
            let sql = format!("SELECT {COLUMNS} FROM operations WHERE tenant = $1 AND idempotency_key = $2");
            if let Some(row) = sqlx::query(AssertSqlSafe(sql)).bind(tenant.as_str()).bind(key).fetch_optional(&mut *tx).await? {
                let existing = operation_from_row!(row);
                if existing.request_fingerprint != fingerprint || existing.kind != kind {
                    return Err(StoreError::Conflict(format!(
                        "idempotency key {key:?} was already used for a different request (operation {})",
                        existing.id
                    )));
                }
                return Ok(Submitted { operation: existing, created: false });
            }
        }
        if let SubmitEffect::MarkDeleting { conversation_id } = effect {
            let marked = sqlx::query(
                "UPDATE conversations SET deleting_operation = $3 \
                 WHERE tenant = $1 AND conversation_id = $2 AND deleting_operation IS NULL",
            )
            .bind(tenant.as_str())
            .bind(conversation_id)
            .bind(id.as_str())
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if marked == 0 {
                // Either no such conversation (nothing to guard) or another delete holds it.
                let busy: Option<Option<String>> = sqlx::query_scalar(
                    "SELECT deleting_operation FROM conversations WHERE tenant = $1 AND conversation_id = $2",
                )
                .bind(tenant.as_str())
                .bind(conversation_id)
                .fetch_optional(&mut *tx)
                .await?;
                if let Some(Some(other)) = busy {
                    return Err(StoreError::Conflict(format!(
                        "conversation {conversation_id:?} is already being deleted by operation {other}"
                    )));
                }
            }
        }
        let sql = format!(
            "INSERT INTO operations (id, tenant, kind, state, phase, request, request_fingerprint, idempotency_key, \
             created_at_ms, updated_at_ms, pushed_at_ms) VALUES ($1, $2, $3, 'queued', 'queued', $4, $5, $6, $7, $7, $7) \
             RETURNING {COLUMNS}"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id.as_str())
            .bind(tenant.as_str())
            .bind(kind.as_str())
            .bind(request_json.as_str())
            .bind(fingerprint.as_str())
            .bind(idempotency_key)
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
        let operation = operation_from_row!(row);
        tx.commit().await?;
        Ok(Submitted { operation, created: true })
    })
}

/// A new operation id: a ULID, strictly increasing within this process, so operations
/// submitted in the same millisecond still list in submission order.
fn new_operation_id() -> String {
    static GENERATOR: std::sync::Mutex<ulid::Generator> = std::sync::Mutex::new(ulid::Generator::new());
    let mut generator = GENERATOR.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    match generator.generate() {
        Ok(id) => id.to_string(),
        // 2^80 ids in one millisecond: fall back to a random one.
        Err(_) => ulid::Ulid::generate().to_string(),
    }
}

pub async fn get(db: &Db, tenant: &TenantKey, id: &str) -> StoreResult<Option<OperationRow>> {
    let sql = format!("SELECT {COLUMNS} FROM operations WHERE id = $1 AND tenant = $2");
    with_pool!(db, pool => {
        match sqlx::query(AssertSqlSafe(sql)).bind(id).bind(tenant.as_str()).fetch_optional(pool).await? {
            Some(row) => Ok(Some(operation_from_row!(row))),
            None => Ok(None),
        }
    })
}

/// The version of an operation, for long-poll waits (cheap, indexed by primary key).
pub async fn version(db: &Db, tenant: &TenantKey, id: &str) -> StoreResult<Option<i64>> {
    with_pool!(db, pool => {
        Ok(sqlx::query_scalar("SELECT version FROM operations WHERE id = $1 AND tenant = $2")
            .bind(id)
            .bind(tenant.as_str())
            .fetch_optional(pool)
            .await?)
    })
}

pub struct ListFilter<'a> {
    pub kind: Option<ContextOperationKind>,
    pub state: Option<ContextOperationState>,
    /// Rows strictly older than this `(created_at_ms, id)` position.
    pub before: Option<(i64, &'a str)>,
    pub limit: usize,
}

/// A tenant's operations, newest first. Returns one more row than `limit` when more exist.
pub async fn list(db: &Db, tenant: &TenantKey, filter: &ListFilter<'_>) -> StoreResult<Vec<OperationRow>> {
    let mut sql = format!("SELECT {COLUMNS} FROM operations WHERE tenant = $1");
    let mut n = 1;
    if filter.kind.is_some() {
        n += 1;
        sql.push_str(&format!(" AND kind = ${n}"));
    }
    if filter.state.is_some() {
        n += 1;
        sql.push_str(&format!(" AND state = ${n}"));
    }
    if filter.before.is_some() {
        let (at, id) = (n + 1, n + 2);
        sql.push_str(&format!(" AND (created_at_ms < ${at} OR (created_at_ms = ${at} AND id < ${id}))"));
    }
    sql.push_str(&format!(" ORDER BY created_at_ms DESC, id DESC LIMIT {}", filter.limit + 1));
    with_pool!(db, pool => {
        let mut q = sqlx::query(AssertSqlSafe(sql)).bind(tenant.as_str());
        if let Some(kind) = filter.kind {
            q = q.bind(kind.as_str());
        }
        if let Some(state) = filter.state {
            q = q.bind(state.as_str());
        }
        if let Some((created, id)) = filter.before {
            q = q.bind(created).bind(id);
        }
        let rows = q.fetch_all(pool).await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            out.push(operation_from_row!(row));
        }
        Ok(out)
    })
}

/// Clear the appends barrier an operation may hold (any terminal transition runs it).
pub const RELEASE_CONVERSATION_SQL: &str =
    "UPDATE conversations SET deleting_operation = NULL WHERE tenant = $1 AND deleting_operation = $2";

/// Cancel: a queued operation becomes `cancelled` at once; a running one is flagged and
/// stops at its next batch boundary; a terminal one is returned unchanged (idempotent).
/// Returns the row after the call and whether this call cancelled a queued operation.
pub async fn cancel(db: &Db, tenant: &TenantKey, id: &str) -> StoreResult<(Option<OperationRow>, bool)> {
    let now = now_ms();
    let cancelled = with_pool!(db, pool => {
        let mut tx = pool.begin_write().await?;
        let cancelled = sqlx::query(
            "UPDATE operations SET state = 'cancelled', phase = 'cancelled', cancel_requested = 1, \
             finished_at_ms = $3, updated_at_ms = $3, version = version + 1 \
             WHERE id = $1 AND tenant = $2 AND state = 'queued'",
        )
        .bind(id)
        .bind(tenant.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if cancelled == 1 {
            sqlx::query(RELEASE_CONVERSATION_SQL).bind(tenant.as_str()).bind(id).execute(&mut *tx).await?;
        } else {
            sqlx::query(
                "UPDATE operations SET cancel_requested = 1, updated_at_ms = $3, version = version + 1 \
                 WHERE id = $1 AND tenant = $2 AND state = 'running' AND cancel_requested = 0",
            )
            .bind(id)
            .bind(tenant.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok::<_, StoreError>(cancelled == 1)
    })?;
    super::changes::committed(db, id);
    Ok((get(db, tenant, id).await?, cancelled))
}

/// Forget a terminal operation. Non-terminal ones must be cancelled first (409).
pub async fn forget(db: &Db, tenant: &TenantKey, id: &str) -> StoreResult<()> {
    let deleted = with_pool!(db, pool => {
        sqlx::query(
            "DELETE FROM operations WHERE id = $1 AND tenant = $2 AND state IN ('succeeded', 'failed', 'cancelled')",
        )
        .bind(id)
        .bind(tenant.as_str())
        .execute(pool)
        .await?
        .rows_affected()
    });
    if deleted == 1 {
        return Ok(());
    }
    match get(db, tenant, id).await? {
        Some(_) => Err(StoreError::Conflict("only a terminal operation can be forgotten; cancel it first".into())),
        None => Err(StoreError::NotFound(format!("operation {id} not found"))),
    }
}
