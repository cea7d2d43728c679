//! What the dispatcher and the maintenance loop ask of the operations table: operations to
//! push again, the push mark, forgetting and pruning terminal operations, and the census
//! behind the gauges. State names come from the core's machine, never from literals here.

use sqlx::AssertSqlSafe;

use super::state_is;
use crate::store::engine::Params;
use crate::store::{Db, StoreError, StoreResult, now_ms, placeholders, query};
use context_jobs::artifact;
use context_jobs::contract::{ContextOperationKind, ContextOperationState as State};
use context_jobs::ids::{OperationId, TenantKey};
use context_jobs::operation::machine::TERMINAL;
use context_jobs::operation::schedule::phase::WAITING_FOR_CONCURRENCY;

/// An operation the dispatcher should push again.
pub struct Dispatchable {
    pub id: OperationId,
    pub kind: ContextOperationKind,
    /// Its worker's lease expired: pushing it recovers an orphan.
    pub orphaned: bool,
}

/// `state IN ($start, …)` over the terminal states, and their names to bind.
fn terminal_in(start: usize) -> (String, impl Iterator<Item = &'static str>) {
    (format!("state IN ({})", placeholders(start, TERMINAL.len())), TERMINAL.iter().map(|s| s.as_str()))
}

/// What a dispatcher round pushes again besides what was never pushed.
#[derive(Debug, Clone, Default)]
pub struct Repush {
    /// A queued operation pushed this long ago and not started is pushed again (a lost push).
    pub after_ms: i64,
    /// Kinds under a concurrency limit. Their held work (phase `waiting_for_concurrency`) is
    /// not pushed again one by one: a delivery of a limited kind claims by fair share, not
    /// the operation it names, and a worker that finishes one claims the next — so one
    /// operation per kind is pushed as a wake-up, at most once per `wake_every_ms`, for a
    /// slot freed where no worker went on (a shutdown, a claim that failed, lost races).
    /// Pushed again by age, thousands of held operations took every round's places from
    /// orphans and new work, and each delivery read the scheduler's view for nothing.
    pub limited: Vec<ContextOperationKind>,
    pub wake_every_ms: i64,
}

/// Due operations that were never pushed (or not for `repush.after_ms`), and running ones
/// whose lease expired, those never pushed (and orphans, whose claim cleared the mark)
/// first, then oldest first; and the wake-ups of [`Repush::limited`]. Each returned row is
/// marked pushed by the same statement that finds it (PostgreSQL: rows another dispatcher
/// is marking are skipped; SQLite has one writer), so concurrent dispatchers do not push
/// the same operation twice in one round. One statement: marking 500 rows one
/// compare-and-set at a time held the first push of a round back by hundreds of
/// milliseconds.
pub async fn take_dispatchable(db: &Db, repush: &Repush, limit: usize) -> StoreResult<Vec<Dispatchable>> {
    let now = now_ms();
    let lock = if db.engine() == crate::store::Engine::Postgres { " FOR UPDATE SKIP LOCKED" } else { "" };
    let mut p = Params::default();
    let (now_p, stale_p, limit_p) = (p.p(now), p.p(now - repush.after_ms), p.p(limit as i64));
    let (queued, running) = (state_is("", State::Queued), state_is("", State::Running));
    let held = p.p(WAITING_FOR_CONCURRENCY);
    let limited: Vec<String> = repush.limited.iter().map(|k| p.p(k.as_str())).collect();
    let not_held = if limited.is_empty() {
        String::new()
    } else {
        format!(" AND NOT (phase = {held} AND pushed_at_ms IS NOT NULL AND kind IN ({}))", limited.join(", "))
    };
    // A running operation is an orphan when its lease expired or its owner went silent.
    // Queued work a pause holds is left to the resume, whatever its phase says; work still
    // marked `paused` with no pause left (a submission that saw a pause its resume committed
    // beside) is pushed.
    let sql = format!(
        "UPDATE operations SET pushed_at_ms = {now_p} WHERE id IN (SELECT id FROM operations WHERE \
         (({queued} AND not_before_ms <= {now_p} AND NOT {}{not_held}) \
          OR ({running} AND (lease_expires_at_ms < {now_p} OR lease_owner IS NOT NULL AND NOT EXISTS (SELECT 1 FROM worker_heartbeats w \
              WHERE w.holder = operations.lease_owner AND w.seen_at_ms >= {})))) \
         AND (pushed_at_ms IS NULL OR pushed_at_ms < {stale_p}) \
         ORDER BY pushed_at_ms IS NOT NULL, created_at_ms LIMIT {limit_p}{lock}) \
         RETURNING id, kind, state, created_at_ms",
        *super::transitions::PAUSE_HOLDS,
        p.p(now - super::transitions::OWNER_SILENCE_MS),
    );
    let mut taken: Vec<(String, String, String, i64)> = p.into_query(sql).fetch_all(db).await?;
    if !repush.limited.is_empty() {
        taken.extend(take_wake_ups(db, repush, now).await?);
    }
    // RETURNING keeps no order.
    taken.sort_by_key(|row| row.3);
    Ok(taken
        .into_iter()
        .filter_map(|(id, kind, state, _)| {
            let kind = ContextOperationKind::parse(&kind)?;
            Some(Dispatchable { id: OperationId::from_stored(id), kind, orphaned: state == State::Running.as_str() })
        })
        .collect())
}

