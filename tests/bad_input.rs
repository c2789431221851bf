//! The bad-input catalogue (issue 7): one table of everything a user, a Secret or slurmrestd can
//! get wrong, each case run through the code path where it arrives in production, each with the
//! exact outcome it must give — never a panic, a hang or a vague error, and nothing lost.
//!
//! | group | where it arrives | run through |
//! |---|---|---|
//! | `admission` | `kubectl apply` of a CR | the installed CRD's schema (types, enums, patterns, bounds: checked here as the API server does) and its CEL rules (kube-cel) |
//! | `stored` | a CR stored before a rule existed (admission refuses it today: checked) | the operator's own checks: the real SlurmCluster reconcile (mocked Kubernetes API), `slurmjob::act::step` |
//! | `operator` | `kubectl apply` of a SlurmJob whose `extraOptions` keys no CEL rule can read (admission lets it through: checked) | `slurmjob::act::step` |
//! | `extreme` | a valid but extreme spec | the SlurmNodeSet planner |
//! | `secret` | the SlurmCluster's Secrets | the real SlurmCluster reconcile: found before anything is sent to slurmrestd |
//! | `auth` | credentials slurmrestd refuses | the real SlurmCluster reconcile against the REAL local slurmrestd |
//! | `connect` | TLS, endpoint, API version | the real SlurmCluster reconcile against the real slurmrestd (behind a TLS proxy where TLS is needed) or nothing at all |
//! | `hostile` | slurmrestd's answers | the SlurmCluster reconcile and the facade (`SlurmClient`) against servers answering recorded Slurm 24.11 bodies damaged one way (the full set: `tests/hostile_responses.rs`) |
//!
//! A SlurmCluster case asserts the whole outcome: the reconcile's error category, one status apply
//! with `Ready=False/<reason>` naming what is wrong, `Authenticated` False (refused) or Unknown
//! (never tried), one Warning Event with that reason, whether the controller waits for a change
//! (the spec or a Secret is wrong: the client is dropped) or retries with backoff (the client
//! stays), and nothing lost (`lastContactTime` kept, no other API call). A SlurmJob case asserts
//! the condition, the Events, that nothing was sent to slurmrestd, and that a running job or a
//! finished run survives the bad edit.
//!
//! Each row prints as `group case → outcome`; run with `--nocapture` to read the table. Cases
//! that need the local Slurm are skipped (and say so) without one, unless
//! `SLURM_OPERATOR_REQUIRE_SLURM=1`. Nothing here submits a Slurm job: where a submit must not
//! happen, slurmrestd is a tripwire server that fails the case on any request.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use chrono::Utc;
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::core::cel::{Validator, apply_defaults};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use secrecy::ExposeSecret;
use serde_json::{Value, json};
use slurm_operator::controller::cluster;
use slurm_operator::controller::context::Context;
use slurm_operator::controller::kit::Backoffs;
use slurm_operator::controller::nodeset::plan::{self as nodeset_plan, Action as PodAction};
use slurm_operator::controller::slurmjob::act::{self, Env, Step, Target};
use slurm_operator::controller::slurmjob::lifecycle::Dependee;
use slurm_operator::controller::slurmjob::status;
use slurm_operator::controller::slurmjob::submissions::Submissions;
use slurm_operator::crd::condition::{self, AUTHENTICATED, READY};
use slurm_operator::crd::slurmjob::{Phase, SlurmJobSpec, SlurmJobStatus};
use slurm_operator::crd::{FINALIZER, SlurmCluster, SlurmClusterStatus, UpdateStrategy};
use slurm_operator::error_chain::Chain;
use slurm_operator::leader::Leadership;
use slurm_operator::metrics::Metrics;
use slurm_operator::slurm::tag::OwnerTag;
use slurm_operator::slurm::types::{JobBaseState, NodeBaseState};
use slurm_operator::slurm::{ClientConfig, Credentials, RetryPolicy, SlurmClient, SlurmError};
use slurm_operator::state::index::ClusterState;
use wiremock::{Mock, MockServer, ResponseTemplate};

use common::hostile::{endless_server, mutated, recorded};

/// A case that takes longer than this hangs, which is a failure of its own.
const CASE_DEADLINE: Duration = Duration::from_secs(60);

/// What a case observed when it gave the outcome it must (`Ok`), or what is wrong (`Err`).
type Outcome = Result<String, String>;

struct Case {
    group: &'static str,
    name: &'static str,
    run: Pin<Box<dyn Future<Output = Outcome> + Send>>,
}

fn case(
    group: &'static str,
    name: &'static str,
    run: impl Future<Output = Outcome> + Send + 'static,
) -> Case {
    Case {
        group,
        name,
        run: Box::pin(run),
    }
}

/// `Err(what)` unless `ok`.
fn ensure(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what()) }
}

fn short(text: &str) -> String {
    const MAX: usize = 200;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

// =============================================================================================
// Admission: the CRD schema (structural checks the API server makes) and its CEL rules.
// =============================================================================================

/// The openAPIV3Schema of each kind, as installed.
fn schema(kind: &str) -> Value {
    let crd = slurm_operator::crd::all()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"));
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .unwrap();
    serde_json::to_value(schema).unwrap()
}

/// CEL's `matches` (RE2, the API server's dialect for `pattern`).
fn re2_matches(pattern: &str, text: &str) -> bool {
    use kube::core::cel::cel::{Context as CelContext, Program, Value as CelValue};
    let program = Program::compile("text.matches(pattern)").unwrap();
    let mut ctx = CelContext::default();
    ctx.add_variable_from_value("text", text.to_owned());
    ctx.add_variable_from_value("pattern", pattern.to_owned());
    matches!(program.execute(&ctx), Ok(CelValue::Bool(true)))
}

fn number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e18 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}

/// What the API server's OpenAPI validation says about `value` (types, enums, patterns, bounds,
/// required fields), in its words: `<path> in body should ...`.
fn schema_errors(schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    let Some(s) = schema.as_object() else { return };
    let ty = s.get("type").and_then(Value::as_str);
    if value.is_null() {
        if s.get("nullable") != Some(&json!(true)) {
            out.push(format!(
                "{path}: Invalid value: \"null\": {path} in body must be of type {}: \"null\"",
                ty.unwrap_or("object")
            ));
        }
        return;
    }
    let actual = match value {
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        Value::Null => "null",
    };
    let type_ok = if s.get("x-kubernetes-int-or-string") == Some(&json!(true)) {
        matches!(actual, "integer" | "string")
    } else {
        match ty {
            None => true,
            Some("number") => matches!(actual, "integer" | "number"),
            Some(t) => t == actual,
        }
    };
    if !type_ok {
        out.push(format!(
            "{path}: Invalid value: \"{actual}\": {path} in body must be of type {}: \"{actual}\"",
            ty.unwrap_or("integer-or-string")
        ));
        return;
    }
    if let Some(values) = s.get("enum").and_then(Value::as_array)
        && !values.contains(value)
    {
        let supported: Vec<String> = values.iter().map(Value::to_string).collect();
        out.push(format!(
            "{path}: Unsupported value: {value}: supported values: {}",
            supported.join(", ")
        ));
    }
    if let Some(text) = value.as_str() {
        let chars = text.chars().count() as f64;
        if let Some(min) = s.get("minLength").and_then(Value::as_f64)
            && chars < min
        {
            out.push(format!(
                "{path}: Invalid value: {value}: {path} in body should be at least {} chars long",
                number(min)
            ));
        }
        if let Some(max) = s.get("maxLength").and_then(Value::as_f64)
            && chars > max
        {
            out.push(format!(
                "{path}: Too long: {path} in body may not be longer than {}",
                number(max)
            ));
        }
        if let Some(pattern) = s.get("pattern").and_then(Value::as_str)
            && !re2_matches(pattern, text)
        {
            out.push(format!(
                "{path}: Invalid value: {value}: {path} in body should match '{pattern}'"
            ));
        }
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = s.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            out.push(format!(
                "{path}: Invalid value: {value}: {path} in body should be greater than or equal to {}",
                number(min)
            ));
        }
        if let Some(max) = s.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            out.push(format!(
                "{path}: Invalid value: {value}: {path} in body should be less than or equal to {}",
                number(max)
            ));
        }
    }
    if let Some(list) = value.as_array() {
        if let Some(max) = s.get("maxItems").and_then(Value::as_f64)
            && list.len() as f64 > max
        {
            out.push(format!(
                "{path}: Too many: {path} in body should have at most {} items",
                number(max)
            ));
        }
        if let Some(items) = s.get("items") {
            for (i, item) in list.iter().enumerate() {
                schema_errors(items, item, &format!("{path}[{i}]"), out);
            }
        }
    }
    if let Some(map) = value.as_object() {
        for field in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !map.contains_key(field) {
                out.push(format!("{}: Required value", join(path, field)));
            }
        }
        let properties = s.get("properties").and_then(Value::as_object);
        for (key, child) in map {
            let at = join(path, key);
            // Unknown fields are pruned, not refused (nor checked).
            if let Some(sub) = properties.and_then(|p| p.get(key)) {
                schema_errors(sub, child, &at, out);
            } else if let Some(sub) = s.get("additionalProperties").filter(|a| a.is_object()) {
                schema_errors(sub, child, &at, out);
            }
        }
    }
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

