//! Every `errorCode` an operation can carry, in one enum: the engine's own, and each kind's.
//! Provider and database messages go in `error`; these strings never change meaning (they
//! are part of the wire contract: clients branch on them).

use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! codes {
    ($($(#[$doc:meta])* $variant:ident = $text:literal,)*) => {
        /// A stable, machine-readable failure classification.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum ErrorCode {
            $($(#[$doc])* $variant,)*
        }

        impl ErrorCode {
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $text,)*
                }
            }
        }
    };
}

codes! {
    // ---- the engine ----
    /// The last attempt failed transiently; the operation is queued to retry with backoff.
    Transient = "transient",
    /// Shown while an operation runs again after its previous worker stopped renewing its
    /// lease (cleared on success).
    LeaseExpired = "lease_expired",
    /// Transient failures (database/queue unavailable, worker crash, provider 5xx/429) used
    /// up the attempt budget.
    RetriesExhausted = "retries_exhausted",
    /// The request was valid at submission but cannot be carried out.
    InvalidRequest = "invalid_request",
    /// The stored request or checkpoint no longer decodes.
    CorruptOperation = "corrupt_operation",
    /// An unexpected failure that retrying will not fix.
    Internal = "internal",
    /// The operation's deadline (`deadlineMs`, `timeoutMs` or the kind's default) passed
    /// before it finished; a queued one past its deadline never starts.
    DeadlineExceeded = "deadline_exceeded",
    /// Only on the contract's paths, which have no `cancelled` state: a cancelled operation
    /// shows as `failed` with this code (`operation::contract_form`).
    Cancelled = "cancelled",
    // ---- rebuild_vector ----
    /// The embeddings provider refused the input or replied with something undecodable.
    EmbeddingFailed = "embedding_failed",
    // ---- export / import (the artifact format) ----
    /// The artifact's bytes do not hash to its recorded digest.
    ArtifactBadDigest = "artifact_bad_digest",
    /// The artifact ends before its trailer.
    ArtifactTruncated = "artifact_truncated",
    /// A line of the artifact is not a valid record.
    ArtifactBadLine = "artifact_bad_line",
    /// The artifact's schema version is not one this service reads.
    ArtifactUnknownSchema = "artifact_unknown_schema",
    /// The artifact was deleted or expired.
    ArtifactNotFound = "artifact_not_found",
    // ---- inference: the call ----
    /// Every attempt's last failure was the total timeout (`RESPONSES_TIMEOUT_MS`).
    Timeout = "timeout",
    /// The provider rejected the request (4xx other than 408/409/429, or `x-should-retry: false`).
    ProviderRejected = "provider_rejected",
    /// A 429 caused by `insufficient_quota`: waiting will not help.
    InsufficientQuota = "insufficient_quota",
    /// `appendReply` could not append: the conversation is being deleted.
    ConversationDeleting = "conversation_deleting",
    // ---- inference: the decoder (`responses::ResponseDecodeError`) ----
    /// The model refused (a successful turn; the code only appears in the decoder).
    Refused = "refused",
    /// A refusal mixed with tool calls: ambiguous, so fail closed.
    MixedRefusalToolCalls = "mixed_refusal_tool_calls",
    /// A top-level `error` object in the body.
    ProviderError = "provider_error",
    /// `status: failed`.
    ProviderFailed = "provider_failed",
    /// `status: incomplete`.
    Incomplete = "incomplete",
    /// `status: cancelled`.
    ProviderCancelled = "provider_cancelled",
    /// A status that is not terminal (`queued`, `in_progress`, …).
    NonTerminal = "non_terminal",
    /// A 2xx body that is not JSON, or nothing in it affirms success.
    MalformedResponse = "malformed_response",
}

impl ErrorCode {
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            assert!(seen.insert(code.as_str()), "{code} twice");
            assert_eq!(ErrorCode::parse(code.as_str()), Some(*code));
            let json = serde_json::to_string(code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()), "serde and as_str agree");
        }
        assert_eq!(ErrorCode::parse("nope"), None);
    }
}
