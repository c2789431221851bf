//! Kubernetes API writes per SlurmJob (issue 19), through the operator *binary*: the in-memory
//! API server of `testing/fake-apiserver` (which counts every request by method and resource)
//! and the real local Slurm.
//!
//! A SlurmJob from creation to `Completed` costs one finalizer patch, one Event per transition
//! (Submitted, Started, Finished at most: three) and one status write per transition (Submitted,
//! Running, Completed: three). The status written right after the submit names the job id before
//! any Slurm record of it is indexed (crash safety); what the first record adds while the job
//! waits (`slurmState`, `stateReason`, `submitTime`, `pending`) is written with the next
//! transition, or on its own once the job has waited 5 s (`status::details_due`): these jobs
//! start at once. A short job can go from Submitted to Completed between two polls, so fewer is
//! fine.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::api::Api;
use slurm_operator::crd::SlurmJob;
use slurm_operator::crd::slurmjob::Phase;

use common::e2e::{Operator, eventually};
use common::scenario::{self, Harness};

const NAMESPACE: &str = "writes";
const JOBS: usize = 6;

fn count(requests: &std::collections::HashMap<String, u64>, key: &str) -> u64 {
    requests.get(key).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slurmjob_costs_a_finalizer_and_one_status_write_and_one_event_per_transition() {
    let slurm = require_slurm!();
    let harness = Harness::start(&slurm, NAMESPACE, "writes").await;
    let jobs: Api<SlurmJob> = Api::namespaced(harness.client.clone(), NAMESPACE);
    let events: Api<Event> = Api::namespaced(harness.client.clone(), NAMESPACE);
    let args = harness.args();
    let mut operator = Operator::spawn(
        &args,
        &[("KUBECONFIG", harness.kubeconfig.as_str())],
        Some(&harness.log),
    )
    .sigterm_on_drop(Duration::from_secs(10));
    // A first SlurmJob through, unmeasured: the operator is up, its index synced (a SlurmJob
    // applied before that waits, with a status saying so, which a running operator skips).
    let warm_up = format!("{}-warm-up", harness.run);
    scenario::apply_slurmjob(&jobs, &warm_up, &slurm.partition, "true").await;
    scenario::all_ended(
        &jobs,
        std::slice::from_ref(&warm_up),
        Duration::from_secs(120),
    )
    .await;
    let before = harness.api.requests();
    let names: Vec<String> = (0..JOBS).map(|i| format!("{}-{i}", harness.run)).collect();
    for name in &names {
        // Long enough to be seen Running by a 1 s poll, most of the time.
        scenario::apply_slurmjob(&jobs, name, &slurm.partition, "sleep 2").await;
    }
    let finished = scenario::all_ended(&jobs, &names, Duration::from_secs(240)).await;
    for job in &finished {
        assert_eq!(
            job.status.as_ref().map(|s| s.phase),
            Some(Phase::Completed),
            "{:?}",
            job.metadata.name
        );
    }
    // The Finished Event follows the status write that shows it: wait for all of them (and
    // nothing settles a count that is still rising).
    let per_job = eventually(
        "a Finished Event for each",
        Duration::from_secs(60),
        || async {
            let list = events.list(&Default::default()).await.ok()?;
            let mut per_job: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for event in list.items {
                let Some(regarding) = event.regarding.as_ref() else {
                    continue;
                };
                if regarding.kind.as_deref() != Some("SlurmJob") {
                    continue;
                }
                let name = regarding.name.clone().unwrap_or_default();
                // A repeated Event is one object with a series: each repeat is a write too.
                let repeats = event.series.as_ref().map_or(1, |s| s.count.max(1));
                for _ in 0..repeats {
                    per_job
                        .entry(name.clone())
                        .or_default()
                        .push(event.reason.clone().unwrap_or_default());
                }
            }
            let done = names.iter().all(|n| {
                per_job
                    .get(n)
                    .is_some_and(|r| r.iter().any(|r| r == "Finished"))
            });
            done.then_some(per_job)
        },
    )
    .await;
    let after = harness.api.requests();
    operator.terminate(Duration::from_secs(20));

    // The test's own applies (server-side apply is a PATCH) are not the operator's.
    let finalizers = count(&after, "PATCH slurm.rs/v1alpha1/slurmjobs")
        - count(&before, "PATCH slurm.rs/v1alpha1/slurmjobs")
        - JOBS as u64;
    let statuses = count(&after, "PATCH slurm.rs/v1alpha1/slurmjobs/status")
        - count(&before, "PATCH slurm.rs/v1alpha1/slurmjobs/status");
    let writes: BTreeMap<&String, u64> = after
        .iter()
        .filter(|(k, _)| !k.starts_with("GET ") && k.contains("slurmjobs"))
        .map(|(k, n)| (k, n - before.get(k).copied().unwrap_or(0)))
        .collect();
    eprintln!("writes to SlurmJobs: {writes:?}");
    eprintln!("Events per SlurmJob: {per_job:?}");
    assert_eq!(
        finalizers, JOBS as u64,
        "one finalizer patch per SlurmJob: {writes:?}"
    );
    // Three per SlurmJob; one more for a job that waited for a node (a busy shared Slurm: its
    // details were written after 5 s), and one per pending refresh (30 s) it waited through.
    let allowed: u64 = finished
        .iter()
        .map(|job| {
            let status = job.status.as_ref().unwrap();
            let waited = match (&status.submit_time, &status.start_time) {
                (Some(submit), Some(start)) => (start.0.as_second() - submit.0.as_second()).max(0),
                _ => 0,
            };
            3 + u64::from(waited >= 4) + u64::try_from(waited / 30).unwrap()
        })
        .sum();
    assert!(
        statuses <= allowed,
        "at most one status write per transition (3 per SlurmJob that started at once): \
         {statuses} for {JOBS}, {allowed} allowed: {writes:?}"
    );
    assert!(
        writes
            .keys()
            .all(|k| k.ends_with("/slurmjobs") || k.ends_with("/slurmjobs/status")),
        "no other kind of write: {writes:?}"
    );
    for name in &names {
        let reasons = &per_job[name];
        assert!(
            reasons.len() <= 3,
            "{name}: at most one Event per transition: {reasons:?}"
        );
        for reason in ["Submitted", "Finished"] {
            assert_eq!(
                reasons.iter().filter(|r| *r == reason).count(),
                1,
                "{name}: one {reason} Event: {reasons:?}"
            );
        }
    }
    let total_events: usize = names.iter().map(|n| per_job[n].len()).sum();
    eprintln!(
        "per SlurmJob: {:.2} writes ({} finalizer patches, {} status writes, {} Events for {JOBS})",
        (finalizers + statuses) as f64 / JOBS as f64 + total_events as f64 / JOBS as f64,
        finalizers,
        statuses,
        total_events
    );
}

/// The output streamer Pod is read from the API server only when the operator's Pod cache
/// shows it needs something (created, told that its job ended): a reconcile of a finished
/// SlurmJob whose Pod was told reads nothing. Here a change of the Pod itself (a tenant's
/// annotation) reconciles its SlurmJob; before the cache, each such reconcile read the Pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_told_output_pod_is_not_read_again() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Patch, PatchParams};
    use serde_json::json;
    use slurm_operator::controller::slurmjob::output;

    let slurm = require_slurm!();
    let harness = Harness::start(&slurm, NAMESPACE, "pod-reads").await;
    let jobs: Api<SlurmJob> = Api::namespaced(harness.client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(harness.client.clone(), NAMESPACE);
    let args = harness.args();
    let _operator = Operator::spawn(
        &args,
        &[("KUBECONFIG", harness.kubeconfig.as_str())],
        Some(&harness.log),
    )
    .sigterm_on_drop(Duration::from_secs(10));
    let name = format!("{}-streamed", harness.run);
    jobs.patch(
        &name,
        &PatchParams::apply(common::e2e::MANAGER),
        &Patch::Apply(json!({
            "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob", "metadata": {"name": name},
            "spec": {
                "clusterName": scenario::CLUSTER,
                "partition": slurm.partition,
                "script": "#!/bin/sh\necho streamed\n",
                "environment": {"PATH": "/usr/bin:/bin"},
                "output": {"volume": "shared", "slurmPath": "/tmp"},
            },
        })),
    )
    .await
    .unwrap();
    let finished =
        scenario::all_ended(&jobs, std::slice::from_ref(&name), Duration::from_secs(120)).await;
    let job_id = finished[0].status.as_ref().unwrap().job_id.unwrap();
    eventually(
        "the output Pod told that its job ended",
        Duration::from_secs(60),
        || async {
            // Listed, not read by name: the Pod's own reads below are the operator's.
            let list = pods.list(&Default::default()).await.ok()?;
            let pod = list
                .items
                .into_iter()
                .find(|p| p.metadata.name.as_ref() == Some(&name))?;
            let annotations = pod.metadata.annotations?;
            (annotations.get(output::JOB_ID_ANNOTATION) == Some(&job_id.to_string())
                && annotations
                    .get(output::ENDED_ANNOTATION)
                    .map(String::as_str)
                    == Some("true"))
            .then_some(())
        },
    )
    .await;
    // The Pod's own reads (not the watches' lists): settled once they stop changing (the
    // reconciles around the told patch may read it, until the cache shows the patch).
    let key = format!("GET v1/pods/{NAMESPACE}/{name}");
    let reads = || count(&harness.api.object_requests(), &key);
    assert!(reads() > 0, "the Pod was read to create and to tell it");
    let mut settled = reads();
    for second in 0.. {
        assert!(
            second < 30,
            "the Pod is read again and again; log: {}",
            harness.log.display()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = reads();
        if now == settled {
            break;
        }
        settled = now;
    }
    // Reconciles of this SlurmJob, as the operator's log says each one ended.
    let object = format!("SlurmJob.v1alpha1.slurm.rs/{name}.{NAMESPACE} ");
    let reconciled = || {
        std::fs::read_to_string(&harness.log)
            .unwrap_or_default()
            .lines()
            .filter(|line| line.contains(" reconciled ") && line.contains(&object))
            .count()
    };
    let before = reconciled();
    pods.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"example.org/seen": "yes"}}})),
    )
    .await
    .unwrap();
    eventually(
        "a reconcile of the SlurmJob",
        Duration::from_secs(30),
        || async { (reconciled() > before).then_some(()) },
    )
    .await;
    assert_eq!(
        reads(),
        settled,
        "the Pod was read again; log: {}",
        harness.log.display()
    );
}
