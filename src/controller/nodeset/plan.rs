//! The SlurmNodeSet controller's decisions, free of I/O: given the SlurmNodeSet, its pods and the Slurm
//! index, which pods to create or delete, which nodes to drain, resume or forget, and what the
//! status says. The driver (`super`) only carries these actions out.
//!
//! **Fail closed.** A pod that may host a Slurm node is deleted only when a *trusted* view of
//! Slurm (poller healthy, node list confirmed complete and error-free within [`MAX_INDEX_AGE`])
//! shows its node drained — DRAIN set and neither ALLOCATED, MIXED nor COMPLETING, and no running
//! job in the index — or absent from that list; and slurmctld, asked by the driver just before
//! the delete, still says so ([`Confirm`]: the view may predate a resume and a new job, or a
//! slurmd's registration). Any doubt (no client, stale index, poller down) means wait. Two
//! exceptions, both safe or explicitly asked for: a pod that was never scheduled (slurmd never
//! ran), and a drain that `scaleIn.drainTimeout` says has lasted long enough, whether for a
//! scale-in, a rolling update or the set's deletion (the user accepted that its jobs are
//! killed; the drain itself must have been ours and recorded).
//!
//! **Node ownership.** The set acts only on dynamic nodes whose owner record (`extra`, parsed
//! into [`Node::owner`]) names this set ([`Input::owner`]): a static node, or a node of another
//! owner (another namespace's set, a hand-started slurmd), is never drained, resumed or
//! deleted, and its name is never given to a new pod. Such a node named like one of the set's
//! is a [`Conflict`] (the `NodeNamesOwned` condition names it); a pod whose node is foreign
//! is not deleted while scheduled (its slurmd may serve that node's jobs). New pods are created
//! only with a trusted view: a name is given out only when Slurm has no node of that name.
//!
//! **Cordons.** A pod that stays on a cordoned Kubernetes node ([`Host::Cordoned`]) has its node
//! drained ([`cordon_reason`]), and resumed once the host is known to be schedulable again; the
//! set deletes nothing for a cordon (the eviction is `kubectl drain`'s, through the
//! PodDisruptionBudget). Not knowing the host ([`Host::Unknown`]), a drain for a cordon stays.
//!
//! **Drain ownership.** Our drains' reasons begin `slurm-operator: ` ([`DRAIN_PREFIX`] and a
//! space; leading blanks aside). A drain without it
//! belongs to someone else (an admin, a health check): it is never overwritten, never resumed;
//! so is FAIL (`scontrol update state=FAIL`), which closes a node like DRAIN. A node that is
//! DOWN, NOT_RESPONDING or waiting for a reboot is never resumed either. The plan reads a view
//! up to [`MAX_INDEX_AGE`] old, so the driver reads the node again just before a drain, a
//! resume or a record's removal and acts only if the node is still the set's and the decision
//! still holds ([`super::apply_slurm`]).
//!
//! **Deletion.** A set being deleted ([`Input::deleting`]) is planned as a scale-in to 0 under
//! the same rules (its drains say [`WHY_DELETED`]); its node records are forgotten once their
//! pods are gone, and [`NodeSetPlan::remaining`] says what of the set is still there.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use crate::crd::{NodeSetSlurmCounts, UpdateStrategy, UpdateStrategyType};
use crate::slurm::node_owner::NodeOwner;
use crate::slurm::types::{Node, NodeBaseState};
use crate::state::index::{ClusterState, NodeJobs};

/// Every drain reason the operator sets starts with this.
pub const DRAIN_PREFIX: &str = "slurm-operator:";
/// Slurm's limit for a node reason we keep to.
pub const MAX_REASON_CHARS: usize = 256;
/// A node list older than this is not trusted for deleting pods; or than two of the cluster's
/// poll intervals, where that is longer (`spec.pollInterval` up to 5 minutes: its poller lists
/// nodes no more often).
pub const MAX_INDEX_AGE: chrono::TimeDelta = chrono::TimeDelta::seconds(60);
/// Most pods one plan creates; the pods' own events bring the next plan for the rest. Without a
/// bound, `replicas: 2147483647` (a typo, a runaway autoscaler) made one plan allocate billions
/// of actions. The ReplicaSet controller's burst (`--burst-replicas`) is the same number.
pub const MAX_CREATES_PER_PLAN: usize = 500;

/// Why a node is drained (the part after the prefix).
pub const WHY_SCALE_IN: &str = "scale-in";
pub const WHY_UPDATE: &str = "rolling update";
pub const WHY_TERMINATING: &str = "pod terminating";
pub const WHY_ENDED: &str = "pod ended";
pub const WHY_DELETED: &str = "SlurmNodeSet deleted";
/// A pod's Kubernetes node is cordoned (`kubectl cordon`, and `kubectl drain` before it
/// evicts): followed by the node's name ([`cordon_reason`]).
pub const WHY_CORDONED: &str = "cordoned";

/// The drain reason of a pod whose Kubernetes node `host` is cordoned. The node's name comes
/// last: a long one cut at [`MAX_REASON_CHARS`] leaves the reason recognisable.
pub fn cordon_reason(host: &str) -> String {
    drain_reason(&format!("{WHY_CORDONED}: Kubernetes node {host}"))
}

/// Whether `node` carries our drain for a cordon.
pub fn is_cordon_drain(node: &Node) -> bool {
    let prefix = drain_reason(WHY_CORDONED);
    drain_owner(node) == DrainOwner::Us
        && node
            .reason
            .as_deref()
            .is_some_and(|r| r.trim_start().starts_with(&format!("{prefix}:")))
}

/// `slurm-operator: <why>`, with control characters turned into spaces, whitespace collapsed
/// and the whole cut to [`MAX_REASON_CHARS`] characters.
pub fn drain_reason(why: &str) -> String {
    let cleaned: Vec<&str> = why
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect();
    let text = format!("{DRAIN_PREFIX} {}", cleaned.join(" "));
    text.chars().take(MAX_REASON_CHARS).collect()
}

/// Who set a node's drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainOwner {
    /// Neither DRAIN nor FAIL is set (a reason left over from an earlier, resumed drain does
    /// not count).
    NotDrained,
    /// DRAIN is set with our prefix.
    Us,
    /// DRAIN is set by someone else (no prefix, or no reason at all), or FAIL without DRAIN: an
    /// admin's (or Slurm's) mark that closes the node too. Our drain would overwrite its reason,
    /// and our resume would clear it.
    Someone,
}

