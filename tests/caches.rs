//! The controllers' caches (kube reflector stores) keep no `managedFields` and no
//! `kubectl apply` copy of the last applied object (issue 7, Memory): the API server sends them
//! with every object, and on a small object they are most of it. Other annotations stay, except
//! on SlurmJobs, whose cache keeps no tenant bulk at all (issue 14: no script, no tenant
//! annotations). Runs the three real controllers (and the Pod watches they run) against the
//! in-memory API server, which writes `managedFields` as the real one does.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use fake_apiserver::FakeApiServer;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use slurm_operator::controller::context::Context;
use slurm_operator::controller::kit::LAST_APPLIED;
use slurm_operator::crd::{SlurmCluster, SlurmJob, SlurmNodeSet};
use slurm_operator::metrics::Metrics;
use tokio_util::sync::CancellationToken;

use common::e2e::MANAGER;

const NAMESPACE: &str = "caches";

async fn apply<K>(client: &kube::Client, name: &str, object: serde_json::Value) -> K
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), NAMESPACE);
    api.patch(name, &PatchParams::apply(MANAGER), &Patch::Apply(object))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caches_keep_no_managed_fields_or_last_applied_copy() {
    let api = FakeApiServer::start_with_crds(slurm_operator::crd::all()).await;
    let client = api.client();
    // Objects the controllers cannot act on (no Secret, no Slurm): only caching is tested.
    let annotations = json!({LAST_APPLIED: "{\"kind\":\"...the whole object...\"}", "team": "hpc"});
    // Cluster-scoped.
    let cluster: SlurmCluster = Api::<SlurmCluster>::all(client.clone())
        .patch(
            "c",
            &PatchParams::apply(MANAGER),
            &Patch::Apply(json!({
                "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmCluster", "metadata": {"name": "c", "annotations": annotations.clone()},
                "spec": {"endpoint": "http://127.0.0.1:9", "auth": {"token": {"secretRef": {"name": "none", "key": "token"}}}},
            })),
        )
        .await
        .unwrap();
    let job: SlurmJob = apply(
        &client,
        "j",
        json!({
            "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob", "metadata": {"name": "j", "annotations": annotations.clone()},
            "spec": {"clusterName": "c", "script": "#!/bin/sh\ntrue\n"},
        }),
    )
    .await;
    let nodeset: SlurmNodeSet = apply(
        &client,
        "n",
        json!({
            "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmNodeSet", "metadata": {"name": "n", "annotations": annotations.clone()},
            "spec": {"clusterName": "c", "replicas": 0, "template": {"spec": {"containers": [{"name": "slurmd", "image": "x"}]}}},
        }),
    )
    .await;
    for (what, fields) in [
        ("SlurmCluster", cluster.managed_fields().len()),
        ("SlurmJob", job.managed_fields().len()),
        ("SlurmNodeSet", nodeset.managed_fields().len()),
    ] {
        assert!(fields > 0, "the API server sends {what}'s managedFields");
    }

    let ctx = Context::new(client, Metrics::new());
    let shutdown = CancellationToken::new();
    let scope = Some(NAMESPACE);
    let (clusters, c) = slurm_operator::controller::cluster::run(ctx.clone(), shutdown.clone());
    let (jobs, j) = slurm_operator::controller::slurmjob::run(
        ctx.clone(),
        slurm_operator::controller::slurmjob::output::DEFAULT_IMAGE.to_owned(),
        scope,
        shutdown.clone(),
    );
    let (nodesets, n) =
        slurm_operator::controller::nodeset::run(ctx.clone(), scope, shutdown.clone());
    let drivers = tokio::spawn(async move {
        tokio::join!(c, j, n);
    });
    // Re-polled: kube's store readiness wakes only one waiter, the controller's own.
    let ready = || async {
        loop {
            let all = async {
                clusters.wait_until_ready().await.is_ok()
                    && jobs.wait_until_ready().await.is_ok()
                    && nodesets.wait_until_ready().await.is_ok()
            };
            if let Ok(all) = tokio::time::timeout(Duration::from_millis(250), all).await {
                return all;
            }
        }
    };
    let filled = tokio::time::timeout(Duration::from_secs(30), ready()).await;
    assert_eq!(filled, Ok(true), "the caches are filled");
    fn trimmed<K: ResourceExt>(objects: Vec<std::sync::Arc<K>>) -> Vec<(usize, Vec<String>)> {
        objects
            .iter()
            .map(|o| {
                (
                    o.managed_fields().len(),
                    o.annotations().keys().cloned().collect(),
                )
            })
            .collect()
    }
    let cached = [
        ("SlurmCluster", trimmed(clusters.state())),
        ("SlurmNodeSet", trimmed(nodesets.state())),
    ];
    for (what, objects) in cached {
        assert_eq!(
            objects,
            vec![(0, vec!["team".to_owned()])],
            "{what}: one cached object, without managedFields or {LAST_APPLIED}, other annotations kept"
        );
    }
    // SlurmJobs are tenants' and many: only `slurm.rs/` annotations stay, and no script
    // (issue 14; the rest is in `controller::slurmjob::tests::the_cache_keeps_no_script_…`).
    assert_eq!(
        trimmed(jobs.state()),
        vec![(0, vec![])],
        "SlurmJob: one cached object, without managedFields or any tenant annotation"
    );
    let cached = jobs.state()[0].object().unwrap();
    assert!(cached.spec.script.is_empty(), "no script cached");
    assert_eq!(cached.spec.cluster_name, "c", "the rest of the spec cached");
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(20), drivers)
        .await
        .expect("the controllers stop on shutdown")
        .unwrap();
}

