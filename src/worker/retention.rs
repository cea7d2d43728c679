//! Retention: the `retention` job for one conversation, and the periodic sweep that
//! applies the configured default policy to every conversation.
//!
//! The job plans once (`jobs::retention::plan`), stores the plan in its checkpoint, and
//! deletes by that fixed predicate in fenced batches, so a resumed run removes exactly
//! what was planned. The sweep is run by one worker per tick: a compare-and-set on the
//! `maintenance` row decides which.

use serde_json::{Value, json};

use super::{JobCtx, JobError};
use crate::db::{BeginWrite as _, Db};
use crate::store::leases::Progress;
use crate::store::maintenance;
use crate::store::{StoreResult, now_ms};
use crate::{fenced_checkpoint, with_pool};
use context_jobs::contract::RetentionPolicy;
use context_jobs::operation::error_code;
use context_jobs::retention::{RetentionPlan, plan};

/// Plan retention for one conversation: count, the cut sequence, and how many go.
pub async fn plan_for(
    db: &Db,
    tenant: &str,
    conversation_id: &str,
    policy: &RetentionPolicy,
) -> StoreResult<(RetentionPlan, i64)> {
    let count: i64 = with_pool!(db, pool => {
        sqlx::query_scalar("SELECT COUNT(*) FROM messages WHERE tenant = $1 AND conversation_id = $2")
            .bind(tenant)
            .bind(conversation_id)
            .fetch_one(pool)
            .await?
    });
    let nth = match policy.max_messages {
        Some(max) if count > i64::from(max) => with_pool!(db, pool => {
            sqlx::query_scalar::<_, i64>(
                "SELECT sequence FROM messages WHERE tenant = $1 AND conversation_id = $2 ORDER BY sequence DESC LIMIT 1 OFFSET $3",
            )
            .bind(tenant)
            .bind(conversation_id)
            .bind(i64::from(max))
            .fetch_optional(pool)
            .await?
        }),
        _ => None,
    };
    let plan = plan(policy, now_ms(), count.max(0) as u64, |_| nth);
    let (older, upto) = bounds(&plan);
    let doomed: i64 = with_pool!(db, pool => {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM messages WHERE tenant = $1 AND conversation_id = $2 AND (created_at_ms < $3 OR sequence <= $4)",
        )
        .bind(tenant)
        .bind(conversation_id)
        .bind(older)
        .bind(upto)
        .fetch_one(pool)
        .await?
    });
    Ok((plan, doomed))
}

fn bounds(plan: &RetentionPlan) -> (i64, i64) {
    (plan.older_than_ms.unwrap_or(i64::MIN), plan.up_to_sequence.unwrap_or(-1))
}

/// Delete the next batch by `plan` after sequence `$after`, inside the caller's
/// transaction; evaluates to `(deleted, Some(last sequence deleted))`, or `(0, None)` when
/// nothing is left. Keyset by sequence, one index range per batch: restarting from the
/// first sequence would re-scan the dead index entries of every batch already deleted.
macro_rules! delete_batch {
    ($tx:expr, $tenant:expr, $conversation:expr, $plan:expr, $after:expr, $batch:expr) => {{
        let (older, upto) = bounds($plan);
        let upper: Option<i64> = sqlx::query_scalar(
            "SELECT max(sequence) FROM (SELECT sequence FROM messages WHERE tenant = $1 AND conversation_id = $2 \
             AND sequence > $3 AND (created_at_ms < $4 OR sequence <= $5) ORDER BY sequence LIMIT $6) b",
        )
        .bind($tenant)
        .bind($conversation)
        .bind($after)
        .bind(older)
        .bind(upto)
        .bind($batch)
        .fetch_one(&mut *$tx)
        .await?;
        let mut deleted = 0i64;
        if let Some(upper) = upper {
            deleted = sqlx::query(
                "DELETE FROM messages WHERE tenant = $1 AND conversation_id = $2 AND sequence > $3 AND sequence <= $4 \
                 AND (created_at_ms < $5 OR sequence <= $6)",
            )
            .bind($tenant)
            .bind($conversation)
            .bind($after)
            .bind(upper)
            .bind(older)
            .bind(upto)
            .execute(&mut *$tx)
            .await?
            .rows_affected() as i64;
            sqlx::query("UPDATE conversations SET message_count = message_count - $3 WHERE tenant = $1 AND conversation_id = $2")
                .bind($tenant)
                .bind($conversation)
                .bind(deleted)
                .execute(&mut *$tx)
                .await?;
        }
        (deleted, upper)
    }};
}

