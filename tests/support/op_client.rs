//! Operation HTTP helpers for the fault tests (real binaries): submit a delete, read an
//! operation, long-poll until a condition holds.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub const DELETE_PATH: &str = "/internal/v1/context/conversations/delete";
pub const OPERATIONS_PATH: &str = "/internal/v1/context/operations";

pub async fn submit_delete(client: &reqwest::Client, base: &str, conversation: &str) -> String {
    let response = client
        .post(format!("{base}{DELETE_PATH}"))
        .json(&json!({"scope": {"conversationId": conversation}}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 202, "delete submission failed: {body}");
    body["id"].as_str().expect("operation id").to_string()
}

pub async fn get_operation(client: &reqwest::Client, base: &str, id: &str) -> Value {
    let response = client.get(format!("{base}{OPERATIONS_PATH}/{id}")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    response.json().await.unwrap()
}

/// Long-poll until `done(op)` holds; `Err(last seen)` at the deadline.
pub async fn try_wait_until(
    client: &reqwest::Client,
    base: &str,
    id: &str,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) -> Result<Value, Value> {
    let deadline = Instant::now() + within;
    let mut op = get_operation(client, base, id).await;
    loop {
        if done(&op) {
            return Ok(op);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(op);
        }
        let timeout_ms = left.as_millis().clamp(1, 10_000);
        let url = format!("{base}{OPERATIONS_PATH}/{id}/wait?sinceVersion={}&timeoutMs={timeout_ms}", op["version"]);
        let response = client.get(url).timeout(Duration::from_secs(40)).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        op = response.json().await.unwrap();
    }
}

/// Long-poll until `done(op)` holds, or panic with the last state seen after `within`.
pub async fn wait_until(
    client: &reqwest::Client,
    base: &str,
    id: &str,
    within: Duration,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    match try_wait_until(client, base, id, within, done).await {
        Ok(op) => op,
        Err(last) => panic!("operation {id} not {what} within {within:?}; last seen {last}"),
    }
}

pub fn state(op: &Value) -> &str {
    op["state"].as_str().unwrap_or("")
}

pub fn processed(op: &Value) -> i64 {
    op["processed"].as_i64().unwrap_or(-1)
}

pub fn is_terminal(op: &Value) -> bool {
    matches!(state(op), "succeeded" | "failed" | "cancelled")
}

/// Running and part-way: at least one batch committed.
pub fn mid_run(op: &Value) -> bool {
    is_terminal(op) || (state(op) == "running" && processed(op) > 0)
}
