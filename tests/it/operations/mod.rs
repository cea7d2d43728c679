//! The operations engine over real HTTP on both backends: submit → poll → succeeded for
//! delete and retention, cancel (`lifecycle`); idempotency, ETag/304, long-poll, tenant
//! walls and forget on queued operations (`queued`); listing, bad input, maintenance
//! status and metrics (`listing`); the retention sweep (`sweep`); an operation's shown
//! request on every kind (`request`); batches paced by time (`pacing`); a retention plan
//! that spares a conversation deleted and written again (`recreated`); one idempotency key
//! submitted by many at once (`idempotency`).

use context_jobs::contract::{
    CONTEXT_OPERATIONS_PATH as OPS, CONVERSATION_DELETE_PATH as DELETE, RETENTION_PATH as RETENTION,
};

use crate::harness::{TestApp, message};

mod idempotency;
mod lifecycle;
mod listing;
mod pacing;
mod queued;
mod recreated;
mod request;
mod sweep;

/// `n` messages in `conversation`, appended in batches of 500.
async fn seed(app: &TestApp, conversation: &str, n: usize) {
    let records: Vec<_> =
        (0..n).map(|i| message(conversation, &format!("{conversation}-{i:05}"), "user", "x")).collect();
    for chunk in records.chunks(500) {
        app.append_records(chunk).await;
    }
}

/// Messages left in `conversation` (up to a page of 500).
async fn count(app: &TestApp, conversation: &str) -> usize {
    app.recent(conversation, 500).await.len()
}
