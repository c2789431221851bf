//! Mocked-API scenarios for the SlurmNodeSet reconcile: each API call asserted in order.

use std::sync::Arc;
use std::time::Instant;

use http::{Method, Response, StatusCode};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
use kube::client::Body;
use serde_json::{Value, json};

use super::*;
use crate::controller::test_support::{
    ApiServerVerifier, local_slurm, not_found, register_local_cluster, slurm_node_script,
};
use crate::crd::{FINALIZER, NodeSetSlurm, NodeSetSlurmCounts, SlurmNodeSetSpec, UpdateStrategy};

fn ok(body: &Value) -> Response<Body> {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

fn nodeset(replicas: i32) -> SlurmNodeSet {
    nodeset_named("cpu", replicas)
}

fn nodeset_named(name: &str, replicas: i32) -> SlurmNodeSet {
    let mut ns = SlurmNodeSet::new(
        name,
        SlurmNodeSetSpec {
            cluster_name: "main".into(),
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
    ns.metadata.finalizers = Some(vec![FINALIZER.into()]);
    ns
}

/// `set` being deleted since `ago` (a time the finalizer holds it).
fn deleted(mut set: SlurmNodeSet, ago: chrono::TimeDelta) -> SlurmNodeSet {
    set.metadata.deletion_timestamp = crate::crd::time::from_utc(Utc::now() - ago);
    set
}

/// The pod and node name of `ordinal` in set `set` of namespace `hpc`.
fn pod_name(set: &str, ordinal: u32) -> String {
    pods::pod_name(&pods::node_prefix("hpc", set).unwrap(), ordinal)
}

fn existing_pod(set: &SlurmNodeSet, ordinal: u32) -> Pod {
    let prefix = pods::node_prefix("hpc", &set.name_any()).unwrap();
    let mut pod = pods::build_pod(set, &prefix, ordinal, &pods::template_hash(set));
    pod.metadata.uid = Some(format!("pod-uid-{ordinal}"));
    pod.spec.as_mut().unwrap().node_name = Some("k8s-1".into());
    pod
}

/// SlurmCluster `main` admitting SlurmNodeSets of `namespaces`.
fn cluster(namespaces: &[&str]) -> SlurmCluster {
    serde_json::from_value(json!({
        "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmCluster",
        "metadata": {"name": "main"},
        "spec": {"endpoint": "https://s:6820", "auth": {"jwt": {"keySecretRef": {"name": "k"}}},
                 "nodeSetNamespaces": namespaces},
    }))
    .unwrap()
}

/// The GET of SlurmCluster `main`, answered with `nodeSetNamespaces`.
async fn expect_get_cluster(api: &mut ApiServerVerifier, node_set_namespaces: &[&str]) {
    expect_get_cluster_then(api, node_set_namespaces, || {}).await;
}

/// [`expect_get_cluster`], calling `meanwhile` before the answer.
async fn expect_get_cluster_then(
    api: &mut ApiServerVerifier,
    node_set_namespaces: &[&str],
    meanwhile: impl FnOnce(),
) {
    let (call, send) = api.next().await;
    assert_eq!(call.method, Method::GET, "{call:?}");
    assert_eq!(call.path, "/apis/slurm.rs/v1alpha1/slurmclusters/main");
    meanwhile();
    send.send_response(ok(&json!({
        "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmCluster",
        "metadata": {"name": "main", "uid": "cluster-uid"},
        "spec": {
            "endpoint": "http://slurmrestd:6820", "allowInsecureHttp": true,
            "auth": {"jwt": {"keySecretRef": {"name": "k"}}},
            "nodeSetNamespaces": node_set_namespaces,
        },
    })));
}

async fn expect_list_pods(api: &mut ApiServerVerifier, items: Vec<Pod>) {
    expect_list_pods_of(api, "cpu", items).await;
}

async fn expect_list_pods_of(api: &mut ApiServerVerifier, set: &str, items: Vec<Pod>) {
    expect_pods_page(api, set, None, items, None).await;
}

/// One page of the set's pods: asked for [`POD_LIST_PAGE`] at most, after `after` (a continue
/// token), answered with `items` and `next` as the next page's token.
async fn expect_pods_page(
    api: &mut ApiServerVerifier,
    set: &str,
    after: Option<&str>,
    items: Vec<Pod>,
    next: Option<&str>,
) {
    expect_pods_page_in(api, "hpc", set, after, items, next).await;
}

/// The first and only page of set `cpu`'s pods in `namespace`.
async fn expect_list_pods_in(api: &mut ApiServerVerifier, namespace: &str, items: Vec<Pod>) {
    expect_pods_page_in(api, namespace, "cpu", None, items, None).await;
}

async fn expect_pods_page_in(
    api: &mut ApiServerVerifier,
    namespace: &str,
    set: &str,
    after: Option<&str>,
    items: Vec<Pod>,
    next: Option<&str>,
) {
    let (call, send) = api.next().await;
    assert_eq!(call.method, Method::GET, "{call:?}");
    assert_eq!(call.path, format!("/api/v1/namespaces/{namespace}/pods"));
    assert!(
        call.has_query("labelSelector", &format!("slurm.rs%2Fnodeset%3D{set}")),
        "{call:?}"
    );
    assert!(
        call.has_query("limit", &POD_LIST_PAGE.to_string()),
        "paged: {call:?}"
    );
    match after {
        Some(token) => assert!(call.has_query("continue", token), "{call:?}"),
        None => assert!(!call.query.contains("continue="), "{call:?}"),
    }
    let metadata = match next {
        Some(token) => json!({"continue": token}),
        None => json!({}),
    };
    send.send_response(ok(
        &json!({"apiVersion": "v1", "kind": "PodList", "metadata": metadata, "items": items}),
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
    expect_pdb_of(api, "cpu").await;
}

/// None there yet: read, then created (never applied over whatever may have come since).
async fn expect_pdb_of(api: &mut ApiServerVerifier, set: &str) {
    expect_get_pdb(api, set, None).await;
    let (call, send) = api.next().await;
    expect_pdb_body(&call, Method::POST, set);
    assert_eq!(
        call.path,
        "/apis/policy/v1/namespaces/hpc/poddisruptionbudgets"
    );
    assert!(call.has_query("fieldManager", "slurm-operator"), "{call:?}");
    send.send_response(
        Response::builder()
            .status(StatusCode::CREATED)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&call.body).unwrap()))
            .unwrap(),
    );
}

/// `call` writes the set's PodDisruptionBudget as wanted: the set's, `minAvailable: 2147483647`
/// over its busy pods (no `maxUnavailable`, which the disruption controller measures against
/// the set's replicas).
fn expect_pdb_body(call: &crate::controller::test_support::Call, method: Method, set: &str) {
    assert_eq!(call.method, method, "{call:?}");
    assert_eq!(call.body["metadata"]["name"], set, "{:#}", call.body);
    assert_eq!(call.body["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    assert_eq!(
        call.body["metadata"]["ownerReferences"][0]["controller"],
        true
    );
    assert_eq!(call.body["spec"]["minAvailable"], i32::MAX);
    assert_eq!(call.body["spec"].get("maxUnavailable"), None);
    assert_eq!(
        call.body["spec"]["selector"]["matchLabels"],
        json!({"slurm.rs/nodeset": set, "slurm.rs/busy": "true"})
    );
}

/// The read of the set's PodDisruptionBudget, answered with `existing` (or 404).
async fn expect_get_pdb(api: &mut ApiServerVerifier, set: &str, existing: Option<Value>) {
    let (call, send) = api.next().await;
    assert_eq!(call.method, Method::GET, "{call:?}");
    assert_eq!(
        call.path,
        format!("/apis/policy/v1/namespaces/hpc/poddisruptionbudgets/{set}")
    );
    send.send_response(match existing {
        Some(pdb) => ok(&pdb),
        None => not_found("poddisruptionbudgets", set),
    });
}

async fn expect_status(api: &mut ApiServerVerifier, set: &SlurmNodeSet) -> SlurmNodeSetStatus {
    let (call, send) = api.next().await;
    assert_eq!(call.method, Method::PATCH, "{call:?}");
    assert_eq!(
        call.path,
        format!(
            "/apis/slurm.rs/v1alpha1/namespaces/{}/slurmnodesets/{}/status",
            set.namespace().unwrap(),
            set.name_any()
        )
    );
    assert_eq!(call.content_type, "application/apply-patch+yaml");
    let status: SlurmNodeSetStatus = serde_json::from_value(call.body["status"].clone()).unwrap();
    let mut answer = set.clone();
    answer.status = Some(status.clone());
    send.send_response(ok(&serde_json::to_value(&answer).unwrap()));
    status
}

/// A round that finds this replica no longer leading (the Lease lost while it ran) writes
/// neither a refusal's status nor the PodDisruptionBudget: the new leader's are the ones that
/// count.
#[tokio::test]
async fn a_deposed_replica_writes_no_refusal_and_no_pdb() {
    for refused in [true, false] {
        let (mut ctx, mut api) = Context::test();
        let (leading, state) = tokio::sync::watch::channel(true);
        ctx.leadership = crate::leader::Leadership::follow(state);
        let scenario = tokio::spawn(async move {
            // The Lease is lost while the round reads the SlurmCluster.
            let lost = || {
                leading.send(false).unwrap();
            };
            let allowed: &[&str] = if refused { &["other"] } else { &["hpc"] };
            expect_get_cluster_then(&mut api, allowed, lost).await;
            if !refused {
                expect_list_pods(&mut api, vec![]).await;
            }
            api.expect_no_more_calls().await;
            leading
        });
        let result = reconcile(Arc::new(nodeset(2)), Arc::new(ctx)).await;
        assert!(
            matches!(result, Err(Error::NotLeader)),
            "{refused}: {result:?}"
        );
        scenario.await.unwrap();
    }
}

/// Without a view of Slurm no pod is created: a name is given out only once Slurm is seen not
/// to hold it (the issue: pods made while the cluster was not Ready took static nodes' names).
#[tokio::test]
async fn scale_out_waits_for_a_view_of_slurm() {
    let (ctx, mut api) = Context::test();
    let set = nodeset(2);
    let scenario = tokio::spawn(async move {
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods(&mut api, vec![]).await;
        expect_pdb(&mut api).await;
        let set = nodeset(2);
        let status = expect_status(&mut api, &set).await;
        assert_eq!(status.selector.as_deref(), Some("slurm.rs/nodeset=cpu"));
        assert_eq!(status.replicas, 0);
        let owned = condition::find(&status.conditions, CONDITION_NODES_OWNED).unwrap();
        assert_eq!(owned.status, "Unknown");
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(set), Arc::new(ctx)).await.unwrap();
    scenario.await.unwrap();
}

/// A namespace the SlurmCluster does not list, or a missing SlurmCluster: `Ready=False` with
/// the reason, one Warning Event, and nothing else (no pod listed, created or deleted); the same
/// refusal again writes nothing.
#[tokio::test]
async fn a_namespace_the_cluster_does_not_allow_gets_nothing_but_a_condition() {
    for (allowed, reason) in [
        (Some(&["other"][..]), "NodeSetNotAllowed"),
        (Some(&[][..]), "NodeSetNotAllowed"),
        (None, "ClusterNotFound"),
    ] {
        let (ctx, mut api) = Context::test();
        let ctx = Arc::new(ctx);
        let set = nodeset(2);
        let scenario = tokio::spawn(async move {
            match allowed {
                Some(allowed) => expect_get_cluster(&mut api, allowed).await,
                None => {
                    let (call, send) = api.next().await;
                    assert_eq!(call.path, "/apis/slurm.rs/v1alpha1/slurmclusters/main");
                    send.send_response(
                        Response::builder()
                            .status(StatusCode::NOT_FOUND)
                            .header("content-type", "application/json")
                            .body(Body::from(
                                serde_json::to_vec(&json!({
                                    "kind": "Status", "apiVersion": "v1", "status": "Failure",
                                    "reason": "NotFound", "code": 404, "message": "not found",
                                }))
                                .unwrap(),
                            ))
                            .unwrap(),
                    );
                }
            }
            let status = expect_status(&mut api, &nodeset(2)).await;
            let ready = condition::find(&status.conditions, condition::READY).unwrap();
            assert_eq!(
                (ready.status.as_str(), ready.reason.as_str()),
                ("False", reason)
            );
            assert!(ready.message.contains("\"main\""), "{}", ready.message);
            // kstatus: stalled until something changes, not reconciling.
            let stalled = condition::find(&status.conditions, condition::STALLED).unwrap();
            assert_eq!(
                (stalled.status.as_str(), stalled.reason.as_str()),
                ("True", reason)
            );
            assert!(condition::find(&status.conditions, condition::RECONCILING).is_none());
            expect_nodeset_event(&mut api, "cpu", reason).await;
            api.expect_no_more_calls().await;
            (api, status)
        });
        let action = reconcile(Arc::new(set), Arc::clone(&ctx)).await.unwrap();
        assert_eq!(action, controller::Action::await_change());
        let (mut api, status) = scenario.await.unwrap();
        // Refused again: no write, no Event.
        let mut again = nodeset(2);
        again.status = Some(status);
        let scenario = tokio::spawn(async move {
            match allowed {
                Some(allowed) => expect_get_cluster(&mut api, allowed).await,
                None => {
                    let (_, send) = api.next().await;
                    send.send_response(not_found("slurmclusters", "main"));
                }
            }
            api.expect_no_more_calls().await;
        });
        reconcile(Arc::new(again), ctx).await.unwrap();
        scenario.await.unwrap();
    }
}

#[test]
fn admission_table() {
    let long = "a".repeat(pods::MAX_SET_NAME + 1);
    // (namespace, set name, its SlurmCluster, the prefix or the refusal's reason)
    type Case<'a> = (
        &'a str,
        &'a str,
        Option<SlurmCluster>,
        Result<String, &'a str>,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "hpc",
            "cpu",
            Some(cluster(&["hpc"])),
            Ok(pods::node_prefix("hpc", "cpu").unwrap()),
        ),
        (
            "hpc",
            "cpu",
            Some(cluster(&["x", "hpc"])),
            Ok(pods::node_prefix("hpc", "cpu").unwrap()),
        ),
        ("hpc", "cpu", Some(cluster(&[])), Err("NodeSetNotAllowed")),
        (
            "team-a",
            "cpu",
            Some(cluster(&["hpc"])),
            Err("NodeSetNotAllowed"),
        ),
        ("hpc", "cpu", None, Err("ClusterNotFound")),
        ("hpc", &long, Some(cluster(&["hpc"])), Err("InvalidName")),
        ("hpc", "cpu.v2", Some(cluster(&["hpc"])), Err("InvalidName")),
        // Not allowed wins: nothing about the name is said to a namespace that may not run sets.
        (
            "team-a",
            "cpu.v2",
            Some(cluster(&["hpc"])),
            Err("NodeSetNotAllowed"),
        ),
    ];
    for (namespace, name, cluster, want) in cases {
        let got = admission(namespace, name, "main", cluster.as_ref()).map_err(|r| r.reason);
        assert_eq!(got, want, "{namespace}/{name}");
    }
    // The message says what to change, to whom.
    let refusal = admission("team-a", "cpu", "main", Some(&cluster(&["hpc"]))).unwrap_err();
    assert_eq!(
        refusal.message,
        "namespace \"team-a\" may not run SlurmNodeSets for SlurmCluster \"main\": it is not in \
         the SlurmCluster's spec.nodeSetNamespaces; ask the platform admin to add it there"
    );
}

#[tokio::test]
async fn scale_in_without_slurm_changes_nothing_destructive() {
    let (ctx, mut api) = Context::test();
    let set = nodeset(1);
    let pods = vec![existing_pod(&set, 0), existing_pod(&set, 1)];
    let scenario = tokio::spawn(async move {
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods(&mut api, pods).await;
        // No DELETE, no drain: the SlurmCluster has no client, so nothing is known about Slurm.
        expect_pdb(&mut api).await;
        let status = expect_status(&mut api, &nodeset(1)).await;
        assert_eq!(status.replicas, 2);
        let draining = condition::find(&status.conditions, CONDITION_DRAINING).unwrap();
        assert_eq!(draining.status, "True");
        assert!(
            draining.message.contains(&pod_name("cpu", 1)),
            "{}",
            draining.message
        );
        api.expect_no_more_calls().await;
    });
    let action = reconcile(Arc::new(set), Arc::new(ctx)).await.unwrap();
    assert_eq!(action, controller::Action::requeue(WAIT_RESYNC));
    scenario.await.unwrap();
}

async fn expect_pod_patch(api: &mut ApiServerVerifier, pod: &str, status: bool) -> Value {
    let (call, send) = api.next().await;
    assert_eq!(call.method, Method::PATCH, "{call:?}");
    let suffix = if status { "/status" } else { "" };
    assert_eq!(
        call.path,
        format!("/api/v1/namespaces/hpc/pods/{pod}{suffix}"),
        "{call:?}"
    );
    let want = if status {
        "application/strategic-merge-patch+json"
    } else {
        "application/merge-patch+json"
    };
    assert_eq!(call.content_type, want, "{call:?}");
    send.send_response(ok(
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": "hpc"}}),
    ));
    call.body
}

/// The `SlurmNodeState` condition patch of `pod`: returns its reason.
async fn expect_node_condition(api: &mut ApiServerVerifier, pod: &str) -> String {
    let body = expect_pod_patch(api, pod, true).await;
    let condition = &body["status"]["conditions"][0];
    assert_eq!(condition["type"], pods::CONDITION_NODE_STATE, "{body:#}");
    condition["reason"].as_str().unwrap().to_owned()
}

async fn expect_nodeset_event(api: &mut ApiServerVerifier, set: &str, reason: &str) -> Value {
    expect_nodeset_event_in(api, "hpc", set, reason).await
}

async fn expect_nodeset_event_in(
    api: &mut ApiServerVerifier,
    namespace: &str,
    set: &str,
    reason: &str,
) -> Value {
    let (call, send) = api.next().await;
    assert_eq!(call.method, Method::POST, "{call:?}");
    assert_eq!(
        call.path,
        format!("/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    );
    assert_eq!(call.body["reason"], reason, "{:#}", call.body);
    assert_eq!(call.body["regarding"]["kind"], "SlurmNodeSet");
    assert_eq!(call.body["regarding"]["name"], set);
    send.send_response(
        Response::builder()
            .status(StatusCode::CREATED)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&call.body).unwrap()))
            .unwrap(),
    );
    call.body
}

/// Stops the dynamic slurmd (deleting its record) and cancels the job, even when the test fails.
struct SlurmCleanup {
    slurm: std::collections::HashMap<String, String>,
    node: String,
    job: Option<(SlurmClient, u32)>,
}

impl Drop for SlurmCleanup {
    fn drop(&mut self) {
        if let Some((client, job)) = self.job.take() {
            // Its own runtime: Drop may run inside the test's.
            let _ = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(client.cancel_job(job))
            })
            .join();
        }
        slurm_node_script(&self.slurm, &["stop", &self.node, "--delete"]);
    }
}

