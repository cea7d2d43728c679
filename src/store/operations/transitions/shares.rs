//! What a claim records besides the claim: the fair share's tie-break (`queue_shares`:
//! when each tenant was last served) and why queued work waits (`Hold`: its phase).

use super::PAUSE_HOLDS;
use super::view::ViewCache;
use crate::store::engine::Params;
use crate::store::{Db, StoreResult, now_ms, query};
use context_jobs::contract::ContextOperationKind;
use context_jobs::ids::TenantKey;
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

/// Write why a queued operation waits (its phase), once: nothing changes when it already
/// says so. Its tenant when it changed.
pub(super) async fn hold_one(db: &Db, id: &str, hold: Hold) -> StoreResult<Option<TenantKey>> {
    let t = Transition::Hold { phase: hold.phase() };
    let mut p = Params::default();
    let (id_p, phase_p, now_p) = (p.p(id), p.p(hold.phase()), p.p(now_ms()));
    // A pause is re-checked by the statement itself: a resume committed since the scheduler
    // looked must not leave the head marked `paused` (the dispatcher would push it again only
    // after its repush age).
    let still = if hold == Hold::Paused { format!(" AND {}", *PAUSE_HOLDS) } else { String::new() };
    let sql = format!(
        "UPDATE operations SET phase = {phase_p}, updated_at_ms = {now_p}, version = version + 1 \
         WHERE id = {id_p} AND {} AND phase <> {phase_p}{still} RETURNING tenant",
        p.state_in(t.from())
    );
    let tenant: Option<String> = p.into_query(sql).fetch_optional_scalar(db).await?;
    Ok(tenant.map(TenantKey::from_stored))
}
