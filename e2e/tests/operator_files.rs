//! The operator files of `doc/examples/`: the Prometheus alert rules pass
//! `promtool check rules`, their unit tests (`preread-alerts.test.yml`)
//! pass `promtool test rules` and fail when a rule is broken, every alert is
//! tested both firing and quiet and has its section in `doc/monitoring.md`,
//! and the rules and the Grafana dashboard query only the families that
//! `doc/configure.md` lists as served by `GET /metrics`.
//!
//! `promtool` is installed from Debian's `prometheus` when missing; the
//! tests never skip. The families come from the reference's table rows
//! whose first cell is a backticked `preread_…` name, so a dashboard query
//! of a family that was renamed or never served fails here, not on an
//! operator's screen.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use e2e::promql::{series_names, variable_query_series};
use e2e::testkit::TempDir;
use e2e::tools::{require_tool, run};
use serde_json::Value as Json;
use serde_yaml_ng::Value as Yaml;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const T: Duration = Duration::from_secs(60);
const RULES: &str = "doc/examples/preread-alerts.yml";
const RULE_TESTS: &str = "doc/examples/preread-alerts.test.yml";
const DASHBOARD: &str = "doc/examples/preread-grafana.json";
const REFERENCE: &str = "doc/configure.md";
const MONITORING: &str = "doc/monitoring.md";

/// Series the rules may read besides preread's: Prometheus writes `up` for
/// every scrape target itself.
const PROMETHEUS_OWN: &[&str] = &["up"];

fn path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative)
}

fn read(relative: &str) -> Result<String, String> {
    std::fs::read_to_string(path(relative)).map_err(|e| format!("{relative}: {e}"))
}

/// The families served: name → whether it is a histogram.
type Families = BTreeMap<String, bool>;

/// The rows of markdown tables whose first cell starts with a backticked
/// `preread_…` name (a cell may list several), with whether the row's
/// second cell (the type) says `histogram`.
fn families_of(markdown: &str) -> Families {
    let mut families = Families::new();
    for line in markdown.lines() {
        let Some(row) = line.trim().strip_prefix('|') else {
            continue;
        };
        let mut cells = row.split('|');
        let (Some(first), Some(kind)) = (cells.next(), cells.next()) else {
            continue;
        };
        if !first.trim().starts_with("`preread_") {
            continue;
        }
        for name in first.split('`').skip(1).step_by(2) {
            let is_name = name.starts_with("preread_")
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if is_name {
                families.insert(name.to_owned(), kind.contains("histogram"));
            }
        }
    }
    families
}

fn served_families() -> Result<Families, String> {
    let families = families_of(&read(REFERENCE)?);
    if families.is_empty() {
        return Err(format!(
            "{REFERENCE} has no table row of Prometheus families (a first cell like \
             `preread_backend_up`)"
        ));
    }
    Ok(families)
}

/// Whether a query may read `name`: a counter or gauge family as it is, a
/// histogram through its `_bucket`, `_sum` and `_count` series (the bare
/// family name is no series), or one of `also`.
fn is_served(name: &str, families: &Families, also: &[&str]) -> bool {
    if also.contains(&name) {
        return true;
    }
    match families.get(name) {
        Some(&histogram) => !histogram,
        None => ["_bucket", "_sum", "_count"].iter().any(|suffix| {
            name.strip_suffix(suffix)
                .is_some_and(|base| families.get(base) == Some(&true))
        }),
    }
}

/// What is wrong with the series `expr` reads, one line each; `what` says
/// where the expression is.
fn unserved(what: &str, expr: &str, families: &Families, also: &[&str]) -> Vec<String> {
    match series_names(expr) {
        Ok(names) if names.is_empty() => vec![format!("{what} reads no series: {expr}")],
        Ok(names) => names
            .into_iter()
            .filter(|name| !is_served(name, families, also))
            .map(|name| format!("{what} reads {name}, which {REFERENCE} does not list"))
            .collect(),
        Err(err) => vec![format!("{what}: {err}: {expr}")],
    }
}

struct Rule {
    alert: String,
    expr: String,
    severity: String,
    annotations: BTreeMap<String, String>,
}

fn str_at<'a>(value: &'a Yaml, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Yaml::as_str)
}

