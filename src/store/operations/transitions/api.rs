//! The transitions the API and the dispatcher write, scoped by tenant: cancel, retry of a
//! failed or cancelled operation (`Requeue`), failing queued work past its deadline
//! (`Expire`), pause and resume of a kind, and the bulk forms of cancel, retry and forget.

use super::{NO_ERROR, PAUSE_HOLDS};
use crate::store::engine::Params;
use crate::store::operations::{SubmitEffect, state_is};
use crate::store::{Db, StoreResult, Tx, messages, now_ms, query};
use context_jobs::contract::{ContextOperationKind, ContextOperationState as State};
use context_jobs::ids::{OperationId, TenantKey};
use context_jobs::operation::machine::TERMINAL;
use context_jobs::operation::schedule::phase::PAUSED;
use context_jobs::operation::{ErrorCode, Schedule, Transition, phase};

/// Cancel (API): a queued operation becomes `cancelled` at once (releasing any barrier it
/// holds); a running one is flagged and stops at its next batch boundary; a terminal one is
/// left unchanged (idempotent). Returns whether this call cancelled a queued operation.
pub async fn cancel(db: &Db, tenant: &TenantKey, id: &OperationId) -> StoreResult<bool> {
    let mut tx = db.begin_write().await?;
    let cancelled = cancel_in(&mut tx, tenant, id).await?;
    tx.commit().await?;
    Ok(cancelled == CancelOutcome::Cancelled)
}

/// What one cancel changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CancelOutcome {
    /// A queued operation is `cancelled`.
    Cancelled,
    /// A running one is flagged now.
    Flagged,
    /// Nothing: terminal, already flagged, or not there.
    Unchanged,
}

async fn cancel_in(tx: &mut Tx, tenant: &TenantKey, id: &OperationId) -> StoreResult<CancelOutcome> {
    let (queued, flag) = (Transition::CancelQueued, Transition::RequestCancel);
    let mut p = Params::default();
    let (id_p, tenant_p, now_p) = (p.p(id.as_str()), p.p(tenant.as_str()), p.p(now_ms()));
    let (is_queued, is_running) = (p.state_in(queued.from()), p.state_in(flag.from()));
    let (cancelled, phase) = (p.p(queued.to().as_str()), p.p(queued.phase().unwrap_or(phase::CANCELLED).to_string()));
    // One compare-and-set for both cases. As two statements (cancel if queued, else flag if
    // running), PostgreSQL's READ COMMITTED let a worker's move from running back to the
    // queue (a retry, a release, a deferral) commit between them: neither matched, and the
    // cancel was lost. One statement re-checks its whole condition on the row's newest
    // version. The request clears an earlier attempt's error either way (the attempts keep
    // it): that error is not how the operation ends.
    let sql = format!(
        "UPDATE operations SET state = CASE WHEN {is_queued} THEN {cancelled} ELSE state END, \
         phase = CASE WHEN {is_queued} THEN {phase} ELSE phase END, \
         finished_at_ms = CASE WHEN {is_queued} THEN {now_p} ELSE finished_at_ms END, \
         cancel_requested = 1, {NO_ERROR}, updated_at_ms = {now_p}, version = version + 1 \
         WHERE id = {id_p} AND tenant = {tenant_p} AND ({is_queued} OR {is_running} AND cancel_requested = 0) \
         RETURNING state"
    );
    let state: Option<String> = p.into_query(sql).fetch_optional_scalar(&mut *tx).await?;
    Ok(match state.as_deref().map(State::parse) {
        Some(Some(to)) if to == queued.to() => {
            messages::conversations::release_barrier(&mut *tx, tenant, id).await?;
            CancelOutcome::Cancelled
        }
        Some(_) => CancelOutcome::Flagged,
        None => CancelOutcome::Unchanged,
    })
}

