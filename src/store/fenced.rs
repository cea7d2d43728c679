//! The fenced writes a job makes inside its own transactions, so they commit with the
//! batch's effect: record progress and extend the lease (`fenced_checkpoint!`), finish
//! `succeeded` (`fenced_succeed!`), name the produced artifact. Each carries the lease token
//! in its `WHERE` clause; a worker that lost its lease matches nothing and rolls back.

pub const CHECKPOINT_SQL: &str = "UPDATE operations SET phase = $3, processed = $4, total = $5, checkpoint = $6, \
     lease_expires_at_ms = $7, updated_at_ms = $8, version = version + 1 \
     WHERE id = $1 AND lease_token = $2 AND state = 'running' RETURNING cancel_requested";

/// Name the artifact an operation produces (`artifactRef`), fenced like a checkpoint:
/// `$1` id, `$2` lease token, `$3` artifact id. Run it in the transaction that creates
/// the artifact so the two never diverge.
pub const SET_ARTIFACT_REF_SQL: &str =
    "UPDATE operations SET artifact_ref = $3 WHERE id = $1 AND lease_token = $2 AND state = 'running'";

/// Inside a worker's transaction: record `progress` and extend the lease, fenced by the
/// token. Evaluates to `Result<bool /* cancel requested */, FenceError>`.
#[macro_export]
macro_rules! fenced_checkpoint {
    ($tx:expr, $lease:expr, $progress:expr) => {{
        let lease: &$crate::store::leases::Lease = $lease;
        let progress: &$crate::store::leases::Progress = $progress;
        let now = $crate::store::now_ms();
        let flag: Option<i64> = sqlx::query_scalar($crate::store::fenced::CHECKPOINT_SQL)
            .bind(lease.operation_id.as_str())
            .bind(lease.token.as_str())
            .bind(progress.phase)
            .bind(progress.processed)
            .bind(progress.total)
            .bind(progress.checkpoint.as_deref())
            .bind(now + lease.lease_ms)
            .bind(now)
            .fetch_optional($tx)
            .await
            .map_err($crate::store::leases::FenceError::from)?;
        match flag {
            Some(flag) => Ok::<bool, $crate::store::leases::FenceError>(flag != 0),
            None => Err($crate::store::leases::FenceError::LostLease),
        }
    }};
}

pub const SUCCEED_SQL: &str = "UPDATE operations SET state = 'succeeded', phase = 'done', processed = $3, total = $4, \
     checkpoint = $5, result = $6, error = NULL, error_code = NULL, lease_token = NULL, lease_expires_at_ms = NULL, \
     finished_at_ms = $7, updated_at_ms = $7, version = version + 1 \
     WHERE id = $1 AND lease_token = $2 AND state = 'running'";

/// Inside a worker's last transaction: finish the operation `succeeded` with `result`
/// together with the last batch's effect (one commit instead of two), fenced by the
/// lease, and release the conversation barrier. Evaluates to `Result<(), FenceError>`;
/// the job then calls `JobCtx::mark_finished` so the runner does not finish it again.
#[macro_export]
macro_rules! fenced_succeed {
    ($tx:expr, $lease:expr, $progress:expr, $result:expr) => {{
        let lease: &$crate::store::leases::Lease = $lease;
        let progress: &$crate::store::leases::Progress = $progress;
        let result: &serde_json::Value = $result;
        let now = $crate::store::now_ms();
        let updated = sqlx::query($crate::store::fenced::SUCCEED_SQL)
            .bind(lease.operation_id.as_str())
            .bind(lease.token.as_str())
            .bind(progress.processed)
            .bind(progress.total)
            .bind(progress.checkpoint.as_deref())
            .bind(result.to_string())
            .bind(now)
            .execute(&mut *$tx)
            .await
            .map_err($crate::store::leases::FenceError::from)?
            .rows_affected();
        if updated != 1 {
            Err::<(), _>($crate::store::leases::FenceError::LostLease)?;
        }
        if lease.holds_barrier {
            sqlx::query($crate::store::operations::RELEASE_CONVERSATION_SQL)
                .bind(lease.tenant.as_str())
                .bind(lease.operation_id.as_str())
                .execute(&mut *$tx)
                .await
                .map_err($crate::store::leases::FenceError::from)?;
        }
        Ok::<(), $crate::store::leases::FenceError>(())
    }};
}
