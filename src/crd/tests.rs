//! Checks on the generated CRDs: the Kubernetes structural-schema rules (so the API server
//! accepts them), names and columns, defaults, and that `crds/` is up to date.
//!
//! The CEL rules themselves are compiled and evaluated in `tests/cel.rs`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::*;

pub(super) mod cel;

/// `(CRD name, openAPIV3Schema as JSON)` for every CRD (generated once per test binary).
pub(super) fn schemas() -> Vec<(String, Value)> {
    static SCHEMAS: std::sync::LazyLock<Vec<(String, Value)>> = std::sync::LazyLock::new(|| {
        all()
            .iter()
            .map(|crd| {
                let schema = crd.spec.versions[0]
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref())
                    .expect("every CRD has an openAPIV3Schema");
                (
                    crd_name(crd).to_owned(),
                    serde_json::to_value(schema).unwrap(),
                )
            })
            .collect()
    });
    SCHEMAS.clone()
}

// ---------------------------------------------------------------------------------------------
// Structural schema checker
//
// Follows "Specifying a structural schema" in the Kubernetes CRD docs and the apiextensions
// validation it describes:
//  1. every node of the structural part (root, each property, additionalProperties, items)
//     has a non-empty `type`, unless it is `x-kubernetes-int-or-string` or
//     `x-kubernetes-preserve-unknown-fields: true`;
//  2. inside `allOf`/`anyOf`/`oneOf`/`not` ("value validations") there is no `type`,
//     `description`, `default`, `additionalProperties`, `nullable` or `x-kubernetes-*`, and every
//     property/items they mention is also specified outside them (int-or-string's own
//     `anyOf: [{type: integer}, {type: string}]` excepted);
//  3. `metadata` at the root may only restrict `name` and `generateName`;
// plus the v1 CRD validation rules around them: no `$ref`/`definitions`/`dependencies`/
// `patternProperties`/`additionalItems`/`uniqueItems: true`/tuple `items`; `properties` and
// `additionalProperties` are exclusive; arrays have `items`; `nullable` comes with a type;
// `x-kubernetes-preserve-unknown-fields` is `true` if set; list-map keys are scalar and required
// or defaulted; defaults are not inside value validations or preserve-unknown-fields subtrees
// and conform to their schema; `format`s are ones the API server knows; patterns compile.
// ---------------------------------------------------------------------------------------------

const TYPES: [&str; 6] = ["object", "array", "string", "integer", "number", "boolean"];

/// Formats the API server understands (k8s.io/kube-openapi strfmt plus the numeric ones).
const FORMATS: [&str; 27] = [
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "date-time",
    "int32",
    "int64",
];
const NUMERIC_FORMATS: [&str; 2] = ["float", "double"];

/// Keys that must never appear in a CRD schema.
const FORBIDDEN_KEYS: [&str; 9] = [
    "$ref",
    "$schema",
    "$defs",
    "definitions",
    "dependencies",
    "patternProperties",
    "additionalItems",
    "id",
    "const",
];

#[derive(Clone, Copy, Default)]
struct Ctx {
    /// Inside allOf/anyOf/oneOf/not.
    in_junctor: bool,
    /// Below a node with `x-kubernetes-preserve-unknown-fields: true`.
    under_preserve_unknown: bool,
}

fn structural_violations(schema: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    check_root_metadata(schema, &mut errs);
    check_node("openAPIV3Schema", schema, Ctx::default(), None, &mut errs);
    errs
}

fn check_root_metadata(root: &Value, errs: &mut Vec<String>) {
    let Some(meta) = root.pointer("/properties/metadata") else {
        return;
    };
    let allowed: BTreeSet<&str> = ["type", "properties"].into();
    for key in meta
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k.as_str())
    {
        if !allowed.contains(key) {
            errs.push(format!(
                "openAPIV3Schema.properties.metadata: `{key}` is not allowed"
            ));
        }
    }
    for name in meta["properties"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k.as_str())
    {
        if name != "name" && name != "generateName" {
            errs.push(format!(
                "openAPIV3Schema.properties.metadata: only name/generateName may be restricted, \
                 not `{name}`"
            ));
        }
    }
}