/// Wait until the SlurmCluster's index (`main` in `hpc`) satisfies `ok` on a fresh node list.
async fn wait_index(
    ctx: &Context,
    what: &str,
    ok: impl Fn(&crate::state::index::ClusterState) -> bool,
) {
    let cluster = ObjectRef::<SlurmCluster>::new("main");
    let handle = ctx.clusters.get(&cluster).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let state = Arc::clone(&handle.index.borrow());
        let view = SlurmView {
            state: Some(&state),
            now: Utc::now(),
            had_view: false,
        };
        if view.trusted().is_some_and(&ok) {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Scale-in with a registered client for the real local Slurm: the victim's node (a dynamic
/// slurmd standing in for the pod) runs a job, so the reconcile only drains it (no pod DELETE),
/// labels its pod busy and projects the node state; while the job runs it still waits; once the
/// job is gone and the node drained, the pod is deleted with a UID precondition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_in_with_slurm_drains_then_deletes_only_once_drained() {
    let Some(slurm) = local_slurm() else { return };
    let (ctx, mut api) = Context::test();
    let ctx = Arc::new(ctx);
    let set_name = format!("mk-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let (keep, victim) = (pod_name(&set_name, 0), pod_name(&set_name, 1));
    // Only the victim's slurmd runs: the kept pod stays unregistered (cheap, and still projected).
    // It registers with the set's owner record, as the pod's slurmd would.
    slurm_node_script(
        &slurm,
        &[
            "start",
            &victim,
            "--conf",
            &format!("CPUs=1 RealMemory=500 Feature={set_name} Weight=1000"),
            "--extra",
            &crate::slurm::node_owner::NodeOwner::new("hpc", &set_name).to_extra(),
        ],
    );
    let mut cleanup = SlurmCleanup {
        slurm: slurm.clone(),
        node: victim.clone(),
        job: None,
    };
    let client = register_local_cluster(&ctx, &slurm, "hpc", "main").await;
    let job = client
        .submit_job(&crate::slurm::types::SubmitRequest {
            script: "#!/bin/sh\nsleep 300\n".into(),
            name: Some(format!("{set_name}-job")),
            partition: Some(slurm["SLURM_PARTITION"].clone()),
            working_directory: "/tmp".into(),
            environment: [("PATH".to_owned(), "/usr/bin:/bin".to_owned())].into(),
            constraints: Some(set_name.clone()),
            ..Default::default()
        })
        .await
        .unwrap()
        .job_id;
    cleanup.job = Some((client.clone(), job));
    // Other tests' jobs may use the node first (it is in the shared partition): wait for ours.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let records = client.job(job).await.unwrap();
        let running = records.first().is_some_and(|j| {
            j.state.base == crate::slurm::types::JobBaseState::Running
                && j.nodes.as_deref() == Some(victim.as_str())
        });
        if running {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "job {job} never ran: {records:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    wait_index(&ctx, "the job running on the victim", |s| {
        s.node_jobs.get(&victim).is_some_and(|j| j.running > 0)
            && s.nodes.get(&victim).is_some_and(|n| n.state.is_busy())
    })
    .await;

    let set = nodeset_named(&set_name, 1);
    let mut pod0 = existing_pod(&set, 0);
    // A high deletion cost keeps pod 0, so the busy pod 1 is the victim.
    pod0.metadata.annotations = Some(
        [(
            pods::ANNOTATION_POD_DELETION_COST.to_owned(),
            "100".to_owned(),
        )]
        .into(),
    );
    let pod1 = existing_pod(&set, 1);

    // 0. The cluster's request slots are all taken (its slurmrestd hangs, say): the round that
    // needs a drain does nothing — no Slurm call, no pod patch — and requeues soon.
    let handle = ctx.clusters.get(&ObjectRef::new("main")).unwrap();
    let taken: Vec<_> = std::iter::from_fn(|| handle.try_io()).collect();
    let (listed, set_of_names) = (vec![pod0.clone(), pod1.clone()], set_name.clone());
    let scenario = tokio::spawn(async move {
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods_of(&mut api, &set_of_names, listed).await;
        api.expect_no_more_calls().await;
        api
    });
    let error = reconcile(Arc::new(set.clone()), Arc::clone(&ctx))
        .await
        .unwrap_err();
    let mut api = scenario.await.unwrap();
    assert!(matches!(error, Error::ClusterBusy(_)), "{error}");
    let reference = crate::controller::kit::Backoffs::default();
    assert_eq!(
        error_policy(Arc::new(set.clone()), &error, Arc::clone(&ctx)),
        controller::Action::requeue(reference.next_busy(&backoff_key(&set)))
    );
    let node = client.node(&victim).await.unwrap();
    assert_eq!(
        plan::drain_owner(&node),
        plan::DrainOwner::NotDrained,
        "{node:?}"
    );
    drop(taken);

    // 1. Busy and not drained: drain (Slurm), mark, label busy, project; no DELETE.
    let (listed, expected, names) = (
        vec![pod0.clone(), pod1.clone()],
        set.clone(),
        (set_name.clone(), keep.clone(), victim.clone()),
    );
    let scenario = tokio::spawn(async move {
        let (set_name, keep, victim) = names;
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods_of(&mut api, &set_name, listed).await;
        let event = expect_nodeset_event(&mut api, &set_name, "DrainingNode").await;
        assert!(
            event["note"]
                .as_str()
                .unwrap()
                .contains("slurm-operator: scale-in"),
            "{event:#}"
        );
        let mark = expect_pod_patch(&mut api, &victim, false).await;
        assert!(
            mark["metadata"]["annotations"][pods::ANNOTATION_DRAIN_STARTED].is_string(),
            "{mark:#}"
        );
        assert_eq!(
            expect_node_condition(&mut api, &keep).await,
            "NotRegistered"
        );
        let busy = expect_pod_patch(&mut api, &victim, false).await;
        assert_eq!(
            busy["metadata"]["labels"][pods::LABEL_BUSY],
            "true",
            "{busy:#}"
        );
        let reason = expect_node_condition(&mut api, &victim).await;
        assert!(
            ["Allocated", "Mixed"].contains(&reason.as_str()),
            "{reason}"
        );
        expect_pdb_of(&mut api, &set_name).await;
        let status = expect_status(&mut api, &expected).await;
        assert_eq!(status.replicas, 2);
        assert!(condition::is_true(
            &status.conditions,
            CONDITION_SLURM_SYNCED
        ));
        let draining = condition::find(&status.conditions, CONDITION_DRAINING).unwrap();
        assert!(draining.message.contains(&victim), "{}", draining.message);
        api.expect_no_more_calls().await;
        api
    });
    let action = reconcile(Arc::new(set.clone()), Arc::clone(&ctx))
        .await
        .unwrap();
    let mut api = scenario.await.unwrap();
    assert_eq!(action, controller::Action::requeue(WAIT_RESYNC));
    let node = client.node(&victim).await.unwrap();
    assert_eq!(plan::drain_owner(&node), plan::DrainOwner::Us, "{node:?}");

    // 2. Draining while the job runs: still no DELETE, the pod keeps waiting.
    wait_index(&ctx, "the victim draining", |s| {
        s.nodes.get(&victim).is_some_and(|n| n.state.is_draining())
    })
    .await;
    let mut pod1 = pod1;
    pod1.annotations_mut().insert(
        pods::ANNOTATION_DRAIN_STARTED.into(),
        Utc::now().to_rfc3339(),
    );
    pod1.labels_mut()
        .insert(pods::LABEL_BUSY.into(), "true".into());
    let (listed, expected, names) = (
        vec![pod0.clone(), pod1.clone()],
        set.clone(),
        (set_name.clone(), keep.clone(), victim.clone()),
    );
    let scenario = tokio::spawn(async move {
        let (set_name, keep, victim) = names;
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods_of(&mut api, &set_name, listed).await;
        assert_eq!(
            expect_node_condition(&mut api, &keep).await,
            "NotRegistered"
        );
        assert_eq!(expect_node_condition(&mut api, &victim).await, "Draining");
        expect_pdb_of(&mut api, &set_name).await;
        let status = expect_status(&mut api, &expected).await;
        let draining = condition::find(&status.conditions, CONDITION_DRAINING).unwrap();
        assert!(
            draining.message.contains(plan::WAIT_JOBS),
            "{}",
            draining.message
        );
        api.expect_no_more_calls().await;
        api
    });
    reconcile(Arc::new(set.clone()), Arc::clone(&ctx))
        .await
        .unwrap();
    let mut api = scenario.await.unwrap();

    // 3. The job ends, the node is drained: the pod is deleted (UID precondition), the busy
    // label comes off.
    if let Some((client, job)) = cleanup.job.take() {
        client.cancel_job(job).await.unwrap();
    }
    wait_index(&ctx, "the victim drained", |s| {
        s.nodes
            .get(&victim)
            .is_some_and(|n| plan::is_drained(n, s.node_jobs.get(&victim)))
    })
    .await;
    let (listed, expected, names) = (
        vec![pod0, pod1],
        set.clone(),
        (set_name.clone(), keep.clone(), victim.clone()),
    );
    let scenario = tokio::spawn(async move {
        let (set_name, keep, victim) = names;
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods_of(&mut api, &set_name, listed).await;
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::DELETE, "{call:?}");
        assert_eq!(call.path, format!("/api/v1/namespaces/hpc/pods/{victim}"));
        // slurmctld confirmed the drain: whatever changed on the pod since the list.
        assert_eq!(
            call.body["preconditions"],
            json!({"uid": "pod-uid-1"}),
            "{:#}",
            call.body
        );
        send.send_response(ok(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": victim, "namespace": "hpc"}})));
        expect_nodeset_event(&mut api, &set_name, "NodeRemoved").await;
        assert_eq!(
            expect_node_condition(&mut api, &keep).await,
            "NotRegistered"
        );
        let busy = expect_pod_patch(&mut api, &victim, false).await;
        assert!(
            busy["metadata"]["labels"][pods::LABEL_BUSY].is_null(),
            "{busy:#}"
        );
        assert_eq!(expect_node_condition(&mut api, &victim).await, "Drained");
        expect_pdb_of(&mut api, &set_name).await;
        expect_status(&mut api, &expected).await;
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(set), Arc::clone(&ctx)).await.unwrap();
    scenario.await.unwrap();
    drop(cleanup);
}

/// With a fresh view of the real local Slurm: the lowest free name is created (a pod this set
/// does not own keeps its name), and the pod's slurmd is completed with `-Z`, its name and the
/// set's owner record (`--extra`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_out_with_slurm_creates_pods_with_completed_slurmd_args() {
    let Some(slurm) = local_slurm() else { return };
    let (ctx, mut api) = Context::test();
    let ctx = Arc::new(ctx);
    register_local_cluster(&ctx, &slurm, "hpc", "main").await;
    wait_index(&ctx, "a fresh node list", |_| true).await;
    let set_name = format!("mk-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let set = nodeset_named(&set_name, 1);
    let mut stranger = existing_pod(&set, 0);
    stranger.metadata.owner_references.as_mut().unwrap()[0].uid = "other".into();
    let names = (set_name.clone(), pod_name(&set_name, 1));
    let scenario = tokio::spawn(async move {
        let (set_name, name) = names;
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods_of(&mut api, &set_name, vec![stranger]).await;
        // Ordinal 0 is taken by a pod we do not own: the next free one is used.
        let pod = expect_pod_created(&mut api, &name).await;
        assert_eq!(
            pod["spec"]["containers"][0]["args"],
            json!([
                "-D",
                "--conf-server",
                "ctld:6817",
                "-Z",
                "-N",
                name,
                "--extra",
                format!(r#"{{"slurm.rs/nodeset":"hpc/{set_name}"}}"#),
                "--conf",
                "Features=cpu CPUs=2"
            ])
        );
        assert_eq!(pod["spec"]["hostname"], name.as_str());
        assert_eq!(
            pod["metadata"]["labels"]["slurm.rs/nodeset"],
            set_name.as_str()
        );
        assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["controller"], true);
        expect_pdb_of(&mut api, &set_name).await;
        let status = expect_status(&mut api, &nodeset_named(&set_name, 1)).await;
        let owned = condition::find(&status.conditions, CONDITION_NODES_OWNED).unwrap();
        assert_eq!(
            (owned.status.as_str(), owned.reason.as_str()),
            ("True", "NoConflict")
        );
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(set), ctx).await.unwrap();
    scenario.await.unwrap();
}

/// Without a fresh view the Slurm counts stay as last seen, and `SlurmSynced` says so.
#[test]
fn slurm_counts_without_a_view_are_kept_and_flagged_stale() {
    let mut set = nodeset(1);
    let counts = NodeSetSlurmCounts {
        idle: 1,
        ..NodeSetSlurmCounts::default()
    };
    let fresh = plan::NodeSetPlan {
        view: ViewState::Trusted,
        counts: plan::Counts {
            replicas: 1,
            slurm: Some(counts.clone()),
            ..plan::Counts::default()
        },
        ..plan::NodeSetPlan::default()
    };
    let status = desired_status(&set, &fresh, "cpu", None);
    assert_eq!(status.slurm, Some(counts.clone()));
    let synced = condition::find(&status.conditions, CONDITION_SLURM_SYNCED).unwrap();
    assert_eq!(
        (synced.status.as_str(), synced.reason.as_str()),
        ("True", "Synced")
    );
    set.status = Some(status);

    for (view, reason) in [
        (ViewState::Untrusted, "SlurmViewStale"),
        (ViewState::NoClient, "NoSlurmClient"),
    ] {
        let blind = plan::NodeSetPlan {
            view,
            counts: plan::Counts {
                replicas: 1,
                slurm: None,
                ..plan::Counts::default()
            },
            ..plan::NodeSetPlan::default()
        };
        let status = desired_status(&set, &blind, "cpu", None);
        assert_eq!(status.slurm, Some(counts.clone()), "last counts kept");
        let stale = condition::find(&status.conditions, CONDITION_SLURM_SYNCED).unwrap();
        assert_eq!(
            (stale.status.as_str(), stale.reason.as_str()),
            ("False", reason)
        );
        assert!(
            stale.message.contains("last counts seen"),
            "{}",
            stale.message
        );
        // The same status again is the same (no status write every reconcile).
        let mut again = set.clone();
        again.status = Some(status.clone());
        assert_eq!(desired_status(&again, &blind, "cpu", None), status);
    }
    // Never any counts: no invented numbers.
    let blind = plan::NodeSetPlan::default();
    let status = desired_status(&nodeset(1), &blind, "cpu", None);
    assert_eq!(status.slurm, None);
    let stale = condition::find(&status.conditions, CONDITION_SLURM_SYNCED).unwrap();
    assert!(
        stale.message.contains("no Slurm counts yet"),
        "{}",
        stale.message
    );
}

/// `minReadySeconds`: the Ready condition counts available pods, and says how many are only
/// ready; `Partitions` reports nodes outside the wanted partitions, and goes away without any.
#[test]
fn ready_counts_available_pods_and_partitions_are_reported() {
    let mut set = nodeset(2);
    set.spec.slurm.partitions = vec!["gpu".into()];
    let plan = plan::NodeSetPlan {
        view: ViewState::Trusted,
        counts: plan::Counts {
            replicas: 2,
            ready: 2,
            available: 1,
            ..plan::Counts::default()
        },
        partition_misses: Some(vec![("cpu-1".into(), vec!["gpu".into()])]),
        ..plan::NodeSetPlan::default()
    };
    let status = desired_status(&set, &plan, "cpu", None);
    assert_eq!((status.ready_replicas, status.available_replicas), (2, 1));
    let ready = condition::find(&status.conditions, condition::READY).unwrap();
    assert_eq!(ready.status, "False");
    assert!(
        ready
            .message
            .contains("1 more ready for less than minReadySeconds"),
        "{}",
        ready.message
    );
    let parts = condition::find(&status.conditions, CONDITION_PARTITIONS).unwrap();
    assert_eq!(
        (parts.status.as_str(), parts.reason.as_str()),
        ("False", "NotInPartitions")
    );
    assert!(
        parts.message.contains("cpu-1 not in gpu"),
        "{}",
        parts.message
    );
    assert!(
        parts.message.contains("Feature=partition-<name>"),
        "{}",
        parts.message
    );

    let all_in = plan::NodeSetPlan {
        partition_misses: Some(vec![]),
        ..plan.clone()
    };
    // kstatus: nodes outside their partitions stall the set (slurm.conf must change); nodes
    // not all available yet is work in progress; all available is neither.
    let kstatus = |status: &SlurmNodeSetStatus| {
        [condition::STALLED, condition::RECONCILING].map(|t| {
            condition::find(&status.conditions, t).map(|c| (c.status.clone(), c.reason.clone()))
        })
    };
    assert_eq!(
        kstatus(&status),
        [Some(("True".into(), "NotInPartitions".into())), None]
    );
    let parts = desired_status(&set, &all_in, "cpu", None);
    assert_eq!(
        kstatus(&parts),
        [None, Some(("True".into(), "NotReady".into()))]
    );
    let settled = plan::NodeSetPlan {
        counts: plan::Counts {
            replicas: 2,
            ready: 2,
            available: 2,
            ..plan::Counts::default()
        },
        ..all_in.clone()
    };
    assert_eq!(
        kstatus(&desired_status(&set, &settled, "cpu", None)),
        [None, None]
    );
    // A Slurm node that is not the set's holds one of its names: stalled too (the admin must
    // remove that node or rename the set).
    let taken = plan::NodeSetPlan {
        conflicts: Some(vec![plan::Conflict {
            node: "cpu-1".into(),
            owner: None,
            is_static: true,
        }]),
        ..settled.clone()
    };
    assert_eq!(
        kstatus(&desired_status(&set, &taken, "cpu", None)),
        [Some(("True".into(), "NodeNameConflict".into())), None]
    );
    let parts = condition::find(&parts.conditions, CONDITION_PARTITIONS).unwrap();
    assert_eq!(parts.status, "True");
    // Mid-update after `spec.slurm.partitions` changed: a node of a pod still of the template
    // before misses the new partition. A rollout, not a fault: Unknown, and not stalled.
    let updating = plan::NodeSetPlan {
        partition_outdated: vec!["cpu-1".into()],
        ..settled.clone()
    };
    let status = desired_status(&set, &updating, "cpu", None);
    let parts = condition::find(&status.conditions, CONDITION_PARTITIONS).unwrap();
    assert_eq!(
        (parts.status.as_str(), parts.reason.as_str()),
        ("Unknown", "Updating")
    );
    assert!(parts.message.contains("cpu-1"), "{}", parts.message);
    assert_eq!(kstatus(&status)[0], None, "not stalled");
    // A node of the current template outside a partition still is a fault.
    let both = plan::NodeSetPlan {
        partition_misses: Some(vec![("cpu-0".into(), vec!["gpu".into()])]),
        ..updating.clone()
    };
    assert_eq!(
        kstatus(&desired_status(&set, &both, "cpu", None))[0],
        Some(("True".into(), "NotInPartitions".into()))
    );
    let no_view = plan::NodeSetPlan {
        partition_misses: None,
        ..plan.clone()
    };
    let parts = desired_status(&set, &no_view, "cpu", None);
    assert_eq!(
        condition::find(&parts.conditions, CONDITION_PARTITIONS)
            .unwrap()
            .status,
        "Unknown"
    );
    set.status = Some(status);
    set.spec.slurm.partitions.clear();
    let status = desired_status(&set, &plan, "cpu", None);
    assert!(condition::find(&status.conditions, CONDITION_PARTITIONS).is_none());
}

/// In a scale-in 3 → 2 the victim is still a ready pod: `Ready` says "2 of 2 nodes ready" and
/// counts it apart, not "3 of 2"; it is not `True` until the victim is gone.
#[test]
fn ready_counts_pods_leaving_apart() {
    let set = nodeset(2);
    let plan = plan::NodeSetPlan {
        view: ViewState::Trusted,
        counts: plan::Counts {
            replicas: 3,
            ready: 3,
            available: 3,
            leaving: plan::LeavingCounts {
                pods: 1,
                ready: 1,
                available: 1,
            },
            ..plan::Counts::default()
        },
        ..plan::NodeSetPlan::default()
    };
    let status = desired_status(&set, &plan, "cpu", None);
    let ready = condition::find(&status.conditions, condition::READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.message.as_str()),
        (
            "False",
            "2 of 2 nodes ready; 1 more being removed (see Draining)"
        )
    );
    assert_eq!(status.available_replicas, 3, "the pods that exist");
}

/// Every pod available but a node Slurm runs nothing on: the set is not `Ready`, with its own
/// reason and the node's Slurm state. kstatus calls a node down work in progress, and one
/// whose registration slurmctld refused stalled (only a change of the set or of slurm.conf
/// helps).
#[test]
fn ready_needs_slurm_to_run_jobs_on_the_nodes() {
    let set = nodeset(3);
    let counts = plan::Counts {
        replicas: 3,
        ready: 3,
        available: 3,
        ..plan::Counts::default()
    };
    let not_usable = |pod: &str, why: &str, stuck: bool| plan::NotUsable {
        pod: pod.into(),
        why: why.into(),
        stuck,
    };
    let down = plan::NodeSetPlan {
        view: ViewState::Trusted,
        counts: plan::Counts {
            not_usable: vec![not_usable(
                "cpu-2",
                "Slurm state DOWN, reason: Not responding",
                false,
            )],
            ..counts.clone()
        },
        ..plan::NodeSetPlan::default()
    };
    let status = desired_status(&set, &down, "cpu", None);
    let ready = condition::find(&status.conditions, condition::READY).unwrap();
    assert_eq!(
        (
            ready.status.as_str(),
            ready.reason.as_str(),
            ready.message.as_str()
        ),
        (
            "False",
            REASON_SLURM_NODES_NOT_USABLE,
            "2 of 3 nodes ready (1 more running but taking no job in Slurm: cpu-2: Slurm state \
             DOWN, reason: Not responding)"
        )
    );
    // The pods' own numbers stay the pods' (the scale subresource and an HPA read them).
    assert_eq!((status.ready_replicas, status.available_replicas), (3, 3));
    let kstatus = |status: &SlurmNodeSetStatus| {
        [condition::STALLED, condition::RECONCILING].map(|t| {
            condition::find(&status.conditions, t).map(|c| (c.reason.clone(), c.message.clone()))
        })
    };
    assert_eq!(
        kstatus(&status),
        [
            None,
            Some((REASON_SLURM_NODES_NOT_USABLE.into(), ready.message.clone()))
        ]
    );
    // A registration slurmctld refused: stalled, saying which.
    let refused = plan::NodeSetPlan {
        counts: plan::Counts {
            not_usable: vec![not_usable(
                "cpu-2",
                "Slurm state DOWN+INVALID_REG, reason: gres/gpu count reported lower",
                true,
            )],
            ..counts.clone()
        },
        ..down.clone()
    };
    let status = desired_status(&set, &refused, "cpu", None);
    let ready = condition::find(&status.conditions, condition::READY).unwrap();
    assert_eq!(
        kstatus(&status),
        [
            Some((REASON_SLURM_NODES_NOT_USABLE.into(), ready.message.clone())),
            None
        ]
    );
    assert!(ready.message.contains("INVALID_REG"), "{}", ready.message);
    // A pod not ready as well: the general reason. Many nodes: the first 20, and how many more.
    let set = nodeset(30);
    let many = plan::NodeSetPlan {
        counts: plan::Counts {
            replicas: 30,
            ready: 29,
            available: 29,
            not_usable: (0..25)
                .map(|i| not_usable(&format!("cpu-{i}"), "x", false))
                .collect(),
            ..plan::Counts::default()
        },
        ..down.clone()
    };
    let ready = desired_status(&set, &many, "cpu", None)
        .conditions
        .into_iter()
        .find(|c| c.type_ == condition::READY)
        .unwrap();
    assert_eq!(ready.reason, "NotReady");
    assert!(
        ready.message.starts_with(
            "4 of 30 nodes ready (25 more running but taking no job in Slurm: cpu-0: x;"
        ),
        "{}",
        ready.message
    );
    assert!(
        ready.message.ends_with("cpu-19: x; and 5 more)"),
        "{}",
        ready.message
    );
    // Slurm runs jobs on all of them: ready.
    let set = nodeset(3);
    let up = plan::NodeSetPlan { counts, ..down };
    let status = desired_status(&set, &up, "cpu", None);
    let ready = condition::find(&status.conditions, condition::READY).unwrap();
    assert_eq!(
        (
            ready.status.as_str(),
            ready.reason.as_str(),
            ready.message.as_str()
        ),
        ("True", "AllReady", "3 of 3 nodes ready")
    );
    assert_eq!(kstatus(&status), [None, None]);
}

fn refused(message: &str) -> Response<Body> {
    let status = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "Forbidden", "code": 403,
    });
    Response::builder()
        .status(StatusCode::FORBIDDEN)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&status).unwrap()))
        .unwrap()
}

