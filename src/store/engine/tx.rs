//! The write transaction of either engine ([`Tx`]): SQLite's with this process's turn to
//! write, commit and rollback, and what a transaction says about its own commit (relaxed,
//! durable) and its session (alive while it waits).

use std::time::Duration;

use sqlx::{SqlitePool, Transaction};

use super::Engine;

/// How often [`Tx::wait_alive`] speaks while it waits: well inside the server's
/// `idle_in_transaction_session_timeout` (see `Db::connect`).
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(2);

/// A write transaction of either engine. SQLite takes its write lock up front (`BEGIN
/// IMMEDIATE`): two deferred transactions that both upgrade to writers fail with
/// `SQLITE_BUSY` instead of waiting.
pub enum Tx {
    Postgres(PgTx),
    Sqlite(SqliteTx),
}

/// A PostgreSQL write transaction and the subtransactions it has spent.
///
/// Why count them: each savepoint that writes is a subtransaction with an XID of its own,
/// held until the top-level transaction ends (unless rolled back to its savepoint, so
/// counting every savepoint is conservative). A backend caches 64 of them; past that its
/// snapshot entry overflows, and every snapshot in the cluster must consult `pg_subtrans`
/// for as long as the transaction stays open — a cluster-wide slowdown one large import
/// into existing conversations (a savepoint per conversation per batch) used to cause.
pub struct PgTx {
    tx: Transaction<'static, sqlx::Postgres>,
    subtransactions: u32,
}

/// Savepoints a transaction may spend on optimistic writes: well under the 64 subtransactions
/// a backend caches (`PGPROC_MAX_CACHED_SUBXIDS`), leaving room for any other savepoint.
const SUBTRANSACTION_BUDGET: u32 = 32;

impl PgTx {
    pub(super) fn new(tx: Transaction<'static, sqlx::Postgres>) -> Self {
        PgTx { tx, subtransactions: 0 }
    }

    /// Take one subtransaction for an optimistic write undone by a savepoint; `false` once
    /// the budget is spent, when the caller takes its path without a savepoint instead.
    pub fn take_subtransaction(&mut self) -> bool {
        let left = self.subtransactions < SUBTRANSACTION_BUDGET;
        self.subtransactions += u32::from(left);
        left
    }
}

impl std::ops::Deref for PgTx {
    type Target = sqlx::PgConnection;
    fn deref(&self) -> &Self::Target {
        &self.tx
    }
}

impl std::ops::DerefMut for PgTx {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.tx
    }
}

/// A SQLite write transaction and this process' turn to write the file. Writers of one
/// process wait for their turn in order (a fair async lock) instead of in SQLite's busy
/// handler, whose growing sleeps (up to 100 ms each) let a waiting writer lose the lock
/// again and again: that was the append tail (p99 over a second with 8 writers). Other
/// processes on the file still meet the busy timeout. The transaction is dropped (rolled
/// back) before the turn is released.
pub struct SqliteTx {
    tx: Transaction<'static, sqlx::Sqlite>,
    _turn: tokio::sync::OwnedMutexGuard<()>,
}

impl SqliteTx {
    /// `BEGIN IMMEDIATE` on `pool`, once it is this writer's turn.
    pub(super) async fn begin(pool: &SqlitePool) -> Result<Self, sqlx::Error> {
        let turn = tokio::time::timeout(SQLITE_WRITE_WAIT, write_turn(pool).lock_owned())
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)?;
        Ok(SqliteTx { tx: pool.begin_with("BEGIN IMMEDIATE").await?, _turn: turn })
    }
}

impl std::ops::Deref for SqliteTx {
    type Target = Transaction<'static, sqlx::Sqlite>;
    fn deref(&self) -> &Self::Target {
        &self.tx
    }
}

impl std::ops::DerefMut for SqliteTx {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.tx
    }
}

/// The write turn of the SQLite file `pool` opens, one per file in this process.
fn write_turn(pool: &SqlitePool) -> std::sync::Arc<tokio::sync::Mutex<()>> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    static TURNS: OnceLock<Mutex<HashMap<std::path::PathBuf, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    let file = pool.connect_options().get_filename().to_path_buf();
    let mut turns = TURNS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    turns.entry(file).or_default().clone()
}

/// How long a writer waits for its turn: SQLite's own busy timeout (see `Db::connect`).
const SQLITE_WRITE_WAIT: Duration = Duration::from_secs(30);

impl Tx {
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Postgres(tx) => tx.tx.commit().await,
            Tx::Sqlite(tx) => tx.tx.commit().await,
        }
    }

    /// Roll back now (a dropped transaction's rollback waits for its connection's next use,
    /// holding its locks meanwhile).
    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Postgres(tx) => tx.tx.rollback().await,
            Tx::Sqlite(tx) => tx.tx.rollback().await,
        }
    }

    pub fn engine(&self) -> Engine {
        match self {
            Tx::Postgres(_) => Engine::Postgres,
            Tx::Sqlite(_) => Engine::Sqlite,
        }
    }

    /// Let this transaction's commit return before its WAL is flushed (PostgreSQL). Safe
    /// for export, import and vector-rebuild batches: a batch's effect and its checkpoint
    /// are one transaction, so a server crash loses whole batches, newest first, and the
    /// job redoes them from the checkpoint that survived; the operation's final transition
    /// is an ordinary durable commit, which flushes everything before it. (A fsync per
    /// batch costs more than the batch on some disks.) SQLite in WAL mode with
    /// `synchronous = NORMAL` already commits this way. A store write that takes a
    /// tenant's entry or vector sequence undoes it ([`Self::durable_commit`]).
    pub async fn relax_commit(&mut self) -> Result<(), sqlx::Error> {
        self.postgres_only("SET LOCAL synchronous_commit = off").await
    }

    /// Make this transaction's commit wait for its WAL flush again (PostgreSQL), whatever
    /// [`Self::relax_commit`] said. For writes that take a tenant's `change_seq` or
    /// `vector_seq`: an asynchronous commit is visible before it is durable, so a recall
    /// index in another process could take its sequence as its mark, and after a server
    /// crash lost the commit the same sequences would be taken again by new writes — ones
    /// that index would never read (it reads above its mark).
    pub async fn durable_commit(&mut self) -> Result<(), sqlx::Error> {
        self.postgres_only("SET LOCAL synchronous_commit = on").await
    }

    /// Await `work` (something this transaction waits for: another task's result) while the
    /// transaction stays open, telling PostgreSQL it is alive: a session idle in a
    /// transaction for `IDLE_IN_TRANSACTION_TIMEOUT` is ended by the server, and a wait on
    /// another task is no sign of a frozen process. (An import's first transaction waits
    /// for its artifact to validate, seconds past that timeout for a large one, and its
    /// retries died the same way every time.) A failed ping is this result's error.
    pub async fn wait_alive<F: Future>(&mut self, work: F) -> Result<F::Output, sqlx::Error> {
        let Tx::Postgres(tx) = self else { return Ok(work.await) };
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return Ok(out),
                _ = tokio::time::sleep(KEEP_ALIVE_EVERY) => {
                    sqlx::query("SELECT 1").execute(&mut **tx).await?;
                }
            }
        }
    }

    async fn postgres_only(&mut self, statement: &'static str) -> Result<(), sqlx::Error> {
        if let Tx::Postgres(tx) = self {
            sqlx::query(statement).execute(&mut **tx).await?;
        }
        Ok(())
    }
}
