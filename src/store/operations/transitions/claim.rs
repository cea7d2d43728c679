//! Claiming: the next operation of a kind by the core's fair share (`claim_next`: the scheduler's view of every tenant with queued work, then the
//! `Claim` compare-and-set on the chosen head), and `Hold`, which writes why due work
//! waits; and recovering an orphan by id (`recover`): a claim takes over a `running`
//! operation only when its lease expired or its lease owner stopped announcing itself
//! (`worker_heartbeats`).

use super::{Claimed, Lease, PAUSE_HOLDS, append_attempt};
use crate::store::engine::Params;
use crate::store::operations::{COLUMNS, OperationRow, queue_order, queue_position, state_is};
use crate::store::{Db, Engine, StoreResult, now_ms, query};
use context_jobs::contract::{ContextOperationKind, ContextOperationState as State};
use context_jobs::ids::{OperationId, TenantKey};
use context_jobs::operation::ErrorCode;
use context_jobs::operation::machine::{LEASE_EXPIRED_MESSAGE, WAITING_PHASES};
use context_jobs::operation::schedule::{Pick, pick};

use super::shares::{hold as hold_work, record_claim};
use super::view::{self, ViewCache};
use context_jobs::operation::{Transition, phase};

/// A worker process silent this long is taken for dead: its leases are recovered.
pub const OWNER_SILENCE_MS: i64 = 3_000;

/// Which rows a claim by id may take.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Takes {
    /// The same under a concurrency limit, and only while the kind's running operations —
    /// every tenant's, and the operation's tenant's — are under the limits, as the statement
    /// itself counts them. The view a choice was made off is already old: two workers that
    /// chose different heads off two views would each start one, past a limit of one.
    /// Claims of a limited kind are serialised so that each count sees the claims before it
    /// (PostgreSQL: an advisory lock per kind; SQLite has one writer).
    Limited { kind: &'static str, max_running: Option<u32>, max_per_tenant: Option<u32> },
    /// The scheduler's choice off a view, fresh or cached (see `view.rs`): due, and no pause
    /// holds it (a pause may have committed since the view was read).
    Unpaused,
    /// An orphan: a running operation whose lease expired or whose owner went silent.
    Orphan,
}

/// Which row a claim takes.
#[derive(Clone, Copy)]
enum Target<'q> {
    /// This one (the scheduler's chosen head, or an orphan).
    Id(&'q str),
    /// The first `count` due operations of `kind` in `tenant`'s queue that no concurrent
    /// claim holds (PostgreSQL: `FOR UPDATE SKIP LOCKED`; SQLite has one writer), so
    /// concurrent workers serving the same tenant take its next operations instead of racing
    /// for its head (and claims combined by `combine.rs` take several in one statement).
    /// From queue position `from` on (see `View::start`), when given.
    FirstDue { kind: &'q str, tenant: &'q str, from: Option<(i64, i64)>, count: i64 },
}

/// Due and startable, for a row under `alias` whose state is `queued` (a condition: see
/// the callers) — the claim's choice and its guard by id; `view.rs`'s `QUEUES_SQL` spells
/// the same rule with its own binds for the scheduler's view.
fn due(alias: &str, queued: &str, now_p: &str) -> String {
    format!(
        "{queued} AND {alias}not_before_ms <= {now_p} AND {alias}cancel_requested = 0 \
         AND ({alias}deadline_ms IS NULL OR {alias}deadline_ms > {now_p})"
    )
}

/// The ids of the first `limit` due operations of kind `kind_p` in tenant `tenant_p`'s
/// queue (priority, then age), from queue position `from_p` (`(-priority, created_at_ms)`,
/// see `queue_order`) on when given, as a subquery; `lock` is PostgreSQL's `FOR UPDATE SKIP
/// LOCKED`.
fn first_due(
    kind_p: &str,
    tenant_p: &str,
    now_p: &str,
    from_p: Option<(&str, &str)>,
    limit: &str,
    lock: &str,
) -> String {
    let from =
        from_p.map_or(String::new(), |(rank, at)| format!(" AND (-o.priority, o.created_at_ms) >= ({rank}, {at})"));
    format!(
        "SELECT o.id FROM operations o WHERE o.kind = {kind_p} AND o.tenant = {tenant_p} AND {}{from} \
         ORDER BY {} LIMIT {limit}{lock}",
        // The state as a literal: `operations_queued` serves the search.
        due("o.", &state_is("o.", State::Queued), now_p),
        queue_order("o.")
    )
}

