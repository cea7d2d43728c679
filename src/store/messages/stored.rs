//! Messages in the form they are stored: every text column of a batch (scope, content and
//! metadata as JSON, the folded search text) serialised once into one buffer, each row
//! holding the spans of its columns.
//!
//! Serialising is the CPU share of a write. The import builds a batch on its decoder task,
//! so its write transaction (the import's critical path) holds only the database's share.
//! One buffer per batch rather than a dozen strings per row: a batch is one allocation that
//! goes back to the system whole when freed (the import hands batches between threads, and
//! per-row strings freed on another thread than they were made on grew the allocator's
//! arenas by ~9 MiB in the artifacts bench).

use std::ops::Range;

use crate::store::json_column;
use context_jobs::contract::{ConversationRecord, search_text};

/// A batch of messages ready to be written by [`super::append_in`].
#[derive(Default)]
pub struct StoredMessages {
    text: String,
    rows: Vec<Row>,
    /// Where a JSON column is written before it is checked and copied onto `text` (see
    /// [`StoredMessages::json`]); kept for the batch's next row.
    scratch: Vec<u8>,
}

struct Row {
    id: Range<usize>,
    conversation_id: Range<usize>,
    agent: Option<Range<usize>>,
    role: Range<usize>,
    scope: Range<usize>,
    content: Range<usize>,
    search_text: Range<usize>,
    name: Option<Range<usize>>,
    tool_call_id: Option<Range<usize>>,
    created_at_ms: i64,
    metadata: Option<Range<usize>>,
}

/// One message of a [`StoredMessages`], borrowed: the columns `append_in` writes.
#[derive(Clone, Copy)]
pub struct StoredMessage<'a> {
    pub id: &'a str,
    pub conversation_id: &'a str,
    /// The agent the conversation is listed under (the scope's, else its first related).
    pub agent: Option<&'a str>,
    pub role: &'a str,
    pub scope: &'a str,
    pub content: &'a str,
    pub search_text: &'a str,
    pub name: Option<&'a str>,
    pub tool_call_id: Option<&'a str>,
    /// `0`: stamped with the write's time.
    pub created_at_ms: i64,
    pub metadata: Option<&'a str>,
}

impl StoredMessages {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Serialise `record` onto the batch. JSON is written straight into the buffer, not
    /// through a string per column (one more allocation and copy each).
    pub fn push(&mut self, record: &ConversationRecord) {
        let text = &mut self.text;
        let mut put = |s: &str| {
            let start = text.len();
            text.push_str(s);
            start..text.len()
        };
        let id = put(&record.id);
        let conversation_id = put(&record.scope.conversation_id);
        let agent = record.scope.listing_agent().map(&mut put);
        let role = put(&record.role);
        let name = record.name.as_deref().map(&mut put);
        let tool_call_id = record.tool_call_id.as_deref().map(&mut put);
        let search_text = put(&search_text(&record.content));
        let metadata = json_column(&record.metadata).as_deref().map(&mut put);
        let scope = self.json(&record.scope);
        let content = self.json(&record.content);
        self.rows.push(Row {
            id,
            conversation_id,
            agent,
            role,
            scope,
            content,
            search_text,
            name,
            tool_call_id,
            created_at_ms: record.created_at_ms,
            metadata,
        });
    }

    /// Append `value` as compact JSON (what `serde_json::to_string` writes). It is written
    /// into the scratch buffer and checked as UTF-8 once: serde_json writes a value in many
    /// small pieces (each punctuation mark and string apart), and checking and pushing each
    /// piece onto the `String` was ~4 % of the import's CPU (`perf`).
    fn json(&mut self, value: &impl serde::Serialize) -> Range<usize> {
        let start = self.text.len();
        self.scratch.clear();
        // Our types always serialise, to UTF-8; were one not to, it is stored as an empty
        // text, as `to_string(…).unwrap_or_default()` would.
        if serde_json::to_writer(&mut self.scratch, value).is_ok()
            && let Ok(json) = std::str::from_utf8(&self.scratch)
        {
            self.text.push_str(json);
        }
        start..self.text.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = StoredMessage<'_>> {
        self.rows.iter().map(|row| {
            let text = |span: &Range<usize>| &self.text[span.clone()];
            StoredMessage {
                id: text(&row.id),
                conversation_id: text(&row.conversation_id),
                agent: row.agent.as_ref().map(text),
                role: text(&row.role),
                scope: text(&row.scope),
                content: text(&row.content),
                search_text: text(&row.search_text),
                name: row.name.as_ref().map(text),
                tool_call_id: row.tool_call_id.as_ref().map(text),
                created_at_ms: row.created_at_ms,
                metadata: row.metadata.as_ref().map(text),
            }
        })
    }
}

impl<'a> FromIterator<&'a ConversationRecord> for StoredMessages {
    fn from_iter<I: IntoIterator<Item = &'a ConversationRecord>>(records: I) -> Self {
        let records = records.into_iter();
        let mut batch = StoredMessages { rows: Vec::with_capacity(records.size_hint().0), ..Default::default() };
        for record in records {
            batch.push(record);
        }
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use context_jobs::contract::{ConversationScope, content_text, search_fold};
    use serde_json::{Value, json};

    fn record(id: &str, content: Value, metadata: Value) -> ConversationRecord {
        ConversationRecord {
            id: id.into(),
            scope: ConversationScope::conversation("c-\u{e9}"),
            role: "user".into(),
            content,
            name: Some("n\"ame".into()),
            tool_call_id: None,
            sequence: 0,
            created_at_ms: 7,
            metadata,
        }
    }

    /// Every column reads back as the per-column serialisation it replaces would give.
    #[test]
    fn columns_match_their_one_by_one_serialisation() {
        let records = [
            record("a", json!("Héllo \"Wörld\"\n\u{1F600} ΣΑΣ"), json!({"k": ["v", 1, null]})),
            record("b", json!([{"type": "text", "text": "Part ONE"}, "Two"]), Value::Null),
        ];
        let batch: StoredMessages = records.iter().collect();
        assert_eq!(batch.len(), 2);
        for (stored, r) in batch.iter().zip(&records) {
            assert_eq!(stored.id, r.id);
            assert_eq!(stored.conversation_id, r.scope.conversation_id);
            assert_eq!(stored.agent, r.scope.listing_agent());
            assert_eq!(stored.role, r.role);
            assert_eq!(stored.scope, serde_json::to_string(&r.scope).unwrap());
            assert_eq!(stored.content, r.content.to_string());
            assert_eq!(stored.search_text, search_fold(&content_text(&r.content)));
            assert_eq!(stored.name, r.name.as_deref());
            assert_eq!(stored.tool_call_id, None);
            assert_eq!(stored.created_at_ms, 7);
            assert_eq!(stored.metadata.map(str::to_owned), crate::store::json_column(&r.metadata));
        }
    }
}
