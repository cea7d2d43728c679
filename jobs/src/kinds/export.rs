//! The `export` operation: the tenant's messages and entries, streamed into a stored
//! artifact. Its payload, the checkpoint a resumed run continues from, and its result.

use serde::{Deserialize, Serialize};

use super::{Kind, request_variant};
use crate::artifact::{EncoderState, Finished};
use crate::contract::{ContextOperationKind, ExportContextRequest, ExportFilter};

pub struct Export;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportArgs {
    #[serde(default)]
    pub include_expired: bool,
    /// Only some records (absent: the whole tenant).
    #[serde(default, skip_serializing_if = "ExportFilter::is_empty")]
    pub filter: ExportFilter,
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ExportResult {
    pub artifact_id: String,
    pub digest: String,
    pub size_bytes: u64,
    pub messages: u64,
    pub entries: u64,
}

impl ExportResult {
    pub fn new(artifact_id: &str, finished: &Finished) -> Self {
        Self {
            artifact_id: artifact_id.to_string(),
            digest: finished.digest.clone(),
            size_bytes: finished.size_bytes,
            messages: finished.messages,
            entries: finished.entries,
        }
    }
}

pub const PHASE_EXPORTING: &str = "exporting";
pub const PHASE_SEALING: &str = "sealing";

impl Kind for Export {
    const KIND: ContextOperationKind = ContextOperationKind::Export;
    type Submission = ExportContextRequest;
    type Args = ExportArgs;
    type Checkpoint = ExportCheckpoint;
    type Output = ExportResult;
    request_variant!(Export);
}

impl Export {
    /// Validate a submission; `Err` is a 400 message.
    pub fn args(submission: ExportContextRequest) -> Result<ExportArgs, String> {
        submission.filter.validate()?;
        Ok(ExportArgs { include_expired: submission.include_expired, filter: submission.filter })
    }
}