/// SlurmCluster `main` (namespace `hpc`) registered with a client of `endpoint` and a fresh,
/// trusted view of Slurm holding `nodes`. Keep the sender: the view lives as long.
fn register_view(
    ctx: &Context,
    endpoint: &str,
    nodes: impl IntoIterator<Item = crate::slurm::types::Node>,
) -> tokio::sync::watch::Sender<Arc<crate::state::index::ClusterState>> {
    let view = crate::state::index::ClusterState {
        nodes: Arc::new(plan::nodes_by_name(nodes)),
        nodes_synced_at: Some(chrono::Utc::now()),
        health: crate::state::index::Health::Up {
            since: chrono::Utc::now(),
        },
        ..Default::default()
    };
    crate::controller::test_support::register_with_index(ctx, "hpc", "main", endpoint, view)
}

/// A view holding no node, with a client of the real local Slurm: a pod's name is asked about
/// there before its create (no node holds it), so pods may be created. `None` (the test is
/// skipped, with a message) without a local Slurm.
fn register_empty_view(
    ctx: &Context,
) -> Option<tokio::sync::watch::Sender<Arc<crate::state::index::ClusterState>>> {
    let slurm = local_slurm()?;
    let key = std::fs::read(&slurm["SLURM_JWT_KEY"]).unwrap();
    let credentials = crate::slurm::Credentials::minted(
        key,
        slurm["SLURM_USER"].clone(),
        std::time::Duration::from_secs(300),
    )
    .unwrap();
    let view = crate::state::index::ClusterState {
        nodes_synced_at: Some(chrono::Utc::now()),
        health: crate::state::index::Health::Up {
            since: chrono::Utc::now(),
        },
        ..Default::default()
    };
    Some(crate::controller::test_support::register_with_credentials(
        ctx,
        "hpc",
        "main",
        &slurm["SLURM_REST_URL"],
        view,
        credentials,
    ))
}

