//! The alert rules pass `promtool check rules` and their unit tests (alerts.test.yml: each
//! alert firing, and not firing when pending, under its volume floor or healthy); the
//! Prometheus configuration loads them when laid out as `docker-compose.yml` mounts it; and
//! every file compose mounts exists.

use std::path::Path;

use super::{ALERT_TESTS, ALERTS, COMPOSE, promtool, read, repo};

/// Compose's bind mounts (`- ./host:/container[:ro]`) of `service`: (host, container).
fn mounts(compose: &str, service: &str) -> Vec<(String, String)> {
    let header = format!("  {service}:");
    let mut lines = compose.lines().skip_while(|l| *l != header);
    assert!(lines.next().is_some(), "no service {service} in {COMPOSE}");
    // The service's block: the lines indented deeper than its name.
    lines
        .take_while(|l| l.is_empty() || l.starts_with("   "))
        .filter_map(|l| l.trim().strip_prefix("- ./"))
        .filter_map(|m| {
            let mut parts = m.split(':');
            Some((format!("./{}", parts.next()?), parts.next()?.to_string()))
        })
        .collect()
}

#[test]
fn alert_rules_pass_promtool_check() {
    let (ok, said) = promtool(&repo(""), &["check", "rules", ALERTS]);
    assert!(ok, "promtool check rules {ALERTS}:\n{said}");
    assert!(said.contains("SUCCESS: 8 rules found"), "{said}");
}

#[test]
fn alert_rule_unit_tests_pass() {
    let (ok, said) = promtool(&repo(""), &["test", "rules", ALERT_TESTS]);
    assert!(ok, "promtool test rules {ALERT_TESTS}:\n{said}");
    assert!(said.contains("SUCCESS"), "{said}");
    // Every alert of the rules has a test that expects it to fire.
    let tests = read(ALERT_TESTS);
    for alert in read(ALERTS).lines().filter_map(|l| l.trim().strip_prefix("- alert: ")) {
        let named = format!("alertname: {alert}\n        exp_alerts:\n          - exp_labels:");
        assert!(tests.contains(&named), "no test where {alert} fires");
    }
}

#[test]
fn prometheus_config_loads_the_rules_where_compose_mounts_them() {
    let compose = read(COMPOSE);
    let mounted = mounts(&compose, "prometheus");
    assert!(!mounted.is_empty(), "prometheus mounts nothing");
    // Lay the mounted files out under a stand-in for the container's root.
    let root = tempfile::tempdir().unwrap();
    for (host, container) in &mounted {
        let to = root.path().join(container.trim_start_matches('/'));
        copy(&repo(host), &to);
    }
    let config = root.path().join("etc/prometheus/prometheus.yml");
    assert!(config.is_file(), "compose mounts no /etc/prometheus/prometheus.yml: {mounted:?}");
    let (ok, said) = promtool(root.path(), &["check", "config", config.to_str().unwrap()]);
    assert!(ok, "promtool check config:\n{said}");
    // The rule file was found and checked, not just named.
    assert!(said.contains("SUCCESS: 1 rule files found") && said.contains("SUCCESS: 8 rules found"), "{said}");
}

#[test]
fn every_file_compose_mounts_exists() {
    let compose = read(COMPOSE);
    for service in ["prometheus", "grafana"] {
        let mounted = mounts(&compose, service);
        assert!(!mounted.is_empty(), "{service} mounts nothing");
        for (host, container) in mounted {
            assert!(repo(&host).exists(), "{service} mounts {host} at {container}, which does not exist");
        }
    }
    let grafana = mounts(&compose, "grafana");
    let targets: Vec<&str> = grafana.iter().map(|(_, c)| c.as_str()).collect();
    assert!(targets.contains(&"/etc/grafana/provisioning"), "{targets:?}");
    assert!(targets.contains(&"/var/lib/grafana/dashboards/context-ops.json"), "{targets:?}");
    let provider = read("deploy/grafana/provisioning/dashboards/context-ops.yml");
    assert!(provider.contains("path: /var/lib/grafana/dashboards\n"), "the provider reads where the board is mounted");
}

/// Copy a file, or a directory's files (one level: deploy/prometheus has no subfolders).
fn copy(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            assert!(entry.file_type().unwrap().is_file(), "{:?} is not a file", entry.path());
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    } else {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap();
    }
}