/// The scheduler's reads, for plan checks (`EXPLAIN`): the view of a kind's queues
/// (binds: kind, now), a tenant's first due operation (binds: kind, now, tenant), and the
/// same from a queue position on (binds: kind, now, tenant, -priority, created_at_ms).
pub fn scheduler_reads() -> [&'static str; 3] {
    static FIRST_DUE: std::sync::LazyLock<[String; 2]> = std::sync::LazyLock::new(|| {
        [first_due("$1", "$3", "$2", None, "1", ""), first_due("$1", "$3", "$2", Some(("$4", "$5")), "1", "")]
    });
    [view::queues_sql(), FIRST_DUE[0].as_str(), FIRST_DUE[1].as_str()]
}

/// The claim of `target`, as one statement.
fn claim_statement<'q>(
    engine: Engine,
    target: Target<'q>,
    t: &Transition<'q>,
    now: i64,
    takes: Takes,
) -> crate::store::engine::Query<'q> {
    let Transition::Claim { token, lease_until_ms, owner } = *t else { unreachable!("not a claim: {t:?}") };
    let mut p = Params::default();
    let (token_p, lease_p, owner_p, now_p) = (p.p(token), p.p(lease_until_ms), p.p(owner), p.p(now));
    let running = p.p(State::Running.as_str());
    let row = match target {
        Target::Id(id) => format!("id = {}", p.p(id)),
        Target::FirstDue { kind, tenant, from, count } => {
            let (kind_p, tenant_p) = (p.p(kind), p.p(tenant));
            let from_p = from.map(|(rank, at)| (p.p(rank), p.p(at)));
            let lock = if engine == Engine::Postgres { " FOR UPDATE SKIP LOCKED" } else { "" };
            let from_p = from_p.as_ref().map(|(r, a)| (r.as_str(), a.as_str()));
            // One row keeps the single claim's statement (and plan) as it was. Several: on
            // PostgreSQL the ids are collected once (`ARRAY(…)` is an init plan), since an
            // `IN (… SKIP LOCKED)` subquery that a plan ran more than once would pick rows
            // again each time, past `LIMIT`; SQLite evaluates `IN (…)` once, into a table.
            match (count, engine) {
                (1, _) => format!("id = ({})", first_due(&kind_p, &tenant_p, &now_p, from_p, "1", lock)),
                (n, Engine::Postgres) => {
                    format!("id = ANY(ARRAY({}))", first_due(&kind_p, &tenant_p, &now_p, from_p, &p.p(n), lock))
                }
                (n, Engine::Sqlite) => {
                    format!("id IN ({})", first_due(&kind_p, &tenant_p, &now_p, from_p, &p.p(n), lock))
                }
            }
        }
    };
    debug_assert_eq!(t.phase(), Some(phase::STARTING));
    let starting = p.p(phase::STARTING);
    let waiting = p.any_of("phase", WAITING_PHASES);
    let (expired, expired_message) = (p.p(ErrorCode::LeaseExpired.as_str()), p.p(LEASE_EXPIRED_MESSAGE));
    // The guard of a row chosen by id (the primary key finds it). A first due search has
    // checked and locked its row already, and repeating the state as a literal here let
    // PostgreSQL scan all of `operations_queued` for the id instead (it did so while the
    // statistics said that index was empty: ~80 buffers per claim); by id, the state is a
    // bound value.
    let due_by_id = |p: &mut Params<'q>| due("", &format!("state = {}", p.p(State::Queued.as_str())), &now_p);
    let by_id = matches!(target, Target::Id(_));
    let guard = match takes {
        Takes::Limited { max_running, max_per_tenant, .. } => {
            // A pause committed since the view was read holds it too.
            let mut guard = format!("{} AND NOT {}", due_by_id(&mut p), *PAUSE_HOLDS);
            // The state as a literal: `operations_running` (partial) serves the counts.
            let running_rows = state_is("r.", State::Running);
            for (max, same_tenant) in [(max_running, ""), (max_per_tenant, " AND r.tenant = operations.tenant")] {
                if let Some(max) = max {
                    guard += &format!(
                        " AND (SELECT COUNT(*) FROM operations r WHERE r.kind = operations.kind{same_tenant} \
                         AND {running_rows}) < {}",
                        p.p(i64::from(max))
                    );
                }
            }
            guard
        }
        Takes::Unpaused if by_id => format!("{} AND NOT {}", due_by_id(&mut p), *PAUSE_HOLDS),
        Takes::Unpaused => format!("NOT {}", *PAUSE_HOLDS),
        Takes::Orphan => format!(
            "state = {running} AND (lease_expires_at_ms IS NULL OR lease_expires_at_ms < {now_p} \
             OR lease_owner IS NOT NULL AND NOT EXISTS (SELECT 1 FROM worker_heartbeats w WHERE w.holder = operations.lease_owner \
                            AND w.seen_at_ms >= {}))",
            p.p(now - OWNER_SILENCE_MS)
        ),
    };
    // A takeover records the dead attempt in the history.
    let history = append_attempt(engine, &mut p, now, "lease_expired", Some(ErrorCode::LeaseExpired.as_str()), None);
    // SET expressions see the old row: a takeover of a running operation is recorded as
    // `lease_expired` while it runs again; a stale one from an earlier takeover is cleared
    // by an ordinary claim.
    let sql = format!(
        "UPDATE operations SET state = {running}, \
         phase = CASE WHEN {waiting} THEN {starting} ELSE phase END, \
         attempts = CASE WHEN state = {running} THEN {history} ELSE attempts END, \
         error_code = CASE WHEN state = {running} THEN {expired} WHEN error_code = {expired} THEN NULL ELSE error_code END, \
         error = CASE WHEN state = {running} THEN {expired_message} WHEN error_code = {expired} THEN NULL ELSE error END, \
         lease_token = {token_p}, lease_expires_at_ms = {lease_p}, lease_owner = {owner_p}, attempt = attempt + 1, \
         attempt_started_at_ms = {now_p}, version = version + 1, pushed_at_ms = NULL, \
         started_at_ms = COALESCE(started_at_ms, {now_p}), updated_at_ms = {now_p} \
         WHERE {row} AND {guard} RETURNING {COLUMNS}"
    );
    p.into_query(sql)
}

