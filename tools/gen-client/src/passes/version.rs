//! One shape for every REST API version (steps 0a to 0c): the facade is written once, against
//! unversioned names, and each version's real differences show up as compile errors in that
//! version's own module instead of as six copies of everything.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::error::{Result, spec_error};
use crate::json::{SCHEMA_REF_PREFIX, for_each_object, paths_mut, schemas_mut};

/// `"v0.0.42"` → `"v0042"`, the spelling slurmrestd uses in operation ids.
fn compact(version: &str) -> String {
    version.trim_start_matches('v').replace('.', "")
}

/// Schemas a version names differently from the reference for the same shape (version, its
/// name, the reference's name); [`unversion`] gives them the reference's name. v0.0.40's
/// `{set, infinite, number}` wrappers differ from v0.0.42's only in descriptions and defaults.
pub const SCHEMA_ALIASES: &[(&str, &str, &str)] = &[
    ("v0.0.40", "uint16_no_val", "uint16_no_val_struct"),
    ("v0.0.40", "uint32_no_val", "uint32_no_val_struct"),
    ("v0.0.40", "uint64_no_val", "uint64_no_val_struct"),
    ("v0.0.40", "float64_no_val", "float64_no_val_struct"),
];

/// Step 0a. Drop the version from schema names (`v0.0.42_job_info` → `job_info`) and operation
/// ids (`slurm_v0042_get_ping` → `slurm_get_ping`). Paths keep it: it is the URL.
///
/// Why: progenitor names types and methods after these (`V0042JobInfo`,
/// `slurm_v0042_get_ping`), so six versions would need six copies of the facade that differ
/// only in names. Unversioned, the same facade source compiles against each generated module.
pub fn unversion(spec: &mut Value, version: &str) -> Result<()> {
    let prefix = format!("{version}_");
    let schemas = schemas_mut(spec)?;
    // Checked before anything changes, so a refusal leaves the spec as it was.
    let mut renamed = Map::new();
    for (name, schema) in schemas.iter() {
        let Some(short) = name.strip_prefix(&prefix) else {
            return spec_error(format!(
                "schema `{name}` does not start with `{prefix}`: is this the {version} spec?"
            ));
        };
        renamed.insert(alias(version, short).to_owned(), schema.clone());
    }
    if renamed.len() != schemas.len() {
        return spec_error(format!(
            "an alias in SCHEMA_ALIASES names a schema {version} already has"
        ));
    }
    *schemas = renamed;

    let versioned_ref = format!("{SCHEMA_REF_PREFIX}{prefix}");
    let op_infix = format!("_v{}_", compact(version));
    let mut foreign = BTreeSet::new();
    for_each_object(spec, &mut |object| {
        if let Some(Value::String(target)) = object.get_mut("$ref") {
            match target.strip_prefix(&versioned_ref) {
                Some(short) => *target = format!("{SCHEMA_REF_PREFIX}{}", alias(version, short)),
                None => {
                    foreign.insert(target.clone());
                }
            }
        }
        if let Some(Value::String(id)) = object.get_mut("operationId")
            && id.contains(&op_infix)
        {
            *id = id.replacen(&op_infix, "_", 1);
        }
    });
    if !foreign.is_empty() {
        return spec_error(format!(
            "references outside the {version} schemas: {foreign:?}"
        ));
    }
    Ok(())
}

fn alias<'a>(version: &str, name: &'a str) -> &'a str {
    SCHEMA_ALIASES
        .iter()
        .find(|(v, from, _)| *v == version && *from == name)
        .map_or(name, |(_, _, to)| to)
}

