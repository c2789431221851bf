//! No tenant can starve the others (issue 14, item 4): the operator binary, against the
//! in-memory API server, with two SlurmClusters: `local` (the real Slurm) and `hostile` (a
//! small HTTP server in this test).
//!
//! - A slow endpoint: `hostile` passes reads through to the real slurmrestd (so its index
//!   syncs and its SlurmJobs get as far as submitting) and never answers a write. More hostile
//!   SlurmJobs than the controller has reconcile slots hang in their submit; the healthy
//!   cluster's SlurmJobs still submit and cancel, while the hostile submits are still blocked,
//!   and never more of those are in flight than the per-connection limit.
//! - A flood: `hostile` answers every read with `[{},{},...]` and never answers a write.
//! - N SlurmClusters on the one real slurmrestd with the same credentials make one poller
//!   (the `slurm_operator_pollers` gauge), and one poller's requests per cycle.
//!
//! Times are compared with a baseline measured in the same test, never with absolute bounds.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::Method;
use axum::response::Response;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use slurm_operator::crd::{SlurmCluster, SlurmJob};
use slurm_operator::slurm::types::JobBaseState;
use slurm_operator::state::registry::IO_PER_CONNECTION;

use common::LocalSlurm;
use common::e2e::{MANAGER, Operator, eventually, metric};
use common::scenario::{self, Harness};

const NAMESPACE: &str = "fairness";
const HOSTILE: &str = "hostile";
/// More hostile SlurmJobs than a controller has reconcile slots (`kit::MAX_CONCURRENT_RECONCILES`).
const HOSTILE_JOBS: usize = 20;
const HEALTHY_JOBS: usize = 4;
const TIMEOUT: Duration = Duration::from_secs(120);

/// One operator at a time: each test runs its own, and the machine is shared.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How the hostile endpoint answers reads (writes are never answered).
#[derive(Clone, Copy)]
enum Reads {
    /// Passed through to the real slurmrestd.
    PassThrough,
    /// `[{},{},...]`, 256 KiB of it.
    Elements,
}

/// What the hostile endpoint saw of writes.
#[derive(Default)]
struct Writes {
    /// Writes received so far.
    seen: AtomicUsize,
    /// Writes whose client is still waiting now.
    blocked: AtomicUsize,
    /// The most ever waiting at once.
    max_blocked: AtomicUsize,
}

/// Counts a blocked write until the client gives up (the handler's future is dropped).
struct Blocked(Arc<Writes>);

