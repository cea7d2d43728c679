//! The CLI (`context-ops op …`) as a user runs it: the real binary against a live service
//! on both backends, its stdout parsed as the API's DTOs (`--json`), its exit codes.
//!
//! - `operations`: submit --wait for several kinds, get, list (filters, paging), cancel,
//!   retry, forget, wait's exit codes (succeeded, failed, cancelled, timed out), usage,
//!   refusals, an unreachable service, credentials from the environment;
//! - `transfer`: an interrupted download that continues its partial file (digest
//!   verified), a digest mismatch reported with its exit code, upload (and a resumed
//!   one), import --file, append / recent / search.

mod operations;
mod transfer;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::de::DeserializeOwned;

use crate::harness::child::binary;

/// How to run the CLI against one service.
pub struct Cli {
    pub url: String,
    pub dir: PathBuf,
    /// `AGENT_CONTEXT_SERVICE_TOKEN` in the CLI's environment.
    pub token: Option<String>,
}

/// What a run printed and how it ended.
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// stdout as one JSON document of `T` (the run must have printed one).
    pub fn json<T: DeserializeOwned>(&self) -> T {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("{e}: stdout {:?}, stderr {:?}", self.stdout, self.stderr))
    }

    /// Assert the exit code, showing what was printed otherwise.
    pub fn expect(self, code: i32) -> Ran {
        assert_eq!(self.code, code, "exit code; stdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        self
    }
}

impl From<Output> for Ran {
    fn from(out: Output) -> Self {
        Ran {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Cli {
    pub fn new(url: &str, dir: &Path) -> Cli {
        Cli { url: url.to_string(), dir: dir.to_path_buf(), token: None }
    }

    /// `context-ops op --url … ARGS` (run from the test's directory).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = binary(&self.dir, &["op"]);
        cmd.args(args).env("CONTEXT_OPS_URL", &self.url);
        if let Some(token) = &self.token {
            cmd.env("AGENT_CONTEXT_SERVICE_TOKEN", token);
        }
        cmd
    }

    pub async fn run(&self, args: &[&str]) -> Ran {
        let mut cmd = self.command(args);
        tokio::task::spawn_blocking(move || cmd.output().expect("run the CLI")).await.unwrap().into()
    }

    /// [`Self::run`] with `--json`, which must exit 0; stdout as `T`.
    pub async fn json<T: DeserializeOwned>(&self, args: &[&str]) -> T {
        let mut all = args.to_vec();
        all.push("--json");
        self.run(&all).await.expect(0).json()
    }
}
