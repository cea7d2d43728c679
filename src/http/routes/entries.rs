//! The contract's entry endpoints — put, get, correct, expire, merge — and a read-only
//! history of every version (`GET …/entries/{id}/history`, beyond the contract). Each
//! write is one optimistic-concurrency transaction (`store::entry_writes`).

use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::error::{ApiJson, ApiResult, AppError};
use crate::http::extract::{EntryId, IdPath};
use crate::http::openapi::errors::{BodyErrors, Conflict, NotFound, ParamErrors};
use crate::store::entries::{reads, writes as entry_writes};
use context_jobs::contract::schema::ResourceId;
use context_jobs::contract::{
    CONTEXT_CORRECT_PATH, CONTEXT_EXPIRE_PATH, CONTEXT_INSIGHT_GET_PATH, CONTEXT_INSIGHTS_PATH, CONTEXT_MERGE_PATH,
    ContextInsight, ContextInsightStatus, CorrectContextInsightRequest, ExpireContextInsightRequest,
    GetContextInsightRequest, MergeContextInsightsRequest, PutContextInsightRequest,
};
use context_jobs::entries::{
    EntryRuleError, MAX_MERGE_SOURCES, validate_content, validate_entry, validate_id, validate_reason,
};

pub const ENTRY_HISTORY_PATH: &str = "/internal/v1/context/entries/{id}/history";

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(put))
        .routes(routes!(get_one))
        .routes(routes!(correct))
        .routes(routes!(expire))
        .routes(routes!(merge))
        .routes(routes!(history))
}

pub fn rule_error(e: EntryRuleError) -> AppError {
    match e {
        EntryRuleError::Invalid(m) => AppError::BadRequest(m),
        EntryRuleError::PayloadTooLarge(m) => AppError::PayloadTooLarge(m),
    }
}

/// Create an entry (`expectedVersion` 0: it must not exist), or replace it at its current
/// `expectedVersion` (404 if there is no such entry).
#[utoipa::path(
    post,
    path = CONTEXT_INSIGHTS_PATH,
    operation_id = "putEntry",
    tag = "entries",
    request_body = PutContextInsightRequest,
    responses((status = 200, description = "The entry as stored.", body = ContextInsight), BodyErrors, NotFound, Conflict),
)]
async fn put(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<PutContextInsightRequest>,
) -> ApiResult<ApiJson<ContextInsight>> {
    validate_entry(&request.entry).map_err(rule_error)?;
    Ok(ApiJson(entry_writes::put(&state.db, &caller.tenant, &request.entry, request.expected_version).await?))
}

/// An entry by id.
#[utoipa::path(
    post,
    path = CONTEXT_INSIGHT_GET_PATH,
    operation_id = "getEntry",
    tag = "entries",
    request_body = GetContextInsightRequest,
    responses((status = 200, description = "The entry.", body = ContextInsight), BodyErrors, NotFound),
)]
async fn get_one(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<GetContextInsightRequest>,
) -> ApiResult<ApiJson<ContextInsight>> {
    validate_id("entryId", &request.entry_id).map_err(rule_error)?;
    reads::get(&state.db, &caller.tenant, &request.entry_id)
        .await?
        .map(ApiJson)
        .ok_or_else(|| AppError::NotFound(format!("entry {:?} not found", request.entry_id)))
}

fn require_version(expected_version: u64) -> ApiResult<()> {
    if expected_version == 0 {
        return Err(AppError::BadRequest("expectedVersion must be the entry's current version (>= 1)".into()));
    }
    Ok(())
}

/// Correct an active entry's content at `expectedVersion`.
#[utoipa::path(
    post,
    path = CONTEXT_CORRECT_PATH,
    operation_id = "correctEntry",
    tag = "entries",
    request_body = CorrectContextInsightRequest,
    responses((status = 200, description = "The new version.", body = ContextInsight), BodyErrors, NotFound, Conflict),
)]
async fn correct(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(r): ApiJson<CorrectContextInsightRequest>,
) -> ApiResult<ApiJson<ContextInsight>> {
    validate_id("entryId", &r.entry_id).map_err(rule_error)?;
    validate_content(&r.content).map_err(rule_error)?;
    validate_reason(&r.reason).map_err(rule_error)?;
    require_version(r.expected_version)?;
    let stored =
        entry_writes::correct(&state.db, &caller.tenant, &r.entry_id, r.expected_version, &r.content, &r.reason)
            .await?;
    Ok(ApiJson(stored))
}

