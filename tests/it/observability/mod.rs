//! The monitoring that ships in `deploy/`: the Prometheus alert rules and configuration,
//! the Grafana dashboard and its provisioning, and `docker-compose.yml`'s mounts of them.
//!
//! - `rules`: `promtool check rules`, `promtool test rules` (alerts.test.yml), and
//!   `promtool check config` on the configuration laid out as compose mounts it.
//! - `dashboard`: the dashboard JSON's structure (ids, layout, data source variable) and
//!   the provisioning that loads it.
//! - `names`: every `context_ops_*` metric and label value the dashboard and the rules
//!   query is exported by a live `serve` (a child process, scraped after real traffic).
//!
//! Here: where the files are, running promtool, and reading metric selectors out of text.

use std::path::{Path, PathBuf};
use std::process::Command;

mod dashboard;
mod names;
mod rules;

pub const ALERTS: &str = "deploy/prometheus/alerts.yml";
pub const ALERT_TESTS: &str = "deploy/prometheus/alerts.test.yml";
pub const DASHBOARD: &str = "deploy/grafana/context-ops.json";
pub const COMPOSE: &str = "docker-compose.yml";

/// A path in the repository.
pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

pub fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `promtool args…` in `dir`: whether it succeeded, and what it said.
pub fn promtool(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool runs (Debian's `prometheus` package; .ci/run installs it when missing)");
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), said)
}

/// A metric selector found in a query: the metric name and its `label="value"` matchers
/// (regex matchers and values holding a dashboard variable are left out: they select no
/// fixed value).
#[derive(Debug, PartialEq)]
pub struct Selector {
    pub metric: String,
    pub equals: Vec<(String, String)>,
}

/// Every `context_ops_*` name in `text`, with the equality matchers of a `{…}` right after it.
pub fn selectors(text: &str) -> Vec<Selector> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("context_ops_") {
        let after = &rest[at..];
        let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
        let metric = after[..end].to_string();
        let mut equals = Vec::new();
        if let Some(body) = after[end..].strip_prefix('{').and_then(|b| b.split_once('}')).map(|(b, _)| b) {
            for matcher in body.split(',') {
                if let Some((label, value)) = matcher.split_once('=')
                    && !value.starts_with('~')
                    && !label.ends_with('!')
                {
                    let value = value.trim().trim_matches('"');
                    if !value.contains('$') {
                        equals.push((label.trim().to_string(), value.to_string()));
                    }
                }
            }
        }
        found.push(Selector { metric, equals });
        rest = &after[end..];
    }
    found
}

#[test]
fn selectors_read_names_and_fixed_label_values() {
    let query = r#"max by (kind) (context_ops_operations{kind=~"$kind", state="running"}) > 0
        unless sum(rate(context_ops_http_requests_total{status=~"5..",route!="/x"}[5m]))
        / context_ops_queue_depth{kind="$kind"} and context_ops_oldest_queued_timestamp_seconds"#;
    let found = selectors(query);
    let sel = |metric: &str, equals: &[(&str, &str)]| Selector {
        metric: metric.into(),
        equals: equals.iter().map(|(l, v)| (l.to_string(), v.to_string())).collect(),
    };
    assert_eq!(
        found,
        vec![
            sel("context_ops_operations", &[("state", "running")]),
            sel("context_ops_http_requests_total", &[]),
            sel("context_ops_queue_depth", &[]),
            sel("context_ops_oldest_queued_timestamp_seconds", &[]),
        ]
    );
}
