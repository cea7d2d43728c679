//! Queue control (issue 12) on both backends: the order work starts in (fair share across
//! tenants, priority within one), concurrency limits across worker processes, pause and
//! resume, deadlines and scheduled starts, retry from a checkpoint, bulk actions, admin
//! scope, and provider rate limits.

mod admin;
mod bulk;
mod cancel_requeue;
mod combined;
mod deadlines;
mod held;
mod limits;
mod limits_chosen;
mod many_tenants;
mod order;
mod pause;
mod plans;
mod rate_limits;
mod retry;

use serde_json::{Value, json};

use crate::harness::TestApp;
use context_jobs::contract::{CONTEXT_OPERATIONS_PATH as OPS, CONVERSATION_DELETE_PATH as DELETE};

pub const QUEUES: &str = "/internal/v1/context/queues";

/// Submit a delete of `conversation` as `token` (with extra top-level fields `extra`);
/// the operation id.
pub async fn delete_as(app: &TestApp, token: Option<&str>, conversation: &str, extra: Value) -> String {
    let mut body = json!({"scope": {"conversationId": conversation}});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let (status, op) = app.post_as(token, DELETE, &body).await;
    assert_eq!(status, 202, "{op}");
    op["id"].as_str().unwrap().to_string()
}

/// The operation as the REST form shows it (with the scheduling details), as `token`.
pub async fn view(app: &TestApp, token: Option<&str>, id: &str) -> Value {
    let (status, body) = app.get_as(token, &format!("{OPS}/{id}")).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// `n` messages in `conversation`, appended through the API.
pub async fn seed(app: &TestApp, token: Option<&str>, conversation: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let records: Vec<Value> = chunk
            .iter()
            .map(|i| json!({"id": format!("{conversation}-{i}"), "scope": {"conversationId": conversation}, "role": "user", "content": "x"}))
            .collect();
        let (status, body) =
            app.post_as(token, "/internal/v1/context/messages/batch", &json!({"messages": records})).await;
        assert_eq!(status, 200, "{body}");
    }
}
