//! A JSON body extractor with the append size limit that still reads the rest of an
//! oversized body (up to a bound) before answering 413. Answering while the client is
//! still sending makes the server close the connection, and most clients then report a
//! broken connection instead of the 413 — so we drain first ("lingering close").

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use futures::StreamExt as _;
use serde::de::DeserializeOwned;

use super::error::AppError;
use context_jobs::contract::MAX_APPEND_BYTES;

/// Oversized bodies beyond this many bytes are not drained; the connection is dropped.
const DRAIN_LIMIT: usize = 4 * MAX_APPEND_BYTES;

pub struct AppendJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for AppendJson<T> {
    type Rejection = AppError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let is_json = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("application/json") || ct.contains("+json"));
        if !is_json {
            return Err(AppError::UnsupportedMediaType(
                "expected a request body with content-type: application/json".into(),
            ));
        }
        let too_large =
            || AppError::PayloadTooLarge(format!("an append carries at most {MAX_APPEND_BYTES} serialized bytes"));
        let mut stream = Body::into_data_stream(req.into_body());
        let mut buf = Vec::new();
        let mut seen = 0usize;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| AppError::BadRequest(format!("could not read the request body: {e}")))?;
            seen += chunk.len();
            if seen > DRAIN_LIMIT {
                return Err(too_large());
            }
            if seen <= MAX_APPEND_BYTES {
                buf.extend_from_slice(&chunk);
            }
        }
        if seen > MAX_APPEND_BYTES {
            return Err(too_large());
        }
        let value = serde_json::from_slice(&buf).map_err(|e| match e.classify() {
            serde_json::error::Category::Data => AppError::BadRequest(format!("invalid request body: {e}")),
            _ => AppError::BadRequest(format!("malformed JSON: {e}")),
        })?;
        Ok(AppendJson(value))
    }
}
