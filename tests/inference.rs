//! The `inference` operation end to end: the real service (in-process on SQLite for most
//! cases, one run on PostgreSQL + Redis, and the real binary for the log and SIGKILL
//! cases) against a scripted fake Responses provider on 127.0.0.1
//! (`support/fake_responses.rs`), which also asserts what it received.
//!
//! - `replies`: what each provider body makes of the operation (decoder outcomes).
//! - `retries`: HTTP statuses, hints, timeouts and cancellation of the in-flight call.
//! - `conversation`: history loading, `appendReply` exactly once, resumption, validation,
//!   tenancy, and the PostgreSQL + Redis run.
//! - `process`: the binary — the key never logged or stored; SIGKILL mid-call, resume.

#[path = "support/child.rs"]
mod child;
mod common;
#[path = "support/fake_responses.rs"]
mod fake;

#[path = "inference/conversation.rs"]
mod conversation;
#[path = "inference/helpers.rs"]
mod helpers;
#[path = "inference/process.rs"]
mod process;
#[path = "inference/replies.rs"]
mod replies;
#[path = "inference/retries.rs"]
mod retries;
