//! The storage ceiling for the recall benchmark's rebuild: the same vectors written to a
//! bare copy of `context_entry_vectors` as fast as each engine takes rows.

use std::time::{Duration, Instant};

use context_ops::store::Db;
use context_ops::store::engine::pg_copy::CopyBinary;
use context_ops::store::engine::sqlite_rows::{Arg, execute_rows};
use sqlx::AssertSqlSafe;

const TABLE: &str = "bench_vectors_ceiling";

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
            // One prepared single-row statement stepped per row on SQLite's own API, as the
            // service's vector writes do (the fastest way to load SQLite).
            let insert = format!("INSERT INTO {TABLE} VALUES (?1, ?2, 1, 'bench', ?3, ?4, ?5, ?6)");
            for (k, chunk) in vectors.chunks(batch).enumerate() {
                let mut tx = pool.begin().await?;
                let cols: Vec<_> =
                    chunk.iter().enumerate().map(|(j, v)| (k * batch + j, columns(k * batch + j, v))).collect();
                let rows: Vec<[Arg<'_>; 6]> = cols
                    .iter()
                    .map(|(i, (id, dim, blob))| {
                        [
                            Arg::Text(super::TENANT),
                            Arg::Text(id),
                            Arg::Int(*dim),
                            Arg::Blob(blob),
                            Arg::Int(*i as i64),
                            Arg::Int(now),
                        ]
                    })
                    .collect();
                execute_rows(&mut tx, &insert, rows.iter().map(|r| &r[..])).await?;
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
