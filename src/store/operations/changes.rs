//! Reading operation changes in commit order, for event streams: where the changes stand
//! now ([`head`]) and the next page after a position ([`after`]). The positions and why
//! they differ per engine: `context_jobs::operation::change_position`. The database stamps
//! every change (migration 9), so every writer's changes are here.

use sqlx::{Decode, Type};

use super::{COLUMNS, OperationRow};
use crate::store::engine::Params;
use crate::store::{Db, StoreError, StoreResult, query};
use context_jobs::contract::{ContextOperationKind, ContextOperationState};
use context_jobs::ids::TenantKey;
use context_jobs::operation::change_position::{ChangePosition, PgSnapshot};

/// Which changes a stream shows.
#[derive(Debug, Clone, Default)]
pub struct ChangeFilter {
    /// `None`: every tenant's (an admin's stream; the caller decides).
    pub tenant: Option<TenantKey>,
    pub kind: Option<ContextOperationKind>,
    /// Changes that leave the operation in this state.
    pub state: Option<ContextOperationState>,
}

/// One changed operation, as it is now, and the position just after it.
pub struct Change {
    pub row: OperationRow,
    pub position: ChangePosition,
}

/// A page of changes and the position after all of them.
pub struct ChangePage {
    pub changes: Vec<Change>,
    pub next: ChangePosition,
    /// Nothing is left to read after `next` now: wait for a change before reading again.
    pub caught_up: bool,
}

/// The current position: a stream starting here shows only changes committed from now on.
pub async fn head(db: &Db) -> StoreResult<ChangePosition> {
    match db {
        Db::Postgres(_) => {
            let text: String = query("SELECT pg_current_snapshot()::text").fetch_scalar(db).await?;
            let snapshot = PgSnapshot::parse(&text)
                .ok_or_else(|| StoreError::Other(anyhow::anyhow!("unexpected snapshot {text:?}")))?;
            Ok(ChangePosition::Snapshot { seen: snapshot, batch: None })
        }
        Db::Sqlite(_) => {
            let seq: i64 = query("SELECT seq FROM operation_change_clock WHERE id = 1").fetch_scalar(db).await?;
            Ok(ChangePosition::Seq(seq))
        }
    }
}

/// `Invalid` unless `position` is one of this engine's (a token from a deployment on the
/// other engine).
pub fn check(db: &Db, position: &ChangePosition) -> StoreResult<()> {
    match (db, position) {
        (Db::Sqlite(_), ChangePosition::Seq(_)) | (Db::Postgres(_), ChangePosition::Snapshot { .. }) => Ok(()),
        _ => Err(mismatch()),
    }
}

fn mismatch() -> StoreError {
    StoreError::Invalid("Last-Event-ID is not a position of this service's event streams".into())
}

/// A row of [`after`]'s statement: the change's stamp (a number or a transaction id, as
/// text), the statement's own snapshot (PostgreSQL), and the operation.
struct ChangedRow {
    change: String,
    snapshot: Option<String>,
    row: OperationRow,
}

impl<'r, R: sqlx::Row> sqlx::FromRow<'r, R> for ChangedRow
where
    OperationRow: sqlx::FromRow<'r, R>,
    &'static str: sqlx::ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    Option<String>: Decode<'r, R::Database> + Type<R::Database>,
{
    fn from_row(row: &'r R) -> Result<Self, sqlx::Error> {
        Ok(ChangedRow {
            change: row.try_get("change")?,
            snapshot: row.try_get("snapshot")?,
            row: OperationRow::from_row(row)?,
        })
    }
}

/// Up to `limit` changes after `from` that pass `filter`, oldest first. Each operation
/// appears once, as it is now (changes coalesce). A position of the other engine is
/// `Invalid`.
pub async fn after(db: &Db, filter: &ChangeFilter, from: &ChangePosition, limit: usize) -> StoreResult<ChangePage> {
    let mut p = Params::default();
    let sql = match (db, from) {
        (Db::Sqlite(_), ChangePosition::Seq(_)) => format!(
            "SELECT CAST(change_seq AS TEXT) AS change, NULL AS snapshot, {COLUMNS} FROM operations \
             WHERE {} ORDER BY change_seq LIMIT {}",
            clauses(&mut p, filter, from).join(" AND "),
            limit + 1
        ),
        (Db::Postgres(_), ChangePosition::Snapshot { .. }) => format!(
            "SELECT change_xid::text AS change, (SELECT pg_current_snapshot()::text) AS snapshot, {COLUMNS} \
             FROM operations WHERE {} ORDER BY change_xid, id LIMIT {}",
            clauses(&mut p, filter, from).join(" AND "),
            limit + 1
        ),
        _ => return Err(mismatch()),
    };
    let mut rows: Vec<ChangedRow> = p.into_query(sql).fetch_all(db).await?;
    let more = rows.len() > limit;
    rows.truncate(limit);
    match from {
        // Nothing after a position that is no batch under way: move it to where this
        // moment stands, when still nothing matches there. A stream whose filter (a kind,
        // a state) matched nothing for hours kept its old position, and every read walked
        // every change of the tenant since then.
        ChangePosition::Seq(_) | ChangePosition::Snapshot { batch: None, .. } if rows.is_empty() => {
            let next = advance(db, filter, from).await?.unwrap_or_else(|| from.clone());
            Ok(ChangePage { changes: Vec::new(), next, caught_up: true })
        }
        _ => page(from, rows, more),
    }
}

