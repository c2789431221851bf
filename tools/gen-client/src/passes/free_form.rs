//! Fields that would decode into arbitrary JSON, dropped (step 11).

use serde_json::{Map, Value};

use crate::json::{SCHEMA_REF_PREFIX, for_each_schema_in_spec};

/// Step 11. Drop every property whose schema is free-form: an object without `properties` that
/// takes any value (`serde_json::Map`), a list of untyped items (`Vec<serde_json::Value>`), or
/// an untyped value, directly or through a `$ref`. Returns how many were dropped.
///
/// Why: the operator never reads them (node `power` and `external_sensors`, v0.0.40's
/// `job_resources.nodes`, `power_flags`, ...), and they are the one place where a body's
/// objects cost memory the element budget (`slurm::elements`) does not charge: it charges list
/// items, and an object that is a field's value belongs to its parent's record. Nested maps in
/// such a field decode into a tree of maps, some hundred times their bytes. Without the field,
/// serde skips its value without building anything.
pub fn drop_free_form_properties(spec: &mut Value) -> usize {
    let mut dropped = 0;
    // Until nothing more goes: an object whose only properties were free-form (a job's
    // `power: {flags: [...]}`) is free-form itself once they are gone.
    loop {
        let named = spec
            .pointer("/components/schemas")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let mut now = 0;
        for_each_schema_in_spec(spec, &mut |schema| {
            if let Some(Value::Object(properties)) = schema.get_mut("properties") {
                let before = properties.len();
                properties.retain(|_, property| !free_form(property, &named));
                now += before - properties.len();
            }
        });
        if now == 0 {
            return dropped;
        }
        dropped += now;
    }
}

/// Whether `schema` decodes to arbitrary JSON. A `$ref` is followed once (named schemas do not
/// refer to free-form ones through further references in these specs).
fn free_form(schema: &Value, named: &Map<String, Value>) -> bool {
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(reference) => match reference
            .strip_prefix(SCHEMA_REF_PREFIX)
            .and_then(|name| named.get(name))
        {
            Some(target) => target,
            None => return false,
        },
        None => schema,
    };
    let Some(object) = schema.as_object() else {
        return false;
    };
    let typed = |key: &str| object.contains_key(key);
    match object.get("type").and_then(Value::as_str) {
        Some("object") => {
            let no_properties = object
                .get("properties")
                .and_then(Value::as_object)
                .is_none_or(Map::is_empty);
            // A map of typed values (`additionalProperties: {type: string}`) is not free-form.
            let any_value = match object.get("additionalProperties") {
                None | Some(Value::Bool(true)) => true,
                Some(Value::Object(values)) => values.is_empty(),
                Some(_) => false,
            };
            no_properties && any_value
        }
        Some("array") => object.get("items").is_none_or(|items| {
            items.as_object().is_some_and(Map::is_empty) || free_form(items, named)
        }),
        Some(_) => false,
        None => {
            !(typed("$ref") || typed("properties") || typed("items") || typed("allOf"))
                && !(typed("oneOf") || typed("anyOf") || typed("enum"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn free_form_properties_are_dropped_typed_ones_kept() {
        let mut spec = json!({
            "components": { "schemas": {
                "node": { "type": "object", "properties": {
                    "name": { "type": "string" },
                    "power": { "type": "object", "properties": {} },
                    "sensors": { "type": "object", "additionalProperties": true },
                    "flags": { "type": "array", "items": {} },
                    "anything": {},
                    "res": { "$ref": "#/components/schemas/res_nodes" },
                    "features": { "type": "array", "items": { "type": "string" } },
                    "labels": { "type": "object", "additionalProperties": { "type": "string" } },
                    "time": { "type": "object", "properties": { "start": { "type": "integer" } } },
                    "job": { "$ref": "#/components/schemas/job" },
                    "power_info": { "type": "object", "properties": {
                        "flags": { "type": "array", "items": {} } } }
                } },
                "res_nodes": { "type": "array", "items": { "type": "object" } },
                "job": { "type": "object", "properties": { "id": { "type": "integer" } } }
            } },
            "paths": {}
        });
        // `power_info` goes with its only property.
        assert_eq!(drop_free_form_properties(&mut spec), 7);
        let kept: Vec<&str> = spec["components"]["schemas"]["node"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(kept, ["features", "job", "labels", "name", "time"]);
    }
}
