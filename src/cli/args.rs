//! The command line of `context-ops op …`: every subcommand, its flags, and the
//! connection flags every one takes (`--url`, credentials, `--json`).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use secrecy::SecretString;

fn secret(s: &str) -> Result<SecretString, std::convert::Infallible> {
    Ok(SecretString::from(s.to_string()))
}

/// `90s`, `5m`, `2h`, `250ms`, or seconds alone.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let n: u64 = number.parse().map_err(|_| format!("{s:?} is not a duration (30s, 5m, 2h, 250ms)"))?;
    let ms = match unit {
        "" | "s" => n.saturating_mul(1000),
        "ms" => n,
        "m" => n.saturating_mul(60_000),
        "h" => n.saturating_mul(3_600_000),
        _ => return Err(format!("{s:?} is not a duration (30s, 5m, 2h, 250ms)")),
    };
    Ok(Duration::from_millis(ms))
}

#[derive(Args)]
pub struct OpArgs {
    #[command(flatten)]
    pub connection: Connection,
    /// Print one JSON document on stdout (the API's own shapes) and draw no progress bar.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: OpCommand,
}

/// Where the service is and who is asking. A credential is sent as `Authorization: Bearer`;
/// with several, `--jwt` wins over `--admin-token`, which wins over `--token`.
#[derive(Args)]
#[command(next_help_heading = "Connection")]
pub struct Connection {
    /// The service's base URL.
    #[arg(long, global = true, env = "CONTEXT_OPS_URL", default_value = "http://127.0.0.1:5120")]
    pub url: String,
    /// The static bearer token (the variable the service reads it from).
    #[arg(long, global = true, env = "AGENT_CONTEXT_SERVICE_TOKEN", hide_env_values = true, value_parser = secret)]
    pub token: Option<SecretString>,
    /// The admin bearer token (the variable the service reads it from).
    #[arg(long, global = true, env = "CONTEXT_OPS_ADMIN_TOKEN", hide_env_values = true, value_parser = secret)]
    pub admin_token: Option<SecretString>,
    /// A gateway-issued JWT.
    #[arg(long, global = true, env = "CONTEXT_OPS_JWT", hide_env_values = true, value_parser = secret)]
    pub jwt: Option<SecretString>,
}

impl Connection {
    pub fn credential(&self) -> Option<SecretString> {
        self.jwt.clone().or_else(|| self.admin_token.clone()).or_else(|| self.token.clone())
    }
}

#[derive(Subcommand)]
pub enum OpCommand {
    /// Submit an operation (and with --wait, follow it to its end).
    #[command(subcommand)]
    Submit(Box<SubmitKind>),
    /// Show an operation.
    Get(IdArg),
    /// Follow an operation to its end with a progress bar; the exit code says how it ended.
    Wait(WaitArgs),
    /// List operations, newest first.
    List(ListArgs),
    /// Cancel an operation (a running one stops at its next batch boundary).
    Cancel(IdArg),
    /// Retry a failed or cancelled operation (from its checkpoint where its kind can).
    Retry(RetryArgs),
    /// Forget a finished operation (delete its record).
    Forget(IdArg),
    /// Download an artifact to a file: chunked, resumable, digest-checked.
    Download(DownloadArgs),
    /// Upload a file as an artifact (chunked, resumable); prints the artifact id.
    Upload(UploadArgs),
    /// Upload a file, import it, and wait for the import.
    Import(ImportFileArgs),
    /// Append the messages of a JSON Lines file (one ConversationRecord per line).
    Append(AppendArgs),
    /// Show a conversation's newest messages.
    Recent(RecentArgs),
    /// Search a conversation's messages (case-insensitive substring).
    Search(SearchArgs),
}

#[derive(Args)]
pub struct IdArg {
    /// The operation id.
    pub id: String,
}

