//! The Grafana dashboard and the alerting rules the operator chart ships
//! (`helm/slurm-operator/files/`) query only metrics the operator exports, and docs/metrics.md
//! lists every one it exports. The exported names come from the operator's own registry (what
//! `/metrics` serves: each family's `# TYPE` line, with the sample suffixes of its type), not
//! from a copy kept here, so renaming a metric fails this test until the queries follow.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;
use slurm_operator::metrics::Metrics;

fn chart_file(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("helm/slurm-operator/files")
        .join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every series name a query may use, and the family names (as `# TYPE` gives them), from the
/// text the operator serves on `/metrics`.
fn exported() -> (BTreeSet<String>, BTreeSet<String>) {
    let text = Metrics::new().encode().unwrap();
    let mut series = BTreeSet::new();
    let mut families = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_count", "_sum"],
            "info" => &["_info"],
            "gauge" | "unknown" => &[""],
            other => panic!("{name}: a metric type this test does not know: {other}"),
        };
        for suffix in suffixes {
            series.insert(format!("{name}{suffix}"));
        }
        // As docs name them: counters with `_total`, histograms by their base name.
        let family_suffix = if kind == "histogram" { "" } else { suffixes[0] };
        families.insert(format!("{name}{family_suffix}"));
    }
    assert!(
        series.len() > 10,
        "the registry exports almost nothing:\n{text}"
    );
    (series, families)
}

/// PromQL words that are neither metric nor function names.
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
    "Inf",
    "NaN",
];

/// `text` with every span from an `open` to its matching `close` replaced by a space.
fn strip_nested(text: &str, open: char, close: char) -> String {
    let mut out = String::with_capacity(text.len());
    let mut depth = 0usize;
    for c in text.chars() {
        if c == open {
            depth += 1;
        } else if c == close && depth > 0 {
            depth -= 1;
            if depth == 0 {
                out.push(' ');
            }
        } else if depth == 0 {
            out.push(c);
        }
    }
    out
}

/// The metric names a PromQL expression (with Grafana's `$variables`) reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    // Grafana's label_values(metric, label): the label is not a metric.
    let expr = match expr.trim().strip_prefix("label_values(") {
        Some(inner) => inner
            .rsplit_once(',')
            .map_or(inner, |(metric, _)| metric)
            .to_owned(),
        None => expr.to_owned(),
    };
    // String literals, then label matchers and ranges (which hold the literals' braces no more).
    let mut unquoted = String::new();
    let mut quote = None;
    for c in expr.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if matches!(c, '"' | '\'' | '`') => quote = Some(c),
            None => unquoted.push(c),
        }
    }
    let bare = strip_nested(&strip_nested(&unquoted, '{', '}'), '[', ']');

    let chars: Vec<char> = bare.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    // After a grouping keyword, the parenthesised list holds label names.
    let mut labels_next = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '$' {
            // A Grafana variable: $name or ${name}.
            i += 1;
            while i < chars.len() && (chars[i].is_alphanumeric() || "_{}".contains(chars[i])) {
                i += 1;
            }
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            // A number or a duration (1e3, 0.5, 5m): letters in it are not names.
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            // A function call, or an aggregation with its grouping first: `sum by (x) (...)`.
            let rest: String = chars[next..].iter().take(8).collect();
            let call = chars.get(next) == Some(&'(')
                || ["by", "without"].iter().any(|m| {
                    rest.strip_prefix(m)
                        .is_some_and(|r| r.starts_with(|c: char| c == '(' || c.is_whitespace()))
                });
            if matches!(
                word.as_str(),
                "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
            ) {
                labels_next = call;
            } else if !call && !KEYWORDS.contains(&word.as_str()) {
                names.insert(word);
            }
        } else if c == '(' && labels_next {
            // Skip the label list.
            while i < chars.len() && chars[i] != ')' {
                i += 1;
            }
            labels_next = false;
            i += 1;
        } else {
            i += 1;
        }
    }
    names
}

