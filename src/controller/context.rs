//! What every reconcile gets: one cheap-to-clone `Context`, no globals. A controller with state
//! of its own (the SlurmJob controller's submissions) keeps it in its own context around this.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource};

use super::cached_writes::FinalizerWrites;
use super::kit::{Backoffs, EventRecorder};
use crate::crd::slurmjob::CachedSlurmJob;
use crate::crd::{FIELD_MANAGER, FINALIZER, SlurmCluster, SlurmNodeSet};
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::slurm::tag::TagKey;
use crate::state::events::EventHub;
use crate::state::index::ClusterState;
use crate::state::registry::ClusterRegistry;

/// The namespace SlurmCluster credentials are read from when nothing else is said: the one the
/// chart installs the operator into by default.
pub const DEFAULT_CREDENTIALS_NAMESPACE: &str = "slurm-operator";

/// How long a deleted SlurmJob waits for a Slurm cluster it cannot reach before its finalizer
/// goes without the cancel (a Warning names the jobs that may still run).
pub const DEFAULT_DELETION_DEADLINE: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Capacity of each poller's event channel; a consumer that falls this far behind one poller
/// resyncs the objects of that poller's SlurmClusters (and no others).
pub const EVENT_CHANNEL_CAPACITY: usize = 4096;

/// `run --refused-namespace-grace`'s default: how long a watched namespace that refuses the
/// operator may hold up what waits for its caches ([`RefusedNamespaces::past_grace`]).
pub const DEFAULT_REFUSED_NAMESPACE_GRACE: Duration = Duration::from_secs(30);

/// A SlurmCluster being deleted, as the SlurmJob controller's rule ([`HoldsCluster`]) reads it.
#[derive(Debug, Clone, Copy)]
pub struct DeletedCluster<'a> {
    pub name: &'a str,
    /// Its connection's index, when it has a client.
    pub index: Option<&'a ClusterState>,
    /// When its deletion began.
    pub deleted_at: Option<DateTime<Utc>>,
    pub now: DateTime<Utc>,
}

