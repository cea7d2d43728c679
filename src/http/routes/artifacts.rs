//! The artifact resource. Contract paths: `export-artifacts/get` (the whole artifact as
//! `ContextExportArtifact`, up to `CONTEXT_OPS_ARTIFACT_INLINE_MAX_BYTES`) and
//! `export-artifacts/chunk` (any byte range, base64). Beside them: listing, metadata and
//! deletion (`GET export-artifacts`, `GET|DELETE export-artifacts/{id}`), and uploads of
//! an artifact made elsewhere (`uploads`, `uploads/chunk`, `uploads/finalize`).
//! Every lookup is by the caller's tenant: another tenant's artifact is a 404.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::http::AppState;
use crate::http::auth::Caller;
use crate::http::body::AppendJson;
use crate::http::error::{ApiJson, ApiResult, AppError};
use crate::http::extract::{ApiQuery, IdPath, decode_list_cursor};
use crate::http::openapi::errors::{BodyErrors, Conflict, NotFound, ParamErrors};
use crate::store::artifacts::{self as store, ArtifactRow, uploads};
use context_jobs::artifact::{
    ARTIFACT_UPLOAD_CHUNK_PATH, ARTIFACT_UPLOAD_FINALIZE_PATH, ARTIFACT_UPLOADS_PATH, ARTIFACTS_PATH,
    AppendUploadRequest, ArtifactInfo, ArtifactList, Decoder, FinalizeUploadRequest, Record, is_digest,
};
use context_jobs::contract::schema::Ulid;
use context_jobs::contract::{
    CONTEXT_EXPORT_ARTIFACT_CHUNK_PATH, CONTEXT_EXPORT_ARTIFACT_PATH, ContextExportArtifact,
    ContextExportArtifactChunk, GetContextExportArtifactChunkRequest, GetContextExportArtifactRequest, ListCursor,
    clamp_page_size,
};
use context_jobs::ids::ArtifactId;

/// The most bytes one chunk download returns; larger `limit`s are clamped (the reply's
/// `nextOffset` says where to continue).
pub const MAX_CHUNK_LIMIT: usize = 4 * 1024 * 1024;
/// The most bytes one upload append carries (decoded).
pub const MAX_UPLOAD_PIECE: usize = 4 * 1024 * 1024;

/// One artifact's metadata (`GET`) or its deletion (`DELETE`).
pub const ARTIFACT_PATH: &str = "/internal/v1/context/export-artifacts/{id}";

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_whole))
        .routes(routes!(chunk))
        .routes(routes!(list))
        .routes(routes!(info, delete))
        .routes(routes!(create_upload))
        .routes(routes!(append_upload))
        .routes(routes!(finalize_upload))
}

async fn load(state: &AppState, caller: &Caller, id: &ArtifactId) -> ApiResult<ArtifactRow> {
    store::get(&state.db, &caller.tenant, id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("artifact {id} not found")))
}

async fn load_ready(state: &AppState, caller: &Caller, id: &ArtifactId) -> ApiResult<ArtifactRow> {
    let row = load(state, caller, id).await?;
    if !row.is_ready() {
        return Err(AppError::Conflict(format!("artifact {} is {}; it can be read once ready", row.id, row.state)));
    }
    Ok(row)
}

