//! End to end against a real Kubernetes API server (no kubelet needed) and the real local Slurm:
//! the operator binary runs as a child process, as it would in a pod.
//!
//! Runs only when `KUBECONFIG` is set (skipped otherwise, saying why). It applies the CRDs from
//! `crds/` (server-side), creates a namespace as the credentials namespace, a Secret there with
//! the local Slurm's JWT key (labelled `slurm.rs/credentials=true`) and a SlurmCluster (cluster-
//! scoped, named like the namespace) pointing at the local slurmrestd; starts
//! `slurm-operator run --namespace <ns> --credentials-namespace <ns>`; checks that an unlabelled
//! Secret is refused (`SecretNotMarked`) and that labelling it connects; waits
//! for Ready=True with the Slurm release in the status; rotates the Secret to a wrong key and back
//! (the running client picks each up without a restart); deletes the SlurmCluster and checks the
//! finalizer let it go; then stops the operator with SIGTERM and expects a clean exit.
//!
//! The namespace is deleted at the end of a passing run; a failing run leaves it (and prints its
//! name) for inspection.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams};
use serde_json::json;
use slurm_operator::controller::cluster::status as cluster_status;
use slurm_operator::crd::SlurmCluster;
use slurm_operator::crd::condition::{self, READY};

use common::e2e::{MANAGER, Operator, apply_cluster, apply_crds, eventually, free_port};

const SECRET: &str = "slurm-jwt";
const KEY: &str = "jwt_hs256.key";

async fn apply_key(secrets: &Api<Secret>, key: &[u8], marked: bool) {
    let labels = marked.then(|| [("slurm.rs/credentials".to_owned(), "true".to_owned())].into());
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(SECRET.into()),
            labels,
            ..Default::default()
        },
        data: Some([(KEY.to_owned(), ByteString(key.to_vec()))].into()),
        ..Default::default()
    };
    secrets
        .patch(
            SECRET,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await
        .expect("apply the JWT key Secret");
}

/// The SlurmCluster's Ready condition as (status, reason), when it has one.
async fn ready(clusters: &Api<SlurmCluster>, name: &str) -> Option<(String, String, SlurmCluster)> {
    let cluster = clusters
        .get_opt(name)
        .await
        .expect("get the SlurmCluster")?;
    let status = cluster.status.as_ref()?;
    let c = condition::find(&status.conditions, READY)?;
    Some((c.status.clone(), c.reason.clone(), cluster.clone()))
}

async fn wait_ready(
    clusters: &Api<SlurmCluster>,
    name: &str,
    want: (&str, &str),
    what: &str,
) -> SlurmCluster {
    eventually(what, Duration::from_secs(90), || async {
        ready(clusters, name)
            .await
            .filter(|(status, reason, _)| (status.as_str(), reason.as_str()) == want)
            .map(|(_, _, cluster)| cluster)
    })
    .await
}