/// The cordons (`controller::nodeset::cordons`) follow the Nodes through the API server's list
/// and watch: nothing known before the list, a cordon and an uncordon seen as they happen (each
/// told to the SlurmNodeSet controllers), a deleted node no longer known; `follow` ends at
/// shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordons_follow_the_nodes_through_list_and_watch() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Node;
    use slurm_operator::controller::nodeset::cordons::Cordons;
    use slurm_operator::controller::nodeset::plan::Host;

    let api = FakeApiServer::start().await;
    let client = api.client();
    let nodes: Api<Node> = Api::all(client.clone());
    for (name, unschedulable) in [("k1", true), ("k2", false)] {
        nodes
            .patch(
                name,
                &PatchParams::apply(MANAGER),
                &Patch::Apply(json!({
                    "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                    "spec": {"unschedulable": unschedulable},
                })),
            )
            .await
            .unwrap();
    }
    let cordons = std::sync::Arc::new(Cordons::default());
    assert_eq!(cordons.host(Some("k1")), Host::Unknown, "not listed yet");
    let mut changes = Box::pin(cordons.changes());
    let shutdown = CancellationToken::new();
    let follow =
        tokio::spawn(std::sync::Arc::clone(&cordons).follow(client.clone(), shutdown.clone()));
    // Each change is told; the host is then read as the planner reads it.
    let mut until = async |what: &str, want: [Host; 2]| {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let now = [cordons.host(Some("k1")), cordons.host(Some("k2"))];
            if now == want {
                return;
            }
            assert!(
                tokio::time::timeout_at(deadline, changes.next())
                    .await
                    .is_ok(),
                "{what}: no change told; hosts {now:?}"
            );
        }
    };
    until("listed", [Host::Cordoned("k1".into()), Host::Open]).await;

    let cordon = |on: bool| Patch::Merge(json!({"spec": {"unschedulable": on}}));
    nodes
        .patch("k2", &PatchParams::default(), &cordon(true))
        .await
        .unwrap();
    until(
        "k2 cordoned",
        [Host::Cordoned("k1".into()), Host::Cordoned("k2".into())],
    )
    .await;
    nodes
        .patch("k1", &PatchParams::default(), &cordon(false))
        .await
        .unwrap();
    until("k1 uncordoned", [Host::Open, Host::Cordoned("k2".into())]).await;
    nodes.delete("k2", &Default::default()).await.unwrap();
    until("k2 deleted", [Host::Open, Host::Unknown]).await;

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), follow)
        .await
        .expect("follow ends at shutdown")
        .unwrap();
}

