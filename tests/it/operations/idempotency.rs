//! One idempotency key submitted by many clients at once answers one operation to all of
//! them. On PostgreSQL every submission looked the key up before any inserted, and all but
//! one then failed on the key's unique index (a 500) or on the delete's barrier (a 409).

use context_ops::config::Role;
use futures::future::join_all;
use serde_json::{Value, json};

use crate::harness::{Backend, TestApp};

const ADVANCED: &str = "/internal/v1/context/advanced-operations";

async fn one_key_submitted_at_once_answers_one_operation(backend: Backend) {
    // API only: nothing runs, so what was submitted stays as it was.
    let app = TestApp::start_command(backend, Role::Api, |_| {}).await;
    let delete = json!({"kind": "delete", "request": {"scope": {"conversationId": "c"}}, "idempotencyKey": "d1"});
    let retention = json!({"kind": "retention", "request": {"scope": {"conversationId": "c"}, "policy": {"maxMessages": 5}},
                           "idempotencyKey": "r1"});
    for body in [delete, retention] {
        let replies: Vec<(u16, Value)> = join_all((0..16).map(|_| app.post(ADVANCED, &body))).await;
        let ids: Vec<&str> = replies
            .iter()
            .map(|(status, reply)| {
                assert_eq!(*status, 202, "{reply}");
                reply["id"].as_str().unwrap()
            })
            .collect();
        assert!(ids.iter().all(|id| *id == ids[0]), "one operation for one key: {ids:?}");
    }
    let (status, listed) = app.get("/internal/v1/context/operations").await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(2), "{listed}");
    app.stop().await;
}

backend_tests!(backend: one_key_submitted_at_once_answers_one_operation);
