//! End to end against a real Kubernetes API server (no kubelet needed) and the real local Slurm:
//! the operator binary runs as a child process. Runs only when `KUBECONFIG` is set.
//!
//! Applies the CRDs, a Secret and a SlurmCluster for the local slurmrestd, then a SlurmJob that exits
//! 3 (it must reach Failed with exit code 3 and its Events) and one that succeeds (Completed,
//! exit code 0); then a long SlurmJob, deleted once Running: the finalizer cancels the Slurm job
//! before the SlurmJob goes away.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams};
use serde_json::json;
use slurm_operator::crd::SlurmJob;
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

async fn wait_phase(jobs: &Api<SlurmJob>, name: &str, phase: Phase) -> SlurmJob {
    eventually(
        &format!("{name} {phase}"),
        Duration::from_secs(120),
        || async {
            let job = jobs.get_opt(name).await.unwrap()?;
            (job.status.as_ref()?.phase == phase).then_some(job)
        },
    )
    .await
}

async fn reasons(events: &Api<Event>, name: &str) -> Vec<String> {
    events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter_map(|e| e.reason)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurmjobs_run_to_their_end_and_deleting_one_cancels_it() {
    if std::env::var_os("KUBECONFIG").is_none() {
        eprintln!("skipped: KUBECONFIG is not set; this test needs a real Kubernetes API server");
        return;
    }
    let slurm = require_slurm!();
    slurm_operator::tls::install_crypto_provider();
    let client = kube::Client::try_default().await.unwrap();
    apply_crds(&client).await;
    let namespace = format!(
        "slurmjob-e2e-{}",
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
    // Cluster-scoped, named after this run's namespace, granting that namespace to the local
    // Slurm's own user (named explicitly, as it must be).
    let cluster = namespace.clone();
    let spec = local_cluster_spec(
        &slurm,
        json!([{"namespaces": [namespace], "slurmUser": slurm.user, "allowClusterUser": true}]),
    );
    apply_cluster(&client, &cluster, spec).await.unwrap();
    // Never terminated explicitly: dropping it at the end stops it with SIGTERM.
    let _operator =
        Operator::start(&namespace, free_port()).sigterm_on_drop(Duration::from_secs(10));
    let jobs: Api<SlurmJob> = Api::namespaced(client.clone(), &namespace);
    let events: Api<Event> = Api::namespaced(client.clone(), &namespace);

    apply_job(
        &jobs,
        &cluster,
        "exit3",
        "echo hello; exit 3",
        &slurm.partition,
    )
    .await;
    apply_job(
        &jobs,
        &cluster,
        "ok",
        "echo hello; sleep 1",
        &slurm.partition,
    )
    .await;
    let failed = wait_phase(&jobs, "exit3", Phase::Failed).await;
    assert_eq!(failed.status.as_ref().unwrap().exit_code, Some(3));
    let done = wait_phase(&jobs, "ok", Phase::Completed).await;
    assert_eq!(done.status.as_ref().unwrap().exit_code, Some(0));
    eventually("the Events of ok", Duration::from_secs(30), || async {
        let r = reasons(&events, "ok").await;
        ["Submitted", "Finished"]
            .iter()
            .all(|want| r.iter().any(|x| x == want))
            .then_some(())
    })
    .await;

    apply_job(&jobs, &cluster, "long", "sleep 300", &slurm.partition).await;
    let running = wait_phase(&jobs, "long", Phase::Running).await;
    let job_id = u32::try_from(running.status.unwrap().job_id.unwrap()).unwrap();
    jobs.delete("long", &DeleteParams::default()).await.unwrap();
    eventually("the SlurmJob gone", Duration::from_secs(60), || async {
        jobs.get_opt("long").await.unwrap().is_none().then_some(())
    })
    .await;
    let slurm_client = slurm.client();
    eventually(
        "the Slurm job cancelled",
        Duration::from_secs(30),
        || async {
            let records = slurm_client.job(job_id).await.ok()?;
            records[0]
                .state
                .to_strings()
                .contains(&"CANCELLED".to_owned())
                .then_some(())
        },
    )
    .await;

    common::e2e::clean_up(&client, &namespace, &cluster).await;
}
