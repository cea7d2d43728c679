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

backend_tests!(unreadable_parameters_answer_api_errors);
