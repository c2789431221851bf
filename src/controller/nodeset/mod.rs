//! The SlurmNodeSet controller: slurmd pods that join a SlurmCluster as dynamic Slurm nodes, scaled out by
//! creating pods and scaled in only after Slurm drained the chosen nodes.
//!
//! A thin driver over pure steps:
//!
//! 0. [`admission`]: the SlurmCluster must exist and list the set's namespace in
//!    `spec.nodeSetNamespaces`, and the set's name must make valid node names; otherwise
//!    `Ready=False` with the reason (`ClusterNotFound`, `NodeSetNotAllowed`, `InvalidName`) and
//!    nothing else is done: no pod created or deleted, no node drained or resumed;
//! 1. list the set's pods (label `slurm.rs/nodeset`, owned by this SlurmNodeSet) from the API server —
//!    not from a cache, so a pod just created is never created twice — a page at a time
//!    ([`list_pods`]);
//! 2. take the SlurmCluster's index snapshot from the registry (none when the SlurmCluster has no client);
//! 3. [`plan::plan`]: what to create, drain, resume, delete, forget (see its docs for the
//!    fail-closed rules and drain ownership);
//! 4. carry the actions out in order: Kubernetes through the API, Slurm through the facade
//!    ([`apply_slurm`], also used by the real-Slurm test); a drain, a resume, a node record's
//!    removal and a pod's delete that rests on its node's state first read the node again
//!    and go only if it is still the set's and still calls for them ([`slurm_allows`]); a
//!    record's removal also first asks the API server for a pod of the node's name (one that
//!    lost the set's label is not listed but still runs its slurmd: `PodLabelMissing`); a failed
//!    action skips the later actions on the same pod/node and fails the reconcile after the
//!    others ran;
//! 5. the PodDisruptionBudget (`minAvailable: 2147483647` over `slurm.rs/busy=true`): created when
//!    absent, applied when the set's own is not as wanted, never written over one the set does
//!    not control; and server-side apply of the status when it changed.
//!
//! Deletion, behind the `slurm.rs/cleanup` finalizer ([`cleanup`]): the set leaves as a scale-in
//! to 0 does (each node drained, its pod deleted once drained or at `scaleIn.drainTimeout`),
//! then its node records are removed from Slurm, and the finalizer goes when the plan finds
//! nothing of the set left ([`plan::NodeSetPlan::remaining`]). It goes at once, draining
//! nothing, when the set is not admitted (no SlurmCluster, namespace not allowed: its pods then
//! go by garbage collection at once, ending their jobs) or is deleted with `--cascade=orphan`
//! (its pods stay, and no set adopts them: a pod without the set's controller reference only
//! holds its ordinal); and at the deletion deadline (`--deletion-deadline`) with a Warning
//! naming what is left (the pods then go by garbage collection, ending their jobs).
//!
//! Triggers: the SlurmNodeSet (generation only, so `kubectl scale`, template edits and the
//! deletion but not our status writes), its pods, its SlurmCluster's spec (generation:
//! `nodeSetNamespaces`), the pollers' events (`NodeChanged`/`NodeGone` of a node named like one
//! of its pods, `HealthChanged` of its SlurmCluster), and a Kubernetes node cordoned,
//! uncordoned, added or deleted, or the Node watch serving again (every set:
//! [`cordons::Cordons::changes`]). While it waits for a drain it also requeues itself every
//! [`WAIT_RESYNC`].

pub mod cordons;
pub mod plan;
pub mod pods;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, predicates, reflector, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use self::plan::{Action, Confirm, DeleteWhy, Input, Leaving, SlurmView, ViewState};
use super::Context;
use super::cached_writes::CACHE_LAG_RETRY;
use super::kit::{self, Backoffs, Notice};
use crate::controller::kit::TouchedAfterRelist as _;
use crate::crd::FIELD_MANAGER;
use crate::crd::pod_meta::PodMeta;
use crate::crd::{SlurmCluster, SlurmNodeSet, SlurmNodeSetStatus, condition};
use crate::error_chain::Chain;
use crate::slurm::node_owner::NodeOwner;
use crate::slurm::types::Node;
use crate::slurm::{SlurmClient, SlurmError};
use crate::state::index::SlurmEvent;

/// The controller's name in metrics and logs.
pub const CONTROLLER: &str = "nodeset";
/// Event `action` for everything this controller reports.
const EVENT_ACTION: &str = "Reconcile";

/// Requeue while a node drains or Slurm is not trusted yet.
pub const WAIT_RESYNC: Duration = Duration::from_secs(15);
/// How old the last read of the Lease may be before a drain, resume, node removal or pod delete
/// of the same round reads it again: well inside the default Lease (15 s).
pub const LEASE_RECHECK: Duration = Duration::from_secs(5);
/// Pods per list page of the pod watch and of each round's list ([`list_pods`]). A page is
/// decoded whole: anyone who may create Pods can put the label on theirs, with up to 256 KiB
/// of annotations each, so kube's default of 500 could hold ~128 MiB at once (an unpaged list,
/// all of them); 50 hold ~13 MiB.
const POD_LIST_PAGE: u32 = 50;
/// Requeue of a settled set.
pub const RESYNC: Duration = Duration::from_secs(120);
/// Requeue while the set's SlurmCluster is being deleted (its removal triggers nothing).
const CLUSTER_GOING_RESYNC: Duration = Duration::from_secs(5);
/// Status condition listing the nodes the set waits for.
pub const CONDITION_DRAINING: &str = "Draining";
/// Status condition: whether `status.slurm` comes from a fresh view of Slurm. When it is False
/// the counts are the last ones seen, as of its `lastTransitionTime` at the latest.
pub const CONDITION_SLURM_SYNCED: &str = "SlurmSynced";
/// `Ready=False`: every pod is available, but Slurm runs no job on some of their nodes.
pub const REASON_SLURM_NODES_NOT_USABLE: &str = "SlurmNodesNotUsable";
/// Status condition: whether every registered node is in every partition of
/// `spec.slurm.partitions` (present only when that list is set).
pub const CONDITION_PARTITIONS: &str = "Partitions";
/// Status condition: whether every Slurm node named like the set's pods is the set's own (see
/// `plan`'s node ownership); False with reason `NodeNameConflict` names the others.
pub const CONDITION_NODES_OWNED: &str = "NodeNamesOwned";
/// Status condition, as a Deployment's: `True` while the last round's actions did not all go
/// through (a pod not created or deleted, a node not drained, the PodDisruptionBudget not
/// applied), with the failure's category as reason and what failed as message; absent once a
/// round goes through. The round is retried with backoff meanwhile.
pub const CONDITION_REPLICA_FAILURE: &str = "ReplicaFailure";
/// The most characters of an error a condition or Event repeats.
const MAX_FAILURE_MESSAGE: usize = 1024;

/// Why the last round's actions did not all go through ([`CONDITION_REPLICA_FAILURE`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionFailure {
    pub reason: &'static str,
    pub message: String,
}

