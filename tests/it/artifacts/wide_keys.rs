//! A message's key — tenant key, conversation id, message id — wider than PostgreSQL can
//! index (`MAX_MESSAGE_KEY_BYTES`; ids are counted in characters, so ids of 191 four-byte
//! characters each reach ~3,080 bytes) is refused alike on both engines by every path
//! that writes messages: append and inline import with a 400, an artifact import failing
//! its line with nothing written. PostgreSQL answered these with a 500 before.

use context_jobs::contract::{ContextOperationState, MAX_MESSAGE_KEY_BYTES, MESSAGES_APPEND_PATH as APPEND};
use serde_json::{Value, json};

use super::{IMPORTS, download, export, import, page_all, upload};
use crate::harness::jwt::{claims, jwt_mode, mint, tenant_token};
use crate::harness::{Backend, TestApp, assert_api_error};

/// 191 characters of four bytes that do not compress (PostgreSQL compresses a repetitive
/// index value below its limit first).
fn wide() -> String {
    (0..191).map(|_| char::from_u32(fastrand::u32(0x1_0000..0x10_FFFF)).unwrap()).collect()
}

async fn wide_message_keys_are_refused_alike(backend: Backend) {
    let app = TestApp::start_with(backend, |c| {
        jwt_mode(c);
        c.worker.batch_size = 10;
    })
    .await;
    let conversation = wide();
    let record = |id: &str| json!({"id": id, "scope": {"conversationId": conversation}, "role": "user", "content": id});
    let wide_id = wide();

    // Under a short tenant key the same ids fit: 30 short messages, then the wide one.
    let short = app.as_caller(&tenant_token("t"));
    let mut records: Vec<Value> = (0..30).map(|i| record(&format!("m{i:02}"))).collect();
    records.push(record(&wide_id));
    let (status, body) = short.post(APPEND, &json!({"messages": records})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["appended"], 31, "{body}");

    // Under a tenant and project of 191 four-byte characters each, they do not.
    let tenant = app.as_caller(&mint(&claims(&wide(), &wide())));
    let limit = format!("at most {MAX_MESSAGE_KEY_BYTES}");
    let (status, body) = tenant.post(APPEND, &json!({"messages": [record("m"), record(&wide_id)]})).await;
    assert_api_error(status, &body, 400);
    let message = body["message"].as_str().unwrap();
    assert!(message.starts_with("messages[1].id") && message.contains(&limit), "{body}");
    let inline = json!({"messages": [record(&wide_id)], "idempotencyKey": "inline"});
    let (status, body) = tenant.post(IMPORTS, &inline).await;
    assert_api_error(status, &body, 400);
    assert!(body["message"].as_str().unwrap().contains(&limit), "{body}");

    // The short tenant's export, imported into the wide one: the last line fails, after
    // three batches' worth of records that fit, and nothing is written.
    let artifact = export(&short).await.artifact_ref.unwrap();
    let bytes = download(&short, &artifact, 1 << 20).await;
    let uploaded = upload(&tenant, &bytes, 1 << 20).await;
    let op = import(&tenant, json!({"artifactRef": uploaded, "idempotencyKey": "artifact"})).await;
    assert_eq!(op.state, ContextOperationState::Failed, "{op:?}");
    assert_eq!(op.error_code.as_deref(), Some("artifact_bad_line"), "{op:?}");
    let error = op.error.as_deref().unwrap();
    assert!(error.contains("line 32:") && error.contains(&limit), "{op:?}");
    assert!(page_all(&tenant, &conversation).await.is_empty(), "nothing may be written");

    // The wide tenant stores a short message id in the same conversation.
    let (status, body) = tenant.post(APPEND, &json!({"messages": [record("m")]})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(page_all(&tenant, &conversation).await.len(), 1);
    app.stop().await;
}

backend_tests!(backend: wide_message_keys_are_refused_alike);
