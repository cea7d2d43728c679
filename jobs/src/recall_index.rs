//! The in-memory recall index of one tenant: for every active entry its BM25 terms and, when
//! projected, its vector in compact i8 form. It answers "which entries are worth scoring
//! for this query" with exact BM25 statistics over all live entries and an approximate
//! cosine, in one pass over compact arrays — no database round trip per entry.
//!
//! It holds no truth: the shell rebuilds it from the database, keeps it in sync by change
//! sequence, and rescores the candidates it returns from the rows it loads.

use std::collections::{BinaryHeap, HashMap};

use crate::embed::{dot_i8, quantize};
use crate::recall::{Bm25Stats, Weights, bm25, breakdown, is_match, recency};

/// What the index needs of an entry version.
pub struct IndexedEntry<'a> {
    pub id: &'a str,
    pub version: u64,
    pub active: bool,
    pub expires_at_ms: Option<i64>,
    pub conversation_id: &'a str,
    pub updated_at_ms: i64,
    /// Normalised terms of the entry text (`text::terms`).
    pub terms: Vec<String>,
}

struct Slot {
    id: String,
    version: u64,
    expires_at_ms: Option<i64>,
    conversation: u32,
    updated_at_ms: i64,
    /// (term id, frequency), sorted by term id.
    terms: Box<[(u32, u32)]>,
    len: u32,
    /// Entry version the stored vector embeds (0: none) and its scale.
    vec_version: u64,
    vec_scale: f32,
}

pub struct RecallIndex {
    dim: usize,
    slots: Vec<Option<Slot>>,
    by_id: HashMap<String, usize>,
    free: Vec<usize>,
    dict: HashMap<String, u32>,
    conversations: HashMap<String, u32>,
    vectors: Vec<i8>,
    total_len: u64,
    live: u64,
}

pub struct Query<'a> {
    pub terms: &'a [String],
    pub vector: Option<&'a [f32]>,
    pub conversation_id: Option<&'a str>,
    pub now_ms: i64,
    pub weights: Weights,
    /// How many candidates to return.
    pub candidates: usize,
}

pub struct Candidates {
    /// Entry ids, best approximate score first.
    pub ids: Vec<String>,
    /// BM25 statistics over every live entry, for exact rescoring.
    pub stats: Bm25Stats,
    /// The best BM25 of any live entry (the lexical normaliser).
    pub max_bm25: f64,
}

