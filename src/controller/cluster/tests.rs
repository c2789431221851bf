//! The SlurmCluster driver against a mocked API server (every call asserted in order) and, for the
//! happy path, the real local Slurm.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;

use super::*;
use crate::controller::kit::Backoffs;
use crate::controller::test_support::{ApiServerVerifier, local_slurm};
use crate::crd::FINALIZER;
use crate::crd::SlurmJob;
use crate::crd::condition::{self, AUTHENTICATED, READY};
use crate::crd::slurmjob::CachedSlurmJob;
use crate::crd::{ClusterAuth, JwtAuth, JwtKeySecretRef};
use crate::slurm::{ClientConfig, Credentials};
use crate::state::poller::PollerConfig;
use crate::state::registry::ConnectionSettings;

const NS: &str = "slurm";

fn cluster(name: &str, endpoint: &str) -> SlurmCluster {
    let mut cluster = SlurmCluster::new(
        name,
        SlurmClusterSpec {
            endpoint: endpoint.into(),
            auth: ClusterAuth {
                jwt: Some(JwtAuth {
                    key_secret_ref: JwtKeySecretRef {
                        name: "jwt".into(),
                        key: "jwt_hs256.key".into(),
                    },
                    user: "slurm".into(),
                    lifetime: crate::crd::Duration::from_secs(300),
                }),
                token_secret_ref: None,
            },
            tls: None,
            poll_interval: crate::crd::Duration::from_secs(1),
            max_response_size: None,
            listing_timeout: None,
            api_version: Default::default(),
            allow_insecure_http: true,
            access: Vec::new(),
            node_set_namespaces: Vec::new(),
        },
    );
    cluster.metadata.uid = Some(format!("uid-{name}"));
    cluster.metadata.generation = Some(1);
    cluster
}

fn finalized(mut cluster: SlurmCluster) -> SlurmCluster {
    cluster.metadata.finalizers = Some(vec![FINALIZER.into()]);
    cluster
}

/// `cluster` with the finalizer, being deleted.
fn deleting(cluster: SlurmCluster) -> SlurmCluster {
    let mut cluster = finalized(cluster);
    cluster.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    cluster
}

fn key_secret(key: &[u8]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some("jwt".into()),
            namespace: Some(NS.into()),
            labels: Some(BTreeMap::from([(
                crate::crd::CREDENTIALS_LABEL.to_owned(),
                "true".to_owned(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "jwt_hs256.key".to_owned(),
            ByteString(key.to_vec()),
        )])),
        ..Default::default()
    }
}

fn cond<'a>(status: &'a crate::crd::SlurmClusterStatus, type_: &str) -> (&'a str, &'a str) {
    let c = condition::find(&status.conditions, type_).unwrap();
    (c.status.as_str(), c.reason.as_str())
}

fn with_status(mut cluster: SlurmCluster, status: crate::crd::SlurmClusterStatus) -> SlurmCluster {
    cluster.status = Some(status);
    cluster
}

#[tokio::test]
async fn a_cluster_without_the_finalizer_gets_it_first() {
    let (ctx, mut api) = Context::test();
    let cluster = cluster("c0", "http://127.0.0.1:1");
    let expected = cluster.clone();
    let server = tokio::spawn(async move {
        api.expect_finalizer_added(&expected).await;
        api
    });
    let action = reconcile(Arc::new(cluster), Arc::new(ctx.clone()))
        .await
        .unwrap();
    assert_eq!(action, Action::await_change());
    let mut api = server.await.unwrap();
    api.expect_no_more_calls().await;
}

#[tokio::test]
async fn a_missing_secret_is_reported_and_waits_for_a_change() {
    let (ctx, mut api) = Context::test();
    let cluster = finalized(cluster("c1", "http://127.0.0.1:1"));
    let expected = cluster.clone();
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", None).await;
        let status = api.expect_status_apply(&expected).await;
        assert_eq!(cond(&status, READY), ("False", "SecretNotFound"));
        assert_eq!(cond(&status, AUTHENTICATED), ("False", "SecretNotFound"));
        let ready = condition::find(&status.conditions, READY).unwrap();
        assert!(ready.message.contains("\"jwt\""), "{}", ready.message);
        assert_eq!(ready.observed_generation, Some(1));
        assert_eq!(status.observed_generation, Some(1));
        let event = api
            .expect_event(&expected, "Warning", "SecretNotFound")
            .await;
        assert!(event["note"].as_str().unwrap().contains("\"jwt\""));
        api
    });
    let ctx = Arc::new(ctx);
    let cluster = Arc::new(cluster);
    let error = reconcile(cluster.clone(), ctx.clone()).await.unwrap_err();
    assert_eq!(error.category(), "SecretNotFound");
    assert!(error.is_invalid_spec());
    let mut api = server.await.unwrap();
    api.expect_no_more_calls().await;

    assert_eq!(
        error_policy(cluster.clone(), &error, ctx.clone()),
        Action::await_change()
    );
    assert!(
        !ctx.clusters
            .contains(&ObjectRef::from_obj(cluster.as_ref()))
    );
    let metrics = ctx.metrics.encode().unwrap();
    assert!(
        metrics.contains(
            "slurm_operator_reconcile_errors_total{controller=\"cluster\",reason=\"SecretNotFound\"} 1"
        ),
        "{metrics}"
    );
    assert!(metrics.contains("slurm_operator_reconciles_total{controller=\"cluster\"} 1"));
}

#[tokio::test]
async fn an_invalid_spec_is_reported_without_reading_anything() {
    let (ctx, mut api) = Context::test();
    let mut cluster = finalized(cluster("c2", "http://127.0.0.1:1"));
    cluster.spec.auth.token_secret_ref = Some(crate::crd::TokenSecretRef {
        name: "tok".into(),
        key: "token".into(),
    });
    let expected = cluster.clone();
    let server = tokio::spawn(async move {
        let status = api.expect_status_apply(&expected).await;
        assert_eq!(cond(&status, READY), ("False", "AuthMethodAmbiguous"));
        api.expect_event(&expected, "Warning", "AuthMethodAmbiguous")
            .await;
        api
    });
    let error = reconcile(Arc::new(cluster), Arc::new(ctx))
        .await
        .unwrap_err();
    assert_eq!(error.category(), "AuthMethodAmbiguous");
    server.await.unwrap().expect_no_more_calls().await;
}

#[tokio::test]
async fn an_unreachable_slurmrestd_backs_off_without_a_hot_loop() {
    let (ctx, mut api) = Context::test();
    let ctx = Arc::new(ctx);
    // Port 1 on localhost: connection refused, at once.
    let first = finalized(cluster("c3", "http://127.0.0.1:1"));
    let expected = first.clone();
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", Some(key_secret(b"0123456789abcdef")))
            .await;
        let status = api.expect_status_apply(&expected).await;
        assert_eq!(cond(&status, READY), ("False", "Unreachable"));
        assert_eq!(cond(&status, AUTHENTICATED), ("Unknown", "Unreachable"));
        api.expect_event(&expected, "Warning", "Unreachable").await;
        (api, status)
    });
    let error = reconcile(Arc::new(first.clone()), ctx.clone())
        .await
        .unwrap_err();
    assert_eq!(error.category(), "Unreachable");
    assert!(!error.is_invalid_spec());
    let (mut api, status) = server.await.unwrap();
    api.expect_no_more_calls().await;
    // The registration stays: its poller is what notices slurmrestd coming back.
    let key = ObjectRef::from_obj(&first);
    assert!(ctx.clusters.contains(&key));

    let mut delays = vec![error_policy(Arc::new(first.clone()), &error, ctx.clone())];
    // Later attempts see their own status: the same failure changes nothing, so neither the
    // status nor an Event is written again; only the Secret is read.
    let again = Arc::new(with_status(first, status));
    for _ in 0..3 {
        let server = tokio::spawn(async move {
            api.expect_get_secret(NS, "jwt", Some(key_secret(b"0123456789abcdef")))
                .await;
            api
        });
        let error = reconcile(again.clone(), ctx.clone()).await.unwrap_err();
        assert_eq!(error.category(), "Unreachable");
        api = server.await.unwrap();
        api.expect_no_more_calls().await;
        delays.push(error_policy(again.clone(), &error, ctx.clone()));
    }
    assert_eq!(
        delays,
        [1, 2, 4, 8].map(|f| Action::requeue(Backoffs::MIN * f))
    );
}