/// Step 0b. Give inline schemas the names the reference version gives the same place
/// (`reference` is the reference spec after [`unversion`]), by walking both specs side by side
/// from the kept operations' bodies and from the component schemas both define.
///
/// Why: Slurm 24.11's v0.0.41 spec inlines nearly everything (18 component schemas, where
/// v0.0.42 has 181), so typify would name its types after their position
/// (`SlurmGetJobsResponseJobsItem`) and the facade could not be shared. A schema is hoisted
/// only where the reference names one; it reuses an existing component only when the two are
/// the same apart from descriptions. Where the shape differs, it stays inline and the
/// difference surfaces in that version's facade module. Returns how many schemas it hoisted.
pub fn hoist_inline_schemas(
    spec: &mut Value,
    reference: &Value,
    operations: &[(String, String)],
) -> Result<usize> {
    let empty = Map::new();
    let ref_schemas = reference
        .pointer("/components/schemas")
        .and_then(Value::as_object)
        .unwrap_or(&empty)
        .clone();
    let mut walk = Hoist {
        reference: &ref_schemas,
        components: schemas_mut(spec)?.clone(),
        hoisted: 0,
        visited: BTreeSet::new(),
    };

    // Operation bodies, in the order of `operations`, so names are assigned deterministically.
    let ref_paths = reference.get("paths").cloned().unwrap_or(Value::Null);
    let paths = paths_mut(spec)?;
    for (method, path) in operations {
        let Some(operation) = paths.get_mut(path).and_then(|p| p.get_mut(method)) else {
            continue;
        };
        let Some(ref_operation) = ref_paths
            .get(path_template_match(path, &ref_paths))
            .and_then(|p| p.get(method))
        else {
            continue;
        };
        for pointer in body_pointers(ref_operation) {
            if let (Some(node), Some(ref_node)) = (
                operation.pointer_mut(&pointer),
                ref_operation.pointer(&pointer),
            ) {
                walk.node(node, ref_node);
            }
        }
    }
    // Component schemas both versions define.
    let names: Vec<String> = walk.components.keys().cloned().collect();
    for name in names {
        walk.component(&name, &name);
    }
    let hoisted = walk.hoisted;
    *schemas_mut(spec)? = walk.components;
    Ok(hoisted)
}

/// The key of `ref_paths` that is `path` with any version swapped for the reference's.
fn path_template_match<'a>(path: &str, ref_paths: &'a Value) -> &'a str {
    let unversioned = |p: &str| -> String {
        p.split('/')
            .map(|part| if part.starts_with("v0.0.") { "*" } else { part })
            .collect::<Vec<_>>()
            .join("/")
    };
    let wanted = unversioned(path);
    ref_paths
        .as_object()
        .and_then(|paths| paths.keys().find(|p| unversioned(p) == wanted))
        .map(String::as_str)
        .unwrap_or("")
}

/// JSON pointers (within an operation) of its request and response body schemas.
fn body_pointers(operation: &Value) -> Vec<String> {
    let mut pointers = Vec::new();
    if operation
        .pointer("/requestBody/content/application~1json/schema")
        .is_some()
    {
        pointers.push("/requestBody/content/application~1json/schema".to_owned());
    }
    if let Some(responses) = operation.get("responses").and_then(Value::as_object) {
        for status in responses.keys() {
            pointers.push(format!(
                "/responses/{status}/content/application~1json/schema"
            ));
        }
    }
    pointers
}

struct Hoist<'a> {
    reference: &'a Map<String, Value>,
    components: Map<String, Value>,
    hoisted: usize,
    /// Component pairs already walked (recursive schemas end here).
    visited: BTreeSet<(String, String)>,
}

