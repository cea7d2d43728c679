//! Reads of operation rows, every one scoped by tenant: one operation, its version (the
//! long-poll's cheap check), and the cursor-paged listing.

use sqlx::AssertSqlSafe;

use super::{COLUMNS, OperationRow};
use crate::store::{Db, StoreResult, query};
use context_jobs::contract::{ContextOperationKind, ContextOperationState};
use context_jobs::ids::{OperationId, TenantKey};

pub async fn get(db: &Db, tenant: &TenantKey, id: &OperationId) -> StoreResult<Option<OperationRow>> {
    let sql = format!("SELECT {COLUMNS} FROM operations WHERE id = $1 AND tenant = $2");
    Ok(query(AssertSqlSafe(sql)).bind(id.as_str()).bind(tenant.as_str()).fetch_optional(db).await?)
}

/// The version of an operation, for long-poll waits (cheap, indexed by primary key).
pub async fn version(db: &Db, tenant: &TenantKey, id: &OperationId) -> StoreResult<Option<i64>> {
    Ok(query("SELECT version FROM operations WHERE id = $1 AND tenant = $2")
        .bind(id.as_str())
        .bind(tenant.as_str())
        .fetch_optional_scalar(db)
        .await?)
}

pub struct ListFilter<'a> {
    pub kind: Option<ContextOperationKind>,
    pub state: Option<ContextOperationState>,
    /// Rows strictly older than this `(created_at_ms, id)` position.
    pub before: Option<(i64, &'a OperationId)>,
    pub limit: usize,
}

/// A tenant's operations, newest first. Returns one more row than `limit` when more exist.
pub async fn list(db: &Db, tenant: &TenantKey, filter: &ListFilter<'_>) -> StoreResult<Vec<OperationRow>> {
    let mut sql = format!("SELECT {COLUMNS} FROM operations WHERE tenant = $1");
    let mut n = 1;
    if filter.kind.is_some() {
        n += 1;
        sql.push_str(&format!(" AND kind = ${n}"));
    }
    if filter.state.is_some() {
        n += 1;
        sql.push_str(&format!(" AND state = ${n}"));
    }
    if filter.before.is_some() {
        let (at, id) = (n + 1, n + 2);
        sql.push_str(&format!(" AND (created_at_ms < ${at} OR (created_at_ms = ${at} AND id < ${id}))"));
    }
    sql.push_str(&format!(" ORDER BY created_at_ms DESC, id DESC LIMIT {}", filter.limit + 1));
    let mut q = query(AssertSqlSafe(sql)).bind(tenant.as_str());
    if let Some(kind) = filter.kind {
        q = q.bind(kind.as_str());
    }
    if let Some(state) = filter.state {
        q = q.bind(state.as_str());
    }
    if let Some((created, id)) = filter.before {
        q = q.bind(created).bind(id.as_str());
    }
    Ok(q.fetch_all(db).await?)
}