/// One held operation per limited kind, pushed again when none of the kind's held work was
/// pushed in the last `wake_every_ms` (the mark compared again on the row's newest version:
/// concurrent dispatchers do not push the same one).
async fn take_wake_ups(db: &Db, repush: &Repush, now: i64) -> StoreResult<Vec<(String, String, String, i64)>> {
    let mut p = Params::default();
    let (now_p, since_p, held) = (p.p(now), p.p(now - repush.wake_every_ms), p.p(WAITING_FOR_CONCURRENCY));
    let kinds: Vec<String> =
        repush.limited.iter().map(|k| format!("SELECT CAST({} AS TEXT) AS kind", p.p(k.as_str()))).collect();
    let sql = format!(
        "UPDATE operations SET pushed_at_ms = {now_p} WHERE id IN (SELECT (SELECT o.id FROM operations o \
         WHERE o.kind = k.kind AND {} AND o.phase = {held} AND o.not_before_ms <= {now_p} \
         AND o.pushed_at_ms < {since_p} AND NOT {} LIMIT 1) FROM ({}) k \
         WHERE NOT EXISTS (SELECT 1 FROM operations x WHERE x.kind = k.kind AND {} AND x.phase = {held} \
         AND x.pushed_at_ms >= {since_p})) AND pushed_at_ms < {since_p} \
         RETURNING id, kind, state, created_at_ms",
        state_is("o.", State::Queued),
        super::transitions::pause_holds("o.kind", "o.tenant"),
        kinds.join(" UNION ALL "),
        state_is("x.", State::Queued),
    );
    Ok(p.into_query(sql).fetch_all(db).await?)
}

/// A page of `kind`'s queued, due operations that no pause holds (of `tenant`, or of every
/// tenant), after `after` in `(created_at_ms, id)` order: what a resume pushes.
pub async fn resumable_page(
    db: &Db,
    kind: ContextOperationKind,
    tenant: Option<&TenantKey>,
    after: &(i64, String),
    limit: i64,
) -> StoreResult<Vec<(i64, OperationId)>> {
    let sql = format!(
        "SELECT created_at_ms, id FROM operations WHERE kind = $1 AND {} AND not_before_ms <= $2 \
         AND ($3 = '' OR tenant = $3) AND (created_at_ms > $4 OR created_at_ms = $4 AND id > $5) \
         AND NOT {} ORDER BY created_at_ms, id LIMIT $6",
        super::state_is("", State::Queued),
        *super::transitions::PAUSE_HOLDS
    );
    let rows: Vec<(i64, String)> = query(AssertSqlSafe(sql))
        .bind(kind.as_str())
        .bind(now_ms())
        .bind(tenant.map_or("", |t| t.as_str()))
        .bind(after.0)
        .bind(after.1.as_str())
        .bind(limit)
        .fetch_all(db)
        .await?;
    Ok(rows.into_iter().map(|(at, id)| (at, OperationId::from_stored(id))).collect())
}

/// Submissions insert rows already marked pushed; a failed push clears the mark so the
/// next dispatcher round pushes it.
pub async fn clear_pushed(db: &Db, id: &OperationId) -> StoreResult<()> {
    query("UPDATE operations SET pushed_at_ms = NULL WHERE id = $1 AND state = $2")
        .bind(id.as_str())
        .bind(State::Queued.as_str())
        .execute(db)
        .await?;
    Ok(())
}

