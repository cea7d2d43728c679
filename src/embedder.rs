//! The `Embedder` of the vector projection, chosen by configuration: the built-in hashing
//! embedder (deterministic, no model, no network — the default) or an OpenAI-compatible
//! `/v1/embeddings` endpoint. Wire shapes and decoding are `context_jobs::embed`'s; this
//! file only makes the HTTP call and classifies its failures.

use std::time::Duration;

use secrecy::{ExposeSecret as _, SecretString};

use crate::config::{Config, EmbedderKind};
use context_jobs::embed::{
    HASHING_MODEL, MAX_INPUT_BYTES, MAX_REQUEST_BYTES, decode_embeddings, embeddings_request, hashing_embed,
    request_ranges, truncate_input,
};

/// Inputs per `/v1/embeddings` request.
const REMOTE_BATCH: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// Worth retrying: unreachable, timed out, 429 or 5xx.
    #[error("embeddings provider unavailable: {0}")]
    Transient(String),
    /// Will not get better by retrying: a 4xx, or a reply that does not decode.
    #[error("embeddings provider error: {0}")]
    Permanent(String),
}

pub enum Embedder {
    Hashing { dim: usize, model: String },
    OpenAi { http: reqwest::Client, url: String, api_key: Option<SecretString>, model: String, dim: usize },
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the API key.
        write!(f, "Embedder({}, dim {})", self.model(), self.dim())
    }
}

/// `{base}/v1/embeddings`, accepting a base that already ends in `/v1`.
pub fn embeddings_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.ends_with("/v1") { format!("{base}/embeddings") } else { format!("{base}/v1/embeddings") }
}

impl Embedder {
    pub fn hashing(dim: usize) -> Self {
        Embedder::Hashing { dim, model: format!("{HASHING_MODEL}:{dim}") }
    }

    pub fn from_config(config: &Config) -> anyhow::Result<Self> {
        match config.embedder.embedder {
            EmbedderKind::Openai => {
                let base = config.embedder.embeddings_base_url.as_deref().unwrap_or("https://api.openai.com");
                let http = reqwest::Client::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .timeout(Duration::from_secs(60))
                    .build()?;
                Ok(Embedder::OpenAi {
                    http,
                    url: embeddings_url(base),
                    api_key: config.embedder.embeddings_api_key.clone(),
                    model: config.embedder.embeddings_model.clone(),
                    dim: config.embedder.embedding_dim,
                })
            }
            EmbedderKind::Hashing => Ok(Self::hashing(config.embedder.embedding_dim)),
        }
    }

    /// The name stored with every vector; vectors of another model are not used.
    pub fn model(&self) -> &str {
        match self {
            Embedder::Hashing { model, .. } | Embedder::OpenAi { model, .. } => model,
        }
    }

    pub fn dim(&self) -> usize {
        match self {
            Embedder::Hashing { dim, .. } | Embedder::OpenAi { dim, .. } => *dim,
        }
    }

    /// One L2-normalised vector of `dim()` values per text, in order.
    pub async fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        match self {
            // Large batches are CPU work: keep them off the async workers.
            Embedder::Hashing { dim, .. } if texts.len() > 64 => {
                let (owned, dim): (Vec<String>, usize) = (texts.iter().map(|t| t.to_string()).collect(), *dim);
                tokio::task::spawn_blocking(move || owned.iter().map(|t| hashing_embed(t, dim)).collect())
                    .await
                    .map_err(|e| EmbedError::Permanent(format!("embedding task failed: {e}")))
            }
            Embedder::Hashing { dim, .. } => Ok(texts.iter().map(|t| hashing_embed(t, *dim)).collect()),
            Embedder::OpenAi { http, url, api_key, model, dim } => {
                // Within the model's limits: each input, and each request's inputs together.
                let inputs: Vec<&str> = texts.iter().map(|t| truncate_input(t, MAX_INPUT_BYTES)).collect();
                let lens: Vec<usize> = inputs.iter().map(|t| t.len()).collect();
                let mut out = Vec::with_capacity(texts.len());
                for range in request_ranges(&lens, REMOTE_BATCH, MAX_REQUEST_BYTES) {
                    let key = api_key.as_ref().map(|k| k.expose_secret());
                    out.extend(remote(http, url, key, model, *dim, &inputs[range]).await?);
                }
                Ok(out)
            }
        }
    }
}

async fn remote(
    http: &reqwest::Client,
    url: &str,
    api_key: Option<&str>,
    model: &str,
    dim: usize,
    texts: &[&str],
) -> Result<Vec<Vec<f32>>, EmbedError> {
    // An empty input is rejected by OpenAI; a single space embeds as "no content".
    let inputs: Vec<&str> = texts.iter().map(|t| if t.trim().is_empty() { " " } else { *t }).collect();
    let mut request = http.post(url).json(&embeddings_request(model, &inputs, dim));
    if let Some(key) = api_key {
        request = request.bearer_auth(key);
    }
    let response =
        request.send().await.map_err(|e| EmbedError::Transient(format!("request failed: {}", e.without_url())))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| EmbedError::Transient(format!("reading the reply failed: {}", e.without_url())))?;
    if status.as_u16() == 429 || status.is_server_error() {
        return Err(EmbedError::Transient(format!("HTTP {status}")));
    }
    if !status.is_success() {
        return Err(EmbedError::Permanent(format!("HTTP {status}")));
    }
    decode_embeddings(&body, inputs.len(), dim).map_err(|e| EmbedError::Permanent(e.to_string()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn urls() {
        assert_eq!(super::embeddings_url("http://h:1/"), "http://h:1/v1/embeddings");
        assert_eq!(super::embeddings_url("http://h:1/v1"), "http://h:1/v1/embeddings");
    }
}
