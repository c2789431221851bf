//! Helpers for editing the spec as a plain `serde_json::Value`.

use serde_json::{Map, Value, json};

use crate::error::{Result, spec_error};

pub(crate) const SCHEMA_REF_PREFIX: &str = "#/components/schemas/";
pub(crate) const HTTP_METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

pub(crate) fn object_mut<'a>(
    value: &'a mut Value,
    what: &str,
) -> Result<&'a mut Map<String, Value>> {
    match value.as_object_mut() {
        Some(object) => Ok(object),
        None => spec_error(format!("{what} is not a JSON object")),
    }
}

pub(crate) fn paths_mut(spec: &mut Value) -> Result<&mut Map<String, Value>> {
    match spec.get_mut("paths") {
        Some(paths) => object_mut(paths, "`paths`"),
        None => spec_error("the spec has no `paths`"),
    }
}

pub(crate) fn schemas_mut(spec: &mut Value) -> Result<&mut Map<String, Value>> {
    match spec.pointer_mut("/components/schemas") {
        Some(schemas) => object_mut(schemas, "`components.schemas`"),
        None => spec_error("the spec has no `components.schemas`"),
    }
}

pub(crate) fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("{SCHEMA_REF_PREFIX}{name}") })
}

/// JSON pointer escaping (RFC 6901) for a path key like `/slurm/v0.0.42/jobs/state/`.
pub(crate) fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Calls `visit` on every JSON object in `value`, depth first, parents before children.
pub(crate) fn for_each_object(value: &mut Value, visit: &mut impl FnMut(&mut Map<String, Value>)) {
    match value {
        Value::Object(object) => {
            visit(object);
            for child in object.values_mut() {
                for_each_object(child, visit);
            }
        }
        Value::Array(items) => {
            for item in items {
                for_each_object(item, visit);
            }
        }
        _ => {}
    }
}

/// Calls `visit` on every schema object in `value`: the value itself and every subschema, but
/// not the `properties` maps themselves (whose keys are property names, so a property named
/// `type` or `required` is never mistaken for a keyword).
pub(crate) fn for_each_schema(schema: &mut Value, visit: &mut impl FnMut(&mut Map<String, Value>)) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    visit(object);
    for (keyword, child) in object.iter_mut() {
        match keyword.as_str() {
            "properties" => {
                if let Some(properties) = child.as_object_mut() {
                    for property in properties.values_mut() {
                        for_each_schema(property, visit);
                    }
                }
            }
            "items" | "additionalProperties" | "not" => for_each_schema(child, visit),
            "allOf" | "oneOf" | "anyOf" => {
                if let Some(members) = child.as_array_mut() {
                    for member in members {
                        for_each_schema(member, visit);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Calls `visit` on every schema in the spec: component schemas, and the inline schemas of
/// parameters, request bodies and responses.
pub(crate) fn for_each_schema_in_spec(
    spec: &mut Value,
    visit: &mut impl FnMut(&mut Map<String, Value>),
) {
    if let Some(Value::Object(schemas)) = spec.pointer_mut("/components/schemas") {
        for schema in schemas.values_mut() {
            for_each_schema(schema, visit);
        }
    }
    if let Some(paths) = spec.get_mut("paths") {
        // Inline schemas in operations always sit under a `schema` key (parameters and media
        // types); `properties` never occurs above them.
        let mut roots = Vec::new();
        collect_schema_keys(paths, &mut roots);
        for schema in roots {
            for_each_schema(schema, visit);
        }
    }
}

fn collect_schema_keys<'a>(value: &'a mut Value, out: &mut Vec<&'a mut Value>) {
    match value {
        Value::Object(object) => {
            for (key, child) in object.iter_mut() {
                if key == "schema" {
                    out.push(child);
                } else {
                    collect_schema_keys(child, out);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                collect_schema_keys(item, out);
            }
        }
        _ => {}
    }
}

/// Names of the component schemas `value` references directly.
pub(crate) fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(object) => {
            if let Some(Value::String(target)) = object.get("$ref")
                && let Some(name) = target.strip_prefix(SCHEMA_REF_PREFIX)
            {
                out.push(name.to_string());
            }
            for child in object.values() {
                collect_refs(child, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                collect_refs(item, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Marks every object the walker calls a schema with `"seen": true`.
    fn mark_schemas(mut spec: Value) -> Value {
        for_each_schema_in_spec(&mut spec, &mut |schema| {
            schema.insert("seen".into(), json!(true));
        });
        spec
    }

    #[test]
    fn schema_walk_visits_subschemas_but_not_property_maps() {
        let spec = mark_schemas(json!({
            "components": { "schemas": { "a": {
                "type": "object",
                "properties": {
                    "type": { "type": "string" },
                    "list": { "type": "array", "items": { "type": "integer" } },
                    "either": { "oneOf": [ { "type": "string" } ] },
                    "map": { "additionalProperties": { "type": "string" } }
                }
            } } },
            "paths": {}
        }));
        let a = &spec["components"]["schemas"]["a"];
        assert_eq!(a["seen"], json!(true));
        // The `properties` map itself is not a schema: no `seen` property appears in it.
        assert!(a["properties"].get("seen").is_none());
        assert_eq!(a["properties"]["type"]["seen"], json!(true));
        assert_eq!(a["properties"]["list"]["items"]["seen"], json!(true));
        assert_eq!(a["properties"]["either"]["oneOf"][0]["seen"], json!(true));
        assert_eq!(
            a["properties"]["map"]["additionalProperties"]["seen"],
            json!(true)
        );
    }

    #[test]
    fn schema_walk_finds_inline_schemas_of_operations_only_under_schema_keys() {
        let spec = mark_schemas(json!({
            "paths": { "/p": { "get": {
                "parameters": [ { "name": "q", "in": "query", "required": true,
                                  "schema": { "type": "string" } } ],
                "responses": { "200": { "content": { "application/json": {
                    "schema": { "type": "object" } } } } }
            } } }
        }));
        let get = &spec["paths"]["/p"]["get"];
        assert_eq!(get["parameters"][0]["schema"]["seen"], json!(true));
        assert_eq!(
            get["responses"]["200"]["content"]["application/json"]["schema"]["seen"],
            json!(true)
        );
        // The parameter object is not a schema (its `required: true` is not a schema keyword).
        assert!(get["parameters"][0].get("seen").is_none());
        assert!(get.get("seen").is_none());
    }

    #[test]
    fn refs_are_collected_from_any_depth() {
        let mut found = Vec::new();
        collect_refs(
            &json!({ "a": [ { "$ref": "#/components/schemas/x" } ],
                     "b": { "c": { "$ref": "#/components/schemas/y" } },
                     "d": { "$ref": "#/components/parameters/not_a_schema" } }),
            &mut found,
        );
        found.sort();
        assert_eq!(found, ["x", "y"]);
    }

    #[test]
    fn pointer_escaping() {
        assert_eq!(escape_pointer("/a~b/"), "~1a~0b~1");
    }
}
