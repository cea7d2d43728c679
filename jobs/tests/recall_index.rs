//! The in-memory recall index: what enters and leaves it, which vectors count, filters, the
//! BM25 statistics it reports, and the order of its candidates.

use context_jobs::embed::hashing_embed;
use context_jobs::recall::{Weights, query_terms};
use context_jobs::recall_index::{IndexedEntry, Query, RecallIndex};
use context_jobs::text::terms;

const DIM: usize = 128;

fn put(
    index: &mut RecallIndex,
    id: &str,
    version: u64,
    conversation: &str,
    text: &str,
    active: bool,
    expires: Option<i64>,
) {
    index.upsert(IndexedEntry {
        id,
        version,
        active,
        expires_at_ms: expires,
        conversation_id: conversation,
        updated_at_ms: 1_000,
        terms: terms(text),
    });
}

fn search(index: &RecallIndex, query: &str, weights: Weights, conversation: Option<&str>) -> Vec<String> {
    let terms = query_terms(query);
    let vector = hashing_embed(query, DIM);
    index
        .candidates(&Query {
            terms: &terms,
            vector: Some(&vector),
            conversation_id: conversation,
            now_ms: 2_000,
            weights,
            candidates: 10,
        })
        .ids
}

const HYBRID: Weights = Weights { lexical: 0.35, vector: 0.65 };
const LEXICAL: Weights = Weights { lexical: 1.0, vector: 0.0 };
const VECTOR: Weights = Weights { lexical: 0.0, vector: 1.0 };

#[test]
fn only_live_entries_in_scope_are_candidates() {
    let mut index = RecallIndex::new(DIM);
    put(&mut index, "a", 1, "c1", "kafka brokers cluster", true, None);
    put(&mut index, "b", 1, "c2", "kafka consumer lag", true, None);
    put(&mut index, "x", 1, "c1", "kafka expired long ago", true, Some(1_500));
    put(&mut index, "m", 1, "c1", "kafka merged away", false, None);
    put(&mut index, "t", 1, "c1", "green tea", true, None);
    assert_eq!(index.len(), 4, "an inactive entry never enters");
    assert_eq!(search(&index, "kafka", LEXICAL, None), ["a", "b"], "ties by id; expired and unrelated left out");
    assert_eq!(search(&index, "kafka", LEXICAL, Some("c2")), ["b"]);
    assert!(search(&index, "kafka", LEXICAL, Some("nowhere")).is_empty());
    // Becoming inactive removes; the slot is reused by the next entry.
    put(&mut index, "a", 2, "c1", "kafka brokers cluster", false, None);
    assert_eq!(search(&index, "kafka", LEXICAL, None), ["b"]);
    put(&mut index, "n", 1, "c1", "kafka newcomer", true, None);
    assert_eq!(index.len(), 4);
    assert_eq!(search(&index, "kafka", LEXICAL, None), ["n", "b"], "the shorter entry scores higher");
}

#[test]
fn vectors_count_only_at_the_entry_version() {
    let mut index = RecallIndex::new(DIM);
    put(&mut index, "a", 1, "c", "postgres nightly backup", true, None);
    assert!(search(&index, "postgres backup", VECTOR, None).is_empty(), "no vector yet");
    index.set_vector("a", 1, &hashing_embed("postgres nightly backup", DIM));
    assert_eq!(search(&index, "postgres backup", VECTOR, None), ["a"]);
    // A new version makes the old vector not count, until its own arrives.
    put(&mut index, "a", 2, "c", "postgres weekly backup", true, None);
    assert!(search(&index, "postgres backup", VECTOR, None).is_empty());
    index.set_vector("a", 2, &hashing_embed("postgres weekly backup", DIM));
    assert_eq!(search(&index, "postgres backup", VECTOR, None), ["a"]);
    // Wrong dimension or unknown entry: ignored.
    index.set_vector("a", 3, &[1.0; 3]);
    index.set_vector("ghost", 1, &hashing_embed("postgres", DIM));
    assert_eq!(search(&index, "postgres backup", VECTOR, None), ["a"]);
}

#[test]
fn statistics_are_exact_and_hybrid_uses_both_signals() {
    let mut index = RecallIndex::new(DIM);
    let texts = [("a", "alpha beta"), ("b", "alpha gamma gamma"), ("c", "delta"), ("d", "beta delta epsilon")];
    for (id, text) in texts {
        put(&mut index, id, 1, "c", text, true, None);
        index.set_vector(id, 1, &hashing_embed(text, DIM));
    }
    let terms = query_terms("alpha beta");
    let found = index.candidates(&Query {
        terms: &terms,
        vector: None,
        conversation_id: None,
        now_ms: 2_000,
        weights: LEXICAL,
        candidates: 10,
    });
    assert_eq!(found.stats.docs, 4);
    assert_eq!(found.stats.avg_len, 9.0 / 4.0);
    assert_eq!((found.stats.df["alpha"], found.stats.df["beta"]), (2, 2));
    assert_eq!(found.ids[0], "a", "both terms beat one");
    assert!(found.max_bm25 > 0.0);
    assert_eq!(search(&index, "alpha beta", HYBRID, None)[0], "a");
    let top2 = index.candidates(&Query {
        terms: &terms,
        vector: None,
        conversation_id: None,
        now_ms: 2_000,
        weights: LEXICAL,
        candidates: 2,
    });
    assert_eq!(top2.ids.len(), 2, "at most `candidates` are returned");
}

