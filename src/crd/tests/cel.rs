//! The CRDs' CEL rules, compiled and evaluated client-side with kube's CEL engine (`kube-cel`,
//! the `kube/cel` feature, a dev-dependency). This catches syntax errors, rules that reference
//! anything but `self`/`oldSelf`, and rules that do not say what they mean; the API server's own
//! cost estimator is stricter than kube-cel's heuristic, so cost is only checked coarsely here.

use std::collections::BTreeMap;

use kube::core::cel::{
    CompiledSchema, ScopeContext, Validator, WarningKind, analyze_rule, apply_defaults,
    compile_schema,
};
use serde_json::{Value, json};

use super::schemas;

/// Whether `pattern` matches `text`, with CEL's `matches` (the `regex` crate: RE2 syntax, the
/// dialect the API server uses for schema `pattern`s). `Err` if the pattern does not compile.
pub(in crate::crd) fn re2_matches(pattern: &str, text: &str) -> Result<bool, String> {
    use kube::core::cel::cel::{Context, Program, Value as CelValue};
    let program = Program::compile("text.matches(pattern)").map_err(|e| e.to_string())?;
    let mut ctx = Context::default();
    ctx.add_variable_from_value("text", text.to_owned());
    ctx.add_variable_from_value("pattern", pattern.to_owned());
    match program.execute(&ctx) {
        Ok(CelValue::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("unexpected result {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

fn schema(crd: &str) -> Value {
    schemas()
        .into_iter()
        .find_map(|(name, s)| (name == crd).then_some(s))
        .expect("known CRD")
}

/// The iteration variables a rule binds with CEL's macros (`list.all(d, ...)` binds `d`).
/// kube-cel's scope check reports them as variables outside the CRD scope, which they are not
/// (the API server binds them itself), so those warnings are dropped — and only those.
fn macro_variables(rule: &str) -> Vec<String> {
    let mut vars = Vec::new();
    for mac in ["all", "exists", "exists_one", "map", "filter"] {
        for (at, _) in rule.match_indices(&format!(".{mac}(")) {
            let args = &rule[at + mac.len() + 2..];
            if let Some((var, _)) = args.split_once(',') {
                let var = var.trim();
                if !var.is_empty() && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    vars.push(var.to_owned());
                }
            }
        }
    }
    vars
}

#[test]
fn macro_variables_are_found() {
    assert_eq!(
        macro_variables("self.a.all(d, d.x != self.b) && self.c.exists( e , e == 1)"),
        ["d", "e"]
    );
    assert!(macro_variables("self.matches('a,b') && size(self) > 1").is_empty());
}

/// Every `(path, rule)` in a compiled schema, with its compile error or static-analysis
/// warnings.
fn rule_problems(node: &CompiledSchema, path: &str, out: &mut Vec<String>) {
    for compiled in &node.validations {
        match compiled {
            Err(e) => out.push(format!("{path}: does not compile: {e}")),
            Ok(r) => {
                let bound = macro_variables(&r.rule.rule);
                for w in analyze_rule(&r.rule.rule, node, ScopeContext::CrdValidation) {
                    let macro_variable = w.kind == WarningKind::WrongScope
                        && bound
                            .iter()
                            .any(|v| w.message.starts_with(&format!("variable '{v}' ")));
                    if macro_variable {
                        continue;
                    }
                    if matches!(w.kind, WarningKind::WrongScope | WarningKind::CostExceeded) {
                        out.push(format!("{path}: {}: {}", r.rule.rule, w.message));
                    }
                }
                if r.rule.message.as_deref().is_none_or(str::is_empty)
                    && r.rule
                        .message_expression
                        .as_deref()
                        .is_none_or(str::is_empty)
                {
                    out.push(format!("{path}: rule {:?} has no message", r.rule.rule));
                }
            }
        }
    }
    let mut children: Vec<_> = node.properties.iter().collect();
    children.sort_by_key(|(name, _)| name.as_str());
    for (name, child) in children {
        rule_problems(child, &format!("{path}.{name}"), out);
    }
    if let Some(items) = &node.items {
        rule_problems(items, &format!("{path}[]"), out);
    }
    if let Some(values) = &node.additional_properties {
        rule_problems(values, &format!("{path}{{}}"), out);
    }
}

/// `(path, rule, message)` for every rule, to pin the full set.
fn rules(node: &Value, path: &str, out: &mut Vec<(String, String, String)>) {
    for r in node["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        out.push((
            path.to_owned(),
            r["rule"].as_str().unwrap_or_default().to_owned(),
            // A rule whose message is computed (its cases are tested by what it says).
            r["message"].as_str().map_or_else(
                || {
                    r["messageExpression"]
                        .as_str()
                        .map_or_else(String::new, |_| "(messageExpression)".to_owned())
                },
                str::to_owned,
            ),
        ));
    }
    for (name, child) in node["properties"].as_object().into_iter().flatten() {
        rules(child, &format!("{path}.{name}"), out);
    }
    if node.get("items").is_some() {
        rules(&node["items"], &format!("{path}[]"), out);
    }
}

/// Where a rule reads strings of unbounded length: the API server prices every string the
/// schema does not bound at 3 MiB, and refuses a CRD whose rule's estimated cost is past its
/// limit (10 000 000: `matches` over 1 024 such strings is far past it). So a rule on a
/// string needs its `maxLength`, one on a list its `maxItems` and, for strings, the items'
/// `maxLength`. (A map's keys are priced short: `self.all(k, ...)` over keys is not bounded so.)
fn unpriced(node: &Value, path: &str, out: &mut Vec<String>) {
    let has_rules = node["x-kubernetes-validations"]
        .as_array()
        .is_some_and(|rules| !rules.is_empty());
    // The formats the API server prices by their own length.
    let string_bounded = |n: &Value| {
        n.get("maxLength").is_some()
            || n.get("enum").is_some()
            || matches!(
                n["format"].as_str(),
                Some("date" | "date-time" | "duration")
            )
    };
    if has_rules {
        match node["type"].as_str() {
            Some("string") if !string_bounded(node) => out.push(format!("{path}: no maxLength")),
            Some("array") => {
                if node.get("maxItems").is_none() {
                    out.push(format!("{path}: no maxItems"));
                }
                let items = &node["items"];
                if items["type"] == "string" && !string_bounded(items) {
                    out.push(format!("{path}[]: no maxLength"));
                }
            }
            _ => {}
        }
    }
    for (name, child) in node["properties"].as_object().into_iter().flatten() {
        unpriced(child, &format!("{path}.{name}"), out);
    }
    if node.get("items").is_some() {
        unpriced(&node["items"], &format!("{path}[]"), out);
    }
    if node["additionalProperties"].is_object() {
        unpriced(&node["additionalProperties"], &format!("{path}{{}}"), out);
    }
}

/// The API server's limit on one rule's estimated cost, the rule's cost times how many times it
/// may run in one object (the `maxItems` of the lists around it).
const RULE_COST_LIMIT: u64 = 10_000_000;

/// Where a `matches` rule is priced past [`RULE_COST_LIMIT`], as the API server prices it: per
/// string, ⌈(1 + bytes) × 0.1⌉ × ⌈regex length × 0.25⌉, a string of `maxLength` n being 4n
/// bytes; once per item when the rule is on a list, once per element of every list around it.
/// Only `matches`, the costly function these CRDs use, is priced: a coarse check, not the API
/// server's estimator.
fn overpriced_matches(node: &Value, path: &str, runs: u64, out: &mut Vec<String>) {
    let bytes = |n: &Value| n["maxLength"].as_u64().map(|l| l * 4);
    let (per_rule, size) = match node["type"].as_str() {
        Some("array") => (node["maxItems"].as_u64(), bytes(&node["items"])),
        Some("string") => (Some(1), bytes(node)),
        _ => (None, None),
    };
    for rule in node["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let text = rule["rule"].as_str().unwrap_or_default();
        let (Some(per_rule), Some(size)) = (per_rule, size) else {
            continue;
        };
        for (at, _) in text.match_indices(".matches('") {
            let regex = &text[at + ".matches('".len()..];
            let length = regex.find("')").unwrap_or(regex.len()) as u64;
            let one = (1 + size).div_ceil(10) * (length.div_ceil(4));
            let cost = runs * per_rule * one;
            if cost > RULE_COST_LIMIT {
                out.push(format!(
                    "{path}: `matches` priced at {cost} (limit {RULE_COST_LIMIT})"
                ));
            }
        }
    }
    for (name, child) in node["properties"].as_object().into_iter().flatten() {
        overpriced_matches(child, &format!("{path}.{name}"), runs, out);
    }
    if node.get("items").is_some() {
        let times = node["maxItems"].as_u64().unwrap_or(1);
        overpriced_matches(&node["items"], &format!("{path}[]"), runs * times, out);
    }
    if node["additionalProperties"].is_object() {
        let times = node["maxProperties"].as_u64().unwrap_or(1);
        overpriced_matches(
            &node["additionalProperties"],
            &format!("{path}{{}}"),
            runs * times,
            out,
        );
    }
}

/// A rule on a list inside another list runs once per outer item: a SlurmCluster's
/// `access[].namespaces` rule (`matches` over 1 024 names, 256 entries) was priced at about
/// 53 million, and the API server would have refused the CRD.
#[test]
fn no_matches_rule_is_priced_past_the_limit() {
    let mut problems = Vec::new();
    for (name, schema) in schemas() {
        overpriced_matches(&schema, &name, 1, &mut problems);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The check itself, on the rule that was refused.
    let names = json!({
        "type": "array", "maxItems": 1024, "items": {"type": "string", "maxLength": 63},
        "x-kubernetes-validations": [{"rule": "self.all(n, n.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))"}],
    });
    let access = json!({"type": "array", "maxItems": 256,
        "items": {"type": "object", "properties": {"namespaces": names}}});
    let mut found = Vec::new();
    overpriced_matches(&access, "access", 1, &mut found);
    assert_eq!(
        found,
        ["access[].namespaces: `matches` priced at 54525952 (limit 10000000)"]
    );
    found.clear();
    overpriced_matches(&names, "nodeSetNamespaces", 1, &mut found);
    assert!(found.is_empty(), "once: {found:?}");
}

/// Whether the API server gives CEL a type for `node` (apiserver's `SchemaDeclType`): none for
/// a value without a `type` (but int-or-string), nor for a list or map of such values. A rule on
/// such a node, or reading such a field, makes the API server refuse the whole CRD ("failed to
/// construct type information for x-kubernetes-validations rules", or "undefined field").
fn cel_typed(node: &Value) -> bool {
    if node["x-kubernetes-int-or-string"] == true {
        return true;
    }
    match node["type"].as_str() {
        Some("array") => node.get("items").is_some_and(cel_typed),
        Some("object") => match node.get("additionalProperties") {
            Some(values) if values.is_object() => cel_typed(values),
            _ => true,
        },
        Some("string" | "boolean" | "number" | "integer") => true,
        _ => false,
    }
}

/// The fields `text` reads through `self.a.b...` that CEL has no type for, `node` being `self`.
fn untyped_reads(node: &Value, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("self.") {
        // Not `oldSelf.` nor a longer name ending in `self`.
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let mut current = node;
        let mut path = String::from("self");
        for segment in text[at + "self.".len()..].split('.') {
            let name: String = segment
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let Some(field) = current["properties"].get(name.as_str()) else {
                break; // a method (`size`, `all`, ...) or a key of a map: not a field.
            };
            path = format!("{path}.{name}");
            if !cel_typed(field) {
                found.push(path);
                break;
            }
            if name.len() != segment.len() {
                break;
            }
            current = field;
        }
    }
    found
}

fn untyped_rules(node: &Value, path: &str, out: &mut Vec<String>) {
    for rule in node["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if !cel_typed(node) {
            out.push(format!("{path}: a rule on a value CEL has no type for"));
        }
        for key in ["rule", "messageExpression"] {
            for read in untyped_reads(node, rule[key].as_str().unwrap_or_default()) {
                out.push(format!(
                    "{path}: {key} reads {read}, which CEL has no type for"
                ));
            }
        }
    }
    for (name, child) in node["properties"].as_object().into_iter().flatten() {
        untyped_rules(child, &format!("{path}.{name}"), out);
    }
    if node.get("items").is_some() {
        untyped_rules(&node["items"], &format!("{path}[]"), out);
    }
    if node["additionalProperties"].is_object() {
        untyped_rules(&node["additionalProperties"], &format!("{path}{{}}"), out);
    }
}

/// kube-cel evaluates rules over plain JSON, so it reads what the API server's CEL cannot: a
/// CRD with such a rule would pass every test here and be refused by the API server at install.
#[test]
fn every_rule_reads_only_what_the_api_server_types_for_cel() {
    let mut problems = Vec::new();
    for (name, schema) in schemas() {
        untyped_rules(&schema, &name, &mut problems);
    }
    assert!(
        problems.is_empty(),
        "rules the API server would refuse the CRD for:\n{}",
        problems.join("\n")
    );
    // The check itself: both ways a rule met a map of untyped values before.
    let map = json!({"type": "object", "additionalProperties": {"x-kubernetes-preserve-unknown-fields": true}});
    let spec = json!({
        "type": "object",
        "properties": {"extraOptions": map, "exclusive": {"type": "string"}},
        "x-kubernetes-validations": [{"rule": "!has(self.exclusive) || !('shared' in self.extraOptions)"}],
    });
    let mut found = Vec::new();
    untyped_rules(&spec, "spec", &mut found);
    assert_eq!(
        found,
        ["spec: rule reads self.extraOptions, which CEL has no type for"]
    );
    let mut on_map = map.clone();
    on_map["x-kubernetes-validations"] = json!([{"rule": "self.all(k, k != 'x')"}]);
    found.clear();
    untyped_rules(&on_map, "extraOptions", &mut found);
    assert_eq!(
        found,
        ["extraOptions: a rule on a value CEL has no type for"]
    );
    // Typed values, and an object that keeps unknown fields, are typed.
    assert!(cel_typed(
        &json!({"type": "object", "additionalProperties": {"type": "string"}})
    ));
    assert!(cel_typed(
        &json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
    ));
    assert!(cel_typed(&json!({"x-kubernetes-int-or-string": true})));
}

#[test]
fn every_rule_reads_only_bounded_strings() {
    let mut problems = Vec::new();
    for (name, schema) in schemas() {
        unpriced(&schema, &name, &mut problems);
    }
    assert!(
        problems.is_empty(),
        "rules the API server would price past its limit:\n{}",
        problems.join("\n")
    );
}

#[test]
fn cel_rules_compile_and_stay_in_scope() {
    let mut problems = Vec::new();
    for (name, schema) in schemas() {
        rule_problems(&compile_schema(&schema), &name, &mut problems);
    }
    assert!(
        problems.is_empty(),
        "CEL problems:\n{}",
        problems.join("\n")
    );
}

#[test]
fn cel_rules_are_where_expected() {
    let mut found = BTreeMap::new();
    for (name, schema) in schemas() {
        let mut list = Vec::new();
        rules(&schema, "", &mut list);
        found.insert(
            name,
            list.into_iter()
                .map(|(path, _, msg)| (path, msg))
                .collect::<Vec<_>>(),
        );
    }
    let s = |p: &str, m: &str| (p.to_owned(), m.to_owned());
    assert_eq!(
        found["slurmclusters.slurm.rs"],
        [
            s(".spec", "tls applies only to an https:// endpoint"),
            s(
                ".spec",
                "endpoint must be an https:// URL: over http:// the tokens cross the network \
                 readable by anyone on the path (set allowInsecureHttp: true to accept that)"
            ),
            s(
                ".spec",
                "an access entry's slurmUser is auth.jwt.user, the cluster's own user (a Slurm \
                 administrator): the namespaces' jobs could cancel any job, drain any node and \
                 issue tokens for any user; map them to an unprivileged Slurm user (or set the \
                 entry's allowClusterUser: true for a cluster one team owns)"
            ),
            s(
                ".spec.access[]",
                "access needs namespaces or a namespaceSelector"
            ),
            s(
                ".spec.access[]",
                "namespaceSelector must name labels (matchLabels or matchExpressions): an empty \
                 selector grants every namespace, kube-system and the operator's own included; \
                 to grant every namespace on purpose, select it: matchExpressions: [{key: \
                 kubernetes.io/metadata.name, operator: Exists}]"
            ),
            s(
                ".spec.access[].slurmUser",
                "slurmUser must be a Slurm (POSIX) user name such as alice or alice@example.org"
            ),
            s(
                ".spec.access[].slurmUser",
                "slurmUser cannot be root: the namespaces' job scripts would run as root on the \
                 Slurm nodes; map them to an unprivileged Slurm user"
            ),
            s(
                ".spec.auth",
                "auth must set exactly one of jwt or tokenSecretRef"
            ),
            s(
                ".spec.auth.jwt.lifetime",
                "lifetime must be between 30s and 15m"
            ),
            s(
                ".spec.endpoint",
                "endpoint must be an http:// or https:// URL, e.g. https://slurmrestd.example.org:6820"
            ),
            s(
                ".spec.listingTimeout",
                "listingTimeout must be between 30s and 1h"
            ),
            s(
                ".spec.maxResponseSize",
                "maxResponseSize must be a quantity between 1Mi and 1Gi, such as 64Mi"
            ),
            s(
                ".spec.nodeSetNamespaces",
                "nodeSetNamespaces must be namespace names: lowercase letters, digits and '-', at most 63"
            ),
            s(
                ".spec.pollInterval",
                "pollInterval must be between 100ms and 5m"
            ),
            s(
                ".spec.tls",
                "tls may set at most one of caSecretRef or caConfigMapRef"
            ),
            s(
                ".spec.tls",
                "insecureSkipVerify cannot be combined with caSecretRef or caConfigMapRef"
            ),
        ]
    );
    assert_eq!(
        found["slurmjobs.slurm.rs"],
        [
            s(
                "",
                "dependsOn cannot name the SlurmJob itself: it would wait for its own submission forever"
            ),
            s(
                ".spec",
                "memoryPerNode and memoryPerCpu exclude each other (as sbatch's --mem and \
                 --mem-per-cpu): set one"
            ),
            s(
                ".spec",
                "tres is the old name of tresPerTask: set only tresPerTask"
            ),
            s(
                ".spec",
                "gpusPerNode and a gpu entry in gres both ask for GPUs per node: set one"
            ),
            s(
                ".spec",
                "gpusPerTask and a gpu entry in tresPerTask both ask for GPUs per task: set one"
            ),
            s(
                ".spec",
                "standardOutput and standardError cannot be set with output: with output, the \
                 operator names the file it streams"
            ),
            s(
                ".spec",
                "output cannot be set with array: it streams one file, and each task of an array \
                 writes its own"
            ),
            s(
                ".spec.array",
                "array must list indices such as 0-9, 1,3,5 or 0-15:4, optionally followed by %N to \
                 run at most N tasks at once (0-9%2)"
            ),
            s(
                ".spec.clusterName",
                "clusterName must be the name of a SlurmCluster: lowercase letters, digits, '-' and '.', \
                 starting and ending with a letter or digit"
            ),
            s(".spec.clusterName", "clusterName is immutable"),
            s(
                ".spec.dependsOn[].name",
                "dependsOn name must be the name of a SlurmJob: lowercase letters, digits, '-' and \
                 '.', starting and ending with a letter or digit"
            ),
            s(
                ".spec.environment",
                "environment names must not be empty or contain '=': Slurm reads each variable \
                 as NAME=value"
            ),
            s(
                ".spec.gpusPerNode",
                "gpusPerNode must be a GPU count such as 2, or a type and a count such as a100:2"
            ),
            s(
                ".spec.gpusPerTask",
                "gpusPerTask must be a GPU count such as 1, or a type and a count such as a100:1"
            ),
            s(
                ".spec.memoryPerCpu",
                "memoryPerCpu must be a positive quantity such as 2Gi or 512Mi"
            ),
            s(
                ".spec.memoryPerCpu",
                "memoryPerCpu must be at most 64 characters, such as 2Gi or 512Mi"
            ),
            s(
                ".spec.memoryPerNode",
                "memoryPerNode must be a positive quantity such as 4Gi or 512Mi"
            ),
            s(
                ".spec.memoryPerNode",
                "memoryPerNode must be at most 64 characters, such as 4Gi or 512Mi"
            ),
            s(
                ".spec.name",
                "name must not contain a comma: Slurm's accounting reads one as a list of job names"
            ),
            s(
                ".spec.nice",
                "nice must be between 0 and 2147483645: a negative nice raises a job's priority, \
                 which only Slurm administrators may do"
            ),
            s(
                ".spec.nodes",
                "nodes must be a node count such as 2 or a range such as 1-4"
            ),
            s(
                ".spec.nodes",
                "the nodes range must not end below its start: 1-4, not 4-1"
            ),
            s(
                ".spec.output.slurmPath",
                "output slurmPath must be the absolute path where the volume is mounted on the \
                 Slurm nodes, e.g. /shared"
            ),
            s(
                ".spec.output.slurmPath",
                "output slurmPath cannot contain '%' or '\\': Slurm would read them as a filename \
                 pattern"
            ),
            s(
                ".spec.output.subPath",
                "subPath must be a relative path without '..'"
            ),
            s(
                ".spec.output.subPath",
                "subPath cannot contain '%' or '\\': Slurm would read them as a filename pattern"
            ),
            s(
                ".spec.output.volume",
                "output volume must be the name of a PersistentVolumeClaim: lowercase letters, \
                 digits, '-' and '.', starting and ending with a letter or digit"
            ),
            s(
                ".spec.script",
                "script must start with an interpreter line such as #!/bin/bash"
            ),
            s(".spec.tasksPerNode", "tasksPerNode must be at least 1"),
            s(
                ".spec.timeLimit",
                "timeLimit must be at least 1m (Slurm counts time limits in whole minutes)"
            ),
            s(
                ".spec.workingDirectory",
                "workingDirectory must be an absolute path such as /home/alice/run"
            ),
        ]
    );
    assert_eq!(
        found["slurmnodesets.slurm.rs"],
        [
            s(
                "",
                "a SlurmNodeSet's name must be a DNS label of at most 46 characters (lowercase \
                 letters, digits and '-'): its pods and Slurm nodes are named <name>-<namespace \
                 tag>-<ordinal>"
            ),
            s(".spec.clusterName", "clusterName is immutable"),
            s(
                ".spec.scaleIn.drainTimeout",
                "drainTimeout must be at most 8760h (a year); leave it unset to wait as long as it \
                 takes"
            ),
            s(
                ".spec.slurm.realMemory",
                "realMemory must be a positive quantity such as 64Gi"
            ),
            s(
                ".spec.template",
                "spec.template.spec.restartPolicy must be Always or left out: the kubelet \
                 restarts a slurmd that exits, with a backoff, where a pod that ended would be \
                 replaced at once, again and again"
            ),
            s(
                ".spec.updateStrategy",
                "rollingUpdate may only be set when type is RollingUpdate"
            ),
            s(
                ".spec.updateStrategy.rollingUpdate.maxUnavailable",
                "maxUnavailable must be a number from 1 to 999999999 or a percentage from 1% to \
                 100%"
            ),
        ]
    );
}

/// Messages of the rules `object` fails (against `old` for an update).
fn failures(crd: &str, object: &Value, old: Option<&Value>) -> Vec<String> {
    match Validator::new().validate(&schema(crd), object, old) {
        Ok(()) => Vec::new(),
        Err(errs) => errs.into_vec().into_iter().map(|e| e.message).collect(),
    }
}

fn object(kind: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "slurm.rs/v1alpha1",
        "kind": kind,
        "metadata": {"name": "x", "namespace": "default"},
        "spec": spec,
    })
}