/// Claim what `target` names, in one statement. The rows of one statement share its
/// lease token: every fenced write matches the id and the token together.
async fn claim_rows(
    db: &Db,
    target: Target<'_>,
    owner: &str,
    lease_ms: i64,
    takes: Takes,
) -> StoreResult<Vec<Claimed>> {
    let now = now_ms();
    let token = ulid::Ulid::generate().to_string();
    let t = Transition::Claim { token: &token, lease_until_ms: now + lease_ms, owner };
    let statement = claim_statement(db.engine(), target, &t, now, takes);
    let rows = match (takes, db.engine()) {
        (Takes::Limited { kind, .. }, Engine::Postgres) => {
            let mut tx = db.begin_write().await?;
            query("SELECT pg_advisory_xact_lock(hashtext($1))")
                .bind(format!("context-ops claim {kind}"))
                .execute(&mut tx)
                .await?;
            let rows = statement.fetch_all::<OperationRow>(&mut tx).await?;
            tx.commit().await?;
            rows
        }
        _ => statement.fetch_all::<OperationRow>(db).await?,
    };
    Ok(rows
        .into_iter()
        .map(|operation| {
            let lease = Lease {
                operation_id: operation.id.clone(),
                tenant: operation.tenant.clone(),
                token: token.clone(),
                lease_ms,
                holds_barrier: operation.kind == ContextOperationKind::Delete,
            };
            let recovered = operation.recovered();
            Claimed { operation, lease, recovered }
        })
        .collect())
}

async fn claim_id(
    db: &Db,
    target: Target<'_>,
    owner: &str,
    lease_ms: i64,
    takes: Takes,
) -> StoreResult<Option<Claimed>> {
    Ok(claim_rows(db, target, owner, lease_ms, takes).await?.into_iter().next())
}

/// Claim up to `count` due operations of `kind` in `tenant`'s queue, from queue position
/// `from` on, that no pause holds, in one statement (claims combined: `combine.rs`).
pub(super) async fn claim_first_due(
    db: &Db,
    kind: ContextOperationKind,
    tenant: &str,
    from: Option<(i64, i64)>,
    count: i64,
    owner: &str,
    lease_ms: i64,
) -> StoreResult<Vec<Claimed>> {
    let target = Target::FirstDue { kind: kind.as_str(), tenant, from, count };
    claim_rows(db, target, owner, lease_ms, Takes::Unpaused).await
}

/// Claim operation `id` of `kind`, the scheduler's choice under concurrency limits: `None`
/// when it is no longer due, a pause holds it, or the kind's running operations (all
/// tenants', or its tenant's) have reached `limits` meanwhile (`Takes::Limited`).
pub async fn claim_chosen(
    db: &Db,
    kind: ContextOperationKind,
    id: &OperationId,
    owner: &str,
    lease_ms: i64,
    limits: &ClaimLimits,
) -> StoreResult<Option<Claimed>> {
    let takes = Takes::Limited {
        kind: kind.as_str(),
        max_running: limits.max_running,
        max_per_tenant: limits.max_running_per_tenant,
    };
    claim_id(db, Target::Id(id.as_str()), owner, lease_ms, takes).await
}

/// Recover operation `id` for worker `owner`: `running` with an expired lease or a silent
/// owner becomes `running` under a fresh lease. `None` when its holder is alive or it is no
/// longer running.
pub async fn recover(db: &Db, id: &OperationId, owner: &str, lease_ms: i64) -> StoreResult<Option<Claimed>> {
    claim_id(db, Target::Id(id.as_str()), owner, lease_ms, Takes::Orphan).await
}