/// `parent` is the structural node a junctor branch belongs to.
fn check_node(path: &str, node: &Value, ctx: Ctx, parent: Option<&Value>, errs: &mut Vec<String>) {
    let mut err = |msg: String| errs.push(format!("{path}: {msg}"));
    let Some(obj) = node.as_object() else {
        err("schema must be an object, not a boolean".into());
        return;
    };
    let has = |k: &str| obj.contains_key(k);
    let flag = |k: &str| obj.get(k) == Some(&Value::Bool(true));
    let int_or_string = flag("x-kubernetes-int-or-string");
    let preserve_unknown = flag("x-kubernetes-preserve-unknown-fields");

    for key in FORBIDDEN_KEYS {
        if has(key) {
            err(format!("`{key}` is not allowed in a CRD schema"));
        }
    }
    if flag("uniqueItems") {
        err("`uniqueItems: true` is not allowed".into());
    }
    if obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        err("`x-kubernetes-preserve-unknown-fields` must be true or absent".into());
    }

    if ctx.in_junctor {
        for key in obj.keys() {
            let forbidden = matches!(
                key.as_str(),
                "type" | "description" | "default" | "additionalProperties" | "nullable" | "title"
            ) || key.starts_with("x-kubernetes-");
            if forbidden {
                err(format!(
                    "`{key}` is not allowed inside allOf/anyOf/oneOf/not"
                ));
            }
        }
        let parent_props = parent
            .and_then(|p| p.get("properties"))
            .and_then(Value::as_object);
        for name in obj
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            if !parent_props.is_some_and(|p| p.contains_key(name.0)) {
                err(format!(
                    "property `{}` is not specified outside the junctor",
                    name.0
                ));
            }
        }
        if has("items") && parent.is_none_or(|p| p.get("items").is_none()) {
            err("`items` is not specified outside the junctor".into());
        }
    } else {
        match obj.get("type").map(|t| t.as_str()) {
            None if int_or_string || preserve_unknown => {}
            None => err("missing `type` (required unless int-or-string or \
                         preserve-unknown-fields)"
                .into()),
            Some(Some(t)) if TYPES.contains(&t) => {}
            Some(t) => err(format!("invalid type {t:?}")),
        }
        if int_or_string && has("type") {
            err("`x-kubernetes-int-or-string` must not have a `type`".into());
        }
        if flag("nullable") && !has("type") && !int_or_string {
            err("`nullable` without a `type`".into());
        }
        if flag("x-kubernetes-embedded-resource") && obj.get("type") != Some(&json!("object")) {
            err("`x-kubernetes-embedded-resource` requires type object".into());
        }
    }

    if has("properties") && has("additionalProperties") {
        err("`properties` and `additionalProperties` are mutually exclusive".into());
    }
    if let Some(Value::Bool(_)) = obj.get("additionalProperties") {
        err("`additionalProperties` must be a schema, not a boolean".into());
    }
    match obj.get("items") {
        Some(Value::Array(_)) => err("tuple `items` (an array) is not allowed".into()),
        None if obj.get("type") == Some(&json!("array")) => {
            err("type array without `items`".into())
        }
        _ => {}
    }
    if let Some(required) = obj.get("required").and_then(Value::as_array) {
        let props = obj.get("properties").and_then(Value::as_object);
        for name in required.iter().filter_map(Value::as_str) {
            if !ctx.in_junctor && !preserve_unknown && !props.is_some_and(|p| p.contains_key(name))
            {
                err(format!("required property `{name}` is not in `properties`"));
            }
        }
    }
    if let Some(format) = obj.get("format").and_then(Value::as_str) {
        let numeric = matches!(obj.get("type").and_then(Value::as_str), Some("number"));
        let known = FORMATS.contains(&format) || (numeric && NUMERIC_FORMATS.contains(&format));
        if !known {
            err(format!("format {format:?} is unknown to the API server"));
        }
    }
    if let Some(pattern) = obj.get("pattern") {
        match pattern.as_str().map(|p| cel::re2_matches(p, "")) {
            Some(Ok(_)) => {}
            _ => err(format!("pattern {pattern} does not compile")),
        }
    }
    if let Some(values) = obj.get("enum").and_then(Value::as_array) {
        for v in values {
            // `null` in an enum (what schemars emits for `Option<Enum>`) is kept out: whether the
            // API server takes it is unclear, and `nullable` alone already admits null.
            if !scalar_matches_type(v, obj) || v.is_null() {
                err(format!("enum value {v} does not match the type"));
            }
        }
    }
    if let Some(default) = obj.get("default") {
        if ctx.in_junctor || ctx.under_preserve_unknown {
            err("`default` inside a value validation or preserve-unknown-fields subtree".into());
        }
        if let Some(why) = nonconforming(default, node) {
            err(format!("default {default} does not conform: {why}"));
        }
    }
    check_list_and_map_types(obj, &mut err);
    if let Some(rules) = obj.get("x-kubernetes-validations") {
        let ok = rules.as_array().is_some_and(|rs| {
            rs.iter().all(|r| {
                r.get("rule")
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty())
            })
        });
        if !ok {
            err("x-kubernetes-validations must be a list of {rule, ...}".into());
        }
    }
    if int_or_string
        && let Some(any_of) = obj.get("anyOf")
        && any_of != &json!([{"type": "integer"}, {"type": "string"}])
    {
        err("int-or-string `anyOf` must be [{type: integer}, {type: string}]".into());
    }

    // Recurse.
    let child_ctx = Ctx {
        under_preserve_unknown: ctx.under_preserve_unknown || preserve_unknown,
        ..ctx
    };
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            check_node(
                &format!("{path}.properties.{name}"),
                child,
                child_ctx,
                None,
                errs,
            );
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child @ Value::Object(_)) = obj.get(key) {
            check_node(&format!("{path}.{key}"), child, child_ctx, None, errs);
        }
    }
    let junctor_ctx = Ctx {
        in_junctor: true,
        ..child_ctx
    };
    let int_or_string_any_of = int_or_string && obj.contains_key("anyOf");
    for key in ["allOf", "anyOf", "oneOf"] {
        if key == "anyOf" && int_or_string_any_of {
            continue;
        }
        for (i, branch) in obj
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            check_node(
                &format!("{path}.{key}[{i}]"),
                branch,
                junctor_ctx,
                Some(node),
                errs,
            );
        }
    }
    if let Some(not) = obj.get("not") {
        check_node(&format!("{path}.not"), not, junctor_ctx, Some(node), errs);
    }
}