/// Retry (API): a `failed` or `cancelled` operation goes back to `queued` with a fresh
/// attempt budget and `schedule`, resuming from its checkpoint when `keep_checkpoint`
/// (else from the start). Its attempt history stays. `effect` is re-taken in the same
/// transaction (a delete's barrier). With `pushing`, the caller pushes it at once (it is
/// marked pushed); else the dispatcher's next round does. `false` when it was not failed
/// or cancelled.
pub async fn requeue(
    db: &Db,
    tenant: &TenantKey,
    id: &OperationId,
    keep_checkpoint: bool,
    schedule: &Schedule,
    effect: &SubmitEffect,
    pushing: bool,
) -> StoreResult<bool> {
    let mut tx = db.begin_write().await?;
    let requeued = requeue_in(&mut tx, tenant, id, keep_checkpoint, schedule, effect, pushing).await?;
    tx.commit().await?;
    Ok(requeued)
}

async fn requeue_in(
    tx: &mut Tx,
    tenant: &TenantKey,
    id: &OperationId,
    keep_checkpoint: bool,
    schedule: &Schedule,
    effect: &SubmitEffect,
    pushing: bool,
) -> StoreResult<bool> {
    let now = now_ms();
    let t = Transition::Requeue { keep_checkpoint };
    let mut p = Params::default();
    let (id_p, tenant_p, now_p) = (p.p(id.as_str()), p.p(tenant.as_str()), p.p(now));
    let due = schedule.not_before_ms <= now;
    let progress =
        if keep_checkpoint { "" } else { "checkpoint = NULL, processed = 0, total = 0, artifact_ref = NULL, " };
    let sql = format!(
        "UPDATE operations SET state = {}, phase = {}, {progress}attempt = 0, result = NULL, error = NULL, \
         error_code = NULL, cancel_requested = 0, finished_at_ms = NULL, lease_token = NULL, \
         lease_expires_at_ms = NULL, lease_owner = NULL, priority = {}, deadline_ms = {}, not_before_ms = {}, \
         pushed_at_ms = {}, updated_at_ms = {now_p}, version = version + 1 \
         WHERE id = {id_p} AND tenant = {tenant_p} AND {}",
        p.p(t.to().as_str()),
        p.p(if due { phase::QUEUED } else { context_jobs::operation::schedule::phase::SCHEDULED }),
        p.p(schedule.priority),
        p.p(schedule.deadline_ms),
        p.p(schedule.not_before_ms),
        p.p((due && pushing).then_some(now)),
        p.state_in(t.from()),
    );
    if p.into_query(sql).execute(&mut *tx).await? != 1 {
        return Ok(false);
    }
    if let SubmitEffect::MarkDeleting { conversation_id } = effect {
        messages::conversations::mark_deleting(tx, tenant, conversation_id, id).await?;
    }
    Ok(true)
}

/// Dispatcher: fail queued operations whose deadline passed (`Expire`: they never start),
/// releasing what they hold. Returns their ids and kinds.
pub async fn expire_overdue(db: &Db, limit: i64) -> StoreResult<Vec<(OperationId, TenantKey, ContextOperationKind)>> {
    let now = now_ms();
    let due: Vec<(String, String, String)> = query(
        "SELECT id, tenant, kind FROM operations WHERE state = $1 AND deadline_ms IS NOT NULL AND deadline_ms <= $2 \
         LIMIT $3",
    )
    .bind(State::Queued.as_str())
    .bind(now)
    .bind(limit)
    .fetch_all(db)
    .await?;
    let t = Transition::Expire;
    let mut out = Vec::new();
    for (id, tenant, kind) in due {
        let mut tx = db.begin_write().await?;
        let mut p = Params::default();
        let (id_p, now_p) = (p.p(id.clone()), p.p(now));
        let sql = format!(
            "UPDATE operations SET state = {}, phase = {}, error_code = {}, error = {}, finished_at_ms = {now_p}, \
             updated_at_ms = {now_p}, version = version + 1 WHERE id = {id_p} AND {} \
             AND deadline_ms IS NOT NULL AND deadline_ms <= {now_p}",
            p.p(t.to().as_str()),
            p.p(t.phase().unwrap_or(phase::FAILED).to_string()),
            p.p(ErrorCode::DeadlineExceeded.as_str()),
            p.p("the deadline passed while the operation was queued"),
            p.state_in(t.from()),
        );
        let (id, tenant) = (OperationId::from_stored(id), TenantKey::from_stored(tenant));
        if p.into_query(sql).execute(&mut tx).await? == 1 {
            messages::conversations::release_barrier(&mut tx, &tenant, &id).await?;
            if let Some(kind) = ContextOperationKind::parse(&kind) {
                out.push((id, tenant, kind));
            }
        }
        tx.commit().await?;
    }
    Ok(out)
}

