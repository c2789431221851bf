//! Prometheus metrics. Labels are static and low-cardinality: controller names, poll kinds,
//! slurmrestd operation ids, error categories, and the names of the SlurmClusters and
//! SlurmNodeSets an admin created (a handful each) — never SlurmJob names or free text.
//!
//! Two kinds of metrics:
//! - events counted or timed as they happen (reconciles, polls, slurmrestd requests);
//! - gauges read at scrape time from the operator's object caches ([`ObjectSources`]): cluster
//!   up, API version, SlurmJobs by phase, pending jobs by reason, nodes by state per NodeSet,
//!   leader. Read at scrape time, they need no bookkeeping when an object goes away, and they
//!   say what the statuses say (the same numbers `kubectl get` shows). Only the replica that
//!   leads exports them (a standby exports `leader 0`), so sums over replicas count each
//!   object once.
//!
//! Plus the standard `process_*` metrics (Linux, from /proc), unprefixed as Prometheus client
//! libraries export them, so stock dashboards find them.
//!
//! The full list with meanings: docs/metrics.md.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::crd::condition;
use crate::crd::slurmjob::CachedSlurmJob;
use crate::crd::{SlurmCluster, SlurmNodeSet};
use crate::leader::Leadership;
use crate::slurm::RequestObserver;

/// Prefix of every operator metric (the `process_*` ones excepted).
pub const PREFIX: &str = "slurm_operator";

/// The `cluster` label of SlurmJobs whose `clusterName` names no SlurmCluster (kubectl's word
/// for a missing value; no object name has angle brackets).
pub const NO_CLUSTER: &str = "<none>";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    controller: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PollLabels {
    cluster: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    cluster: String,
    operation: &'static str,
    /// "2xx", "4xx", "5xx", or "error" when no response came back.
    code: &'static str,
}

/// All metrics of the process, registered once.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerLabel, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_duration: Family<ControllerLabel, Histogram>,
    poll_duration: Family<PollLabels, Histogram>,
    poll_errors: Family<PollLabels, Counter>,
    requests: Family<RequestLabels, Histogram>,
    pollers: Gauge,
    unreadable: Family<ClusterLabel, Gauge>,
    refused: Family<NamespaceLabel, Gauge>,
    deferred: Family<ControllerLabel, Counter>,
    objects: Arc<ObjectGauges>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Buckets of every duration here: 1 ms to ~70 min by doubling. A full job listing of a large
/// queue takes minutes (docs/benchmarks.md: up to 109 s at 100 000 jobs) and
/// `spec.listingTimeout` allows an hour: a last bucket below that would make every quantile
/// past it read as the bucket's bound.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, LATENCY_BUCKETS))
}

/// How many finite buckets [`latency_histogram`] has; its last bound is 0.001 * 2^(n-1) s.
const LATENCY_BUCKETS: u16 = 23;

impl Default for Metrics {
    fn default() -> Self {
        // The root registry holds the process metrics, which by convention carry no prefix;
        // everything of the operator's own lives in the prefixed sub-registry.
        let mut root = Registry::default();
        root.register_collector(Box::new(ProcessCollector));
        let objects = Arc::new(ObjectGauges::default());
        let registry = root.sub_registry_with_prefix(PREFIX);
        registry.register_collector(Box::new(Arc::clone(&objects)));
        let reconciles = Family::<ControllerLabel, Counter>::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        let reconcile_duration = Family::<ControllerLabel, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let poll_duration = Family::<PollLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let poll_errors = Family::<PollLabels, Counter>::default();
        let requests = Family::<RequestLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register(
            "reconciles",
            "Reconciles run, by controller",
            Listed(reconciles.clone()),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by controller and error category",
            Listed(reconcile_errors.clone()),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile duration, by controller",
            Listed(reconcile_duration.clone()),
        );
        registry.register(
            "poll_duration_seconds",
            "Duration of one Slurm poll, by SlurmCluster and kind (jobs, nodes, job_listing)",
            Listed(poll_duration.clone()),
        );
        registry.register(
            "poll_errors",
            "Slurm polls that failed, by SlurmCluster and kind",
            Listed(poll_errors.clone()),
        );
        registry.register(
            "slurmrestd_request_duration_seconds",
            "slurmrestd request latency, by SlurmCluster, operation and status class",
            Listed(requests.clone()),
        );
        let pollers = Gauge::default();
        registry.register(
            "pollers",
            "Slurm pollers running: one per slurmrestd and credentials, however many SlurmClusters share it",
            pollers.clone(),
        );
        let unreadable = Family::<ClusterLabel, Gauge>::default();
        registry.register(
            "unreadable_job_records",
            "Jobs whose record slurmrestd answered but the poller cannot read (too large, not decodable), by SlurmCluster",
            Listed(unreadable.clone()),
        );
        let refused = Family::<NamespaceLabel, Gauge>::default();
        registry.register(
            "namespace_refused",
            "1 while the API server refuses the operator's watches in a watched namespace (403: its Role there is gone), by namespace",
            Listed(refused.clone()),
        );
        let deferred = Family::<ControllerLabel, Counter>::default();
        registry.register(
            "reconciles_deferred",
            "Reconciles requeued because their Slurm cluster had no free request slot, by controller",
            Listed(deferred.clone()),
        );
        Self {
            registry: root,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            poll_duration,
            poll_errors,
            requests,
            pollers,
            unreadable,
            refused,
            deferred,
            objects,
        }
    }
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn reconciled(&self, controller: &'static str, elapsed: Duration) {
        self.reconciles
            .get_or_create(&ControllerLabel { controller })
            .inc();
        self.reconcile_duration
            .get_or_create(&ControllerLabel { controller })
            .observe(elapsed.as_secs_f64());
    }

