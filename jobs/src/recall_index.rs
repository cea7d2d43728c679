//! The in-memory recall index of one tenant: for every active entry its BM25 terms (in
//! postings lists) and, when projected, its vector in compact i8 form, in flat per-slot
//! arrays. It answers "which entries are worth scoring for this query" without a database
//! round trip per entry: BM25 over the postings of the query's terms only, and an
//! approximate cosine over the contiguous vector array.
//!
//! It holds no truth: the shell rebuilds it from the database, keeps it in sync by change
//! sequence, and rescores the candidates it returns from the rows it loads.
//!
//! Corpus statistics (entry count, mean length, document frequencies) are over the active
//! entries in the index — including any past their `expiresAtMs`, which are only excluded
//! from the candidates. Postings of replaced or removed entries are invalidated by a
//! per-slot generation and compacted once they outnumber the live ones.

use std::collections::{BinaryHeap, HashMap};

use crate::embed::{dot_i8, quantize};
use crate::recall::{BM25_B, BM25_K1, Bm25Stats, RECENCY_WEIGHT, Weights, breakdown, recency};

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

#[derive(Clone, Copy)]
struct Posting {
    slot: u32,
    generation: u32,
    tf: u32,
}

#[derive(Default)]
pub struct RecallIndex {
    dim: usize,
    // Per slot.
    ids: Vec<String>,
    occupied: Vec<bool>,
    generation: Vec<u32>,
    version: Vec<u64>,
    vec_version: Vec<u64>,
    vec_scale: Vec<f32>,
    expires_at_ms: Vec<i64>,
    conversation: Vec<u32>,
    updated_at_ms: Vec<i64>,
    len: Vec<u32>,
    terms: Vec<Box<[(u32, u32)]>>,
    vectors: Vec<i8>,
    // Lookups.
    by_id: HashMap<String, usize>,
    free: Vec<usize>,
    dict: HashMap<String, u32>,
    conversations: HashMap<String, u32>,
    postings: Vec<Vec<Posting>>,
    live_postings: usize,
    stale_postings: usize,
    /// Vectors that arrived before their entry (version, quantised, scale).
    pending: HashMap<String, (u64, Vec<i8>, f32)>,
    total_len: u64,
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
    /// BM25 statistics of the query's terms, for exact rescoring.
    pub stats: Bm25Stats,
    /// The best BM25 of any active entry (the lexical normaliser).
    pub max_bm25: f64,
}

impl RecallIndex {
    pub fn new(dim: usize) -> Self {
        Self { dim, ..Self::default() }
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
        // The slot first: retiring its old version may compact the index and renumber the
        // dictionaries (`shrink_dictionaries`), which the ids taken below must come after.
        let i = match self.by_id.get(e.id) {
            Some(&i) => {
                self.retire(i);
                i
            }
            None => {
                let i = self.free.pop().unwrap_or_else(|| self.grow());
                self.by_id.insert(e.id.to_string(), i);
                self.ids[i] = e.id.to_string();
                self.vec_version[i] = 0;
                i
            }
        };
        if let Some((version, q, scale)) = self.pending.remove(e.id) {
            self.vectors[i * self.dim..(i + 1) * self.dim].copy_from_slice(&q);
            (self.vec_version[i], self.vec_scale[i]) = (version, scale);
        }
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for t in e.terms {
            let next = self.dict.len() as u32;
            let id = *self.dict.entry(t).or_insert(next);
            *counts.entry(id).or_default() += 1;
        }
        let mut terms: Vec<(u32, u32)> = counts.into_iter().collect();
        terms.sort_unstable();
        let next = self.conversations.len() as u32;
        let conversation = *self.conversations.entry(e.conversation_id.to_string()).or_insert(next);
        let generation = self.generation[i];
        for &(term, tf) in &terms {
            if self.postings.len() <= term as usize {
                self.postings.resize_with(term as usize + 1, Vec::new);
            }
            self.postings[term as usize].push(Posting { slot: i as u32, generation, tf });
        }
        self.live_postings += terms.len();
        let len: u32 = terms.iter().map(|(_, tf)| tf).sum();
        self.total_len += u64::from(len);
        self.occupied[i] = true;
        self.version[i] = e.version;
        self.expires_at_ms[i] = e.expires_at_ms.unwrap_or(i64::MAX);
        self.conversation[i] = conversation;
        self.updated_at_ms[i] = e.updated_at_ms;
        self.len[i] = len;
        self.terms[i] = terms.into_boxed_slice();
    }