fn check_list_and_map_types(obj: &serde_json::Map<String, Value>, err: &mut impl FnMut(String)) {
    let is_array = obj.get("type") == Some(&json!("array"));
    let list_type = obj.get("x-kubernetes-list-type").and_then(Value::as_str);
    let keys = obj.get("x-kubernetes-list-map-keys");
    if keys.is_some() && list_type != Some("map") {
        err("`x-kubernetes-list-map-keys` requires `x-kubernetes-list-type: map`".into());
    }
    if let Some(lt) = list_type {
        if !is_array {
            err("`x-kubernetes-list-type` on a non-array".into());
        }
        let items = obj.get("items").cloned().unwrap_or(Value::Null);
        let scalar = |s: &Value| {
            matches!(
                s.get("type").and_then(Value::as_str),
                Some("string" | "integer" | "number" | "boolean")
            ) || s.get("x-kubernetes-int-or-string") == Some(&json!(true))
        };
        match lt {
            "atomic" => {}
            "set" if scalar(&items) => {}
            "set" => err("`x-kubernetes-list-type: set` needs scalar items".into()),
            "map" => {
                if items.get("type") != Some(&json!("object")) {
                    err("`x-kubernetes-list-type: map` needs object items".into());
                }
                let keys: Vec<&str> = keys
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                if keys.is_empty() {
                    err("`x-kubernetes-list-type: map` needs `x-kubernetes-list-map-keys`".into());
                }
                let required: Vec<&str> = items["required"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                for key in keys {
                    let prop = &items["properties"][key];
                    if prop.is_null() {
                        err(format!(
                            "list-map key `{key}` is not a property of the items"
                        ));
                    } else if !scalar(prop) {
                        err(format!("list-map key `{key}` must be scalar"));
                    } else if !required.contains(&key) && prop.get("default").is_none() {
                        err(format!(
                            "list-map key `{key}` must be required or have a default"
                        ));
                    }
                }
            }
            other => err(format!("unknown x-kubernetes-list-type {other:?}")),
        }
    }
    if let Some(mt) = obj.get("x-kubernetes-map-type") {
        if obj.get("type") != Some(&json!("object")) {
            err("`x-kubernetes-map-type` on a non-object".into());
        }
        if mt != "atomic" && mt != "granular" {
            err(format!("unknown x-kubernetes-map-type {mt}"));
        }
    }
}

fn scalar_matches_type(v: &Value, schema: &serde_json::Map<String, Value>) -> bool {
    if schema.get("x-kubernetes-int-or-string") == Some(&json!(true)) {
        return v.is_i64() || v.is_u64() || v.is_string();
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        _ => true,
    }
}

/// Why `value` would not survive pruning + validation against `schema` (types, known fields,
/// enum), or `None` if it does.
fn nonconforming(value: &Value, schema: &Value) -> Option<String> {
    let obj = schema.as_object()?;
    if value.is_null() {
        return (!obj.get("nullable").is_some_and(|n| n == true)).then(|| "null".into());
    }
    if !scalar_matches_type(value, obj) {
        return Some(format!("{value} is not of the schema's type"));
    }
    if let Some(values) = obj.get("enum").and_then(Value::as_array)
        && !values.contains(value)
    {
        return Some(format!("{value} is not in the enum"));
    }
    if let (Some(map), Some(props)) = (value.as_object(), obj.get("properties")) {
        for (k, v) in map {
            match props.get(k) {
                None if obj.get("x-kubernetes-preserve-unknown-fields") != Some(&json!(true)) => {
                    return Some(format!("field `{k}` would be pruned"));
                }
                None => {}
                Some(p) => {
                    if let Some(why) = nonconforming(v, p) {
                        return Some(format!("{k}: {why}"));
                    }
                }
            }
        }
    }
    if let (Some(list), Some(items)) = (value.as_array(), obj.get("items")) {
        return list.iter().find_map(|v| nonconforming(v, items));
    }
    None
}

/// Every `int32` carries the int32 range, so that an API server that ignores numeric formats
/// (before Kubernetes 1.36) refuses what the operator could not deserialize.
/// Call `visit` on every schema node of every CRD (properties, items, additionalProperties),
/// with its path (`<crd>.properties-name.items...`).
fn visit_schemas(visit: &mut impl FnMut(&Value, &str)) {
    fn walk(node: &Value, path: &str, visit: &mut impl FnMut(&Value, &str)) {
        visit(node, path);
        for (name, child) in node["properties"].as_object().into_iter().flatten() {
            walk(child, &format!("{path}.{name}"), visit);
        }
        for key in ["items", "additionalProperties"] {
            if let Some(child) = node.get(key).filter(|c| c.is_object()) {
                walk(child, &format!("{path}.{key}"), visit);
            }
        }
    }
    for (name, schema) in schemas() {
        walk(&schema, &name, visit);
    }
}

#[test]
fn every_int32_is_bounded() {
    let mut unbounded = Vec::new();
    visit_schemas(&mut |node, path| {
        if node.get("format") == Some(&json!("int32")) {
            let min = node.get("minimum").and_then(Value::as_f64);
            let max = node.get("maximum").and_then(Value::as_f64);
            let bounded = min.is_some_and(|m| m >= f64::from(i32::MIN))
                && max.is_some_and(|m| m <= f64::from(i32::MAX));
            if !bounded {
                unbounded.push(format!("{path}: minimum {min:?}, maximum {max:?}"));
            }
        }
    });
    assert!(unbounded.is_empty(), "{unbounded:#?}");
    let replicas = &schemas()
        .into_iter()
        .find(|(n, _)| n == "slurmnodesets.slurm.rs")
        .unwrap()
        .1["properties"]["spec"]["properties"]["replicas"];
    assert_eq!(replicas["minimum"], json!(0.0), "a tighter bound is kept");
    assert_eq!(replicas["maximum"], json!(f64::from(i32::MAX)));

    // Why: one past the bound is what the operator cannot read.
    let mut nodeset = json!({
        "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmNodeSet",
        "metadata": {"name": "x", "namespace": "default"},
        "spec": {"clusterName": "main", "replicas": i64::from(i32::MAX),
                 "template": {"spec": {"containers": [{"name": "slurmd"}]}}},
    });
    assert!(serde_json::from_value::<SlurmNodeSet>(nodeset.clone()).is_ok());
    nodeset["spec"]["replicas"] = json!(i64::from(i32::MAX) + 1);
    assert!(serde_json::from_value::<SlurmNodeSet>(nodeset).is_err());
}

/// Every int-or-string node the operator decodes as `IntOrString` (int32) is bounded, so the API
/// server refuses what the operator could not read; the others are quantities (any number
/// decodes) or carry a rule of their own.
#[test]
fn every_int_or_string_is_bounded_or_a_quantity() {
    let mut unbounded = Vec::new();
    visit_schemas(&mut |node, path| {
        if node.get("x-kubernetes-int-or-string") == Some(&json!(true)) {
            let last = path.rsplit('.').next().unwrap_or_default();
            let ruled = node.get("x-kubernetes-validations").is_some();
            let bounded = node.get("minimum") == Some(&json!(1.0))
                && node.get("maximum") == Some(&json!(65535.0));
            let quantity = ["additionalProperties", "divisor", "sizeLimit", "maxRSS"];
            if !(ruled || (last == "port" && bounded) || quantity.contains(&last)) {
                unbounded.push(path.to_owned());
            }
        }
    });
    assert!(unbounded.is_empty(), "{unbounded:#?}");

    // Why: a port past int32 is what the operator cannot read; the bound is inside int32.
    let nodeset = |port: Value| {
        json!({
            "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmNodeSet",
            "metadata": {"name": "x", "namespace": "default"},
            "spec": {"clusterName": "main", "replicas": 1,
                     "template": {"spec": {"containers": [{"name": "slurmd",
                         "livenessProbe": {"tcpSocket": {"port": port}}}]}}},
        })
    };
    assert!(serde_json::from_value::<SlurmNodeSet>(nodeset(json!(65535))).is_ok());
    assert!(serde_json::from_value::<SlurmNodeSet>(nodeset(json!("slurmd"))).is_ok());
    assert!(serde_json::from_value::<SlurmNodeSet>(nodeset(json!(3_000_000_000u64))).is_err());
}

/// Every date-time node carries the pattern, so the API server refuses what its own format check
/// lets through and the operator cannot read; what the pattern takes, the operator reads.
#[test]
fn every_date_time_is_bounded() {
    let mut unbounded = Vec::new();
    let mut count = 0;
    visit_schemas(&mut |node, path| {
        if node.get("format") == Some(&json!("date-time")) {
            count += 1;
            if node.get("pattern") != Some(&json!(super::DATE_TIME_PATTERN)) {
                unbounded.push(path.to_owned());
            }
        }
    });
    assert!(count > 10, "date-time nodes found: {count}");
    assert!(unbounded.is_empty(), "{unbounded:#?}");

    let pattern = regex::Regex::new(super::DATE_TIME_PATTERN).unwrap();
    let nodeset = |time: &str| {
        json!({
            "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmNodeSet",
            "metadata": {"name": "x", "namespace": "default"},
            "spec": {"clusterName": "main", "replicas": 1,
                     "template": {"metadata": {"creationTimestamp": time},
                                  "spec": {"containers": [{"name": "slurmd"}]}}},
        })
    };
    let reads = |time: &str| serde_json::from_value::<SlurmNodeSet>(nodeset(time)).is_ok();
    for good in [
        "2024-01-01T00:00:00Z",
        "2024-02-29T23:59:59.123456789+05:30",
        "1999-12-31T12:00:00-01:00",
        "9998-12-31T23:59:59Z",
        "0001-01-01T00:00:00Z",
    ] {
        assert!(pattern.is_match(good) && reads(good), "{good}");
    }
    // Stored by the API server's date-time check; before the pattern, not readable.
    for bad in [
        "2024-01-01T00:00:00+26:00",
        "2024-01-01T00:00:00+10:75",
        "2024-01-01T00:00:00ZTx",
        "2024-01-01T00:00:00:5Z",
        "9999-12-31T00:00:00Z",
    ] {
        assert!(
            !reads(bad),
            "the operator reads {bad}: the pattern need not refuse it"
        );
        assert!(!pattern.is_match(bad), "{bad}");
    }
}

#[test]
fn crd_schemas_are_structural() {
    let mut all_errs = Vec::new();
    for (name, schema) in schemas() {
        all_errs.extend(
            structural_violations(&schema)
                .into_iter()
                .map(|e| format!("{name}: {e}")),
        );
    }
    assert!(
        all_errs.is_empty(),
        "non-structural schema:\n{}",
        all_errs.join("\n")
    );
}

#[test]
fn structural_checker_catches_known_violations() {
    let cases = [
        (
            json!({"type": "object", "properties": {"a": {}}}),
            "missing `type`",
        ),
        (
            json!({"type": "object", "properties": {"a": {"$ref": "#/x", "type": "string"}}}),
            "`$ref`",
        ),
        (
            json!({"type": "object", "properties": {"a": {"nullable": true}}}),
            "`nullable` without",
        ),
        (
            json!({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}}),
            "`type` is not allowed inside",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "object", "oneOf": [{"properties": {"b": {}}}]}}}),
            "property `b` is not specified outside",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}),
            "mutually exclusive",
        ),
        (
            json!({"type": "object", "additionalProperties": true}),
            "not a boolean",
        ),
        (json!({"type": "array"}), "without `items`"),
        (
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": false}),
            "must be true",
        ),
        (
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                   "properties": {"a": {"type": "string", "default": "x"}}}),
            "preserve-unknown-fields subtree",
        ),
        (
            json!({"type": "integer", "format": "uint32"}),
            "unknown to the API server",
        ),
        (json!({"type": "string", "default": 3}), "does not conform"),
        (
            json!({"type": "string", "enum": ["a", null]}),
            "enum value null",
        ),
        (
            json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
                   "items": {"type": "object", "properties": {"k": {"type": "string"}}}}),
            "must be required or have a default",
        ),
        (
            json!({"type": "string", "pattern": "(unclosed"}),
            "does not compile",
        ),
        (
            json!({"type": "object", "properties": {"metadata": {"type": "object",
                   "properties": {"labels": {"type": "object"}}}}}),
            "only name/generateName",
        ),
        (
            json!({"x-kubernetes-int-or-string": true, "type": "string"}),
            "must not have a `type`",
        ),
    ];
    for (schema, want) in cases {
        let errs = structural_violations(&schema);
        assert!(
            errs.iter().any(|e| e.contains(want)),
            "expected a violation containing {want:?} for {schema}, got {errs:?}"
        );
    }
    // And accepts the shapes these CRDs rely on.
    let fine = json!({"type": "object", "properties": {
        "q": {"x-kubernetes-int-or-string": true, "nullable": true},
        "ios": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
        "free": {"type": "object", "nullable": true, "x-kubernetes-preserve-unknown-fields": true},
        "e": {"type": "string", "nullable": true, "enum": ["A", "B"]},
        "l": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
              "items": {"type": "object", "required": ["k"], "properties": {"k": {"type": "string"}}}},
    }});
    assert_eq!(structural_violations(&fine), Vec::<String>::new());
}