/// Assert `spec` passes (`want` empty) or fails with exactly the messages containing `want`.
#[track_caller]
fn expect(crd: &str, kind: &str, spec: Value, old_spec: Option<Value>, want: &[&str]) {
    let old = old_spec.map(|s| object(kind, s));
    let got = failures(crd, &object(kind, spec.clone()), old.as_ref());
    let ok = got.len() == want.len() && want.iter().all(|w| got.iter().any(|g| g.contains(w)));
    assert!(ok, "spec {spec}\n  want failures {want:?}\n  got {got:?}");
}

fn cluster(patch: Value) -> Value {
    let mut spec = json!({
        "endpoint": "https://slurmrestd.example.org:6820",
        "auth": {"jwt": {"keySecretRef": {"name": "slurm-jwt"}}},
    });
    merge(&mut spec, patch);
    spec
}

/// JSON merge patch (RFC 7386): `null` removes.
fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(&k);
                } else {
                    merge(t.entry(k).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p,
    }
}

#[test]
fn cluster_rules() {
    let c = |patch: Value, want: &[&str]| {
        expect(
            "slurmclusters.slurm.rs",
            "SlurmCluster",
            cluster(patch),
            None,
            want,
        )
    };
    c(json!({}), &[]);
    c(json!({"nodeSetNamespaces": ["slurm", "hpc-1"]}), &[]);
    c(
        json!({"nodeSetNamespaces": ["Slurm"]}),
        &["nodeSetNamespaces must be namespace names"],
    );
    // Plain http only where the admin accepts it explicitly.
    c(
        json!({"endpoint": "http://slurmrestd.slurm.svc:6820"}),
        &["endpoint must be an https:// URL: over http:// the tokens cross the network"],
    );
    c(
        json!({"endpoint": "http://slurmrestd.slurm.svc:6820", "allowInsecureHttp": true}),
        &[],
    );
    // A scheme is case-insensitive (the API server's `url()` and the operator lower it): an
    // upper-case one is held to the same rules.
    c(
        json!({"endpoint": "HTTP://slurmrestd.slurm.svc:6820"}),
        &["endpoint must be an https:// URL: over http:// the tokens cross the network"],
    );
    c(
        json!({"endpoint": "HTTPS://slurmrestd.slurm.svc:6820", "tls": {}}),
        &[],
    );
    // Access: by name or label, as a POSIX user.
    c(
        json!({"access": [
            {"namespaces": ["team-a"], "slurmUser": "alice", "accounts": ["team-a"]},
            {"namespaceSelector": {"matchLabels": {"team": "b"}}, "slurmUser": "bob"},
        ]}),
        &[],
    );
    c(
        json!({"access": [{"slurmUser": "alice"}]}),
        &["access needs namespaces or a namespaceSelector"],
    );
    // A selector that names nothing would grant every namespace.
    for empty in [
        json!({}),
        json!({"matchLabels": {}, "matchExpressions": []}),
    ] {
        c(
            json!({"access": [{"namespaceSelector": empty, "slurmUser": "alice"}]}),
            &["namespaceSelector must name labels"],
        );
    }
    c(
        json!({"access": [{"namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "Exists"}]}, "slurmUser": "alice"}]}),
        &[],
    );
    c(
        json!({"access": [{"namespaces": ["team-a"], "slurmUser": "alice; rm -rf /"}]}),
        &["slurmUser must be a Slurm (POSIX) user name"],
    );
    c(
        json!({"access": [{"namespaces": ["team-a"], "slurmUser": "root"}]}),
        &["slurmUser cannot be root"],
    );
    // As Slurm reports an SSSD user with fully-qualified names.
    c(
        json!({"access": [{"namespaces": ["team-a"], "slurmUser": "alice@example.org"}]}),
        &[],
    );
    c(
        json!({"access": [{"namespaces": ["team-a"], "slurmUser": "Alice@Example.org"}]}),
        &["slurmUser must be a Slurm (POSIX) user name"],
    );
    c(
        json!({"access": [{"namespaces": ["team-a"], "slurmUser": "rooted"}]}),
        &[],
    );
    // The cluster's own user (`auth.jwt.user`, `slurm` by default) only on purpose.
    let own = "an access entry's slurmUser is auth.jwt.user, the cluster's own user";
    c(
        json!({"access": [{"namespaces": ["team-a"], "slurmUser": "alice"},
                          {"namespaces": ["team-b"], "slurmUser": "slurm"}]}),
        &[own],
    );
    c(
        json!({"auth": {"jwt": {"user": "admin"}},
               "access": [{"namespaces": ["team-a"], "slurmUser": "admin"}]}),
        &[own],
    );
    c(
        json!({"auth": {"jwt": {"user": "admin"}},
               "access": [{"namespaces": ["team-a"], "slurmUser": "slurm"}]}),
        &[],
    );
    c(
        json!({"access": [{"namespaces": ["team-a"], "slurmUser": "slurm",
                           "allowClusterUser": true}]}),
        &[],
    );
    c(
        json!({"auth": {"jwt": null, "tokenSecretRef": {"name": "token"}},
               "access": [{"namespaces": ["team-a"], "slurmUser": "slurm"}]}),
        &[],
    );
    c(
        json!({"endpoint": "ftp://slurm:6820"}),
        &["endpoint must be an http:// or https:// URL"],
    );
    c(
        json!({"endpoint": "slurmrestd:6820"}),
        &["endpoint must be an http:// or https:// URL"],
    );
    c(
        json!({"endpoint": "not a url"}),
        &["endpoint must be an http:// or https:// URL"],
    );

    c(
        json!({"auth": {"tokenSecretRef": {"name": "tok"}, "jwt": null}}),
        &[],
    );
    c(
        json!({"auth": {"tokenSecretRef": {"name": "tok"}}}),
        &["exactly one of jwt or tokenSecretRef"],
    );
    c(
        json!({"auth": {"jwt": null}}),
        &["exactly one of jwt or tokenSecretRef"],
    );

    c(json!({"auth": {"jwt": {"lifetime": "30s"}}}), &[]);
    c(json!({"auth": {"jwt": {"lifetime": "15m"}}}), &[]);
    c(
        json!({"auth": {"jwt": {"lifetime": "29s"}}}),
        &["lifetime must be between 30s and 15m"],
    );
    c(
        json!({"auth": {"jwt": {"lifetime": "15m1s"}}}),
        &["lifetime must be between 30s and 15m"],
    );
    c(
        json!({"auth": {"jwt": {"lifetime": "1h"}}}),
        &["lifetime must be between 30s and 15m"],
    );

    c(json!({"pollInterval": "100ms"}), &[]);
    c(json!({"pollInterval": "5m"}), &[]);
    c(
        json!({"pollInterval": "99ms"}),
        &["pollInterval must be between 100ms and 5m"],
    );
    c(
        json!({"pollInterval": "1h"}),
        &["pollInterval must be between 100ms and 5m"],
    );
    for ok in ["30s", "5m", "59m59s", "1h"] {
        c(json!({"listingTimeout": ok}), &[]);
    }
    for bad in ["29s", "1h1s", "90m", "2h"] {
        c(
            json!({"listingTimeout": bad}),
            &["listingTimeout must be between 30s and 1h"],
        );
    }

    for ok in [
        json!("1Mi"),
        json!("64Mi"),
        json!("0.5Gi"),
        json!("1Gi"),
        json!(1_048_576),
    ] {
        c(json!({"maxResponseSize": ok}), &[]);
    }
    for bad in [
        json!("1023Ki"),
        json!("1025Mi"),
        json!("2Gi"),
        json!("0"),
        json!("-64Mi"),
        json!("lots"),
        json!(1_048_575),
    ] {
        c(
            json!({"maxResponseSize": bad}),
            &["maxResponseSize must be a quantity between 1Mi and 1Gi"],
        );
    }

    c(json!({"tls": {"caSecretRef": {"name": "ca"}}}), &[]);
    c(json!({"tls": {"insecureSkipVerify": true}}), &[]);
    c(
        json!({"tls": {"caSecretRef": {"name": "ca"}, "caConfigMapRef": {"name": "ca"}}}),
        &["at most one of caSecretRef or caConfigMapRef"],
    );
    c(
        json!({"tls": {"caConfigMapRef": {"name": "ca"}, "insecureSkipVerify": true}}),
        &["insecureSkipVerify cannot be combined"],
    );
    c(
        json!({"endpoint": "http://slurm:6820", "allowInsecureHttp": true, "tls": {"insecureSkipVerify": true}}),
        &["tls applies only to an https:// endpoint"],
    );
    c(
        json!({"endpoint": "Http://slurm:6820", "allowInsecureHttp": true, "tls": {}}),
        &["tls applies only to an https:// endpoint"],
    );
}

fn job(patch: Value) -> Value {
    let mut spec = json!({"clusterName": "main", "script": "#!/bin/bash\nsrun hostname\n"});
    merge(&mut spec, patch);
    spec
}

#[test]
fn slurmjob_rules() {
    let j = |patch: Value, want: &[&str]| {
        expect("slurmjobs.slurm.rs", "SlurmJob", job(patch), None, want)
    };
    j(json!({}), &[]);
    j(
        json!({"script": "srun hostname"}),
        &["script must start with an interpreter line"],
    );
    j(
        json!({"script": ""}),
        &["script must start with an interpreter line"],
    );

    // nice: 0 or more; a negative one is an administrator's.
    for ok in [0, 100, 2_147_483_645] {
        j(json!({"nice": ok}), &[]);
    }
    for bad in [-1, -100] {
        j(
            json!({"nice": bad}),
            &["nice must be between 0 and 2147483645"],
        );
    }
    j(json!({"suspend": true}), &[]);

    j(json!({"timeLimit": "1m"}), &[]);
    j(json!({"timeLimit": "1h30m"}), &[]);
    j(
        json!({"timeLimit": "59s"}),
        &["timeLimit must be at least 1m"],
    );

    for ok in [json!("4Gi"), json!("512Mi"), json!("1.5G"), json!(4096)] {
        j(json!({"memoryPerNode": ok}), &[]);
    }
    for bad in [json!("0"), json!("-1Gi"), json!("lots"), json!(0)] {
        j(
            json!({"memoryPerNode": bad}),
            &["memoryPerNode must be a positive quantity"],
        );
    }
    j(json!({"environment": {"PATH": "/bin", "my.var": "x"}}), &[]);
    for bad in ["A=B", ""] {
        j(
            json!({"environment": {"PATH": "/bin", bad: "x"}}),
            &["environment names must not be empty or contain '='"],
        );
    }
    // A valid quantity, but a megabyte of it would sit in every copy of the object.
    let digits = format!("{}1Gi", "0".repeat(62));
    j(
        json!({"memoryPerNode": digits}),
        &["memoryPerNode must be at most 64 characters"],
    );
    j(
        json!({"memoryPerCpu": digits}),
        &["memoryPerCpu must be at most 64 characters"],
    );
    j(
        json!({"memoryPerCpu": format!("{}1Gi", "0".repeat(61))}),
        &[],
    );

    let out =
        |sub: &str| json!({"output": {"volume": "out", "slurmPath": "/shared", "subPath": sub}});
    for ok in ["jobs", "jobs/x", "a..b", "..hidden/x"] {
        j(out(ok), &[]);
    }
    for bad in ["/abs", "..", "../up", "a/../b", "a/.."] {
        j(out(bad), &["subPath must be a relative path without '..'"]);
    }

    for ok in ["main", "slurm-a", "a.b-c", "0"] {
        j(json!({"clusterName": ok}), &[]);
    }
    for bad in ["Main", "-a", "a-", "a_b", "a..b", ".a", "a b"] {
        j(
            json!({"clusterName": bad}),
            &["clusterName must be the name of a SlurmCluster"],
        );
    }

    for ok in ["1", "2", "16", "1-4", "3-3", "999999999"] {
        j(json!({"nodes": ok}), &[]);
    }
    for bad in [
        "0",
        "",
        "-1",
        "1-",
        "two",
        "01",
        "1-4-5",
        "1:4",
        "1234567890",
    ] {
        j(json!({"nodes": bad}), &["nodes must be a node count"]);
    }
    j(
        json!({"nodes": "4-1"}),
        &["the nodes range must not end below its start"],
    );
    j(
        json!({"nodes": "10-9"}),
        &["the nodes range must not end below its start"],
    );

    for ok in ["0-9", "1,3,5", "0-15:4", "0-9%2", "7", "0-3,8-11:2%4"] {
        j(json!({"array": ok}), &[]);
    }
    for bad in ["", "a-b", "0-9%", "%2", "0-", ",1", "1,,2", "0-9 %2", "-1"] {
        j(json!({"array": bad}), &["array must list indices"]);
    }

    j(json!({"workingDirectory": "/home/alice"}), &[]);
    for bad in ["home/alice", "~/run", "./x"] {
        j(
            json!({"workingDirectory": bad}),
            &["workingDirectory must be an absolute path"],
        );
    }

    let output =
        |volume: &str, path: &str| json!({"output": {"volume": volume, "slurmPath": path}});
    j(output("job-output", "/shared"), &[]);
    j(
        output("Job_Output", "/shared"),
        &["output volume must be the name of a PersistentVolumeClaim"],
    );
    j(
        output("out", "shared"),
        &["output slurmPath must be the absolute path"],
    );

    let deps = |names: &[&str]| json!({"dependsOn": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()});
    j(deps(&["prepare", "fetch.data"]), &[]);
    j(
        deps(&["prepare", "Bad_Name"]),
        &["dependsOn name must be the name of a SlurmJob"],
    );

    // extraOptions' keys are the operator's to refuse (InvalidSpec, `tests/bad_input.rs`): the
    // API server lets CEL read nothing of a map of untyped values.
    for through in [
        json!({"extraOptions": {"mail_type": ["END"], "requeue": true, "begin_time": {"set": true, "number": 1}}}),
        json!({"extraOptions": {"user_id": "0", "group_id": "0"}}),
        json!({"extraOptions": {}}),
    ] {
        j(through, &[]);
    }

    // The typed fields of GPU and MPI jobs, and the pairs that would say one thing twice.
    j(
        json!({"tasksPerNode": 8, "gpusPerNode": "4", "gpusPerTask": "a100:1",
               "exclusive": "node", "memoryPerCpu": "2Gi", "tresPerTask": "cpu=2"}),
        &[],
    );
    j(json!({"exclusive": "user"}), &[]);
    j(
        json!({"tasksPerNode": 0}),
        &["tasksPerNode must be at least 1"],
    );
    for bad in ["0", "-1", "a100:", "two", "a100:2:3", "2 "] {
        j(
            json!({"gpusPerNode": bad}),
            &["gpusPerNode must be a GPU count"],
        );
        j(
            json!({"gpusPerTask": bad}),
            &["gpusPerTask must be a GPU count"],
        );
    }
    j(
        json!({"memoryPerCpu": "0"}),
        &["memoryPerCpu must be a positive quantity"],
    );
    j(
        json!({"memoryPerCpu": "1Gi", "memoryPerNode": "4Gi"}),
        &["memoryPerNode and memoryPerCpu exclude each other"],
    );
    j(json!({"tres": "cpu=2"}), &[]);
    j(
        json!({"tres": "cpu=2", "tresPerTask": "cpu=2"}),
        &["tres is the old name of tresPerTask"],
    );
    j(json!({"gpusPerNode": "2", "gres": "nvme:1"}), &[]);
    j(
        json!({"gpusPerNode": "2", "gres": "gpu:2"}),
        &["gpusPerNode and a gpu entry in gres"],
    );
    j(
        json!({"gpusPerTask": "1", "tresPerTask": "gres/gpu=1"}),
        &["gpusPerTask and a gpu entry in tresPerTask"],
    );
    j(json!({"extraOptions": {"shared": ["oversubscribe"]}}), &[]);
    j(
        json!({"standardOutput": "logs/%x-%j.out", "standardError": "/tmp/%j.err"}),
        &[],
    );
    j(
        json!({"standardError": "e", "output": {"volume": "out", "slurmPath": "/shared"}}),
        &["standardOutput and standardError cannot be set with output"],
    );

    // clusterName is immutable; other fields may change.
    let update = |new: Value, want: &[&str]| {
        expect(
            "slurmjobs.slurm.rs",
            "SlurmJob",
            job(new),
            Some(job(json!({}))),
            want,
        )
    };
    update(json!({"script": "#!/bin/sh\ntrue\n"}), &[]);
    update(
        json!({"clusterName": "other"}),
        &["clusterName is immutable"],
    );
}

/// The root rule sees `metadata.name`: a SlurmJob cannot depend on itself.
#[test]
fn slurmjob_cannot_depend_on_itself() {
    let named = |name: &str, deps: &[&str]| {
        let mut obj = object(
            "SlurmJob",
            job(json!({"dependsOn": deps.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()})),
        );
        obj["metadata"]["name"] = json!(name);
        failures("slurmjobs.slurm.rs", &obj, None)
    };
    assert_eq!(named("train", &["prepare"]), Vec::<String>::new());
    assert_eq!(named("train", &[]), Vec::<String>::new());
    let got = named("train", &["prepare", "train"]);
    assert!(
        got.len() == 1 && got[0].contains("dependsOn cannot name the SlurmJob itself"),
        "{got:?}"
    );
    // Without dependsOn at all the rule holds too.
    let mut bare = object("SlurmJob", job(json!({})));
    bare["metadata"]["name"] = json!("train");
    assert!(failures("slurmjobs.slurm.rs", &bare, None).is_empty());
}

/// `output` as the output Pod and Slurm's `--output` can honour it: one job's file (no array),
/// a path Slurm takes literally.
#[test]
fn output_is_refused_where_its_pod_or_file_could_not_follow() {
    let check = |name: &str, spec: serde_json::Value| {
        let mut obj = object("SlurmJob", job(spec));
        obj["metadata"]["name"] = json!(name);
        failures("slurmjobs.slurm.rs", &obj, None)
    };
    let output = |slurm_path: &str, sub_path: Option<&str>| {
        let mut o = json!({"volume": "out", "slurmPath": slurm_path});
        if let Some(sub) = sub_path {
            o["subPath"] = json!(sub);
        }
        json!({"output": o})
    };
    let fine = output("/shared", Some("runs/a"));
    // A name longer than a label value: its output Pod is labelled with the uid instead.
    assert_eq!(check(&"a".repeat(200), fine.clone()), Vec::<String>::new());

    let mut array = fine.clone();
    array["array"] = json!("0-3");
    let got = check("a", array);
    assert!(
        got.len() == 1 && got[0].contains("output cannot be set with array"),
        "{got:?}"
    );
    assert_eq!(check("a", json!({"array": "0-3"})), Vec::<String>::new());

    for (path, sub, field) in [
        ("/shared/%u", None, "output slurmPath cannot contain"),
        ("/shared/a\\b", None, "output slurmPath cannot contain"),
        ("/shared", Some("%x"), "subPath cannot contain"),
        ("/shared", Some("a\\%j"), "subPath cannot contain"),
    ] {
        let got = check("a", output(path, sub));
        assert!(
            got.len() == 1 && got[0].contains(field),
            "{path} {sub:?}: {got:?}"
        );
    }
}

/// The CEL form of the name pattern accepts exactly what the schema pattern of the other CRDs
/// (`crd::DNS_SUBDOMAIN`) accepts.
#[test]
fn dns_subdomain_cel_agrees_with_the_pattern() {
    let cel = crate::crd::slurmjob::DNS_SUBDOMAIN_CEL;
    let pattern = cel
        .strip_prefix("self.matches('")
        .and_then(|p| p.strip_suffix("')"))
        .expect("a plain matches() rule");
    for name in [
        "a", "abc", "a-b", "a.b", "a-b.c-d", "0", "9a", "A", "a_", "-a", "a-", ".a", "a.", "a..b",
        "a.-b", "", "a b", "a/b", "ab.c9", "xn--p1ai",
    ] {
        assert_eq!(
            re2_matches(pattern, name),
            re2_matches(crate::crd::DNS_SUBDOMAIN, name),
            "{name:?}"
        );
    }
}

fn nodeset(patch: Value) -> Value {
    let mut spec = json!({
        "clusterName": "main",
        "template": {"spec": {"containers": [{"name": "slurmd", "image": "slurmd:24.11"}]}},
    });
    merge(&mut spec, patch);
    spec
}

#[test]
fn nodeset_rules() {
    let n = |patch: Value, want: &[&str]| {
        expect(
            "slurmnodesets.slurm.rs",
            "SlurmNodeSet",
            nodeset(patch),
            None,
            want,
        )
    };
    n(json!({}), &[]);
    // The name makes node names `<name>-<tag>-<ordinal>`: a DNS label of at most 46 characters.
    let named = |name: &str| {
        let mut obj = object("SlurmNodeSet", nodeset(json!({})));
        obj["metadata"]["name"] = json!(name);
        failures("slurmnodesets.slurm.rs", &obj, None)
    };
    for ok in ["cpu", "gpu-a100", &"a".repeat(46)] {
        assert_eq!(named(ok), Vec::<String>::new(), "{ok}");
    }
    for bad in [&"a".repeat(47), "cpu.v2", "-cpu"] {
        let got = named(bad);
        assert!(
            got.len() == 1 && got[0].contains("must be a DNS label of at most 46"),
            "{bad}: {got:?}"
        );
    }
    // slurmd restarts in its pod, with the kubelet's backoff.
    let restart = |policy: &str| json!({"template": {"spec": {"restartPolicy": policy}}});
    n(restart("Always"), &[]);
    for ends in ["Never", "OnFailure"] {
        n(
            restart(ends),
            &["spec.template.spec.restartPolicy must be Always or left out"],
        );
    }
    n(json!({"updateStrategy": {"type": "OnDelete"}}), &[]);
    n(
        json!({"updateStrategy": {"type": "OnDelete", "rollingUpdate": {"maxUnavailable": 1}}}),
        &["rollingUpdate may only be set when type is RollingUpdate"],
    );
    let max = |v: Value| json!({"updateStrategy": {"rollingUpdate": {"maxUnavailable": v}}});
    for ok in [
        json!(1),
        json!(5),
        json!("3"),
        json!("1%"),
        json!("25%"),
        json!("100%"),
        json!(999_999_999),
    ] {
        n(max(ok), &[]);
    }
    // What admission lets through must decode, or the set fails the list of every set: each
    // value above, and a null, which the API server stores as it is (the field is nullable, and
    // no rule is evaluated on a null): it reads as the default.
    for (value, want) in [
        (json!(1), 1),
        (json!("3"), 3),
        (json!("25%"), 3),
        (json!(999_999_999), 999_999_999),
        (json!(null), 1),
    ] {
        let mut spec = nodeset(json!({}));
        spec["updateStrategy"] = json!({"rollingUpdate": {"maxUnavailable": value}});
        let set: crate::crd::SlurmNodeSetSpec = serde_json::from_value(spec)
            .unwrap_or_else(|e| panic!("maxUnavailable {value} does not decode: {e}"));
        assert_eq!(
            set.update_strategy.max_unavailable_count(10),
            want,
            "{value}"
        );
    }
    for bad in [
        json!(0),
        json!(-1),
        json!("0"),
        json!("0%"),
        json!("101%"),
        json!("x%"),
        json!(""),
        // Past an int32: the operator could not decode it.
        json!(3_000_000_000_i64),
        json!("3000000000"),
    ] {
        n(
            max(bad),
            &["maxUnavailable must be a number from 1 to 999999999 or a percentage"],
        );
    }
    let drain = |t: &str| json!({"scaleIn": {"drainTimeout": t}});
    n(drain("30m"), &[]);
    n(drain("8760h"), &[]);
    n(drain("8760h1s"), &["drainTimeout must be at most 8760h"]);
    // Past what a duration can hold (the pattern matches it; the operator could not read it).
    let overflow = failures(
        "slurmnodesets.slurm.rs",
        &object("SlurmNodeSet", nodeset(drain("9999999999999999999h"))),
        None,
    );
    assert_eq!(overflow.len(), 1, "{overflow:?}");
    n(json!({"slurm": {"realMemory": "64Gi"}}), &[]);
    n(
        json!({"slurm": {"realMemory": "0Mi"}}),
        &["realMemory must be a positive quantity"],
    );

    let update = |new: Value, want: &[&str]| {
        expect(
            "slurmnodesets.slurm.rs",
            "SlurmNodeSet",
            nodeset(new),
            Some(nodeset(json!({}))),
            want,
        )
    };
    update(json!({"replicas": 4}), &[]);
    update(
        json!({"clusterName": "other"}),
        &["clusterName is immutable"],
    );
}

/// What the API server would store for a minimal object (schema defaults applied) is what the
/// operator gets when it deserializes that minimal object (serde defaults) — so both agree on
/// every default.
#[test]
fn schema_defaults_equal_rust_defaults() {
    use super::super::{SlurmCluster, SlurmJob, SlurmNodeSet};

    fn check<K: serde::de::DeserializeOwned + serde::Serialize>(crd: &str, obj: Value) {
        let server = apply_defaults(&schema(crd), &obj);
        let rust = serde_json::to_value(serde_json::from_value::<K>(obj.clone()).unwrap()).unwrap();
        assert_eq!(
            server["spec"], rust["spec"],
            "{crd}: schema defaults differ from serde defaults"
        );
    }
    check::<SlurmCluster>(
        "slurmclusters.slurm.rs",
        object(
            "SlurmCluster",
            cluster(
                json!({"tls": {"caSecretRef": {"name": "ca"}, "caConfigMapRef": {"name": "b"}}}),
            ),
        ),
    );
    check::<SlurmCluster>(
        "slurmclusters.slurm.rs",
        object(
            "SlurmCluster",
            cluster(json!({"auth": {"jwt": null, "tokenSecretRef": {"name": "t"}}})),
        ),
    );
    check::<SlurmJob>(
        "slurmjobs.slurm.rs",
        object(
            "SlurmJob",
            job(json!({"dependsOn": [{"name": "a"}, {"name": "b", "type": "afterany"}]})),
        ),
    );
    check::<SlurmNodeSet>(
        "slurmnodesets.slurm.rs",
        object("SlurmNodeSet", nodeset(json!({}))),
    );
    check::<SlurmNodeSet>(
        "slurmnodesets.slurm.rs",
        object(
            "SlurmNodeSet",
            nodeset(json!({"updateStrategy": {"rollingUpdate": {}}})),
        ),
    );
}

/// The SlurmJobs of `examples/features/` pass admission, so the examples show fields as the API
/// server takes them.
#[test]
fn feature_examples_pass_admission() {
    use serde::Deserialize;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/features");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let object: Value = Value::deserialize(document).unwrap();
            if object["kind"] != "SlurmJob" {
                continue;
            }
            let got = failures("slurmjobs.slurm.rs", &object, None);
            assert!(got.is_empty(), "{}: {got:?}", path.display());
            checked += 1;
        }
    }
    // The MPI and GPU examples use the layout fields; dependencies and arrays have several.
    assert!(
        checked >= 6,
        "only {checked} SlurmJobs in {}",
        dir.display()
    );
}

/// `exclusive_schema` lists exactly the values serde reads and writes.
#[test]
fn exclusive_schema_lists_every_value() {
    use crate::crd::slurmjob::Exclusive;
    let listed =
        schema("slurmjobs.slurm.rs")["properties"]["spec"]["properties"]["exclusive"]["enum"]
            .clone();
    let written: Vec<Value> = [Exclusive::Node, Exclusive::User, Exclusive::Mcs]
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    assert_eq!(listed, json!(written));
    // Every variant is in that list (a new one fails to compile here until added).
    for e in [Exclusive::Node, Exclusive::User, Exclusive::Mcs] {
        match e {
            Exclusive::Node | Exclusive::User | Exclusive::Mcs => {}
        }
    }
}