#[tokio::test]
async fn deletion_removes_the_client_and_then_the_finalizer() {
    let (ctx, mut api) = Context::test();
    let cluster = deleting(cluster("c4", "http://127.0.0.1:1"));
    let key = ObjectRef::from_obj(&cluster);
    register_unreachable(&ctx, &key);
    assert!(ctx.clusters.contains(&key));

    let expected = cluster.clone();
    let server = tokio::spawn(async move {
        api.expect_finalizer_removed(&expected).await;
        api
    });
    let ctx = Arc::new(ctx);
    let action = reconcile(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap();
    assert_eq!(action, Action::await_change());
    server.await.unwrap().expect_no_more_calls().await;
    assert!(!ctx.clusters.contains(&key), "the client is gone");

    // Cleanup is idempotent: a SlurmCluster that was never registered is fine too.
    let (ctx, mut api) = Context::test();
    let expected = cluster.clone();
    let server = tokio::spawn(async move {
        api.expect_finalizer_removed(&expected).await;
        api
    });
    reconcile(Arc::new(cluster), Arc::new(ctx)).await.unwrap();
    server.await.unwrap().expect_no_more_calls().await;
}

/// The happy path against the real local Slurm: the key bytes go into the mocked Secret, the
/// client is registered, and the status reports what slurmrestd says. Then the Secret's key is
/// replaced by a wrong one: the running client gets the new credentials in place and the status
/// turns Unauthorized.
#[tokio::test]
async fn a_valid_cluster_is_registered_and_ready() {
    let Some(slurm) = local_slurm() else { return };
    let key_bytes = std::fs::read(&slurm["SLURM_JWT_KEY"]).unwrap();
    let release = slurm["SLURM_RELEASE"].clone();
    let cluster_name = slurm["SLURM_CLUSTER_NAME"].clone();
    let partition = slurm["SLURM_PARTITION"].clone();
    let user = slurm["SLURM_USER"].clone();

    let (ctx, mut api) = Context::test();
    let ctx = Arc::new(ctx);
    let mut cluster = finalized(cluster("c5", &slurm["SLURM_REST_URL"]));
    if let Some(jwt) = cluster.spec.auth.jwt.as_mut() {
        jwt.user = user;
    }
    let expected = cluster.clone();
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", Some(key_secret(&key_bytes)))
            .await;
        let status = api.expect_status_apply(&expected).await;
        assert_eq!(cond(&status, READY), ("True", "Connected"));
        assert_eq!(cond(&status, AUTHENTICATED), ("True", "TokenAccepted"));
        assert_eq!(status.slurm_release.as_deref(), Some(release.as_str()));
        assert_eq!(status.cluster_name.as_deref(), Some(cluster_name.as_str()));
        assert_eq!(status.api_version.as_deref(), Some("v0.0.42"));
        assert!(status.partitions.contains(&partition), "{status:?}");
        assert!(
            status.nodes.as_ref().is_some_and(|n| n.total > 0),
            "{status:?}"
        );
        assert!(status.last_contact_time.is_some());
        api.expect_event(&expected, "Normal", "Connected").await;
        (api, status)
    });
    let action = reconcile(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap();
    assert_eq!(action, Action::requeue(RESYNC));
    let (mut api, status) = server.await.unwrap();
    api.expect_no_more_calls().await;
    let key = ObjectRef::from_obj(&cluster);
    assert!(ctx.clusters.contains(&key), "the client is registered");
    // The registered client reports its requests to the operator's metrics.
    let metrics = ctx.metrics.encode().unwrap();
    assert!(
        metrics.lines().any(|l| l
            .starts_with("slurm_operator_slurmrestd_request_duration_seconds_count{")
            && l.contains("operation=\"slurm_get_diag\",code=\"2xx\"}")),
        "{metrics}"
    );

    // Key rotation to a wrong key: swapped into the running client, which slurmrestd rejects.
    let cluster = with_status(cluster, status);
    let expected = cluster.clone();
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", Some(key_secret(b"not the cluster's key")))
            .await;
        let status = api.expect_status_apply(&expected).await;
        assert_eq!(cond(&status, READY), ("False", "Unauthorized"));
        assert_eq!(cond(&status, AUTHENTICATED), ("False", "Unauthorized"));
        assert_eq!(status.slurm_release, None);
        assert!(
            status.last_contact_time.is_some(),
            "the last contact is kept"
        );
        let event = api.expect_event(&expected, "Warning", "Unauthorized").await;
        // The note's digest in the action: another Unauthorized message later is another
        // Event, not a count on this one's note.
        let action = event["action"].as_str().unwrap_or_default().to_owned();
        assert!(action.starts_with("CheckConnection-"), "{event:#}");
        api
    });
    let error = reconcile(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap_err();
    assert_eq!(error.category(), "Unauthorized");
    server.await.unwrap().expect_no_more_calls().await;
    assert_eq!(
        error_policy(Arc::new(cluster), &error, ctx.clone()),
        Action::requeue(Backoffs::MIN)
    );
    assert!(ctx.clusters.contains(&key));
}

fn store_with(clusters: Vec<SlurmCluster>) -> reflector::Store<SlurmCluster> {
    let (store, mut writer) = reflector::store();
    for cluster in clusters {
        writer.apply_watcher_event(&watcher::Event::Apply(cluster));
    }
    store
}

#[test]
fn secret_events_map_to_the_clusters_that_reference_them() {
    let a = cluster("a", "http://h:6820");
    let b = cluster("b", "http://h:6820");
    let mut other_secret = cluster("c", "http://h:6820");
    if let Some(jwt) = other_secret.spec.auth.jwt.as_mut() {
        jwt.key_secret_ref.name = "other".into();
    }
    let store = store_with(vec![a.clone(), b.clone(), other_secret]);
    let mut refs = clusters_referencing(&store, |spec| {
        config::referenced_secrets(spec).any(|n| n == "jwt")
    });
    refs.sort_by_key(|r| r.name.clone());
    assert_eq!(refs, [ObjectRef::from_obj(&a), ObjectRef::from_obj(&b)]);
    assert!(clusters_referencing(&store, |_| false).is_empty());
}

/// The operator reads only Secrets marked as SlurmCluster credentials: an unmarked one (a
/// Secret that happens to be in the credentials namespace) is refused with what to do.
#[tokio::test]
async fn an_unmarked_secret_is_refused_and_waits_for_a_change() {
    let (ctx, mut api) = Context::test();
    let cluster = finalized(cluster("c9", "http://127.0.0.1:1"));
    let expected = cluster.clone();
    let server = tokio::spawn(async move {
        let mut secret = key_secret(b"0123456789abcdef0123456789abcdef");
        secret.metadata.labels = None;
        api.expect_get_secret(NS, "jwt", Some(secret)).await;
        let status = api.expect_status_apply(&expected).await;
        assert_eq!(cond(&status, READY), ("False", "SecretNotMarked"));
        let ready = condition::find(&status.conditions, READY).unwrap();
        assert!(
            ready.message.contains("label it slurm.rs/credentials=true"),
            "{}",
            ready.message
        );
        api.expect_event(&expected, "Warning", "SecretNotMarked")
            .await;
        api
    });
    let error = reconcile(Arc::new(cluster), Arc::new(ctx))
        .await
        .unwrap_err();
    assert_eq!(error.category(), "SecretNotMarked");
    assert!(error.is_invalid_spec());
    let mut api = server.await.unwrap();
    api.expect_no_more_calls().await;
}

#[tokio::test]
async fn health_and_listing_events_become_reconciles_and_lag_reconciles_only_that_poller() {
    use futures::StreamExt;

    let a = cluster("a", "http://h:6820");
    let b = cluster("b", "http://h:6820");
    let store = store_with(vec![a.clone(), b.clone()]);
    let hub = crate::state::events::EventHub::new(2);
    let (ra, rb) = (ObjectRef::from_obj(&a), ObjectRef::from_obj(&b));
    let (feed_a, feed_b) = (hub.feed(ra.clone()), hub.feed(rb.clone()));
    let mut triggers = Box::pin(kit::slurm_triggers(
        CONTROLLER,
        hub.subscribe(),
        store,
        status_targets,
    ));

    feed_a
        .sender
        .send(SlurmEvent::NodeChanged {
            cluster: ra.clone(),
            node: "n1".into(),
        })
        .unwrap();
    feed_b
        .sender
        .send(SlurmEvent::HealthChanged {
            cluster: rb.clone(),
            up: true,
        })
        .unwrap();
    assert_eq!(triggers.next().await, Some(rb.clone()));
    // A listing that starts or stops failing is said on the SlurmCluster at once too.
    feed_b
        .sender
        .send(SlurmEvent::ListingChanged {
            cluster: rb.clone(),
            failing: true,
        })
        .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), triggers.next());
    assert_eq!(next.await.expect("a reconcile"), Some(rb.clone()));

    // Overflow a's channel: the subscriber lags on a and asks for a's SlurmCluster only.
    for _ in 0..3 {
        feed_a
            .sender
            .send(SlurmEvent::HealthChanged {
                cluster: ra.clone(),
                up: false,
            })
            .unwrap();
    }
    assert_eq!(triggers.next().await, Some(ra.clone()));
    drop((feed_a, feed_b, hub));
    // The events that survived the lag still come through, then the stream ends: b was never
    // asked for again.
    let rest: Vec<_> = triggers.collect().await;
    assert!(rest.iter().all(|r| *r == ra), "{rest:?}");
}

/// A replica without the leader Lease touches nothing, not even a deleted SlurmCluster's finalizer;
/// gaining the Lease makes the same reconcile do its work.
#[tokio::test]
async fn a_follower_writes_nothing_until_it_leads() {
    let (mut ctx, mut api) = Context::test();
    let (lease, following) = tokio::sync::watch::channel(false);
    ctx.leadership = crate::leader::Leadership::follow(following);
    let ctx = Arc::new(ctx);
    let fresh = cluster("c1", "http://127.0.0.1:1");
    let mut deleted = finalized(cluster("c2", "http://127.0.0.1:1"));
    deleted.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    for object in [fresh.clone(), deleted] {
        let action = reconcile(Arc::new(object), ctx.clone()).await.unwrap();
        assert_eq!(action, Action::await_change());
    }
    api.expect_no_more_calls().await;

    lease.send_replace(true);
    let expected = fresh.clone();
    let server = tokio::spawn(async move {
        api.expect_finalizer_added(&expected).await;
        api.expect_no_more_calls().await;
    });
    let action = reconcile(Arc::new(fresh), ctx).await.unwrap();
    assert_eq!(action, Action::await_change());
    server.await.unwrap();
}

