//! The Grafana dashboard is a JSON document Grafana can import as it is: unique panel ids,
//! panels that fit the 24-column grid without overlapping, every query on the `datasource`
//! variable (a Prometheus data source picker), a `kind` variable of the operation kinds,
//! and the provisioned data source as the variable's default.

use serde_json::Value;

use super::{DASHBOARD, read};

/// Every panel, rows' nested panels included.
fn panels(board: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for panel in board["panels"].as_array().expect("panels") {
        all.push(panel);
        all.extend(panel["panels"].as_array().into_iter().flatten());
    }
    all
}

/// The dashboard, parsed.
pub fn board() -> Value {
    serde_json::from_str(&read(DASHBOARD)).unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"))
}

#[test]
fn the_dashboard_has_unique_ids_and_a_tidy_grid() {
    let board = board();
    assert_eq!(board["uid"], "context-ops");
    assert!(board["schemaVersion"].as_u64().unwrap() >= 36, "a schema current Grafana reads");
    let panels = panels(&board);
    assert!(panels.len() >= 20, "{} panels", panels.len());
    let mut ids: Vec<u64> = panels.iter().map(|p| p["id"].as_u64().expect("a numeric id")).collect();
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), before, "panel ids repeat");

    let boxes: Vec<(u64, u64, u64, u64, &str)> = panels
        .iter()
        .map(|p| {
            let g = &p["gridPos"];
            let (x, y, w, h) = (g["x"].as_u64(), g["y"].as_u64(), g["w"].as_u64(), g["h"].as_u64());
            let title = p["title"].as_str().unwrap_or_default();
            (x.unwrap(), y.unwrap(), w.unwrap(), h.unwrap(), title)
        })
        .collect();
    for (i, &(x, y, w, h, title)) in boxes.iter().enumerate() {
        assert!(w > 0 && h > 0 && x + w <= 24, "{title:?} does not fit the grid");
        for &(x2, y2, w2, h2, other) in &boxes[i + 1..] {
            let apart = x + w <= x2 || x2 + w2 <= x || y + h <= y2 || y2 + h2 <= y;
            assert!(apart, "{title:?} overlaps {other:?}");
        }
    }
}

#[test]
fn every_query_uses_the_datasource_variable() {
    let board = board();
    let vars = board["templating"]["list"].as_array().expect("templating variables");
    let var = |name: &str| vars.iter().find(|v| v["name"] == name).unwrap_or_else(|| panic!("no ${name} variable"));
    let datasource = var("datasource");
    assert_eq!(datasource["type"], "datasource");
    assert_eq!(datasource["query"], "prometheus", "a picker of Prometheus data sources");
    // Its default is the data source the provisioning creates.
    let default = datasource["current"]["value"].as_str().unwrap();
    let provisioned = read("deploy/grafana/provisioning/datasources/prometheus.yml");
    assert!(provisioned.contains(&format!("uid: {default}\n")), "no provisioned data source {default}");
    assert!(provisioned.contains("type: prometheus\n") && provisioned.contains("url: http://prometheus:9090\n"));

    let kind = var("kind");
    assert_eq!(kind["type"], "query");
    assert_eq!(kind["datasource"]["uid"], "${datasource}");
    assert_eq!(kind["definition"], "label_values(context_ops_operations_submitted_total, kind)");
    assert_eq!(kind["includeAll"], true);

    let on_variable = |v: &Value| v["type"] == "prometheus" && v["uid"] == "${datasource}";
    let mut queries = 0;
    for panel in panels(&board).into_iter().filter(|p| p["type"] != "row") {
        let title = &panel["title"];
        assert!(on_variable(&panel["datasource"]), "panel {title} queries {}", panel["datasource"]);
        let targets = panel["targets"].as_array().unwrap_or_else(|| panic!("panel {title} has no queries"));
        assert!(!targets.is_empty(), "panel {title} has no queries");
        for target in targets {
            assert!(on_variable(&target["datasource"]), "a query of {title} uses {}", target["datasource"]);
            let expr = target["expr"].as_str().unwrap_or_default();
            assert!(expr.contains("context_ops_") || expr.contains("ALERTS{"), "{title}: {expr:?}");
            queries += 1;
        }
    }
    assert!(queries >= 30, "{queries} queries");
}

/// Every query expression of the dashboard (panels and variables).
pub fn expressions(board: &Value) -> Vec<String> {
    let mut exprs: Vec<String> = panels(board)
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str().map(str::to_string))
        .collect();
    for var in board["templating"]["list"].as_array().into_iter().flatten() {
        exprs.extend(var["definition"].as_str().map(str::to_string));
    }
    exprs
}
