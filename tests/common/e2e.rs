//! Shared scaffolding for the end-to-end tests against a real Kubernetes API server: the operator
//! binary as a child process, polling, and applying the CRDs from `crds/`.

use std::future::Future;
use std::net::TcpListener;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};

/// Delete what a test made, while its operator still runs (the finalizers are the operator's to
/// release; deleted after it stopped, they would hold the namespace Terminating for good): the
/// SlurmJobs of `namespace` (each gone), the SlurmCluster `cluster` (gone), then `namespace`.
pub async fn clean_up(client: &kube::Client, namespace: &str, cluster: &str) {
    use kube::api::{DeleteParams, ListParams};
    let jobs: Api<slurm_operator::crd::SlurmJob> = Api::namespaced(client.clone(), namespace);
    jobs.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect("delete the SlurmJobs");
    eventually("the SlurmJobs gone", Duration::from_secs(120), || async {
        jobs.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    let clusters: Api<slurm_operator::crd::SlurmCluster> = Api::all(client.clone());
    clusters
        .delete(cluster, &DeleteParams::default())
        .await
        .expect("delete the SlurmCluster");
    eventually("the SlurmCluster gone", Duration::from_secs(60), || async {
        clusters
            .get_opt(cluster)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .delete(namespace, &DeleteParams::default())
        .await
        .expect("delete the namespace");
}

/// The field manager of everything the e2e tests apply server-side.
pub const MANAGER: &str = "slurm-operator-e2e";

/// The operator process; killed (and reaped) when dropped, whatever happened.
pub struct Operator {
    child: Child,
    /// When set, dropping first sends SIGTERM and waits this long for the process to exit before
    /// killing it.
    sigterm_on_drop: Option<Duration>,
}

impl Operator {
    /// `slurm-operator run` watching `namespace`, which is also its credentials namespace.
    pub fn start(namespace: &str, metrics_port: u16) -> Self {
        Self::spawn(
            &[
                "--namespace",
                namespace,
                "--credentials-namespace",
                namespace,
                "--metrics-addr",
                &format!("127.0.0.1:{metrics_port}"),
            ],
            &[],
            None,
        )
    }

    /// `slurm-operator run ARGS` with extra environment; its log appended to `log` when given.
    pub fn spawn(args: &[&str], env: &[(&str, &str)], log: Option<&std::path::Path>) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_slurm-operator"));
        command
            .arg("run")
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn,slurm_operator=debug".into()),
            )
            .envs(env.iter().copied())
            .stdin(Stdio::null());
        if let Some(log) = log {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .expect("open the operator log");
            command
                .stdout(file.try_clone().expect("dup log"))
                .stderr(file);
        }
        let child = command.spawn().expect("start slurm-operator run");
        Self {
            child,
            sigterm_on_drop: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send `signal` (e.g. "KILL", "STOP", "CONT") to the process. For "STOP", returns once
    /// every thread of it has stopped: `kill` returns when the signal is sent, and a thread
    /// still running on a busy machine could read what the test writes next.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
        if signal == "STOP" {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !self.stopped() {
                assert!(
                    Instant::now() < deadline,
                    "the process did not stop within 10s"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// Whether every thread of the process is stopped (state `T` in `/proc/PID/task/*/stat`,
    /// the field after the command name's closing parenthesis).
    fn stopped(&self) -> bool {
        let tasks = format!("/proc/{}/task", self.child.id());
        let Ok(entries) = std::fs::read_dir(&tasks) else {
            return false;
        };
        entries.flatten().all(|task| {
            std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    .is_some_and(|state| state == "T" || state == "t")
            })
        })
    }

    /// SIGKILL, and reap the process.
    pub fn sigkill(&mut self) -> ExitStatus {
        let _ = self.child.kill();
        self.child.wait().expect("reap the operator")
    }

    /// On drop, stop the process with SIGTERM (waiting at most `grace` for it to exit) before
    /// killing it, for a test that never calls [`Operator::terminate`] itself.
    pub fn sigterm_on_drop(mut self, grace: Duration) -> Self {
        self.sigterm_on_drop = Some(grace);
        self
    }

    /// Send SIGTERM and wait (at most `timeout`) for the process to exit.
    pub fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the operator") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the operator did not exit within {timeout:?} of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Wait (at most `timeout`) for the process to exit on its own; `None` if it still runs.
    /// Async, so that an in-process API server keeps serving it meanwhile.
    pub async fn exited_within(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the operator") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().expect("poll the operator") {
            panic!("the operator exited early: {status}");
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Some(grace) = self
            .sigterm_on_drop
            .filter(|_| matches!(self.child.try_wait(), Ok(None)))
        {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let deadline = Instant::now() + grace;
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("pick a free port")
        .port()
}

/// Poll `probe` every 250 ms until it returns `Some`, or fail after `timeout` with `what`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
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

/// A SlurmCluster spec for the local Slurm: its JWT key from the Secret `jwt` (key
/// `jwt_hs256.key`) for its own user, a 1 s poll, and `access` as given.
pub fn local_cluster_spec(
    slurm: &super::LocalSlurm,
    access: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({
        "endpoint": slurm.url,
        "allowInsecureHttp": slurm.url.starts_with("http://"),
        "auth": {"jwt": {"keySecretRef": {"name": "jwt", "key": "jwt_hs256.key"}, "user": slurm.user}},
        "pollInterval": "1s",
        "access": access,
    })
}

/// Apply (server-side, as [`MANAGER`]) the cluster-scoped SlurmCluster `name` with `spec`, whole:
/// a field left out of a later apply is removed.
pub async fn apply_cluster(
    client: &kube::Client,
    name: &str,
    spec: serde_json::Value,
) -> kube::Result<slurm_operator::crd::SlurmCluster> {
    let clusters: Api<slurm_operator::crd::SlurmCluster> = Api::all(client.clone());
    clusters
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(serde_json::json!({
                "apiVersion": "slurm.rs/v1alpha1",
                "kind": "SlurmCluster",
                "metadata": {"name": name},
                "spec": spec,
            })),
        )
        .await
}

/// Apply (server-side) every CRD in `crds/` and wait until each is established.
pub async fn apply_crds(client: &kube::Client) {
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

/// A value of the operator's `/metrics`, by the exact series name with labels, but for the
/// `cluster` label (a shared poller reports under whichever SlurmCluster started it).
pub async fn metric(metrics: &str, series: &str) -> Option<f64> {
    let text = reqwest::get(format!("http://{metrics}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .map(without_cluster_label)
        .find_map(|line| {
            line.strip_prefix(series)?
                .strip_prefix(' ')
                .map(str::to_owned)
        })
        .and_then(|value| value.trim().parse().ok())
}

/// `line` without its `cluster="..."` label, if it has one first.
fn without_cluster_label(line: &str) -> String {
    match line.split_once("{cluster=\"") {
        Some((name, rest)) => match rest.split_once("\"") {
            Some((_, after)) => format!("{name}{{{}", after.strip_prefix(',').unwrap_or(after)),
            None => line.to_owned(),
        },
        None => line.to_owned(),
    }
}