pub fn drain_owner(node: &Node) -> DrainOwner {
    if !node.state.is_drain() {
        if node.state.is_fail() {
            DrainOwner::Someone
        } else {
            DrainOwner::NotDrained
        }
    } else if node
        .reason
        .as_deref()
        .and_then(|r| r.trim_start().strip_prefix(DRAIN_PREFIX))
        // Ours are `slurm-operator: <why>` (`drain_reason`): an admin's `slurm-operator:hold`
        // is not, and is never resumed or taken over by the operator.
        .is_some_and(|rest| rest.starts_with(' '))
    {
        DrainOwner::Us
    } else {
        DrainOwner::Someone
    }
}

/// Whether a node may be removed: DRAIN (or FAIL) set, nothing allocated or completing, and no
/// job the index knows of running there.
pub fn is_drained(node: &Node, jobs: Option<&NodeJobs>) -> bool {
    (node.state.is_drain() || node.state.is_fail())
        && !node.state.is_busy()
        && jobs.is_none_or(|j| j.running == 0)
}

/// Whether a node may be resumed by us: our drain, neither DOWN nor NOT_RESPONDING, and nothing
/// else a RESUME would clear (FAIL, a pending reboot).
pub fn may_resume(node: &Node) -> bool {
    let s = &node.state;
    drain_owner(node) == DrainOwner::Us
        && !s.is_down()
        && !s.is_not_responding()
        && !s.is_fail()
        && !s.is_reboot_requested()
}

/// The Kubernetes node a pod runs on, as far as its cordon goes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Host {
    /// Not known: the pod is not scheduled, or the operator has no complete view of the
    /// Kubernetes nodes (listing them, or refused: an RBAC without `nodes`).
    #[default]
    Unknown,
    /// Schedulable.
    Open,
    /// Cordoned (`spec.unschedulable`): its name.
    Cordoned(String),
}

/// What the driver knows about one pod of the set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodView {
    pub name: String,
    pub ordinal: u32,
    /// `spec.nodeName` is set.
    pub scheduled: bool,
    /// Whether its Kubernetes node is cordoned.
    pub host: Host,
    /// The pod's `Ready` condition is true.
    pub ready: bool,
    /// When the `Ready` condition last turned true (its `lastTransitionTime`), if it is true.
    pub ready_since: Option<DateTime<Utc>>,
    /// Phase Failed or Succeeded: slurmd is gone for good; the pod is replaced.
    pub finished: bool,
    /// `deletionTimestamp` is set.
    pub terminating: bool,
    /// `slurm.rs/deletion-cost`, else `controller.kubernetes.io/pod-deletion-cost` (0 when
    /// absent or unparsable): lower goes first at scale-in.
    pub deletion_cost: i64,
    /// `slurm.rs/template-hash`.
    pub template_hash: Option<String>,
    /// `slurm.rs/busy` is `true`.
    pub busy_label: bool,
    /// `slurm.rs/drain-started`: when we drained its node.
    pub drain_started: Option<DateTime<Utc>>,
    /// The pod's current `SlurmNodeState` condition: (status, reason, message).
    pub node_condition: Option<(String, String, String)>,
}

/// The Slurm side as the planner sees it.
#[derive(Debug, Clone, Copy)]
pub struct SlurmView<'a> {
    /// The cluster's index; `None` when no client is registered for the SlurmCluster.
    pub state: Option<&'a ClusterState>,
    pub now: DateTime<Utc>,
    /// Whether a round of this process trusted the cluster's node list before: without a
    /// trusted view now, that is an outage (the client dropped or replaced included), not a
    /// start.
    pub had_view: bool,
}

impl<'a> SlurmView<'a> {
    /// The index, when it may back a destructive decision: poller up and the node list
    /// confirmed within [`MAX_INDEX_AGE`], or two poll intervals of a slower poller. (Each drain,
    /// resume and delete reads its node from slurmctld again first.)
    pub fn trusted(&self) -> Option<&'a ClusterState> {
        let state = self.state?;
        let synced = state.nodes_synced_at?;
        let age = self.now.signed_duration_since(synced);
        let max = chrono::TimeDelta::from_std(state.poll_interval.saturating_mul(2))
            .map_or(MAX_INDEX_AGE, |two| two.max(MAX_INDEX_AGE));
        (state.health.is_up() && age <= max && age >= -MAX_INDEX_AGE).then_some(state)
    }
}

/// Whether `node` is this set's: dynamic, with an owner record naming `owner`.
pub fn is_ours(node: &Node, owner: &NodeOwner) -> bool {
    node.state.is_dynamic() && node.owner.as_ref() == Some(owner)
}

/// A node named like one of the set's that is not the set's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub node: String,
    /// The owner it records, if any.
    pub owner: Option<NodeOwner>,
    /// A static node (from slurm.conf), not a dynamic one.
    pub is_static: bool,
}

impl Conflict {
    pub fn of(node: &Node) -> Self {
        Self {
            node: node.name.clone(),
            owner: node.owner.clone(),
            is_static: !node.state.is_dynamic(),
        }
    }
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.owner, self.is_static) {
            (_, true) => write!(f, "{} is a static node", self.node),
            (Some(owner), false) => write!(f, "{} belongs to SlurmNodeSet {owner}", self.node),
            (None, false) => write!(f, "{} is a dynamic node with no owner record", self.node),
        }
    }
}

/// Everything the planner needs.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The node-name prefix: pods and their nodes are `<prefix>-<ordinal>`
    /// (`super::pods::node_prefix`).
    pub prefix: &'a str,
    /// The set itself, as node owner records name it.
    pub owner: &'a NodeOwner,
    pub replicas: i32,
    pub template_hash: &'a str,
    pub strategy: &'a UpdateStrategy,
    pub drain_timeout: Option<std::time::Duration>,
    /// `spec.minReadySeconds`: how long a pod must have been Ready to count as available.
    pub min_ready_seconds: i32,
    /// `spec.slurm.partitions`: the partitions each registered node should be in.
    pub partitions: &'a [String],
    pub pods: &'a [PodView],
    /// Ordinals whose pod name is taken by a pod this set does not own (never reused).
    pub taken: &'a BTreeSet<u32>,
    pub slurm: SlurmView<'a>,
    /// The set is being deleted: every pod leaves as in a scale-in to 0 (drained first), and
    /// the plan says what is left ([`NodeSetPlan::remaining`]) before the finalizer may go.
    pub deleting: bool,
}

/// Why a pod is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteWhy {
    /// Scale-in; its node is drained (or never registered).
    ScaleIn,
    /// Rolling update; its node is drained.
    Update,
    /// The pod failed or completed: it is replaced.
    Finished,
    /// `scaleIn.drainTimeout` ran out before the node of a pod leaving for this reason was
    /// drained: a never-ending job holds up neither a scale-in, an update nor a deletion.
    DrainTimeout(Leaving),
    /// The set is being deleted; its node is drained (or never registered).
    SetDeleted,
}

