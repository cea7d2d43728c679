//! Recall scoring, pure: BM25 over normalised terms, the recency term, and the hybrid
//! combination with its score breakdown and deterministic ordering. The in-memory index
//! that finds candidates is [`crate::recall_index`]; the shell rescores the candidates it
//! loads from the database with these same functions.
//!
//! `final = lexicalWeight · lexical + vectorWeight · vector + RECENCY_WEIGHT · recency`, where
//! `lexical` is BM25 divided by the best BM25 among the tenant's live entries for the query
//! (so 1.0 is the best lexical match), `vector` is the cosine clamped to [0, 1], and
//! `recency` halves every `RECENCY_HALF_LIFE_MS` since the entry was last updated.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::contract::RecallScoreBreakdown;

pub const BM25_K1: f64 = 1.2;
pub const BM25_B: f64 = 0.75;
pub const RECENCY_WEIGHT: f64 = 0.05;
pub const RECENCY_HALF_LIFE_MS: f64 = 30.0 * 86_400_000.0;
/// Most distinct query terms scored (a longer query keeps its first ones).
pub const MAX_QUERY_TERMS: usize = 64;

/// The distinct terms of a query, in first-seen order, at most `MAX_QUERY_TERMS`.
pub fn query_terms(query: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in crate::text::terms(query) {
        if out.len() == MAX_QUERY_TERMS {
            break;
        }
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// Corpus statistics BM25 needs for one query: live documents, their mean length, and the
/// document frequency of each query term.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bm25Stats {
    pub docs: u64,
    pub avg_len: f64,
    pub df: HashMap<String, u64>,
}

impl Bm25Stats {
    pub fn idf(&self, term: &str) -> f64 {
        let n = self.docs as f64;
        let df = self.df.get(term).copied().unwrap_or(0) as f64;
        if df == 0.0 { 0.0 } else { (1.0 + (n - df + 0.5) / (df + 0.5)).ln() }
    }
}

/// BM25 of one document given each query term's frequency in it (`tf[i]` for
/// `terms[i]`) and its length in terms.
pub fn bm25(stats: &Bm25Stats, terms: &[String], tf: &[u32], doc_len: u32) -> f64 {
    let avg = if stats.avg_len > 0.0 { stats.avg_len } else { 1.0 };
    let norm = BM25_K1 * (1.0 - BM25_B + BM25_B * f64::from(doc_len) / avg);
    terms
        .iter()
        .zip(tf)
        .filter(|(_, f)| **f > 0)
        .map(|(t, f)| {
            let f = f64::from(*f);
            stats.idf(t) * f * (BM25_K1 + 1.0) / (f + norm)
        })
        .sum()
}

/// Term frequencies of `terms` in a document's term list, and its length. One pass over
/// the document: a pass per query term compared 64 terms with every term of up to a
/// thousand candidates of 64 KiB (~10⁹ comparisons for one recall).
pub fn term_frequencies(terms: &[String], doc_terms: &[String]) -> (Vec<u32>, u32) {
    let mut counts: HashMap<&str, u32> = terms.iter().map(|t| (t.as_str(), 0)).collect();
    for d in doc_terms {
        if let Some(count) = counts.get_mut(d.as_str()) {
            *count += 1;
        }
    }
    (terms.iter().map(|t| counts[t.as_str()]).collect(), doc_terms.len() as u32)
}

pub fn recency(updated_at_ms: i64, now_ms: i64) -> f64 {
    let age = now_ms.saturating_sub(updated_at_ms).max(0) as f64;
    0.5f64.powf(age / RECENCY_HALF_LIFE_MS)
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weights {
    pub lexical: f64,
    pub vector: f64,
}

/// Weights must be finite and non-negative.
/// Validate a recall request; `Err` is a 400 message. Returns its weights.
pub fn validate_request(r: &crate::contract::RecallContextRequest) -> Result<Weights, String> {
    if r.query.trim().is_empty() {
        return Err("query must not be empty".into());
    }
    crate::contract::validate_search_query(&r.query)?;
    if let Some(c) = &r.conversation_id {
        crate::contract::validate_resource_id("conversationId", c)?;
    }
    let weights = Weights { lexical: r.lexical_weight, vector: r.vector_weight };
    validate_weights(weights)?;
    Ok(weights)
}

/// The largest weight: weights are relative, and two near `f64::MAX` made a score of
/// infinity, which JSON writes as `null` (a client of the contract's `f64` fails on it).
pub const MAX_WEIGHT: f64 = 1e6;

pub fn validate_weights(w: Weights) -> Result<(), String> {
    for (name, v) in [("lexicalWeight", w.lexical), ("vectorWeight", w.vector)] {
        if !v.is_finite() || !(0.0..=MAX_WEIGHT).contains(&v) {
            return Err(format!("{name} must be a number from 0 to {MAX_WEIGHT}"));
        }
    }
    Ok(())
}

/// The breakdown of one entry: `bm25` raw, normalised by `max_bm25`; `cosine` raw.
pub fn breakdown(w: Weights, bm25: f64, max_bm25: f64, cosine: f64, recency: f64) -> RecallScoreBreakdown {
    let lexical = if max_bm25 > 0.0 { (bm25 / max_bm25).clamp(0.0, 1.0) } else { 0.0 };
    let vector = cosine.clamp(0.0, 1.0);
    RecallScoreBreakdown {
        lexical,
        vector,
        recency,
        final_score: w.lexical * lexical + w.vector * vector + RECENCY_WEIGHT * recency,
    }
}

/// Whether an entry matches the query at all: some weighted lexical or vector evidence.
/// Recency alone never makes an entry a match.
pub fn is_match(w: Weights, b: &RecallScoreBreakdown) -> bool {
    w.lexical * b.lexical + w.vector * b.vector > 0.0
}

/// Result order: higher final score first, then id ascending (deterministic for ties).
pub fn rank_order(a: (f64, &str), b: (f64, &str)) -> Ordering {
    b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn term_frequencies_count_each_query_term_repeats_included() {
        let words = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let (tf, len) = term_frequencies(&words("tea green tea x"), &words("green tea tea black tea"));
        assert_eq!((tf, len), (vec![3, 1, 3, 0], 5));
        assert_eq!(term_frequencies(&words("a"), &[]), (vec![0], 0));
    }

    fn stats(docs: u64, avg_len: f64, df: &[(&str, u64)]) -> Bm25Stats {
        Bm25Stats { docs, avg_len, df: df.iter().map(|(t, n)| (t.to_string(), *n)).collect() }
    }

    #[test]
    fn rare_terms_weigh_more_and_tf_saturates() {
        let s = stats(100, 10.0, &[("rare", 1), ("common", 90)]);
        assert!(s.idf("rare") > 5.0 * s.idf("common"));
        assert_eq!(s.idf("absent"), 0.0);
        let terms = vec!["rare".to_string()];
        let one = bm25(&s, &terms, &[1], 10);
        let two = bm25(&s, &terms, &[2], 10);
        let ten = bm25(&s, &terms, &[10], 10);
        assert!(two > one && ten < one * (BM25_K1 + 1.0) + 1e-9);
        assert!(bm25(&s, &terms, &[1], 5) > bm25(&s, &terms, &[1], 50), "shorter documents score higher");
    }

    #[test]
    fn breakdown_normalises_and_combines() {
        let w = Weights { lexical: 0.35, vector: 0.65 };
        let b = breakdown(w, 2.0, 4.0, 0.8, 1.0);
        assert_eq!(b.lexical, 0.5);
        assert!((b.final_score - (0.35 * 0.5 + 0.65 * 0.8 + RECENCY_WEIGHT)).abs() < 1e-12);
        let neg = breakdown(w, 0.0, 0.0, -0.3, 0.5);
        assert_eq!((neg.lexical, neg.vector), (0.0, 0.0));
        assert!(!is_match(w, &neg));
        assert!(is_match(Weights { lexical: 1.0, vector: 0.0 }, &b));
        assert!(!is_match(Weights { lexical: 0.0, vector: 0.0 }, &b));
    }

    #[test]
    fn recency_halves_per_half_life() {
        assert_eq!(recency(1000, 1000), 1.0);
        assert_eq!(recency(2000, 1000), 1.0);
        assert!((recency(0, RECENCY_HALF_LIFE_MS as i64) - 0.5).abs() < 1e-12);
        // Times far apart do not overflow: the oldest is the least recent.
        assert_eq!(recency(i64::MIN, i64::MAX), 0.0);
    }

    #[test]
    fn ties_break_by_id_and_query_terms_dedupe() {
        let mut v = vec![(1.0, "b"), (2.0, "z"), (1.0, "a")];
        v.sort_by(|x, y| rank_order(*x, *y));
        assert_eq!(v, vec![(2.0, "z"), (1.0, "a"), (1.0, "b")]);
        assert_eq!(query_terms("Kafka kafka the Clusters cluster"), ["kafka", "cluster"]);
        assert!(validate_weights(Weights { lexical: -1.0, vector: 0.0 }).is_err());
        assert!(validate_weights(Weights { lexical: f64::NAN, vector: 0.0 }).is_err());
        assert!(validate_weights(Weights { lexical: 1.7e308, vector: 1.7e308 }).is_err());
        assert!(validate_weights(Weights { lexical: MAX_WEIGHT, vector: MAX_WEIGHT }).is_ok());
    }
}
