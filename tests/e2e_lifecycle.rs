//! End to end against a real Kubernetes API server and the real local Slurm (issue 15): a job's
//! life as Kubernetes tools read it. Runs only when `KUBECONFIG` is set (and `kubectl` is on
//! the PATH); the operator binary runs as a child process.
//!
//! A SlurmJob completes (`kubectl wait --for=condition=Complete`), is edited and re-runs: every
//! phase a watch sees after the edit is one of a healthy run (never `Lost`, never `Failed`), the
//! Events are `Resubmitted` then the new run's, with no `Failed` Warning, and the history keeps
//! the first run. A SlurmJob whose script fails ends with `Failed=True`
//! (`kubectl wait --for=condition=Failed`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use slurm_operator::controller::slurmjob::status::{COMPLETE, FAILED};
use slurm_operator::crd::condition;
use slurm_operator::crd::slurmjob::Phase;
use slurm_operator::crd::{SlurmCluster, SlurmJob};

use common::e2e::{MANAGER, Operator, apply_crds, eventually, free_port};

async fn apply_job(jobs: &Api<SlurmJob>, cluster: &str, name: &str, body: &str, partition: &str) {
    jobs.patch(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(json!({
            "apiVersion": "slurm.rs/v1alpha1",
            "kind": "SlurmJob",
            "metadata": {"name": name},
            "spec": {
                "clusterName": cluster,
                "partition": partition,
                "script": format!("#!/bin/sh\n{body}\n"),
                "environment": {"PATH": "/usr/bin:/bin"},
            },
        })),
    )
    .await
    .unwrap_or_else(|e| panic!("apply SlurmJob {name}: {e}"));
}

