//! `GET /jobs/state/`, which the spec describes wrongly (steps 2 and 3).

use serde_json::{Value, json};

use crate::error::{Result, spec_error};
use crate::json::{SCHEMA_REF_PREFIX, escape_pointer, object_mut, schema_ref, schemas_mut};

/// The path whose response the spec gets wrong (`{version}` filled in), and the schemas
/// injected for it.
pub const JOBS_STATE_PATH: &str = "/slurm/{version}/jobs/state/";
pub const JOBS_STATE_RESP: &str = "openapi_job_state_resp";
pub const JOBS_STATE_LIST: &str = "job_state_resp_msg";
pub const JOBS_STATE_ENTRY: &str = "job_state_resp_job";

/// The response schema the spec declares for `GET /jobs/state/` (and the fix replaces).
const DECLARED_RESP: &str = "openapi_job_info_resp";

/// Step 2. Give `GET /jobs/state/` the response schema slurmrestd really sends.
///
/// Why: the spec reuses `openapi_job_info_resp` (full job records, integer `job_id`) for
/// it, but slurmrestd 24.11 answers
/// `{"jobs":[{"job_id":"3","state":["COMPLETED"]}],"meta":..,"errors":[],"warnings":[]}`:
/// `job_id` is a string (it can name an array task or a het component, e.g. `"3_1"`), and
/// decoding with the declared type fails the whole response.
pub fn fix_jobs_state_response(spec: &mut Value, version: &str) -> Result<()> {
    let jobs_state_path = JOBS_STATE_PATH.replace("{version}", version);
    let schemas = schemas_mut(spec)?;
    for name in [JOBS_STATE_RESP, JOBS_STATE_LIST, JOBS_STATE_ENTRY] {
        if schemas.contains_key(name) {
            return spec_error(format!(
                "the spec already defines `{name}`: the /jobs/state/ fix may no longer be \
                 needed; check the spec and update fix_jobs_state_response in \
                 tools/gen-client/src/passes/jobs_state.rs"
            ));
        }
    }
    for name in [
        "job_state",
        "openapi_meta",
        "openapi_errors",
        "openapi_warnings",
    ] {
        if !schemas.contains_key(name) {
            return spec_error(format!(
                "schema `{name}` (used by the /jobs/state/ fix) is missing"
            ));
        }
    }

    // Check the responses before touching anything, so a refusal leaves the spec as it was.
    let pointer = format!("/paths/{}/get/responses", escape_pointer(&jobs_state_path));
    let Some(responses) = spec.pointer(&pointer).and_then(Value::as_object) else {
        return spec_error(format!("GET {jobs_state_path} has no responses"));
    };
    let mut json_responses = 0;
    for (status, response) in responses {
        if let Some(schema) = response.pointer("/content/application~1json/schema") {
            if *schema != schema_ref(DECLARED_RESP) {
                return spec_error(format!(
                    "GET {jobs_state_path} response {status} is no longer {DECLARED_RESP}; \
                     check whether the spec was fixed"
                ));
            }
            json_responses += 1;
        }
    }
    if json_responses == 0 {
        return spec_error(format!("GET {jobs_state_path} has no JSON response to fix"));
    }

    let schemas = schemas_mut(spec)?;
    schemas.insert(
        JOBS_STATE_ENTRY.to_string(),
        json!({
            "type": "object",
            "description": "State of one job, as returned by GET /jobs/state/",
            "properties": {
                "job_id": { "type": "string", "description": "Job ID (may name an array task or het component)" },
                "state": { "$ref": format!("{SCHEMA_REF_PREFIX}job_state"), "description": "Current state flags" }
            }
        }),
    );
    // A named list, like the spec's other `*_msg` lists, so `jobs` is an `Option` as elsewhere.
    schemas.insert(
        JOBS_STATE_LIST.to_string(),
        json!({ "type": "array", "description": "Job states", "items": schema_ref(JOBS_STATE_ENTRY) }),
    );
    schemas.insert(
        JOBS_STATE_RESP.to_string(),
        json!({
            "type": "object",
            "description": "Response of GET /jobs/state/",
            "properties": {
                "jobs": schema_ref(JOBS_STATE_LIST),
                "meta": schema_ref("openapi_meta"),
                "errors": schema_ref("openapi_errors"),
                "warnings": schema_ref("openapi_warnings")
            }
        }),
    );

    if let Some(responses) = spec.pointer_mut(&pointer) {
        let responses = object_mut(responses, "GET /jobs/state/ responses")?;
        for response in responses.values_mut() {
            if let Some(schema) = response.pointer_mut("/content/application~1json/schema") {
                *schema = schema_ref(JOBS_STATE_RESP);
            }
        }
    }
    Ok(())
}

