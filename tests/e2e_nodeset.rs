//! End to end for NodeSets against a real Kubernetes API server (no kubelet or scheduler needed):
//! the operator binary runs as a child process. Runs only when `KUBECONFIG` is set.
//!
//! A SlurmNodeSet whose SlurmCluster has no client (no Slurm is involved): the operator creates its pods
//! with the completed slurmd args; `kubectl scale` through the scale subresource adds pods; scaling
//! in removes pods that were never scheduled (slurmd never ran in them, so nothing to drain).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use slurm_operator::crd::SlurmNodeSet;

use common::e2e::{MANAGER, Operator, apply_crds, eventually, free_port};

async fn pod_names(pods: &Api<Pod>) -> Vec<String> {
    let mut names: Vec<String> = pods
        .list(&ListParams::default().labels("slurm.rs/nodeset=cpu"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn nodeset_pods_follow_the_scale_subresource() {
    if std::env::var_os("KUBECONFIG").is_none() {
        eprintln!("skipped: KUBECONFIG is not set; this test needs a real Kubernetes API server");
        return;
    }
    slurm_operator::tls::install_crypto_provider();
    let client = kube::Client::try_default()
        .await
        .expect("a client from KUBECONFIG");
    apply_crds(&client).await;
    let namespace = format!(
        "slurm-e2e-ns-{}",
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
        .expect("create the namespace");
    let nodesets: Api<SlurmNodeSet> = Api::namespaced(client.clone(), &namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let mut operator = Operator::start(&namespace, free_port());

    nodesets
        .patch(
            "cpu",
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(json!({
                "apiVersion": "slurm.rs/v1alpha1",
                "kind": "SlurmNodeSet",
                "metadata": {"name": "cpu"},
                "spec": {
                    "clusterName": "nowhere",
                    "replicas": 2,
                    "slurm": {"features": ["cpu"], "partitions": ["debug"], "cpus": 2, "realMemory": "1Gi"},
                    "template": {"spec": {"containers": [{
                        "name": "slurmd",
                        "image": "example.invalid/slurmd:24.11",
                        "command": ["slurmd"],
                        "args": ["-D", "--conf-server", "slurmctld:6817"],
                    }]}},
                },
            })),
        )
        .await
        .expect("create the SlurmNodeSet");

    eventually("2 pods", Duration::from_secs(60), || async {
        (pod_names(&pods).await == ["cpu-0", "cpu-1"]).then_some(())
    })
    .await;
    let pod = pods.get("cpu-1").await.unwrap();
    let args = pod.spec.unwrap().containers[0].args.clone().unwrap();
    assert_eq!(
        args,
        [
            "-D",
            "--conf-server",
            "slurmctld:6817",
            "-Z",
            "-N",
            "cpu-1",
            "--conf",
            // One `partition-<name>` feature per spec.slurm.partitions entry.
            "Features=cpu,partition-debug CPUs=2 RealMemory=1024"
        ]
    );

    operator.assert_running();
    // kubectl scale nodeset cpu --replicas=3
    nodesets
        .patch_scale(
            "cpu",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("scale to 3");
    eventually("3 pods", Duration::from_secs(60), || async {
        (pod_names(&pods).await.len() == 3).then_some(())
    })
    .await;
    let scale = nodesets.get_scale("cpu").await.unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));

    // Scale in: the pods were never scheduled, so they go without a drain.
    nodesets
        .patch_scale(
            "cpu",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .expect("scale to 1");
    eventually("1 pod", Duration::from_secs(60), || async {
        (pod_names(&pods).await == ["cpu-0"]).then_some(())
    })
    .await;
    eventually(
        "status.replicas = 1 and a selector",
        Duration::from_secs(60),
        || async {
            let status = nodesets.get_status("cpu").await.ok()?.status?;
            (status.replicas == 1 && status.selector.as_deref() == Some("slurm.rs/nodeset=cpu"))
                .then_some(())
        },
    )
    .await;

    let status = operator.terminate(Duration::from_secs(30));
    assert!(status.success(), "operator exit: {status:?}");
    namespaces
        .delete(&namespace, &DeleteParams::default())
        .await
        .unwrap();
}
