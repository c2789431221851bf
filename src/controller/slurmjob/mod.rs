//! The SlurmJob controller: submits each SlurmJob to the Slurm cluster its `clusterName` names,
//! mirrors the job's life into the status, cancels it on delete, re-runs it after an edit of a
//! finished job, and streams its output through a Pod.
//!
//! A thin driver over pure decisions, with the Slurm side effects in one place:
//!
//! 1. behind the `slurm.rs/cleanup` finalizer (a new SlurmJob's reconcile adds it and goes on
//!    with the patch's answer, the whole object: no wait for the watch, no read of the spec),
//!    find the SlurmCluster's client and index in the registry (none yet → a
//!    `Ready=Unknown/ClusterNotReady` status and a backoff requeue; a finished job keeps its
//!    status and waits for the SlurmCluster's first poll);
//! 2. [`act::step_loading`]: [`lifecycle::decide`], then [`plan::submit`] (submit once,
//!    crash-safe: see `plan`) or [`plan::follow`] (mirror the index's records of the job; a job
//!    gone from a synced index is `Lost`), performing what they return. The cache holds each
//!    SlurmJob compactly and without its script ([`CachedSlurmJob`]): a reconcile decodes its one
//!    SlurmJob, and a submit first reads the whole spec ([`load_spec`]). A reconcile that finds
//!    the cache behind this process's own status write ([`StatusWrites`]) waits for it instead
//!    of writing it again;
//! 3. server-side apply of the status when it changed (the job id is written right after a
//!    submit), then the Events of the transition (`notice::transitions`);
//! 4. with `spec.output`, the streamer Pod for the current job id (`output::pod`), re-created
//!    for a re-run.
//!
//! Deletion ([`plan::cleanup`]) cancels every unfinished job of the SlurmJob (status, this
//! process's submissions, the index by tag), each only once its signed tag shows it is the
//! SlurmJob's own (`act::cancel_owned`; else a `NotOwned` Warning and no cancel); "already
//! finished" and "unknown" count as done. A settled SlurmJob lets go at once, needing nothing
//! from Slurm. A SlurmCluster that cannot be reached keeps the finalizer with a
//! `DeletionBlocked` condition and a Warning Event saying what it waits for, until the deletion
//! deadline (`--deletion-deadline`); then, or at once with the `slurm.rs/skip-cancel`
//! annotation or when the SlurmCluster no longer exists, the finalizer goes with a Warning
//! Event naming the Slurm jobs that may still run (also on the SlurmCluster: a namespace being
//! deleted refuses new Events).
//!
//! A step or cancel that may call slurmrestd first takes one of its cluster's request slots
//! (`ClusterHandle::try_io`); when all are taken it requeues (`Backoffs::next_busy`) instead
//! of waiting in one of the controller's reconcile slots, and the first slot that frees with
//! nobody queued for it reconciles it again (`JobContext::wake`, `state::slots`).
//!
//! Triggers: the SlurmJob (generation and finalizer changes; our status writes do not
//! re-trigger), its streamer Pod, and the pollers' events: `JobChanged`/`JobGone` carry the
//! job's tag (`slurm.rs/uid=…`), mapped to the SlurmJob by uid; `HealthChanged{up}` reconciles
//! every SlurmJob of that SlurmCluster; a freed request slot, for a SlurmJob that found none;
//! and a change of a SlurmJob that others wait for through `dependsOn` ([`dependents`]).

pub mod access;
pub mod act;
pub mod dependents;
pub mod edit;
pub mod ended;
pub mod lifecycle;
pub mod notice;
pub mod output;
pub mod phase;
pub mod plan;
pub mod status;
pub mod submissions;
pub mod submit;
pub mod usage;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use self::act::{Env, Step, Target};
use self::dependents::Dependents;
use self::plan::{Blocker, CleanupFacts, CleanupPlan, Orphaned, Reach};
use self::submissions::{Outcome, Remembered, StatusWrites, Submissions, TakenOn, Told};
use super::kit::{self, Backoffs, Notice, Spend, UidIndex};
use super::{Context, DeletedCluster};
use crate::controller::kit::TouchedAfterRelist as _;
use crate::crd::condition;
use crate::crd::pod_meta::PodMetaPhase;
use crate::crd::slurmjob::{CachedSlurmJob, SlurmJobSpec, SlurmJobStatus, WholeSlurmJob};
use crate::crd::{FINALIZER, SKIP_CANCEL_ANNOTATION, SlurmCluster, SlurmJob, is_object_name};
use crate::error_chain::Chain;
use crate::slurm::SlurmError;
use crate::slurm::tag::{OwnerTag, TagKey};
use crate::state::index::{ClusterState, SlurmEvent};
use crate::state::registry::ClusterHandle;
use crate::state::slots::{RequestSlots, SearchSlots};

/// The controller's name in metrics and logs.
pub const CONTROLLER: &str = "slurmjob";

/// How long a step that calls slurmrestd waits for one of its cluster's request slots before it
/// requeues instead (a burst of submits takes turns; a cluster whose requests hang keeps each
/// reconcile this long at most).
pub const IO_WAIT: Duration = Duration::from_millis(100);

/// How long the controller lets further changes of a SlurmJob come in before it reconciles it
/// (`run --slurmjob-debounce`). None by default: measured with `hack/bench.sh` (bench burst), a
/// debounce of 200 ms or 50 ms made a burst of 200 SlurmJobs wait twice as long for their
/// submits (0.77 and 0.75 s after the last was created, against 0.33 s) and the status latency
/// longer, and saved nothing: our own status writes do not trigger ([`reacts_to`]), and
/// kube's scheduler never runs two reconciles of one object at once.
pub const DEBOUNCE: Duration = Duration::ZERO;

/// An unfinished job is looked at again this often even without Slurm events (safety net).
pub const RESYNC: Duration = Duration::from_secs(300);
pub use super::cached_writes::CACHE_LAG_RETRY;

/// SlurmJobs per page of the cache's lists. An object can be ~1.5 MiB (etcd's limit), and a
/// page's JSON is read whole before its objects are decoded (each at once trimmed): 25 of
/// them are under 80 MiB, where kube's default 500 were up to 1.5 GiB. 10 000 SlurmJobs take 400
/// pages.
pub const LIST_PAGE: u32 = 25;

/// Event `action` for everything this controller reports.
const EVENT_ACTION: &str = "RunJob";
/// The topics of [`Told`]: a SlurmJob's submit, and its output Pod.
const TOLD_SUBMIT: &str = "submit";
const TOLD_OUTPUT_POD: &str = "outputPod";
/// The reason of the Warning that a Pod of the SlurmJob's name is not its output streamer.
const OUTPUT_POD_NAME_TAKEN: &str = "OutputPodNameTaken";