/// Every reason the API server would refuse `object` (an update from `old` when given): the
/// schema first, then the CEL rules, as `field: message`.
fn admission(kind: &str, object: &Value, old: Option<&Value>) -> Vec<String> {
    let schema = schema(kind);
    let defaulted = apply_defaults(&schema, object);
    let mut errors = Vec::new();
    // metadata is the API server's own (ObjectMeta); the CRD schema does not describe it.
    let mut body = defaulted.clone();
    if let Some(map) = body.as_object_mut() {
        map.remove("metadata");
    }
    schema_errors(&schema, &body, "", &mut errors);
    if let Err(cel) = Validator::new().validate(&schema, object, old) {
        errors.extend(
            cel.into_vec()
                .into_iter()
                .map(|e| match e.field_path.as_str() {
                    // A rule at the root of the object (it reads metadata.name).
                    "" => e.message,
                    path => format!("{path}: {}", e.message),
                }),
        );
    }
    errors
}

/// A custom resource of `kind` named `name`.
fn cr(kind: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "slurm.rs/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    })
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

fn patched(mut base: Value, patch: Value) -> Value {
    merge(&mut base, patch);
    base
}

fn cluster_spec() -> Value {
    json!({
        "endpoint": "https://slurmrestd.example.org:6820",
        "auth": {"jwt": {"keySecretRef": {"name": "slurm-jwt"}}},
    })
}

fn job_spec() -> Value {
    json!({"clusterName": "main", "script": "#!/bin/bash\nsrun hostname\n"})
}

fn nodeset_spec() -> Value {
    json!({
        "clusterName": "main",
        "template": {"spec": {"containers": [{"name": "slurmd", "image": "slurmd:24.11"}]}},
    })
}

/// The valid objects every admission case starts from: they must pass, or every refusal below
/// would prove nothing.
fn admission_controls() -> Result<(), String> {
    for (kind, spec) in [
        ("SlurmCluster", cluster_spec()),
        ("SlurmJob", job_spec()),
        ("SlurmNodeSet", nodeset_spec()),
    ] {
        let errors = admission(kind, &cr(kind, "valid", spec), None);
        ensure(errors.is_empty(), || {
            format!("the valid {kind} is refused: {errors:?}")
        })?;
    }
    Ok(())
}

/// `kind` with `patch` merged into its valid spec must be refused for exactly one reason, which
/// contains `want` (and the field, for schema errors).
fn refused(kind: &'static str, object: Value, old: Option<Value>, want: &'static str) -> Outcome {
    refused_for(kind, object, old, &[want])
}

/// Refused for exactly the reasons `wants`, in order (schema errors come before CEL's).
fn refused_for(kind: &str, object: Value, old: Option<Value>, wants: &[&str]) -> Outcome {
    let errors = admission(kind, &object, old.as_ref());
    let matched =
        errors.len() == wants.len() && errors.iter().zip(wants).all(|(e, w)| e.contains(w));
    match errors.first() {
        Some(first) if matched => Ok(format!("refused: {}", short(first))),
        None => Err(format!("admitted, want refused with {wants:?}")),
        Some(_) => Err(format!("want refusals {wants:?}, got {errors:#?}")),
    }
}

fn admission_case(
    name: &'static str,
    kind: &'static str,
    patch: Value,
    want: &'static str,
) -> Case {
    let base = match kind {
        "SlurmCluster" => cluster_spec(),
        "SlurmJob" => job_spec(),
        _ => nodeset_spec(),
    };
    let object = cr(kind, "x", patched(base, patch));
    case("admission", name, async move {
        refused(kind, object, None, want)
    })
}

fn admission_cases() -> Vec<Case> {
    let c = |name, patch, want| admission_case(name, "SlurmCluster", patch, want);
    let j = |name, patch, want| admission_case(name, "SlurmJob", patch, want);
    let n = |name, patch, want| admission_case(name, "SlurmNodeSet", patch, want);
    let url = "endpoint must be an http:// or https:// URL";
    let one_auth = "auth must set exactly one of jwt or tokenSecretRef";
    vec![
        c(
            "SlurmCluster: endpoint ftp://",
            json!({"endpoint": "ftp://slurm:6820"}),
            url,
        ),
        c(
            "SlurmCluster: endpoint without a scheme",
            json!({"endpoint": "slurmrestd:6820"}),
            url,
        ),
        c(
            "SlurmCluster: access to namespace Team_A",
            json!({"access": [{"namespaces": ["team-a", "Team_A"], "slurmUser": "alice"}]}),
            "spec.access[0].namespaces[1] in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
        ),
        c(
            "SlurmCluster: both jwt and tokenSecretRef",
            json!({"auth": {"tokenSecretRef": {"name": "tok"}}}),
            one_auth,
        ),
        c(
            "SlurmCluster: no auth method",
            json!({"auth": {"jwt": null}}),
            one_auth,
        ),
        c(
            "SlurmCluster: jwt lifetime 1h",
            json!({"auth": {"jwt": {"lifetime": "1h"}}}),
            "lifetime must be between 30s and 15m",
        ),
        c(
            "SlurmCluster: pollInterval 10ms",
            json!({"pollInterval": "10ms"}),
            "pollInterval must be between 100ms and 5m",
        ),
        c(
            "SlurmCluster: maxResponseSize 2Gi",
            json!({"maxResponseSize": "2Gi"}),
            "maxResponseSize must be a quantity between 1Mi and 1Gi",
        ),
        c(
            "SlurmCluster: listingTimeout 2h",
            json!({"listingTimeout": "2h"}),
            "listingTimeout must be between 30s and 1h",
        ),
        c(
            "SlurmCluster: tls on an http:// endpoint",
            json!({"endpoint": "http://slurm:6820", "allowInsecureHttp": true,
                   "tls": {"insecureSkipVerify": true}}),
            "tls applies only to an https:// endpoint",
        ),
        c(
            "SlurmCluster: http:// without allowInsecureHttp",
            json!({"endpoint": "http://slurm:6820"}),
            "endpoint must be an https:// URL",
        ),
        c(
            "SlurmCluster: access without namespaces",
            json!({"access": [{"slurmUser": "alice"}]}),
            "access needs namespaces or a namespaceSelector",
        ),
        c(
            "SlurmCluster: access to an empty namespaceSelector",
            json!({"access": [{"slurmUser": "alice", "namespaceSelector": {}}]}),
            "namespaceSelector must name labels",
        ),
        c(
            "SlurmCluster: access to a namespaceSelector of empty lists",
            json!({"access": [{"slurmUser": "alice",
                   "namespaceSelector": {"matchLabels": {}, "matchExpressions": []}}]}),
            "namespaceSelector must name labels",
        ),
        c(
            "SlurmCluster: Secret name not a DNS name",
            json!({"auth": {"jwt": {"keySecretRef": {"name": "Slurm_JWT"}}}}),
            "spec.auth.jwt.keySecretRef.name in body should match",
        ),
        c(
            "SlurmCluster: restApiVersion v0.0.39",
            json!({"restApiVersion": "v0.0.39"}),
            "spec.restApiVersion: Unsupported value: \"v0.0.39\"",
        ),
        j(
            "SlurmJob: script without #!",
            json!({"script": "srun hostname"}),
            "script must start with an interpreter line",
        ),
        j(
            "SlurmJob: memoryPerNode \"lots\"",
            json!({"memoryPerNode": "lots"}),
            "memoryPerNode must be a positive quantity",
        ),
        j(
            "SlurmJob: memoryPerNode -1Gi",
            json!({"memoryPerNode": "-1Gi"}),
            "memoryPerNode must be a positive quantity",
        ),
        j(
            "SlurmJob: timeLimit 30s",
            json!({"timeLimit": "30s"}),
            "timeLimit must be at least 1m",
        ),
        j(
            "SlurmJob: nodes 4-1",
            json!({"nodes": "4-1"}),
            "the nodes range must not end below its start",
        ),
        j(
            "SlurmJob: ntasks 0",
            json!({"ntasks": 0}),
            "spec.ntasks in body should be greater than or equal to 1",
        ),
        j(
            "SlurmJob: ntasks \"four\" (wrong type)",
            json!({"ntasks": "four"}),
            "spec.ntasks in body must be of type integer: \"string\"",
        ),
        j(
            "SlurmJob: cpusPerTask 2^31",
            json!({"cpusPerTask": 2_147_483_648_i64}),
            "spec.cpusPerTask in body should be less than or equal to 2147483647",
        ),
        j(
            "SlurmJob: array \"a-b\"",
            json!({"array": "a-b"}),
            "array must list indices",
        ),
        j(
            "SlurmJob: output subPath ../up",
            json!({"output": {"volume": "out", "slurmPath": "/shared", "subPath": "../up"}}),
            "subPath must be a relative path without '..'",
        ),
        j(
            "SlurmJob: clusterName \"Main\"",
            json!({"clusterName": "Main"}),
            "clusterName must be the name of a SlurmCluster",
        ),
        j(
            "SlurmJob: name \"bash,python\" (accounting reads a list)",
            json!({"name": "bash,python"}),
            "name must not contain a comma",
        ),
        case("admission", "SlurmJob: dependsOn itself", async {
            let object = cr(
                "SlurmJob",
                "train",
                patched(
                    job_spec(),
                    json!({"dependsOn": [{"name": "prepare"}, {"name": "train"}]}),
                ),
            );
            refused(
                "SlurmJob",
                object,
                None,
                "dependsOn cannot name the SlurmJob itself",
            )
        }),
        case("admission", "SlurmJob: clusterName changed", async {
            let old = cr("SlurmJob", "x", job_spec());
            let new = cr(
                "SlurmJob",
                "x",
                patched(job_spec(), json!({"clusterName": "other"})),
            );
            refused("SlurmJob", new, Some(old), "clusterName is immutable")
        }),
        n(
            "SlurmNodeSet: replicas -1",
            json!({"replicas": -1}),
            "spec.replicas in body should be greater than or equal to 0",
        ),
        n(
            "SlurmNodeSet: replicas 2^31 (past int32)",
            json!({"replicas": 2_147_483_648_i64}),
            "spec.replicas in body should be less than or equal to 2147483647",
        ),
        n(
            "SlurmNodeSet: probe port 3000000000 (past int32)",
            json!({"template": {"spec": {"containers": [{
                "name": "slurmd", "image": "slurmd:24.11",
                "livenessProbe": {"tcpSocket": {"port": 3_000_000_000_i64}},
            }]}}}),
            "spec.template.spec.containers[0].livenessProbe.tcpSocket.port in body should be \
             less than or equal to 65535",
        ),
        n(
            "SlurmNodeSet: template creationTimestamp +26:00 (a date-time the operator cannot read)",
            json!({"template": {
                "metadata": {"creationTimestamp": "2024-01-01T00:00:00+26:00"},
                "spec": {"containers": [{"name": "slurmd", "image": "slurmd:24.11"}]},
            }}),
            "spec.template.metadata.creationTimestamp in body should match",
        ),
        n(
            "SlurmNodeSet: template creationTimestamp in the year 9999 (past what the operator reads)",
            json!({"template": {
                "metadata": {"creationTimestamp": "9999-12-31T00:00:00Z"},
                "spec": {"containers": [{"name": "slurmd", "image": "slurmd:24.11"}]},
            }}),
            "spec.template.metadata.creationTimestamp in body should match",
        ),
        n(
            "SlurmNodeSet: a feature carrying another --conf key",
            json!({"slurm": {"features": ["gpu CPUs=1"]}}),
            "spec.slurm.features[0] in body should match",
        ),
        n(
            "SlurmNodeSet: gres carrying another --conf key",
            json!({"slurm": {"gres": "gpu:1 Weight=0"}}),
            "spec.slurm.gres in body should match",
        ),
        n(
            "SlurmNodeSet: realMemory 0Mi",
            json!({"slurm": {"realMemory": "0Mi"}}),
            "realMemory must be a positive quantity",
        ),
        n(
            "SlurmNodeSet: maxUnavailable 0%",
            json!({"updateStrategy": {"rollingUpdate": {"maxUnavailable": "0%"}}}),
            "maxUnavailable must be a number from 1 to 999999999 or a percentage",
        ),
        n(
            "SlurmNodeSet: updateStrategy type \"Sometimes\"",
            json!({"updateStrategy": {"type": "Sometimes"}}),
            "spec.updateStrategy.type: Unsupported value: \"Sometimes\"",
        ),
        case(
            "admission",
            "SlurmNodeSet: drainTimeout \"forever\"",
            async {
                // A pattern error does not stop the CEL rules (only type, required and size errors
                // do): the bound's rule fails to parse the text as well.
                let object = cr(
                    "SlurmNodeSet",
                    "x",
                    patched(
                        nodeset_spec(),
                        json!({"scaleIn": {"drainTimeout": "forever"}}),
                    ),
                );
                refused_for(
                    "SlurmNodeSet",
                    object,
                    None,
                    &[
                        "spec.scaleIn.drainTimeout in body should match",
                        "spec.scaleIn.drainTimeout: rule evaluation error",
                    ],
                )
            },
        ),
        case(
            "admission",
            "SlurmNodeSet: name too long for node names",
            async {
                // Pods and Slurm nodes are <name>-<namespace tag>-<ordinal>, a DNS label.
                let object = cr("SlurmNodeSet", &"a".repeat(47), nodeset_spec());
                refused(
                    "SlurmNodeSet",
                    object,
                    None,
                    "a SlurmNodeSet's name must be a DNS label of at most 46 characters",
                )
            },
        ),
        case("admission", "SlurmNodeSet: name with a dot", async {
            let object = cr("SlurmNodeSet", "cpu.v2", nodeset_spec());
            refused(
                "SlurmNodeSet",
                object,
                None,
                "a SlurmNodeSet's name must be a DNS label of at most 46 characters",
            )
        }),
        n(
            "SlurmNodeSet: drainTimeout 2 years",
            json!({"scaleIn": {"drainTimeout": "17520h"}}),
            "drainTimeout must be at most 8760h",
        ),
        case(
            "admission",
            "SlurmNodeSet: drainTimeout past 2^64 ns",
            async {
                // Matches the duration pattern; the operator could not read it. CEL's duration()
                // cannot parse it either: the rule fails (an evaluation error), so it is refused.
                let object = cr(
                    "SlurmNodeSet",
                    "x",
                    patched(
                        nodeset_spec(),
                        json!({"scaleIn": {"drainTimeout": "9999999999999999999h"}}),
                    ),
                );
                let errors = admission("SlurmNodeSet", &object, None);
                let unreadable =
                    serde_json::from_value::<slurm_operator::crd::SlurmNodeSet>(object)
                        .map(|_| ())
                        .map_err(|e| e.to_string());
                match (errors.as_slice(), unreadable) {
                    ([only], Err(why)) if only.contains("drainTimeout") => Ok(format!(
                        "refused: {} (the operator could not read it: {why})",
                        short(only)
                    )),
                    (_, Ok(())) => Err("the operator reads it: the case proves nothing".into()),
                    (errors, _) => Err(format!("want one refusal on drainTimeout: {errors:#?}")),
                }
            },
        ),
    ]
}

// =============================================================================================
// A mocked Kubernetes API for the real SlurmCluster reconcile.
// =============================================================================================

const NS: &str = "bad-input";
const CLUSTER: &str = "bad";
/// The SlurmCluster worked before this reconcile: its status says so, and when slurmrestd last
/// answered must survive the failure.
const LAST_CONTACT: &str = "2026-01-02T03:04:05Z";

/// What the mocked API server saw.
#[derive(Default)]
struct Seen {
    /// Status applies (server-side apply of `/status`).
    statuses: Vec<SlurmClusterStatus>,
    /// Event bodies created.
    events: Vec<Value>,
    /// Anything else: a failure of every case.
    unexpected: Vec<String>,
}

fn api_status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    json_response(
        code,
        &json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code.as_u16(),
        }),
    )
}

