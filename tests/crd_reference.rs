//! docs/reference/crds.md is generated from the CRDs in crds/ (themselves generated from
//! src/crd/ and stale-checked by `committed_crds_are_current` and hack/gen-crds.sh): this test
//! fails while the committed reference differs from what crds/ gives, and rewrites it with
//! `UPDATE_CRD_REFERENCE=1 cargo test --test crd_reference`.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

const REFERENCE: &str = "docs/reference/crds.md";

/// One line of Markdown table text: no newlines, no unescaped pipes.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn type_of(schema: &Value) -> String {
    let base = match schema.get("type").and_then(Value::as_str) {
        Some("array") => {
            let item = schema.get("items").map(type_of).unwrap_or_default();
            format!("[]{item}")
        }
        Some("object") if schema.get("properties").is_none() => {
            match schema.get("additionalProperties") {
                Some(v @ Value::Object(_)) => format!("map[string]{}", type_of(v)),
                _ => "object".into(),
            }
        }
        Some(t) => t.to_owned(),
        None if schema.get("x-kubernetes-int-or-string").is_some() => "int-or-string".into(),
        None if schema.get("x-kubernetes-preserve-unknown-fields").is_some() => "any".into(),
        None => "any".into(),
    };
    match schema.get("format").and_then(Value::as_str) {
        Some(format) => format!("{base} ({format})"),
        None => base,
    }
}

/// The rows of `schema` (at `path`), depth first, in the CRD's own property order.
fn rows(schema: &Value, path: &str, required: bool, out: &mut String) {
    if !path.is_empty() {
        let mut notes = Vec::new();
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            let values: Vec<String> = values
                .iter()
                .map(|v| {
                    format!(
                        "`{}`",
                        v.as_str().map_or_else(|| v.to_string(), str::to_owned)
                    )
                })
                .collect();
            notes.push(format!("One of {}.", values.join(", ")));
        }
        if let Some(default) = schema.get("default") {
            notes.push(format!("Default `{default}`."));
        }
        for (key, what) in [
            ("minimum", "Minimum"),
            ("maximum", "Maximum"),
            ("maxLength", "At most"),
            ("maxItems", "At most"),
        ] {
            if let Some(v) = schema.get(key) {
                let unit = match key {
                    "maxLength" => " characters",
                    "maxItems" => " items",
                    _ => "",
                };
                notes.push(format!("{what} {v}{unit}."));
            }
        }
        if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
            notes.push(format!("Pattern `{pattern}`."));
        }
        for rule in schema
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let message = rule.get("message").and_then(Value::as_str).unwrap_or("");
            let text = rule.get("rule").and_then(Value::as_str).unwrap_or("");
            notes.push(format!(
                "Rule `{text}`{}.",
                if message.is_empty() {
                    String::new()
                } else {
                    format!(": {}", message.trim_end_matches('.'))
                }
            ));
        }
        let description = schema
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("");
        let text = [description.to_owned(), notes.join(" ")]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        writeln!(
            out,
            "| `{path}` | {} | {} | {} |",
            cell(&type_of(schema)),
            if required { "yes" } else { "" },
            cell(&text)
        )
        .unwrap();
    }
    // A standard Pod template (SlurmNodeSet spec.template): `kubectl explain pod` documents it,
    // and its hundreds of rows would bury the fields that are the operator's own.
    if path == "spec.template" {
        return;
    }
    let needed: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if let Some(Value::Object(properties)) = schema.get("properties") {
        for (name, property) in properties {
            let child = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            rows(property, &child, needed.contains(&name.as_str()), out);
        }
    }
    if let Some(items) = schema
        .get("items")
        .filter(|i| i.get("properties").is_some())
    {
        rows(items, &format!("{path}[]"), false, out);
    }
    if let Some(values) = schema
        .get("additionalProperties")
        .filter(|v| v.get("properties").is_some())
    {
        rows(values, &format!("{path}.<key>"), false, out);
    }
}

fn reference() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no CRDs in {}", dir.display());
    let mut out = String::from(
        "<!-- Generated from crds/ by tests/crd_reference.rs: do not edit. Regenerate with\n     \
         UPDATE_CRD_REFERENCE=1 cargo test --test crd_reference -->\n\
         # CRD reference\n\n\
         The custom resources of slurm-operator (group `slurm.rs`), field by field, from their\n\
         OpenAPI schemas in `crds/`. `Rule` lines are the CEL validations the API server enforces.\n\
         What the status conditions mean: [health.md](../health.md).\n",
    );
    let mut docs = Vec::new();
    for file in &files {
        let crd: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        docs.push(crd);
    }
    out.push('\n');
    for crd in &docs {
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap();
        writeln!(out, "- [{kind}](#{})", kind.to_lowercase()).unwrap();
    }
    for crd in &docs {
        let spec = &crd["spec"];
        let names = &spec["names"];
        let kind = names["kind"].as_str().unwrap();
        let short: Vec<&str> = names["shortNames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        for version in spec["versions"].as_array().unwrap() {
            let schema = &version["schema"]["openAPIV3Schema"];
            writeln!(out, "\n## {kind}\n").unwrap();
            writeln!(
                out,
                "`{}/{}`, {}, plural `{}`{}.\n",
                spec["group"].as_str().unwrap(),
                version["name"].as_str().unwrap(),
                if spec["scope"] == "Cluster" {
                    "cluster-scoped"
                } else {
                    "namespaced"
                },
                names["plural"].as_str().unwrap(),
                if short.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", short names {}",
                        short
                            .iter()
                            .map(|s| format!("`{s}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            )
            .unwrap();
            if let Some(description) = schema.get("description").and_then(Value::as_str) {
                writeln!(out, "{}\n", cell(description)).unwrap();
            }
            if let Some(columns) = version
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
            {
                let columns: Vec<String> = columns
                    .iter()
                    .map(|c| {
                        format!(
                            "{} (`{}`)",
                            c["name"].as_str().unwrap_or(""),
                            c["jsonPath"].as_str().unwrap_or("")
                        )
                    })
                    .collect();
                writeln!(out, "`kubectl get` columns: {}.\n", columns.join(", ")).unwrap();
            }
            out.push_str("| field | type | required | description |\n|---|---|---|---|\n");
            for part in ["spec", "status"] {
                if let Some(sub) = schema["properties"].get(part) {
                    let needed = schema["required"]
                        .as_array()
                        .is_some_and(|r| r.iter().any(|v| v == part));
                    rows(sub, part, needed, &mut out);
                }
            }
        }
    }
    out
}

#[test]
fn the_crd_reference_is_generated_from_crds() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(REFERENCE);
    let generated = reference();
    if std::env::var("UPDATE_CRD_REFERENCE").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{REFERENCE} is stale: regenerate it with UPDATE_CRD_REFERENCE=1 cargo test --test crd_reference"
    );
    // What it must say, so a broken generator cannot pass by writing nothing.
    for kind in ["SlurmCluster", "SlurmJob", "SlurmNodeSet"] {
        assert!(
            generated.contains(&format!("\n## {kind}\n")),
            "{kind} missing"
        );
    }
    for field in [
        "`spec.endpoint`",
        "`spec.script`",
        "`spec.replicas`",
        "`status.phase`",
    ] {
        assert!(generated.contains(field), "{field} missing");
    }
}
