//! End to end against a real Kubernetes API server and the real local Slurm (with its users
//! `alice` and `bob`, hack/): the multi-tenant example of `examples/tenancy/`, applied exactly
//! as its README says, the admin's files as the admin and the tenant's as a tenant.
//!
//! Runs only when `KUBECONFIG` is set (skipped otherwise, saying why), and needs `helm` (`$HELM`,
//! the copy `hack/helm-test.sh` caches, or on PATH):
//! the tenant's only rights come from the operator chart's own tenant ClusterRoles (rendered
//! with `helm template`), aggregated into the built-in `edit` role that
//! `30-tenant-rolebinding.yaml` binds in `team-a`.
//!
//! 1. As the admin: the CRDs, the chart's user ClusterRoles, the namespaces, the credentials
//!    Secret (with the local Slurm's key), the SlurmCluster (pointed at the local slurmrestd),
//!    the tenant's RoleBinding; the operator runs watching team-a, team-b and team-c.
//! 2. As the tenant (`system:serviceaccount:team-a:researcher`, impersonated): the example
//!    SlurmJob is accepted and runs as Slurm user `alice`; creating a SlurmCluster or a
//!    SlurmNodeSet, reading the credentials Secret, creating a SlurmJob in team-b and writing a
//!    SlurmJob's status are all refused (403).
//! 3. A SlurmJob in team-c, which no access entry grants, gets `Ready=False/NoAccess`.
//! 4. The chart's ValidatingAdmissionPolicy (rendered with `helm template`, the admin running
//!    the operator here named in `finalizerPolicy.extraUsers`): the tenant may not remove a
//!    SlurmJob's finalizer (a dry-run patch, refused 403 with the policy's message) but may edit
//!    it otherwise; the operator still removes it when the namespaces are deleted.
//!
//! The objects are deleted at the end of a passing run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use serde_json::{Value, json};
use slurm_operator::crd::condition::{self, READY};
use slurm_operator::crd::slurmjob::Phase;
use slurm_operator::crd::{SlurmCluster, SlurmJob};

use common::e2e::{MANAGER, Operator, apply_crds, eventually, free_port};

const TENANT: &str = "system:serviceaccount:team-a:researcher";
const CREDENTIALS: &str = "slurm-operator";

/// The documents of one example file.
fn example(file: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/tenancy")
        .join(file);
    documents(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .filter(|doc: &Value| !doc.is_null())
        .collect()
}

/// Server-side apply of `object` (any kind the server serves) with `client`'s identity.
async fn apply(client: &kube::Client, object: &Value) -> Result<(), kube::Error> {
    let (group, version) = match object["apiVersion"].as_str().unwrap().split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", object["apiVersion"].as_str().unwrap()),
    };
    let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().unwrap());
    let (resource, capabilities) = pinned_kind(client, &gvk).await.unwrap();
    let name = object["metadata"]["name"].as_str().unwrap();
    let api: Api<DynamicObject> = match capabilities.scope {
        Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default"),
            &resource,
        ),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    api.patch(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map(|_| ())
}

/// A client that acts as the tenant (impersonation: the admin's KUBECONFIG may impersonate).
async fn tenant_client() -> kube::Client {
    let mut config = kube::Config::infer().await.unwrap();
    config.auth_info.impersonate = Some(TENANT.to_owned());
    kube::Client::try_from(config).unwrap()
}

