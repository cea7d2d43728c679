//! HTTP to a service, in-process or a child process: [`OpClient`]. Raw calls return
//! `(status, JSON)` for tests that check a wire shape or send odd input; typed calls speak
//! the contract's DTOs (`context_jobs::contract`) and assert the success status, for tests
//! that only drive a flow.

use context_jobs::contract::{
    AppendResponse, CONTEXT_OPERATIONS_PATH, CONVERSATION_DELETE_PATH, ContextOperation, ConversationRecord,
    ConversationScope, DeletionOperation, MESSAGES_APPEND_PATH, MESSAGES_RECENT_PATH, MessagesResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// A service's base URL, an HTTP client, and the bearer token requests carry by default.
#[derive(Clone)]
pub struct OpClient {
    pub client: reqwest::Client,
    pub base: String,
    pub token: Option<String>,
}

impl OpClient {
    pub fn new(base: impl Into<String>) -> Self {
        OpClient { client: reqwest::Client::new(), base: base.into(), token: None }
    }

    /// The same service as another caller.
    pub fn as_caller(&self, token: &str) -> OpClient {
        OpClient { token: Some(token.to_string()), ..self.clone() }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    fn authed(&self, rb: reqwest::RequestBuilder, token: Option<&str>) -> reqwest::RequestBuilder {
        match token.or(self.token.as_deref()) {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    /// A request to `path` carrying the default token, for headers or methods the calls
    /// below do not cover.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.authed(self.client.request(method, self.url(path)), None)
    }

    // ---- raw ----

    /// POST JSON and return `(status, body)`.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_as(None, path, body).await
    }

    /// [`Self::post`] with `token` instead of the default one.
    pub async fn post_as(&self, token: Option<&str>, path: &str, body: &Value) -> (u16, Value) {
        read(self.authed(self.client.post(self.url(path)), token).json(body).send().await.unwrap()).await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        read(self.request(reqwest::Method::GET, path).send().await.unwrap()).await
    }

    /// [`Self::get`] with `token` instead of the default one.
    pub async fn get_as(&self, token: Option<&str>, path: &str) -> (u16, Value) {
        read(self.authed(self.client.get(self.url(path)), token).send().await.unwrap()).await
    }

    /// The `/metrics` page.
    pub async fn metrics(&self) -> String {
        let response = self.request(reqwest::Method::GET, "/metrics").send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        response.text().await.unwrap()
    }

    // ---- typed ----

    /// POST a request DTO, assert `expected`, decode the reply DTO.
    pub async fn call<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize, expected: u16) -> T {
        let (status, reply) = self.post(path, &serde_json::to_value(body).unwrap()).await;
        assert_eq!(status, expected, "{path}: {reply}");
        serde_json::from_value(reply.clone()).unwrap_or_else(|e| panic!("{path}: {e} in {reply}"))
    }

    pub async fn append_records(&self, records: &[ConversationRecord]) -> AppendResponse {
        self.call(MESSAGES_APPEND_PATH, &json!({"messages": records}), 200).await
    }

    /// The newest `limit` messages of `conversation`, oldest first.
    pub async fn recent(&self, conversation: &str, limit: usize) -> Vec<ConversationRecord> {
        let request = json!({"scope": ConversationScope::conversation(conversation), "limit": limit});
        self.call::<MessagesResponse>(MESSAGES_RECENT_PATH, &request, 200).await.items
    }

    /// Submit an operation (`202`).
    pub async fn submit(&self, path: &str, body: &impl Serialize) -> ContextOperation {
        self.call(path, body, 202).await
    }

    /// Submit a conversation delete (the contract's `DeletionOperation` reply).
    pub async fn submit_delete(&self, conversation: &str) -> DeletionOperation {
        self.call(CONVERSATION_DELETE_PATH, &json!({"scope": ConversationScope::conversation(conversation)}), 202).await
    }

    pub async fn operation(&self, id: &str) -> ContextOperation {
        let (status, op) = self.get(&format!("{CONTEXT_OPERATIONS_PATH}/{id}")).await;
        assert_eq!(status, 200, "{op}");
        serde_json::from_value(op.clone()).unwrap_or_else(|e| panic!("{e} in {op}"))
    }
}

/// `(status, body)`: the body as JSON, `null` when empty, a string when not JSON.
pub async fn read(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let body = if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
    (status, body)
}

/// A plain message (`content` a string; the server assigns sequence and time).
pub fn message(conversation: &str, id: &str, role: &str, text: &str) -> ConversationRecord {
    ConversationRecord::new(id, conversation, role, json!(text))
}

/// Assert the body is the contract's `ApiError` with `status`.
pub fn assert_api_error(status: u16, body: &Value, expected: u16) {
    assert_eq!(status, expected, "unexpected status, body {body}");
    assert_eq!(body["status"], expected, "ApiError.status mismatch: {body}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "ApiError.message missing: {body}");
    assert_eq!(body.as_object().map(|o| o.len()), Some(2), "ApiError has exactly status+message: {body}");
}

/// Reading a typed operation's free-form `result` the way its JSON reads.
pub trait OperationExt {
    /// `result`, or `null` when there is none (so `["field"]` on it is `null` too).
    fn result_json(&self) -> &Value;
}

impl OperationExt for ContextOperation {
    fn result_json(&self) -> &Value {
        self.result.as_ref().unwrap_or(&Value::Null)
    }
}
