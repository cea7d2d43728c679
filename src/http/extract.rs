//! Extractors whose every rejection is an `ApiError`: one id from the path, parsed into its
//! typed form ([`IdPath`]), and a query string ([`ApiQuery`]); both refuse NUL (`%00`) by the
//! core's one rule. axum's own `Path` and
//! `Query` answer `text/plain` (a path that is not UTF-8, say).

use axum::extract::{FromRequestParts, Path, Query};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::AppError;
use context_jobs::ids::{ArtifactId, OperationId};

/// An id that can be taken from a path segment.
pub trait PathId: Sized {
    fn from_path(segment: &str) -> Result<Self, AppError>;
}

impl PathId for OperationId {
    fn from_path(segment: &str) -> Result<Self, AppError> {
        Ok(OperationId::parse(segment)?)
    }
}

impl PathId for ArtifactId {
    fn from_path(segment: &str) -> Result<Self, AppError> {
        Ok(ArtifactId::parse(segment)?)
    }
}

/// Any segment (a dashboard file's name): only UTF-8 and free of NUL.
impl PathId for String {
    fn from_path(segment: &str) -> Result<Self, AppError> {
        Ok(segment.to_string())
    }
}

/// An entry id (a contract resource id).
pub struct EntryId(pub String);

impl PathId for EntryId {
    fn from_path(segment: &str) -> Result<Self, AppError> {
        context_jobs::entries::validate_id("entry id", segment).map_err(super::routes::entries::rule_error)?;
        Ok(EntryId(segment.to_string()))
    }
}

/// The route's one path parameter, parsed.
pub struct IdPath<T>(pub T);

impl<S: Send + Sync, T: PathId> FromRequestParts<S> for IdPath<T> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, AppError> {
        let Path(segment) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| AppError::BadRequest(format!("invalid path: {}", e.body_text())))?;
        context_jobs::contract::nul::check_text("the path parameter", &segment).map_err(AppError::BadRequest)?;
        Ok(IdPath(T::from_path(&segment)?))
    }
}

/// The query string, deserialized.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, AppError> {
        let bad = |e: axum::extract::rejection::QueryRejection| AppError::BadRequest(e.body_text());
        // The core's NUL rule over every decoded name and value (`%00`).
        let Query(pairs) = Query::<Vec<(String, String)>>::from_request_parts(parts, state).await.map_err(bad)?;
        for (name, value) in &pairs {
            let nul = context_jobs::contract::nul::check_text;
            nul("a query parameter name", name).and_then(|()| nul(name, value)).map_err(AppError::BadRequest)?;
        }
        let Query(query) = Query::<T>::from_request_parts(parts, state).await.map_err(bad)?;
        Ok(ApiQuery(query))
    }
}

/// Decode a newest-first listing cursor (`context_jobs::contract::ListCursor`) whose id is
/// of type `T`; anything else is a 400 naming the listing.
pub fn decode_list_cursor<T: PathId>(text: &str, listing: &str) -> Result<(i64, T), AppError> {
    let bad = || AppError::BadRequest(format!("invalid {listing} cursor"));
    let (at, id) = context_jobs::contract::ListCursor::decode(text).ok_or_else(bad)?;
    Ok((at, T::from_path(&id).map_err(|_| bad())?))
}