/// Why a pod leaves through a drain of its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leaving {
    ScaleIn,
    Update,
    SetDeleted,
}

impl Leaving {
    /// The delete once the node is drained.
    pub fn drained(self) -> DeleteWhy {
        match self {
            Self::ScaleIn => DeleteWhy::ScaleIn,
            Self::Update => DeleteWhy::Update,
            Self::SetDeleted => DeleteWhy::SetDeleted,
        }
    }
}

/// What slurmctld, asked by the driver just before a pod's delete, must still show for the
/// delete to go. The plan's view may be up to [`MAX_INDEX_AGE`] old: since then the pod's slurmd
/// may have registered, or a node seen drained may have been resumed (a scale back out) and
/// started a job. Otherwise the delete waits for a plan from a view that shows the change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirm {
    /// Nothing: the delete does not rest on the node's state (a pod never scheduled, or
    /// finished; a drain past `scaleIn.drainTimeout`).
    Nothing,
    /// No node of the pod's name: the view had none.
    NodeAbsent,
    /// The node drained (DRAIN or FAIL set, nothing allocated or completing), or gone: the view
    /// showed it drained.
    NodeDrained,
    /// The node still carries our drain, or is gone: a drain past `scaleIn.drainTimeout`, whose
    /// jobs the user accepted to end. One drained by someone else since (an admin who keeps its
    /// jobs running) is not ours to end, and a view that may be stale cannot tell.
    OurDrain,
}

/// One step for the driver, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    CreatePod {
        ordinal: u32,
    },
    DeletePod {
        name: String,
        why: DeleteWhy,
        /// What slurmctld, asked just before, must still show for the delete to go.
        confirm: Confirm,
    },
    Drain {
        node: String,
        reason: String,
    },
    Resume {
        node: String,
    },
    DeleteNodeRecord {
        node: String,
    },
    /// Record on the pod that its node's drain started now (for `drainTimeout`).
    MarkDrainStarted {
        pod: String,
    },
    ClearDrainStarted {
        pod: String,
    },
    /// Set `slurm.rs/busy` (the PodDisruptionBudget's selector) to `busy`.
    SetBusy {
        pod: String,
        busy: bool,
    },
    /// Project the Slurm node state onto the pod's `SlurmNodeState` condition.
    SetNodeCondition {
        pod: String,
        status: bool,
        reason: String,
        message: String,
        /// The status changes (or the pod has no such condition yet): only then does
        /// `lastTransitionTime` move (a job starting on an idle node changes the reason only).
        transition: bool,
    },
}

impl Action {
    /// Whether carrying the action out calls slurmrestd.
    pub fn calls_slurm(&self) -> bool {
        match self {
            Action::Drain { .. }
            | Action::Resume { .. }
            | Action::DeleteNodeRecord { .. }
            // Its name is asked about first.
            | Action::CreatePod { .. } => true,
            // The node is read again just before.
            Action::DeletePod { confirm, .. } => *confirm != Confirm::Nothing,
            _ => false,
        }
    }
}

impl Action {
    /// Whether the action can end a job or lose a node (only the leader, its Lease read again,
    /// does it).
    pub fn is_destructive(&self) -> bool {
        matches!(self, Self::DeletePod { .. } | Self::DeleteNodeRecord { .. })
    }
}

/// A node the set waits for, and why (for the `Draining` condition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub pod: String,
    pub why: &'static str,
}

/// What came of a pod's delete that rested on slurmctld's word ([`Confirm`]), as the driver
/// carried it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmed {
    /// The pod was deleted, or was gone already.
    Deleted,
    /// slurmctld showed the node changed since the plan's view: the pod was kept.
    Superseded,
    /// slurmctld could not be asked, or the delete failed.
    Failed,
}

/// The nodes the set waits for once the round's actions ran: the plan's, less the pods whose
/// delete went through, and with what stopped the others. A pod whose delete was not tried
/// (no request slot, an earlier action on it failed) keeps the plan's entry.
pub fn waiting_after(waiting: &[Waiting], outcomes: &BTreeMap<String, Confirmed>) -> Vec<Waiting> {
    waiting
        .iter()
        .filter_map(|w| {
            let why = match outcomes.get(&w.pod) {
                None => w.why,
                Some(Confirmed::Deleted) => return None,
                Some(Confirmed::Superseded) => WAIT_SUPERSEDED,
                Some(Confirmed::Failed) => WAIT_DELETE_FAILED,
            };
            Some(Waiting {
                pod: w.pod.clone(),
                why,
            })
        })
        .collect()
}

/// How far the planner could trust Slurm (see [`SlurmView::trusted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ViewState {
    /// No client is registered for the SlurmCluster.
    #[default]
    NoClient,
    /// An index exists but is stale, incomplete or its poller is down.
    Untrusted,
    /// Fresh and complete: the Slurm counts are current.
    Trusted,
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeSetPlan {
    pub actions: Vec<Action>,
    pub waiting: Vec<Waiting>,
    pub counts: Counts,
    pub view: ViewState,
    /// When the next pod that is Ready but not yet available (`minReadySeconds`) becomes
    /// available: the driver requeues then.
    pub available_in: Option<std::time::Duration>,
    /// With a trusted view and `partitions` set: each registered node of a pod of the current
    /// template that is missing from some of them, with the partitions it is missing from.
    /// `None` without a view.
    pub partition_misses: Option<Vec<(String, Vec<String>)>>,
    /// With a trusted view: the registered nodes of pods of an earlier template missing from
    /// some of `partitions` (a change of the list is a change of the template: they carry the
    /// list before until replaced).
    pub partition_outdated: Vec<String>,
    /// With a trusted view: nodes named like the set's that are not the set's. `None` without
    /// a view.
    pub conflicts: Option<Vec<Conflict>>,
    /// With a trusted view: the set's pods and its nodes in Slurm (names, sorted) that are
    /// still there, i.e. what a deletion still waits for; empty once nothing of the set is
    /// left. `None` without a view (nothing can be said to be gone).
    pub remaining: Option<Vec<String>>,
}

/// Status numbers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Counts {
    /// Pods that exist and are not terminating.
    pub replicas: i32,
    pub ready: i32,
    /// Ready for at least `minReadySeconds`.
    pub available: i32,
    pub updated: i32,
    /// `None` without a trusted Slurm view.
    pub slurm: Option<NodeSetSlurmCounts>,
    /// Of the pods above, those on their way out (scale-in victims; every pod of a set being
    /// deleted): counted apart in the `Ready` message, since they are not among the nodes the
    /// set keeps.
    pub leaving: LeavingCounts,
    /// Of the available pods the set keeps, those whose Slurm node takes no job (down, not
    /// responding, its registration refused (`INVALID_REG`), not registered, its name
    /// another's), by pod name: the `SlurmNodeState` condition projected from a trusted view;
    /// without one, each pod's as last written (none written yet: not known to be usable). A
    /// drained node (an admin's, slurmctld's, a cordon's) still counts as usable.
    pub not_usable: Vec<NotUsable>,
}

