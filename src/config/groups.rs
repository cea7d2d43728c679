//! The configuration groups, one per concern. Every knob has a flag and an environment
//! variable (flags win) and a documented default; secrets are [`SecretString`]s, which
//! cannot be printed by accident.

use std::net::SocketAddr;

use clap::{Args, ValueEnum};
use secrecy::SecretString;

fn secret(s: &str) -> Result<SecretString, std::convert::Infallible> {
    Ok(SecretString::from(s.to_string()))
}

#[derive(Clone, Args)]
#[command(next_help_heading = "Logging")]
pub struct LogConfig {
    /// JSON log lines instead of human-readable ones.
    #[arg(long, env = "CONTEXT_OPS_LOG_JSON", default_value_t = false)]
    pub log_json: bool,
}

#[derive(Clone, Args)]
#[command(next_help_heading = "HTTP API")]
pub struct HttpConfig {
    /// Address the HTTP API listens on.
    #[arg(long, env = "CONTEXT_OPS_BIND", default_value = "127.0.0.1:5120")]
    pub bind: SocketAddr,

    /// How often an open long-poll re-reads its operation's version, milliseconds: the
    /// fallback for changes no notification announced (SQLite with separate processes, a
    /// PostgreSQL listener reconnecting).
    #[arg(long, env = "CONTEXT_OPS_WAIT_RECHECK_MS", default_value_t = 100)]
    pub wait_recheck_ms: u64,

    /// Event streams (`…/operations/events`, `…/operations/{id}/events`) this process keeps
    /// open at once; one more is answered 503 with `Retry-After`.
    #[arg(long, env = "CONTEXT_OPS_MAX_EVENT_STREAMS", default_value_t = 1000)]
    pub max_event_streams: usize,

    /// How often an idle event stream sends a comment (`: heartbeat`), milliseconds, so
    /// proxies keep it open and clients notice a dead connection.
    #[arg(long, env = "CONTEXT_OPS_EVENTS_HEARTBEAT_MS", default_value_t = 15_000)]
    pub events_heartbeat_ms: u64,
}

#[derive(Clone, Args)]
#[command(next_help_heading = "Metrics")]
pub struct MetricsConfig {
    /// Optional separate, unauthenticated listener for `/metrics`. When unset, `/metrics`
    /// is served on the API listener behind the same credentials as the API.
    #[arg(long, env = "CONTEXT_OPS_METRICS_BIND")]
    pub metrics_bind: Option<SocketAddr>,
}

#[derive(Clone, Args)]
#[command(next_help_heading = "Database")]
pub struct DatabaseConfig {
    /// `postgres://…` or `sqlite:…` (file created if missing).
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite:context-ops.sqlite")]
    pub database_url: String,

    /// Maximum database connections per process.
    #[arg(long, env = "CONTEXT_OPS_DB_MAX_CONNECTIONS", default_value_t = 16)]
    pub db_max_connections: u32,

    /// How long a request waits for a PostgreSQL connection before answering 503 (with the
    /// database down, how fast every request fails).
    #[arg(long, env = "CONTEXT_OPS_DB_ACQUIRE_TIMEOUT_MS", default_value_t = 800)]
    pub db_acquire_timeout_ms: u64,
}

#[derive(Clone, Args)]
#[command(next_help_heading = "Queue")]
pub struct QueueConfig {
    /// Redis for the production queue. Unset: the embedded SQLite queue.
    #[arg(long, env = "REDIS_URL")]
    pub redis_url: Option<String>,

    /// PEM certificates to trust for a `rediss://` Redis (a private CA) instead of the
    /// public roots.
    #[arg(long, env = "CONTEXT_OPS_REDIS_CA_FILE")]
    pub redis_ca_file: Option<std::path::PathBuf>,

    /// Prefix of every queue name (lets several deployments or tests share one Redis).
    #[arg(long, env = "CONTEXT_OPS_QUEUE_NAMESPACE", default_value = "context-ops")]
    pub queue_namespace: String,

    /// How often the dispatcher looks for queued-but-unpushed and lease-expired operations.
    #[arg(long, env = "CONTEXT_OPS_DISPATCH_INTERVAL_MS", default_value_t = 1000)]
    pub dispatch_interval_ms: u64,

