//! End to end for NodeSets against a real Kubernetes API server (no kubelet or scheduler needed):
//! the operator binary runs as a child process. Runs only when `KUBECONFIG` is set.
//!
//! A SlurmNodeSet without a Slurm (none is involved): without its SlurmCluster it is refused
//! (`ClusterNotFound`); with one that does not list its namespace in `nodeSetNamespaces`, too
//! (`NodeSetNotAllowed`); allowed but without a view of Slurm's nodes it creates no pod (a name is
//! given out only once Slurm is seen not to hold it), and the scale subresource still works.
//! Deleted, it waits behind its finalizer while Slurm cannot be seen, and goes once its
//! namespace is no longer allowed; then the SlurmCluster goes. The pods' completed slurmd args are checked by
//! `controller::nodeset::tests` and `tests/nodeset.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use slurm_operator::crd::{SlurmCluster, SlurmNodeSet};

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
    let cluster_name = format!("{namespace}-cluster");

    nodesets
        .patch(
            "cpu",
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(json!({
                "apiVersion": "slurm.rs/v1alpha1",
                "kind": "SlurmNodeSet",
                "metadata": {"name": "cpu"},
                "spec": {
                    "clusterName": cluster_name,
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

    // No SlurmCluster of that name: refused, no pod (issue 14: the operator acts for a set only
    // where the admin allowed it, and gives out pod/node names only once Slurm is seen).
    let ready = |reason: &'static str| {
        let nodesets = nodesets.clone();
        move || {
            let nodesets = nodesets.clone();
            async move {
                let status = nodesets.get_status("cpu").await.ok()?.status?;
                status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "False" && c.reason == reason)
                    .then_some(())
            }
        }
    };
    eventually(
        "Ready=False/ClusterNotFound",
        Duration::from_secs(60),
        ready("ClusterNotFound"),
    )
    .await;
    assert_eq!(pod_names(&pods).await, Vec::<String>::new());

    // A SlurmCluster that does not list the namespace: NodeSetNotAllowed, still no pod.
    let clusters: Api<SlurmCluster> = Api::all(client.clone());
    // Apply the SlurmCluster, allowing SlurmNodeSets in `allowed` only.
    let apply_cluster = |allowed: &str, what: &'static str| {
        let (clusters, name) = (clusters.clone(), cluster_name.clone());
        let cluster = json!({
            "apiVersion": "slurm.rs/v1alpha1",
            "kind": "SlurmCluster",
            "metadata": {"name": name},
            "spec": {
                "endpoint": "http://slurmrestd.invalid:6820",
                "allowInsecureHttp": true,
                "auth": {"jwt": {"keySecretRef": {"name": "none"}}},
                "nodeSetNamespaces": [allowed],
            },
        });
        async move {
            clusters
                .patch(
                    &name,
                    &PatchParams::apply(MANAGER).force(),
                    &Patch::Apply(cluster),
                )
                .await
                .expect(what);
        }
    };
    apply_cluster("some-other-namespace", "create the SlurmCluster").await;
    eventually(
        "Ready=False/NodeSetNotAllowed",
        Duration::from_secs(60),
        ready("NodeSetNotAllowed"),
    )
    .await;
    assert_eq!(pod_names(&pods).await, Vec::<String>::new());

    // Allowed, but Slurm is not reachable: admitted (NotReady), and still no pod, since no name
    // is given out without a fresh view of Slurm's nodes; the scale subresource works.
    apply_cluster(&namespace, "allow the namespace").await;
    eventually(
        "Ready=False/NotReady",
        Duration::from_secs(60),
        ready("NotReady"),
    )
    .await;
    operator.assert_running();
    nodesets
        .patch_scale(
            "cpu",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("scale to 3");
    let scale = nodesets.get_scale("cpu").await.unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));
    eventually(
        "status.replicas = 0 and a selector",
        Duration::from_secs(60),
        || async {
            let status = nodesets.get_status("cpu").await.ok()?.status?;
            (status.replicas == 0 && status.selector.as_deref() == Some("slurm.rs/nodeset=cpu"))
                .then_some(())
        },
    )
    .await;
    assert_eq!(pod_names(&pods).await, Vec::<String>::new());

    // Deletion waits behind the finalizer while Slurm cannot be seen (its nodes may still be
    // registered there), and lets go at once when the set is no longer admitted. The
    // SlurmCluster, deleted meanwhile, would wait for the set (its drains go through it).
    let set = nodesets.get("cpu").await.unwrap();
    assert!(
        set.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == "slurm.rs/cleanup")),
        "{:?}",
        set.metadata.finalizers
    );
    nodesets
        .delete("cpu", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "Ready=False/Deleting: the deletion waits for a view of Slurm",
        Duration::from_secs(60),
        ready("Deleting"),
    )
    .await;
    let waiting = nodesets.get("cpu").await.unwrap();
    assert!(waiting.metadata.deletion_timestamp.is_some());
    apply_cluster("some-other-namespace", "disallow the namespace").await;
    eventually(
        "the SlurmNodeSet gone once its namespace is no longer allowed",
        Duration::from_secs(60),
        || async {
            nodesets
                .get_opt("cpu")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
    clusters
        .delete(&cluster_name, &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the SlurmCluster gone, no set holding it",
        Duration::from_secs(60),
        || async {
            clusters
                .get_opt(&cluster_name)
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
    operator.assert_running();

    let status = operator.terminate(Duration::from_secs(30));
    assert!(status.success(), "operator exit: {status:?}");
    namespaces
        .delete(&namespace, &DeleteParams::default())
        .await
        .unwrap();
}
