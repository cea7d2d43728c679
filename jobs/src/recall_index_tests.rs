//! The recall index's dictionaries stay bounded by what is live.

use super::*;

fn entry<'a>(id: &'a str, conversation: &'a str, terms: &[&str]) -> IndexedEntry<'a> {
    IndexedEntry {
        id,
        version: 1,
        active: true,
        expires_at_ms: None,
        conversation_id: conversation,
        updated_at_ms: 0,
        terms: terms.iter().map(|t| t.to_string()).collect(),
    }
}

#[test]
fn entries_without_terms_do_not_grow_the_conversations_forever() {
    let mut index = RecallIndex::new(8);
    // One live entry with terms, and 20,000 without any (emoji, stop words only), each in a
    // conversation of its own, written and then removed.
    index.upsert(entry("kept", "home", &["tea"]));
    for i in 0..20_000 {
        let (id, conversation) = (format!("e{i}"), format!("c{i}"));
        index.upsert(entry(&id, &conversation, &[]));
        index.remove(&id);
    }
    let (_, conversations) = index.dictionary_sizes();
    assert!(conversations <= 8_192, "{conversations} conversations held for one live entry");
    assert_eq!(index.len(), 1);
}
