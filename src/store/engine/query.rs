//! SQL written once for both engines: a statement and its arguments as data ([`Query`]),
//! run on whichever engine the [`Exec`] target holds. Rows decode into any type that both
//! engines can build ([`Row`]: tuples of plain columns, or a type with a `FromRow` impl).
//!
//! Both engines accept `$N` placeholders, `ON CONFLICT`, `RETURNING` and the column types
//! we use. Where an engine needs its own statement (PostgreSQL arrays and `COPY`, SQLite's
//! row-at-a-time API) the store matches on [`Tx`] and uses sqlx directly.

use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{Encode, Postgres, SqlSafeStr, SqlStr, Sqlite, Type};

use super::{Db, Tx};
use context_jobs::contract::ContextOperationState;
use sqlx::AssertSqlSafe;

/// A row type either engine can decode.
pub trait Row: for<'r> sqlx::FromRow<'r, PgRow> + for<'r> sqlx::FromRow<'r, SqliteRow> + Send + Unpin {}
impl<T> Row for T where T: for<'r> sqlx::FromRow<'r, PgRow> + for<'r> sqlx::FromRow<'r, SqliteRow> + Send + Unpin {}

/// One bound value. Borrowed values are encoded when the statement runs.
#[derive(Debug, Clone)]
pub enum Arg<'q> {
    Int(i64),
    OptInt(Option<i64>),
    Text(&'q str),
    OptText(Option<&'q str>),
    Owned(String),
    OptOwned(Option<String>),
    Bytes(&'q [u8]),
}

impl From<i64> for Arg<'_> {
    fn from(v: i64) -> Self {
        Arg::Int(v)
    }
}
impl From<Option<i64>> for Arg<'_> {
    fn from(v: Option<i64>) -> Self {
        Arg::OptInt(v)
    }
}
impl<'q> From<&'q str> for Arg<'q> {
    fn from(v: &'q str) -> Self {
        Arg::Text(v)
    }
}
impl<'q> From<&'q String> for Arg<'q> {
    fn from(v: &'q String) -> Self {
        Arg::Text(v)
    }
}
impl<'q> From<Option<&'q str>> for Arg<'q> {
    fn from(v: Option<&'q str>) -> Self {
        Arg::OptText(v)
    }
}
impl From<String> for Arg<'_> {
    fn from(v: String) -> Self {
        Arg::Owned(v)
    }
}
impl From<Option<String>> for Arg<'_> {
    fn from(v: Option<String>) -> Self {
        Arg::OptOwned(v)
    }
}
impl<'q> From<&'q [u8]> for Arg<'q> {
    fn from(v: &'q [u8]) -> Self {
        Arg::Bytes(v)
    }
}
impl<'q> From<&'q Vec<u8>> for Arg<'q> {
    fn from(v: &'q Vec<u8>) -> Self {
        Arg::Bytes(v)
    }
}

/// Where a statement runs: on the pool (its own implicit transaction), or inside a
/// caller's transaction.
pub enum Exec<'a> {
    Db(&'a Db),
    Tx(&'a mut Tx),
}

impl<'a> From<&'a Db> for Exec<'a> {
    fn from(db: &'a Db) -> Self {
        Exec::Db(db)
    }
}

impl<'a> From<&'a mut Tx> for Exec<'a> {
    fn from(tx: &'a mut Tx) -> Self {
        Exec::Tx(tx)
    }
}

impl Exec<'_> {
    /// The same target for one more statement.
    pub fn reborrow(&mut self) -> Exec<'_> {
        match self {
            Exec::Db(db) => Exec::Db(db),
            Exec::Tx(tx) => Exec::Tx(tx),
        }
    }
}

/// A statement and its arguments.
#[must_use = "a query does nothing until it is run"]
pub struct Query<'q> {
    sql: SqlStr,
    args: Vec<Arg<'q>>,
}

/// A statement to run on either engine (`$1, $2, …` placeholders).
pub fn query<'q>(sql: impl SqlSafeStr) -> Query<'q> {
    Query { sql: sql.into_sql_str(), args: Vec::new() }
}

/// Bind every argument, in order, to an sqlx query of engine `DB`.
fn bind_all<'q, DB>(
    mut q: sqlx::query::Query<'q, DB, DB::Arguments>,
    args: Vec<Arg<'q>>,
) -> sqlx::query::Query<'q, DB, DB::Arguments>
where
    DB: sqlx::Database,
    i64: Encode<'q, DB> + Type<DB>,
    Option<i64>: Encode<'q, DB> + Type<DB>,
    &'q str: Encode<'q, DB> + Type<DB>,
    Option<&'q str>: Encode<'q, DB> + Type<DB>,
    String: Encode<'q, DB> + Type<DB>,
    Option<String>: Encode<'q, DB> + Type<DB>,
    &'q [u8]: Encode<'q, DB> + Type<DB>,
{
    for arg in args {
        q = match arg {
            Arg::Int(v) => q.bind(v),
            Arg::OptInt(v) => q.bind(v),
            Arg::Text(v) => q.bind(v),
            Arg::OptText(v) => q.bind(v),
            Arg::Owned(v) => q.bind(v),
            Arg::OptOwned(v) => q.bind(v),
            Arg::Bytes(v) => q.bind(v),
        };
    }
    q
}