/// Condition on a deleted SlurmJob whose Slurm jobs cannot be cancelled yet: what it waits for,
/// and until when.
pub const DELETION_BLOCKED: &str = "DeletionBlocked";

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the SlurmJob has no {0}")]
    MissingMetadata(&'static str),
    #[error("SlurmCluster {0:?} is not connected (yet): no slurmrestd client is registered for it")]
    ClusterNotReady(String),
    #[error("every request slot of SlurmCluster {0:?}'s slurmrestd connection is taken")]
    ClusterBusy(String),
    /// Another SlurmJob of the namespace searches accounting by job name on the connection
    /// (`registry::SEARCHES_PER_NAMESPACE`), or as many of any namespace as the connection
    /// allows (`registry::SEARCHES_PER_CONNECTION`): not a failure, and not the cluster's.
    #[error(
        "other SlurmJobs (of this namespace, or as many of any as the connection allows) are \
         searching SlurmCluster {0:?}'s accounting by job name"
    )]
    SearchBusy(String),
    /// The namespace is not in the operator's cache yet (just created, or the cache still
    /// fills): its labels, which an access entry's selector reads, are unknown. Its arrival
    /// reconciles its SlurmJobs.
    #[error(
        "namespace {0:?} is not in the operator's namespace cache yet: its labels, which \
         spec.access namespaceSelectors read, are unknown"
    )]
    NamespaceNotCached(String),
    /// The Lease was lost during the reconcile (a frozen replica woke up): the status it
    /// computed is stale and is not written; the new leader writes.
    #[error("this replica no longer holds the leader Lease: status not written")]
    NotLeader,
    /// The SlurmJob was deleted and another made under its name while this reconcile ran
    /// (its finalizer removed by hand): the status computed for the first is not written.
    #[error(
        "the SlurmJob was re-created under its name (uid {now}) while this reconcile of uid \
         {was} ran: status not written"
    )]
    Replaced { was: String, now: String },
    #[error("submitting the job failed; its outcome is resolved through its tag next time")]
    Submit(#[source] SlurmError),
    #[error("cancelling Slurm job {job_id} failed")]
    Cancel {
        job_id: u32,
        #[source]
        source: SlurmError,
    },
    #[error("cannot read SlurmCluster {name:?}")]
    GetCluster {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// A cached SlurmJob is encoded by this process: a bug, never the object's fault.
    #[error("cannot decode the cached SlurmJob")]
    Cache(#[source] crate::crd::slurmjob::CacheError),
    #[error("cannot read the SlurmJob's whole spec (with its script) to submit it")]
    LoadSpec(#[source] kube::Error),
    #[error("cannot read the SlurmJob (it has more finalizers than the cache keeps)")]
    ReadSlurmJob(#[source] kube::Error),
    #[error("cannot apply the SlurmJob's status")]
    PatchStatus(#[source] kube::Error),
    #[error("cannot read, create or replace the output Pod")]
    OutputPod(#[source] kube::Error),
    #[error("cannot add the finalizer")]
    AddFinalizer(#[source] kube::Error),
    #[error("cannot remove the finalizer")]
    RemoveFinalizer(#[source] kube::Error),
    /// Not a fault of the reconcile: the deletion waits (an error keeps the finalizer).
    #[error("the deletion waits ({reason}); back in {retry:?}")]
    DeletionBlocked {
        reason: &'static str,
        retry: Duration,
    },
}

impl Error {
    /// Stable PascalCase category: metric label and Event reason.
    pub fn category(&self) -> &'static str {
        match self {
            Self::MissingMetadata(_) => "MissingMetadata",
            Self::ClusterNotReady(_) => "ClusterNotReady",
            Self::ClusterBusy(_) => "ClusterBusy",
            Self::SearchBusy(_) => "SearchBusy",
            Self::NamespaceNotCached(_) => "NamespaceNotCached",
            Self::NotLeader => "NotLeader",
            Self::Replaced { .. } => "Replaced",
            Self::Submit(_) => "SubmitFailed",
            Self::Cancel { .. } => "CancelFailed",
            Self::GetCluster { .. } => "GetClusterFailed",
            Self::Cache(_) => "CacheDecodeFailed",
            Self::LoadSpec(_) => "LoadSpecFailed",
            Self::ReadSlurmJob(_) => "ReadSlurmJobFailed",
            Self::PatchStatus(_) => "PatchStatusFailed",
            Self::OutputPod(_) => "OutputPodFailed",
            Self::AddFinalizer(_) => "AddFinalizerFailed",
            Self::RemoveFinalizer(_) => "RemoveFinalizerFailed",
            Self::DeletionBlocked { .. } => "DeletionBlocked",
        }
    }
}

/// What every SlurmJob reconcile gets: the shared [`Context`], and what is this controller's
/// own: the SlurmJob cache (for `dependsOn` lookups), the jobs this process submitted, and the
/// output streamer's image.
#[derive(Clone)]
pub struct JobContext {
    pub ctx: Context,
    pub jobs: Store<CachedSlurmJob>,
    pub submissions: Arc<Submissions>,
    /// Job ids this process's status writes named that the cache may not show yet.
    pub status_writes: Arc<StatusWrites>,
    /// SlurmJobs this process gave the finalizer, lately.
    pub taken_on: Arc<TakenOn>,
    /// The retried failures each SlurmJob was told of already.
    pub told: Arc<Told>,
    pub output_image: String,
    /// The output streamer Pods (metadata): a reconcile reads a Pod from the API server only
    /// when this shows it needs something (`output::pod_step`).
    pub output_pods: Store<PodMetaPhase>,
    /// How often each run's output Pod was replaced (its next replacement waits longer).
    pub output_replacements: Arc<output::Replacements>,
    /// SlurmClusters (their access), and namespaces' labels (access by label) and deletion
    /// (the orphan Warnings on a SlurmCluster of a namespace being deleted are not bounded).
    pub slurm_clusters: Store<SlurmCluster>,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    /// Reconciles SlurmJobs again: those that found their cluster busy, once a slot frees, and
    /// those waiting for a SlurmJob that changed.
    pub wake: UnboundedSender<ObjectRef<CachedSlurmJob>>,
    /// The SlurmJobs waiting for others (`dependsOn`), woken by their changes.
    pub dependents: Arc<Dependents>,
}

impl JobContext {
    /// `ClusterBusy` for `job`, having asked its connection to wake it: it is reconciled again
    /// as soon as a request slot is free, its busy backoff only the bound when none frees.
    fn busy(&self, handle: &ClusterHandle, job: &SlurmJob) -> Error {
        let wake = self.waker(job);
        handle.wake_when_free(backoff_key(job), wake);
        Error::ClusterBusy(job.spec.cluster_name.clone())
    }

    /// `SearchBusy` for `job`, having asked to be woken when one of the accounting search slots
    /// it waits for (`slots`: its namespace's, or the connection's) is free.
    fn busy_on(&self, slots: &Arc<RequestSlots>, job: &SlurmJob) -> Error {
        slots.wake_when_free(backoff_key(job), self.waker(job));
        Error::SearchBusy(job.spec.cluster_name.clone())
    }

    /// What reconciles `job` again, from whatever task calls it.
    fn waker(&self, job: &SlurmJob) -> impl FnOnce() + Send + 'static + use<> {
        let namespace = job.namespace().unwrap_or_default();
        let wake = self.wake.clone();
        let object = ObjectRef::new(&job.name_any()).within(&namespace);
        move || {
            // Closed only when the controller stops.
            let _ = wake.unbounded_send(object);
        }
    }
}

fn backoff_key(job: &impl ResourceExt) -> String {
    Backoffs::key(
        CONTROLLER,
        job.namespace().as_deref().unwrap_or_default(),
        &job.name_any(),
    )
}

/// Reconcile one SlurmJob of the cache: the whole cached object, decoded from the cache's
/// compact form; read from the API server instead when the cache cut its finalizers (a
/// tenant's hundreds: the finalizer protocol's patches need the list as it is).
pub async fn reconcile_cached(
    cached: Arc<CachedSlurmJob>,
    data: Arc<JobContext>,
) -> Result<Action, Error> {
    match whole_object(&cached, &data).await {
        Ok(Some(job)) => reconcile(Arc::new(job), data).await,
        // Gone since (nothing is left to do for it), or not to be read: this reconcile ends
        // here, and with it any turn it was woken for.
        ended => {
            let namespace = cached.namespace().unwrap_or_default();
            settle_search(&data, &namespace, cached.cluster_name(), cached.as_ref());
            ended.map(|_| Action::await_change())
        }
    }
}

/// The SlurmJob `cached` stands for, whole; `None` when it is gone.
async fn whole_object(
    cached: &CachedSlurmJob,
    data: &JobContext,
) -> Result<Option<SlurmJob>, Error> {
    if !cached.finalizers_cut() {
        return cached.object().map(Some).map_err(Error::Cache);
    }
    let namespace = cached
        .namespace()
        .ok_or(Error::MissingMetadata("namespace"))?;
    let api: Api<WholeSlurmJob> = Api::namespaced(data.ctx.client.clone(), &namespace);
    api.get_opt(&cached.name_any())
        .await
        .map(|job| job.map(|job| job.0))
        .map_err(Error::ReadSlurmJob)
}

/// Reconcile one SlurmJob behind the finalizer. One tracing span per reconcile.
pub async fn reconcile(job: Arc<SlurmJob>, data: Arc<JobContext>) -> Result<Action, Error> {
    let work = reconcile_inner(Arc::clone(&job), &data);
    let result = kit::reconcile_as_leader(CONTROLLER, job.as_ref(), &data.ctx, work).await;
    // Waiting for a search slot (its namespace's or the connection's), it left a waker
    // (`JobContext::busy_on`).
    if !matches!(result, Err(Error::SearchBusy(_))) {
        let namespace = job.namespace().unwrap_or_default();
        settle_search(&data, &namespace, &job.spec.cluster_name, job.as_ref());
    }
    result
}

/// A reconcile of `job` ended without waiting for an accounting search slot on its cluster's
/// connection (its namespace's or the connection's): it leaves those lines, and passes a free
/// slot on to the next in them.
/// Whatever way it ended: woken for the slot, it may have found nothing left to search, or
/// failed before; deleted, its waker would take a wake that reaches nobody (a wake's reconcile
/// of an object gone from the cache never runs).
fn settle_search(data: &JobContext, namespace: &str, cluster: &str, job: &impl ResourceExt) {
    let Some(handle) = data.ctx.clusters.get(&ObjectRef::new(cluster)) else {
        return;
    };
    let key = backoff_key(job);
    if let Some(searches) = handle.searches_if_any(namespace) {
        searches.settle(&key);
    }
    handle.all_searches().settle(&key);
}

async fn reconcile_inner(job: Arc<SlurmJob>, data: &JobContext) -> Result<Action, Error> {
    let namespace = job.namespace().ok_or(Error::MissingMetadata("namespace"))?;
    // Answers decoded whatever a tenant nested in the object (`WholeSlurmJob`).
    let api: Api<WholeSlurmJob> = Api::namespaced(data.ctx.client.clone(), &namespace);
    let namespace = namespace.as_str();
    // A new SlurmJob: the finalizer first, then the rest of this reconcile on the patch's
    // answer, which is the whole object (its script included): a burst's submits wait neither
    // for the watch to bring each object back nor for a read of its spec (issue 19).
    let (job, whole) = if kit::lacks_finalizer(job.as_ref()) {
        if data
            .ctx
            .finalizer_writes
            .lags_behind(job.as_ref(), std::time::Instant::now())
        {
            // This process gave this very version the finalizer a moment ago; the patch's
            // watch event triggers the next reconcile.
            debug!(name = %job.name_any(), "the cache does not show our finalizer yet");
            return Ok(Action::requeue(CACHE_LAG_RETRY));
        }
        // Refused by its SlurmCluster's access (the caches say so), it submits nothing:
        // without the finalizer its deletion needs nothing, and it cannot hold the
        // SlurmCluster's deletion as one whose submit answer may be lost does
        // (`plan::needs_cluster`). Granted later, it gets the finalizer before its submit.
        // Not known yet (a cache still filling at a start) is neither: retried, without the
        // finalizer. A SlurmCluster the cache does not show is asked for: one that does not
        // exist is refused as such (nothing to hold either).
        if job.meta().deletion_timestamp.is_none() {
            let registered = data.ctx.clusters.get(&cluster_of(&job));
            match grant(
                &job,
                namespace,
                data,
                registered.as_ref().map(|h| &h.client),
            ) {
                Ok(Ok(_)) => {}
                Ok(Err(refusal)) => return refuse(&job, namespace, refusal, &data.ctx).await,
                Err(Error::ClusterNotReady(_))
                    if !data.ctx.clusters.contains(&cluster_of(&job))
                        && !cluster_exists(&job.spec.cluster_name, &data.ctx).await? =>
                {
                    return refuse(&job, namespace, cluster_not_found(&job), &data.ctx).await;
                }
                Err(error) => return Err(error),
            }
        }
        let name = job
            .meta()
            .name
            .as_deref()
            .ok_or(Error::MissingMetadata("name"))?;
        let patched = kit::add_finalizer(&api, name, job.as_ref())
            .await
            .map_err(Error::AddFinalizer)?;
        data.ctx
            .finalizer_writes
            .patched(job.as_ref(), std::time::Instant::now());
        if let Some(uid) = patched.uid() {
            data.taken_on
                .record(&uid, data.ctx.acting_since(), Utc::now());
        }
        (Arc::new(patched), true)
    } else {
        data.ctx.finalizer_writes.shown(job.as_ref());
        (Arc::new(WholeSlurmJob(Arc::unwrap_or_clone(job))), false)
    };
    kit::with_finalizer(
        &api,
        job,
        |job| async move { apply(&job, namespace, data, whole).await },
        |job| async move { cleanup(&job, data).await },
    )
    .await
}

kit::finalizer_failure!(Error);

/// How soon a reconcile refused by a failed check of the Lease, in a replica that still counts
/// itself the leader, is tried again.
pub const NOT_LEADER_RECHECK: Duration = Duration::from_secs(15);

/// Every failure retries with a per-SlurmJob exponential backoff: none of them is the spec's
/// fault (an unsubmittable spec, and a submit Slurm refused for good, are reported in the status
/// and wait for an edit without error). A SlurmJob gone from the cache meanwhile is not retried.
pub fn error_policy<K: ResourceExt>(job: Arc<K>, error: &Error, data: Arc<JobContext>) -> Action {
    let name = job.name_any();
    let namespace = job.namespace().unwrap_or_default();
    let cached = data
        .jobs
        .get(&ObjectRef::new(&name).within(&namespace))
        .is_some_and(|cached| cached.meta().uid == job.meta().uid);
    if !cached {
        // Deleted while this reconcile ran (its Delete event applied first; perhaps created
        // again since): a count made now would outlive it (its retry never runs) and pass to
        // the next SlurmJob of that name.
        data.ctx.backoff.reset(&backoff_key(job.as_ref()));
        debug!(%name, %namespace, error = %Chain(error), "reconcile of a deleted SlurmJob failed");
        return Action::await_change();
    }
    if let Error::ClusterBusy(cluster) = error {
        return busy(job.as_ref(), cluster, &data.ctx);
    }
    if let Error::SearchBusy(_) = error {
        // Woken when the search ends (`JobContext::busy_on`); the bound only if that is lost.
        // Its failures' backoff is left as it is: waiting in line is not failing.
        debug!(
            name = %job.name_any(),
            namespace = job.namespace().unwrap_or_default(),
            "waiting for an accounting search slot (the namespace's, or the connection's)"
        );
        return Action::requeue(Backoffs::BUSY_MAX);
    }
    if let Error::Replaced { .. } = error {
        // The new object has a reconcile of its own (the cache that showed it queued one).
        debug!(name = %job.name_any(), error = %error, "status of a replaced SlurmJob not written");
        return Action::await_change();
    }
    if let Error::NotLeader = error {
        // Gaining the Lease again reconciles everything. A replica that still leads by its own
        // count (its check of the Lease failed: the API server restarting, or it was deposed
        // unseen) looks again soon: a deletion past its deadline has nothing else to wake it.
        return if data.ctx.leadership.is_leader() {
            Action::requeue(NOT_LEADER_RECHECK)
        } else {
            Action::await_change()
        };
    }
    data.ctx
        .metrics
        .reconcile_failed(CONTROLLER, error.category());
    if let Error::DeletionBlocked { retry, .. } = error {
        // Said in the condition and logged already; the delay was chosen with the deadline.
        return Action::requeue(*retry);
    }
    let delay = data.ctx.backoff.next(&backoff_key(job.as_ref()));
    warn!(
        name = %job.name_any(),
        namespace = job.namespace().unwrap_or_default(),
        reason = error.category(), error = %Chain(error), retry_in = ?delay,
        "SlurmJob reconcile failed"
    );
    Action::requeue(delay)
}

/// How long after this replica began to act a SlurmJob whose job runs waits for its SlurmCluster's
/// client without saying so in its status.
pub const REGISTER_GRACE: Duration = Duration::from_secs(30);

fn cluster_of(job: &SlurmJob) -> ObjectRef<SlurmCluster> {
    ObjectRef::new(&job.spec.cluster_name)
}

/// The SlurmJob while it lives. `whole`: `job` is the API server's answer, not the cache's
/// object: current, and with its script.
async fn apply(
    job: &SlurmJob,
    namespace: &str,
    data: &JobContext,
    whole: bool,
) -> Result<Action, Error> {
    let ctx = &data.ctx;
    let name = job.name_any();
    let uid = job.uid().ok_or(Error::MissingMetadata("uid"))?;
    let generation = job.metadata.generation.unwrap_or(1);
    let current = job.status.clone().unwrap_or_default();
    if !whole
        && data
            .status_writes
            .cache_lags(&uid, Outcome::of(&current), std::time::Instant::now())
    {
        // Decided from this status, the step would write what this process wrote a moment ago.
        debug!(%name, "the cache does not show our last status write yet");
        return Ok(Action::requeue(CACHE_LAG_RETRY));
    }
    // Slurm refused this generation's submit over a limit a moment ago, or it failed and made
    // no job (the finalizer's change of a new SlurmJob triggers this reconcile at once): the
    // retry waits for the backoff, which stays as it is.
    if let Some(left) = data.submissions.no_job_retry_in(
        &OwnerTag::new(&uid, generation),
        ctx.acting_since(),
        std::time::Instant::now(),
    ) {
        debug!(%name, retry_in = ?left, "the last submit made no job (a limit, or a failure) a moment ago");
        return Ok(Action::requeue(left));
    }
    let Some(handle) = ctx.clusters.get(&cluster_of(job)) else {
        if lifecycle::settled(generation, job.status.as_ref()) {
            // A finished job needs nothing from Slurm: its status stays as it is (not flipped
            // to Unknown and back on every operator start, one write each way per SlurmJob).
            // The SlurmCluster's first successful poll (`HealthChanged`) reconciles it again.
            debug!(%name, "finished; waiting for SlurmCluster {:?} without a status change", job.spec.cluster_name);
            return Ok(Action::await_change());
        }
        // Not registered: say whether it exists at all (the cache first; one read when it
        // does not know it, e.g. right after a start).
        let cluster_name = &job.spec.cluster_name;
        if data.slurm_clusters.get(&cluster_of(job)).is_none() {
            // A tenant's value goes into a request path only when it is an object name
            // (admission refuses others; objects may predate the rule).
            let exists = is_object_name(cluster_name)
                && Api::<SlurmCluster>::all(ctx.client.clone())
                    .get_opt(cluster_name)
                    .await
                    .map_err(|source| Error::GetCluster {
                        name: cluster_name.clone(),
                        source,
                    })?
                    .is_some();
            if !exists {
                return refuse(job, namespace, cluster_not_found(job), ctx).await;
            }
        }
        // Right after a start (or a gain of the Lease) the cluster controller registers the
        // client within moments: a SlurmJob whose job runs already waits for it quietly, not
        // flipped to `ClusterNotReady` and back (two status writes per live SlurmJob at every
        // start). Its cluster's first poll (`HealthChanged`) reconciles it again.
        if current.job_id.is_some() {
            let acting_for = (Utc::now() - ctx.acting_since())
                .to_std()
                .unwrap_or_default();
            if let Some(left) = REGISTER_GRACE
                .checked_sub(acting_for)
                .filter(|left| !left.is_zero())
            {
                debug!(%name, cluster = %cluster_name, "waiting for the SlurmCluster's client after a start");
                return Ok(Action::requeue(left));
            }
        }
        return not_connected(
            job,
            namespace,
            &current,
            generation,
            Waiting::Connection,
            ctx,
        )
        .await;
    };
    // The client must act as the spec says before anything is submitted: while new
    // credentials are not in yet (a token replacing a key, a key replacing a token or minting
    // for another user; a refused endpoint move or a Secret not read keep the old client), the
    // access check would weigh the spec's user and the submit go out with the old credentials,
    // which may mint the very user the new setup refuses. Edits and following go on.
    if matches!(
        lifecycle::decide(generation, job.status.as_ref()),
        lifecycle::Decision::Submit { .. }
    ) && data
        .slurm_clusters
        .get(&cluster_of(job))
        .is_some_and(|cluster| !acts_as_spec(&handle.client, &cluster))
    {
        debug!(%name, "the SlurmCluster's client does not act as its spec says yet");
        return not_connected(
            job,
            namespace,
            &current,
            generation,
            Waiting::Credentials,
            ctx,
        )
        .await;
    }
    // Who the job runs as, decided before a submit; and before an edit of a submitted job,
    // whether its access allows the account, partition and QoS it asks for now. A submitted
    // job is followed whatever its namespace's access becomes, but for one that carries only
    // a legacy (unsigned) tag: it is followed while it runs as the namespace's Slurm user.
    let mut spec = Cow::Borrowed(&job.spec);
    let mut submitter = None;
    let mut edit_refusal = None;
    let mut job_user = None;
    // A job followed: whose accounting records without a comment are its own. The namespace
    // not cached yet matters only to a step that asks accounting (below).
    let mut user_unknown = None;
    // What a submit is decided with; asked again right before it (`Env::still_granted`).
    let mut decided_grant = None;
    let decision = lifecycle::decide(generation, job.status.as_ref());
    if matches!(decision, lifecycle::Decision::Follow { .. }) {
        match granted_user(job, namespace, data) {
            Ok(user) => job_user = user,
            Err(error) => user_unknown = Some(error),
        }
    }
    if matches!(decision, lifecycle::Decision::Edit { .. }) {
        match grant(job, namespace, data, Some(&handle.client))? {
            // What the spec names (the grant allows it) is what the edit asks for; a field it
            // leaves out keeps the job's value, not the grant's default of today (an admin's
            // reordering of the grant's lists would move a waiting job at an unrelated edit).
            Ok(grant) => {
                decided_grant = Some(grant.clone());
                job_user = Some(grant.slurm_user);
            }
            Err(refusal) => {
                // Refused the edit, the job is still followed as the entry's user's.
                job_user = granted_user(job, namespace, data).ok().flatten();
                edit_refusal = Some(refusal);
            }
        }
    }
    if matches!(decision, lifecycle::Decision::Submit { .. }) {
        let grant = grant(job, namespace, data, Some(&handle.client))?.and_then(|grant| {
            let client = handle.client.as_user(&grant.slurm_user).map_err(|error| {
                // The whole error (whom the cluster's token is for) for the admin; the
                // tenant's message leaves that out.
                warn!(slurmjob = %job.name_any(), ?error, "cannot act as the granted Slurm user");
                access::Refusal {
                    reason: "CannotActAsUser",
                    message: format!(
                        "SlurmCluster {:?} cannot run jobs as Slurm user {:?}: {}",
                        job.spec.cluster_name,
                        grant.slurm_user,
                        Chain(&error)
                    ),
                }
            })?;
            Ok((grant, client))
        });
        match grant {
            Ok((grant, client)) => {
                decided_grant = Some(grant.clone());
                job_user = Some(grant.slurm_user);
                let spec = spec.to_mut();
                spec.account = grant.account;
                spec.partition = grant.partition;
                spec.qos = grant.qos;
                submitter = Some(client);
            }
            Err(refusal) => return refuse(job, namespace, refusal, ctx).await,
        }
    }
    let still_granted = || match &decided_grant {
        Some(decided) => matches!(
            grant(job, namespace, data, Some(&handle.client)),
            Ok(Ok(now)) if now == *decided
        ),
        None => true,
    };
    // Copy the Arc out: the watch borrow must not live across an await.
    let state: Arc<ClusterState> = Arc::clone(&handle.index.borrow());
    let acting_since = ctx.acting_since();
    let searches = handle.searches(namespace);
    let turn = backoff_key(job);
    let search_slots = SearchSlots {
        namespace: &searches,
        connection: handle.all_searches(),
    };
    let env = Env {
        client: &handle.client,
        submitter: submitter.as_ref().unwrap_or(&handle.client),
        job_user: job_user.as_deref(),
        state: &state,
        submissions: &data.submissions,
        started_at: ctx.started_at,
        now: Utc::now(),
        leadership: &ctx.leadership,
        // With an election, the last gain of the Lease; without one, this process's start: a
        // predecessor killed with a submit on its way (OOM, a crash) leaves it to slurmrestd,
        // which may make the job after this process's first listing began. Not for a SlurmJob
        // this process gave the finalizer (`whole`: this reconcile): every process adds it
        // before a submit, so none has submitted for it.
        took_over_at: (!whole && !data.taken_on.since(&uid, acting_since)).then_some(acting_since),
        acting_since,
        key: &ctx.tag_key,
        searches: Some((search_slots, &turn)),
        still_granted: &still_granted,
    };
    let target = Target {
        name: &name,
        uid: &uid,
        generation,
        spec: &spec,
        status: job.status.as_ref(),
        created: job
            .metadata
            .creation_timestamp
            .as_ref()
            .and_then(crate::crd::time::to_utc),
        refusal: edit_refusal.as_ref(),
    };
    // Registered before anything reads its dependees: a change of one meanwhile wakes it.
    let submits = matches!(decision, lifecycle::Decision::Submit { .. });
    if submits && !spec.depends_on.is_empty() {
        data.dependents.wait_for(
            namespace,
            &name,
            spec.depends_on.iter().map(|d| d.name.as_str()),
        );
    }
    // Each dependee judged once, here: whether the step needs a request slot and what it
    // decides come from the same look (the cache may change between two).
    let mut judged: BTreeMap<&str, Option<lifecycle::Dependee>> = if submits {
        spec.depends_on
            .iter()
            .map(|d| {
                let found = data
                    .jobs
                    .get(&ObjectRef::new(&d.name).within(namespace))
                    .map(|found| dependee(&found, &state, &ctx.tag_key, env.job_user));
                (d.name.as_str(), found)
            })
            .collect()
    } else {
        BTreeMap::new()
    };
    // A dependee not submitted may itself wait for this one: a cycle, which its wait names.
    let cycle = dependency_cycle(data, namespace, &name, &judged);
    if let Some(Some(found)) = cycle
        .first()
        .and_then(|first| judged.get_mut(first.as_str()))
    {
        found.cycle = cycle;
    }
    let lookup = |dep: &str| judged.get(dep).cloned().flatten();
    // A step that may call slurmrestd takes one of the cluster's request slots for the step
    // only (not for the Kubernetes writes after it), waiting a moment for one; else it requeues
    // without holding one of this controller's reconcile slots (a cluster whose requests hang
    // delays only its own SlurmJobs). A step that only mirrors the index takes none.
    // A wait for dependencies asks Slurm nothing: a pipeline's waiting links take no slot.
    let may_call_slurm =
        act::may_call_slurm(target, env) && !act::waits_for_dependencies(target, lookup);
    if let Some(error) = user_unknown
        && act::asks_how_it_ended(target, env)
    {
        return Err(error);
    }
    let io = if may_call_slurm {
        match handle.io_within(IO_WAIT).await {
            Some(slot) => Some(slot),
            None => return Err(data.busy(&handle, job)),
        }
    } else {
        None
    };
    // The cached object holds no script (`CachedSlurmJob`): read the whole spec right before a
    // submit, unless this reconcile has it already.
    let step = if whole {
        act::step_whole(target, env, lookup)
            .await
            .map_err(|error| match error {
                act::StepError::Slurm(error) => act::StepError::Slurm(error),
                act::StepError::SearchBusy(slots) => act::StepError::SearchBusy(slots),
                act::StepError::LoadSpec(never) => match never {},
            })
    } else {
        let jobs_api: Api<WholeSlurmJob> = Api::namespaced(ctx.client.clone(), namespace);
        let load = |generation| load_spec(&jobs_api, &name, &uid, generation, &spec);
        act::step_loading(target, env, lookup, load).await
    };
    drop(io);
    let step = match step {
        Ok(step) => step,
        Err(act::StepError::LoadSpec(error)) => return Err(Error::LoadSpec(error)),
        // Another SlurmJob of this namespace, or others on the connection, search accounting:
        // woken when one is done.
        Err(act::StepError::SearchBusy(slots)) => return Err(data.busy_on(&slots, job)),
        Err(act::StepError::Slurm(error)) => {
            // Once per cause while it lasts: each retry would be another Event write.
            let news = job
                .uid()
                .is_none_or(|uid| data.told.news(&uid, TOLD_SUBMIT, error.category()));
            if news {
                kit::publish(
                    &ctx.recorder,
                    job,
                    EVENT_ACTION,
                    Notice::warning(
                        "SubmitFailed",
                        format!(
                            "submitting to SlurmCluster {} failed ({}): {}; {}",
                            job.spec.cluster_name,
                            error.category(),
                            error.for_tenant(),
                            if error.outcome_unknown() {
                                "Slurm may have made the job all the same: the next attempt waits \
                             for a listing of the cluster's jobs that began after this failure, \
                             and adopts the job by its tag if it is there"
                            } else {
                                "no job was made: it is tried again with a growing delay"
                            }
                        ),
                    ),
                )
                .await;
            }
            return Err(Error::Submit(error));
        }
    };
    if let Some(uid) = job.uid() {
        data.told.succeeded(&uid, TOLD_SUBMIT);
    }
    let Step {
        status,
        notices,
        retry,
        invalid,
        backoff,
    } = step;
    if !dependents::is_dependency_wait(&status) {
        data.dependents.done(namespace, &name);
    }
    if !ctx.leadership.is_leader() {
        // Lost the Lease meanwhile: the leader writes (a job submitted here is adopted by tag).
        return Ok(Action::await_change());
    }
    // A waiting job's details (Slurm's state words and reason, why it waits) are not a
    // transition: written only once it has waited a moment, so that a job that starts at once
    // costs one status write per transition (issue 19); the next transition writes them anyway.
    let mut retry = if backoff {
        Some(ctx.backoff.next(&backoff_key(job)))
    } else {
        retry
    };
    if status != current {
        match status::details_due(&current, &status, Utc::now()) {
            Some(later) => retry = Some(retry.map_or(later, |r| r.min(later))),
            None => {
                apply_status(job, namespace, &status, ctx).await?;
                if let Some(generation) = status.submitted_generation {
                    data.submissions.forget_before(&uid, generation);
                }
                let written = Outcome::of(&status);
                if written != Outcome::of(&current) {
                    data.status_writes
                        .record(&uid, written, std::time::Instant::now());
                }
            }
        }
    }
    for notice in notices {
        kit::publish(&ctx.recorder, job, EVENT_ACTION, notice).await;
    }
    // A run's Pod is looked after while the run writes output (`status.output`, as submitted:
    // an edit of `spec.output` applies from the next run), and for a run without while the Pod
    // cache shows one (an earlier run's: told the end, deleted at the next run; none is made),
    // as it would stream for as long as the SlurmJob exists. No read for a SlurmJob that never
    // had one (the cache not listed yet: its list brings a reconcile of each owner).
    let wants_output = status.output.is_some();
    if let Some(job_id) = status.job_id
        && (wants_output || cached_output_pod(job, namespace, data))
    {
        let ended = status.phase.is_terminal();
        let may_create = wants_output && output::may_create(&status, Utc::now());
        let known = known_output_pod_step(job, namespace, job_id, ended, may_create, data);
        if let Some(output::PodStep::LookAgain(later)) = known {
            retry = Some(retry.map_or(later, |r| r.min(later)));
        }
        let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
        let acted = match known {
            Some(output::PodStep::NotOurs) if may_create => Err(act::OutputPodError::NameTaken),
            Some(step) if !step.acts() => Ok(None),
            _ => {
                let replacements = data.output_replacements.as_ref();
                let stream = act::OutputRun {
                    job_id,
                    output: status.output.clone(),
                    ended,
                    may_create,
                };
                act::ensure_output_pod(&pods, job, stream, &data.output_image, replacements).await
            }
        };
        if acted.is_ok()
            && let Some(uid) = job.uid()
        {
            data.told.succeeded(&uid, TOLD_OUTPUT_POD);
        }
        match acted {
            Ok(Some(later)) => retry = Some(retry.map_or(later, |r| r.min(later))),
            Ok(None) => {}
            // Not an error of the reconcile: nothing retried makes the name free. The tenant is
            // told once (the Pod watch, or the resync, looks again); the streamer is made once
            // that Pod is gone.
            Err(act::OutputPodError::NameTaken) => {
                if job
                    .uid()
                    .is_none_or(|uid| data.told.news(&uid, TOLD_OUTPUT_POD, OUTPUT_POD_NAME_TAKEN))
                {
                    let name = job.name_any();
                    warn!(pod = %name, "a Pod with the SlurmJob's name exists and is not its output streamer; not touching it");
                    let note = format!(
                        "a Pod named {name} exists and is not this SlurmJob's output streamer (left \
                         by an earlier SlurmJob of this name, or made by someone); the output is \
                         not streamed until it is deleted: kubectl delete pod {name}"
                    );
                    kit::publish(
                        &ctx.recorder,
                        job,
                        EVENT_ACTION,
                        Notice::warning(OUTPUT_POD_NAME_TAKEN, note),
                    )
                    .await;
                }
            }
            Err(act::OutputPodError::Other(error)) => return Err(Error::OutputPod(error)),
            Err(act::OutputPodError::Create(error)) => {
                // Refused (a ResourceQuota, an admission policy): the tenant is told, not only the
                // operator's log; retried with the backoff, as the cause may go away.
                if let kube::Error::Api(response) = &error
                    && matches!(response.code, 403 | 422)
                    && job.uid().is_none_or(|uid| {
                        data.told
                            .news(&uid, TOLD_OUTPUT_POD, &response.code.to_string())
                    })
                {
                    let note = format!(
                        "the output Pod {} was refused ({}); `kubectl logs` shows nothing until it \
                     is created: make room for it (it asks for {}) or ask the platform admin",
                        job.name_any(),
                        response.message,
                        output::resources_note(),
                    );
                    kit::publish(
                        &ctx.recorder,
                        job,
                        EVENT_ACTION,
                        Notice::warning("OutputPodFailed", note),
                    )
                    .await;
                }
                return Err(Error::OutputPod(error));
            }
        }
    }
    if !backoff {
        ctx.backoff.reset(&backoff_key(job));
    }
    Ok(match (retry, invalid) {
        (Some(delay), _) => Action::requeue(delay),
        (None, true) => Action::await_change(),
        (None, false) if status.phase.is_terminal() => Action::await_change(),
        (None, false) => Action::requeue(RESYNC),
    })
}

/// The whole spec of `generation` of the SlurmJob `name` (uid `uid`), read from the API server,
/// with what the access grant chose in `granted` (account, partition, QoS). `None` when the
/// object is no longer that generation of that object: edited since, being deleted, or gone or
/// re-created under its name (another uid). Generation, not resourceVersion: our own status
/// writes change the latter and leave the spec as it was.
async fn load_spec(
    api: &Api<WholeSlurmJob>,
    name: &str,
    uid: &str,
    generation: i64,
    granted: &SlurmJobSpec,
) -> Result<Option<SlurmJobSpec>, kube::Error> {
    let Some(WholeSlurmJob(job)) = api.get_opt(name).await? else {
        return Ok(None);
    };
    let same = job.metadata.uid.as_deref() == Some(uid)
        && job.metadata.generation.unwrap_or(1) == generation
        && job.metadata.deletion_timestamp.is_none();
    if !same {
        debug!(%name, generation, "the SlurmJob changed since it was cached: not submitting it");
        return Ok(None);
    }
    let mut spec = job.spec;
    spec.account.clone_from(&granted.account);
    spec.partition.clone_from(&granted.partition);
    spec.qos.clone_from(&granted.qos);
    Ok(Some(spec))
}

/// The access grant of `job` in `namespace` (`Ok(Err(..))`: refused), from the cached
/// SlurmCluster and the namespace's labels, for a submit or edit through `client` (the
/// SlurmCluster's registered client; `None`: not registered).
fn grant(
    job: &SlurmJob,
    namespace: &str,
    data: &JobContext,
    client: Option<&crate::slurm::SlurmClient>,
) -> Result<Result<access::Grant, access::Refusal>, Error> {
    let cluster_name = &job.spec.cluster_name;
    let Some(cluster) = data.slurm_clusters.get(&ObjectRef::new(cluster_name)) else {
        // Registered (so it exists) but not cached yet: the cache fills on its own.
        return Err(Error::ClusterNotReady(cluster_name.clone()));
    };
    if cluster.metadata.deletion_timestamp.is_some() {
        // Its deletion waits for the SlurmJobs that name it: a new submit would keep it.
        return Ok(Err(access::Refusal {
            reason: "ClusterDeleting",
            message: format!(
                "SlurmCluster {cluster_name:?} is being deleted: nothing new is submitted to it"
            ),
        }));
    }
    let labels = namespace_labels(&cluster, namespace, data)?;
    // The user the operator acts as: the spec names a minted token's; a ready token's is known
    // once its cluster is registered (before that, a submit cannot happen either), and it is
    // that of the client the submit goes through: not looked up again, as a registration
    // dropped meanwhile would leave no user to refuse while the submit used the old token.
    // Not both: while a key replaces a token, the old client's user would refuse the entries
    // of the new setup, and nothing would reconcile them once the new credentials are in.
    let own_user = match cluster.spec.auth.method() {
        Some(crate::crd::AuthMethod::Jwt(jwt)) => Some(jwt.user.clone()),
        _ => client.and_then(crate::slurm::SlurmClient::user),
    };
    let own_users: Vec<&str> = own_user.as_deref().into_iter().collect();
    Ok(access::check(
        &cluster,
        cluster_name,
        namespace,
        &labels,
        &job.spec,
        &own_users,
    ))
}

/// The Slurm user the access entry that grants `job`'s namespace names (its account,
/// partition and QoS aside): whose accounting records are its jobs' (`Env::job_user`), and
/// who a job under its legacy tag must run as (`plan::is_followed`). `None`: no entry grants
/// it. Not known while the SlurmCluster or the namespace is not cached: an error (retried),
/// never taken for "no entry".
fn granted_user(
    job: &SlurmJob,
    namespace: &str,
    data: &JobContext,
) -> Result<Option<String>, Error> {
    let cluster_name = &job.spec.cluster_name;
    let Some(cluster) = data.slurm_clusters.get(&ObjectRef::new(cluster_name)) else {
        return Err(Error::ClusterNotReady(cluster_name.clone()));
    };
    let labels = namespace_labels(&cluster, namespace, data)?;
    Ok(access::entry(&cluster, namespace, &labels).map(|entry| entry.slurm_user.clone()))
}

/// `namespace`'s labels from the cache, for `cluster`'s access entries. Unknown labels are not
/// no labels: a selector on an absent label (`NotIn`, `DoesNotExist`) would grant the
/// namespace, or skip an earlier entry that grants it by label. Names alone decide only where
/// no entry has a selector.
fn namespace_labels(
    cluster: &SlurmCluster,
    namespace: &str,
    data: &JobContext,
) -> Result<std::collections::BTreeMap<String, String>, Error> {
    match data.namespaces.get(&ObjectRef::new(namespace)) {
        Some(ns) => Ok(ns.metadata.labels.clone().unwrap_or_default()),
        None if cluster
            .spec
            .access
            .iter()
            .any(|entry| entry.namespace_selector.is_some()) =>
        {
            Err(Error::NamespaceNotCached(namespace.to_owned()))
        }
        None => Ok(std::collections::BTreeMap::new()),
    }
}

/// What a SlurmJob that cannot go on with its SlurmCluster waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiting {
    /// The SlurmCluster has no client yet.
    Connection,
    /// Its client does not act as its spec says yet ([`acts_as_spec`]): the submit waits.
    Credentials,
}

/// A SlurmJob whose SlurmCluster is not connected, or whose client does not act as its spec
/// says yet: `Ready=Unknown` and `Reconciling=True` (`ClusterNotReady`), retried with backoff
/// and woken when the cluster's connection comes up or its credentials rotate
/// (`HealthChanged`).
async fn not_connected(
    job: &SlurmJob,
    namespace: &str,
    current: &SlurmJobStatus,
    generation: i64,
    waiting: Waiting,
    ctx: &Context,
) -> Result<Action, Error> {
    let mut next = current.clone();
    let cluster = &job.spec.cluster_name;
    let message = match waiting {
        Waiting::Connection => {
            format!("SlurmCluster {cluster:?} is not connected yet; see its status")
        }
        Waiting::Credentials => format!(
            "waiting to submit until the operator uses the endpoint and credentials SlurmCluster \
             {cluster:?} names (spec.endpoint, spec.auth); see its status"
        ),
    };
    condition::upsert(
        &mut next.conditions,
        condition::new(
            status::READY,
            condition::Status::Unknown,
            "ClusterNotReady",
            message.clone(),
            Some(generation),
            crate::crd::condition::now(),
        ),
    );
    // Retried with backoff until the SlurmCluster connects: work in progress (kstatus), not
    // stalled (a refusal from before is judged again then, as `status::waiting` does).
    condition::upsert(
        &mut next.conditions,
        condition::new(
            status::RECONCILING,
            true,
            "ClusterNotReady",
            message,
            Some(generation),
            crate::crd::condition::now(),
        ),
    );
    condition::remove(&mut next.conditions, status::STALLED);
    if &next != current {
        apply_status(job, namespace, &next, ctx).await?;
    }
    Err(Error::ClusterNotReady(job.spec.cluster_name.clone()))
}

/// Whether `client` acts as `cluster`'s spec says: at `spec.endpoint` (a move to another
/// endpoint not confirmed yet, or refused, keeps the old connection: submits there would add
/// jobs that hold the move up), with a key minting for `auth.jwt.user`, or a ready token
/// (`tokenSecretRef`). Clients are shared between SlurmClusters only with the same identity,
/// so a connected cluster's client says so once its credentials are in.
fn acts_as_spec(client: &crate::slurm::SlurmClient, cluster: &SlurmCluster) -> bool {
    let at_endpoint = crate::slurm::ClientConfig::new(&cluster.spec.endpoint)
        .is_ok_and(|config| config.endpoint == *client.endpoint());
    at_endpoint
        && match cluster.spec.auth.method() {
            Some(crate::crd::AuthMethod::Jwt(jwt)) => {
                !client.uses_ready_token() && client.user().as_deref() == Some(jwt.user.as_str())
            }
            Some(crate::crd::AuthMethod::Token(_)) => client.uses_ready_token(),
            None => false,
        }
}

/// A SlurmJob its namespace's access does not allow: `Ready=False` and `Stalled=True` with the
/// refusal's reason and message (a Warning Event when that is new), and no submit until
/// something changes (the SlurmJob, its SlurmCluster's access, or its namespace's labels).
async fn refuse(
    job: &SlurmJob,
    namespace: &str,
    refusal: access::Refusal,
    ctx: &Context,
) -> Result<Action, Error> {
    let current = job.status.clone().unwrap_or_default();
    let generation = job.metadata.generation.unwrap_or(1);
    let was = condition::find(&current.conditions, status::READY)
        .map(|c| (c.reason.clone(), c.message.clone()));
    // As the condition keeps it: a long message (many granted accounts) is cut there, and the
    // Event is sent once, not at every reconcile.
    let message = condition::bounded_message(&refusal.message);
    let next = refused_status(
        job.status.as_ref(),
        generation,
        refusal.reason,
        message.clone(),
        crate::crd::condition::now(),
    );
    if next != current {
        apply_status(job, namespace, &next, ctx).await?;
    }
    if was != Some((refusal.reason.to_owned(), message.clone())) {
        kit::publish(
            &ctx.recorder,
            job,
            EVENT_ACTION,
            Notice::warning(refusal.reason, message).by_note(EVENT_ACTION),
        )
        .await;
    }
    ctx.backoff.reset(&backoff_key(job));
    Ok(Action::await_change())
}

/// The status of a SlurmJob its cluster's access refuses: stalled with the refusal. A re-run
/// refused (the spec changed after the run ended) starts its new run as a submitted one would:
/// the ended run goes to the history, so that the status does not show it as this
/// generation's outcome (`Complete`, an old `observedGeneration`) next to the refusal.
fn refused_status(
    current: Option<&SlurmJobStatus>,
    generation: i64,
    reason: &str,
    message: String,
    now: Time,
) -> SlurmJobStatus {
    let rerun = matches!(
        lifecycle::decide(generation, current),
        lifecycle::Decision::Submit { rerun: true }
    );
    let (base, ended) = lifecycle::submit_base(&current.cloned().unwrap_or_default(), rerun);
    let stalled = status::stalled(base, generation, reason, message, now.clone());
    if ended.is_some() {
        return status::summarize(stalled, generation, now);
    }
    stalled
}

/// Deletion: cancel every unfinished job of this SlurmJob, then release the finalizer; what
/// [`plan::cleanup`] decides when Slurm cannot be reached.
async fn cleanup(job: &SlurmJob, data: &JobContext) -> Result<Action, Error> {
    let ctx = &data.ctx;
    let uid = job.uid().ok_or(Error::MissingMetadata("uid"))?;
    let status = job.status.clone().unwrap_or_default();
    let generation = job.metadata.generation.unwrap_or(1);
    let settled = lifecycle::settled_when_deleted(generation, job.status.as_ref());
    let skip_cancel = job
        .annotations()
        .get(SKIP_CANCEL_ANNOTATION)
        .is_some_and(|v| v == "true");
    // A settled SlurmJob needs nothing from Slurm: not even the registry is looked at.
    let handle = (!settled)
        .then(|| ctx.clusters.get(&cluster_of(job)))
        .flatten();
    let state = handle.as_ref().map(|h| Arc::clone(&h.index.borrow()));
    let reach = match &state {
        Some(state) => Reach::Connected {
            // Only a complete list of the cluster's jobs shows a job whose submit answer (and
            // so its jobId in the status) was lost to a crash.
            index_trusted: plan::index_trusted(state, ctx.started_at),
        },
        // The plan does not look further for these: no request.
        None if settled || skip_cancel => Reach::NotConnected,
        None if cluster_exists(&job.spec.cluster_name, ctx).await? => Reach::NotConnected,
        None => Reach::Gone,
    };
    // A job made for this SlurmJob may be unknown to its status only while the status records
    // no job of the spec's latest generation (the API server adds one to the generation when
    // the deletion begins).
    let unrecorded = !skip_cancel
        && status
            .submitted_generation
            .is_none_or(|g| g < generation.saturating_sub(1));
    // The index skipped jobs (issue 19: those of its first listing, or a burst of others' after
    // it): a job submitted for this SlurmJob without recording it may be one of them. Until the index has
    // the records of the candidates accounting names, the deletion waits as for an index not
    // synced (it asks for them; the next steps see them). Not for a SlurmJob created after
    // the index last skipped (as `plan::fresh` judges): every job made for it is in the index,
    // and a tenant's create-and-delete loop costs accounting no search by name.
    let created = job
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(crate::crd::time::to_utc);
    let may_be_skipped = |state: &ClusterState| {
        state
            .skipped_before
            .is_some_and(|before| created.is_none_or(|at| at <= before + plan::GONE_GRACE))
    };
    // The search slots this deletion waits for, taken by other searches: meanwhile it cancels
    // the jobs it knows and its deadline applies, as for any index it cannot trust yet; then it
    // waits in their line, not for its backoff (other teams' searches may hold them).
    let mut search_busy = None;
    let reach = match (&reach, &state, &handle) {
        (
            Reach::Connected {
                index_trusted: true,
            },
            Some(state),
            Some(handle),
        ) if may_be_skipped(state) && unrecorded => {
            // A search by job name, as a submit's: one per namespace at a time, and fewer on
            // the connection than its request slots.
            let searches = handle.searches(&job.namespace().unwrap_or_default());
            let slots = SearchSlots {
                namespace: &searches,
                connection: handle.all_searches(),
            };
            match slots.try_take_for(&backoff_key(job)) {
                Ok(_search) => {
                    let Some(_io) = handle.try_io() else {
                        return Err(data.busy(handle, job));
                    };
                    let unresolved = skipped_candidates(job, state, &handle.client).await;
                    Reach::Connected {
                        index_trusted: !unresolved,
                    }
                }
                Err(busy) => {
                    search_busy = Some(busy);
                    Reach::Connected {
                        index_trusted: false,
                    }
                }
            }
        }
        _ => reach,
    };
    // After a gain of the leader Lease or a start, the previous leader's (or incarnation's)
    // submit of a generation whose job the status does not record may still land (as for a
    // submit: `act::takeover`): only a listing of every job that began after it could land
    // shows that job.
    let reach = match (&reach, &state, &handle) {
        (
            Reach::Connected {
                index_trusted: true,
            },
            Some(state),
            Some(handle),
        ) if unrecorded
            && !data.taken_on.since(&uid, ctx.acting_since())
            && job
                .metadata
                .creation_timestamp
                .as_ref()
                .and_then(crate::crd::time::to_utc)
                .is_none_or(|created| !plan::Takeover::newer(created, ctx.acting_since()))
            && !plan::past_doubt(
                state,
                plan::Takeover::new(ctx.acting_since(), handle.client.request_timeout())
                    .settles_at(),
            ) =>
        {
            Reach::Connected {
                index_trusted: false,
            }
        }
        _ => reach,
    };
    // A submit of this process that failed without saying whether Slurm made the job: only a
    // listing of every job since shows that job (`plan::past_doubt`).
    let reach = match (&reach, &state, data.submissions.doubt_since(&uid)) {
        (
            Reach::Connected {
                index_trusted: true,
            },
            Some(state),
            Some(since),
        ) if !plan::past_doubt(state, since) => Reach::Connected {
            index_trusted: false,
        },
        _ => reach,
    };
    let ids = plan::to_cancel(
        &uid,
        &status,
        state.as_deref(),
        &data.submissions,
        &ctx.tag_key,
    );
    let deleted_at = job
        .metadata
        .deletion_timestamp
        .as_ref()
        .and_then(crate::crd::time::to_utc);
    let facts = CleanupFacts {
        settled,
        skip_cancel,
        reach,
        to_cancel: &ids,
        failed: None,
        release_at: plan::release_at(deleted_at, ctx.acting_since(), ctx.deletion_deadline),
        now: Utc::now(),
    };
    let mut decision = plan::cleanup(facts);
    let failure;
    // What may still run, for the wait's condition and Warning.
    let mut uncancelled: &[u32] = &ids;
    if let (CleanupPlan::Cancel(ids) | CleanupPlan::CancelKnown(ids), Some(handle)) =
        (&decision, &handle)
    {
        let known_only = matches!(decision, CleanupPlan::CancelKnown(_));
        // An error, not `Ok`: `Ok` would let the finalizer go without the cancel.
        let Some(_io) = handle.try_io() else {
            return Err(data.busy(handle, job));
        };
        // Whom a legacy-tagged job of its own `status.jobId` must run as to be cancelled: not
        // known yet (a cache still filling) is waited for, not taken for nobody.
        let job_user = granted_user(job, &job.namespace().unwrap_or_default(), data)?;
        decision = match cancel_all(job, ids, handle, ctx, job_user.as_deref()).await {
            Ok(()) if known_only => {
                uncancelled = &[];
                plan::cleanup(CleanupFacts {
                    to_cancel: &[],
                    ..facts
                })
            }
            Ok(()) => CleanupPlan::Release,
            Err(blocker) => {
                // Those before the one that failed were cancelled.
                if let Blocker::CancelFailed { job_id, .. } = &blocker
                    && let Some(at) = uncancelled.iter().position(|id| id == job_id)
                {
                    uncancelled = &uncancelled[at..];
                }
                failure = blocker;
                plan::cleanup(CleanupFacts {
                    failed: Some(&failure),
                    ..facts
                })
            }
        };
    }
    // What only the search can show: its line, not the index's wait (a failed cancel is told
    // as such); woken when a search ends rather than retried. Said in the status unless a wait
    // for the index (whose message names this search) is said already: a search that left it
    // unresolved, then the line again, must not trade one for the other at every turn. Said
    // again (a write only if its message changed: the deadline after a takeover) otherwise.
    if let (
        Some(busy),
        CleanupPlan::Wait {
            blocker: Blocker::IndexNotSynced,
            release_at,
        },
    ) = (&search_busy, &decision)
    {
        let waiting = data.busy_on(busy, job);
        let said = condition::find(&status.conditions, DELETION_BLOCKED)
            .is_some_and(|c| c.status == "True" && c.reason == Blocker::IndexNotSynced.reason());
        if !said {
            tell_blocked(job, &Blocker::SearchBusy, *release_at, uncancelled, ctx).await?;
        }
        return Err(waiting);
    }
    match decision {
        CleanupPlan::Release => {}
        CleanupPlan::Orphan { why, ids } => {
            // The deadline counts from this replica's own gain of the Lease: a deposed
            // replica's (paused, its renewals failing unseen) comes before the new leader's.
            // The Lease read again, as a SlurmNodeSet's release at its deadline does.
            if matches!(why, Orphaned::Deadline(_)) && !ctx.leadership.confirm().await {
                return Err(Error::NotLeader);
            }
            let notice = orphaned(&job.spec.cluster_name, &why, &ids);
            warn!(reason = %notice.reason, note = %notice.note, "SlurmJob deleted without cancelling its Slurm jobs");
            // Told on the SlurmCluster too only when it names Slurm jobs: a SlurmJob that never
            // ran (any tenant's, even one without access) must not put Warnings there.
            let cluster = (why != Orphaned::ClusterGone && !ids.is_empty())
                .then(|| data.slurm_clusters.get(&cluster_of(job)))
                .flatten();
            if let (Some(cluster), Some(first)) = (cluster, ids.first()) {
                // A namespace being deleted refuses new Events: the admin sees it here too. In
                // a series of its own: kube's Recorder counts a repeat of object, reason and
                // action within minutes in the first Event, whose note names another SlurmJob.
                // So many per namespace: a tenant deleting held jobs with skip-cancel in a loop
                // must not fill the admin's namespace with Events. All of a namespace being
                // deleted (where this is their only Event, and no SlurmJob can be made), or
                // that may be: the namespaces not listed yet.
                let namespace = job.namespace().unwrap_or_default();
                let terminating = !kit::listed(&data.namespaces)
                    || data
                        .namespaces
                        .get(&ObjectRef::new(&namespace))
                        .is_some_and(|ns| ns.metadata.deletion_timestamp.is_some());
                let spend = if terminating {
                    Spend::Tell
                } else {
                    ctx.cluster_events.spend(&namespace, Instant::now())
                };
                if let Some(told) = told_on_cluster(job, &notice, *first, spend) {
                    kit::publish(&ctx.recorder, cluster.as_ref(), EVENT_ACTION, told).await;
                }
            }
            kit::publish(&ctx.recorder, job, EVENT_ACTION, notice).await;
        }
        CleanupPlan::Wait {
            blocker,
            release_at,
        } => return blocked(job, &blocker, release_at, uncancelled, ctx).await,
        // Planned only with a client, and never again after the cancels (plan's tests); were
        // it to be, an error keeps the finalizer (an Ok would release it uncancelled).
        CleanupPlan::Cancel(_) | CleanupPlan::CancelKnown(_) => {
            return Err(Error::ClusterNotReady(job.spec.cluster_name.clone()));
        }
    }
    data.submissions.forget_uid(&uid);
    data.status_writes.forget_uid(&uid);
    data.taken_on.forget_uid(&uid);
    data.told.forget_uid(&uid);
    ctx.finalizer_writes.forget_uid(&uid);
    ctx.backoff.reset(&backoff_key(job));
    Ok(Action::await_change())
}

/// Whether accounting names jobs of this SlurmJob's job name that have not ended (no comment
/// stored yet) whose records the index skipped; asks the index for them. Not knowing (an
/// accounting error) counts as yes: the deletion waits rather than miss a job (it cancelled the
/// jobs it knows first: `CleanupPlan::CancelKnown`). Every user's jobs of that name, unlike a
/// submit's search: a job of this SlurmJob may run as a Slurm user its namespace is no longer
/// granted.
async fn skipped_candidates(
    job: &SlurmJob,
    state: &ClusterState,
    client: &crate::slurm::SlurmClient,
) -> bool {
    let name = job.spec.name.clone().unwrap_or_else(|| job.name_any());
    let created = job
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(crate::crd::time::to_utc);
    match client
        .accounting_jobs_named(&name, act::search_since(created), None)
        .await
    {
        Ok(Some(records)) => {
            let mut waiting = false;
            for id in records
                .iter()
                .filter(|r| r.comment.is_none())
                .map(|r| r.array_job_id.unwrap_or(r.job_id))
                .filter(|id| state.unresolved.contains(id))
            {
                state.want(id);
                waiting = true;
            }
            waiting
        }
        Ok(None) => false,
        Err(error) => {
            warn!(reason = error.category(), %error, "accounting did not answer: the deletion waits for it");
            true
        }
    }
}

/// The SlurmJobs (`namespace/name`) among `jobs` that still need the client of `cluster`, which
/// is being deleted ([`plan::needs_cluster`]): they name it and may still run something there.
/// The index is read once ([`plan::live_owners`]); a cached spec and status are unpacked only
/// without a complete index.
pub fn holding_cluster(
    jobs: &[Arc<CachedSlurmJob>],
    cluster: &DeletedCluster<'_>,
    ctx: &Context,
) -> Vec<String> {
    let live = cluster
        .index
        .filter(|state| plan::index_trusted(state, ctx.started_at))
        .map(|state| plan::live_owners(state, &ctx.tag_key));
    let in_doubt_holds =
        plan::release_at(cluster.deleted_at, ctx.started_at, ctx.deletion_deadline)
            .is_none_or(|at| cluster.now < at);
    jobs.iter()
        .filter(|job| job.cluster_name() == cluster.name)
        .filter(|job| holds_cluster(job, live.as_ref(), in_doubt_holds))
        .map(|job| format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any()))
        .collect()
}

fn holds_cluster(
    job: &CachedSlurmJob,
    live: Option<&std::collections::BTreeSet<String>>,
    in_doubt_holds: bool,
) -> bool {
    let finalized = job.finalizers().iter().any(|f| f == FINALIZER);
    let uid = job.uid().unwrap_or_default();
    let deleting = job.meta().deletion_timestamp.is_some();
    let generation = job.meta().generation.unwrap_or(1);
    // What the cache keeps unpacked says it all: a live run, or the index's word.
    let bare = SlurmJobStatus {
        job_id: job.job_id(),
        phase: job.phase().unwrap_or_default(),
        ..Default::default()
    };
    let quick = plan::ClusterUser {
        uid: &uid,
        generation,
        status: Some(&bare),
        finalized,
        deleting,
    };
    if !finalized
        || live.is_some()
        || !in_doubt_holds
        || (bare.job_id.is_some() && !bare.phase.is_terminal())
    {
        return plan::needs_cluster(quick, live, in_doubt_holds);
    }
    let object = match job.object() {
        Ok(object) => object,
        Err(error) => {
            // A bug (this process packed it): hold the cluster rather than guess.
            warn!(slurmjob = %job.name_any(), error = %Chain(&error), "cannot unpack a cached SlurmJob");
            return true;
        }
    };
    let user = plan::ClusterUser {
        status: object.status.as_ref(),
        ..quick
    };
    plan::needs_cluster(user, None, in_doubt_holds)
}

/// Whether SlurmCluster `name` exists (being deleted or not): one read.
/// A SlurmJob naming a SlurmCluster that does not exist.
fn cluster_not_found(job: &SlurmJob) -> access::Refusal {
    access::Refusal {
        reason: "ClusterNotFound",
        message: format!(
            "SlurmCluster {:?} does not exist: fix spec.clusterName, or ask the platform admin \
             to register it",
            job.spec.cluster_name
        ),
    }
}

async fn cluster_exists(name: &str, ctx: &Context) -> Result<bool, Error> {
    // A tenant's value goes into a request path only when it is an object name.
    if !is_object_name(name) {
        return Ok(false);
    }
    let clusters: Api<SlurmCluster> = Api::all(ctx.client.clone());
    let found = clusters
        .get_opt(name)
        .await
        .map_err(|source| Error::GetCluster {
            name: name.to_owned(),
            source,
        })?;
    Ok(found.is_some())
}

/// Cancel each of `ids` ("already finished" and "unknown" count as done); the first failure
/// says what blocks.
async fn cancel_all(
    job: &SlurmJob,
    ids: &[u32],
    handle: &ClusterHandle,
    ctx: &Context,
    job_user: Option<&str>,
) -> Result<(), Blocker> {
    let uid = job.uid().unwrap_or_default();
    let state = Arc::clone(&handle.index.borrow());
    let status_job_id = job.status.as_ref().and_then(|s| s.job_id);
    for &job_id in ids {
        let outcome = act::cancel_owned(
            &handle.client,
            Some(&state),
            &uid,
            &ctx.tag_key,
            job_id,
            (status_job_id == Some(i64::from(job_id))).then_some(job_user),
        )
        .await
        .map_err(|error| Blocker::CancelFailed {
            job_id,
            reason: error.category(),
            message: error.for_tenant(),
        })?;
        info!(
            job_id,
            ?outcome,
            "SlurmJob deleted: cancelled its Slurm job"
        );
        match outcome {
            act::Cancellation::Cancelled => {
                kit::publish(
                    &ctx.recorder,
                    job,
                    EVENT_ACTION,
                    Notice::normal(
                        "Cancelled",
                        format!("Slurm job {job_id} cancelled: the SlurmJob was deleted"),
                    ),
                )
                .await;
            }
            act::Cancellation::NotOwned(ownership) => {
                kit::publish(
                    &ctx.recorder,
                    job,
                    EVENT_ACTION,
                    notice::not_owned(job_id, ownership),
                )
                .await;
            }
            _ => {}
        }
    }
    Ok(())
}

/// `ids` for people: "12, 13".
fn id_list(ids: &[u32]) -> String {
    ids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the SlurmCluster is told of `job`'s orphaned jobs (`first` the first of them), as
/// `spend` allows.
fn told_on_cluster(job: &SlurmJob, notice: &Notice, first: u32, spend: Spend) -> Option<Notice> {
    let namespace = job.namespace().unwrap_or_default();
    // Before the notice, where the 1024-byte cut of a long job list cannot take it.
    let last = match spend {
        Spend::Quiet => return None,
        Spend::Tell => String::new(),
        Spend::TellLast(quiet_for) => format!(
            "(the last of this namespace told here for {}s; the others are in the operator's \
             log) ",
            quiet_for.as_secs()
        ),
    };
    let mut told = notice.clone().about_run(i64::from(first));
    told.note = format!(
        "SlurmJob {namespace}/{}: {last}{}",
        job.name_any(),
        notice.note
    );
    Some(told)
}

/// The Warning of a finalizer that goes although Slurm jobs may still run.
fn orphaned(cluster: &str, why: &Orphaned, ids: &[u32]) -> Notice {
    let jobs = if ids.is_empty() {
        "no unfinished Slurm job of it is known (one whose submit answer was lost would carry \
         its uid in its comment)"
            .to_owned()
    } else {
        format!("Slurm job {} may still run", id_list(ids))
    };
    match why {
        Orphaned::ClusterGone => Notice::warning(
            "CancelSkipped",
            format!("SlurmCluster {cluster:?} no longer exists: not cancelled; {jobs}"),
        ),
        Orphaned::SkipCancel => Notice::warning(
            "CancelSkipped",
            format!("deleted without cancelling ({SKIP_CANCEL_ANNOTATION}=true): {jobs}"),
        ),
        Orphaned::Deadline(blocker) => Notice::warning(
            "CancelAbandoned",
            format!(
                "the deletion deadline passed while waiting for {}: deleted without cancelling; \
                 {jobs}",
                blocker.describe(cluster)
            ),
        ),
    }
}

/// A deletion that cannot cancel yet: the `DeletionBlocked` condition and, when its reason is
/// new, a Warning Event say what it waits for and until when; then an error (it keeps the
/// finalizer) that comes back after a backoff, at the latest at the deadline.
async fn blocked(
    job: &SlurmJob,
    blocker: &Blocker,
    release_at: Option<DateTime<Utc>>,
    ids: &[u32],
    ctx: &Context,
) -> Result<Action, Error> {
    tell_blocked(job, blocker, release_at, ids, ctx).await?;
    let mut delay = ctx.backoff.next(&backoff_key(job));
    if let Some(left) = release_at.and_then(|at| (at - Utc::now()).to_std().ok()) {
        delay = delay.min(left + Duration::from_secs(1));
    }
    Err(Error::DeletionBlocked {
        reason: blocker.reason(),
        retry: delay.max(Duration::from_secs(1)),
    })
}

/// Say why the deletion of `job` waits: `DeletionBlocked=True` with `blocker`'s reason (written
/// only when it changes), a Warning Event when the reason is new, and the log.
async fn tell_blocked(
    job: &SlurmJob,
    blocker: &Blocker,
    release_at: Option<DateTime<Utc>>,
    ids: &[u32],
    ctx: &Context,
) -> Result<(), Error> {
    let cluster = &job.spec.cluster_name;
    let jobs = if ids.is_empty() {
        "no unfinished Slurm job of it is known yet".to_owned()
    } else {
        format!("Slurm job {} not cancelled yet", id_list(ids))
    };
    let until = match release_at {
        Some(at) => format!(
            "at {} (the operator's --deletion-deadline) it is deleted without the cancel",
            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ),
        None => "the operator has no deletion deadline (--deletion-deadline 0s)".to_owned(),
    };
    let message = format!(
        "waiting for {}: {jobs}; {until}; annotate {SKIP_CANCEL_ANNOTATION}=true to delete it \
         now without the cancel",
        blocker.describe(cluster)
    );
    let current = job.status.clone().unwrap_or_default();
    let was = condition::find(&current.conditions, DELETION_BLOCKED).map(|c| c.reason.clone());
    let mut next = current.clone();
    condition::upsert(
        &mut next.conditions,
        condition::new(
            DELETION_BLOCKED,
            true,
            blocker.reason(),
            message.clone(),
            job.metadata.generation,
            condition::now(),
        ),
    );
    if next != current {
        let namespace = job.namespace().ok_or(Error::MissingMetadata("namespace"))?;
        apply_status(job, &namespace, &next, ctx).await?;
    }
    if was.as_deref() != Some(blocker.reason()) {
        kit::publish(
            &ctx.recorder,
            job,
            EVENT_ACTION,
            Notice::warning(DELETION_BLOCKED, message.clone()),
        )
        .await;
    }
    warn!(reason = blocker.reason(), %message, "SlurmJob deletion blocked");
    Ok(())
}

/// A cycle through SlurmJob `name` and one of its dependees without a job id (`judged`), as
/// [`Dependents::cycle`] finds it among the waiting SlurmJobs; named only if each of its
/// SlurmJobs still waits for its dependencies as its current spec says (the cache: one edited
/// since it registered, or stopped by something else, closes no cycle). Empty: none.
fn dependency_cycle(
    data: &JobContext,
    namespace: &str,
    name: &str,
    judged: &BTreeMap<&str, Option<lifecycle::Dependee>>,
) -> Vec<String> {
    let unsubmitted: Vec<&str> = judged
        .iter()
        .filter(|(_, found)| found.as_ref().is_some_and(|found| found.job_id.is_none()))
        .map(|(dependee, _)| *dependee)
        .collect();
    if unsubmitted.is_empty() {
        return Vec::new();
    }
    let cycle = data.dependents.cycle(namespace, name, &unsubmitted);
    let waits = |member: &String| {
        data.jobs
            .get(&ObjectRef::new(member).within(namespace))
            .filter(|cached| cached.status_current())
            .and_then(|cached| cached.object().ok()?.status)
            .is_some_and(|status| dependents::is_dependency_wait(&status))
    };
    if cycle.iter().all(waits) {
        cycle
    } else {
        Vec::new()
    }
}

/// What `dependsOn` finds in the cached SlurmJob `d`, judged with the index now
/// ([`plan::dependee_phase`]). Decoded only for a dependee whose job is live (its status is
/// in the cache's packed form).
fn dependee(
    d: &CachedSlurmJob,
    state: &ClusterState,
    key: &TagKey,
    user: Option<&str>,
) -> lifecycle::Dependee {
    // An edit not reconciled yet may re-run it: its status is the previous run's until then,
    // and the dependent waits as for a job not submitted yet.
    if !d.status_current() {
        return lifecycle::Dependee::new(d.cluster_name(), None);
    }
    let found = lifecycle::Dependee::new(d.cluster_name(), d.job_id()).in_phase(d.phase());
    if d.job_id().is_none() || d.phase().is_none_or(|phase| phase.is_terminal()) {
        return found;
    }
    let uid = d.meta().uid.as_deref().unwrap_or_default();
    match d.object() {
        Ok(object) => {
            let status = object.status.unwrap_or_default();
            match plan::dependee_phase(uid, &status, state, Utc::now(), key, user) {
                Some(phase) => found.in_phase(Some(phase)),
                None => found.settling(),
            }
        }
        Err(error) => {
            // The cache's own encoding: a bug, not the object's fault. Waited on as not
            // submitted rather than its id handed over unchecked.
            warn!(name = %d.name_any(), error = %Chain(&error), "cannot decode a cached SlurmJob");
            lifecycle::Dependee::new(d.cluster_name(), None)
        }
    }
}

/// The requeue of a SlurmJob whose cluster has no free request slot ([`Error::ClusterBusy`]):
/// not a failure; soon, growing while it stays busy (`Backoffs::next_busy`).
fn busy(job: &impl ResourceExt, cluster: &str, ctx: &Context) -> Action {
    ctx.metrics.deferred(CONTROLLER);
    let delay = ctx.backoff.next_busy(&backoff_key(job));
    debug!(name = %job.name_any(), retry_in = ?delay, "SlurmCluster {cluster:?} has no free request slot");
    Action::requeue(delay)
}

/// What the output Pod of run `job_id` needs as the Pod cache shows it (`None`: the cache
/// cannot tell yet). A step that acts ([`output::PodStep::acts`]) is not taken on the cache's
/// word: the Pod is read from the API server and acted on (`act::ensure_output_pod`). A Pod the cache does
/// not show yet, or shows as it was before a change, comes with a watch event that reconciles
/// the SlurmJob again once the cache holds it; before the cache's first list is complete, the
/// Pod is read. Without this, every reconcile of a SlurmJob with `spec.output` read its Pod: at
/// an operator start, one read per such SlurmJob (issue 19).
/// Whether the listed Pod cache shows a Pod of the SlurmJob's name (whoever's).
fn cached_output_pod(job: &SlurmJob, namespace: &str, data: &JobContext) -> bool {
    kit::listed(&data.output_pods)
        && data
            .output_pods
            .get(&ObjectRef::new(&job.name_any()).within(namespace))
            .is_some()
}

fn known_output_pod_step(
    job: &SlurmJob,
    namespace: &str,
    job_id: i64,
    ended: bool,
    may_create: bool,
    data: &JobContext,
) -> Option<output::PodStep> {
    // Until the Pod watch's first list is complete, a missing Pod may only be not listed yet
    // (its list triggers reconciles before the cache shows it): read it.
    if !kit::listed(&data.output_pods) {
        return None;
    }
    let name = job.name_any();
    let known = data
        .output_pods
        .get(&ObjectRef::new(&name).within(namespace));
    let step = output::pod_step(
        known.as_deref().map(|pod| output::KnownPod {
            meta: &pod.metadata,
            phase: pod.phase,
        }),
        job.metadata.uid.as_deref(),
        job_id,
        ended,
        may_create,
        output::replace_after(
            data.output_replacements
                .of(job.metadata.uid.as_deref(), job_id),
        ),
        Utc::now(),
    );
    if step == output::PodStep::NotOurs {
        warn!(pod = %name, "a Pod with the SlurmJob's name exists and is not its output streamer; not touching it");
    }
    Some(step)
}

/// Server-side apply of the whole status with the operator's one field manager.
async fn apply_status(
    job: &SlurmJob,
    namespace: &str,
    status: &SlurmJobStatus,
    ctx: &Context,
) -> Result<(), Error> {
    // Checked again right before the write: a replica frozen mid-reconcile (and deposed
    // meanwhile) would otherwise write a status computed before the new leader's, e.g. put a
    // Completed job back to Submitted, which no later event corrects (tests/leader_election.rs).
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    // A status write is addressed by name (a real API server takes no uid precondition for
    // it): deleted and re-created under its name meanwhile, the new SlurmJob would get the
    // status of the first, job id included, and follow that job as its own. Once the cache
    // shows the new object, that write is not made.
    if let Some(was) = job.metadata.uid.as_deref()
        && let Some(now) = ctx
            .slurmjobs
            .uid_of(namespace, job.metadata.name.as_deref().unwrap_or_default())
        && now != was
    {
        let recorded = job.status.as_ref().and_then(|s| s.job_id);
        if let Some(job_id) = status.job_id.filter(|id| Some(*id) != recorded) {
            // Submitted by this very reconcile, for a SlurmJob that is gone: nothing follows
            // that job now (its tag names the uid gone), so the admin hears of it.
            warn!(
                job_id,
                was,
                now,
                "a Slurm job was submitted for a SlurmJob deleted and made again under its name \
                 meanwhile: no SlurmJob follows it (scancel it if it is not wanted)"
            );
        }
        return Err(Error::Replaced {
            was: was.to_owned(),
            now,
        });
    }
    let api: Api<WholeSlurmJob> = Api::namespaced(ctx.client.clone(), namespace);
    kit::apply_status(&api, &job.metadata, status)
        .await
        .map_err(Error::PatchStatus)?;
    debug!(phase = %status.phase, job_id = ?status.job_id, "status applied");
    Ok(())
}

/// The SlurmJobs a Slurm event concerns: the one whose uid a job's tag carries (looked up in
/// `by_uid`), or for a regained slurmrestd every SlurmJob of that SlurmCluster.
pub fn targets(
    event: &SlurmEvent,
    jobs: &Store<CachedSlurmJob>,
    by_uid: &UidIndex<CachedSlurmJob>,
    dependents: &Dependents,
) -> Vec<ObjectRef<CachedSlurmJob>> {
    match event {
        // The SlurmJob whose job changed, and those waiting for it (`dependsOn` judges a live
        // dependee with the index too: its own record read at last, or gone from slurmctld).
        SlurmEvent::JobChanged { owner, .. } | SlurmEvent::JobGone { owner, .. } => owner
            .as_ref()
            .and_then(|owner| by_uid.get(owner.uid()))
            .map(|job| {
                let namespace = job.meta().namespace.as_deref().unwrap_or_default();
                let mut woken = vec![ObjectRef::from_obj(job.as_ref())];
                woken.extend(
                    dependents
                        .of(namespace, &job.name_any())
                        .iter()
                        .map(|dependent| ObjectRef::new(dependent).within(namespace)),
                );
                woken
            })
            .unwrap_or_default(),
        SlurmEvent::HealthChanged { cluster, up: true } => jobs
            .state()
            .iter()
            .filter(|j| j.cluster_name() == cluster.name)
            .map(|j| ObjectRef::from_obj(j.as_ref()))
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether a watch event of a SlurmJob changed what its reconcile reacts to, against the same
/// SlurmJob as the cache held it (`None`: new to the cache). Our own status writes change none
/// of it but a change of phase or job id: one more reconcile per transition (it finds nothing to
/// write), so that a status another writer put back (a replica frozen mid-reconcile and deposed
/// meanwhile) is corrected at once instead of never (tests/leader_election.rs). The skip-cancel
/// annotation lets a blocked deletion go: it triggers too.
fn reacts_to(cached: Option<&CachedSlurmJob>, job: &CachedSlurmJob) -> bool {
    let Some(cached) = cached else {
        return true;
    };
    fn skip_cancel(job: &CachedSlurmJob) -> Option<&String> {
        job.annotations().get(SKIP_CANCEL_ANNOTATION)
    }
    cached.meta().generation != job.meta().generation
        || cached.finalizers() != job.finalizers()
        || skip_cancel(cached) != skip_cancel(job)
        || (cached.phase(), cached.job_id()) != (job.phase(), job.job_id())
}

/// The SlurmJobs in `store` for which `select` holds, as reconcile triggers.
fn jobs_where(
    store: &Store<CachedSlurmJob>,
    select: impl Fn(&CachedSlurmJob) -> bool,
) -> Vec<ObjectRef<CachedSlurmJob>> {
    store
        .state()
        .iter()
        .filter(|job| select(job))
        .map(|job| ObjectRef::from_obj(job.as_ref()))
        .collect()
}

/// What a change of the SlurmJob cache sets going beyond it: the SlurmJobs waiting for the one
/// that changed are woken (`wake`), and what this process remembers of a SlurmJob that is gone
/// is forgotten (by the Delete event, or by the relist that no longer lists it). `scope`: the
/// one namespace this controller's cache watches, if one (the retry counts are shared by the
/// controllers of every watched namespace: a relist forgets only its own namespace's).
fn after_cache_change(
    waiters: Arc<Dependents>,
    wake: UnboundedSender<ObjectRef<CachedSlurmJob>>,
    cached: Store<CachedSlurmJob>,
    remembered: Remembered,
    scope: Option<String>,
) -> impl Fn(kit::Applied<'_, CachedSlurmJob>) {
    move |applied| {
        match applied {
            kit::Applied::Object {
                object, now: None, ..
            } => {
                if let Some(uid) = object.meta().uid.as_deref() {
                    remembered.forget_uid(uid);
                }
                remembered.backoff.reset(&backoff_key(object));
            }
            kit::Applied::Object { .. } => {}
            kit::Applied::Relisted => {
                // One deleted while the watch was away has no Delete event of its own.
                waiters.retain(|ns, name| cached.get(&ObjectRef::new(name).within(ns)).is_some());
                let jobs = cached.state();
                let live: std::collections::HashSet<&str> = jobs
                    .iter()
                    .filter_map(|job| job.meta().uid.as_deref())
                    .collect();
                remembered.keep_only(|uid| live.contains(uid), std::time::Instant::now());
                remembered.backoff.keep_only(CONTROLLER, |namespace, name| {
                    scope.as_deref().is_some_and(|watched| watched != namespace)
                        || cached
                            .get(&ObjectRef::new(name).within(namespace))
                            .is_some()
                });
            }
        }
        for dependent in waiters.woken_by(applied) {
            // Closed only when the controller stops.
            let _ = wake.unbounded_send(dependent);
        }
    }
}

/// What the namespace cache keeps of a namespace: what the SlurmJob controller reads, its
/// labels (access by label) and its deletion (orphan Warnings of a namespace being deleted).
fn namespace_for_cache(ns: &mut PartialObjectMeta<Namespace>) {
    kit::trim_for_cache(ns);
    ns.metadata.annotations = None;
}

/// The watch of the output streamer Pods (of `namespace`, else of all): [`kit::pod_watch`], in
/// pages of [`LIST_PAGE`] (a tenant can label Pods of their own).
pub fn output_pod_watch(
    client: kube::Client,
    namespace: Option<&str>,
) -> impl futures::Stream<Item = watcher::Result<watcher::Event<PodMetaPhase>>> + Send + 'static {
    kit::pod_watch(client, namespace, output::LABEL, LIST_PAGE)
}

/// The running SlurmJob controller: its store (ready once the first list is in) and the future
/// that drives it until `shutdown` is cancelled and running reconciles finish.
pub fn run(
    ctx: Context,
    output_image: String,
    namespace: Option<&str>,
    shutdown: CancellationToken,
) -> (
    Store<CachedSlurmJob>,
    impl Future<Output = ()> + Send + 'static,
) {
    let client = ctx.client.clone();
    let (store, writer) = reflector::store();
    ctx.slurmjobs.add(store.clone(), holding_cluster);
    let jobs_api: Api<CachedSlurmJob> = kit::scoped_api(client.clone(), namespace);
    // Paged consistent lists, not one any-semantic list from the watch cache (also what lets a
    // relist forget what this process remembers of the SlurmJobs it no longer lists,
    // `after_cache_change`: a stale list could leave out a live one, and forgetting its submit
    // would let a second one go): with 10 000
    // SlurmJobs that one list is tens of MB of JSON decoded at once, and it set the process's
    // peak memory (hack/bench.sh, "the operator binary"). A page's JSON is read whole before its
    // objects are decoded into the cached form: [`LIST_PAGE`] of them bounds what a list costs
    // however large tenants make their SlurmJobs.
    let (wake, woken) = futures::channel::mpsc::unbounded();
    let dependents = Arc::new(Dependents::default());
    let remembered = Remembered {
        finalizer_writes: Arc::clone(&ctx.finalizer_writes),
        backoff: Arc::clone(&ctx.backoff),
        ..Remembered::default()
    };
    let (by_uid, jobs) = kit::reflect_changes(
        ctx.refused.reporting(
            watcher(jobs_api, watcher::Config::default().page_size(LIST_PAGE)).default_backoff(),
            namespace,
            super::SLURMJOBS,
        ),
        writer,
        reacts_to,
        after_cache_change(
            Arc::clone(&dependents),
            wake.clone(),
            store.clone(),
            remembered.clone(),
            namespace.map(str::to_owned),
        ),
    );
    let waiting = Arc::clone(&dependents);
    let slurm = kit::slurm_triggers(
        CONTROLLER,
        ctx.events.subscribe(),
        store.clone(),
        move |event, jobs| targets(event, jobs, &by_uid, &waiting),
    );
    let acting = ctx.clone();
    let gained = ctx
        .leadership
        .gained()
        .inspect(move |()| acting.act_from_now());

    // What access is decided from: the SlurmClusters (an edit of spec.access reconciles the
    // SlurmJobs that name the cluster) and the namespaces' labels (a relabelled namespace
    // reconciles its SlurmJobs). Metadata only for namespaces.
    let (slurm_clusters, clusters_writer) = reflector::store();
    let clusters = watcher(
        Api::<SlurmCluster>::all(ctx.client.clone()),
        watcher::Config::default().any_semantic(),
    )
    .default_backoff()
    .modify(kit::trim_for_cache)
    .reflect(clusters_writer)
    .touched_after_relist(slurm_clusters.clone())
    .predicate_filter(predicates::generation, Default::default());
    let (namespaces, namespaces_writer) = reflector::store();
    let namespace_changes = watcher(
        Api::<PartialObjectMeta<Namespace>>::all(ctx.client.clone()),
        watcher::Config::default().any_semantic(),
    )
    .default_backoff()
    .modify(namespace_for_cache)
    .reflect(namespaces_writer)
    .touched_after_relist(namespaces.clone())
    .predicate_filter(predicates::labels, Default::default());
    let by_cluster = store.clone();
    let by_namespace = store.clone();
    let (debounce, concurrency) = (ctx.slurmjob_debounce, ctx.reconcile_concurrency);
    // The output streamer Pods, kept in a cache the reconciles read.
    let (output_pods, pods_writer) = reflector::store();
    let pod_changes = output_pod_watch(client, namespace)
        .default_backoff()
        .modify(|pod| output::trim_for_cache(&mut pod.metadata))
        .reflect(pods_writer)
        .touched_after_relist(output_pods.clone());

    let data = Arc::new(JobContext {
        ctx,
        jobs: store.clone(),
        submissions: remembered.submissions,
        status_writes: remembered.status_writes,
        taken_on: remembered.taken_on,
        told: remembered.told,
        output_image,
        output_pods,
        output_replacements: Arc::default(),
        slurm_clusters,
        namespaces,
        wake,
        dependents,
    });
    let driver = Controller::for_stream(jobs, store.clone())
        .with_config(
            controller::Config::default()
                .debounce(debounce)
                .concurrency(concurrency),
        )
        .owns_stream(pod_changes)
        .watches_stream(clusters, move |cluster: SlurmCluster| {
            let name = cluster.name_any();
            jobs_where(&by_cluster, |job| job.cluster_name() == name)
        })
        .watches_stream(
            namespace_changes,
            move |ns: PartialObjectMeta<Namespace>| {
                let name = ns.name_any();
                jobs_where(&by_namespace, |job| {
                    job.meta().namespace.as_deref() == Some(name.as_str())
                })
            },
        )
        .reconcile_on(slurm)
        .reconcile_on(woken)
        .reconcile_all_on(gained)
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile_cached, error_policy, data)
        .for_each(|result| kit::log_outcome(CONTROLLER, result));
    (store, driver)
}

#[cfg(test)]
mod tests;
