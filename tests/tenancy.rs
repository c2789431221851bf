//! Two teams on one Slurm cluster, through the operator binary (against the in-memory API
//! server) and the real local Slurm with its ordinary users `alice` and `bob` (hack/):
//!
//! - the platform admin's SlurmCluster grants namespace `team-a` to Slurm user `alice` (account
//!   `team-a`) and `team-b` (by label) to `bob`; its JWT key Secret is in the credentials
//!   namespace, marked as credentials;
//! - a SlurmJob in each team runs, and Slurm says it ran as that team's user;
//! - a SlurmJob in a namespace no entry grants gets `Ready=False/NoAccess`, one in team-a asking
//!   for team-b's account `AccountNotGranted`, one in `team-d`, which an entry stored without the
//!   CRD's rule maps to the cluster's own user, `ClusterUserNotAllowed`; none reaches Slurm;
//! - deleting team-a's running SlurmJob cancels its job as `alice`, the job's own user.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use slurm_operator::crd::condition::{self, READY};
use slurm_operator::crd::slurmjob::Phase;
use slurm_operator::crd::{SlurmCluster, SlurmJob};

use common::e2e::{MANAGER, Operator, eventually, free_port};

use common::scenario::CREDENTIALS_NAMESPACE as CREDENTIALS;
const TIMEOUT: Duration = Duration::from_secs(120);

async fn apply<K>(api: &Api<K>, name: &str, object: Value)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    api.patch(name, &PatchParams::apply(MANAGER), &Patch::Apply(object))
        .await
        .unwrap_or_else(|e| panic!("apply {name}: {e}"));
}