/// Pause or resume `kind`, for one tenant or (no tenant) for everyone. Queued work shows
/// `paused` while any pause applies to it; on resume the caller pushes it again
/// (`worker::dispatcher::spawn_resume_pushes`). Running work sees the pause at its next heartbeat or batch and is
/// released. Returns how many queued operations were marked.
pub async fn set_paused(
    db: &Db,
    kind: ContextOperationKind,
    tenant: Option<&TenantKey>,
    paused: bool,
) -> StoreResult<u64> {
    let now = now_ms();
    let scope = tenant.map_or("", |t| t.as_str());
    let mut tx = db.begin_write().await?;
    query(
        "INSERT INTO queue_controls (kind, tenant, paused, updated_at_ms) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (kind, tenant) DO UPDATE SET paused = excluded.paused, updated_at_ms = excluded.updated_at_ms",
    )
    .bind(kind.as_str())
    .bind(scope)
    .bind(i64::from(paused))
    .bind(now)
    .execute(&mut tx)
    .await?;
    let mut p = Params::default();
    let (kind_p, paused_p, now_p) = (p.p(kind.as_str()), p.p(PAUSED), p.p(now));
    let queued = state_is("", State::Queued);
    let tenant_filter = match tenant {
        Some(t) => format!(" AND tenant = {}", p.p(t.as_str())),
        None => String::new(),
    };
    let sql = if paused {
        format!(
            "UPDATE operations SET phase = {paused_p}, updated_at_ms = {now_p}, version = version + 1 \
             WHERE kind = {kind_p} AND {queued} AND phase <> {paused_p}{tenant_filter}"
        )
    } else {
        // Only work no pause holds any more. The resume pushes what is due
        // (`spawn_resume_pushes`; work held during the pause was not pushed, or its
        // deliveries were dropped), and its push mark is cleared: a delivery claims the next
        // operation by fair share, not the one it names, so one claimed out of turn (another
        // tenant's) before its page is read uses up another's push, and what that leaves
        // queued is the dispatcher's to push at its next round. Marked pushed, it waited out
        // the repush age (the `operations` bench's fairness run: the last of 10,000 drained
        // at 60 s instead of ~7 s).
        format!(
            "UPDATE operations SET phase = {}, updated_at_ms = {now_p}, version = version + 1, pushed_at_ms = NULL \
             WHERE kind = {kind_p} AND {queued} AND phase = {paused_p}{tenant_filter} \
             AND NOT {}",
            p.p(phase::QUEUED),
            *PAUSE_HOLDS
        )
    };
    let marked = p.into_query(sql).execute(&mut tx).await?;
    tx.commit().await?;
    Ok(marked)
}

/// What a bulk action does to each operation it matches (its wire name is the action of
/// `POST …/operations/bulk`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    Cancel,
    Retry,
    Forget,
}