/// A SlurmJob of namespace `team` naming `cluster`, with the operator's finalizer when
/// `finalized`, and `status` (JSON) when given.
fn slurmjob(name: &str, cluster: &str, finalized: bool, status: serde_json::Value) -> SlurmJob {
    let mut job: SlurmJob = serde_json::from_value(serde_json::json!({
        "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
        "metadata": {"name": name, "namespace": "team", "uid": format!("uid-{name}"), "generation": 1},
        "spec": {"clusterName": cluster, "script": "#!/bin/sh\ntrue\n"},
        "status": status,
    }))
    .unwrap();
    if finalized {
        job.metadata.finalizers = Some(vec![FINALIZER.into()]);
    }
    job
}

/// The SlurmJob controller's cache as `ctx` sees it, listed with `jobs`; the writer, for
/// changes.
fn cached_slurmjobs(
    ctx: &Context,
    jobs: Vec<SlurmJob>,
) -> reflector::store::Writer<CachedSlurmJob> {
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    for job in jobs {
        writer.apply_watcher_event(&watcher::Event::InitApply(
            CachedSlurmJob::new(job).unwrap(),
        ));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    ctx.slurmjobs
        .add(store, crate::controller::slurmjob::holding_cluster);
    ctx.slurmjobs.mark_listed();
    writer
}

/// A deleted `cluster` is held: `reconcile` fails with `category`, naming `held` and none of
/// `others`, and comes back at the calm pace; its status says so (`DeletionBlocked=True` with
/// that reason and message, the only API call), and its client stays.
async fn expect_held(
    cluster: &SlurmCluster,
    ctx: &Arc<Context>,
    api: &mut ApiServerVerifier,
    category: &str,
    held: &str,
    others: &[&str],
) {
    let (result, status) = tokio::join!(reconcile(Arc::new(cluster.clone()), ctx.clone()), async {
        // The connection follows the spec and its Secret while the deletion waits.
        api.expect_get_secret(NS, "jwt", Some(key_secret(b"0123456789abcdef")))
            .await;
        api.expect_status_apply(cluster).await
    });
    let error = result.unwrap_err();
    assert_eq!(error.category(), category);
    let message = error.to_string();
    assert!(message.contains(held), "{message}");
    for other in others {
        assert!(!message.contains(other), "{message}");
    }
    let blocked = condition::find(&status.conditions, status::DELETION_BLOCKED).unwrap();
    assert_eq!(
        (blocked.status.as_str(), blocked.reason.as_str()),
        ("True", category)
    );
    assert_eq!(blocked.message, message);
    assert_eq!(
        error_policy(Arc::new(cluster.clone()), &error, ctx.clone()),
        Action::requeue(USERS_RETRY)
    );
    api.expect_no_more_calls().await;
    assert!(
        ctx.clusters.contains(&ObjectRef::from_obj(cluster)),
        "the client stays while {held} needs it"
    );
}

/// Then, nothing holding it: the finalizer goes, and the client with it.
async fn expect_released(cluster: SlurmCluster, ctx: &Arc<Context>, mut api: ApiServerVerifier) {
    let key = ObjectRef::from_obj(&cluster);
    let expected = cluster.clone();
    let server = tokio::spawn(async move {
        api.expect_finalizer_removed(&expected).await;
        api
    });
    let action = reconcile(Arc::new(cluster), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::await_change());
    server.await.unwrap().expect_no_more_calls().await;
    assert!(!ctx.clusters.contains(&key), "then the client is gone");
}

/// A deleted SlurmCluster keeps its client (and finalizer) while a SlurmJob naming it runs a
/// Slurm job: that SlurmJob's own finalizer needs the client to cancel it. SlurmJobs whose run
/// ended, that the operator never took on (no finalizer: a namespace it does not watch) or that
/// name another cluster do not hold it. Read from the SlurmJob cache: no API call.
#[tokio::test]
async fn deletion_waits_for_the_slurmjobs_that_use_the_cluster() {
    let (ctx, mut api) = Context::test();
    let cluster = deleting(cluster("c5", "http://127.0.0.1:1"));
    let key = ObjectRef::from_obj(&cluster);
    register_unreachable(&ctx, &key);
    let running = serde_json::json!({"phase": "Running", "jobId": 5, "observedGeneration": 1, "submittedGeneration": 1});
    let ended = serde_json::json!({"phase": "Completed", "jobId": 6, "observedGeneration": 1, "submittedGeneration": 1});
    let still_running = slurmjob("still-running", "c5", true, running.clone());
    let mut writer = cached_slurmjobs(
        &ctx,
        vec![
            still_running.clone(),
            slurmjob("ended", "c5", true, ended),
            slurmjob("unwatched", "c5", false, running.clone()),
            slurmjob("elsewhere", "another", true, running),
        ],
    );
    let ctx = Arc::new(ctx);
    expect_held(
        &cluster,
        &ctx,
        &mut api,
        "InUseBySlurmJobs",
        "team/still-running",
        &["ended", "unwatched", "elsewhere"],
    )
    .await;
    writer.apply_watcher_event(&watcher::Event::Delete(
        CachedSlurmJob::new(still_running).unwrap(),
    ));
    expect_released(cluster, &ctx, api).await;
}

/// Until the SlurmJob caches had their first list, nobody knows who uses the cluster: it waits,
/// calmly, and keeps its client.
#[tokio::test]
async fn deletion_waits_for_the_slurmjob_caches_first_list() {
    let (ctx, mut api) = Context::test();
    let cluster = deleting(cluster("c7", "http://127.0.0.1:1"));
    let key = ObjectRef::from_obj(&cluster);
    register_unreachable(&ctx, &key);
    let (store, _writer) = reflector::store::<CachedSlurmJob>();
    ctx.slurmjobs
        .add(store, crate::controller::slurmjob::holding_cluster);
    let ctx = Arc::new(ctx);
    let error = reconcile(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap_err();
    assert_eq!(error.category(), "SlurmJobsNotListed");
    assert_eq!(
        error_policy(Arc::new(cluster), &error, ctx.clone()),
        Action::requeue(USERS_RETRY)
    );
    api.expect_no_more_calls().await;
    assert!(ctx.clusters.contains(&key));
}

/// Deleted while the operator was down: no client. While a SlurmJob needs it, it connects again
/// for their cleanup (here its Secret is gone too, so it cannot, and keeps waiting: the
/// SlurmJobs' deadline ends that, not a cycle).
#[tokio::test]
async fn a_deleted_cluster_without_a_client_connects_again_for_its_slurmjobs() {
    let (ctx, mut api) = Context::test();
    let cluster = deleting(cluster("c6", "http://127.0.0.1:1"));
    let key = ObjectRef::from_obj(&cluster);
    let running = serde_json::json!({"phase": "Running", "jobId": 5, "observedGeneration": 1, "submittedGeneration": 1});
    let _writer = cached_slurmjobs(&ctx, vec![slurmjob("still-running", "c6", true, running)]);
    let ctx = Arc::new(ctx);
    let expected = cluster.clone();
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", None).await;
        api.expect_status_apply(&expected).await;
        api.expect_no_more_calls().await;
    });
    let error = reconcile(Arc::new(cluster), ctx.clone()).await.unwrap_err();
    server.await.unwrap();
    assert_eq!(error.category(), "InUseBySlurmJobs");
    assert!(!ctx.clusters.contains(&key), "no credentials, no client");
}

/// While SlurmJobs hold a deleted SlurmCluster, its connection follows what the admin changes
/// meanwhile: a rotated key or a moved endpoint reaches the connection the SlurmJobs' cancels
/// use (the old one may no longer work). A Secret gone meanwhile keeps the connection there is.
#[tokio::test]
async fn a_deleted_cluster_in_use_follows_a_new_endpoint_and_key() {
    let (ctx, mut api) = Context::test();
    let cluster = deleting(cluster("c9", "http://127.0.0.1:2"));
    let key = ObjectRef::from_obj(&cluster);
    // Registered before the admin's change: another endpoint, another credential.
    register_unreachable(&ctx, &key);
    let running = serde_json::json!({"phase": "Running", "jobId": 5, "observedGeneration": 1, "submittedGeneration": 1});
    let _writer = cached_slurmjobs(&ctx, vec![slurmjob("still-running", "c9", true, running)]);
    let ctx = Arc::new(ctx);
    let endpoint = |ctx: &Context| {
        ctx.clusters
            .get(&key)
            .map(|handle| handle.client.endpoint().to_string())
    };
    assert_eq!(endpoint(&ctx).as_deref(), Some("http://127.0.0.1:1/"));
    let expected = cluster.clone();
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", Some(key_secret(b"0123456789abcdef")))
            .await;
        api.expect_status_apply(&expected).await;
        api.expect_no_more_calls().await;
        api
    });
    let error = reconcile(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap_err();
    let mut api = server.await.unwrap();
    assert_eq!(error.category(), "InUseBySlurmJobs");
    assert_eq!(endpoint(&ctx).as_deref(), Some("http://127.0.0.1:2/"));

    // The Secret deleted meanwhile: the connection stays as it is (the status already says
    // what holds the cluster: no write).
    let mut said = cluster.clone();
    said.status = Some(crate::crd::SlurmClusterStatus {
        conditions: vec![condition::new(
            status::DELETION_BLOCKED,
            true,
            error.category(),
            error.to_string(),
            said.metadata.generation,
            crate::crd::condition::now(),
        )],
        ..Default::default()
    });
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", None).await;
        api.expect_no_more_calls().await;
    });
    let error = reconcile(Arc::new(said), ctx.clone()).await.unwrap_err();
    server.await.unwrap();
    assert_eq!(error.category(), "InUseBySlurmJobs");
    assert_eq!(endpoint(&ctx).as_deref(), Some("http://127.0.0.1:2/"));
}

