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
use context_jobs::contract::{ConversationRecord, content_text, search_fold};

/// A batch of messages ready to be written by [`super::append_in`].
#[derive(Default)]
pub struct StoredMessages {
    text: String,
    rows: Vec<Row>,
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

    /// Serialise `record` onto the batch.
    pub fn push(&mut self, record: &ConversationRecord) {
        let text = &mut self.text;
        let mut put = |s: &str| {
            let start = text.len();
            text.push_str(s);
            start..text.len()
        };
        let row = Row {
            id: put(&record.id),
            conversation_id: put(&record.scope.conversation_id),
            agent: record.scope.listing_agent().map(&mut put),
            role: put(&record.role),
            scope: put(&serde_json::to_string(&record.scope).unwrap_or_default()),
            content: put(&record.content.to_string()),
            search_text: put(&search_fold(&content_text(&record.content))),
            name: record.name.as_deref().map(&mut put),
            tool_call_id: record.tool_call_id.as_deref().map(&mut put),
            created_at_ms: record.created_at_ms,
            metadata: json_column(&record.metadata).as_deref().map(&mut put),
        };
        self.rows.push(row);
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
        let mut batch = StoredMessages::default();
        for record in records {
            batch.push(record);
        }
        batch
    }
}