fn rules() -> Result<Vec<Rule>, Box<dyn std::error::Error>> {
    let file: Yaml = serde_yaml_ng::from_str(&read(RULES)?)?;
    let mut rules = Vec::new();
    let groups = file
        .get("groups")
        .and_then(Yaml::as_sequence)
        .ok_or("the rule file has no groups")?;
    for group in groups {
        let group_rules = group
            .get("rules")
            .and_then(Yaml::as_sequence)
            .ok_or("a group has no rules")?;
        for rule in group_rules {
            let alert = str_at(rule, "alert").ok_or("a rule that is no alert")?;
            let annotations = rule
                .get("annotations")
                .and_then(Yaml::as_mapping)
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), v.as_str()?.to_owned())))
                .collect();
            rules.push(Rule {
                alert: alert.to_owned(),
                expr: str_at(rule, "expr")
                    .ok_or("an alert without expr")?
                    .to_owned(),
                severity: rule
                    .get("labels")
                    .and_then(|labels| str_at(labels, "severity"))
                    .unwrap_or_default()
                    .to_owned(),
                annotations,
            });
        }
    }
    Ok(rules)
}

#[test]
fn promtool_checks_the_shipped_rules() -> TestResult {
    let promtool = require_tool("promtool", "prometheus");
    let dir = TempDir::new("rules");
    let rules_path = path(RULES).display().to_string();
    let ran = run(&promtool, &["check", "rules", &rules_path], dir.path(), T)?;
    assert!(ran.status.success(), "{}", ran.both());
    let count = rules()?.len();
    assert!(
        ran.stdout
            .contains(&format!("SUCCESS: {count} rules found")),
        "{}",
        ran.both()
    );

    // The check is real: an expression cut short is refused.
    let broken = read(RULES)?.replacen(
        "expr: preread_backend_up == 0",
        "expr: preread_backend_up ==",
        1,
    );
    let copy = dir.path().join("broken.yml");
    std::fs::write(&copy, broken)?;
    let ran = run(
        &promtool,
        &["check", "rules", &copy.display().to_string()],
        dir.path(),
        T,
    )?;
    assert!(!ran.status.success(), "{}", ran.both());
    assert!(ran.both().contains("PrereadBackendDown"), "{}", ran.both());
    Ok(())
}

#[test]
fn promtool_runs_the_rule_unit_tests_and_they_catch_a_broken_rule() -> TestResult {
    let promtool = require_tool("promtool", "prometheus");
    let dir = TempDir::new("rule-tests");
    let tests_path = path(RULE_TESTS).display().to_string();
    let ran = run(&promtool, &["test", "rules", &tests_path], dir.path(), T)?;
    assert!(ran.status.success(), "{}", ran.both());
    assert!(ran.both().contains("SUCCESS"), "{}", ran.both());

    // A backend down for 1m must page: waiting 5m fails the tests.
    let slower = read(RULES)?.replacen("for: 1m", "for: 5m", 1);
    std::fs::write(dir.path().join("preread-alerts.yml"), slower)?;
    std::fs::write(
        dir.path().join("preread-alerts.test.yml"),
        read(RULE_TESTS)?,
    )?;
    let ran = run(
        &promtool,
        &["test", "rules", "preread-alerts.test.yml"],
        dir.path(),
        T,
    )?;
    assert!(!ran.status.success(), "{}", ran.both());
    assert!(
        ran.both().contains("alertname: PrereadBackendDown"),
        "{}",
        ran.both()
    );
    Ok(())
}

#[test]
fn every_alert_is_tested_firing_and_quiet() -> TestResult {
    let tests: Yaml = serde_yaml_ng::from_str(&read(RULE_TESTS)?)?;
    let files = tests
        .get("rule_files")
        .and_then(Yaml::as_sequence)
        .ok_or("no rule_files")?;
    assert_eq!(files.len(), 1, "the unit tests load one rule file");
    assert_eq!(files[0].as_str(), Some("preread-alerts.yml"));

    let mut fired = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for test in tests
        .get("tests")
        .and_then(Yaml::as_sequence)
        .ok_or("no tests")?
    {
        for case in test
            .get("alert_rule_test")
            .and_then(Yaml::as_sequence)
            .into_iter()
            .flatten()
        {
            let name = str_at(case, "alertname").ok_or("a case without alertname")?;
            let expected = case
                .get("exp_alerts")
                .and_then(Yaml::as_sequence)
                .map_or(0, Vec::len);
            if expected > 0 {
                fired.insert(name.to_owned());
            } else {
                quiet.insert(name.to_owned());
            }
        }
    }
    let alerts: BTreeSet<String> = rules()?.into_iter().map(|r| r.alert).collect();
    // promtool passes a quiet case of an alert that does not exist.
    let unknown: Vec<_> = fired
        .union(&quiet)
        .filter(|a| !alerts.contains(*a))
        .collect();
    assert!(unknown.is_empty(), "cases of no rule: {unknown:?}");
    let never_fired: Vec<_> = alerts.difference(&fired).collect();
    assert!(
        never_fired.is_empty(),
        "never tested firing: {never_fired:?}"
    );
    let never_quiet: Vec<_> = alerts.difference(&quiet).collect();
    assert!(
        never_quiet.is_empty(),
        "never tested quiet: {never_quiet:?}"
    );
    Ok(())
}