/// A SlurmCluster deleted while the watch was down (its finalizer removed by hand) never gets a
/// Delete event: the re-list that follows does not show it, and its registration goes then.
/// One the re-list shows, and one created after, keep theirs; a Delete event removes at once.
#[tokio::test]
async fn registrations_go_with_clusters_a_re_list_no_longer_shows() {
    let (ctx, _api) = Context::test();
    let [kept, gone, later] = ["kept", "gone", "later"].map(|name| cluster(name, "http://h:1"));
    let keys = [&kept, &gone, &later].map(ObjectRef::from_obj);
    for key in &keys {
        register_unreachable(&ctx, key);
    }
    let mut tracker = GoneClusters::default();
    let mut observe = |event| tracker.observe(&event, &ctx.clusters);
    // The first list shows all three.
    assert!(observe(watcher::Event::Init).is_empty());
    for listed in [&kept, &gone, &later] {
        assert!(observe(watcher::Event::InitApply(listed.clone())).is_empty());
    }
    assert!(observe(watcher::Event::InitDone).is_empty());
    // The re-list after the watch was down: `gone` is not there.
    assert!(observe(watcher::Event::Init).is_empty());
    assert!(observe(watcher::Event::InitApply(kept.clone())).is_empty());
    assert!(observe(watcher::Event::InitApply(later.clone())).is_empty());
    assert_eq!(observe(watcher::Event::InitDone), [keys[1].clone()]);
    assert!(ctx.clusters.contains(&keys[0]) && ctx.clusters.contains(&keys[2]));
    assert!(!ctx.clusters.contains(&keys[1]));
    // Buried as a Delete would: a reconcile of it still under way registers nothing after.
    assert!(ctx.clusters.gone("uid-gone"));
    assert!(!ctx.clusters.gone("uid-kept") && !ctx.clusters.gone("uid-later"));
    // Unless the watch shows it after all (that list came from a cache behind the watch): it
    // may register again.
    assert!(observe(watcher::Event::Apply(gone.clone())).is_empty());
    assert!(!ctx.clusters.gone("uid-gone"));
    // One made again under a name with another uid: the first uid is buried.
    let mut again = kept.clone();
    again.metadata.uid = Some("uid-kept-again".into());
    assert!(observe(watcher::Event::Apply(again)).is_empty());
    assert!(ctx.clusters.gone("uid-kept") && !ctx.clusters.gone("uid-kept-again"));
    // Outside a re-list, what a watch event does not name stays.
    register_unreachable(&ctx, &keys[1]);
    assert!(observe(watcher::Event::Apply(kept.clone())).is_empty());
    assert!(
        observe(watcher::Event::InitDone).is_empty(),
        "no re-list under way"
    );
    assert!(ctx.clusters.contains(&keys[1]));
    assert_eq!(observe(watcher::Event::Delete(later)), [keys[2].clone()]);
    assert!(!ctx.clusters.contains(&keys[2]));
}

/// A reconcile under way when its SlurmCluster was deleted (its finalizer removed by hand, the
/// watch's Delete seen while the reconcile read its Secret) registers after the Delete removed
/// nothing: the registration is dropped again, not left polling with the deleted cluster's
/// credentials until a restart. Another SlurmCluster of the same name (another uid) registers.
#[tokio::test]
async fn a_cluster_deleted_during_its_reconcile_keeps_no_registration() {
    let (ctx, mut api) = Context::test();
    let ctx = Arc::new(ctx);
    let first = finalized(cluster("c9", "http://127.0.0.1:1"));
    let key = ObjectRef::from_obj(&first);
    let mut tracker = GoneClusters::default();
    assert!(
        tracker
            .observe(&watcher::Event::Delete(first.clone()), &ctx.clusters)
            .is_empty(),
        "nothing registered yet"
    );
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", Some(key_secret(b"0123456789abcdef")))
            .await;
        api
    });
    let error = reconcile(Arc::new(first.clone()), ctx.clone())
        .await
        .unwrap_err();
    let mut api = server.await.unwrap();
    api.expect_no_more_calls().await;
    assert_eq!(error.category(), "RegistrationLost");
    assert!(!ctx.clusters.contains(&key));
    assert_eq!(ctx.clusters.pollers(), 0);
    // Not a failure, and no backoff: looked at again at the resync while leading (one the
    // watch shows again after a lagging re-list buried it has nothing else to bring it back;
    // a deleted one has left the controller's cache), not at all once the Lease is gone.
    let failures = || ctx.metrics.encode().unwrap().contains("RegistrationLost");
    assert_eq!(
        error_policy(Arc::new(first.clone()), &error, ctx.clone()),
        Action::requeue(RESYNC)
    );
    assert!(!failures(), "not counted as a reconcile error");
    let mut deposed = (*ctx).clone();
    let (_leading, state) = tokio::sync::watch::channel(false);
    deposed.leadership = crate::leader::Leadership::follow(state);
    assert_eq!(
        error_policy(Arc::new(first.clone()), &error, Arc::new(deposed)),
        Action::await_change()
    );

    let mut again = first;
    again.metadata.uid = Some("uid-c9-again".into());
    assert!(!ctx.clusters.gone("uid-c9-again"));
    register_unreachable(&ctx, &key);
    assert!(ctx.clusters.contains(&key));
}

/// A replica that lost the Lease holds no connection (no poller polls with credentials it no
/// longer follows), no view of Slurm's nodes (leading again is a start, not an outage) and no
/// drain in its gauges (the leader reports them).
#[tokio::test]
async fn a_lost_lease_drops_connections_and_views() {
    let (ctx, _api) = Context::test();
    let keys = ["a", "b"].map(|name| ObjectRef::from_obj(&cluster(name, "http://h:1")));
    for key in &keys {
        register_unreachable(&ctx, key);
    }
    ctx.nodesets.saw_nodes_of("a", &ctx.leadership);
    assert!(ctx.nodesets.saw_nodes_before("a"));
    ctx.metrics
        .nodeset_draining_since("team", "cpu", Some(chrono::Utc::now()));
    assert_eq!(ctx.metrics.nodesets_draining(), 1);
    // One connection (same slurmrestd, same credentials), two registrations.
    assert_eq!(ctx.clusters.pollers(), 1);
    assert!(keys.iter().all(|key| ctx.clusters.contains(key)));
    assert_eq!(ctx.lease_lost(), 2);
    assert!(keys.iter().all(|key| !ctx.clusters.contains(key)));
    assert_eq!(ctx.clusters.pollers(), 0);
    assert!(!ctx.nodesets.saw_nodes_before("a"));
    assert_eq!(
        ctx.metrics.nodesets_draining(),
        0,
        "the leader reports drains now"
    );
    assert_eq!(ctx.lease_lost(), 0, "nothing left to drop");

    // A round that trusted a view as the Lease went (the renewal loop's word already "lost")
    // marks nothing after the forgetting.
    let (_leading, state) = tokio::sync::watch::channel(false);
    let deposed = crate::leader::Leadership::follow(state);
    ctx.nodesets.saw_nodes_of("a", &deposed);
    assert!(!ctx.nodesets.saw_nodes_before("a"));
}

/// Register a client (and its poller) for `key` against a port nothing listens on.
fn register_unreachable(ctx: &Context, key: &ObjectRef<SlurmCluster>) {
    ctx.clusters
        .upsert(
            key,
            ClientConfig::new("http://127.0.0.1:1")
                .unwrap()
                .allow_plaintext(true),
            ConnectionSettings {
                fingerprint: "test".into(),
                poller: PollerConfig {
                    interval: Duration::from_secs(1),
                },
            },
            Arc::new(Credentials::token("t", None).unwrap()),
            |label, client, config, events| {
                crate::state::poller::spawn(
                    label,
                    client,
                    config,
                    ctx.tag_key.clone(),
                    events,
                    ctx.metrics.clone(),
                )
            },
        )
        .unwrap();
}

/// A SlurmCluster built from JSON whose Secret references carry a `namespace` (as a user might
/// write them): the field does not exist in the types, so it is dropped, and every Secret is read
/// from the operator's credentials namespace (`expect_get_secret` asserts the path).
#[tokio::test]
async fn secrets_are_read_only_from_the_credentials_namespace() {
    let (ctx, mut api) = Context::test();
    let pem = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()])
        .unwrap()
        .cert
        .pem();
    let cluster: SlurmCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "slurm.rs/v1alpha1",
        "kind": "SlurmCluster",
        "metadata": {"name": "c6", "uid": "uid-c6", "generation": 1,
                     "finalizers": [FINALIZER]},
        "spec": {
            "endpoint": "https://127.0.0.1:1",
            "auth": {"jwt": {"keySecretRef": {"name": "jwt", "namespace": "kube-system"}}},
            "tls": {"caSecretRef": {"name": "ca", "namespace": "kube-system"}},
        },
    }))
    .unwrap();
    assert!(
        !serde_json::to_string(&cluster.spec)
            .unwrap()
            .contains("kube-system"),
        "a namespace in a Secret reference must not survive deserialization"
    );
    let expected = cluster.clone();
    let ca = Secret {
        metadata: ObjectMeta {
            name: Some("ca".into()),
            labels: Some(BTreeMap::from([(
                crate::crd::CREDENTIALS_LABEL.to_owned(),
                "true".to_owned(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "ca.crt".to_owned(),
            ByteString(pem.into_bytes()),
        )])),
        ..Default::default()
    };
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", Some(key_secret(b"0123456789abcdef")))
            .await;
        api.expect_get_secret(NS, "ca", Some(ca)).await;
        let status = api.expect_status_apply(&expected).await;
        assert_eq!(cond(&status, READY), ("False", "Unreachable"));
        api.expect_event(&expected, "Warning", "Unreachable").await;
        api
    });
    let error = reconcile(Arc::new(cluster), Arc::new(ctx))
        .await
        .unwrap_err();
    assert_eq!(error.category(), "Unreachable");
    server.await.unwrap().expect_no_more_calls().await;
}

