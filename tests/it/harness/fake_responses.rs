//! A scripted fake of the Responses provider (`POST /v1/responses`) for tests and the
//! inference benchmark: a real axum HTTP server on 127.0.0.1:0. Each request takes the
//! next scripted [`Step`] (or the standing one set with [`FakeProvider::always`]), and is
//! recorded with its arrival time, `Authorization` header and JSON body. A request whose
//! handler is dropped before answering (the client went away) is counted as dropped.
//! With [`FakeProvider::quota`] it behaves like a provider enforcing a request quota: a
//! request over it gets `429` (counted as rejected) before any step is taken.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::watch;

/// What the fake does with one request.
#[derive(Clone, Debug)]
pub enum Step {
    Reply {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
        delay: Duration,
    },
    /// Never answer; the request ends only when the client drops it.
    Hang,
}

impl Step {
    /// `200` with a JSON body, at once.
    pub fn ok(body: Value) -> Step {
        Step::status(200, body)
    }
    pub fn status(status: u16, body: Value) -> Step {
        Step::Reply { status, headers: Vec::new(), body: body.to_string(), delay: Duration::ZERO }
    }
    /// A raw (possibly non-JSON) body.
    pub fn raw(status: u16, body: &str) -> Step {
        Step::Reply { status, headers: Vec::new(), body: body.to_string(), delay: Duration::ZERO }
    }
    pub fn header(mut self, name: &'static str, value: &str) -> Step {
        if let Step::Reply { headers, .. } = &mut self {
            headers.push((name, value.to_string()));
        }
        self
    }
    pub fn after(mut self, wait: Duration) -> Step {
        if let Step::Reply { delay, .. } = &mut self {
            *delay = wait;
        }
        self
    }
}

/// One request as the fake saw it.
#[derive(Clone, Debug)]
pub struct Received {
    pub at: Instant,
    pub authorization: Option<String>,
    pub body: Value,
}

#[derive(Default)]
struct Inner {
    script: Mutex<VecDeque<Step>>,
    standing: Mutex<Option<Step>>,
    received: Mutex<Vec<Received>>,
    dropped: Mutex<usize>,
    /// At most this many requests in any window of this length, else 429.
    quota: Mutex<Option<(usize, Duration)>>,
    rejected: Mutex<usize>,
    /// Bumped on every event, so waits are conditions, not sleeps.
    events: Option<watch::Sender<u64>>,
}

impl Inner {
    fn bump(&self) {
        if let Some(tx) = &self.events {
            tx.send_modify(|n| *n += 1);
        }
    }
}

#[derive(Clone)]
pub struct FakeProvider {
    /// The base URL to put in `RESPONSES_BASE_URL`.
    pub url: String,
    inner: Arc<Inner>,
    events: watch::Receiver<u64>,
}

impl FakeProvider {
    pub async fn start(script: Vec<Step>) -> FakeProvider {
        let (tx, rx) = watch::channel(0u64);
        let inner = Arc::new(Inner { script: Mutex::new(script.into()), events: Some(tx), ..Default::default() });
        let app = Router::new().route("/v1/responses", post(handle)).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeProvider { url, inner, events: rx }
    }

    /// Add a step to the end of the script.
    pub fn then(&self, step: Step) {
        self.inner.script.lock().unwrap().push_back(step);
    }

    /// The step for every request once the script is used up.
    pub fn always(&self, step: Step) {
        *self.inner.standing.lock().unwrap() = Some(step);
    }

    /// Answer `429` to a request that makes more than `requests` in the last `per`.
    pub fn quota(&self, requests: usize, per: Duration) {
        *self.inner.quota.lock().unwrap() = Some((requests, per));
    }

    /// Requests answered `429` by the quota.
    pub fn rejected(&self) -> usize {
        *self.inner.rejected.lock().unwrap()
    }

    pub fn received(&self) -> Vec<Received> {
        self.inner.received.lock().unwrap().clone()
    }

    pub fn dropped(&self) -> usize {
        *self.inner.dropped.lock().unwrap()
    }

    /// Wait (bounded) until `cond` holds over the fake's state.
    pub async fn wait_until(&self, what: &str, within: Duration, cond: impl Fn(&FakeProvider) -> bool) {
        let mut rx = self.events.clone();
        let waited = tokio::time::timeout(within, rx.wait_for(|_| cond(self))).await;
        assert!(
            waited.is_ok(),
            "fake provider: {what} did not happen within {within:?} (received {}, dropped {})",
            self.received().len(),
            self.dropped()
        );
    }

    /// Wait until at least `n` requests arrived; returns them all.
    pub async fn wait_requests(&self, n: usize, within: Duration) -> Vec<Received> {
        self.wait_until(&format!("{n} requests"), within, |f| f.received().len() >= n).await;
        self.received()
    }
}

/// Marks a request dropped unless it was answered.
struct DropGuard {
    inner: Arc<Inner>,
    answered: bool,
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        if !self.answered {
            *self.inner.dropped.lock().unwrap() += 1;
            self.inner.bump();
        }
    }
}

async fn handle(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: String) -> Response {
    let authorization = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_string);
    let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
    let now = Instant::now();
    let over_quota = {
        let mut received = inner.received.lock().unwrap();
        received.push(Received { at: now, authorization, body });
        inner.quota.lock().unwrap().is_some_and(|(requests, per)| {
            received.iter().rev().take_while(|r| now.duration_since(r.at) < per).count() > requests
        })
    };
    if over_quota {
        *inner.rejected.lock().unwrap() += 1;
        inner.bump();
        let body = json!({"error": {"message": "Rate limit reached", "type": "requests"}}).to_string();
        return (StatusCode::TOO_MANY_REQUESTS, [("retry-after-ms", "200")], body).into_response();
    }
    let step = inner.script.lock().unwrap().pop_front().or_else(|| inner.standing.lock().unwrap().clone());
    inner.bump();
    let mut guard = DropGuard { inner: inner.clone(), answered: false };
    let Some(step) = step else {
        guard.answered = true;
        return (StatusCode::IM_A_TEAPOT, "fake provider: script exhausted").into_response();
    };
    match step {
        Step::Hang => std::future::pending().await,
        Step::Reply { status, headers, body, delay } => {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            guard.answered = true;
            let mut response = (StatusCode::from_u16(status).unwrap(), body).into_response();
            response.headers_mut().insert("content-type", "application/json".parse().unwrap());
            for (name, value) in headers {
                response.headers_mut().insert(name, value.parse().unwrap());
            }
            response
        }
    }
}

// ---- reply bodies ----

pub fn text_item(text: &str) -> Value {
    json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
}

pub fn refusal_item(text: &str) -> Value {
    json!({"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": text}]})
}

pub fn call_item(call_id: &str, name: &str) -> Value {
    json!({"type": "function_call", "id": format!("fc_{call_id}"), "call_id": call_id, "name": name, "arguments": "{\"q\":1}"})
}

pub fn reasoning_item(id: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [], "encrypted_content": "opaque"})
}

/// A `completed` reply with `output` items.
pub fn completed(output: Vec<Value>) -> Value {
    json!({"id": "resp_fake", "object": "response", "status": "completed", "model": "fake-model-1",
           "output": output, "error": null, "incomplete_details": null,
           "usage": {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17,
                     "output_tokens_details": {"reasoning_tokens": 0}}})
}

pub fn completed_text(text: &str) -> Value {
    completed(vec![text_item(text)])
}