    fn grow(&mut self) -> usize {
        self.ids.push(String::new());
        self.occupied.push(false);
        self.generation.push(0);
        self.version.push(0);
        self.vec_version.push(0);
        self.vec_scale.push(0.0);
        self.expires_at_ms.push(0);
        self.conversation.push(0);
        self.updated_at_ms.push(0);
        self.len.push(0);
        self.terms.push(Box::default());
        self.vectors.resize(self.ids.len() * self.dim, 0);
        self.ids.len() - 1
    }

    /// Invalidate slot `i`'s postings (its entry is replaced or leaves).
    fn retire(&mut self, i: usize) {
        if !self.occupied[i] {
            return;
        }
        self.generation[i] = self.generation[i].wrapping_add(1);
        self.occupied[i] = false;
        self.total_len -= u64::from(self.len[i]);
        self.live_postings -= self.terms[i].len();
        // An entry without terms counts one: else retiring such entries (each of its own
        // conversation) never compacted, and the conversation dictionary only grew.
        self.stale_postings += self.terms[i].len().max(1);
        if self.stale_postings > self.live_postings.max(4096) {
            self.compact();
        }
    }

    fn compact(&mut self) {
        let (occupied, generation) = (&self.occupied, &self.generation);
        for list in &mut self.postings {
            list.retain(|p| occupied[p.slot as usize] && generation[p.slot as usize] == p.generation);
        }
        self.stale_postings = 0;
        // Live conversations are at most the live entries.
        let dead = self.postings.iter().filter(|list| list.is_empty()).count();
        if dead > (self.postings.len() - dead).max(4096) || self.conversations.len() > (2 * self.by_id.len()).max(4096)
        {
            self.shrink_dictionaries();
        }
    }

    /// Forget the terms and conversations no live entry holds any more. Without this a
    /// tenant's dictionaries only grow — every id, number and name its entries ever held —
    /// for as long as its index stays cached. Term ids are renumbered in their old order,
    /// so each slot's term list stays sorted.
    fn shrink_dictionaries(&mut self) {
        let mut remap = vec![u32::MAX; self.postings.len()];
        let mut live = Vec::new();
        for (old, list) in std::mem::take(&mut self.postings).into_iter().enumerate() {
            if !list.is_empty() {
                remap[old] = live.len() as u32;
                live.push(list);
            }
        }
        self.postings = live;
        self.dict.retain(|_, id| {
            *id = remap.get(*id as usize).copied().unwrap_or(u32::MAX);
            *id != u32::MAX
        });
        self.dict.shrink_to_fit();
        let mut conversations = vec![u32::MAX; self.conversations.len()];
        let mut held = 0u32;
        for (slot, terms) in self.terms.iter_mut().enumerate() {
            if !self.occupied[slot] {
                // Read only once the slot is taken again, which writes them anew.
                *terms = Box::default();
                continue;
            }
            for (term, _) in terms.iter_mut() {
                *term = remap[*term as usize];
            }
            let c = &mut conversations[self.conversation[slot] as usize];
            if *c == u32::MAX {
                (*c, held) = (held, held + 1);
            }
            self.conversation[slot] = *c;
        }
        self.conversations.retain(|_, id| {
            *id = conversations[*id as usize];
            *id != u32::MAX
        });
        self.conversations.shrink_to_fit();
    }

    /// Drop the vectors still waiting for their entries. The caller does this once it has
    /// read every entry change committed before it began: each waiting vector was read
    /// after its entry's version had committed, so that version has now arrived — and
    /// taken its vector — or was already replaced or left the index (an entry expired
    /// after it was embedded), and its vector would otherwise wait for as long as the
    /// index stays cached.
    pub fn drop_waiting_vectors(&mut self) {
        self.pending = HashMap::new();
    }

    /// Vectors waiting for their entries to arrive.
    pub fn waiting_vectors(&self) -> usize {
        self.pending.len()
    }

    /// Distinct terms and conversations the index holds (live or not yet forgotten).
    pub fn dictionary_sizes(&self) -> (usize, usize) {
        (self.dict.len(), self.conversations.len())
    }

    pub fn remove(&mut self, id: &str) {
        self.pending.remove(id);
        if let Some(i) = self.by_id.remove(id) {
            self.retire(i);
            self.ids[i].clear();
            self.free.push(i);
        }
    }

    /// Store the vector of `version` of entry `id` (ignored when of another dimension). It
    /// counts only while it matches the entry's version. A vector of an entry the index
    /// has not seen yet is kept until the entry arrives (or leaves).
    pub fn set_vector(&mut self, id: &str, version: u64, vector: &[f32]) {
        if vector.len() != self.dim {
            return;
        }
        let (q, scale) = quantize(vector);
        let Some(&i) = self.by_id.get(id) else {
            self.pending.insert(id.to_string(), (version, q, scale));
            return;
        };
        self.vectors[i * self.dim..(i + 1) * self.dim].copy_from_slice(&q);
        (self.vec_version[i], self.vec_scale[i]) = (version, scale);
    }