fn json_response(code: StatusCode, body: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

/// A kube client whose API server holds `objects` (Secrets and ConfigMaps, as raw JSON so that
/// they can be malformed) in namespace [`NS`], answers the SlurmCluster's status applies with
/// `cluster` and records everything.
fn mocked_api(cluster: Value, objects: Vec<Value>) -> (kube::Client, Arc<Mutex<Seen>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let path = parts.uri.path().to_owned();
            let get = |plural: &str| {
                path.strip_prefix(&format!("/api/v1/namespaces/{NS}/{plural}/"))
                    .filter(|_| parts.method == Method::GET)
                    .map(str::to_owned)
            };
            let response = if let Some(name) = get("secrets") {
                stored(&objects, "Secret", &name)
            } else if let Some(name) = get("configmaps") {
                stored(&objects, "ConfigMap", &name)
            } else if parts.method == Method::PATCH
                && path == format!("/apis/slurm.rs/v1alpha1/slurmclusters/{CLUSTER}/status")
            {
                let status: SlurmClusterStatus =
                    serde_json::from_value(body["status"].clone()).unwrap();
                record.lock().unwrap().statuses.push(status);
                let mut answer = cluster.clone();
                answer["status"] = body["status"].clone();
                json_response(StatusCode::OK, &answer)
            } else if parts.method == Method::POST
                // A cluster-scoped object's Events go to `default`.
                && path == "/apis/events.k8s.io/v1/namespaces/default/events"
            {
                record.lock().unwrap().events.push(body.clone());
                json_response(StatusCode::CREATED, &body)
            } else {
                record
                    .lock()
                    .unwrap()
                    .unexpected
                    .push(format!("{} {}", parts.method, parts.uri));
                api_status(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    "unexpected",
                )
            };
            send.send_response(response);
        }
    });
    (kube::Client::new(service, NS), seen)
}

fn stored(objects: &[Value], kind: &str, name: &str) -> Response<Body> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .map_or_else(
            || {
                api_status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("{kind} \"{name}\" not found"),
                )
            },
            |o| json_response(StatusCode::OK, o),
        )
}

