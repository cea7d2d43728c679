//! Tenant walls: every artifact and upload endpoint answers another tenant 404, its
//! listing is empty, and its own export holds none of the first tenant's data.

use context_jobs::artifact::ArtifactDigest;
use context_jobs::contract::ContextOperationState;
use reqwest::Method;
use serde_json::{Value, json};

use super::{
    ARTIFACTS, CHUNK, EXPORTS, FINALIZE, GET, IMPORTS, OPS, UPLOAD_CHUNK, artifact_lines, download, export, join_lines,
    upload,
};
use crate::harness::jwt::{jwt_app, tenant_token};
use crate::harness::{OpClient, OperationExt as _, TestApp, assert_api_error, message, read};

async fn send(api: &OpClient, method: Method, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut request = api.request(method, path);
    if let Some(body) = body {
        request = request.json(body);
    }
    read(request.send().await.unwrap()).await
}

async fn another_tenants_artifacts_are_404(app: TestApp) {
    let app = app.with_token(tenant_token("alpha"));
    app.append_records(&[message("secret", "s1", "user", "alpha only")]).await;
    let op = export(&app).await;
    let artifact = op.artifact_ref.clone().unwrap();
    let uploaded = upload(&app, &join_lines(&artifact_lines("u", 2)), 1000).await;
    let beta = app.as_caller(&tenant_token("beta"));
    let probes: Vec<(Method, String, Option<Value>)> = vec![
        (Method::POST, GET.into(), Some(json!({"artifactId": artifact}))),
        (Method::POST, CHUNK.into(), Some(json!({"artifactId": artifact}))),
        (Method::GET, format!("{ARTIFACTS}/{artifact}"), None),
        (Method::DELETE, format!("{ARTIFACTS}/{artifact}"), None),
        (Method::POST, IMPORTS.into(), Some(json!({"artifactRef": artifact, "idempotencyKey": "steal"}))),
        (Method::POST, UPLOAD_CHUNK.into(), Some(json!({"artifactId": uploaded, "offset": 0, "dataBase64": "AAAA"}))),
        (Method::POST, FINALIZE.into(), Some(json!({"artifactId": uploaded, "digest": ArtifactDigest::of(b"")}))),
        (Method::GET, format!("{OPS}/{}", op.id), None),
    ];
    for (method, path, body) in probes {
        let (status, body) = send(&beta, method, &path, body.as_ref()).await;
        assert_api_error(status, &body, 404);
    }
    let (status, list) = send(&beta, Method::GET, ARTIFACTS, None).await;
    assert_eq!((status, list["items"].as_array().map(Vec::len)), (200, Some(0)), "{list}");
    // Beta's own export holds none of alpha's data.
    let theirs = beta.submit(EXPORTS, &json!({})).await;
    let done = beta.wait_terminal(&theirs.id).await;
    assert_eq!(done.state, ContextOperationState::Succeeded, "{done:?}");
    assert_eq!(done.result_json()["messages"], 0);
    // Alpha's artifact is untouched.
    assert_eq!(download(&app, &artifact, 1 << 20).await.len() as u64, op.result_json()["sizeBytes"].as_u64().unwrap());
    app.stop().await;
}

backend_tests!(start = jwt_app; another_tenants_artifacts_are_404);