/// Paths (dotted, from the root) of every node carrying `x-kubernetes-preserve-unknown-fields`.
fn preserve_unknown_paths(node: &Value, path: &str, out: &mut Vec<String>) {
    if node.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true)) {
        out.push(path.to_owned());
    }
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            preserve_unknown_paths(child, &format!("{path}.{name}"), out);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = node.get(key) {
            preserve_unknown_paths(child, &format!("{path}[]"), out);
        }
    }
}

#[test]
fn preserve_unknown_fields_only_on_extra_options() {
    let mut found = Vec::new();
    for (name, schema) in schemas() {
        let mut paths = Vec::new();
        preserve_unknown_paths(&schema, "", &mut paths);
        found.extend(paths.into_iter().map(|p| format!("{name}:{p}")));
    }
    // The values of extraOptions (a map whose keys the operator checks), bounded in number.
    assert_eq!(found, ["slurmjobs.slurm.rs:.spec.extraOptions[]"]);
    let job = schemas()
        .into_iter()
        .find_map(|(name, s)| (name == "slurmjobs.slurm.rs").then_some(s))
        .unwrap();
    let extra = &job["properties"]["spec"]["properties"]["extraOptions"];
    assert_eq!(
        extra["maxProperties"],
        serde_json::json!(crate::crd::slurmjob::MAX_EXTRA_OPTIONS)
    );
    // What `kubectl explain` shows lists every key the operator takes, and no other: a refused
    // key's message points there (`EXTRA_OPTION_UNKNOWN`).
    let description = extra["description"].as_str().unwrap();
    let (_, list) = description
        .split_once("The options it may carry:")
        .expect("the list of options");
    let listed: Vec<&str> = list
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|word| word.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .collect();
    let mut allowed = crate::slurm::types::EXTRA_JOB_OPTIONS.to_vec();
    allowed.sort_unstable();
    let mut listed_sorted = listed.clone();
    listed_sorted.sort_unstable();
    assert_eq!(listed_sorted, allowed, "{description}");
}

