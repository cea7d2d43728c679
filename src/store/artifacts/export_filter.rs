//! The SQL of an export filter (`context_jobs::contract::ExportFilter`): one predicate
//! over `conversation_id` and `created_at_ms`, columns both `messages` and
//! `context_entries` have, so messages and entries are filtered by the same text. Values
//! are written as literals, because PostgreSQL's `COPY (SELECT …)` takes no parameters;
//! a literal can hold any text but NUL, which every input refuses at submission.

use sqlx::AssertSqlSafe;

use crate::store::{Db, Engine, StoreResult, query};
use context_jobs::contract::ExportFilter;
use context_jobs::ids::TenantKey;

/// A string literal the engine reads back as `s`: on PostgreSQL the `E'…'` form (whatever
/// `standard_conforming_strings` says) with backslashes and quotes doubled; on SQLite
/// quotes doubled (backslash is not special there).
pub fn literal(engine: Engine, s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 3);
    out.push_str(if engine == Engine::Postgres { "E'" } else { "'" });
    for c in s.chars() {
        match c {
            '\\' if engine == Engine::Postgres => out.push_str("\\\\"),
            '\'' => out.push_str("''"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// ` AND …` for every part of `filter` (empty for none), for a query over the tenant's
/// `messages` or `context_entries`.
pub fn predicate(engine: Engine, tenant: &TenantKey, filter: &ExportFilter) -> String {
    let lit = |s: &str| literal(engine, s);
    let mut sql = String::new();
    if !filter.conversation_ids.is_empty() {
        let ids: Vec<String> = filter.conversation_ids.iter().map(|c| lit(c)).collect();
        sql.push_str(&format!(" AND conversation_id IN ({})", ids.join(", ")));
    }
    if let Some(agent) = &filter.agent_id {
        sql.push_str(&format!(
            " AND conversation_id IN (SELECT conversation_id FROM conversations WHERE tenant = {} AND agent_id = {})",
            lit(tenant.as_str()),
            lit(agent)
        ));
    }
    if let Some(from) = filter.from_ms {
        sql.push_str(&format!(" AND created_at_ms >= {from}"));
    }
    if let Some(to) = filter.to_ms {
        sql.push_str(&format!(" AND created_at_ms < {to}"));
    }
    sql
}

/// How many messages `filter` selects: a filtered export's expected total (as the
/// conversation counters are an unfiltered one's; it grows as entries are written).
pub async fn count_messages(db: &Db, tenant: &TenantKey, filter: &ExportFilter) -> StoreResult<i64> {
    let and = predicate(db.engine(), tenant, filter);
    let sql = format!("SELECT CAST(count(*) AS BIGINT) FROM messages WHERE tenant = $1{and}");
    Ok(query(AssertSqlSafe(sql)).bind(tenant.as_str()).fetch_scalar(db).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_predicates() {
        assert_eq!(literal(Engine::Postgres, r"a'b\c"), r"E'a''b\\c'");
        assert_eq!(literal(Engine::Sqlite, r"a'b\c"), r"'a''b\c'");
        let t = TenantKey::new("t", "p");
        assert_eq!(predicate(Engine::Sqlite, &t, &ExportFilter::default()), "");
        let f = ExportFilter {
            conversation_ids: vec!["c1".into(), "o'k".into()],
            agent_id: Some("a".into()),
            from_ms: Some(5),
            to_ms: Some(9),
        };
        assert_eq!(
            predicate(Engine::Sqlite, &t, &f),
            " AND conversation_id IN ('c1', 'o''k') AND conversation_id IN (SELECT conversation_id FROM \
             conversations WHERE tenant = 't/p' AND agent_id = 'a') AND created_at_ms >= 5 AND created_at_ms < 9"
        );
    }
}