/// Whether SlurmCluster `name` has an Event (a cluster-scoped object's Events are in `default`).
async fn has_event(events: &Api<Event>, name: &str, type_: &str, reason: &str) -> bool {
    events
        .list(&Default::default())
        .await
        .expect("list Events")
        .items
        .iter()
        .any(|e| {
            e.type_.as_deref() == Some(type_)
                && e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_connects_a_cluster_follows_key_rotation_and_cleans_up() {
    if std::env::var_os("KUBECONFIG").is_none() {
        eprintln!(
            "skipped: KUBECONFIG is not set; this test needs a real Kubernetes API server \
             (a kube-apiserver is enough, no kubelet)"
        );
        return;
    }
    let slurm = require_slurm!();
    slurm_operator::tls::install_crypto_provider();
    let client = kube::Client::try_default()
        .await
        .expect("a Kubernetes client from KUBECONFIG");

    apply_crds(&client).await;

    let namespace = format!(
        "slurm-e2e-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    eprintln!("e2e namespace: {namespace}");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            &namespace,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": namespace},
            })),
        )
        .await
        .expect("create the namespace");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let clusters: Api<SlurmCluster> = Api::all(client.clone());
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    // Cluster-scoped: named after this run's namespace, so runs never share one.
    let cluster = namespace.clone();

    // Not yet labelled as credentials: the operator must not use it.
    apply_key(&secrets, &slurm.key(), false).await;
    let spec = json!({
        "endpoint": slurm.url,
        "allowInsecureHttp": slurm.url.starts_with("http://"),
        "auth": {"jwt": {
            "keySecretRef": {"name": SECRET, "key": KEY},
            "user": slurm.user,
            "lifetime": "5m",
        }},
        "pollInterval": "1s",
    });
    let apply = |spec| apply_cluster(&client, &cluster, spec);
    apply(spec.clone()).await.expect("apply the SlurmCluster");

    let port = free_port();
    let mut operator = Operator::start(&namespace, port);

    wait_ready(
        &clusters,
        &cluster,
        ("False", "SecretNotMarked"),
        "Ready=False/SecretNotMarked while the Secret is not labelled as credentials",
    )
    .await;
    apply_key(&secrets, &slurm.key(), true).await;

    // Ready, with what slurmrestd says in the status.
    let object = wait_ready(&clusters, &cluster, ("True", "Connected"), "Ready=True").await;
    let status = object.status.clone().unwrap();
    assert_eq!(
        status.slurm_release.as_deref(),
        Some(slurm.release.as_str())
    );
    assert_eq!(
        status.cluster_name.as_deref(),
        Some(slurm.cluster_name.as_str())
    );
    // The newest version both speak: the local Slurm's newest (trixie 24.11: v0.0.42; forky
    // 26.05: v0.0.45), all of which the operator speaks.
    assert_eq!(
        status.api_version.as_deref(),
        slurm.data_parsers.last().map(String::as_str)
    );
    assert!(status.partitions.contains(&slurm.partition), "{status:?}");
    assert!(status.nodes.is_some_and(|n| n.total > 0));
    assert!(status.last_contact_time.is_some());
    // The poller's listing of every job answers (at the latest by the next check, a minute on).
    eventually(
        "JobsListed=True/Listed",
        Duration::from_secs(90),
        || async {
            let cluster = clusters.get(&cluster).await.expect("get the SlurmCluster");
            let status = cluster.status?;
            let listed = condition::find(&status.conditions, cluster_status::JOBS_LISTED)?;
            ((listed.status.as_str(), listed.reason.as_str()) == ("True", "Listed")).then_some(())
        },
    )
    .await;
    assert!(
        object
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&slurm_operator::crd::FINALIZER.to_owned()),
        "the operator put its finalizer on the SlurmCluster"
    );
    eventually("the Connected Event", Duration::from_secs(30), || async {
        has_event(&events, &cluster, "Normal", "Connected")
            .await
            .then_some(())
    })
    .await;

    // Probes and metrics.
    slurm_operator::tls::install_crypto_provider();
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    eventually("/readyz = 200", Duration::from_secs(30), || async {
        let response = http.get(format!("{base}/readyz")).send().await.ok()?;
        (response.status() == 200).then_some(())
    })
    .await;
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("slurm_operator_reconciles_total{controller=\"cluster\"}"),
        "{metrics}"
    );

    // spec.maxResponseSize: the server's own CEL refuses a bound outside 1Mi..1Gi, naming the
    // field; one inside it is taken, and the operator connects with it.
    let mut too_large = spec.clone();
    too_large["maxResponseSize"] = json!("2Gi");
    let refused = apply(too_large)
        .await
        .expect_err("maxResponseSize 2Gi is refused at admission");
    assert!(
        refused
            .to_string()
            .contains("maxResponseSize must be a quantity between 1Mi and 1Gi"),
        "{refused}"
    );
    // spec.listingTimeout likewise, between 30s and 1h.
    let mut too_long = spec.clone();
    too_long["listingTimeout"] = json!("2h");
    let refused = apply(too_long)
        .await
        .expect_err("listingTimeout 2h is refused at admission");
    assert!(
        refused
            .to_string()
            .contains("listingTimeout must be between 30s and 1h"),
        "{refused}"
    );
    let mut larger = spec.clone();
    larger["maxResponseSize"] = json!("64Mi");
    larger["listingTimeout"] = json!("10m");
    let generation = apply(larger)
        .await
        .expect("maxResponseSize 64Mi and listingTimeout 10m are admitted")
        .metadata
        .generation;
    eventually(
        "Ready=True for the spec with maxResponseSize 64Mi and listingTimeout 10m",
        Duration::from_secs(90),
        || async {
            let (status, reason, object) = ready(&clusters, &cluster).await?;
            let observed = object.status.as_ref()?.observed_generation;
            (status == "True" && reason == "Connected" && observed == generation).then_some(())
        },
    )
    .await;

    // Key rotation, without a restart: a wrong key is rejected by slurmrestd...
    apply_key(&secrets, b"a key slurmctld has never seen", true).await;
    wait_ready(
        &clusters,
        &cluster,
        ("False", "Unauthorized"),
        "Ready=False/Unauthorized after the key was replaced by a wrong one",
    )
    .await;
    // The Events follow the status write: looked for until they are there.
    eventually(
        "a Warning Event Unauthorized",
        Duration::from_secs(30),
        || async {
            has_event(&events, &cluster, "Warning", "Unauthorized")
                .await
                .then_some(())
        },
    )
    .await;
    // ...and the right key brings it back.
    apply_key(&secrets, &slurm.key(), true).await;
    wait_ready(
        &clusters,
        &cluster,
        ("True", "Connected"),
        "Ready=True after the right key was restored",
    )
    .await;
    operator.assert_running();

    // Deletion: the finalizer's cleanup runs and lets the SlurmCluster go.
    clusters
        .delete(&cluster, &DeleteParams::default())
        .await
        .expect("delete the SlurmCluster");
    eventually(
        "the SlurmCluster to be gone (finalizer removed)",
        Duration::from_secs(60),
        || async {
            clusters
                .get_opt(&cluster)
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;

    // A graceful stop on SIGTERM.
    let exit = operator.terminate(Duration::from_secs(30));
    assert!(
        exit.success(),
        "the operator exited with {exit} after SIGTERM"
    );

    // Best effort: without a controller-manager the namespace stays Terminating, which is fine.
    let _ = namespaces
        .delete(&namespace, &DeleteParams::default())
        .await;
}
