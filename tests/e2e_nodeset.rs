//! End to end for NodeSets against a real Kubernetes API server (no kubelet or scheduler needed):
//! the operator binary runs as a child process. Runs only when `KUBECONFIG` is set.
//!
//! A SlurmNodeSet without a Slurm (none is involved): without its SlurmCluster it is refused
//! (`ClusterNotFound`); with one that does not list its namespace in `nodeSetNamespaces`, too
//! (`NodeSetNotAllowed`); allowed but without a view of Slurm's nodes it creates no pod (a name is
//! given out only once Slurm is seen not to hold it), and the scale subresource still works.
//! Its PodDisruptionBudget, changed by someone else, is put back. Deleted, it waits behind its
//! finalizer while Slurm cannot be seen, and goes once its
//! namespace is no longer allowed; then the SlurmCluster goes. The pods' completed slurmd args are checked by
//! `controller::nodeset::tests` and `tests/nodeset.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
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

    // The set's PodDisruptionBudget (minAvailable: all of the busy pods) is put back by the
    // operator's exact merge patch when someone changes it, the same object (its uid).
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &namespace);
    let all_busy = Some(IntOrString::Int(i32::MAX));
    let made = eventually(
        "the PodDisruptionBudget",
        Duration::from_secs(60),
        || async {
            let pdb = pdbs.get_opt("cpu").await.unwrap()?;
            (pdb.spec.as_ref()?.min_available == all_busy).then_some(pdb)
        },
    )
    .await;
    pdbs.patch(
        "cpu",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": null, "maxUnavailable": 0}})),
    )
    .await
    .expect("change the PodDisruptionBudget");
    nodesets
        .patch_scale(
            "cpu",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("scale to 2 (a reconcile)");
    eventually(
        "the PodDisruptionBudget put back",
        Duration::from_secs(60),
        || async {
            let pdb = pdbs.get_opt("cpu").await.unwrap()?;
            let spec = pdb.spec.as_ref()?;
            (spec.min_available == all_busy
                && spec.max_unavailable.is_none()
                && pdb.metadata.uid == made.metadata.uid)
                .then_some(())
        },
    )
    .await;

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

/// What the API server itself admits of a SlurmNodeSet's values the operator must decode (the
/// bounds the CRD sets for that, in src/crd/mod.rs): `maxUnavailable` by its CEL rule, an
/// int-or-string probe `port` by `minimum`/`maximum`, a date-time by its pattern. Server-side
/// dry runs: nothing is stored.
#[tokio::test]
async fn the_api_server_refuses_what_the_operator_could_not_read() {
    if std::env::var_os("KUBECONFIG").is_none() {
        eprintln!("skipped: KUBECONFIG is not set; this test needs a real Kubernetes API server");
        return;
    }
    slurm_operator::tls::install_crypto_provider();
    let client = kube::Client::try_default()
        .await
        .expect("a client from KUBECONFIG");
    apply_crds(&client).await;
    let nodesets: Api<SlurmNodeSet> = Api::namespaced(client.clone(), "default");
    let dry_run = PatchParams::apply(MANAGER).force().dry_run();
    let try_spec = |extra: serde_json::Value| {
        let nodesets = nodesets.clone();
        let dry_run = dry_run.clone();
        async move {
            let mut spec = json!({
                "clusterName": "main",
                "replicas": 1,
                "template": {"spec": {"containers": [{"name": "slurmd", "image": "slurmd:24.11"}]}},
            });
            for (key, value) in extra.as_object().unwrap() {
                spec[key] = value.clone();
            }
            let object = json!({
                "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmNodeSet",
                "metadata": {"name": "e2e-admission"}, "spec": spec,
            });
            nodesets
                .patch("e2e-admission", &dry_run, &Patch::Apply(object))
                .await
                .map(|stored| {
                    // What the server admitted, the operator decodes (the typed answer did).
                    stored.spec.replicas
                })
                .map_err(|e| match e {
                    kube::Error::Api(s) => (s.code, s.message),
                    other => panic!("not an API refusal: {other}"),
                })
        }
    };
    let probe = |port: serde_json::Value| {
        json!({"template": {"spec": {"containers": [{
            "name": "slurmd", "image": "slurmd:24.11",
            "livenessProbe": {"httpGet": {"port": port}},
        }]}}})
    };
    let created_at = |time: &str| {
        json!({"template": {
            "metadata": {"creationTimestamp": time},
            "spec": {"containers": [{"name": "slurmd", "image": "slurmd:24.11"}]},
        }})
    };
    let rolling = |value: serde_json::Value| json!({"updateStrategy": {"rollingUpdate": {"maxUnavailable": value}}});
    for admitted in [
        json!({}),
        rolling(json!(2)),
        rolling(json!("25%")),
        probe(json!(8080)),
        probe(json!("http")),
        created_at("2024-01-01T00:00:00Z"),
    ] {
        let answer = try_spec(admitted.clone()).await;
        assert!(answer.is_ok(), "{admitted}: {answer:?}");
    }
    for (refused, says) in [
        (rolling(json!(0)), "maxUnavailable"),
        (rolling(json!("0%")), "maxUnavailable"),
        (rolling(json!("101%")), "maxUnavailable"),
        (probe(json!(0)), "port"),
        (probe(json!(70000)), "port"),
        (probe(json!(3_000_000_000_i64)), "port"),
        (created_at("2024-01-01T00:00:00+26:00"), "creationTimestamp"),
        (created_at("9999-12-31T00:00:00Z"), "creationTimestamp"),
    ] {
        match try_spec(refused.clone()).await {
            Err((422, message)) => assert!(message.contains(says), "{refused}: {message}"),
            other => panic!("{refused}: admitted or refused otherwise: {other:?}"),
        }
    }
}