// ---------------------------------------------------------------------------------------------
// Names, subresources, columns
// ---------------------------------------------------------------------------------------------

/// Short names of built-in resources (`kubectl api-resources`), which ours must not shadow.
const BUILTIN_SHORT_NAMES: [&str; 28] = [
    "cm", "cs", "csr", "crd", "crds", "cj", "deploy", "ds", "ep", "ev", "hpa", "ing", "limits",
    "netpol", "no", "ns", "pc", "pdb", "po", "psp", "pv", "pvc", "quota", "rc", "rs", "sa", "sc",
    "sts",
];

#[test]
fn crd_names_scope_and_subresources() {
    let crds = all();
    let summary: Vec<_> = crds
        .iter()
        .map(|crd| {
            let names = &crd.spec.names;
            (
                crd_name(crd),
                names.kind.as_str(),
                names.short_names.clone().unwrap_or_default(),
                names.categories.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "slurmclusters.slurm.rs",
                "SlurmCluster",
                vec!["scluster".into()],
                vec!["slurm".to_owned()]
            ),
            (
                "slurmjobs.slurm.rs",
                "SlurmJob",
                vec!["sjob".into()],
                vec!["slurm".into()]
            ),
            (
                "slurmnodesets.slurm.rs",
                "SlurmNodeSet",
                vec!["sns".into(), "snodeset".into()],
                vec!["slurm".into()]
            ),
        ]
    );
    for crd in &crds {
        let name = crd_name(crd);
        assert_eq!(crd.spec.group, GROUP, "{name}");
        // The platform admin registers clusters once, cluster-wide; tenants' objects live in
        // their namespaces.
        let scope = if name == "slurmclusters.slurm.rs" {
            "Cluster"
        } else {
            "Namespaced"
        };
        assert_eq!(crd.spec.scope, scope, "{name}");
        assert_eq!(crd.spec.versions.len(), 1, "{name}");
        let v = &crd.spec.versions[0];
        assert_eq!(
            (v.name.as_str(), v.served, v.storage),
            (VERSION, true, true),
            "{name}"
        );
        let sub = v.subresources.as_ref().expect("subresources");
        assert!(sub.status.is_some(), "{name} has a status subresource");
        for short in crd.spec.names.short_names.iter().flatten() {
            assert!(
                !BUILTIN_SHORT_NAMES.contains(&short.as_str()),
                "{short} shadows a built-in"
            );
        }
    }
    let scale = crds[2].spec.versions[0]
        .subresources
        .as_ref()
        .and_then(|s| s.scale.as_ref());
    let scale = scale.expect("SlurmNodeSet has a scale subresource");
    assert_eq!(scale.spec_replicas_path, ".spec.replicas");
    assert_eq!(scale.status_replicas_path, ".status.replicas");
    assert_eq!(
        scale.label_selector_path.as_deref(),
        Some(".status.selector")
    );
    assert!(crds[..2].iter().all(|c| {
        c.spec.versions[0]
            .subresources
            .as_ref()
            .is_some_and(|s| s.scale.is_none())
    }));
}