    fn valid(&self, p: &Posting) -> bool {
        let s = p.slot as usize;
        self.occupied[s] && self.generation[s] == p.generation
    }

    /// The best `q.candidates` live entries by approximate hybrid score, with the BM25
    /// statistics of the query.
    pub fn candidates(&self, q: &Query<'_>) -> Candidates {
        let docs = self.by_id.len() as u64;
        let avg_len = if docs > 0 { self.total_len as f64 / docs as f64 } else { 0.0 };
        let lists: Vec<Option<&Vec<Posting>>> =
            q.terms.iter().map(|t| self.dict.get(t).and_then(|id| self.postings.get(*id as usize))).collect();
        let df: Vec<u64> =
            lists.iter().map(|l| l.map_or(0, |l| l.iter().filter(|p| self.valid(p)).count() as u64)).collect();
        let stats = Bm25Stats { docs, avg_len, df: q.terms.iter().cloned().zip(df).filter(|(_, n)| *n > 0).collect() };
        // BM25 accumulated term by term over the postings (it is a sum over terms).
        let mut lexical: Vec<f64> = Vec::new();
        let mut touched: Vec<usize> = Vec::new();
        let norm_avg = if avg_len > 0.0 { avg_len } else { 1.0 };
        for (t, list) in q.terms.iter().zip(&lists) {
            let Some(list) = list else { continue };
            let idf = stats.idf(t);
            if lexical.is_empty() {
                lexical = vec![0.0; self.ids.len()];
            }
            for p in list.iter().filter(|p| self.valid(p)) {
                let s = p.slot as usize;
                let tf = f64::from(p.tf);
                let norm = BM25_K1 * (1.0 - BM25_B + BM25_B * f64::from(self.len[s]) / norm_avg);
                if lexical[s] == 0.0 {
                    touched.push(s);
                }
                lexical[s] += idf * tf * (BM25_K1 + 1.0) / (tf + norm);
            }
        }
        let max_bm25 = touched.iter().fold(0.0f64, |m, s| m.max(lexical[*s]));
        let query_q = q.vector.filter(|v| v.len() == self.dim && q.weights.vector > 0.0).map(quantize);
        let conversation = match q.conversation_id {
            Some(c) => match self.conversations.get(c) {
                Some(id) => Some(*id),
                None => return Candidates { ids: Vec::new(), stats, max_bm25 },
            },
            None => None,
        };
        // The final score of slot `s`, or None when it is out of scope, not a match, or
        // cannot beat `worst` (the weakest kept candidate once the heap is full).
        let score = |s: usize, worst: Option<f64>| -> Option<f64> {
            if !self.occupied[s]
                || self.expires_at_ms[s] <= q.now_ms
                || conversation.is_some_and(|c| c != self.conversation[s])
            {
                return None;
            }
            let cosine = match &query_q {
                Some((qv, qs)) if self.vec_version[s] == self.version[s] => {
                    let v = &self.vectors[s * self.dim..(s + 1) * self.dim];
                    f64::from(dot_i8(qv, v) as f32 * qs * self.vec_scale[s])
                }
                _ => 0.0,
            };
            let bm25 = lexical.get(s).copied().unwrap_or(0.0);
            let lex = if max_bm25 > 0.0 { bm25 / max_bm25 } else { 0.0 };
            let evidence = q.weights.lexical * lex + q.weights.vector * cosine.clamp(0.0, 1.0);
            // Recency adds at most RECENCY_WEIGHT: skip the pow when it cannot matter.
            if evidence <= 0.0 || worst.is_some_and(|w| evidence + RECENCY_WEIGHT < w) {
                return None;
            }
            Some(breakdown(q.weights, bm25, max_bm25, cosine, recency(self.updated_at_ms[s], q.now_ms)).final_score)
        };
        let slots: Box<dyn Iterator<Item = usize> + '_> =
            if query_q.is_some() { Box::new(0..self.ids.len()) } else { Box::new(touched.iter().copied()) };
        let mut heap: BinaryHeap<Ranked<'_>> = BinaryHeap::new();
        for s in slots {
            let worst = if heap.len() >= q.candidates { heap.peek().map(|w| w.score) } else { None };
            if let Some(final_score) = score(s, worst) {
                heap.push(Ranked { score: final_score, id: &self.ids[s] });
                if heap.len() > q.candidates {
                    heap.pop();
                }
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