    pub fn reconcile_failed(&self, controller: &'static str, reason: &'static str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels { controller, reason })
            .inc();
    }

    /// One poll of `kind` by the poller of SlurmCluster `cluster` (a poller shared by several
    /// SlurmClusters reports under the one that started it).
    pub fn polled_cluster(&self, cluster: &str, kind: &'static str, elapsed: Duration, ok: bool) {
        let labels = PollLabels {
            cluster: cluster.to_owned(),
            kind,
        };
        self.poll_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        if !ok {
            self.poll_errors.get_or_create(&labels).inc();
        }
    }

    /// How many job records the poller of SlurmCluster `cluster` cannot read (`None`: the poller
    /// stopped, and its series goes).
    pub fn unreadable_job_records(&self, cluster: &str, count: Option<usize>) {
        let labels = ClusterLabel {
            cluster: cluster.to_owned(),
        };
        match count {
            Some(count) => {
                self.unreadable
                    .get_or_create(&labels)
                    .set(i64::try_from(count).unwrap_or(i64::MAX));
            }
            None => {
                self.unreadable.remove(&labels);
            }
        }
    }

    /// Whether the API server refuses the operator's watches in `namespace` (`false`: its
    /// series goes).
    pub fn namespace_refused(&self, namespace: &str, refused: bool) {
        let labels = NamespaceLabel {
            namespace: namespace.to_owned(),
        };
        if refused {
            self.refused.get_or_create(&labels).set(1);
        } else {
            self.refused.remove(&labels);
        }
    }

    /// The request observer for the slurmrestd client of SlurmCluster `cluster`: its requests
    /// are timed with `cluster` as a label. (`Metrics` itself observes with `cluster=""`.)
    pub fn requests_of(self: &Arc<Self>, cluster: &str) -> Arc<dyn RequestObserver> {
        Arc::new(ClusterRequests {
            metrics: Arc::clone(self),
            cluster: cluster.to_owned(),
        })
    }

    fn request(
        &self,
        cluster: &str,
        operation: &'static str,
        status: Option<u16>,
        elapsed: Duration,
    ) {
        let code = match status {
            Some(200..=299) => "2xx",
            Some(300..=399) => "3xx",
            Some(400..=499) => "4xx",
            Some(_) => "5xx",
            None => "error",
        };
        self.requests
            .get_or_create(&RequestLabels {
                cluster: cluster.to_owned(),
                operation,
                code,
            })
            .observe(elapsed.as_secs_f64());
    }

    /// How many pollers run now.
    pub fn set_pollers(&self, count: usize) {
        self.pollers.set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// A reconcile of `controller` found its cluster's request slots all taken.
    pub fn deferred(&self, controller: &'static str) {
        self.deferred
            .get_or_create(&ControllerLabel { controller })
            .inc();
    }

    /// From now on the object gauges read these caches (`run` calls this once its controllers
    /// have their stores). Before, they export no series, only their descriptions.
    pub fn watch_objects(&self, sources: ObjectSources) {
        let mut current = self
            .objects
            .sources
            .write()
            .unwrap_or_else(|p| p.into_inner());
        *current = Some(sources);
    }

    /// The SlurmNodeSet `namespace/name`'s oldest drain in progress started at `started`
    /// (`None`: no node drains). The NodeSet controller reports it each reconcile; pods are not
    /// cached, so this is the one object gauge not read at scrape time.
    pub fn nodeset_draining_since(
        &self,
        namespace: &str,
        name: &str,
        started: Option<DateTime<Utc>>,
    ) {
        let mut drains = self
            .objects
            .drains
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let key = (namespace.to_owned(), name.to_owned());
        match started {
            Some(started) => drains.insert(key, started),
            None => drains.remove(&key),
        };
    }

    /// Forget every drain reported: this replica no longer leads, and the leader's reconciles
    /// report them from now on (leading again, its own reconciles report them anew).
    pub fn forget_drains(&self) {
        self.objects
            .drains
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// How many SlurmNodeSets have a drain reported.
    #[cfg(test)]
    pub fn nodesets_draining(&self) -> usize {
        self.objects
            .drains
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// The text exposition format for `/metrics`.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

impl RequestObserver for Metrics {
    fn observe(&self, operation: &'static str, status: Option<u16>, elapsed: Duration) {
        self.request("", operation, status, elapsed);
    }
}

/// Times the requests of one SlurmCluster's client ([`Metrics::requests_of`]).
struct ClusterRequests {
    metrics: Arc<Metrics>,
    cluster: String,
}

impl RequestObserver for ClusterRequests {
    fn observe(&self, operation: &'static str, status: Option<u16>, elapsed: Duration) {
        self.metrics
            .request(&self.cluster, operation, status, elapsed);
    }
}

/// The caches the object gauges are read from at scrape time.
#[derive(Clone)]
pub struct ObjectSources {
    pub clusters: Store<SlurmCluster>,
    /// One store per watched namespace (or one for all).
    pub slurmjobs: Vec<Store<CachedSlurmJob>>,
    pub nodesets: Vec<Store<SlurmNodeSet>>,
    pub leadership: Leadership,
}

#[derive(Default)]
struct ObjectGauges {
    sources: RwLock<Option<ObjectSources>>,
    /// (namespace, name) of a SlurmNodeSet → start of its oldest drain in progress.
    drains: Mutex<BTreeMap<(String, String), DateTime<Utc>>>,
}

impl std::fmt::Debug for ObjectGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectGauges").finish_non_exhaustive()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabel {
    cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespaceLabel {
    namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    cluster: String,
    version: String,
    slurm_release: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    cluster: String,
    namespace: String,
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    cluster: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeSetLabels {
    cluster: String,
    namespace: String,
    nodeset: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeStateLabels {
    cluster: String,
    namespace: String,
    nodeset: String,
    state: &'static str,
}

/// A family whose description is exported before its first series: the registry leaves out
/// empty families, and then neither Prometheus' metadata nor tests/dashboards.rs would see a
/// metric until it first happened (a poll error, say).
#[derive(Debug)]
struct Listed<M>(M);

impl<M: EncodeMetric> EncodeMetric for Listed<M> {
    fn encode(
        &self,
        encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        self.0.metric_type()
    }
}

/// Encodes `family` under `name` (after the registry's prefix).
fn emit<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: &M,
) -> Result<(), std::fmt::Error> {
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

impl Collector for ObjectGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let up = Family::<ClusterLabel, Gauge>::default();
        let versions = Family::<VersionLabels, Gauge>::default();
        let phases = Family::<PhaseLabels, Gauge>::default();
        let pending = Family::<ReasonLabels, Gauge>::default();
        let nodes = Family::<NodeStateLabels, Gauge>::default();
        let replicas = Family::<NodeSetLabels, Gauge>::default();
        let drain_timeout =
            Family::<NodeSetLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        let drain_start =
            Family::<NodeSetLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        let leader = Gauge::<i64>::default();

        // Copy the sources out: no lock is held while the caches are walked.
        let sources = self
            .sources
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // Only the leader exports what the caches say: every replica's caches hold the same
        // objects, and sums over replicas (the autoscaling queries) would count them twice.
        if let Some(sources) = sources.as_ref().filter(|s| s.leadership.is_leader()) {
            leader.set(1);
            for cluster in sources.clusters.state() {
                let name = cluster.name_any();
                let status = cluster.status.as_ref();
                let ready = status.is_some_and(|s| condition::is_true(&s.conditions, "Ready"));
                up.get_or_create(&ClusterLabel {
                    cluster: name.clone(),
                })
                .set(i64::from(ready));
                if let Some(version) = status.and_then(|s| s.api_version.clone()) {
                    versions
                        .get_or_create(&VersionLabels {
                            cluster: name,
                            version,
                            slurm_release: status
                                .and_then(|s| s.slurm_release.clone())
                                .unwrap_or_default(),
                        })
                        .set(1);
                }
            }
            // A tenant writes `clusterName`: only a SlurmCluster's name becomes a label value,
            // so that made-up names cannot add a series each.
            let known: std::collections::BTreeSet<String> = sources
                .clusters
                .state()
                .iter()
                .map(|c| c.name_any())
                .collect();
            let cluster_label = |name: &str| {
                if known.contains(name) {
                    name.to_owned()
                } else {
                    NO_CLUSTER.to_owned()
                }
            };
            for job in sources.slurmjobs.iter().flat_map(Store::state) {
                let phase = job.phase().unwrap_or_default();
                phases
                    .get_or_create(&PhaseLabels {
                        cluster: cluster_label(job.cluster_name()),
                        namespace: job.namespace().unwrap_or_default(),
                        phase: phase.as_str(),
                    })
                    .inc();
                // Waiting in Slurm is `Submitted` (`Pending` is not submitted yet).
                if phase == crate::crd::slurmjob::Phase::Submitted
                    && let Some(reason) = job.state_reason()
                {
                    pending
                        .get_or_create(&ReasonLabels {
                            cluster: cluster_label(job.cluster_name()),
                            reason: pending_reason(reason).to_owned(),
                        })
                        .inc();
                }
            }
            let drains = self
                .drains
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            for set in sources.nodesets.iter().flat_map(Store::state) {
                let labels = NodeSetLabels {
                    cluster: set.spec.cluster_name.clone(),
                    namespace: set.namespace().unwrap_or_default(),
                    nodeset: set.name_any(),
                };
                replicas
                    .get_or_create(&labels)
                    .set(i64::from(set.spec.replicas));
                if let Some(counts) = set.status.as_ref().and_then(|s| s.slurm.as_ref()) {
                    for (state, count) in [
                        ("idle", counts.idle),
                        ("allocated", counts.allocated),
                        ("mixed", counts.mixed),
                        ("draining", counts.draining),
                        ("drained", counts.drained),
                        ("down", counts.down),
                    ] {
                        nodes
                            .get_or_create(&NodeStateLabels {
                                cluster: labels.cluster.clone(),
                                namespace: labels.namespace.clone(),
                                nodeset: labels.nodeset.clone(),
                                state,
                            })
                            .set(i64::from(count));
                    }
                }
                if let Some(timeout) = set
                    .spec
                    .scale_in
                    .as_ref()
                    .and_then(|s| s.drain_timeout.as_ref())
                {
                    drain_timeout
                        .get_or_create(&labels)
                        .set(timeout.as_std().as_secs_f64());
                }
                // Reported drains of SlurmNodeSets since deleted are simply not exported.
                if let Some(started) =
                    drains.get(&(labels.namespace.clone(), labels.nodeset.clone()))
                {
                    #[allow(clippy::cast_precision_loss)] // seconds since 1970 fit in f64's 52 bits
                    let at = started.timestamp_millis() as f64 / 1000.0;
                    drain_start.get_or_create(&labels).set(at);
                }
            }
        }

        emit(
            &mut encoder,
            "cluster_up",
            "Whether a SlurmCluster is Ready (slurmrestd answers and accepts the credentials): 1 or 0",
            &up,
        )?;
        emit(
            &mut encoder,
            "cluster_api_version_info",
            "The slurmrestd API version a SlurmCluster is used through, and its Slurm release (always 1)",
            &versions,
        )?;
        emit(
            &mut encoder,
            "slurmjobs",
            "SlurmJobs by SlurmCluster, namespace and phase",
            &phases,
        )?;
        emit(
            &mut encoder,
            "slurmjobs_pending",
            "SlurmJobs pending in Slurm, by SlurmCluster and Slurm's pending reason",
            &pending,
        )?;
        emit(
            &mut encoder,
            "nodeset_nodes",
            "Slurm nodes of a SlurmNodeSet by Slurm state (as in its status)",
            &nodes,
        )?;
        emit(
            &mut encoder,
            "nodeset_replicas_desired",
            "spec.replicas of a SlurmNodeSet",
            &replicas,
        )?;
        emit(
            &mut encoder,
            "nodeset_drain_timeout_seconds",
            "scaleIn.drainTimeout of a SlurmNodeSet, where set",
            &drain_timeout,
        )?;
        emit(
            &mut encoder,
            "nodeset_oldest_drain_start_timestamp_seconds",
            "When the oldest drain in progress of a SlurmNodeSet's nodes began (Unix time), while one is",
            &drain_start,
        )?;
        emit(
            &mut encoder,
            "leader",
            "Whether this replica writes: 1 while it holds the leader Lease (always, without leader election) and its controllers run, else 0",
            &leader,
        )?;
        Ok(())
    }
}

/// The `process_*` metrics of Prometheus' client libraries, from /proc/self.
#[derive(Debug)]
struct ProcessCollector;

/// Linux reports process times in USER_HZ, which is 100 on every architecture it runs on
/// (the kernel converts its internal HZ for /proc).
const USER_HZ: f64 = 100.0;

#[derive(Debug, Default, PartialEq)]
struct ProcessStats {
    cpu_seconds: f64,
    virtual_bytes: u64,
    resident_bytes: u64,
    threads: i64,
    /// Seconds after boot the process started.
    start_after_boot: f64,
}

/// Parses /proc/self/stat (proc(5)); the command name may hold spaces and parentheses, so the
/// fields are counted from the last `)`.
fn parse_stat(stat: &str, page_size: u64) -> Option<ProcessStats> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): field n is fields[n - 3].
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    #[allow(clippy::cast_precision_loss)] // clock ticks of one process fit in f64
    let ticks = |n: usize| field(n).map(|t| t as f64 / USER_HZ);
    Some(ProcessStats {
        cpu_seconds: ticks(14)? + ticks(15)?,
        threads: i64::try_from(field(20)?).ok()?,
        start_after_boot: ticks(22)?,
        virtual_bytes: field(23)?,
        resident_bytes: field(24)?.saturating_mul(page_size),
    })
}

/// Resident memory in bytes from /proc/self/status (`VmRSS:    1234 kB`).
fn parse_vm_rss(status: &str) -> Option<u64> {
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// `Max open files` (soft limit) from /proc/self/limits.
fn parse_max_fds(limits: &str) -> Option<u64> {
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))?
        .trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `btime` (boot time, Unix seconds) from /proc/stat.
fn parse_boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // Not Linux, or /proc unreadable: no process metrics rather than made-up ones.
        let Some(mut stats) = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| parse_stat(&s, 4096))
        else {
            return Ok(());
        };
        // /proc/self/stat counts resident memory in pages, whose size the kernel chose (64 KiB
        // on some arm64 kernels); /proc/self/status says it in KiB.
        if let Some(resident) = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| parse_vm_rss(&s))
        {
            stats.resident_bytes = resident;
        }
        emit(
            &mut encoder,
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            &ConstCounter::new(stats.cpu_seconds),
        )?;
        emit(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            &ConstGauge::new(i64::try_from(stats.resident_bytes).unwrap_or(i64::MAX)),
        )?;
        emit(
            &mut encoder,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            &ConstGauge::new(i64::try_from(stats.virtual_bytes).unwrap_or(i64::MAX)),
        )?;
        emit(
            &mut encoder,
            "process_threads",
            "Number of OS threads in the process",
            &ConstGauge::new(stats.threads),
        )?;
        if let Some(boot) = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| parse_boot_time(&s))
        {
            #[allow(clippy::cast_precision_loss)] // seconds since 1970 fit in f64's 52 bits
            let started = boot as f64 + stats.start_after_boot;
            emit(
                &mut encoder,
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                &ConstGauge::new(started),
            )?;
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            let open = i64::try_from(fds.count()).unwrap_or(i64::MAX);
            emit(
                &mut encoder,
                "process_open_fds",
                "Number of open file descriptors",
                &ConstGauge::new(open),
            )?;
        }
        if let Some(max) = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|s| parse_max_fds(&s))
        {
            emit(
                &mut encoder,
                "process_max_fds",
                "Maximum number of open file descriptors",
                &ConstGauge::new(i64::try_from(max).unwrap_or(i64::MAX)),
            )?;
        }
        Ok(())
    }
}

/// The `reason` label of a pending SlurmJob: Slurm's reason code without its details
/// ("ReqNodeNotAvail, UnavailableNodes:n[1-3]" → "ReqNodeNotAvail"), one of a fixed set in Slurm;
/// anything else (the operator's own sentences, which name job ids) is `Other`, so that the
/// series stay few.
fn pending_reason(reason: &str) -> &str {
    let code = crate::slurm::reason::code(reason);
    let is_code = code.len() <= 64
        && code.starts_with(|c: char| c.is_ascii_alphabetic())
        && code.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if is_code { code } else { "Other" }
}

#[cfg(test)]
mod tests;