/// A Secret in [`NS`] (the credentials namespace here) with `data` (values base64-encoded, as
/// the API serves them), marked as SlurmCluster credentials.
fn secret(name: &str, data: &[(&str, &[u8])]) -> Value {
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(BASE64.encode(v))))
        .collect();
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": name, "namespace": NS, "labels": {"slurm.rs/credentials": "true"}},
           "data": data})
}

fn config_map(name: &str, data: &[(&str, &str)]) -> Value {
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": NS, "labels": {"slurm.rs/credentials": "true"}},
           "data": data})
}

/// The SlurmCluster as stored: `spec`, the finalizer, and the status of a SlurmCluster that worked.
fn stored_cluster(spec: Value) -> Value {
    let cond = |type_: &str, reason: &str| {
        json!({"type": type_, "status": "True", "reason": reason, "message": "worked before",
               "lastTransitionTime": LAST_CONTACT, "observedGeneration": 1})
    };
    json!({
        "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmCluster",
        "metadata": {"name": CLUSTER, "uid": "uid-bad-input",
                     "generation": 1, "finalizers": [FINALIZER]},
        "spec": spec,
        "status": {
            "conditions": [cond(READY, "Connected"), cond(AUTHENTICATED, "TokenAccepted")],
            "observedGeneration": 1, "clusterName": "local", "lastContactTime": LAST_CONTACT,
        },
    })
}

/// One reconcile of the SlurmCluster, as the controller runs it (then its `error_policy`).
struct ClusterRun {
    /// The reconcile's error: category, message with its sources, whether it waits for a change.
    error: Option<(&'static str, String, bool)>,
    action: Action,
    seen: Seen,
    /// Whether a client (and poller) stays registered for the SlurmCluster.
    registered: bool,
}

async fn reconcile_cluster(spec: Value, objects: Vec<Value>) -> Result<ClusterRun, String> {
    let object = stored_cluster(spec);
    let cluster: SlurmCluster = serde_json::from_value(object.clone())
        .map_err(|e| format!("bad test SlurmCluster: {e}"))?;
    let (client, seen) = mocked_api(object, objects);
    let mut ctx = Context::new(client, Metrics::new());
    ctx.credentials_namespace = NS.to_owned();
    let ctx = Arc::new(ctx);
    let cluster = Arc::new(cluster);
    let key = ObjectRef::from_obj(cluster.as_ref());
    let result = cluster::reconcile(Arc::clone(&cluster), Arc::clone(&ctx)).await;
    let (error, action) = match &result {
        Ok(action) => (None, action.clone()),
        Err(error) => (
            Some((
                error.category(),
                Chain(error).to_string(),
                error.is_invalid_spec(),
            )),
            cluster::error_policy(Arc::clone(&cluster), error, Arc::clone(&ctx)),
        ),
    };
    let registered = ctx.clusters.contains(&key);
    // Stop the poller the reconcile may have started.
    ctx.clusters.remove(&key);
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    Ok(ClusterRun {
        error,
        action,
        seen,
        registered,
    })
}

/// What a failed SlurmCluster must show.
struct Want {
    /// `Ready=False` reason, the Warning Event's reason and the error category.
    reason: &'static str,
    /// `Authenticated`: "False" (credentials refused) or "Unknown" (never tried).
    authenticated: &'static str,
    /// Words the `Ready` message must contain: what is wrong, and where.
    names: Vec<String>,
    /// A spec or Secret problem: the client is dropped and the controller waits for a change.
    /// Otherwise the client stays (its poller notices a recovery) and it retries with backoff.
    config: bool,
}

fn want(reason: &'static str, authenticated: &'static str, names: &[&str], config: bool) -> Want {
    Want {
        reason,
        authenticated,
        names: names.iter().map(|s| (*s).to_owned()).collect(),
        config,
    }
}

/// Every check a failed SlurmCluster reconcile must pass; the outcome line on success.
fn check_cluster(run: &ClusterRun, want: &Want) -> Outcome {
    let Some((category, chain, invalid_spec)) = &run.error else {
        return Err(format!("the reconcile succeeded: {:?}", run.action));
    };
    ensure(*category == want.reason, || {
        format!("error {category} ({chain}), want {}", want.reason)
    })?;
    ensure(run.seen.unexpected.is_empty(), || {
        format!("unexpected API calls: {:?}", run.seen.unexpected)
    })?;
    let [status] = run.seen.statuses.as_slice() else {
        return Err(format!(
            "want one status apply, got {}",
            run.seen.statuses.len()
        ));
    };
    let ready = condition::find(&status.conditions, READY).ok_or("no Ready condition")?;
    ensure(
        ready.status == "False" && ready.reason == want.reason,
        || format!("Ready={}/{}: {}", ready.status, ready.reason, ready.message),
    )?;
    for name in &want.names {
        ensure(ready.message.contains(name.as_str()), || {
            format!(
                "the Ready message does not name {name:?}: {}",
                ready.message
            )
        })?;
    }
    ensure(ready.observed_generation == Some(1), || {
        format!("Ready.observedGeneration {:?}", ready.observed_generation)
    })?;
    let auth = condition::find(&status.conditions, AUTHENTICATED).ok_or("no Authenticated")?;
    ensure(auth.status == want.authenticated, || {
        format!(
            "Authenticated={}/{} ({}), want {}",
            auth.status, auth.reason, auth.message, want.authenticated
        )
    })?;
    // Nothing lost: when slurmrestd last answered stays in the status.
    ensure(
        status
            .last_contact_time
            .as_ref()
            .is_some_and(|t| t.0.to_string() == LAST_CONTACT),
        || format!("lastContactTime lost: {:?}", status.last_contact_time),
    )?;
    let [event] = run.seen.events.as_slice() else {
        return Err(format!(
            "want one Event, got {:?}",
            run.seen
                .events
                .iter()
                .map(|e| &e["reason"])
                .collect::<Vec<_>>()
        ));
    };
    ensure(
        event["type"] == "Warning" && event["reason"] == want.reason,
        || format!("Event {}/{}", event["type"], event["reason"]),
    )?;
    ensure(*invalid_spec == want.config, || {
        format!("is_invalid_spec {invalid_spec}")
    })?;
    let (wanted_action, then) = if want.config {
        (Action::await_change(), "waits for a change")
    } else {
        (Action::requeue(Backoffs::MIN), "retries with backoff")
    };
    ensure(run.action == wanted_action, || {
        format!("action {:?}, want {wanted_action:?}", run.action)
    })?;
    ensure(run.registered != want.config, || {
        format!("client registered: {}", run.registered)
    })?;
    Ok(format!(
        "Ready=False/{} Authenticated={}, {then}: {}",
        want.reason,
        auth.status,
        short(&ready.message)
    ))
}

fn cluster_case(
    group: &'static str,
    name: &'static str,
    spec: Value,
    objects: Vec<Value>,
    want: Want,
) -> Case {
    case(group, name, async move {
        let note = admission_note(
            "SlurmCluster",
            &cr("SlurmCluster", CLUSTER, spec.clone()),
            group,
        )?;
        let run = reconcile_cluster(spec, objects).await?;
        Ok(format!("{note}{}", check_cluster(&run, &want)?))
    })
}

/// An object of the `stored` group must be one admission refuses (it can only exist because it
/// was stored before the rule); any other must be one admission lets through (the problem is
/// elsewhere, or only the operator can see it).
fn admission_note(kind: &str, object: &Value, group: &str) -> Result<&'static str, String> {
    let errors = admission(kind, object, None);
    if group == "stored" {
        ensure(!errors.is_empty(), || {
            "admission lets it through: not a stored-before-the-rule case".into()
        })?;
        Ok("(admission refuses it) ")
    } else {
        ensure(errors.is_empty(), || {
            format!("admission refuses it: {errors:?}")
        })?;
        Ok("")
    }
}

// =============================================================================================
// The local Slurm, servers standing in for slurmrestd, and recorded answers.
// =============================================================================================

/// A server answering `/diag` with `diag` and everything else with the recorded `/ping`.
async fn diag_server(status: u16, content_type: &str, diag: Vec<u8>) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::path_regex("/diag/?$"))
        .respond_with(ResponseTemplate::new(status).set_body_raw(diag, content_type))
        .mount(&server)
        .await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            serde_json::to_vec(&recorded("ping")).unwrap(),
            "application/json",
        ))
        .mount(&server)
        .await;
    server
}

/// A server answering every request with `body`.
async fn answering(status: u16, content_type: &str, body: Vec<u8>) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(status).set_body_raw(body, content_type))
        .mount(&server)
        .await;
    server
}

/// A facade client for a test server: no retries, a short timeout, any credentials.
fn facade(uri: &str) -> SlurmClient {
    let config = ClientConfig::new(uri)
        .unwrap()
        .allow_plaintext(true)
        .with_api_version(Some(slurm_operator::slurm::ApiVersion::V0_0_42))
        .with_retry(RetryPolicy::none())
        .with_request_timeout(Duration::from_secs(10));
    let credentials = Arc::new(Credentials::token("t", None).unwrap());
    SlurmClient::new(config, credentials).unwrap()
}