#[test]
fn a_vector_read_before_its_entry_waits_for_it() {
    let mut index = RecallIndex::new(DIM);
    index.set_vector("late", 4, &hashing_embed("zebra crossing", DIM));
    assert!(index.is_empty(), "a vector alone is not an entry");
    put(&mut index, "late", 4, "c", "zebra crossing", true, None);
    assert_eq!(search(&index, "zebra crossing", VECTOR, None), ["late"]);
    // An entry that leaves takes its waiting vector with it.
    index.set_vector("gone", 1, &hashing_embed("zebra stripes", DIM));
    index.remove("gone");
    put(&mut index, "gone", 1, "c", "zebra stripes", true, None);
    assert_eq!(search(&index, "zebra stripes", VECTOR, None), ["late"], "the dropped vector did not come back");
}

#[test]
fn churn_compacts_postings_without_changing_answers() {
    let mut index = RecallIndex::new(DIM);
    for round in 0..6u64 {
        for i in 0..2_000 {
            let text = if i % 2 == 0 { format!("common word{i} round{round}") } else { format!("other word{i}") };
            put(&mut index, &format!("e{i:04}"), round + 1, "c", &text, true, None);
        }
    }
    assert_eq!(index.len(), 2_000);
    let found = index.candidates(&Query {
        terms: &query_terms("round5"),
        vector: None,
        conversation_id: None,
        now_ms: 2_000,
        weights: LEXICAL,
        candidates: 5_000,
    });
    assert_eq!(found.ids.len(), 1_000, "exactly the current versions match");
    assert_eq!(found.stats.df["round5"], 1_000);
    assert_eq!(found.stats.docs, 2_000);
    assert!(search(&index, "round4", LEXICAL, None).is_empty(), "replaced versions' terms are gone");
}

/// Terms and conversations no live entry holds leave the dictionaries (a hot tenant's
/// index used to keep every term it ever saw), and the index answers as before.
#[test]
fn forgotten_terms_and_conversations_leave_the_dictionaries() {
    let mut index = RecallIndex::new(DIM);
    put(&mut index, "keep", 1, "home", "kafka brokers", true, None);
    // 50 rounds of 200 entries rewritten with terms and conversations of their own: 20,000
    // distinct terms and conversations seen, of which the last round's are live.
    for round in 0..50u64 {
        for i in 0..200 {
            let text = format!("word{round}x{i} token{round}y{i}");
            put(&mut index, &format!("e{i:03}"), round + 1, &format!("c{round}-{i}"), &text, true, None);
        }
    }
    let (terms, conversations) = index.dictionary_sizes();
    assert!(terms < 10_000, "{terms} terms held for ~400 live ones");
    assert!(conversations < 10_000, "{conversations} conversations held for 201 live ones");
    assert_eq!(search(&index, "kafka", LEXICAL, Some("home")), ["keep"]);
    assert_eq!(search(&index, "word49x7", LEXICAL, None), ["e007"]);
    assert!(search(&index, "word48x7", LEXICAL, None).is_empty(), "a replaced version's terms are gone");
    assert_eq!(search(&index, "token49y3", LEXICAL, Some("c49-3")), ["e003"]);
    assert!(search(&index, "token48y3", LEXICAL, Some("c48-3")).is_empty());
    // New terms and conversations after a shrink get ids of their own.
    put(&mut index, "late", 1, "elsewhere", "zookeeper quorum", true, None);
    assert_eq!(search(&index, "zookeeper", LEXICAL, Some("elsewhere")), ["late"]);
    assert_eq!(search(&index, "kafka", HYBRID, None)[0], "keep");
}

/// Entries without terms (emoji or stop words only), each in a conversation of its own,
/// written and removed: their conversations leave the dictionary too (such retirements
/// left no stale postings, so the index never compacted: 20,001 conversations held before).
#[test]
fn entries_without_terms_do_not_grow_the_conversations_forever() {
    let mut index = RecallIndex::new(DIM);
    put(&mut index, "keep", 1, "home", "kafka brokers", true, None);
    for i in 0..20_000 {
        let id = format!("e{i}");
        put(&mut index, &id, 1, &format!("c{i}"), "", true, None);
        index.remove(&id);
    }
    let (_, conversations) = index.dictionary_sizes();
    assert!(conversations <= 8_192, "{conversations} conversations held for one live entry");
    assert_eq!(search(&index, "kafka", LEXICAL, Some("home")), ["keep"]);
}

/// A vector read before its entry waits for it; once the caller has read every entry
/// change committed before it began, one still waiting belongs to a version that left the
/// index, and is dropped.
#[test]
fn vectors_wait_for_their_entries_until_dropped() {
    let mut index = RecallIndex::new(DIM);
    let vector = hashing_embed("kafka brokers", DIM);
    index.set_vector("a", 1, &vector);
    index.set_vector("gone", 1, &vector);
    assert_eq!(index.waiting_vectors(), 2);
    put(&mut index, "a", 1, "c", "kafka brokers", true, None);
    assert_eq!(index.waiting_vectors(), 1, "a's vector went to its entry");
    assert_eq!(search(&index, "kafka brokers", VECTOR, None), ["a"], "and counts");
    index.drop_waiting_vectors();
    assert_eq!(index.waiting_vectors(), 0);
    assert_eq!(search(&index, "kafka brokers", VECTOR, None), ["a"]);
}