impl ActionFailure {
    /// The first of `failed` errors of a round, and how many more there were.
    fn of(first: &Error, failed: usize) -> Self {
        let mut message: String = Chain(first)
            .to_string()
            .chars()
            .take(MAX_FAILURE_MESSAGE)
            .collect();
        if failed > 1 {
            message.push_str(&format!(" (and {} more failed actions)", failed - 1));
        }
        message.push_str("; retried with backoff");
        Self {
            reason: first.category(),
            message,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the SlurmNodeSet has no {0}")]
    MissingMetadata(&'static str),
    #[error("cannot read SlurmCluster {name}")]
    GetCluster {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot list the SlurmNodeSet's pods")]
    ListPods(#[source] kube::Error),
    #[error("cannot create pod {name}")]
    CreatePod {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot delete pod {name}")]
    DeletePod {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot patch pod {name}")]
    PatchPod {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("Slurm refused an action on node {node}")]
    SlurmAction {
        node: String,
        #[source]
        source: SlurmError,
    },
    #[error("cannot apply the PodDisruptionBudget")]
    ApplyPdb(#[source] kube::Error),
    #[error(
        "PodDisruptionBudget {0} exists and is not this SlurmNodeSet's (no controller reference to \
         it): the set's busy nodes are not protected from evictions until it is renamed or deleted"
    )]
    PdbNotOwned(String),
    #[error(
        "pod {0} exists and is not this SlurmNodeSet's (not its controller, or not labelled \
         slurm.rs/nodeset): the set neither gives its name to a pod of its own nor removes the \
         Slurm node of that name until that pod is renamed or deleted"
    )]
    PodNameTaken(String),
    #[error(
        "pod {pod} is this SlurmNodeSet's (its controller) but lacks the label \
         slurm.rs/nodeset={set}: the set cannot see it, so it neither counts, drains, updates \
         nor replaces it, and keeps its Slurm node; restore the label (kubectl label pod {pod} \
         slurm.rs/nodeset={set}) or delete the pod"
    )]
    PodLabelMissing { pod: String, set: String },
    #[error("cannot read pod {name}")]
    GetPod {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot apply the SlurmNodeSet's status")]
    PatchStatus(#[source] kube::Error),
    /// All request slots of the SlurmCluster's slurmrestd connection are taken (its requests
    /// are slow or hang): not a failure; requeued soon without holding a reconcile slot.
    #[error("SlurmCluster {0:?} has no free request slot")]
    ClusterBusy(String),
    #[error("cannot add the finalizer")]
    AddFinalizer(#[source] kube::Error),
    #[error("cannot remove the finalizer")]
    RemoveFinalizer(#[source] kube::Error),
    /// The Lease is not this replica's any more (read again right before a drain, a resume, a
    /// node's removal or a pod's delete; or lost before the status write): nothing more is done,
    /// the leader acts.
    #[error("this replica no longer holds the leader Lease: the set's round stopped")]
    NotLeader,
    /// Not a fault of the reconcile: the deletion waits for the set's nodes to drain and go
    /// (an error keeps the finalizer).
    #[error("the deletion waits for the set's pods and Slurm nodes to go; back in {retry:?}")]
    DeletionWaits {
        /// How many are left; `None` without a fresh view of Slurm.
        remaining: Option<usize>,
        retry: Duration,
    },
}

impl Error {
    pub fn category(&self) -> &'static str {
        match self {
            Self::MissingMetadata(_) => "MissingMetadata",
            Self::GetCluster { .. } => "GetClusterFailed",
            Self::ListPods(_) => "ListPodsFailed",
            Self::CreatePod { .. } => "CreatePodFailed",
            Self::DeletePod { .. } => "DeletePodFailed",
            Self::PatchPod { .. } => "PatchPodFailed",
            Self::SlurmAction { source, .. } => source.category(),
            Self::ApplyPdb(_) => "ApplyPodDisruptionBudgetFailed",
            Self::PdbNotOwned(_) => "PodDisruptionBudgetNotOwned",
            Self::PodNameTaken(_) => "PodNameTaken",
            Self::PodLabelMissing { .. } => "PodLabelMissing",
            Self::GetPod { .. } => "GetPodFailed",
            Self::PatchStatus(_) => "PatchStatusFailed",
            Self::ClusterBusy(_) => "ClusterBusy",
            Self::AddFinalizer(_) => "AddFinalizerFailed",
            Self::RemoveFinalizer(_) => "RemoveFinalizerFailed",
            Self::DeletionWaits { .. } => "DeletionWaits",
            Self::NotLeader => "NotLeader",
        }
    }
}

fn backoff_key(nodeset: &SlurmNodeSet) -> String {
    Backoffs::key(
        CONTROLLER,
        nodeset.namespace().as_deref().unwrap_or_default(),
        &nodeset.name_any(),
    )
}

/// What a Slurm action came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlurmOutcome {
    Done,
    /// Nothing to do any more (already resumed, node already gone).
    AlreadyDone,
    /// Slurm refuses for now (node busy): try again later.
    NotYet,
    /// The node changed since the plan's view (someone else's drain or FAIL, our drain already
    /// there, a slurmd registered): nothing done; the rest of the plan for it waits for a
    /// plan from a view that shows the change.
    Superseded,
}

/// Whether Slurm, asked now, still calls for `action`, decided on a view up to
/// [`plan::MAX_INDEX_AGE`] old. First of all the node must still be the set's (`owner`, as
/// [`plan::is_ours`]): within that age its name may have been deleted and registered again by
/// another owner (another namespace's set, a hand-started slurmd), whose node the set must never
/// drain, resume, delete or lose a pod over. Then: a drain only of a node no one drained or
/// FAILed since (an admin's is neither overwritten nor, later, cleared by our resume), a resume
/// only of our drain still resumable, the removal of a node record on ownership alone, the
/// delete of a pod ([`plan::Confirm`]) whose node the view lacked only while slurmctld has no
/// such node (its slurmd may have registered since, and run a job), and of one whose node the
/// view showed drained only while it still is (a scale back out may have resumed it since, and
/// a job started there). Other actions need no question. `Ok(None)` when the node is gone (a
/// pod's delete may go). (Slurm has no compare-and-set for node updates: what remains is the
/// moment between this read and the action.)
pub async fn slurm_allows(
    client: &SlurmClient,
    action: &Action,
    owner: &NodeOwner,
) -> Result<Option<bool>, SlurmError> {
    let (node, still): (&str, fn(&Node) -> bool) = match action {
        Action::Drain { node, .. } => (node, |n| {
            plan::drain_owner(n) == plan::DrainOwner::NotDrained
        }),
        Action::Resume { node } => (node, plan::may_resume),
        // Slurm itself refuses the removal of a node that runs a job (`NodeBusy`).
        Action::DeleteNodeRecord { node } => (node, |_| true),
        Action::DeletePod { name, confirm, .. } => match confirm {
            Confirm::Nothing => return Ok(Some(true)),
            Confirm::NodeAbsent => (name, |_| false),
            // Slurm's own state: a running job makes the node ALLOCATED or MIXED.
            Confirm::NodeDrained => (name, |n| plan::is_drained(n, None)),
            Confirm::OurDrain => (name, |n| plan::drain_owner(n) == plan::DrainOwner::Us),
        },
        _ => return Ok(Some(true)),
    };
    match client.node(node).await {
        Ok(current) => Ok(Some(plan::is_ours(&current, owner) && still(&current))),
        Err(SlurmError::NotFound { .. }) => Ok(None),
        Err(error) => Err(error),
    }
}

/// Carry out one Slurm action of a plan for the set `owner`, if Slurm still calls for it
/// ([`slurm_allows`]). Non-Slurm actions are `Ok(AlreadyDone)`.
pub async fn apply_slurm(
    client: &SlurmClient,
    action: &Action,
    owner: &NodeOwner,
) -> Result<SlurmOutcome, SlurmError> {
    if matches!(
        action,
        Action::Drain { .. } | Action::Resume { .. } | Action::DeleteNodeRecord { .. }
    ) {
        match slurm_allows(client, action, owner).await? {
            Some(true) => {}
            Some(false) => return Ok(SlurmOutcome::Superseded),
            None => return Ok(SlurmOutcome::AlreadyDone),
        }
    }
    let result = match action {
        Action::Drain { node, reason } => client.drain_node(node, reason).await,
        Action::Resume { node } => client.resume_node(node).await,
        Action::DeleteNodeRecord { node } => client.delete_node(node).await,
        _ => return Ok(SlurmOutcome::AlreadyDone),
    };
    match result {
        Ok(()) => Ok(SlurmOutcome::Done),
        Err(SlurmError::NotFound { .. }) => Ok(SlurmOutcome::AlreadyDone),
        // RESUME of a node no longer drained.
        Err(SlurmError::InvalidNodeState { .. }) if matches!(action, Action::Resume { .. }) => {
            Ok(SlurmOutcome::AlreadyDone)
        }
        Err(SlurmError::NodeBusy { .. }) if matches!(action, Action::DeleteNodeRecord { .. }) => {
            Ok(SlurmOutcome::NotYet)
        }
        Err(error) => Err(error),
    }
}

/// Reconcile one SlurmNodeSet behind the finalizer, in a tracing span with its name and
/// namespace.
pub async fn reconcile(
    nodeset: Arc<SlurmNodeSet>,
    ctx: Arc<Context>,
) -> Result<controller::Action, Error> {
    let work = async {
        let result = reconcile_inner(Arc::clone(&nodeset), &ctx).await;
        if result.is_ok() {
            ctx.backoff.reset(&backoff_key(&nodeset));
        }
        result
    };
    kit::reconcile_as_leader(CONTROLLER, nodeset.as_ref(), &ctx, work).await
}

async fn reconcile_inner(
    nodeset: Arc<SlurmNodeSet>,
    ctx: &Context,
) -> Result<controller::Action, Error> {
    let namespace = nodeset
        .namespace()
        .ok_or(Error::MissingMetadata("namespace"))?;
    let api: Api<SlurmNodeSet> = Api::namespaced(ctx.client.clone(), &namespace);
    // A set without the finalizer (new, or made before the operator had one): add it, then go
    // on with the patch's answer. The generation-only trigger would not bring the set back for
    // a finalizer change, as kube's helper expects.
    let nodeset = if kit::lacks_finalizer(nodeset.as_ref()) {
        if ctx
            .finalizer_writes
            .lags_behind(nodeset.as_ref(), Instant::now())
        {
            // This process gave this very version the finalizer a moment ago, and something
            // else woke the set first (the pod that reconcile made): a second patch would be
            // refused. The set's own watch event is filtered out, so come back for it.
            debug!(name = %nodeset.name_any(), "the cache does not show our finalizer yet");
            return Ok(controller::Action::requeue(CACHE_LAG_RETRY));
        }
        let name = nodeset
            .meta()
            .name
            .as_deref()
            .ok_or(Error::MissingMetadata("name"))?;
        let patched = kit::add_finalizer(&api, name, nodeset.as_ref())
            .await
            .map_err(Error::AddFinalizer)?;
        ctx.finalizer_writes
            .patched(nodeset.as_ref(), Instant::now());
        Arc::new(patched)
    } else {
        ctx.finalizer_writes.shown(nodeset.as_ref());
        nodeset
    };
    kit::with_finalizer(
        &api,
        nodeset,
        |set| async move { apply(&set, ctx).await },
        |set| async move { cleanup(&set, ctx).await },
    )
    .await
}

kit::finalizer_failure!(Error);

/// Retry with a per-SlurmNodeSet exponential backoff.
pub fn error_policy(
    nodeset: Arc<SlurmNodeSet>,
    error: &Error,
    ctx: Arc<Context>,
) -> controller::Action {
    if let Error::ClusterBusy(cluster) = error {
        ctx.metrics.deferred(CONTROLLER);
        let delay = ctx.backoff.next_busy(&backoff_key(&nodeset));
        debug!(name = %nodeset.name_any(), retry_in = ?delay, "SlurmCluster {cluster:?} has no free request slot");
        return controller::Action::requeue(delay);
    }
    if let Error::NotLeader = error {
        // Gaining the Lease again reconciles every set. A leader whose Lease read failed (the
        // API server restarting) looks again soon: nothing else may bring the set back.
        return if ctx.leadership.is_leader() {
            controller::Action::requeue(WAIT_RESYNC)
        } else {
            controller::Action::await_change()
        };
    }
    if let Error::DeletionWaits { retry, .. } = error {
        // Not a failure: said in the status (`Draining`), and the delay was chosen with the
        // deadline.
        debug!(name = %nodeset.name_any(), retry_in = ?retry, "SlurmNodeSet deletion waits");
        return controller::Action::requeue(*retry);
    }
    ctx.metrics.reconcile_failed(CONTROLLER, error.category());
    let delay = ctx.backoff.next(&backoff_key(&nodeset));
    warn!(
        name = %nodeset.name_any(),
        namespace = nodeset.namespace().unwrap_or_default(),
        reason = error.category(), error = %Chain(error), retry_in = ?delay,
        "SlurmNodeSet reconcile failed"
    );
    controller::Action::requeue(delay)
}

/// Why the operator does nothing for a SlurmNodeSet: a stable reason and a message saying what
/// to change. `Ready=False` carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

/// Whether the operator may act for the SlurmNodeSet `name` in `namespace`, and its node-name
/// prefix if so. `cluster` is its SlurmCluster, `None` when it does not exist (`ClusterNotFound`:
/// nobody allowed anything). Pure.
pub fn admission(
    namespace: &str,
    name: &str,
    cluster_name: &str,
    cluster: Option<&SlurmCluster>,
) -> Result<String, Refusal> {
    let Some(cluster) = cluster else {
        return Err(Refusal {
            reason: "ClusterNotFound",
            message: format!(
                "SlurmCluster {cluster_name:?} does not exist; the SlurmNodeSet waits for it"
            ),
        });
    };
    if !cluster
        .spec
        .node_set_namespaces
        .iter()
        .any(|n| n == namespace)
    {
        return Err(Refusal {
            reason: "NodeSetNotAllowed",
            message: format!(
                "namespace {namespace:?} may not run SlurmNodeSets for SlurmCluster \
                 {cluster_name:?}: it is not in the SlurmCluster's spec.nodeSetNamespaces; \
                 ask the platform admin to add it there"
            ),
        });
    }
    pods::node_prefix(namespace, name).ok_or_else(|| Refusal {
        reason: "InvalidName",
        message: format!(
            "the name {name:?} cannot make Slurm node names (<name>-<namespace tag>-<ordinal>, \
             a DNS label): use lowercase letters, digits and '-', at most {} characters",
            pods::MAX_SET_NAME
        ),
    })
}

/// The refusal of a set whose node names another set of its SlurmCluster makes too.
pub const REASON_NODE_NAMES_TAKEN: &str = "NodeNamesTaken";

/// Whether another SlurmNodeSet of the same SlurmCluster (among `others`) makes the node names
/// `prefix` stands for (`<prefix>-<ordinal>`): their namespaces' tags collide. Only sets the
/// SlurmCluster admits count (`admission`: a set refused makes no node). Asked only for a set
/// that has no pod yet. One that has pods (its status counts them) keeps the names whenever it
/// was made: a set made earlier but admitted only later (its namespace added to the
/// SlurmCluster's since) would otherwise take them from under it, and both would make pods of
/// one name for as long as they exist. Else the first made keeps them (then namespace, then
/// name: both sides judge alike); the other is refused, rather than racing it for each name.
/// Pure.
pub fn names_taken(
    nodeset: &SlurmNodeSet,
    prefix: &str,
    cluster: Option<&SlurmCluster>,
    others: &[Arc<SlurmNodeSet>],
) -> Option<Refusal> {
    // Sets with pods first, then by age.
    let key = |set: &SlurmNodeSet, has_pods: bool| {
        (
            !has_pods,
            set.metadata.creation_timestamp.clone().map(|t| t.0),
            set.metadata.namespace.clone().unwrap_or_default(),
            set.metadata.name.clone().unwrap_or_default(),
        )
    };
    let cluster_name = &nodeset.spec.cluster_name;
    let ours = key(nodeset, false);
    let (no_pods, _, namespace, name) = others
        .iter()
        .filter(|other| {
            let namespace = other.metadata.namespace.as_deref().unwrap_or_default();
            let name = other.metadata.name.as_deref().unwrap_or_default();
            other.spec.cluster_name == *cluster_name
                && (namespace, name)
                    != (
                        nodeset.metadata.namespace.as_deref().unwrap_or_default(),
                        nodeset.metadata.name.as_deref().unwrap_or_default(),
                    )
                && admission(namespace, name, cluster_name, cluster).as_deref() == Ok(prefix)
        })
        .map(|other| {
            key(
                other,
                other
                    .status
                    .as_ref()
                    .is_some_and(|status| status.replicas > 0),
            )
        })
        .filter(|other| *other < ours)
        .min()?;
    let which = if no_pods {
        "made earlier"
    } else {
        "which has pods"
    };
    Some(Refusal {
        reason: REASON_NODE_NAMES_TAKEN,
        message: format!(
            "SlurmNodeSet {namespace}/{name}, {which}, names its Slurm nodes of SlurmCluster \
             {cluster_name:?} {prefix}-<ordinal> too (the two namespaces' tags collide): rename \
             this set (its pods would take the other's node names)"
        ),
    })
}

/// The finalizer the API server puts on an object deleted with `--cascade=orphan`: the garbage
/// collector is to keep its dependents (here the pods).
const ORPHAN_FINALIZER: &str = "orphan";
/// The Event of a deletion that lets go while pods or nodes of the set are left.
pub const REASON_DELETION_DEADLINE: &str = "DeletionDeadlineExceeded";
/// At most this many names of what is left in that Event.
const MAX_NAMED_LEFT: usize = 20;

/// What one round of a set came to.
enum Round {
    /// Not admitted: nothing was done.
    Refused(Refusal),
    /// Planned and carried out.
    Acted {
        requeue: Duration,
        /// [`plan::NodeSetPlan::remaining`].
        remaining: Option<Vec<String>>,
    },
}

/// The set while it lives.
async fn apply(nodeset: &SlurmNodeSet, ctx: &Context) -> Result<controller::Action, Error> {
    match round(nodeset, ctx, false).await? {
        Round::Refused(refusal) => {
            let namespace = nodeset.namespace().unwrap_or_default();
            let taken = refusal.reason == REASON_NODE_NAMES_TAKEN;
            let action = refuse(nodeset, &namespace, refusal, ctx).await?;
            // The other set's deletion does not trigger this one: it looks again now and then.
            Ok(if taken {
                controller::Action::requeue(RESYNC)
            } else {
                action
            })
        }
        Round::Acted { requeue, .. } => Ok(controller::Action::requeue(requeue)),
    }
}

/// The set being deleted: `Ok` lets the finalizer go (see the module docs).
async fn cleanup(nodeset: &SlurmNodeSet, ctx: &Context) -> Result<controller::Action, Error> {
    let result = cleanup_round(nodeset, ctx).await;
    if result.is_ok() {
        // The set goes: its drain-stuck gauge with it.
        let namespace = nodeset.namespace().unwrap_or_default();
        ctx.metrics
            .nodeset_draining_since(&namespace, &nodeset.name_any(), None);
    }
    result
}

async fn cleanup_round(nodeset: &SlurmNodeSet, ctx: &Context) -> Result<controller::Action, Error> {
    let done = controller::Action::await_change();
    if nodeset.finalizers().iter().any(|f| f == ORPHAN_FINALIZER) {
        info!(
            "SlurmNodeSet deleted with its pods orphaned: its pods and Slurm nodes are left alone"
        );
        return Ok(done);
    }
    let deleted_at = nodeset
        .metadata
        .deletion_timestamp
        .as_ref()
        .and_then(crate::crd::time::to_utc);
    let release_at = kit::release_at(deleted_at, ctx.acting_since(), ctx.deletion_deadline);
    let (requeue, remaining) = match round(nodeset, ctx, true).await {
        Ok(Round::Refused(refusal)) => {
            info!(
                reason = refusal.reason,
                "SlurmNodeSet deleted while not admitted: nothing of it is touched"
            );
            return Ok(done);
        }
        Ok(Round::Acted { requeue, remaining }) => (requeue, remaining),
        // Not this replica's to decide: the leader's own deadline counts from its gain.
        Err(Error::NotLeader) => return Err(Error::NotLeader),
        // A round that keeps failing (Slurm refusing a record's removal, a webhook refusing a
        // pod's deletion) does not hold the set past the deadline either.
        Err(error) if deletion_wait(release_at, Utc::now(), WAIT_RESYNC).is_none() => {
            let failed: String = Chain(&error)
                .to_string()
                .chars()
                .take(MAX_FAILURE_MESSAGE)
                .collect();
            let note = format!("{} The last round failed: {failed}", deadline_note(None));
            return release_at_deadline(nodeset, note, ctx).await;
        }
        Err(error) => return Err(error),
    };
    if remaining.as_ref().is_some_and(Vec::is_empty) {
        info!("SlurmNodeSet deleted: its pods and Slurm nodes are gone");
        return Ok(done);
    }
    match deletion_wait(release_at, Utc::now(), requeue) {
        Some(retry) => Err(Error::DeletionWaits {
            remaining: remaining.as_ref().map(Vec::len),
            retry,
        }),
        None => release_at_deadline(nodeset, deadline_note(remaining.as_deref()), ctx).await,
    }
}

/// The finalizer goes at the deadline with what is left: a Warning and the log say so.
async fn release_at_deadline(
    nodeset: &SlurmNodeSet,
    note: String,
    ctx: &Context,
) -> Result<controller::Action, Error> {
    // Letting go ends the jobs on the set's pods: only the leader, its Lease read again (a
    // deposed replica's deadline, counted from its own gain, comes before the new leader's).
    if !ctx.leadership.confirm().await {
        return Err(Error::NotLeader);
    }
    warn!(%note, "SlurmNodeSet deletion deadline reached");
    let notice = Notice::warning(REASON_DELETION_DEADLINE, note);
    kit::publish(&ctx.recorder, nodeset, EVENT_ACTION, notice).await;
    Ok(controller::Action::await_change())
}

/// How long a deletion that still waits for the set's pods or nodes waits before it looks
/// again: the round's own requeue, cut at the release time; `None` once that time has come.
pub fn deletion_wait(
    release_at: Option<chrono::DateTime<Utc>>,
    now: chrono::DateTime<Utc>,
    requeue: Duration,
) -> Option<Duration> {
    match release_at {
        None => Some(requeue),
        Some(at) if at <= now => None,
        Some(at) => Some(
            (at - now)
                .to_std()
                .unwrap_or_default()
                .clamp(Duration::from_secs(1), requeue),
        ),
    }
}

/// `Ready=False` of a set being deleted.
pub const REASON_DELETING: &str = "Deleting";

/// The `Ready` message of a set being deleted: what it waits for.
pub fn deleting_message(remaining: Option<&[String]>) -> String {
    let left = match remaining {
        None => {
            "what is left cannot be seen without a fresh view of Slurm (see SlurmSynced)".to_owned()
        }
        Some(names) => format!("left: {}", named(names)),
    };
    format!(
        "the SlurmNodeSet is being deleted: each node is drained, then its pod deleted and its \
         record removed from Slurm (see Draining); {left}"
    )
}

/// At most [`MAX_NAMED_LEFT`] of `names` (sorted by the plan), and how many more there are.
fn named(names: &[String]) -> String {
    kit::name_some(names, MAX_NAMED_LEFT)
}

/// The Warning of a deletion that lets go at the deadline, naming what is left.
pub fn deadline_note(remaining: Option<&[String]>) -> String {
    let left = match remaining {
        None => {
            "what is left is not known (no fresh view of Slurm, or the round failed)".to_owned()
        }
        Some(names) => format!("left: {}", named(names)),
    };
    format!(
        "the deletion deadline (--deletion-deadline) passed before every node of the set was \
         drained and removed from Slurm; {left}. Their pods go by garbage collection (jobs still \
         running on them end); remove what is left in Slurm with `scontrol delete nodename=...`."
    )
}

/// One round: admission, pods, plan, actions, PodDisruptionBudget and status. `deleting`: the
/// set is being deleted (planned as a scale-in to 0; no PodDisruptionBudget written).
async fn round(nodeset: &SlurmNodeSet, ctx: &Context, deleting: bool) -> Result<Round, Error> {
    let namespace = nodeset
        .namespace()
        .ok_or(Error::MissingMetadata("namespace"))?;
    let name = nodeset.name_any();
    let uid = nodeset.uid().ok_or(Error::MissingMetadata("uid"))?;
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);

    // 0. Allowed at all.
    let cluster_name = &nodeset.spec.cluster_name;
    // The name goes into a request path: only an object name (the CRD's pattern, re-checked).
    let cluster = if crate::crd::is_object_name(cluster_name) {
        Api::<SlurmCluster>::all(ctx.client.clone())
            .get_opt(cluster_name)
            .await
            .map_err(|source| Error::GetCluster {
                name: cluster_name.clone(),
                source,
            })?
    } else {
        None
    };
    let prefix = match admission(&namespace, &name, cluster_name, cluster.as_ref()) {
        Ok(prefix) => prefix,
        Err(refusal) => return Ok(Round::Refused(refusal)),
    };
    // The SlurmCluster's watch reports spec changes, not its removal: while it is being deleted
    // the set looks again soon, to find it gone.
    let cluster_going = cluster
        .as_ref()
        .is_some_and(|c| c.metadata.deletion_timestamp.is_some());
    let owner = pods::owner(nodeset);

    // 1. Pods.
    let ListedPods { views, uids, taken } =
        list_pods(&pods_api, &name, &uid, &prefix, &ctx.cordons).await?;
    // For the drain-stuck alert (docs/metrics.md): when the oldest drain in progress began.
    ctx.metrics.nodeset_draining_since(
        &namespace,
        &name,
        views.iter().filter_map(|v| v.drain_started).min(),
    );

    // 2. Slurm.
    let handle = ctx
        .clusters
        .get(&ObjectRef::<SlurmCluster>::new(cluster_name));
    let state = handle.as_ref().map(|h| Arc::clone(&h.index.borrow()));
    let now = Utc::now();

    // Another set makes its node names: refused before it makes a pod. One that has pods or
    // nodes already (both made before either showed in the other's cache, or before this
    // check) goes on as before: refused, it would hold them unmanaged; each set acts only on
    // nodes whose owner record names it. Its deletion goes on too.
    let holds_nodes = || {
        state
            .as_ref()
            .is_some_and(|s| s.nodes.values().any(|n| plan::is_ours(n, &owner)))
    };
    if !deleting
        && views.is_empty()
        && !holds_nodes()
        && let Some(refusal) = names_taken(
            nodeset,
            &prefix,
            cluster.as_ref(),
            &ctx.nodesets.of_cluster(cluster_name),
        )
    {
        return Ok(Round::Refused(refusal));
    }

    // 3. NodeSetPlan.
    let hash = pods::template_hash(nodeset);
    let mut plan = plan::plan(&Input {
        prefix: &prefix,
        owner: &owner,
        replicas: nodeset.spec.replicas,
        template_hash: &hash,
        strategy: &nodeset.spec.update_strategy,
        drain_timeout: nodeset
            .spec
            .scale_in
            .as_ref()
            .and_then(|s| s.drain_timeout.as_ref())
            .map(|d| d.as_std()),
        min_ready_seconds: nodeset.spec.min_ready_seconds,
        partitions: &nodeset.spec.slurm.partitions,
        pods: &views,
        taken: &taken,
        slurm: SlurmView {
            state: state.as_deref(),
            now,
            had_view: ctx.nodesets.saw_nodes_before(cluster_name),
        },
        deleting,
    });
    if plan.view == ViewState::Trusted {
        ctx.nodesets.saw_nodes_of(cluster_name, &ctx.leadership);
    }

    // 4. Actions. Drains, resumes, node deletions and deletes of pods whose node the view had
    // drained or had not (each read again first) call slurmrestd: they take one of the
    // connection's request slots, or the whole round waits for one without acting (a cluster
    // whose requests hang delays only its own sets, and no pod action runs ahead of its node's).
    let _io = match (&handle, plan.actions.iter().any(Action::calls_slurm)) {
        (Some(handle), true) => Some(
            handle
                .try_io()
                .ok_or_else(|| Error::ClusterBusy(cluster_name.to_owned()))?,
        ),
        _ => None,
    };
    // What only the leader may do, and a second leader doing it beside the first could drain
    // twice or delete a pod whose node the other just resumed: the Lease is read again first
    // (as before a submit). The renewal loop's word may be stale: a replica paused, or whose
    // renewals fail, past the Lease's expiry believes it leads until that loop says otherwise.
    let gated = |a: &Action| a.calls_slurm() || a.is_destructive();
    if plan.actions.iter().any(gated) && !ctx.leadership.confirm().await {
        return Err(Error::NotLeader);
    }
    // A round may take long (each Slurm call up to its timeout): the Lease is read again
    // before a gated action once the last read is [`LEASE_RECHECK`] old, and the renewal
    // loop's word is asked before each.
    let mut lease_read = std::time::Instant::now();
    let mut failed: BTreeSet<String> = BTreeSet::new();
    let mut failures = 0_usize;
    let mut first_error = None;
    let mut pending = false;
    // What came of the deletes that rested on slurmctld's word: the status says it, not the
    // plan's hope.
    let mut confirmed: BTreeMap<String, plan::Confirmed> = BTreeMap::new();
    for action in &plan.actions {
        let subject = subject(&prefix, action);
        if failed.contains(&subject) {
            continue;
        }
        if gated(action) {
            if !ctx.leadership.is_leader() {
                return Err(Error::NotLeader);
            }
            if lease_read.elapsed() >= LEASE_RECHECK {
                if !ctx.leadership.confirm().await {
                    return Err(Error::NotLeader);
                }
                lease_read = std::time::Instant::now();
            }
        }
        let result = act(
            nodeset,
            &prefix,
            action,
            &pods_api,
            &uids,
            handle.as_ref().map(|h| &h.client),
            ctx,
        )
        .await;
        if let Action::DeletePod { name, confirm, .. } = action
            && *confirm != Confirm::Nothing
        {
            let outcome = match &result {
                // No client: not tried.
                Ok(SlurmOutcome::NotYet) => None,
                Ok(SlurmOutcome::Superseded) => Some(plan::Confirmed::Superseded),
                Ok(SlurmOutcome::Done | SlurmOutcome::AlreadyDone) => {
                    Some(plan::Confirmed::Deleted)
                }
                Err(_) => Some(plan::Confirmed::Failed),
            };
            if let Some(outcome) = outcome {
                confirmed.insert(name.clone(), outcome);
            }
        }
        match result {
            Ok(SlurmOutcome::NotYet) => pending = true,
            Ok(SlurmOutcome::Superseded) => {
                pending = true;
                failed.insert(subject);
            }
            Ok(_) => {}
            Err(error) => {
                warn!(error = %Chain(&error), ?action, "SlurmNodeSet action failed");
                failed.insert(subject);
                failures += 1;
                first_error.get_or_insert(error);
            }
        }
    }

    // 5. PDB and status: the status says what failed, and a new failure is a Warning.
    // A set being deleted keeps its PodDisruptionBudget as it is (it goes with the set).
    let pdb = if deleting {
        Ok(())
    } else if !ctx.leadership.is_leader() {
        // Nor the PodDisruptionBudget: the new leader's apply is the one that counts.
        return Err(Error::NotLeader);
    } else {
        apply_pdb(nodeset, &namespace, ctx).await
    };
    if let Err(error) = pdb {
        warn!(error = %Chain(&error), "SlurmNodeSet PodDisruptionBudget not applied");
        failures += 1;
        first_error.get_or_insert(error);
    }
    let failure = first_error
        .as_ref()
        .map(|error| ActionFailure::of(error, failures));
    plan.waiting = plan::waiting_after(&plan.waiting, &confirmed);
    let desired = desired_status(nodeset, &plan, &name, failure.as_ref());
    // Checked again: a round that outlived this replica's Lease would write a status (and tell
    // a failure) computed before the new leader's.
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    if let Some(failure) = &failure
        && newly_failing(nodeset.status.as_ref(), failure)
    {
        let notice = Notice::warning(failure.reason, failure.message.clone());
        kit::publish(&ctx.recorder, nodeset, EVENT_ACTION, notice).await;
    }
    if nodeset.status.as_ref() != Some(&desired) {
        let api: Api<SlurmNodeSet> = Api::namespaced(ctx.client.clone(), &namespace);
        kit::apply_status(&api, &nodeset.metadata, &desired)
            .await
            .map_err(Error::PatchStatus)?;
    }
    if let Some(error) = first_error {
        return Err(error);
    }
    let waiting = pending || !plan.waiting.is_empty() || !plan.actions.is_empty();
    let requeue = requeue_after(waiting, &plan);
    Ok(Round::Acted {
        requeue: if cluster_going {
            requeue.min(CLUSTER_GOING_RESYNC)
        } else {
            requeue
        },
        remaining: plan.remaining,
    })
}

/// What the round needs of the pods labelled as set `name`'s.
#[derive(Debug, Default)]
struct ListedPods {
    /// The set's own (it is their controller), named like its pods.
    views: Vec<plan::PodView>,
    /// Their uids and resourceVersions as listed, by name (the preconditions of their
    /// deletes).
    uids: BTreeMap<String, Listed>,
    /// Ordinals whose name a labelled pod the set does not control holds.
    taken: BTreeSet<u32>,
}

/// A listed pod's uid and resourceVersion.
#[derive(Debug, Clone)]
struct Listed {
    uid: String,
    version: Option<String>,
}

/// The set's pods, listed [`POD_LIST_PAGE`] at a time like the watch's, each page cut down to
/// what the round needs before the next is read: anyone who may create Pods in the namespace
/// can label theirs as the set's, with up to 256 KiB of annotations each.
async fn list_pods(
    api: &Api<Pod>,
    name: &str,
    uid: &str,
    prefix: &str,
    cordons: &cordons::Cordons,
) -> Result<ListedPods, Error> {
    let mut listed = ListedPods::default();
    let mut params = ListParams::default()
        .labels(&pods::selector(name))
        .limit(POD_LIST_PAGE);
    loop {
        let page = api.list(&params).await.map_err(Error::ListPods)?;
        for pod in &page.items {
            let owned = pod
                .owner_references()
                .iter()
                .any(|o| o.uid == uid && o.controller == Some(true));
            if !owned {
                listed
                    .taken
                    .extend(plan::ordinal_of(prefix, &pod.name_any()));
                continue;
            }
            if let Some(pod_uid) = pod.uid() {
                let version = pod.resource_version();
                listed.uids.insert(
                    pod.name_any(),
                    Listed {
                        uid: pod_uid,
                        version,
                    },
                );
            }
            listed.views.extend(pods::view(prefix, pod, cordons));
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(listed),
        }
    }
}

/// A SlurmNodeSet the operator does not act for: `Ready=False` with the refusal (a Warning Event
/// when that is new), nothing else; it waits for a change of the set or of its SlurmCluster.
async fn refuse(
    nodeset: &SlurmNodeSet,
    namespace: &str,
    refusal: Refusal,
    ctx: &Context,
) -> Result<controller::Action, Error> {
    let desired = refused_status(nodeset, &refusal);
    if nodeset.status.as_ref() != Some(&desired) {
        // A refusal read before this replica lost the Lease must not overwrite the new
        // leader's status.
        if !ctx.leadership.is_leader() {
            return Err(Error::NotLeader);
        }
        let api: Api<SlurmNodeSet> = Api::namespaced(ctx.client.clone(), namespace);
        kit::apply_status(&api, &nodeset.metadata, &desired)
            .await
            .map_err(Error::PatchStatus)?;
        let was = nodeset
            .status
            .as_ref()
            .and_then(|s| condition::find(&s.conditions, condition::READY))
            .map(|c| (c.reason.as_str(), c.message.as_str()));
        // As the condition keeps it (cut when long): one Event, not one a reconcile.
        let message = condition::bounded_message(&refusal.message);
        if was != Some((refusal.reason, message.as_str())) {
            warn!(name = %nodeset.name_any(), namespace, reason = refusal.reason, "SlurmNodeSet refused");
            let notice = Notice::warning(refusal.reason, refusal.message).by_note(EVENT_ACTION);
            kit::publish(&ctx.recorder, nodeset, EVENT_ACTION, notice).await;
        }
    }
    Ok(controller::Action::await_change())
}

/// The status of a refused SlurmNodeSet: `Ready=False` with the refusal; the rest as it was.
pub fn refused_status(nodeset: &SlurmNodeSet, refusal: &Refusal) -> SlurmNodeSetStatus {
    let mut status = nodeset.status.clone().unwrap_or_default();
    let generation = nodeset.metadata.generation;
    let now = condition::now();
    condition::upsert(
        &mut status.conditions,
        condition::new(
            condition::READY,
            false,
            refusal.reason,
            refusal.message.clone(),
            generation,
            now.clone(),
        ),
    );
    // kstatus: nothing happens for a refused set until its spec, its namespace or the
    // SlurmCluster changes.
    condition::upsert(
        &mut status.conditions,
        condition::new(
            condition::STALLED,
            true,
            refusal.reason,
            refusal.message.clone(),
            generation,
            now,
        ),
    );
    condition::remove(&mut status.conditions, condition::RECONCILING);
    if refusal.reason == REASON_NODE_NAMES_TAKEN {
        // Refused only while it has no pod: counts left from before (its pods deleted outside
        // the operator) would tell other sets it has pods, and keeps the names (`names_taken`).
        status.replicas = 0;
        status.ready_replicas = 0;
        status.available_replicas = 0;
        status.updated_replicas = 0;
        status.slurm = None;
    }
    status.observed_generation = generation;
    status
}

/// When to look again: soon while waiting; at the latest when the next pod passes
/// `minReadySeconds` (no pod event marks that moment).
pub fn requeue_after(waiting: bool, plan: &plan::NodeSetPlan) -> Duration {
    let base = if waiting { WAIT_RESYNC } else { RESYNC };
    plan.available_in.map_or(base, |at| at.min(base))
}

/// The pod/node an action is about (they share names).
fn subject(prefix: &str, action: &Action) -> String {
    match action {
        Action::CreatePod { ordinal } => pods::pod_name(prefix, *ordinal),
        Action::DeletePod { name, .. } => name.clone(),
        Action::Drain { node, .. }
        | Action::Resume { node }
        | Action::DeleteNodeRecord { node } => node.clone(),
        Action::MarkDrainStarted { pod }
        | Action::ClearDrainStarted { pod }
        | Action::SetBusy { pod, .. }
        | Action::SetNodeCondition { pod, .. } => pod.clone(),
    }
}

async fn act(
    nodeset: &SlurmNodeSet,
    prefix: &str,
    action: &Action,
    pods_api: &Api<Pod>,
    uids: &BTreeMap<String, Listed>,
    client: Option<&SlurmClient>,
    ctx: &Context,
) -> Result<SlurmOutcome, Error> {
    let patch_pod = |name: &str, patch: serde_json::Value| {
        let name = name.to_owned();
        async move {
            pods_api
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map(|_| SlurmOutcome::Done)
                .or_else(|e| ignore_not_found(e, &name))
        }
    };
    match action {
        Action::CreatePod { ordinal } => {
            let pod = pods::build_pod(nodeset, prefix, *ordinal, &pods::template_hash(nodeset));
            let name = pod.name_any();
            // The name was given out on a view up to `plan::MAX_INDEX_AGE` old: asked again now,
            // Slurm must not hold a node of that name that someone else registered since
            // (another set, another operator, a hand-started slurmd), whose record the new
            // pod's slurmd would take over (and the set then drain and remove). Fail closed.
            let Some(client) = client else {
                return Ok(SlurmOutcome::NotYet);
            };
            match client.node(&name).await {
                Ok(current) if !plan::is_ours(&current, &pods::owner(nodeset)) => {
                    info!(pod = %name, "Slurm holds a node of this name that another owner registered since the plan's view: not created");
                    return Ok(SlurmOutcome::Superseded);
                }
                Ok(_) | Err(SlurmError::NotFound { .. }) => {}
                Err(source) => return Err(Error::SlurmAction { node: name, source }),
            }
            match pods_api.create(&PostParams { field_manager: Some(FIELD_MANAGER.into()), ..PostParams::default() }, &pod).await {
                Ok(_) => {
                    info!(pod = %name, "created pod");
                    Ok(SlurmOutcome::Done)
                }
                // A pod of that name the list of the set's pods did not show: creating it
                // again every round would change nothing, so say what holds the name.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    let existing = pods_api
                        .get_opt(&name)
                        .await
                        .map_err(|source| Error::CreatePod { name: name.clone(), source })?;
                    match existing.as_ref().map(|pod| unlisted(pod, nodeset)) {
                        // Gone again, or made since the list: the next round sees.
                        None | Some(Unlisted::Listable) => Ok(SlurmOutcome::AlreadyDone),
                        Some(other) => Err(other.error(name, nodeset)),
                    }
                }
                Err(source) => Err(Error::CreatePod { name, source }),
            }
        }
        Action::DeletePod { name, why, confirm } => {
            if *confirm != Confirm::Nothing {
                let Some(client) = client else {
                    return Ok(SlurmOutcome::NotYet);
                };
                let allowed = slurm_allows(client, action, &pods::owner(nodeset)).await.map_err(|source| Error::SlurmAction {
                    node: name.clone(),
                    source,
                })?;
                // `None`: the node is gone, nothing can run there.
                if allowed == Some(false) {
                    let since = match confirm {
                        Confirm::NodeAbsent => "its slurmd registered since the plan's view: drained first",
                        Confirm::OurDrain => "its drain timed out, but its node no longer carries the operator's drain (someone drained or resumed it since): kept",
                        _ => "its node is no longer drained, or no longer this set's, since the plan's view: kept",
                    };
                    info!(pod = %name, "{since}");
                    return Ok(SlurmOutcome::Superseded);
                }
            }
            // A delete that slurmctld does not confirm (a pod never scheduled, or ended) holds
            // only for the pod as listed: one the scheduler bound since (a new resourceVersion)
            // may run slurmd by now, and is planned again (409).
            let params = DeleteParams {
                preconditions: uids.get(name).map(|listed| Preconditions {
                    uid: Some(listed.uid.clone()),
                    resource_version: listed
                        .version
                        .clone()
                        .filter(|_| *confirm == Confirm::Nothing),
                }),
                ..DeleteParams::default()
            };
            match pods_api.delete(name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(SlurmOutcome::AlreadyDone),
                // Another pod of that name, or this one changed since the list (bound by the
                // scheduler, say): the next round plans it again from a fresh list.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    info!(pod = %name, message = %e.message, "pod changed since the list: not deleted, planned again");
                    return Ok(SlurmOutcome::AlreadyDone);
                }
                Err(source) => {
                    return Err(Error::DeletePod {
                        name: name.clone(),
                        source,
                    });
                }
            }
            info!(pod = %name, ?why, "deleted pod");
            kit::publish(&ctx.recorder, nodeset, EVENT_ACTION, delete_notice(name, *why)).await;
            Ok(SlurmOutcome::Done)
        }
        Action::Drain { node, .. } | Action::Resume { node } | Action::DeleteNodeRecord { node } => {
            let Some(client) = client else {
                return Ok(SlurmOutcome::NotYet);
            };
            if let Action::DeleteNodeRecord { .. } = action {
                // The plan saw no pod of the node's name in the list by label: one that lost
                // the label still runs its slurmd, whose node must stay. Asked by name.
                let existing = pods_api
                    .get_opt(node)
                    .await
                    .map_err(|source| Error::GetPod { name: node.clone(), source })?;
                if let Some(pod) = existing.filter(|p| !pods::is_finished(p)) {
                    return match unlisted(&pod, nodeset) {
                        // Made since the list, or on its way out: the next round sees.
                        Unlisted::Listable => Ok(SlurmOutcome::NotYet),
                        _ if pod.metadata.deletion_timestamp.is_some() => Ok(SlurmOutcome::NotYet),
                        other => Err(other.error(node.clone(), nodeset)),
                    };
                }
            }
            let outcome = apply_slurm(client, action, &pods::owner(nodeset)).await.map_err(|source| Error::SlurmAction {
                node: node.clone(),
                source,
            })?;
            if outcome == SlurmOutcome::Superseded {
                info!(node = %node, ?action, "Slurm's node changed since the plan's view (its state, or its owner): not done");
            }
            if outcome == SlurmOutcome::Done {
                let (reason, note) = match action {
                    Action::Drain { reason, .. } => ("DrainingNode", format!("draining Slurm node {node}: {reason}")),
                    Action::Resume { .. } => ("ResumedNode", format!("resumed Slurm node {node}: the operator's drain is no longer wanted (scaled back out, an update no longer due, or its Kubernetes node uncordoned)")),
                    _ => ("DeletedNodeRecord", format!("removed Slurm node {node}")),
                };
                info!(node = %node, reason, "Slurm action done");
                kit::publish(&ctx.recorder, nodeset, EVENT_ACTION, Notice::normal(reason, note)).await;
            }
            Ok(outcome)
        }
        Action::MarkDrainStarted { pod } => {
            patch_pod(pod, json!({"metadata": {"annotations": {pods::ANNOTATION_DRAIN_STARTED: Utc::now().to_rfc3339()}}})).await
        }
        Action::ClearDrainStarted { pod } => {
            patch_pod(pod, json!({"metadata": {"annotations": {pods::ANNOTATION_DRAIN_STARTED: null}}})).await
        }
        Action::SetBusy { pod, busy } => {
            let value = if *busy { json!("true") } else { json!(null) };
            patch_pod(pod, json!({"metadata": {"labels": {pods::LABEL_BUSY: value}}})).await
        }
        Action::SetNodeCondition {
            pod,
            status,
            reason,
            message,
            transition,
        } => {
            // Strategic merge: pod conditions merge by type, other conditions stay, and a field
            // the patch leaves out keeps its value (the last transition's time).
            let mut condition = json!({
                "type": pods::CONDITION_NODE_STATE,
                "status": if *status { "True" } else { "False" },
                "reason": reason,
                "message": message,
            });
            if *transition {
                condition["lastTransitionTime"] =
                    json!(Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
            }
            let patch = json!({"status": {"conditions": [condition]}});
            pods_api
                .patch_status(pod, &PatchParams::default(), &Patch::Strategic(patch))
                .await
                .map(|_| SlurmOutcome::Done)
                .or_else(|e| ignore_not_found(e, pod))
        }
    }
}

/// What a pod of one of the set's names is that the list of the set's pods (by label) did
/// not show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unlisted {
    /// The set's and labelled: made since the list.
    Listable,
    /// The set's (its controller) without the set's label: taken out of the list by hand.
    LabelMissing,
    /// Not the set's.
    Foreign,
}

fn unlisted(pod: &Pod, nodeset: &SlurmNodeSet) -> Unlisted {
    let name = nodeset.name_any();
    let labelled = pod.labels().get(pods::LABEL_NODESET) == Some(&name);
    match (controlled_by(pod, nodeset), labelled) {
        (true, true) => Unlisted::Listable,
        (true, false) => Unlisted::LabelMissing,
        (false, _) => Unlisted::Foreign,
    }
}

impl Unlisted {
    fn error(self, pod: String, nodeset: &SlurmNodeSet) -> Error {
        match self {
            Self::LabelMissing => Error::PodLabelMissing {
                pod,
                set: nodeset.name_any(),
            },
            Self::Listable | Self::Foreign => Error::PodNameTaken(pod),
        }
    }
}

/// The Event of pod `name`'s delete: why it went.
pub fn delete_notice(name: &str, why: DeleteWhy) -> Notice {
    match why {
        DeleteWhy::ScaleIn => Notice::normal(
            "NodeRemoved",
            format!("node {name} drained; pod deleted (scale-in)"),
        ),
        DeleteWhy::SetDeleted => Notice::normal(
            "NodeRemoved",
            format!("node {name} drained; pod deleted (SlurmNodeSet deleted)"),
        ),
        DeleteWhy::Update => Notice::normal(
            "NodeReplaced",
            format!("node {name} drained; pod deleted for the new template"),
        ),
        DeleteWhy::Finished => {
            Notice::normal("PodReplaced", format!("pod {name} ended; replacing it"))
        }
        DeleteWhy::DrainTimeout(leaving) => {
            let cause = match leaving {
                Leaving::ScaleIn => "a scale-in",
                Leaving::Update => "a rolling update",
                Leaving::SetDeleted => "the SlurmNodeSet's deletion",
            };
            Notice::warning(
                "DrainTimeoutExceeded",
                format!(
                    "the drain of node {name} for {cause} had not ended when \
                     scaleIn.drainTimeout ran out; pod deleted anyway (jobs still on it end)"
                ),
            )
        }
    }
}

fn ignore_not_found(error: kube::Error, name: &str) -> Result<SlurmOutcome, Error> {
    match error {
        kube::Error::Api(e) if e.code == 404 => Ok(SlurmOutcome::AlreadyDone),
        source => Err(Error::PatchPod {
            name: name.to_owned(),
            source,
        }),
    }
}

/// The status for this plan.
/// Whether `failure` is news to the status (`ReplicaFailure` not yet `True` with its reason):
/// one Warning per new failure, not one per retry.
fn newly_failing(current: Option<&SlurmNodeSetStatus>, failure: &ActionFailure) -> bool {
    !current
        .and_then(|s| condition::find(&s.conditions, CONDITION_REPLICA_FAILURE))
        .is_some_and(|c| c.status == "True" && c.reason == failure.reason)
}

pub fn desired_status(
    nodeset: &SlurmNodeSet,
    plan: &plan::NodeSetPlan,
    name: &str,
    failure: Option<&ActionFailure>,
) -> SlurmNodeSetStatus {
    let current = nodeset.status.clone().unwrap_or_default();
    let generation = nodeset.metadata.generation;
    let now = crate::crd::condition::now();
    let mut conditions = current.conditions.clone();
    let counts = &plan.counts;
    let deleting = nodeset.metadata.deletion_timestamp.is_some();
    let pods_ready =
        counts.available == nodeset.spec.replicas && counts.replicas == nodeset.spec.replicas;
    // A node is ready when its pod is available and Slurm can run jobs on it: slurmd answering
    // its readiness probe says nothing of a node slurmctld set DOWN (a configuration it
    // refused, say).
    let not_usable = i32::try_from(counts.not_usable.len()).unwrap_or(i32::MAX);
    let ready = !deleting && pods_ready && not_usable == 0;
    // Pods on their way out are not among the nodes the set keeps: "3 of 2 nodes ready" in a
    // scale-in said nothing true.
    let kept_available = counts.available - counts.leaving.available;
    let kept_ready = counts.ready - counts.leaving.ready;
    let mut message = format!(
        "{} of {} nodes ready",
        kept_available - not_usable,
        nodeset.spec.replicas
    );
    if not_usable > 0 {
        let list = listed(
            counts
                .not_usable
                .iter()
                .map(|n| format!("{}: {}", n.pod, n.why)),
        );
        message.push_str(&format!(
            " ({not_usable} more running but taking no job in Slurm: {list})"
        ));
    }
    if kept_ready > kept_available {
        message.push_str(&format!(
            " ({} more ready for less than minReadySeconds)",
            kept_ready - kept_available
        ));
    }
    if counts.leaving.pods > 0 {
        message.push_str(&format!(
            "; {} more being removed (see Draining)",
            counts.leaving.pods
        ));
    }
    let reason = match (deleting, ready) {
        (true, _) => {
            message = deleting_message(plan.remaining.as_deref());
            REASON_DELETING
        }
        (false, true) => "AllReady",
        (false, false) if pods_ready => REASON_SLURM_NODES_NOT_USABLE,
        (false, false) => "NotReady",
    };
    condition::upsert(
        &mut conditions,
        condition::new(
            condition::READY,
            ready,
            reason,
            message,
            generation,
            now.clone(),
        ),
    );
    let (status, reason, message) = if plan.waiting.is_empty() {
        (
            false,
            "NothingToDrain",
            "no node is waiting to be removed".to_owned(),
        )
    } else {
        let list = listed(plan.waiting.iter().map(|w| format!("{}: {}", w.pod, w.why)));
        (true, "WaitingForDrain", list)
    };
    condition::upsert(
        &mut conditions,
        condition::new(
            CONDITION_DRAINING,
            status,
            reason,
            message,
            generation,
            now.clone(),
        ),
    );
    let kept = if current.slurm.is_some() {
        "status.slurm keeps the last counts seen, from before this condition's lastTransitionTime"
    } else {
        "no Slurm counts yet"
    };
    let (status, reason, message) = match plan.view {
        ViewState::Trusted => (
            true,
            "Synced",
            "status.slurm is from a fresh, complete node list".to_owned(),
        ),
        ViewState::NoClient => (
            false,
            "NoSlurmClient",
            format!("the SlurmCluster has no working Slurm client; {kept}"),
        ),
        ViewState::Untrusted => (
            false,
            "SlurmViewStale",
            format!("Slurm's node list is stale or its poller is down; {kept}"),
        ),
    };
    condition::upsert(
        &mut conditions,
        condition::new(
            CONDITION_SLURM_SYNCED,
            status,
            reason,
            message,
            generation,
            now.clone(),
        ),
    );
    partitions_condition(
        &mut conditions,
        &nodeset.spec.slurm.partitions,
        plan.partition_misses.as_deref(),
        &plan.partition_outdated,
        generation,
        now.clone(),
    );
    let (status, reason, message) = match plan.conflicts.as_deref() {
        None => (
            condition::Status::Unknown,
            "NoSlurmView",
            "no fresh view of Slurm's nodes".to_owned(),
        ),
        Some([]) => (
            condition::Status::True,
            "NoConflict",
            "every Slurm node named like this set's pods is this set's own".to_owned(),
        ),
        Some(conflicts) => {
            let list = listed(conflicts.iter().map(ToString::to_string));
            (
                condition::Status::False,
                "NodeNameConflict",
                format!(
                    "{}; the operator never drains, resumes or deletes these nodes and gives \
                     their names to no pod",
                    list
                ),
            )
        }
    };
    condition::upsert(
        &mut conditions,
        condition::new(
            CONDITION_NODES_OWNED,
            status,
            reason,
            message,
            generation,
            now.clone(),
        ),
    );
    match failure {
        Some(failure) => {
            condition::upsert(
                &mut conditions,
                condition::new(
                    CONDITION_REPLICA_FAILURE,
                    true,
                    failure.reason,
                    failure.message.clone(),
                    generation,
                    now.clone(),
                ),
            );
        }
        None => {
            condition::remove(&mut conditions, CONDITION_REPLICA_FAILURE);
        }
    }
    // Nodes slurmctld refused (or whose names others hold): only a change helps.
    let stuck = plan.counts.not_usable.iter().any(|n| n.stuck).then(|| {
        let ready = condition::find(&conditions, condition::READY);
        ready.map_or_else(String::new, |c| c.message.clone())
    });
    progress_conditions(&mut conditions, ready, stuck, generation, now);
    SlurmNodeSetStatus {
        replicas: counts.replicas,
        ready_replicas: counts.ready,
        available_replicas: counts.available,
        updated_replicas: counts.updated,
        slurm: counts.slurm.clone().or(current.slurm),
        selector: Some(pods::selector(name)),
        conditions,
        observed_generation: generation,
    }
}

/// At most 20 of `items` and how many more there are: a condition's message stays short with
/// thousands of nodes.
fn listed(items: impl Iterator<Item = String>) -> String {
    kit::list_some(&items.collect::<Vec<_>>(), 20)
}

/// kstatus, from the conditions above: `Stalled=True` while registered nodes miss a listed
/// partition (only a change of slurm.conf helps), Slurm nodes not the set's hold its names
/// (`NodeNamesOwned=False`), or slurmctld refused nodes' registration (`stuck`: the `Ready`
/// message naming them), else `Reconciling=True` while nodes are not all ready or wait to be
/// drained; each absent otherwise.
fn progress_conditions(
    conditions: &mut Vec<condition::Condition>,
    ready: bool,
    stuck: Option<String>,
    generation: Option<i64>,
    now: condition::Time,
) {
    let found = |type_: &str| condition::find(conditions, type_).cloned();
    // Only a change helps: slurm.conf (partitions), the nodes holding the set's names, or
    // the set's `spec.slurm` against what its slurmd reports.
    let stalled = found(CONDITION_PARTITIONS)
        .filter(|c| c.status == "False")
        .or_else(|| found(CONDITION_NODES_OWNED).filter(|c| c.status == "False"))
        .or_else(|| {
            stuck.map(|message| {
                condition::new(
                    condition::STALLED,
                    true,
                    REASON_SLURM_NODES_NOT_USABLE,
                    message,
                    generation,
                    now.clone(),
                )
            })
        });
    let draining = found(CONDITION_DRAINING).filter(|c| c.status == "True");
    let busy = if ready {
        draining
    } else {
        found(condition::READY)
    };
    let mut set = |type_: &str, from: Option<condition::Condition>| match from {
        Some(c) => {
            condition::upsert(
                conditions,
                condition::new(type_, true, &c.reason, c.message, generation, now.clone()),
            );
        }
        None => {
            condition::remove(conditions, type_);
        }
    };
    let reconciling = if stalled.is_some() { None } else { busy };
    set(condition::STALLED, stalled);
    set(condition::RECONCILING, reconciling);
}

/// The `Partitions` condition: absent without `spec.slurm.partitions`; Unknown without a fresh
/// view of Slurm; else whether every registered node is in each listed partition (slurm.conf
/// must select the nodes, e.g. by their `partition-<name>` feature). Nodes of pods of an
/// earlier template (`outdated`: the list changed, and they carry the one before) make it
/// `Unknown/Updating` while those of the current template are all in: whether slurm.conf
/// selects them shows once they are replaced.
fn partitions_condition(
    conditions: &mut Vec<condition::Condition>,
    wanted: &[String],
    misses: Option<&[(String, Vec<String>)]>,
    outdated: &[String],
    generation: Option<i64>,
    now: condition::Time,
) {
    if wanted.is_empty() {
        conditions.retain(|c| c.type_ != CONDITION_PARTITIONS);
        return;
    }
    let (status, reason, message) = match misses {
        None => (
            condition::Status::Unknown,
            "NoSlurmView",
            "no fresh view of Slurm's nodes".to_owned(),
        ),
        Some([]) if !outdated.is_empty() => (
            condition::Status::Unknown,
            "Updating",
            format!(
                "{} not in every one of {} yet: their pods have the template before \
                 spec.slurm.partitions changed and are replaced by the update (with \
                 updateStrategy OnDelete, when you delete them)",
                listed(outdated.iter().cloned()),
                wanted.join(", ")
            ),
        ),
        Some([]) => (
            condition::Status::True,
            "InPartitions",
            format!("every registered node is in {}", wanted.join(", ")),
        ),
        Some(misses) => {
            let list = listed(
                misses
                    .iter()
                    .map(|(node, missing)| format!("{node} not in {}", missing.join(","))),
            );
            (
                condition::Status::False,
                "NotInPartitions",
                format!(
                    "{}; slurm.conf must select these nodes (NodeSet=<set> Feature=partition-<name>, \
                     PartitionName=<name> Nodes=<set>) and be reconfigured",
                    list
                ),
            )
        }
    };
    condition::upsert(
        conditions,
        condition::new(
            CONDITION_PARTITIONS,
            status,
            reason,
            message,
            generation,
            now,
        ),
    );
}

/// Whether `object`'s controller is `nodeset` (by uid: a set deleted and made again under the
/// same name is another set).
fn controlled_by(object: &impl Resource, nodeset: &SlurmNodeSet) -> bool {
    object
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == nodeset.metadata.uid.as_ref())
}