fn expect_error<T: std::fmt::Debug>(
    result: Result<T, SlurmError>,
    category: &str,
    names: &[&str],
) -> Outcome {
    match result {
        Err(error) if error.category() == category => {
            let text = Chain(&error).to_string();
            for name in names {
                ensure(text.contains(name), || {
                    format!("{category}, but the message does not name {name:?}: {text}")
                })?;
            }
            Ok(format!("{category}: {}", short(&text)))
        }
        Err(error) => Err(format!(
            "want {category}, got {} ({})",
            error.category(),
            Chain(&error)
        )),
        Ok(value) => Err(format!("want {category}, got a value: {value:?}")),
    }
}

// =============================================================================================
// Cases needing the local Slurm: Secrets, credentials and connections judged by the REAL
// slurmrestd through the real SlurmCluster reconcile.
// =============================================================================================

fn jwt_spec(endpoint: &str) -> Value {
    json!({
        "endpoint": endpoint,
        "allowInsecureHttp": endpoint.starts_with("http://"),
        "pollInterval": "1s",
        "auth": {"jwt": {"keySecretRef": {"name": "jwt"}, "user": "slurm", "lifetime": "5m"}},
    })
}

fn token_spec(endpoint: &str) -> Value {
    json!({"endpoint": endpoint, "allowInsecureHttp": endpoint.starts_with("http://"),
           "pollInterval": "1s", "auth": {"tokenSecretRef": {"name": "tok"}}})
}

fn key_secret(key: &[u8]) -> Value {
    secret("jwt", &[("jwt_hs256.key", key)])
}

fn token_secret(token: &[u8]) -> Value {
    secret("tok", &[("token", token)])
}

fn slurm_cases(slurm: &common::LocalSlurm) -> Vec<Case> {
    let url = slurm.url.clone();
    let key = slurm.key();
    let good = || key_secret(&key);
    let jwt = || jwt_spec(&url);
    let token = || token_spec(&url);
    // 511 from slurmrestd, as recorded ("Protocol authentication error").
    let rejected = |names: &[&str]| want("Unauthorized", "False", names, false);
    let expired = {
        // Minted by the operator's own code with the real key, an hour ago, for 30 s.
        let credentials =
            Credentials::minted(key.clone(), &slurm.user, Duration::from_secs(30)).unwrap();
        let then = SystemTime::now() - Duration::from_secs(3600);
        credentials
            .token_at(then)
            .unwrap()
            .expose_secret()
            .to_owned()
    };
    let mut cases = vec![
        // --- credentials judged by the real slurmrestd ---
        cluster_case(
            "auth",
            "wrong key",
            jwt(),
            vec![key_secret(&[0x5a; 32])],
            rejected(&[
                "rejected the credentials",
                "511",
                "Slurm user \"slurm\" with the key in Secret \"jwt\"",
            ]),
        ),
        cluster_case(
            "auth",
            "key stored base64-encoded (encoded twice)",
            jwt(),
            vec![key_secret(BASE64.encode(&key).as_bytes())],
            rejected(&["rejected the credentials"]),
        ),
        cluster_case(
            "auth",
            "key too short (1 byte)",
            jwt(),
            vec![key_secret(b"k")],
            rejected(&["rejected the credentials"]),
        ),
        cluster_case(
            "auth",
            "token expired an hour ago",
            token(),
            vec![token_secret(expired.as_bytes())],
            // Refused from its exp claim before slurmrestd sees it.
            want(
                "InvalidCredentials",
                "False",
                &["the token expired at", "the token in Secret \"tok\""],
                false,
            ),
        ),
        cluster_case(
            "auth",
            "token not a JWT",
            token(),
            vec![token_secret(b"not-a-jwt")],
            rejected(&["rejected the credentials"]),
        ),
        // --- the connection ---
        cluster_case(
            "connect",
            "https:// to slurmrestd's plain http",
            jwt_spec(&url.replacen("http://", "https://", 1)),
            vec![good()],
            want("TLSError", "Unknown", &["TLS"], false),
        ),
        cluster_case(
            "connect",
            "endpoint path not slurmrestd's",
            jwt_spec(&format!("{url}/not-slurmrestd")),
            vec![good()],
            want("UnsupportedVersion", "Unknown", &["/not-slurmrestd"], false),
        ),
    ];
    let pem = {
        let ours = common::tls::pki();
        let other = common::tls::pki();
        (ours, other.ca_pem)
    };
    let upstream = url.clone();
    let key_for_tls = key.clone();
    cases.push(case(
        "connect",
        "TLS: certificate from another CA",
        async move {
            let (ours, other_ca) = pem;
            let proxy = common::tls::tls_proxy(&ours, &upstream).await;
            let spec = patched(
                jwt_spec(&proxy),
                json!({"tls": {"caSecretRef": {"name": "ca"}}}),
            );
            let objects = vec![
                key_secret(&key_for_tls),
                secret("ca", &[("ca.crt", other_ca.as_bytes())]),
            ];
            let run = reconcile_cluster(spec.clone(), objects).await?;
            let outcome =
                check_cluster(&run, &want("TLSError", "Unknown", &["certificate"], false))?;
            // Control: the right CA through the same proxy works.
            let objects = vec![
                key_secret(&key_for_tls),
                secret("ca", &[("ca.crt", ours.ca_pem.as_bytes())]),
            ];
            let run = reconcile_cluster(spec, objects).await?;
            ensure(run.error.is_none(), || {
                format!("control with the right CA failed: {:?}", run.error)
            })?;
            Ok(outcome)
        },
    ));
    cases
}

/// Secrets the operator cannot use: found before anything is sent to slurmrestd.
fn secret_cases() -> Vec<Case> {
    let key = ANY_KEY;
    let good = || key_secret(key);
    let jwt = || jwt_spec(NO_SLURM);
    let token = || token_spec(NO_SLURM);
    vec![
        cluster_case(
            "secret",
            "Secret missing",
            jwt(),
            vec![],
            want("SecretNotFound", "False", &["\"jwt\"", "not found"], true),
        ),
        cluster_case(
            "secret",
            "key missing in the Secret",
            jwt(),
            vec![secret("jwt", &[("jwt.key", key)])],
            want(
                "SecretKeyMissing",
                "False",
                &["\"jwt\"", "\"jwt_hs256.key\""],
                true,
            ),
        ),
        cluster_case(
            "secret",
            "key empty (whitespace only)",
            jwt(),
            vec![key_secret(b" \n")],
            want(
                "SecretKeyEmpty",
                "False",
                &["\"jwt_hs256.key\"", "is empty"],
                true,
            ),
        ),
        case("secret", "Secret data not base64", {
            let spec = jwt();
            async move {
                let mut garbled = key_secret(b"x");
                garbled["data"]["jwt_hs256.key"] = json!("%%% not base64 %%%");
                let run = reconcile_cluster(spec, vec![garbled]).await?;
                let Some((category, chain, invalid)) = &run.error else {
                    return Err("the reconcile succeeded".into());
                };
                // The API server never serves this (Secret data is bytes); if a proxy did, it is
                // a failed read of the Secret: retried with backoff, the status left as it was.
                ensure(*category == "ReadSecretFailed" && !invalid, || {
                    format!("{category}: {chain}")
                })?;
                ensure(chain.contains("\"jwt\""), || chain.clone())?;
                ensure(
                    run.seen.statuses.is_empty() && run.seen.events.is_empty(),
                    || "the status or Events changed".into(),
                )?;
                ensure(run.action == Action::requeue(Backoffs::MIN), || {
                    format!("{:?}", run.action)
                })?;
                Ok(format!(
                    "ReadSecretFailed, retries with backoff: {}",
                    short(chain)
                ))
            }
        }),
        cluster_case(
            "secret",
            "token not UTF-8",
            token(),
            vec![token_secret(&[0xff, 0xfe, 0x41])],
            want("TokenNotUTF8", "False", &["\"token\"", "\"tok\""], true),
        ),
        cluster_case(
            "secret",
            "token with a line break inside",
            token(),
            vec![token_secret(b"eyJhbGciOi\r\nX-Injected: 1")],
            want("InvalidToken", "False", &["\"tok\"", "HTTP header"], true),
        ),
        cluster_case(
            "secret",
            "jwt.user with a newline (the schema allows it)",
            patched(
                jwt(),
                json!({"auth": {"jwt": {"user": "slurm\nX-Evil: 1"}}}),
            ),
            vec![good()],
            want("InvalidJWTUser", "False", &["spec.auth.jwt.user"], true),
        ),
    ]
}

/// An endpoint where nothing listens: cases that must fail before any request use it, so that
/// a request would show as `Unreachable` rather than pass.
const NO_SLURM: &str = "http://127.0.0.1:1";

