//! Deleting a namespace with running and finished SlurmJobs never deadlocks (issue 14, item 3):
//! the operator binary against the in-memory API server, whose namespace controller deletes as
//! the real one does (its Pods, then its **Secrets first**, then the rest, the SlurmJobs held by
//! their finalizers), and the real local Slurm.
//!
//! Each test makes a tenant namespace with a Secret of its own, two finished and two running
//! (or pending) SlurmJobs, then deletes the namespace:
//! - with the operator running;
//! - with the operator down when the deletion begins (the admin deletes the SlurmCluster at the
//!   same time), started again later: the deleted SlurmCluster connects again for its SlurmJobs;
//! - with two replicas, the leader frozen as the deletion begins, then killed;
//!
//! and each ends with the namespace gone (NotFound), the finished SlurmJobs released and the
//! running Slurm jobs CANCELLED, as Slurm says. A Slurm cluster gone for good (its SlurmCluster
//! and credentials deleted while the operator is down) ends in the `DeletionBlocked` condition,
//! the `slurm.rs/skip-cancel` annotation and the deletion deadline, each naming the Slurm jobs
//! left running (which the test cancels itself).

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use slurm_operator::crd::condition;
use slurm_operator::crd::slurmjob::Phase;
use slurm_operator::crd::{SKIP_CANCEL_ANNOTATION, SlurmCluster, SlurmJob};

use common::LocalSlurm;
use common::e2e::{MANAGER, Operator, eventually, free_port};
use common::scenario::{self, CLUSTER, CREDENTIALS_NAMESPACE, Harness};

/// The tenant namespace every test deletes (each test has its own API server).
const NAMESPACE: &str = "team-doomed";
/// Generous: the machine is shared and slow; nothing here is timed.
const TIMEOUT: Duration = Duration::from_secs(240);
const GRACE: Duration = Duration::from_secs(10);

/// One test at a time: each holds two of the local Slurm's three one-CPU nodes.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What a test made in the tenant namespace.
struct Tenant {
    jobs: Api<SlurmJob>,
    finished: Vec<String>,
    running: Vec<String>,
    /// The Slurm job ids of `running`.
    running_ids: Vec<u32>,
}

/// A SlurmJob running `body`; a time limit so that a failed run leaves nothing for long.
async fn apply_job(jobs: &Api<SlurmJob>, name: &str, slurm: &LocalSlurm, body: &str) {
    jobs.patch(
        name,
        &PatchParams::apply(MANAGER),
        &Patch::Apply(json!({
            "apiVersion": "slurm.rs/v1alpha1",
            "kind": "SlurmJob",
            "metadata": {"name": name},
            "spec": {
                "clusterName": CLUSTER,
                "partition": slurm.partition,
                "script": format!("#!/bin/sh\n{body}\n"),
                "environment": {"PATH": "/usr/bin:/bin"},
                "timeLimit": "5m",
            },
        })),
    )
    .await
    .unwrap_or_else(|e| panic!("apply SlurmJob {name}: {e}"));
}