/// `kubectl wait --for=condition=CONDITION slurmjob/NAME`, which must succeed.
fn kubectl_wait(namespace: &str, name: &str, condition: &str) {
    let output = Command::new("kubectl")
        .args([
            "wait",
            "--namespace",
            namespace,
            &format!("--for=condition={condition}"),
            "--timeout=180s",
            &format!("slurmjob/{name}"),
        ])
        .output()
        .expect("run kubectl");
    assert!(
        output.status.success(),
        "kubectl wait --for=condition={condition} slurmjob/{name}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The Events about `name`, oldest first, as `(type, reason, note)`.
async fn events_of(events: &Api<Event>, name: &str) -> Vec<(String, String, String)> {
    let mut list: Vec<Event> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect();
    list.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    list.into_iter()
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

/// What a watch saw of one SlurmJob, in order: `(submittedGeneration, jobId, phase, Failed
/// condition present)`.
type Seen = Arc<Mutex<Vec<(Option<i64>, Option<i64>, Phase, bool)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_is_never_lost_and_kubectl_waits_for_complete_and_failed() {
    if std::env::var_os("KUBECONFIG").is_none() {
        eprintln!("skipped: KUBECONFIG is not set; this test needs a real Kubernetes API server");
        return;
    }
    let slurm = require_slurm!();
    slurm_operator::tls::install_crypto_provider();
    let client = kube::Client::try_default().await.unwrap();
    apply_crds(&client).await;
    let namespace = format!(
        "lifecycle-e2e-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    eprintln!("e2e namespace: {namespace}");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            &namespace,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
            ),
        )
        .await
        .unwrap();
    // The namespace is also the credentials namespace here; its Secret is marked for that.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("jwt".into()),
            labels: Some([("slurm.rs/credentials".to_owned(), "true".to_owned())].into()),
            ..Default::default()
        },
        data: Some([("jwt_hs256.key".to_owned(), ByteString(slurm.key()))].into()),
        ..Default::default()
    };
    secrets
        .patch(
            "jwt",
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap();
    let cluster = namespace.clone();
    let clusters: Api<SlurmCluster> = Api::all(client.clone());
    clusters
        .patch(
            &cluster,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(json!({
                "apiVersion": "slurm.rs/v1alpha1",
                "kind": "SlurmCluster",
                "metadata": {"name": cluster},
                "spec": {
                    "endpoint": slurm.url,
                    "allowInsecureHttp": slurm.url.starts_with("http://"),
                    "auth": {"jwt": {"keySecretRef": {"name": "jwt", "key": "jwt_hs256.key"}, "user": slurm.user}},
                    "pollInterval": "1s",
                    "access": [{"namespaces": [namespace], "slurmUser": slurm.user}],
                },
            })),
        )
        .await
        .unwrap();
    let _operator =
        Operator::start(&namespace, free_port()).sigterm_on_drop(Duration::from_secs(10));
    let jobs: Api<SlurmJob> = Api::namespaced(client.clone(), &namespace);
    let events: Api<Event> = Api::namespaced(client.clone(), &namespace);

    // Every state of `rerun` a watch delivers, from before its creation.
    let seen: Seen = Arc::default();
    let watch = {
        let seen = Arc::clone(&seen);
        let stream = watcher(
            jobs.clone(),
            watcher::Config::default().fields("metadata.name=rerun"),
        )
        .applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(job)) = stream.next().await {
                let Some(status) = job.status else { continue };
                let failed = condition::find(&status.conditions, FAILED).is_some();
                seen.lock().unwrap().push((
                    status.submitted_generation,
                    status.job_id,
                    status.phase,
                    failed,
                ));
            }
        })
    };

    // First run, to its end.
    apply_job(&jobs, &cluster, "rerun", "echo one", &slurm.partition).await;
    kubectl_wait(&namespace, "rerun", COMPLETE);
    let first = jobs.get("rerun").await.unwrap();
    let first_status = first.status.unwrap();
    assert_eq!(first_status.phase, Phase::Completed);
    let first_job = first_status.job_id.unwrap();

    // The edit: a re-run of the finished job, followed to its end.
    apply_job(&jobs, &cluster, "rerun", "echo two", &slurm.partition).await;
    let second = eventually("the re-run Completed", Duration::from_secs(180), || async {
        let job = jobs.get("rerun").await.ok()?;
        let status = job.status.clone()?;
        (status.submitted_generation == job.metadata.generation
            && status.job_id != Some(first_job)
            && status.phase == Phase::Completed)
            .then_some(job)
    })
    .await;
    kubectl_wait(&namespace, "rerun", COMPLETE);
    let second_status = second.status.unwrap();
    let second_job = second_status.job_id.unwrap();
    assert_eq!(second_status.history.len(), 1);
    assert_eq!(second_status.history[0].job_id, first_job);
    assert_eq!(second_status.history[0].phase, Phase::Completed);
    // The watch delivers the last write too.
    eventually("the watch saw the end", Duration::from_secs(30), || async {
        seen.lock()
            .unwrap()
            .iter()
            .any(|(_, id, phase, _)| *id == Some(second_job) && *phase == Phase::Completed)
            .then_some(())
    })
    .await;
    watch.abort();
    let seen = seen.lock().unwrap().clone();
    eprintln!("observed: {seen:?}");
    for (generation, job_id, phase, failed) in &seen {
        assert!(
            !matches!(phase, Phase::Lost | Phase::Failed) && !failed,
            "observed {phase} (Failed condition: {failed}) for job {job_id:?} of generation \
             {generation:?}: {seen:?}"
        );
    }
    // After the edit: the pending re-run, then only the new job's healthy phases.
    let edit = seen
        .iter()
        .rposition(|(_, id, _, _)| *id == Some(first_job))
        .expect("the watch saw the first run");
    let after: Vec<Phase> = seen[edit + 1..]
        .iter()
        .map(|(_, _, phase, _)| *phase)
        .collect();
    assert!(!after.is_empty(), "{seen:?}");
    assert!(
        after.iter().all(|p| matches!(
            p,
            Phase::Pending | Phase::Submitted | Phase::Running | Phase::Completed
        )),
        "{after:?}"
    );
    assert_eq!(after.last(), Some(&Phase::Completed), "{after:?}");

    // The Events: both runs announced and finished, the re-run announced, no Warning at all.
    let all = eventually(
        "the Events of both runs",
        Duration::from_secs(30),
        || async {
            let all = events_of(&events, "rerun").await;
            let finished = all.iter().filter(|(_, r, _)| r == "Finished").count();
            (finished == 2 && all.iter().any(|(_, r, _)| r == "Resubmitted")).then_some(all)
        },
    )
    .await;
    eprintln!("events: {all:?}");
    assert!(
        all.iter().all(|(t, _, _)| t == "Normal"),
        "no Warning: {all:?}"
    );
    for (_, reason, note) in &all {
        assert!(!note.contains("Lost"), "{reason}: {note}");
    }
    let resubmitted = all.iter().position(|(_, r, _)| r == "Resubmitted").unwrap();
    let second_submitted = all
        .iter()
        .position(|(_, r, n)| r == "Submitted" && n.contains(&second_job.to_string()))
        .unwrap();
    assert!(resubmitted <= second_submitted, "{all:?}");

    // A failing script: Failed=True, as kubectl waits for it.
    apply_job(&jobs, &cluster, "fails", "exit 3", &slurm.partition).await;
    kubectl_wait(&namespace, "fails", FAILED);
    let failed = jobs.get("fails").await.unwrap().status.unwrap();
    assert_eq!(failed.phase, Phase::Failed);
    assert_eq!(failed.exit_code, Some(3));
    let condition = condition::find(&failed.conditions, FAILED).unwrap();
    assert_eq!(condition.reason, "Failed");
    assert!(condition::find(&failed.conditions, COMPLETE).is_none());

    namespaces
        .delete(&namespace, &DeleteParams::default())
        .await
        .unwrap();
    clusters
        .delete(&cluster, &DeleteParams::default())
        .await
        .unwrap();
}