/// Connection problems that need no Slurm behind the endpoint.
fn connect_cases() -> Vec<Case> {
    let good = || key_secret(ANY_KEY);
    vec![
        cluster_case(
            "connect",
            "nothing listening",
            jwt_spec("http://127.0.0.1:1"),
            vec![good()],
            want("Unreachable", "Unknown", &["127.0.0.1:1"], false),
        ),
        cluster_case(
            "connect",
            "credentials in the endpoint URL (the CEL rule allows it)",
            jwt_spec("http://user:pw@127.0.0.1:6820"),
            vec![good()],
            want(
                "InvalidEndpoint",
                "Unknown",
                &["credentials do not belong"],
                true,
            ),
        ),
        cluster_case(
            "connect",
            "TLS: CA bundle not PEM",
            patched(
                jwt_spec("https://127.0.0.1:6820"),
                json!({"tls": {"caConfigMapRef": {"name": "ca"}}}),
            ),
            vec![good(), config_map("ca", &[("ca.crt", "not a certificate")])],
            want(
                "InvalidCA",
                "Unknown",
                &["ConfigMap \"ca\"", "\"ca.crt\""],
                true,
            ),
        ),
    ]
}

/// A key for Clusters whose slurmrestd is a test server (it checks no token).
const ANY_KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

// =============================================================================================
// slurmrestd answers: hostile, malformed, another version.
// =============================================================================================

/// A SlurmCluster reconcile against the server `serve` starts (its URL, and the server to keep alive).
fn cluster_against(
    name: &'static str,
    serve: impl Future<Output = (String, Option<MockServer>)> + Send + 'static,
    want: Want,
) -> Case {
    case("hostile", name, async move {
        let (endpoint, server) = serve.await;
        // The recorded answers are Slurm 24.11's v0.0.42, on every path: pinned, the client
        // asks no negotiating request that the table would answer too.
        let mut spec = jwt_spec(&endpoint);
        spec["restApiVersion"] = json!("v0.0.42");
        let run = reconcile_cluster(spec, vec![key_secret(ANY_KEY)]).await?;
        drop(server);
        check_cluster(&run, &want)
    })
}

fn hostile_cases() -> Vec<Case> {
    let wire = |server: MockServer| (server.uri(), Some(server));
    vec![
        cluster_against(
            "SlurmCluster: endless /diag body",
            async {
                static SPACES: [u8; 64 * 1024] = [b' '; 64 * 1024];
                let url = endless_server(b"{", &SPACES, Duration::ZERO).await;
                (url, None)
            },
            want(
                "ResponseTooLarge",
                "Unknown",
                &["diag", "33554432-byte limit", "raise spec.maxResponseSize"],
                false,
            ),
        ),
        case(
            "hostile",
            "SlurmCluster: endless /diag body, maxResponseSize 1Mi",
            async {
                static SPACES: [u8; 64 * 1024] = [b' '; 64 * 1024];
                let url = endless_server(b"{", &SPACES, Duration::ZERO).await;
                let mut spec = jwt_spec(&url);
                spec["restApiVersion"] = json!("v0.0.42");
                spec["maxResponseSize"] = json!("1Mi");
                let run = reconcile_cluster(spec, vec![key_secret(ANY_KEY)]).await?;
                check_cluster(
                    &run,
                    &want(
                        "ResponseTooLarge",
                        "Unknown",
                        &["diag", "1048576-byte limit"],
                        false,
                    ),
                )
            },
        ),
        cluster_against(
            "SlurmCluster: /diag statistics as a string",
            async move {
                let body = mutated("diag", |b| b["statistics"] = json!("lots"));
                wire(diag_server(200, "application/json", body).await)
            },
            want("DecodeError", "Unknown", &["diag"], false),
        ),
        cluster_against(
            "SlurmCluster: /diag an HTML 502 page",
            async move {
                let page = b"<html><body><h1>502 Bad Gateway</h1></body></html>".to_vec();
                wire(diag_server(502, "text/html", page).await)
            },
            want(
                "UnexpectedStatus",
                "Unknown",
                &["502", "Bad Gateway"],
                false,
            ),
        ),
        cluster_against(
            "SlurmCluster: another API version (data_parser v0.0.41)",
            async move {
                let body = serde_json::to_vec(&recorded("diag_other_data_parser")).unwrap();
                wire(diag_server(200, "application/json", body).await)
            },
            want(
                "UnsupportedVersion",
                "Unknown",
                &["data_parser/v0.0.41", "v0.0.42"],
                false,
            ),
        ),
        case("hostile", "job: job_id a string", async {
            let body = mutated("job_running", |b| b["jobs"][0]["job_id"] = json!("2"));
            let server = answering(200, "application/json", body).await;
            expect_error(facade(&server.uri()).job(2).await, "DecodeError", &["job"])
        }),
        case("hostile", "job: JSON cut in half", async {
            let mut body = serde_json::to_vec(&recorded("job_running")).unwrap();
            body.truncate(body.len() / 2);
            let server = answering(200, "application/json", body).await;
            expect_error(facade(&server.uri()).job(2).await, "DecodeError", &["job"])
        }),
        case("hostile", "jobs: \"OK\" as text with 200", async {
            let server = answering(200, "text/plain", b"OK\n".to_vec()).await;
            expect_error(
                facade(&server.uri()).jobs(None).await,
                "DecodeError",
                &["jobs"],
            )
        }),
        case(
            "hostile",
            "all job states: 2 MiB body over a 1 MiB limit",
            async {
                // 2 MiB of valid JSON against a 1 MiB limit: refused, not read whole.
                let mut body = b"{\"jobs\":[".to_vec();
                body.extend(std::iter::repeat_n(b' ', 2 << 20));
                body.extend_from_slice(b"]}");
                let server = answering(200, "application/json", body).await;
                let config = ClientConfig::new(&server.uri())
                    .unwrap()
                    .allow_plaintext(true)
                    .with_retry(RetryPolicy::none())
                    .with_max_response_bytes(1 << 20);
                let client =
                    SlurmClient::new(config, Arc::new(Credentials::token("t", None).unwrap()))
                        .unwrap();
                expect_error(
                    client.all_job_states().await,
                    "ResponseTooLarge",
                    &["1048576-byte limit"],
                )
            },
        ),
        case("hostile", "node: unknown state \"HIBERNATING\"", async {
            let body = mutated("node_n1", |b| {
                b["nodes"][0]["state"] = json!(["HIBERNATING"])
            });
            let server = answering(200, "application/json", body).await;
            let node = facade(&server.uri())
                .node("n1")
                .await
                .map_err(|e| format!("{} ({})", e.category(), Chain(&e)))?;
            ensure(
                node.state.base == NodeBaseState::Other("HIBERNATING".into())
                    && !node.state.is_busy(),
                || format!("{:?}", node.state),
            )?;
            Ok(
                "decoded: base state Other(\"HIBERNATING\"), not busy (never drained on a guess)"
                    .into(),
            )
        }),
        case(
            "hostile",
            "job: unknown state \"QUANTUM_SUPERPOSITION\" → SlurmJob",
            async {
                // The real decoder, then the real step following the job.
                let uid = "uid-quantum";
                let body = mutated("job_running", |b| {
                    b["jobs"][0]["job_state"] = json!(["QUANTUM_SUPERPOSITION"]);
                    b["jobs"][0]["comment"] = json!(OwnerTag::new(uid, 1));
                });
                let server = answering(200, "application/json", body).await;
                let records = facade(&server.uri())
                    .job(2)
                    .await
                    .map_err(|e| format!("{} ({})", e.category(), Chain(&e)))?;
                let [record] = records.as_slice() else {
                    return Err(format!("{records:?}"));
                };
                ensure(record.state.base == JobBaseState::Unknown, || {
                    format!("{:?}", record.state)
                })?;
                let status = SlurmJobStatus {
                    phase: Phase::Submitted,
                    job_id: Some(2),
                    observed_generation: Some(1),
                    submitted_generation: Some(1),
                    ..Default::default()
                };
                let tripwire = Tripwire::start().await;
                let spec = spec_of(job_spec());
                let step = tripwire
                    .step(
                        uid,
                        "quantum",
                        1,
                        &spec,
                        Some(&status),
                        vec![record.clone()],
                    )
                    .await?;
                tripwire.untouched().await?;
                ensure(
                    step.status.phase == Phase::Submitted
                        && step.status.slurm_state == ["UNKNOWN", "QUANTUM_SUPERPOSITION"]
                        && step.status.job_id == Some(2),
                    || format!("{:?}", step.status),
                )?;
                Ok("decoded as UNKNOWN with the word kept; the SlurmJob stays Submitted (no guessed \
                    ending), slurmState [UNKNOWN, QUANTUM_SUPERPOSITION]"
                    .into())
            },
        ),
    ]
}

// =============================================================================================
// Objects stored before a rule existed: the operator's own checks.
// =============================================================================================

/// A slurmrestd that must not be called: it answers 500 and the case fails on any request.
struct Tripwire {
    server: MockServer,
    client: SlurmClient,
}

impl Tripwire {
    async fn start() -> Self {
        let server = answering(500, "text/plain", b"tripwire".to_vec()).await;
        let client = facade(&server.uri());
        Self { server, client }
    }