/// An available pod whose Slurm node takes no job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotUsable {
    pub pod: String,
    /// What Slurm shows: the `SlurmNodeState` condition's message.
    pub why: String,
    /// Only a change helps: a node not the set's holds its name, or slurmctld refused the
    /// node's registration (`INVALID_REG`: slurmd reports less than `spec.slurm` says) and no
    /// rolling update is replacing the pod (a pod of an older template under `RollingUpdate`
    /// is, perhaps by the fix).
    pub stuck: bool,
}

pub const REASON_INVALID_REGISTRATION: &str = "InvalidRegistration";
pub const REASON_NODE_NAME_CONFLICT: &str = "NodeNameConflict";

/// Pods on their way out, and how many of them are ready and available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeavingCounts {
    pub pods: i32,
    pub ready: i32,
    pub available: i32,
}

/// Why an available pod's node is not known to be usable: no fresh view has shown it yet.
pub const NOT_SEEN_IN_SLURM: &str = "not seen in Slurm yet";
pub const WAIT_NO_VIEW: &str = "no fresh, complete view of Slurm's nodes";
pub const WAIT_JOBS: &str = "jobs still running on the node";
pub const WAIT_FOREIGN_DRAIN: &str = "drained by someone else with jobs still running";
pub const WAIT_DRAIN_REQUESTED: &str = "drain requested";
/// An outdated pod whose node someone else drained: the update would replace the node with a
/// fresh one, the drain and its reason gone.
pub const WAIT_UPDATE_HELD: &str = "drained by someone else: the rolling update replaces it once \
     they resume the node";
pub const WAIT_CONFLICT: &str =
    "its node name belongs to another node in Slurm (see NodeNamesOwned)";
/// A drained node's pod, deleted this round if slurmctld still shows the node drained.
pub const WAIT_CONFIRM_DRAINED: &str =
    "drained; its pod is deleted once slurmctld confirms the node is still drained and idle";
/// An unregistered pod, deleted this round if slurmctld still has no node of its name.
pub const WAIT_CONFIRM_ABSENT: &str =
    "not registered; its pod is deleted once slurmctld confirms it has no node of that name";
/// A drain past `scaleIn.drainTimeout`: the pod is deleted this round if slurmctld still shows
/// our drain on its node.
pub const WAIT_CONFIRM_TIMED_OUT: &str = "drain timed out (scaleIn.drainTimeout); its pod is \
     deleted once slurmctld confirms the node still carries the operator's drain";
/// slurmctld, asked before the delete, showed the node changed since the view.
pub const WAIT_SUPERSEDED: &str = "slurmctld shows the node changed since the operator's view \
     (resumed, running a job, drained by someone else, or its slurmd registered): the pod stays \
     until a fresh view decides again";
/// The delete, or slurmctld's confirmation before it, failed.
pub const WAIT_DELETE_FAILED: &str = "its pod's delete, or slurmctld's confirmation before it, \
     failed (see ReplicaFailure); retried";

/// Whether a pod counts as available: Ready, and for at least `min_ready_seconds` (measured from
/// its Ready condition's `lastTransitionTime`; without one, a pod is available only when
/// `min_ready_seconds` is 0 — as Kubernetes' own `IsPodAvailable`).
pub fn is_available(pod: &PodView, min_ready_seconds: i32, now: DateTime<Utc>) -> bool {
    pod.ready
        && (min_ready_seconds <= 0
            || pod.ready_since.is_some_and(|since| {
                now.signed_duration_since(since)
                    >= chrono::TimeDelta::seconds(i64::from(min_ready_seconds))
            }))
}

/// How long until the first pod that is Ready but not yet available becomes available.
pub fn next_available(
    pods: &[&PodView],
    min_ready_seconds: i32,
    now: DateTime<Utc>,
) -> Option<std::time::Duration> {
    pods.iter()
        .filter(|p| p.ready && !is_available(p, min_ready_seconds, now))
        .filter_map(|p| {
            let at = p.ready_since? + chrono::TimeDelta::seconds(i64::from(min_ready_seconds));
            // At least a second: never a busy loop on a clock that disagrees by a hair.
            Some(
                at.signed_duration_since(now)
                    .to_std()
                    .unwrap_or_default()
                    .max(std::time::Duration::from_secs(1)),
            )
        })
        .min()
}

/// Whether `node` is named like a pod of set `name` (`<name>-<ordinal>`).
pub fn ordinal_of(name: &str, pod: &str) -> Option<u32> {
    let rest = pod.strip_prefix(name)?.strip_prefix('-')?;
    if rest.is_empty()
        || !rest.bytes().all(|b| b.is_ascii_digit())
        || (rest.len() > 1 && rest.starts_with('0'))
    {
        return None;
    }
    rest.parse().ok()
}

/// Victim order (first = removed first): unscheduled, not ready, already being drained by us,
/// broken in Slurm (down or its registration refused, and idle), lowest deletion cost,
/// Slurm-idle or already drained before busy, earliest job deadline, highest ordinal.
fn victim_order(a: &PodView, b: &PodView, state: Option<&ClusterState>) -> Ordering {
    // States that last until someone acts, on a node that runs nothing: not NOT_RESPONDING (a
    // missed ping; its jobs may run on), not a node Slurm does not show (yet: a new pod's slurmd
    // registers any moment), nothing without a view.
    let broken = |p: &PodView| {
        state.and_then(|s| s.nodes.get(&p.name)).is_some_and(|n| {
            (n.state.is_down() || n.state.has_flag(INVALID_REG)) && !n.state.is_busy()
        })
    };
    let busy = |p: &PodView| match state {
        // Without a view, assume busy: the order then falls back to the other keys.
        None => true,
        Some(s) => {
            let jobs = s.node_jobs.get(&p.name).is_some_and(|j| j.running > 0);
            jobs || s.nodes.get(&p.name).is_some_and(|n| n.state.is_busy())
        }
    };
    let deadline = |p: &PodView| {
        state
            .and_then(|s| s.node_jobs.get(&p.name))
            .map_or(DateTime::<Utc>::MAX_UTC, |j| {
                j.deadline.unwrap_or(DateTime::<Utc>::MAX_UTC)
            })
    };
    // Once we started draining a node it stays first in line (after pods that never ran or are
    // not ready: a slurmd not serving goes first, as a ReplicaSet removes unready pods first):
    // resuming it to drain another would waste the wait and flip-flop as jobs come and go. Not
    // a drain for a cordon: that pod is not leaving through the set, and a busy one would hold
    // a scale-in up where an idle pod could go at once.
    let ours = |p: &PodView| {
        p.drain_started.is_some()
            || state
                .and_then(|s| s.nodes.get(&p.name))
                .is_some_and(|n| drain_owner(n) == DrainOwner::Us && !is_cordon_drain(n))
    };
    a.scheduled
        .cmp(&b.scheduled)
        .then(a.ready.cmp(&b.ready))
        .then(ours(b).cmp(&ours(a)))
        .then(broken(b).cmp(&broken(a)))
        .then(a.deletion_cost.cmp(&b.deletion_cost))
        .then(busy(a).cmp(&busy(b)))
        .then(deadline(a).cmp(&deadline(b)))
        .then(b.ordinal.cmp(&a.ordinal))
}