/// Resolve a printer-column JSONPath (`.a.b`, `.a[?(@.x=="y")].b`) against the schema.
fn resolve_column<'a>(schema: &'a Value, json_path: &str) -> Option<&'a Value> {
    // Replace every `[...]` (filter or index) by `[]`, then walk the dotted names.
    let mut simple = String::new();
    let mut depth = 0;
    for c in json_path.chars() {
        match c {
            '[' => {
                depth += 1;
                if depth == 1 {
                    simple.push_str("[]");
                }
            }
            ']' => depth -= 1,
            _ if depth == 0 => simple.push(c),
            _ => {}
        }
    }
    let mut node = schema;
    for segment in simple.trim_start_matches('.').split('.') {
        let (name, indexed) = match segment.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (segment, false),
        };
        node = node.get("properties")?.get(name)?;
        if indexed {
            node = node.get("items")?;
        }
    }
    Some(node)
}

#[test]
fn printer_columns_point_at_typed_fields() {
    let want: BTreeMap<&str, Vec<&str>> = [
        (
            "slurmclusters.slurm.rs",
            vec!["Ready", "Endpoint", "Slurm", "Nodes", "REST API", "Age"],
        ),
        (
            "slurmjobs.slurm.rs",
            vec![
                "Phase",
                "Reason",
                "Waiting",
                "Partition",
                "JobID",
                "SlurmCluster",
                "Nodes",
                "Exit",
                "Age",
            ],
        ),
        (
            "slurmnodesets.slurm.rs",
            vec![
                "Desired",
                "Ready",
                "Idle",
                "Allocated",
                "Mixed",
                "Drain",
                "Draining",
                "Down",
                "Age",
            ],
        ),
    ]
    .into();
    for (crd, (name, schema)) in all().iter().zip(schemas()) {
        let columns = crd.spec.versions[0]
            .additional_printer_columns
            .clone()
            .unwrap_or_default();
        let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, want[name.as_str()], "{name}");
        // Wide output only (`-o wide`): a SlurmJob's job id and SlurmCluster, a SlurmCluster's
        // REST API version.
        let wide: Vec<&str> = columns
            .iter()
            .filter(|c| c.priority.unwrap_or(0) > 0)
            .map(|c| c.name.as_str())
            .collect();
        let want_wide: &[&str] = match name.as_str() {
            "slurmjobs.slurm.rs" => &["JobID", "SlurmCluster"],
            "slurmnodesets.slurm.rs" => &["Mixed", "Draining"],
            "slurmclusters.slurm.rs" => &["REST API"],
            _ => &[],
        };
        assert_eq!(wide, want_wide, "{name}");
        for col in &columns {
            if col.json_path == ".metadata.creationTimestamp" {
                assert_eq!(col.type_, "date");
                continue;
            }
            let field = resolve_column(&schema, &col.json_path).unwrap_or_else(|| {
                panic!(
                    "{name}: column {} path {} is not in the schema",
                    col.name, col.json_path
                )
            });
            let field_type = field["type"].as_str().unwrap_or("string");
            assert_eq!(field_type, col.type_, "{name}: column {} type", col.name);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Descriptions and defaults
// ---------------------------------------------------------------------------------------------

/// Every property outside k8s-openapi's own types has a description (doc comment).
fn undocumented(node: &Value, path: &str, out: &mut Vec<String>) {
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            let child_path = format!("{path}.{name}");
            if child_path == ".spec.template" {
                // Its own description is checked; PodTemplateSpec's fields are stripped on purpose.
                assert!(
                    child.get("description").is_some(),
                    "spec.template has a description"
                );
                continue;
            }
            if child
                .get("description")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                out.push(child_path.clone());
            }
            undocumented(child, &child_path, out);
        }
    }
    if let Some(items) = node.get("items") {
        undocumented(items, &format!("{path}[]"), out);
    }
}

#[test]
fn every_field_is_documented_for_kubectl_explain() {
    let mut missing = Vec::new();
    for (name, schema) in schemas() {
        let mut paths = Vec::new();
        undocumented(&schema, "", &mut paths);
        missing.extend(paths.into_iter().map(|p| format!("{name}:{p}")));
    }
    assert!(
        missing.is_empty(),
        "fields without a description: {missing:#?}"
    );
}

