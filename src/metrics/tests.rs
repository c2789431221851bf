// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kube::runtime::{reflector, watcher};
use serde_json::json;

use super::*;

fn object<K: serde::de::DeserializeOwned>(value: serde_json::Value) -> K {
    serde_json::from_value(value).unwrap()
}

/// A store holding `objects`, as a controller's reflector fills it.
fn store<K>(objects: Vec<K>) -> Store<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, mut writer) = reflector::store();
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::Apply(object));
    }
    reader
}

fn cluster(name: &str, ready: &str, version: Option<&str>) -> SlurmCluster {
    object(json!({
        "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmCluster",
        "metadata": {"name": name},
        "spec": {
            "endpoint": "https://slurmrestd.example.org:6820",
            "auth": {"jwt": {"keySecretRef": {"name": "jwt"}}},
            "access": [{"namespaces": ["team"], "slurmUser": "alice"}],
        },
        "status": {
            "conditions": [{"type": "Ready", "status": ready, "reason": "R", "message": "",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "restApiVersion": version,
            "slurmRelease": "24.11.5",
        },
    }))
}

fn job(name: &str, phase: Option<&str>, reason: Option<&str>) -> CachedSlurmJob {
    job_of("main", name, phase, reason)
}

fn job_of(cluster: &str, name: &str, phase: Option<&str>, reason: Option<&str>) -> CachedSlurmJob {
    let mut value = json!({
        "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"clusterName": cluster, "script": "#!/bin/sh\ntrue\n"},
    });
    if let Some(phase) = phase {
        value["status"] = json!({"phase": phase, "stateReason": reason});
    }
    object(value)
}

fn nodeset(name: &str, draining: i32, drain_timeout: Option<&str>) -> SlurmNodeSet {
    let mut value = json!({
        "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmNodeSet",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {
            "clusterName": "main", "replicas": 3,
            "template": {"spec": {"containers": [{"name": "slurmd", "image": "slurmd"}]}},
            "slurm": {},
        },
        "status": {"replicas": 3, "slurm": {"idle": 1, "mixed": 1, "draining": draining}},
    });
    if let Some(timeout) = drain_timeout {
        value["spec"]["scaleIn"] = json!({"drainTimeout": timeout});
    }
    object(value)
}

fn lines_with<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .collect()
}

#[test]
fn event_metrics_carry_static_labels_and_the_cluster() {
    let metrics = Metrics::new();
    metrics.reconciled("cluster", Duration::from_millis(3));
    metrics.reconcile_failed("cluster", "SecretNotFound");
    metrics.polled_cluster("main", "jobs", Duration::from_millis(8), false);
    let observer = metrics.requests_of("main");
    observer.observe("slurm_get_diag", Some(511), Duration::from_millis(2));
    observer.observe("slurm_get_diag", None, Duration::from_millis(2));
    let text = metrics.encode().unwrap();
    assert!(
        text.contains("slurm_operator_reconciles_total{controller=\"cluster\"} 1"),
        "{text}"
    );
    assert!(text.contains("slurm_operator_reconcile_errors_total{controller=\"cluster\",reason=\"SecretNotFound\"} 1"), "{text}");
    assert!(
        text.contains("slurm_operator_poll_errors_total{cluster=\"main\",kind=\"jobs\"} 1"),
        "{text}"
    );
    assert!(text.contains("slurm_operator_slurmrestd_request_duration_seconds_count{cluster=\"main\",operation=\"slurm_get_diag\",code=\"5xx\"} 1"), "{text}");
    assert!(
        text.contains("cluster=\"main\",operation=\"slurm_get_diag\",code=\"error\""),
        "{text}"
    );
}

#[test]
fn object_gauges_are_read_from_the_caches_at_scrape_time() {
    let metrics = Metrics::new();
    // Before the controllers have caches: descriptions only, no series.
    let text = metrics.encode().unwrap();
    assert!(
        text.contains("# TYPE slurm_operator_cluster_up gauge"),
        "{text}"
    );
    assert!(
        lines_with(&text, "slurm_operator_cluster_up").is_empty(),
        "{text}"
    );

    let (leading, _) = tokio::sync::watch::channel(true);
    metrics.watch_objects(ObjectSources {
        clusters: store(vec![
            cluster("main", "True", Some("v0.0.42")),
            cluster("spare", "False", None),
        ]),
        slurmjobs: vec![store(vec![
            // Waiting in Slurm (`Submitted`), by Slurm's reason code without its details; a
            // sentence of the operator's (it names a job id) is `Other`.
            job("a", Some("Submitted"), Some("Priority")),
            job(
                "b",
                Some("Submitted"),
                Some("ReqNodeNotAvail, UnavailableNodes:n[1-3]"),
            ),
            job("c", Some("Submitted"), Some("Resources")),
            job(
                "c2",
                Some("Submitted"),
                Some("Slurm job 12 left slurmctld, and accounting (slurmdbd) still lists it"),
            ),
            // Not submitted yet: not pending in Slurm, whatever its reason says.
            job("p", Some("Pending"), Some("Priority")),
            job("d", Some("Running"), None),
            job("e", None, None),
            // Names a tenant made up: one series for all of them, not one each.
            job_of("made-up-1", "f", None, None),
            job_of("made-up-2", "g", Some("Submitted"), Some("Priority")),
        ])],
        nodesets: vec![store(vec![
            nodeset("cpu", 1, Some("1h")),
            nodeset("gpu", 0, None),
        ])],
        leadership: Leadership::follow(leading.subscribe()),
    });
    metrics.nodeset_draining_since(
        "team",
        "cpu",
        Some(
            DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
                .unwrap()
                .to_utc(),
        ),
    );
    // A SlurmNodeSet that no longer exists exports nothing.
    metrics.nodeset_draining_since("team", "gone", Some(Utc::now()));

    let text = metrics.encode().unwrap();
    let expected = [
        "slurm_operator_cluster_up{cluster=\"main\"} 1",
        "slurm_operator_cluster_up{cluster=\"spare\"} 0",
        "slurm_operator_cluster_api_version_info{cluster=\"main\",version=\"v0.0.42\",slurm_release=\"24.11.5\"} 1",
        "slurm_operator_slurmjobs{cluster=\"main\",namespace=\"team\",phase=\"Pending\"} 2",
        "slurm_operator_slurmjobs{cluster=\"main\",namespace=\"team\",phase=\"Submitted\"} 4",
        "slurm_operator_slurmjobs{cluster=\"main\",namespace=\"team\",phase=\"Running\"} 1",
        "slurm_operator_slurmjobs_pending{cluster=\"main\",reason=\"Priority\"} 1",
        "slurm_operator_slurmjobs_pending{cluster=\"main\",reason=\"ReqNodeNotAvail\"} 1",
        "slurm_operator_slurmjobs_pending{cluster=\"main\",reason=\"Resources\"} 1",
        "slurm_operator_slurmjobs_pending{cluster=\"main\",reason=\"Other\"} 1",
        "slurm_operator_slurmjobs{cluster=\"<none>\",namespace=\"team\",phase=\"Pending\"} 1",
        "slurm_operator_slurmjobs{cluster=\"<none>\",namespace=\"team\",phase=\"Submitted\"} 1",
        "slurm_operator_slurmjobs_pending{cluster=\"<none>\",reason=\"Priority\"} 1",
        "slurm_operator_nodeset_nodes{cluster=\"main\",namespace=\"team\",nodeset=\"cpu\",state=\"draining\"} 1",
        "slurm_operator_nodeset_nodes{cluster=\"main\",namespace=\"team\",nodeset=\"gpu\",state=\"idle\"} 1",
        "slurm_operator_nodeset_replicas_desired{cluster=\"main\",namespace=\"team\",nodeset=\"cpu\"} 3",
        "slurm_operator_nodeset_drain_timeout_seconds{cluster=\"main\",namespace=\"team\",nodeset=\"cpu\"} 3600.0",
        "slurm_operator_nodeset_oldest_drain_start_timestamp_seconds{cluster=\"main\",namespace=\"team\",nodeset=\"cpu\"} 1767225600.0",
        "slurm_operator_leader 1",
    ];
    for line in expected {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    // The cluster without an API version has no info series; `gone` and `gpu` no drain series.
    assert_eq!(
        lines_with(&text, "slurm_operator_cluster_api_version_info").len(),
        1,
        "{text}"
    );
    assert_eq!(
        lines_with(
            &text,
            "slurm_operator_nodeset_oldest_drain_start_timestamp_seconds"
        )
        .len(),
        1,
        "{text}"
    );
    assert_eq!(
        lines_with(&text, "slurm_operator_nodeset_drain_timeout_seconds").len(),
        1,
        "{text}"
    );
    // No series for the job not yet submitted, nor one per reason's details.
    assert_eq!(
        lines_with(&text, "slurm_operator_slurmjobs_pending").len(),
        5,
        "{text}"
    );

    let no_drain_series = |text: &str| {
        assert!(
            lines_with(
                text,
                "slurm_operator_nodeset_oldest_drain_start_timestamp_seconds"
            )
            .is_empty(),
            "{text}"
        )
    };
    // The drain ended: its series goes.
    metrics.nodeset_draining_since("team", "cpu", None);
    let text = metrics.encode().unwrap();
    no_drain_series(&text);

    // A standby (another replica leads) exports no object series: its caches hold the same
    // objects, and a sum over both replicas would count them twice.
    metrics.nodeset_draining_since("team", "cpu", Some(Utc::now()));
    leading.send(false).unwrap();
    let text = metrics.encode().unwrap();
    assert!(
        text.lines().any(|l| l == "slurm_operator_leader 0"),
        "{text}"
    );
    for name in [
        "slurm_operator_cluster_up",
        "slurm_operator_cluster_api_version_info",
        "slurm_operator_slurmjobs",
        "slurm_operator_slurmjobs_pending",
        "slurm_operator_nodeset_nodes",
        "slurm_operator_nodeset_replicas_desired",
        "slurm_operator_nodeset_drain_timeout_seconds",
        "slurm_operator_nodeset_oldest_drain_start_timestamp_seconds",
    ] {
        assert!(lines_with(&text, name).is_empty(), "{name} in\n{text}");
    }
    // Losing the Lease forgets the drains reported: leading again, none is stale.
    metrics.forget_drains();
    leading.send(true).unwrap();
    let text = metrics.encode().unwrap();
    assert!(
        text.lines().any(|l| l == "slurm_operator_leader 1"),
        "{text}"
    );
    no_drain_series(&text);
    assert_eq!(
        lines_with(&text, "slurm_operator_nodeset_replicas_desired").len(),
        2,
        "{text}"
    );
}

#[test]
fn proc_stat_fields_are_counted_from_the_last_parenthesis() {
    // A command name with spaces and a parenthesis; fields as proc(5) numbers them.
    let stat = "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 7 0 \
                12345 104857600 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
    let stats = parse_stat(stat, 4096).unwrap();
    assert_eq!(
        stats,
        ProcessStats {
            cpu_seconds: 3.0,
            virtual_bytes: 104_857_600,
            resident_bytes: 2560 * 4096,
            threads: 7,
            start_after_boot: 123.45,
        }
    );
    assert_eq!(parse_stat("4242 (truncated) S 1 2", 4096), None);
    assert_eq!(
        parse_max_fds(
            "Limit  Soft Limit  Hard Limit  Units\nMax open files  1024  524288  files\n"
        ),
        Some(1024)
    );
    assert_eq!(
        parse_boot_time("cpu  1 2 3\nbtime 1767225600\n"),
        Some(1_767_225_600)
    );
    // Resident memory in KiB, whatever the page size.
    assert_eq!(
        parse_vm_rss("Name:\tslurm-operator\nVmHWM:\t   9000 kB\nVmRSS:\t   8192 kB\n"),
        Some(8192 * 1024)
    );
    assert_eq!(parse_vm_rss("Name:\tkthreadd\n"), None);
}

/// Durations are bucketed up to past `spec.listingTimeout`'s hour: a listing of minutes is
/// counted in a bucket of its own size, not in +Inf (where every quantile reads as the last
/// finite bound).
#[test]
fn duration_buckets_reach_past_the_longest_listing_timeout() {
    let metrics = Metrics::new();
    metrics.polled_cluster("c", "jobs", std::time::Duration::from_secs(109), true);
    let text = metrics.encode().unwrap();
    // (bound, count) of each finite bucket.
    let buckets: Vec<(f64, u64)> = text
        .lines()
        .filter(|l| l.starts_with("slurm_operator_poll_duration_seconds_bucket{"))
        .filter_map(|l| {
            let bound = l.split("le=\"").nth(1)?.split('"').next()?.parse().ok()?;
            let count = l.rsplit(' ').next()?.parse().ok()?;
            Some((bound, count))
        })
        .collect();
    let last = buckets.iter().map(|(bound, _)| *bound).fold(0.0, f64::max);
    assert!(last >= 3600.0, "{buckets:?}");
    // 109 s is counted in every bucket from 109 s up, and in none below.
    assert!(
        buckets
            .iter()
            .all(|(bound, count)| *count == u64::from(*bound >= 109.0)),
        "{buckets:?}"
    );
    assert!(
        buckets
            .iter()
            .any(|(bound, count)| *bound < 109.0 && *count == 0)
    );
}

#[cfg(target_os = "linux")]
#[test]
fn process_metrics_are_unprefixed_and_plausible() {
    let text = Metrics::new().encode().unwrap();
    let value = |name: &str| -> f64 {
        let line = lines_with(&text, name);
        assert_eq!(line.len(), 1, "{name} in\n{text}");
        line[0].rsplit(' ').next().unwrap().parse().unwrap()
    };
    // This test process has at least its main thread, some resident memory and open fds.
    assert!(value("process_resident_memory_bytes") > 0.0);
    assert!(value("process_threads") >= 1.0);
    assert!(value("process_open_fds") >= 1.0);
    assert!(value("process_max_fds") >= value("process_open_fds"));
    let started = value("process_start_time_seconds");
    #[allow(clippy::cast_precision_loss)]
    let now = Utc::now().timestamp() as f64;
    assert!(
        started > now - 86_400.0 * 365.0 && started <= now + 1.0,
        "{started} vs {now}"
    );
    assert!(
        text.contains("# TYPE process_cpu_seconds counter"),
        "{text}"
    );
    assert!(!text.contains("slurm_operator_process_"), "{text}");
}
