//! The OpenAPI document (`GET /openapi.json`, `context-ops openapi`, `docs/openapi.json`)
//! against the service: the committed file is the generated document, the served one too;
//! the router serves exactly the documented routes (both directions) plus the declared
//! non-API ones; and each route's documented security is what the service enforces.

use std::collections::BTreeSet;

use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::{Backend, TestApp, read};
use context_ops::http::openapi::{OPENAPI_PATH, document_json};
use context_ops::http::routes::non_api::NON_API_ROUTES;

const REGENERATE: &str = "cargo run -- openapi > docs/openapi.json";
/// Every method a route could be registered for (HEAD follows GET in axum).
const METHODS: [&str; 7] = ["get", "post", "put", "patch", "delete", "options", "trace"];

fn document() -> Value {
    serde_json::from_str(&document_json()).unwrap()
}

/// `(path, method)` of every documented operation.
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if METHODS.contains(&method.as_str()) {
                out.push((path.clone(), method.clone(), op.clone()));
            }
        }
    }
    out
}

/// A documented path with its parameters filled in (an id that names nothing, a real kind).
fn concrete(path: &str) -> String {
    path.replace("{id}", "01ARZ3NDEKTSV4RRFFQ69G5FAV").replace("{kind}", "export")
}

/// The path templates an axum router serves, read from its `Debug` form (axum has no API
/// that lists them). Fails loudly, not silently, if that form changes.
fn served_paths(router: &axum::Router) -> BTreeSet<String> {
    let text = format!("{router:?}");
    let start = text.find("path_router").expect("the router's Debug form names its path_router");
    let end = text[start..].find("fallback_router").map_or(text.len(), |e| start + e);
    let section = &text[start..end];
    let paths_at = section.find("paths:").expect("the path router's Debug form lists its paths");
    let paths: BTreeSet<String> =
        section[paths_at..].split('"').skip(1).step_by(2).filter(|p| p.starts_with('/')).map(str::to_string).collect();
    assert!(paths.len() > 10, "read too few paths from the router's Debug form (axum changed it?): {paths:?}");
    paths
}

/// `(status, body)`, but an event stream's body is not waited for (the stream of all
/// operations never ends): its status and headers are the answer.
async fn read_head(response: reqwest::Response) -> (u16, Value) {
    let stream = response.headers().get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if stream { (response.status().as_u16(), Value::Null) } else { read(response).await }
}

#[test]
fn committed_document_is_the_generated_one() {
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json"))
        .unwrap_or_else(|e| panic!("docs/openapi.json: {e}; generate it with `{REGENERATE}`"));
    assert!(
        committed == document_json(),
        "docs/openapi.json differs from the document the code generates: regenerate it with `{REGENERATE}`"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_publicly_and_the_same() {
    let app = TestApp::start_with(Backend::Sqlite, |c| c.auth.service_token = Some("t0ken".to_string().into())).await;
    let response = app.client.get(app.url(OPENAPI_PATH)).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200, "the document needs no credentials");
    assert_eq!(response.headers()["content-type"], "application/json");
    let served: Value = response.json().await.unwrap();
    assert_eq!(served, document());
    assert_eq!(served["openapi"], "3.1.0");
    app.stop().await;
}

/// The router's paths are the document's plus the declared non-API ones; on every
/// documented path, each documented method reaches its handler (not the fallback, not 405)
/// and every other method is 405.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_serves_exactly_the_documented_routes() {
    let app = TestApp::start(Backend::Sqlite).await;
    let doc = document();
    let documented: BTreeSet<String> = doc["paths"].as_object().unwrap().keys().cloned().collect();
    let served = served_paths(&context_ops::http::router(app.running().state.clone()));
    let excluded: BTreeSet<String> = NON_API_ROUTES.iter().map(|(p, _)| p.to_string()).collect();
    let undocumented: Vec<_> = served.difference(&documented).filter(|p| !excluded.contains(*p)).collect();
    assert!(
        undocumented.is_empty(),
        "served but not in the document (annotate them, or declare them non-API): {undocumented:?}"
    );
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(unserved.is_empty(), "in the document but not served: {unserved:?}");
    for excluded in &excluded {
        assert!(!documented.contains(excluded), "{excluded} is declared non-API but documented");
    }

    for path in &documented {
        let item = &doc["paths"][path];
        for method in METHODS {
            let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let request = app.request(m, &concrete(path)).json(&json!({}));
            let (status, body) = read_head(request.send().await.unwrap()).await;
            let unrouted = status == 405 || (status == 404 && body["message"] == context_ops::http::NO_SUCH_ENDPOINT);
            if item.get(method).is_some() {
                assert!(!unrouted, "{method} {path} is documented but not served: {status} {body}");
            } else {
                assert_eq!(status, 405, "{method} {path} is served but not documented: {body}");
            }
        }
    }
    app.stop().await;
}