/// How a submission is scheduled and followed (every kind takes these).
#[derive(Args, Clone, Default)]
#[command(next_help_heading = "Submission")]
pub struct SubmitCommon {
    /// Makes the submission idempotent: the same key returns the same operation.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// 1 (lowest) to 9 (highest); default 5.
    #[arg(long)]
    pub priority: Option<i64>,
    /// Fail the operation if it has not finished by this time (epoch milliseconds).
    #[arg(long)]
    pub deadline_ms: Option<i64>,
    /// Fail the operation if it has not finished this long after it may start (ms).
    #[arg(long)]
    pub timeout_ms: Option<i64>,
    /// Do not start before this time (epoch milliseconds).
    #[arg(long)]
    pub not_before_ms: Option<i64>,
    /// Follow the operation to its end (progress bar; the exit code says how it ended).
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up waiting after this long (exit 4); the operation goes on.
    #[arg(long, value_parser = parse_duration)]
    pub wait_timeout: Option<Duration>,
}

#[derive(Subcommand)]
pub enum SubmitKind {
    /// Delete a conversation and all its messages.
    Delete {
        #[arg(long)]
        conversation: String,
        #[arg(long, default_value = "")]
        reason: String,
        #[command(flatten)]
        common: SubmitCommon,
    },
    /// Apply a retention policy to a conversation.
    Retention {
        #[arg(long)]
        conversation: String,
        /// Delete messages older than this many days.
        #[arg(long)]
        max_age_days: Option<u32>,
        /// Keep at most this many of the newest messages.
        #[arg(long)]
        max_messages: Option<u32>,
        #[command(flatten)]
        common: SubmitCommon,
    },
    /// Export messages and entries to a downloadable artifact.
    Export(ExportArgs),
    /// Import an artifact (by id, or a local file uploaded first).
    Import(ImportArgs),
    /// Re-embed the vector projection.
    Rebuild {
        /// Re-embed every entry, not only the stale ones.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        common: SubmitCommon,
    },
    /// One Responses-API turn.
    Inference(InferenceArgs),
}

#[derive(Args)]
pub struct ExportArgs {
    /// Only these conversations (repeatable).
    #[arg(long = "conversation")]
    pub conversations: Vec<String>,
    /// Only this agent's conversations.
    #[arg(long)]
    pub agent: Option<String>,
    /// Only records created at or after this time (epoch ms).
    #[arg(long)]
    pub from_ms: Option<i64>,
    /// Only records created before this time (epoch ms).
    #[arg(long)]
    pub to_ms: Option<i64>,
    /// Include expired entries.
    #[arg(long)]
    pub include_expired: bool,
    #[command(flatten)]
    pub common: SubmitCommon,
}

/// Where an import reads from and how it renames.
#[derive(Args, Clone)]
pub struct ImportSource {
    /// A ready artifact of this tenant.
    #[arg(long, conflicts_with = "file", required_unless_present = "file")]
    pub artifact: Option<String>,
    /// A local artifact file: uploaded first.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Prefix every imported conversation id with this.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Rename one conversation: OLD=NEW (repeatable; wins over --prefix).
    #[arg(long = "map", value_name = "OLD=NEW")]
    pub map: Vec<String>,
    /// Upload piece size in bytes (at most 4 MiB).
    #[arg(long, default_value_t = 1024 * 1024)]
    pub chunk_size: usize,
}

#[derive(Args)]
pub struct ImportArgs {
    #[command(flatten)]
    pub source: ImportSource,
    #[command(flatten)]
    pub common: SubmitCommon,
}

#[derive(Args)]
pub struct ImportFileArgs {
    /// The artifact file to upload and import.
    #[arg(long)]
    pub file: PathBuf,
    #[arg(long)]
    pub prefix: Option<String>,
    #[arg(long = "map", value_name = "OLD=NEW")]
    pub map: Vec<String>,
    #[arg(long, default_value_t = 1024 * 1024)]
    pub chunk_size: usize,
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Give up waiting after this long (exit 4); the import goes on.
    #[arg(long, value_parser = parse_duration)]
    pub wait_timeout: Option<Duration>,
}

