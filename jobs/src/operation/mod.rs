//! The operation protocol as data: the state machine ([`machine`]) with every transition
//! and the decision after each attempt, every stable error code ([`ErrorCode`]), the retry
//! policy, the polling hints clients get, and the submission rules every kind shares.
//! The shell runs this against the database; nothing here does I/O.

pub mod change_position;
pub mod contract_form;
pub mod error_code;
pub mod limits;
pub mod machine;
pub mod options;
pub mod pacing;
pub mod polling;
pub mod rate_limit;
pub mod retry;
pub mod schedule;
pub mod view;

pub use error_code::ErrorCode;
pub use machine::{AttemptEnd, Progress, Transition, decide, phase};
pub use options::{Schedule, SubmitOptions};
pub use pacing::BatchPacer;
pub use polling::{etag, next_poll_after_ms, retry_after_secs};
pub use retry::RetryPolicy;

use crate::contract::MAX_RESOURCE_ID_CHARS;
pub use crate::kinds::OperationRequest;

/// An idempotency key: 1–191 characters, not blank, no NUL ([`crate::contract::nul`]).
/// `Err` is a 400 message.
pub fn validate_idempotency_key(key: &str) -> Result<String, String> {
    crate::contract::nul::check_text("idempotencyKey", key)?;
    if key.trim().is_empty() || key.chars().count() > MAX_RESOURCE_ID_CHARS {
        return Err(format!("idempotency key must be 1..={MAX_RESOURCE_ID_CHARS} characters"));
    }
    Ok(key.to_string())
}