/// Concurrency limits of one kind and tenant weights, from the configuration.
#[derive(Debug, Clone, Default)]
pub struct ClaimLimits {
    pub max_running: Option<u32>,
    pub max_running_per_tenant: Option<u32>,
    /// Weights of tenants other than 1.
    pub weights: Vec<(String, u32)>,
}

impl ClaimLimits {
    /// A concurrency limit applies to the kind (all tenants', or each tenant's).
    pub fn limited(&self) -> bool {
        self.max_running.is_some() || self.max_running_per_tenant.is_some()
    }
}

/// What [`claim_next`] did.
pub enum Next {
    /// Claimed this operation.
    Claimed(Box<Claimed>),
    /// Nothing may start now, and these queued operations' phase now says why (a pause or a
    /// concurrency limit holds them): changes to announce.
    Held(Vec<(OperationId, TenantKey)>),
    /// Nothing may start now.
    Nothing,
}

/// Claim the next operation of `kind` by fair share for worker `owner` (the core's
/// `schedule::pick`). Work held back by a pause or a concurrency limit gets the reason as
/// its phase and stays queued: the scheduler's head, and under a full limit also `named`,
/// the operation the delivery named (so each held operation says why once its own delivery
/// found the limit full).
pub async fn claim_next(
    db: &Db,
    kind: ContextOperationKind,
    owner: &str,
    lease_ms: i64,
    limits: &ClaimLimits,
    views: &ViewCache,
    named: Option<&OperationId>,
) -> StoreResult<Next> {
    let limited = limits.limited();
    if !limited && let Some(next) = claim_off_cached_view(db, kind, owner, lease_ms, limits, views).await? {
        return Ok(next);
    }
    // A lost race (another worker claimed the chosen head first) picks again.
    for _ in 0..8 {
        let now = now_ms();
        let view = view::fetch(db, kind, now).await?;
        let (queues, kind_limits) = view.queues(limits);
        let (tenants, decision) = (queues.len(), pick(&queues, &kind_limits));
        let chosen = match decision {
            Pick::Idle => None,
            Pick::Held { hold, head, .. } => {
                views.put(kind, view.clone());
                let held = hold_work(db, kind, head, named, hold).await?;
                return Ok(if held.is_empty() { Next::Nothing } else { Next::Held(held) });
            }
            Pick::Run { tenant, id } => Some((tenant.to_owned(), id.to_owned())),
        };
        drop(queues);
        let from = chosen.as_ref().and_then(|(tenant, _)| view.start(tenant));
        views.put(kind, view);
        let Some((tenant, id)) = chosen else { return Ok(Next::Nothing) };
        // Under a concurrency limit the chosen head itself is claimed, under the limits;
        // without one, concurrent workers take the tenant's next operations side by side.
        let claimed = if limited {
            claim_chosen(db, kind, &OperationId::from_stored(id.as_str()), owner, lease_ms, limits).await?
        } else {
            let target = Target::FirstDue { kind: kind.as_str(), tenant: &tenant, from, count: 1 };
            claim_id(db, target, owner, lease_ms, Takes::Unpaused).await?
        };
        if let Some(claimed) = claimed {
            record_claim(db, views, kind, &tenant, queue_position(&claimed.operation), tenants, now).await?;
            return Ok(Next::Claimed(Box::new(claimed)));
        }
    }
    Ok(Next::Nothing)
}

/// An unlimited kind's claim off this process's recent view (see `view.rs`): the chosen
/// tenant's first due operation (priority, then age), claimed together with the process's
/// other claims in flight (`combine.rs`). `None`: decide off a fresh view (a hold to write,
/// nothing due in the copy, or the copy proved stale).
async fn claim_off_cached_view(
    db: &Db,
    kind: ContextOperationKind,
    owner: &str,
    lease_ms: i64,
    limits: &ClaimLimits,
    views: &ViewCache,
) -> StoreResult<Option<Next>> {
    let now = now_ms();
    let view = views.get(db, kind, now).await?;
    let (queues, kind_limits) = view.queues(limits);
    let tenants = queues.len();
    let Pick::Run { tenant, .. } = pick(&queues, &kind_limits) else { return Ok(None) };
    if let Some(claimed) = views.claims.claim(db, kind, tenant, view.start(tenant), owner, lease_ms).await? {
        record_claim(db, views, kind, tenant, queue_position(&claimed.operation), tenants, now).await?;
        return Ok(Some(Next::Claimed(Box::new(claimed))));
    }
    views.forget(kind);
    Ok(None)
}