/// A pod create the API server refuses (a quota, Pod Security admission, a webhook) is not a
/// silent retry: `ReplicaFailure=True` says what failed (reason `CreatePodFailed`, the server's
/// message), one Warning tells it, the same failure again adds no Event (nor a status write),
/// and a round that goes through removes the condition.
#[tokio::test]
async fn a_refused_pod_create_is_a_condition_and_one_warning() {
    let (ctx, mut api) = Context::test();
    let ctx = Arc::new(ctx);
    let Some(_index) = register_empty_view(&ctx) else {
        return;
    };
    let forbidden = "pods is forbidden: exceeded quota: compute, requested: pods=1";
    let name = pod_name("cpu", 0);
    let (written, mut read) = tokio::sync::mpsc::unbounded_channel();
    let scenario = tokio::spawn(async move {
        // 1. Refused: the condition and one Warning.
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods(&mut api, vec![]).await;
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::POST, "{call:?}");
        assert_eq!(call.body["metadata"]["name"], name.as_str());
        send.send_response(refused(forbidden));
        expect_pdb(&mut api).await;
        let event = expect_nodeset_event(&mut api, "cpu", "CreatePodFailed").await;
        assert_eq!(event["type"], "Warning");
        assert!(
            event["note"].as_str().unwrap().contains("exceeded quota"),
            "{event:#}"
        );
        let status = expect_status(&mut api, &nodeset(1)).await;
        let failure = condition::find(&status.conditions, CONDITION_REPLICA_FAILURE).unwrap();
        assert_eq!(
            (failure.status.as_str(), failure.reason.as_str()),
            ("True", "CreatePodFailed")
        );
        for part in [name.as_str(), "exceeded quota", "retried with backoff"] {
            assert!(
                failure.message.contains(part),
                "{part:?} in {}",
                failure.message
            );
        }
        written.send(status.clone()).unwrap();
        // 2. Refused again: no Event, no status write.
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods(&mut api, vec![]).await;
        let (_, send) = api.next().await;
        send.send_response(refused(forbidden));
        expect_pdb(&mut api).await;
        // 3. Created: the condition goes.
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods(&mut api, vec![]).await;
        expect_pod_created(&mut api, &name).await;
        expect_pdb(&mut api).await;
        let status = expect_status(&mut api, &nodeset(1)).await;
        assert_eq!(
            condition::find(&status.conditions, CONDITION_REPLICA_FAILURE),
            None
        );
        api.expect_no_more_calls().await;
    });
    let error = reconcile(Arc::new(nodeset(1)), Arc::clone(&ctx))
        .await
        .unwrap_err();
    assert_eq!(error.category(), "CreatePodFailed");
    // The next rounds read the status the first wrote, as the watch delivers it.
    let mut set = nodeset(1);
    set.status = Some(read.recv().await.unwrap());
    let set = Arc::new(set);
    let error = reconcile(Arc::clone(&set), Arc::clone(&ctx))
        .await
        .unwrap_err();
    assert_eq!(error.category(), "CreatePodFailed");
    reconcile(set, ctx).await.unwrap();
    scenario.await.unwrap();
}

/// A pod's name is given out on a view that may be a minute old: asked again just before the
/// create, a node of that name that another owner registered since (here a hand-started
/// slurmd for another namespace's set) stops it, and the name stays its owner's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_another_owner_registered_since_the_view_gets_no_pod() {
    let Some(slurm) = local_slurm() else { return };
    let (ctx, mut api) = Context::test();
    let ctx = Arc::new(ctx);
    let Some(_index) = register_empty_view(&ctx) else {
        return;
    };
    let set_name = format!("ow-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let taken = pod_name(&set_name, 0);
    slurm_node_script(
        &slurm,
        &[
            "start",
            &taken,
            "--conf",
            &format!("CPUs=1 RealMemory=500 Feature={set_name} Weight=1000"),
            "--extra",
            &crate::slurm::node_owner::NodeOwner::new("other-team", &set_name).to_extra(),
        ],
    );
    let _cleanup = SlurmCleanup {
        slurm: slurm.clone(),
        node: taken.clone(),
        job: None,
    };
    let client = register_local_cluster(&ctx, &slurm, "hpc", "probe").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while client.node(&taken).await.is_err() {
        assert!(Instant::now() < deadline, "{taken} never registered");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let set = nodeset_named(&set_name, 1);
    let expected = set.clone();
    let owner = pods::owner(&set);
    let scenario = tokio::spawn(async move {
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods_of(&mut api, &set_name, vec![]).await;
        // No POST of the pod: the PodDisruptionBudget, the status, nothing more.
        expect_pdb_of(&mut api, &set_name).await;
        expect_status(&mut api, &expected).await;
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(set), Arc::clone(&ctx)).await.unwrap();
    scenario.await.unwrap();
    // Still the other owner's.
    let node = client.node(&taken).await.unwrap();
    assert!(!plan::is_ours(&node, &owner), "{node:?}");
}

/// A PodDisruptionBudget of the set's name: another's is never written over (`ReplicaFailure`
/// says `PodDisruptionBudgetNotOwned`, with one Warning); the set's own, as wanted, is not
/// written again.
#[tokio::test]
async fn a_pdb_the_set_does_not_control_is_left_alone() {
    let pdb = |owner: &str| {
        json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "cpu", "namespace": "hpc", "ownerReferences": [{
                "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmNodeSet", "name": "cpu",
                "uid": owner, "controller": true,
            }]},
            "spec": {
                "minAvailable": i32::MAX,
                "selector": {"matchLabels": {"slurm.rs/nodeset": "cpu", "slurm.rs/busy": "true"}},
            },
        })
    };
    let (ctx, mut api) = Context::test();
    let scenario = tokio::spawn(async move {
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods(&mut api, vec![]).await;
        expect_get_pdb(&mut api, "cpu", Some(pdb("another-uid"))).await;
        let event = expect_nodeset_event(&mut api, "cpu", "PodDisruptionBudgetNotOwned").await;
        assert_eq!(event["type"], "Warning");
        let status = expect_status(&mut api, &nodeset(0)).await;
        let failure = condition::find(&status.conditions, CONDITION_REPLICA_FAILURE).unwrap();
        assert_eq!(failure.reason, "PodDisruptionBudgetNotOwned");
        assert!(
            failure.message.contains("PodDisruptionBudget cpu exists"),
            "{}",
            failure.message
        );
        // The set's own, as wanted: read, not written.
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods(&mut api, vec![]).await;
        expect_get_pdb(&mut api, "cpu", Some(pdb("uid-1"))).await;
        let status = expect_status(&mut api, &nodeset(0)).await;
        assert_eq!(
            condition::find(&status.conditions, CONDITION_REPLICA_FAILURE),
            None
        );
        api.expect_no_more_calls().await;
    });
    let ctx = Arc::new(ctx);
    let error = reconcile(Arc::new(nodeset(0)), Arc::clone(&ctx))
        .await
        .unwrap_err();
    assert_eq!(error.category(), "PodDisruptionBudgetNotOwned");
    reconcile(Arc::new(nodeset(0)), ctx).await.unwrap();
    scenario.await.unwrap();
}

/// The PodDisruptionBudget read shows none, and one of that name comes before the create (made
/// by hand, another tool): the create's 409 is read again and that one is left as it is
/// (`PodDisruptionBudgetNotOwned`, no apply over it). The set's own, not as wanted (edited by
/// hand), is applied back.
#[tokio::test]
async fn a_pdb_made_by_someone_else_after_the_read_is_not_taken_over() {
    let pdb = |owner: &str, max_unavailable: i32| {
        json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "cpu", "namespace": "hpc", "ownerReferences": [{
                "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmNodeSet", "name": "cpu",
                "uid": owner, "controller": true,
            }]},
            "spec": {
                "maxUnavailable": max_unavailable,
                "selector": {"matchLabels": {"slurm.rs/nodeset": "cpu", "slurm.rs/busy": "true"}},
            },
        })
    };
    let (ctx, mut api) = Context::test();
    let scenario = tokio::spawn(async move {
        // 1. None at the read; someone else's at the create.
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods(&mut api, vec![]).await;
        expect_get_pdb(&mut api, "cpu", None).await;
        let (call, send) = api.next().await;
        expect_pdb_body(&call, Method::POST, "cpu");
        let conflict = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "poddisruptionbudgets.policy \"cpu\" already exists",
            "reason": "AlreadyExists", "code": 409,
        });
        send.send_response(
            Response::builder()
                .status(StatusCode::CONFLICT)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&conflict).unwrap()))
                .unwrap(),
        );
        expect_get_pdb(&mut api, "cpu", Some(pdb("another-uid", 1))).await;
        let event = expect_nodeset_event(&mut api, "cpu", "PodDisruptionBudgetNotOwned").await;
        assert_eq!(event["type"], "Warning");
        let status = expect_status(&mut api, &nodeset(0)).await;
        let failure = condition::find(&status.conditions, CONDITION_REPLICA_FAILURE).unwrap();
        assert_eq!(failure.reason, "PodDisruptionBudgetNotOwned");
        // 2. The set's own, not as wanted (an older operator's `maxUnavailable: 0`, a selector
        // edited by hand): patched to exactly the wanted spec, what it has beyond removed, as
        // that very object.
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods(&mut api, vec![]).await;
        let mut older = pdb("uid-1", 0);
        older["metadata"]["uid"] = "pdb-uid".into();
        older["spec"]["selector"]["matchLabels"]["example.org/extra"] = "x".into();
        expect_get_pdb(&mut api, "cpu", Some(older)).await;
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::PATCH, "{call:?}");
        assert_eq!(
            call.path,
            "/apis/policy/v1/namespaces/hpc/poddisruptionbudgets/cpu"
        );
        assert_eq!(call.content_type, "application/merge-patch+json");
        assert!(call.has_query("fieldManager", FIELD_MANAGER), "{call:?}");
        assert_eq!(
            call.body,
            json!({
                "metadata": {"uid": "pdb-uid"},
                "spec": {
                    "maxUnavailable": null,
                    "minAvailable": i32::MAX,
                    "selector": {"matchLabels": {
                        "slurm.rs/nodeset": "cpu", "slurm.rs/busy": "true",
                        "example.org/extra": null,
                    }},
                },
            })
        );
        send.send_response(ok(&pdb("uid-1", 0)));
        let status = expect_status(&mut api, &nodeset(0)).await;
        assert_eq!(
            condition::find(&status.conditions, CONDITION_REPLICA_FAILURE),
            None
        );
        api.expect_no_more_calls().await;
    });
    let ctx = Arc::new(ctx);
    let error = reconcile(Arc::new(nodeset(0)), Arc::clone(&ctx))
        .await
        .unwrap_err();
    assert_eq!(error.category(), "PodDisruptionBudgetNotOwned");
    reconcile(Arc::new(nodeset(0)), ctx).await.unwrap();
    scenario.await.unwrap();
}

