//! Typed configuration, loaded once from flags and environment variables, grouped by
//! concern ([`groups`]). Each subcommand takes (and `--help` shows) only the groups it
//! uses; the rest keep their defaults. Invalid values stop startup with one line.

pub mod cli;
pub mod groups;

use std::time::Duration;

use clap::{Args, FromArgMatches, Parser, Subcommand};
use secrecy::ExposeSecret as _;

pub use groups::*;

use context_jobs::operation::limits::{PerKind, parse_weights};
use context_jobs::operation::rate_limit::{RateRule, parse_rules};

/// [`SchedulerConfig`], parsed.
#[derive(Debug, Clone, Default)]
pub struct Scheduling {
    pub max_running: PerKind,
    pub max_running_per_tenant: PerKind,
    pub weights: Vec<(String, u32)>,
    pub default_timeout_ms: PerKind,
    pub rate_limits: Vec<RateRule>,
}

#[derive(Parser)]
#[command(
    name = "context-ops",
    version,
    about = "Durable conversation context and pollable operations for agent runtimes"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// API and workers in one process (the default deployment).
    Serve(Box<ServeArgs>),
    /// HTTP API only.
    Api(Box<ApiArgs>),
    /// Queue workers, dispatcher and maintenance loops only.
    Worker(Box<WorkerArgs>),
    /// Apply database migrations and exit.
    Migrate(MigrateArgs),
    /// Ask a running process whether it is ready (`/health/ready`): exit 0 if so, 1 if not.
    /// For container health checks (the image has no curl).
    Health(HealthArgs),
    /// Print the OpenAPI 3.1 document of the HTTP API (what `GET /openapi.json` serves):
    /// `context-ops openapi > docs/openapi.json`.
    Openapi,
    /// The client: submit, follow, list, cancel, retry and forget operations; download and
    /// upload artifacts; append and read messages — against a running service.
    Op(Box<crate::cli::args::OpArgs>),
}

/// What a started service runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// API and workers.
    Serve,
    /// HTTP API only.
    Api,
    /// Workers, dispatcher and maintenance loops only.
    Worker,
}

impl Role {
    pub fn runs_api(self) -> bool {
        matches!(self, Role::Serve | Role::Api)
    }
    pub fn runs_workers(self) -> bool {
        matches!(self, Role::Serve | Role::Worker)
    }
}

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub log: LogConfig,
    #[command(flatten)]
    pub http: HttpConfig,
    #[command(flatten)]
    pub metrics: MetricsConfig,
    #[command(flatten)]
    pub database: DatabaseConfig,
    #[command(flatten)]
    pub queue: QueueConfig,
    #[command(flatten)]
    pub auth: AuthConfig,
    #[command(flatten)]
    pub worker: WorkerConfig,
    #[command(flatten)]
    pub retention: RetentionConfig,
    #[command(flatten)]
    pub embedder: EmbedderConfig,
    #[command(flatten)]
    pub artifacts: ArtifactConfig,
    #[command(flatten)]
    pub provider: ProviderConfig,
    #[command(flatten)]
    pub scheduler: SchedulerConfig,
}

#[derive(Args)]
pub struct ApiArgs {
    #[command(flatten)]
    pub log: LogConfig,
    #[command(flatten)]
    pub http: HttpConfig,
    #[command(flatten)]
    pub metrics: MetricsConfig,
    #[command(flatten)]
    pub database: DatabaseConfig,
    #[command(flatten)]
    pub queue: QueueConfig,
    #[command(flatten)]
    pub auth: AuthConfig,
    #[command(flatten)]
    pub embedder: EmbedderConfig,
    #[command(flatten)]
    pub artifacts: ArtifactConfig,
    #[command(flatten)]
    pub scheduler: SchedulerConfig,
}

#[derive(Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub log: LogConfig,
    #[command(flatten)]
    pub metrics: MetricsConfig,
    #[command(flatten)]
    pub database: DatabaseConfig,
    #[command(flatten)]
    pub queue: QueueConfig,
    #[command(flatten)]
    pub worker: WorkerConfig,
    #[command(flatten)]
    pub retention: RetentionConfig,
    #[command(flatten)]
    pub embedder: EmbedderConfig,
    #[command(flatten)]
    pub artifacts: ArtifactConfig,
    #[command(flatten)]
    pub provider: ProviderConfig,
    #[command(flatten)]
    pub scheduler: SchedulerConfig,
}

#[derive(Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    pub log: LogConfig,
    #[command(flatten)]
    pub database: DatabaseConfig,
}

#[derive(Args)]
pub struct HealthArgs {
    /// The URL to ask. Default: `/health/ready` on the metrics listener if one is
    /// configured (a worker's only listener), else on the API listener, over loopback
    /// when the listener binds every address.
    #[arg(long, env = "CONTEXT_OPS_HEALTH_URL")]
    pub url: Option<String>,
    /// Ask for liveness (`/health`) instead of readiness.
    #[arg(long)]
    pub live: bool,
    /// The API address of the process asked (the same variable the process reads).
    #[arg(long, env = "CONTEXT_OPS_BIND", default_value = "127.0.0.1:5120")]
    pub bind: std::net::SocketAddr,
    /// Its metrics listener, asked first when set (the same variable the process reads).
    #[arg(long, env = "CONTEXT_OPS_METRICS_BIND")]
    pub metrics_bind: Option<std::net::SocketAddr>,
}

