//! The `import` operation: messages and entries from a stored artifact or from inline
//! records. Its payload, the checkpoint a resumed run continues from, its result, and the
//! validation of a submission.

use serde::{Deserialize, Serialize};

use super::{Kind, Rejection, request_variant};
use crate::artifact::Record;
use crate::contract::{
    ContextInsight, ContextOperationKind, ConversationIdMap, ConversationRecord, ImportContextRequest,
    MAX_APPEND_MESSAGES, validate_append, validate_message_key,
};
use crate::entries::{EntryRuleError, imported_version, validate_imported_entry};

pub struct Import;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportArgs {
    /// Import from a stored artifact of this tenant…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_ref: Option<String>,
    /// …or from inline records (exactly one source).
    #[serde(default)]
    pub messages: Vec<ConversationRecord>,
    #[serde(default)]
    pub entries: Vec<ContextInsight>,
    /// Rename conversations on the way in (artifact imports; inline records are renamed
    /// at submission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id_map: Option<ConversationIdMap>,
}

/// Where an import stands. Validation writes nothing, so it has no checkpoint of its own:
/// the first checkpoint is written when it passes, and every later one after a batch,
/// in that batch's transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportCheckpoint {
    /// Byte offset just past the last imported line (a line boundary).
    pub offset: u64,
    /// Number of that line (the header is line 1).
    pub line: u64,
    /// Records read so far, by kind (the decoder resumes with them).
    pub messages_read: u64,
    pub entries_read: u64,
    pub messages: ImportCounts,
    pub entries: ImportCounts,
    /// Everything is imported; a resumed run only reports the result.
    #[serde(default)]
    pub done: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ImportCounts {
    pub inserted: u64,
    pub skipped: u64,
}

/// The result: what was inserted and skipped (ids that existed), by record kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ImportResult {
    pub messages: ImportCounts,
    pub entries: ImportCounts,
}

impl From<&ImportCheckpoint> for ImportResult {
    fn from(c: &ImportCheckpoint) -> Self {
        Self { messages: c.messages, entries: c.entries }
    }
}

pub const PHASE_VALIDATING: &str = "validating";
pub const PHASE_IMPORTING: &str = "importing";
pub const PHASE_DONE: &str = "done";

impl Kind for Import {
    const KIND: ContextOperationKind = ContextOperationKind::Import;
    type Submission = ImportContextRequest;
    type Args = ImportArgs;
    type Checkpoint = ImportCheckpoint;
    type Output = ImportResult;
    request_variant!(Import);
}

impl Import {
    /// Validate a submission of `tenant` (the tenant key's text): exactly one source;
    /// inline records obey the append limits. Returns the args and the (required)
    /// idempotency key. Whether an `artifactRef` names a ready artifact of the tenant is
    /// the shell's check.
    pub fn args(tenant: &str, submission: ImportContextRequest) -> Result<(ImportArgs, String), Rejection> {
        let key = crate::operation::validate_idempotency_key(&submission.idempotency_key)?;
        let mut submission = submission;
        let map = submission.conversation_id_map.take();
        if let Some(map) = &map {
            map.validate()?;
        }
        let inline = !submission.messages.is_empty() || !submission.entries.is_empty();
        match (&submission.artifact_ref, inline) {
            (Some(_), true) => {
                return Err("give exactly one source: artifactRef or inline messages/entries, not both".into());
            }
            (None, false) => return Err("nothing to import: give artifactRef or inline messages/entries".into()),
            (Some(id), false) => {
                crate::ids::ArtifactId::parse(id).map_err(|e| Rejection::Invalid(e.to_string()))?;
            }
            (None, true) => {
                // Inline records are renamed here, once, and validated as renamed.
                if let Some(map) = &map {
                    for (i, m) in submission.messages.iter_mut().enumerate() {
                        map.message(m).map_err(|e| Rejection::Invalid(format!("messages[{i}]: {e}")))?;
                    }
                    for (i, e) in submission.entries.iter_mut().enumerate() {
                        map.entry(e).map_err(|m| Rejection::Invalid(format!("entries[{i}]: {m}")))?;
                    }
                }
                if !submission.messages.is_empty() {
                    validate_append(tenant, &submission.messages)?;
                }
                if submission.entries.len() > MAX_APPEND_MESSAGES {
                    return Err(format!(
                        "an inline import carries at most {MAX_APPEND_MESSAGES} entries, got {}",
                        submission.entries.len()
                    )
                    .into());
                }
                for (i, entry) in submission.entries.iter_mut().enumerate() {
                    validate_imported_entry(entry).map_err(|e| match e {
                        EntryRuleError::Invalid(m) => Rejection::Invalid(format!("entries[{i}]: {m}")),
                        EntryRuleError::PayloadTooLarge(m) => Rejection::TooLarge(format!("entries[{i}]: {m}")),
                    })?;
                    entry.version = imported_version(entry.version);
                }
            }
        }
        let conversation_id_map = if submission.artifact_ref.is_some() { map } else { None };
        let args = ImportArgs {
            artifact_ref: submission.artifact_ref,
            messages: submission.messages,
            entries: submission.entries,
            conversation_id_map,
        };
        Ok((args, key))
    }

    /// An artifact record as this import writes it into `tenant` (the tenant key's
    /// text): renamed by the map, if any, an entry's version 0 stored as 1
    /// ([`imported_version`]), a message's key within [`validate_message_key`]'s bound. The
    /// validating pass and the importing pass both call this, so a rename that makes a
    /// record invalid fails validation, before anything is written. `Err` is the reason.
    pub fn prepare_record(args: &ImportArgs, tenant: &str, record: &mut Record) -> Result<(), String> {
        if let Record::Entry(e) = record {
            e.version = imported_version(e.version);
        }
        if let Some(map) = &args.conversation_id_map {
            match record {
                Record::Message(m) => map.message(m)?,
                Record::Entry(e) => map.entry(e)?,
            }
        }
        match record {
            Record::Message(m) => validate_message_key(tenant, m),
            Record::Entry(_) => Ok(()),
        }
    }
}
