use kube::Resource;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::*;

/// A SlurmJob as the API server sends it, with every spec field and every part of the status
/// set, and what the cache must not keep.
fn from_api_server() -> Value {
    json!({
        "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
        "metadata": {
            "name": "train", "namespace": "team-a", "uid": "3f0c2a4e-8d7b-4a62-9a51-0c7f1e2d3b4a",
            "resourceVersion": "4711", "generation": 3, "creationTimestamp": "2026-11-22T10:00:00Z",
            "finalizers": ["slurm.rs/cleanup"],
            "labels": {"team": "a"},
            "annotations": {
                "slurm.rs/skip-cancel": "true",
                "notes": "a tenant's",
                "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{}}",
            },
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "slurm.rs/v1alpha1",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {
            "clusterName": "hpc", "script": "#!/bin/sh\nsrun train\n", "name": "train-run",
            "partition": "gpu", "account": "ml", "qos": "high", "nodes": "1-2", "ntasks": 4,
            "cpusPerTask": 2, "tasksPerNode": 2, "gpusPerNode": "a100:2", "gpusPerTask": "1",
            "exclusive": "user", "memoryPerNode": "8Gi", "timeLimit": "1h30m", "nice": 10,
            "suspend": false, "environment": {"SEED": "42"}, "workingDirectory": "/work",
            "constraints": "fast", "gres": "gpu:2", "tresPerTask": "cpu=2", "tres": "license/x=1",
            "array": "0-9%2", "dependsOn": [{"name": "prepare", "type": "afterok"}],
            "output": {"volume": "results", "slurmPath": "/shared", "subPath": "runs"},
            "extraOptions": {"mail_type": ["END"]},
        },
        "status": {
            "phase": "Pending", "jobId": 1234, "slurmState": ["PENDING"], "stateReason": "Priority",
            "nodes": "n[1-2]", "exitCode": 0, "signal": 9,
            "submitTime": "2026-11-22T10:00:00Z", "startTime": "2026-11-22T10:00:01Z",
            "endTime": "2026-11-22T10:00:02Z", "trackedSince": "2026-11-22T10:00:00Z",
            "arrayTasks": {"counts": {"PENDING": 9, "COMPLETED": 1},
                           "tasks": [{"taskId": 0, "state": "COMPLETED", "exitCode": 0,
                                      "usage": {"elapsed": "1m", "maxRSS": "60Mi"}}]},
            "pending": {"reason": "Priority", "message": "higher-priority jobs go first",
                        "priority": 4000, "estimatedStartTime": "2026-11-22T11:00:00Z"},
            "usage": {"elapsed": "1m", "cpuTime": "2m", "maxRSS": "60Mi", "allocatedTRES": "cpu=2",
                      "requestedTRES": "cpu=2", "cpuEfficiencyPercent": 50, "memoryEfficiencyPercent": 12},
            "submittedSpecHash": "abcdef0123456789",
            "conditions": [{"type": "Ready", "status": "False", "reason": "Pending",
                            "message": "Slurm job 1234 waits: Priority", "observedGeneration": 3,
                            "lastTransitionTime": "2026-11-22T10:00:02Z"}],
            "observedGeneration": 3, "submittedGeneration": 3, "rejectedGeneration": 2,
            "history": [{"jobId": 1200, "phase": "Failed", "exitCode": 1,
                         "submitTime": "2026-11-21T10:00:00Z", "endTime": "2026-11-21T10:05:00Z",
                         "generation": 2}],
        },
    })
}

#[test]
fn the_cache_keeps_the_whole_object_but_what_only_a_submit_reads() {
    let sent = from_api_server();
    let cached: CachedSlurmJob = serde_json::from_value(sent.clone()).unwrap();
    let mut expected: SlurmJob = serde_json::from_value(sent).unwrap();
    assert!(!expected.spec.script.is_empty() && expected.spec.extra_options.is_some());
    expected.metadata.managed_fields = None;
    expected.metadata.labels = None;
    expected.metadata.annotations =
        Some([("slurm.rs/skip-cancel".to_owned(), "true".to_owned())].into());
    expected.spec.script = String::new();
    expected.spec.environment.clear();
    // Allowed ones only (`mail_type`): nothing the checks before a submit read.
    expected.spec.extra_options = None;
    assert_eq!(cached.object().unwrap(), expected);

    assert_eq!(cached.cluster_name(), "hpc");
    assert_eq!(cached.phase(), Some(Phase::Pending));
    assert_eq!(cached.job_id(), Some(1234));
    assert_eq!(cached.state_reason(), Some("Priority"));
    assert_eq!(cached.metadata.managed_fields, None);
    // Kept as kube's object key: the store and the controller name it by these.
    assert_eq!(
        (
            cached.meta().name.as_deref(),
            cached.meta().namespace.as_deref()
        ),
        (Some("train"), Some("team-a"))
    );
}

/// What a tenant can make as large as the object may be (1.5 MiB) and the controller does not
/// read on every event: owner references, annotations under `slurm.rs/` (any key), finalizers
/// (any number). A few hundred such SlurmJobs held the operator above its memory limit at every
/// start. Finalizers past the bound are cut to the operator's, and the cached object says so.
#[test]
fn what_a_tenant_can_make_large_is_not_kept() {
    let mut sent = from_api_server();
    let many: Vec<String> = (0..4_000)
        .map(|i| format!("example.org/hold-{i}-{}", "x".repeat(200)))
        .collect();
    let metadata = &mut sent["metadata"];
    let mut finalizers = many.clone();
    finalizers.insert(2_000, "slurm.rs/cleanup".to_owned());
    metadata["finalizers"] = json!(finalizers);
    metadata["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
        "name": "n".repeat(200_000), "uid": "u"}]);
    metadata["annotations"]["slurm.rs/pad"] = json!("p".repeat(200_000));
    metadata["annotations"]["slurm.rs/skip-cancel"] = json!("true");
    let cached: CachedSlurmJob = serde_json::from_value(sent.clone()).unwrap();
    assert!(cached.finalizers_cut());
    assert_eq!(
        cached.meta().finalizers,
        Some(vec!["slurm.rs/cleanup".to_owned()])
    );
    assert_eq!(cached.meta().owner_references, None);
    assert_eq!(
        cached.meta().annotations,
        Some([("slurm.rs/skip-cancel".to_owned(), "true".to_owned())].into())
    );
    assert!(serde_json::to_vec(cached.meta()).unwrap().len() < 1024);

    // Without ours, none is kept; a skip-cancel value no "true" is that long is not either.
    let mut sent = from_api_server();
    sent["metadata"]["finalizers"] = json!(many);
    sent["metadata"]["annotations"]["slurm.rs/skip-cancel"] = json!("t".repeat(1_000));
    let cached: CachedSlurmJob = serde_json::from_value(sent).unwrap();
    assert!(cached.finalizers_cut());
    assert_eq!(cached.meta().finalizers, Some(vec![]));
    assert_eq!(cached.meta().annotations, Some(Default::default()));

    // A few short ones stay as they are: the finalizer protocol's patches test the list.
    let mut sent = from_api_server();
    let few = json!(["example.org/a", "slurm.rs/cleanup", "example.org/b"]);
    sent["metadata"]["finalizers"] = few.clone();
    let cached: CachedSlurmJob = serde_json::from_value(sent).unwrap();
    assert!(!cached.finalizers_cut());
    assert_eq!(json!(cached.meta().finalizers), few);
}