/// `minAvailable: 2147483647` over the set's busy pods: none may be evicted, and `kubectl drain`
/// waits for their jobs. Not `maxUnavailable: 0`: the disruption controller measures that
/// against the replicas of the pods' controller (the set's `/scale`), not against the pods it
/// selects, so during a scale-in from 4 to 3 with 4 busy pods one busy pod (any, not the one
/// being drained) could be evicted, its job killed. An integer `minAvailable` counts only the
/// pods selected.
///
/// Read first: a PodDisruptionBudget of the set's name that the set does not control (another
/// team's, made by hand) is left as it is, `PdbNotOwned`; a forced apply would take its
/// selector and limits over, and add an owner reference that has it garbage-collected with the
/// set. None there: created, not applied, so that one made by someone else since the read is a
/// 409 (read again, and left alone if not the set's) rather than taken over. The set's own is
/// patched only when it is not as wanted, to exactly the wanted spec (a merge patch that also
/// removes what it has beyond: [`exact_merge_patch`]), as that very object (its uid). Not a
/// server-side apply: the spec was written by a create (an `Update` manager), and an apply
/// removes only fields it owns, so one that left out the old `maxUnavailable` would have kept
/// it beside `minAvailable`, which the API server refuses.
async fn apply_pdb(nodeset: &SlurmNodeSet, namespace: &str, ctx: &Context) -> Result<(), Error> {
    let name = nodeset.name_any();
    let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), namespace);
    let labels = [
        (pods::LABEL_NODESET, name.as_str()),
        (pods::LABEL_BUSY, "true"),
    ];
    let desired = PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            owner_references: nodeset.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(i32::MAX)),
            selector: Some(LabelSelector {
                match_labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    };
    let existing = match api.get_opt(&name).await.map_err(Error::ApplyPdb)? {
        Some(existing) => existing,
        None => {
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PostParams::default()
            };
            match api.create(&params, &desired).await {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    match api.get_opt(&name).await.map_err(Error::ApplyPdb)? {
                        Some(existing) => existing,
                        // Gone again since: retried with backoff.
                        None => return Err(Error::ApplyPdb(kube::Error::Api(e))),
                    }
                }
                Err(source) => return Err(Error::ApplyPdb(source)),
            }
        }
    };
    if !controlled_by(&existing, nodeset) {
        return Err(Error::PdbNotOwned(name));
    }
    if existing.spec == desired.spec {
        return Ok(());
    }
    let mut patch = serde_json::json!({
        "spec": exact_merge_patch(
            &serde_json::to_value(&existing.spec).unwrap_or_default(),
            &serde_json::to_value(&desired.spec).unwrap_or_default(),
        ),
    });
    if let Some(uid) = &existing.metadata.uid {
        patch["metadata"] = serde_json::json!({ "uid": uid });
    }
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    api.patch(&name, &params, &Patch::Merge(&patch))
        .await
        .map_err(Error::ApplyPdb)?;
    Ok(())
}

