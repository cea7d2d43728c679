//! The `maintenance` table: exclusive, periodic background ticks shared by every process
//! (the retention sweep, the vector projector). A tick is won by a compare-and-set on its
//! row — free (its lease ran out) and due (its last run is a period old) — and finished by
//! the holder, which records when it ran and what it processed.

use super::{Db, StoreResult, now_ms, query};

/// The retention sweep's tick.
pub const RETENTION_SWEEP: &str = "retention_sweep";
/// The vector projector's tick.
pub const PROJECTOR: &str = "projector";

/// Try to take tick `name` for `holder`, leased for `lease_ms`, if it is due after
/// `period_ms`. `Ok(true)` when this caller runs the tick.
pub async fn try_begin(db: &Db, name: &str, holder: &str, period_ms: i64, lease_ms: i64) -> StoreResult<bool> {
    let now = now_ms();
    query("INSERT INTO maintenance (name) VALUES ($1) ON CONFLICT (name) DO NOTHING").bind(name).execute(db).await?;
    let won = query(
        "UPDATE maintenance SET holder = $2, lease_until_ms = $3 WHERE name = $1 AND lease_until_ms < $4 \
         AND (last_run_ms IS NULL OR last_run_ms <= $5)",
    )
    .bind(name)
    .bind(holder)
    .bind(now + lease_ms)
    .bind(now)
    .bind(now - period_ms)
    .execute(db)
    .await?;
    Ok(won == 1)
}

/// Extend `holder`'s lease of tick `name` by `lease_ms` from now, while it still holds it:
/// `Ok(false)` when the lease ran out (another process may run the tick now).
pub async fn renew(db: &Db, name: &str, holder: &str, lease_ms: i64) -> StoreResult<bool> {
    let now = now_ms();
    let renewed =
        query("UPDATE maintenance SET lease_until_ms = $3 WHERE name = $1 AND holder = $2 AND lease_until_ms >= $4")
            .bind(name)
            .bind(holder)
            .bind(now + lease_ms)
            .bind(now)
            .execute(db)
            .await?;
    Ok(renewed == 1)
}

/// Finish tick `name` held by `holder`: record the run and free the lease.
pub async fn finish(db: &Db, name: &str, holder: &str, processed: i64) -> StoreResult<()> {
    query(
        "UPDATE maintenance SET last_run_ms = $2, processed = processed + $3, lease_until_ms = 0 \
         WHERE name = $1 AND holder = $4",
    )
    .bind(name)
    .bind(now_ms())
    .bind(processed)
    .bind(holder)
    .execute(db)
    .await?;
    Ok(())
}

/// `(last_run_ms, processed)` of a tick.
pub async fn status(db: &Db, name: &str) -> StoreResult<(Option<i64>, i64)> {
    let row: Option<(Option<i64>, i64)> =
        query("SELECT last_run_ms, processed FROM maintenance WHERE name = $1").bind(name).fetch_optional(db).await?;
    Ok(row.unwrap_or((None, 0)))
}
