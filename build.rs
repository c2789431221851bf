//! Generates the slurmrestd v0.0.42 client with progenitor.
//!
//! Input: `openapi/slurmrestd-v0.0.42.json`, exactly as `slurmrestd --generate-openapi-spec` wrote
//! it (never edited by hand). The raw spec does not generate a client that compiles, and its
//! schemas do not match what slurmrestd really sends, so it is preprocessed here first; every
//! step is a small function below that says why it exists. See `openapi/README.md`.
//!
//! Output, in `$OUT_DIR`:
//! - `slurmrestd-v0.0.42.processed.json`: the spec progenitor actually saw (for inspection);
//! - `slurmrestd_v0042.rs`: the generated client, included by `src/slurm/generated.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use progenitor::{GenerationSettings, Generator, HooksMode, InterfaceStyle, TagStyle};
use serde_json::{Map, Value, json};

const SPEC: &str = "openapi/slurmrestd-v0.0.42.json";
const PROCESSED_SPEC: &str = "slurmrestd-v0.0.42.processed.json";
const GENERATED: &str = "slurmrestd_v0042.rs";

/// The operations the operator calls, as (method, path) spelled exactly as in the spec.
/// Everything else is dropped: a smaller client builds faster and exposes less.
const KEPT_OPERATIONS: &[(&str, &str)] = &[
    ("get", "/slurm/v0.0.42/ping/"),
    ("get", "/slurm/v0.0.42/diag/"),
    ("get", "/slurm/v0.0.42/nodes/"),
    ("get", "/slurm/v0.0.42/node/{node_name}"),
    ("post", "/slurm/v0.0.42/node/{node_name}"),
    ("delete", "/slurm/v0.0.42/node/{node_name}"),
    ("get", "/slurm/v0.0.42/partitions/"),
    ("post", "/slurm/v0.0.42/job/submit"),
    ("get", "/slurm/v0.0.42/job/{job_id}"),
    ("post", "/slurm/v0.0.42/job/{job_id}"),
    ("delete", "/slurm/v0.0.42/job/{job_id}"),
    ("get", "/slurm/v0.0.42/jobs/"),
    ("get", "/slurm/v0.0.42/jobs/state/"),
    // Accounting lookups for jobs that slurmctld no longer holds.
    ("get", "/slurmdb/v0.0.42/job/{job_id}"),
    ("get", "/slurmdb/v0.0.42/jobs/"),
];

/// The schema renames that collision detection is expected to find (old name, new name). The
/// detection is general; this list pins its result, because the generated type names are what
/// the facade is written against. If the spec changes shape, the build stops here and says so.
const EXPECTED_RENAMES: &[(&str, &str)] = &[
    // Array of job resources per node, vs the inline object `v0.0.42_job_res.properties.nodes`.
    ("v0.0.42_job_res_nodes", "v0.0.42_job_res_nodes_list"),
    // Array of job state flags, vs the inline object `v0.0.42_job.properties.state`.
    ("v0.0.42_job_state", "v0.0.42_job_state_list"),
];

/// `/jobs/state/`: the path whose response the spec gets wrong, and the schemas injected for it.
const JOBS_STATE_PATH: &str = "/slurm/v0.0.42/jobs/state/";
const JOBS_STATE_RESP: &str = "v0.0.42_openapi_job_state_resp";
const JOBS_STATE_LIST: &str = "v0.0.42_job_state_resp_msg";
const JOBS_STATE_ENTRY: &str = "v0.0.42_job_state_resp_job";

/// The generated client's inner value, handed to the hooks. The hooks themselves (credentials
/// on every request, tracing, latency) are an `impl progenitor_client::ClientHooks<Inner> for
/// Client` written by hand in `src/slurm`; `HooksMode::Expected` makes a missing impl a compile
/// error, so requests can never silently go out without credentials. The generated `Client`
/// derives `Clone` and `Debug`: the `Arc` makes every clone share one `Transport` (one
/// credential cell to rotate), and `Transport` must implement `Debug`.
const CLIENT_INNER_TYPE: &str = "std::sync::Arc<crate::slurm::transport::Transport>";

const SCHEMA_REF_PREFIX: &str = "#/components/schemas/";
const HTTP_METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// A build failure with enough context to act on; printed as-is by the `Debug` that
/// `main`'s `Result` uses.
struct BuildError(String);

impl fmt::Debug for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

type Result<T> = std::result::Result<T, BuildError>;

fn fail<T>(message: impl Into<String>) -> Result<T> {
    Err(BuildError(message.into()))
}