#[test]
fn every_alert_has_a_severity_a_description_and_a_section_in_the_monitoring_guide() -> TestResult {
    let guide = read(MONITORING)?;
    let sections: BTreeSet<&str> = guide
        .lines()
        .filter_map(|line| line.strip_prefix("### "))
        .filter(|title| title.starts_with("Preread"))
        .collect();
    let rules = rules()?;
    for rule in &rules {
        assert!(
            ["warning", "critical"].contains(&rule.severity.as_str()),
            "{}: severity {:?}",
            rule.alert,
            rule.severity
        );
        for key in ["summary", "description"] {
            assert!(
                rule.annotations
                    .get(key)
                    .is_some_and(|text| !text.is_empty()),
                "{} has no {key}",
                rule.alert
            );
        }
        assert!(
            sections.contains(rule.alert.as_str()),
            "{MONITORING} has no section `### {}`",
            rule.alert
        );
    }
    let alerts: BTreeSet<&str> = rules.iter().map(|r| r.alert.as_str()).collect();
    let stale: Vec<_> = sections.difference(&alerts).collect();
    assert!(stale.is_empty(), "{MONITORING} explains no rule: {stale:?}");
    Ok(())
}

#[test]
fn the_rules_read_only_served_families() -> TestResult {
    let families = served_families()?;
    let problems: Vec<String> = rules()?
        .iter()
        .flat_map(|rule| unserved(&rule.alert, &rule.expr, &families, PROMETHEUS_OWN))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

/// Every `expr` string anywhere under `value`, with the title of the
/// panel that holds it.
fn exprs<'a>(value: &'a Json, panel: &'a str, out: &mut Vec<(&'a str, &'a str)>) {
    match value {
        Json::Object(map) => {
            let panel = map.get("title").and_then(Json::as_str).unwrap_or(panel);
            for (key, item) in map {
                match (key.as_str(), item) {
                    ("expr", Json::String(expr)) => out.push((panel, expr)),
                    _ => exprs(item, panel, out),
                }
            }
        }
        Json::Array(items) => items.iter().for_each(|item| exprs(item, panel, out)),
        _ => {}
    }
}

