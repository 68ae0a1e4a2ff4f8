//! k8s/monitoring/ kept honest: the alert rules pass `promtool check rules` and their
//! `promtool test rules` cases (which do fail when a rule is broken), the PrometheusRule holds the
//! same groups as the plain rules file, every alert has its runbook entry in docs/alerts.md, and
//! the rules and the Grafana dashboard use only metric names that a real Envoy with the module
//! exports on `/stats/prometheus`. Each kit's `alerts` component: the same rules with the
//! thresholds that follow the kit's `drain_timeout`, and its own `promtool test rules` cases.

use crate::common;

use common::clients;
use common::envoy::{Envoy, Options, TempDir};
use common::json::{config_yaml, duration, module_settings};
use common::repo_root;
use common::tools::{kustomize, promtool, relative, yaml};
use std::collections::BTreeSet;

const RULES: &str = "k8s/monitoring/graceful-drain-rules.yaml";
const RULE_TESTS: &str = "k8s/monitoring/graceful-drain-rules.test.yaml";
const OPERATOR_RULES: &str = "k8s/monitoring/prometheusrule.yaml";
const DASHBOARD: &str = "k8s/monitoring/grafana-dashboard.json";

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo_root().join(rel)).unwrap()
}

/// Every rule of a rules file's `groups`.
fn rules(groups: &serde_json::Value) -> Vec<serde_json::Value> {
    groups
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").clone())
        .collect()
}

#[test]
fn rules_pass_promtool_check_and_their_tests() {
    let (ok, out) = promtool(&["check", "rules", RULES], &repo_root());
    assert!(ok && out.contains("SUCCESS: 8 rules found"), "{out}");
    let (ok, out) = promtool(&["test", "rules", RULE_TESTS], &repo_root());
    assert!(ok && out.contains("SUCCESS"), "{out}");
    // Every alert is tested.
    let tests = read(RULE_TESTS);
    for r in rules(&yaml(&read(RULES))["groups"]) {
        let name = r["alert"].as_str().expect("alerting rules only");
        assert!(
            tests.contains(&format!("alertname: {name}")),
            "{name} has no promtool test case"
        );
    }
    // The cases catch a broken rule: the same tests against rules with a wrong threshold and a
    // wrong `for` fail.
    let dir = TempDir::new("promtool");
    let broken = read(RULES)
        .replace(
            "envoy_graceful_drain_admin_address_ok == 0",
            "envoy_graceful_drain_admin_address_ok == 1",
        )
        .replace("for: 2m", "for: 10m")
        .replace(
            "envoy_graceful_drain_envoy_untested == 1",
            "envoy_graceful_drain_envoy_untested == 0",
        );
    std::fs::write(dir.0.join("graceful-drain-rules.yaml"), broken).unwrap();
    std::fs::write(
        dir.0.join("graceful-drain-rules.test.yaml"),
        read(RULE_TESTS),
    )
    .unwrap();
    let (ok, out) = promtool(&["test", "rules", "graceful-drain-rules.test.yaml"], &dir.0);
    assert!(
        !ok && out.contains("GracefulDrainAdminAddressNotOk")
            && out.contains("GracefulDrainTooLong")
            && out.contains("GracefulDrainEnvoyUntested"),
        "broken rules passed their tests:\n{out}"
    );
}

