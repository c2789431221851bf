//! The whole pipeline over the real specs in openapi/: every pass accepts each version's spec,
//! and every client has the shape the shared facade in src/slurm/dialect is written against.
//!
//! Name this file (and any other test here) unlike the operator's tests/*.rs: `cargo test
//! --workspace` prints it as `Running tests/real_spec.rs`, and .ci/run finds each operator test
//! binary's result by exactly that line.

use std::path::Path;

use gen_client::{VERSIONS, generate_all, generated_path, kept_operations_sorted, processed_path};
use serde_json::Value;

#[test]
fn the_real_specs_generate_one_client_per_version() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let generated = generate_all(&root).unwrap();
    assert!(generated.warnings.is_empty(), "{:?}", generated.warnings);
    assert_eq!(generated.outputs.len(), 2 * VERSIONS.len());

    let output = |path: &str| {
        generated
            .outputs
            .iter()
            .find(|o| o.path == path)
            .map(|o| o.contents.as_str())
            .unwrap_or_else(|| panic!("no output {path}"))
    };

    for version in VERSIONS {
        let processed = output(&processed_path(version));
        let spec: Value = serde_json::from_str(processed).unwrap();
        let mut operations = Vec::new();
        for (path, item) in spec["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                operations.push((method.clone(), path.clone()));
                // Step 0a: operation ids carry no version.
                let id = operation["operationId"].as_str().unwrap();
                assert!(!id.contains("_v00"), "{version}: {id}");
                // Step 7: error statuses are ranges, never `default`.
                let statuses: Vec<&String> =
                    operation["responses"].as_object().unwrap().keys().collect();
                assert!(
                    !statuses.iter().any(|s| *s == "default"),
                    "{version} {method} {path}: {statuses:?}"
                );
            }
        }
        operations.sort();
        assert_eq!(operations, kept_operations_sorted(version), "{version}");

        let schemas = spec["components"]["schemas"].as_object().unwrap();
        // Step 0a/0b: unversioned names, the reference's names for the shared facade.
        for name in [
            "job_info",
            "node",
            "job_desc_msg",
            "job_submit_req",
            "openapi_meta",
            "uint32_no_val_struct",
            "uint64_no_val_struct",
            gen_client::passes::JOBS_STATE_RESP,
        ] {
            assert!(schemas.contains_key(name), "{version}: no schema {name}");
        }
        assert!(
            schemas.keys().all(|name| !name.starts_with("v0.0.")),
            "{version}: a versioned schema name is left"
        );
        // Steps 0c, 5, 8, 9 and 10 left nothing behind.
        for gone in ["\"enum\"", "\"required\": [", "\"int32\"", "\"default\""] {
            assert!(
                !processed.contains(gone),
                "{version}: {gone} is still in the processed spec"
            );
        }
        let slurmdb_jobs = &spec["paths"][format!("/slurmdb/{version}/jobs/")]["get"]["parameters"];
        let kept: Vec<_> = slurmdb_jobs
            .as_array()
            .unwrap()
            .iter()
            .map(|parameter| parameter["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            kept,
            [
                "scheduler_unset",
                "usage_time_as_submit_time",
                "job_name",
                "start_time",
                "users"
            ],
            "{version}"
        );

        let client = output(&generated_path(version));
        assert!(client.starts_with("// @generated"));
        syn::parse_file(client).unwrap();
        for expected in [
            "pub struct JobStateRespJob {",
            "pub struct JobDescMsg {",
            "pub struct JobSubmitReq {",
            "pub struct JobInfo {",
            "pub struct Node {",
            "pub struct OpenapiMeta {",
            "pub async fn slurm_get_ping<",
            "pub async fn slurmdb_get_jobs<",
            // Generation settings: hooks over the operator's transport, `Default` everywhere.
            "inner: std::sync::Arc<crate::slurm::transport::Transport>",
            "Clone, Debug, Default)]",
            &format!("/slurm/{version}/ping/"),
        ] {
            assert!(
                client.contains(expected),
                "{version}: the client lacks `{expected}`"
            );
        }
        assert!(
            !client.contains(": ::std::option::Option<i32>"),
            "{version}: int32 fields were not widened"
        );
    }
}
