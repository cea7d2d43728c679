//! The one error type at the HTTP edge. Every non-2xx body is the contract's
//! `ApiError {status, message}`; a 5xx body never carries internals (they go to the log).

use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use context_jobs::contract::ApiError;

use crate::kinds::SubmitError;
use crate::recall::RecallError;
use crate::store::StoreError;
use context_jobs::ids::IdError;
use context_jobs::kinds::Rejection;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    PreconditionFailed(String),
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("service temporarily unavailable")]
    Unavailable(#[source] anyhow::Error),
    /// 503 with its reason (a limit of this process reached: no dependency is down).
    #[error("{0}")]
    Busy(String),
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl AppError {
    pub fn status(&self) -> StatusCode {
        match self {
            AppError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AppError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            AppError::Forbidden(_) => StatusCode::FORBIDDEN,
            AppError::NotFound(_) => StatusCode::NOT_FOUND,
            AppError::Conflict(_) => StatusCode::CONFLICT,
            AppError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            AppError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            AppError::PreconditionFailed(_) => StatusCode::PRECONDITION_FAILED,
            AppError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            AppError::Unavailable(_) | AppError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            AppError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// The response body for any status and message.
pub fn api_error_response(status: StatusCode, message: impl Into<String>) -> Response {
    let body = ApiError { status: status.as_u16(), message: message.into() };
    (status, axum::Json(body)).into_response()
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        match &self {
            AppError::Internal(e) => tracing::error!(error = format!("{e:#}"), "internal error"),
            AppError::Unavailable(e) => tracing::warn!(error = format!("{e:#}"), "dependency unavailable"),
            _ => {}
        }
        let mut response = api_error_response(self.status(), self.to_string());
        if matches!(self, AppError::Unauthorized(_)) {
            response.headers_mut().insert("www-authenticate", axum::http::HeaderValue::from_static("Bearer"));
        }
        if matches!(self, AppError::Unavailable(_) | AppError::Busy(_)) {
            response.headers_mut().insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        response
    }
}

impl From<StoreError> for AppError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(m) => AppError::NotFound(m),
            StoreError::Conflict(m) => AppError::Conflict(m),
            StoreError::Invalid(m) => AppError::BadRequest(m),
            e if e.is_transient() => AppError::Unavailable(e.into()),
            StoreError::Db(e) => AppError::Internal(e.into()),
            StoreError::Other(e) => AppError::Internal(e),
        }
    }
}

impl From<IdError> for AppError {
    fn from(e: IdError) -> Self {
        AppError::BadRequest(e.to_string())
    }
}

impl From<Rejection> for AppError {
    fn from(e: Rejection) -> Self {
        match e {
            Rejection::Invalid(m) => AppError::BadRequest(m),
            Rejection::TooLarge(m) => AppError::PayloadTooLarge(m),
        }
    }
}

impl From<SubmitError> for AppError {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::Rejected(r) => r.into(),
            SubmitError::NotFound(m) => AppError::NotFound(m),
            SubmitError::Conflict(m) => AppError::Conflict(m),
            SubmitError::Store(e) => e.into(),
        }
    }
}

impl From<RecallError> for AppError {
    fn from(e: RecallError) -> Self {
        match e {
            RecallError::Invalid(m) => AppError::BadRequest(m),
            RecallError::Embed(crate::embedder::EmbedError::Transient(m)) => AppError::Unavailable(anyhow::anyhow!(m)),
            RecallError::Embed(crate::embedder::EmbedError::Permanent(m)) => AppError::Internal(anyhow::anyhow!(m)),
            RecallError::Store(e) => e.into(),
            RecallError::Scoring(m) => AppError::Internal(anyhow::anyhow!(m)),
        }
    }
}

impl From<JsonRejection> for AppError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::MissingJsonContentType(_) => {
                AppError::UnsupportedMediaType("expected a request body with content-type: application/json".into())
            }
            JsonRejection::JsonDataError(e) => AppError::BadRequest(format!("invalid request body: {}", e.body_text())),
            JsonRejection::JsonSyntaxError(e) => AppError::BadRequest(format!("malformed JSON: {}", e.body_text())),
            JsonRejection::BytesRejection(e) => {
                if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    AppError::PayloadTooLarge(format!(
                        "request body exceeds the limit of {} bytes",
                        context_jobs::contract::MAX_APPEND_BYTES
                    ))
                } else {
                    AppError::BadRequest(e.body_text())
                }
            }
            other => AppError::BadRequest(other.body_text()),
        }
    }
}

/// `axum::Json` whose rejections are `ApiError` bodies, and which takes objects only
/// (its extractor is in `body.rs`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<T: serde::Serialize> IntoResponse for ApiJson<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

pub type ApiResult<T> = Result<T, AppError>;
