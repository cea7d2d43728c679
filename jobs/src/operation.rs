//! The operation protocol as data: what a submitted operation asks for, the stable error
//! codes it can end with, the retry schedule, and the polling hints clients get.
//! The shell runs this against the database; nothing here does I/O.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::contract::{ContextOperationKind, ContextOperationState, RetentionPolicy};

/// Stable machine-readable failure classifications (the `errorCode` field). Provider and
/// database messages go in `error`; these strings never change meaning.
pub mod error_code {
    /// The last attempt failed transiently; the operation is queued to retry.
    pub const TRANSIENT: &str = "transient";
    /// A transient failure repeated until the attempt budget ran out.
    pub const RETRIES_EXHAUSTED: &str = "retries_exhausted";
    /// The request was valid at submission but cannot be carried out (e.g. a bad plan).
    pub const INVALID_REQUEST: &str = "invalid_request";
    /// The stored request no longer decodes (a schema change, a corrupt row).
    pub const CORRUPT_OPERATION: &str = "corrupt_operation";
    /// The worker crashed (panicked) while running the operation, on every attempt.
    pub const WORKER_PANIC: &str = "worker_panic";
    /// The operation exceeded its deadline on every attempt.
    pub const TIMEOUT: &str = "timeout";
    /// An unexpected internal failure that retrying will not fix.
    pub const INTERNAL: &str = "internal";
    /// The embeddings provider refused the input or replied with something undecodable.
    pub const EMBEDDING_FAILED: &str = "embedding_failed";
}

/// What a submitted operation asks for. Stored as the operation's `request` and the
/// source of its idempotency fingerprint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OperationRequest {
    Delete {
        #[serde(rename = "conversationId")]
        conversation_id: String,
        #[serde(default)]
        reason: String,
    },
    Retention {
        #[serde(rename = "conversationId")]
        conversation_id: String,
        policy: RetentionPolicy,
    },
    RebuildVector(crate::kinds::rebuild_vector::RebuildVectorJob),
    Export(crate::kinds::export::ExportJob),
    Import(crate::kinds::import::ImportJob),
    Inference(crate::kinds::inference::InferenceJob),
}

impl OperationRequest {
    /// A stable digest of the request: the same request always gives the same value
    /// (object keys are ordered by serde_json's map), different requests differ.
    pub fn fingerprint(&self) -> String {
        let canonical = serde_json::to_vec(self).unwrap_or_default();
        let digest = Sha256::digest(&canonical);
        format!("sha256:{}", hex(&digest))
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0xf) as usize] as char);
    }
    out
}

/// Exponential backoff with jitter for re-queued operations: `base · 2^(attempt-1)`
/// capped at `cap`, minus up to 25 % (`jitter` in 0..1 is supplied by the caller).
pub fn retry_backoff_ms(attempt: u32, base_ms: u64, cap_ms: u64, jitter: f64) -> u64 {
    let exp = attempt.saturating_sub(1).min(32);
    let raw = base_ms.saturating_mul(1u64 << exp).min(cap_ms);
    let jitter = if jitter.is_finite() { jitter.clamp(0.0, 1.0) } else { 0.0 };
    (raw as f64 * (1.0 - 0.25 * jitter)) as u64
}

/// Whether a failed attempt should be retried.
pub fn should_retry(attempt: u32, max_attempts: u32) -> bool {
    attempt < max_attempts
}

/// How long a client should wait before polling again, or `None` once terminal.
pub fn next_poll_after_ms(state: ContextOperationState, not_before_ms: i64, now_ms: i64) -> Option<u64> {
    match state {
        ContextOperationState::Queued => {
            // A backed-off retry will not start before `not_before`.
            let wait = (not_before_ms - now_ms).max(0) as u64;
            Some(wait.clamp(500, 30_000))
        }
        ContextOperationState::Running => Some(1_000),
        _ => None,
    }
}

/// `Retry-After` seconds matching `next_poll_after_ms` (at least one second).
pub fn retry_after_secs(next_poll_after_ms: u64) -> u64 {
    next_poll_after_ms.div_ceil(1000).max(1)
}

/// The strong entity tag of an operation version.
pub fn etag(operation_id: &str, version: u64) -> String {
    format!("\"{operation_id}.{version}\"")
}

impl OperationRequest {
    pub fn kind(&self) -> ContextOperationKind {
        match self {
            Self::Delete { .. } => ContextOperationKind::Delete,
            Self::Retention { .. } => ContextOperationKind::Retention,
            Self::RebuildVector(_) => ContextOperationKind::RebuildVector,
            Self::Export(_) => ContextOperationKind::Export,
            Self::Import(_) => ContextOperationKind::Import,
            Self::Inference(_) => ContextOperationKind::Inference,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_is_stable_and_discriminating() {
        let a = OperationRequest::Delete { conversation_id: "c".into(), reason: String::new() };
        let b = OperationRequest::Delete { conversation_id: "d".into(), reason: String::new() };
        assert_eq!(a.fingerprint(), a.clone().fingerprint());
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert!(a.fingerprint().starts_with("sha256:"));
        let json: OperationRequest = serde_json::from_value(serde_json::to_value(&a).unwrap()).unwrap();
        assert_eq!(json, a);
    }

    #[test]
    fn backoff_grows_caps_and_jitters_down() {
        assert_eq!(retry_backoff_ms(1, 1000, 60_000, 0.0), 1000);
        assert_eq!(retry_backoff_ms(2, 1000, 60_000, 0.0), 2000);
        assert_eq!(retry_backoff_ms(10, 1000, 60_000, 0.0), 60_000);
        assert_eq!(retry_backoff_ms(2, 1000, 60_000, 1.0), 1500);
        assert_eq!(retry_backoff_ms(200, 1000, 60_000, f64::NAN), 60_000);
    }

    #[test]
    fn poll_hints() {
        assert_eq!(next_poll_after_ms(ContextOperationState::Queued, 0, 10), Some(500));
        assert_eq!(next_poll_after_ms(ContextOperationState::Queued, 10_000, 0), Some(10_000));
        assert_eq!(next_poll_after_ms(ContextOperationState::Succeeded, 0, 0), None);
        assert_eq!(retry_after_secs(1), 1);
        assert_eq!(retry_after_secs(2500), 3);
        assert!(should_retry(1, 5) && !should_retry(5, 5));
    }
}