    /// One step of SlurmJob `name` (uid `uid`) at `generation`, with `jobs` in a freshly synced
    /// index of the cluster.
    async fn step(
        &self,
        uid: &str,
        name: &str,
        generation: i64,
        spec: &SlurmJobSpec,
        status: Option<&SlurmJobStatus>,
        jobs: Vec<slurm_operator::slurm::types::Job>,
    ) -> Result<Step, String> {
        let now = Utc::now();
        let state = ClusterState {
            jobs: Arc::new(jobs.into_iter().map(|j| (j.job_id, j)).collect()),
            jobs_synced_at: Some(now),
            ..Default::default()
        };
        let submissions = Submissions::default();
        let leadership = Leadership::always();
        let key = slurm_operator::slurm::tag::TagKey::ephemeral();
        let env = Env {
            client: &self.client,
            submitter: &self.client,
            // The fixtures' records run as `slurm` and carry legacy (unsigned) tags: followed
            // as a namespace granted that user follows them.
            job_user: Some("slurm"),
            state: &state,
            submissions: &submissions,
            started_at: now - chrono::TimeDelta::seconds(1),
            now,
            leadership: &leadership,
            took_over_at: None,
            acting_since: now - chrono::TimeDelta::seconds(1),
            key: &key,
            searches: None,
            still_granted: &|| true,
        };
        let target = Target {
            name,
            uid,
            generation,
            spec,
            status,
            created: None,
            refusal: None,
        };
        let step = act::step(target, env, |_: &str| {
            Some(Dependee::new(spec.cluster_name.clone(), Some(77)))
        })
        .await
        .map_err(|e| format!("the step failed: {} ({})", e.category(), Chain(&e)))?;
        ensure(submissions.is_empty(), || "something was submitted".into())?;
        Ok(step)
    }

    async fn untouched(&self) -> Result<(), String> {
        let requests = self.server.received_requests().await.unwrap_or_default();
        ensure(requests.is_empty(), || {
            format!(
                "slurmrestd was called: {:?}",
                requests
                    .iter()
                    .map(|r| format!("{} {}", r.method, r.url.path()))
                    .collect::<Vec<_>>()
            )
        })
    }
}

fn spec_of(spec: Value) -> SlurmJobSpec {
    serde_json::from_value(spec).unwrap()
}

