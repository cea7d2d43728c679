//! What a claim records besides the claim: the fair share's tie-break (`queue_shares`:
//! when each tenant was last served) and why queued work waits (`Hold`: its phase).

use super::PAUSE_HOLDS;
use super::view::ViewCache;
use crate::store::engine::Params;
use crate::store::{Db, StoreResult, now_ms, query};
use context_jobs::contract::ContextOperationKind;
use context_jobs::ids::{OperationId, TenantKey};
use context_jobs::operation::Transition;
use context_jobs::operation::schedule::Hold;

/// After a claim of `tenant`'s: the fair share's tie-break (shared by every process; it
/// matters only between tenants) and this process's copy of the view.
pub(super) async fn record_claim(
    db: &Db,
    views: &ViewCache,
    kind: ContextOperationKind,
    tenant: &str,
    position: (i64, i64),
    tenants: usize,
    now: i64,
) -> StoreResult<()> {
    if tenants > 1 {
        served(db, kind, tenant, now).await?;
    }
    views.claimed(kind, tenant, position, now);
    Ok(())
}

/// Record that `tenant` was served now (the fair share's tie-break).
async fn served(db: &Db, kind: ContextOperationKind, tenant: &str, now: i64) -> StoreResult<()> {
    query(
        "INSERT INTO queue_shares (kind, tenant, last_claim_ms, claims) VALUES ($1, $2, $3, 1) \
         ON CONFLICT (kind, tenant) DO UPDATE SET last_claim_ms = excluded.last_claim_ms, \
         claims = queue_shares.claims + 1",
    )
    .bind(kind.as_str())
    .bind(tenant)
    .bind(now)
    .execute(db)
    .await?;
    Ok(())
}

/// Write why queued work of `kind` waits (its phase), once: nothing changes where it already
/// says so. A pause: the scheduler's head `head` (a pause marks the rest itself). A full
/// concurrency limit: the head and `named`, the operation the delivery named, if it is of
/// the kind, due and not paused — each held operation is marked by its own delivery (the
/// dispatcher then leaves it to the wake-ups of `dispatch::take_dispatchable`). Marking
/// every held row at once read all of the kind's queued rows at every held claim and
/// announced thousands of changes at once. The operations it changed, with their tenants.
pub(super) async fn hold(
    db: &Db,
    kind: ContextOperationKind,
    head: &str,
    named: Option<&OperationId>,
    hold: Hold,
) -> StoreResult<Vec<(OperationId, TenantKey)>> {
    let t = Transition::Hold { phase: hold.phase() };
    let mut p = Params::default();
    let (phase_p, now_p) = (p.p(hold.phase()), p.p(now_ms()));
    let rows = match (hold, named) {
        // A pause is re-checked by the statement itself: a resume committed since the
        // scheduler looked must not leave the head marked `paused` (the dispatcher would
        // push it again only after its repush age).
        (Hold::Paused, _) => format!("id = {} AND {}", p.p(head), *PAUSE_HOLDS),
        // Work a pause holds shows `paused`, not this.
        (Hold::Concurrency, None) => format!("id = {} AND NOT {}", p.p(head), *PAUSE_HOLDS),
        (Hold::Concurrency, Some(named)) => format!(
            "id IN ({}, {}) AND kind = {} AND not_before_ms <= {now_p} AND NOT {}",
            p.p(head),
            p.p(named.as_str()),
            p.p(kind.as_str()),
            *PAUSE_HOLDS
        ),
    };
    let sql = format!(
        "UPDATE operations SET phase = {phase_p}, updated_at_ms = {now_p}, version = version + 1 \
         WHERE {rows} AND {} AND phase <> {phase_p} RETURNING id, tenant",
        p.state_in(t.from())
    );
    let held: Vec<(String, String)> = p.into_query(sql).fetch_all(db).await?;
    Ok(held.into_iter().map(|(id, tenant)| (OperationId::from_stored(id), TenantKey::from_stored(tenant))).collect())
}
