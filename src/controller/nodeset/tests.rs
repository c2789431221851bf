//! Mocked-API scenarios for the NodeSet reconcile: each API call asserted in order.

use std::sync::Arc;

use http::{Method, Response, StatusCode};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
use kube::client::Body;
use serde_json::{Value, json};

use super::*;
use crate::controller::test_support::ApiServerVerifier;
use crate::crd::{NodeSetSlurm, NodeSetSpec, UpdateStrategy};

fn ok(body: &Value) -> Response<Body> {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

fn nodeset(replicas: i32) -> NodeSet {
    let mut ns = NodeSet::new(
        "cpu",
        NodeSetSpec {
            cluster_ref: "main".into(),
            replicas,
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "slurmd".into(),
                        image: Some("slurmd:24.11".into()),
                        command: Some(vec!["slurmd".into()]),
                        args: Some(
                            ["-D", "--conf-server", "ctld:6817"]
                                .map(String::from)
                                .to_vec(),
                        ),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            slurm: NodeSetSlurm {
                features: vec!["cpu".into()],
                cpus: Some(2),
                ..NodeSetSlurm::default()
            },
            update_strategy: UpdateStrategy::default(),
            scale_in: None,
            min_ready_seconds: 0,
        },
    );
    ns.metadata.namespace = Some("hpc".into());
    ns.metadata.uid = Some("uid-1".into());
    ns.metadata.generation = Some(1);
    ns
}

fn existing_pod(set: &NodeSet, ordinal: u32) -> Pod {
    let mut pod = pods::build_pod(set, ordinal, &pods::template_hash(set));
    pod.metadata.uid = Some(format!("pod-uid-{ordinal}"));
    pod.spec.as_mut().unwrap().node_name = Some("k8s-1".into());
    pod
}

async fn expect_list_pods(api: &mut ApiServerVerifier, items: Vec<Pod>) {
    let (call, send) = api.next().await;
    assert_eq!(call.method, Method::GET, "{call:?}");
    assert_eq!(call.path, "/api/v1/namespaces/hpc/pods");
    assert!(
        call.has_query("labelSelector", "slurm.rs%2Fnodeset%3Dcpu"),
        "{call:?}"
    );
    send.send_response(ok(
        &json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}),
    ));
}

async fn expect_pod_created(api: &mut ApiServerVerifier, name: &str) -> Value {
    let (call, send) = api.next().await;
    assert_eq!(call.method, Method::POST, "{call:?}");
    assert_eq!(call.path, "/api/v1/namespaces/hpc/pods");
    assert_eq!(call.body["metadata"]["name"], name);
    send.send_response(ok(&call.body));
    call.body
}

async fn expect_pdb(api: &mut ApiServerVerifier) {
    let (call, send) = api.next().await;
    assert_eq!(call.method, Method::PATCH, "{call:?}");
    assert_eq!(
        call.path,
        "/apis/policy/v1/namespaces/hpc/poddisruptionbudgets/cpu"
    );
    assert_eq!(call.content_type, "application/apply-patch+yaml");
    assert_eq!(call.body["spec"]["maxUnavailable"], 0);
    assert_eq!(
        call.body["spec"]["selector"]["matchLabels"]["slurm.rs/busy"],
        "true"
    );
    send.send_response(ok(&call.body));
}

async fn expect_status(api: &mut ApiServerVerifier, set: &NodeSet) -> NodeSetStatus {
    let (call, send) = api.next().await;
    assert_eq!(call.method, Method::PATCH, "{call:?}");
    assert_eq!(
        call.path,
        "/apis/slurm.rs/v1alpha1/namespaces/hpc/nodesets/cpu/status"
    );
    assert_eq!(call.content_type, "application/apply-patch+yaml");
    let status: NodeSetStatus = serde_json::from_value(call.body["status"].clone()).unwrap();
    let mut answer = set.clone();
    answer.status = Some(status.clone());
    send.send_response(ok(&serde_json::to_value(&answer).unwrap()));
    status
}

#[tokio::test]
async fn scale_out_creates_pods_with_completed_slurmd_args() {
    let (ctx, mut api) = Context::test();
    let set = nodeset(2);
    let scenario = tokio::spawn(async move {
        expect_list_pods(&mut api, vec![]).await;
        let pod = expect_pod_created(&mut api, "cpu-0").await;
        assert_eq!(
            pod["spec"]["containers"][0]["args"],
            json!([
                "-D",
                "--conf-server",
                "ctld:6817",
                "-Z",
                "-N",
                "cpu-0",
                "--conf",
                "Features=cpu CPUs=2"
            ])
        );
        assert_eq!(pod["metadata"]["labels"]["slurm.rs/nodeset"], "cpu");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["controller"], true);
        expect_pod_created(&mut api, "cpu-1").await;
        expect_pdb(&mut api).await;
        let set = nodeset(2);
        let status = expect_status(&mut api, &set).await;
        assert_eq!(status.selector.as_deref(), Some("slurm.rs/nodeset=cpu"));
        assert_eq!(status.replicas, 0);
        api.expect_no_more_calls().await;
    });
    let action = reconcile(Arc::new(set), Arc::new(ctx)).await.unwrap();
    assert_eq!(action, Requeue::requeue(WAIT_RESYNC));
    scenario.await.unwrap();
}

#[tokio::test]
async fn scale_in_without_slurm_changes_nothing_destructive() {
    let (ctx, mut api) = Context::test();
    let set = nodeset(1);
    let pods = vec![existing_pod(&set, 0), existing_pod(&set, 1)];
    let scenario = tokio::spawn(async move {
        expect_list_pods(&mut api, pods).await;
        // No DELETE, no drain: the Cluster has no client, so nothing is known about Slurm.
        expect_pdb(&mut api).await;
        let status = expect_status(&mut api, &nodeset(1)).await;
        assert_eq!(status.replicas, 2);
        let draining = condition::find(&status.conditions, CONDITION_DRAINING).unwrap();
        assert_eq!(draining.status, "True");
        assert!(draining.message.contains("cpu-1"), "{}", draining.message);
        api.expect_no_more_calls().await;
    });
    let action = reconcile(Arc::new(set), Arc::new(ctx)).await.unwrap();
    assert_eq!(action, Requeue::requeue(WAIT_RESYNC));
    scenario.await.unwrap();
}

#[tokio::test]
async fn pods_of_another_owner_are_ignored() {
    let (ctx, mut api) = Context::test();
    let set = nodeset(1);
    let mut stranger = existing_pod(&set, 0);
    stranger.metadata.owner_references.as_mut().unwrap()[0].uid = "other".into();
    let scenario = tokio::spawn(async move {
        expect_list_pods(&mut api, vec![stranger]).await;
        // cpu-0 is taken by a pod we do not own: the next free ordinal is used.
        expect_pod_created(&mut api, "cpu-1").await;
        expect_pdb(&mut api).await;
        expect_status(&mut api, &nodeset(1)).await;
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(set), Arc::new(ctx)).await.unwrap();
    scenario.await.unwrap();
}