#[test]
fn a_new_slurmjob_has_no_status_in_the_cache() {
    let cached: CachedSlurmJob = serde_json::from_value(json!({
        "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
        "metadata": {"name": "new", "namespace": "team-a"},
        "spec": {"clusterName": "hpc", "script": "#!/bin/sh\ntrue\n"},
    }))
    .unwrap();
    assert_eq!(
        (cached.phase(), cached.job_id(), cached.state_reason()),
        (None, None, None)
    );
    let object = cached.object().unwrap();
    assert_eq!(object.status, None);
    assert_eq!(object.spec.cluster_name, "hpc");
}

/// With the store's `Arc` (two counters), 448 bytes: one of jemalloc's size classes.
/// The status speaks for the spec only once it has observed its generation: an edit not
/// reconciled yet may start a new run.
#[test]
fn the_status_is_current_once_it_observed_the_generation() {
    let cached = |generation: i64, observed: Option<i64>| -> CachedSlurmJob {
        let mut object = json!({
            "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
            "metadata": {"name": "dep", "namespace": "team-a", "generation": generation},
            "spec": {"clusterName": "hpc", "script": "#!/bin/sh\ntrue\n"},
            "status": {"phase": "Completed", "jobId": 7},
        });
        if let Some(observed) = observed {
            object["status"]["observedGeneration"] = json!(observed);
        }
        serde_json::from_value(object).unwrap()
    };
    assert!(cached(1, Some(1)).status_current());
    assert!(
        !cached(2, Some(1)).status_current(),
        "edited, not reconciled"
    );
    assert!(!cached(1, None).status_current(), "never observed");
}

#[test]
fn a_cached_slurmjob_fills_one_allocation_class() {
    assert!(std::mem::size_of::<CachedSlurmJob>() + 16 <= 448);
}

