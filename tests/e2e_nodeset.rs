//! End to end for NodeSets against a real Kubernetes API server (no kubelet or scheduler needed):
//! the operator binary runs as a child process. Runs only when `KUBECONFIG` is set.
//!
//! A NodeSet whose Cluster has no client (no Slurm is involved): the operator creates its pods
//! with the completed slurmd args; `kubectl scale` through the scale subresource adds pods; scaling
//! in removes pods that were never scheduled (slurmd never ran in them, so nothing to drain).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::net::TcpListener;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::json;
use slurm_operator::crd::NodeSet;

const MANAGER: &str = "slurm-operator-e2e";

/// The operator process; killed (and reaped) when dropped, whatever happened.
struct Operator(Child);

impl Operator {
    fn start(namespace: &str, metrics_port: u16) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_slurm-operator"))
            .args([
                "run",
                "--namespace",
                namespace,
                "--metrics-addr",
                &format!("127.0.0.1:{metrics_port}"),
            ])
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn,slurm_operator=debug".into()),
            )
            .stdin(Stdio::null())
            .spawn()
            .expect("start slurm-operator run");
        Self(child)
    }

    /// Send SIGTERM and wait (at most `timeout`) for the process to exit.
    fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.0.try_wait().expect("wait for the operator") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the operator did not exit within {timeout:?} of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn assert_running(&mut self) {
        if let Some(status) = self.0.try_wait().expect("poll the operator") {
            panic!("the operator exited early: {status}");
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("pick a free port")
        .port()
}

/// Poll `probe` every 250 ms until it returns `Some`, or fail after `timeout` with `what`.
async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn apply_crds(client: &kube::Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/crds");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read crds/") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let crd: CustomResourceDefinition = serde_yaml_ng::from_str(&text)
            .unwrap_or_else(|e| panic!("parse {}: {e}", path.display()));
        let name = crd.metadata.name.clone().unwrap();
        api.patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("apply CRD {name}: {e}"));
        names.push(name);
    }
    assert_eq!(names.len(), 3, "three CRDs in crds/: {names:?}");
    for name in names {
        tokio::time::timeout(
            Duration::from_secs(60),
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .unwrap_or_else(|_| panic!("CRD {name} not established within 60s"))
        .unwrap();
    }
}

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
    let nodesets: Api<NodeSet> = Api::namespaced(client.clone(), &namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let mut operator = Operator::start(&namespace, free_port());

    nodesets
        .patch(
            "cpu",
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(json!({
                "apiVersion": "slurm.rs/v1alpha1",
                "kind": "NodeSet",
                "metadata": {"name": "cpu"},
                "spec": {
                    "clusterRef": "nowhere",
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
        .expect("create the NodeSet");

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
