//! The HTTP transport of `POST {RESPONSES_BASE_URL}/v1/responses`: one attempt per
//! call, with the configured connect and total timeouts, the API key as a sensitive
//! header, and per-attempt metrics. Retries, decoding and cancellation are the
//! caller's (`worker::inference`); this module never retries and never logs a body.
//!
//! The key is held only in a header value marked sensitive (so the HTTP stack does not
//! print it) and is scrubbed from any text this module hands back ([`ResponsesClient::scrub`]).

use secrecy::ExposeSecret as _;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use reqwest::header::{AUTHORIZATION, HeaderValue};
use serde_json::Value;

use crate::config::Config;
use context_jobs::responses::RetryHeaders;

/// Provider calls by `status_class` (`2xx`, `429`, `4xx`, `5xx`, `timeout`, `connect_error`,
/// `transport_error`). A 429 is a class of its own: a provider's rate limit wants a
/// different response (and alert) from the other 4xx, which mean a bad key or request.
pub const PROVIDER_REQUESTS: &str = "context_ops_inference_provider_requests_total";
/// Provider call latency by `status_class`, seconds (headers and body).
pub const PROVIDER_LATENCY: &str = "context_ops_inference_provider_request_duration_seconds";

/// Largest reply body read; a bigger one is cut off and reported as unreadable (a
/// Responses turn is far smaller, and an unbounded read is a memory hazard).
const MAX_REPLY_BYTES: usize = 32 * 1024 * 1024;
/// Provider text kept in an error message (the rest is dropped before anything is stored).
const MAX_PROVIDER_TEXT: usize = 300;

/// One attempt's HTTP reply.
#[derive(Debug)]
pub struct ProviderReply {
    pub status: u16,
    pub retry: RetryHeaders,
    /// The body as JSON, or why it is not (already scrubbed and truncated).
    pub body: Result<Value, String>,
}

/// An attempt that got no HTTP reply. All of these are worth retrying.
#[derive(Debug)]
pub enum TransportError {
    /// The total timeout (`RESPONSES_TIMEOUT_MS`) elapsed.
    Timeout,
    /// No connection (refused, DNS, connect timeout).
    Connect(String),
    /// The connection broke mid-request or mid-reply.
    Other(String),
}

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout => f.write_str("the provider did not answer within RESPONSES_TIMEOUT_MS"),
            Self::Connect(e) => write!(f, "cannot connect to the provider: {e}"),
            Self::Other(e) => write!(f, "the provider connection failed: {e}"),
        }
    }
}

pub struct ResponsesClient {
    http: reqwest::Client,
    url: String,
    auth: Option<HeaderValue>,
    key: Option<String>,
    timeout: Duration,
}

impl ResponsesClient {
    /// A client for `config`. The underlying connection pool is shared per connect
    /// timeout, so every job reuses warm connections.
    pub fn from_config(config: &Config) -> anyhow::Result<Self> {
        let key =
            config.provider.responses_api_key.as_ref().map(|k| k.expose_secret().to_string()).filter(|k| !k.is_empty());
        let auth = match &key {
            Some(k) => {
                let mut v = HeaderValue::from_str(&format!("Bearer {k}"))
                    .map_err(|_| anyhow::anyhow!("RESPONSES_API_KEY is not a valid header value"))?;
                v.set_sensitive(true);
                Some(v)
            }
            None => None,
        };
        Ok(Self {
            http: pooled_client(Duration::from_millis(config.provider.responses_connect_timeout_ms))?,
            url: format!("{}/v1/responses", config.provider.responses_base_url.trim_end_matches('/')),
            auth,
            key,
            timeout: Duration::from_millis(config.provider.responses_timeout_ms),
        })
    }

    /// One `POST /v1/responses`. Dropping the future aborts the request and closes
    /// its connection (that is how cancellation reaches the provider).
    pub async fn create(&self, body: &Value) -> Result<ProviderReply, TransportError> {
        let started = Instant::now();
        let outcome = self.send(body).await;
        let class = match &outcome {
            Ok(reply) if reply.status == 429 => "429",
            Ok(reply) => crate::metrics::status_class(reply.status),
            Err(TransportError::Timeout) => "timeout",
            Err(TransportError::Connect(_)) => "connect_error",
            Err(TransportError::Other(_)) => "transport_error",
        };
        metrics::counter!(PROVIDER_REQUESTS, "status_class" => class).increment(1);
        metrics::histogram!(PROVIDER_LATENCY, "status_class" => class).record(started.elapsed().as_secs_f64());
        outcome
    }