/// What the cache is for: a finished SlurmJob costs less than the typed object, its spec and
/// status less than half their JSON. Counted in the bytes the cached form owns (inline size and
/// its packed bytes, its metadata's strings aside) against
/// the typed object's inline size alone (which leaves out all its strings and conditions): it
/// fails if the cache went back to holding typed objects.
#[test]
fn a_cached_slurmjob_is_smaller_than_the_typed_object() {
    // As this operator leaves a finished SlurmJob.
    let cached: CachedSlurmJob = serde_json::from_value(json!({
        "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
        "metadata": {"name": "job-00001", "namespace": "bench", "finalizers": ["slurm.rs/cleanup"]},
        "spec": {"clusterName": "local", "partition": "debug", "script": "#!/bin/sh\nsrun hostname\n"},
        "status": {
            "phase": "Completed", "jobId": 100_001, "slurmState": ["COMPLETED"], "nodes": "n1",
            "exitCode": 0, "observedGeneration": 1, "submittedGeneration": 1,
            "submitTime": "2026-11-22T10:00:00Z", "endTime": "2026-11-22T10:00:02Z",
            "startTime": "2026-11-22T10:00:01Z", "trackedSince": "2026-11-22T10:00:00Z",
            "conditions": [{"type": "Ready", "status": "True", "reason": "Completed",
                            "message": "Slurm job 100001 ended Completed, exit code 0",
                            "observedGeneration": 1, "lastTransitionTime": "2026-11-22T10:00:02Z"},
                           {"type": "Complete", "status": "True", "reason": "Completed",
                            "message": "Slurm job 100001 ended Completed, exit code 0",
                            "observedGeneration": 1, "lastTransitionTime": "2026-11-22T10:00:02Z"}],
        },
    }))
    .unwrap();
    let object = cached.object().unwrap();
    let json = serde_json::to_vec(&(&object.spec, &object.status))
        .unwrap()
        .len();
    assert!(
        cached.packed.len() * 2 < json,
        "spec and status: {} bytes packed, {json} as JSON",
        cached.packed.len()
    );
    let owned = std::mem::size_of::<CachedSlurmJob>() + cached.packed.len();
    let typed = std::mem::size_of::<SlurmJob>();
    assert!(
        owned < typed,
        "cached: {owned} bytes ({} inline), typed: {typed} bytes inline",
        std::mem::size_of::<CachedSlurmJob>()
    );
}

/// The per-thread compressor, reset between uses, encodes each input as a fresh one would:
/// nothing of one SlurmJob leaks into the next, whatever came before (an empty input, a large
/// incompressible one), and every output inflates back to its input.
#[test]
fn a_reused_compressor_encodes_as_a_fresh_one() {
    let mut noise = Vec::with_capacity(1 << 20);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while noise.len() < 1 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        noise.extend_from_slice(&x.to_le_bytes());
    }
    let job = serde_json::to_vec(&from_api_server()).unwrap();
    let inputs: [&[u8]; 5] = [&job, b"", &noise, &job, b"{\"spec\":{}}"];
    for (i, input) in inputs.iter().enumerate() {
        let packed = deflate(input).unwrap();
        let fresh = deflate_with(&mut new_compressor(), input).unwrap();
        // Not pretty_assertions: a diff of a MiB takes minutes.
        assert!(
            *packed == *fresh,
            "input {i} ({} bytes): {} bytes, a fresh compressor {}",
            input.len(),
            packed.len(),
            fresh.len()
        );
        let inflated =
            miniz_oxide::inflate::decompress_to_vec_with_limit(&packed, 4 << 20).unwrap();
        assert!(inflated == *input, "input {i} inflates back");
    }
}

/// Of `extraOptions` the cache keeps what the checks before a submit read, without values:
/// `shared`, and the first refused key (a long one by its start, with the nested-too-deep mark
/// that says why when it has one); allowed keys go.
#[test]
fn the_cache_keeps_shared_and_the_first_refused_extra_option_key() {
    let long = "k".repeat(1000);
    let mark = super::super::NESTED_TOO_DEEP;
    let kept = |keys: &[&str]| {
        let mut job: SlurmJob = serde_json::from_value(from_api_server()).unwrap();
        job.spec.extra_options = Some(
            keys.iter()
                .map(|k| ((*k).to_owned(), serde_json::json!("v")))
                .collect(),
        );
        let cached = CachedSlurmJob::new(job).unwrap();
        let spec = cached.object().unwrap().spec;
        spec.extra_options.map(|extra| {
            assert!(extra.values().all(serde_json::Value::is_null));
            extra.keys().cloned().collect::<Vec<_>>()
        })
    };
    let start = "k".repeat(64);
    assert_eq!(
        kept(&[&long, &format!("{long}{mark}"), "requeue"]),
        Some(vec![format!("{start}…")])
    );
    assert_eq!(
        kept(&[&format!("{long}{mark}"), "requeue"]),
        Some(vec![format!("{start}…{mark}")])
    );
    assert_eq!(
        kept(&["shared", "requeue", "reservation", "user_id"]),
        Some(vec!["reservation".to_owned(), "shared".to_owned()])
    );
    assert_eq!(kept(&["requeue", "mail_type"]), None);
}