/// kube-rs puts an object name into the request path unescaped: a Secret "name" that is a path
/// would read another namespace's Secret. It is refused before any API call.
#[tokio::test]
async fn a_secret_name_that_is_a_path_is_refused_before_any_read() {
    for name in ["../../kube-system/secrets/jwt", "kube-system/jwt"] {
        let (ctx, mut api) = Context::test();
        let mut cluster = finalized(cluster("c7", "http://127.0.0.1:1"));
        if let Some(jwt) = cluster.spec.auth.jwt.as_mut() {
            jwt.key_secret_ref.name = name.into();
        }
        let expected = cluster.clone();
        let server = tokio::spawn(async move {
            let status = api.expect_status_apply(&expected).await;
            assert_eq!(cond(&status, READY), ("False", "InvalidObjectName"));
            assert_eq!(cond(&status, AUTHENTICATED), ("False", "InvalidObjectName"));
            api.expect_event(&expected, "Warning", "InvalidObjectName")
                .await;
            api
        });
        let error = reconcile(Arc::new(cluster), Arc::new(ctx))
            .await
            .unwrap_err();
        assert_eq!(error.category(), "InvalidObjectName", "{name}");
        assert!(error.is_invalid_spec());
        server.await.unwrap().expect_no_more_calls().await;
    }
}

/// With `--allowed-endpoint`, a SlurmCluster naming another endpoint is refused before any
/// Secret is read or any request is sent.
#[tokio::test]
async fn an_endpoint_outside_the_allowlist_is_refused_before_anything_is_read() {
    let (mut ctx, mut api) = Context::test();
    ctx.allowed_endpoints =
        vec![url::Url::parse("https://slurmrestd.hpc.example.org:6820").unwrap()];
    let cluster = finalized(cluster("c10", "http://127.0.0.1:1"));
    let expected = cluster.clone();
    let server = tokio::spawn(async move {
        let status = api.expect_status_apply(&expected).await;
        assert_eq!(cond(&status, READY), ("False", "EndpointNotAllowed"));
        let ready = condition::find(&status.conditions, READY).unwrap();
        assert!(
            ready.message.contains("--allowed-endpoint"),
            "{}",
            ready.message
        );
        api.expect_event(&expected, "Warning", "EndpointNotAllowed")
            .await;
        api
    });
    let ctx = Arc::new(ctx);
    let error = reconcile(Arc::new(cluster), ctx.clone()).await.unwrap_err();
    assert_eq!(error.category(), "EndpointNotAllowed");
    assert!(error.is_invalid_spec());
    assert!(ctx.clusters.clusters().is_empty(), "nothing registered");
    server.await.unwrap().expect_no_more_calls().await;
}

/// The REST API versions the local Slurm's slurmrestd has plugins for, oldest first.
fn served_versions(slurm: &std::collections::HashMap<String, String>) -> Vec<String> {
    let lib = std::path::Path::new(&slurm["SLURM_ROOT"]).join("usr/lib/x86_64-linux-gnu/slurm-wlm");
    let mut versions: Vec<String> = std::fs::read_dir(lib)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_prefix("data_parser_")
                .and_then(|n| n.strip_suffix(".so"))
                .map(|v| v.replace('_', "."))
        })
        .collect();
    versions.sort();
    versions
}

/// `spec.restApiVersion` pins a version: one slurmrestd serves is used and reported; one it does
/// not serve gives `Ready=False` with reason `UnsupportedVersion`, naming what it serves.
#[tokio::test]
async fn a_pinned_version_is_used_and_an_unserved_pin_names_what_is_served() {
    let Some(slurm) = local_slurm() else { return };
    let key_bytes = std::fs::read(&slurm["SLURM_JWT_KEY"]).unwrap();
    let served = served_versions(&slurm);
    let pins = [
        crate::crd::ApiVersion::V0_0_40,
        crate::crd::ApiVersion::V0_0_41,
        crate::crd::ApiVersion::V0_0_42,
        crate::crd::ApiVersion::V0_0_43,
        crate::crd::ApiVersion::V0_0_44,
        crate::crd::ApiVersion::V0_0_45,
    ];
    let is_served =
        |v: &crate::crd::ApiVersion| served.iter().any(|s| Some(s.as_str()) == v.pinned());
    let good = *pins.iter().find(|v| is_served(v)).unwrap();
    let bad = *pins.iter().find(|v| !is_served(v)).unwrap();

    for (name, pin) in [("pin-good", good), ("pin-bad", bad)] {
        let (ctx, mut api) = Context::test();
        let ctx = Arc::new(ctx);
        let mut cluster = finalized(cluster(name, &slurm["SLURM_REST_URL"]));
        cluster.spec.api_version = pin;
        if let Some(jwt) = cluster.spec.auth.jwt.as_mut() {
            jwt.user = slurm["SLURM_USER"].clone();
        }
        let expected = cluster.clone();
        let key = key_bytes.clone();
        let served = served.clone();
        let server = tokio::spawn(async move {
            api.expect_get_secret(NS, "jwt", Some(key_secret(&key)))
                .await;
            let status = api.expect_status_apply(&expected).await;
            if pin == good {
                assert_eq!(cond(&status, READY), ("True", "Connected"));
                assert_eq!(status.api_version.as_deref(), pin.pinned());
                api.expect_event(&expected, "Normal", "Connected").await;
            } else {
                assert_eq!(cond(&status, READY).1, "UnsupportedVersion");
                let ready = condition::find(&status.conditions, READY).unwrap();
                let pinned = pin.pinned().unwrap();
                assert!(
                    ready.message.contains(&format!("pins {pinned}")),
                    "{}",
                    ready.message
                );
                assert!(
                    ready
                        .message
                        .contains(&format!("serves {}", served.join(", "))),
                    "{}",
                    ready.message
                );
                api.expect_event(&expected, "Warning", "UnsupportedVersion")
                    .await;
            }
            api
        });
        let result = reconcile(Arc::new(cluster.clone()), ctx.clone()).await;
        assert_eq!(result.is_ok(), pin == good, "{name}: {result:?}");
        server.await.unwrap().expect_no_more_calls().await;
    }
}

/// A SlurmNodeSet of this cluster.
fn nodeset_of(
    name: &str,
    cluster: &str,
    finalized: bool,
    deleting: bool,
) -> crate::crd::SlurmNodeSet {
    let mut set: crate::crd::SlurmNodeSet = serde_json::from_value(serde_json::json!({
        "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmNodeSet",
        "metadata": {"name": name, "namespace": "hpc", "uid": format!("uid-{name}")},
        "spec": {
            "clusterName": cluster, "replicas": 0, "slurm": {},
            "template": {"spec": {"containers": [{"name": "slurmd", "image": "slurmd"}]}},
        },
    }))
    .unwrap();
    if finalized {
        set.metadata.finalizers = Some(vec![FINALIZER.into()]);
    }
    if deleting {
        set.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    }
    set
}