/// A SlurmJob stored with `patch` must get `Ready=False/InvalidSpec` naming `names`, a Warning
/// Event, wait for an edit, and send nothing to slurmrestd.
fn invalid_spec_case(name: &'static str, patch: Value, names: &'static [&'static str]) -> Case {
    refused_spec_case("stored", name, patch, names)
}

/// A SlurmJob spec admission lets through and the operator refuses (`extraOptions`' keys, which
/// the API server's CEL cannot read).
fn operator_case(name: &'static str, patch: Value, names: &'static [&'static str]) -> Case {
    refused_spec_case("operator", name, patch, names)
}

fn refused_spec_case(
    group: &'static str,
    name: &'static str,
    patch: Value,
    names: &'static [&'static str],
) -> Case {
    case(group, name, async move {
        let spec = patched(job_spec(), patch);
        let note = admission_note("SlurmJob", &cr("SlurmJob", "stored", spec.clone()), group)?;
        let spec = spec_of(spec);
        let tripwire = Tripwire::start().await;
        let step = tripwire
            .step("uid-stored", "stored", 1, &spec, None, vec![])
            .await?;
        tripwire.untouched().await?;
        Ok(format!("{note}{}", check_invalid_spec(&step, names)?))
    })
}

fn check_invalid_spec(step: &Step, names: &[&str]) -> Outcome {
    let ready = condition::find(&step.status.conditions, status::READY).ok_or("no Ready")?;
    ensure(
        ready.status == "False" && ready.reason == "InvalidSpec",
        || format!("Ready={}/{}: {}", ready.status, ready.reason, ready.message),
    )?;
    for name in names {
        ensure(ready.message.contains(name), || {
            format!("the message does not name {name:?}: {}", ready.message)
        })?;
    }
    let reasons: Vec<_> = step
        .notices
        .iter()
        .map(|n| (n.reason.as_ref(), n.warning))
        .collect();
    ensure(reasons == [("InvalidSpec", true)], || {
        format!("Events {reasons:?}")
    })?;
    ensure(step.invalid && step.retry.is_none(), || {
        format!("invalid {} retry {:?}", step.invalid, step.retry)
    })?;
    Ok(format!(
        "Ready=False/InvalidSpec, waits for an edit, nothing sent: {}",
        short(&ready.message)
    ))
}

fn stored_cases() -> Vec<Case> {
    vec![
        cluster_case(
            "stored",
            "SlurmCluster: both jwt and tokenSecretRef",
            patched(
                jwt_spec("http://127.0.0.1:1"),
                json!({"auth": {"tokenSecretRef": {"name": "tok"}}}),
            ),
            vec![],
            want(
                "AuthMethodAmbiguous",
                "False",
                &["both jwt and tokenSecretRef"],
                true,
            ),
        ),
        cluster_case(
            "stored",
            "SlurmCluster: pollInterval 10ms",
            patched(
                jwt_spec("http://127.0.0.1:1"),
                json!({"pollInterval": "10ms"}),
            ),
            vec![],
            want(
                "PollIntervalOutOfRange",
                "Unknown",
                &["spec.pollInterval", "10ms"],
                true,
            ),
        ),
        cluster_case(
            "stored",
            "SlurmCluster: maxResponseSize 1Ki",
            patched(
                jwt_spec("http://127.0.0.1:1"),
                json!({"maxResponseSize": "1Ki"}),
            ),
            vec![],
            want(
                "MaxResponseSizeOutOfRange",
                "Unknown",
                &["spec.maxResponseSize", "\"1Ki\"", "between 1Mi and 1Gi"],
                true,
            ),
        ),
        cluster_case(
            "stored",
            "SlurmCluster: listingTimeout 10s",
            patched(
                jwt_spec("http://127.0.0.1:1"),
                json!({"listingTimeout": "10s"}),
            ),
            vec![],
            want(
                "ListingTimeoutOutOfRange",
                "Unknown",
                &["spec.listingTimeout", "10s", "between 30s and 1h"],
                true,
            ),
        ),
        cluster_case(
            "stored",
            "SlurmCluster: Secret name \"../kube-system/secrets/x\"",
            // Never read: the name would address another namespace's Secret (an API call would
            // show up as unexpected).
            patched(
                jwt_spec("http://127.0.0.1:1"),
                json!({"auth": {"jwt": {"keySecretRef": {"name": "../kube-system/secrets/x"}}}}),
            ),
            vec![],
            want(
                "InvalidObjectName",
                "False",
                &["spec.auth.jwt.keySecretRef.name", "not an object name"],
                true,
            ),
        ),
        operator_case(
            "SlurmJob: extraOptions.comment",
            json!({"extraOptions": {"comment": "mine"}}),
            &["extraOptions.comment is set by the operator"],
        ),
        operator_case(
            "SlurmJob: extraOptions.user_id 0 (root)",
            json!({"extraOptions": {"user_id": "0", "group_id": "0"}}),
            &["_id is refused", "runs as the Slurm user its access grants"],
        ),
        operator_case(
            "SlurmJob: extraOptions.priority",
            json!({"extraOptions": {"priority": {"set": true, "number": 4294967294u32}}}),
            &["extraOptions.priority is refused"],
        ),
        operator_case(
            "SlurmJob: extraOptions.partition (typed)",
            json!({"extraOptions": {"partition": "other"}}),
            &["extraOptions.partition has a typed field: use spec.partition"],
        ),
        operator_case(
            "SlurmJob: extraOptions.standard_output",
            json!({"extraOptions": {"standard_output": "/tmp/x"}}),
            &["extraOptions.standard_output", "use spec.standardOutput"],
        ),
        operator_case(
            "SlurmJob: extraOptions.tasks_per_node (a typed field now)",
            json!({"extraOptions": {"tasks_per_node": 8}}),
            &["extraOptions.tasks_per_node", "use spec.tasksPerNode"],
        ),
        operator_case(
            "SlurmJob: extraOptions.spank_environment",
            json!({"extraOptions": {"spank_environment": ["X=1"]}}),
            &["extraOptions.spank_environment is refused"],
        ),
        operator_case(
            "SlurmJob: exclusive and extraOptions.shared",
            json!({"exclusive": "node", "extraOptions": {"shared": ["user"]}}),
            &["exclusive and extraOptions.shared cannot both be set"],
        ),
        invalid_spec_case(
            "SlurmJob: memoryPerNode and memoryPerCpu, stored before the rule",
            json!({"memoryPerNode": "4Gi", "memoryPerCpu": "1Gi"}),
            &["memoryPerNode and memoryPerCpu cannot both be set"],
        ),
        invalid_spec_case(
            "SlurmJob: ntasks 0",
            json!({"ntasks": 0}),
            &["ntasks must be at least 1, got 0"],
        ),
        invalid_spec_case(
            "SlurmJob: memoryPerNode \"lots\"",
            json!({"memoryPerNode": "lots"}),
            &["memoryPerNode", "\"lots\" is not a Kubernetes quantity"],
        ),
        invalid_spec_case(
            "SlurmJob: memoryPerNode 0",
            json!({"memoryPerNode": "0"}),
            &["memoryPerNode", "\"0\" must be positive"],
        ),
        invalid_spec_case(
            "SlurmJob: script without #!",
            json!({"script": "srun hostname"}),
            &["interpreter line"],
        ),
        invalid_spec_case(
            "SlurmJob: name with a comma, stored before the rule",
            json!({"name": "bash,python"}),
            &["name must not contain a comma"],
        ),
        // Admitted (a rule at the CRD's root would be checked at every later write of a
        // SlurmJob stored before it, its status and finalizer removal included), refused before
        // the submit.
        case(
            "submit",
            "SlurmJob: a name too long for its output file",
            async {
                let name = "n".repeat(241);
                let spec = patched(
                    job_spec(),
                    json!({"output": {"volume": "results", "slurmPath": "/shared"}}),
                );
                let note =
                    admission_note("SlurmJob", &cr("SlurmJob", &name, spec.clone()), "submit")?;
                let spec = spec_of(spec);
                let tripwire = Tripwire::start().await;
                let step = tripwire
                    .step("uid-long", &name, 1, &spec, None, vec![])
                    .await?;
                tripwire.untouched().await?;
                let outcome = check_invalid_spec(&step, &["metadata.name must be at most 240"])?;
                Ok(format!("{note}{outcome}"))
            },
        ),
        case("stored", "SlurmJob: dependsOn itself", async {
            let spec = patched(
                job_spec(),
                json!({"dependsOn": [{"name": "prepare"}, {"name": "train"}]}),
            );
            let note =
                admission_note("SlurmJob", &cr("SlurmJob", "train", spec.clone()), "stored")?;
            let spec = spec_of(spec);
            let tripwire = Tripwire::start().await;
            let step = tripwire
                .step("uid-self", "train", 1, &spec, None, vec![])
                .await?;
            tripwire.untouched().await?;
            let outcome =
                check_invalid_spec(&step, &["dependsOn names the SlurmJob itself (train)"])?;
            Ok(format!("{note}{outcome}"))
        }),
        case(
            "stored",
            "SlurmJob: invalid edit while its job runs",
            async {
                // Generation 2 has no interpreter line; job 4242 of generation 1 is running.
                let uid = "uid-running";
                let body = mutated("job_running", |b| {
                    b["jobs"][0]["job_id"] = json!(4242);
                    b["jobs"][0]["comment"] = json!(OwnerTag::new(uid, 1));
                });
                let server = answering(200, "application/json", body).await;
                let records = facade(&server.uri())
                    .job(4242)
                    .await
                    .map_err(|e| e.to_string())?;
                let status = SlurmJobStatus {
                    phase: Phase::Running,
                    job_id: Some(4242),
                    observed_generation: Some(1),
                    submitted_generation: Some(1),
                    ..Default::default()
                };
                let spec = patched(job_spec(), json!({"script": "srun hostname"}));
                admission_note(
                    "SlurmJob",
                    &cr("SlurmJob", "running", spec.clone()),
                    "stored",
                )?;
                let spec = spec_of(spec);
                let tripwire = Tripwire::start().await;
                let step = tripwire
                    .step(uid, "running", 2, &spec, Some(&status), records)
                    .await?;
                tripwire.untouched().await?;
                let reasons: Vec<_> = step.notices.iter().map(|n| n.reason.as_ref()).collect();
                ensure(reasons == ["EditIgnored"], || format!("Events {reasons:?}"))?;
                ensure(
                    step.status.job_id == Some(4242)
                        && step.status.phase == Phase::Running
                        && step.status.submitted_generation == Some(1)
                        && step.status.observed_generation == Some(2),
                    || format!("{:?}", step.status),
                )?;
                let applied = condition::find(&step.status.conditions, status::SPEC_APPLIED)
                    .ok_or("no SpecApplied")?;
                ensure(
                    applied.status == "False" && applied.reason == "JobActive",
                    || format!("SpecApplied {}/{}", applied.status, applied.reason),
                )?;
                Ok(format!(
                    "job 4242 kept running, not cancelled or resubmitted; SpecApplied=False/JobActive: {}",
                    short(&applied.message)
                ))
            },
        ),
        case(
            "stored",
            "SlurmJob: invalid edit after its job ended",
            async {
                let finished = SlurmJobStatus {
                    phase: Phase::Completed,
                    job_id: Some(4243),
                    exit_code: Some(0),
                    observed_generation: Some(1),
                    submitted_generation: Some(1),
                    ..Default::default()
                };
                let spec = patched(job_spec(), json!({"ntasks": -3}));
                admission_note("SlurmJob", &cr("SlurmJob", "ended", spec.clone()), "stored")?;
                let spec = spec_of(spec);
                let tripwire = Tripwire::start().await;
                let step = tripwire
                    .step("uid-ended", "ended", 2, &spec, Some(&finished), vec![])
                    .await?;
                tripwire.untouched().await?;
                let outcome = check_invalid_spec(&step, &["ntasks must be at least 1, got -3"])?;
                // Nothing lost: the finished run is in the history.
                let [run] = step.status.history.as_slice() else {
                    return Err(format!("history {:?}", step.status.history));
                };
                ensure(
                    run.job_id == 4243 && run.phase == Phase::Completed && run.exit_code == Some(0),
                    || format!("{run:?}"),
                )?;
                Ok(format!(
                    "{outcome}; job 4243 (Completed, exit 0) kept in history"
                ))
            },
        ),
        case("extreme", "SlurmNodeSet: replicas 2147483647", async {
            // A valid spec (a typo, a runaway autoscaler): one plan creates a bounded batch.
            let started = std::time::Instant::now();
            let strategy = UpdateStrategy::default();
            // A fresh, empty view of Slurm: pods are planned only with one (names must be free).
            let now = Utc::now();
            let empty = slurm_operator::state::index::ClusterState {
                nodes_synced_at: Some(now),
                health: slurm_operator::state::index::Health::Up { since: now },
                ..Default::default()
            };
            let owner = slurm_operator::slurm::node_owner::NodeOwner::new("ns", "huge");
            let plan = nodeset_plan::plan(&nodeset_plan::Input {
                prefix: "huge-b2c4d",
                owner: &owner,
                replicas: i32::MAX,
                template_hash: "h",
                strategy: &strategy,
                drain_timeout: None,
                min_ready_seconds: 0,
                partitions: &[],
                pods: &[],
                taken: &Default::default(),
                slurm: nodeset_plan::SlurmView {
                    state: Some(&empty),
                    now,
                    had_view: false,
                },
                deleting: false,
            });
            let creates = plan
                .actions
                .iter()
                .filter(|a| matches!(a, PodAction::CreatePod { .. }))
                .count();
            ensure(creates == nodeset_plan::MAX_CREATES_PER_PLAN, || {
                format!("{creates} pods in one plan")
            })?;
            ensure(started.elapsed() < Duration::from_secs(5), || {
                format!("planning took {:?}", started.elapsed())
            })?;
            Ok(format!(
                "plans {creates} pods at once (the next plan continues), in {:?}",
                started.elapsed()
            ))
        }),
    ]
}

// =============================================================================================
// The catalogue.
// =============================================================================================

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_catalogue() {
    admission_controls().unwrap();
    let slurm = common::local_slurm();
    let mut cases = admission_cases();
    cases.extend(stored_cases());
    cases.extend(secret_cases());
    cases.extend(connect_cases());
    cases.extend(hostile_cases());
    let skipped = match &slurm {
        Some(slurm) => {
            cases.extend(slurm_cases(slurm));
            None
        }
        None => {
            Some("the auth and connect cases judged by the real slurmrestd need the local Slurm")
        }
    };
    let mut names = std::collections::BTreeSet::new();
    for c in &cases {
        assert!(names.insert((c.group, c.name)), "case {:?} twice", c.name);
    }
    let total = cases.len();

    println!("\nbad input catalogue: {total} cases\n");
    let mut failures = Vec::new();
    let mut by_group: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, c) in cases.into_iter().enumerate() {
        *by_group.entry(c.group).or_default() += 1;
        // Each case on its own task: a panic is caught and reported as one.
        let outcome = tokio::time::timeout(CASE_DEADLINE, tokio::spawn(c.run)).await;
        let verdict = match outcome {
            Err(_) => Err(format!("HANG: no outcome within {CASE_DEADLINE:?}")),
            Ok(Err(join)) if join.is_panic() => Err(format!("PANIC: {join}")),
            Ok(Err(join)) => Err(format!("task failed: {join}")),
            Ok(Ok(verdict)) => verdict,
        };
        match verdict {
            Ok(outcome) => println!(
                "{:>3} ok   {:<9} {:<52} → {outcome}",
                i + 1,
                c.group,
                c.name
            ),
            Err(problem) => {
                println!(
                    "{:>3} FAIL {:<9} {:<52} → {problem}",
                    i + 1,
                    c.group,
                    c.name
                );
                failures.push(format!("{} / {}: {problem}", c.group, c.name));
            }
        }
    }
    println!("\n{total} cases by group: {by_group:?}");
    if let Some(why) = skipped {
        println!("skipped: {why} (no local Slurm; run hack/slurm-up.sh)");
    }
    assert!(
        failures.is_empty(),
        "{} failed:\n{failures:#?}",
        failures.len()
    );
    assert!(total >= 30, "only {total} cases");
}