    /// A queued operation pushed this long ago and still not started is pushed again (the
    /// push may have been lost, e.g. by a Redis restart without persistence). Work a
    /// concurrency limit holds is woken instead (`store::operations::dispatch::Repush`).
    #[arg(long, env = "CONTEXT_OPS_REPUSH_AFTER_MS", default_value_t = 60_000)]
    pub repush_after_ms: u64,
}

impl QueueConfig {
    /// The Redis client every connection of the process is made with (`REDIS_URL`, its TCP
    /// options, `CONTEXT_OPS_REDIS_CA_FILE`'s certificates); `None` without Redis.
    pub fn redis_client(&self) -> anyhow::Result<Option<redis::Client>> {
        let Some(url) = &self.redis_url else { return Ok(None) };
        let ca = match &self.redis_ca_file {
            Some(path) => Some(read_ca_file(path)?),
            None => None,
        };
        crate::tcp::redis_client(url, ca)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("invalid REDIS_URL {}: {e}", crate::store::engine::redact_url(url)))
    }
}

/// `CONTEXT_OPS_REDIS_CA_FILE`'s bytes, refused unless it holds PEM certificates and only
/// readable ones (an empty or DER file would otherwise trust nothing, and fail later as
/// the server's certificate).
fn read_ca_file(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let shown = path.display();
    let pem = std::fs::read(path).map_err(|e| anyhow::anyhow!("cannot read CONTEXT_OPS_REDIS_CA_FILE {shown}: {e}"))?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("CONTEXT_OPS_REDIS_CA_FILE {shown} is not PEM certificates: {e}"))?;
    anyhow::ensure!(!certificates.is_empty(), "CONTEXT_OPS_REDIS_CA_FILE {shown} holds no PEM certificate");
    Ok(pem)
}

#[derive(Clone, Args)]
#[command(next_help_heading = "Authentication")]
pub struct AuthConfig {
    /// Static bearer token. With neither this nor a JWT secret the service runs open.
    #[arg(long, env = "AGENT_CONTEXT_SERVICE_TOKEN", hide_env_values = true, value_parser = secret)]
    pub service_token: Option<SecretString>,

    /// HS256 secret for gateway-issued JWTs (audience `agent-context-infra`; the claim
    /// `"admin": true` grants admin powers).
    #[arg(long, env = "CONTEXT_OPS_JWT_SECRET", hide_env_values = true, value_parser = secret)]
    pub jwt_secret: Option<SecretString>,

    /// Bearer token with admin powers (pause/resume, bulk actions, every tenant's
    /// operations), acting as tenant `default/default`.
    #[arg(long, env = "CONTEXT_OPS_ADMIN_TOKEN", hide_env_values = true, value_parser = secret)]
    pub admin_token: Option<SecretString>,

    /// Run in open mode (no credentials) although the API listens on a non-loopback
    /// address. Without it such a start is refused: open mode answers anyone who can reach
    /// the port as the default tenant.
    #[arg(long, env = "CONTEXT_OPS_ALLOW_OPEN", default_value_t = false)]
    pub allow_open: bool,
}

#[derive(Clone, Args)]
#[command(next_help_heading = "Workers")]
pub struct WorkerConfig {
    /// Operation lease, seconds: how long a silent worker keeps an operation before another
    /// worker takes it over.
    #[arg(long, env = "CONTEXT_OPS_LEASE_SECS", default_value_t = 15)]
    pub lease_secs: u64,

    /// Attempts before a transiently failing operation fails with `retries_exhausted`.
    #[arg(long, env = "CONTEXT_OPS_MAX_ATTEMPTS", default_value_t = 5)]
    pub max_attempts: u32,

    /// Concurrent operations per kind per worker process.
    #[arg(long, env = "CONTEXT_OPS_WORKER_CONCURRENCY", default_value_t = 4)]
    pub worker_concurrency: usize,

    /// Rows per checkpointed batch in import/export/rebuild; delete and retention start at it
    /// (their smallest batch; see CONTEXT_OPS_BATCH_TARGET_MS).
    #[arg(long, env = "CONTEXT_OPS_BATCH_SIZE", default_value_t = 5000)]
    pub batch_size: u32,