#[test]
fn prometheus_rule_holds_the_same_groups() {
    let plain = yaml(&read(RULES));
    let operator = yaml(&read(OPERATOR_RULES));
    assert_eq!(operator["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(operator["kind"], "PrometheusRule");
    assert!(operator["metadata"]["name"].is_string());
    assert_eq!(
        operator["spec"]["groups"], plain["groups"],
        "{OPERATOR_RULES} and {RULES} differ: change both"
    );
}

#[test]
fn every_alert_has_a_runbook_entry() {
    let runbook = read("docs/alerts.md");
    for r in rules(&yaml(&read(RULES))["groups"]) {
        let name = r["alert"].as_str().unwrap();
        let link = r["annotations"]["runbook"]
            .as_str()
            .expect("runbook annotation");
        // Alert names are letters only, so the heading's anchor is the name in lower case.
        assert!(name.chars().all(|c| c.is_ascii_alphabetic()), "{name}");
        assert_eq!(
            link,
            format!("docs/alerts.md#{}", name.to_lowercase()),
            "{name}: runbook annotation"
        );
        assert!(
            runbook.lines().any(|l| l == format!("## {name}")),
            "{name}: no '## {name}' in docs/alerts.md"
        );
        let section = runbook.split(&format!("## {name}\n")).nth(1).unwrap();
        let section = section.split("\n## ").next().unwrap();
        for part in ["What it means", "What to check", "What to change"] {
            assert!(section.contains(part), "{name}: runbook has no '{part}'");
        }
        assert!(
            r["annotations"]["summary"].is_string() && r["labels"]["severity"].is_string(),
            "{name}: summary and severity"
        );
    }
}

/// Metric names in a PromQL expression: identifiers that are not functions, keywords, label
/// names (in `{...}`, `by (...)` and the like) or Grafana variables.
fn metric_names(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: [&str; 6] = ["and", "or", "unless", "bool", "offset", "inf"];
    const LABEL_LISTS: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    // Blank out strings, label matchers and ranges (strings may hold braces).
    let mut text: Vec<char> = Vec::new();
    let mut open: Vec<char> = Vec::new();
    for c in expr.chars() {
        let keep = match (open.last(), c) {
            (Some('"'), '"') | (Some('}'), '}') | (Some(']'), ']') => {
                open.pop();
                false
            }
            (Some('"'), _) => false,
            (_, '"') => {
                open.push('"');
                false
            }
            (_, '{') => {
                open.push('}');
                false
            }
            (_, '[') => {
                open.push(']');
                false
            }
            (top, _) => top.is_none(),
        };
        text.push(if keep { c } else { ' ' });
    }
    let is_ident = |c: char| c.is_alphanumeric() || c == '_' || c == ':' || c == '$';
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < text.len() {
        if !is_ident(text[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < text.len() && is_ident(text[i]) {
            i += 1;
        }
        let token: String = text[start..i].iter().collect();
        let mut next = i;
        while next < text.len() && text[next] == ' ' {
            next += 1;
        }
        let rest: String = text[next..].iter().take(8).collect();
        let call = text.get(next) == Some(&'(')
            || rest.starts_with("by ")
            || rest.starts_with("by(")
            || rest.starts_with("without");
        if LABEL_LISTS.contains(&token.as_str()) {
            if call {
                // Skip the label list.
                while i < text.len() && text[i] != ')' {
                    i += 1;
                }
            }
            continue;
        }
        let first = token.chars().next().unwrap();
        if call || first.is_ascii_digit() || first == '$' || KEYWORDS.contains(&token.as_str()) {
            continue;
        }
        names.insert(token);
    }
    names
}

#[test]
fn metric_names_are_found_in_promql() {
    let e = r#"sum by (job, instance) (increase(envoy_a{job=~"$job", x="y{z}"}[$__rate_interval])) / count(envoy_b == 0) or vector(0) and on (instance) envoy_c offset 5m"#;
    let want: BTreeSet<String> = ["envoy_a", "envoy_b", "envoy_c"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(metric_names(e), want);
    let e = "sum by (job) (envoy_a) / count without (pod) (envoy_b) > 0.5";
    assert_eq!(
        metric_names(e),
        ["envoy_a", "envoy_b"].map(String::from).into()
    );
}

/// The metric names of `/stats/prometheus` of the example gateway (the module loaded).
async fn exported_metric_names() -> BTreeSet<String> {
    let envoy = Envoy::start(Options::default()).await;
    let r = clients::get(envoy.admin, "/stats/prometheus")
        .await
        .expect("GET /stats/prometheus");
    assert_eq!(r.status, 200);
    let names: BTreeSet<String> = r
        .text()
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    assert!(
        names.contains("envoy_graceful_drain_drains_started"),
        "the module's stats are not exported:\n{}",
        r.text()
    );
    names
}

/// Every PromQL expression of the Grafana dashboard, with the panel's title.
fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    let panels = dashboard["panels"].as_array().expect("panels");
    panels
        .iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap_or("").to_string();
            p["targets"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |t| (title.clone(), t["expr"].as_str().unwrap_or("").to_string()))
        })
        .collect()
}

#[test]
fn dashboard_is_a_grafana_dashboard_with_every_panel_asked_for() {
    let d: serde_json::Value = serde_json::from_str(&read(DASHBOARD)).expect("dashboard is JSON");
    assert!(d["uid"].is_string() && d["title"].is_string());
    assert!(d["schemaVersion"].as_u64().is_some_and(|v| v >= 30));
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .expect("templating")
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(vars, ["datasource", "job", "instance"]);
    let panels = d["panels"].as_array().unwrap();
    let mut ids = BTreeSet::new();
    for p in panels {
        let title = p["title"].as_str().expect("panel title");
        assert!(
            ids.insert(p["id"].as_u64().expect("panel id")),
            "{title}: id repeats"
        );
        assert!(p["type"].is_string(), "{title}: type");
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let g = &p["gridPos"];
        let (x, w) = (g["x"].as_u64().unwrap(), g["w"].as_u64().unwrap());
        assert!(
            x + w <= 24 && g["h"].as_u64().unwrap() > 0,
            "{title}: gridPos {g}"
        );
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        for t in targets {
            let expr = t["expr"].as_str().expect("expr");
            assert!(
                expr.contains("$job") && expr.contains("$instance"),
                "{title}: {expr}"
            );
        }
    }
    // What the dashboard must show (issue 26), by the metrics that show it.
    let all: String = dashboard_queries(&d)
        .into_iter()
        .map(|(_, e)| e + "\n")
        .collect();
    for m in [
        "drains_started",
        "drains_completed",
        "drains_timed_out",
        "draining",
        "active_requests",
        "connections_sent_away_http1",
        "connections_sent_away_http2",
        "connections_sent_away_other",
        "idle_connections_told_http1",
        "idle_connections_told_http2",
        "module_errors",
        "admin_address_ok",
        "requests_served_while_draining",
    ] {
        assert!(
            all.contains(&format!("envoy_graceful_drain_{m}{{")),
            "dashboard lacks {m}"
        );
    }
    // Every query parses: promtool checks them as recording rules, Grafana's variables set.
    let mut rules = String::from("groups:\n- name: dashboard\n  rules:\n");
    for (i, (_, e)) in dashboard_queries(&d).iter().enumerate() {
        let e = e
            .replace("$__rate_interval", "1m")
            .replace("$__range", "1h")
            .replace("$job", ".*")
            .replace("$instance", ".*");
        rules.push_str(&format!(
            "  - record: dashboard:query{i}\n    expr: {}\n",
            serde_json::Value::String(e)
        ));
    }
    let dir = TempDir::new("dashboard");
    std::fs::write(dir.0.join("queries.yaml"), rules).unwrap();
    let (ok, out) = promtool(&["check", "rules", "queries.yaml"], &dir.0);
    assert!(ok, "a dashboard query does not parse:\n{out}");
}

#[tokio::test]
async fn rules_and_dashboard_use_only_metrics_envoy_exports() {
    let exported = exported_metric_names().await;
    let mut used = Vec::new();
    for r in rules(&yaml(&read(RULES))["groups"]) {
        used.push((
            format!("{RULES}: {}", r["alert"].as_str().unwrap()),
            r["expr"].as_str().unwrap().to_string(),
        ));
    }
    let d: serde_json::Value = serde_json::from_str(&read(DASHBOARD)).unwrap();
    for (title, expr) in dashboard_queries(&d) {
        used.push((format!("{DASHBOARD}: {title}"), expr));
    }
    for v in d["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["query"]["query"].as_str() {
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|q| q.split(',').next())
                .expect("label_values(metric, label)");
            used.push((
                format!("{DASHBOARD}: variable {}", v["name"]),
                inner.to_string(),
            ));
        }
    }
    // A misspelt name is caught: the set is what Envoy exports, no more.
    assert!(!exported.contains("envoy_graceful_drain_drain_started"));
    for (what, expr) in used {
        let names = metric_names(&expr);
        assert!(!names.is_empty(), "{what}: no metric in {expr}");
        for n in names {
            assert!(
                exported.contains(&n),
                "{what}: {n} is not exported by Envoy with the module ({expr})"
            );
        }
    }
}

