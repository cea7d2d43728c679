//! Writes to entries, each one transaction with optimistic concurrency: put (create at
//! `expectedVersion` 0, or update the version given), correct, expire and merge. A version
//! or status mismatch is a `Conflict` and the transaction rolls back: nothing is written.
//!
//! Every write takes the tenant's next change sequence first (locking the heads row, so
//! writers of one tenant queue up there rather than deadlocking on entry rows), then
//! compare-and-sets the entry rows on `version` and `status`, then records the new
//! versions in `context_entry_versions`. Expire and merge drop the vectors of entries that
//! stop being active; put-update and correct leave the old vector, which stops counting
//! because its version is no longer the entry's (the projector replaces it).

use sqlx::AssertSqlSafe;

use super::rows::{bump_source, insert_rows, record_version};
use super::{ENTRY_COLUMNS, EntryRow, entry_columns, entry_from_row};
use crate::store::{Db, StoreError, StoreResult, Tx, now_ms, query};
use context_jobs::contract::{ContextInsight, ContextInsightStatus};
use context_jobs::entries::status_str;
use context_jobs::ids::TenantKey;

/// Why a compare-and-set on entry `id` matched nothing: not found (404), another version,
/// or not active (409). Reads inside the transaction.
async fn cas_failure(tx: &mut Tx, tenant: &TenantKey, id: &str, expected: u64) -> StoreError {
    let row: Result<Option<(i64, String)>, sqlx::Error> =
        query("SELECT version, status FROM context_entries WHERE tenant = $1 AND id = $2")
            .bind(tenant.as_str())
            .bind(id)
            .fetch_optional(&mut *tx)
            .await;
    match row {
        Err(e) => e.into(),
        Ok(None) => StoreError::NotFound(format!("entry {id:?} not found")),
        Ok(Some((version, _))) if expected != 0 && version as u64 != expected => {
            StoreError::Conflict(format!("entry {id:?} is at version {version}, not the expected version {expected}"))
        }
        Ok(Some((_, status))) => StoreError::Conflict(format!("entry {id:?} is {status}; only active entries change")),
    }
}

/// The version of entry `id`, if it exists.
async fn existing_version(tx: &mut Tx, tenant: &TenantKey, id: &str) -> StoreResult<Option<i64>> {
    Ok(query("SELECT version FROM context_entries WHERE tenant = $1 AND id = $2")
        .bind(tenant.as_str())
        .bind(id)
        .fetch_optional_scalar(&mut *tx)
        .await?)
}

