//! Which operations and schemas reach the generator (steps 1 and 4).

use std::collections::BTreeSet;

use serde_json::Value;

use crate::error::{Result, spec_error};
use crate::json::{HTTP_METHODS, collect_refs, object_mut, paths_mut, schemas_mut};

/// The operations the operator calls, as (method, path) spelled as in the spec with the version
/// as `{version}` ([`kept_operations`] fills it in). Everything else is dropped: a smaller
/// client builds faster and exposes less.
pub const KEPT_OPERATIONS: &[(&str, &str)] = &[
    ("get", "/slurm/{version}/ping/"),
    ("get", "/slurm/{version}/diag/"),
    ("get", "/slurm/{version}/nodes/"),
    ("get", "/slurm/{version}/node/{node_name}"),
    ("post", "/slurm/{version}/node/{node_name}"),
    ("delete", "/slurm/{version}/node/{node_name}"),
    ("get", "/slurm/{version}/partitions/"),
    ("post", "/slurm/{version}/job/submit"),
    ("get", "/slurm/{version}/job/{job_id}"),
    ("post", "/slurm/{version}/job/{job_id}"),
    ("delete", "/slurm/{version}/job/{job_id}"),
    ("get", "/slurm/{version}/jobs/"),
    ("get", "/slurm/{version}/jobs/state/"),
    // Accounting lookups for jobs that slurmctld no longer holds.
    ("get", "/slurmdb/{version}/job/{job_id}"),
    ("get", "/slurmdb/{version}/jobs/"),
];

/// [`KEPT_OPERATIONS`] for one version, e.g. `("get", "/slurm/v0.0.42/ping/")`.
pub fn kept_operations(version: &str) -> Vec<(String, String)> {
    KEPT_OPERATIONS
        .iter()
        .map(|(method, path)| ((*method).to_owned(), path.replace("{version}", version)))
        .collect()
}

/// Step 1. Keep only the operations the operator calls (`kept`, which is [`KEPT_OPERATIONS`]).
///
/// Why: the full spec generates ~12.7k lines for 38 paths the operator mostly never calls; the
/// subset builds in a fraction of the time and the facade cannot reach an unvetted endpoint.
/// Fails if a kept operation is missing, so a renamed path is noticed at generation time.
pub fn keep_used_operations(spec: &mut Value, kept: &[(String, String)]) -> Result<()> {
    let paths = paths_mut(spec)?;

    let mut missing = Vec::new();
    for (method, path) in kept {
        if paths.get(path).and_then(|item| item.get(method)).is_none() {
            missing.push(format!("{} {path}", method.to_uppercase()));
        }
    }
    if !missing.is_empty() {
        let available: Vec<&String> = paths.keys().collect();
        return spec_error(format!(
            "kept operations not found: {missing:?}\n(paths in the spec: {available:?})\n\
             Update KEPT_OPERATIONS in tools/gen-client/src/passes/operations.rs."
        ));
    }

    paths.retain(|path, _| kept.iter().any(|(_, kept)| kept == path));
    for (path, item) in paths.iter_mut() {
        let item = object_mut(item, &format!("path item {path}"))?;
        // Path-level keys that are not operations (`parameters`, `summary`, ...) stay.
        item.retain(|key, _| {
            !HTTP_METHODS.contains(&key.as_str()) || kept.iter().any(|(m, p)| m == key && p == path)
        });
    }
    Ok(())
}

/// Step 4. Drop component schemas that no kept operation reaches.
///
/// Why: progenitor generates a type for every component schema; unused ones only cost build time
/// (and the slurmdbd-only ones bring extra name collisions).
pub fn prune_unreachable_schemas(spec: &mut Value) -> Result<()> {
    let mut reachable = BTreeSet::new();
    let mut pending: Vec<String> = Vec::new();
    if let Some(paths) = spec.get("paths") {
        collect_refs(paths, &mut pending);
    }
    let schemas = schemas_mut(spec)?;
    while let Some(name) = pending.pop() {
        if !reachable.insert(name.clone()) {
            continue;
        }
        match schemas.get(&name) {
            Some(schema) => collect_refs(schema, &mut pending),
            None => return spec_error(format!("reference to undefined schema `{name}`")),
        }
    }
    schemas.retain(|name, _| reachable.contains(name));
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::Error;

    fn ops(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
            .collect()
    }

    fn spec_with_paths() -> Value {
        json!({
            "paths": {
                "/a": {
                    "parameters": [ { "name": "shared", "in": "query" } ],
                    "get": { "operationId": "get_a" },
                    "post": { "operationId": "post_a" }
                },
                "/b": { "get": { "operationId": "get_b" } }
            }
        })
    }

    #[test]
    fn keeps_only_the_listed_operations() {
        let mut spec = spec_with_paths();
        keep_used_operations(&mut spec, &ops(&[("get", "/a")])).unwrap();
        assert_eq!(
            spec,
            json!({
                "paths": {
                    "/a": {
                        "parameters": [ { "name": "shared", "in": "query" } ],
                        "get": { "operationId": "get_a" }
                    }
                }
            })
        );
    }

    #[test]
    fn refuses_a_kept_operation_that_the_spec_lacks() {
        let mut spec = spec_with_paths();
        let err =
            keep_used_operations(&mut spec, &ops(&[("get", "/a"), ("delete", "/b")])).unwrap_err();
        assert!(matches!(err, Error::Spec { .. }), "{err:?}");
        assert!(err.to_string().contains("DELETE /b"), "{err}");
        assert!(err.to_string().contains("KEPT_OPERATIONS"), "{err}");
        // Nothing was dropped: a failing pass leaves no half-edited spec behind to generate from.
        assert_eq!(spec, spec_with_paths());
    }

    #[test]
    fn prunes_schemas_no_operation_reaches() {
        let mut spec = json!({
            "paths": { "/a": { "get": { "responses": { "200": { "content": {
                "application/json": { "schema": { "$ref": "#/components/schemas/resp" } } } } } } } },
            "components": { "schemas": {
                "resp": { "type": "object", "properties": {
                    "items": { "type": "array", "items": { "$ref": "#/components/schemas/item" } } } },
                "item": { "type": "object", "properties": {
                    "flags": { "$ref": "#/components/schemas/flags" } } },
                "flags": { "type": "array", "items": { "type": "string" } },
                // References a reachable schema, but nothing reaches it.
                "unused": { "type": "object", "properties": {
                    "item": { "$ref": "#/components/schemas/item" } } }
            } }
        });
        prune_unreachable_schemas(&mut spec).unwrap();
        let mut names: Vec<&String> = spec["components"]["schemas"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        names.sort();
        assert_eq!(names, ["flags", "item", "resp"]);
    }

    #[test]
    fn refuses_a_reference_to_an_undefined_schema() {
        let mut spec = json!({
            "paths": { "/a": { "get": { "requestBody": { "content": {
                "application/json": { "schema": { "$ref": "#/components/schemas/gone" } } } } } } },
            "components": { "schemas": {} }
        });
        let err = prune_unreachable_schemas(&mut spec).unwrap_err();
        assert!(err.to_string().contains("undefined schema `gone`"), "{err}");
    }
}
