//! Path and query parameters that cannot be read — not UTF-8 (`%FF%FE`), not an id, a query
//! of the wrong type — answer 400 with the contract's `ApiError` JSON on every route that
//! takes them, never `text/plain` or an empty body.

use context_jobs::contract::CONTEXT_OPERATIONS_PATH as OPS;
use reqwest::Method;

use crate::harness::{TestApp, assert_api_error, read};

const ARTIFACTS: &str = "/internal/v1/context/export-artifacts";

async fn unreadable_parameters_answer_api_errors(app: TestApp) {
    let mut probes: Vec<(Method, String)> = Vec::new();
    for id in ["%FF%FE", "%3Cid%3E", "not-an-id", "%00"] {
        probes.extend([
            (Method::GET, format!("{OPS}/{id}")),
            (Method::DELETE, format!("{OPS}/{id}")),
            (Method::GET, format!("{OPS}/{id}/wait")),
            (Method::POST, format!("{OPS}/{id}/cancel")),
            (Method::POST, format!("{OPS}/{id}/retry")),
            (Method::GET, format!("{ARTIFACTS}/{id}")),
            (Method::DELETE, format!("{ARTIFACTS}/{id}")),
        ]);
    }
    probes.push((Method::GET, "/internal/v1/context/entries/%FF%FE/history".into()));
    // The dashboard's files too (public).
    probes.push((Method::GET, "/ui/%FF%FE".into()));
    // Query strings that do not fit.
    probes.extend([
        (Method::GET, format!("{OPS}?limit=many")),
        (Method::GET, format!("{OPS}?surprise=1")),
        (Method::GET, format!("{OPS}?kind=%FF%FE")),
        (Method::GET, format!("{OPS}/01ARZ3NDEKTSV4RRFFQ69G5FAV/wait?timeoutMs=soon")),
        (Method::GET, format!("{ARTIFACTS}?limit=-1")),
    ]);
    for (method, path) in probes {
        let response = app.request(method.clone(), &path).send().await.unwrap();
        let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_string());
        let (status, body) = read(response).await;
        assert_eq!(content_type.as_deref(), Some("application/json"), "{method} {path}: {status} {body}");
        assert_api_error(status, &body, 400);
    }
}

/// What the HTTP parser itself refuses, before any route — a raw `<` or space in the URL
/// (curl sends `…/operations/<id>` as typed), a header line without a colon — answers 400
/// with an `ApiError` body too, not hyper's empty one.
async fn requests_hyper_refuses_answer_api_errors(app: TestApp) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let addr = app.running().addr;
    for request in [
        format!("GET {OPS}/<id> HTTP/1.1\r\nHost: t\r\n\r\n"),
        format!("GET {OPS}/a b HTTP/1.1\r\nHost: t\r\n\r\n"),
        format!("GET {OPS} HTTP/1.1\r\nHost: t\r\nnot a header\r\n\r\n"),
    ] {
        let mut connection = tokio::net::TcpStream::connect(addr).await.unwrap();
        connection.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        connection.read_to_string(&mut answer).await.unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or_else(|| panic!("{request:?}: {answer:?}"));
        assert!(head.starts_with("HTTP/1.1 400 "), "{request:?}: {answer}");
        assert!(head.contains("\r\ncontent-type: application/json\r\n"), "{request:?}: {answer}");
        assert!(head.contains(&format!("\r\ncontent-length: {}\r\n", body.len())), "{request:?}: {answer}");
        let body: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"));
        assert_api_error(400, &body, 400);
    }
}

backend_tests!(unreadable_parameters_answer_api_errors, requests_hyper_refuses_answer_api_errors);
