//! The rate limiter of the embedded deployment: each key's GCRA arrival time (and a
//! provider's block) in `rate_limits`, admitted all-or-nothing in one write transaction
//! (the core's `rate_limit::admit_all` decides).

use crate::store::{Db, StoreResult, query};
use context_jobs::operation::rate_limit::{RateLimit, adjust, admit_all};

/// Admit `cost` units per `(key, limit)` at `now_us`, all or none; `Err(wait_us)` when not
/// now. `block_key` holds a provider's `retry-after` (µs, in `blocked_until_ms`'s column as
/// milliseconds).
pub async fn admit(
    db: &Db,
    keys: &[(String, RateLimit, u64)],
    block_key: &str,
    now_us: i64,
) -> StoreResult<Result<(), i64>> {
    let mut tx = db.begin_write().await?;
    let blocked: Option<i64> = query("SELECT blocked_until_ms FROM rate_limits WHERE key = $1")
        .bind(block_key)
        .fetch_optional_scalar(&mut tx)
        .await?;
    if let Some(until) = blocked.filter(|until| until * 1000 > now_us) {
        return Ok(Err(until * 1000 - now_us));
    }
    let mut tats = Vec::with_capacity(keys.len());
    for (key, _, _) in keys {
        // Taking the row (an upsert) locks it on PostgreSQL until the commit.
        let tat: i64 = query(
            "INSERT INTO rate_limits (key, tat_us) VALUES ($1, 0) ON CONFLICT (key) DO UPDATE SET tat_us = rate_limits.tat_us \
             RETURNING tat_us",
        )
        .bind(key.as_str())
        .fetch_scalar(&mut tx)
        .await?;
        tats.push(tat);
    }
    let limits: Vec<(RateLimit, u64)> = keys.iter().map(|(_, l, c)| (*l, *c)).collect();
    match admit_all(&tats, now_us, &limits) {
        Err(wait) => Ok(Err(wait)),
        Ok(new) => {
            for ((key, _, _), tat) in keys.iter().zip(new) {
                query("UPDATE rate_limits SET tat_us = $2 WHERE key = $1")
                    .bind(key.as_str())
                    .bind(tat)
                    .execute(&mut tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(Ok(()))
        }
    }
}

/// Account `delta` units more (or fewer) than admitted on `key`.
pub async fn settle(db: &Db, key: &str, limit: &RateLimit, delta: i64, now_us: i64) -> StoreResult<()> {
    let mut tx = db.begin_write().await?;
    let tat: Option<i64> =
        query("SELECT tat_us FROM rate_limits WHERE key = $1").bind(key).fetch_optional_scalar(&mut tx).await?;
    if let Some(tat) = tat {
        query("UPDATE rate_limits SET tat_us = $2 WHERE key = $1")
            .bind(key)
            .bind(adjust(tat, now_us, delta, limit))
            .execute(&mut tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Hold every turn on `block_key` until `until_ms` (a provider's 429 `retry-after`).
pub async fn block(db: &Db, block_key: &str, until_ms: i64) -> StoreResult<()> {
    query(
        "INSERT INTO rate_limits (key, tat_us, blocked_until_ms) VALUES ($1, 0, $2) \
         ON CONFLICT (key) DO UPDATE SET blocked_until_ms = CASE WHEN rate_limits.blocked_until_ms > excluded.blocked_until_ms \
         THEN rate_limits.blocked_until_ms ELSE excluded.blocked_until_ms END",
    )
    .bind(block_key)
    .bind(until_ms)
    .execute(db)
    .await?;
    Ok(())
}

/// The hold recorded under `block_key`, if any (it may have passed).
pub async fn blocked_until(db: &Db, block_key: &str) -> StoreResult<Option<i64>> {
    let row: Option<Option<i64>> = query("SELECT blocked_until_ms FROM rate_limits WHERE key = $1")
        .bind(block_key)
        .fetch_optional_scalar(db)
        .await?;
    Ok(row.flatten())
}
