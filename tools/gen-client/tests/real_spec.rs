//! The whole pipeline over the real spec in openapi/: every pass accepts it, and the client
//! has the shape the facade in src/slurm is written against.
//!
//! Name this file (and any other test here) unlike the operator's tests/*.rs: `cargo test
//! --workspace` prints it as `Running tests/real_spec.rs`, and .ci/run finds each operator test
//! binary's result by exactly that line.

use std::path::Path;

use gen_client::{GENERATED, PROCESSED_SPEC, generate_all};
use serde_json::Value;

#[test]
fn the_real_spec_generates_the_client() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let generated = generate_all(&root).unwrap();
    assert!(generated.warnings.is_empty(), "{:?}", generated.warnings);

    let output = |path: &str| {
        generated
            .outputs
            .iter()
            .find(|o| o.path == path)
            .map(|o| o.contents.as_str())
            .unwrap()
    };

    let spec: Value = serde_json::from_str(output(PROCESSED_SPEC)).unwrap();
    let mut operations = Vec::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            operations.push((method.as_str(), path.as_str()));
            // Step 7: error statuses are ranges, never `default`.
            let statuses: Vec<&String> =
                operation["responses"].as_object().unwrap().keys().collect();
            assert!(
                !statuses.iter().any(|s| *s == "default"),
                "{method} {path}: {statuses:?}"
            );
        }
    }
    operations.sort();
    let mut kept = gen_client::passes::KEPT_OPERATIONS.to_vec();
    kept.sort();
    assert_eq!(operations, kept);

    let schemas = spec["components"]["schemas"].as_object().unwrap();
    // Step 4 pruned (181 in the raw spec), step 2 added three, step 6 renamed two.
    assert_eq!(schemas.len(), 98);
    for (old, new) in gen_client::passes::EXPECTED_RENAMES {
        assert!(
            !schemas.contains_key(*old) && schemas.contains_key(*new),
            "{old} -> {new}"
        );
    }
    assert!(schemas.contains_key(gen_client::passes::JOBS_STATE_RESP));
    let processed = output(PROCESSED_SPEC);
    // Steps 5, 8 and 10 left nothing behind.
    for gone in ["\"enum\"", "\"required\": [", "\"int32\""] {
        assert!(
            !processed.contains(gone),
            "{gone} is still in the processed spec"
        );
    }

    let client = output(GENERATED);
    assert!(client.starts_with("// @generated"));
    // Parses as Rust (the header comment included).
    syn::parse_file(client).unwrap();
    for expected in [
        // The renamed collisions and the injected /jobs/state/ schemas.
        "pub struct V0042JobResNodesList(",
        "pub struct V0042JobStateList(",
        "pub struct V0042JobStateRespJob {",
        // Other names the facade uses.
        "pub struct V0042JobDescMsg {",
        "pub struct V0042JobSubmitReq {",
        "pub struct V0042JobInfo {",
        "pub struct V0042Node {",
        "pub struct V0042OpenapiMeta {",
        // Generation settings: hooks over the operator's transport, `Default` everywhere.
        "inner: std::sync::Arc<crate::slurm::transport::Transport>",
        "Clone, Debug, Default)]",
    ] {
        assert!(client.contains(expected), "the client lacks `{expected}`");
    }
    assert!(
        !client.contains(": ::std::option::Option<i32>"),
        "int32 fields were not widened"
    );
}