/// Clear the push mark of `ids` (a dispatcher push that failed): the next round takes them.
pub async fn unmark(db: &Db, ids: &[&str]) -> StoreResult<()> {
    for id in ids {
        query("UPDATE operations SET pushed_at_ms = NULL WHERE id = $1").bind(*id).execute(db).await?;
    }
    Ok(())
}

/// Clear the push mark of a running operation (a recovery found it still owned).
pub async fn unmark_running(db: &Db, id: &OperationId) -> StoreResult<()> {
    query("UPDATE operations SET pushed_at_ms = NULL WHERE id = $1 AND state = $2")
        .bind(id.as_str())
        .bind(State::Running.as_str())
        .execute(db)
        .await?;
    Ok(())
}

/// Clear the push mark of every unfinished operation (the queue lost its messages); how
/// many were marked.
pub async fn unmark_all(db: &Db) -> StoreResult<u64> {
    query("UPDATE operations SET pushed_at_ms = NULL WHERE state IN ($1, $2) AND pushed_at_ms IS NOT NULL")
        .bind(State::Queued.as_str())
        .bind(State::Running.as_str())
        .execute(db)
        .await
        .map_err(Into::into)
}

/// Forget a terminal operation. Non-terminal ones must be cancelled first (409).
pub async fn forget(db: &Db, tenant: &TenantKey, id: &OperationId) -> StoreResult<()> {
    if forget_terminal(db, Some(tenant), &[id.as_str()]).await? == 1 {
        return Ok(());
    }
    match super::get(db, tenant, id).await? {
        Some(_) => Err(StoreError::Conflict("only a terminal operation can be forgotten; cancel it first".into())),
        None => Err(StoreError::NotFound(format!("operation {id} not found"))),
    }
}

/// Delete the terminal operations among `ids` (of `tenant`; `None`: any), with the
/// unfinished artifacts their exports kept for a retry; how many operations went.
pub async fn forget_terminal<'q>(db: &Db, tenant: Option<&'q TenantKey>, ids: &[&'q str]) -> StoreResult<u64> {
    let mut tx = db.begin_write().await?;
    let mut p = Params::default();
    let (origin_p, state_p) = (p.p(artifact::origin::EXPORT), p.p(artifact::state::WRITING));
    let ops = terminal_among(&mut p, tenant, ids);
    let sql = format!(
        "DELETE FROM artifacts WHERE origin = {origin_p} AND state = {state_p} \
         AND operation_id IN (SELECT id FROM operations WHERE {ops})"
    );
    p.into_query(sql).execute(&mut tx).await?;
    let mut p = Params::default();
    let ops = terminal_among(&mut p, tenant, ids);
    let deleted = p.into_query(format!("DELETE FROM operations WHERE {ops}")).execute(&mut tx).await?;
    tx.commit().await?;
    Ok(deleted)
}

/// `id IN (…) AND state IN (terminal) [AND tenant = …]`.
fn terminal_among<'q>(p: &mut Params<'q>, tenant: Option<&'q TenantKey>, ids: &[&'q str]) -> String {
    let mut sql = format!("{} AND {}", p.any_of("id", ids), p.state_in(TERMINAL));
    if let Some(t) = tenant {
        sql += &format!(" AND tenant = {}", p.p(t.as_str()));
    }
    sql
}

/// Delete terminal operations finished before `before_ms`.
pub async fn prune(db: &Db, before_ms: i64) -> StoreResult<u64> {
    let (terminal, states) = terminal_in(2);
    let sql = format!("DELETE FROM operations WHERE {terminal} AND finished_at_ms < $1");
    Ok(states.fold(query(AssertSqlSafe(sql)).bind(before_ms), |q, s| q.bind(s)).execute(db).await?)
}

/// Counts by kind and state, and the oldest queued operation's creation time (all
/// tenants: these feed unlabelled-by-tenant gauges).
pub async fn census(db: &Db) -> StoreResult<(Vec<(String, String, i64)>, Option<i64>)> {
    let counts = query("SELECT kind, state, COUNT(*) FROM operations GROUP BY kind, state").fetch_all(db).await?;
    let oldest: Option<i64> = query("SELECT MIN(created_at_ms) FROM operations WHERE state = $1")
        .bind(State::Queued.as_str())
        .fetch_scalar(db)
        .await?;
    Ok((counts, oldest))
}
