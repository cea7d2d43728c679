//! The CLI's exit codes (documented in `docs/cli.md`) and its one error type: every
//! failure says what happened in one line and maps to the code a script can test.

use std::process::ExitCode;

/// Exit codes, distinct per outcome a script may want to tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// The command did what it was asked (a waited-for operation succeeded).
    Ok = 0,
    /// The operation waited for ended `failed`.
    Failed = 1,
    /// The command line or an input file is wrong (clap's usage errors are 2 as well).
    Usage = 2,
    /// The operation waited for ended `cancelled`.
    Cancelled = 3,
    /// The wait's `--timeout` passed before the operation ended.
    TimedOut = 4,
    /// The service refused the request (an `ApiError`: 4xx, or a 5xx it kept answering).
    Refused = 5,
    /// The service could not be reached (connection refused, DNS, TLS, no answer in time).
    Unreachable = 6,
    /// A downloaded or uploaded file's digest is not the artifact's.
    DigestMismatch = 7,
    /// A local file could not be read or written.
    Io = 8,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e as u8)
    }
}

/// Why a command did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    /// The service answered an `ApiError`.
    #[error("the service answered {status}: {message}")]
    Api { status: u16, message: String },
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{0}")]
    Digest(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// An operation ended as it should not have, or the wait for it ran out: its exit code
    /// and a line saying so (the operation itself is already printed).
    #[error("{1}")]
    Ended(Exit, String),
}

impl CliError {
    pub fn exit(&self) -> Exit {
        match self {
            CliError::Usage(_) => Exit::Usage,
            CliError::Api { .. } => Exit::Refused,
            CliError::Unreachable { .. } => Exit::Unreachable,
            CliError::Digest(_) => Exit::DigestMismatch,
            CliError::Io { .. } => Exit::Io,
            CliError::Ended(exit, _) => *exit,
        }
    }

    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> CliError {
        let what = what.into();
        move |source| CliError::Io { what, source }
    }

    /// Worth trying again after a pause: the service was out of reach or answered 503.
    pub fn is_transient(&self) -> bool {
        matches!(self, CliError::Unreachable { .. } | CliError::Api { status: 502..=504, .. })
    }
}

pub type CliResult<T> = Result<T, CliError>;
