//! The `import` operation: its payload and the checkpoint a resumed run continues from.

use serde::{Deserialize, Serialize};

use crate::contract::{ContextInsight, ConversationRecord};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportJob {
    /// Import from a stored artifact of this tenant…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_ref: Option<String>,
    /// …or from inline records (exactly one source).
    #[serde(default)]
    pub messages: Vec<ConversationRecord>,
    #[serde(default)]
    pub entries: Vec<ContextInsight>,
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
#[serde(rename_all = "camelCase")]
pub struct ImportCounts {
    pub inserted: u64,
    pub skipped: u64,
}