    /// Target time per delete/retention batch, milliseconds: their batches start at the
    /// batch size and double while a batch takes under half of this (up to 64 times the
    /// batch size). 0 keeps every batch at the batch size. Default: 50 on PostgreSQL, 0 on
    /// SQLite (see `JobCtx::batch_pacer`).
    #[arg(long, env = "CONTEXT_OPS_BATCH_TARGET_MS")]
    pub batch_target_ms: Option<u64>,

    /// Days terminal operations are kept before they are pruned.
    #[arg(long, env = "CONTEXT_OPS_OPERATION_RETENTION_DAYS", default_value_t = 7)]
    pub operation_retention_days: u32,
}

#[derive(Clone, Args)]
#[command(next_help_heading = "Retention sweep")]
pub struct RetentionConfig {
    /// Period of the retention sweep over all conversations, seconds (0 disables it). The
    /// sweep is off unless a policy below is set.
    #[arg(long, env = "CONTEXT_OPS_RETENTION_SWEEP_SECS", default_value_t = 3600)]
    pub retention_sweep_secs: u64,

    /// Sweep policy: maximum message age in days (0 = no age limit). Unset by default.
    #[arg(long, env = "CONTEXT_OPS_RETENTION_MAX_AGE_DAYS", default_value_t = 0)]
    pub retention_max_age_days: u32,

    /// Sweep policy: maximum messages kept per conversation (0 = no limit). Unset by default.
    #[arg(long, env = "CONTEXT_OPS_RETENTION_MAX_MESSAGES", default_value_t = 0)]
    pub retention_max_messages: u32,
}

impl RetentionConfig {
    /// The sweep's policy, when the sweep is on: a period and at least one limit.
    pub fn sweep_policy(&self) -> Option<context_jobs::contract::RetentionPolicy> {
        let policy = context_jobs::contract::RetentionPolicy {
            max_age_days: (self.retention_max_age_days > 0).then_some(self.retention_max_age_days),
            max_messages: (self.retention_max_messages > 0).then_some(self.retention_max_messages),
        };
        let limited = policy.max_age_days.is_some() || policy.max_messages.is_some();
        (self.retention_sweep_secs > 0 && limited).then_some(policy)
    }
}

/// Which embedder the vector projection uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EmbedderKind {
    /// Built in, deterministic, no network.
    Hashing,
    /// An OpenAI-compatible `/v1/embeddings` endpoint.
    Openai,
}

#[derive(Clone, Args)]
#[command(next_help_heading = "Embeddings")]
pub struct EmbedderConfig {
    /// Embedder for the vector projection.
    #[arg(long, env = "CONTEXT_OPS_EMBEDDER", value_enum, default_value = "hashing")]
    pub embedder: EmbedderKind,

    /// Base URL of the embeddings endpoint (`openai` embedder).
    #[arg(long, env = "CONTEXT_OPS_EMBEDDINGS_BASE_URL")]
    pub embeddings_base_url: Option<String>,

    /// API key of the embeddings endpoint (never logged).
    #[arg(long, env = "CONTEXT_OPS_EMBEDDINGS_API_KEY", hide_env_values = true, value_parser = secret)]
    pub embeddings_api_key: Option<SecretString>,

    /// Embedding model name (`openai` embedder).
    #[arg(long, env = "CONTEXT_OPS_EMBEDDINGS_MODEL", default_value = "text-embedding-3-small")]
    pub embeddings_model: String,

    /// Vector dimension (the hashing embedder's output size).
    #[arg(long, env = "CONTEXT_OPS_EMBEDDING_DIM", default_value_t = 256)]
    pub embedding_dim: usize,

    /// Period of the background projector, milliseconds (0 disables it).
    #[arg(long, env = "CONTEXT_OPS_PROJECTOR_INTERVAL_MS", default_value_t = 1000)]
    pub projector_interval_ms: u64,

    /// Tenants whose recall indexes an API process loads at start, most recently
    /// projected first, before it reports ready (0: load each on its first recall).
    #[arg(long, env = "CONTEXT_OPS_RECALL_WARM_TENANTS", default_value_t = 8)]
    pub recall_warm_tenants: usize,
}