fn slurmjob(name: &str, partition: &str, extra: Value) -> Value {
    let mut spec = json!({
        "clusterName": "main",
        "partition": partition,
        "script": "#!/bin/sh\nid -un\n",
        "environment": {"PATH": "/usr/bin:/bin"},
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({"apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob", "metadata": {"name": name},
           "spec": spec})
}

/// How many submits the operator serving `metrics` has sent (any answer: Slurm 24.11 refuses
/// with HTTP 500, 26.05 with 422).
async fn submits(metrics: &str) -> u64 {
    let text = reqwest::get(format!("http://{metrics}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|line| {
            line.starts_with("slurm_operator_slurmrestd_request_duration_seconds_count{")
        })
        .filter(|line| line.contains("operation=\"slurm_post_job_submit\""))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The SlurmJob's Ready condition (status, reason, message), once it has one matching `want`.
async fn ready(jobs: &Api<SlurmJob>, name: &str, want: (&str, &str)) -> String {
    eventually(
        &format!("{name} Ready={}/{}", want.0, want.1),
        TIMEOUT,
        || async {
            let job = jobs.get_opt(name).await.ok()??;
            let c = condition::find(&job.status?.conditions, READY)?.clone();
            ((c.status.as_str(), c.reason.as_str()) == want).then_some(c.message)
        },
    )
    .await
}

async fn ended(jobs: &Api<SlurmJob>, name: &str) -> SlurmJob {
    eventually(&format!("{name} ended"), TIMEOUT, || async {
        let job = jobs.get_opt(name).await.ok()??;
        job.status
            .as_ref()
            .is_some_and(|s| s.phase.is_terminal())
            .then_some(job)
    })
    .await
}

/// The in-memory API server serving the CRDs, with `namespaces` (name, labels); a kubeconfig
/// for the operator process (in the directory returned, removed when dropped) and a client.
async fn api_with_namespaces(
    namespaces: &[(&str, Value)],
) -> (
    fake_apiserver::FakeApiServer,
    tempfile::TempDir,
    std::path::PathBuf,
    kube::Client,
) {
    slurm_operator::tls::install_crypto_provider();
    let api = fake_apiserver::FakeApiServer::start_with_crds(slurm_operator::crd::all()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = api.write_kubeconfig(dir.path());
    let client = api.client();
    let namespaces_api: Api<Namespace> = Api::all(client.clone());
    for (name, labels) in namespaces {
        apply(
            &namespaces_api,
            name,
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": name, "labels": labels}}),
        )
        .await;
    }
    (api, dir, kubeconfig, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_team_runs_as_its_own_slurm_user_and_others_are_refused() {
    let slurm = require_slurm!();
    // The namespaces, team-b labelled (its access is by label).
    let (_api, _dir, kubeconfig, client) = api_with_namespaces(&[
        (CREDENTIALS, json!({})),
        ("team-a", json!({})),
        ("team-b", json!({"hpc.example.org/team": "b"})),
        ("team-c", json!({})),
        ("team-d", json!({})),
    ])
    .await;

    // The platform admin's part: the key, marked, in the credentials namespace; the cluster.
    common::scenario::seed_credentials(&client, &slurm).await;
    let clusters: Api<SlurmCluster> = Api::all(client.clone());
    apply(
        &clusters,
        "main",
        json!({
            "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmCluster", "metadata": {"name": "main"},
            "spec": {
                "endpoint": slurm.url,
                "allowInsecureHttp": true,
                "auth": {"jwt": {"keySecretRef": {"name": "slurm-jwt"}, "user": slurm.user}},
                "pollInterval": "1s",
                "access": [
                    {"namespaces": ["team-a"], "slurmUser": "alice", "accounts": ["team-a"]},
                    {"namespaceSelector": {"matchLabels": {"hpc.example.org/team": "b"}},
                     "slurmUser": "bob"},
                    // The cluster's own user (an administrator), stored as an API server
                    // without the CRD's rule would keep it: the operator refuses it itself.
                    {"namespaces": ["team-d"], "slurmUser": slurm.user},
                ],
            },
        }),
    )
    .await;

    let log = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("tenancy-operator.log");
    let metrics = format!("127.0.0.1:{}", free_port());
    let _operator = Operator::spawn(
        &[
            "--namespace",
            "team-a,team-b,team-c,team-d",
            "--credentials-namespace",
            CREDENTIALS,
            "--metrics-addr",
            &metrics,
        ],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
        Some(&log),
    )
    .sigterm_on_drop(Duration::from_secs(10));

    // The tenants' part.
    let run = common::unique("tenant");
    let jobs = |ns: &str| -> Api<SlurmJob> { Api::namespaced(client.clone(), ns) };
    let a = format!("{run}-a");
    let b = format!("{run}-b");
    let c = format!("{run}-c");
    let d = format!("{run}-d");
    let wrong = format!("{run}-wrong-account");
    // Each in its user's home: the output file (slurm-<id>.out) is the user's own, whatever an
    // earlier run with the same job id (ids restart with a fresh slurmctld) left in /tmp.
    apply(
        &jobs("team-a"),
        &a,
        slurmjob(
            &a,
            &slurm.partition,
            json!({"workingDirectory": "/home/alice"}),
        ),
    )
    .await;
    apply(
        &jobs("team-b"),
        &b,
        slurmjob(
            &b,
            &slurm.partition,
            json!({"workingDirectory": "/home/bob"}),
        ),
    )
    .await;
    apply(
        &jobs("team-c"),
        &c,
        slurmjob(&c, &slurm.partition, json!({})),
    )
    .await;
    apply(
        &jobs("team-d"),
        &d,
        slurmjob(&d, &slurm.partition, json!({})),
    )
    .await;
    apply(
        &jobs("team-a"),
        &wrong,
        slurmjob(&wrong, &slurm.partition, json!({"account": "team-b"})),
    )
    .await;

    let slurm_client = slurm.client();
    for (ns, name, user) in [("team-a", &a, "alice"), ("team-b", &b, "bob")] {
        let job = ended(&jobs(ns), name).await;
        let status = job.status.unwrap();
        assert_eq!(status.phase, Phase::Completed, "{name}: {status:?}");
        let job_id = u32::try_from(status.job_id.unwrap()).unwrap();
        let records = slurm_client.job(job_id).await.unwrap();
        assert_eq!(
            records[0].user_name.as_deref(),
            Some(user),
            "{name} ran as Slurm user {user}"
        );
    }

    let message = ready(&jobs("team-c"), &c, ("False", "NoAccess")).await;
    assert!(
        message.contains("namespace \"team-c\" may not use SlurmCluster \"main\""),
        "{message}"
    );
    let message = ready(&jobs("team-d"), &d, ("False", "ClusterUserNotAllowed")).await;
    assert!(
        message.contains(&format!(
            "namespace \"team-d\" is granted SlurmCluster \"main\" as Slurm user {:?}, the user \
             the operator itself acts as",
            slurm.user
        )),
        "{message}"
    );
    let message = ready(&jobs("team-a"), &wrong, ("False", "AccountNotGranted")).await;
    assert!(
        message.contains("spec.account \"team-b\" is not granted"),
        "{message}"
    );
    // Neither reached Slurm: no job of those names in slurmctld.
    let all = slurm_client
        .jobs(None)
        .await
        .unwrap()
        .into_items()
        .unwrap_or_default();
    for refused in [&c, &d, &wrong] {
        assert!(
            all.iter().all(|j| &j.name != refused),
            "{refused} reached slurmctld"
        );
        let namespace = match refused {
            r if r == &c => "team-c",
            r if r == &d => "team-d",
            _ => "team-a",
        };
        let job = jobs(namespace).get(refused).await.unwrap();
        assert_eq!(job.status.unwrap().job_id, None, "{refused}");
    }

    // Over a limit of Slurm's: alice may use the capped QoS, but no job fits its
    // MaxSubmitJobsPerUser. slurmctld refuses each submit (error 2050); the SlurmJob waits,
    // says why in Slurm's words, warns once however often it tries, and an edit lifts it.
    let capped = format!("{run}-capped");
    let home = json!({"workingDirectory": "/home/alice"});
    let with_qos = json!({"workingDirectory": "/home/alice", "qos": slurm.capped_qos});
    let before = submits(&metrics).await;
    let applied = std::time::Instant::now();
    apply(
        &jobs("team-a"),
        &capped,
        slurmjob(&capped, &slurm.partition, with_qos),
    )
    .await;
    let message = ready(&jobs("team-a"), &capped, ("False", "SubmitLimited")).await;
    assert!(
        message.contains("accounting/QOS policy") && message.contains("no job was made"),
        "{message}"
    );
    // Tried again after its backoff's first delay (2 s), not before: the reconcile the
    // finalizer's change triggers right after the first submit sends none (it did, 10 ms
    // after the first).
    eventually("a second submit", TIMEOUT, || async {
        (submits(&metrics).await >= before + 2).then_some(())
    })
    .await;
    assert!(
        applied.elapsed() >= Duration::from_secs(2),
        "the second submit came {:?} after the apply",
        applied.elapsed()
    );
    let events: Api<Event> = Api::namespaced(client.clone(), "team-a");
    let warned: Vec<Event> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(&*capped))
        .filter(|e| e.reason.as_deref() == Some("SubmitLimited"))
        .collect();
    // One Event, never repeated: kube's recorder would count a repeat in its `series`.
    assert_eq!(warned.len(), 1, "one Warning for the wait: {warned:?}");
    assert!(
        warned[0].series.is_none(),
        "repeated: {:?}",
        warned[0].series
    );
    let job = jobs("team-a").get(&capped).await.unwrap();
    assert_eq!(job.status.unwrap().job_id, None, "{capped}");
    apply(
        &jobs("team-a"),
        &capped,
        slurmjob(&capped, &slurm.partition, home),
    )
    .await;
    let job = ended(&jobs("team-a"), &capped).await;
    let status = job.status.unwrap();
    assert_eq!(status.phase, Phase::Completed, "{capped}: {status:?}");

    // Deleting team-a's running SlurmJob cancels its job as alice, the job's own user, so that
    // slurmctld itself allows the cancel no further than alice may go: accounting records who
    // cancelled it (`sacct` shows "CANCELLED by 2001").
    let long = format!("{run}-long");
    apply(
        &jobs("team-a"),
        &long,
        slurmjob(
            &long,
            &slurm.partition,
            json!({"workingDirectory": "/home/alice", "script": "#!/bin/sh\nsleep 300\n"}),
        ),
    )
    .await;
    let job_id = eventually(&format!("{long} running"), TIMEOUT, || async {
        let job = jobs("team-a").get(&long).await.ok()?;
        let status = job.status?;
        (status.phase == Phase::Running).then_some(status.job_id?)
    })
    .await;
    jobs("team-a")
        .delete(&long, &Default::default())
        .await
        .unwrap();
    let job_id = u32::try_from(job_id).unwrap();
    let record = eventually(
        &format!("Slurm job {job_id} CANCELLED in accounting"),
        TIMEOUT,
        || async {
            let records = slurm_client.accounting_job(job_id).await.ok()??;
            let record = records.into_iter().next()?;
            (record.state.base == slurm_operator::slurm::types::JobBaseState::Cancelled)
                .then_some(record)
        },
    )
    .await;
    assert_eq!(record.user_name.as_deref(), Some("alice"));
    assert_eq!(
        record.cancelled_by.as_deref(),
        Some("alice"),
        "job {job_id} was cancelled as its own user"
    );
}

/// The admin of one watched namespace deletes the operator's Role there (chart
/// `watchNamespaces`): every request of the operator in it is refused (403). The operator still
/// becomes ready after `--refused-namespace-grace`, says which namespace it is refused, serves
/// the other teams, lets a SlurmCluster be deleted, and serves the namespace again once its
/// rights are back. Before, readiness (and every SlurmCluster deletion) waited for that
/// namespace's first list for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_that_refuses_the_operator_holds_up_no_other() {
    let slurm = require_slurm!();
    let (api, _dir, kubeconfig, client) = api_with_namespaces(&[
        (CREDENTIALS, json!({})),
        ("team-a", json!({})),
        ("team-b", json!({})),
    ])
    .await;
    common::scenario::seed_credentials(&client, &slurm).await;
    let clusters: Api<SlurmCluster> = Api::all(client.clone());
    let cluster = |access: Value| {
        json!({
            "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmCluster",
            "spec": {
                "endpoint": slurm.url,
                "allowInsecureHttp": true,
                "auth": {"jwt": {"keySecretRef": {"name": "slurm-jwt"}, "user": slurm.user}},
                "pollInterval": "1s",
                "access": access,
            },
        })
    };
    let mut main = cluster(json!([
        {"namespaces": ["team-a"], "slurmUser": "alice"},
        {"namespaces": ["team-b"], "slurmUser": "bob"},
    ]));
    main["metadata"] = json!({"name": "main"});
    apply(&clusters, "main", main).await;
    let mut spare = cluster(json!([]));
    spare["metadata"] = json!({"name": "spare"});
    apply(&clusters, "spare", spare).await;
    api.forbid_namespace("team-b");

    let log = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("refused-namespace.log");
    let metrics = format!("127.0.0.1:{}", free_port());
    let _operator = Operator::spawn(
        &[
            "--namespace",
            "team-a,team-b",
            "--credentials-namespace",
            CREDENTIALS,
            "--metrics-addr",
            &metrics,
            "--refused-namespace-grace",
            "2s",
        ],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
        Some(&log),
    )
    .sigterm_on_drop(Duration::from_secs(10));

    let http = reqwest::Client::new();
    eventually("/readyz = 200 with team-b refused", TIMEOUT, || async {
        let response = http
            .get(format!("http://{metrics}/readyz"))
            .send()
            .await
            .ok()?;
        (response.status() == 200).then_some(())
    })
    .await;
    let refused = r#"slurm_operator_namespace_refused{namespace="team-b"}"#;
    assert_eq!(common::e2e::metric(&metrics, refused).await, Some(1.0));
    assert_eq!(
        common::e2e::metric(
            &metrics,
            r#"slurm_operator_namespace_refused{namespace="team-a"}"#
        )
        .await,
        None
    );

    // The other team is served, and a SlurmCluster deletion does not wait for team-b.
    let jobs = |ns: &str| -> Api<SlurmJob> { Api::namespaced(client.clone(), ns) };
    let run = common::unique("refused");
    let (a, b) = (format!("{run}-a"), format!("{run}-b"));
    let home = |user: &str| json!({"workingDirectory": format!("/home/{user}")});
    apply(
        &jobs("team-a"),
        &a,
        slurmjob(&a, &slurm.partition, home("alice")),
    )
    .await;
    clusters.delete("spare", &Default::default()).await.unwrap();
    eventually("SlurmCluster spare gone", TIMEOUT, || async {
        clusters
            .get_opt("spare")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let job = ended(&jobs("team-a"), &a).await;
    assert_eq!(job.status.unwrap().phase, Phase::Completed, "{a}");

    // Its Role restored: team-b is served again, and the series goes.
    api.allow_namespace("team-b");
    apply(
        &jobs("team-b"),
        &b,
        slurmjob(&b, &slurm.partition, home("bob")),
    )
    .await;
    let job = ended(&jobs("team-b"), &b).await;
    assert_eq!(job.status.unwrap().phase, Phase::Completed, "{b}");
    eventually("the refused series gone", TIMEOUT, || async {
        common::e2e::metric(&metrics, refused)
            .await
            .is_none()
            .then_some(())
    })
    .await;
}