impl RecallIndex {
    pub fn new(dim: usize) -> Self {
        Self {
            dim,
            slots: Vec::new(),
            by_id: HashMap::new(),
            free: Vec::new(),
            dict: HashMap::new(),
            conversations: HashMap::new(),
            vectors: Vec::new(),
            total_len: 0,
            live: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Record an entry's current version; one that is not active leaves the index.
    pub fn upsert(&mut self, e: IndexedEntry<'_>) {
        if !e.active {
            self.remove(e.id);
            return;
        }
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for t in &e.terms {
            let next = self.dict.len() as u32;
            let id = *self.dict.entry(t.clone()).or_insert(next);
            *counts.entry(id).or_default() += 1;
        }
        let mut terms: Vec<(u32, u32)> = counts.into_iter().collect();
        terms.sort_unstable();
        let next = self.conversations.len() as u32;
        let conversation = *self.conversations.entry(e.conversation_id.to_string()).or_insert(next);
        let len = e.terms.len() as u32;
        let idx = match self.by_id.get(e.id) {
            Some(&i) => i,
            None => {
                let i = self.free.pop().unwrap_or_else(|| {
                    self.slots.push(None);
                    self.vectors.resize(self.slots.len() * self.dim, 0);
                    self.slots.len() - 1
                });
                self.by_id.insert(e.id.to_string(), i);
                i
            }
        };
        let (vec_version, vec_scale) = match self.slots[idx].take() {
            Some(old) => {
                self.total_len -= u64::from(old.len);
                self.live -= 1;
                (old.vec_version, old.vec_scale)
            }
            None => (0, 0.0),
        };
        self.total_len += u64::from(len);
        self.live += 1;
        self.slots[idx] = Some(Slot {
            id: e.id.to_string(),
            version: e.version,
            expires_at_ms: e.expires_at_ms,
            conversation,
            updated_at_ms: e.updated_at_ms,
            terms: terms.into_boxed_slice(),
            len,
            vec_version,
            vec_scale,
        });
    }

    pub fn remove(&mut self, id: &str) {
        if let Some(i) = self.by_id.remove(id) {
            if let Some(old) = self.slots[i].take() {
                self.total_len -= u64::from(old.len);
                self.live -= 1;
            }
            self.free.push(i);
        }
    }

    /// Store the vector of `version` of entry `id` (ignored for entries not in the index
    /// or of another dimension). It counts only while it matches the entry's version.
    pub fn set_vector(&mut self, id: &str, version: u64, vector: &[f32]) {
        let Some(&i) = self.by_id.get(id) else { return };
        if vector.len() != self.dim {
            return;
        }
        let (q, scale) = quantize(vector);
        self.vectors[i * self.dim..(i + 1) * self.dim].copy_from_slice(&q);
        if let Some(slot) = self.slots[i].as_mut() {
            slot.vec_version = version;
            slot.vec_scale = scale;
        }
    }

    /// The best `q.candidates` live entries by approximate hybrid score, with the exact
    /// BM25 statistics of the query over all live entries.
    pub fn candidates(&self, q: &Query<'_>) -> Candidates {
        let term_ids: Vec<Option<u32>> = q.terms.iter().map(|t| self.dict.get(t).copied()).collect();
        let live = |s: &Slot| s.expires_at_ms.is_none_or(|t| t > q.now_ms);
        // Pass 1: term frequencies of the entries that contain any query term, and df.
        let mut df = vec![0u64; q.terms.len()];
        let mut docs = 0u64;
        let mut total_len = 0u64;
        let mut matched: Vec<(usize, Vec<u32>)> = Vec::new();
        let mut tf = vec![0u32; q.terms.len()];
        for (i, slot) in self.slots.iter().enumerate() {
            let Some(s) = slot.as_ref().filter(|s| live(s)) else { continue };
            docs += 1;
            total_len += u64::from(s.len);
            let mut any = false;
            for (k, id) in term_ids.iter().enumerate() {
                tf[k] = 0;
                if let Some(id) = id
                    && let Ok(p) = s.terms.binary_search_by_key(id, |(t, _)| *t)
                {
                    tf[k] = s.terms[p].1;
                    df[k] += 1;
                    any = true;
                }
            }
            if any {
                matched.push((i, tf.clone()));
            }
        }
        let stats = Bm25Stats {
            docs,
            avg_len: if docs > 0 { total_len as f64 / docs as f64 } else { 0.0 },
            df: q.terms.iter().cloned().zip(df).filter(|(_, n)| *n > 0).collect(),
        };
        // BM25 by slot (0 for entries without a query term).
        let mut lexical = vec![0.0f64; if matched.is_empty() { 0 } else { self.slots.len() }];
        for (i, tf) in &matched {
            lexical[*i] = bm25(&stats, q.terms, tf, self.slots[*i].as_ref().map_or(0, |s| s.len));
        }
        let max_bm25 = lexical.iter().fold(0.0f64, |m, v| m.max(*v));
        // Pass 2: approximate hybrid score of every live entry in scope; keep the best.
        let query_q = q.vector.filter(|v| v.len() == self.dim).map(quantize);
        let conversation = q.conversation_id.map(|c| self.conversations.get(c).copied());
        let mut heap: BinaryHeap<Ranked<'_>> = BinaryHeap::new();
        for (i, slot) in self.slots.iter().enumerate() {
            let Some(s) = slot.as_ref().filter(|s| live(s)) else { continue };
            match conversation {
                Some(Some(c)) if c != s.conversation => continue,
                Some(None) => continue,
                _ => {}
            }
            let cosine = match &query_q {
                Some((qv, qs)) if s.vec_version == s.version && q.weights.vector > 0.0 => {
                    let v = &self.vectors[i * self.dim..(i + 1) * self.dim];
                    f64::from(dot_i8(qv, v) as f32 * qs * s.vec_scale)
                }
                _ => 0.0,
            };
            let b = breakdown(q.weights, lexical.get(i).copied().unwrap_or(0.0), max_bm25, cosine, recency(s.updated_at_ms, q.now_ms));
            if !is_match(q.weights, &b) {
                continue;
            }
            heap.push(Ranked { score: b.final_score, id: &s.id });
            if heap.len() > q.candidates {
                heap.pop();
            }
        }
        let mut best = heap.into_vec();
        best.sort();
        Candidates { ids: best.into_iter().map(|r| r.id.to_string()).collect(), stats, max_bm25 }
    }
}

/// Ordered so the *worst* candidate is the heap's maximum (popped first), and sorting
/// ascending puts the best first: higher score, then smaller id.
struct Ranked<'a> {
    score: f64,
    id: &'a str,
}

impl Ord for Ranked<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        crate::recall::rank_order((self.score, self.id), (other.score, other.id))
    }
}
impl PartialOrd for Ranked<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Ranked<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for Ranked<'_> {}