/// Which of a cache's SlurmJobs (`namespace/name`) still need the client of a SlurmCluster
/// being deleted: the SlurmJob controller's own rule, registered with its cache (the
/// controllers do not import one another). Linear in the cache and the cluster's index.
pub type HoldsCluster = fn(&[Arc<CachedSlurmJob>], &DeletedCluster<'_>, &Context) -> Vec<String>;

/// The SlurmJob controllers' caches (one per watched scope), for the SlurmCluster controller's
/// question "which SlurmJobs still use this cluster?": answered from memory, not with a list of
/// every SlurmJob in the Kubernetes cluster every few seconds. Each SlurmJob controller adds its
/// cache (and its rule) as it is built; `run` marks them listed once every cache had its first
/// list.
#[derive(Default)]
pub struct SlurmJobCaches {
    stores: RwLock<Vec<(Store<CachedSlurmJob>, HoldsCluster)>>,
    listed: AtomicBool,
}

impl SlurmJobCaches {
    pub fn add(&self, store: Store<CachedSlurmJob>, holds: HoldsCluster) {
        self.stores
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push((store, holds));
    }

    /// Every cache had its first list (kube's readiness, seen by `run`'s readiness check: a
    /// second waiter on a store's readiness could take the controller's own wake-up), or is of
    /// a namespace that has refused the operator past the grace, and counts as empty
    /// ([`RefusedNamespaces`]).
    pub fn mark_listed(&self) {
        self.listed.store(true, Ordering::Release);
    }

    /// The SlurmJobs (`namespace/name`) naming the SlurmCluster `cluster` whose status records a
    /// Slurm job that has not ended, by their own word (no index asked: the question is whether
    /// the cluster the index would come from is still theirs). `None` until every cache has had
    /// its first list.
    pub fn with_live_jobs(&self, cluster: &str) -> Option<Vec<String>> {
        self.each_listed(|jobs, _| {
            jobs.iter()
                .filter(|job| {
                    job.cluster_name() == cluster
                        && job.job_id().is_some()
                        && !job.phase().unwrap_or_default().is_terminal()
                })
                .map(|job| {
                    format!(
                        "{}/{}",
                        job.meta().namespace.as_deref().unwrap_or_default(),
                        job.meta().name.as_deref().unwrap_or_default()
                    )
                })
                .collect()
        })
    }

    /// The SlurmJobs (`namespace/name`) that still need `cluster`'s client; `None` until every
    /// cache has had its first list (a process without SlurmJob controllers has none).
    /// A namespace refused past the grace holds nothing: its cached SlurmJobs are what it was
    /// before the refusal, and the operator could not act on them anyway.
    pub fn holding(&self, cluster: &DeletedCluster<'_>, ctx: &Context) -> Option<Vec<String>> {
        let past_grace = ctx.refused.past_grace(SLURMJOBS);
        self.each_listed(|jobs, holding| {
            let refused = |job: &Arc<CachedSlurmJob>| {
                past_grace.contains(job.meta().namespace.as_deref().unwrap_or_default())
            };
            if !past_grace.is_empty() && jobs.iter().any(refused) {
                let served: Vec<_> = jobs.iter().filter(|job| !refused(job)).cloned().collect();
                holding(&served, cluster, ctx)
            } else {
                holding(jobs, cluster, ctx)
            }
        })
    }

    /// The uid under which a cache shows the SlurmJob `namespace/name` now, if one does.
    pub fn uid_of(&self, namespace: &str, name: &str) -> Option<String> {
        let key = ObjectRef::<CachedSlurmJob>::new(name).within(namespace);
        let stores = self.stores.read().unwrap_or_else(PoisonError::into_inner);
        stores
            .iter()
            .find_map(|(store, _)| store.get(&key))
            .and_then(|job| job.meta().uid.clone())
    }

    /// What `names` finds in each cache (with its controller's rule), together; `None` until
    /// every cache has had its first list.
    fn each_listed(
        &self,
        names: impl Fn(&[Arc<CachedSlurmJob>], HoldsCluster) -> Vec<String>,
    ) -> Option<Vec<String>> {
        let stores = self.stores.read().unwrap_or_else(PoisonError::into_inner);
        if !stores.is_empty() && !self.listed.load(Ordering::Acquire) {
            return None;
        }
        Some(
            stores
                .iter()
                .flat_map(|(store, holding)| names(&store.state(), *holding))
                .collect(),
        )
    }
}

/// The watched namespaces in which the API server refuses the operator's watches (403), and
/// since when. In a chart with `watchNamespaces` the operator's rights there are a Role and a
/// RoleBinding in that namespace, which its admin may delete: such a namespace must not hold up
/// the others, so `run` counts it as listed (empty) for readiness once it has been refused for
/// longer than a grace (`run --refused-namespace-grace`). Its SlurmJobs and SlurmNodeSets wait,
/// their watches retrying with backoff, until the rights are back.
pub struct RefusedNamespaces {
    /// By (namespace, kind of the watch).
    since: Mutex<BTreeMap<(String, &'static str), Instant>>,
    /// The (namespace, kind) whose watch has listed at least once: only these may be cleared
    /// by [`RefusedNamespaces::probe`]; one never listed is cleared by its first list, when
    /// its cache stops being empty.
    listed: Mutex<BTreeSet<(String, &'static str)>>,
    /// How many pairs `since` holds, read without its lock: every event of every watch clears,
    /// and almost always there is nothing to clear.
    marks: AtomicUsize,
    /// How long a pair must have been refused to count as empty ([`Self::past_grace`]).
    grace: Duration,
    metrics: Arc<Metrics>,
}

impl RefusedNamespaces {
    pub fn new(metrics: Arc<Metrics>, grace: Duration) -> Self {
        Self {
            since: Mutex::default(),
            listed: Mutex::default(),
            marks: AtomicUsize::new(0),
            grace,
            metrics,
        }
    }

    /// What the watch of `kind` in `namespace` brought: a 403 marks it refused (from the first
    /// one on), an object or a list it brings clears it. Nothing else says anything of rights:
    /// a 429 or a reset connection, nor a watch that resumes after a list without an event
    /// (hence [`RefusedNamespaces::probe`]).
    pub fn observe<K>(
        &self,
        namespace: &str,
        kind: &'static str,
        result: &watcher::Result<watcher::Event<K>>,
    ) {
        let refused = match result {
            Err(
                watcher::Error::InitialListFailed(kube::Error::Api(status))
                | watcher::Error::WatchStartFailed(kube::Error::Api(status))
                | watcher::Error::WatchFailed(kube::Error::Api(status))
                | watcher::Error::WatchError(status),
            ) if status.code == 403 => true,
            Err(_) => return,
            // Sent before the (re)list is asked: says nothing yet.
            Ok(watcher::Event::Init) => return,
            Ok(watcher::Event::InitDone) => {
                self.listed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert((namespace.to_owned(), kind));
                false
            }
            Ok(_) => false,
        };
        self.set(namespace, kind, refused);
    }

    /// Mark or clear `kind` in `namespace`; logs and the metric follow.
    pub fn set(&self, namespace: &str, kind: &'static str, refused: bool) {
        // Only this pair's own watch (one stream, in order) marks it, so a clear that reads no
        // marks cannot miss one of its own.
        if !refused && self.marks.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut since = self.since.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (namespace.to_owned(), kind);
        let changed = if refused {
            match since.entry(key) {
                std::collections::btree_map::Entry::Occupied(_) => false,
                std::collections::btree_map::Entry::Vacant(first) => {
                    first.insert(Instant::now());
                    true
                }
            }
        } else {
            since.remove(&key).is_some()
        };
        if changed {
            self.marks.store(since.len(), Ordering::Release);
            let still = since.keys().any(|(ns, _)| ns == namespace);
            drop(since);
            self.metrics.namespace_refused(namespace, still);
            if refused {
                tracing::warn!(
                    namespace,
                    kind,
                    "the API server refuses this namespace's {kind} to the operator (403): \
                     restore the operator's Role and RoleBinding there (helm upgrade)"
                );
            } else if !still {
                tracing::info!(namespace, "the API server serves this namespace again");
            }
        }
    }

    /// How long `kind` in `namespace` has been refused; `None` when it is not.
    pub fn refused_for(&self, namespace: &str, kind: &'static str) -> Option<Duration> {
        self.since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(namespace.to_owned(), kind))
            .map(Instant::elapsed)
    }

    /// The namespaces in which `kind` has been refused for the grace or longer: what the
    /// operator's cache shows of it counts as nothing, as at start (`run::startup`). Its cache
    /// keeps what it held before the refusal (a failed watch clears nothing), which the
    /// operator can neither update nor act on: a SlurmCluster's deletion must not wait for it.
    pub fn past_grace(&self, kind: &'static str) -> BTreeSet<String> {
        if self.marks.load(Ordering::Acquire) == 0 {
            return BTreeSet::new();
        }
        self.since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|((_, k), since)| *k == kind && since.elapsed() >= self.grace)
            .map(|((namespace, _), _)| namespace.clone())
            .collect()
    }

    /// The (namespace, kind) pairs refused now.
    pub fn marked(&self) -> Vec<(String, &'static str)> {
        self.since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    /// The namespaces refused now, each once.
    pub fn namespaces(&self) -> BTreeSet<String> {
        self.marked().into_iter().map(|(ns, _)| ns).collect()
    }

    /// `stream`, the watch of `kind` in `namespace`, telling these of its refusals (403) and
    /// of its lists. A watch of all namespaces tells nothing: its rights are the operator's
    /// ClusterRole, which no tenant can take away.
    pub fn reporting<K, S>(
        self: &Arc<Self>,
        stream: S,
        namespace: Option<&str>,
        kind: &'static str,
    ) -> impl futures::Stream<Item = watcher::Result<watcher::Event<K>>> + use<K, S>
    where
        S: futures::Stream<Item = watcher::Result<watcher::Event<K>>>,
    {
        use futures::StreamExt;
        let (refused, namespace) = (Arc::clone(self), namespace.map(str::to_owned));
        stream.inspect(move |result| {
            if let Some(namespace) = &namespace {
                refused.observe(namespace, kind, result);
            }
        })
    }

    /// Ask again whether each refused pair whose watch had listed before is still refused (a
    /// list of one object, and a watch from it that ends within a second), and clear the ones
    /// served: such a watch gets its rights back without an event to tell it
    /// ([`RefusedNamespaces::observe`]).
    pub async fn probe(&self, client: &kube::Client) {
        let listed = self
            .listed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for (namespace, kind) in self.marked() {
            if !listed.contains(&(namespace.clone(), kind)) {
                continue;
            }
            let served = match kind {
                SLURMJOBS => {
                    served(&Api::<CachedSlurmJob>::namespaced(
                        client.clone(),
                        &namespace,
                    ))
                    .await
                }
                SLURMNODESETS => {
                    served(&Api::<SlurmNodeSet>::namespaced(client.clone(), &namespace)).await
                }
                _ => continue,
            };
            if served {
                self.set(&namespace, kind, false);
            }
        }
    }
}

/// Whether `api` may be listed and watched (the watch is dropped as soon as it starts). Whole
/// objects, decoded as the caches decode them: a metadata list would decode `managedFields`,
/// which a tenant's SlurmJob can nest too deep to read (`crd::slurmjob::wire`), and the
/// namespace would stay refused after its rights came back.
async fn served<K>(api: &Api<K>) -> bool
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Ok(page) = api.list(&kube::api::ListParams::default().limit(1)).await else {
        return false;
    };
    let version = page.metadata.resource_version.unwrap_or_default();
    api.watch(&kube::api::WatchParams::default().timeout(1), &version)
        .await
        .is_ok()
}

/// The `kind` of the SlurmJob watch for [`RefusedNamespaces`].
pub const SLURMJOBS: &str = "slurmjobs";
/// The `kind` of the SlurmNodeSet watch for [`RefusedNamespaces`].
pub const SLURMNODESETS: &str = "slurmnodesets";

/// The SlurmNodeSet controllers' caches (one per watched scope), for the SlurmCluster
/// controller's question "which sets still need this cluster?": their drains and node removals
/// go through its client. Each SlurmNodeSet controller adds its cache as it is built; `run`
/// marks the SlurmJob caches listed only once these had their first list too.
#[derive(Default)]
pub struct NodeSetCaches {
    stores: RwLock<Vec<Store<SlurmNodeSet>>>,
    /// The SlurmClusters whose node list a set's round trusted in this process
    /// (`plan::SlurmView::had_view`) since it last gained the Lease. A few names; a deleted
    /// cluster's stays, so a cluster of that name made again starts failing closed.
    viewed: Mutex<BTreeSet<String>>,
}

impl NodeSetCaches {
    pub fn add(&self, store: Store<SlurmNodeSet>) {
        self.stores
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(store);
    }

    /// The SlurmNodeSets (`namespace/name`) behind the operator's finalizer that still need
    /// SlurmCluster `cluster`: those being deleted (each lets go by itself once drained, or
    /// when it cannot see or act on Slurm for the deletion deadline), and the live ones it
    /// admits (their namespace in `spec.nodeSetNamespaces`) that have or want pods. A set
    /// deleted after its SlurmCluster went would find no cluster and let go at once: garbage
    /// collection would then delete its slurmd pods undrained, ending their jobs. A live set
    /// the cluster does not admit, or one scaled to 0 with no pod left, has nothing to drain
    /// through it (and a set in a namespace not admitted could otherwise hold any cluster).
    /// Nor does one in a namespace refused past the grace (`refused`): its cache shows it as it
    /// was before the refusal, and the operator can act on it no more than on its SlurmJobs.
    pub fn holding(&self, cluster: &SlurmCluster, refused: &RefusedNamespaces) -> Vec<String> {
        let name = cluster.metadata.name.as_deref().unwrap_or_default();
        let admitted = |namespace: &str| {
            cluster
                .spec
                .node_set_namespaces
                .iter()
                .any(|n| n == namespace)
        };
        let refused = refused.past_grace(SLURMNODESETS);
        self.of_cluster(name)
            .into_iter()
            .filter(|set| {
                let namespace = set.metadata.namespace.as_deref().unwrap_or_default();
                let has_pods =
                    set.spec.replicas > 0 || set.status.as_ref().is_some_and(|s| s.replicas > 0);
                !refused.contains(namespace)
                    && set
                        .metadata
                        .finalizers
                        .as_ref()
                        .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
                    && (set.metadata.deletion_timestamp.is_some()
                        || (admitted(namespace) && has_pods))
            })
            .map(|set| {
                format!(
                    "{}/{}",
                    set.metadata.namespace.as_deref().unwrap_or_default(),
                    set.metadata.name.as_deref().unwrap_or_default()
                )
            })
            .collect()
    }

    /// The cached SlurmNodeSets that name SlurmCluster `cluster`, in every namespace watched.
    pub fn of_cluster(&self, cluster: &str) -> Vec<Arc<SlurmNodeSet>> {
        let stores = self.stores.read().unwrap_or_else(PoisonError::into_inner);
        stores
            .iter()
            .flat_map(|store| store.state())
            .filter(|set| set.spec.cluster_name == cluster)
            .collect()
    }

    /// A round trusted SlurmCluster `cluster`'s node list: remembered while `leadership` says
    /// this replica leads. Asked under the lock [`Self::forget_views`] takes, which runs after
    /// the Lease is seen lost: a round that trusted a view as the Lease went cannot mark it
    /// again after the forgetting.
    pub fn saw_nodes_of(&self, cluster: &str, leadership: &Leadership) {
        let mut viewed = self.viewed.lock().unwrap_or_else(PoisonError::into_inner);
        if leadership.is_leader() && !viewed.contains(cluster) {
            viewed.insert(cluster.to_owned());
        }
    }

    /// The Lease is lost: what this process saw of Slurm's nodes is as if never seen. Leading
    /// again is a start (the pods' busy labels stay as the other leader left them until a view),
    /// not an outage.
    pub fn forget_views(&self) {
        self.viewed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Whether a round of this process trusted SlurmCluster `cluster`'s node list.
    pub fn saw_nodes_before(&self, cluster: &str) -> bool {
        self.viewed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(cluster)
    }
}

#[derive(Clone)]
pub struct Context {
    pub client: kube::Client,
    pub recorder: EventRecorder,
    pub clusters: Arc<ClusterRegistry>,
    /// The pollers' event feeds, one per poller; controllers subscribe here.
    pub events: Arc<EventHub>,
    pub metrics: Arc<Metrics>,
    /// Per-object requeue delays after failed reconciles (all controllers).
    pub backoff: Arc<Backoffs>,
    /// When this process started: a submit waits for a cluster index synced after this.
    pub started_at: DateTime<Utc>,
    /// Whether this replica may write (always, without leader election).
    pub leadership: Leadership,
    /// When this replica began to act: its start, or its last gain of the leader Lease (the
    /// controllers set it as they reconcile everything on a gain). A blocked deletion's
    /// deadline counts from then at the earliest (`kit::release_at`).
    pub acting_since: Arc<Mutex<DateTime<Utc>>>,
    /// The one namespace SlurmClusters' Secrets and ConfigMaps are read from (the platform
    /// admin's): tenants can neither name nor plant credentials.
    pub credentials_namespace: String,
    /// The slurmrestd origins (`scheme://host:port`) a SlurmCluster may name; empty: any.
    pub allowed_endpoints: Vec<url::Url>,
    /// How long a deletion blocked on an unreachable Slurm cluster waits (`None`: for ever).
    pub deletion_deadline: Option<std::time::Duration>,
    /// The key the ownership tags of submitted jobs are signed with. `run` loads the shared one
    /// from the credentials namespace (`run::tag_key`); until then a random one of this
    /// process's own.
    pub tag_key: TagKey,
    /// The SlurmJob controller's debounce (`run --slurmjob-debounce`).
    pub slurmjob_debounce: std::time::Duration,
    /// Reconciles each controller runs at once (`run --reconcile-concurrency`).
    pub reconcile_concurrency: u16,
    /// The SlurmJob controllers' caches.
    pub slurmjobs: Arc<SlurmJobCaches>,
    /// The SlurmNodeSet controllers' caches.
    pub nodesets: Arc<NodeSetCaches>,
    /// The watched namespaces whose watches the API server refuses.
    pub refused: Arc<RefusedNamespaces>,
    /// Finalizer patches of this process (every kind's) the caches may not show yet.
    pub finalizer_writes: Arc<FinalizerWrites>,
    /// The cordoned Kubernetes nodes (`run` follows them; unknown until then).
    pub cordons: Arc<super::nodeset::cordons::Cordons>,
    /// Events about a namespace's objects put on SlurmClusters (the admin's namespace).
    pub cluster_events: Arc<super::kit::NamespaceBudget>,
}

impl Context {
    pub fn new(client: kube::Client, metrics: Arc<Metrics>) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let events = Arc::new(EventHub::new(EVENT_CHANNEL_CAPACITY));
        let now = Utc::now();
        let refused = Arc::new(RefusedNamespaces::new(
            metrics.clone(),
            DEFAULT_REFUSED_NAMESPACE_GRACE,
        ));
        Self {
            recorder: EventRecorder::new(client.clone(), reporter),
            client,
            clusters: Arc::new(ClusterRegistry::new(events.clone(), Some(metrics.clone()))),
            events,
            metrics,
            backoff: Arc::default(),
            started_at: now,
            leadership: Leadership::always(),
            acting_since: Arc::new(Mutex::new(now)),
            credentials_namespace: DEFAULT_CREDENTIALS_NAMESPACE.to_owned(),
            allowed_endpoints: Vec::new(),
            deletion_deadline: Some(DEFAULT_DELETION_DEADLINE),
            tag_key: TagKey::ephemeral(),
            slurmjob_debounce: super::slurmjob::DEBOUNCE,
            reconcile_concurrency: super::kit::MAX_CONCURRENT_RECONCILES,
            slurmjobs: Arc::default(),
            nodesets: Arc::default(),
            refused,
            finalizer_writes: Arc::default(),
            cordons: Arc::default(),
            cluster_events: Arc::default(),
        }
    }

    /// See [`Context::acting_since`].
    pub fn acting_since(&self) -> DateTime<Utc> {
        *self
            .acting_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// This replica lost the leader Lease: it lets go of its SlurmCluster connections, as a
    /// standby holds none (its pollers would go on with credentials, an endpoint and TLS
    /// settings it no longer follows), and forgets its drain gauges and its view of Slurm's
    /// nodes, which would be stale the moment it led again. Leading again reconciles every
    /// SlurmCluster, which registers them afresh. Returns how many registrations it dropped.
    pub fn lease_lost(&self) -> usize {
        self.metrics.forget_drains();
        self.nodesets.forget_views();
        let clusters = self.clusters.clusters();
        for cluster in &clusters {
            self.clusters.remove(cluster);
        }
        clusters.len()
    }

    /// This replica (again) acts from now: it just gained the leader Lease.
    pub fn act_from_now(&self) {
        *self
            .acting_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Utc::now();
    }
}