impl Drop for Blocked {
    fn drop(&mut self) {
        self.0.blocked.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The hostile slurmrestd: reads as `reads` says, writes never answered. Returns its URL.
async fn hostile_server(reads: Reads, upstream: String, writes: Arc<Writes>) -> String {
    let http = reqwest::Client::new();
    let app = axum::Router::new().fallback(move |request: Request| {
        let (http, upstream, writes) = (http.clone(), upstream.clone(), writes.clone());
        async move {
            if request.method() != Method::GET {
                writes.seen.fetch_add(1, Ordering::SeqCst);
                let now = writes.blocked.fetch_add(1, Ordering::SeqCst) + 1;
                writes.max_blocked.fetch_max(now, Ordering::SeqCst);
                let _blocked = Blocked(writes);
                std::future::pending::<()>().await;
                unreachable!()
            }
            match reads {
                Reads::Elements => {
                    let mut body = b"[".to_vec();
                    body.extend(b"{},".repeat(256 * 1024 / 3));
                    body.extend(b"{}]");
                    Response::builder()
                        .header("content-type", "application/json")
                        .body(Body::from(body))
                        .unwrap()
                }
                Reads::PassThrough => common::proxy::forward(&http, &upstream, request).await,
            }
        }
    });
    common::proxy::serve(app).await
}

/// A SlurmCluster `name` for `endpoint` with the local Slurm's key (the Secret the harness
/// seeded), granting the test namespace.
async fn seed_cluster(client: &kube::Client, name: &str, endpoint: &str, slurm: &LocalSlurm) {
    let clusters: Api<SlurmCluster> = Api::all(client.clone());
    clusters
        .patch(
            name,
            &PatchParams::apply(MANAGER),
            &Patch::Apply(json!({
                "apiVersion": "slurm.rs/v1alpha1",
                "kind": "SlurmCluster",
                "metadata": {"name": name},
                "spec": {
                    "endpoint": endpoint,
                    "allowInsecureHttp": true,
                    "auth": {"jwt": {
                        "keySecretRef": {"name": "slurm-jwt", "key": "jwt_hs256.key"},
                        "user": slurm.user,
                    }},
                    "pollInterval": "1s",
                    "access": [{"namespaces": [NAMESPACE], "slurmUser": slurm.user, "allowClusterUser": true}],
                },
            })),
        )
        .await
        .unwrap();
}

/// A SlurmJob running `body` on `cluster`.
async fn apply_job(
    jobs: &Api<SlurmJob>,
    name: &str,
    cluster: &str,
    slurm: &LocalSlurm,
    body: &str,
) {
    jobs.patch(
        name,
        &PatchParams::apply(MANAGER),
        &Patch::Apply(json!({
            "apiVersion": "slurm.rs/v1alpha1",
            "kind": "SlurmJob",
            "metadata": {"name": name},
            "spec": {
                "clusterName": cluster,
                "partition": slurm.partition,
                "script": format!("#!/bin/sh\n{body}\n"),
                "environment": {"PATH": "/usr/bin:/bin"},
            },
        })),
    )
    .await
    .unwrap();
}

async fn ready(clusters: &Api<SlurmCluster>, name: &str) -> bool {
    let Ok(cluster) = clusters.get(name).await else {
        return false;
    };
    cluster
        .status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The Slurm job ids of `names`, once each has one in its status.
async fn submitted(jobs: &Api<SlurmJob>, names: &[String]) -> Vec<u32> {
    eventually("every healthy SlurmJob submitted", TIMEOUT, || async {
        let mut ids = Vec::new();
        for name in names {
            let job = jobs.get(name).await.ok()?;
            ids.push(u32::try_from(job.status?.job_id?).ok()?);
        }
        Some(ids)
    })
    .await
}

/// Delete `names` and wait until they are gone (their finalizer cancelled their Slurm jobs).
async fn delete_all(jobs: &Api<SlurmJob>, names: &[String]) {
    for name in names {
        jobs.delete(name, &DeleteParams::default()).await.unwrap();
    }
    eventually("every healthy SlurmJob gone", TIMEOUT, || async {
        for name in names {
            if jobs.get_opt(name).await.ok()?.is_some() {
                return None;
            }
        }
        Some(())
    })
    .await;
}

async fn assert_cancelled(slurm: &LocalSlurm, ids: &[u32]) {
    let client = slurm.client();
    for id in ids {
        eventually(&format!("Slurm job {id} CANCELLED"), TIMEOUT, || async {
            let records = client.job(*id).await.ok()?;
            records
                .iter()
                .all(|j| j.state.base == JobBaseState::Cancelled)
                .then_some(())
        })
        .await;
    }
}

fn operator(harness: &Harness, metrics: &str) -> Operator {
    Operator::spawn(
        &[
            "--namespace",
            NAMESPACE,
            "--credentials-namespace",
            scenario::CREDENTIALS_NAMESPACE,
            "--metrics-addr",
            metrics,
        ],
        &[("KUBECONFIG", harness.kubeconfig.as_str())],
        Some(&harness.log),
    )
    .sigterm_on_drop(Duration::from_secs(10))
}

/// Submit `count` healthy SlurmJobs (`sleep`ing), then delete them: their job ids and how long
/// the submits took.
async fn healthy_round(
    jobs: &Api<SlurmJob>,
    slurm: &LocalSlurm,
    names: Vec<String>,
) -> (Vec<u32>, Duration) {
    let started = Instant::now();
    for name in &names {
        apply_job(jobs, name, scenario::CLUSTER, slurm, "sleep 300").await;
    }
    let ids = submitted(jobs, &names).await;
    (ids, started.elapsed())
}

async fn hostile_cluster_delays_only_its_own(reads: Reads, prefix: &str) {
    let slurm = require_slurm!();
    let _serial = SERIAL.lock().await;
    let harness = Harness::start(&slurm, NAMESPACE, prefix).await;
    let writes = Arc::new(Writes::default());
    let hostile = hostile_server(reads, slurm.url.clone(), writes.clone()).await;
    seed_cluster(&harness.client, HOSTILE, &hostile, &slurm).await;
    let metrics = format!("127.0.0.1:{}", common::e2e::free_port());
    let _operator = operator(&harness, &metrics);
    let clusters: Api<SlurmCluster> = Api::all(harness.client.clone());
    let jobs: Api<SlurmJob> = Api::namespaced(harness.client.clone(), NAMESPACE);
    let run = &harness.run;
    eventually("the healthy SlurmCluster Ready", TIMEOUT, || async {
        ready(&clusters, scenario::CLUSTER).await.then_some(())
    })
    .await;
    if matches!(reads, Reads::PassThrough) {
        eventually("the hostile SlurmCluster Ready", TIMEOUT, || async {
            ready(&clusters, HOSTILE).await.then_some(())
        })
        .await;
    }

    // Baseline: the healthy cluster alone.
    let names: Vec<String> = (0..HEALTHY_JOBS)
        .map(|i| format!("{run}-base-{i}"))
        .collect();
    let (base_ids, baseline) = healthy_round(&jobs, &slurm, names.clone()).await;
    let started = Instant::now();
    delete_all(&jobs, &names).await;
    let cancel_baseline = started.elapsed();
    assert_cancelled(&slurm, &base_ids).await;

    // The hostile cluster's SlurmJobs: more than all the reconcile slots.
    let hostile_names: Vec<String> = (0..HOSTILE_JOBS)
        .map(|i| format!("{run}-hostile-{i}"))
        .collect();
    for name in &hostile_names {
        apply_job(&jobs, name, HOSTILE, &slurm, "true").await;
    }
    if matches!(reads, Reads::PassThrough) {
        // Its submits hang: as many as the connection allows.
        eventually("the hostile submits blocked", TIMEOUT, || async {
            (writes.blocked.load(Ordering::SeqCst) >= IO_PER_CONNECTION).then_some(())
        })
        .await;
    }

    // The healthy cluster's SlurmJobs meanwhile.
    let names: Vec<String> = (0..HEALTHY_JOBS)
        .map(|i| format!("{run}-busy-{i}"))
        .collect();
    let (ids, during) = healthy_round(&jobs, &slurm, names.clone()).await;
    let blocked_at_submit = writes.blocked.load(Ordering::SeqCst);
    let started = Instant::now();
    delete_all(&jobs, &names).await;
    let cancel_during = started.elapsed();
    assert_cancelled(&slurm, &ids).await;
    let blocked_at_cancel = writes.blocked.load(Ordering::SeqCst);
    eprintln!(
        "healthy submits: {baseline:?} alone, {during:?} beside the hostile cluster; cancels: \
         {cancel_baseline:?} alone, {cancel_during:?} beside it; hostile writes: {} seen, {} \
         blocked at most, {blocked_at_submit} blocked when the healthy ones had submitted, \
         {blocked_at_cancel} when they were cancelled",
        writes.seen.load(Ordering::SeqCst),
        writes.max_blocked.load(Ordering::SeqCst),
    );

    // Structure: the hostile cluster never held more than its share, and the healthy cluster
    // finished while the hostile writes were still hanging (not after they timed out).
    assert!(
        writes.max_blocked.load(Ordering::SeqCst) <= IO_PER_CONNECTION,
        "the hostile connection had more requests in flight than its limit"
    );
    if matches!(reads, Reads::PassThrough) {
        assert!(
            blocked_at_submit > 0,
            "the healthy submits waited for the hostile ones to time out"
        );
    }
    // None of the hostile SlurmJobs got anywhere.
    for name in &hostile_names {
        let job = jobs.get(name).await.unwrap();
        assert_eq!(job.status.and_then(|s| s.job_id), None, "{name}");
    }
    // Latency: the usual one, within a generous factor of the baseline (the machine is shared).
    let bound = |base: Duration| (base * 10).max(base + Duration::from_secs(10));
    assert!(during <= bound(baseline), "{during:?} vs {baseline:?}");
    assert!(
        cancel_during <= bound(cancel_baseline),
        "{cancel_during:?} vs {cancel_baseline:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_cluster_delays_only_its_own_slurmjobs() {
    hostile_cluster_delays_only_its_own(Reads::PassThrough, "fair-slow").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_answering_empty_elements_delays_only_its_own_slurmjobs() {
    hostile_cluster_delays_only_its_own(Reads::Elements, "fair-elements").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_on_one_slurmrestd_with_one_identity_share_one_poller() {
    const SHARING: usize = 6;
    const JOB_STATES: &str = "slurm_operator_slurmrestd_request_duration_seconds_count\
                              {operation=\"slurm_get_jobs_state\",code=\"2xx\"}";
    let slurm = require_slurm!();
    let _serial = SERIAL.lock().await;
    let harness = Harness::start(&slurm, NAMESPACE, "fair-share").await;
    let names: Vec<String> = std::iter::once(scenario::CLUSTER.to_owned())
        .chain((1..SHARING).map(|i| format!("{}-{i}", scenario::CLUSTER)))
        .collect();
    for name in &names[1..] {
        seed_cluster(&harness.client, name, &slurm.url, &slurm).await;
    }
    let metrics = format!("127.0.0.1:{}", common::e2e::free_port());
    let _operator = operator(&harness, &metrics);
    let clusters: Api<SlurmCluster> = Api::all(harness.client.clone());
    eventually("every SlurmCluster Ready", TIMEOUT, || async {
        for name in &names {
            if !ready(&clusters, name).await {
                return None;
            }
        }
        Some(())
    })
    .await;
    assert_eq!(
        metric(&metrics, "slurm_operator_pollers").await,
        Some(1.0),
        "{SHARING} SlurmClusters on one slurmrestd"
    );

    // One poller's requests: one job state list per poll interval (1 s), not one per
    // SlurmCluster. Counted over a window; a slow cycle only makes fewer.
    let window = Duration::from_secs(6);
    let before = metric(&metrics, JOB_STATES).await.unwrap();
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let after = metric(&metrics, JOB_STATES).await.unwrap();
    let cycles = started.elapsed().as_secs_f64() / 1.0;
    let listed = after - before;
    eprintln!("{listed} job state lists in {:?}", started.elapsed());
    assert!(listed >= 1.0, "the shared poller polls");
    assert!(
        listed <= cycles + 2.0,
        "{listed} job state lists in {cycles:.1} poll intervals: more than one poller"
    );

    // The last SlurmCluster going stops it; until then it stays.
    for (i, name) in names.iter().enumerate() {
        clusters
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        let left = if i + 1 == names.len() { 0.0 } else { 1.0 };
        eventually(
            &format!("{left} pollers after deleting {name}"),
            TIMEOUT,
            || async {
                let gone = clusters.get_opt(name).await.ok()?.is_none();
                (gone && metric(&metrics, "slurm_operator_pollers").await == Some(left))
                    .then_some(())
            },
        )
        .await;
        // The others are still Ready, each with its own status.
        for other in &names[i + 1..] {
            assert!(ready(&clusters, other).await, "{other}");
        }
    }
}
