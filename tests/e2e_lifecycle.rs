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
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use slurm_operator::controller::slurmjob::status::{COMPLETE, FAILED, SPEC_APPLIED, SUSPENDED};
use slurm_operator::crd::SlurmJob;
use slurm_operator::crd::condition;
use slurm_operator::crd::slurmjob::Phase;

use common::e2e::{
    MANAGER, Operator, apply_cluster, apply_crds, eventually, free_port, local_cluster_spec,
};

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

/// A namespace of its own (`PREFIX-<random>`, also the credentials namespace, with the local
/// Slurm's key in a marked Secret) and a SlurmCluster of the same name granting it to Slurm
/// user `user` (with `accounts`), polled every second. The CRDs are applied first.
async fn seed(
    slurm: &common::LocalSlurm,
    prefix: &str,
    user: &str,
    accounts: &[&str],
) -> (kube::Client, String, String) {
    slurm_operator::tls::install_crypto_provider();
    let client = kube::Client::try_default().await.unwrap();
    apply_crds(&client).await;
    let namespace = format!(
        "{prefix}-{}",
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
    let mut access = json!({"namespaces": [namespace], "slurmUser": user});
    if user == slurm.user {
        // The local Slurm's own user, which the cluster's tokens are minted for.
        access["allowClusterUser"] = json!(true);
    }
    if !accounts.is_empty() {
        access["accounts"] = json!(accounts);
    }
    let spec = local_cluster_spec(slurm, json!([access]));
    apply_cluster(&client, &cluster, spec).await.unwrap();
    (client, namespace, cluster)
}

/// What every test here needs before it starts: `KUBECONFIG`.
fn kubeconfig_set() -> bool {
    let set = std::env::var_os("KUBECONFIG").is_some();
    if !set {
        eprintln!("skipped: KUBECONFIG is not set; this test needs a real Kubernetes API server");
    }
    set
}

/// What a watch saw of one SlurmJob, in order: `(submittedGeneration, jobId, phase, Failed
/// condition present)`.
type Seen = Arc<Mutex<Vec<(Option<i64>, Option<i64>, Phase, bool)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_is_never_lost_and_kubectl_waits_for_complete_and_failed() {
    if !kubeconfig_set() {
        return;
    }
    let slurm = require_slurm!();
    let (client, namespace, cluster) = seed(&slurm, "lifecycle-e2e", &slurm.user, &[]).await;
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
    let second_note = format!("Slurm job {second_job} submitted");
    let second_submitted = all
        .iter()
        .position(|(_, r, n)| r == "Submitted" && *n == second_note)
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

    common::e2e::clean_up(&client, &namespace, &cluster).await;
}

/// Issue 18 on a real API server: a SlurmJob applied with `suspend: true` is submitted held as
/// its namespace's Slurm user (alice): `kubectl wait --for=condition=Suspended`, `status.pending`
/// says `JobHeldUser` with priority 0. One apply setting `suspend: false` and a shorter
/// `timeLimit` releases that same job and changes its limit in Slurm
/// (`SpecApplied=True/UpdatedInPlace`); it completes, and its status keeps what it used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_job_is_released_and_takes_a_new_time_limit_in_place() {
    if !kubeconfig_set() {
        return;
    }
    let slurm = require_slurm!();
    let (client, namespace, cluster) = seed(&slurm, "hold-e2e", "alice", &["team-a"]).await;
    let _operator =
        Operator::start(&namespace, free_port()).sigterm_on_drop(Duration::from_secs(10));
    let jobs: Api<SlurmJob> = Api::namespaced(client.clone(), &namespace);
    let events: Api<Event> = Api::namespaced(client.clone(), &namespace);
    let apply = |suspend: bool, time_limit: &str| {
        Patch::Apply(json!({
            "apiVersion": "slurm.rs/v1alpha1",
            "kind": "SlurmJob",
            "metadata": {"name": "held"},
            "spec": {
                "clusterName": cluster,
                "partition": slurm.partition,
                "script": "#!/bin/sh\nsleep 2\n",
                "environment": {"PATH": "/usr/bin:/bin"},
                "workingDirectory": "/home/alice",
                "timeLimit": time_limit,
                "suspend": suspend,
            },
        }))
    };
    let params = PatchParams::apply(MANAGER).force();
    jobs.patch("held", &params, &apply(true, "10m"))
        .await
        .unwrap();
    kubectl_wait(&namespace, "held", SUSPENDED);
    let held = jobs.get("held").await.unwrap().status.unwrap();
    let job_id = held.job_id.unwrap();
    assert_eq!(held.phase, Phase::Submitted);
    let pending = held.pending.unwrap();
    assert_eq!(pending.reason.as_deref(), Some("JobHeldUser"));
    assert_eq!(pending.priority, Some(0));

    jobs.patch("held", &params, &apply(false, "5m"))
        .await
        .unwrap();
    kubectl_wait(&namespace, "held", COMPLETE);
    let done = eventually("the usage", Duration::from_secs(60), || async {
        let job = jobs.get("held").await.ok()?;
        job.status.as_ref()?.usage.is_some().then_some(job)
    })
    .await;
    let status = done.status.unwrap();
    assert_eq!(status.job_id, Some(job_id), "the same job, released");
    assert_eq!(status.observed_generation, done.metadata.generation);
    let applied = condition::find(&status.conditions, SPEC_APPLIED).unwrap();
    assert_eq!(
        (applied.status.as_str(), applied.reason.as_str()),
        ("True", "UpdatedInPlace")
    );
    assert!(condition::find(&status.conditions, SUSPENDED).is_none());
    let records = slurm
        .client()
        .accounting_job(u32::try_from(job_id).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].user_name.as_deref(), Some("alice"));
    assert_eq!(records[0].time_limit, Some(Duration::from_secs(300)));
    let all = events_of(&events, "held").await;
    eprintln!("events: {all:?}");
    assert!(
        all.iter()
            .any(|(t, r, _)| t == "Normal" && r == "UpdatedInPlace"),
        "{all:?}"
    );
    assert_eq!(
        all.iter().filter(|(_, r, _)| r == "Submitted").count(),
        1,
        "one submit: {all:?}"
    );

    common::e2e::clean_up(&client, &namespace, &cluster).await;
}
