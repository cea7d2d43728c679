//! The error responses of the document. Every non-2xx answer of the service is an
//! `ApiError {status, message}` (`crate::http::error`); each status it can answer is one
//! named response here (`#/components/responses/…`), and a route's annotation lists the
//! sets it can answer ([`AuthErrors`], [`BodyErrors`], …) beside its own successes.

use std::collections::BTreeMap;

use utoipa::IntoResponses;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};

/// Every error status the service answers with, its component name, and what it means.
const STATUSES: [(u16, &str, &str); 9] = [
    (400, "BadRequest", "The request is malformed or invalid (body, path or query); nothing was stored."),
    (
        401,
        "Unauthorized",
        "Missing or invalid bearer credentials (when a service token, admin token or JWT secret is configured).",
    ),
    (403, "Forbidden", "This needs an admin credential (the admin token, or a JWT with `\"admin\": true`)."),
    (404, "NotFound", "No such resource for the caller's tenant (another tenant's id answers exactly the same)."),
    (
        409,
        "Conflict",
        "The resource is not in a state that allows this (a version mismatch, an idempotency key reused with a \
         different request, a conversation being deleted, an operation not terminal yet).",
    ),
    (413, "PayloadTooLarge", "The request body or a record in it is over a limit."),
    (415, "UnsupportedMediaType", "The request body must be sent with `content-type: application/json`."),
    (500, "InternalError", "An unexpected failure; the body carries no internals (they are in the service log)."),
    (
        503,
        "ServiceUnavailable",
        "A dependency (the database or the queue) is unavailable for now, or this process has as many event \
         streams open as it may; retry after `Retry-After` seconds.",
    ),
];

fn named(status: u16) -> &'static str {
    STATUSES.iter().find(|(s, _, _)| *s == status).map(|(_, name, _)| *name).expect("a documented error status")
}

/// The named error responses, for `#/components/responses`.
pub fn components() -> Vec<(String, RefOr<Response>)> {
    STATUSES
        .iter()
        .map(|(status, name, description)| {
            let mut response = ResponseBuilder::new().description(*description).content(
                "application/json",
                ContentBuilder::new().schema(Some(Ref::from_schema_name("ApiError"))).build(),
            );
            let seconds = || {
                HeaderBuilder::new()
                    .schema(Some(ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(0))))
                    .description(Some("Seconds to wait before trying again."))
                    .build()
            };
            match status {
                401 => {
                    let challenge = HeaderBuilder::new()
                        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                        .description(Some("`Bearer`: the scheme to authenticate with."))
                        .build();
                    response = response.header("WWW-Authenticate", challenge);
                }
                503 => response = response.header("Retry-After", seconds()),
                _ => {}
            }
            (name.to_string(), response.build().into())
        })
        .collect()
}

fn refs(statuses: &[u16]) -> BTreeMap<String, RefOr<Response>> {
    statuses
        .iter()
        .map(|s| (s.to_string(), RefOr::Ref(Ref::new(format!("#/components/responses/{}", named(*s))))))
        .collect()
}

/// A set of error statuses a route can answer, as one name for its annotation.
macro_rules! error_set {
    ($($(#[$doc:meta])* $name:ident: $($status:literal),+;)+) => {$(
        $(#[$doc])*
        pub struct $name;

        impl IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                refs(&[$($status),+])
            }
        }
    )+};
}

error_set! {
    /// Any authenticated route that reads or writes the store.
    AuthErrors: 401, 500, 503;
    /// An authenticated route with a JSON body.
    BodyErrors: 400, 401, 413, 415, 500, 503;
    /// An authenticated route with a path id or query parameters (a malformed one is a 400).
    ParamErrors: 400, 401, 500, 503;
    /// A submission: its body's errors, a 409 for an idempotency key reused with a
    /// different request (or a conversation already being deleted), 404 for what it names
    /// that does not exist.
    SubmitErrors: 400, 401, 404, 409, 413, 415, 500, 503;
    NotFound: 404;
    Conflict: 409;
    Forbidden: 403;
    PayloadTooLarge: 413;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_of_the_service_is_documented() {
        use crate::http::error::AppError;
        let errors = [
            AppError::BadRequest(String::new()),
            AppError::Unauthorized(String::new()),
            AppError::Forbidden(String::new()),
            AppError::NotFound(String::new()),
            AppError::Conflict(String::new()),
            AppError::PayloadTooLarge(String::new()),
            AppError::UnsupportedMediaType(String::new()),
            AppError::PreconditionFailed(String::new()),
            AppError::MethodNotAllowed,
            AppError::Unavailable(anyhow::anyhow!("")),
            AppError::Busy(String::new()),
            AppError::Internal(anyhow::anyhow!("")),
        ];
        for e in errors {
            let status = e.status().as_u16();
            // 405 answers a method no route has (it is no route's response); 412 is unused.
            if status != 405 && status != 412 {
                assert!(STATUSES.iter().any(|(s, _, _)| *s == status), "{status} has no documented response");
            }
        }
    }
}