/// Where a stream at `from` that found nothing can move to: the position of this moment,
/// read in the same statement that checks nothing matching `filter` changed after `from`
/// (else `None`: read again).
async fn advance(db: &Db, filter: &ChangeFilter, from: &ChangePosition) -> StoreResult<Option<ChangePosition>> {
    let mut p = Params::default();
    let now = match db {
        Db::Postgres(_) => "pg_current_snapshot()::text",
        Db::Sqlite(_) => "CAST((SELECT seq FROM operation_change_clock WHERE id = 1) AS TEXT)",
    };
    let sql = format!(
        "SELECT {now}, CAST(CASE WHEN EXISTS (SELECT 1 FROM operations WHERE {}) THEN 1 ELSE 0 END AS BIGINT)",
        clauses(&mut p, filter, from).join(" AND ")
    );
    let (now, changed): (String, i64) = p.into_query(sql).fetch_one(db).await?;
    if changed != 0 {
        return Ok(None);
    }
    let bad = || StoreError::Other(anyhow::anyhow!("unexpected position {now:?}"));
    Ok(Some(match from {
        ChangePosition::Seq(_) => ChangePosition::Seq(now.parse().map_err(|_| bad())?),
        ChangePosition::Snapshot { .. } => {
            ChangePosition::Snapshot { seen: PgSnapshot::parse(&now).ok_or_else(bad)?, batch: None }
        }
    }))
}

/// The conditions of the changes after `from` that pass `filter`.
fn clauses(p: &mut Params<'_>, filter: &ChangeFilter, from: &ChangePosition) -> Vec<String> {
    let mut clauses = Vec::new();
    if let Some(t) = &filter.tenant {
        clauses.push(format!("tenant = {}", p.p(t.as_str().to_string())));
    }
    if let Some(kind) = filter.kind {
        clauses.push(format!("kind = {}", p.p(kind.as_str())));
    }
    if let Some(state) = filter.state {
        clauses.push(format!("state = {}", p.p(state.as_str())));
    }
    match from {
        ChangePosition::Seq(seq) => clauses.push(format!("change_seq > {}", p.p(*seq))),
        ChangePosition::Snapshot { seen, batch } => {
            let seen_p = p.p(seen.as_str().to_string());
            clauses.push(format!("change_xid >= pg_snapshot_xmin({seen_p}::text::pg_snapshot)"));
            clauses.push(format!("NOT pg_visible_in_snapshot(change_xid, {seen_p}::text::pg_snapshot)"));
            if let Some((batch, xid, id)) = batch {
                let batch_p = p.p(batch.as_str().to_string());
                clauses.push(format!("pg_visible_in_snapshot(change_xid, {batch_p}::text::pg_snapshot)"));
                let (xid_p, id_p) = (p.p(xid.to_string()), p.p(id.clone()));
                clauses.push(format!("(change_xid, id) > ({xid_p}::text::xid8, {id_p})"));
            }
        }
    }
    clauses
}

/// Positions for a page read after `from`: see `ChangePosition`.
fn page(from: &ChangePosition, rows: Vec<ChangedRow>, more: bool) -> StoreResult<ChangePage> {
    let bad = |what: &str, text: &str| StoreError::Other(anyhow::anyhow!("unexpected {what} {text:?}"));
    let Some(last) = rows.last() else {
        // Nothing (more) in a batch under way: the batch is done, its snapshot seen.
        let next = match from {
            ChangePosition::Snapshot { batch: Some((batch, ..)), .. } => {
                ChangePosition::Snapshot { seen: batch.clone(), batch: None }
            }
            from => from.clone(),
        };
        return Ok(ChangePage { changes: Vec::new(), next, caught_up: false });
    };
    let (next, changes) = match from {
        ChangePosition::Seq(_) => {
            let seq_of = |r: &ChangedRow| r.change.parse::<i64>().map_err(|_| bad("change number", &r.change));
            let next = ChangePosition::Seq(seq_of(last)?);
            let changes = rows
                .into_iter()
                .map(|r| Ok(Change { position: ChangePosition::Seq(seq_of(&r)?), row: r.row }))
                .collect::<StoreResult<Vec<_>>>()?;
            (next, changes)
        }
        ChangePosition::Snapshot { seen, batch } => {
            // A batch under way keeps its snapshot; a new one is this statement's.
            let batch = match batch {
                Some((batch, ..)) => batch.clone(),
                None => {
                    let text = last.snapshot.as_deref().unwrap_or_default();
                    PgSnapshot::parse(text).ok_or_else(|| bad("snapshot", text))?
                }
            };
            let within = |r: &ChangedRow| -> StoreResult<ChangePosition> {
                let xid = r.change.parse::<u64>().map_err(|_| bad("transaction id", &r.change))?;
                Ok(ChangePosition::Snapshot {
                    seen: seen.clone(),
                    batch: Some((batch.clone(), xid, r.row.id.to_string())),
                })
            };
            // The batch is done once a page comes back short: its snapshot is seen.
            let next = if more { within(last)? } else { ChangePosition::Snapshot { seen: batch.clone(), batch: None } };
            let changes = rows
                .into_iter()
                .map(|r| Ok(Change { position: within(&r)?, row: r.row }))
                .collect::<StoreResult<_>>()?;
            (next, changes)
        }
    };
    Ok(ChangePage { changes, next, caught_up: false })
}
