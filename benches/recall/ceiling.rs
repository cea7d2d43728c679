//! The storage ceiling for the recall benchmark's rebuild: the same vectors written to a
//! bare copy of `context_entry_vectors` as fast as each engine takes rows.

use std::time::{Duration, Instant};

use context_ops::db::Db;
use context_ops::store::pg_copy::CopyBinary;
use sqlx::AssertSqlSafe;

const TABLE: &str = "bench_vectors_ceiling";
/// Rows per SQLite statement (the service's own vector writes use the same).
const SQLITE_ROWS: usize = 500;

fn columns(i: usize, vector: &[f32]) -> (String, i64, Vec<u8>) {
    (format!("entry-{i:07}"), vector.len() as i64, context_jobs::vector_codec::encode_vector(vector))
}

/// PostgreSQL binary `COPY` rows: (tenant, entry_id, version, model, dim, vector,
/// written_seq, written_at_ms), in the service's own `COPY` encoder.
fn copy_rows(first: usize, vectors: &[Vec<f32>], now: i64) -> Vec<u8> {
    let mut copy = CopyBinary::new(vectors.len() * (vectors.first().map_or(0, Vec::len) * 2 + 96));
    for (j, vector) in vectors.iter().enumerate() {
        let (id, dim, blob) = columns(first + j, vector);
        copy.row(8)
            .bytes(super::TENANT.as_bytes())
            .bytes(id.as_bytes())
            .int8(1)
            .bytes(b"bench")
            .int4(dim as i32)
            .bytes(&blob)
            .int8((first + j) as i64)
            .int8(now);
    }
    copy.finish()
}

/// Load `vectors` in batches of `batch`, one transaction each; the time taken.
pub async fn load(db: &Db, vectors: &[Vec<f32>], batch: usize) -> anyhow::Result<Duration> {
    let now = context_ops::store::now_ms();
    let started;
    match db {
        Db::Postgres(pool) => {
            let create = format!("CREATE TABLE {TABLE} (LIKE context_entry_vectors INCLUDING ALL)");
            sqlx::query(AssertSqlSafe(create)).execute(pool).await?;
            started = Instant::now();
            for (k, chunk) in vectors.chunks(batch).enumerate() {
                let mut tx = pool.begin().await?;
                let statement = format!("COPY {TABLE} FROM STDIN (FORMAT binary)");
                let mut copy = tx.copy_in_raw(&statement).await?;
                copy.send(copy_rows(k * batch, chunk, now)).await?;
                copy.finish().await?;
                tx.commit().await?;
            }
        }
        Db::Sqlite(pool) => {
            let create = format!(
                "CREATE TABLE {TABLE} (tenant TEXT NOT NULL, entry_id TEXT NOT NULL, version INTEGER NOT NULL, \
                 model TEXT NOT NULL, dim INTEGER NOT NULL, vector BLOB NOT NULL, written_seq INTEGER NOT NULL, \
                 written_at_ms INTEGER NOT NULL, PRIMARY KEY (tenant, entry_id))"
            );
            sqlx::query(AssertSqlSafe(create)).execute(pool).await?;
            let index = format!("CREATE INDEX {TABLE}_sync ON {TABLE} (tenant, written_seq)");
            sqlx::query(AssertSqlSafe(index)).execute(pool).await?;
            started = Instant::now();
            for (k, chunk) in vectors.chunks(batch).enumerate() {
                let mut tx = pool.begin().await?;
                // Multi-row statements: the fastest way sqlx loads SQLite (one row per
                // statement costs a round trip to the connection's thread each).
                for (c, rows) in chunk.chunks(SQLITE_ROWS).enumerate() {
                    let values: Vec<String> = (0..rows.len())
                        .map(|r| {
                            format!(
                                "(?{}, ?{}, 1, 'bench', ?{}, ?{}, ?{}, ?{})",
                                1,
                                5 * r + 2,
                                5 * r + 3,
                                5 * r + 4,
                                5 * r + 5,
                                5 * r + 6
                            )
                        })
                        .collect();
                    let insert = format!("INSERT INTO {TABLE} VALUES {}", values.join(", "));
                    let mut q = sqlx::query(AssertSqlSafe(insert)).bind(super::TENANT);
                    for (j, vector) in rows.iter().enumerate() {
                        let i = k * batch + c * SQLITE_ROWS + j;
                        let (id, dim, blob) = columns(i, vector);
                        q = q.bind(id).bind(dim).bind(blob).bind(i as i64).bind(now);
                    }
                    q.execute(&mut *tx).await?;
                }
                tx.commit().await?;
            }
        }
    }
    let elapsed = started.elapsed();
    let drop = format!("DROP TABLE {TABLE}");
    match db {
        Db::Postgres(pool) => {
            sqlx::query(AssertSqlSafe(drop)).execute(pool).await?;
        }
        Db::Sqlite(pool) => {
            sqlx::query(AssertSqlSafe(drop)).execute(pool).await?;
        }
    }
    Ok(elapsed)
}