/// The engine switch, the one place a statement meets an engine: bind the arguments to
/// an sqlx query of the target's engine as `$q`, take the pool or the transaction's
/// connection as `$e`, and evaluate `$run` (compiled once per engine).
macro_rules! on_engine {
    ($query:expr, $ex:expr, |$q:ident, $e:ident| $run:expr) => {{
        let Query { sql, args } = $query;
        match $ex.into() {
            Exec::Db(Db::Postgres(pool)) => {
                let ($q, $e) = (bind_all(sqlx::query::<Postgres>(sql), args), pool);
                $run
            }
            Exec::Db(Db::Sqlite(pool)) => {
                let ($q, $e) = (bind_all(sqlx::query::<Sqlite>(sql), args), pool);
                $run
            }
            Exec::Tx(Tx::Postgres(tx)) => {
                let ($q, $e) = (bind_all(sqlx::query::<Postgres>(sql), args), &mut **tx);
                $run
            }
            Exec::Tx(Tx::Sqlite(tx)) => {
                let ($q, $e) = (bind_all(sqlx::query::<Sqlite>(sql), args), &mut ***tx);
                $run
            }
        }
    }};
}

impl<'q> Query<'q> {
    pub fn bind(mut self, value: impl Into<Arg<'q>>) -> Self {
        self.args.push(value.into());
        self
    }

    /// Run the statement; the number of rows it changed.
    pub async fn execute<'a>(self, ex: impl Into<Exec<'a>>) -> Result<u64, sqlx::Error> {
        on_engine!(self, ex, |q, e| Ok(q.execute(e).await?.rows_affected()))
    }

    pub async fn fetch_one<'a, T: Row>(self, ex: impl Into<Exec<'a>>) -> Result<T, sqlx::Error> {
        on_engine!(self, ex, |q, e| q.try_map(|row| T::from_row(&row)).fetch_one(e).await)
    }

    pub async fn fetch_optional<'a, T: Row>(self, ex: impl Into<Exec<'a>>) -> Result<Option<T>, sqlx::Error> {
        on_engine!(self, ex, |q, e| q.try_map(|row| T::from_row(&row)).fetch_optional(e).await)
    }

    pub async fn fetch_all<'a, T: Row>(self, ex: impl Into<Exec<'a>>) -> Result<Vec<T>, sqlx::Error> {
        on_engine!(self, ex, |q, e| q.try_map(|row| T::from_row(&row)).fetch_all(e).await)
    }

    /// The first column of the one row.
    pub async fn fetch_scalar<'a, T>(self, ex: impl Into<Exec<'a>>) -> Result<T, sqlx::Error>
    where
        (T,): Row,
    {
        Ok(self.fetch_one::<(T,)>(ex).await?.0)
    }

    /// The first column of the row, if there is one.
    pub async fn fetch_optional_scalar<'a, T>(self, ex: impl Into<Exec<'a>>) -> Result<Option<T>, sqlx::Error>
    where
        (T,): Row,
    {
        Ok(self.fetch_optional::<(T,)>(ex).await?.map(|r| r.0))
    }
}

/// The arguments of a statement being built, each added where its placeholder goes
/// (`$1`, `$2`, … in order), and state lists rendered from the core's states.
#[derive(Default)]
pub struct Params<'q> {
    args: Vec<Arg<'q>>,
}

impl<'q> Params<'q> {
    /// Add an argument; its placeholder.
    pub fn p(&mut self, value: impl Into<Arg<'q>>) -> String {
        self.args.push(value.into());
        format!("${}", self.args.len())
    }

    /// `state IN (…)` over `states`.
    pub fn state_in(&mut self, states: &[ContextOperationState]) -> String {
        let list: Vec<String> = states.iter().map(|s| self.p(s.as_str())).collect();
        format!("state IN ({})", list.join(", "))
    }

    /// `column IN (…)` over `values`.
    pub fn any_of(&mut self, column: &str, values: &[&'q str]) -> String {
        let list: Vec<String> = values.iter().map(|v| self.p(*v)).collect();
        format!("{column} IN ({})", list.join(", "))
    }

    pub fn into_query(self, sql: String) -> Query<'q> {
        self.args.into_iter().fold(query(AssertSqlSafe(sql)), |q, a| q.bind(a))
    }
}
