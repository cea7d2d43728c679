//! The `delete` operation: remove one conversation's messages in checkpointed batches,
//! then the conversation itself. Appends to it answer 409 while the delete is pending or
//! running (the conversation's deletion barrier, taken at submission).

use serde::{Deserialize, Serialize};

use super::{Kind, request_variant};
use crate::contract::{ContextOperationKind, DeleteConversationRequest, validate_scope};

pub struct Delete;

/// The stored request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteArgs {
    pub conversation_id: String,
    #[serde(default)]
    pub reason: String,
}

/// Every message with a sequence at or below `after_sequence` is deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteCheckpoint {
    pub after_sequence: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DeleteResult {
    pub deleted_messages: u64,
}

/// The phase of every batch.
pub const PHASE_DELETING: &str = "deleting";

impl Kind for Delete {
    const KIND: ContextOperationKind = ContextOperationKind::Delete;
    type Submission = DeleteConversationRequest;
    type Args = DeleteArgs;
    type Checkpoint = DeleteCheckpoint;
    type Output = DeleteResult;
    request_variant!(Delete);
}

impl Delete {
    /// Validate a submission; `Err` is a 400 message.
    pub fn args(submission: DeleteConversationRequest) -> Result<DeleteArgs, String> {
        validate_scope(&submission.scope)?;
        Ok(DeleteArgs { conversation_id: submission.scope.conversation_id, reason: submission.reason })
    }

    /// The next batch: `batch` sequence numbers from the first remaining one (one index
    /// range; fewer rows where retention left gaps). Returns its inclusive end.
    pub fn batch_end(first_remaining: i64, batch: i64) -> i64 {
        first_remaining.saturating_add(batch.max(1) - 1)
    }
}