/// The whole artifact, decoded. Larger than the inline limit: 413 pointing to `chunk`.
#[utoipa::path(
    post,
    path = CONTEXT_EXPORT_ARTIFACT_PATH,
    operation_id = "getArtifact",
    tag = "artifacts",
    request_body = GetContextExportArtifactRequest,
    responses((status = 200, description = "The artifact, decoded.", body = ContextExportArtifact), BodyErrors, NotFound, Conflict),
)]
async fn get_whole(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<GetContextExportArtifactRequest>,
) -> ApiResult<ApiJson<ContextExportArtifact>> {
    let row = load_ready(&state, &caller, &ArtifactId::parse(&request.artifact_id)?).await?;
    let max = state.config.artifacts.artifact_inline_max_bytes;
    if row.size_bytes.max(0) as usize > max {
        return Err(AppError::PayloadTooLarge(format!(
            "artifact {} is {} bytes, more than the {max} bytes returned whole; download it in pieces with \
             POST {CONTEXT_EXPORT_ARTIFACT_CHUNK_PATH} {{\"artifactId\", \"offset\", \"limit\"}}",
            row.id, row.size_bytes
        )));
    }
    let bytes = store::read_range(&state.db, &caller.tenant, &row.id, 0, row.size_bytes.max(0) as usize).await?;
    let mut decoder = Decoder::new();
    let mut records = Vec::new();
    let undecodable = |e: context_jobs::artifact::DecodeError| {
        AppError::Conflict(format!("artifact {} does not decode ({}): {e}", row.id, e.code()))
    };
    decoder.feed(&bytes, &mut records).map_err(undecodable)?;
    let summary = decoder.finish().map_err(undecodable)?;
    summary.check_digest(row.digest.as_deref().unwrap_or_default()).map_err(undecodable)?;
    let header = summary.header.expect("a decoder started at byte 0 saw the header");
    let mut artifact = ContextExportArtifact {
        id: row.id.to_string(),
        schema_version: header.schema_version,
        messages: Vec::new(),
        entries: Vec::new(),
        created_at_ms: header.created_at_ms,
    };
    for d in records {
        match d.record {
            Record::Message(m) => artifact.messages.push(m),
            Record::Entry(e) => artifact.entries.push(e),
        }
    }
    Ok(ApiJson(artifact))
}

/// Any byte range of a ready artifact, base64; `nextOffset` and `eof` say where to go on.
#[utoipa::path(
    post,
    path = CONTEXT_EXPORT_ARTIFACT_CHUNK_PATH,
    operation_id = "getArtifactChunk",
    tag = "artifacts",
    request_body = GetContextExportArtifactChunkRequest,
    responses((status = 200, description = "Up to `limit` bytes from `offset` (at most 4 MiB), base64.", body = ContextExportArtifactChunk), BodyErrors, NotFound, Conflict),
)]
async fn chunk(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<GetContextExportArtifactChunkRequest>,
) -> ApiResult<ApiJson<ContextExportArtifactChunk>> {
    let row = load_ready(&state, &caller, &ArtifactId::parse(&request.artifact_id)?).await?;
    if request.limit == 0 {
        return Err(AppError::BadRequest("limit must be at least 1".into()));
    }
    let size = row.size_bytes.max(0) as u64;
    if request.offset > size {
        return Err(AppError::BadRequest(format!(
            "offset {} is past the end of the artifact ({size} bytes)",
            request.offset
        )));
    }
    let limit = request.limit.min(MAX_CHUNK_LIMIT);
    let data = store::read_range(&state.db, &caller.tenant, &row.id, request.offset, limit).await?;
    let next_offset = request.offset + data.len() as u64;
    Ok(ApiJson(ContextExportArtifactChunk {
        artifact_id: row.id.to_string(),
        offset: request.offset,
        data_base64: STANDARD.encode(&data),
        next_offset,
        eof: next_offset >= size,
        digest: row.digest.unwrap_or_default(),
    }))
}

#[derive(Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// The `nextCursor` of the previous page.
    cursor: Option<String>,
    /// Page size (default 50, at most 500).
    limit: Option<usize>,
}

/// The tenant's artifacts, newest first, cursor-paged.
#[utoipa::path(
    get,
    path = ARTIFACTS_PATH,
    operation_id = "listArtifacts",
    tag = "artifacts",
    params(ListQuery),
    responses((status = 200, description = "One page, newest first.", body = ArtifactList), ParamErrors),
)]
async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<ApiJson<ArtifactList>> {
    let before = q.cursor.as_deref().map(|c| decode_list_cursor::<ArtifactId>(c, "artifacts")).transpose()?;
    let limit = clamp_page_size(q.limit);
    let mut rows =
        store::list(&state.db, &caller.tenant, before.as_ref().map(|(t, id)| (*t, id.as_str())), limit).await?;
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next_cursor = more.then(|| rows.last().map(|r| ListCursor::encode(r.created_at_ms, r.id.as_str()))).flatten();
    Ok(ApiJson(ArtifactList { items: rows.iter().map(ArtifactRow::info).collect(), next_cursor }))
}