/// The namespace, a Secret of the tenant's, two SlurmJobs that finish and two that run; once
/// the first two ended and the others have their Slurm job ids (an operator must run).
async fn populate(harness: &Harness, slurm: &LocalSlurm) -> Tenant {
    let namespaces: Api<Namespace> = Api::all(harness.client.clone());
    namespaces
        .patch(
            NAMESPACE,
            &PatchParams::apply(MANAGER),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace",
                                 "metadata": {"name": NAMESPACE}})),
        )
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(harness.client.clone(), NAMESPACE);
    secrets
        .patch(
            "tenant-notes",
            &PatchParams::apply(MANAGER),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Secret",
                                 "metadata": {"name": "tenant-notes"},
                                 "stringData": {"note": "deleted first"}})),
        )
        .await
        .unwrap();
    let jobs: Api<SlurmJob> = Api::namespaced(harness.client.clone(), NAMESPACE);
    let run = &harness.run;
    let finished: Vec<String> = (0..2).map(|i| format!("{run}-done-{i}")).collect();
    let running: Vec<String> = (0..2).map(|i| format!("{run}-long-{i}")).collect();
    // The finished ones first: the local nodes have one CPU each, and the long ones hold them.
    for name in &finished {
        apply_job(&jobs, name, slurm, "echo ran").await;
    }
    let done = scenario::all_ended(&jobs, &finished, TIMEOUT).await;
    for job in &done {
        let status = job.status.as_ref().unwrap();
        assert_eq!(status.phase, Phase::Completed, "{status:?}");
    }
    for name in &running {
        apply_job(&jobs, name, slurm, "sleep 600").await;
    }
    let mut running_ids = Vec::new();
    for name in &running {
        let id = eventually(&format!("{name} submitted"), TIMEOUT, || async {
            let status = jobs.get_opt(name).await.ok()??.status?;
            (!status.phase.is_terminal()).then_some(status.job_id?)
        })
        .await;
        running_ids.push(u32::try_from(id).unwrap());
    }
    eprintln!("running Slurm jobs {running_ids:?}");
    Tenant {
        jobs,
        finished,
        running,
        running_ids,
    }
}

async fn delete_namespace(client: &kube::Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(NAMESPACE, &DeleteParams::default())
        .await
        .unwrap();
}

