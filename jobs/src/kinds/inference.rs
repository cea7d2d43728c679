//! Payload of the `inference` operation: one Responses turn.

use serde::{Deserialize, Serialize};

use crate::responses::ResponsesRequest;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InferenceJob {
    /// The turn as submitted (messages already include loaded history when a
    /// conversation was named).
    pub request: ResponsesRequest,
    /// Conversation to load history from and append the reply to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    #[serde(default)]
    pub append_reply: bool,
}
