//! Kubernetes objects the operator-binary tests (crash, leader election) start from: a Secret
//! with the local Slurm's JWT key, a SlurmCluster for its slurmrestd, SlurmJobs; and the check that
//! Slurm's accounting holds exactly one job per SlurmJob.

#![allow(dead_code)]

use std::time::Duration;

use fake_apiserver::FakeApiServer;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use serde_json::json;
use slurm_operator::crd::slurmjob::Phase;
use slurm_operator::crd::{SlurmCluster, SlurmJob};
use slurm_operator::slurm::types::JobBaseState;

use super::LocalSlurm;
use super::e2e::{MANAGER, eventually};

/// Where an operator-binary test runs: the in-memory API server holding the SlurmCluster `local`
/// for the local Slurm in `namespace`, a kubeconfig for operator processes, a run name (prefix
/// of every object and job name: slurmdbd keeps earlier runs' jobs) and the log file the
/// processes append to, kept after the test (a failure points there).
pub struct Harness {
    pub api: FakeApiServer,
    pub client: kube::Client,
    pub kubeconfig: String,
    pub run: String,
    pub log: std::path::PathBuf,
    namespace: String,
    /// `host:port` for one operator process's metrics and health endpoints.
    metrics: String,
    _dir: tempfile::TempDir,
}

impl Harness {
    pub async fn start(slurm: &LocalSlurm, namespace: &str, prefix: &str) -> Self {
        assert!(
            slurm.accounting,
            "the scenarios count jobs in slurmdbd's records: run hack/slurm-up.sh with accounting"
        );
        slurm_operator::tls::install_crypto_provider();
        let api = FakeApiServer::start_with_crds(slurm_operator::crd::all()).await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = api
            .write_kubeconfig(dir.path())
            .to_str()
            .unwrap()
            .to_owned();
        let run = super::unique(prefix);
        let log = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{run}.log"));
        eprintln!("operator log: {}", log.display());
        let client = api.client();
        seed_cluster(&client, namespace, slurm).await;
        Self {
            api,
            client,
            kubeconfig,
            run,
            log,
            namespace: namespace.to_owned(),
            metrics: format!("127.0.0.1:{}", super::e2e::free_port()),
            _dir: dir,
        }
    }

    /// `slurm-operator run` arguments for one process at a time: the namespace, the credentials
    /// namespace, the metrics port.
    pub fn args(&self) -> [&str; 6] {
        [
            "--namespace",
            &self.namespace,
            "--credentials-namespace",
            CREDENTIALS_NAMESPACE,
            "--metrics-addr",
            &self.metrics,
        ]
    }
}

/// The SlurmCluster every scenario SlurmJob names.
pub const CLUSTER: &str = "local";
/// Where the platform admin keeps SlurmCluster credentials (the operator's `--credentials-namespace`).
pub const CREDENTIALS_NAMESPACE: &str = "slurm-operator";

/// A Secret with the local Slurm's `jwt_hs256.key` (marked as credentials, in the credentials
/// namespace) and the SlurmCluster `local` using it (1 s polls), granting `namespace` to the
/// local Slurm's own user.
pub async fn seed_cluster(client: &kube::Client, namespace: &str, slurm: &LocalSlurm) {
    seed_credentials(client, slurm).await;
    grant(
        client,
        slurm,
        json!({"namespaces": [namespace], "slurmUser": slurm.user, "allowClusterUser": true}),
    )
    .await;
}

/// The SlurmCluster `local` (applied again) with one `access` entry: `access`.
pub async fn grant(client: &kube::Client, slurm: &LocalSlurm, access: serde_json::Value) {
    let clusters: Api<SlurmCluster> = Api::all(client.clone());
    clusters
        .patch(
            CLUSTER,
            &PatchParams::apply(MANAGER),
            &Patch::Apply(json!({
                "apiVersion": "slurm.rs/v1alpha1",
                "kind": "SlurmCluster",
                "metadata": {"name": CLUSTER},
                "spec": {
                    "endpoint": slurm.url,
                    "allowInsecureHttp": true,
                    "auth": {"jwt": {
                        "keySecretRef": {"name": "slurm-jwt", "key": "jwt_hs256.key"},
                        "user": slurm.user,
                    }},
                    "pollInterval": "1s",
                    "access": [access],
                },
            })),
        )
        .await
        .unwrap();
}

/// Once the operator has seen the SlurmCluster's latest spec: its status says it observed that
/// generation. (Its SlurmJob controller watches SlurmClusters on its own; both watches are
/// served the same change by the API server.)
pub async fn cluster_observed(client: &kube::Client) {
    let clusters: Api<SlurmCluster> = Api::all(client.clone());
    eventually(
        "the operator to observe the SlurmCluster's spec",
        Duration::from_secs(30),
        || async {
            let cluster = clusters.get(CLUSTER).await.ok()?;
            let observed = cluster.status.as_ref()?.observed_generation;
            (observed.is_some() && observed == cluster.metadata.generation).then_some(())
        },
    )
    .await;
}