impl HealthArgs {
    /// The URL `health` asks.
    pub fn target(&self) -> String {
        if let Some(url) = &self.url {
            return url.clone();
        }
        let mut addr = self.metrics_bind.unwrap_or(self.bind);
        if addr.ip().is_unspecified() {
            let loopback: std::net::IpAddr = if addr.is_ipv4() {
                std::net::Ipv4Addr::LOCALHOST.into()
            } else {
                std::net::Ipv6Addr::LOCALHOST.into()
            };
            addr.set_ip(loopback);
        }
        let path = if self.live { context_jobs::contract::HEALTH_PATH } else { "/health/ready" };
        format!("http://{addr}{path}")
    }
}

/// The whole configuration of a process. No `Debug`: it holds database and Redis URLs,
/// which may carry passwords (the secrets proper are [`secrecy::SecretString`]s).
#[derive(Clone)]
pub struct Config {
    pub log: LogConfig,
    pub http: HttpConfig,
    pub metrics: MetricsConfig,
    pub database: DatabaseConfig,
    pub queue: QueueConfig,
    pub auth: AuthConfig,
    pub worker: WorkerConfig,
    pub retention: RetentionConfig,
    pub embedder: EmbedderConfig,
    pub artifacts: ArtifactConfig,
    pub provider: ProviderConfig,
    pub scheduler: SchedulerConfig,
}

/// A group's defaults (and its environment variables), as if no flag were given.
fn defaults<G: Args + FromArgMatches>() -> G {
    let command = G::augment_args(clap::Command::new("defaults").no_binary_name(true));
    let matches = command.try_get_matches_from(std::iter::empty::<&str>());
    // A bad value of a group this subcommand does not take is reported like one it takes.
    matches.and_then(|m| G::from_arg_matches(&m)).unwrap_or_else(|e| cli::exit_usage(&e))
}

impl Command {
    /// The configuration and role this command runs with (`None`: `migrate`).
    pub fn into_config(self) -> (Config, Option<Role>) {
        match self {
            Command::Serve(a) => {
                let a = *a;
                let config = Config {
                    log: a.log,
                    http: a.http,
                    metrics: a.metrics,
                    database: a.database,
                    queue: a.queue,
                    auth: a.auth,
                    worker: a.worker,
                    retention: a.retention,
                    embedder: a.embedder,
                    artifacts: a.artifacts,
                    provider: a.provider,
                    scheduler: a.scheduler,
                };
                (config, Some(Role::Serve))
            }
            Command::Api(a) => {
                let a = *a;
                let config = Config {
                    log: a.log,
                    http: a.http,
                    metrics: a.metrics,
                    database: a.database,
                    queue: a.queue,
                    auth: a.auth,
                    embedder: a.embedder,
                    artifacts: a.artifacts,
                    scheduler: a.scheduler,
                    ..Config::defaults()
                };
                (config, Some(Role::Api))
            }
            Command::Worker(a) => {
                let a = *a;
                let config = Config {
                    log: a.log,
                    metrics: a.metrics,
                    database: a.database,
                    queue: a.queue,
                    worker: a.worker,
                    retention: a.retention,
                    embedder: a.embedder,
                    artifacts: a.artifacts,
                    provider: a.provider,
                    scheduler: a.scheduler,
                    ..Config::defaults()
                };
                (config, Some(Role::Worker))
            }
            Command::Migrate(a) => (Config { log: a.log, database: a.database, ..Config::defaults() }, None),
            Command::Health(_) | Command::Openapi | Command::Op(_) => (Config::defaults(), None),
        }
    }
}