/// Sort pods into victim order.
pub fn victim_sorted<'p>(
    pods: impl IntoIterator<Item = &'p PodView>,
    state: Option<&ClusterState>,
) -> Vec<&'p PodView> {
    let mut pods: Vec<_> = pods.into_iter().collect();
    pods.sort_by(|a, b| victim_order(a, b, state));
    pods
}

/// Compute the plan.
pub fn plan(input: &Input<'_>) -> NodeSetPlan {
    let mut plan = NodeSetPlan::default();
    let full = input.slurm.trusted();
    // Every decision below sees only the set's own nodes; the others named like its pods are
    // conflicts, handled here and in `leave` and the projection.
    let owned = full.map(|state| ClusterState {
        nodes: std::sync::Arc::new(
            state
                .nodes
                .values()
                .filter(|n| is_ours(n, input.owner))
                .map(|n| (n.name.clone(), n.clone()))
                .collect(),
        ),
        ..state.clone()
    });
    let view = owned.as_ref();
    let foreign = |name: &str| {
        full.and_then(|s| s.nodes.get(name))
            .filter(|n| !is_ours(n, input.owner))
    };
    plan.conflicts = full.map(|state| {
        state
            .nodes
            .values()
            .filter(|n| ordinal_of(input.prefix, &n.name).is_some() && !is_ours(n, input.owner))
            .map(Conflict::of)
            .collect()
    });
    let now = input.slurm.now;
    // A set being deleted leaves as a scale-in to 0 does: drained first.
    let replicas = if input.deleting {
        0
    } else {
        usize::try_from(input.replicas.max(0)).unwrap_or(0)
    };

    // A pod someone else deletes (an eviction, `kubectl drain`, by hand) still runs its slurmd
    // for its grace period, and one that ended (evicted for node pressure, its node shut down)
    // runs none, while slurmctld counts its node up until `SlurmdTimeout`: slurmctld must not
    // start jobs there meanwhile (they would fail to launch). Our drain: resumed if a new pod of
    // that name comes back, forgotten with the record otherwise. Drained first, then an ended
    // pod is replaced; a terminating one is waited for.
    for pod in input.pods.iter().filter(|p| p.terminating || p.finished) {
        if let Some(node) = view.and_then(|state| state.nodes.get(&pod.name))
            && drain_owner(node) == DrainOwner::NotDrained
            && !node.state.is_down()
        {
            let why = if pod.finished {
                WHY_ENDED
            } else {
                WHY_TERMINATING
            };
            plan.actions.push(Action::Drain {
                node: pod.name.clone(),
                reason: drain_reason(why),
            });
        }
        if pod.finished && !pod.terminating {
            plan.actions.push(Action::DeletePod {
                name: pod.name.clone(),
                why: DeleteWhy::Finished,
                confirm: Confirm::Nothing,
            });
        }
    }
    let active: Vec<&PodView> = input
        .pods
        .iter()
        .filter(|p| !p.finished && !p.terminating)
        .collect();

    // Scale-in victims.
    let excess = active.len().saturating_sub(replicas);
    let sorted = victim_sorted(active.iter().copied(), view);
    let victims: BTreeSet<&str> = sorted
        .iter()
        .take(excess)
        .map(|p| p.name.as_str())
        .collect();
    let kept: Vec<&PodView> = sorted.iter().skip(excess).copied().collect();

    // Rolling update: which kept pods are replaced now.
    let mut updating: BTreeSet<&str> = BTreeSet::new();
    if input.strategy.type_ == UpdateStrategyType::RollingUpdate {
        let outdated: Vec<&PodView> = kept
            .iter()
            .copied()
            .filter(|p| p.template_hash.as_deref() != Some(input.template_hash))
            .collect();
        // The update's own drains. Ours for another cause (a scale-in, scaled back out since)
        // is resumed as any kept pod's is; the update then takes the pod in its turn, within
        // `maxUnavailable`. Without the node's reason, the annotation says a drain began.
        let update_reason = drain_reason(WHY_UPDATE);
        let in_progress = |p: &PodView| match view.and_then(|s| s.nodes.get(&p.name)) {
            Some(node) => {
                drain_owner(node) == DrainOwner::Us
                    && node.reason.as_deref().map(str::trim) == Some(update_reason.as_str())
            }
            None => p.drain_started.is_some(),
        };
        updating.extend(
            outdated
                .iter()
                .filter(|p| in_progress(p))
                .map(|p| p.name.as_str()),
        );
        let missing = replicas.saturating_sub(active.len());
        // Ready but not yet past `minReadySeconds` counts as unavailable, like not ready. But
        // not an outdated pod that is not ready: it is first in victim order, and its
        // replacement is what the update is for (as a Deployment takes unhealthy old pods
        // first); counting it would stop the update for good behind a broken template that a
        // newer one fixes. (An outdated pod ready but inside `minReadySeconds` does count: it
        // is not first in victim order, so another would be taken beside it.)
        //
        // A pod of the current template counts as unavailable too while its node takes no job
        // (not registered yet, down, its registration refused: `INVALID_REG`, as a template
        // asking for more memory than the hosts have gets): its readiness probe only sees
        // slurmd's port, and the update would otherwise roll such a template over every node.
        // (Without a view nothing is drained at all.)
        let serves = |p: &PodView| {
            view.and_then(|state| state.nodes.get(&p.name))
                .is_some_and(takes_jobs)
        };
        let not_ready = kept
            .iter()
            .filter(|p| {
                let current = p.template_hash.as_deref() == Some(input.template_hash);
                (!is_available(p, input.min_ready_seconds, now) || (current && !serves(p)))
                    && !updating.contains(p.name.as_str())
                    && (current || p.ready)
            })
            .count();
        let budget =
            usize::try_from(input.strategy.max_unavailable_count(input.replicas)).unwrap_or(1);
        let free = budget.saturating_sub(missing + not_ready + updating.len());
        // Outdated pods are already in victim order (kept is sorted). One whose node someone
        // else drained (an admin's "bad DIMM") waits: replacing it would register a fresh node
        // of its name, taking jobs, the drain gone. Not one slurmctld drained for refusing its
        // registration (`INVALID_REG`): that drain is the old template's, which the update fixes.
        let held = |p: &PodView| {
            view.and_then(|s| s.nodes.get(&p.name)).is_some_and(|node| {
                drain_owner(node) == DrainOwner::Someone && !node.state.has_flag(INVALID_REG)
            })
        };
        for pod in outdated
            .iter()
            .filter(|p| !updating.contains(p.name.as_str()) && held(p))
        {
            plan.waiting.push(Waiting {
                pod: pod.name.clone(),
                why: WAIT_UPDATE_HELD,
            });
        }
        let fresh: Vec<&str> = outdated
            .iter()
            .filter(|p| !updating.contains(p.name.as_str()) && !held(p))
            .take(free)
            .map(|p| p.name.as_str())
            .collect();
        updating.extend(fresh);
    }

    // Scale-out: the lowest ordinals used by no pod and by no node in Slurm (ours left over, or
    // anyone else's), at most MAX_CREATES_PER_PLAN at once; only with a trusted view, so that a
    // name is never given out while Slurm may hold it (fail closed).
    let missing = replicas
        .saturating_sub(active.len())
        .min(MAX_CREATES_PER_PLAN);
    if let (true, Some(full)) = (missing > 0, full) {
        let mut used: BTreeSet<u32> = input.pods.iter().map(|p| p.ordinal).collect();
        used.extend(input.taken);
        let recorded: BTreeSet<u32> = full
            .nodes
            .keys()
            .filter_map(|n| ordinal_of(input.prefix, n))
            .collect();
        let mut ordinal = 0u32;
        let mut created = 0;
        while created < missing {
            if !used.contains(&ordinal) && !recorded.contains(&ordinal) {
                plan.actions.push(Action::CreatePod { ordinal });
                created += 1;
            }
            ordinal = ordinal.saturating_add(1);
            if ordinal == u32::MAX {
                break;
            }
        }
    }

    // Leaving pods: drain, then delete once drained.
    for pod in &active {
        let why = if victims.contains(pod.name.as_str()) && input.deleting {
            Some((WHY_DELETED, Leaving::SetDeleted))
        } else if victims.contains(pod.name.as_str()) {
            Some((WHY_SCALE_IN, Leaving::ScaleIn))
        } else if updating.contains(pod.name.as_str()) {
            Some((WHY_UPDATE, Leaving::Update))
        } else {
            None
        };
        match why {
            // A scheduled pod whose name Slurm gives to another node: touch neither.
            Some(_) if pod.scheduled && foreign(&pod.name).is_some() => {
                plan.waiting.push(Waiting {
                    pod: pod.name.clone(),
                    why: WAIT_CONFLICT,
                })
            }
            Some((reason, leaving)) => leave(
                &mut plan,
                pod,
                reason,
                leaving,
                view,
                input.drain_timeout,
                now,
            ),
            None => stay(&mut plan, pod, view),
        }
    }

    // Node records whose pod is gone: forget them (Slurm refuses while jobs run; retried). A
    // pod of the name the set does not own (orphaned by `--cascade=orphan` from an earlier set
    // of this name, whose slurmd registered with the same owner record) still runs its slurmd.
    if let Some(state) = view {
        let pods: BTreeSet<&str> = input.pods.iter().map(|p| p.name.as_str()).collect();
        let mut remaining = pods.clone();
        for node in state.nodes.values() {
            // `view` holds only the set's own nodes (dynamic, owner record ours).
            let gone = ordinal_of(input.prefix, &node.name)
                .is_some_and(|ordinal| !input.taken.contains(&ordinal));
            if gone {
                remaining.insert(node.name.as_str());
            }
            if gone && !pods.contains(node.name.as_str()) {
                plan.actions.push(Action::DeleteNodeRecord {
                    node: node.name.clone(),
                });
            }
        }
        plan.remaining = Some(remaining.into_iter().map(str::to_owned).collect());
    }

    // Projection onto the pods: busy label and node-state condition.
    let mut projected = BTreeMap::new();
    if let Some(state) = view {
        for pod in &active {
            let node = state.nodes.get(&pod.name);
            let busy = node.is_some_and(|n| n.state.is_busy())
                || state
                    .node_jobs
                    .get(&pod.name)
                    .is_some_and(|j| j.running > 0);
            if busy != pod.busy_label {
                plan.actions.push(Action::SetBusy {
                    pod: pod.name.clone(),
                    busy,
                });
            }
            let (status, reason, message) = match foreign(&pod.name) {
                Some(other) => (
                    false,
                    REASON_NODE_NAME_CONFLICT.to_owned(),
                    format!(
                        "{}; this pod's node is not this SlurmNodeSet's",
                        Conflict::of(other)
                    ),
                ),
                None => node_condition(node),
            };
            let current = pod.node_condition.as_ref();
            let status_str = if status { "True" } else { "False" };
            if current.is_none_or(|(s, r, m)| s != status_str || *r != reason || *m != message) {
                plan.actions.push(Action::SetNodeCondition {
                    pod: pod.name.clone(),
                    status,
                    reason: reason.clone(),
                    message: message.clone(),
                    transition: current.is_none_or(|(s, _, _)| s != status_str),
                });
            }
            projected.insert(pod.name.as_str(), (status, reason, message));
        }
    } else if input.slurm.had_view
        || input
            .slurm
            .state
            .is_some_and(|state| state.nodes_synced_at.is_some())
    {
        // An outage (a view once trusted or synced, no longer trusted; its client dropped or
        // replaced too): a node idle at the last view may run a job now, and slurmd runs its
        // jobs through a slurmctld outage. The PodDisruptionBudget keeps every scheduled pod
        // until a fresh view says (fail closed). Not before the first view after a start: the
        // labels stay as they were.
        for pod in active.iter().filter(|p| p.scheduled && !p.busy_label) {
            plan.actions.push(Action::SetBusy {
                pod: pod.name.clone(),
                busy: true,
            });
        }
    }

    plan.counts = counts(&active, &victims, input, view);
    plan.counts.not_usable = not_usable(&active, &victims, input, view.map(|_| &projected));
    plan.view = match (input.slurm.state, view) {
        (None, _) => ViewState::NoClient,
        (Some(_), None) => ViewState::Untrusted,
        (Some(_), Some(_)) => ViewState::Trusted,
    };
    plan.available_in = next_available(&active, input.min_ready_seconds, now);
    if let Some(state) = view {
        let (current, outdated): (Vec<&PodView>, Vec<&PodView>) = active
            .iter()
            .partition(|p| p.template_hash.as_deref() == Some(input.template_hash));
        plan.partition_misses = Some(partition_misses(&current, input.partitions, state));
        plan.partition_outdated = partition_misses(&outdated, input.partitions, state)
            .into_iter()
            .map(|(node, _)| node)
            .collect();
    }
    plan
}

