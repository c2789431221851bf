//! `/metrics` of the operator *binary* (the in-memory API server of `testing/fake-apiserver`
//! and the real local Slurm): after a SlurmJob ran, the scrape has the per-cluster gauges with
//! the SlurmCluster's name as `cluster` (up, API version, SlurmJobs by phase), the leader gauge,
//! the poll metrics with their `cluster` label, and the process metrics.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use kube::api::Api;
use slurm_operator::crd::{SlurmCluster, SlurmJob};

use common::e2e::{Operator, eventually};
use common::scenario::{self, Harness};

const NAMESPACE: &str = "metrics";

async fn scrape(metrics: &str) -> Option<String> {
    reqwest::get(format!("http://{metrics}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()
}

/// The value of the series `series` (name and labels exactly), if scraped.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_has_the_cluster_gauges_with_the_cluster_label() {
    let slurm = require_slurm!();
    let harness = Harness::start(&slurm, NAMESPACE, "scrape").await;
    let args = harness.args();
    let metrics = args[5];
    let env = [("KUBECONFIG", harness.kubeconfig.as_str())];
    let jobs: Api<SlurmJob> = Api::namespaced(harness.client.clone(), NAMESPACE);
    let clusters: Api<SlurmCluster> = Api::all(harness.client.clone());
    let log = harness.log.clone();
    let _operator =
        Operator::spawn(&args, &env, Some(&log)).sigterm_on_drop(Duration::from_secs(10));

    let name = format!("{}-job", harness.run);
    scenario::apply_slurmjob(&jobs, &name, &slurm.partition, "true").await;
    let ended =
        scenario::all_ended(&jobs, std::slice::from_ref(&name), Duration::from_secs(120)).await;
    let phase = ended[0].status.as_ref().unwrap().phase;
    let cluster = clusters.get(scenario::CLUSTER).await.unwrap();
    let api_version = cluster
        .status
        .as_ref()
        .and_then(|s| s.api_version.clone())
        .expect("the SlurmCluster's status names its API version");

    let up = format!(
        "slurm_operator_cluster_up{{cluster=\"{}\"}}",
        scenario::CLUSTER
    );
    let jobs_in_phase = format!(
        "slurm_operator_slurmjobs{{cluster=\"{}\",namespace=\"{NAMESPACE}\",phase=\"{}\"}}",
        scenario::CLUSTER,
        phase.as_str()
    );
    // The gauges are read from the controllers' caches at scrape time: the cache sees the
    // SlurmJob's final status a moment after the API server has it.
    let text = eventually("the gauges", Duration::from_secs(30), || async {
        let text = scrape(metrics).await?;
        (value(&text, &up) == Some(1.0) && value(&text, &jobs_in_phase) == Some(1.0))
            .then_some(text)
    })
    .await;

    let version = text
        .lines()
        .find(|l| {
            l.starts_with(&format!(
                "slurm_operator_cluster_api_version_info{{cluster=\"{}\",",
                scenario::CLUSTER
            ))
        })
        .unwrap_or_else(|| panic!("no API version series; log: {}\n{text}", log.display()));
    assert!(
        version.contains(&format!("version=\"{api_version}\"")) && version.ends_with(" 1"),
        "{version} does not say {api_version}"
    );
    assert_eq!(value(&text, "slurm_operator_leader"), Some(1.0), "{text}");
    // Every poll series names its cluster.
    let polls: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("slurm_operator_poll_duration_seconds_count{"))
        .collect();
    let named = format!("cluster=\"{}\"", scenario::CLUSTER);
    assert!(
        polls.iter().any(|l| l.contains("kind=\"jobs\""))
            && polls.iter().all(|l| l.contains(&named)),
        "poll series not of cluster {}: {polls:?}",
        scenario::CLUSTER
    );
    assert!(
        value(&text, "process_resident_memory_bytes").is_some_and(|rss| rss > 0.0),
        "{text}"
    );
}