/// A pod of the set's name that the set's list does not show (no `slurm.rs/nodeset` label, or
/// another controller): the create's 409 is not taken for done every round in silence, but
/// `ReplicaFailure=True/PodNameTaken`.
#[tokio::test]
async fn a_pod_name_held_by_a_pod_not_the_sets_is_a_failure() {
    let (ctx, mut api) = Context::test();
    let ctx = Arc::new(ctx);
    let Some(_index) = register_empty_view(&ctx) else {
        return;
    };
    let name = pod_name("cpu", 0);
    let scenario = tokio::spawn(async move {
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods(&mut api, vec![]).await;
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::POST, "{call:?}");
        let conflict = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("pods \"{name}\" already exists"), "reason": "AlreadyExists",
            "code": 409,
        });
        send.send_response(
            Response::builder()
                .status(StatusCode::CONFLICT)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&conflict).unwrap()))
                .unwrap(),
        );
        // The pod holding the name: someone's, unlabelled, no owner.
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::GET, "{call:?}");
        assert_eq!(call.path, format!("/api/v1/namespaces/hpc/pods/{name}"));
        send.send_response(ok(&json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "hpc", "uid": "squatter"},
        })));
        expect_pdb(&mut api).await;
        expect_nodeset_event(&mut api, "cpu", "PodNameTaken").await;
        let status = expect_status(&mut api, &nodeset(1)).await;
        let failure = condition::find(&status.conditions, CONDITION_REPLICA_FAILURE).unwrap();
        assert_eq!(failure.reason, "PodNameTaken");
        assert!(
            failure.message.contains(&format!("pod {name} exists")),
            "{}",
            failure.message
        );
        api.expect_no_more_calls().await;
    });
    let error = reconcile(Arc::new(nodeset(1)), ctx).await.unwrap_err();
    assert_eq!(error.category(), "PodNameTaken");
    scenario.await.unwrap();
}

/// The 409 of a pod create answered with a conflict.
fn already_exists(name: &str) -> Response<Body> {
    let conflict = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("pods \"{name}\" already exists"), "reason": "AlreadyExists",
        "code": 409,
    });
    Response::builder()
        .status(StatusCode::CONFLICT)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&conflict).unwrap()))
        .unwrap()
}

/// A pod of the set whose `slurm.rs/nodeset` label was removed (`kubectl label pod x
/// slurm.rs/nodeset-`) is not in the set's list, but it is the set's and runs its slurmd. The
/// create of its name, answered 409, is not taken for done in silence:
/// `ReplicaFailure=True/PodLabelMissing` says to restore the label. A pod the set controls and
/// labels (made since the list) is done.
#[tokio::test]
async fn a_pod_of_the_set_without_its_label_is_a_failure_not_done() {
    for (labelled, failing) in [(false, true), (true, false)] {
        let (ctx, mut api) = Context::test();
        let ctx = Arc::new(ctx);
        let Some(_index) = register_empty_view(&ctx) else {
            return;
        };
        let name = pod_name("cpu", 0);
        let mut holder = existing_pod(&nodeset(1), 0);
        if !labelled {
            holder.labels_mut().remove(pods::LABEL_NODESET);
        }
        let scenario = tokio::spawn(async move {
            expect_get_cluster(&mut api, &["hpc"]).await;
            expect_list_pods(&mut api, vec![]).await;
            let (call, send) = api.next().await;
            assert_eq!(call.method, Method::POST, "{call:?}");
            send.send_response(already_exists(&name));
            let (call, send) = api.next().await;
            assert_eq!(call.method, Method::GET, "{call:?}");
            assert_eq!(call.path, format!("/api/v1/namespaces/hpc/pods/{name}"));
            send.send_response(ok(&serde_json::to_value(&holder).unwrap()));
            expect_pdb(&mut api).await;
            if failing {
                expect_nodeset_event(&mut api, "cpu", "PodLabelMissing").await;
            }
            let status = expect_status(&mut api, &nodeset(1)).await;
            let failure = condition::find(&status.conditions, CONDITION_REPLICA_FAILURE);
            if failing {
                let failure = failure.unwrap();
                assert_eq!(failure.reason, "PodLabelMissing");
                let restore = format!("kubectl label pod {name} slurm.rs/nodeset=cpu");
                assert!(failure.message.contains(&restore), "{}", failure.message);
            } else {
                assert_eq!(failure, None);
            }
            api.expect_no_more_calls().await;
        });
        let result = reconcile(Arc::new(nodeset(1)), ctx).await;
        if failing {
            assert_eq!(result.unwrap_err().category(), "PodLabelMissing");
        } else {
            result.unwrap();
        }
        scenario.await.unwrap();
    }
}

/// The review's case: the pod lost its label, its slurmd is alive and its node (the set's) is
/// idle. The plan sees a node record without a pod, but the driver asks for a pod of that name
/// before the record's removal: it is there, so the record stays (no request to slurmrestd at
/// all) and `ReplicaFailure=True/PodLabelMissing` says why. A pod of that name that is not the
/// set's keeps it too (`PodNameTaken`); one that finished does not.
#[tokio::test]
async fn a_node_record_stays_while_a_pod_of_its_name_runs_unlisted() {
    let node = pod_name("cpu", 0);
    let mut unlabelled = existing_pod(&nodeset(0), 0);
    unlabelled.labels_mut().remove(pods::LABEL_NODESET);
    let mut foreign = unlabelled.clone();
    foreign.metadata.owner_references = None;
    let mut finished = unlabelled.clone();
    finished.status = Some(k8s_openapi::api::core::v1::PodStatus {
        phase: Some("Succeeded".into()),
        ..Default::default()
    });
    for (holder, reason) in [
        (Some(unlabelled), Some("PodLabelMissing")),
        (Some(foreign), Some("PodNameTaken")),
        (Some(finished), None),
        (None, None),
    ] {
        let server = wiremock::MockServer::start().await;
        answer_as_slurmrestd(&server, &[(&node, "node_dynamic_idle")]).await;
        answer_node_delete(&server, &node).await;
        let (ctx, mut api) = Context::test();
        let ctx = Arc::new(ctx);
        let _index = register_view(&ctx, &server.uri(), [set_node(&node, &["IDLE"], None)]);
        let name = node.clone();
        let scenario = tokio::spawn(async move {
            expect_get_cluster(&mut api, &["hpc"]).await;
            expect_list_pods(&mut api, vec![]).await;
            let (call, send) = api.next().await;
            assert_eq!(call.method, Method::GET, "{call:?}");
            assert_eq!(call.path, format!("/api/v1/namespaces/hpc/pods/{name}"));
            send.send_response(match &holder {
                Some(pod) => ok(&serde_json::to_value(pod).unwrap()),
                None => not_found("pods", &name),
            });
            if reason.is_none() {
                expect_nodeset_event(&mut api, "cpu", "DeletedNodeRecord").await;
            }
            expect_pdb(&mut api).await;
            if let Some(reason) = reason {
                expect_nodeset_event(&mut api, "cpu", reason).await;
            }
            let status = expect_status(&mut api, &nodeset(0)).await;
            let failure = condition::find(&status.conditions, CONDITION_REPLICA_FAILURE);
            assert_eq!(failure.map(|c| c.reason.as_str()), reason);
            api.expect_no_more_calls().await;
        });
        let result = reconcile(Arc::new(nodeset(0)), ctx).await;
        scenario.await.unwrap();
        assert_eq!(result.err().map(|e| e.category()), reason);
        let removed = node_deletes(&server, &node).await;
        assert_eq!(removed, usize::from(reason.is_none()), "{reason:?}");
    }
}

/// Each round lists the set's pods a page at a time (as the watch does), following the continue
/// token to the end: the pods of every page count, a labelled pod of another controller on a
/// later page still holds its ordinal.
#[tokio::test]
async fn the_sets_pods_are_listed_a_page_at_a_time() {
    let (ctx, mut api) = Context::test();
    let ctx = Arc::new(ctx);
    let Some(_index) = register_empty_view(&ctx) else {
        return;
    };
    let set = nodeset(3);
    let first = vec![existing_pod(&set, 0)];
    let mut squatter = existing_pod(&set, 1);
    squatter.metadata.owner_references = None;
    let second = vec![squatter, existing_pod(&set, 2)];
    let scenario = tokio::spawn(async move {
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_pods_page(&mut api, "cpu", None, first, Some("page-2")).await;
        expect_pods_page(&mut api, "cpu", Some("page-2"), second, None).await;
        // One missing: ordinal 1 is held, so 3 is created.
        expect_pod_created(&mut api, &pod_name("cpu", 3)).await;
        for ordinal in [0, 2] {
            let reason = expect_node_condition(&mut api, &pod_name("cpu", ordinal)).await;
            assert_eq!(reason, "NotRegistered");
        }
        expect_pdb(&mut api).await;
        let status = expect_status(&mut api, &nodeset(3)).await;
        assert_eq!(status.replicas, 2);
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(set), ctx).await.unwrap();
    scenario.await.unwrap();
}

/// The calls of `nodeset(0)`'s reconcile after its finalizer: nothing to make.
async fn expect_empty_set_applied(api: &mut ApiServerVerifier) {
    expect_get_cluster(api, &["hpc"]).await;
    expect_list_pods(api, vec![]).await;
    expect_pdb(api).await;
    expect_status(api, &nodeset(0)).await;
}

/// A set made before the operator had a finalizer for it (or just created) gets it first, and
/// the same reconcile goes on with the patch's answer. A reconcile of that very version before
/// the cache shows the patch (woken by the pod the first one made; the set's own watch event is
/// filtered out) sends nothing and comes back: patching again would be refused (the patch tests
/// the finalizers it read) and back the set off as a failure. Once the cache shows the
/// finalizer, a later version without it (removed by someone) gets it again.
#[tokio::test]
async fn a_set_without_the_finalizer_gets_it_first() {
    let (ctx, mut api) = Context::test();
    let ctx = Arc::new(ctx);
    let mut set = nodeset(0);
    set.metadata.finalizers = None;
    set.metadata.resource_version = Some("7".into());
    let bare = set.clone();
    let scenario = tokio::spawn(async move {
        api.expect_finalizer_added(&bare).await;
        expect_empty_set_applied(&mut api).await;
        api.expect_no_more_calls().await;
        api
    });
    reconcile(Arc::new(set.clone()), ctx.clone()).await.unwrap();
    let api = scenario.await.unwrap();

    let scenario = tokio::spawn(async move {
        let mut api = api;
        api.expect_no_more_calls().await;
        api
    });
    let action = reconcile(Arc::new(set.clone()), ctx.clone()).await.unwrap();
    assert_eq!(action, controller::Action::requeue(CACHE_LAG_RETRY));
    let mut api = scenario.await.unwrap();

    // The cache shows it; then someone removes it (version 9): added again.
    let mut shown = set.clone();
    shown.metadata.finalizers = Some(vec![FINALIZER.into()]);
    shown.metadata.resource_version = Some("8".into());
    let mut removed = set;
    removed.metadata.resource_version = Some("9".into());
    let bare = removed.clone();
    let scenario = tokio::spawn(async move {
        expect_empty_set_applied(&mut api).await;
        api.expect_finalizer_added(&bare).await;
        expect_empty_set_applied(&mut api).await;
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(shown), ctx.clone()).await.unwrap();
    assert!(ctx.finalizer_writes.is_empty(), "shown: forgotten");
    reconcile(Arc::new(removed), ctx.clone()).await.unwrap();
    scenario.await.unwrap();
    assert_eq!(ctx.finalizer_writes.len(), 1, "version 9 patched");
}

/// Deleting a set is a scale-in to 0 behind the finalizer: a pod that never ran goes at once;
/// the finalizer stays while the plan finds a pod or a node of the set (`DeletionWaits`, no
/// PodDisruptionBudget written), and goes once nothing of it is left.
#[tokio::test]
async fn a_deleted_set_waits_for_its_pods_and_nodes_then_lets_go() {
    let (ctx, mut api) = Context::test();
    let ctx = Arc::new(ctx);
    let Some(_index) = register_empty_view(&ctx) else {
        return;
    };
    let set = deleted(nodeset(2), chrono::TimeDelta::seconds(5));
    let mut unscheduled = existing_pod(&set, 0);
    unscheduled.spec.as_mut().unwrap().node_name = None;
    unscheduled.metadata.resource_version = Some("41".into());
    let name = pod_name("cpu", 0);
    let (set2, name2) = (set.clone(), name.clone());
    let scenario = tokio::spawn(async move {
        // 1. A pod that never ran is deleted; it is still there until the next list.
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods(&mut api, vec![unscheduled.clone()]).await;
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::DELETE, "{call:?}");
        assert_eq!(call.path, format!("/api/v1/namespaces/hpc/pods/{name2}"));
        // Only as listed: bound by the scheduler since, it may run slurmd (409, planned again).
        assert_eq!(
            call.body["preconditions"],
            json!({"uid": "pod-uid-0", "resourceVersion": "41"}),
            "{:#}",
            call.body
        );
        send.send_response(ok(&serde_json::to_value(&unscheduled).unwrap()));
        let event = expect_nodeset_event(&mut api, "cpu", "NodeRemoved").await;
        assert!(
            event["note"]
                .as_str()
                .unwrap()
                .contains("SlurmNodeSet deleted"),
            "{event:#}"
        );
        assert_eq!(
            expect_node_condition(&mut api, &name2).await,
            "NotRegistered"
        );
        expect_status(&mut api, &set2).await;
        // 2. Nothing of the set left: the finalizer goes.
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods(&mut api, vec![]).await;
        let status = expect_status(&mut api, &set2).await;
        assert_eq!(status.replicas, 0);
        api.expect_finalizer_removed(&set2).await;
        api.expect_no_more_calls().await;
    });
    let error = reconcile(Arc::new(set.clone()), Arc::clone(&ctx))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::DeletionWaits {
                remaining: Some(1),
                ..
            }
        ),
        "{error:?}"
    );
    let action = error_policy(Arc::new(set.clone()), &error, Arc::clone(&ctx));
    assert_eq!(action, controller::Action::requeue(WAIT_RESYNC));
    reconcile(Arc::new(set), ctx).await.unwrap();
    scenario.await.unwrap();
}