/// Public operations answer without credentials; every other one answers 401 without them;
/// the admin-only ones answer 403 to the service token and not to the admin token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_security_is_enforced() {
    let app = TestApp::start_with(Backend::Sqlite, |c| {
        c.auth.service_token = Some("service-t0ken".to_string().into());
        c.auth.admin_token = Some("admin-t0ken".to_string().into());
    })
    .await;
    let doc = document();
    let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
    let mut admin_only = 0;
    for (path, method, op) in operations(&doc) {
        let security = op.get("security").or(doc.get("security")).unwrap();
        let names: Vec<&str> = security
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|requirement| requirement.as_object().unwrap().keys().map(String::as_str))
            .collect();
        for name in &names {
            assert!(schemes.contains_key(*name), "{method} {path} names an undeclared scheme {name}");
        }
        let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let send = |token: Option<&str>| {
            let mut request = app.client.request(m.clone(), app.url(&concrete(&path))).json(&json!({}));
            if let Some(t) = token {
                request = request.bearer_auth(t);
            }
            async move { read_head(request.send().await.unwrap()).await }
        };
        let (anonymous, body) = send(None).await;
        if names.is_empty() {
            assert_ne!(anonymous, 401, "{method} {path} is documented public: {body}");
            continue;
        }
        assert_eq!(anonymous, 401, "{method} {path} needs credentials: {body}");
        let (admin, body) = send(Some("admin-t0ken")).await;
        assert!(![401, 403].contains(&admin), "{method} {path} as admin: {admin} {body}");
        let (service, body) = send(Some("service-t0ken")).await;
        if names.contains(&"serviceToken") {
            assert!(![401, 403].contains(&service), "{method} {path} with the service token: {service} {body}");
        } else {
            admin_only += 1;
            assert_eq!(service, 403, "{method} {path} is admin-only: {body}");
        }
    }
    assert!(admin_only >= 2, "pause and resume are admin-only");
    app.stop().await;
}

/// The schema a documented success answers with: its `$ref` name.
fn success_schema(doc: &Value, path: &str, method: &str) -> String {
    let responses = doc["paths"][path][method]["responses"].as_object().unwrap();
    let (_, ok) = responses.iter().find(|(status, _)| status.starts_with('2')).unwrap();
    let reference = ok["content"]["application/json"]["schema"]["$ref"].as_str().unwrap();
    reference.trim_start_matches("#/components/schemas/").to_string()
}

/// The contract's own paths are documented in the contract's vocabulary (four kinds, four
/// states — written out here as the contract has them), the REST forms in the full one.
#[test]
fn contract_paths_document_the_contract_vocabulary() {
    use context_jobs::contract::*;
    let doc = document();
    let schemas = &doc["components"]["schemas"];
    assert_eq!(schemas["ContractOperationKind"]["enum"], json!(["delete", "export", "import", "rebuild_vector"]));
    assert_eq!(schemas["ContractOperationState"]["enum"], json!(["queued", "running", "succeeded", "failed"]));
    assert_eq!(
        schemas["ContractOperation"]["properties"]["kind"]["$ref"],
        "#/components/schemas/ContractOperationKind"
    );
    assert_eq!(
        schemas["ContractOperation"]["properties"]["state"]["$ref"],
        "#/components/schemas/ContractOperationState"
    );
    assert_eq!(schemas["ContractOperationView"]["allOf"][0]["$ref"], "#/components/schemas/ContractOperation");
    assert_eq!(
        schemas["DeletionOperation"]["properties"]["state"]["$ref"],
        "#/components/schemas/ContractOperationState"
    );
    let full_kinds: Vec<&str> = ContextOperationKind::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(schemas["ContextOperationKind"]["enum"], json!(full_kinds));

    for path in [CONVERSATION_DELETE_PATH, RETENTION_PATH] {
        assert_eq!(success_schema(&doc, path, "post"), "DeletionOperation", "{path}");
    }
    for path in [
        CONTEXT_ADVANCED_OPERATIONS_PATH,
        CONTEXT_OPERATIONS_PATH,
        CONTEXT_EXPORT_PATH,
        CONTEXT_IMPORT_PATH,
        VECTOR_REBUILD_PATH,
    ] {
        assert_eq!(success_schema(&doc, path, "post"), "ContractOperationView", "{path}");
    }
    let rest = [
        ("/internal/v1/context/operations/{id}", "get"),
        ("/internal/v1/context/operations/{id}/wait", "get"),
        ("/internal/v1/context/operations/{id}/cancel", "post"),
        ("/internal/v1/context/operations/{id}/retry", "post"),
        (INFERENCE_PATH, "post"),
    ];
    for (path, method) in rest {
        assert_eq!(success_schema(&doc, path, method), "OperationView", "{method} {path}");
    }
}

/// A parameter is present or absent, and an optional body absent or an object: the
/// document never offers `null` for either (the service refuses both).
#[test]
fn parameters_and_bodies_are_never_null() {
    let doc = document();
    let allows_null = |schema: &Value| {
        let text = schema.to_string();
        text.contains("\"null\"")
    };
    for (path, method, op) in operations(&doc) {
        for parameter in op["parameters"].as_array().into_iter().flatten() {
            assert!(!allows_null(&parameter["schema"]), "{method} {path}: parameter {parameter}");
        }
        if let Some(body) = op.get("requestBody") {
            let schema = &body["content"]["application/json"]["schema"];
            assert!(schema.get("oneOf").is_none() || !allows_null(schema), "{method} {path}: body {schema}");
            assert!(!allows_null(&json!(schema.get("type"))), "{method} {path}: body {schema}");
        }
    }
}