/// Every `expr` and templating `query` in the dashboard, with where it is.
fn dashboard_queries(value: &Value, at: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                let here = format!("{at}.{key}");
                match (key.as_str(), value) {
                    ("expr", Value::String(expr)) => out.push((here, expr.clone())),
                    ("query", Value::String(query)) if at.contains("templating") => {
                        // The datasource variable's query is a plugin type, not PromQL.
                        if map.get("type").and_then(Value::as_str) == Some("query") {
                            out.push((here, query.clone()));
                        }
                    }
                    ("query", Value::Object(inner)) => {
                        if let Some(Value::String(query)) = inner.get("query") {
                            out.push((format!("{here}.query"), query.clone()));
                        }
                    }
                    _ => dashboard_queries(value, &here, out),
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                dashboard_queries(item, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// The queries' unknown names, as `where: name` lines.
fn unknown(queries: &[(String, String)], exported: &BTreeSet<String>) -> Vec<String> {
    let mut bad = Vec::new();
    for (at, expr) in queries {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{at}: no metric found in {expr:?}");
        bad.extend(
            names
                .difference(exported)
                .map(|name| format!("{at}: {name} (in {expr:?})")),
        );
    }
    bad
}

#[test]
fn the_promql_reader_finds_metric_names_and_nothing_else() {
    let expr = r#"sum by (cluster, le) (rate(slurm_operator_x_bucket{code!="2xx", op=~"a{1}|[b]"}[$__rate_interval] offset 5m))
        / on (cluster) group_left (phase) max without (kind) (other:recorded) > 1e3 and bool ${var} unless absent(up)"#;
    assert_eq!(
        metric_names(expr),
        BTreeSet::from([
            "slurm_operator_x_bucket".into(),
            "other:recorded".into(),
            "up".into()
        ])
    );
    assert_eq!(
        metric_names("label_values(slurm_operator_cluster_up{x=\"y\"}, cluster)"),
        BTreeSet::from(["slurm_operator_cluster_up".into()])
    );
    // A misspelt name is reported.
    let (exported, _) = exported();
    let queries = [(
        "q".to_owned(),
        "rate(slurm_operator_pol_errors_total[5m])".to_owned(),
    )];
    assert_eq!(
        unknown(&queries, &exported),
        ["q: slurm_operator_pol_errors_total (in \"rate(slurm_operator_pol_errors_total[5m])\")"]
    );
}

#[test]
fn the_dashboard_queries_only_exported_metrics() {
    let (exported, _) = exported();
    let dashboard: Value =
        serde_json::from_str(&chart_file("dashboards/slurm-operator.json")).unwrap();
    let mut queries = Vec::new();
    dashboard_queries(&dashboard, "", &mut queries);
    assert!(queries.len() >= 10, "only {} queries found", queries.len());
    let bad = unknown(&queries, &exported);
    assert!(
        bad.is_empty(),
        "not exported by the operator:\n{}",
        bad.join("\n")
    );
    // The gauges an HPC admin looks for first are on it.
    let used: BTreeSet<String> = queries.iter().flat_map(|(_, q)| metric_names(q)).collect();
    for gauge in [
        "slurm_operator_cluster_up",
        "slurm_operator_cluster_api_version_info",
        "slurm_operator_slurmjobs",
        "slurm_operator_slurmjobs_pending",
        "slurm_operator_nodeset_nodes",
        "slurm_operator_leader",
    ] {
        assert!(used.contains(gauge), "the dashboard does not show {gauge}");
    }
}

#[test]
fn the_alerts_query_only_exported_metrics() {
    let (exported, _) = exported();
    let rules: Value = serde_yaml_ng::from_str(&chart_file("prometheus-rules.yaml")).unwrap();
    let mut queries = Vec::new();
    let mut alerts = BTreeSet::new();
    for group in rules["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let name = rule["alert"].as_str().unwrap().to_owned();
            queries.push((name.clone(), rule["expr"].as_str().unwrap().to_owned()));
            alerts.insert(name);
        }
    }
    for alert in [
        "SlurmClusterDown",
        "SlurmSubmitsFailing",
        "SlurmNodeSetDrainStuck",
        "SlurmPollErrors",
        "SlurmJobRecordsUnreadable",
    ] {
        assert!(alerts.contains(alert), "no {alert} alert in {alerts:?}");
    }
    let bad = unknown(&queries, &exported);
    assert!(
        bad.is_empty(),
        "not exported by the operator:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_metrics_doc_lists_every_exported_metric() {
    let (_, families) = exported();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/metrics.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let missing: Vec<_> = families
        .iter()
        .filter(|name| !doc.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/metrics.md does not list {missing:?}"
    );
}