#[test]
fn descriptions_are_reflowed() {
    let yaml = render_all().unwrap();
    // A reflowed description never continues a sentence on the next line.
    for (name, schema) in schemas() {
        let mut stack = vec![schema];
        while let Some(node) = stack.pop() {
            if let Some(d) = node.get("description").and_then(Value::as_str) {
                for pair in d.split('\n').collect::<Vec<_>>().windows(2) {
                    assert!(
                        pair[0].is_empty() || pair[1].is_empty() || pair[1].starts_with("- "),
                        "{name}: description has a hard wrap: {d:?}"
                    );
                }
            }
            if let Some(obj) = node.as_object() {
                for (k, v) in obj {
                    if k == "properties" {
                        stack.extend(v.as_object().into_iter().flatten().map(|(_, c)| c.clone()));
                    } else if k == "items" || k == "additionalProperties" {
                        stack.push(v.clone());
                    }
                }
            }
        }
    }
    assert!(
        yaml.contains("How often the operator polls slurmrestd for jobs and nodes, as a duration")
    );
}

fn schema_default<'a>(schema: &'a Value, path: &str) -> &'a Value {
    let mut node = schema;
    for name in path.split('.') {
        node = if name == "[]" {
            &node["items"]
        } else {
            &node["properties"][name]
        };
    }
    &node["default"]
}

#[test]
fn schema_defaults() {
    let schemas: BTreeMap<String, Value> = schemas().into_iter().collect();
    let cases = [
        (
            "slurmclusters.slurm.rs",
            "spec.pollInterval",
            json!("500ms"),
        ),
        (
            "slurmclusters.slurm.rs",
            "spec.restApiVersion",
            json!("auto"),
        ),
        (
            "slurmclusters.slurm.rs",
            "spec.auth.jwt.user",
            json!("slurm"),
        ),
        (
            "slurmclusters.slurm.rs",
            "spec.auth.jwt.lifetime",
            json!("15m"),
        ),
        (
            "slurmclusters.slurm.rs",
            "spec.auth.jwt.keySecretRef.key",
            json!("jwt_hs256.key"),
        ),
        (
            "slurmclusters.slurm.rs",
            "spec.auth.tokenSecretRef.key",
            json!("token"),
        ),
        (
            "slurmclusters.slurm.rs",
            "spec.tls.insecureSkipVerify",
            json!(false),
        ),
        (
            "slurmclusters.slurm.rs",
            "spec.tls.caSecretRef.key",
            json!("ca.crt"),
        ),
        (
            "slurmclusters.slurm.rs",
            "spec.tls.caConfigMapRef.key",
            json!("ca.crt"),
        ),
        (
            "slurmjobs.slurm.rs",
            "spec.dependsOn.[].type",
            json!("afterok"),
        ),
        ("slurmnodesets.slurm.rs", "spec.replicas", json!(1)),
        ("slurmnodesets.slurm.rs", "spec.minReadySeconds", json!(0)),
        (
            "slurmnodesets.slurm.rs",
            "spec.updateStrategy",
            json!({"type": "RollingUpdate"}),
        ),
        (
            "slurmnodesets.slurm.rs",
            "spec.updateStrategy.type",
            json!("RollingUpdate"),
        ),
        (
            "slurmnodesets.slurm.rs",
            "spec.updateStrategy.rollingUpdate.maxUnavailable",
            json!(1),
        ),
    ];
    for (crd, path, want) in cases {
        assert_eq!(schema_default(&schemas[crd], path), &want, "{crd} {path}");
    }
    // No default on fields whose absence means something.
    for (crd, path) in [
        ("slurmnodesets.slurm.rs", "spec.scaleIn.drainTimeout"),
        ("slurmjobs.slurm.rs", "spec.timeLimit"),
        ("slurmclusters.slurm.rs", "spec.tls"),
    ] {
        assert_eq!(
            schema_default(&schemas[crd], path),
            &Value::Null,
            "{crd} {path}"
        );
    }
}

#[test]
fn rust_defaults_match_schema_defaults() {
    let cluster: SlurmClusterSpec = serde_json::from_value(json!({
        "endpoint": "https://slurm:6820",
        "auth": {"jwt": {"keySecretRef": {"name": "jwt"}}},
        "tls": {"caSecretRef": {"name": "ca"}},
    }))
    .unwrap();
    assert_eq!(
        cluster.poll_interval.as_std(),
        std::time::Duration::from_millis(500)
    );
    assert_eq!(cluster.api_version, ApiVersion::Auto);
    let Some(AuthMethod::Jwt(jwt)) = cluster.auth.method() else {
        panic!("jwt")
    };
    assert_eq!(
        (jwt.user.as_str(), jwt.key_secret_ref.key.as_str()),
        ("slurm", "jwt_hs256.key")
    );
    assert_eq!(jwt.lifetime.as_std(), std::time::Duration::from_secs(900));
    let tls = cluster.tls.unwrap();
    assert_eq!(
        (
            tls.ca_secret_ref.unwrap().key.as_str(),
            tls.insecure_skip_verify
        ),
        ("ca.crt", false)
    );

    let ns: SlurmNodeSetSpec =
        serde_json::from_value(json!({"clusterName": "c", "template": {}})).unwrap();
    assert_eq!((ns.replicas, ns.min_ready_seconds), (1, 0));
    assert_eq!(ns.update_strategy.type_, UpdateStrategyType::RollingUpdate);
    assert_eq!(
        ns.update_strategy.max_unavailable(),
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1)
    );

    let job: SlurmJobSpec = serde_json::from_value(json!({
        "clusterName": "c", "script": "#!/bin/sh\ntrue\n", "dependsOn": [{"name": "a"}],
    }))
    .unwrap();
    assert_eq!(job.depends_on[0].type_, DependencyType::AfterOk);
}