/// An artifact's metadata.
#[utoipa::path(
    get,
    path = ARTIFACT_PATH,
    operation_id = "artifactInfo",
    tag = "artifacts",
    params(("id" = Ulid, Path, description = "The artifact's id (a ULID).")),
    responses((status = 200, description = "The artifact's metadata.", body = ArtifactInfo), ParamErrors, NotFound),
)]
async fn info(
    State(state): State<AppState>,
    caller: Caller,
    IdPath(id): IdPath<ArtifactId>,
) -> ApiResult<ApiJson<ArtifactInfo>> {
    Ok(ApiJson(load(&state, &caller, &id).await?.info()))
}

/// Delete an artifact (an export still writing it fails at its next batch).
#[utoipa::path(
    delete,
    path = ARTIFACT_PATH,
    operation_id = "deleteArtifact",
    tag = "artifacts",
    params(("id" = Ulid, Path, description = "The artifact's id (a ULID).")),
    responses((status = 204, description = "Deleted."), ParamErrors, NotFound),
)]
async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    IdPath(id): IdPath<ArtifactId>,
) -> ApiResult<StatusCode> {
    store::delete(&state.db, &caller.tenant, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Nothing yet: `{}`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateUpload {}

/// Start an upload of an artifact made elsewhere (the body is `{}`).
#[utoipa::path(
    post,
    path = ARTIFACT_UPLOADS_PATH,
    operation_id = "createUpload",
    tag = "artifacts",
    request_body = CreateUpload,
    responses((status = 201, description = "An empty artifact in state `uploading`.", body = ArtifactInfo), BodyErrors),
)]
async fn create_upload(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(CreateUpload {}): ApiJson<CreateUpload>,
) -> ApiResult<Response> {
    let row = uploads::create(&state.db, &caller.tenant, state.config.artifacts.artifact_retention_days).await?;
    Ok((StatusCode::CREATED, ApiJson(row.info())).into_response())
}

/// Append bytes at `offset` (the bytes received so far; at most 4 MiB at once).
#[utoipa::path(
    post,
    path = ARTIFACT_UPLOAD_CHUNK_PATH,
    operation_id = "appendUpload",
    tag = "artifacts",
    request_body = AppendUploadRequest,
    responses((status = 200, description = "The upload so far.", body = ArtifactInfo), BodyErrors, NotFound, Conflict),
)]
async fn append_upload(
    State(state): State<AppState>,
    caller: Caller,
    AppendJson(request): AppendJson<AppendUploadRequest>,
) -> ApiResult<ApiJson<ArtifactInfo>> {
    let id = ArtifactId::parse(&request.artifact_id)?;
    let data = STANDARD
        .decode(request.data_base64.as_bytes())
        .map_err(|e| AppError::BadRequest(format!("dataBase64 is not valid base64: {e}")))?;
    if data.is_empty() {
        return Err(AppError::BadRequest("dataBase64 must carry at least one byte".into()));
    }
    if data.len() > MAX_UPLOAD_PIECE {
        return Err(AppError::PayloadTooLarge(format!(
            "one append carries at most {MAX_UPLOAD_PIECE} bytes, got {}",
            data.len()
        )));
    }
    let row = uploads::append(&state.db, &caller.tenant, &id, request.offset, &data).await?;
    Ok(ApiJson(row.info()))
}

/// Seal an upload: its bytes must hash to `digest`.
#[utoipa::path(
    post,
    path = ARTIFACT_UPLOAD_FINALIZE_PATH,
    operation_id = "finalizeUpload",
    tag = "artifacts",
    request_body = FinalizeUploadRequest,
    responses((status = 200, description = "The artifact, now `ready`.", body = ArtifactInfo), BodyErrors, NotFound, Conflict),
)]
async fn finalize_upload(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<FinalizeUploadRequest>,
) -> ApiResult<ApiJson<ArtifactInfo>> {
    let id = ArtifactId::parse(&request.artifact_id)?;
    if !is_digest(&request.digest) {
        return Err(AppError::BadRequest("digest must be sha256: followed by 64 lowercase hex digits".into()));
    }
    let row = uploads::seal(&state.db, &caller.tenant, &id, &request.digest).await?;
    Ok(ApiJson(row.info()))
}
