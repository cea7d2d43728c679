//! Pooled PostgreSQL connections cut under the service (`store::engine`): sqlx's own ping
//! before every checkout is off, and only a connection idle for over a second is pinged
//! before it is handed out. A connection cut while idle is replaced before any statement
//! sees it; one cut while in use fails at most the one statement that finds it (with an
//! error the service takes for transient) and is not pooled again. A transaction waiting on
//! another task outlives the server's idle-in-transaction timeout (`Tx::wait_alive`).

use std::time::Duration;

use context_ops::store::Db;
use context_ops::store::engine::is_transient;
use sqlx::{Connection as _, PgConnection, PgPool};

use crate::harness::wait::poll_until;
use crate::harness::{Backend, fresh_database};

/// Longer than the pool's idle threshold for a ping (`PING_IF_IDLE`, 1 s).
const IDLE_LONGER_THAN_THE_THRESHOLD: Duration = Duration::from_millis(1_300);

/// Both connections of a two-connection pool, opened and back in the pool: their backends.
async fn pooled_backends(pool: &PgPool) -> Vec<i32> {
    let (mut a, mut b) = (pool.acquire().await.unwrap(), pool.acquire().await.unwrap());
    let mut pids = Vec::new();
    for conn in [&mut a, &mut b] {
        pids.push(sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut **conn).await.unwrap());
    }
    pids
}

/// Terminate `pids` from a connection of our own, and wait until PostgreSQL lists none of
/// them.
async fn cut(url: &str, pids: &[i32]) {
    let mut admin = PgConnection::connect(url).await.unwrap();
    for pid in pids {
        let done: bool =
            sqlx::query_scalar("SELECT pg_terminate_backend($1)").bind(pid).fetch_one(&mut admin).await.unwrap();
        assert!(done, "backend {pid} was not there to terminate");
    }
    let admin = tokio::sync::Mutex::new(admin);
    poll_until("the terminated backends gone", Duration::from_secs(10), || async {
        let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM pg_stat_activity WHERE pid = ANY($1)")
            .bind(pids)
            .fetch_one(&mut *admin.lock().await)
            .await
            .unwrap();
        if left == 0 { Ok(()) } else { Err(format!("{left} left")) }
    })
    .await;
}

async fn two_connection_pool() -> (String, Db, PgPool, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_database(Backend::Postgres, dir.path()).await;
    let db = Db::connect(&url, 2).await.unwrap();
    let Db::Postgres(pool) = db.clone() else { unreachable!("a PostgreSQL URL") };
    (url, db, pool, dir)
}

#[tokio::test]
async fn connections_cut_while_idle_are_replaced_before_any_statement_sees_them() {
    let (url, _db, pool, _dir) = two_connection_pool().await;
    let cut_pids = pooled_backends(&pool).await;
    cut(&url, &cut_pids).await;
    // The threshold is a duration of idleness: waiting it out is the condition itself.
    tokio::time::sleep(IDLE_LONGER_THAN_THE_THRESHOLD).await;
    for round in 0..4 {
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&pool)
            .await
            .unwrap_or_else(|e| panic!("statement {round} met a dead connection: {e}"));
        assert!(!cut_pids.contains(&pid), "statement {round} ran on a terminated backend {pid}");
    }
}

#[tokio::test]
async fn a_connection_cut_while_in_use_fails_one_statement_at_most_and_is_not_pooled_again() {
    let (url, _db, pool, _dir) = two_connection_pool().await;
    let cut_pids = pooled_backends(&pool).await;
    cut(&url, &cut_pids).await;
    // Within the threshold (unless this machine is slow: then the ping replaces them and
    // nothing fails), each dead connection fails the statement that meets it, as it would
    // have failed between a ping and its statement.
    let mut failed = 0;
    for round in 0..6 {
        match sqlx::query_scalar::<_, i32>("SELECT pg_backend_pid()").fetch_one(&pool).await {
            Ok(pid) => assert!(!cut_pids.contains(&pid), "statement {round} ran on a terminated backend {pid}"),
            Err(e) => {
                assert!(is_transient(&e), "statement {round}: not a transient error: {e:?}");
                failed += 1;
            }
        }
    }
    assert!(failed <= cut_pids.len(), "{failed} statements failed for {} cut connections", cut_pids.len());
    // Every connection left in the pool is a live one.
    let live = pooled_backends(&pool).await;
    assert!(live.iter().all(|pid| !cut_pids.contains(pid)), "{live:?} after cutting {cut_pids:?}");
}

/// A transaction that waits on another task keeps its session: PostgreSQL ends a session
/// idle in a transaction for 5 s (the service's `idle_in_transaction_session_timeout`),
/// and an import's first transaction waits for its artifact to validate longer than that.
#[tokio::test]
async fn a_transaction_waiting_alive_outlives_the_idle_timeout() {
    let (_url, db, _pool, _dir) = two_connection_pool().await;
    let mut tx = db.begin_write().await.unwrap();
    let waited = tx.wait_alive(tokio::time::sleep(Duration::from_secs(7))).await;
    assert!(waited.is_ok(), "{waited:?}");
    let context_ops::store::Tx::Postgres(conn) = &mut tx else { unreachable!() };
    let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&mut **conn).await.expect("the session is still open");
    assert_eq!(one, 1);
    tx.commit().await.unwrap();
    // The control: a transaction that only sleeps is ended by the server.
    let mut tx = db.begin_write().await.unwrap();
    tokio::time::sleep(Duration::from_secs(7)).await;
    let context_ops::store::Tx::Postgres(conn) = &mut tx else { unreachable!() };
    assert!(sqlx::query("SELECT 1").execute(&mut **conn).await.is_err(), "idle past the timeout: ended");
}