impl Hoist<'_> {
    /// Walk component `name` of this spec against the reference's `ref_name`.
    fn component(&mut self, name: &str, ref_name: &str) {
        if !self.visited.insert((name.to_owned(), ref_name.to_owned())) {
            return;
        }
        let Some(ref_schema) = self.reference.get(ref_name) else {
            return;
        };
        let Some(mut schema) = self.components.remove(name) else {
            return;
        };
        self.walk_children(&mut schema, ref_schema);
        self.components.insert(name.to_owned(), schema);
    }

    fn node(&mut self, node: &mut Value, ref_node: &Value) {
        let ref_name = ref_target(ref_node).map(str::to_owned);
        if let Some(target) = ref_target(node).map(str::to_owned) {
            if let Some(ref_name) = ref_name {
                self.component(&target, &ref_name);
            }
            return;
        }
        match ref_name {
            Some(ref_name) => {
                let Some(ref_schema) = self.reference.get(&ref_name) else {
                    return;
                };
                self.walk_children(node, ref_schema);
                // Only a schema of the reference's shape takes its name: one with other
                // properties stays inline (and surfaces as a difference in the facade).
                if !is_structured(node) || !same_shape(node, ref_schema) {
                    return;
                }
                let reuse = match self.components.get(&ref_name) {
                    None => {
                        self.components.insert(ref_name.clone(), node.clone());
                        self.hoisted += 1;
                        true
                    }
                    Some(existing) => without_descriptions(existing) == without_descriptions(node),
                };
                if reuse {
                    *node = serde_json::json!({ "$ref": format!("{SCHEMA_REF_PREFIX}{ref_name}") });
                }
            }
            None => self.walk_children(node, ref_node),
        }
    }

    /// Walk the subschemas `node` and `ref_node` share: properties by name, items, maps.
    fn walk_children(&mut self, node: &mut Value, ref_node: &Value) {
        let ref_node = match ref_target(ref_node) {
            Some(name) => match self.reference.get(name) {
                Some(schema) => schema.clone(),
                None => return,
            },
            None => ref_node.clone(),
        };
        let Some(object) = node.as_object_mut() else {
            return;
        };
        if let (Some(Value::Object(properties)), Some(Value::Object(ref_properties))) =
            (object.get_mut("properties"), ref_node.get("properties"))
        {
            for (name, property) in properties.iter_mut() {
                if let Some(ref_property) = ref_properties.get(name) {
                    self.node(property, ref_property);
                }
            }
        }
        for keyword in ["items", "additionalProperties"] {
            if let (Some(child), Some(ref_child)) = (object.get_mut(keyword), ref_node.get(keyword))
                && child.is_object()
            {
                self.node(child, ref_child);
            }
        }
    }
}

fn ref_target(node: &Value) -> Option<&str> {
    node.get("$ref")?.as_str()?.strip_prefix(SCHEMA_REF_PREFIX)
}

/// Objects and arrays get a name; a plain string or integer is not worth one.
fn is_structured(node: &Value) -> bool {
    matches!(
        node.get("type").and_then(Value::as_str),
        Some("object" | "array")
    ) || node.get("properties").is_some()
}

/// The same type and, for objects, at least half of the reference's property names (versions
/// add and drop fields; a schema sharing few of them is something else).
fn same_shape(node: &Value, reference: &Value) -> bool {
    let keys = |v: &Value| -> BTreeSet<String> {
        v.get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default()
    };
    let (mine, theirs) = (keys(node), keys(reference));
    let shared = mine.intersection(&theirs).count();
    node.get("type") == reference.get("type")
        && (theirs.is_empty() && mine.is_empty() || shared * 2 >= theirs.len() && shared > 0)
}

