//! Typed configuration, loaded once from flags and environment variables. Every knob has a
//! documented default (see README "Configuration"); invalid values fail at startup.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "context-ops",
    version,
    about = "Durable conversation context and pollable operations for agent runtimes"
)]
pub struct Cli {
    #[command(flatten)]
    pub config: Config,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// API and workers in one process (the default deployment).
    Serve,
    /// HTTP API only.
    Api,
    /// Queue workers, dispatcher and maintenance loops only.
    Worker,
    /// Apply database migrations and exit.
    Migrate,
}

impl Command {
    pub fn runs_api(self) -> bool {
        matches!(self, Command::Serve | Command::Api)
    }
    pub fn runs_workers(self) -> bool {
        matches!(self, Command::Serve | Command::Worker)
    }
}

// No `Debug`: the struct holds secrets, and a `{config:?}` must not compile.
#[derive(Clone, Args)]
pub struct Config {
    /// Address the HTTP API listens on.
    #[arg(long, env = "CONTEXT_OPS_BIND", default_value = "127.0.0.1:5120", global = true)]
    pub bind: SocketAddr,

    /// Optional separate, unauthenticated listener for `/metrics`. When unset, `/metrics`
    /// is served on the API listener behind the same credentials as the API.
    #[arg(long, env = "CONTEXT_OPS_METRICS_BIND", global = true)]
    pub metrics_bind: Option<SocketAddr>,

    /// `postgres://…` or `sqlite:…` (file created if missing).
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite:context-ops.sqlite", global = true)]
    pub database_url: String,

    /// Maximum database connections per process.
    #[arg(long, env = "CONTEXT_OPS_DB_MAX_CONNECTIONS", default_value_t = 16, global = true)]
    pub db_max_connections: u32,

    /// Redis for the production queue. Unset: the embedded SQLite queue.
    #[arg(long, env = "REDIS_URL", global = true)]
    pub redis_url: Option<String>,

    /// Prefix of every queue name (lets several deployments or tests share one Redis).
    #[arg(long, env = "CONTEXT_OPS_QUEUE_NAMESPACE", default_value = "context-ops", global = true)]
    pub queue_namespace: String,

    /// Static bearer token. With neither this nor a JWT secret the service runs open.
    #[arg(long, env = "AGENT_CONTEXT_SERVICE_TOKEN", hide_env_values = true, global = true)]
    pub service_token: Option<String>,

    /// HS256 secret for gateway-issued JWTs (audience `agent-context-infra`).
    #[arg(long, env = "CONTEXT_OPS_JWT_SECRET", hide_env_values = true, global = true)]
    pub jwt_secret: Option<String>,

    /// JSON log lines instead of human-readable ones.
    #[arg(long, env = "CONTEXT_OPS_LOG_JSON", default_value_t = false, global = true)]
    pub log_json: bool,

    /// Operation lease, seconds: how long a silent worker keeps an operation before another
    /// worker takes it over.
    #[arg(long, env = "CONTEXT_OPS_LEASE_SECS", default_value_t = 15, global = true)]
    pub lease_secs: u64,

    /// How often an open long-poll re-reads its operation's version, milliseconds: the
    /// fallback for changes no notification announced (SQLite with separate processes, a
    /// PostgreSQL listener reconnecting).
    #[arg(long, env = "CONTEXT_OPS_WAIT_RECHECK_MS", default_value_t = 100, global = true)]
    pub wait_recheck_ms: u64,

    /// How often the dispatcher looks for queued-but-unpushed and lease-expired operations.
    #[arg(long, env = "CONTEXT_OPS_DISPATCH_INTERVAL_MS", default_value_t = 2000, global = true)]
    pub dispatch_interval_ms: u64,

    /// A queued operation pushed this long ago and still not started is pushed again (the
    /// push may have been lost, e.g. by a Redis restart without persistence).
    #[arg(long, env = "CONTEXT_OPS_REPUSH_AFTER_MS", default_value_t = 60_000, global = true)]
    pub repush_after_ms: u64,

