//! The dashboard (`/ui`) in a real browser. Each test starts the real binary (`serve`, on a
//! fresh SQLite database, with a static service token, an admin token and a gateway JWT
//! secret, so tenant walls hold as in production), seeds what it needs, then runs one
//! Playwright scenario, `tests/ui/<name>.mjs`, in Debian's headless Chromium with `node`.
//! The scenario drives the pages by their accessible roles and names, checks the API where
//! the brief says "see it in the API", saves screenshots under `target/ui-screenshots/`,
//! and may hand facts back (an operation id, a downloaded file) as JSON for the test to
//! check against the API itself.
//!
//! Missing tools fail the test with what to install (`bash .ci/run` does it): a browser
//! test that skips itself would pass without testing anything.

mod browse;
mod controls;
mod keyboard_a11y;
mod operations;
mod tenants;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::Backend;
use crate::harness::child::Service;
use crate::harness::fixture::Fixture;
use crate::harness::jwt::{JWT_SECRET, tenant_token};

/// The default tenant's static token (`AGENT_CONTEXT_SERVICE_TOKEN`).
pub const SERVICE_TOKEN: &str = "ui-service-token";
/// The admin token (`CONTEXT_OPS_ADMIN_TOKEN`): the default tenant, with admin powers.
pub const ADMIN_TOKEN: &str = "ui-admin-token";

/// Debian's Chromium, unless `CONTEXT_OPS_UI_CHROMIUM` names another build.
const CHROMIUM: &str = "/usr/bin/chromium";

/// A scenario's whole run (browser start included) on a busy 2-core machine.
const SCENARIO_WITHIN: Duration = Duration::from_secs(90);

/// `tests/ui/`, where the scenarios and their npm packages are.
fn ui_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui")
}

/// `target/ui-screenshots/` (the target dir is `CARGO_TARGET_TMPDIR`'s parent, wherever
/// `CARGO_TARGET_DIR` puts it).
pub fn screenshot_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target dir").join("ui-screenshots")
}

fn chromium() -> PathBuf {
    std::env::var_os("CONTEXT_OPS_UI_CHROMIUM").map_or_else(|| PathBuf::from(CHROMIUM), PathBuf::from)
}

/// Panics, saying what to install, unless Chromium, Node.js and the npm packages are there.
fn require_tools() {
    const INSTALL: &str = "run `bash .ci/run` (it installs them), or: `apt-get install -y chromium nodejs npm` and \
                           `npm ci --prefix tests/ui`";
    let browser = chromium();
    assert!(browser.is_file(), "the browser tests need Chromium at {}: {INSTALL}", browser.display());
    let node = std::process::Command::new("node").arg("--version").output();
    assert!(
        node.as_ref().is_ok_and(|o| o.status.success()),
        "the browser tests need Node.js 20+ (`node` on PATH): {INSTALL}"
    );
    for package in ["playwright-core", "axe-core"] {
        let dir = ui_dir().join("node_modules").join(package);
        assert!(dir.is_dir(), "the browser tests need the npm package {package} in {}: {INSTALL}", dir.display());
    }
}

/// A live `serve` for one browser test, and the test's handle on its database.
pub struct UiServer {
    pub fx: Fixture,
    pub serve: Service,
}

impl UiServer {
    /// `serve` on a fresh SQLite database with the three credentials, plus `env`.
    pub async fn start(env: &[(&str, &str)]) -> UiServer {
        let mut all = vec![
            ("AGENT_CONTEXT_SERVICE_TOKEN", SERVICE_TOKEN),
            ("CONTEXT_OPS_ADMIN_TOKEN", ADMIN_TOKEN),
            ("CONTEXT_OPS_JWT_SECRET", JWT_SECRET),
        ];
        all.extend_from_slice(env);
        Self::start_exactly(&all).await
    }

    /// `serve` in open mode (no credential configured: loopback only).
    pub async fn open() -> UiServer {
        Self::start_exactly(&[]).await
    }

    async fn start_exactly(env: &[(&str, &str)]) -> UiServer {
        require_tools();
        let fx = Fixture::new(Backend::Sqlite, 15).await;
        // The overview refreshes from the event stream; heartbeats keep it honest.
        let mut all = vec![("CONTEXT_OPS_EVENTS_HEARTBEAT_MS", "2000")];
        all.extend_from_slice(env);
        let mut serve = fx.env.spawn_with("serve", "serve", &all);
        serve.wait_healthy(Duration::from_secs(30)).await;
        UiServer { fx, serve }
    }

    /// The default tenant's client (the static service token).
    pub fn api(&self) -> crate::harness::OpClient {
        self.serve.api.as_caller(SERVICE_TOKEN)
    }

    /// The admin's client.
    pub fn admin(&self) -> crate::harness::OpClient {
        self.serve.api.as_caller(ADMIN_TOKEN)
    }

    /// Run `tests/ui/{name}.mjs` against this server with `env` beside the base URL and
    /// tokens; panics with the scenario's output (and the service's log tail) unless it
    /// exits 0. Returns what the scenario wrote to `RESULT_FILE` (`null` if nothing) and its
    /// work directory (`WORK_DIR`: downloads), kept until the outcome is dropped.
    pub async fn scenario(&self, name: &str, env: &[(&str, &str)]) -> Outcome {
        let work = tempfile::tempdir().unwrap();
        let result_file = work.path().join("result.json");
        let shots = screenshot_dir();
        std::fs::create_dir_all(&shots).unwrap();
        let mut cmd = tokio::process::Command::new("node");
        cmd.arg(ui_dir().join(format!("{name}.mjs")))
            .current_dir(ui_dir())
            .env("BASE_URL", &self.serve.api.base)
            .env("SERVICE_TOKEN", SERVICE_TOKEN)
            .env("ADMIN_TOKEN", ADMIN_TOKEN)
            .env("OTHER_TENANT_TOKEN", tenant_token("globex"))
            .env("CHROMIUM", chromium())
            .env("SCREENSHOT_DIR", &shots)
            .env("WORK_DIR", work.path())
            .env("RESULT_FILE", &result_file)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let started = Instant::now();
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn node for {name}: {e}"));
        let output = match tokio::time::timeout(SCENARIO_WITHIN, child.wait_with_output()).await {
            Ok(output) => output.expect("wait for node"),
            Err(_) => panic!(
                "scenario {name} did not finish within {SCENARIO_WITHIN:?}; serve log tail:\n{}",
                self.serve.proc.log_tail(30)
            ),
        };
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "scenario {name} failed ({}) after {:?}\n---- its output ----\n{stdout}\n---- its stderr ----\n{stderr}\n\
             ---- serve log tail ----\n{}\n(screenshots in {})",
            output.status,
            started.elapsed(),
            self.serve.proc.log_tail(30),
            shots.display()
        );
        eprintln!("scenario {name} passed in {:?}\n{stdout}", started.elapsed());
        let result = match std::fs::read_to_string(&result_file) {
            Ok(text) => serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}'s result {text}: {e}")),
            Err(_) => Value::Null,
        };
        Outcome { result, work }
    }
}

/// What a scenario handed back.
pub struct Outcome {
    pub result: Value,
    pub work: tempfile::TempDir,
}
