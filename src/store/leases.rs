//! Worker-side transitions of an operation: claim, heartbeat, finish, retry, release, and
//! the dispatcher's and pruner's queries. The fenced writes a job makes inside its own
//! transactions are in [`super::fenced`].
//!
//! Fencing: every write a worker makes carries its lease token in the `WHERE` clause. A
//! worker whose lease expired and was taken over matches zero rows, learns it lost the
//! operation, and rolls its transaction back — its effects never land.

use sqlx::{AssertSqlSafe, Row as _};

use super::operations::{COLUMNS, OperationRow, RELEASE_CONVERSATION_SQL, operation_from_row};
use super::{StoreError, StoreResult, now_ms};
use crate::db::{BeginWrite as _, Db};
use crate::with_pool;
use context_jobs::contract::{ContextOperationKind, ContextOperationState};

/// A held lease: the operation and the token that fences our writes.
#[derive(Debug, Clone)]
pub struct Lease {
    pub operation_id: String,
    pub tenant: String,
    pub token: String,
    pub lease_ms: i64,
    /// Whether the operation may hold a conversation's deletion barrier (only deletes
    /// take one), which its terminal transition releases.
    pub holds_barrier: bool,
}

/// Progress written with each batch, in the batch's own transaction.
#[derive(Debug, Clone)]
pub struct Progress {
    pub phase: &'static str,
    pub processed: i64,
    pub total: i64,
    pub checkpoint: Option<String>,
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

/// Claim an operation: `queued` (and due) or `running` with an expired lease becomes
/// `running` under a fresh lease — a compare-and-set on `version`. `None` when someone
/// else holds it, it is finished, or it is not due yet.
pub async fn claim(db: &Db, id: &str, lease_ms: i64) -> StoreResult<Option<Claimed>> {
    let now = now_ms();
    let token = ulid::Ulid::generate().to_string();
    // One conditional UPDATE (the compare-and-set is its WHERE clause). SET expressions see
    // the old row, so a takeover of an expired lease is recorded in `error_code` as
    // `lease_expired` (visible while the operation runs again) and reported by RETURNING;
    // a stale `lease_expired` from an earlier takeover is cleared by an ordinary claim.
    let sql = format!(
        "UPDATE operations SET state = 'running', \
         phase = CASE WHEN phase IN ('queued', 'retrying') THEN 'starting' ELSE phase END, \
         error_code = CASE WHEN state = 'running' THEN '{LEASE_EXPIRED}' \
                           WHEN error_code = '{LEASE_EXPIRED}' THEN NULL ELSE error_code END, \
         error = CASE WHEN state = 'running' THEN 'the previous worker stopped renewing its lease; resumed from the last checkpoint' \
                      WHEN error_code = '{LEASE_EXPIRED}' THEN NULL ELSE error END, \
         lease_token = $2, lease_expires_at_ms = $3, attempt = attempt + 1, version = version + 1, pushed_at_ms = NULL, \
         started_at_ms = COALESCE(started_at_ms, $4), updated_at_ms = $4 \
         WHERE id = $1 AND ((state = 'queued' AND not_before_ms <= $4 AND cancel_requested = 0) \
                            OR (state = 'running' AND (lease_expires_at_ms IS NULL OR lease_expires_at_ms < $4))) \
         RETURNING {COLUMNS}"
    );
    with_pool!(db, pool => {
        let Some(row) = sqlx::query(AssertSqlSafe(sql))
            .bind(id)
            .bind(token.as_str())
            .bind(now + lease_ms)
            .bind(now)
            .fetch_optional(pool)
            .await?
        else {
            return Ok(None);
        };
        let operation = operation_from_row!(row);
        let lease = Lease {
            operation_id: operation.id.clone(),
            tenant: operation.tenant.clone(),
            token,
            lease_ms,
            holds_barrier: operation.kind == ContextOperationKind::Delete,
        };
        super::changes::committed(db, &operation.id);
        let recovered = operation.error_code.as_deref() == Some(LEASE_EXPIRED);
        Ok(Some(Claimed { recovered, operation, lease }))
    })
}

/// The `errorCode` of an operation running again after its worker's lease expired.
pub const LEASE_EXPIRED: &str = "lease_expired";

/// Extend the lease without other changes. `Ok(cancel_requested)` or `LostLease`.
pub async fn heartbeat(db: &Db, lease: &Lease) -> Result<bool, FenceError> {
    let now = now_ms();
    let flag: Option<i64> = with_pool!(db, pool => {
        sqlx::query_scalar(
            "UPDATE operations SET lease_expires_at_ms = $3 WHERE id = $1 AND lease_token = $2 AND state = 'running' \
             RETURNING cancel_requested",
        )
        .bind(lease.operation_id.as_str())
        .bind(lease.token.as_str())
        .bind(now + lease.lease_ms)
        .fetch_optional(pool)
        .await?
    });
    flag.map(|f| f != 0).ok_or(FenceError::LostLease)
}

/// How an attempt ends.
pub enum Finish<'a> {
    Succeeded {
        result: &'a serde_json::Value,
    },
    Failed {
        code: &'a str,
        message: &'a str,
    },
    Cancelled,
    /// Back to `queued`, not before `not_before_ms` (a transient failure).
    Retry {
        not_before_ms: i64,
        code: &'a str,
        message: &'a str,
    },
    /// Back to `queued` at once, this attempt not counted (graceful shutdown).
    Release,
}

