//! Schemas loosened to what slurmrestd really sends, and to what typify accepts
//! (steps 8 to 10). None of these can fail: they only remove or widen constraints.

use serde_json::{Value, json};

use crate::json::for_each_schema_in_spec;

/// Step 8. Drop every `required` list.
///
/// Why: slurmrestd lists paths like `"cpus/count"` and `"error/code"` in `required` (no such
/// property, so a strict client rejects every running job), and omits fields it calls required: `GET
/// /node/{unknown}` answers 200 with no `nodes` and no `last_update`. One missing field must
/// never fail a whole response; every field becomes `Option` and the facade decides what it
/// needs.
pub fn drop_required(spec: &mut Value) {
    for_each_schema_in_spec(spec, &mut |schema| {
        if matches!(schema.get("required"), Some(Value::Array(_))) {
            schema.remove("required");
        }
    });
}

/// Step 9. Drop every `default`.
///
/// Why: v0.0.40's spec has the only ones (`"set": {"type": "boolean", "default": false}`,
/// `"infinite": {"type": "boolean", "default": 0}`). typify aborts on a default that does not
/// conform, and turns one that does into a plain `bool` where every other version has
/// `Option<bool>` (see `drop_required`), so the shared facade would not compile against it. A
/// missing field means "not sent", as everywhere else.
pub fn drop_defaults(spec: &mut Value) {
    for_each_schema_in_spec(spec, &mut |schema| {
        schema.remove("default");
    });
}

/// Step 10. Declare `int32` integers as `int64`.
///
/// Why: slurmrestd labels its unsigned 32-bit fields `int32`, so typify makes them `i32`, but
/// the data parser dumps a plain `uint32_t` as is, so values above `i32::MAX` are legal: uids
/// and gids, NO_VAL/INFINITE sentinels, diag's `schedule_cycle_sum` (a running sum of
/// microseconds, which Slurm 26.05's own v0.0.42 spec already declares `int64`). One such value
/// would fail a whole response; `i64` holds every u32 and i32.
pub fn widen_int32(spec: &mut Value) {
    for_each_schema_in_spec(spec, &mut |schema| {
        if schema.get("type") == Some(&json!("integer"))
            && schema.get("format") == Some(&json!("int32"))
        {
            schema.insert("format".into(), json!("int64"));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_lists_are_dropped_but_not_required_parameters_or_properties() {
        let mut spec = json!({
            "components": { "schemas": { "job": {
                "type": "object",
                "required": ["cpus/count", "name"],
                "properties": {
                    "name": { "type": "string" },
                    // A property called `required`, kept as a property.
                    "required": { "type": "object", "required": ["inner"],
                                  "properties": { "inner": { "type": "string" } } }
                }
            } } },
            "paths": { "/p": { "post": {
                "parameters": [ { "name": "id", "in": "path", "required": true,
                                  "schema": { "type": "object", "required": ["x"] } } ]
            } } }
        });
        drop_required(&mut spec);
        assert_eq!(
            spec,
            json!({
                "components": { "schemas": { "job": {
                    "type": "object",
                    "properties": {
                        "name": { "type": "string" },
                        "required": { "type": "object",
                                      "properties": { "inner": { "type": "string" } } }
                    }
                } } },
                "paths": { "/p": { "post": {
                    // OpenAPI's `required: true` on a parameter is not a schema keyword: kept.
                    "parameters": [ { "name": "id", "in": "path", "required": true,
                                      "schema": { "type": "object" } } ]
                } } }
            })
        );
    }

    #[test]
    fn defaults_are_dropped() {
        let mut spec = json!({ "components": { "schemas": { "o": { "type": "object", "properties": {
            "infinite": { "type": "boolean", "default": 0 },
            "count": { "type": "integer", "default": "none" },
            "ratio": { "type": "number", "default": 1 },
            "flag": { "type": "boolean", "default": false },
            "size": { "type": "integer", "default": 4 },
            "name": { "type": "string", "default": "x" },
            "list": { "type": "array", "default": {} }
        } } } } });
        drop_defaults(&mut spec);
        assert_eq!(
            spec["components"]["schemas"]["o"]["properties"],
            json!({
                "infinite": { "type": "boolean" },
                "count": { "type": "integer" },
                "ratio": { "type": "number" },
                "flag": { "type": "boolean" },
                "size": { "type": "integer" },
                "name": { "type": "string" },
                "list": { "type": "array" }
            })
        );
    }

    #[test]
    fn int32_becomes_int64_and_nothing_else_changes() {
        let mut spec = json!({
            "components": { "schemas": { "o": { "type": "object", "properties": {
                "uid": { "type": "integer", "format": "int32" },
                "big": { "type": "integer", "format": "int64" },
                "load": { "type": "number", "format": "float" },
                "ids": { "type": "array", "items": { "type": "integer", "format": "int32" } }
            } } } },
            "paths": { "/p": { "get": { "parameters": [
                { "name": "n", "in": "query", "schema": { "type": "integer", "format": "int32" } }
            ] } } }
        });
        widen_int32(&mut spec);
        assert_eq!(
            spec,
            json!({
                "components": { "schemas": { "o": { "type": "object", "properties": {
                    "uid": { "type": "integer", "format": "int64" },
                    "big": { "type": "integer", "format": "int64" },
                    "load": { "type": "number", "format": "float" },
                    "ids": { "type": "array", "items": { "type": "integer", "format": "int64" } }
                } } } },
                "paths": { "/p": { "get": { "parameters": [
                    { "name": "n", "in": "query", "schema": { "type": "integer", "format": "int64" } }
                ] } } }
            })
        );
    }
}
