//! The OpenAI **Responses API** wire codec (`POST /v1/responses`), as pure
//! functions: no I/O, no clock, no randomness. The transport that actually talks
//! HTTP lives elsewhere and calls into this module for every decision about what
//! goes on the wire and what came back.
//!
//! This module owns three things, one submodule each:
//!
//! - [`request`] — shaping chat-style messages into a request body, the strict
//!   validation of what a caller may send, and the `store` policy
//!   ([`STORE_RESPONSE_SERVER_SIDE`]).
//! - [`decode`] — turning a reply body into a typed [`DecodedResponse`] or a
//!   typed [`ResponseDecodeError`]. It is fail-closed: an HTTP `2xx` only means
//!   "accepted", so `Ok` requires affirmative output in the body.
//! - [`retry`] — the retry policy for HTTP statuses and transport errors,
//!   matching the official OpenAI clients (statuses, server hints, capped
//!   exponential backoff). The caller supplies the jitter so the policy stays
//!   deterministic and testable.
//!
//! Keeping both directions and the retry rules in one place is deliberate: two
//! copies of one wire shape drift, and drift here means a truncated or refused
//! turn being mistaken for a successful one.

pub mod decode;
pub mod request;
pub mod retry;

pub use decode::{DecodedResponse, ResponseDecodeError, TokenUsage, decode_response, decode_usage};
pub use request::{
    ResponsesRequest, STORE_RESPONSE_SERVER_SIDE, build_request_body, build_responses_input, validate_chat_message,
    validate_metadata, validate_request, validate_tools,
};
pub use retry::{
    HttpDisposition, RetryHeaders, backoff_ms, classify_http, classify_transport_error, rate_limit_block_ms,
    server_hint_ms,
};
