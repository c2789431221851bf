//! What decoding a slurmrestd answer may allocate, counted by this test binary's allocator:
//! bounded by a small multiple of the body's bytes, also where the element budget
//! (`slurm::elements`) charges nothing. It charges list items; an object that is a field's
//! value belongs to its parent's record. A field that decoded into arbitrary JSON (a node's
//! `power` map, a submit's error body read for its job id) turned nested objects into a tree
//! of maps some hundred times their bytes; such fields are not decoded now (gen-client step 11,
//! `call::made_in_bytes`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Mutex;

use slurm_operator::slurm::ApiVersion;
use slurm_operator::slurm::fuzzing::{Endpoint, decode_as};

#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

/// One profiler at a time: dhat allows no more.
static MEASURING: Mutex<()> = Mutex::new(());

/// The most heap `f` had allocated at once (what was allocated before it is not counted).
fn peak_of(f: impl FnOnce()) -> usize {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let profiler = dhat::Profiler::builder().testing().build();
    f();
    let peak = dhat::HeapStats::get().max_bytes;
    drop(profiler);
    peak
}

/// `"k0":{"a":{"a":…1…}},"k1":…` filling about `bytes`: objects nested 100 deep, each 5 bytes.
fn nested_maps(bytes: usize) -> String {
    let chain = format!("{}1{}", "{\"a\":".repeat(100), "}".repeat(100));
    let mut out = String::new();
    let mut k = 0;
    while out.len() < bytes {
        if k > 0 {
            out.push(',');
        }
        out.push_str(&format!("\"k{k}\":{chain}"));
        k += 1;
    }
    out
}

/// Decoding may allocate up to this many times the body (the element budget allows 4 times
/// its bytes in records; the body itself is held apart).
const TIMES_THE_BODY: usize = 8;

/// One test: dhat counts every thread's allocations, and a test running beside would count in.
#[test]
fn decoding_allocates_a_bounded_multiple_of_the_body() {
    a_nodes_free_form_maps_are_skipped_not_built();
    a_submit_answers_error_body_is_read_for_its_job_id_only();
}

fn a_nodes_free_form_maps_are_skipped_not_built() {
    let body = format!(
        r#"{{"nodes":[{{"name":"n1","power":{{{maps}}},"external_sensors":{{{maps}}}}}],"last_update":{{"number":1,"set":true,"infinite":false}}}}"#,
        maps = nested_maps(1 << 20)
    );
    for version in ApiVersion::ALL {
        let peak = peak_of(|| {
            let decoded = decode_as(version, Endpoint::Nodes, 200, body.as_bytes());
            assert!(decoded.is_ok(), "{version:?}: {decoded:?}");
        });
        assert!(
            peak < TIMES_THE_BODY * body.len(),
            "{version:?}: decoding a {} KiB node list allocated {} KiB",
            body.len() / 1024,
            peak / 1024
        );
    }
}

fn a_submit_answers_error_body_is_read_for_its_job_id_only() {
    let body = format!(
        r#"{{"job_id":7,"job_submit_user_msg":{{{maps}}},"errors":"not a list","x":{{{maps}}}}}"#,
        maps = nested_maps(1 << 20)
    );
    for version in ApiVersion::ALL {
        let peak = peak_of(|| {
            // The job it names is made (a submit answered with an error beside its id).
            let decoded = decode_as(version, Endpoint::Submit, 500, body.as_bytes());
            assert!(
                format!("{decoded:?}").contains("job_id: 7"),
                "{version:?}: {decoded:?}"
            );
        });
        assert!(
            peak < TIMES_THE_BODY * body.len(),
            "{version:?}: decoding a {} KiB submit answer allocated {} KiB",
            body.len() / 1024,
            peak / 1024
        );
    }
}
