//! The order work starts in: fair share across tenants (a tenant with one operation is not
//! stuck behind another's backlog, as it would be in FIFO order), priority then age within
//! a tenant. An API-only app queues everything first; then one worker with one slot starts
//! it all, so the start times give the order.

use serde_json::{Value, json};

use super::{delete_as, view};
use crate::harness::jwt::{jwt_mode, tenant_token};
use crate::harness::{Backend, TestApp};
use context_ops::config::Role;

/// One worker, one delete at a time.
async fn one_slot_worker(api: &TestApp) -> TestApp {
    TestApp::start_on(api, Role::Worker, |c| {
        jwt_mode(c);
        c.worker.worker_concurrency = 1;
    })
    .await
}

fn started(op: &Value) -> i64 {
    op["startedAtMs"].as_i64().unwrap_or_else(|| panic!("never started: {op}"))
}

async fn a_lone_tenant_starts_ahead_of_a_backlog(backend: Backend) {
    let api = TestApp::start_command(backend, Role::Api, jwt_mode).await;
    let (a, b) = (tenant_token("a"), tenant_token("b"));
    let mut backlog = Vec::new();
    for i in 0..40 {
        backlog.push(delete_as(&api, Some(&a), &format!("a{i}"), json!({})).await);
    }
    let lone = delete_as(&api, Some(&b), "b0", json!({})).await;
    let worker = one_slot_worker(&api).await;
    api.as_caller(&b).wait_terminal(&lone).await;
    let lone_started = started(&view(&api, Some(&b), &lone).await);
    let client = api.as_caller(&a);
    let mut ahead = 0;
    for id in &backlog {
        client.wait_terminal(id).await;
        if started(&view(&api, Some(&a), id).await) < lone_started {
            ahead += 1;
        }
    }
    // FIFO would start all 40 first; fair share starts B's at its first chance (the first
    // claim may already have been A's).
    assert!(ahead <= 1, "{ahead} of tenant a's backlog started before tenant b's one operation");
    worker.stop().await;
}

async fn higher_priority_starts_first_within_a_tenant(backend: Backend) {
    let api = TestApp::start_command(backend, Role::Api, jwt_mode).await;
    let t = tenant_token("p");
    let mut ids = Vec::new();
    for (i, priority) in [1, 9, 5, 9, 3].into_iter().enumerate() {
        ids.push((priority, i, delete_as(&api, Some(&t), &format!("c{i}"), json!({"priority": priority})).await));
    }
    let queued = view(&api, Some(&t), &ids[1].2).await;
    assert_eq!(queued["priority"], 9, "{queued}");
    let worker = one_slot_worker(&api).await;
    let client = api.as_caller(&t);
    let mut starts = Vec::new();
    for (priority, i, id) in &ids {
        client.wait_terminal(id).await;
        starts.push((started(&view(&api, Some(&t), id).await), *priority, *i));
    }
    starts.sort();
    let order: Vec<(i64, usize)> = starts.iter().map(|(_, p, i)| (*p, *i)).collect();
    assert_eq!(order, vec![(9, 1), (9, 3), (5, 2), (3, 4), (1, 0)], "priority, then age");
    // Out of range is a 400, and nothing is stored.
    for bad in [json!({"priority": 0}), json!({"priority": 10}), json!({"priority": "high"})] {
        let mut body = json!({"scope": {"conversationId": "bad"}});
        body.as_object_mut().unwrap().extend(bad.as_object().unwrap().clone());
        let (status, error) = api.post_as(Some(&t), "/internal/v1/context/conversations/delete", &body).await;
        crate::harness::assert_api_error(status, &error, 400);
    }
    worker.stop().await;
}

backend_tests!(backend: a_lone_tenant_starts_ahead_of_a_backlog, higher_priority_starts_first_within_a_tenant);
