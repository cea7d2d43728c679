//! Reads of operation rows: one operation and its version (the long-poll's cheap check),
//! scoped by tenant, and the cursor-paged listing (one tenant's, or every tenant's for an
//! admin).

use sqlx::AssertSqlSafe;

use super::{COLUMNS, OperationRow};
use crate::store::engine::Params;
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

#[derive(Default)]
pub struct ListFilter<'a> {
    /// `None`: every tenant (admins only; the caller decides).
    pub tenant: Option<&'a TenantKey>,
    pub kind: Option<ContextOperationKind>,
    pub state: Option<ContextOperationState>,
    /// Created at or after / strictly before (epoch ms).
    pub created_after_ms: Option<i64>,
    pub created_before_ms: Option<i64>,
    /// Ids starting with this (upper-case ULID characters).
    pub id_prefix: Option<&'a str>,
    /// Rows strictly older than this `(created_at_ms, id)` position.
    pub before: Option<(i64, &'a OperationId)>,
    pub limit: usize,
}

/// Operations matching `filter`, newest first. Returns one more row than `limit` when
/// more exist.
pub async fn list(db: &Db, filter: &ListFilter<'_>) -> StoreResult<Vec<OperationRow>> {
    let mut p = Params::default();
    let mut clauses = vec!["1 = 1".to_string()];
    if let Some(t) = filter.tenant {
        clauses.push(format!("tenant = {}", p.p(t.as_str())));
    }
    if let Some(kind) = filter.kind {
        clauses.push(format!("kind = {}", p.p(kind.as_str())));
    }
    if let Some(state) = filter.state {
        clauses.push(format!("state = {}", p.p(state.as_str())));
    }
    if let Some(after) = filter.created_after_ms {
        clauses.push(format!("created_at_ms >= {}", p.p(after)));
    }
    if let Some(before) = filter.created_before_ms {
        clauses.push(format!("created_at_ms < {}", p.p(before)));
    }
    if let Some(prefix) = filter.id_prefix {
        // ULID characters never need LIKE escapes (the caller checks).
        clauses.push(format!("id LIKE {}", p.p(format!("{prefix}%"))));
    }
    if let Some((created, id)) = filter.before {
        let (at, id) = (p.p(created), p.p(id.as_str()));
        clauses.push(format!("(created_at_ms < {at} OR (created_at_ms = {at} AND id < {id}))"));
    }
    let sql = format!(
        "SELECT {COLUMNS} FROM operations WHERE {} ORDER BY created_at_ms DESC, id DESC LIMIT {}",
        clauses.join(" AND "),
        filter.limit + 1
    );
    Ok(p.into_query(sql).fetch_all(db).await?)
}