/// A kit's `drain_timeout`, from the bootstrap pieces it gives Envoy.
fn kit_drain_timeout(kit: &str) -> std::time::Duration {
    let pieces = if kit == "envoy-gateway" {
        let ep = yaml(&read("k8s/envoy-gateway/envoyproxy.yaml"));
        yaml(ep["spec"]["bootstrap"]["value"].as_str().unwrap())
    } else {
        // The values of the JSON patch's operations: --config-yaml and its value among them.
        let ops = yaml(&read(&format!("k8s/{kit}/graceful-drain/envoy-args.yaml")));
        let values: Vec<String> = ops
            .as_array()
            .unwrap()
            .iter()
            .map(|op| op["value"].as_str().unwrap_or_default().to_string())
            .collect();
        config_yaml(&values)
    };
    duration(&module_settings(&pieces)["drain_timeout"])
}

/// Each kit's `alerts` component renders the PrometheusRule of k8s/monitoring with
/// GracefulDrainTooLong's `for` at the kit's drain_timeout plus 90 s (teardown, a scrape and an
/// evaluation), rounded up to the minute, and nothing else changed but names; its cases pass on
/// the rendered rules and fail on the default ones where the thresholds differ.
#[test]
fn each_kit_s_alerts_follow_its_drain_timeout() {
    let plain = yaml(&read(RULES));
    for kit in ["kourier", "contour", "envoy-gateway"] {
        let dir = TempDir::new("kit-alerts");
        let component = repo_root().join(format!("k8s/{kit}/alerts"));
        std::fs::write(
            dir.0.join("kustomization.yaml"),
            format!("components:\n- {}\n", relative(&dir.0, &component)),
        )
        .unwrap();
        let rule: serde_json::Value = yaml(&kustomize(&dir.0));
        assert_eq!(rule["kind"], "PrometheusRule", "{kit}");
        assert_eq!(rule["metadata"]["name"], format!("graceful-drain-{kit}"));
        let timeout = kit_drain_timeout(kit);
        let minutes = (timeout.as_secs() + 90).div_ceil(60);
        let mut groups = rule["spec"]["groups"].clone();
        let too_long = groups[0]["rules"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|r| r["alert"] == "GracefulDrainTooLong")
            .unwrap();
        assert_eq!(
            too_long["for"],
            format!("{minutes}m"),
            "{kit}: drain_timeout {timeout:?}"
        );
        // Everything else is the default rules'.
        let default = rules(&plain["groups"])
            .into_iter()
            .find(|r| r["alert"] == "GracefulDrainTooLong")
            .unwrap();
        let mut same = too_long.clone();
        for f in ["for", "annotations"] {
            same[f] = default[f].clone();
        }
        assert_eq!(
            same["annotations"]["runbook"],
            too_long["annotations"]["runbook"]
        );
        *too_long = same;
        assert_eq!(groups, plain["groups"], "{kit}: other rules changed");

        // Its promtool cases, on the rendered rules.
        let tests = format!("k8s/{kit}/alerts/graceful-drain-rules.test.yaml");
        let doc = serde_json::json!({"groups": rule["spec"]["groups"]});
        std::fs::write(dir.0.join("graceful-drain-rules.yaml"), doc.to_string()).unwrap();
        std::fs::write(dir.0.join("graceful-drain-rules.test.yaml"), read(&tests)).unwrap();
        let (ok, out) = promtool(&["test", "rules", "graceful-drain-rules.test.yaml"], &dir.0);
        assert!(ok && out.contains("SUCCESS"), "{kit}: {out}");
        assert!(read(&tests).contains("alertname: GracefulDrainTooLong"));
        // The cases catch a `for` that does not follow the drain_timeout: a minute shorter or
        // longer fails them.
        for wrong in [minutes - 1, minutes + 1] {
            let mut doc = doc.clone();
            for r in doc["groups"][0]["rules"].as_array_mut().unwrap() {
                if r["alert"] == "GracefulDrainTooLong" {
                    r["for"] = serde_json::json!(format!("{wrong}m"));
                }
            }
            std::fs::write(dir.0.join("graceful-drain-rules.yaml"), doc.to_string()).unwrap();
            let (ok, out) = promtool(&["test", "rules", "graceful-drain-rules.test.yaml"], &dir.0);
            assert!(!ok, "{kit}: its cases pass with `for` {wrong}m:\n{out}");
        }
    }
}