    /// Attempts before a transiently failing operation fails with `retries_exhausted`.
    #[arg(long, env = "CONTEXT_OPS_MAX_ATTEMPTS", default_value_t = 5, global = true)]
    pub max_attempts: u32,

    /// Concurrent operations per kind per worker process.
    #[arg(long, env = "CONTEXT_OPS_WORKER_CONCURRENCY", default_value_t = 4, global = true)]
    pub worker_concurrency: usize,

    /// Rows per checkpointed batch in delete/retention/import/export/rebuild.
    #[arg(long, env = "CONTEXT_OPS_BATCH_SIZE", default_value_t = 5000, global = true)]
    pub batch_size: u32,

    /// Days terminal operations are kept before they are pruned.
    #[arg(long, env = "CONTEXT_OPS_OPERATION_RETENTION_DAYS", default_value_t = 7, global = true)]
    pub operation_retention_days: u32,

    /// Period of the retention sweep over all conversations, seconds (0 disables it).
    #[arg(long, env = "CONTEXT_OPS_RETENTION_SWEEP_SECS", default_value_t = 3600, global = true)]
    pub retention_sweep_secs: u64,

    /// Default policy of the sweep: maximum message age in days (0 = no age limit).
    #[arg(long, env = "CONTEXT_OPS_RETENTION_MAX_AGE_DAYS", default_value_t = 90, global = true)]
    pub retention_max_age_days: u32,

    /// Default policy of the sweep: maximum messages kept per conversation (0 = no limit).
    #[arg(long, env = "CONTEXT_OPS_RETENTION_MAX_MESSAGES", default_value_t = 100_000, global = true)]
    pub retention_max_messages: u32,

    /// Embedder for the vector projection: `hashing` (built in, deterministic, no network)
    /// or `openai` (an OpenAI-compatible `/v1/embeddings` endpoint).
    #[arg(long, env = "CONTEXT_OPS_EMBEDDER", default_value = "hashing", global = true)]
    pub embedder: String,

    /// Base URL of the embeddings endpoint (`openai` embedder).
    #[arg(long, env = "CONTEXT_OPS_EMBEDDINGS_BASE_URL", global = true)]
    pub embeddings_base_url: Option<String>,

    /// API key of the embeddings endpoint (never logged).
    #[arg(long, env = "CONTEXT_OPS_EMBEDDINGS_API_KEY", hide_env_values = true, global = true)]
    pub embeddings_api_key: Option<String>,

    /// Embedding model name (`openai` embedder).
    #[arg(long, env = "CONTEXT_OPS_EMBEDDINGS_MODEL", default_value = "text-embedding-3-small", global = true)]
    pub embeddings_model: String,

    /// Vector dimension (the hashing embedder's output size).
    #[arg(long, env = "CONTEXT_OPS_EMBEDDING_DIM", default_value_t = 256, global = true)]
    pub embedding_dim: usize,

    /// Period of the background projector, milliseconds (0 disables it).
    #[arg(long, env = "CONTEXT_OPS_PROJECTOR_INTERVAL_MS", default_value_t = 1000, global = true)]
    pub projector_interval_ms: u64,

    /// Bytes per stored artifact chunk.
    #[arg(long, env = "CONTEXT_OPS_ARTIFACT_CHUNK_BYTES", default_value_t = 1024 * 1024, global = true)]
    pub artifact_chunk_bytes: usize,

    /// Largest artifact `export-artifacts/get` returns whole; larger ones are downloaded in chunks.
    #[arg(long, env = "CONTEXT_OPS_ARTIFACT_INLINE_MAX_BYTES", default_value_t = 8 * 1024 * 1024, global = true)]
    pub artifact_inline_max_bytes: usize,

    /// Days artifacts are kept before they expire.
    #[arg(long, env = "CONTEXT_OPS_ARTIFACT_RETENTION_DAYS", default_value_t = 7, global = true)]
    pub artifact_retention_days: u32,

    /// Base URL of the Responses provider (`{base}/v1/responses`).
    #[arg(long, env = "RESPONSES_BASE_URL", default_value = "https://api.openai.com", global = true)]
    pub responses_base_url: String,

