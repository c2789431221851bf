//! What the generated types look like: open enums, no colliding names (steps 5 and 6).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::error::{Result, spec_error};
use crate::json::{SCHEMA_REF_PREFIX, for_each_object, for_each_schema_in_spec, schemas_mut};

/// The schema renames that collision detection is expected to find (old name, new name). The
/// detection is general; this list bounds its result (a version may need fewer), because the generated type names are what
/// the facade is written against. If the spec changes shape, generation stops here and says so.
pub const EXPECTED_RENAMES: &[(&str, &str)] = &[
    // Array of job resources per node, vs the inline object `job_res.properties.nodes`.
    ("job_res_nodes", "job_res_nodes_list"),
    // Array of job state flags, vs the inline object `job.properties.state`.
    ("job_state", "job_state_list"),
];

/// Step 5. Remove every `enum` constraint (all of them are on strings). Runs before the
/// collision check (step 6), which must see the schemas as typify will. Returns how many enums
/// it opened (none means the step may no longer be needed; the caller warns).
///
/// Why: job, node and partition states and all the flag sets are enums in the spec; a value a
/// newer Slurm adds (or one the spec forgot) would fail the whole response. They become plain
/// strings, and the facade maps them to domain enums with a catch-all. The few query-parameter
/// enums (`flags=DETAIL`, ...) are opened too: with no enum left, every generated type can
/// derive `Default` (see `generate`), which the facade needs to build request bodies.
pub fn open_enums(spec: &mut Value) -> Result<usize> {
    // Count first and edit only when every enum can be opened, so a refusal changes nothing.
    let (mut opened, mut other) = (0, 0);
    for_each_schema_in_spec(spec, &mut |schema| {
        if schema.contains_key("enum") {
            if schema.get("type") == Some(&json!("string")) {
                opened += 1;
            } else {
                other += 1;
            }
        }
    });
    if other > 0 {
        return spec_error(format!(
            "{other} enum(s) on non-string schemas; decide how to open them \
             (open_enums in tools/gen-client/src/passes/types.rs)"
        ));
    }
    for_each_schema_in_spec(spec, &mut |schema| {
        schema.remove("enum");
    });
    Ok(opened)
}

/// Step 6. Rename component schemas whose Rust type name collides with the name typify derives
/// for an inline schema (`<parent>_<property>`, `<parent>_item`). `expected` (which is
/// [`EXPECTED_RENAMES`]) bounds the result: a rename not listed is an error.
///
/// Why: typify names an inline object after its parent and property, and when that name is
/// already taken it silently reuses the existing type. In v0.0.42, the inline
/// `v0.0.42_job_res.nodes` object and the `v0.0.42_job_res_nodes` array both become
/// `V0042JobResNodes` (40 compile errors); the inline `v0.0.42_job.state` object and the
/// `v0.0.42_job_state` array both become `V0042JobState`, which compiles but decodes
/// slurmdbd's `{current, reason}` object as an array. Renaming the component keeps both.
pub fn rename_colliding_schemas(spec: &mut Value, expected: &[(&str, &str)]) -> Result<()> {
    let mut renames = BTreeMap::new();
    let schemas = schemas_mut(spec)?;
    let by_key: BTreeMap<String, String> = schemas
        .keys()
        .map(|name| (type_key(name), name.clone()))
        .collect();
    if by_key.len() != schemas.len() {
        return spec_error("two component schemas map to the same Rust type name");
    }

    for (name, schema) in schemas.iter() {
        let mut inline_names = Vec::new();
        inline_type_names(name, schema, true, &mut inline_names);
        for inline in inline_names {
            if let Some(component) = by_key.get(&type_key(&inline)) {
                let is_array =
                    schemas.get(component).and_then(|s| s.get("type")) == Some(&json!("array"));
                let new_name = format!("{component}_{}", if is_array { "list" } else { "schema" });
                renames.insert(component.clone(), new_name);
            }
        }
    }

    let found: Vec<(&str, &str)> = renames
        .iter()
        .map(|(old, new)| (old.as_str(), new.as_str()))
        .collect();
    let mut expected = expected.to_vec();
    expected.sort_unstable();
    // A version may lack one of the collisions (v0.0.40 has no inline `job_res.nodes`), but
    // never have one that is not listed.
    if found.iter().any(|rename| !expected.contains(rename)) {
        return spec_error(format!(
            "schema name collisions changed.\n  found:    {found:?}\n  expected: {expected:?}\n\
             Generated type names would change; review the new collisions and update \
             EXPECTED_RENAMES in tools/gen-client/src/passes/types.rs (and the facade)."
        ));
    }

    for (old, new) in &renames {
        if by_key.contains_key(&type_key(new)) {
            return spec_error(format!("cannot rename `{old}`: `{new}` already exists"));
        }
    }
    for (old, new) in &renames {
        match schemas.remove(old) {
            Some(schema) => schemas.insert(new.clone(), schema),
            None => return spec_error(format!("schema `{old}` vanished while renaming")),
        };
    }
    let targets: BTreeMap<String, String> = renames
        .iter()
        .map(|(old, new)| {
            (
                format!("{SCHEMA_REF_PREFIX}{old}"),
                format!("{SCHEMA_REF_PREFIX}{new}"),
            )
        })
        .collect();
    for_each_object(spec, &mut |object| {
        if let Some(Value::String(target)) = object.get_mut("$ref")
            && let Some(new) = targets.get(target.as_str())
        {
            *target = new.clone();
        }
    });
    Ok(())
}

