//! Payload of the `import` operation.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportJob {
    /// Import from a stored artifact of this tenant…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_ref: Option<String>,
    /// …or from inline records (exactly one source).
    #[serde(default)]
    pub messages: Vec<crate::contract::ConversationRecord>,
    #[serde(default)]
    pub entries: Vec<crate::contract::ContextInsight>,
}