/// The local Slurm's `jwt_hs256.key` as the platform admin keeps it: Secret `slurm-jwt` in the
/// credentials namespace, marked as SlurmCluster credentials.
pub async fn seed_credentials(client: &kube::Client, slurm: &LocalSlurm) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), CREDENTIALS_NAMESPACE);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("slurm-jwt".into()),
            labels: Some([("slurm.rs/credentials".to_owned(), "true".to_owned())].into()),
            ..Default::default()
        },
        data: Some([("jwt_hs256.key".to_owned(), ByteString(slurm.key()))].into()),
        ..Default::default()
    };
    secrets
        .patch(
            "slurm-jwt",
            &PatchParams::apply(MANAGER),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap();
}

/// A SlurmJob running `body` (a shell line) on the SlurmCluster `local`.
pub async fn apply_slurmjob(jobs: &Api<SlurmJob>, name: &str, partition: &str, body: &str) {
    apply_manifest(jobs, name, slurmjob(name, partition, body)).await;
}

/// A SlurmJob `name` of [`CLUSTER`] that runs the shell lines `body` on `partition`; a test adds
/// what else its case needs to `spec` before [`apply_manifest`].
pub fn slurmjob(name: &str, partition: &str, body: &str) -> serde_json::Value {
    json!({
        "apiVersion": "slurm.rs/v1alpha1",
        "kind": "SlurmJob",
        "metadata": {"name": name},
        "spec": {
            "clusterName": CLUSTER,
            "partition": partition,
            "script": format!("#!/bin/sh\n{body}\n"),
            "environment": {"PATH": "/usr/bin:/bin"},
        },
    })
}

/// Apply (server-side, as [`MANAGER`]) the SlurmJob `manifest` named `name`.
pub async fn apply_manifest(jobs: &Api<SlurmJob>, name: &str, manifest: serde_json::Value) {
    jobs.patch(name, &PatchParams::apply(MANAGER), &Patch::Apply(manifest))
        .await
        .unwrap();
}

/// Every SlurmJob named in `names`, once all have ended.
pub async fn all_ended(jobs: &Api<SlurmJob>, names: &[String], timeout: Duration) -> Vec<SlurmJob> {
    eventually("every SlurmJob ended", timeout, || async {
        let list = jobs.list(&Default::default()).await.ok()?;
        let ended: Vec<SlurmJob> = names
            .iter()
            .filter_map(|name| {
                list.items
                    .iter()
                    .find(|j| j.metadata.name.as_deref() == Some(name.as_str()))
                    .filter(|j| j.status.as_ref().is_some_and(|s| s.phase.is_terminal()))
                    .cloned()
            })
            .collect();
        (ended.len() == names.len()).then_some(ended)
    })
    .await
}

/// Each SlurmJob Completed with exit code 0, and Slurm's accounting holds exactly one job with
/// its ownership tag: the one its status names.
pub async fn assert_one_slurm_job_each(slurm: &LocalSlurm, finished: &[SlurmJob]) {
    let client = slurm.client();
    for sj in finished {
        let name = sj.metadata.name.as_deref().unwrap();
        let uid = sj.metadata.uid.as_deref().unwrap();
        let status = sj.status.as_ref().unwrap();
        assert_eq!(status.phase, Phase::Completed, "{name}: {status:?}");
        assert_eq!(status.exit_code, Some(0), "{name}: {status:?}");
        assert!(status.nodes.is_some(), "{name}: {status:?}");
        let records = eventually(
            &format!("{name} in accounting"),
            Duration::from_secs(60),
            || async {
                let records = client
                    .accounting_jobs_named(name, None, None)
                    .await
                    .ok()??;
                let ours: Vec<_> = records
                    .into_iter()
                    .filter(|j| j.owner.as_ref().is_some_and(|o| o.is_of(uid)))
                    .collect();
                (!ours.is_empty() && ours.iter().all(|j| j.state.is_final())).then_some(ours)
            },
        )
        .await;
        let ids: Vec<u32> = records.iter().map(|j| j.job_id).collect();
        assert_eq!(ids.len(), 1, "{name}: Slurm jobs {ids:?} carry its tag");
        assert_eq!(
            status.job_id,
            Some(i64::from(ids[0])),
            "{name}: the status names the job Slurm ran"
        );
        assert_eq!(records[0].state.base, JobBaseState::Completed, "{name}");
    }
}