/// Which operations a bulk action matches (at least one criterion; the caller checks).
#[derive(Debug, Clone, Default)]
pub struct BulkFilter {
    /// `None`: every tenant (admin only; the caller decides).
    pub tenant: Option<TenantKey>,
    pub kind: Option<ContextOperationKind>,
    pub state: Option<State>,
    pub created_after_ms: Option<i64>,
    pub created_before_ms: Option<i64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BulkOutcome {
    pub matched: u64,
    pub changed: u64,
}

/// The most operations one bulk call considers.
const BULK_LIMIT: i64 = 100_000;

/// Apply `action` to every operation matching `filter` (or only count, `dry_run`).
/// `matched` counts the operations the filter selects; `changed` those this call changed
/// (repeating a call changes nothing more). `retry_plan` gives, per matched operation,
/// whether its checkpoint is kept, its new schedule and the effect it re-takes.
pub async fn bulk<F>(
    db: &Db,
    action: BulkAction,
    filter: &BulkFilter,
    dry_run: bool,
    retry_plan: F,
) -> StoreResult<BulkOutcome>
where
    F: Fn(&str, &str) -> Option<(bool, Schedule, SubmitEffect)>,
{
    let mut where_ = vec!["1 = 1".to_string()];
    let mut p = Params::default();
    if let Some(t) = &filter.tenant {
        where_.push(format!("tenant = {}", p.p(t.as_str())));
    }
    if let Some(k) = filter.kind {
        where_.push(format!("kind = {}", p.p(k.as_str())));
    }
    if let Some(s) = filter.state {
        where_.push(format!("state = {}", p.p(s.as_str())));
    }
    if let Some(a) = filter.created_after_ms {
        where_.push(format!("created_at_ms >= {}", p.p(a)));
    }
    if let Some(b) = filter.created_before_ms {
        where_.push(format!("created_at_ms < {}", p.p(b)));
    }
    let sql = format!(
        "SELECT id, tenant, state, kind, request, cancel_requested FROM operations WHERE {} \
         ORDER BY created_at_ms LIMIT {BULK_LIMIT}",
        where_.join(" AND ")
    );
    let rows: Vec<(String, String, String, String, String, i64)> = p.into_query(sql).fetch_all(db).await?;
    let mut outcome = BulkOutcome { matched: rows.len() as u64, changed: 0 };
    let applies = |state: &str, cancel_requested: i64| match action {
        // A running one already flagged is not changed again.
        BulkAction::Cancel => match State::parse(state) {
            Some(State::Queued) => true,
            Some(State::Running) => cancel_requested == 0,
            _ => false,
        },
        BulkAction::Retry => matches!(State::parse(state), Some(State::Failed | State::Cancelled)),
        BulkAction::Forget => State::parse(state).is_some_and(|s| TERMINAL.contains(&s)),
    };
    let targets: Vec<_> = rows.iter().filter(|r| applies(&r.2, r.5)).collect();
    if dry_run {
        outcome.changed = targets.len() as u64;
        return Ok(outcome);
    }
    match action {
        BulkAction::Forget => {
            for chunk in targets.chunks(500) {
                let ids: Vec<&str> = chunk.iter().map(|r| r.0.as_str()).collect();
                outcome.changed += crate::store::operations::dispatch::forget_terminal(db, None, &ids).await?;
            }
        }
        BulkAction::Cancel => {
            for r in targets {
                let (id, tenant) = (OperationId::from_stored(r.0.as_str()), TenantKey::from_stored(r.1.as_str()));
                let mut tx = db.begin_write().await?;
                let done = cancel_in(&mut tx, &tenant, &id).await?;
                tx.commit().await?;
                // A running one flagged now (it stops at its next boundary) is a change too;
                // one that finished since the read, or was flagged meanwhile, is not.
                if done != CancelOutcome::Unchanged {
                    outcome.changed += 1;
                }
            }
        }
        BulkAction::Retry => {
            for r in targets {
                let Some((keep, schedule, effect)) = retry_plan(&r.3, &r.4) else { continue };
                let (id, tenant) = (OperationId::from_stored(r.0.as_str()), TenantKey::from_stored(r.1.as_str()));
                match requeue(db, &tenant, &id, keep, &schedule, &effect, false).await {
                    Ok(true) => outcome.changed += 1,
                    Ok(false) => {}
                    // A delete whose conversation another delete holds now: left as it is.
                    Err(crate::store::StoreError::Conflict(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(outcome)
}