/// While nobody acts on the SlurmJobs: the namespace is Terminating, its Secret already gone,
/// every SlurmJob still there, held by its finalizer.
async fn assert_held(client: &kube::Client, tenant: &Tenant) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    eventually("the tenant's Secret deleted first", TIMEOUT, || async {
        secrets
            .get_opt("tenant-notes")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    for name in tenant.finished.iter().chain(&tenant.running) {
        let job = tenant.jobs.get(name).await.unwrap();
        assert!(job.metadata.deletion_timestamp.is_some(), "{name}");
        assert!(!job.finalizers().is_empty(), "{name}");
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = namespaces.get(NAMESPACE).await.unwrap();
    assert_eq!(
        ns.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
}

async fn namespace_gone(client: &kube::Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    eventually("the namespace gone", TIMEOUT, || async {
        namespaces
            .get_opt(NAMESPACE)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}

/// Slurm's word: each job CANCELLED.
async fn assert_cancelled(slurm: &LocalSlurm, ids: &[u32]) {
    let client = slurm.client();
    for &id in ids {
        eventually(&format!("Slurm job {id} CANCELLED"), TIMEOUT, || async {
            let records = client.job(id).await.ok()?;
            records
                .iter()
                .all(|r| r.state.to_strings().contains(&"CANCELLED".to_owned()))
                .then_some(())
        })
        .await;
    }
}

fn args<'a>(harness: &'a Harness, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = harness.args().to_vec();
    args.extend_from_slice(extra);
    args
}

fn operator(harness: &Harness, extra: &[&str]) -> Operator {
    Operator::spawn(
        &args(harness, extra),
        &[("KUBECONFIG", harness.kubeconfig.as_str())],
        Some(&harness.log),
    )
    .sigterm_on_drop(GRACE)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_namespace_cancels_its_running_jobs_and_lets_the_finished_go() {
    let slurm = require_slurm!();
    let _serial = SERIAL.lock().await;
    let harness = Harness::start(&slurm, NAMESPACE, "del-up").await;
    let _operator = operator(&harness, &[]);
    let tenant = populate(&harness, &slurm).await;
    delete_namespace(&harness.client).await;
    namespace_gone(&harness.client).await;
    assert_cancelled(&slurm, &tenant.running_ids).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_deleted_while_the_operator_is_down_goes_once_it_is_back() {
    let slurm = require_slurm!();
    let _serial = SERIAL.lock().await;
    let harness = Harness::start(&slurm, NAMESPACE, "del-down").await;
    let mut first = operator(&harness, &[]);
    let tenant = populate(&harness, &slurm).await;
    assert!(first.terminate(Duration::from_secs(30)).success());

    // Down: the namespace deleted, and the admin deletes the SlurmCluster too.
    delete_namespace(&harness.client).await;
    let clusters: Api<SlurmCluster> = Api::all(harness.client.clone());
    clusters
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    assert_held(&harness.client, &tenant).await;
    assert!(
        clusters
            .get(CLUSTER)
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some(),
        "the SlurmCluster waits for its finalizer"
    );

    // Back: the deleted SlurmCluster connects again for its SlurmJobs, they cancel, all goes.
    let _second = operator(&harness, &[]);
    namespace_gone(&harness.client).await;
    assert_cancelled(&slurm, &tenant.running_ids).await;
    eventually("the SlurmCluster gone", TIMEOUT, || async {
        clusters
            .get_opt(CLUSTER)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}

fn replica_args(identity: &str, metrics: &str) -> Vec<String> {
    [
        "--namespace",
        NAMESPACE,
        "--credentials-namespace",
        CREDENTIALS_NAMESPACE,
        "--metrics-addr",
        metrics,
        "--leader-election",
        "--leader-election-lease",
        "slurm-operator-leader",
        "--leader-election-namespace",
        CREDENTIALS_NAMESPACE,
        "--leader-election-identity",
        identity,
        "--lease-duration",
        "3s",
        "--lease-grace",
        "1s",
    ]
    .map(str::to_owned)
    .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_change_in_the_middle_of_a_namespace_deletion() {
    let slurm = require_slurm!();
    let _serial = SERIAL.lock().await;
    let harness = Harness::start(&slurm, NAMESPACE, "del-le").await;
    let identities = ["replica-a", "replica-b"];
    let mut replicas: Vec<Operator> = identities
        .iter()
        .map(|identity| {
            let args = replica_args(identity, &format!("127.0.0.1:{}", free_port()));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Operator::spawn(
                &args,
                &[("KUBECONFIG", harness.kubeconfig.as_str())],
                Some(&harness.log),
            )
            .sigterm_on_drop(GRACE)
        })
        .collect();
    let tenant = populate(&harness, &slurm).await;
    let leases: Api<Lease> = Api::namespaced(harness.client.clone(), CREDENTIALS_NAMESPACE);
    let leader = eventually("a Lease holder", TIMEOUT, || async {
        leases
            .get_opt("slurm-operator-leader")
            .await
            .ok()??
            .spec?
            .holder_identity
    })
    .await;
    let i = identities.iter().position(|id| *id == leader).unwrap();

    // The deletion begins under a leader that cannot finish it (frozen, then killed): the
    // other replica takes over once the Lease expires, and finishes it.
    replicas[i].signal("STOP");
    delete_namespace(&harness.client).await;
    let left = tenant
        .jobs
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .len();
    replicas[i].sigkill();
    eprintln!("{leader} frozen, then killed with {left} SlurmJobs left in the namespace");
    namespace_gone(&harness.client).await;
    assert_cancelled(&slurm, &tenant.running_ids).await;
    let holder = leases
        .get("slurm-operator-leader")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity);
    assert_ne!(
        holder.as_deref(),
        Some(leader.as_str()),
        "the other replica took over"
    );
}

/// The `DeletionBlocked` condition of `name`, once its reason is `reason`: its message.
async fn blocked(jobs: &Api<SlurmJob>, name: &str, reason: &str) -> String {
    eventually(
        &format!("{name} DeletionBlocked/{reason}"),
        TIMEOUT,
        || async {
            let job = jobs.get_opt(name).await.ok()??;
            let c = condition::find(&job.status?.conditions, "DeletionBlocked")?.clone();
            (c.status == "True" && c.reason == reason).then_some(c.message)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slurm_cluster_gone_for_good_ends_in_a_warning_not_a_hang() {
    let slurm = require_slurm!();
    let _serial = SERIAL.lock().await;
    let harness = Harness::start(&slurm, NAMESPACE, "del-gone").await;
    let mut first = operator(&harness, &[]);
    let tenant = populate(&harness, &slurm).await;
    assert!(first.terminate(Duration::from_secs(30)).success());

    // Down: the admin deletes the SlurmCluster and its credentials, the tenant's namespace goes.
    let clusters: Api<SlurmCluster> = Api::all(harness.client.clone());
    clusters
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    let credentials: Api<Secret> = Api::namespaced(harness.client.clone(), CREDENTIALS_NAMESPACE);
    credentials
        .delete("slurm-jwt", &DeleteParams::default())
        .await
        .unwrap();
    delete_namespace(&harness.client).await;
    assert_held(&harness.client, &tenant).await;

    // Back without a deadline: the finished SlurmJobs go (they need nothing from Slurm); the
    // running ones say what they wait for, and wait.
    let mut second = operator(&harness, &["--deletion-deadline", "0s"]);
    for name in &tenant.finished {
        eventually(&format!("{name} released"), TIMEOUT, || async {
            tenant
                .jobs
                .get_opt(name)
                .await
                .unwrap()
                .is_none()
                .then_some(())
        })
        .await;
    }
    for (name, id) in tenant.running.iter().zip(&tenant.running_ids) {
        let message = blocked(&tenant.jobs, name, "ClusterNotConnected").await;
        for part in [
            format!("Slurm job {id} not cancelled yet"),
            "is not connected".to_owned(),
            "--deletion-deadline 0s".to_owned(),
            format!("{SKIP_CANCEL_ANNOTATION}=true"),
        ] {
            assert!(message.contains(&part), "{part:?} in {message}");
        }
    }

    // The annotation lets the first go at once; the other keeps waiting (no deadline).
    tenant
        .jobs
        .patch(
            &tenant.running[0],
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {SKIP_CANCEL_ANNOTATION: "true"}}})),
        )
        .await
        .unwrap();
    eventually("the annotated SlurmJob released", TIMEOUT, || async {
        tenant
            .jobs
            .get_opt(&tenant.running[0])
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        tenant
            .jobs
            .get_opt(&tenant.running[1])
            .await
            .unwrap()
            .is_some(),
        "without a deadline the other waits"
    );

    // With a deadline (counted from the operator's start): the other goes when it passes.
    assert!(second.terminate(Duration::from_secs(30)).success());
    let _third = operator(&harness, &["--deletion-deadline", "5s"]);
    namespace_gone(&harness.client).await;
    eventually("the SlurmCluster gone", TIMEOUT, || async {
        clusters
            .get_opt(CLUSTER)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;

    // Nothing could cancel them: each is named in a Warning on the SlurmCluster (the namespace
    // being deleted refuses new Events; the operator's log has them too) and still runs. The
    // test cancels its own jobs.
    let events: Api<Event> = Api::namespaced(harness.client.clone(), "default");
    let events = events.list(&Default::default()).await.unwrap().items;
    let log = std::fs::read_to_string(&harness.log).unwrap();
    let client = slurm.client();
    for ((id, name), reason) in tenant
        .running_ids
        .iter()
        .zip(&tenant.running)
        .zip(["CancelSkipped", "CancelAbandoned"])
    {
        let named = format!("Slurm job {id} may still run");
        let event = events.iter().find(|e| {
            e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("SlurmCluster")
                && e.reason.as_deref() == Some(reason)
                && e.note.as_deref().is_some_and(|n| n.contains(&named))
        });
        let event = event.unwrap_or_else(|| panic!("{reason} naming Slurm job {id}: {events:?}"));
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        let note = event.note.as_deref().unwrap();
        assert!(
            note.starts_with(&format!("SlurmJob {NAMESPACE}/{name}: ")),
            "{note}"
        );
        assert!(
            log.lines()
                .any(|l| l.contains(reason) && l.contains(&named)),
            "{reason} naming Slurm job {id} in {}",
            harness.log.display()
        );
        let records = client.job(*id).await.unwrap();
        assert!(
            records.iter().all(|r| !r.state.base.is_finished()),
            "Slurm job {id} was left alone: {:?}",
            records[0].state
        );
        client.cancel_job(*id).await.unwrap();
    }
}
