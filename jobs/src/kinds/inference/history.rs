//! From stored conversation records to the chat-style messages of a turn, within a
//! byte budget. The worker loads the newest records; this module decides which of
//! them fit and what each one sends.

use serde_json::{Value, json};

use crate::contract::{ConversationRecord, content_text};

/// The chat-style messages (or typed Responses items) one stored record contributes,
/// in order. `user`/`system` send their text; `assistant` its text and then any echo
/// items a reply appended by an inference operation kept (so a tool turn can be
/// continued from history); `tool` becomes a tool result when it names its call;
/// `event` records and tool records without a call id send nothing.
pub fn record_messages(record: &ConversationRecord) -> Vec<Value> {
    let text = content_text(&record.content);
    match record.role.as_str() {
        "user" | "system" => vec![json!({"role": record.role, "content": text})],
        "assistant" => {
            let mut out = Vec::new();
            if !text.is_empty() {
                out.push(json!({"role": "assistant", "content": text}));
            }
            let echo = record.metadata["inference"]["echo"].as_array();
            // Only typed items may pass through verbatim; anything else was not
            // written by us and is ignored rather than sent.
            out.extend(
                echo.into_iter().flatten().filter(|item| item["type"].as_str().is_some_and(|t| !t.is_empty())).cloned(),
            );
            out
        }
        "tool" => match record.tool_call_id.as_deref() {
            Some(call) if !call.is_empty() => {
                vec![json!({"role": "tool", "tool_call_id": call, "content": text})]
            }
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// Bytes a record counts against the history budget: the size of what it sends.
pub fn record_cost(record: &ConversationRecord) -> usize {
    record_messages(record).iter().map(|m| m.to_string().len()).sum()
}

/// The role of records that never send anything (`record_messages` is empty for every one
/// of them): the worker's history read leaves them out in its query.
pub const EVENT_ROLE: &str = "event";

/// A conversation's history read newest first, record by record, until the window is
/// known: one record past `budget` ends it. Only records that send something are kept, so
/// what a turn holds is bounded by the budget (plus one record) however many events or
/// other silent records the conversation has.
#[derive(Debug)]
pub struct HistoryScan {
    budget: usize,
    used: usize,
    newest_first: Vec<ConversationRecord>,
    newest_sequence: Option<i64>,
}

impl HistoryScan {
    pub fn new(budget: usize) -> Self {
        HistoryScan { budget, used: 0, newest_first: Vec::new(), newest_sequence: None }
    }

    /// Take the next older record; `false` once the window is complete (read no more).
    pub fn push(&mut self, record: ConversationRecord) -> bool {
        self.newest_sequence.get_or_insert(record.sequence);
        let cost = record_cost(&record);
        if cost > 0 {
            self.used += cost;
            self.newest_first.push(record);
        }
        self.used <= self.budget
    }

    /// The sequence of the newest record read (sent or not).
    pub fn newest_sequence(&self) -> Option<i64> {
        self.newest_sequence
    }

    /// Records held now.
    pub fn held(&self) -> usize {
        self.newest_first.len()
    }

    /// The window's messages, oldest first ([`history_window`]).
    pub fn into_messages(mut self) -> Vec<Value> {
        self.newest_first.reverse();
        history_window(&self.newest_first, self.budget)
    }
}

/// The newest whole records (given oldest first) whose cost fits in `budget` bytes,
/// as messages, oldest first. The window never opens with a tool result (or with
/// records that send nothing): a result whose call was cut off would be rejected by
/// the provider.
pub fn history_window(records: &[ConversationRecord], budget: usize) -> Vec<Value> {
    let mut start = records.len();
    let mut used = 0usize;
    while start > 0 {
        let cost = record_cost(&records[start - 1]);
        if used + cost > budget {
            break;
        }
        used += cost;
        start -= 1;
    }
    while start < records.len() && (records[start].role == "tool" || record_messages(&records[start]).is_empty()) {
        start += 1;
    }
    records[start..].iter().flat_map(record_messages).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(role: &str, content: Value) -> ConversationRecord {
        ConversationRecord::new(format!("{role}-{content}"), "c", role, content)
    }

    #[test]
    fn roles_map_to_chat_messages() {
        assert_eq!(record_messages(&rec("user", json!("hi"))), vec![json!({"role": "user", "content": "hi"})]);
        assert_eq!(
            record_messages(&rec("system", json!([{"text": "a"}, "b"]))),
            vec![json!({"role": "system", "content": "a\nb"})]
        );
        assert!(record_messages(&rec("event", json!("e"))).is_empty());
        assert!(record_messages(&rec("tool", json!("out"))).is_empty(), "no call id");
        let mut tool = rec("tool", json!("42"));
        tool.tool_call_id = Some("c1".into());
        assert_eq!(record_messages(&tool), vec![json!({"role": "tool", "tool_call_id": "c1", "content": "42"})]);
        // Every produced message passes the request validation.
        for m in record_messages(&tool) {
            crate::responses::validate_chat_message(&m).unwrap();
        }
    }

    #[test]
    fn an_appended_reply_replays_its_echo_after_its_text() {
        let mut reply = rec("assistant", json!("calling"));
        let call = json!({"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"});
        let reasoning = json!({"type": "reasoning", "id": "rs", "summary": []});
        reply.metadata = json!({"inference": {"echo": [reasoning.clone(), {"not": "typed"}, call.clone()]}});
        assert_eq!(
            record_messages(&reply),
            vec![json!({"role": "assistant", "content": "calling"}), reasoning, call.clone()]
        );
        reply.content = json!("");
        assert_eq!(record_messages(&reply).len(), 2, "no empty text message");
        assert_eq!(record_messages(&reply)[1], call);
    }

    #[test]
    fn the_window_keeps_the_newest_whole_records_within_budget() {
        let records: Vec<_> = (0..5).map(|i| rec("user", json!(format!("m{i}")))).collect();
        let one = record_cost(&records[0]);
        assert_eq!(history_window(&records, one * 5).len(), 5);
        let three = history_window(&records, one * 3 + one / 2);
        assert_eq!(three.len(), 3);
        assert_eq!(three[0]["content"], "m2");
        assert_eq!(three[2]["content"], "m4");
        assert!(history_window(&records, one - 1).is_empty());
        assert!(history_window(&[], 1000).is_empty());
    }

    #[test]
    fn the_window_stops_at_the_first_record_that_does_not_fit() {
        let records = vec![rec("user", json!("a")), rec("user", json!("x".repeat(500))), rec("user", json!("b"))];
        let w = history_window(&records, record_cost(&records[0]) * 3);
        assert_eq!(w, vec![json!({"role": "user", "content": "b"})]);
    }

    #[test]
    fn a_scan_holds_only_records_that_send_something() {
        let mut scan = HistoryScan::new(1_000);
        let mut user = rec("user", json!("hello"));
        user.sequence = 7;
        let mut newest = rec("event", json!("x".repeat(10_000)));
        newest.sequence = 100_000;
        assert!(scan.push(newest));
        for _ in 0..50_000 {
            assert!(scan.push(rec("event", json!("x".repeat(1_000)))), "an event costs nothing");
            assert!(scan.push(rec("tool", json!("no call id"))));
        }
        assert_eq!(scan.held(), 0, "silent records are not held");
        assert!(scan.push(user));
        assert_eq!(scan.newest_sequence(), Some(100_000), "the newest record read, sent or not");
        // One record past the budget ends the read; the window is the same as from every record.
        assert!(!scan.push(rec("user", json!("y".repeat(2_000)))));
        assert_eq!(scan.held(), 2);
        assert_eq!(scan.into_messages(), vec![json!({"role": "user", "content": "hello"})]);
    }

    #[test]
    fn the_window_never_opens_with_a_tool_result_or_an_event() {
        let mut tool = rec("tool", json!("out"));
        tool.tool_call_id = Some("c1".into());
        let records =
            vec![rec("assistant", json!("x".repeat(400))), tool, rec("event", json!("e")), rec("user", json!("next"))];
        let w = history_window(&records, 200);
        assert_eq!(w, vec![json!({"role": "user", "content": "next"})]);
    }
}