#[test]
fn max_unavailable_count() {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let strategy = |v: Option<IntOrString>| UpdateStrategy {
        type_: UpdateStrategyType::RollingUpdate,
        rolling_update: v.map(|max_unavailable| RollingUpdate {
            max_unavailable: Some(max_unavailable),
        }),
    };
    let pct = |s: &str| Some(IntOrString::String(s.into()));
    let cases = [
        (None, 10, 1),
        (Some(IntOrString::Int(3)), 10, 3),
        (pct("3"), 10, 3),
        (pct("25%"), 10, 3),
        (pct("25%"), 3, 1),
        (pct("100%"), 7, 7),
        (pct("1%"), 0, 1),
        (Some(IntOrString::Int(0)), 5, 1),
        (pct("bogus"), 5, 1),
    ];
    for (value, replicas, want) in cases {
        assert_eq!(
            strategy(value.clone()).max_unavailable_count(replicas),
            want,
            "{value:?} of {replicas}"
        );
    }
}

#[test]
fn auth_method_needs_exactly_one() {
    let token = TokenSecretRef {
        name: "t".into(),
        key: "token".into(),
    };
    let jwt = JwtAuth {
        key_secret_ref: JwtKeySecretRef {
            name: "k".into(),
            key: "jwt_hs256.key".into(),
        },
        user: "slurm".into(),
        lifetime: Duration::from_secs(900),
    };
    let auth = |jwt: Option<JwtAuth>, token: Option<TokenSecretRef>| ClusterAuth {
        jwt,
        token_secret_ref: token,
    };
    assert!(auth(None, None).method().is_none());
    assert!(
        auth(Some(jwt.clone()), Some(token.clone()))
            .method()
            .is_none()
    );
    assert!(matches!(
        auth(Some(jwt), None).method(),
        Some(AuthMethod::Jwt(_))
    ));
    assert!(matches!(
        auth(None, Some(token)).method(),
        Some(AuthMethod::Token(_))
    ));
}

#[test]
fn phases_serialize_as_documented() {
    let all = [
        Phase::Pending,
        Phase::Submitted,
        Phase::Running,
        Phase::Completed,
        Phase::Failed,
        Phase::Cancelled,
        Phase::TimedOut,
        Phase::NodeFail,
        Phase::Preempted,
        Phase::OutOfMemory,
        Phase::Lost,
    ];
    for p in all {
        assert_eq!(serde_json::to_value(p).unwrap(), json!(p.as_str()));
        assert_eq!(
            p.is_terminal(),
            !matches!(p, Phase::Pending | Phase::Submitted | Phase::Running)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Generated files
// ---------------------------------------------------------------------------------------------

#[test]
fn committed_crds_are_current() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    let mut expected = BTreeSet::new();
    for crd in all() {
        let file = file_name(&crd);
        let want = render(&crd).unwrap();
        let have = std::fs::read_to_string(dir.join(&file)).unwrap_or_default();
        assert!(
            have == want,
            "crds/{file} is missing or stale: run hack/gen-crds.sh"
        );
        expected.insert(file);
    }
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|f| f.ends_with(".yaml"))
        .collect();
    assert_eq!(
        present, expected,
        "crds/ holds files no CRD generates: run hack/gen-crds.sh"
    );
}

#[test]
fn render_all_is_every_file_as_one_stream() {
    let files: String = all()
        .iter()
        .map(|c| format!("---\n{}", render(c).unwrap()))
        .collect();
    assert_eq!(render_all().unwrap(), files);
    for doc in render_all()
        .unwrap()
        .split("---\n")
        .filter(|d| !d.is_empty())
    {
        assert!(doc.starts_with(GENERATED_HEADER));
        let parsed: CustomResourceDefinitionYaml = serde_yaml_ng::from_str(doc).unwrap();
        assert_eq!(parsed.kind, "CustomResourceDefinition");
    }
}

#[derive(serde::Deserialize)]
struct CustomResourceDefinitionYaml {
    kind: String,
}

#[test]
fn write_all_writes_one_file_per_crd() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nested/crds");
    write_all(&out).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "slurmclusters.slurm.rs.yaml",
            "slurmjobs.slurm.rs.yaml",
            "slurmnodesets.slurm.rs.yaml"
        ]
    );
    let cluster = std::fs::read_to_string(out.join("slurmclusters.slurm.rs.yaml")).unwrap();
    assert_eq!(cluster, render(&all()[0]).unwrap());
}

/// A status object the API server kept as `{}` after a server-side apply dropped its fields
/// reads as absent, so that the reconcile after a write does not write the same status again
/// (`tests/api_writes.rs` counted two writes per transition of a job that had waited); one with
/// anything in it reads as it is.
#[test]
fn empty_status_objects_read_as_absent() {
    use crate::crd::slurmjob::SlurmJobStatus;
    let status: SlurmJobStatus = serde_json::from_value(serde_json::json!({
        "phase": "Running",
        "pending": {},
        "usage": {},
        "arrayTasks": {},
    }))
    .unwrap();
    assert_eq!(status.pending, None);
    assert_eq!(status.usage, None);
    assert_eq!(status.array_tasks, None);
    let status: SlurmJobStatus = serde_json::from_value(serde_json::json!({
        "phase": "Submitted",
        "pending": {"reason": "Priority"},
    }))
    .unwrap();
    assert_eq!(
        status.pending.and_then(|p| p.reason).as_deref(),
        Some("Priority")
    );
    assert_eq!(status.usage, None, "absent");
}
