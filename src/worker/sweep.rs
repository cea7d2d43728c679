//! The retention sweep (opt-in: on only when a default policy is configured): periodically
//! plan the policy for every conversation of every tenant, and submit a `retention`
//! operation for each conversation it would delete from. The deleting is then the
//! operation's (fenced, checkpointed, cancellable), and every deletion is recorded as an
//! operation its tenant can list (`GET …/operations?kind=retention`). One worker runs each
//! tick, chosen by a compare-and-set on the `maintenance` row.

use crate::kinds::Prepared;
use crate::store::messages::{conversations, deletes};
use crate::store::operations::{self as ops, NewOperation, dispatch};
use crate::store::{Db, StoreError, StoreResult, maintenance, now_ms};
use context_jobs::contract::{ConversationScope, RetentionPolicy, RetentionRequest};
use context_jobs::ids::TenantKey;
use context_jobs::kinds::retention::Retention;
use context_jobs::operation::SubmitOptions;

/// What one tick did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepRun {
    /// `retention` operations submitted (one per conversation with messages to delete).
    pub operations: u64,
    /// Messages those operations were planned to delete.
    pub planned: i64,
}

/// One sweep tick, if this process wins it. Returns `Some(run)` when this process ran it.
/// The submitted operations are left for the dispatcher's next round to push.
pub async fn sweep_tick(
    db: &Db,
    holder: &str,
    period_ms: i64,
    policy: &RetentionPolicy,
) -> StoreResult<Option<SweepRun>> {
    let name = maintenance::RETENTION_SWEEP;
    if !maintenance::try_begin(db, name, holder, period_ms, period_ms.max(60_000)).await? {
        return Ok(None);
    }
    let mut run = SweepRun::default();
    let mut after: (String, String) = (String::new(), String::new());
    loop {
        let page = conversations::sweep_page(db, &after, 200).await?;
        let Some(last) = page.last().cloned() else { break };
        for (tenant, conversation) in &page {
            let tenant = TenantKey::from_stored(tenant.as_str());
            let planned = deletes::plan_retention(db, &tenant, conversation, policy).await?;
            if planned.plan.is_noop() || planned.doomed == 0 {
                continue;
            }
            submit(db, &tenant, conversation, policy).await?;
            run.operations += 1;
            run.planned += planned.doomed;
        }
        after = last;
    }
    maintenance::finish(db, name, holder, run.planned).await?;
    metrics::counter!(crate::metrics::SWEEP_RUNS).increment(1);
    metrics::counter!(crate::metrics::SWEEP_SUBMITTED).increment(run.operations);
    Ok(Some(run))
}

/// Submit the policy for one conversation as a `retention` operation of its tenant, the
/// same row a user's submission makes, unmarked so the dispatcher pushes it.
async fn submit(db: &Db, tenant: &TenantKey, conversation: &str, policy: &RetentionPolicy) -> StoreResult<()> {
    let request = RetentionRequest { scope: ConversationScope::conversation(conversation), policy: policy.clone() };
    // The conversation id was stored by a validated append; the policy by the config check.
    let args = Retention::args(request).map_err(|e| StoreError::Other(anyhow::anyhow!("sweep submission: {e}")))?;
    let prepared = Prepared::plain::<Retention>(args);
    let options = SubmitOptions::default();
    let schedule = options.resolve(now_ms(), None).map_err(|e| StoreError::Other(anyhow::anyhow!(e)))?;
    let new = NewOperation {
        request: &prepared.request,
        options: &options,
        schedule,
        idempotency_key: None,
        effect: &prepared.effect,
        rate_key: None,
    };
    let submitted = ops::submit(db, tenant, &new).await?;
    dispatch::unmark(db, &[submitted.operation.id.as_str()]).await?;
    Ok(())
}