/// Registered nodes of `pods` that are not in every partition of `wanted`, with the
/// partitions they miss. The plan judges pods of the current template and of earlier ones
/// apart: `spec.slurm.partitions` is part of the template, so after a change of it the pods
/// still to be replaced carry the list before (a rollout, not a fault: `Partitions=False` then
/// said `Stalled` to every kstatus tool).
pub fn partition_misses(
    pods: &[&PodView],
    wanted: &[String],
    state: &ClusterState,
) -> Vec<(String, Vec<String>)> {
    pods.iter()
        .filter_map(|p| {
            let node = state.nodes.get(&p.name)?;
            let missing: Vec<String> = wanted
                .iter()
                .filter(|w| !node.partitions.contains(w))
                .cloned()
                .collect();
            (!missing.is_empty()).then(|| (p.name.clone(), missing))
        })
        .collect()
}

fn leave(
    plan: &mut NodeSetPlan,
    pod: &PodView,
    why: &str,
    leaving: Leaving,
    view: Option<&ClusterState>,
    drain_timeout: Option<std::time::Duration>,
    now: DateTime<Utc>,
) {
    let delete_why = leaving.drained();
    let delete_if = |plan: &mut NodeSetPlan, why, confirm| {
        plan.actions.push(Action::DeletePod {
            name: pod.name.clone(),
            why,
            confirm,
        })
    };
    let delete = |plan: &mut NodeSetPlan, why| delete_if(plan, why, Confirm::Nothing);
    // slurmd never ran in a pod that was never scheduled.
    if !pod.scheduled {
        return delete(plan, delete_why);
    }
    let timed_out = match (pod.drain_started, drain_timeout) {
        (Some(started), Some(timeout)) => chrono::TimeDelta::from_std(timeout)
            .is_ok_and(|t| now.signed_duration_since(started) >= t),
        _ => false,
    };
    // A delete that rests on slurmctld's word is also a wait: until the driver knows what came
    // of it (`waiting_after`), the pod is still leaving.
    let confirmed_delete = |plan: &mut NodeSetPlan, delete_why, confirm, why| {
        delete_if(plan, delete_why, confirm);
        plan.waiting.push(Waiting {
            pod: pod.name.clone(),
            why,
        });
    };
    // Past the timeout, without a view too (a restart, an outage): slurmctld must still show
    // our drain, which no view may be trusted to say.
    let timed_out_delete = |plan: &mut NodeSetPlan| {
        confirmed_delete(
            plan,
            DeleteWhy::DrainTimeout(leaving),
            Confirm::OurDrain,
            WAIT_CONFIRM_TIMED_OUT,
        )
    };
    let Some(state) = view else {
        if timed_out {
            return timed_out_delete(plan);
        }
        plan.waiting.push(Waiting {
            pod: pod.name.clone(),
            why: WAIT_NO_VIEW,
        });
        return;
    };
    let Some(node) = state.nodes.get(&pod.name) else {
        // Absent from a complete, error-free node list: nothing could run there then. The
        // driver asks again just before (a slurmd that registered since may already run a job).
        return confirmed_delete(plan, delete_why, Confirm::NodeAbsent, WAIT_CONFIRM_ABSENT);
    };
    let jobs = state.node_jobs.get(&pod.name);
    match drain_owner(node) {
        DrainOwner::NotDrained => {
            // A drain marked before a node list that shows none was undone (an admin's resume,
            // slurmctld's state lost): `drainTimeout` counts from this drain, not that one, or
            // jobs started since would be ended at once. So the new mark goes first: should
            // it fail, the drain (same subject) is not made either, and the old mark never
            // times out a drain made since; a mark that lands before a drain that fails only
            // starts the clock a retry early.
            let undone = pod
                .drain_started
                .is_some_and(|started| state.nodes_synced_at.is_some_and(|at| at > started));
            let drain = Action::Drain {
                node: pod.name.clone(),
                reason: drain_reason(why),
            };
            let mark = Action::MarkDrainStarted {
                pod: pod.name.clone(),
            };
            if undone {
                plan.actions.extend([mark, drain]);
            } else if pod.drain_started.is_none() {
                plan.actions.extend([drain, mark]);
            } else {
                plan.actions.push(drain);
            }
            plan.waiting.push(Waiting {
                pod: pod.name.clone(),
                why: WAIT_DRAIN_REQUESTED,
            });
        }
        owner => {
            if is_drained(node, jobs) {
                // The driver asks again just before: a scale back out may have resumed the
                // node since this view, and a job started there.
                return confirmed_delete(
                    plan,
                    delete_why,
                    Confirm::NodeDrained,
                    WAIT_CONFIRM_DRAINED,
                );
            }
            if owner == DrainOwner::Us && pod.drain_started.is_none() {
                plan.actions.push(Action::MarkDrainStarted {
                    pod: pod.name.clone(),
                });
            }
            if timed_out && owner == DrainOwner::Us {
                timed_out_delete(plan);
            } else {
                let why = if owner == DrainOwner::Us {
                    WAIT_JOBS
                } else {
                    WAIT_FOREIGN_DRAIN
                };
                plan.waiting.push(Waiting {
                    pod: pod.name.clone(),
                    why,
                });
            }
        }
    }
}

