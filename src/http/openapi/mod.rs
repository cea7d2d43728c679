//! The OpenAPI 3.1 document of the HTTP API (`GET /openapi.json`, `context-ops openapi`).
//!
//! It is generated from the same list the router is built from: every route is registered
//! with utoipa-axum's `routes!` (`crate::http::routes::api`), which takes the path and the
//! methods from the handler's `#[utoipa::path]` annotation, so a route cannot be served
//! without being documented. The request and response schemas are the DTOs' own
//! (`ToSchema` derives in `context_jobs`, feature `openapi`, and beside the handlers), the
//! errors are [`errors`], the composed bodies [`schemas`]. Routes that are not API
//! (`/metrics`, the dashboard's assets) are the exclusions in `crate::http::routes::non_api`.

pub mod errors;
pub mod schemas;

use std::sync::LazyLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::Modify;
use utoipa::OpenApi as _;
use utoipa::openapi::path::Parameter;
use utoipa::openapi::schema::{Schema, SchemaType, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{OpenApi, RefOr, Tag};

use context_jobs::contract::ApiError;

/// Where the document is served (public, like `/health`).
pub const OPENAPI_PATH: &str = "/openapi.json";

/// The bearer schemes (`components.securitySchemes`); every route needs one of them unless
/// it is public, the admin routes one of the admin ones.
pub const SERVICE_TOKEN: &str = "serviceToken";
pub const GATEWAY_JWT: &str = "gatewayJwt";
pub const ADMIN_TOKEN: &str = "adminToken";

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "context-ops",
        description = "Durable conversation context for agent runtimes: messages, entries, hybrid recall, and every \
                       long-running operation (delete, retention, export, import, rebuild_vector, inference) as a \
                       pollable operation run by queue workers.\n\nEvery error body is an `ApiError` \
                       `{status, message}`. With no credentials configured the service runs in open mode (local \
                       use only): every request is the default tenant and an admin.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    components(schemas(ApiError)),
    modifiers(&Conventions),
    tags(
        (name = "health", description = "Liveness, readiness, and this document."),
        (name = "messages", description = "Conversation messages (the contract's message endpoints)."),
        (name = "entries", description = "Context entries with optimistic versions."),
        (name = "recall", description = "Hybrid recall over entries, and the vector projection."),
        (name = "operations", description = "Submitting, polling, listing, cancelling and retrying operations."),
        (name = "queues", description = "Per-kind queue status, pause and resume."),
        (name = "artifacts", description = "Export artifacts: download, list, delete, upload."),
        (name = "inference", description = "One Responses turn as an operation."),
    ),
)]
struct ApiDoc;

/// Security schemes, the default requirement, and the named error responses.
struct Conventions;

impl Modify for Conventions {
    fn modify(&self, api: &mut OpenApi) {
        let components = api.components.get_or_insert_with(Default::default);
        let bearer = |description: &str, format: Option<&str>| {
            let mut http = Http::new(HttpAuthScheme::Bearer);
            http.description = Some(description.to_string());
            http.bearer_format = format.map(str::to_string);
            SecurityScheme::Http(http)
        };
        components.add_security_scheme(
            SERVICE_TOKEN,
            bearer("The static service token (`AGENT_CONTEXT_SERVICE_TOKEN`): the default tenant.", None),
        );
        components.add_security_scheme(
            GATEWAY_JWT,
            bearer(
                "An HS256 JWT from the gateway (secret `CONTEXT_OPS_JWT_SECRET`): audience `agent-context-infra`, \
                 claims `tenantId`, `projectId`, `sub`, `exp`; `\"admin\": true` grants admin powers.",
                Some("JWT"),
            ),
        );
        components.add_security_scheme(
            ADMIN_TOKEN,
            bearer("The admin token (`CONTEXT_OPS_ADMIN_TOKEN`): the default tenant, with admin powers.", None),
        );
        for (name, response) in errors::components() {
            components.responses.insert(name, response);
        }
        api.security = Some(
            [SERVICE_TOKEN, GATEWAY_JWT, ADMIN_TOKEN]
                .into_iter()
                .map(|scheme| SecurityRequirement::new(scheme, Vec::<String>::new()))
                .collect(),
        );
    }
}

/// The whole document: the routes' paths and schemas, and the conventions above.
pub fn document() -> OpenApi {
    let (_, routes) = crate::http::routes::api().split_for_parts();
    let mut api = ApiDoc::openapi().merge_from(routes);
    // Tags listed above first, in that order; any other a route names after them.
    if let Some(tags) = api.tags.as_mut() {
        tags.dedup_by(|a: &mut Tag, b: &mut Tag| a.name == b.name);
    }
    for item in api.paths.paths.values_mut() {
        let operations = [&mut item.get, &mut item.post, &mut item.put, &mut item.delete, &mut item.patch];
        for op in operations.into_iter().flatten() {
            op.parameters.iter_mut().flatten().for_each(never_null);
            if let Some(RefOr::T(body)) = op.request_body.as_mut() {
                absent_not_null(body);
            }
        }
    }
    api
}

/// An optional body (`Option<T>` in the annotation) is absent or a `T`: the derives make it
/// `T` or `null`, but a `null` body is refused like any other non-object.
fn absent_not_null(body: &mut utoipa::openapi::request_body::RequestBody) {
    for content in body.content.values_mut().filter_map(|c| match c {
        RefOr::T(content) => Some(content),
        RefOr::Ref(_) => None,
    }) {
        if let Some(RefOr::T(Schema::OneOf(one_of))) = &content.schema {
            let null = |s: &RefOr<Schema>| matches!(s, RefOr::T(Schema::Object(o)) if o.schema_type == SchemaType::Type(Type::Null));
            if let [a, b] = one_of.items.as_slice()
                && (null(a) || null(b))
            {
                content.schema = Some(if null(a) { b.clone() } else { a.clone() });
            }
        }
    }
}

/// A path, query or header parameter is present or absent, never `null` (the derives make an
/// `Option` parameter nullable as they do a body field).
fn never_null(parameter: &mut RefOr<Parameter>) {
    if let RefOr::T(Parameter { schema: Some(RefOr::T(Schema::Object(object))), .. }) = parameter
        && let SchemaType::Array(types) = &mut object.schema_type
    {
        types.retain(|t| *t != Type::Null);
        if let [only] = types.as_slice() {
            object.schema_type = SchemaType::Type(only.clone());
        }
    }
}

/// The document as served and as committed in `docs/openapi.json`.
pub fn document_json() -> String {
    let mut text = document().to_pretty_json().expect("the document serializes");
    text.push('\n');
    text
}

static DOCUMENT: LazyLock<String> = LazyLock::new(document_json);

/// This document.
#[utoipa::path(
    get,
    path = OPENAPI_PATH,
    operation_id = "openapi",
    tag = "health",
    security(()),
    responses((status = 200, description = "This document (OpenAPI 3.1).", content_type = "application/json", body = Object)),
)]
pub async fn openapi_json() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT.as_str()).into_response()
}
