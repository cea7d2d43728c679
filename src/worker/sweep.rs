//! The retention sweep: periodically apply the configured default policy to every
//! conversation of every tenant. One worker runs each tick, chosen by a compare-and-set on
//! the `maintenance` row.

use crate::store::messages::{conversations, deletes};
use crate::store::{Db, StoreResult, maintenance};
use context_jobs::contract::RetentionPolicy;
use context_jobs::ids::TenantKey;

/// One sweep tick, if this process wins it: apply `policy` to every conversation of every
/// tenant. Returns `Some(deleted)` when this process ran the tick.
pub async fn sweep_tick(
    db: &Db,
    holder: &str,
    period_ms: i64,
    policy: &RetentionPolicy,
    batch: i64,
) -> StoreResult<Option<i64>> {
    let name = maintenance::RETENTION_SWEEP;
    if !maintenance::try_begin(db, name, holder, period_ms, period_ms.max(60_000)).await? {
        return Ok(None);
    }
    let mut deleted_total = 0i64;
    let mut after: (String, String) = (String::new(), String::new());
    loop {
        let page = conversations::sweep_page(db, &after, 200).await?;
        let Some(last) = page.last().cloned() else { break };
        for (tenant, conversation) in &page {
            let tenant = TenantKey::from_stored(tenant.as_str());
            let (plan, doomed) = deletes::plan_retention(db, &tenant, conversation, policy).await?;
            if plan.is_noop() || doomed == 0 {
                continue;
            }
            let mut from = 0i64;
            loop {
                let mut tx = db.begin_write().await?;
                let (deleted, upper) =
                    deletes::retention_batch(&mut tx, &tenant, conversation, &plan, from, batch).await?;
                tx.commit().await?;
                deleted_total += deleted;
                match upper {
                    Some(upper) if deleted == batch => from = upper,
                    _ => break,
                }
            }
        }
        after = last;
    }
    maintenance::finish(db, name, holder, deleted_total).await?;
    metrics::counter!(crate::metrics::SWEEP_RUNS).increment(1);
    metrics::counter!(crate::metrics::SWEEP_DELETED).increment(deleted_total as u64);
    Ok(Some(deleted_total))
}