/// The Grafana variables a query uses (`$name`, `${name}`).
fn variables(expr: &str) -> BTreeSet<&str> {
    expr.split('$')
        .skip(1)
        .map(|rest| {
            let rest = rest.strip_prefix('{').unwrap_or(rest);
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

/// The dashboard's panels, those inside rows included, rows left out.
fn panels(dashboard: &Json) -> Vec<&Json> {
    let mut out = Vec::new();
    let mut stack: Vec<&Json> = dashboard
        .get("panels")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
        .collect();
    while let Some(panel) = stack.pop() {
        if panel.get("type").and_then(Json::as_str) == Some("row") {
            stack.extend(
                panel
                    .get("panels")
                    .and_then(Json::as_array)
                    .into_iter()
                    .flatten(),
            );
        } else {
            out.push(panel);
        }
    }
    out
}

#[test]
fn the_dashboard_reads_only_served_families() -> TestResult {
    let families = served_families()?;
    let dashboard: Json = serde_json::from_str(&read(DASHBOARD)?)?;
    let schema = dashboard
        .get("schemaVersion")
        .and_then(Json::as_u64)
        .unwrap_or(0);
    assert!(schema >= 36, "schemaVersion {schema}");

    let vars: Vec<&Json> = dashboard
        .pointer("/templating/list")
        .and_then(Json::as_array)
        .ok_or("no templating list")?
        .iter()
        .collect();
    let var = |name: &str| {
        vars.iter()
            .find(|v| v.get("name").and_then(Json::as_str) == Some(name))
            .copied()
    };
    let datasource = var("datasource").ok_or("no datasource variable")?;
    assert_eq!(datasource["type"], "datasource");
    assert_eq!(datasource["query"], "prometheus");

    let mut problems = Vec::new();
    let mut defined = BTreeSet::from(["__rate_interval", "__interval", "__range"]);
    for v in &vars {
        let name = v
            .get("name")
            .and_then(Json::as_str)
            .ok_or("a nameless variable")?;
        defined.insert(name);
        if v.get("type").and_then(Json::as_str) != Some("query") {
            continue;
        }
        let query = v
            .get("query")
            .and_then(|q| q.as_str().or_else(|| q.get("query")?.as_str()))
            .ok_or("a query variable without its query")?;
        assert_eq!(
            v.get("definition").and_then(Json::as_str),
            Some(query),
            "variable {name}: the definition Grafana shows is the query it runs"
        );
        if ["listener", "cluster"].contains(&name) {
            assert!(
                query.starts_with("label_values("),
                "variable {name}: {query}"
            );
        }
        match variable_query_series(query) {
            Ok(names) => problems.extend(
                names
                    .into_iter()
                    .filter(|n| !is_served(n, &families, &[]))
                    .map(|n| format!("variable {name} reads {n}, which {REFERENCE} does not list")),
            ),
            Err(err) => problems.push(format!("variable {name}: {err}")),
        }
    }
    for name in ["listener", "cluster"] {
        assert!(var(name).is_some(), "no {name} variable");
    }

    let panels = panels(&dashboard);
    assert!(panels.len() >= 15, "{} panels", panels.len());
    let mut all = Vec::new();
    for panel in &panels {
        let title = panel.get("title").and_then(Json::as_str).unwrap_or("?");
        assert_eq!(
            panel.pointer("/datasource/uid").and_then(Json::as_str),
            Some("${datasource}"),
            "panel {title} uses the datasource variable"
        );
        for target in panel
            .get("targets")
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
        {
            assert_eq!(
                target.pointer("/datasource/uid").and_then(Json::as_str),
                Some("${datasource}"),
                "a query of panel {title} uses the datasource variable"
            );
        }
        let before = all.len();
        exprs(panel, title, &mut all);
        assert!(all.len() > before, "panel {title} has no query");
    }
    for (title, expr) in &all {
        problems.extend(unserved(&format!("panel {title}"), expr, &families, &[]));
        for name in variables(expr) {
            if !defined.contains(name) {
                problems.push(format!(
                    "panel {title} uses ${name}, which is not a variable"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

#[test]
fn a_query_of_a_family_that_is_not_served_is_caught() {
    let families = families_of(
        "| family | type |\n|---|---|\n\
         | `preread_a_total` | counter |\n\
         | `preread_h_seconds` | histogram |\n\
         | `preread_g`, `preread_k_total` | gauge, counter |\n\
         | `tcp.accepted` | counter |\n",
    );
    assert_eq!(
        families.keys().collect::<Vec<_>>(),
        [
            "preread_a_total",
            "preread_g",
            "preread_h_seconds",
            "preread_k_total"
        ]
    );
    let ok = "histogram_quantile(0.9, sum by (le) (rate(preread_h_seconds_bucket[5m]))) \
              + rate(preread_h_seconds_sum[5m]) / rate(preread_h_seconds_count[5m]) \
              + sum(preread_g) + rate(preread_a_total[1m]) + rate(preread_k_total[1m])";
    assert_eq!(unserved("ok", ok, &families, &[]), Vec::<String>::new());
    for (expr, name) in [
        ("rate(preread_b_total[5m])", "preread_b_total"),
        ("rate(preread_h_seconds[5m])", "preread_h_seconds"),
        ("preread_a_total_bucket", "preread_a_total_bucket"),
        ("up == 0", "up"),
    ] {
        assert_eq!(
            unserved("q", expr, &families, &[]),
            [format!("q reads {name}, which {REFERENCE} does not list")]
        );
    }
    assert!(unserved("q", "up == 0", &families, PROMETHEUS_OWN).is_empty());
    assert_eq!(
        unserved("q", "vector(1)", &families, &[]),
        ["q reads no series: vector(1)"]
    );
}
