//! The HTTP client of the CLI: the service's base URL, the bearer credential, JSON in and
//! out over the contract's DTOs, and every failure as a [`CliError`] (an `ApiError` body
//! read as the contract's `ApiError`).

use std::time::Duration;

use reqwest::{Method, RequestBuilder, Response, StatusCode};
use secrecy::{ExposeSecret as _, SecretString};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::exit::{CliError, CliResult};
use context_jobs::contract::ApiError;

/// Connecting may take this long; a request's own time limit is per call.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A silent connection is dead after this (event streams send a heartbeat every 15 s).
const READ_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<SecretString>,
}

impl Client {
    pub fn new(base: &str, token: Option<SecretString>) -> CliResult<Self> {
        let base = base.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(CliError::Usage(format!("--url must be an http:// or https:// URL, not {base:?}")));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .user_agent(concat!("context-ops-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| CliError::Usage(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self { http, base, token })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request to `path` with the credential.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self.http.request(method, self.url(path));
        match &self.token {
            Some(token) => request.bearer_auth(token.expose_secret()),
            None => request,
        }
    }

    /// Send, and turn a transport failure into `Unreachable`.
    pub async fn send(&self, request: RequestBuilder) -> CliResult<Response> {
        request.send().await.map_err(|e| self.unreachable(&e))
    }

    pub fn unreachable(&self, e: &reqwest::Error) -> CliError {
        let mut reason = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            let text = s.to_string();
            if !reason.contains(&text) {
                reason = format!("{reason}: {text}");
            }
            source = s.source();
        }
        CliError::Unreachable { url: self.base.clone(), reason }
    }

    /// `Ok(response)` for a 2xx; the `ApiError` otherwise.
    pub async fn check(&self, response: Response) -> CliResult<Response> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let text = response.text().await.map_err(|e| self.unreachable(&e))?;
        let message = match serde_json::from_str::<ApiError>(&text) {
            Ok(error) => error.message,
            Err(_) if text.trim().is_empty() => status.canonical_reason().unwrap_or("no reason given").to_string(),
            Err(_) => text.chars().take(300).collect(),
        };
        Err(CliError::Api { status: status.as_u16(), message })
    }

    /// Decode a 2xx body as `T`.
    pub async fn decode<T: DeserializeOwned>(&self, response: Response) -> CliResult<T> {
        let response = self.check(response).await?;
        let bytes = response.bytes().await.map_err(|e| self.unreachable(&e))?;
        serde_json::from_slice(&bytes).map_err(|e| CliError::Api {
            status: 200,
            message: format!("an answer this client does not understand ({e})"),
        })
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> CliResult<T> {
        let response = self.send(self.request(Method::GET, path)).await?;
        self.decode(response).await
    }

    pub async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(&self, path: &str, body: &B) -> CliResult<T> {
        let response = self.send(self.request(Method::POST, path).json(body)).await?;
        self.decode(response).await
    }

    /// A request whose answer has no body worth reading (`204`).
    pub async fn no_content(&self, request: RequestBuilder) -> CliResult<StatusCode> {
        let response = self.send(request).await?;
        Ok(self.check(response).await?.status())
    }
}