/// Anyone who may create Pods in a namespace can label one like the operator's output Pods
/// (`slurm.rs/slurmjob`) or SlurmNodeSet pods (`slurm.rs/nodeset`) and make its `managedFields`
/// nest past serde_json's 128 levels (on a real API server by writing the entry itself; here by
/// a field nested so deep that the API server's own entry for it does). Read as Pods, or as
/// kube's metadata-only Pods, such a Pod fails every list page and watch event it is in: the
/// operator's Pod watches (`slurmjob::output_pod_watch` of whole Pods, `nodeset::pod_watch` of
/// metadata, which the controllers run), shared by all namespaces, would never fill, for any team. They list it
/// and the others, and see one made later, with no error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_pod_nested_too_deep_stops_no_pod_watch() {
    use futures::{StreamExt, TryStreamExt};
    use k8s_openapi::api::core::v1::Pod;
    use kube::core::PartialObjectMeta;
    use kube::runtime::watcher;
    use slurm_operator::controller::{nodeset, slurmjob};
    use slurm_operator::crd::pod_meta::PodMeta;

    let api = FakeApiServer::start().await;
    let client = api.client();
    // The request's `spec.x` nests this many objects, 126 levels with the body's own two (the
    // most serde_json reads is 127); its managed fields entry nests 133 levels in a list page.
    const LEVELS: usize = 124;
    let labels = json!({"slurm.rs/slurmjob": "j", "slurm.rs/nodeset": "n"});
    let create = async |name: &str, levels: usize| {
        let nested = (0..levels).fold(json!("x"), |inner, _| json!({ "x": inner }));
        // Its answer, the Pod, may not decode either: read as text.
        let request = kube::core::Request::new(format!("/api/v1/namespaces/{NAMESPACE}/pods"))
            .patch(
                name,
                &PatchParams::apply("tenant"),
                &Patch::Apply(json!({
                    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}], "x": nested},
                })),
            )
            .unwrap();
        client.request_text(request).await.unwrap();
    };
    create("deep", LEVELS).await;
    create("plain", 0).await;
    // The Pod as a tenant can make it: a Pod list, and kube's metadata-only one, fail on it.
    let too_deep = |what: &str, error: Option<kube::Error>| match error {
        Some(kube::Error::SerdeError(e)) if e.to_string().contains("recursion limit") => {}
        other => panic!("{what}: not refused as too deep: {other:?}"),
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    too_deep("Pods", pods.list(&Default::default()).await.err());
    let metadata: Api<PartialObjectMeta<Pod>> = Api::namespaced(client.clone(), NAMESPACE);
    too_deep(
        "metadata-only Pods",
        metadata.list_metadata(&Default::default()).await.err(),
    );

    let mut later = 0;
    for namespace in [Some(NAMESPACE), None] {
        let watches = [
            (
                "output Pods",
                // Whole Pods (their phase), the metadata compared as for the other watch.
                slurmjob::output_pod_watch(client.clone(), namespace)
                    .map_ok(|event| match event {
                        watcher::Event::Init => watcher::Event::Init,
                        watcher::Event::InitDone => watcher::Event::InitDone,
                        watcher::Event::InitApply(pod) => watcher::Event::InitApply(PodMeta {
                            metadata: pod.metadata,
                        }),
                        watcher::Event::Apply(pod) => watcher::Event::Apply(PodMeta {
                            metadata: pod.metadata,
                        }),
                        watcher::Event::Delete(pod) => watcher::Event::Delete(PodMeta {
                            metadata: pod.metadata,
                        }),
                    })
                    .boxed(),
            ),
            (
                "SlurmNodeSet pods",
                nodeset::pod_watch(client.clone(), namespace).boxed(),
            ),
        ];
        for (what, mut watch) in watches {
            let mut next = async || {
                let event = tokio::time::timeout(Duration::from_secs(20), watch.next())
                    .await
                    .unwrap_or_else(|_| panic!("{what} ({namespace:?}): nothing for 20 s"))
                    .unwrap_or_else(|| panic!("{what} ({namespace:?}): the watch ended"));
                event.unwrap_or_else(|e| panic!("{what} ({namespace:?}): {e}"))
            };
            let mut listed = Vec::new();
            loop {
                match next().await {
                    watcher::Event::InitApply(pod) => listed.push(pod.metadata.name.unwrap()),
                    watcher::Event::InitDone => break,
                    _ => {}
                }
            }
            listed.sort();
            listed.retain(|name| !name.starts_with("later-"));
            assert_eq!(listed, ["deep", "plain"], "{what} ({namespace:?})");
            // One made while it watches comes as an event.
            later += 1;
            let name = format!("later-{later}");
            create(&name, LEVELS).await;
            match next().await {
                watcher::Event::Apply(pod) => {
                    assert_eq!(pod.metadata.name, Some(name), "{what} ({namespace:?})")
                }
                other => panic!("{what} ({namespace:?}): {other:?}"),
            }
        }
    }
}