fn forbidden(result: Result<(), kube::Error>, what: &str) {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => panic!("the tenant may not {what}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenancy_example_runs_as_the_teams_user_and_the_tenant_is_refused_the_rest() {
    if std::env::var_os("KUBECONFIG").is_none() {
        eprintln!("skipped: KUBECONFIG is not set; this test needs a real Kubernetes API server");
        return;
    }
    let slurm = require_slurm!();
    slurm_operator::tls::install_crypto_provider();
    let admin = kube::Client::try_default().await.unwrap();
    apply_crds(&admin).await;

    // The operator chart's user ClusterRoles, as the chart renders them.
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("helm/slurm-operator");
    // $HELM, else the copy hack/helm-test.sh caches, else `helm` on PATH.
    let helm = std::env::var("HELM").ok().unwrap_or_else(|| {
        let cached = "/var/tmp/slurm-operator/tools/helm-layer-2.2.2/helm";
        if Path::new(cached).exists() {
            cached.to_owned()
        } else {
            "helm".to_owned()
        }
    });
    let render = |release: &str, template: &str, extra: &[&str]| {
        let rendered = Command::new(&helm)
            .args(["template", release])
            .arg(&chart)
            .args(["--show-only", template])
            .args(extra)
            .output()
            .expect("helm ($HELM, hack/helm-test.sh's cached copy, or on PATH) renders the chart");
        assert!(
            rendered.status.success(),
            "helm template {template}: {}",
            String::from_utf8_lossy(&rendered.stderr)
        );
        documents(&String::from_utf8(rendered.stdout).unwrap())
    };
    let roles = render("slurm-operator", "templates/user-rbac.yaml", &[]);
    assert!(!roles.is_empty());
    for role in &roles {
        apply(&admin, role).await.unwrap();
    }
    // The finalizer policy. The operator runs here as the admin, not as the chart's
    // ServiceAccount: the admin is named among the users who may remove the finalizer.
    let me = kube::Api::<SelfSubjectReview>::all(admin.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .unwrap();
    let me = me
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .expect("the API server says who the admin is (SelfSubjectReview)");
    let extra_users = format!("finalizerPolicy.extraUsers={}", json!([me]));
    // A release name of its own: a real install's policy in this cluster is left alone.
    let policy = render(
        "e2e-tenancy",
        "templates/finalizer-policy.yaml",
        &["--set-json", &extra_users],
    );
    assert_eq!(policy.len(), 2, "a policy and its binding");
    for doc in &policy {
        apply(&admin, doc).await.unwrap();
    }

    // The example's names are used as they are (what the docs tell an admin to apply): on a
    // cluster that has them already (a real install, or an earlier run that failed before its
    // cleanup) this test would change and then delete them, or pass on what an earlier run
    // left (a SlurmJob already Completed). Refused instead.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
    for ns in ["team-a", "team-b", "team-c"] {
        assert!(
            namespaces.get_opt(ns).await.unwrap().is_none(),
            "namespace {ns} exists: this test applies examples/tenancy/ with its own names and \
             deletes them at its end; run it on a cluster without them (an earlier failed run \
             leaves them: delete namespaces team-a, team-b and team-c and SlurmCluster main)"
        );
    }
    assert!(
        Api::<SlurmCluster>::all(admin.clone())
            .get_opt("main")
            .await
            .unwrap()
            .is_none(),
        "SlurmCluster main exists: this test applies examples/tenancy/ with its own names; run \
         it on a cluster without it"
    );

    // The admin's files, with what this machine's Slurm needs.
    for ns in [CREDENTIALS, "team-c"] {
        apply(
            &admin,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await
        .unwrap();
    }
    for doc in example("20-namespaces.yaml") {
        apply(&admin, &doc).await.unwrap();
    }
    for mut doc in example("00-credentials-secret.yaml") {
        if doc["kind"] == "Secret" {
            let key = ByteString(slurm.key());
            doc["data"] = json!({"jwt_hs256.key": serde_json::to_value(&key).unwrap()});
        }
        apply(&admin, &doc).await.unwrap();
    }
    for mut doc in example("10-slurmcluster.yaml") {
        if doc["kind"] == "SlurmCluster" {
            doc["spec"]["endpoint"] = json!(slurm.url);
            doc["spec"]["allowInsecureHttp"] = json!(slurm.url.starts_with("http://"));
            doc["spec"]["auth"]["jwt"]["user"] = json!(slurm.user);
        }
        apply(&admin, &doc).await.unwrap();
    }
    for doc in example("30-tenant-rolebinding.yaml") {
        apply(&admin, &doc).await.unwrap();
    }
    let _operator = Operator::spawn(
        &[
            "--namespace",
            "team-a,team-b,team-c",
            "--credentials-namespace",
            CREDENTIALS,
            "--metrics-addr",
            &format!("127.0.0.1:{}", free_port()),
        ],
        &[],
        None,
    )
    .sigterm_on_drop(Duration::from_secs(10));

    // The tenant's file, as the tenant: accepted, and it runs as alice.
    let tenant = tenant_client().await;
    let mut name = String::new();
    for mut doc in example("40-tenant-slurmjob.yaml") {
        // The local Slurm's partition; alice's home as the working directory (her own files).
        doc["spec"]["partition"] = json!(slurm.partition);
        doc["spec"]["workingDirectory"] = json!("/home/alice");
        name = doc["metadata"]["name"].as_str().unwrap().to_owned();
        // The namespace's ResourceQuota counts SlurmJobs: until the quota controller has
        // discovered the CRD (its discovery resync, 30 s), admission refuses every create with
        // 403 "status unknown for quota", and it may take until the quota's own resync.
        eventually(
            "the tenant's SlurmJob admitted under the namespace's quota",
            Duration::from_secs(360),
            || async {
                match apply(&tenant, &doc).await {
                    Ok(_) => Some(()),
                    Err(kube::Error::Api(e))
                        if e.code == 403 && e.message.contains("status unknown for quota") =>
                    {
                        tokio::time::sleep(Duration::from_secs(2)).await;
                        None
                    }
                    Err(e) => panic!("the tenant's SlurmJob refused: {e}"),
                }
            },
        )
        .await;
    }
    let team_a: Api<SlurmJob> = Api::namespaced(admin.clone(), "team-a");
    let done = eventually(
        "the tenant's SlurmJob ended",
        Duration::from_secs(180),
        || async {
            let job = team_a.get_opt(&name).await.ok()??;
            job.status
                .clone()
                .filter(|s| s.phase.is_terminal())
                .map(|s| (job, s))
        },
    )
    .await;
    assert_eq!(done.1.phase, Phase::Completed, "{:?}", done.1);
    let job_id = u32::try_from(done.1.job_id.unwrap()).unwrap();
    // slurmctld forgets an ended job after MinJobAge (30 s here): then accounting tells.
    let client = slurm.client();
    let records = match client.job(job_id).await {
        Ok(records) => records,
        Err(_) => client.accounting_job(job_id).await.unwrap().unwrap(),
    };
    assert_eq!(records[0].user_name.as_deref(), Some("alice"));

    // What the tenant is refused.
    forbidden(
        apply(
            &tenant,
            &json!({"apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmCluster",
                    "metadata": {"name": "mine"},
                    "spec": {"endpoint": "https://evil.example:6820",
                             "auth": {"jwt": {"keySecretRef": {"name": "slurm-jwt-key"}}}}}),
        )
        .await,
        "create a SlurmCluster",
    );
    forbidden(
        apply(
            &tenant,
            &json!({"apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmNodeSet",
                    "metadata": {"name": "mine", "namespace": "team-a"},
                    "spec": {"clusterName": "main", "replicas": 1,
                             "template": {"spec": {"containers": [{"name": "slurmd", "image": "x"}]}}}}),
        )
        .await,
        "create a SlurmNodeSet",
    );
    let credentials: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(tenant.clone(), CREDENTIALS);
    forbidden(
        credentials.get("slurm-jwt-key").await.map(|_| ()),
        "read the credentials Secret",
    );
    forbidden(
        apply(
            &tenant,
            &json!({"apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
                    "metadata": {"name": "sneaky", "namespace": "team-b"},
                    "spec": {"clusterName": "main", "script": "#!/bin/sh\ntrue\n"}}),
        )
        .await,
        "create a SlurmJob in team-b",
    );
    let tenant_jobs: Api<SlurmJob> = Api::namespaced(tenant.clone(), "team-a");
    forbidden(
        tenant_jobs
            .patch_status(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(
                    json!({"apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
                                      "status": {"phase": "Completed"}}),
                ),
            )
            .await
            .map(|_| ()),
        "write a SlurmJob's status",
    );

    // A namespace no access entry grants.
    let team_c: Api<SlurmJob> = Api::namespaced(admin.clone(), "team-c");
    team_c
        .patch(
            "denied",
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(
                json!({"apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
                                  "metadata": {"name": "denied"},
                                  "spec": {"clusterName": "main", "script": "#!/bin/sh\ntrue\n"}}),
            ),
        )
        .await
        .unwrap();
    let message = eventually(
        "Ready=False/NoAccess in team-c",
        Duration::from_secs(60),
        || async {
            let job = team_c.get_opt("denied").await.ok()??;
            let c = condition::find(&job.status?.conditions, READY)?.clone();
            (c.status == "False" && c.reason == "NoAccess").then_some(c.message)
        },
    )
    .await;
    assert!(message.contains("team-c"), "{message}");

    // The tenant may not remove the finalizer (the policy takes effect within seconds of its
    // creation: asked until it does), and may edit the SlurmJob otherwise. Dry runs: nothing
    // changes.
    let dry_run = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let refusal = eventually(
        "the finalizer policy refuses the tenant",
        Duration::from_secs(60),
        || async {
            let removed = tenant_jobs
                .patch(
                    &name,
                    &dry_run,
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await;
            match removed {
                Err(kube::Error::Api(status)) if status.code == 403 => Some(status.message),
                Err(other) => panic!("the tenant's dry run: {other}"),
                Ok(_) => None,
            }
        },
    )
    .await;
    assert!(refusal.contains("slurm.rs/cleanup"), "{refusal}");
    tenant_jobs
        .patch(
            &name,
            &dry_run,
            &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await
        .expect("the tenant may still edit the SlurmJob");

    // Clean up: the namespaces (their SlurmJobs first), the cluster, the roles.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
    for ns in ["team-a", "team-b", "team-c"] {
        namespaces
            .delete(ns, &DeleteParams::default())
            .await
            .unwrap();
    }
    // The operator removes the finalizer under the policy.
    eventually(
        "the tenant's SlurmJob gone with its namespace",
        Duration::from_secs(120),
        || async { team_a.get_opt(&name).await.ok()?.is_none().then_some(()) },
    )
    .await;
    let clusters: Api<SlurmCluster> = Api::all(admin.clone());
    clusters
        .delete("main", &DeleteParams::default())
        .await
        .unwrap();
    // Gone while the operator still runs: its finalizers would otherwise keep them deleting for
    // good, and a later run of this test (the same names) would find them so.
    eventually(
        "the namespaces and SlurmCluster main gone",
        Duration::from_secs(180),
        || async {
            for ns in ["team-a", "team-b", "team-c"] {
                if namespaces.get_opt(ns).await.ok()?.is_some() {
                    return None;
                }
            }
            clusters.get_opt("main").await.ok()?.is_none().then_some(())
        },
    )
    .await;
    for doc in &policy {
        let kind = doc["kind"].as_str().unwrap();
        let name = doc["metadata"]["name"].as_str().unwrap();
        let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
        let (resource, _) = pinned_kind(&admin, &gvk).await.unwrap();
        Api::<DynamicObject>::all_with(admin.clone(), &resource)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
}