/// Apply `finish`, fenced by the lease. Terminal transitions of a delete also release the
/// conversation barrier it may hold, in the same transaction.
pub async fn finish(db: &Db, lease: &Lease, finish: Finish<'_>) -> Result<(), FenceError> {
    let now = now_ms();
    let (sql, terminal): (&'static str, bool) = match finish {
        Finish::Succeeded { .. } => (
            "UPDATE operations SET state = 'succeeded', phase = 'done', result = $3, error = NULL, error_code = NULL, \
             lease_token = NULL, lease_expires_at_ms = NULL, finished_at_ms = $4, updated_at_ms = $4, version = version + 1 \
             WHERE id = $1 AND lease_token = $2 AND state = 'running'",
            true,
        ),
        Finish::Failed { .. } => (
            "UPDATE operations SET state = 'failed', phase = 'failed', error_code = $3, error = $5, \
             lease_token = NULL, lease_expires_at_ms = NULL, finished_at_ms = $4, updated_at_ms = $4, version = version + 1 \
             WHERE id = $1 AND lease_token = $2 AND state = 'running'",
            true,
        ),
        Finish::Cancelled => (
            "UPDATE operations SET state = 'cancelled', phase = 'cancelled', \
             lease_token = NULL, lease_expires_at_ms = NULL, finished_at_ms = $4, updated_at_ms = $4, version = version + 1 \
             WHERE id = $1 AND lease_token = $2 AND state = 'running' AND $3 = $3",
            true,
        ),
        Finish::Retry { .. } => (
            "UPDATE operations SET state = 'queued', phase = 'retrying', error_code = $3, error = $5, not_before_ms = $6, \
             lease_token = NULL, lease_expires_at_ms = NULL, pushed_at_ms = NULL, updated_at_ms = $4, version = version + 1 \
             WHERE id = $1 AND lease_token = $2 AND state = 'running'",
            false,
        ),
        Finish::Release => (
            "UPDATE operations SET state = 'queued', attempt = attempt - 1, \
             lease_token = NULL, lease_expires_at_ms = NULL, pushed_at_ms = NULL, updated_at_ms = $4, version = version + 1 \
             WHERE id = $1 AND lease_token = $2 AND state = 'running' AND $3 = $3",
            false,
        ),
    };
    let third: String = match &finish {
        Finish::Succeeded { result } => result.to_string(),
        Finish::Failed { code, .. } | Finish::Retry { code, .. } => code.to_string(),
        Finish::Cancelled | Finish::Release => String::new(),
    };
    let message = match &finish {
        Finish::Failed { message, .. } | Finish::Retry { message, .. } => Some(truncate(message, 2000)),
        _ => None,
    };
    let not_before = match &finish {
        Finish::Retry { not_before_ms, .. } => *not_before_ms,
        _ => 0,
    };
    with_pool!(db, pool => {
        let mut q = sqlx::query(sql).bind(lease.operation_id.as_str()).bind(lease.token.as_str()).bind(third.as_str()).bind(now);
        if message.is_some() {
            q = q.bind(message.as_deref());
        }
        if matches!(finish, Finish::Retry { .. }) {
            q = q.bind(not_before);
        }
        if terminal && lease.holds_barrier {
            let mut tx = pool.begin_write().await?;
            if q.execute(&mut *tx).await?.rows_affected() != 1 {
                return Err(FenceError::LostLease);
            }
            sqlx::query(RELEASE_CONVERSATION_SQL)
                .bind(lease.tenant.as_str())
                .bind(lease.operation_id.as_str())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        } else if q.execute(pool).await?.rows_affected() != 1 {
            // One statement, so no explicit transaction: a commit in one round trip.
            return Err(FenceError::LostLease);
        }
        super::changes::committed(db, &lease.operation_id);
        Ok(())
    })
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

/// An operation the dispatcher should push again.
pub struct Dispatchable {
    pub id: String,
    pub kind: ContextOperationKind,
    /// Its worker's lease expired: pushing it recovers an orphan.
    pub orphaned: bool,
}

/// Due operations that were never pushed (or not for `repush_after_ms`), and running
/// ones whose lease expired. Each returned row was marked pushed by a compare-and-set, so
/// concurrent dispatchers do not push the same operation twice in one round.
pub async fn take_dispatchable(db: &Db, repush_after_ms: i64, limit: usize) -> StoreResult<Vec<Dispatchable>> {
    let now = now_ms();
    let stale = now - repush_after_ms;
    let candidates: Vec<(String, String, String, Option<i64>)> = with_pool!(db, pool => {
        sqlx::query_as(
            "SELECT id, kind, state, pushed_at_ms FROM operations WHERE \
             ((state = 'queued' AND not_before_ms <= $1) OR (state = 'running' AND lease_expires_at_ms < $1)) \
             AND (pushed_at_ms IS NULL OR pushed_at_ms < $2) ORDER BY created_at_ms LIMIT $3",
        )
        .bind(now)
        .bind(stale)
        .bind(limit as i64)
        .fetch_all(pool)
        .await?
    });
    let mut out = Vec::new();
    for (id, kind, state, pushed) in candidates {
        let won = with_pool!(db, pool => {
            sqlx::query(
                "UPDATE operations SET pushed_at_ms = $2 WHERE id = $1 AND \
                 ((pushed_at_ms IS NULL AND $3 = -1) OR pushed_at_ms = $3)",
            )
            .bind(id.as_str())
            .bind(now)
            .bind(pushed.unwrap_or(-1))
            .execute(pool)
            .await?
            .rows_affected()
        }) == 1;
        if let (true, Some(kind)) = (won, ContextOperationKind::parse(&kind)) {
            out.push(Dispatchable { id, kind, orphaned: state == "running" });
        }
    }
    Ok(out)
}

/// Submissions insert rows already marked pushed (saving a write per operation in the
/// common case); a failed push clears the mark so the next dispatcher round pushes it.
pub async fn clear_pushed(db: &Db, id: &str) -> StoreResult<()> {
    with_pool!(db, pool => {
        sqlx::query("UPDATE operations SET pushed_at_ms = NULL WHERE id = $1 AND state = 'queued'")
            .bind(id)
            .execute(pool)
            .await?;
    });
    Ok(())
}

/// Delete terminal operations finished before `before_ms`.
pub async fn prune(db: &Db, before_ms: i64) -> StoreResult<u64> {
    Ok(with_pool!(db, pool => {
        sqlx::query(
            "DELETE FROM operations WHERE state IN ('succeeded', 'failed', 'cancelled') AND finished_at_ms < $1",
        )
        .bind(before_ms)
        .execute(pool)
        .await?
        .rows_affected()
    }))
}

/// Counts by kind and state, and the oldest queued operation's creation time (all
/// tenants: these feed unlabelled-by-tenant gauges).
pub async fn census(db: &Db) -> StoreResult<(Vec<(String, String, i64)>, Option<i64>)> {
    with_pool!(db, pool => {
        let counts: Vec<(String, String, i64)> =
            sqlx::query_as("SELECT kind, state, COUNT(*) FROM operations GROUP BY kind, state")
                .fetch_all(pool)
                .await?;
        let oldest: Option<i64> =
            sqlx::query_scalar("SELECT MIN(created_at_ms) FROM operations WHERE state = 'queued'")
                .fetch_one(pool)
                .await?;
        Ok((counts, oldest))
    })
}