#[derive(Args)]
pub struct InferenceArgs {
    /// The provider's model.
    #[arg(long)]
    pub model: String,
    /// Load this conversation's newest messages as history.
    #[arg(long)]
    pub conversation: Option<String>,
    /// A user message for this turn (repeatable).
    #[arg(long = "message")]
    pub messages: Vec<String>,
    #[arg(long)]
    pub instructions: Option<String>,
    #[arg(long)]
    pub max_output_tokens: Option<u32>,
    #[arg(long)]
    pub reasoning_effort: Option<String>,
    /// Append the reply to --conversation.
    #[arg(long)]
    pub append_reply: bool,
    /// KEY=VALUE metadata (repeatable).
    #[arg(long = "metadata", value_name = "KEY=VALUE")]
    pub metadata: Vec<String>,
    #[command(flatten)]
    pub common: SubmitCommon,
}

#[derive(Args)]
pub struct WaitArgs {
    pub id: String,
    /// Give up after this long (exit 4); the operation goes on.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
}

#[derive(Args)]
pub struct ListArgs {
    #[arg(long)]
    pub kind: Option<String>,
    #[arg(long)]
    pub state: Option<String>,
    /// Another tenant (`tenantId/projectId`) or every tenant (`*`): admins only.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Created at or after (epoch ms).
    #[arg(long)]
    pub created_after_ms: Option<i64>,
    /// Created before (epoch ms).
    #[arg(long)]
    pub created_before_ms: Option<i64>,
    /// Ids starting with this.
    #[arg(long)]
    pub id_prefix: Option<String>,
    /// Operations per page (at most 500).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Continue after a previous page (its `nextCursor`).
    #[arg(long)]
    pub cursor: Option<String>,
    /// Follow `nextCursor` to the last page.
    #[arg(long)]
    pub all: bool,
}

#[derive(Args)]
pub struct RetryArgs {
    pub id: String,
    #[arg(long)]
    pub priority: Option<i64>,
    #[arg(long)]
    pub deadline_ms: Option<i64>,
    #[arg(long)]
    pub timeout_ms: Option<i64>,
    #[arg(long)]
    pub not_before_ms: Option<i64>,
}

#[derive(Args)]
pub struct DownloadArgs {
    /// The artifact id.
    pub artifact: String,
    /// The file to write. An existing shorter file is continued (a partial download).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Start over instead of continuing an existing file.
    #[arg(long)]
    pub restart: bool,
    /// Bytes per request (at most 4 MiB).
    #[arg(long, default_value_t = 1024 * 1024)]
    pub chunk_size: usize,
}

#[derive(Args)]
pub struct UploadArgs {
    pub file: PathBuf,
    /// Continue this unfinished upload (its id was printed when it started).
    #[arg(long)]
    pub artifact: Option<String>,
    /// Bytes per request (at most 4 MiB).
    #[arg(long, default_value_t = 1024 * 1024)]
    pub chunk_size: usize,
}

#[derive(Args)]
pub struct AppendArgs {
    /// One ConversationRecord per line (`-`: standard input).
    pub file: PathBuf,
    /// Records per request (at most 500).
    #[arg(long, default_value_t = 500)]
    pub batch: usize,
}

#[derive(Args)]
pub struct RecentArgs {
    #[arg(long)]
    pub conversation: String,
    #[arg(long)]
    pub limit: Option<usize>,
    /// Only these roles (repeatable).
    #[arg(long = "role")]
    pub roles: Vec<String>,
}

#[derive(Args)]
pub struct SearchArgs {
    /// The text to look for.
    pub query: String,
    #[arg(long)]
    pub conversation: String,
    #[arg(long)]
    pub role: Option<String>,
    #[arg(long)]
    pub limit: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        for bad in ["", "s", "5d", "-1", "1.5s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