/// `.context(...)` for any displayable error.
trait Context<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: fmt::Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| BuildError(format!("{}: {e}", what())))
    }
}

fn main() -> Result<()> {
    println!("cargo:rerun-if-changed={SPEC}");
    println!("cargo:rerun-if-changed=build.rs");

    let manifest_dir =
        std::env::var("CARGO_MANIFEST_DIR").context(|| "CARGO_MANIFEST_DIR".into())?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").context(|| "OUT_DIR".into())?);

    let mut spec = read_spec(&Path::new(&manifest_dir).join(SPEC))?;
    preprocess(&mut spec)?;

    let processed =
        serde_json::to_string_pretty(&spec).context(|| "serializing the processed spec".into())?;
    write(&out_dir.join(PROCESSED_SPEC), &processed)?;

    let code = generate(spec)?;
    write(&out_dir.join(GENERATED), &code)?;
    Ok(())
}

fn read_spec(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).context(|| format!("parsing {} as JSON", path.display()))
}

fn write(path: &Path, contents: &str) -> Result<()> {
    std::fs::write(path, contents).context(|| format!("writing {}", path.display()))
}

/// All preprocessing, in order (the `Step n` comments below follow it). A step that meets a spec
/// it does not recognise fails the build rather than generate something subtly different.
fn preprocess(spec: &mut Value) -> Result<()> {
    keep_used_operations(spec)?;
    fix_jobs_state_response(spec)?;
    repeat_jobs_state_job_id(spec)?;
    prune_unreachable_schemas(spec)?;
    open_enums(spec)?;
    rename_colliding_schemas(spec)?;
    replace_default_responses(spec)?;
    drop_required(spec);
    drop_mismatched_defaults(spec);
    widen_int32(spec);
    Ok(())
}

fn generate(spec: Value) -> Result<String> {
    let spec: openapiv3::OpenAPI = serde_json::from_value(spec)
        .context(|| "the processed spec is not valid OpenAPI 3.0".into())?;

    let inner_type =
        syn::parse_str(CLIENT_INNER_TYPE).context(|| format!("parsing `{CLIENT_INNER_TYPE}`"))?;
    let mut settings = GenerationSettings::new();
    settings
        .with_interface(InterfaceStyle::Positional)
        .with_tag(TagStyle::Merged)
        .with_inner_type(inner_type)
        .with_hooks(HooksMode::Expected)
        // Every field is optional (see `drop_required`), so `..Default::default()` lets the
        // facade build a 100-field `V0042JobDescMsg` from the few fields it sets.
        .with_derive("Default");

    let tokens = Generator::new(&settings)
        .generate_tokens(&spec)
        .context(|| "progenitor could not generate the client".into())?;
    let file: syn::File =
        syn::parse2(tokens).context(|| "progenitor's output is not valid Rust".into())?;
    Ok(prettyplease::unparse(&file))
}

// ---------------------------------------------------------------------------------------------
// JSON helpers

fn object_mut<'a>(value: &'a mut Value, what: &str) -> Result<&'a mut Map<String, Value>> {
    match value.as_object_mut() {
        Some(object) => Ok(object),
        None => fail(format!("{what} is not a JSON object")),
    }
}

fn paths_mut(spec: &mut Value) -> Result<&mut Map<String, Value>> {
    match spec.get_mut("paths") {
        Some(paths) => object_mut(paths, "`paths`"),
        None => fail("the spec has no `paths`"),
    }
}

fn schemas_mut(spec: &mut Value) -> Result<&mut Map<String, Value>> {
    match spec.pointer_mut("/components/schemas") {
        Some(schemas) => object_mut(schemas, "`components.schemas`"),
        None => fail("the spec has no `components.schemas`"),
    }
}

fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("{SCHEMA_REF_PREFIX}{name}") })
}