#[derive(Clone, Args)]
#[command(next_help_heading = "Artifacts")]
pub struct ArtifactConfig {
    /// Bytes per stored artifact chunk.
    #[arg(long, env = "CONTEXT_OPS_ARTIFACT_CHUNK_BYTES", default_value_t = 1024 * 1024)]
    pub artifact_chunk_bytes: usize,

    /// Largest artifact `export-artifacts/get` returns whole; larger ones are downloaded in chunks.
    #[arg(long, env = "CONTEXT_OPS_ARTIFACT_INLINE_MAX_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub artifact_inline_max_bytes: usize,

    /// Days artifacts are kept before they expire.
    #[arg(long, env = "CONTEXT_OPS_ARTIFACT_RETENTION_DAYS", default_value_t = 7)]
    pub artifact_retention_days: u32,

    /// PostgreSQL: most import batches written (uncommitted, in one transaction) while the
    /// artifact is still being validated. Bounds the locks held and the work a crash loses
    /// then; at least 1.
    #[arg(long, env = "CONTEXT_OPS_IMPORT_VALIDATING_BATCHES", default_value_t = 64)]
    pub import_validating_batches: u32,
}

#[derive(Clone, Args)]
#[command(next_help_heading = "Responses provider (inference)")]
pub struct ProviderConfig {
    /// Base URL of the Responses provider (`{base}/v1/responses`).
    #[arg(long, env = "RESPONSES_BASE_URL", default_value = "https://api.openai.com")]
    pub responses_base_url: String,

    /// API key of the Responses provider. Never logged, stored or echoed.
    #[arg(long, env = "RESPONSES_API_KEY", hide_env_values = true, value_parser = secret)]
    pub responses_api_key: Option<SecretString>,

    /// Connect timeout of provider calls, milliseconds.
    #[arg(long, env = "RESPONSES_CONNECT_TIMEOUT_MS", default_value_t = 5_000)]
    pub responses_connect_timeout_ms: u64,

    /// Total timeout of one provider call, milliseconds.
    #[arg(long, env = "RESPONSES_TIMEOUT_MS", default_value_t = 600_000)]
    pub responses_timeout_ms: u64,

    /// Provider attempts per inference operation (first try included).
    #[arg(long, env = "RESPONSES_MAX_ATTEMPTS", default_value_t = 3)]
    pub responses_max_attempts: u32,

    /// Budget of conversation history loaded into an inference turn, bytes of text.
    #[arg(long, env = "CONTEXT_OPS_INFERENCE_HISTORY_BYTES", default_value_t = 256 * 1024)]
    pub inference_history_bytes: usize,
}

#[derive(Clone, Args)]
#[command(next_help_heading = "Scheduling")]
pub struct SchedulerConfig {
    /// Running operations per kind, all worker processes together: `export=2,*=16`
    /// (unset: unlimited).
    #[arg(long, env = "CONTEXT_OPS_MAX_RUNNING", default_value = "")]
    pub max_running: String,

    /// Running operations per tenant per kind, all worker processes together:
    /// `inference=4,*=8` (unset: unlimited).
    #[arg(long, env = "CONTEXT_OPS_MAX_RUNNING_PER_TENANT", default_value = "")]
    pub max_running_per_tenant: String,

    /// Fair-share weights of tenants: `acme/prod=3,beta/dev=2` (others weigh 1).
    #[arg(long, env = "CONTEXT_OPS_TENANT_WEIGHTS", default_value = "")]
    pub tenant_weights: String,

    /// Default timeout per kind, milliseconds, when a submission gives no deadline:
    /// `inference=600000` (unset: none).
    #[arg(long, env = "CONTEXT_OPS_DEFAULT_TIMEOUT_MS", default_value = "")]
    pub default_timeout_ms: String,

    /// Provider rate limits shared by every worker process: rules separated by `;`, e.g.
    /// `model=gpt-4o rpm=500 tpm=200000 rpd=10000; model=* tenant=acme/prod rpm=20`.
    #[arg(long, env = "CONTEXT_OPS_RATE_LIMITS", default_value = "")]
    pub rate_limits: String,
}
