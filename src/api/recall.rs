//! Hybrid recall (`…/recall`) and the vector projection's rebuild (`…/projections/vector/
//! rebuild`, also reachable as kind `rebuild_vector` of `advanced-operations`).
//!
//! Recall: embed the query, sync the tenant's in-memory index, take the best candidates by
//! approximate score from it, then load those rows (and their stored vectors) from the
//! database and score them exactly — only rows that are active and unexpired *in the
//! database* are returned, whatever the index believed.

use std::collections::HashMap;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use sqlx::AssertSqlSafe;

use super::operations::operation_response;
use super::submit::{idempotency_key, submit_operation, submitted_response};
use crate::app::AppState;
use crate::auth::Caller;
use crate::embedder::EmbedError;
use crate::error::{ApiJson, ApiResult, AppError};
use crate::store::entries::{ENTRY_COLUMNS, EntryRow, entry_from_row};
use crate::store::operations::SubmitEffect;
use crate::store::{StoreError, now_ms, placeholders, vectors};
use crate::with_pool;
use context_jobs::contract::{
    CONTEXT_RECALL_PATH, ContextOperationKind, MAX_PAGE_SIZE, MAX_SEARCH_QUERY_BYTES, RebuildVectorProjectionRequest,
    RecallContextRequest, RecallContextResponse, RecalledContext, VECTOR_REBUILD_PATH,
};
use context_jobs::embed::cosine;
use context_jobs::entries::{entry_text, is_live};
use context_jobs::kinds::rebuild_vector::RebuildVectorJob;
use context_jobs::operation::OperationRequest;
use context_jobs::recall::{
    Weights, bm25, breakdown, is_match, query_terms, rank_order, recency, term_frequencies, validate_weights,
};
use context_jobs::recall_index::Query;

pub fn routes() -> Router<AppState> {
    Router::new().route(CONTEXT_RECALL_PATH, post(recall)).route(VECTOR_REBUILD_PATH, post(rebuild))
}

/// Candidates scored exactly: the index's approximate scores are within about 1% of the
/// exact ones, so twice the limit (and a floor for small limits) covers any reordering
/// near the cut.
fn candidate_count(limit: usize) -> usize {
    limit * 2 + 16
}

pub(crate) fn embed_error(e: EmbedError) -> AppError {
    match e {
        EmbedError::Transient(m) => AppError::Unavailable(anyhow::anyhow!(m)),
        EmbedError::Permanent(m) => AppError::Internal(anyhow::anyhow!(m)),
    }
}

async fn recall(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(r): ApiJson<RecallContextRequest>,
) -> ApiResult<ApiJson<RecallContextResponse>> {
    if r.query.trim().is_empty() {
        return Err(AppError::BadRequest("query must not be empty".into()));
    }
    if r.query.len() > MAX_SEARCH_QUERY_BYTES {
        return Err(AppError::BadRequest(format!("query is longer than {MAX_SEARCH_QUERY_BYTES} bytes")));
    }
    if let Some(c) = &r.conversation_id {
        context_jobs::entries::validate_id("conversationId", c).map_err(super::entries::rule_error)?;
    }
    let weights = Weights { lexical: r.lexical_weight, vector: r.vector_weight };
    validate_weights(weights).map_err(AppError::BadRequest)?;
    let limit = r.limit.clamp(1, MAX_PAGE_SIZE);
    let terms = query_terms(&r.query);
    let query_vector = if weights.vector > 0.0 {
        state.embedder.embed(&[r.query.as_str()]).await.map_err(embed_error)?.pop()
    } else {
        None
    };
    let tenant = caller.tenant.as_str().to_string();
    let index = state.recall_index.synced(&state.db, &tenant).await?;
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
        .map_err(|e| AppError::Internal(anyhow::anyhow!("recall scoring failed: {e}")))?
    };
    let rows = load_rows(&state, &tenant, &candidates.ids).await?;
    let stored = vectors::vectors_of(&state.db, &caller.tenant, state.embedder.model(), &candidates.ids).await?;
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
    let index_watermark = vectors::watermark(&state.db, &caller.tenant).await?;
    Ok(ApiJson(RecallContextResponse { items, index_watermark }))
}

async fn load_rows(
    state: &AppState,
    tenant: &str,
    ids: &[String],
) -> ApiResult<Vec<context_jobs::contract::ContextInsight>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT {ENTRY_COLUMNS} FROM context_entries WHERE tenant = $1 AND id IN ({})",
        placeholders(2, ids.len())
    );
    let rows: Vec<EntryRow> = with_pool!(&state.db, pool => {
        let mut q = sqlx::query_as(AssertSqlSafe(sql)).bind(tenant);
        for id in ids {
            q = q.bind(id.as_str());
        }
        q.fetch_all(pool).await.map_err(StoreError::from)?
    });
    Ok(rows.into_iter().map(entry_from_row).collect::<Result<_, _>>()?)
}

/// The operation payload of a rebuild request (shared with `advanced-operations`).
pub fn rebuild_payload(r: RebuildVectorProjectionRequest) -> OperationRequest {
    OperationRequest::RebuildVector(RebuildVectorJob { force: r.force })
}

async fn rebuild(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(r): ApiJson<RebuildVectorProjectionRequest>,
) -> ApiResult<Response> {
    let key = idempotency_key(&headers)?;
    let payload = rebuild_payload(r);
    let op = submit_operation(
        &state,
        &caller,
        ContextOperationKind::RebuildVector,
        &payload,
        key.as_deref(),
        SubmitEffect::None,
    )
    .await?;
    Ok(submitted_response(&op, operation_response(StatusCode::ACCEPTED, &op)))
}
