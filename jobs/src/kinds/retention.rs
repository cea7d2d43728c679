//! The `retention` operation for one conversation: plan once (messages older than
//! `maxAgeDays`, and all but the newest `maxMessages`), store the plan in the checkpoint,
//! and delete by that fixed predicate in batches, so a resumed run removes exactly what
//! was planned.

use serde::{Deserialize, Serialize};

use super::{Kind, request_variant};
use crate::contract::{ContextOperationKind, RetentionPolicy, RetentionRequest, validate_scope};
use crate::retention::{RetentionPlan, validate_policy};

pub struct Retention;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetentionArgs {
    pub conversation_id: String,
    pub policy: RetentionPolicy,
}

/// The plan made once, and how far the deletion got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetentionCheckpoint {
    #[serde(flatten)]
    pub plan: RetentionPlan,
    #[serde(default)]
    pub after_sequence: i64,
    /// The conversation's creation time when planned (`None`: it had no row). One deleted
    /// and written again since is another conversation, whose sequences start at 1 again:
    /// the plan's `upToSequence` would delete its new messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_created_at_ms: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RetentionResult {
    pub deleted_messages: u64,
    pub plan: RetentionPlan,
}

pub const PHASE_PLANNED: &str = "planned";
pub const PHASE_DELETING: &str = "deleting";

impl Kind for Retention {
    const KIND: ContextOperationKind = ContextOperationKind::Retention;
    type Submission = RetentionRequest;
    type Args = RetentionArgs;
    type Checkpoint = RetentionCheckpoint;
    type Output = RetentionResult;
    request_variant!(Retention);
}

impl Retention {
    /// Validate a submission; `Err` is a 400 message.
    pub fn args(submission: RetentionRequest) -> Result<RetentionArgs, String> {
        validate_scope(&submission.scope)?;
        validate_policy(&submission.policy)?;
        Ok(RetentionArgs { conversation_id: submission.scope.conversation_id, policy: submission.policy })
    }
}