/// Calls `visit` on every JSON object in `value`, depth first, parents before children.
fn for_each_object(value: &mut Value, visit: &mut impl FnMut(&mut Map<String, Value>)) {
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
fn for_each_schema(schema: &mut Value, visit: &mut impl FnMut(&mut Map<String, Value>)) {
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
fn for_each_schema_in_spec(spec: &mut Value, visit: &mut impl FnMut(&mut Map<String, Value>)) {
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

// ---------------------------------------------------------------------------------------------
// Preprocessing steps

/// Step 1. Keep only the operations the operator calls (`KEPT_OPERATIONS`).
///
/// Why: the full spec generates ~12.7k lines for 38 paths the operator mostly never calls; the
/// subset builds in a fraction of the time and the facade cannot reach an unvetted endpoint.
/// Fails if a kept operation is missing, so a renamed path is noticed at build time.
fn keep_used_operations(spec: &mut Value) -> Result<()> {
    let paths = paths_mut(spec)?;

    let mut missing = Vec::new();
    for (method, path) in KEPT_OPERATIONS {
        if paths
            .get(*path)
            .and_then(|item| item.get(*method))
            .is_none()
        {
            missing.push(format!("{} {path}", method.to_uppercase()));
        }
    }
    if !missing.is_empty() {
        let available: Vec<&String> = paths.keys().collect();
        return fail(format!(
            "{SPEC}: kept operations not found: {missing:?}\n(paths in the spec: {available:?})\n\
             Update KEPT_OPERATIONS in build.rs."
        ));
    }

    paths.retain(|path, _| KEPT_OPERATIONS.iter().any(|(_, kept)| kept == path));
    for (path, item) in paths.iter_mut() {
        let item = object_mut(item, &format!("path item {path}"))?;
        item.retain(|key, _| {
            !HTTP_METHODS.contains(&key.as_str())
                || KEPT_OPERATIONS.contains(&(key.as_str(), path.as_str()))
        });
    }
    Ok(())
}

/// Step 2. Give `GET /jobs/state/` the response schema slurmrestd really sends.
///
/// Why: the spec reuses `v0.0.42_openapi_job_info_resp` (full job records, integer `job_id`) for
/// it, but slurmrestd 24.11 answers
/// `{"jobs":[{"job_id":"3","state":["COMPLETED"]}],"meta":..,"errors":[],"warnings":[]}`:
/// `job_id` is a string (it can name an array task or a het component, e.g. `"3_1"`), and
/// decoding with the declared type fails the whole response.
fn fix_jobs_state_response(spec: &mut Value) -> Result<()> {
    let schemas = schemas_mut(spec)?;
    for name in [JOBS_STATE_RESP, JOBS_STATE_LIST, JOBS_STATE_ENTRY] {
        if schemas.contains_key(name) {
            return fail(format!(
                "{SPEC} already defines `{name}`: the /jobs/state/ fix may no longer be needed; \
                 check the spec and update fix_jobs_state_response in build.rs"
            ));
        }
    }
    for name in [
        "v0.0.42_job_state",
        "v0.0.42_openapi_meta",
        "v0.0.42_openapi_errors",
        "v0.0.42_openapi_warnings",
    ] {
        if !schemas.contains_key(name) {
            return fail(format!(
                "{SPEC}: schema `{name}` (used by the /jobs/state/ fix) is missing"
            ));
        }
    }
    schemas.insert(
        JOBS_STATE_ENTRY.to_string(),
        json!({
            "type": "object",
            "description": "State of one job, as returned by GET /jobs/state/",
            "properties": {
                "job_id": { "type": "string", "description": "Job ID (may name an array task or het component)" },
                "state": { "$ref": format!("{SCHEMA_REF_PREFIX}v0.0.42_job_state"), "description": "Current state flags" }
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
                "meta": schema_ref("v0.0.42_openapi_meta"),
                "errors": schema_ref("v0.0.42_openapi_errors"),
                "warnings": schema_ref("v0.0.42_openapi_warnings")
            }
        }),
    );

    let Some(responses) = spec.pointer_mut(&format!(
        "/paths/{}/get/responses",
        escape_pointer(JOBS_STATE_PATH)
    )) else {
        return fail(format!("{SPEC}: GET {JOBS_STATE_PATH} has no responses"));
    };
    let responses = object_mut(responses, "GET /jobs/state/ responses")?;
    let mut repointed = 0;
    for (status, response) in responses.iter_mut() {
        if let Some(schema) = response.pointer_mut("/content/application~1json/schema") {
            if *schema != schema_ref("v0.0.42_openapi_job_info_resp") {
                return fail(format!(
                    "{SPEC}: GET {JOBS_STATE_PATH} response {status} is no longer \
                     v0.0.42_openapi_job_info_resp; check whether the spec was fixed"
                ));
            }
            *schema = schema_ref(JOBS_STATE_RESP);
            repointed += 1;
        }
    }
    if repointed == 0 {
        return fail(format!(
            "{SPEC}: GET {JOBS_STATE_PATH} has no JSON response to fix"
        ));
    }
    Ok(())
}

/// Step 3. Make the `job_id` query parameter of `GET /jobs/state/` a list sent as repeated
/// parameters (`?job_id=3&job_id=6`).
///
/// Why: the spec calls it a "CSV list" (`style: form, explode: false`), but slurmrestd rejects
/// `?job_id=3,6` (400) and `?job_id=3%2C6` (422); only repeated parameters work. progenitor
/// serialises an array query parameter as repeated `name=value` pairs.
fn repeat_jobs_state_job_id(spec: &mut Value) -> Result<()> {
    let pointer = format!("/paths/{}/get/parameters", escape_pointer(JOBS_STATE_PATH));
    let Some(Value::Array(parameters)) = spec.pointer_mut(&pointer) else {
        return fail(format!("{SPEC}: GET {JOBS_STATE_PATH} has no parameters"));
    };
    let Some(job_id) = parameters
        .iter_mut()
        .find(|p| p.get("in") == Some(&json!("query")) && p.get("name") == Some(&json!("job_id")))
    else {
        return fail(format!(
            "{SPEC}: GET {JOBS_STATE_PATH} has no `job_id` query parameter"
        ));
    };
    let job_id = object_mut(job_id, "the job_id parameter")?;
    if job_id.get("schema") != Some(&json!({ "type": "string" })) {
        return fail(format!(
            "{SPEC}: the `job_id` parameter of GET {JOBS_STATE_PATH} is no longer a plain string"
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

/// Step 4. Drop component schemas that no kept operation reaches.
///
/// Why: progenitor generates a type for every component schema; unused ones only cost build time
/// (and the slurmdbd-only ones bring extra name collisions).
fn prune_unreachable_schemas(spec: &mut Value) -> Result<()> {
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
            None => return fail(format!("{SPEC}: reference to undefined schema `{name}`")),
        }
    }
    schemas.retain(|name, _| reachable.contains(name));
    Ok(())
}

/// Names of the component schemas `value` references directly.
fn collect_refs(value: &Value, out: &mut Vec<String>) {
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

/// Step 5. Remove every `enum` constraint (all of them are on strings). Runs before the
/// collision check (step 6), which must see the schemas as typify will.
///
/// Why: job, node and partition states and all the flag sets are enums in the spec; a value a
/// newer Slurm adds (or one the spec forgot) would fail the whole response. They become plain
/// strings, and the facade maps them to domain enums with a catch-all. The few query-parameter
/// enums (`flags=DETAIL`, ...) are opened too: with no enum left, every generated type can
/// derive `Default` (see `generate`), which the facade needs to build request bodies.
fn open_enums(spec: &mut Value) -> Result<()> {
    let (mut opened, mut other) = (0, 0);
    for_each_schema_in_spec(spec, &mut |schema| {
        if schema.contains_key("enum") {
            if schema.get("type") == Some(&json!("string")) {
                schema.remove("enum");
                opened += 1;
            } else {
                other += 1;
            }
        }
    });
    if other > 0 {
        return fail(format!(
            "{SPEC}: {other} enum(s) on non-string schemas; decide how to open them"
        ));
    }
    if opened == 0 {
        println!("cargo:warning=open_enums: no enums found in {SPEC}; is this step still needed?");
    }
    Ok(())
}

/// Step 6. Rename component schemas whose Rust type name collides with the name typify derives
/// for an inline schema (`<parent>_<property>`, `<parent>_item`).
///
/// Why: typify names an inline object after its parent and property, and when that name is
/// already taken it silently reuses the existing type. In v0.0.42, the inline
/// `v0.0.42_job_res.nodes` object and the `v0.0.42_job_res_nodes` array both become
/// `V0042JobResNodes` (40 compile errors); the inline `v0.0.42_job.state` object and the
/// `v0.0.42_job_state` array both become `V0042JobState`, which compiles but decodes
/// slurmdbd's `{current, reason}` object as an array. Renaming the component keeps both.
fn rename_colliding_schemas(spec: &mut Value) -> Result<()> {
    let mut renames = BTreeMap::new();
    let schemas = schemas_mut(spec)?;
    let by_key: BTreeMap<String, String> = schemas
        .keys()
        .map(|name| (type_key(name), name.clone()))
        .collect();
    if by_key.len() != schemas.len() {
        return fail(format!(
            "{SPEC}: two component schemas map to the same Rust type name"
        ));
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
    let mut expected = EXPECTED_RENAMES.to_vec();
    expected.sort_unstable();
    if found != expected {
        return fail(format!(
            "{SPEC}: schema name collisions changed.\n  found:    {found:?}\n  expected: {expected:?}\n\
             Generated type names would change; review the new collisions and update \
             EXPECTED_RENAMES in build.rs (and the facade)."
        ));
    }

    for (old, new) in &renames {
        if by_key.contains_key(&type_key(new)) {
            return fail(format!(
                "{SPEC}: cannot rename `{old}`: `{new}` already exists"
            ));
        }
        match schemas.remove(old) {
            Some(schema) => schemas.insert(new.clone(), schema),
            None => return fail(format!("{SPEC}: schema `{old}` vanished while renaming")),
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

/// Step 7. Replace each operation's `default` response with `4XX` and `5XX` responses of the
/// same schema.
///
/// Why: with `default`, progenitor decodes every non-200 status as the error envelope, so
/// `304 Not Modified` (empty body; `GET /nodes/` and `/partitions/` with an unchanged
/// `update_time`) becomes `Error::InvalidResponsePayload`, which carries no status. With
/// explicit ranges, 304 is `Error::UnexpectedResponse(response)` (status and headers intact),
/// slurmrestd's 4xx/5xx JSON envelopes stay `Error::ErrorResponse` with a typed body, and the
/// generated `match` no longer has an unreachable arm.
fn replace_default_responses(spec: &mut Value) -> Result<()> {
    for (path, item) in paths_mut(spec)?.iter_mut() {
        for method in HTTP_METHODS {
            let Some(responses) = item.pointer_mut(&format!("/{method}/responses")) else {
                continue;
            };
            let responses = object_mut(responses, &format!("{method} {path} responses"))?;
            let Some(default) = responses.remove("default") else {
                continue;
            };
            if responses.keys().any(|status| !status.starts_with('2')) {
                return fail(format!(
                    "{SPEC}: {} {path} declares non-2xx responses besides `default`; \
                     review replace_default_responses in build.rs",
                    method.to_uppercase()
                ));
            }
            responses.insert("4XX".into(), default.clone());
            responses.insert("5XX".into(), default);
        }
    }
    Ok(())
}

/// Step 8. Drop every `required` list.
///
/// Why: slurmrestd lists paths like `"cpus/count"` and `"error/code"` in `required` (no such
/// property, so a strict client rejects every running job), and omits fields it calls required: `GET
/// /node/{unknown}` answers 200 with no `nodes` and no `last_update`. One missing field must
/// never fail a whole response; every field becomes `Option` and the facade decides what it
/// needs.
fn drop_required(spec: &mut Value) {
    for_each_schema_in_spec(spec, &mut |schema| {
        if matches!(schema.get("required"), Some(Value::Array(_))) {
            schema.remove("required");
        }
    });
}

/// Step 9. Drop `default`s whose JSON type does not match the schema's `type`.
///
/// Why: v0.0.40-style specs say `"infinite": {"type": "boolean", "default": 0}`, and typify
/// aborts generation on a default that does not conform. (v0.0.42 has none; this keeps the
/// script usable on the neighbouring versions.)
fn drop_mismatched_defaults(spec: &mut Value) {
    for_each_schema_in_spec(spec, &mut |schema| {
        let (Some(Value::String(ty)), Some(default)) = (schema.get("type"), schema.get("default"))
        else {
            return;
        };
        let matches = match ty.as_str() {
            "boolean" => default.is_boolean(),
            "integer" => default.is_i64() || default.is_u64(),
            "number" => default.is_number(),
            "string" => default.is_string(),
            "array" => default.is_array(),
            "object" => default.is_object(),
            _ => true,
        };
        if !matches {
            schema.remove("default");
        }
    });
}

/// Step 10. Declare `int32` integers as `int64`.
///
/// Why: slurmrestd labels its unsigned 32-bit fields `int32`, so typify makes them `i32`, but
/// the data parser dumps a plain `uint32_t` as is, so values above `i32::MAX` are legal: uids
/// and gids, NO_VAL/INFINITE sentinels, diag's `schedule_cycle_sum` (a running sum of
/// microseconds, which Slurm 26.05's own v0.0.42 spec already declares `int64`). One such value
/// would fail a whole response; `i64` holds every u32 and i32.
fn widen_int32(spec: &mut Value) {
    for_each_schema_in_spec(spec, &mut |schema| {
        if schema.get("type") == Some(&json!("integer"))
            && schema.get("format") == Some(&json!("int32"))
        {
            schema.insert("format".into(), json!("int64"));
        }
    });
}

/// JSON pointer escaping (RFC 6901) for a path key like `/slurm/v0.0.42/jobs/state/`.
fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}
