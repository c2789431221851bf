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

/// Every `(path, rule)` in a compiled schema, with its compile error or static-analysis
/// warnings.
fn rule_problems(node: &CompiledSchema, path: &str, out: &mut Vec<String>) {
    for compiled in &node.validations {
        match compiled {
            Err(e) => out.push(format!("{path}: does not compile: {e}")),
            Ok(r) => {
                for w in analyze_rule(&r.rule.rule, node, ScopeContext::CrdValidation) {
                    if matches!(w.kind, WarningKind::WrongScope | WarningKind::CostExceeded) {
                        out.push(format!("{path}: {}: {}", r.rule.rule, w.message));
                    }
                }
                if r.rule.message.as_deref().is_none_or(str::is_empty) {
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
            r["message"].as_str().unwrap_or_default().to_owned(),
        ));
    }
    for (name, child) in node["properties"].as_object().into_iter().flatten() {
        rules(child, &format!("{path}.{name}"), out);
    }
    if node.get("items").is_some() {
        rules(&node["items"], &format!("{path}[]"), out);
    }
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
        found["clusters.slurm.rs"],
        [
            s(".spec", "tls applies only to an https:// endpoint"),
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
            s(".spec.clusterRef", "clusterRef is immutable"),
            s(
                ".spec.memoryPerNode",
                "memoryPerNode must be a positive quantity such as 4Gi or 512Mi"
            ),
            s(
                ".spec.output.subPath",
                "subPath must be a relative path without '..'"
            ),
            s(
                ".spec.script",
                "script must start with an interpreter line such as #!/bin/bash"
            ),
            s(
                ".spec.timeLimit",
                "timeLimit must be at least 1m (Slurm counts time limits in whole minutes)"
            ),
        ]
    );
    assert_eq!(
        found["nodesets.slurm.rs"],
        [
            s(".spec.clusterRef", "clusterRef is immutable"),
            s(
                ".spec.slurm.realMemory",
                "realMemory must be a positive quantity such as 64Gi"
            ),
            s(
                ".spec.updateStrategy",
                "rollingUpdate may only be set when type is RollingUpdate"
            ),
            s(
                ".spec.updateStrategy.rollingUpdate.maxUnavailable",
                "maxUnavailable must be a number of at least 1 or a percentage from 1% to 100%"
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
        expect("clusters.slurm.rs", "Cluster", cluster(patch), None, want)
    };
    c(json!({}), &[]);
    c(json!({"endpoint": "http://slurmrestd.slurm.svc:6820"}), &[]);
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
        json!({"endpoint": "http://slurm:6820", "tls": {"insecureSkipVerify": true}}),
        &["tls applies only to an https:// endpoint"],
    );
}

fn job(patch: Value) -> Value {
    let mut spec = json!({"clusterRef": "main", "script": "#!/bin/bash\nsrun hostname\n"});
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

    let out =
        |sub: &str| json!({"output": {"volume": "out", "slurmPath": "/shared", "subPath": sub}});
    for ok in ["jobs", "jobs/x", "a..b", "..hidden/x"] {
        j(out(ok), &[]);
    }
    for bad in ["/abs", "..", "../up", "a/../b", "a/.."] {
        j(out(bad), &["subPath must be a relative path without '..'"]);
    }

    // clusterRef is immutable; other fields may change.
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
    update(json!({"clusterRef": "other"}), &["clusterRef is immutable"]);
}

fn nodeset(patch: Value) -> Value {
    let mut spec = json!({
        "clusterRef": "main",
        "template": {"spec": {"containers": [{"name": "slurmd", "image": "slurmd:24.11"}]}},
    });
    merge(&mut spec, patch);
    spec
}

#[test]
fn nodeset_rules() {
    let n = |patch: Value, want: &[&str]| {
        expect("nodesets.slurm.rs", "NodeSet", nodeset(patch), None, want)
    };
    n(json!({}), &[]);
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
    ] {
        n(max(ok), &[]);
    }
    for bad in [
        json!(0),
        json!(-1),
        json!("0"),
        json!("0%"),
        json!("101%"),
        json!("x%"),
        json!(""),
    ] {
        n(
            max(bad),
            &["maxUnavailable must be a number of at least 1 or a percentage"],
        );
    }
    n(json!({"slurm": {"realMemory": "64Gi"}}), &[]);
    n(
        json!({"slurm": {"realMemory": "0Mi"}}),
        &["realMemory must be a positive quantity"],
    );

    let update = |new: Value, want: &[&str]| {
        expect(
            "nodesets.slurm.rs",
            "NodeSet",
            nodeset(new),
            Some(nodeset(json!({}))),
            want,
        )
    };
    update(json!({"replicas": 4}), &[]);
    update(json!({"clusterRef": "other"}), &["clusterRef is immutable"]);
}

/// What the API server would store for a minimal object (schema defaults applied) is what the
/// operator gets when it deserializes that minimal object (serde defaults) — so both agree on
/// every default.
#[test]
fn schema_defaults_equal_rust_defaults() {
    use super::super::{Cluster, NodeSet, SlurmJob};

    fn check<K: serde::de::DeserializeOwned + serde::Serialize>(crd: &str, obj: Value) {
        let server = apply_defaults(&schema(crd), &obj);
        let rust = serde_json::to_value(serde_json::from_value::<K>(obj.clone()).unwrap()).unwrap();
        assert_eq!(
            server["spec"], rust["spec"],
            "{crd}: schema defaults differ from serde defaults"
        );
    }
    check::<Cluster>(
        "clusters.slurm.rs",
        object(
            "Cluster",
            cluster(
                json!({"tls": {"caSecretRef": {"name": "ca"}, "caConfigMapRef": {"name": "b"}}}),
            ),
        ),
    );
    check::<Cluster>(
        "clusters.slurm.rs",
        object(
            "Cluster",
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
    check::<NodeSet>("nodesets.slurm.rs", object("NodeSet", nodeset(json!({}))));
    check::<NodeSet>(
        "nodesets.slurm.rs",
        object(
            "NodeSet",
            nodeset(json!({"updateStrategy": {"rollingUpdate": {}}})),
        ),
    );
}