/// A set that is not admitted, or deleted with `--cascade=orphan`, lets go at once and
/// touches nothing: no pod listed or deleted, no node drained.
#[tokio::test]
async fn a_deleted_set_not_admitted_or_orphaning_lets_go_at_once() {
    // Its SlurmCluster is gone.
    let (ctx, mut api) = Context::test();
    let set = deleted(nodeset(2), chrono::TimeDelta::seconds(5));
    let set2 = set.clone();
    let scenario = tokio::spawn(async move {
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::GET, "{call:?}");
        assert_eq!(call.path, "/apis/slurm.rs/v1alpha1/slurmclusters/main");
        send.send_response(not_found("slurmclusters", "main"));
        api.expect_finalizer_removed(&set2).await;
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(set), Arc::new(ctx)).await.unwrap();
    scenario.await.unwrap();

    // Its namespace is no longer allowed.
    let (ctx, mut api) = Context::test();
    let set = deleted(nodeset(2), chrono::TimeDelta::seconds(5));
    let set2 = set.clone();
    let scenario = tokio::spawn(async move {
        expect_get_cluster(&mut api, &["other"]).await;
        api.expect_finalizer_removed(&set2).await;
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(set), Arc::new(ctx)).await.unwrap();
    scenario.await.unwrap();

    // `kubectl delete --cascade=orphan`: the API server adds `orphan` after ours.
    let (ctx, mut api) = Context::test();
    let mut set = deleted(nodeset(2), chrono::TimeDelta::seconds(5));
    set.metadata.finalizers = Some(vec![FINALIZER.into(), "orphan".into()]);
    let set2 = set.clone();
    let scenario = tokio::spawn(async move {
        api.expect_finalizer_removed(&set2).await;
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(set), Arc::new(ctx)).await.unwrap();
    scenario.await.unwrap();
}

/// At the deletion deadline the finalizer goes although the set's nodes could not be drained
/// (here: no view of Slurm at all), with a Warning saying so; before it, the deletion waits.
#[tokio::test]
async fn a_deleted_set_lets_go_at_the_deadline_with_a_warning() {
    let (mut ctx, mut api) = Context::test();
    ctx.deletion_deadline = Some(std::time::Duration::from_secs(15 * 60));
    *ctx.acting_since.lock().unwrap() = Utc::now() - chrono::TimeDelta::hours(2);
    let ctx = Arc::new(ctx);
    let early = deleted(nodeset(1), chrono::TimeDelta::minutes(14));
    let late = deleted(nodeset(1), chrono::TimeDelta::minutes(16));
    let pod = existing_pod(&late, 0);
    let (early2, late2) = (early.clone(), late.clone());
    let scenario = tokio::spawn(async move {
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods(&mut api, vec![pod.clone()]).await;
        expect_status(&mut api, &early2).await;
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods(&mut api, vec![pod]).await;
        expect_status(&mut api, &late2).await;
        let event = expect_nodeset_event(&mut api, "cpu", REASON_DELETION_DEADLINE).await;
        assert_eq!(event["type"], "Warning");
        let note = event["note"].as_str().unwrap();
        assert!(note.contains("--deletion-deadline"), "{note}");
        assert!(note.contains("is not known"), "{note}");
        api.expect_finalizer_removed(&late2).await;
        api.expect_no_more_calls().await;
    });
    let error = reconcile(Arc::new(early), Arc::clone(&ctx))
        .await
        .unwrap_err();
    let Error::DeletionWaits { retry, remaining } = error else {
        panic!("{error:?}")
    };
    assert_eq!(remaining, None, "unknown without a view");
    assert!(retry <= WAIT_RESYNC, "{retry:?}");
    reconcile(Arc::new(late), ctx).await.unwrap();
    scenario.await.unwrap();
}

#[test]
fn a_deletion_waits_at_most_until_its_release() {
    let now = Utc::now();
    let requeue = WAIT_RESYNC;
    assert_eq!(
        deletion_wait(None, now, requeue),
        Some(requeue),
        "no deadline"
    );
    assert_eq!(deletion_wait(Some(now), now, requeue), None);
    assert_eq!(
        deletion_wait(Some(now - chrono::TimeDelta::seconds(1)), now, requeue),
        None
    );
    assert_eq!(
        deletion_wait(Some(now + chrono::TimeDelta::seconds(4)), now, requeue),
        Some(std::time::Duration::from_secs(4))
    );
    assert_eq!(
        deletion_wait(Some(now + chrono::TimeDelta::hours(1)), now, requeue),
        Some(requeue)
    );
    let names: Vec<String> = (0..25).map(|i| format!("n-{i}")).collect();
    let note = deadline_note(Some(&names));
    assert!(note.contains("n-0, n-1"), "{note}");
    assert!(note.contains("n-19 and 5 more"), "{note}");
    assert!(!note.contains("n-20"), "{note}");
}

/// A deletion whose rounds keep failing (here the API server refuses the pod's deletion) is
/// held no longer than the deadline either: past it, the finalizer goes with a Warning that
/// says what failed. Before it the failure is retried; and the deadline counts from when this
/// replica began to act, so one that just took over the Lease gets the whole of it.
#[tokio::test]
async fn a_deletion_that_keeps_failing_lets_go_at_the_deadline() {
    let refusal = "admission webhook denied the request";
    let set = deleted(nodeset(1), chrono::TimeDelta::minutes(16));
    let mut unscheduled = existing_pod(&set, 0);
    unscheduled.spec.as_mut().unwrap().node_name = None;
    for (acting_for, released) in [
        (chrono::TimeDelta::hours(2), true),
        (chrono::TimeDelta::zero(), false),
    ] {
        let (mut ctx, mut api) = Context::test();
        ctx.deletion_deadline = Some(std::time::Duration::from_secs(15 * 60));
        *ctx.acting_since.lock().unwrap() = Utc::now() - acting_for;
        let ctx = Arc::new(ctx);
        let Some(_index) = register_empty_view(&ctx) else {
            return;
        };
        let (set2, pod) = (set.clone(), unscheduled.clone());
        let scenario = tokio::spawn(async move {
            expect_get_cluster(&mut api, &["hpc"]).await;
            expect_list_pods(&mut api, vec![pod]).await;
            let (call, send) = api.next().await;
            assert_eq!(call.method, Method::DELETE, "{call:?}");
            send.send_response(refused(refusal));
            expect_nodeset_event(&mut api, "cpu", "DeletePodFailed").await;
            let status = expect_status(&mut api, &set2).await;
            let ready = condition::find(&status.conditions, condition::READY).unwrap();
            assert_eq!(ready.reason, REASON_DELETING);
            if released {
                let event = expect_nodeset_event(&mut api, "cpu", REASON_DELETION_DEADLINE).await;
                let note = event["note"].as_str().unwrap();
                assert!(note.contains(refusal), "{note}");
                api.expect_finalizer_removed(&set2).await;
            }
            api.expect_no_more_calls().await;
        });
        let result = reconcile(Arc::new(set.clone()), ctx).await;
        if released {
            result.unwrap();
        } else {
            assert_eq!(result.unwrap_err().category(), "DeletePodFailed");
        }
        scenario.await.unwrap();
    }
}

/// slurmrestd's recorded answer `case` (REST API v0.0.42, `tests/fixtures/24.11`): its body.
fn recorded(case: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/24.11/{case}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    fixture["body"].clone()
}

/// Make `server` a slurmrestd that answers its ping and, for each `(node, case)`, a read of
/// `node` with the recorded answer `case` (its node renamed `node` and made set `cpu`'s of
/// `hpc`: dynamic, with its owner record; `node_unknown`: no such node). Other REST API
/// versions are not served (404), as a real one's.
async fn answer_as_slurmrestd(server: &wiremock::MockServer, nodes: &[(&str, &str)]) {
    let owner = crate::slurm::node_owner::NodeOwner::new("hpc", "cpu");
    answer_as_slurmrestd_for(server, nodes, Some(&owner)).await;
}

/// [`answer_as_slurmrestd`], the nodes made `owner`'s (`None`: as recorded).
async fn answer_as_slurmrestd_for(
    server: &wiremock::MockServer,
    nodes: &[(&str, &str)],
    owner: Option<&crate::slurm::node_owner::NodeOwner>,
) {
    use wiremock::matchers::{method, path_regex};
    use wiremock::{Mock, ResponseTemplate};

    server.reset().await;
    let mut answers = vec![("ping".to_owned(), recorded("ping"))];
    for (node, case) in nodes {
        answers.push((format!("node/{node}"), recorded_node(case, node, owner)));
    }
    for (path, body) in answers {
        Mock::given(method("GET"))
            .and(path_regex(format!("^/slurm/v0\\.0\\.42/{path}/?$")))
            .respond_with(ResponseTemplate::new(200).set_body_json(body))
            .mount(server)
            .await;
    }
}

/// slurmrestd's recorded answer `case` about one node, named `node` and made `owner`'s (a
/// dynamic node with the set's owner record; `None`: as recorded).
fn recorded_node(
    case: &str,
    node: &str,
    owner: Option<&crate::slurm::node_owner::NodeOwner>,
) -> serde_json::Value {
    let mut body = recorded(case);
    if let Some(record) = body["nodes"].get_mut(0) {
        record["name"] = json!(node);
        if let Some(owner) = owner {
            record["extra"] = json!(owner.to_extra());
            if let Some(state) = record["state"].as_array_mut()
                && !state.contains(&json!("DYNAMIC_NORM"))
            {
                state.push(json!("DYNAMIC_NORM"));
            }
        }
    }
    body
}

/// Make `server` a slurmrestd that answers its ping but refuses every read of `node` (403).
async fn refuse_node_reads(server: &wiremock::MockServer, node: &str) {
    use wiremock::matchers::{method, path_regex};
    use wiremock::{Mock, ResponseTemplate};

    answer_as_slurmrestd(server, &[]).await;
    Mock::given(method("GET"))
        .and(path_regex(format!("^/slurm/v0\\.0\\.42/node/{node}/?$")))
        .respond_with(ResponseTemplate::new(403).set_body_string("Forbidden"))
        .mount(server)
        .await;
}

/// The requests for node `node` `server` answered, of `method` (any, `None`).
async fn node_requests(
    server: &wiremock::MockServer,
    node: &str,
    method: Option<wiremock::http::Method>,
) -> usize {
    let path = format!("/slurm/v0.0.42/node/{node}");
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| method.as_ref().is_none_or(|m| r.method == *m))
        .filter(|r| r.url.path().trim_end_matches('/') == path)
        .count()
}

/// The reads of node `node` `server` answered.
async fn node_reads(server: &wiremock::MockServer, node: &str) -> usize {
    node_requests(server, node, None).await
}

/// Which deletes of a pod slurmctld, asked now, lets go ([`plan::Confirm`]): one planned because
/// the view showed the node drained only while it still is (DRAIN and idle) or is gone; one
/// planned because the view had no node only while slurmctld has none; others without asking.
#[tokio::test]
async fn slurm_allows_a_pods_delete_only_while_slurm_still_shows_why() {
    let server = wiremock::MockServer::start().await;
    answer_as_slurmrestd(
        &server,
        &[
            ("busy", "node_dynamic_allocated"),
            ("drained", "node_drained"),
            ("gone", "node_unknown"),
        ],
    )
    .await;
    let client = SlurmClient::new(
        crate::slurm::ClientConfig::new(&server.uri())
            .unwrap()
            .allow_plaintext(true),
        Arc::new(crate::slurm::Credentials::token("t", None).unwrap()),
    )
    .unwrap();
    let delete = |name: &str, confirm| Action::DeletePod {
        name: name.into(),
        why: DeleteWhy::ScaleIn,
        confirm,
    };
    let owner = crate::slurm::node_owner::NodeOwner::new("hpc", "cpu");
    let allows = |action: Action| {
        let (client, owner) = (client.clone(), owner.clone());
        async move { slurm_allows(&client, &action, &owner).await.unwrap() }
    };
    // Seen drained: resumed since and running a job (ALLOCATED) → no.
    assert_eq!(
        allows(delete("busy", Confirm::NodeDrained)).await,
        Some(false)
    );
    assert_eq!(
        allows(delete("drained", Confirm::NodeDrained)).await,
        Some(true)
    );
    assert_eq!(allows(delete("gone", Confirm::NodeDrained)).await, None);
    // Seen absent: any node of that name → no.
    assert_eq!(
        allows(delete("drained", Confirm::NodeAbsent)).await,
        Some(false)
    );
    assert_eq!(allows(delete("gone", Confirm::NodeAbsent)).await, None);
    // Past the drain timeout: only while the node still carries our drain (running a job or
    // not), not someone else's drain, nor no drain.
    let mut ours = recorded_node("node_draining", "ours", Some(&owner));
    ours["nodes"][0]["reason"] = json!("slurm-operator: scale-in");
    {
        use wiremock::matchers::{method, path_regex};
        wiremock::Mock::given(method("GET"))
            .and(path_regex("^/slurm/v0\\.0\\.42/node/ours/?$"))
            .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(ours))
            .mount(&server)
            .await;
    }
    assert_eq!(allows(delete("ours", Confirm::OurDrain)).await, Some(true));
    assert_eq!(
        allows(delete("drained", Confirm::OurDrain)).await,
        Some(false),
        "drained by someone else (the fixture's reason)"
    );
    assert_eq!(allows(delete("busy", Confirm::OurDrain)).await, Some(false));
    assert_eq!(allows(delete("gone", Confirm::OurDrain)).await, None);
    // Not resting on the node's state: Slurm is not asked.
    let before = node_reads(&server, "busy").await;
    assert_eq!(allows(delete("busy", Confirm::Nothing)).await, Some(true));
    assert_eq!(node_reads(&server, "busy").await, before);
}

