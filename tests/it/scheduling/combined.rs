//! Claims combined (`transitions/combine.rs`): claims that a process's worker slots make
//! off its cached view while one of the same kind is in flight wait for it, and then go
//! to the database in one statement. The test holds the first claim's statement on a
//! lock (readers pass), lets seven more arrive, and reads the result off the lease
//! tokens: the operations one statement claims share its token.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use context_jobs::contract::ContextOperationKind;
use context_ops::store::operations::transitions::{ClaimLimits, Next, ViewCache, claim_next};
use context_ops::store::{Db, query};
use sqlx::Connection as _;

use crate::harness::wait::poll_until;
use crate::harness::{Backend, fresh_database};

backend_tests!(backend: claims_arriving_together_share_one_statement, a_claim_nobody_waits_for_goes_back_to_the_queue);

const DELETE: ContextOperationKind = ContextOperationKind::Delete;

/// A transaction that blocks every claim statement (they write `operations`) and no read.
enum Blocker {
    Postgres(sqlx::PgConnection),
    Sqlite(sqlx::SqliteConnection),
}

impl Blocker {
    async fn hold(url: &str, backend: Backend) -> Blocker {
        match backend {
            Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
                sqlx::raw_sql("BEGIN; LOCK TABLE operations IN EXCLUSIVE MODE").execute(&mut conn).await.unwrap();
                Blocker::Postgres(conn)
            }
            Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
                sqlx::raw_sql("BEGIN IMMEDIATE").execute(&mut conn).await.unwrap();
                Blocker::Sqlite(conn)
            }
        }
    }

    async fn release(self) {
        match self {
            Blocker::Postgres(mut conn) => sqlx::raw_sql("COMMIT").execute(&mut conn).await.map(drop).unwrap(),
            Blocker::Sqlite(mut conn) => sqlx::raw_sql("COMMIT").execute(&mut conn).await.map(drop).unwrap(),
        }
    }
}

/// A fresh database with ten queued deletes of one tenant, `op101` … `op110` in queue order.
async fn ten_queued(backend: Backend, dir: &std::path::Path) -> (String, Db) {
    let url = fresh_database(backend, dir).await;
    let db = Db::connect(&url, 4).await.unwrap();
    db.migrate().await.unwrap();
    query(
        "WITH RECURSIVE n(i) AS (SELECT CAST(1 AS BIGINT) UNION ALL SELECT i + 1 FROM n WHERE i < 10) \
         INSERT INTO operations (id, tenant, kind, state, phase, request, request_fingerprint, created_at_ms, updated_at_ms) \
         SELECT 'op' || (100 + i), 'acme/prod', 'delete', 'queued', 'queued', '{}', 'f', i, i FROM n",
    )
    .execute(&db)
    .await
    .unwrap();
    (url, db)
}

/// One claim by worker slot of process `worker-1`: the operation's id and lease token.
async fn claim(views: Arc<ViewCache>, db: Db) -> (String, String) {
    match claim_next(&db, DELETE, "worker-1", 15_000, &ClaimLimits::default(), &views, None).await.unwrap() {
        Next::Claimed(claimed) => (claimed.operation.id.as_str().to_owned(), claimed.lease.token),
        _ => panic!("a claim with operations queued found none"),
    }
}

/// Until `n` claims wait behind the one in flight.
async fn until_waiting(views: &ViewCache, n: usize) {
    poll_until(&format!("{n} claims waiting behind one in flight"), Duration::from_secs(10), || async {
        match views.claims_waiting(DELETE) {
            Some(waiting) if waiting == n => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// Ten queued operations and a first claim whose statement waits on a lock the test holds.
struct InFlight {
    db: Db,
    views: Arc<ViewCache>,
    blocker: Blocker,
    first: tokio::task::JoinHandle<(String, String)>,
    _dir: tempfile::TempDir,
}

async fn first_claim_in_flight(backend: Backend) -> InFlight {
    let dir = tempfile::tempdir().unwrap();
    let (url, db) = ten_queued(backend, dir.path()).await;
    let views = Arc::new(ViewCache::default());
    let blocker = Blocker::hold(&url, backend).await;
    let first = tokio::spawn(claim(views.clone(), db.clone()));
    until_waiting(&views, 0).await;
    InFlight { db, views, blocker, first, _dir: dir }
}

async fn claims_arriving_together_share_one_statement(backend: Backend) {
    let InFlight { db, views, blocker, first, _dir } = first_claim_in_flight(backend).await;
    // The others arrive behind the first.
    let others: Vec<_> = (0..7).map(|_| tokio::spawn(claim(views.clone(), db.clone()))).collect();
    until_waiting(&views, 7).await;
    assert!(!first.is_finished(), "the first claim went through the lock");
    blocker.release().await;

    let first = first.await.unwrap();
    let mut claims = vec![first.clone()];
    for other in others {
        claims.push(other.await.unwrap());
    }
    let mut by_token: HashMap<String, Vec<String>> = HashMap::new();
    for (id, token) in &claims {
        by_token.entry(token.clone()).or_default().push(id.clone());
    }
    let mut sizes: Vec<usize> = by_token.values().map(Vec::len).collect();
    sizes.sort();
    assert_eq!(sizes, [1, 7], "statements and what each claimed: {by_token:?}");
    // Queue order: the first claim took the head, the seven the next seven.
    assert_eq!(first.0, "op101", "{claims:?}");
    let mut ids: Vec<String> = claims.iter().map(|(id, _)| id.clone()).collect();
    ids.sort();
    assert_eq!(ids, (101..=108).map(|i| format!("op{i}")).collect::<Vec<_>>());
    let running: i64 = query("SELECT COUNT(*) FROM operations WHERE state = 'running' AND lease_owner = 'worker-1'")
        .fetch_scalar(&db)
        .await
        .unwrap();
    assert_eq!(running, 8);
}

/// A worker slot that stops waiting (its task dropped) while its claim waits: what the
/// combined statement claimed for it is put back, not left running without a runner
/// until its lease expires.
async fn a_claim_nobody_waits_for_goes_back_to_the_queue(backend: Backend) {
    let InFlight { db, views, blocker, first, _dir } = first_claim_in_flight(backend).await;
    let gone = tokio::spawn(claim(views.clone(), db.clone()));
    until_waiting(&views, 1).await;
    gone.abort();
    assert!(gone.await.unwrap_err().is_cancelled());
    blocker.release().await;
    assert_eq!(first.await.unwrap().0, "op101");
    // The second statement claims op102 for nobody, then releases it; the lane goes idle
    // after that.
    poll_until("the lane idle", Duration::from_secs(10), || async {
        match views.claims_waiting(DELETE) {
            None => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let rows: Vec<(String, String, Option<String>, i64)> =
        query("SELECT id, state, lease_token, attempt FROM operations ORDER BY id").fetch_all(&db).await.unwrap();
    assert_eq!(rows[0].1, "running", "{rows:?}");
    assert!(rows[1..].iter().all(|r| r.1 == "queued" && r.2.is_none() && r.3 == 0), "{rows:?}");
    // It was claimed: the release moved its version on (claim, release).
    let version: i64 = query("SELECT version FROM operations WHERE id = 'op102'").fetch_scalar(&db).await.unwrap();
    let untouched: i64 = query("SELECT version FROM operations WHERE id = 'op103'").fetch_scalar(&db).await.unwrap();
    assert!(version >= untouched + 2, "op102 at version {version}, op103 at {untouched}");
}
