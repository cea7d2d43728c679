//! The read-only pages: an agent's conversations, a conversation's messages page by page
//! (with a role filter), recall results with each one's score breakdown exactly as the API
//! gives it, and an entry with every version of its history.

use std::time::Duration;

use context_jobs::contract::{CONTEXT_CORRECT_PATH, CONTEXT_INSIGHTS_PATH, CONTEXT_RECALL_PATH};
use serde_json::{Value, json};

use super::UiServer;
use crate::harness::message;
use crate::harness::wait::poll_until;

/// Agent `helpdesk`: `support-42` with 120 messages (user and assistant in turn: three
/// pages of 50) and `support-43` with 3; entries `kafka-brokers` (corrected once: two
/// versions), `green-tea` and `backups`; returns once recall sees all three.
pub(super) async fn seed_browsable(ui: &UiServer) {
    let api = ui.api();
    for (conversation, n) in [("support-42", 120), ("support-43", 3)] {
        let records: Vec<_> = (1..=n)
            .map(|i| {
                let role = if i % 2 == 1 { "user" } else { "assistant" };
                let mut m = message(
                    conversation,
                    &format!("{conversation}-m{i}"),
                    role,
                    &format!("{conversation} says hello #{i}"),
                );
                m.scope.agent_id = Some("helpdesk".into());
                m
            })
            .collect();
        api.append_records(&records).await;
    }
    let entries = [
        ("kafka-brokers", "Kafka runs on two brokers in the eu-west cluster"),
        ("green-tea", "Alice prefers green tea over coffee"),
        ("backups", "The primary PostgreSQL database is backed up nightly"),
    ];
    for (id, text) in entries {
        let entry = json!({"id": id, "kind": "fact", "content": text, "version": 0, "status": "active",
                           "provenance": {"conversationId": "support-42", "messageIds": ["support-42-m1"]},
                           "createdAtMs": 0, "updatedAtMs": 0});
        let (status, body) = api.post(CONTEXT_INSIGHTS_PATH, &json!({"entry": entry, "expectedVersion": 0})).await;
        assert_eq!(status, 200, "{body}");
    }
    let correction = json!({"entryId": "kafka-brokers", "expectedVersion": 1,
                            "content": "Kafka runs on three brokers in the eu-west cluster", "reason": "a third broker was added"});
    let (status, body) = api.post(CONTEXT_CORRECT_PATH, &correction).await;
    assert_eq!(status, 200, "{body}");
    // The projector indexes entries in the background: wait until recall finds them all.
    poll_until("recall to see the seeded entries", Duration::from_secs(30), || async {
        let (status, body) =
            api.post(CONTEXT_RECALL_PATH, &json!({"query": "kafka brokers tea backed", "limit": 10})).await;
        assert_eq!(status, 200, "{body}");
        let found = body["items"].as_array().map_or(0, Vec::len);
        if found >= 3 && body["indexWatermark"]["lag"] == 0 { Ok(()) } else { Err(body.to_string()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_messages_entries_and_recall_breakdown() {
    let ui = UiServer::start(&[]).await;
    seed_browsable(&ui).await;
    let run = ui.scenario("browse", &[]).await;
    // What the page showed for the recall is what the API answers for the same query.
    let shown: Vec<Value> = serde_json::from_value(run.result["recall"].clone()).expect("the recall rows shown");
    let (status, answer) = ui.api().post(CONTEXT_RECALL_PATH, &json!({"query": "kafka brokers", "limit": 10})).await;
    assert_eq!(status, 200, "{answer}");
    let expected: Vec<Value> = answer["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let s = &item["score"];
            let f = |v: &Value| format!("{:.3}", v.as_f64().unwrap());
            json!([item["entry"]["id"], f(&s["lexical"]), f(&s["vector"]), f(&s["recency"]), f(&s["finalScore"])])
        })
        .collect();
    assert!(!expected.is_empty(), "recall finds the kafka entry: {answer}");
    assert_eq!(shown, expected, "the page shows each result's score breakdown as the API answers it");
}
