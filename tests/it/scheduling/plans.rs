//! The scheduler's reads are served by its partial indexes (migration 14) whatever the
//! table's statistics say. Analyzed while drained (every row finished) and then handed a
//! burst, PostgreSQL used to read the queued rows through `operations_dispatch` and a
//! filter — a pass over the whole backlog per read. Both engines' plans are checked.

use crate::harness::{Backend, fresh_database};
use context_ops::store::operations::transitions::scheduler_reads;
use context_ops::store::{Db, Engine, query};
use sqlx::AssertSqlSafe;

backend_tests!(backend: scheduler_reads_use_the_queue_indexes_after_a_burst);

/// Rows `from..to` of `tenant` in `state` (delete operations).
async fn rows(db: &Db, state: &str, tenant: &str, from: i64, to: i64) {
    query(
        "WITH RECURSIVE n(i) AS (SELECT CAST($1 AS BIGINT) UNION ALL SELECT i + 1 FROM n WHERE i + 1 < $2) \
         INSERT INTO operations (id, tenant, kind, state, phase, request, request_fingerprint, created_at_ms, updated_at_ms) \
         SELECT 'op' || i, $3, 'delete', $4, $4, '{}', 'f', i, i FROM n",
    )
    .bind(from)
    .bind(to)
    .bind(tenant)
    .bind(state)
    .execute(db)
    .await
    .unwrap();
}

/// The plan of `sql` with its binds (kind, now, tenant, queue position), one line per node.
async fn plan(db: &Db, sql: &str) -> Vec<String> {
    let binds = (1..=5).filter(|n| sql.contains(&format!("${n}"))).count();
    let explain = match db.engine() {
        Engine::Postgres => format!("EXPLAIN {sql}"),
        Engine::Sqlite => format!("EXPLAIN QUERY PLAN {sql}"),
    };
    let q = query(AssertSqlSafe(explain)).bind("delete").bind(i64::MAX / 2);
    let q = if binds >= 3 { q.bind("a") } else { q };
    // A queue position half way through the burst.
    let q = if binds == 5 { q.bind(-5i64).bind(2_000i64) } else { q };
    match db.engine() {
        Engine::Postgres => q.fetch_all::<(String,)>(db).await.unwrap().into_iter().map(|r| r.0).collect(),
        Engine::Sqlite => q.fetch_all::<(i64, i64, i64, String)>(db).await.unwrap().into_iter().map(|r| r.3).collect(),
    }
}

async fn scheduler_reads_use_the_queue_indexes_after_a_burst(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&fresh_database(backend, dir.path()).await, 4).await.unwrap();
    db.migrate().await.unwrap();
    rows(&db, "succeeded", "a", 0, 500).await;
    query("ANALYZE operations").execute(&db).await.unwrap();
    rows(&db, "queued", "a", 500, 3_500).await;
    rows(&db, "queued", "b", 3_500, 3_501).await;
    rows(&db, "running", "a", 3_501, 3_510).await;
    for sql in scheduler_reads() {
        let plan = plan(&db, sql).await;
        let text = plan.join("\n");
        assert!(text.contains("operations_queued"), "the queued rows' index serves it:\n{text}");
        if sql.contains("$5") && db.engine() == Engine::Postgres {
            // The position bounds the index range: the entries of claimed operations before
            // it (dead until vacuum) are not walked. (SQLite updates its indexes in place:
            // it has no such entries, and checks the position as a filter.)
            let bound = plan.iter().any(|l| l.contains("Index Cond") && l.contains("ROW("));
            assert!(bound, "the queue position bounds the index scan:\n{text}");
        }
        for line in &plan {
            // Every access to `operations` goes through one of the scheduler's indexes, or
            // the primary key for one id (the view joins its heads' rows).
            // (PostgreSQL: `… on operations o`; SQLite: `SEARCH o USING …`, `SCAN r`.)
            let words: Vec<&str> = line.split_whitespace().collect();
            let touches = line.contains(" on operations")
                || matches!(words.as_slice(), [verb, alias, ..]
                    if ["SEARCH", "SCAN"].contains(verb) && ["operations", "o", "r", "h"].contains(alias));
            let by_id = (line.contains("operations_pkey") || line.contains("sqlite_autoindex_operations_1"))
                || (line.contains("PRIMARY KEY") && line.contains("id=?"));
            let served = line.contains("operations_queued") || line.contains("operations_running") || by_id;
            assert!(!touches || served, "a read of `operations` outside the queue indexes: {line}\n{text}");
        }
    }
}