/// Step 3. Make the `job_id` query parameter of `GET /jobs/state/` a list sent as repeated
/// parameters (`?job_id=3&job_id=6`).
///
/// Why: the spec calls it a "CSV list" (`style: form, explode: false`), but slurmrestd rejects
/// `?job_id=3,6` (400) and `?job_id=3%2C6` (422); only repeated parameters work. progenitor
/// serialises an array query parameter as repeated `name=value` pairs.
pub fn repeat_jobs_state_job_id(spec: &mut Value, version: &str) -> Result<()> {
    let jobs_state_path = JOBS_STATE_PATH.replace("{version}", version);
    let pointer = format!("/paths/{}/get/parameters", escape_pointer(&jobs_state_path));
    let Some(Value::Array(parameters)) = spec.pointer_mut(&pointer) else {
        return spec_error(format!("GET {jobs_state_path} has no parameters"));
    };
    let Some(job_id) = parameters
        .iter_mut()
        .find(|p| p.get("in") == Some(&json!("query")) && p.get("name") == Some(&json!("job_id")))
    else {
        return spec_error(format!(
            "GET {jobs_state_path} has no `job_id` query parameter"
        ));
    };
    let job_id = object_mut(job_id, "the job_id parameter")?;
    if job_id.get("schema") != Some(&json!({ "type": "string" })) {
        return spec_error(format!(
            "the `job_id` parameter of GET {jobs_state_path} is no longer a plain string"
        ));
    }
    job_id.insert(
        "schema".into(),
        json!({ "type": "array", "items": { "type": "string" } }),
    );
    job_id.insert("explode".into(), json!(true));
    job_id.insert(
        "description".into(),
        json!("Job IDs to query, sent as repeated parameters"),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `GET /jobs/state/` as the v0.0.42 spec declares it, with the schemas the fix refers to.
    fn jobs_state_spec() -> Value {
        let declared = json!({ "content": { "application/json": {
            "schema": { "$ref": "#/components/schemas/openapi_job_info_resp" } } } });
        json!({
            "paths": { "/slurm/v0.0.42/jobs/state/": { "get": {
                "parameters": [
                    { "name": "job_id", "in": "query", "style": "form", "explode": false,
                      "description": "CSV list of Job IDs to search for",
                      "schema": { "type": "string" } },
                    { "name": "other", "in": "query", "schema": { "type": "string" } }
                ],
                "responses": { "200": declared.clone(), "default": declared }
            } } },
            "components": { "schemas": {
                "openapi_job_info_resp": { "type": "object" },
                "job_state": { "type": "array", "items": { "type": "string" } },
                "openapi_meta": { "type": "object" },
                "openapi_errors": { "type": "array" },
                "openapi_warnings": { "type": "array" }
            } }
        })
    }

    fn response_schema(spec: &Value, status: &str) -> Value {
        spec["paths"]["/slurm/v0.0.42/jobs/state/"]["get"]["responses"][status]["content"]["application/json"]
            ["schema"]
            .clone()
    }

    #[test]
    fn jobs_state_responses_point_at_the_injected_schemas() {
        let mut spec = jobs_state_spec();
        fix_jobs_state_response(&mut spec, "v0.0.42").unwrap();

        for status in ["200", "default"] {
            assert_eq!(
                response_schema(&spec, status),
                json!({ "$ref": "#/components/schemas/openapi_job_state_resp" })
            );
        }
        let schemas = &spec["components"]["schemas"];
        assert_eq!(
            schemas[JOBS_STATE_RESP]["properties"]["jobs"],
            json!({ "$ref": "#/components/schemas/job_state_resp_msg" })
        );
        assert_eq!(
            schemas[JOBS_STATE_LIST]["items"],
            json!({ "$ref": "#/components/schemas/job_state_resp_job" })
        );
        // The point of the fix: `job_id` is a string.
        assert_eq!(
            schemas[JOBS_STATE_ENTRY]["properties"]["job_id"]["type"],
            json!("string")
        );
        assert_eq!(
            schemas[JOBS_STATE_ENTRY]["properties"]["state"]["$ref"],
            json!("#/components/schemas/job_state")
        );
    }

    #[test]
    fn refuses_when_the_spec_already_has_the_injected_schemas() {
        let mut spec = jobs_state_spec();
        spec["components"]["schemas"][JOBS_STATE_ENTRY] = json!({ "type": "object" });
        let err = fix_jobs_state_response(&mut spec, "v0.0.42").unwrap_err();
        assert!(err.to_string().contains("already defines"), "{err}");
    }

    #[test]
    fn refuses_when_a_schema_it_refers_to_is_missing() {
        let mut spec = jobs_state_spec();
        spec["components"]["schemas"]
            .as_object_mut()
            .unwrap()
            .remove("openapi_meta");
        let err = fix_jobs_state_response(&mut spec, "v0.0.42").unwrap_err();
        assert!(err.to_string().contains("`openapi_meta`"), "{err}");
    }

    #[test]
    fn refuses_when_the_declared_response_changed() {
        let mut spec = jobs_state_spec();
        spec["paths"]["/slurm/v0.0.42/jobs/state/"]["get"]["responses"]["200"]["content"]["application/json"]
            ["schema"] = json!({ "$ref": "#/components/schemas/something_else" });
        let before = spec.clone();
        let err = fix_jobs_state_response(&mut spec, "v0.0.42").unwrap_err();
        assert!(err.to_string().contains("is no longer"), "{err}");
        assert_eq!(spec, before, "a refused fix must leave the spec untouched");
    }

    #[test]
    fn refuses_when_there_is_no_json_response() {
        let mut spec = jobs_state_spec();
        spec["paths"]["/slurm/v0.0.42/jobs/state/"]["get"]["responses"] =
            json!({ "200": { "description": "no body" } });
        let err = fix_jobs_state_response(&mut spec, "v0.0.42").unwrap_err();
        assert!(err.to_string().contains("no JSON response"), "{err}");
    }

    #[test]
    fn job_id_becomes_a_repeated_list() {
        let mut spec = jobs_state_spec();
        repeat_jobs_state_job_id(&mut spec, "v0.0.42").unwrap();
        let parameters = &spec["paths"]["/slurm/v0.0.42/jobs/state/"]["get"]["parameters"];
        assert_eq!(
            parameters[0]["schema"],
            json!({ "type": "array", "items": { "type": "string" } })
        );
        assert_eq!(parameters[0]["explode"], json!(true));
        assert_eq!(parameters[0]["style"], json!("form"));
        // Other parameters are left alone.
        assert_eq!(parameters[1]["schema"], json!({ "type": "string" }));
    }

    #[test]
    fn refuses_a_job_id_that_is_no_longer_a_plain_string() {
        let mut spec = jobs_state_spec();
        spec["paths"]["/slurm/v0.0.42/jobs/state/"]["get"]["parameters"][0]["schema"] =
            json!({ "type": "array", "items": { "type": "string" } });
        let err = repeat_jobs_state_job_id(&mut spec, "v0.0.42").unwrap_err();
        assert!(
            err.to_string().contains("no longer a plain string"),
            "{err}"
        );
    }

    #[test]
    fn refuses_when_job_id_is_gone() {
        let mut spec = jobs_state_spec();
        spec["paths"]["/slurm/v0.0.42/jobs/state/"]["get"]["parameters"]
            .as_array_mut()
            .unwrap()
            .remove(0);
        let err = repeat_jobs_state_job_id(&mut spec, "v0.0.42").unwrap_err();
        assert!(
            err.to_string().contains("no `job_id` query parameter"),
            "{err}"
        );
    }
}
