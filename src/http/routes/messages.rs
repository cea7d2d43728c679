//! The contract's message endpoints: append, recent, page, search, conversations:list.

use axum::extract::{DefaultBodyLimit, State};
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt as _};
use utoipa_axum::routes;

use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::body::AppendJson;
use crate::http::error::{ApiJson, ApiResult, AppError};
use crate::http::openapi::errors::{BodyErrors, Conflict};
use crate::metrics::{MESSAGES_APPENDED, MESSAGES_SKIPPED};
use crate::store::messages as store;
use context_jobs::contract::{
    AppendMessagesRequest, AppendResponse, CONVERSATIONS_LIST_PATH, ConversationsResponse, ListConversationsRequest,
    MESSAGES_APPEND_PATH, MESSAGES_PAGE_PATH, MESSAGES_RECENT_PATH, MESSAGES_SEARCH_PATH, MessageCursor, MessagePage,
    MessagesResponse, PageMessagesRequest, RecentMessagesRequest, SearchMessagesRequest, clamp_page_size,
    validate_append, validate_resource_id, validate_roles, validate_scope, validate_search_query,
};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        // The append route enforces its own limit and drains oversized bodies.
        .routes(routes!(append).layer(DefaultBodyLimit::disable()))
        .routes(routes!(recent))
        .routes(routes!(page))
        .routes(routes!(search))
        .routes(routes!(list_conversations))
}

/// Append a batch atomically and idempotently by message id (a retried batch reports
/// `skipped`); each message gets the conversation's next `sequence`.
#[utoipa::path(
    post,
    path = MESSAGES_APPEND_PATH,
    operation_id = "appendMessages",
    tag = "messages",
    request_body = AppendMessagesRequest,
    responses(
        (status = 200, description = "Appended (and skipped: ids already stored).", body = AppendResponse),
        BodyErrors,
        Conflict,
    ),
)]
async fn append(
    State(state): State<AppState>,
    caller: Caller,
    AppendJson(request): AppendJson<AppendMessagesRequest>,
) -> ApiResult<ApiJson<AppendResponse>> {
    validate_append(caller.tenant.as_str(), &request.messages).map_err(AppError::BadRequest)?;
    let response = store::append(&state.db, &caller.tenant, &request.messages).await?;
    metrics::counter!(MESSAGES_APPENDED).increment(response.appended as u64);
    metrics::counter!(MESSAGES_SKIPPED).increment(response.skipped as u64);
    Ok(ApiJson(response))
}

/// The newest messages of a conversation, oldest first.
#[utoipa::path(
    post,
    path = MESSAGES_RECENT_PATH,
    operation_id = "recentMessages",
    tag = "messages",
    request_body = RecentMessagesRequest,
    responses((status = 200, description = "Messages, oldest first.", body = MessagesResponse), BodyErrors),
)]
async fn recent(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<RecentMessagesRequest>,
) -> ApiResult<ApiJson<MessagesResponse>> {
    validate_scope(&request.scope).map_err(AppError::BadRequest)?;
    validate_roles(&request.roles).map_err(AppError::BadRequest)?;
    let limit = clamp_page_size(request.limit);
    let items = store::recent(&state.db, &caller.tenant, &request.scope.conversation_id, &request.roles, limit).await?;
    Ok(ApiJson(MessagesResponse { items }))
}

/// A conversation's messages page by page, oldest first.
#[utoipa::path(
    post,
    path = MESSAGES_PAGE_PATH,
    operation_id = "pageMessages",
    tag = "messages",
    request_body = PageMessagesRequest,
    responses((status = 200, description = "One page and the cursor of the next.", body = MessagePage), BodyErrors),
)]
async fn page(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<PageMessagesRequest>,
) -> ApiResult<ApiJson<MessagePage>> {
    validate_scope(&request.scope).map_err(AppError::BadRequest)?;
    validate_roles(&request.roles).map_err(AppError::BadRequest)?;
    let cursor = request.cursor.as_deref().map(MessageCursor::decode).transpose().map_err(AppError::BadRequest)?;
    let limit = clamp_page_size(request.limit);
    let (items, next) =
        store::page(&state.db, &caller.tenant, &request.scope.conversation_id, &request.roles, cursor.as_ref(), limit)
            .await?;
    Ok(ApiJson(MessagePage { items, next_cursor: next.map(|c| c.encode()) }))
}

/// Substring search over a conversation's message text.
#[utoipa::path(
    post,
    path = MESSAGES_SEARCH_PATH,
    operation_id = "searchMessages",
    tag = "messages",
    request_body = SearchMessagesRequest,
    responses((status = 200, description = "Matching messages.", body = MessagesResponse), BodyErrors),
)]
async fn search(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<SearchMessagesRequest>,
) -> ApiResult<ApiJson<MessagesResponse>> {
    validate_scope(&request.scope).map_err(AppError::BadRequest)?;
    if let Some(query) = &request.query {
        validate_search_query(query).map_err(AppError::BadRequest)?;
    }
    if let Some(role) = &request.role {
        validate_roles(std::slice::from_ref(role)).map_err(AppError::BadRequest)?;
    }
    let limit = clamp_page_size(request.limit);
    let items = store::search(
        &state.db,
        &caller.tenant,
        &request.scope.conversation_id,
        request.query.as_deref(),
        request.role.as_deref(),
        limit,
    )
    .await?;
    Ok(ApiJson(MessagesResponse { items }))
}

/// An agent's conversations, most recently updated first.
#[utoipa::path(
    post,
    path = CONVERSATIONS_LIST_PATH,
    operation_id = "listConversations",
    tag = "messages",
    request_body = ListConversationsRequest,
    responses((status = 200, description = "Conversations.", body = ConversationsResponse), BodyErrors),
)]
async fn list_conversations(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<ListConversationsRequest>,
) -> ApiResult<ApiJson<ConversationsResponse>> {
    validate_resource_id("agentId", &request.agent_id).map_err(AppError::BadRequest)?;
    let limit = clamp_page_size(request.limit);
    let items = store::list_conversations(&state.db, &caller.tenant, &request.agent_id, limit).await?;
    Ok(ApiJson(ConversationsResponse { items }))
}