/// The deletes of node records slurmrestd served (`DELETE .../node/<node>`).
async fn node_deletes(server: &wiremock::MockServer, node: &str) -> usize {
    node_requests(server, node, Some(wiremock::http::Method::DELETE)).await
}

/// Serve the removal of node `node` as Slurm 24.11 does.
async fn answer_node_delete(server: &wiremock::MockServer, node: &str) {
    use wiremock::matchers::{method, path_regex};
    use wiremock::{Mock, ResponseTemplate};

    Mock::given(method("DELETE"))
        .and(path_regex(format!("^/slurm/v0\\.0\\.42/node/{node}/?$")))
        .respond_with(ResponseTemplate::new(200).set_body_json(recorded("delete_node_ok")))
        .mount(server)
        .await;
}

/// Within the view's age a node's name may have been deleted and registered again by another
/// owner (another namespace's set, a hand-started slurmd): slurmctld, asked just before, must
/// still show the node the set's, or no drain, resume, record removal or pod delete that rests
/// on its state goes through, whatever that state. The set's own, in the same state, goes.
#[tokio::test]
async fn slurm_allows_nothing_on_a_node_that_is_no_longer_the_sets() {
    let server = wiremock::MockServer::start().await;
    let client = SlurmClient::new(
        crate::slurm::ClientConfig::new(&server.uri())
            .unwrap()
            .allow_plaintext(true),
        Arc::new(crate::slurm::Credentials::token("t", None).unwrap()),
    )
    .unwrap();
    let ours = crate::slurm::node_owner::NodeOwner::new("hpc", "cpu");
    let theirs = crate::slurm::node_owner::NodeOwner::new("team-b", "cpu");
    let nodes = [("idle", "node_dynamic_idle"), ("drained", "node_drained")];
    let actions = [
        Action::Drain {
            node: "idle".into(),
            reason: plan::drain_reason(plan::WHY_SCALE_IN),
        },
        Action::DeleteNodeRecord {
            node: "idle".into(),
        },
        Action::DeletePod {
            name: "drained".into(),
            why: DeleteWhy::ScaleIn,
            confirm: Confirm::NodeDrained,
        },
    ];
    for (owner, allowed) in [(Some(&theirs), false), (None, false), (Some(&ours), true)] {
        answer_as_slurmrestd_for(&server, &nodes, owner).await;
        for action in &actions {
            assert_eq!(
                slurm_allows(&client, action, &ours).await.unwrap(),
                Some(allowed),
                "{action:?} on a node of {owner:?}"
            );
        }
    }
    // A drain with our reason, resumable: resumed only while the node is the set's.
    let resume = Action::Resume { node: "n".into() };
    for (owner, allowed) in [(&theirs, false), (&ours, true)] {
        answer_as_slurmrestd_for(&server, &[("n", "node_drained")], Some(owner)).await;
        let mut body = recorded("node_drained");
        body["nodes"][0]["name"] = json!("n");
        body["nodes"][0]["extra"] = json!(owner.to_extra());
        body["nodes"][0]["state"] = json!(["IDLE", "DRAIN", "DYNAMIC_NORM"]);
        body["nodes"][0]["reason"] = json!(plan::drain_reason(plan::WHY_SCALE_IN));
        wiremock::Mock::given(wiremock::matchers::method("GET"))
            .and(wiremock::matchers::path("/slurm/v0.0.42/node/n"))
            .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(body))
            .with_priority(1)
            .mount(&server)
            .await;
        assert_eq!(
            slurm_allows(&client, &resume, &ours).await.unwrap(),
            Some(allowed),
            "resume of our drain on a node of {owner}"
        );
    }

    // The record's removal reads the node first and goes only while it is the set's.
    let record = Action::DeleteNodeRecord {
        node: "idle".into(),
    };
    answer_as_slurmrestd_for(&server, &nodes, Some(&theirs)).await;
    answer_node_delete(&server, "idle").await;
    assert_eq!(
        apply_slurm(&client, &record, &ours).await.unwrap(),
        SlurmOutcome::Superseded
    );
    assert_eq!(node_deletes(&server, "idle").await, 0, "not removed");
    answer_as_slurmrestd_for(&server, &nodes, Some(&ours)).await;
    answer_node_delete(&server, "idle").await;
    assert_eq!(
        apply_slurm(&client, &record, &ours).await.unwrap(),
        SlurmOutcome::Done
    );
    assert_eq!(node_deletes(&server, "idle").await, 1);
    assert!(node_reads(&server, "idle").await > 0, "read first");
}

/// A node of set `cpu` in `hpc` (dynamic, its owner record) in `states`.
fn set_node(name: &str, states: &[&str], reason: Option<&str>) -> crate::slurm::types::Node {
    super::plan::tests::owned_node(
        crate::slurm::node_owner::NodeOwner::new("hpc", "cpu"),
        name,
        states,
        reason,
    )
}

/// The review's race: scaled 2 → 1, the victim's node was drained (our drain, idle) and the
/// index still shows that; meanwhile a scale back out resumed it and a job started there, and
/// now the set is at 1 again. The round asks slurmctld first: while it shows the node ALLOCATED
/// the pod is not deleted (no DELETE, no Event; the round looks again soon); while slurmctld
/// cannot be asked, neither; once it shows the node drained, the pod goes. The status says
/// what came of it, not what the plan hoped: `Draining=True` names the pod and what it waits
/// for until it is deleted, and `Ready` counts the victim apart from the nodes the set keeps.
#[tokio::test]
async fn a_pod_whose_node_the_view_shows_drained_goes_only_once_slurm_says_so_too() {
    let server = wiremock::MockServer::start().await;
    let (keep, victim) = (pod_name("cpu", 0), pod_name("cpu", 1));
    answer_as_slurmrestd(&server, &[(&victim, "node_dynamic_allocated")]).await;
    let (ctx, mut api) = Context::test();
    let ctx = Arc::new(ctx);
    let _index = register_view(
        &ctx,
        &server.uri(),
        [
            set_node(&keep, &["IDLE"], None),
            set_node(
                &victim,
                &["IDLE", "DRAIN"],
                Some(&plan::drain_reason(plan::WHY_SCALE_IN)),
            ),
        ],
    );
    let set = nodeset(1);
    let listed = vec![existing_pod(&set, 0), existing_pod(&set, 1)];
    let names = (keep.clone(), victim.clone());
    let scenario = tokio::spawn(async move {
        let (keep, victim) = names;
        // 1. Slurm says ALLOCATED: no DELETE, no Event; the kept pod is still projected.
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods(&mut api, listed.clone()).await;
        assert_eq!(expect_node_condition(&mut api, &keep).await, "Idle");
        expect_pdb(&mut api).await;
        let status = expect_status(&mut api, &nodeset(1)).await;
        assert_eq!(status.replicas, 2);
        let draining = condition::find(&status.conditions, CONDITION_DRAINING).unwrap();
        assert_eq!(
            (draining.status.as_str(), draining.reason.as_str()),
            ("True", "WaitingForDrain")
        );
        assert_eq!(
            draining.message,
            format!("{victim}: {}", plan::WAIT_SUPERSEDED)
        );
        let ready = condition::find(&status.conditions, condition::READY).unwrap();
        assert_eq!(
            ready.message,
            "0 of 1 nodes ready; 1 more being removed (see Draining)"
        );
        // 1b. slurmctld cannot be asked: no DELETE; a failure, and still draining.
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods(&mut api, listed.clone()).await;
        assert_eq!(expect_node_condition(&mut api, &keep).await, "Idle");
        expect_pdb(&mut api).await;
        expect_nodeset_event(&mut api, "cpu", "Unauthorized").await;
        let status = expect_status(&mut api, &nodeset(1)).await;
        assert!(condition::is_true(
            &status.conditions,
            CONDITION_REPLICA_FAILURE
        ));
        let draining = condition::find(&status.conditions, CONDITION_DRAINING).unwrap();
        assert_eq!(draining.status, "True");
        assert_eq!(
            draining.message,
            format!("{victim}: {}", plan::WAIT_DELETE_FAILED)
        );
        // 2. Slurm says drained: the pod goes.
        expect_get_cluster(&mut api, &["hpc"]).await;
        expect_list_pods(&mut api, listed).await;
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::DELETE, "{call:?}");
        assert_eq!(call.path, format!("/api/v1/namespaces/hpc/pods/{victim}"));
        send.send_response(ok(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": victim, "namespace": "hpc"}})));
        expect_nodeset_event(&mut api, "cpu", "NodeRemoved").await;
        assert_eq!(expect_node_condition(&mut api, &keep).await, "Idle");
        assert_eq!(expect_node_condition(&mut api, &victim).await, "Drained");
        expect_pdb(&mut api).await;
        let status = expect_status(&mut api, &nodeset(1)).await;
        let draining = condition::find(&status.conditions, CONDITION_DRAINING).unwrap();
        assert_eq!(
            (draining.status.as_str(), draining.reason.as_str()),
            ("False", "NothingToDrain")
        );
        api.expect_no_more_calls().await;
    });
    let action = reconcile(Arc::new(nodeset(1)), Arc::clone(&ctx))
        .await
        .unwrap();
    assert_eq!(action, controller::Action::requeue(WAIT_RESYNC));
    assert!(
        node_reads(&server, &victim).await > 0,
        "slurmctld was asked"
    );
    refuse_node_reads(&server, &victim).await;
    let error = reconcile(Arc::new(nodeset(1)), Arc::clone(&ctx))
        .await
        .unwrap_err();
    assert_eq!(error.category(), "Unauthorized", "{error:?}");
    answer_as_slurmrestd(&server, &[(&victim, "node_drained")]).await;
    reconcile(Arc::new(nodeset(1)), ctx).await.unwrap();
    scenario.await.unwrap();
}

/// The Warning of a delete at `scaleIn.drainTimeout` names what the node was drained for: a
/// scale-in, a rolling update or the set's deletion (not "scaleIn" for all three).
#[test]
fn a_drain_timeout_warning_names_the_real_cause() {
    for (leaving, cause) in [
        (plan::Leaving::ScaleIn, "for a scale-in"),
        (plan::Leaving::Update, "for a rolling update"),
        (plan::Leaving::SetDeleted, "for the SlurmNodeSet's deletion"),
    ] {
        let notice = delete_notice("cpu-x-1", DeleteWhy::DrainTimeout(leaving));
        assert!(notice.warning, "{notice:?}");
        assert_eq!(notice.reason, "DrainTimeoutExceeded");
        assert_eq!(
            notice.note,
            format!(
                "the drain of node cpu-x-1 {cause} had not ended when scaleIn.drainTimeout ran \
                 out; pod deleted anyway (jobs still on it end)"
            )
        );
    }
}

/// Each call the reconciles beside it make: (method, path, body).
type Calls = Arc<std::sync::Mutex<Vec<(Method, String, Value)>>>;

/// Answers every call of set `cpu`'s reconciles as the API server would with the set's pods
/// `pods` and no PodDisruptionBudget, and keeps the calls; abort it when done.
fn answer_every_call(
    mut api: ApiServerVerifier,
    set: SlurmNodeSet,
    pods: Vec<Pod>,
) -> (tokio::task::JoinHandle<()>, Calls) {
    let calls = Calls::default();
    let kept = Arc::clone(&calls);
    let task = tokio::spawn(async move {
        loop {
            let (call, send) = api.next().await;
            let response = match (&call.method, call.path.as_str()) {
                (&Method::GET, "/apis/slurm.rs/v1alpha1/slurmclusters/main") => ok(&json!({
                    "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmCluster",
                    "metadata": {"name": "main", "uid": "cluster-uid"},
                    "spec": {
                        "endpoint": "http://slurmrestd:6820", "allowInsecureHttp": true,
                        "auth": {"jwt": {"keySecretRef": {"name": "k"}}},
                        "nodeSetNamespaces": ["hpc"],
                    },
                })),
                (&Method::GET, "/api/v1/namespaces/hpc/pods") => ok(
                    &json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": pods}),
                ),
                (&Method::GET, path) if path.contains("/poddisruptionbudgets/") => {
                    not_found("poddisruptionbudgets", "cpu")
                }
                // The leader Lease (`leadership_read_from_the_lease`): held by replica "b".
                (&Method::GET, "/apis/coordination.k8s.io/v1/namespaces/ops/leases/lease") => {
                    ok(&json!({
                        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": "lease", "namespace": "ops"},
                        "spec": {
                            "holderIdentity": "b", "leaseDurationSeconds": 15,
                            "renewTime": chrono::Utc::now()
                                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                        },
                    }))
                }
                (&Method::PATCH, path)
                    if path.ends_with("/status") && path.contains("slurmnodesets") =>
                {
                    let mut answer = set.clone();
                    answer.status = serde_json::from_value(call.body["status"].clone()).ok();
                    ok(&serde_json::to_value(&answer).unwrap())
                }
                (&Method::PATCH, _) => ok(
                    &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "hpc"}}),
                ),
                // PodDisruptionBudget and Event creates.
                (&Method::POST, _) => Response::builder()
                    .status(StatusCode::CREATED)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&call.body).unwrap()))
                    .unwrap(),
                _ => panic!("unexpected call {call:?}"),
            };
            kept.lock()
                .unwrap()
                .push((call.method.clone(), call.path.clone(), call.body.clone()));
            send.send_response(response);
        }
    });
    (task, calls)
}

/// `set`'s pods 0 and 1, their Slurm nodes idle in a trusted view (a client that reaches
/// nothing), and every API call answered ([`answer_every_call`]). Returns the index's sender,
/// which must live while the test does, the responder and its calls.
fn two_idle_pods(
    ctx: &Context,
    api: ApiServerVerifier,
    set: &SlurmNodeSet,
) -> (
    tokio::sync::watch::Sender<Arc<crate::state::index::ClusterState>>,
    tokio::task::JoinHandle<()>,
    Calls,
) {
    let pods = vec![existing_pod(set, 0), existing_pod(set, 1)];
    let names = [pod_name("cpu", 0), pod_name("cpu", 1)];
    let view = register_view(
        ctx,
        "http://127.0.0.1:1",
        names.iter().map(|n| set_node(n, &["IDLE"], None)),
    );
    let (responder, calls) = answer_every_call(api, set.clone(), pods);
    (view, responder, calls)
}