/// The job's checkpoint: the plan made once, and how far the deletion got.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Checkpoint {
    #[serde(flatten)]
    plan: RetentionPlan,
    #[serde(default)]
    after_sequence: i64,
}

pub async fn run(ctx: &JobCtx, conversation_id: &str, policy: &RetentionPolicy) -> Result<Value, JobError> {
    let tenant = ctx.operation.tenant.as_str();
    let mut processed = ctx.operation.processed;
    let mut total = ctx.operation.total;
    let mut at: Checkpoint = match &ctx.operation.checkpoint {
        Some(saved) => serde_json::from_str(saved).map_err(|e| {
            JobError::permanent(error_code::CORRUPT_OPERATION, format!("bad retention checkpoint: {e}"))
        })?,
        None => {
            let (plan, doomed) = plan_for(&ctx.db, tenant, conversation_id, policy).await?;
            total = doomed;
            let at = Checkpoint { plan, after_sequence: 0 };
            let progress = Progress {
                phase: "planned",
                processed: 0,
                total,
                checkpoint: Some(serde_json::to_string(&at).unwrap_or_default()),
            };
            ctx.save_progress(&progress).await?;
            at
        }
    };
    let batch = ctx.batch_size();
    while !at.plan.is_noop() {
        let (deleted, upper, cancel) = with_pool!(&ctx.db, pool => {
            let mut tx = pool.begin_write().await?;
            let (deleted, upper) = delete_batch!(tx, tenant, conversation_id, &at.plan, at.after_sequence, batch);
            let next = Checkpoint { plan: at.plan, after_sequence: upper.unwrap_or(at.after_sequence) };
            let progress = Progress {
                phase: "deleting",
                processed: processed + deleted,
                total: total.max(processed + deleted),
                checkpoint: Some(serde_json::to_string(&next).unwrap_or_default()),
            };
            let cancel = fenced_checkpoint!(&mut *tx, &ctx.lease, &progress)?;
            tx.commit().await?;
            (deleted, upper, cancel)
        });
        processed += deleted;
        total = total.max(processed);
        metrics::counter!(crate::metrics::ITEMS_PROCESSED, "kind" => "retention").increment(deleted as u64);
        match upper {
            Some(upper) if deleted == batch => at.after_sequence = upper,
            _ => break,
        }
        ctx.boundary(cancel)?;
    }
    Ok(json!({"deletedMessages": processed, "plan": at.plan}))
}

const SWEEP: &str = "retention_sweep";

/// One sweep tick, if this process wins it: apply `policy` to every conversation of every
/// tenant. Returns `Some(deleted)` when this process ran the tick.
pub async fn sweep_tick(
    db: &Db,
    holder: &str,
    period_ms: i64,
    policy: &RetentionPolicy,
    batch: i64,
) -> StoreResult<Option<i64>> {
    if !maintenance::try_begin(db, SWEEP, holder, period_ms, period_ms.max(60_000)).await? {
        return Ok(None);
    }
    let mut deleted_total = 0i64;
    let mut after: (String, String) = (String::new(), String::new());
    loop {
        let page: Vec<(String, String)> = with_pool!(db, pool => {
            sqlx::query_as(
                "SELECT tenant, conversation_id FROM conversations WHERE deleting_operation IS NULL \
                 AND (tenant > $1 OR (tenant = $1 AND conversation_id > $2)) ORDER BY tenant, conversation_id LIMIT 200",
            )
            .bind(after.0.as_str())
            .bind(after.1.as_str())
            .fetch_all(pool)
            .await?
        });
        let Some(last) = page.last().cloned() else { break };
        for (tenant, conversation) in &page {
            let (plan, doomed) = plan_for(db, tenant, conversation, policy).await?;
            if plan.is_noop() || doomed == 0 {
                continue;
            }
            let mut after = 0i64;
            loop {
                let (deleted, upper) = with_pool!(db, pool => {
                    let mut tx = pool.begin_write().await?;
                    let step = delete_batch!(tx, tenant.as_str(), conversation.as_str(), &plan, after, batch);
                    tx.commit().await?;
                    step
                });
                deleted_total += deleted;
                match upper {
                    Some(upper) if deleted == batch => after = upper,
                    _ => break,
                }
            }
        }
        after = last;
    }
    maintenance::finish(db, SWEEP, holder, deleted_total).await?;
    metrics::counter!(crate::metrics::ITEMS_PROCESSED, "kind" => "retention_sweep").increment(deleted_total as u64);
    Ok(Some(deleted_total))
}

pub const SWEEP_NAME: &str = SWEEP;
