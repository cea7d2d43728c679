//! Hybrid recall: embed the query, sync the tenant's in-memory index ([`index_cache`]),
//! take the best candidates by approximate score from it, then load those rows (and their
//! stored vectors) from the database and score them exactly — only rows that are active
//! and unexpired *in the database* are returned, whatever the index believed. An API
//! process loads its busiest tenants' indexes at start ([`warm`]).

pub mod index_cache;
pub mod warm;

use std::collections::HashMap;
use std::sync::Arc;

use crate::embedder::{EmbedError, Embedder};
use crate::store::{Db, StoreError, entries, now_ms, vectors};
use context_jobs::contract::{MAX_PAGE_SIZE, RecallContextRequest, RecallContextResponse, RecalledContext};
use context_jobs::embed::cosine;
use context_jobs::entries::{entry_text, is_live};
use context_jobs::ids::TenantKey;
use context_jobs::recall::{
    bm25, breakdown, is_match, query_terms, rank_order, recency, term_frequencies, validate_request,
};
use context_jobs::recall_index::Query;
use index_cache::RecallIndexes;

/// Why a recall has no answer.
#[derive(Debug, thiserror::Error)]
pub enum RecallError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Embed(#[from] EmbedError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("recall scoring failed: {0}")]
    Scoring(String),
}

/// What recall needs: the database, the query embedder and the per-process index cache.
#[derive(Clone)]
pub struct Recall {
    pub db: Db,
    pub embedder: Arc<Embedder>,
    pub indexes: Arc<RecallIndexes>,
    /// The start-up load of recently active tenants' indexes ([`warm`]).
    pub warmup: Arc<warm::Warmup>,
}

/// Candidates scored exactly: the index's approximate scores are within about 1% of the
/// exact ones, so twice the limit (and a floor for small limits) covers any reordering
/// near the cut.
fn candidate_count(limit: usize) -> usize {
    limit * 2 + 16
}

impl Recall {
    pub fn new(db: Db, embedder: Arc<Embedder>) -> Self {
        let indexes = Arc::new(RecallIndexes::new(embedder.model(), embedder.dim()));
        Self { db, embedder, indexes, warmup: Arc::default() }
    }

    pub async fn recall(
        &self,
        tenant: &TenantKey,
        r: &RecallContextRequest,
    ) -> Result<RecallContextResponse, RecallError> {
        let weights = validate_request(r).map_err(RecallError::Invalid)?;
        let limit = r.limit.clamp(1, MAX_PAGE_SIZE);
        let terms = query_terms(&r.query);
        let query_vector =
            if weights.vector > 0.0 { self.embedder.embed(&[r.query.as_str()]).await?.pop() } else { None };
        let index = self.indexes.synced(&self.db, tenant).await?;
        let now = now_ms();
        let candidates = {
            let (terms, vector, conversation) = (terms.clone(), query_vector.clone(), r.conversation_id.clone());
            tokio::task::spawn_blocking(move || {
                let guard = index.read().unwrap_or_else(|p| p.into_inner());
                guard.index.candidates(&Query {
                    terms: &terms,
                    vector: vector.as_deref(),
                    conversation_id: conversation.as_deref(),
                    now_ms: now,
                    weights,
                    candidates: candidate_count(limit),
                })
            })
            .await
            .map_err(|e| RecallError::Scoring(e.to_string()))?
        };
        let rows = entries::reads::get_many(&self.db, tenant, &candidates.ids).await?;
        let stored = vectors::reads::vectors_of(&self.db, tenant, self.embedder.model(), &candidates.ids).await?;
        let stored: HashMap<String, (i64, Vec<f32>)> =
            stored.into_iter().map(|(id, v, vector)| (id, (v, vector))).collect();
        let mut items: Vec<RecalledContext> = Vec::new();
        for entry in rows {
            if !is_live(entry.status, entry.expires_at_ms, now)
                || r.conversation_id.as_deref().is_some_and(|c| c != entry.provenance.conversation_id)
            {
                continue;
            }
            let doc = context_jobs::text::terms(&entry_text(&entry.content));
            let (tf, len) = term_frequencies(&terms, &doc);
            let lexical = bm25(&candidates.stats, &terms, &tf, len);
            let vector = match (&query_vector, stored.get(&entry.id)) {
                (Some(q), Some((v, stored))) if *v as u64 == entry.version => cosine(q, stored),
                _ => 0.0,
            };
            let score = breakdown(weights, lexical, candidates.max_bm25, vector, recency(entry.updated_at_ms, now));
            if is_match(weights, &score) {
                items.push(RecalledContext { entry, score });
            }
        }
        items.sort_by(|a, b| rank_order((a.score.final_score, &a.entry.id), (b.score.final_score, &b.entry.id)));
        items.truncate(limit);
        let index_watermark = vectors::watermark(&self.db, tenant).await?;
        Ok(RecallContextResponse { items, index_watermark })
    }
}