/// A pod that stays: cancel our drain (scale back out, an update no longer due, its Kubernetes
/// node uncordoned); drain its node while its Kubernetes node is cordoned.
fn stay(plan: &mut NodeSetPlan, pod: &PodView, view: Option<&ClusterState>) {
    let Some(state) = view else { return };
    let node = state.nodes.get(&pod.name);
    let kept = match (&pod.host, node) {
        // Cordoned: no new job starts there (those running end as they would), so that the
        // eviction `kubectl drain` retries goes through once the PodDisruptionBudget lets it
        // (the node idle). A drain already there, ours or anyone's, stays while the cordon does.
        (Host::Cordoned(host), Some(node)) => {
            if drain_owner(node) == DrainOwner::NotDrained && !node.state.is_down() {
                plan.actions.push(Action::Drain {
                    node: pod.name.clone(),
                    reason: cordon_reason(host),
                });
            }
            true
        }
        (Host::Cordoned(_), None) => true,
        // Not knowing whether the cordon still holds, our drain for it stays.
        (Host::Unknown, Some(node)) => is_cordon_drain(node),
        _ => false,
    };
    if kept {
        // The pod is not leaving: a drain start left by a scale-in or an update no longer due
        // would count against `scaleIn.drainTimeout` at the next one.
        if pod.drain_started.is_some() {
            plan.actions.push(Action::ClearDrainStarted {
                pod: pod.name.clone(),
            });
        }
        return;
    }
    match node {
        Some(node) if may_resume(node) => {
            plan.actions.push(Action::Resume {
                node: pod.name.clone(),
            });
            if pod.drain_started.is_some() {
                plan.actions.push(Action::ClearDrainStarted {
                    pod: pod.name.clone(),
                });
            }
        }
        // Our drain on a DOWN/NOT_RESPONDING node stays until it responds again; its pod is not
        // leaving, so the drain start goes as below.
        _ => {
            if pod.drain_started.is_some() {
                plan.actions.push(Action::ClearDrainStarted {
                    pod: pod.name.clone(),
                });
            }
        }
    }
}

