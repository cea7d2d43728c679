//! Payload of the `rebuild_vector` operation.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RebuildVectorJob {
    /// Re-embed every active entry, not only stale ones.
    #[serde(default)]
    pub force: bool,
}