/// The JSON merge patch (RFC 7386) that turns `existing` into exactly `desired`: `desired`, with
/// `null` for each member `existing` has and `desired` has not, at every level of objects.
fn exact_merge_patch(
    existing: &serde_json::Value,
    desired: &serde_json::Value,
) -> serde_json::Value {
    use serde_json::Value;
    match (existing, desired) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = serde_json::Map::new();
            for (key, value) in new {
                let value = match old.get(key) {
                    Some(before) => exact_merge_patch(before, value),
                    None => value.clone(),
                };
                patch.insert(key.clone(), value);
            }
            for key in old.keys().filter(|key| !new.contains_key(*key)) {
                patch.insert(key.clone(), Value::Null);
            }
            Value::Object(patch)
        }
        _ => desired.clone(),
    }
}

/// The NodeSets a Slurm event concerns: a node named like one of their pods, or their
/// SlurmCluster's regained health.
pub fn slurm_targets(
    event: &SlurmEvent,
    store: &Store<SlurmNodeSet>,
) -> Vec<ObjectRef<SlurmNodeSet>> {
    let (cluster, node) = match event {
        SlurmEvent::NodeChanged { cluster, node } | SlurmEvent::NodeGone { cluster, node } => {
            (cluster, Some(node.as_str()))
        }
        SlurmEvent::HealthChanged { cluster, up: true } => (cluster, None),
        _ => return Vec::new(),
    };
    store
        .state()
        .iter()
        .filter(|n| {
            n.spec.cluster_name == cluster.name
                && node.is_none_or(|node| {
                    pods::node_prefix(&n.namespace().unwrap_or_default(), &n.name_any())
                        .is_some_and(|prefix| plan::ordinal_of(&prefix, node).is_some())
                })
        })
        .map(|n| ObjectRef::from_obj(n.as_ref()))
        .collect()
}