/// Whether Slurm may run jobs on `node` (registered, not down, not responding, its registration
/// not refused); a drain does not count: the node is sound, someone chose to close it. The
/// status of the `SlurmNodeState` condition.
fn takes_jobs(node: &Node) -> bool {
    let s = &node.state;
    !s.is_down() && !s.is_not_responding() && !s.has_flag(INVALID_REG)
}

/// The flag slurmctld sets on a node whose registration it refused.
const INVALID_REG: &str = "INVALID_REG";

/// The `SlurmNodeState` condition of a pod whose node is `node`: (status, reason, message).
pub fn node_condition(node: Option<&Node>) -> (bool, String, String) {
    let Some(node) = node else {
        return (
            false,
            "NotRegistered".into(),
            "slurmd has not registered the node".into(),
        );
    };
    let s = &node.state;
    // slurmctld drains (24.11) or downs a node that registered with less than its
    // configuration: `IDLE+DRAIN+DYNAMIC_NORM+INVALID_REG`, reason "Low RealMemory ...".
    let invalid = s.has_flag(INVALID_REG);
    let reason = if invalid {
        REASON_INVALID_REGISTRATION
    } else if s.is_down() {
        "Down"
    } else if s.is_draining() {
        "Draining"
    } else if s.is_drained() {
        "Drained"
    } else if s.is_not_responding() {
        "NotResponding"
    } else {
        match s.base {
            NodeBaseState::Idle => "Idle",
            NodeBaseState::Allocated => "Allocated",
            NodeBaseState::Mixed => "Mixed",
            _ => "Other",
        }
    };
    let status = takes_jobs(node);
    let mut message = format!("Slurm state {s}");
    if (s.is_drain() || s.is_down() || invalid)
        && let Some(r) = node.reason.as_deref().filter(|r| !r.is_empty())
    {
        message.push_str(&format!(", reason: {r}"));
    }
    (status, reason.into(), message)
}

/// Status counts of the set's pods (those in `leaving` also apart) and of their Slurm nodes.
/// Each node counts once: down, else draining, else drained, else its base state.
pub fn counts(
    active: &[&PodView],
    leaving: &BTreeSet<&str>,
    input: &Input<'_>,
    view: Option<&ClusterState>,
) -> Counts {
    let template_hash = input.template_hash;
    let as_i32 = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let slurm = view.map(|state| {
        let mut c = NodeSetSlurmCounts::default();
        for node in active.iter().filter_map(|p| state.nodes.get(&p.name)) {
            let s = &node.state;
            let bucket = if s.is_down() {
                &mut c.down
            } else if s.is_draining() {
                &mut c.draining
            } else if s.is_drained() {
                &mut c.drained
            } else {
                match s.base {
                    NodeBaseState::Idle => &mut c.idle,
                    NodeBaseState::Allocated => &mut c.allocated,
                    NodeBaseState::Mixed => &mut c.mixed,
                    _ => continue,
                }
            };
            *bucket += 1;
        }
        c
    });
    let available = |p: &&&PodView| is_available(p, input.min_ready_seconds, input.slurm.now);
    let gone: Vec<&PodView> = active
        .iter()
        .copied()
        .filter(|p| leaving.contains(p.name.as_str()))
        .collect();
    Counts {
        replicas: as_i32(active.len()),
        ready: as_i32(active.iter().filter(|p| p.ready).count()),
        available: as_i32(active.iter().filter(available).count()),
        leaving: LeavingCounts {
            pods: as_i32(gone.len()),
            ready: as_i32(gone.iter().filter(|p| p.ready).count()),
            available: as_i32(gone.iter().filter(available).count()),
        },
        not_usable: Vec::new(),
        updated: as_i32(
            active
                .iter()
                .filter(|p| p.template_hash.as_deref() == Some(template_hash))
                .count(),
        ),
        slurm,
    }
}

/// The available pods the set keeps (not in `leaving`) whose node takes no job, by their
/// `SlurmNodeState` condition: as `projected` from a trusted view (pod name → status, reason,
/// message), else as each pod holds it.
fn not_usable(
    active: &[&PodView],
    leaving: &BTreeSet<&str>,
    input: &Input<'_>,
    projected: Option<&BTreeMap<&str, (bool, String, String)>>,
) -> Vec<NotUsable> {
    active
        .iter()
        .filter(|p| !leaving.contains(p.name.as_str()))
        .filter(|p| is_available(p, input.min_ready_seconds, input.slurm.now))
        .filter_map(|p| {
            let (usable, reason, why) = match projected {
                Some(projected) => projected.get(p.name.as_str()).cloned()?,
                None => match &p.node_condition {
                    Some((status, reason, message)) => {
                        (status == "True", reason.clone(), message.clone())
                    }
                    None => (false, String::new(), NOT_SEEN_IN_SLURM.to_owned()),
                },
            };
            let replaced = input.strategy.type_ == UpdateStrategyType::RollingUpdate
                && p.template_hash.as_deref() != Some(input.template_hash);
            (!usable).then(|| NotUsable {
                pod: p.name.clone(),
                stuck: reason == REASON_NODE_NAME_CONFLICT
                    || (reason == REASON_INVALID_REGISTRATION && !replaced),
                why,
            })
        })
        .collect()
}

/// Index lookups the planner's tests and the driver share.
pub fn nodes_by_name(nodes: impl IntoIterator<Item = Node>) -> BTreeMap<String, Node> {
    nodes.into_iter().map(|n| (n.name.clone(), n)).collect()
}

#[cfg(test)]
#[path = "plan_tests.rs"]
pub(super) mod tests;
