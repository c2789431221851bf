//! End to end against a real Kubernetes API server (its own namespace controller, no kubelet
//! needed) and the real local Slurm: a namespace deleted while the operator is down goes once
//! the operator is back, and its running Slurm jobs are CANCELLED (issue 14, item 3). Runs only
//! when `KUBECONFIG` is set.
//!
//! A tenant namespace with a Secret of its own, two SlurmJobs that finish and two that run; the
//! SlurmCluster's key Secret in a credentials namespace of its own. The operator is stopped
//! (SIGTERM, as in an upgrade), the tenant namespace deleted: the namespace controller deletes
//! its Secret, the SlurmJobs stay, held by their finalizers. The operator started again: the
//! namespace goes (NotFound), and Slurm says each running job was CANCELLED.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::ResourceExt;
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
                // A failed run leaves nothing running for long.
                "timeLimit": "5m",
            },
        })),
    )
    .await
    .unwrap_or_else(|e| panic!("apply SlurmJob {name}: {e}"));
}

async fn apply_namespace(namespaces: &Api<Namespace>, name: &str) {
    namespaces
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
            ),
        )
        .await
        .unwrap();
}

fn operator(namespace: &str, credentials: &str) -> Operator {
    Operator::spawn(
        &[
            "--namespace",
            namespace,
            "--credentials-namespace",
            credentials,
            "--metrics-addr",
            &format!("127.0.0.1:{}", free_port()),
        ],
        &[],
        None,
    )
    .sigterm_on_drop(Duration::from_secs(10))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_deleted_while_the_operator_is_down_goes_once_it_is_back() {
    if std::env::var_os("KUBECONFIG").is_none() {
        eprintln!("skipped: KUBECONFIG is not set; this test needs a real Kubernetes API server");
        return;
    }
    let slurm = require_slurm!();
    slurm_operator::tls::install_crypto_provider();
    let client = kube::Client::try_default().await.unwrap();
    apply_crds(&client).await;
    let namespace = format!(
        "deletion-e2e-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let credentials = format!("{namespace}-credentials");
    eprintln!("e2e namespaces: {namespace}, {credentials}");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    apply_namespace(&namespaces, &namespace).await;
    apply_namespace(&namespaces, &credentials).await;

    // The admin's: the key, marked, in the credentials namespace; the SlurmCluster, named after
    // the tenant namespace, granting it to the local Slurm's own user.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &credentials);
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
    let clusters: Api<slurm_operator::crd::SlurmCluster> = Api::all(client.clone());
    let spec = local_cluster_spec(
        &slurm,
        json!([{"namespaces": [namespace], "slurmUser": slurm.user, "allowClusterUser": true}]),
    );
    apply_cluster(&client, &cluster, spec).await.unwrap();

    // The tenant's: a Secret of their own, and the SlurmJobs.
    let tenant_secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    tenant_secrets
        .patch(
            "tenant-notes",
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Secret",
                                 "metadata": {"name": "tenant-notes"},
                                 "stringData": {"note": "deleted with the namespace"}})),
        )
        .await
        .unwrap();
    let mut first = operator(&namespace, &credentials);
    let jobs: Api<SlurmJob> = Api::namespaced(client.clone(), &namespace);
    // The finished ones first: the local nodes have one CPU each, and the long ones hold them.
    for name in ["done-0", "done-1"] {
        apply_job(&jobs, &cluster, name, "echo ran", &slurm.partition).await;
    }
    for name in ["done-0", "done-1"] {
        eventually(
            &format!("{name} Completed"),
            Duration::from_secs(180),
            || async {
                let job = jobs.get_opt(name).await.unwrap()?;
                (job.status?.phase == Phase::Completed).then_some(())
            },
        )
        .await;
    }
    let mut running_ids = Vec::new();
    for name in ["long-0", "long-1"] {
        apply_job(&jobs, &cluster, name, "sleep 600", &slurm.partition).await;
    }
    for name in ["long-0", "long-1"] {
        let id = eventually(
            &format!("{name} submitted"),
            Duration::from_secs(120),
            || async {
                let status = jobs.get_opt(name).await.unwrap()?.status?;
                (!status.phase.is_terminal()).then_some(status.job_id?)
            },
        )
        .await;
        running_ids.push(u32::try_from(id).unwrap());
    }
    eprintln!("running Slurm jobs {running_ids:?}");

    // The operator stops (an upgrade, a rescheduled pod); the namespace is deleted meanwhile.
    assert!(first.terminate(Duration::from_secs(30)).success());
    namespaces
        .delete(&namespace, &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the tenant's Secret deleted by the namespace controller",
        Duration::from_secs(120),
        || async {
            tenant_secrets
                .get_opt("tenant-notes")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
    // The namespace controller deletes one resource type after another, in no set order: the
    // Secrets may go before the SlurmJobs are marked.
    for name in ["done-0", "done-1", "long-0", "long-1"] {
        let job = eventually(
            &format!("{name} marked for deletion"),
            Duration::from_secs(60),
            || async {
                let job = jobs.get(name).await.unwrap();
                job.metadata.deletion_timestamp.is_some().then_some(job)
            },
        )
        .await;
        assert!(!job.finalizers().is_empty(), "{name} held by its finalizer");
    }

    // Back: the running jobs are cancelled, and the namespace goes. The jobs are looked at
    // first (slurmctld forgets an ended job after MinJobAge, 30 s here, and the namespace
    // controller may take a while), in accounting once slurmctld no longer has them.
    let _second = operator(&namespace, &credentials);
    let slurm_client = slurm.client();
    for id in running_ids {
        eventually(
            &format!("Slurm job {id} cancelled"),
            Duration::from_secs(60),
            || async {
                let records = match slurm_client.job(id).await {
                    Ok(records) => records,
                    Err(_) => slurm_client.accounting_job(id).await.ok()??,
                };
                records
                    .first()?
                    .state
                    .to_strings()
                    .contains(&"CANCELLED".to_owned())
                    .then_some(())
            },
        )
        .await;
    }
    eventually("the namespace gone", Duration::from_secs(180), || async {
        namespaces
            .get_opt(&namespace)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;

    // Clean up while the operator runs: the SlurmCluster's finalizer, then its credentials.
    clusters
        .delete(&cluster, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the SlurmCluster gone", Duration::from_secs(60), || async {
        clusters
            .get_opt(&cluster)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    namespaces
        .delete(&credentials, &DeleteParams::default())
        .await
        .unwrap();
}