impl Config {
    /// Defaults for everything, as if no flag were given (tests build on this).
    pub fn defaults() -> Self {
        Self {
            log: defaults(),
            http: defaults(),
            metrics: defaults(),
            database: defaults(),
            queue: defaults(),
            auth: defaults(),
            worker: defaults(),
            retention: defaults(),
            embedder: defaults(),
            artifacts: defaults(),
            provider: defaults(),
            scheduler: defaults(),
        }
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        let w = &self.worker;
        anyhow::ensure!(w.lease_secs >= 2, "CONTEXT_OPS_LEASE_SECS must be at least 2");
        anyhow::ensure!(w.max_attempts >= 1, "CONTEXT_OPS_MAX_ATTEMPTS must be at least 1");
        anyhow::ensure!(w.batch_size >= 1, "CONTEXT_OPS_BATCH_SIZE must be at least 1");
        anyhow::ensure!(w.worker_concurrency >= 1, "CONTEXT_OPS_WORKER_CONCURRENCY must be at least 1");
        anyhow::ensure!(self.http.wait_recheck_ms >= 1, "CONTEXT_OPS_WAIT_RECHECK_MS must be at least 1");
        anyhow::ensure!(self.queue.dispatch_interval_ms >= 1, "CONTEXT_OPS_DISPATCH_INTERVAL_MS must be at least 1");
        anyhow::ensure!(self.http.max_event_streams >= 1, "CONTEXT_OPS_MAX_EVENT_STREAMS must be at least 1");
        anyhow::ensure!(self.http.events_heartbeat_ms >= 10, "CONTEXT_OPS_EVENTS_HEARTBEAT_MS must be at least 10");
        anyhow::ensure!(
            self.database.db_max_connections >= 4,
            "CONTEXT_OPS_DB_MAX_CONNECTIONS must be at least 4 (an export or an import holds 3 at once, beside a heartbeat)"
        );
        if let Some(secret) = &self.auth.jwt_secret {
            anyhow::ensure!(secret.expose_secret().len() >= 16, "CONTEXT_OPS_JWT_SECRET must be at least 16 bytes");
        }
        if let Some(token) = &self.auth.service_token {
            anyhow::ensure!(!token.expose_secret().trim().is_empty(), "AGENT_CONTEXT_SERVICE_TOKEN must not be empty");
        }
        let e = &self.embedder;
        if e.embedder == EmbedderKind::Openai {
            anyhow::ensure!(
                e.embeddings_base_url.is_some(),
                "CONTEXT_OPS_EMBEDDINGS_BASE_URL is required with the openai embedder"
            );
        }
        anyhow::ensure!((8..=4096).contains(&e.embedding_dim), "CONTEXT_OPS_EMBEDDING_DIM must be in 8..=4096");
        anyhow::ensure!(
            self.artifacts.artifact_chunk_bytes >= 4096,
            "CONTEXT_OPS_ARTIFACT_CHUNK_BYTES must be at least 4096"
        );
        anyhow::ensure!(
            self.artifacts.import_validating_batches >= 1,
            "CONTEXT_OPS_IMPORT_VALIDATING_BATCHES must be at least 1"
        );
        let p = &self.provider;
        anyhow::ensure!(p.responses_max_attempts >= 1, "RESPONSES_MAX_ATTEMPTS must be at least 1");
        anyhow::ensure!(
            p.responses_base_url.starts_with("http://") || p.responses_base_url.starts_with("https://"),
            "RESPONSES_BASE_URL must be an http(s) URL"
        );
        anyhow::ensure!(!self.queue.queue_namespace.is_empty(), "CONTEXT_OPS_QUEUE_NAMESPACE must not be empty");
        if let Some(url) = &self.queue.redis_url {
            anyhow::ensure!(
                url.starts_with("redis://") || url.starts_with("rediss://"),
                "REDIS_URL must start with redis:// or rediss://"
            );
        }
        if self.queue.redis_ca_file.is_some() {
            anyhow::ensure!(
                self.queue.redis_url.as_deref().is_some_and(|u| u.starts_with("rediss://")),
                "CONTEXT_OPS_REDIS_CA_FILE is set but REDIS_URL is not a rediss:// (TLS) URL"
            );
        }
        self.scheduling()?;
        Ok(())
    }

    /// Open mode (no credential configured) on a non-loopback API address is refused
    /// unless `CONTEXT_OPS_ALLOW_OPEN` says so: checked by the processes that listen.
    pub fn check_exposure(&self) -> anyhow::Result<()> {
        let a = &self.auth;
        let open = a.service_token.is_none() && a.jwt_secret.is_none() && a.admin_token.is_none();
        anyhow::ensure!(
            !open || a.allow_open || self.http.bind.ip().is_loopback(),
            "open mode (no AGENT_CONTEXT_SERVICE_TOKEN, CONTEXT_OPS_JWT_SECRET or CONTEXT_OPS_ADMIN_TOKEN) on \
             the non-loopback address {} (CONTEXT_OPS_BIND / --bind) is refused: set a token, listen on \
             127.0.0.1, or allow it with CONTEXT_OPS_ALLOW_OPEN=true / --allow-open",
            self.http.bind
        );
        Ok(())
    }

    /// The scheduler's settings, parsed (the errors name the variable).
    pub fn scheduling(&self) -> anyhow::Result<Scheduling> {
        let s = &self.scheduler;
        let err = anyhow::Error::msg;
        Ok(Scheduling {
            max_running: PerKind::parse("CONTEXT_OPS_MAX_RUNNING", &s.max_running).map_err(err)?,
            max_running_per_tenant: PerKind::parse("CONTEXT_OPS_MAX_RUNNING_PER_TENANT", &s.max_running_per_tenant)
                .map_err(err)?,
            weights: parse_weights(&s.tenant_weights)
                .map_err(|e| anyhow::anyhow!("CONTEXT_OPS_TENANT_WEIGHTS: {e}"))?,
            default_timeout_ms: PerKind::parse("CONTEXT_OPS_DEFAULT_TIMEOUT_MS", &s.default_timeout_ms).map_err(err)?,
            rate_limits: parse_rules(&s.rate_limits).map_err(|e| anyhow::anyhow!("CONTEXT_OPS_RATE_LIMITS: {e}"))?,
        })
    }

    pub fn lease(&self) -> Duration {
        Duration::from_secs(self.worker.lease_secs)
    }
}