/// The leadership of replica `identity`, whose renewal loop says it leads, read again from the
/// Lease [`answer_every_call`] serves (held by replica "b").
fn leadership_read_from_the_lease(ctx: &Context, identity: &str) -> crate::leader::Leadership {
    let (leading, state) = tokio::sync::watch::channel(true);
    // The loop's word stays "leading" for the test's life.
    std::mem::forget(leading);
    crate::leader::Leadership::with_lease(
        state,
        Api::namespaced(ctx.client.clone(), "ops"),
        "lease",
        identity,
    )
}

/// A replica whose renewal loop still says it leads (paused, or its renewals failing past the
/// Lease's expiry) while another holds the Lease drains nothing: the round reads the Lease
/// right before its first drain, stops (`NotLeader`, nothing counted as a failure), and writes
/// no status. The holder's own round goes on to the drain (here refused: slurmrestd is not
/// there).
#[tokio::test]
async fn a_replica_that_lost_the_lease_unseen_drains_nothing() {
    for (identity, drains) in [("a", false), ("b", true)] {
        let (mut ctx, api) = Context::test();
        ctx.leadership = leadership_read_from_the_lease(&ctx, identity);
        let ctx = Arc::new(ctx);
        let set = nodeset(1);
        let (_view, responder, calls) = two_idle_pods(&ctx, api, &set);
        let result = reconcile(Arc::new(set), Arc::clone(&ctx)).await;
        let calls = calls.lock().unwrap().clone();
        assert!(
            calls
                .iter()
                .any(|(_, path, _)| path.ends_with("/leases/lease")),
            "{identity}: the Lease read"
        );
        if drains {
            assert!(
                matches!(result, Err(Error::SlurmAction { .. })),
                "{identity}: {result:?}"
            );
        } else {
            assert!(matches!(result, Err(Error::NotLeader)), "{result:?}");
            assert!(
                !calls
                    .iter()
                    .any(|(method, path, _)| method == Method::PATCH && path.ends_with("/status")),
                "no status written: {calls:?}"
            );
        }
        responder.abort();
    }
    // Not a failure, and looked at again soon while the loop's word is still "leading": a Lease
    // read that failed (the API server restarting) would otherwise leave the set waiting.
    let (ctx, _api) = Context::test();
    let mut ctx = ctx;
    ctx.leadership = leadership_read_from_the_lease(&ctx, "a");
    assert_eq!(
        error_policy(Arc::new(nodeset(1)), &Error::NotLeader, Arc::new(ctx)),
        controller::Action::requeue(WAIT_RESYNC)
    );
}

/// A deposed replica that still believes it leads does not let a deleted set go at its own
/// deadline (counted from its own gain, before the new leader's): the Lease is read first, and
/// neither the Warning nor the finalizer's removal follows.
#[tokio::test]
async fn a_replica_that_lost_the_lease_unseen_keeps_a_deleted_sets_finalizer() {
    let (mut ctx, api) = Context::test();
    ctx.deletion_deadline = Some(std::time::Duration::from_secs(15 * 60));
    *ctx.acting_since.lock().unwrap() = Utc::now() - chrono::TimeDelta::hours(2);
    ctx.leadership = leadership_read_from_the_lease(&ctx, "a");
    let ctx = Arc::new(ctx);
    let late = deleted(nodeset(1), chrono::TimeDelta::minutes(16));
    let pods = vec![existing_pod(&late, 0)];
    let (responder, calls) = answer_every_call(api, late.clone(), pods);
    let result = reconcile(Arc::new(late), ctx).await;
    assert!(matches!(result, Err(Error::NotLeader)), "{result:?}");
    let calls = calls.lock().unwrap().clone();
    assert!(
        calls
            .iter()
            .any(|(_, path, _)| path.ends_with("/leases/lease")),
        "the Lease read: {calls:?}"
    );
    assert!(
        !calls
            .iter()
            .any(|(method, path, _)| (method == Method::PATCH
                && path.ends_with("/slurmnodesets/cpu"))
                || method == Method::POST),
        "no finalizer removed, no Event: {calls:?}"
    );
    responder.abort();
}

/// The review finding: once a round trusted the view, the SlurmCluster's client dropped (a
/// broken credentials Secret, an endpoint that now reaches another cluster) is an outage like
/// slurmctld down: slurmd still runs jobs, and a node idle at the last view may run one now, so
/// every scheduled pod is labelled busy and the PodDisruptionBudget holds it. Before, the
/// labels stayed as the last view left them, and `kubectl drain` could evict a running job.
#[tokio::test]
async fn after_a_view_a_dropped_client_labels_every_scheduled_pod_busy() {
    let (ctx, api) = Context::test();
    let ctx = Arc::new(ctx);
    let set = nodeset(2);
    let names = [pod_name("cpu", 0), pod_name("cpu", 1)];
    let (_view, responder, calls) = two_idle_pods(&ctx, api, &set);
    let labelled_busy = || -> Vec<String> {
        let calls = calls.lock().unwrap();
        calls
            .iter()
            .filter(|(method, path, body)| {
                method == Method::PATCH
                    && path.contains("/pods/")
                    && body["metadata"]["labels"][pods::LABEL_BUSY] == "true"
            })
            .map(|(_, path, _)| path.rsplit('/').next().unwrap().to_owned())
            .collect()
    };

    // A trusted view: both nodes idle, no pod labelled busy.
    reconcile(Arc::new(set.clone()), Arc::clone(&ctx))
        .await
        .unwrap();
    assert!(!calls.lock().unwrap().is_empty());
    assert_eq!(labelled_busy(), Vec::<String>::new());
    assert!(ctx.nodesets.saw_nodes_before("main"));

    // The client dropped: both pods labelled busy.
    calls.lock().unwrap().clear();
    assert!(ctx.clusters.remove(&ObjectRef::<SlurmCluster>::new("main")));
    reconcile(Arc::new(set.clone()), Arc::clone(&ctx))
        .await
        .unwrap();
    assert_eq!(labelled_busy(), names);

    // The Lease lost and gained again (its connections dropped too): a start, not an outage;
    // the labels stay as they are until a view.
    ctx.nodesets.forget_views();
    calls.lock().unwrap().clear();
    reconcile(Arc::new(set), Arc::clone(&ctx)).await.unwrap();
    assert!(!calls.lock().unwrap().is_empty());
    assert_eq!(labelled_busy(), Vec::<String>::new());
    responder.abort();
}

/// Two namespaces whose tags collide, found the way anyone could: by trying names.
fn colliding_namespaces() -> (String, String) {
    let mut seen = std::collections::HashMap::new();
    for i in 0.. {
        let namespace = format!("team-{i}");
        let tag = pods::namespace_tag(&namespace);
        if let Some(first) = seen.insert(tag, namespace.clone()) {
            return (first, namespace);
        }
    }
    unreachable!()
}

fn set_in(namespace: &str, name: &str, created_secs: i64) -> Arc<SlurmNodeSet> {
    let mut set = nodeset_named(name, 1);
    set.metadata.namespace = Some(namespace.into());
    set.metadata.uid = Some(format!("uid-{namespace}-{name}"));
    set.metadata.creation_timestamp =
        crate::crd::time::from_utc(chrono::DateTime::from_timestamp(created_secs, 0).unwrap());
    Arc::new(set)
}

/// A set whose node names another set of its SlurmCluster makes too (their namespaces' tags
/// collide) is refused when it is the later one; the first keeps them, whichever side judges.
/// A set the SlurmCluster does not admit makes no node: it takes no names.
#[test]
fn the_later_of_two_sets_making_one_node_name_is_refused() {
    let (a, b) = colliding_namespaces();
    assert_ne!(a, b);
    let prefix = pods::node_prefix(&a, "cpu").unwrap();
    assert_eq!(
        pods::node_prefix(&b, "cpu").as_deref(),
        Some(prefix.as_str())
    );
    let both = cluster(&[&a, &b]);
    let first = set_in(&a, "cpu", 1_000);
    let later = set_in(&b, "cpu", 2_000);
    let all = [Arc::clone(&first), Arc::clone(&later)];
    assert_eq!(
        names_taken(&first, &prefix, Some(&both), &all),
        None,
        "the first keeps them"
    );
    let refusal = names_taken(&later, &prefix, Some(&both), &all).expect("refused");
    assert_eq!(refusal.reason, REASON_NODE_NAMES_TAKEN);
    assert_eq!(
        refusal.message,
        format!(
            "SlurmNodeSet {a}/cpu, made earlier, names its Slurm nodes of SlurmCluster \"main\" \
             {prefix}-<ordinal> too (the two namespaces' tags collide): rename this set (its pods \
             would take the other's node names)"
        )
    );
    // The first's namespace not admitted: it makes no node, the later one is not refused.
    assert_eq!(
        names_taken(&later, &prefix, Some(&cluster(&[&b])), &all),
        None
    );
    // Made in the same second: the namespace decides, alike on both sides.
    let tied = [set_in(&a, "cpu", 1_000), set_in(&b, "cpu", 1_000)];
    let (lower, higher) = if a < b { (0, 1) } else { (1, 0) };
    assert_eq!(names_taken(&tied[lower], &prefix, Some(&both), &tied), None);
    assert!(names_taken(&tied[higher], &prefix, Some(&both), &tied).is_some());
    // Another cluster's set, another name, or itself: no conflict.
    let mut elsewhere = (*set_in(&a, "cpu", 1_000)).clone();
    elsewhere.spec.cluster_name = "other".into();
    let others = [
        Arc::new(elsewhere),
        set_in(&a, "gpu", 1_000),
        Arc::clone(&later),
    ];
    assert_eq!(names_taken(&later, &prefix, Some(&both), &others), None);

    // The first's namespace admitted only after the later one made its pods: the set with
    // pods keeps the names, and the earlier one, still without a pod, is refused.
    let mut making = (*later).clone();
    making.status = Some(crate::crd::nodeset::SlurmNodeSetStatus {
        replicas: 3,
        ..Default::default()
    });
    let all = [Arc::clone(&first), Arc::new(making.clone())];
    let refusal = names_taken(&first, &prefix, Some(&both), &all).expect("refused");
    // A set refused so has no pod: its status says so, whatever it counted before (its pods
    // deleted outside the operator), and the other set takes it as having none.
    let mut stale = (*first).clone();
    stale.status = making.status.clone();
    let status = refused_status(&stale, &refusal);
    assert_eq!(
        (
            status.replicas,
            status.ready_replicas,
            status.available_replicas
        ),
        (0, 0, 0)
    );
    let not_allowed = Refusal {
        reason: "NodeSetNotAllowed",
        message: String::new(),
    };
    assert_eq!(refused_status(&stale, &not_allowed).replicas, 3);
    assert_eq!(
        refusal.message,
        format!(
            "SlurmNodeSet {b}/cpu, which has pods, names its Slurm nodes of SlurmCluster \
             \"main\" {prefix}-<ordinal> too (the two namespaces' tags collide): rename this \
             set (its pods would take the other's node names)"
        )
    );
}

/// The later set's round makes nothing: `Ready=False`/`NodeNamesTaken` and one Warning, no
/// pod created; it looks again later (the other's deletion does not trigger it). One that has a
/// pod already goes on as before (refused, it would hold it unmanaged).
#[tokio::test]
async fn a_set_whose_node_names_another_makes_gets_nothing_but_a_condition() {
    let (a, b) = colliding_namespaces();
    let (ctx, mut api) = Context::test();
    let (store, mut writer) = reflector::store();
    let first = set_in(&a, "cpu", 1_000);
    let mut later = (*set_in(&b, "cpu", 2_000)).clone();
    later.metadata.finalizers = Some(vec![FINALIZER.into()]);
    writer.apply_watcher_event(&watcher::Event::Apply((*first).clone()));
    writer.apply_watcher_event(&watcher::Event::Apply(later.clone()));
    ctx.nodesets.add(store);
    let ctx = Arc::new(ctx);
    let namespace = b.clone();
    let expected = later.clone();
    let scenario = tokio::spawn(async move {
        expect_get_cluster(&mut api, &[a.as_str(), namespace.as_str()]).await;
        expect_list_pods_in(&mut api, &namespace, vec![]).await;
        let status = expect_status(&mut api, &expected).await;
        let ready = condition::find(&status.conditions, condition::READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", REASON_NODE_NAMES_TAKEN)
        );
        expect_nodeset_event_in(&mut api, &namespace, "cpu", REASON_NODE_NAMES_TAKEN).await;
        api.expect_no_more_calls().await;
        (api, a, namespace)
    });
    let action = reconcile(Arc::new(later.clone()), Arc::clone(&ctx))
        .await
        .unwrap();
    assert_eq!(action, controller::Action::requeue(RESYNC));
    let (mut api, a, namespace) = scenario.await.unwrap();

    // With a pod of its own, it is not refused: its round goes on to its PodDisruptionBudget.
    let prefix = pods::node_prefix(&namespace, "cpu").unwrap();
    let mut pod = pods::build_pod(&later, &prefix, 0, &pods::template_hash(&later));
    pod.metadata.uid = Some("pod-uid-0".into());
    let scenario = tokio::spawn(async move {
        expect_get_cluster(&mut api, &[a.as_str(), namespace.as_str()]).await;
        expect_list_pods_in(&mut api, &namespace, vec![pod]).await;
        let (call, _send) = api.next().await;
        call
    });
    // The scenario stops answering after that call: the round is cut off there.
    let _ = tokio::time::timeout(Duration::from_secs(5), reconcile(Arc::new(later), ctx)).await;
    let call = scenario.await.unwrap();
    assert_eq!(call.method, Method::GET, "{call:?}");
    assert!(call.path.ends_with("/poddisruptionbudgets/cpu"), "{call:?}");
}
