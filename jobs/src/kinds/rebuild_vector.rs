//! The `rebuild_vector` operation: re-embed the tenant's active entries (`force`) or only
//! the stale ones (above the projection watermark), walking them in change order.

use serde::{Deserialize, Serialize};

use super::{Kind, request_variant};
use crate::contract::{ContextOperationKind, RebuildVectorProjectionRequest};

pub struct RebuildVector;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RebuildVectorArgs {
    /// Re-embed every active entry, not only stale ones.
    #[serde(default)]
    pub force: bool,
}

/// Where a run resumes: after change sequence `after_seq`, with `written` vectors so far.
/// (A checkpoint from before the walk was in change order has no `after_seq`: the run
/// starts its walk again, which only rewrites what differs.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RebuildCheckpoint {
    #[serde(default)]
    pub after_seq: i64,
    #[serde(default)]
    pub written: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RebuildResult {
    pub processed: u64,
    pub total: u64,
    pub written: u64,
    pub force: bool,
    pub model: String,
}

pub const PHASE_EMBEDDING: &str = "embedding";

impl Kind for RebuildVector {
    const KIND: ContextOperationKind = ContextOperationKind::RebuildVector;
    type Submission = RebuildVectorProjectionRequest;
    type Args = RebuildVectorArgs;
    type Checkpoint = RebuildCheckpoint;
    type Output = RebuildResult;
    request_variant!(RebuildVector);
}

impl RebuildVector {
    pub fn args(submission: RebuildVectorProjectionRequest) -> RebuildVectorArgs {
        RebuildVectorArgs { force: submission.force }
    }
}