/// The SlurmNodeSets that name SlurmCluster `cluster`.
pub fn sets_of_cluster(cluster: &str, store: &Store<SlurmNodeSet>) -> Vec<ObjectRef<SlurmNodeSet>> {
    store
        .state()
        .iter()
        .filter(|n| n.spec.cluster_name == cluster)
        .map(|n| ObjectRef::from_obj(n.as_ref()))
        .collect()
}

/// The watch of the sets' pods (of `namespace`, else of all) that wakes their sets:
/// [`kit::pod_watch`], in pages of [`POD_LIST_PAGE`].
pub fn pod_watch(
    client: kube::Client,
    namespace: Option<&str>,
) -> impl futures::Stream<Item = watcher::Result<watcher::Event<PodMeta>>> + Send + 'static {
    kit::pod_watch(client, namespace, pods::LABEL_NODESET, POD_LIST_PAGE)
}

/// The running SlurmNodeSet controller: its store and the future that drives it until `shutdown`.
pub fn run(
    ctx: Context,
    namespace: Option<&str>,
    shutdown: CancellationToken,
) -> (
    Store<SlurmNodeSet>,
    impl Future<Output = ()> + Send + 'static,
) {
    let client = ctx.client.clone();
    let nodesets_api: Api<SlurmNodeSet> = kit::scoped_api(client.clone(), namespace);
    let (store, writer) = reflector::store();
    ctx.nodesets.add(store.clone());
    let nodesets = ctx
        .refused
        .reporting(
            watcher(nodesets_api, watcher::Config::default().any_semantic()).default_backoff(),
            namespace,
            super::SLURMNODESETS,
        )
        .modify(kit::trim_for_cache)
        .reflect(writer)
        .touched_after_relist(store.clone())
        .predicate_filter(predicates::generation, Default::default());
    let triggers = kit::slurm_triggers(
        CONTROLLER,
        ctx.events.subscribe(),
        store.clone(),
        slurm_targets,
    );
    // A SlurmCluster created or edited (`nodeSetNamespaces`) admits or refuses its sets anew.
    let sets = store.clone();
    let cluster_changes = watcher(
        Api::<SlurmCluster>::all(ctx.client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .touched_objects()
    .predicate_filter(predicates::generation, Default::default())
    .filter_map(|cluster| std::future::ready(cluster.ok()))
    .flat_map(move |cluster| futures::stream::iter(sets_of_cluster(&cluster.name_any(), &sets)));
    // A gain of the Lease reconciles every set, and a deletion's deadline counts from it.
    let acting = ctx.clone();
    let gained = ctx
        .leadership
        .gained()
        .inspect(move |()| acting.act_from_now());
    let driver = Controller::for_stream(nodesets, store.clone())
        .owns_stream(
            // Not held at a relist (no cache of them is read: each round lists the set's pods),
            // and a tenant's labelled Pod may carry 256 KiB of annotations.
            pod_watch(client, namespace)
                .default_backoff()
                .touched_objects(),
        )
        .with_config(
            controller::Config::default()
                .debounce(Duration::from_millis(500))
                .concurrency(ctx.reconcile_concurrency),
        )
        .reconcile_on(triggers)
        .reconcile_on(cluster_changes)
        .reconcile_all_on(gained)
        // A Kubernetes node cordoned or uncordoned: its pods' sets drain or resume their nodes.
        .reconcile_all_on(ctx.cordons.changes())
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, Arc::new(ctx))
        .for_each(|result| kit::log_outcome(CONTROLLER, result));
    (store, driver)
}

#[cfg(test)]
mod tests;