/// A deleted SlurmCluster keeps its client (and finalizer) while a SlurmNodeSet naming it still
/// needs it: one being deleted (it drains its nodes and removes them from Slurm through that
/// client), and a live one the cluster admits that has or wants pods (deleted after the
/// cluster went, it would find no cluster and let go at once, its slurmd pods deleted undrained
/// by garbage collection). A live set scaled to 0 with no pod, one in a namespace the cluster
/// does not admit, sets without the operator's finalizer and another cluster's sets do not hold
/// it. Read from the SlurmNodeSet cache: no API call but the status saying so.
#[tokio::test]
async fn deletion_waits_for_the_slurmnodesets_that_still_need_it() {
    let (ctx, mut api) = Context::test();
    let mut cluster = finalized(cluster("c8", "http://127.0.0.1:1"));
    cluster.spec.node_set_namespaces = vec!["hpc".into()];
    cluster.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    let key = ObjectRef::from_obj(&cluster);
    register_unreachable(&ctx, &key);
    let _jobs = cached_slurmjobs(&ctx, vec![]);
    let draining = nodeset_of("draining", "c8", true, true);
    let mut living = nodeset_of("living", "c8", true, false);
    living.spec.replicas = 2;
    let mut scaled_in = nodeset_of("scaled-in", "c8", true, false);
    scaled_in.status = Some(crate::crd::SlurmNodeSetStatus {
        replicas: 1,
        ..Default::default()
    });
    let mut elsewhere_ns = living.clone();
    elsewhere_ns.metadata.name = Some("not-admitted".into());
    elsewhere_ns.metadata.namespace = Some("other".into());
    elsewhere_ns.metadata.uid = Some("uid-not-admitted".into());
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    for set in [
        draining.clone(),
        living.clone(),
        scaled_in.clone(),
        elsewhere_ns,
        nodeset_of("empty", "c8", true, false),
        nodeset_of("unfinalized", "c8", false, true),
        nodeset_of("elsewhere", "another", true, true),
    ] {
        writer.apply_watcher_event(&watcher::Event::InitApply(set));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    ctx.nodesets.add(store);
    let ctx = Arc::new(ctx);
    let others = ["empty", "not-admitted", "unfinalized", "elsewhere"];
    for held in ["hpc/draining", "hpc/living", "hpc/scaled-in"] {
        expect_held(
            &cluster,
            &ctx,
            &mut api,
            "InUseBySlurmNodeSets",
            held,
            &others,
        )
        .await;
    }
    // Gone, scaled to 0 and its last pod gone, and its deletion done: nothing holds it.
    writer.apply_watcher_event(&watcher::Event::Delete(draining));
    living.spec.replicas = 0;
    writer.apply_watcher_event(&watcher::Event::Apply(living));
    scaled_in.status = None;
    writer.apply_watcher_event(&watcher::Event::Apply(scaled_in));
    expect_released(cluster, &ctx, api).await;
}

/// A finalized SlurmCluster `name` whose endpoint is the local Slurm's slurmrestd while its
/// status names another Slurm cluster (`elsewhere`): its endpoint moved to another cluster.
fn moved_to_local_slurm(name: &str, slurm: &HashMap<String, String>) -> SlurmCluster {
    let mut cluster = finalized(cluster(name, &slurm["SLURM_REST_URL"]));
    if let Some(jwt) = cluster.spec.auth.jwt.as_mut() {
        jwt.user = slurm["SLURM_USER"].clone();
    }
    with_status(
        cluster,
        crate::crd::SlurmClusterStatus {
            cluster_name: Some("elsewhere".into()),
            ..Default::default()
        },
    )
}

/// After a restart, a SlurmCluster whose slurmrestd does not answer while jobs of its Slurm
/// cluster run gets no connection (nothing confirms where the endpoint leads): its `JobsListed`
/// says `Unknown/NotConnected`, not the `True/Listed` of before, as no poller lists anything.
#[tokio::test]
async fn an_unconfirmed_cluster_without_a_connection_says_its_jobs_are_not_listed() {
    let (ctx, mut api) = Context::test();
    let mut cluster = finalized(cluster("c12", "http://127.0.0.1:1"));
    let listed = condition::new(
        status::JOBS_LISTED,
        true,
        "Listed",
        "listed",
        Some(1),
        crate::crd::condition::now(),
    );
    cluster = with_status(
        cluster,
        crate::crd::SlurmClusterStatus {
            cluster_name: Some("elsewhere".into()),
            conditions: vec![listed],
            ..Default::default()
        },
    );
    let running = serde_json::json!({"phase": "Running", "jobId": 5, "observedGeneration": 1, "submittedGeneration": 1});
    let _writer = cached_slurmjobs(&ctx, vec![slurmjob("running", "c12", true, running)]);
    let ctx = Arc::new(ctx);
    let expected = cluster.clone();
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", Some(key_secret(&[7; 32])))
            .await;
        api.expect_status_apply(&expected).await
    });
    let error = reconcile(Arc::new(cluster), ctx.clone()).await.unwrap_err();
    let status = server.await.unwrap();
    assert!(matches!(error, Error::Unconfirmed(_)), "{error:?}");
    assert!(!ctx.clusters.contains(&ObjectRef::new("c12")));
    assert_eq!(
        cond(&status, status::JOBS_LISTED),
        ("Unknown", status::NOT_CONNECTED)
    );
}

/// `connect` with the one API call it makes, the read of the key's Secret, answered with
/// `key_bytes`; it finds the real local Slurm (`real_name`), its poller possibly still down
/// from answers refused before (`SlurmClusterChanged`).
async fn connect_reading_the_key(
    cluster: &SlurmCluster,
    key: &ObjectRef<SlurmCluster>,
    ctx: &Context,
    mut api: ApiServerVerifier,
    key_bytes: &[u8],
    real_name: &str,
) -> ApiServerVerifier {
    let secret = key_secret(key_bytes);
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", Some(secret)).await;
        api
    });
    match connect(cluster, key, ctx).await {
        Ok(connected) => assert_eq!(connected.info.cluster_name, real_name),
        Err(Error::PollerDown { reason, .. }) => assert_eq!(reason, "SlurmClusterChanged"),
        Err(other) => panic!("{other:?}"),
    }
    let mut api = server.await.unwrap();
    api.expect_no_more_calls().await;
    api
}

/// `register` with the one API call it makes, the read of the key's Secret, answered with
/// `key_bytes`.
async fn register_reading_the_key(
    cluster: &SlurmCluster,
    key: &ObjectRef<SlurmCluster>,
    ctx: &Context,
    mut api: ApiServerVerifier,
    key_bytes: &[u8],
) -> (ApiServerVerifier, Upserted) {
    let secret = key_secret(key_bytes);
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", Some(secret)).await;
        api
    });
    let (_, upserted) = register(cluster, key, ctx).await.unwrap();
    let mut api = server.await.unwrap();
    api.expect_no_more_calls().await;
    (api, upserted)
}

/// Once a SlurmCluster has confirmed whom its connection reaches, the client refuses answers
/// of another Slurm cluster (its poller goes down, `SlurmClusterChanged`) until the
/// SlurmCluster's check decides: with nothing of ours there, it follows, and the client and
/// poller read that cluster's answers. (With something of ours there the connection goes:
/// `a_connection_never_follows_the_endpoint_to_another_slurm_cluster_in_use`.) The real local
/// Slurm stands for "another": the connection was confirmed as `elsewhere`.
#[tokio::test]
async fn a_connection_reads_another_slurm_cluster_only_once_its_check_follows_it() {
    let Some(slurm) = local_slurm() else { return };
    let key_bytes = std::fs::read(&slurm["SLURM_JWT_KEY"]).unwrap();
    let real_name = slurm["SLURM_CLUSTER_NAME"].clone();
    let (ctx, mut api) = Context::test();
    let ctx = Arc::new(ctx);
    let mut cluster = finalized(cluster("c13", &slurm["SLURM_REST_URL"]));
    if let Some(jwt) = cluster.spec.auth.jwt.as_mut() {
        jwt.user = slurm["SLURM_USER"].clone();
    }
    let key = ObjectRef::from_obj(&cluster);
    let expected = cluster.clone();
    let secret = key_secret(&key_bytes);
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", Some(secret)).await;
        api.expect_status_apply(&expected).await;
        api.expect_event(&expected, "Normal", "Connected").await;
        api
    });
    reconcile(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap();
    let mut api = server.await.unwrap();
    let handle = ctx.clusters.get(&key).unwrap();
    assert_eq!(
        handle.confirmed_cluster("c13").as_deref(),
        Some(real_name.as_str())
    );
    handle.client.partitions().await.unwrap();

    // As if the endpoint had come to reach another cluster: answers are refused, and the
    // poller says so.
    handle.confirm_cluster("c13", "elsewhere");
    let error = handle.client.partitions().await.unwrap_err();
    assert_eq!(error.category(), "SlurmClusterChanged", "{error}");
    let mut index = handle.index.clone();
    tokio::time::timeout(
        Duration::from_secs(60),
        index.wait_for(|s| {
            matches!(
                s.health,
                Health::Down {
                    reason: "SlurmClusterChanged",
                    ..
                }
            )
        }),
    )
    .await
    .expect("the poller refuses the other cluster's answers")
    .unwrap();

    // The check, with nothing of ours there, follows; the poller comes back up.
    let cluster = with_status(
        cluster,
        crate::crd::SlurmClusterStatus {
            cluster_name: Some("elsewhere".into()),
            ..Default::default()
        },
    );
    api = connect_reading_the_key(&cluster, &key, &ctx, api, &key_bytes, &real_name).await;
    assert_eq!(
        handle.confirmed_cluster("c13").as_deref(),
        Some(real_name.as_str())
    );
    handle.client.partitions().await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(60),
        index.wait_for(|s| s.health.is_up()),
    )
    .await
    .expect("the poller reads the cluster again")
    .unwrap();

    // Another SlurmCluster on the connection followed the endpoint elsewhere meanwhile (the
    // client expects what it found) and went, the endpoint back here: this one's check, its
    // own word unchanged, puts the client's expectation back, and writes go out again.
    handle.client.expect_cluster("elsewhere");
    let error = handle.client.partitions().await.unwrap_err();
    assert_eq!(error.category(), "SlurmClusterChanged", "{error}");
    connect_reading_the_key(&cluster, &key, &ctx, api, &key_bytes, &real_name).await;
    assert_eq!(
        handle.client.expected_cluster().as_deref(),
        Some(real_name.as_str())
    );
    handle.client.partitions().await.unwrap();
    let error = handle.client.cancel_job(999_999).await.unwrap_err();
    assert_eq!(error.category(), "NotFound", "a write goes out: {error}");
}

