//! How error statuses are declared (step 7).

use serde_json::Value;

use crate::error::{Result, spec_error};
use crate::json::{HTTP_METHODS, object_mut, paths_mut};

/// Step 7. Replace each operation's `default` response with `4XX` and `5XX` responses of the
/// same schema.
///
/// Why: with `default`, progenitor decodes every non-200 status as the error envelope, so
/// `304 Not Modified` (empty body; `GET /nodes/` and `/partitions/` with an unchanged
/// `update_time`) becomes `Error::InvalidResponsePayload`, which carries no status. With
/// explicit ranges, 304 is `Error::UnexpectedResponse(response)` (status and headers intact),
/// slurmrestd's 4xx/5xx JSON envelopes stay `Error::ErrorResponse` with a typed body, and the
/// generated `match` no longer has an unreachable arm.
pub fn replace_default_responses(spec: &mut Value) -> Result<()> {
    // Refuse before editing, so a refusal leaves the spec as it was.
    for (path, item) in paths_mut(spec)?.iter() {
        for method in HTTP_METHODS {
            let Some(responses) = item.get(*method).and_then(|op| op.get("responses")) else {
                continue;
            };
            let Some(responses) = responses.as_object() else {
                return spec_error(format!("{method} {path} responses is not a JSON object"));
            };
            if responses.contains_key("default")
                && responses
                    .keys()
                    .any(|status| status != "default" && !status.starts_with('2'))
            {
                return spec_error(format!(
                    "{} {path} declares non-2xx responses besides `default`; review \
                     replace_default_responses in tools/gen-client/src/passes/responses.rs",
                    method.to_uppercase()
                ));
            }
        }
    }
    for (path, item) in paths_mut(spec)?.iter_mut() {
        for method in HTTP_METHODS {
            let Some(responses) = item.pointer_mut(&format!("/{method}/responses")) else {
                continue;
            };
            let responses = object_mut(responses, &format!("{method} {path} responses"))?;
            let Some(default) = responses.remove("default") else {
                continue;
            };
            responses.insert("4XX".into(), default.clone());
            responses.insert("5XX".into(), default);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn default_becomes_4xx_and_5xx() {
        let ok = json!({ "description": "ok" });
        let envelope = json!({ "description": "error", "content": { "application/json": {
            "schema": { "$ref": "#/components/schemas/resp" } } } });
        let mut spec = json!({ "paths": {
            "/a": {
                "get": { "responses": { "200": ok.clone(), "default": envelope.clone() } },
                "delete": { "responses": { "200": ok.clone(), "default": envelope.clone() } }
            },
            // No `default`: nothing to replace.
            "/b": { "get": { "responses": { "200": ok.clone() } } }
        } });
        replace_default_responses(&mut spec).unwrap();
        let expected = json!({ "200": ok.clone(), "4XX": envelope.clone(), "5XX": envelope });
        assert_eq!(spec["paths"]["/a"]["get"]["responses"], expected);
        assert_eq!(spec["paths"]["/a"]["delete"]["responses"], expected);
        assert_eq!(
            spec["paths"]["/b"]["get"]["responses"],
            json!({ "200": ok })
        );
    }

    #[test]
    fn refuses_default_next_to_explicit_error_statuses() {
        let original = json!({ "paths": { "/a": { "post": { "responses": {
            "200": { "description": "ok" },
            "404": { "description": "not found" },
            "default": { "description": "error" }
        } } } } });
        let mut spec = original.clone();
        let err = replace_default_responses(&mut spec).unwrap_err();
        assert!(
            err.to_string().contains("POST /a declares non-2xx"),
            "{err}"
        );
        assert_eq!(
            spec, original,
            "a refused pass must leave the spec untouched"
        );
    }
}