fn without_descriptions(value: &Value) -> Value {
    match value {
        Value::Object(object) => Value::Object(
            object
                .iter()
                .filter(|(key, _)| *key != "description" && *key != "deprecated")
                .map(|(key, child)| (key.clone(), without_descriptions(child)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_descriptions).collect()),
        other => other.clone(),
    }
}

/// The query parameters the facade passes, per operation (method, path with `{version}`);
/// operations not listed keep all of theirs.
pub const KEPT_PARAMETERS: &[(&str, &str, &[&str])] = &[
    // slurmdbd's job search has 34 to 41 filters depending on the version; the facade searches
    // by name, from a time on, as one Slurm user, with the time window on the submit time
    // (without it slurmdbd leaves out every job not eligible yet: held, waiting on a
    // dependency or a begin time) and `scheduler_unset` said (its default, which Slurm before
    // 24.05.4 dropped when another flag was given, leaving out every job that ran); one
    // positional signature in every version keeps the facade shared. Listed in spec order;
    // the generated method takes them in alphabetical order (job_name, scheduler_unset,
    // start_time, usage_time_as_submit_time, users), all `Option<&str>`: a call in another
    // order compiles and sends wrong values (the wiremock test of the search checks them).
    (
        "get",
        "/slurmdb/{version}/jobs/",
        &[
            "scheduler_unset",
            "usage_time_as_submit_time",
            "job_name",
            "start_time",
            "users",
        ],
    ),
];

/// Step 0c. Drop the query parameters the facade never passes ([`KEPT_PARAMETERS`]).
///
/// Why: the positional interface takes every parameter (progenitor sorts them by name), and
/// slurmdbd's `GET /jobs/` has a different list in every version; fails when a kept one is
/// missing.
pub fn keep_used_parameters(spec: &mut Value, version: &str) -> Result<()> {
    let paths = paths_mut(spec)?;
    for (method, template, kept) in KEPT_PARAMETERS {
        let path = template.replace("{version}", version);
        let Some(Value::Array(parameters)) = paths
            .get_mut(&path)
            .and_then(|item| item.get_mut(*method))
            .and_then(|operation| operation.get_mut("parameters"))
        else {
            return spec_error(format!(
                "{} {path} has no parameters",
                method.to_uppercase()
            ));
        };
        let names = |parameters: &Vec<Value>| -> BTreeSet<String> {
            parameters
                .iter()
                .filter_map(|p| p.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect()
        };
        let present = names(parameters);
        let missing: Vec<&&str> = kept.iter().filter(|k| !present.contains(**k)).collect();
        if !missing.is_empty() {
            return spec_error(format!(
                "{} {path} lacks the parameters {missing:?} (KEPT_PARAMETERS)",
                method.to_uppercase()
            ));
        }
        parameters.retain(|p| {
            p.get("in").and_then(Value::as_str) != Some("query")
                || p.get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|name| kept.contains(&name))
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn unversion_renames_schemas_references_and_operation_ids_but_not_paths() {
        let mut spec = json!({
            "paths": { "/slurm/v0.0.41/ping/": { "get": {
                "operationId": "slurm_v0041_get_ping",
                "responses": { "200": { "content": { "application/json": { "schema":
                    { "$ref": "#/components/schemas/v0.0.41_openapi_ping_array_resp" } } } } }
            } } },
            "components": { "schemas": {
                "v0.0.41_openapi_ping_array_resp": { "type": "object", "properties": {
                    "meta": { "$ref": "#/components/schemas/v0.0.41_openapi_meta" } } },
                "v0.0.41_openapi_meta": { "type": "object" }
            } }
        });
        unversion(&mut spec, "v0.0.41").unwrap();
        let get = &spec["paths"]["/slurm/v0.0.41/ping/"]["get"];
        assert_eq!(get["operationId"], "slurm_get_ping");
        assert_eq!(
            get["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/openapi_ping_array_resp"
        );
        let schemas = spec["components"]["schemas"].as_object().unwrap();
        assert_eq!(
            schemas.keys().collect::<Vec<_>>(),
            ["openapi_meta", "openapi_ping_array_resp"]
        );
        assert_eq!(
            schemas["openapi_ping_array_resp"]["properties"]["meta"]["$ref"],
            "#/components/schemas/openapi_meta"
        );
    }

    #[test]
    fn unversion_refuses_another_versions_spec() {
        let mut spec = json!({ "paths": {}, "components": { "schemas": {
            "v0.0.42_node": { "type": "object" } } } });
        let err = unversion(&mut spec, "v0.0.41").unwrap_err();
        assert!(err.to_string().contains("v0.0.42_node"), "{err}");
    }

    fn reference() -> Value {
        json!({
            "paths": { "/slurm/v0.0.42/jobs/": { "get": { "responses": { "200": { "content": {
                "application/json": { "schema": { "$ref": "#/components/schemas/resp" } } } } } } } },
            "components": { "schemas": {
                "resp": { "type": "object", "properties": {
                    "jobs": { "type": "array", "items": { "$ref": "#/components/schemas/job_info" } },
                    "last_update": { "$ref": "#/components/schemas/uint64_no_val_struct" } } },
                "job_info": { "type": "object", "properties": {
                    "submit_time": { "$ref": "#/components/schemas/uint64_no_val_struct" },
                    "end_time": { "$ref": "#/components/schemas/uint64_no_val_struct" },
                    "nodes": { "type": "string" } } },
                "uint64_no_val_struct": { "type": "object", "properties": { "number": { "type": "integer" } } }
            } }
        })
    }

    fn number(description: &str) -> Value {
        json!({ "type": "object", "description": description,
                "properties": { "number": { "type": "integer" } } })
    }

    #[test]
    fn inline_schemas_get_the_reference_names_and_equal_ones_are_shared() {
        let mut spec = json!({
            "paths": { "/slurm/v0.0.41/jobs/": { "get": { "responses": { "200": { "content": {
                "application/json": { "schema": { "type": "object", "properties": {
                    "jobs": { "type": "array", "items": { "type": "object", "properties": {
                        "submit_time": number("When submitted"),
                        "end_time": number("When it ended"),
                        "nodes": { "type": "string" } } } },
                    "last_update": number("Last change") } } } } } } } } },
            "components": { "schemas": {} }
        });
        let ops = [("get".to_owned(), "/slurm/v0.0.41/jobs/".to_owned())];
        let hoisted = hoist_inline_schemas(&mut spec, &reference(), &ops).unwrap();
        // resp, job_info and uint64_no_val_struct: the second and third numbers reuse the first.
        assert_eq!(hoisted, 3);
        assert_eq!(
            spec["paths"]["/slurm/v0.0.41/jobs/"]["get"]["responses"]["200"]["content"]["application/json"]
                ["schema"]["$ref"],
            "#/components/schemas/resp"
        );
        let schema = &spec["components"]["schemas"]["resp"];
        assert_eq!(
            schema["properties"]["jobs"]["items"]["$ref"],
            "#/components/schemas/job_info"
        );
        assert_eq!(
            schema["properties"]["last_update"]["$ref"],
            "#/components/schemas/uint64_no_val_struct"
        );
        let job_info = &spec["components"]["schemas"]["job_info"];
        assert_eq!(
            job_info["properties"]["end_time"]["$ref"],
            "#/components/schemas/uint64_no_val_struct"
        );
        assert_eq!(job_info["properties"]["nodes"], json!({ "type": "string" }));
    }

    #[test]
    fn a_different_shape_under_a_taken_name_stays_inline() {
        let other = json!({ "type": "object", "properties": { "other": { "type": "string" } } });
        let job = json!({ "type": "object", "properties": {
            "submit_time": number("a"),
            "end_time": other } });
        let body = json!({ "type": "object", "properties": {
            "jobs": { "type": "array", "items": job } } });
        let mut spec = json!({
            "paths": { "/slurm/v0.0.41/jobs/": { "get": { "responses": { "200": {
                "content": { "application/json": { "schema": body } } } } } } },
            "components": { "schemas": {} }
        });
        let ops = [("get".to_owned(), "/slurm/v0.0.41/jobs/".to_owned())];
        hoist_inline_schemas(&mut spec, &reference(), &ops).unwrap();
        let job_info = &spec["components"]["schemas"]["job_info"];
        assert_eq!(
            job_info["properties"]["end_time"]["properties"]["other"],
            json!({ "type": "string" })
        );
    }

    #[test]
    fn only_the_kept_query_parameters_stay() {
        let mut spec = json!({ "paths": { "/slurmdb/v0.0.40/jobs/": { "get": { "parameters": [
            { "in": "query", "name": "account" },
            { "in": "query", "name": "scheduler_unset" },
            { "in": "query", "name": "usage_time_as_submit_time" },
            { "in": "query", "name": "job_name" },
            { "in": "query", "name": "start_time" },
            { "in": "query", "name": "state" },
            { "in": "query", "name": "users" } ] } } } });
        keep_used_parameters(&mut spec, "v0.0.40").unwrap();
        assert_eq!(
            spec["paths"]["/slurmdb/v0.0.40/jobs/"]["get"]["parameters"],
            json!([
                { "in": "query", "name": "scheduler_unset" },
                { "in": "query", "name": "usage_time_as_submit_time" },
                { "in": "query", "name": "job_name" },
                { "in": "query", "name": "start_time" },
                { "in": "query", "name": "users" }
            ])
        );
        let mut without = json!({ "paths": { "/slurmdb/v0.0.40/jobs/": { "get": { "parameters": [
            { "in": "query", "name": "users" } ] } } } });
        let err = keep_used_parameters(&mut without, "v0.0.40").unwrap_err();
        assert!(err.to_string().contains("job_name"), "{err}");
    }
}