/// Drop the vector of an entry that stops being active.
async fn drop_vector(tx: &mut Tx, tenant: &TenantKey, id: &str) -> StoreResult<()> {
    query("DELETE FROM context_entry_vectors WHERE tenant = $1 AND entry_id = $2")
        .bind(tenant.as_str())
        .bind(id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Put: `expected_version` 0 creates the entry (version 1, active); otherwise replaces the
/// caller's fields (kind, content, attributes, provenance, expiresAtMs) of the active entry
/// at exactly that version. Version, status, supersededBy and timestamps are the server's.
pub async fn put(
    db: &Db,
    tenant: &TenantKey,
    entry: &ContextInsight,
    expected_version: u64,
) -> StoreResult<ContextInsight> {
    let now = now_ms();
    let mut tx = db.begin_write().await?;
    let seq = bump_source(&mut tx, tenant, 1).await?;
    let stored = if expected_version == 0 {
        if let Some(version) = existing_version(&mut tx, tenant, &entry.id).await? {
            return Err(StoreError::Conflict(format!(
                "entry {:?} already exists at version {version}; expectedVersion 0 only creates",
                entry.id
            )));
        }
        let created = ContextInsight {
            version: 1,
            status: ContextInsightStatus::Active,
            superseded_by: None,
            created_at_ms: now,
            updated_at_ms: now,
            ..entry.clone()
        };
        insert_rows(&mut tx, tenant, &[&created], seq, "create", None).await?;
        created
    } else {
        let c = entry_columns(entry);
        let sql = format!(
            "UPDATE context_entries SET kind = $4, content = $5, attributes = $6, provenance = $7, \
             conversation_id = $8, expires_at_ms = $9, version = version + 1, updated_at_ms = $10, change_seq = $11 \
             WHERE tenant = $1 AND id = $2 AND version = $3 AND status = $12 RETURNING {ENTRY_COLUMNS}"
        );
        let row: Option<EntryRow> = query(AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(entry.id.as_str())
            .bind(expected_version as i64)
            .bind(c.kind)
            .bind(c.content.as_str())
            .bind(c.attributes.as_deref())
            .bind(c.provenance.as_str())
            .bind(entry.provenance.conversation_id.as_str())
            .bind(entry.expires_at_ms)
            .bind(now)
            .bind(seq)
            .bind(status_str(ContextInsightStatus::Active))
            .fetch_optional(&mut tx)
            .await?;
        let Some(row) = row else {
            return Err(cas_failure(&mut tx, tenant, &entry.id, expected_version).await);
        };
        let stored = entry_from_row(row)?;
        record_version(&mut tx, tenant, &stored, "update", None).await?;
        stored
    };
    tx.commit().await?;
    Ok(stored)
}

/// A change to one active entry at an expected version.
enum Change<'a> {
    Correct { content: &'a serde_json::Value },
    Expire,
}

async fn transition(
    db: &Db,
    tenant: &TenantKey,
    id: &str,
    expected_version: u64,
    change: Change<'_>,
    reason: &str,
) -> StoreResult<ContextInsight> {
    let now = now_ms();
    let reason = (!reason.is_empty()).then_some(reason);
    let (set, content, label) = match change {
        Change::Correct { content } => ("content = $7", Some(content.to_string()), "correct"),
        Change::Expire => ("status = $7", Some(status_str(ContextInsightStatus::Expired).to_string()), "expire"),
    };
    let mut tx = db.begin_write().await?;
    let seq = bump_source(&mut tx, tenant, 1).await?;
    let sql = format!(
        "UPDATE context_entries SET {set}, version = version + 1, updated_at_ms = $4, change_seq = $5 \
         WHERE tenant = $1 AND id = $2 AND version = $3 AND status = $6 RETURNING {ENTRY_COLUMNS}"
    );
    let row: Option<EntryRow> = query(AssertSqlSafe(sql))
        .bind(tenant.as_str())
        .bind(id)
        .bind(expected_version as i64)
        .bind(now)
        .bind(seq)
        .bind(status_str(ContextInsightStatus::Active))
        .bind(content)
        .fetch_optional(&mut tx)
        .await?;
    let Some(row) = row else {
        return Err(cas_failure(&mut tx, tenant, id, expected_version).await);
    };
    let stored = entry_from_row(row)?;
    if label == "expire" {
        drop_vector(&mut tx, tenant, id).await?;
    }
    record_version(&mut tx, tenant, &stored, label, reason).await?;
    tx.commit().await?;
    Ok(stored)
}

/// Correct: new content for the active entry at `expected_version`; it stays active with
/// the next version (history reports the replaced version as `corrected`).
pub async fn correct(
    db: &Db,
    tenant: &TenantKey,
    id: &str,
    expected_version: u64,
    content: &serde_json::Value,
    reason: &str,
) -> StoreResult<ContextInsight> {
    transition(db, tenant, id, expected_version, Change::Correct { content }, reason).await
}

/// Expire: the active entry at `expected_version` becomes `expired` (next version) and
/// loses its vector.
pub async fn expire(
    db: &Db,
    tenant: &TenantKey,
    id: &str,
    expected_version: u64,
    reason: &str,
) -> StoreResult<ContextInsight> {
    transition(db, tenant, id, expected_version, Change::Expire, reason).await
}

/// Merge, all or nothing: every source must be active (and at its expected version when
/// one is given); each becomes `merged` with `supersededBy` = the new entry and its next
/// version; the merged entry is created (version 1, active) and must not exist yet.
pub async fn merge(
    db: &Db,
    tenant: &TenantKey,
    sources: &[String],
    merged: &ContextInsight,
    expected_versions: &std::collections::BTreeMap<String, u64>,
) -> StoreResult<ContextInsight> {
    let now = now_ms();
    // Lock order: ids sorted, so two merges over overlapping sources cannot deadlock.
    let mut ordered: Vec<&String> = sources.iter().collect();
    ordered.sort();
    let mut tx = db.begin_write().await?;
    let first = bump_source(&mut tx, tenant, ordered.len() as i64 + 1).await?;
    let mut superseded = Vec::with_capacity(ordered.len());
    for (i, id) in ordered.iter().enumerate() {
        let expected = expected_versions.get(*id).copied().unwrap_or(0);
        let sql = format!(
            "UPDATE context_entries SET status = $7, superseded_by = $4, version = version + 1, \
             updated_at_ms = $5, change_seq = $6 \
             WHERE tenant = $1 AND id = $2 AND ($3 = 0 OR version = $3) AND status = $8 RETURNING {ENTRY_COLUMNS}"
        );
        let row: Option<EntryRow> = query(AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(id.as_str())
            .bind(expected as i64)
            .bind(merged.id.as_str())
            .bind(now)
            .bind(first + i as i64)
            .bind(status_str(ContextInsightStatus::Merged))
            .bind(status_str(ContextInsightStatus::Active))
            .fetch_optional(&mut tx)
            .await?;
        let Some(row) = row else {
            return Err(cas_failure(&mut tx, tenant, id.as_str(), expected).await);
        };
        superseded.push(entry_from_row(row)?);
        drop_vector(&mut tx, tenant, id.as_str()).await?;
    }
    if existing_version(&mut tx, tenant, &merged.id).await?.is_some() {
        return Err(StoreError::Conflict(format!(
            "merged entry {:?} already exists; merge creates a new entry",
            merged.id
        )));
    }
    let created = ContextInsight {
        version: 1,
        status: ContextInsightStatus::Active,
        superseded_by: None,
        created_at_ms: now,
        updated_at_ms: now,
        ..merged.clone()
    };
    let seq = first + ordered.len() as i64;
    insert_rows(&mut tx, tenant, &[&created], seq, "merge", None).await?;
    let reason = format!("merged into {}", merged.id);
    for s in &superseded {
        record_version(&mut tx, tenant, s, "merged", Some(reason.as_str())).await?;
    }
    tx.commit().await?;
    Ok(created)
}