    /// API key of the Responses provider. Never logged, stored or echoed.
    #[arg(long, env = "RESPONSES_API_KEY", hide_env_values = true, global = true)]
    pub responses_api_key: Option<String>,

    /// Connect timeout of provider calls, milliseconds.
    #[arg(long, env = "RESPONSES_CONNECT_TIMEOUT_MS", default_value_t = 5_000, global = true)]
    pub responses_connect_timeout_ms: u64,

    /// Total timeout of one provider call, milliseconds.
    #[arg(long, env = "RESPONSES_TIMEOUT_MS", default_value_t = 600_000, global = true)]
    pub responses_timeout_ms: u64,

    /// Provider attempts per inference operation (first try included).
    #[arg(long, env = "RESPONSES_MAX_ATTEMPTS", default_value_t = 3, global = true)]
    pub responses_max_attempts: u32,

    /// Budget of conversation history loaded into an inference turn, bytes of text.
    #[arg(long, env = "CONTEXT_OPS_INFERENCE_HISTORY_BYTES", default_value_t = 256 * 1024, global = true)]
    pub inference_history_bytes: usize,
}

impl Config {
    /// Defaults for everything, as if no flag or variable were set (tests build on this).
    pub fn defaults() -> Self {
        Cli::parse_from(["context-ops", "serve"]).config
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.lease_secs >= 2, "CONTEXT_OPS_LEASE_SECS must be at least 2");
        anyhow::ensure!(self.max_attempts >= 1, "CONTEXT_OPS_MAX_ATTEMPTS must be at least 1");
        anyhow::ensure!(self.batch_size >= 1, "CONTEXT_OPS_BATCH_SIZE must be at least 1");
        anyhow::ensure!(self.wait_recheck_ms >= 1, "CONTEXT_OPS_WAIT_RECHECK_MS must be at least 1");
        anyhow::ensure!(self.worker_concurrency >= 1, "CONTEXT_OPS_WORKER_CONCURRENCY must be at least 1");
        anyhow::ensure!(self.db_max_connections >= 2, "CONTEXT_OPS_DB_MAX_CONNECTIONS must be at least 2");
        if let Some(secret) = &self.jwt_secret {
            anyhow::ensure!(secret.len() >= 16, "CONTEXT_OPS_JWT_SECRET must be at least 16 bytes");
        }
        if let Some(token) = &self.service_token {
            anyhow::ensure!(!token.trim().is_empty(), "AGENT_CONTEXT_SERVICE_TOKEN must not be empty");
        }
        anyhow::ensure!(
            matches!(self.embedder.as_str(), "hashing" | "openai"),
            "CONTEXT_OPS_EMBEDDER must be `hashing` or `openai`"
        );
        if self.embedder == "openai" {
            anyhow::ensure!(
                self.embeddings_base_url.is_some(),
                "CONTEXT_OPS_EMBEDDINGS_BASE_URL is required with the openai embedder"
            );
        }
        anyhow::ensure!((8..=4096).contains(&self.embedding_dim), "CONTEXT_OPS_EMBEDDING_DIM must be in 8..=4096");
        anyhow::ensure!(self.artifact_chunk_bytes >= 4096, "CONTEXT_OPS_ARTIFACT_CHUNK_BYTES must be at least 4096");
        anyhow::ensure!(self.responses_max_attempts >= 1, "RESPONSES_MAX_ATTEMPTS must be at least 1");
        anyhow::ensure!(
            self.responses_base_url.starts_with("http://") || self.responses_base_url.starts_with("https://"),
            "RESPONSES_BASE_URL must be an http(s) URL"
        );
        if let Some(url) = &self.redis_url {
            anyhow::ensure!(
                url.starts_with("redis://") || url.starts_with("rediss://"),
                "REDIS_URL must start with redis:// or rediss://"
            );
        }
        Ok(())
    }

    pub fn lease(&self) -> Duration {
        Duration::from_secs(self.lease_secs)
    }
}
