//! The `export` operation: its payload and the checkpoint a resumed run continues from.

use serde::{Deserialize, Serialize};

use crate::artifact::EncoderState;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportJob {
    #[serde(default)]
    pub include_expired: bool,
}

/// Committed with every batch of chunks: where the reads continue and the encoder's state
/// (bytes handed out, the partial-chunk carry, counts, section). The running hash is not
/// here: a resumed export rebuilds it from the chunks already stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportCheckpoint {
    pub artifact_id: String,
    /// The last message written: `(conversationId, sequence)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_message: Option<(String, i64)>,
    /// The last entry written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_entry: Option<String>,
    pub encoder: EncoderState,
}