    async fn send(&self, body: &Value) -> Result<ProviderReply, TransportError> {
        let mut request = self.http.post(&self.url).timeout(self.timeout).json(body);
        if let Some(auth) = &self.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        let mut response = request.send().await.map_err(|e| self.transport(&e))?;
        let status = response.status().as_u16();
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let retry = RetryHeaders {
            retry_after_ms: header("retry-after-ms"),
            retry_after: header("retry-after"),
            x_should_retry: header("x-should-retry"),
        };
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport(&e))? {
            if bytes.len() + chunk.len() > MAX_REPLY_BYTES {
                let body = Err(format!("the reply body exceeds {MAX_REPLY_BYTES} bytes"));
                return Ok(ProviderReply { status, retry, body });
            }
            bytes.extend_from_slice(&chunk);
        }
        let body = serde_json::from_slice(&bytes)
            .map(|mut body| {
                self.scrub_value(&mut body);
                body
            })
            .map_err(|e| {
                let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_PROVIDER_TEXT)]).into_owned();
                self.scrub(&format!("the reply body is not JSON ({e}): {shown:?}"))
            });
        Ok(ProviderReply { status, retry, body })
    }

    fn transport(&self, e: &reqwest::Error) -> TransportError {
        if e.is_timeout() {
            TransportError::Timeout
        } else if e.is_connect() {
            TransportError::Connect(self.scrub(&format!("{e:#}")))
        } else {
            TransportError::Other(self.scrub(&format!("{e:#}")))
        }
    }

    /// A reply body as every later reader sees it (the decoded result, the appended reply
    /// and its metadata all come from it): the API key replaced in every string and key,
    /// whatever the status, and NUL (which PostgreSQL cannot store) replaced by U+FFFD, so
    /// both engines store the same text.
    pub fn scrub_value(&self, value: &mut Value) {
        let clean = |text: &str| {
            let text = match &self.key {
                Some(k) if !k.is_empty() => text.replace(k.as_str(), "[redacted]"),
                _ => text.to_string(),
            };
            text.replace('\0', "\u{fffd}")
        };
        match value {
            Value::String(s) => *s = clean(s),
            Value::Array(items) => items.iter_mut().for_each(|item| self.scrub_value(item)),
            Value::Object(fields) => {
                let taken = std::mem::take(fields);
                for (key, mut item) in taken {
                    self.scrub_value(&mut item);
                    fields.insert(clean(&key), item);
                }
            }
            _ => {}
        }
    }

    /// `text` with the API key replaced and cut to a bounded length: every piece of
    /// provider-derived text passes through here before it is logged or stored.
    pub fn scrub(&self, text: &str) -> String {
        let text = match &self.key {
            Some(k) => text.replace(k.as_str(), "[redacted]"),
            None => text.to_string(),
        };
        if text.chars().count() <= MAX_PROVIDER_TEXT {
            return text;
        }
        let mut cut: String = text.chars().take(MAX_PROVIDER_TEXT).collect();
        cut.push('…');
        cut
    }
}

/// One `reqwest::Client` (and so one connection pool) per connect timeout; the total
/// timeout is set per request.
fn pooled_client(connect_timeout: Duration) -> anyhow::Result<reqwest::Client> {
    static CLIENTS: OnceLock<Mutex<HashMap<Duration, reqwest::Client>>> = OnceLock::new();
    let mut clients = CLIENTS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if let Some(client) = clients.get(&connect_timeout) {
        return Ok(client.clone());
    }
    let client = reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .user_agent(concat!("context-ops/", env!("CARGO_PKG_VERSION")))
        .build()
        .context("cannot build the Responses HTTP client")?;
    clients.insert(connect_timeout, client.clone());
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(key: Option<&str>) -> ResponsesClient {
        let mut config = Config::defaults();
        config.provider.responses_api_key = key.map(|k| k.to_string().into());
        config.provider.responses_base_url = "http://127.0.0.1:9/".into();
        ResponsesClient::from_config(&config).unwrap()
    }

    #[test]
    fn the_url_has_one_slash_and_the_key_is_a_sensitive_header() {
        let c = client(Some("sk-secret"));
        assert_eq!(c.url, "http://127.0.0.1:9/v1/responses");
        let auth = c.auth.as_ref().unwrap();
        assert!(auth.is_sensitive());
        assert!(!format!("{auth:?}").contains("sk-secret"));
        assert!(client(None).auth.is_none());
        assert!(client(Some("")).auth.is_none(), "an empty key sends no header");
    }

    #[test]
    fn scrub_removes_the_key_and_bounds_the_length() {
        let c = client(Some("sk-secret"));
        assert_eq!(c.scrub("bad key sk-secret!"), "bad key [redacted]!");
        let long = "é".repeat(1000);
        let cut = c.scrub(&long);
        assert_eq!(cut.chars().count(), MAX_PROVIDER_TEXT + 1);
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn scrub_value_cleans_every_string_and_key() {
        let c = client(Some("sk-secret"));
        let mut v = serde_json::json!({"output": [{"text": "your key is sk-secret\u{0}"}], "sk-secret": 1, "n": 2});
        c.scrub_value(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"output": [{"text": "your key is [redacted]\u{fffd}"}], "[redacted]": 1, "n": 2})
        );
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error() {
        let c = client(Some("sk-secret"));
        match c.create(&serde_json::json!({})).await {
            Err(TransportError::Connect(m)) => assert!(!m.contains("sk-secret")),
            other => panic!("expected a connect error, got {other:?}"),
        }
    }
}
