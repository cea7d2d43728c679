//! The polling hints clients get: `nextPollAfterMs` / `Retry-After` while an operation is
//! live, and the entity tag that changes with its version.

use crate::contract::ContextOperationState;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_hints() {
        assert_eq!(next_poll_after_ms(ContextOperationState::Queued, 0, 10), Some(500));
        assert_eq!(next_poll_after_ms(ContextOperationState::Queued, 10_000, 0), Some(10_000));
        assert_eq!(next_poll_after_ms(ContextOperationState::Succeeded, 0, 0), None);
        assert_eq!(retry_after_secs(1), 1);
        assert_eq!(retry_after_secs(2500), 3);
        assert_eq!(etag("x", 3), "\"x.3\"");
    }
}