/// Expire an active entry at `expectedVersion`.
#[utoipa::path(
    post,
    path = CONTEXT_EXPIRE_PATH,
    operation_id = "expireEntry",
    tag = "entries",
    request_body = ExpireContextInsightRequest,
    responses((status = 200, description = "The expired version.", body = ContextInsight), BodyErrors, NotFound, Conflict),
)]
async fn expire(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(r): ApiJson<ExpireContextInsightRequest>,
) -> ApiResult<ApiJson<ContextInsight>> {
    validate_id("entryId", &r.entry_id).map_err(rule_error)?;
    validate_reason(&r.reason).map_err(rule_error)?;
    require_version(r.expected_version)?;
    Ok(ApiJson(entry_writes::expire(&state.db, &caller.tenant, &r.entry_id, r.expected_version, &r.reason).await?))
}

/// Merge active entries into a new one; the sources become `merged`.
#[utoipa::path(
    post,
    path = CONTEXT_MERGE_PATH,
    operation_id = "mergeEntries",
    tag = "entries",
    request_body = MergeContextInsightsRequest,
    responses((status = 200, description = "The merged entry.", body = ContextInsight), BodyErrors, NotFound, Conflict),
)]
async fn merge(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(r): ApiJson<MergeContextInsightsRequest>,
) -> ApiResult<ApiJson<ContextInsight>> {
    validate_entry(&r.merged_entry).map_err(rule_error)?;
    if r.source_entry_ids.is_empty() || r.source_entry_ids.len() > MAX_MERGE_SOURCES {
        return Err(AppError::BadRequest(format!("sourceEntryIds must list 1..={MAX_MERGE_SOURCES} entries")));
    }
    let mut seen = std::collections::HashSet::new();
    for id in &r.source_entry_ids {
        validate_id("source entry id", id).map_err(rule_error)?;
        if !seen.insert(id.as_str()) {
            return Err(AppError::BadRequest(format!("source entry {id:?} is listed twice")));
        }
    }
    if seen.contains(r.merged_entry.id.as_str()) {
        return Err(AppError::BadRequest("the merged entry must be a new entry, not one of the sources".into()));
    }
    if let Some(stray) = r.expected_versions.keys().find(|k| !seen.contains(k.as_str())) {
        return Err(AppError::BadRequest(format!("expectedVersions names {stray:?}, which is not a source")));
    }
    // A listed version is compared exactly: 0 (no entry is ever at it) would have meant
    // "any", as an unlisted source does, so a concurrent update was merged without a 409.
    if let Some((id, _)) = r.expected_versions.iter().find(|(_, v)| **v == 0) {
        return Err(AppError::BadRequest(format!(
            "expectedVersions[{id:?}] must be the entry's current version (>= 1)"
        )));
    }
    let merged =
        entry_writes::merge(&state.db, &caller.tenant, &r.source_entry_ids, &r.merged_entry, &r.expected_versions)
            .await?;
    Ok(ApiJson(merged))
}

/// One version of an entry, and the change that made it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct HistoryItem {
    version: u64,
    change: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    reason: Option<String>,
    entry: ContextInsight,
}

#[derive(Serialize, ToSchema)]
struct HistoryResponse {
    items: Vec<HistoryItem>,
}

/// Every version, oldest first. A version replaced by a correction is reported with status
/// `corrected` (its snapshot was `active` when written; the successor says why it ended).
/// Every version, oldest first. A version replaced by a correction is reported with status `corrected` (its snapshot was `active` when written; the successor says why it ended).
#[utoipa::path(
    get,
    path = ENTRY_HISTORY_PATH,
    operation_id = "entryHistory",
    tag = "entries",
    params(("id" = ResourceId, Path, description = "The entry's id.")),
    responses((status = 200, description = "Every version, oldest first.", body = HistoryResponse), ParamErrors, NotFound),
)]
async fn history(
    State(state): State<AppState>,
    caller: Caller,
    IdPath(EntryId(id)): IdPath<EntryId>,
) -> ApiResult<ApiJson<HistoryResponse>> {
    let rows = reads::history(&state.db, &caller.tenant, &id).await?;
    if rows.is_empty() {
        return Err(AppError::NotFound(format!("entry {id:?} not found")));
    }
    let next_changes: Vec<Option<String>> = rows.iter().skip(1).map(|r| Some(r.0.clone())).chain([None]).collect();
    let items = rows
        .into_iter()
        .zip(next_changes)
        .map(|((change, reason, mut entry), next)| {
            if next.as_deref() == Some("correct") {
                entry.status = ContextInsightStatus::Corrected;
            }
            HistoryItem { version: entry.version, change, reason, entry }
        })
        .collect();
    Ok(ApiJson(HistoryResponse { items }))
}