/// The names typify will try to give to the inline schemas inside `schema` (whose own name is
/// `name`). Objects with properties and enums get named types; arrays get `<name>_item` for
/// their items; `$ref`s and plain scalars get no name.
fn inline_type_names(name: &str, schema: &Value, is_root: bool, out: &mut Vec<String>) {
    if schema.get("$ref").is_some() {
        return;
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let named = properties.is_some_and(|p| !p.is_empty())
        || schema.get("enum").is_some()
        || ["allOf", "oneOf", "anyOf"]
            .iter()
            .any(|k| schema.get(*k).is_some());
    if named && !is_root {
        out.push(name.to_string());
    }
    if let Some(properties) = properties {
        for (property, child) in properties {
            inline_type_names(&format!("{name}_{property}"), child, false, out);
        }
    }
    if let Some(items) = schema.get("items") {
        inline_type_names(&format!("{name}_item"), items, false, out);
    }
}

/// A conservative stand-in for typify's identifier: `v0.0.42_job_res_nodes` and
/// `V0042JobResNodes` both become `v0042jobresnodes`. Two names with the same key may become the
/// same Rust type (PascalCase drops separators and case), so treating them as colliding is safe.
fn type_key(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_enums_are_opened_everywhere() {
        let mut spec = json!({
            "components": { "schemas": {
                "state": { "type": "array", "items": { "type": "string", "enum": ["A", "B"] } },
                "node": { "type": "object", "properties": {
                    "kind": { "type": "string", "enum": ["X"] },
                    // A property named `enum` is a property, not the keyword.
                    "enum": { "type": "integer" }
                } }
            } },
            "paths": { "/p": { "get": { "parameters": [
                { "name": "flags", "in": "query", "schema": { "type": "string", "enum": ["DETAIL"] } }
            ] } } }
        });
        assert_eq!(open_enums(&mut spec).unwrap(), 3);
        assert_eq!(
            spec,
            json!({
                "components": { "schemas": {
                    "state": { "type": "array", "items": { "type": "string" } },
                    "node": { "type": "object", "properties": {
                        "kind": { "type": "string" },
                        "enum": { "type": "integer" }
                    } }
                } },
                "paths": { "/p": { "get": { "parameters": [
                    { "name": "flags", "in": "query", "schema": { "type": "string" } }
                ] } } }
            })
        );
    }

    #[test]
    fn no_enum_is_reported_as_zero() {
        let mut spec = json!({ "components": { "schemas": { "a": { "type": "string" } } } });
        assert_eq!(open_enums(&mut spec).unwrap(), 0);
    }

    #[test]
    fn refuses_an_enum_on_a_non_string() {
        let original = json!({ "components": { "schemas": {
            "s": { "type": "string", "enum": ["A"] },
            "n": { "type": "integer", "enum": [1, 2] }
        } } });
        let mut spec = original.clone();
        let err = open_enums(&mut spec).unwrap_err();
        assert!(err.to_string().contains("1 enum(s) on non-string"), "{err}");
        assert_eq!(
            spec, original,
            "a refused pass must leave the spec untouched"
        );
    }

    /// The v0.0.42 shape in miniature: an inline `job.state` object and a `job_state` array,
    /// which typify would both call `JobState`.
    fn colliding_spec() -> Value {
        json!({
            "components": { "schemas": {
                "job": { "type": "object", "properties": {
                    "state": { "type": "object", "properties": {
                        "current": { "$ref": "#/components/schemas/job_state" },
                        "reason": { "type": "string" }
                    } }
                } },
                "job_state": { "type": "array", "items": { "type": "string" } },
                "job_res": { "type": "object", "properties": {
                    "nodes": { "type": "object", "properties": { "count": { "type": "integer" } } }
                } },
                "job_res_nodes": { "type": "object", "properties": { "x": { "type": "string" } } }
            } },
            "paths": { "/p": { "get": { "responses": { "200": { "content": { "application/json": {
                "schema": { "$ref": "#/components/schemas/job_state" } } } } } } } }
        })
    }

    #[test]
    fn colliding_components_are_renamed_and_references_follow() {
        let mut spec = colliding_spec();
        rename_colliding_schemas(
            &mut spec,
            &[
                ("job_state", "job_state_list"),
                ("job_res_nodes", "job_res_nodes_schema"),
            ],
        )
        .unwrap();
        let schemas = spec["components"]["schemas"].as_object().unwrap();
        assert!(!schemas.contains_key("job_state"));
        assert!(!schemas.contains_key("job_res_nodes"));
        // An array becomes `_list`, anything else `_schema`.
        assert_eq!(
            schemas["job_state_list"],
            json!({ "type": "array", "items": { "type": "string" } })
        );
        assert!(schemas.contains_key("job_res_nodes_schema"));
        // References follow, in components and in operations.
        assert_eq!(
            schemas["job"]["properties"]["state"]["properties"]["current"]["$ref"],
            json!("#/components/schemas/job_state_list")
        );
        assert_eq!(
            spec["paths"]["/p"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
                ["$ref"],
            json!("#/components/schemas/job_state_list")
        );
    }

    #[test]
    fn array_items_collide_under_the_item_name() {
        let mut spec = json!({ "components": { "schemas": {
            "list": { "type": "array", "items": { "type": "object", "properties": {
                "a": { "type": "string" } } } },
            "list_item": { "type": "object", "properties": { "b": { "type": "string" } } }
        } } });
        rename_colliding_schemas(&mut spec, &[("list_item", "list_item_schema")]).unwrap();
        assert!(
            spec["components"]["schemas"]
                .get("list_item_schema")
                .is_some()
        );
    }

    #[test]
    fn refuses_collisions_other_than_the_pinned_ones() {
        // One of the two collisions is not pinned: a type name would change unannounced.
        let mut spec = colliding_spec();
        let err =
            rename_colliding_schemas(&mut spec, &[("job_state", "job_state_list")]).unwrap_err();
        assert!(
            err.to_string().contains("schema name collisions changed"),
            "{err}"
        );
        assert!(err.to_string().contains("EXPECTED_RENAMES"), "{err}");
        assert_eq!(
            spec,
            colliding_spec(),
            "a refused pass must leave the spec untouched"
        );

        // A listed rename that a version does not need is fine (v0.0.40 lacks one).
        let mut spec = json!({ "components": { "schemas": { "a": { "type": "string" } } } });
        rename_colliding_schemas(&mut spec, &[("a", "a_list")]).unwrap();
        assert_eq!(
            spec,
            json!({ "components": { "schemas": { "a": { "type": "string" } } } })
        );
    }

    #[test]
    fn refuses_a_rename_onto_an_existing_name() {
        let mut spec = colliding_spec();
        spec["components"]["schemas"]["job_state_list"] = json!({ "type": "string" });
        let err = rename_colliding_schemas(
            &mut spec,
            &[
                ("job_state", "job_state_list"),
                ("job_res_nodes", "job_res_nodes_schema"),
            ],
        )
        .unwrap_err();
        assert!(err.to_string().contains("already exists"), "{err}");
    }

    #[test]
    fn refuses_components_that_are_one_rust_type() {
        let mut spec = json!({ "components": { "schemas": {
            "job_state": { "type": "string" },
            "JobState": { "type": "string" }
        } } });
        let err = rename_colliding_schemas(&mut spec, &[]).unwrap_err();
        assert!(err.to_string().contains("same Rust type name"), "{err}");
    }
}