/// A connection made for a SlurmCluster whose status names its Slurm cluster holds its answers
/// to that cluster from its poller's first cycle, before `connect` has judged whom the endpoint
/// reaches: the one the probe found when it asked, else the one the status names. (Before, a
/// connection made while the endpoint did not answer, or for new settings, read whatever
/// answered until the check.)
#[tokio::test]
async fn a_new_connection_holds_its_answers_to_the_recorded_slurm_cluster() {
    let Some(slurm) = local_slurm() else { return };
    let key_bytes = std::fs::read(&slurm["SLURM_JWT_KEY"]).unwrap();
    let real_name = slurm["SLURM_CLUSTER_NAME"].clone();
    let (ctx, mut api) = Context::test();
    let ctx = Arc::new(ctx);
    let cluster = moved_to_local_slurm("c14", &slurm);
    let key = ObjectRef::from_obj(&cluster);

    // The probe asked (a new endpoint): what it found, nothing of ours being on `elsewhere`.
    let upserted;
    (api, upserted) = register_reading_the_key(&cluster, &key, &ctx, api, &key_bytes).await;
    assert_eq!(upserted, Upserted::Created);
    let handle = ctx.clusters.get(&key).unwrap();
    assert_eq!(
        handle.client.expected_cluster().as_deref(),
        Some(real_name.as_str())
    );
    handle.client.partitions().await.unwrap();

    // New settings on the same endpoint (no probe): a new client, held to the status's word
    // until `connect` judges.
    let mut changed = cluster.clone();
    changed.spec.poll_interval = crate::crd::Duration::from_secs(2);
    let upserted;
    (api, upserted) = register_reading_the_key(&changed, &key, &ctx, api, &key_bytes).await;
    assert_eq!(upserted, Upserted::Replaced);
    let handle = ctx.clusters.get(&key).unwrap();
    assert_eq!(
        handle.client.expected_cluster().as_deref(),
        Some("elsewhere")
    );
    assert_eq!(handle.confirmed_cluster("c14"), None);
    let error = handle.client.partitions().await.unwrap_err();
    assert_eq!(error.category(), "SlurmClusterChanged", "{error}");

    // Judged: nothing of ours on `elsewhere`, so it follows.
    connect_reading_the_key(&changed, &key, &ctx, api, &key_bytes, &real_name).await;
    let handle = ctx.clusters.get(&key).unwrap();
    assert_eq!(
        handle.client.expected_cluster().as_deref(),
        Some(real_name.as_str())
    );
    handle.client.partitions().await.unwrap();
}

/// A deleted SlurmCluster is not connected again, so its cleanup releases writes held after
/// an answer of another Slurm cluster itself, once the endpoint answers for the cluster it
/// confirmed (its SlurmJobs' cancels go through it); not while it answers for another.
#[tokio::test]
async fn a_deleted_clusters_cleanup_releases_writes_only_for_its_own_slurm_cluster() {
    let Some(slurm) = local_slurm() else { return };
    let key_bytes = std::fs::read(&slurm["SLURM_JWT_KEY"]).unwrap();
    let real_name = slurm["SLURM_CLUSTER_NAME"].clone();
    let (ctx, mut api) = Context::test();
    let ctx = Arc::new(ctx);
    let mut cluster = finalized(cluster("c15", &slurm["SLURM_REST_URL"]));
    if let Some(jwt) = cluster.spec.auth.jwt.as_mut() {
        jwt.user = slurm["SLURM_USER"].clone();
    }
    let key = ObjectRef::from_obj(&cluster);
    (api, _) = register_reading_the_key(&cluster, &key, &ctx, api, &key_bytes).await;
    let handle = ctx.clusters.get(&key).unwrap();
    // Held: the client expects `elsewhere` and the real cluster answered.
    handle.client.expect_cluster("elsewhere");
    assert!(handle.client.partitions().await.is_err());
    assert!(handle.client.writes_held());

    // Its own word is `elsewhere`, the endpoint answers for the real cluster: still held.
    handle.confirm_cluster("c15", "elsewhere");
    assert!(handle.client.partitions().await.is_err());
    release_writes(&handle, &key, &ctx).await;
    assert!(handle.client.writes_held());
    let error = handle.client.cancel_job(999_999).await.unwrap_err();
    assert_eq!(error.category(), "SlurmClusterChanged", "{error}");
    assert!(
        !ctx.clusters.contains(&key),
        "it leaves the connection: its word would hold others' writes there"
    );

    // Its own word is the real cluster: released, the cancel goes out.
    register_reading_the_key(&cluster, &key, &ctx, api, &key_bytes).await;
    let handle = ctx.clusters.get(&key).unwrap();
    handle.confirm_cluster("c15", &real_name);
    handle.client.expect_cluster("elsewhere");
    assert!(handle.client.partitions().await.is_err());
    assert!(handle.client.writes_held());
    release_writes(&handle, &key, &ctx).await;
    assert!(!handle.client.writes_held());
    let error = handle.client.cancel_job(999_999).await.unwrap_err();
    assert_eq!(error.category(), "NotFound", "{error}");
}

/// A SlurmJob whose submit answer was lost (no job id in its status: the job may run in the
/// first Slurm cluster) holds its SlurmCluster's endpoint as a running job does: moved, that
/// job would run on where nothing follows it, and the SlurmJob would submit again elsewhere.
#[tokio::test]
async fn a_submit_in_doubt_keeps_the_connection_from_following_the_endpoint() {
    let Some(slurm) = local_slurm() else { return };
    let key_bytes = std::fs::read(&slurm["SLURM_JWT_KEY"]).unwrap();
    let (ctx, mut api) = Context::test();
    let cluster = moved_to_local_slurm("c9", &slurm);
    let in_doubt = serde_json::json!({"phase": "Pending"});
    let _writer = cached_slurmjobs(&ctx, vec![slurmjob("in-doubt", "c9", true, in_doubt)]);
    let ctx = Arc::new(ctx);
    let expected = cluster.clone();
    let secret = key_secret(&key_bytes);
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", Some(secret)).await;
        let status = api.expect_status_apply(&expected).await;
        api.expect_event(&expected, "Warning", "SlurmClusterChanged")
            .await;
        status
    });
    let error = reconcile(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap_err();
    let status = server.await.unwrap();
    assert_eq!(error.category(), "SlurmClusterChanged");
    let message = &condition::find(&status.conditions, READY).unwrap().message;
    assert!(message.contains("team/in-doubt"), "{message}");
    assert!(!ctx.clusters.contains(&ObjectRef::from_obj(&cluster)));
}

/// A SlurmCluster whose status names the Slurm cluster its SlurmJobs' jobs are in does not
/// follow its endpoint to another one while any of them has not ended (the real local Slurm
/// stands for "another one": the status says `elsewhere`). Its first connection is not made,
/// and one there is stays where it was; the status says why and names the SlurmJob. Once that
/// job has ended, the connection follows and the status names the new cluster.
#[tokio::test]
async fn a_connection_never_follows_the_endpoint_to_another_slurm_cluster_in_use() {
    let Some(slurm) = local_slurm() else { return };
    let key_bytes = std::fs::read(&slurm["SLURM_JWT_KEY"]).unwrap();
    let real_name = slurm["SLURM_CLUSTER_NAME"].clone();
    let (ctx, mut api) = Context::test();
    let cluster = moved_to_local_slurm("c8", &slurm);
    let key = ObjectRef::from_obj(&cluster);
    let running = serde_json::json!({"phase": "Running", "jobId": 5, "observedGeneration": 1, "submittedGeneration": 1});
    let ended = serde_json::json!({"phase": "Completed", "jobId": 6, "observedGeneration": 1, "submittedGeneration": 1});
    let still_running = slurmjob("still-running", "c8", true, running.clone());
    let mut writer = cached_slurmjobs(
        &ctx,
        vec![
            still_running.clone(),
            slurmjob("ended", "c8", true, ended),
            slurmjob("other-cluster", "another", true, running),
        ],
    );
    let ctx = Arc::new(ctx);

    // No connection yet (an operator started after the admin's edit): none is made.
    let expected = cluster.clone();
    let secret = key_secret(&key_bytes);
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", Some(secret)).await;
        let status = api.expect_status_apply(&expected).await;
        api.expect_event(&expected, "Warning", "SlurmClusterChanged")
            .await;
        (api, status)
    });
    let error = reconcile(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap_err();
    let (mut api, status) = server.await.unwrap();
    assert_eq!(error.category(), "SlurmClusterChanged");
    assert_eq!(cond(&status, READY), ("False", "SlurmClusterChanged"));
    let message = &condition::find(&status.conditions, READY).unwrap().message;
    for part in [
        "team/still-running",
        "\"elsewhere\"",
        &format!("{real_name:?}"),
        "spec.endpoint",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
    assert!(
        !message.contains("ended") && !message.contains("other-cluster"),
        "{message}"
    );
    assert_eq!(status.cluster_name.as_deref(), Some("elsewhere"));
    assert!(!ctx.clusters.contains(&key), "no connection made");
    assert_eq!(
        error_policy(Arc::new(cluster.clone()), &error, ctx.clone()),
        Action::requeue(IDENTITY_RETRY)
    );

    // A connection there is (to the Slurm cluster the SlurmJob's job is in) stays where it is.
    register_unreachable(&ctx, &key);
    let cluster = with_status(cluster, status);
    let secret = key_secret(&key_bytes);
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", Some(secret)).await;
        api
    });
    let error = reconcile(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap_err();
    let mut api = server.await.unwrap();
    assert_eq!(error.category(), "SlurmClusterChanged");
    let endpoint = ctx
        .clusters
        .get(&key)
        .map(|h| h.client.endpoint().to_string());
    assert_eq!(endpoint.as_deref(), Some("http://127.0.0.1:1/"));

    // The job ended: the connection follows the endpoint, and the status the new cluster.
    let mut done = still_running;
    done.status.as_mut().unwrap().phase = crate::crd::slurmjob::Phase::Completed;
    writer.apply_watcher_event(&watcher::Event::Apply(CachedSlurmJob::new(done).unwrap()));
    let expected = cluster.clone();
    let secret = key_secret(&key_bytes);
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", Some(secret)).await;
        let status = api.expect_status_apply(&expected).await;
        api.expect_event(&expected, "Normal", "Connected").await;
        (api, status)
    });
    reconcile(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap();
    let (mut api, status) = server.await.unwrap();
    api.expect_no_more_calls().await;
    assert_eq!(cond(&status, READY), ("True", "Connected"));
    assert_eq!(status.cluster_name.as_deref(), Some(real_name.as_str()));
    let endpoint = ctx
        .clusters
        .get(&key)
        .map(|h| h.client.endpoint().to_string());
    assert_eq!(
        endpoint,
        Some(format!(
            "{}/",
            slurm["SLURM_REST_URL"].trim_end_matches('/')
        ))
    );

    // A job live in the new cluster, and a status that still names the one before (its write
    // after the move failed, or the cache lags): the connection, found to serve this cluster,
    // stays; the status is put right.
    let pending = serde_json::json!({"phase": "Pending", "jobId": 7});
    writer.apply_watcher_event(&watcher::Event::Apply(
        CachedSlurmJob::new(slurmjob("again", "c8", true, pending)).unwrap(),
    ));
    let mut stale = status.clone();
    stale.cluster_name = Some("elsewhere".into());
    let cluster = with_status(cluster, stale);
    let expected = cluster.clone();
    let secret = key_secret(&key_bytes);
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", Some(secret)).await;
        let status = api.expect_status_apply(&expected).await;
        (api, status)
    });
    reconcile(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap();
    let (mut api, fixed) = server.await.unwrap();
    assert_eq!(fixed.cluster_name.as_deref(), Some(real_name.as_str()));
    let handle = ctx.clusters.get(&key).unwrap();
    assert_eq!(
        handle.confirmed_cluster("c8").as_deref(),
        Some(real_name.as_str())
    );
    assert_eq!(
        handle.confirmed_cluster("c9"),
        None,
        "another SlurmCluster sharing the connection judges for itself"
    );

    // The same endpoint found serving another cluster than the one it served (an address
    // moved to another slurmrestd) while a job is live: its connection goes.
    ctx.clusters
        .get(&key)
        .unwrap()
        .confirm_cluster("c8", "elsewhere");
    let expected = cluster.clone();
    let secret = key_secret(&key_bytes);
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", Some(secret)).await;
        let status = api.expect_status_apply(&expected).await;
        api.expect_event(&expected, "Warning", "SlurmClusterChanged")
            .await;
        (api, status)
    });
    let error = reconcile(Arc::new(cluster.clone()), ctx.clone())
        .await
        .unwrap_err();
    let (mut api, status) = server.await.unwrap();
    assert_eq!(error.category(), "SlurmClusterChanged");
    assert_eq!(cond(&status, READY), ("False", "SlurmClusterChanged"));
    assert!(!ctx.clusters.contains(&key), "its connection went");

    // No connection, an endpoint that does not answer, and a job live: none is made (its
    // poller could judge the job by whatever answers there later). With no job live, one is.
    let unreachable = with_status(
        finalized(self::cluster("c8", "http://127.0.0.1:1")),
        status.clone(),
    );
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", Some(key_secret(b"0123456789abcdef")))
            .await;
        api
    });
    let error = connect(&unreachable, &key, &ctx).await.unwrap_err();
    let mut api = server.await.unwrap();
    assert_eq!(error.category(), "Unreachable", "{error}");
    assert!(!ctx.clusters.contains(&key));
    for uid in ["still-running", "again"] {
        writer.apply_watcher_event(&watcher::Event::Delete(
            CachedSlurmJob::new(slurmjob(uid, "c8", true, serde_json::json!({}))).unwrap(),
        ));
    }
    let server = tokio::spawn(async move {
        api.expect_get_secret(NS, "jwt", Some(key_secret(b"0123456789abcdef")))
            .await;
        api
    });
    let error = connect(&unreachable, &key, &ctx).await.unwrap_err();
    server.await.unwrap().expect_no_more_calls().await;
    assert_eq!(error.category(), "Unreachable", "{error}");
    assert!(
        ctx.clusters.contains(&key),
        "registered: its poller follows the outage"
    );
}

