//! The entries table family: the row codec ([`EntryRow`], [`entry_columns`]), reads
//! ([`reads`]), the row writers every write goes through ([`rows`], shared by import), and
//! the optimistic writes put/correct/expire/merge ([`writes`]).
//!
//! Every write of an entry row takes the next value of the tenant's `source_version`
//! (`context_entry_heads`) as its `change_seq`, and records an immutable snapshot in
//! `context_entry_versions`. The heads row is locked by the bump, so change sequences commit
//! in order — the recall index and the watermark rely on that.

pub mod reads;
pub mod rows;
pub mod writes;

use crate::store::{StoreError, StoreResult, parse_json_column};
use context_jobs::contract::{ContextInsight, ContextProvenance};
use context_jobs::entries::{parse_kind, parse_status};

/// Columns of [`EntryRow`], in order.
pub const ENTRY_COLUMNS: &str = "id, kind, content, attributes, version, status, provenance, superseded_by, \
    expires_at_ms, created_at_ms, updated_at_ms";

pub type EntryRow =
    (String, String, String, Option<String>, i64, String, String, Option<String>, Option<i64>, i64, i64);

pub fn entry_from_row(row: EntryRow) -> StoreResult<ContextInsight> {
    let (id, kind, content, attributes, version, status, provenance, superseded_by, expires_at_ms, created, updated) =
        row;
    let corrupt = |what: &str| StoreError::Other(anyhow::anyhow!("corrupt entry row {id:?}: {what}"));
    let provenance: ContextProvenance = serde_json::from_str(&provenance).map_err(|_| corrupt("provenance"))?;
    Ok(ContextInsight {
        kind: parse_kind(&kind).ok_or_else(|| corrupt("kind"))?,
        content: serde_json::from_str(&content).map_err(|_| corrupt("content"))?,
        attributes: parse_json_column(attributes)?,
        version: version.max(0) as u64,
        status: parse_status(&status).ok_or_else(|| corrupt("status"))?,
        provenance,
        superseded_by,
        expires_at_ms,
        created_at_ms: created,
        updated_at_ms: updated,
        id,
    })
}

/// The stored form of an entry's columns, computed once per written row.
pub struct EntryColumns {
    pub kind: &'static str,
    pub content: String,
    pub attributes: Option<String>,
    pub version: i64,
    pub status: &'static str,
    pub provenance: String,
    pub snapshot: String,
}

pub fn entry_columns(e: &ContextInsight) -> EntryColumns {
    EntryColumns {
        kind: context_jobs::entries::kind_str(e.kind),
        content: e.content.to_string(),
        attributes: super::json_column(&e.attributes),
        version: e.version.min(i64::MAX as u64) as i64,
        status: context_jobs::entries::status_str(e.status),
        provenance: serde_json::to_string(&e.provenance).unwrap_or_default(),
        snapshot: serde_json::to_string(e).unwrap_or_default(),
    }
}
