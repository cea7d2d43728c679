//! Request bodies: every JSON body is an object ([`ObjectOnly`]: serde would otherwise
//! read a struct from an array of its fields in order, so `[1]` passed for `{"priority":1}`);
//! [`ApiJson`] with `ApiError` rejections; every body refuses NUL in any string (the core's
//! one rule, `context_jobs::contract::nul`, so both engines accept the same bodies); [`AppendJson`] with the append size limit, which
//! still reads the rest of an oversized body (up to a bound) before answering 413 —
//! answering while the client is still sending makes the server close the connection, and
//! most clients then report a broken connection instead of the 413 ("lingering close");
//! [`OptionalJson`]; and [`submission`], which splits a submission's scheduling options
//! from the kind's own body.

use std::marker::PhantomData;

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use futures::StreamExt as _;
use serde::de::{DeserializeOwned, MapAccess, Visitor, value::MapAccessDeserializer};
use serde::{Deserialize, Deserializer};

use super::error::{ApiJson, AppError};
use context_jobs::contract::MAX_APPEND_BYTES;

/// `T` read from a JSON object only.
struct ObjectOnly<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ObjectOnly<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Object<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_map(Object(PhantomData)).map(ObjectOnly)
    }
}

/// The one NUL rule of the core, for a whole JSON body: a 400 naming the field.
fn refuse_nul(bytes: &[u8]) -> Result<(), AppError> {
    context_jobs::contract::nul::check_json("the request body", bytes).map_err(AppError::BadRequest)
}

fn is_json(req: &Request) -> bool {
    req.headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase)
        .is_some_and(|ct| ct.starts_with("application/json") || ct.contains("+json"))
}

fn not_json() -> AppError {
    AppError::UnsupportedMediaType("expected a request body with content-type: application/json".into())
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !is_json(&req) {
            return Err(not_json());
        }
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| AppError::from(axum::extract::rejection::JsonRejection::from(e)))?;
        refuse_nul(&bytes)?;
        let axum::Json(ObjectOnly(value)) = axum::Json::<ObjectOnly<T>>::from_bytes(&bytes)?;
        Ok(ApiJson(value))
    }
}

/// Oversized bodies beyond this many bytes are not drained; the connection is dropped.
const DRAIN_LIMIT: usize = 4 * MAX_APPEND_BYTES;

pub struct AppendJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for AppendJson<T> {
    type Rejection = AppError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        if !is_json(&req) {
            return Err(not_json());
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
        refuse_nul(&buf)?;
        let ObjectOnly(value) = serde_json::from_slice(&buf).map_err(|e| match e.classify() {
            serde_json::error::Category::Data => AppError::BadRequest(format!("invalid request body: {e}")),
            _ => AppError::BadRequest(format!("malformed JSON: {e}")),
        })?;
        Ok(AppendJson(value))
    }
}

/// Split a submission body into the kind's own body (decoded strictly as `T`) and the
/// scheduling options every submission may carry at its top level (`priority`,
/// `deadlineMs`, `timeoutMs`, `notBeforeMs`).
pub fn submission<T: DeserializeOwned>(
    body: serde_json::Value,
) -> Result<(T, context_jobs::operation::SubmitOptions), AppError> {
    let serde_json::Value::Object(mut fields) = body else {
        return Err(AppError::BadRequest("invalid request body: expected a JSON object".into()));
    };
    let mut options = serde_json::Map::new();
    for name in context_jobs::operation::options::OPTION_FIELDS {
        if let Some(v) = fields.remove(name) {
            options.insert(name.to_string(), v);
        }
    }
    let options = serde_json::from_value(serde_json::Value::Object(options))
        .map_err(|e| AppError::BadRequest(format!("invalid scheduling options: {e}")))?;
    let body = serde_json::from_value(serde_json::Value::Object(fields))
        .map_err(|e| AppError::BadRequest(format!("invalid request body: {e}")))?;
    Ok((body, options))
}

/// A JSON body that may be absent (no bytes at all): then `T::default()`. A body that is
/// present must be JSON of `T`.
pub struct OptionalJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for OptionalJson<T> {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        // The same answers as `ApiJson`'s (an oversized body is a 413).
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| AppError::from(axum::extract::rejection::JsonRejection::from(e)))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(T::default()));
        }
        refuse_nul(&bytes)?;
        serde_json::from_slice(&bytes)
            .map(|ObjectOnly(value)| OptionalJson(value))
            .map_err(|e| AppError::BadRequest(format!("invalid request body: {e}")))
    }
}