/// A watched namespace that refuses the operator holds a SlurmCluster it might use (by name in
/// `access` or `nodeSetNamespaces`, or any namespace where `access` selects by label) against a
/// move to another Slurm cluster: what it holds is not known. One it cannot use does not.
#[tokio::test]
async fn a_namespace_that_refuses_the_operator_holds_what_it_might_use() {
    let (ctx, _api) = Context::test();
    let _writer = cached_slurmjobs(&ctx, vec![]);
    for namespace in ["hpc", "team-a", "team-z"] {
        ctx.refused
            .set(namespace, crate::controller::context::SLURMJOBS, true);
    }
    let entry = |namespaces: &[&str], selector: Option<&str>| -> crate::crd::ClusterAccess {
        serde_json::from_value(serde_json::json!({
            "namespaces": namespaces,
            "namespaceSelector": selector.map(|team| serde_json::json!({"matchLabels": {"team": team}})),
            "slurmUser": "alice",
        }))
        .unwrap()
    };
    let mut by_name = cluster("c8", "https://slurm.example:6820");
    by_name.spec.access = vec![entry(&["team-a"], None)];
    by_name.spec.node_set_namespaces = vec!["hpc".into()];
    assert_eq!(holders(&by_name, &ctx).unwrap(), ["hpc/*", "team-a/*"]);
    let mut by_label = cluster("c8", "https://slurm.example:6820");
    by_label.spec.access = vec![entry(&[], Some("a"))];
    assert_eq!(
        holders(&by_label, &ctx).unwrap(),
        ["hpc/*", "team-a/*", "team-z/*"]
    );
    let unused = cluster("c8", "https://slurm.example:6820");
    assert!(holders(&unused, &ctx).unwrap().is_empty());
}

/// A watched namespace that has refused the operator (its Role deleted after the caches
/// listed) for the grace or longer holds no deletion: its cached SlurmJobs and SlurmNodeSets
/// are what they were before the refusal (a failed watch clears nothing), and the operator can
/// act on none of them. Within the grace they hold it, as any cached ones do.
#[tokio::test]
async fn a_namespace_refused_past_the_grace_holds_no_deletion() {
    use crate::controller::context::{RefusedNamespaces, SLURMJOBS, SLURMNODESETS};
    let running = serde_json::json!({"phase": "Running", "jobId": 5, "observedGeneration": 1, "submittedGeneration": 1});
    let mut cluster = deleting(cluster("c10", "http://127.0.0.1:1"));
    cluster.spec.node_set_namespaces = vec!["hpc".into()];
    let mut living = nodeset_of("living", "c10", true, false);
    living.spec.replicas = 2;
    let setup = |grace: Duration| {
        let (mut ctx, api) = Context::test();
        ctx.refused = Arc::new(RefusedNamespaces::new(ctx.metrics.clone(), grace));
        ctx.refused.set("team", SLURMJOBS, true);
        ctx.refused.set("hpc", SLURMNODESETS, true);
        register_unreachable(&ctx, &ObjectRef::from_obj(&cluster));
        let jobs = cached_slurmjobs(
            &ctx,
            vec![slurmjob("still-running", "c10", true, running.clone())],
        );
        let (store, mut sets) = reflector::store();
        sets.apply_watcher_event(&watcher::Event::Init);
        sets.apply_watcher_event(&watcher::Event::InitApply(living.clone()));
        sets.apply_watcher_event(&watcher::Event::InitDone);
        ctx.nodesets.add(store);
        (Arc::new(ctx), api, jobs, sets)
    };

    let (ctx, mut api, _jobs, _sets) = setup(Duration::from_secs(3600));
    expect_held(
        &cluster,
        &ctx,
        &mut api,
        "InUseBySlurmJobs",
        "team/still-running",
        &[],
    )
    .await;
    assert_eq!(ctx.nodesets.holding(&cluster, &ctx.refused), ["hpc/living"]);

    let (ctx, api, _jobs, _sets) = setup(Duration::ZERO);
    assert!(ctx.nodesets.holding(&cluster, &ctx.refused).is_empty());
    expect_released(cluster, &ctx, api).await;
}

/// Before a refusal past the grace lets a deletion go, it is asked again: the namespace's
/// rights may be back without its watch (resumed, nothing changed) bringing an event to say so.
/// Still refused, the deletion goes; served again, its SlurmJob holds it.
#[tokio::test]
async fn a_refusal_is_asked_again_before_it_lets_a_deletion_go() {
    use crate::controller::context::{RefusedNamespaces, SLURMJOBS};
    let api = fake_apiserver::FakeApiServer::start_with_crds(crate::crd::all()).await;
    let mut ctx = Context::new(api.client(), crate::metrics::Metrics::new());
    ctx.refused = Arc::new(RefusedNamespaces::new(ctx.metrics.clone(), Duration::ZERO));
    let running = serde_json::json!({"phase": "Running", "jobId": 5, "observedGeneration": 1, "submittedGeneration": 1});
    let _jobs = cached_slurmjobs(&ctx, vec![slurmjob("still-running", "c11", true, running)]);
    // The namespace's watch had listed, then its Role was deleted.
    ctx.refused
        .observe::<SlurmJob>("team", SLURMJOBS, &Ok(watcher::Event::InitDone));
    ctx.refused.set("team", SLURMJOBS, true);
    api.forbid_namespace("team");
    let cluster = deleting(cluster("c11", "http://127.0.0.1:1"));
    let deleted = DeletedCluster {
        name: "c11",
        index: None,
        deleted_at: None,
        now: chrono::Utc::now(),
    };
    let (users, sets) = users_of(&cluster, &deleted, &ctx).await.unwrap();
    assert!(users.is_empty() && sets.is_empty(), "{users:?} {sets:?}");
    assert_eq!(ctx.refused.marked(), [("team".to_owned(), SLURMJOBS)]);

    api.allow_namespace("team");
    let (users, _) = users_of(&cluster, &deleted, &ctx).await.unwrap();
    assert_eq!(users, ["team/still-running"]);
    assert!(ctx.refused.marked().is_empty());
}
