use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, LazyLock};

use chrono::{TimeZone, Utc};

use super::*;
use crate::crd::{RollingUpdate, UpdateStrategy};
use crate::slurm::types::{Node, NodeState};
use crate::state::index::{ClusterState, Health, NodeJobs};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn t(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
}

/// The set the tables plan for.
static OWNER: LazyLock<NodeOwner> = LazyLock::new(|| NodeOwner::new("team-a", "ns"));
static DEFAULT_STRATEGY: LazyLock<UpdateStrategy> = LazyLock::new(UpdateStrategy::default);
static NONE_TAKEN: BTreeSet<u32> = BTreeSet::new();

fn owner() -> NodeOwner {
    OWNER.clone()
}

/// The tables' input: set `ns` of `team-a` at `t(0)`, default strategy, nothing else set; a
/// table changes what it tests with `Input { field, ..input(...) }`.
fn input<'a>(replicas: i32, pods: &'a [PodView], state: Option<&'a ClusterState>) -> Input<'a> {
    Input {
        prefix: "ns",
        owner: &OWNER,
        replicas,
        template_hash: "h1",
        strategy: &DEFAULT_STRATEGY,
        drain_timeout: None,
        min_ready_seconds: 0,
        partitions: &[],
        pods,
        taken: &NONE_TAKEN,
        slurm: SlurmView {
            state,
            now: t(0),
            had_view: false,
        },
        deleting: false,
    }
}

/// A node of this set (dynamic, with its owner record), whatever `state` says.
fn node(name: &str, state: &[&str], reason: Option<&str>) -> Node {
    owned_node(owner(), name, state, reason)
}

/// A dynamic node with `owner`'s record, whatever `state` says (the driver's tests share it).
pub(in crate::controller::nodeset) fn owned_node(
    owner: NodeOwner,
    name: &str,
    state: &[&str],
    reason: Option<&str>,
) -> Node {
    let mut state = NodeState::from_strings(state);
    state.flags.insert("DYNAMIC_NORM".into());
    Node {
        owner: Some(owner),
        name: name.into(),
        state,
        reason: reason.map(Into::into),
        reason_set_by_user: None,
        cpus: Some(1),
        alloc_cpus: None,
        real_memory: None,
        features: vec![],
        partitions: vec![],
        address: None,
        hostname: None,
        port: None,
        slurmd_version: None,
    }
}

fn pod(name: &str, ordinal: u32) -> PodView {
    PodView {
        name: name.into(),
        ordinal,
        scheduled: true,
        ready: true,
        template_hash: Some("h1".into()),
        ..PodView::default()
    }
}

fn pods(n: u32) -> Vec<PodView> {
    (0..n).map(|i| pod(&format!("ns-{i}"), i)).collect()
}

fn state(nodes: Vec<Node>, jobs: &[(&str, u32, Option<i64>)]) -> ClusterState {
    ClusterState {
        nodes: Arc::new(nodes_by_name(nodes)),
        node_jobs: Arc::new(
            jobs.iter()
                .map(|(n, running, deadline)| {
                    (
                        (*n).to_owned(),
                        NodeJobs {
                            running: *running,
                            deadline: deadline.map(t),
                        },
                    )
                })
                .collect::<BTreeMap<_, _>>(),
        ),
        nodes_synced_at: Some(t(-5)),
        health: Health::Up { since: t(-100) },
        ..ClusterState::default()
    }
}

fn idle(name: &str) -> Node {
    node(name, &["IDLE", "DYNAMIC_NORM"], None)
}

fn run(replicas: i32, pods: &[PodView], state: Option<&ClusterState>) -> NodeSetPlan {
    run_with(replicas, pods, state, &UpdateStrategy::default(), None)
}

fn run_with(
    replicas: i32,
    pods: &[PodView],
    state: Option<&ClusterState>,
    strategy: &UpdateStrategy,
    drain_timeout: Option<std::time::Duration>,
) -> NodeSetPlan {
    plan(&Input {
        strategy,
        drain_timeout,
        ..input(replicas, pods, state)
    })
}

/// The nodes a plan drains, in its order.
fn drained_nodes(plan: &NodeSetPlan) -> Vec<String> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::Drain { node, .. } => Some(node.clone()),
            _ => None,
        })
        .collect()
}

fn structural(plan: &NodeSetPlan) -> Vec<Action> {
    plan.actions
        .iter()
        .filter(|a| !matches!(a, Action::SetBusy { .. } | Action::SetNodeCondition { .. }))
        .cloned()
        .collect()
}

fn drain(node: &str) -> Action {
    Action::Drain {
        node: node.into(),
        reason: drain_reason(WHY_SCALE_IN),
    }
}

/// A delete that does not rest on the node's state (never scheduled, finished, timed out).
fn delete(name: &str, why: DeleteWhy) -> Action {
    Action::DeletePod {
        name: name.into(),
        why,
        confirm: Confirm::Nothing,
    }
}

/// The delete of a pod whose node the view does not hold: the driver asks slurmctld first.
fn delete_unregistered(name: &str, why: DeleteWhy) -> Action {
    Action::DeletePod {
        name: name.into(),
        why,
        confirm: Confirm::NodeAbsent,
    }
}

/// The delete of a pod whose node the view shows drained: the driver asks slurmctld first.
fn delete_drained(name: &str, why: DeleteWhy) -> Action {
    Action::DeletePod {
        name: name.into(),
        why,
        confirm: Confirm::NodeDrained,
    }
}

/// The delete of a pod whose drain ran past `scaleIn.drainTimeout`: the driver asks slurmctld
/// first whether the node still carries our drain.
fn delete_timed_out(name: &str, leaving: Leaving) -> Action {
    Action::DeletePod {
        name: name.into(),
        why: DeleteWhy::DrainTimeout(leaving),
        confirm: Confirm::OurDrain,
    }
}

#[test]
fn reasons_are_prefixed_sanitised_and_bounded() {
    assert_eq!(drain_reason("scale-in"), "slurm-operator: scale-in");
    assert_eq!(drain_reason(" a\n\tb\u{7}c  "), "slurm-operator: a b c");
    let long = drain_reason(&"é".repeat(1000));
    assert_eq!(long.chars().count(), MAX_REASON_CHARS);
}

#[test]
fn drain_ownership() {
    let cases = [
        (
            vec!["IDLE"],
            Some("slurm-operator: scale-in"),
            DrainOwner::NotDrained,
        ),
        (
            vec!["IDLE", "DRAIN"],
            Some("slurm-operator: scale-in"),
            DrainOwner::Us,
        ),
        (
            vec!["ALLOCATED", "DRAIN"],
            Some(" slurm-operator: x"),
            DrainOwner::Us,
        ),
        (
            vec!["IDLE", "DRAIN"],
            Some("admin: bad disk"),
            DrainOwner::Someone,
        ),
        (vec!["IDLE", "DRAIN"], None, DrainOwner::Someone),
        (
            vec!["IDLE", "DRAIN"],
            Some("maintenance slurm-operator:"),
            DrainOwner::Someone,
        ),
        (
            vec!["IDLE", "DRAIN"],
            Some(" slurm-operator:hold"),
            DrainOwner::Someone,
        ),
        (
            vec!["IDLE", "DRAIN"],
            Some("slurm-operator:"),
            DrainOwner::Someone,
        ),
        // FAIL closes a node like DRAIN: an admin's (or Slurm's), whatever the reason says.
        (
            vec!["MIXED", "FAIL"],
            Some("admin: failing DIMM"),
            DrainOwner::Someone,
        ),
        (
            vec!["IDLE", "FAIL"],
            Some("slurm-operator: scale-in"),
            DrainOwner::Someone,
        ),
    ];
    for (st, reason, want) in cases {
        assert_eq!(
            drain_owner(&node("n", &st, reason)),
            want,
            "{st:?} {reason:?}"
        );
    }
    // Never resume a DOWN or NOT_RESPONDING node, nor someone else's drain.
    assert!(may_resume(&node(
        "n",
        &["IDLE", "DRAIN"],
        Some("slurm-operator: x")
    )));
    assert!(!may_resume(&node(
        "n",
        &["DOWN", "DRAIN"],
        Some("slurm-operator: x")
    )));
    assert!(!may_resume(&node(
        "n",
        &["IDLE", "DRAIN", "NOT_RESPONDING"],
        Some("slurm-operator: x")
    )));
    assert!(!may_resume(&node("n", &["IDLE", "DRAIN"], Some("admin"))));
    // A RESUME clears FAIL and cancels a pending reboot too: not ours to clear.
    for flag in ["FAIL", "REBOOT_REQUESTED"] {
        assert!(
            !may_resume(&node(
                "n",
                &["IDLE", "DRAIN", flag],
                Some("slurm-operator: x")
            )),
            "{flag}"
        );
    }
    assert!(!may_resume(&node(
        "n",
        &["IDLE"],
        Some("slurm-operator: x")
    )));
}

/// Every state array observed from slurmrestd (facts note), and whether the node may go.
#[test]
fn drained_over_every_observed_state_array() {
    let cases: &[(&[&str], bool)] = &[
        (&["IDLE"], false),
        (&["IDLE", "DYNAMIC_NORM"], false),
        (&["ALLOCATED"], false),
        (&["ALLOCATED", "DYNAMIC_NORM"], false),
        (&["MIXED"], false),
        (&["ALLOCATED", "DRAIN"], false),
        (&["MIXED", "DRAIN"], false),
        (&["IDLE", "DRAIN", "COMPLETING"], false),
        (&["IDLE", "COMPLETING"], false),
        (&["IDLE", "DRAIN"], true),
        (&["IDLE", "DRAIN", "DYNAMIC_NORM"], true),
        (&["IDLE", "DRAIN", "NOT_RESPONDING", "DYNAMIC_NORM"], true),
        (&["DOWN", "DRAIN", "NOT_RESPONDING", "DYNAMIC_NORM"], true),
        (&["DOWN", "NOT_RESPONDING", "DYNAMIC_NORM"], false),
        (&["IDLE", "NOT_RESPONDING"], false),
        (&["UNKNOWN"], false),
        (&["FUTURE"], false),
        (&["IDLE", "FAIL"], true),
        (&["MIXED", "FAIL"], false),
    ];
    for (st, want) in cases {
        assert_eq!(is_drained(&node("n", st, None), None), *want, "{st:?}");
    }
    // A job the index still sees running there keeps the node, whatever the state says.
    let jobs = NodeJobs {
        running: 1,
        deadline: None,
    };
    assert!(!is_drained(
        &node("n", &["IDLE", "DRAIN"], None),
        Some(&jobs)
    ));
}

#[test]
fn victim_order_table() {
    let base = |name: &str, ordinal| pod(name, ordinal);
    let mut unscheduled = base("ns-0", 0);
    unscheduled.scheduled = false;
    unscheduled.ready = false;
    let mut not_ready = base("ns-1", 1);
    not_ready.ready = false;
    let mut cheap = base("ns-2", 2);
    cheap.deletion_cost = -5;
    let idle_low = base("ns-3", 3);
    let idle_high = base("ns-4", 4);
    let busy_early = base("ns-5", 5);
    let busy_late = base("ns-6", 6);
    let busy_forever = base("ns-7", 7);
    let drained = base("ns-8", 8);
    // Already being drained by us (annotation, or our reason on the node): next in line after
    // pods that never ran, whatever their cost or jobs — resuming one to drain another would
    // waste the wait already spent and flip-flop as jobs come and go.
    let mut ours_marked = base("ns-9", 9);
    ours_marked.deletion_cost = 50;
    ours_marked.drain_started = Some(t(-30));
    let ours_by_reason = base("ns-10", 10);
    // Ready (slurmd answers), but down in Slurm: after our drains (a drain under way is not
    // given up for it), before a lower cost.
    let mut down = base("ns-11", 11);
    down.deletion_cost = 100;
    // A missed ping while a job runs: not broken, busy as it is.
    let busy_unanswered = base("ns-12", 12);
    // Registration refused (as slurmctld shows it: drained, not down): broken as well, and
    // cheaper than the down node, so first of the two.
    let mut refused = base("ns-13", 13);
    refused.deletion_cost = 10;
    let st = state(
        vec![
            node("ns-11", &["DOWN", "NOT_RESPONDING"], Some("Not responding")),
            node("ns-12", &["ALLOCATED", "NOT_RESPONDING"], None),
            node(
                "ns-13",
                &["IDLE", "DRAIN", "DYNAMIC_NORM", "INVALID_REG"],
                Some("Low RealMemory (reported:1 < 100.00% of configured:99999999)"),
            ),
            node(
                "ns-9",
                &["ALLOCATED", "DRAIN"],
                Some("slurm-operator: scale-in"),
            ),
            node(
                "ns-10",
                &["MIXED", "DRAIN"],
                Some("slurm-operator: rolling update"),
            ),
            idle("ns-3"),
            idle("ns-4"),
            node("ns-5", &["ALLOCATED"], None),
            node("ns-6", &["ALLOCATED"], None),
            node("ns-7", &["MIXED"], None),
            node("ns-8", &["IDLE", "DRAIN"], Some("admin")),
        ],
        &[
            ("ns-5", 1, Some(100)),
            ("ns-6", 2, Some(500)),
            ("ns-7", 1, None),
            ("ns-9", 1, Some(900)),
            ("ns-10", 1, Some(800)),
            ("ns-12", 1, None),
        ],
    );
    let all = [
        ours_marked.clone(),
        busy_forever.clone(),
        ours_by_reason.clone(),
        idle_low.clone(),
        busy_late.clone(),
        cheap.clone(),
        drained.clone(),
        not_ready.clone(),
        busy_early.clone(),
        unscheduled.clone(),
        down.clone(),
        busy_unanswered.clone(),
        refused.clone(),
        idle_high.clone(),
    ];
    let order: Vec<&str> = victim_sorted(&all, Some(&st))
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(
        order,
        [
            "ns-0", "ns-1", "ns-10", "ns-9", "ns-13", "ns-11", "ns-2", "ns-8", "ns-4", "ns-3",
            "ns-5", "ns-6", "ns-12", "ns-7"
        ],
        "unscheduled, not ready, already drained by us (cheapest first), broken in Slurm \
         (registration refused, down; cheapest first), \
         cheapest, idle/drained (highest ordinal first), then busy by deadline (a missed ping \
         changes nothing)"
    );
    // Our drain outranks a lower cost and idleness, but not readiness.
    let mut cheap_idle = idle_low.clone();
    cheap_idle.deletion_cost = -100;
    let trio = [cheap_idle, ours_marked.clone(), not_ready.clone()];
    let order: Vec<&str> = victim_sorted(&trio, Some(&st))
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(order, ["ns-1", "ns-9", "ns-3"]);
    // Without a view the annotation alone still counts.
    let pair = [cheap.clone(), ours_marked.clone()];
    let order: Vec<&str> = victim_sorted(&pair, None)
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(order, ["ns-9", "ns-2"]);
    // A higher deletion cost protects even an idle node.
    let mut precious = idle_high.clone();
    precious.deletion_cost = 100;
    let pair = [precious, busy_late];
    let order: Vec<&str> = victim_sorted(&pair, Some(&st))
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(order, ["ns-6", "ns-4"]);
}

#[test]
fn scale_out_creates_the_lowest_free_ordinals_skipping_leftover_records() {
    let mut existing = pods(3);
    existing.remove(1); // ns-0, ns-2
    let empty = state(vec![], &[]);
    let plan = run(4, &existing, Some(&empty));
    assert_eq!(
        structural(&plan),
        [
            Action::CreatePod { ordinal: 1 },
            Action::CreatePod { ordinal: 3 }
        ]
    );
    // Without a trusted view nothing is created: the names might be held in Slurm.
    assert!(structural(&run(4, &existing, None)).is_empty());
    // ns-1's record is still in Slurm: it is forgotten first and another ordinal is used.
    let st = state(
        vec![
            idle("ns-0"),
            node("ns-1", &["DOWN", "NOT_RESPONDING", "DYNAMIC_NORM"], None),
            idle("ns-2"),
        ],
        &[],
    );
    let plan = run(3, &existing, Some(&st));
    assert_eq!(
        structural(&plan),
        [
            Action::CreatePod { ordinal: 3 },
            Action::DeleteNodeRecord {
                node: "ns-1".into()
            }
        ]
    );
}

/// `replicas: 2147483647` is a valid spec: one plan creates a bounded batch (it used to allocate
/// an action per missing pod, billions of them), and the next plan continues after those pods.
#[test]
fn a_huge_replica_count_creates_a_bounded_batch_per_plan() {
    let started = std::time::Instant::now();
    let empty = state(vec![], &[]);
    let plan = run(i32::MAX, &[], Some(&empty));
    let created = |plan: &NodeSetPlan| -> Vec<u32> {
        plan.actions
            .iter()
            .filter_map(|a| match a {
                Action::CreatePod { ordinal } => Some(*ordinal),
                _ => None,
            })
            .collect()
    };
    let first = created(&plan);
    assert_eq!(first.len(), MAX_CREATES_PER_PLAN);
    assert_eq!(first, (0..500).collect::<Vec<u32>>());
    assert!(started.elapsed() < std::time::Duration::from_secs(5));

    let next = run(i32::MAX, &pods(500), Some(&empty));
    assert_eq!(created(&next), (500..1000).collect::<Vec<u32>>());
    // Below the bound nothing changes: every missing pod at once.
    assert_eq!(created(&run(3, &[], Some(&empty))), [0, 1, 2]);
}
#[test]
fn scale_in_drains_first_and_deletes_only_once_drained() {
    let p = pods(3);
    // Step 1: all idle → the two highest ordinals are drained, nothing is deleted.
    let st = state(vec![idle("ns-0"), idle("ns-1"), idle("ns-2")], &[]);
    let plan = run(1, &p, Some(&st));
    assert_eq!(
        structural(&plan),
        [
            drain("ns-1"),
            Action::MarkDrainStarted { pod: "ns-1".into() },
            drain("ns-2"),
            Action::MarkDrainStarted { pod: "ns-2".into() },
        ]
    );
    assert!(plan.actions.iter().all(|a| !a.is_destructive()));

    // Step 2: ns-2 drained, ns-1 still busy (draining): only ns-2's pod goes.
    let mut p2 = p.clone();
    p2[1].drain_started = Some(t(-10));
    p2[2].drain_started = Some(t(-10));
    let ours = Some("slurm-operator: scale-in");
    let st = state(
        vec![
            idle("ns-0"),
            node("ns-1", &["ALLOCATED", "DRAIN", "DYNAMIC_NORM"], ours),
            node("ns-2", &["IDLE", "DRAIN", "DYNAMIC_NORM"], ours),
        ],
        &[("ns-1", 1, None)],
    );
    let plan = run(1, &p2, Some(&st));
    assert_eq!(
        structural(&plan),
        [delete_drained("ns-2", DeleteWhy::ScaleIn)]
    );
    assert_eq!(
        plan.waiting,
        [
            Waiting {
                pod: "ns-1".into(),
                why: WAIT_JOBS
            },
            Waiting {
                pod: "ns-2".into(),
                why: WAIT_CONFIRM_DRAINED
            }
        ]
    );

    // Step 3: the pod is gone: its record is deleted.
    let plan = run(1, &p2[..2], Some(&st));
    assert!(structural(&plan).contains(&Action::DeleteNodeRecord {
        node: "ns-2".into()
    }));
}

#[test]
fn busy_nodes_are_kept_over_idle_ones() {
    let p = pods(3);
    let st = state(
        vec![
            node("ns-0", &["ALLOCATED", "DYNAMIC_NORM"], None),
            idle("ns-1"),
            idle("ns-2"),
        ],
        &[("ns-0", 1, None)],
    );
    let plan = run(1, &p, Some(&st));
    let drained: Vec<_> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Drain { node, .. } => Some(node.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(drained, ["ns-1", "ns-2"]);
}

#[test]
fn fail_closed_without_a_trusted_view() {
    let p = pods(2);
    let ours = Some("slurm-operator: scale-in");
    let drained = state(
        vec![idle("ns-0"), node("ns-1", &["IDLE", "DRAIN"], ours)],
        &[],
    );
    let mut stale = drained.clone();
    stale.nodes_synced_at = Some(t(-600));
    let mut down = drained.clone();
    down.health = Health::Down {
        since: t(-1),
        reason: "Unreachable",
        message: "x".into(),
    };
    let mut never = drained.clone();
    never.nodes_synced_at = None;
    for (what, st) in [
        ("no client", None),
        ("stale", Some(&stale)),
        ("poller down", Some(&down)),
        ("never synced", Some(&never)),
    ] {
        let plan = run(1, &p, st);
        // Nothing but, in an outage, the busy label (fail closed for evictions too).
        assert!(
            plan.actions
                .iter()
                .all(|a| matches!(a, Action::SetBusy { busy: true, .. })),
            "{what}: {:?}",
            plan.actions
        );
        assert_eq!(plan.waiting[0].why, WAIT_NO_VIEW, "{what}");
    }
    // The same drained node with a fresh view goes.
    assert_eq!(
        structural(&run(1, &p, Some(&drained))),
        [delete_drained("ns-1", DeleteWhy::ScaleIn)]
    );
    // Absent from a complete list counts as drained, once slurmctld says so again just before
    // (the view may predate the registration of its slurmd); an unscheduled pod goes without Slurm.
    let absent = state(vec![idle("ns-0")], &[]);
    assert_eq!(
        structural(&run(1, &p, Some(&absent))),
        [delete_unregistered("ns-1", DeleteWhy::ScaleIn)]
    );
    let mut pending = pods(2);
    pending[1].scheduled = false;
    pending[1].ready = false;
    assert_eq!(
        structural(&run(1, &pending, None)),
        [delete("ns-1", DeleteWhy::ScaleIn)]
    );
}

/// The poller asks a large node list again only after a wait (`Tuning::nodes_wait`, up to
/// 30 s while nodes keep changing): a list that old, and a few cycles more, still backs a
/// deletion.
#[test]
fn a_node_list_as_old_as_the_pollers_longest_wait_is_trusted() {
    let p = pods(2);
    let ours = Some("slurm-operator: scale-in");
    let mut drained = state(
        vec![idle("ns-0"), node("ns-1", &["IDLE", "DRAIN"], ours)],
        &[],
    );
    let longest = crate::state::poller::Tuning::default().nodes_wait(usize::MAX);
    let age = i64::try_from(longest.as_secs()).unwrap() + 5;
    drained.nodes_synced_at = Some(t(-age));
    assert_eq!(
        structural(&run(1, &p, Some(&drained))),
        [delete_drained("ns-1", DeleteWhy::ScaleIn)]
    );
}

#[test]
fn someone_elses_drain_is_never_overwritten_nor_resumed() {
    let mut p = pods(2);
    p[1].deletion_cost = -1;
    // Victim drained by an admin with a job still running: no drain over it, wait.
    let st = state(
        vec![
            idle("ns-0"),
            node("ns-1", &["ALLOCATED", "DRAIN"], Some("admin: check")),
        ],
        &[("ns-1", 1, None)],
    );
    let plan = run(1, &p, Some(&st));
    assert!(structural(&plan).is_empty(), "{:?}", plan.actions);
    assert_eq!(plan.waiting[0].why, WAIT_FOREIGN_DRAIN);
    // Kept node drained by an admin: not resumed.
    let st = state(
        vec![
            idle("ns-0"),
            node("ns-1", &["IDLE", "DRAIN"], Some("admin: check")),
        ],
        &[],
    );
    assert!(structural(&run(2, &p, Some(&st))).is_empty());
}

/// An admin's FAIL on a busy node chosen for scale-in: no drain over it (Slurm would replace
/// the admin's reason, and our later resume would clear the FAIL); the pod goes once its jobs
/// ended, and a scale-out meanwhile resumes nothing.
#[test]
fn someone_elses_fail_is_never_overwritten_nor_resumed() {
    let mut p = pods(2);
    p[1].deletion_cost = -1;
    let failing = |base: &str| node("ns-1", &[base, "FAIL"], Some("admin: failing DIMM"));
    let st = state(vec![idle("ns-0"), failing("MIXED")], &[("ns-1", 1, None)]);
    let plan = run(1, &p, Some(&st));
    assert!(structural(&plan).is_empty(), "{:?}", plan.actions);
    assert_eq!(plan.waiting[0].why, WAIT_FOREIGN_DRAIN);
    let st = state(vec![idle("ns-0"), failing("IDLE")], &[]);
    assert_eq!(
        structural(&run(1, &p, Some(&st))),
        [delete_drained("ns-1", DeleteWhy::ScaleIn)]
    );
    assert!(structural(&run(2, &p, Some(&st))).is_empty());
}

#[test]
fn scale_back_out_resumes_our_drain_and_keeps_the_pod() {
    let mut p = pods(2);
    p[1].drain_started = Some(t(-10));
    let ours = Some("slurm-operator: scale-in");
    let st = state(
        vec![idle("ns-0"), node("ns-1", &["ALLOCATED", "DRAIN"], ours)],
        &[("ns-1", 1, None)],
    );
    assert_eq!(
        structural(&run(2, &p, Some(&st))),
        [
            Action::Resume {
                node: "ns-1".into()
            },
            Action::ClearDrainStarted { pod: "ns-1".into() }
        ]
    );
    // Not when the node is DOWN or not responding; the drain start goes all the same (the pod
    // is not leaving: a later scale-in would count `drainTimeout` from it).
    let st = state(
        vec![
            idle("ns-0"),
            node("ns-1", &["IDLE", "DRAIN", "NOT_RESPONDING"], ours),
        ],
        &[],
    );
    assert_eq!(
        structural(&run(2, &p, Some(&st))),
        [Action::ClearDrainStarted { pod: "ns-1".into() }]
    );
    // After RESUME the old reason text stays, without DRAIN: nothing to do but drop the mark.
    let st = state(vec![idle("ns-0"), node("ns-1", &["IDLE"], ours)], &[]);
    assert_eq!(
        structural(&run(2, &p, Some(&st))),
        [Action::ClearDrainStarted { pod: "ns-1".into() }]
    );
}

/// A view that shows a node drained may be up to a minute old: since then a scale back out
/// may have resumed the node and a job started there. So the delete it brings asks slurmctld
/// first that the node is still drained (and takes a request slot for that); the deletes that
/// do not rest on the node's state (a timed-out drain, a pod never scheduled or finished) ask
/// nothing.
#[test]
fn a_delete_because_drained_is_confirmed_by_slurm_first() {
    let ours = Some("slurm-operator: scale-in");
    let drained = state(
        vec![idle("ns-0"), node("ns-1", &["IDLE", "DRAIN"], ours)],
        &[],
    );
    // Scale-in, rolling update and deletion alike.
    let scale_in = structural(&run(1, &pods(2), Some(&drained)));
    assert_eq!(scale_in, [delete_drained("ns-1", DeleteWhy::ScaleIn)]);
    assert!(scale_in[0].calls_slurm());
    let mut outdated = pods(2);
    outdated[1].template_hash = Some("h0".into());
    assert!(
        structural(&run(2, &outdated, Some(&drained)))
            .contains(&delete_drained("ns-1", DeleteWhy::Update))
    );
    let deleting = run_deleting(2, &pods(2), Some(&drained), &BTreeSet::new());
    assert!(
        structural(&deleting).contains(&delete_drained("ns-1", DeleteWhy::SetDeleted)),
        "{:?}",
        deleting.actions
    );
    // A drain past its timeout goes as planned: the user accepted that its jobs end.
    let draining = state(
        vec![idle("ns-0"), node("ns-1", &["ALLOCATED", "DRAIN"], ours)],
        &[("ns-1", 1, None)],
    );
    let mut timed_out = pods(2);
    timed_out[1].drain_started = Some(t(-61));
    let timeout = Some(std::time::Duration::from_secs(60));
    let forced = structural(&run_with(
        1,
        &timed_out,
        Some(&draining),
        &UpdateStrategy::default(),
        timeout,
    ));
    assert_eq!(forced, [delete_timed_out("ns-1", Leaving::ScaleIn)]);
    assert!(
        forced[0].calls_slurm(),
        "slurmctld must still show our drain"
    );
}

/// A delete that rests on slurmctld's word is planned as a wait too: slurmctld may show the
/// node changed since the view, and the read or the delete may fail. What the `Draining`
/// condition then says comes from what the driver reports of each such delete: a pod deleted
/// waits no more; one kept says why; one not tried keeps the plan's word.
#[test]
fn a_delete_resting_on_slurmctld_waits_until_it_went() {
    let ours = Some("slurm-operator: scale-in");
    let st = state(
        vec![idle("ns-0"), node("ns-1", &["IDLE", "DRAIN"], ours)],
        &[],
    );
    let waits = |plan: &NodeSetPlan| -> Vec<(String, &'static str)> {
        plan.waiting
            .iter()
            .map(|w| (w.pod.clone(), w.why))
            .collect()
    };
    let drained = run(1, &pods(2), Some(&st));
    assert_eq!(
        structural(&drained),
        [delete_drained("ns-1", DeleteWhy::ScaleIn)]
    );
    assert_eq!(waits(&drained), [("ns-1".to_owned(), WAIT_CONFIRM_DRAINED)]);
    // Never registered (and scheduled): the same, for slurmctld's word that it has no node.
    let absent = run(1, &pods(2), Some(&state(vec![idle("ns-0")], &[])));
    assert_eq!(
        structural(&absent),
        [delete_unregistered("ns-1", DeleteWhy::ScaleIn)]
    );
    assert_eq!(waits(&absent), [("ns-1".to_owned(), WAIT_CONFIRM_ABSENT)]);
    // The deletes that do not rest on slurmctld are no wait.
    let mut unscheduled = pods(2);
    unscheduled[1].scheduled = false;
    assert!(run(1, &unscheduled, Some(&st)).waiting.is_empty());

    let planned = [
        Waiting {
            pod: "ns-1".into(),
            why: WAIT_CONFIRM_DRAINED,
        },
        Waiting {
            pod: "ns-2".into(),
            why: WAIT_JOBS,
        },
    ];
    let after = |outcome: Option<Confirmed>| {
        let outcomes: BTreeMap<String, Confirmed> = outcome
            .map(|o| ("ns-1".to_owned(), o))
            .into_iter()
            .collect();
        waiting_after(&planned, &outcomes)
            .into_iter()
            .map(|w| (w.pod, w.why))
            .collect::<Vec<_>>()
    };
    let jobs = || ("ns-2".to_owned(), WAIT_JOBS);
    assert_eq!(after(Some(Confirmed::Deleted)), [jobs()]);
    assert_eq!(
        after(Some(Confirmed::Superseded)),
        [("ns-1".to_owned(), WAIT_SUPERSEDED), jobs()]
    );
    assert_eq!(
        after(Some(Confirmed::Failed)),
        [("ns-1".to_owned(), WAIT_DELETE_FAILED), jobs()]
    );
    assert_eq!(
        after(None),
        [("ns-1".to_owned(), WAIT_CONFIRM_DRAINED), jobs()]
    );
}

/// Pods on their way out in a scale-in are counted apart: `Ready` says how many of the nodes
/// the set keeps are ready, not "3 of 2".
#[test]
fn pods_leaving_are_counted_apart() {
    let mut p = pods(3);
    p[0].ready = false;
    let st = state(vec![idle("ns-0"), idle("ns-1"), idle("ns-2")], &[]);
    // The not-ready pod goes first, then the highest ordinal.
    let plan = run(1, &p, Some(&st));
    assert_eq!(
        (
            plan.counts.replicas,
            plan.counts.ready,
            plan.counts.available
        ),
        (3, 2, 2)
    );
    assert_eq!(
        plan.counts.leaving,
        LeavingCounts {
            pods: 2,
            ready: 1,
            available: 1,
        }
    );
    // Nothing leaving: nothing counted apart.
    assert_eq!(
        run(3, &p, Some(&st)).counts.leaving,
        LeavingCounts::default()
    );
    // A set being deleted: every pod leaves.
    let deleting = run_deleting(3, &p, Some(&st), &BTreeSet::new());
    assert_eq!(deleting.counts.leaving.pods, 3);
}

/// A node is ready when its pod is available and Slurm runs jobs on it: the available pods the
/// set keeps whose node is down, not responding, not registered or not the set's are listed
/// with their `SlurmNodeState` message (the one projected onto the pod), and those only a
/// change helps (a registration slurmctld refused, a name another node holds) are stuck; a pod
/// not available, or leaving, is counted elsewhere. Without a view, each pod's condition as
/// last written says.
#[test]
fn available_pods_whose_slurm_node_takes_no_job_are_listed() {
    let mut p = pods(7);
    p[3].ready = false;
    let mut foreign = idle("ns-5");
    foreign.owner = None;
    let st = state(
        vec![
            idle("ns-0"),
            node(
                "ns-1",
                &["DOWN", "INVALID_REG"],
                Some("gres/gpu count reported lower"),
            ),
            node("ns-2", &["IDLE", "NOT_RESPONDING"], None),
            node("ns-3", &["DOWN"], None),
            node("ns-4", &["IDLE", "DRAIN"], Some("admin: disk swap")),
            foreign,
            // As Slurm 24.11 shows a node that registered with less memory than it says.
            node(
                "ns-6",
                &["IDLE", "DRAIN", "INVALID_REG"],
                Some("Low RealMemory (reported:1 < 100.00% of configured:99999999)"),
            ),
        ],
        &[],
    );
    let listed = |plan: &NodeSetPlan| -> Vec<(String, bool)> {
        plan.counts
            .not_usable
            .iter()
            .map(|n| (n.pod.clone(), n.stuck))
            .collect()
    };
    let plan = run(7, &p, Some(&st));
    // ns-3 is down too, but its pod is not ready (NotReady already says so); ns-4 is drained
    // (someone's choice), not broken.
    assert_eq!(
        listed(&plan),
        [
            ("ns-1".to_owned(), true),
            ("ns-2".to_owned(), false),
            ("ns-5".to_owned(), true),
            ("ns-6".to_owned(), true)
        ]
    );
    // Each says what the pod's condition says.
    for n in &plan.counts.not_usable {
        let projected = plan.actions.iter().find_map(|a| match a {
            Action::SetNodeCondition { pod, message, .. } if *pod == n.pod => Some(message),
            _ => None,
        });
        assert_eq!(projected, Some(&n.why), "{}", n.pod);
    }
    let why = &plan.counts.not_usable[0].why;
    assert!(
        why.contains("DOWN") && why.contains("gres/gpu count reported lower"),
        "{why}"
    );
    // A refused pod of an older template: a rolling update replaces it (perhaps with the fix),
    // so it is not stuck; under OnDelete nothing replaces it, so it is. A name another node
    // holds stays stuck either way (the replacement takes the same name).
    let mut outdated = p.clone();
    outdated[5].template_hash = Some("old".into());
    outdated[6].template_hash = Some("old".into());
    let stuck = |strategy: UpdateStrategyType| -> Vec<(String, bool)> {
        let strategy = UpdateStrategy {
            type_: strategy,
            rolling_update: None,
        };
        let plan = run_with(7, &outdated, Some(&st), &strategy, None);
        listed(&plan)
            .into_iter()
            .filter(|(pod, _)| ["ns-5", "ns-6"].contains(&pod.as_str()))
            .collect()
    };
    assert_eq!(
        stuck(UpdateStrategyType::OnDelete),
        [("ns-5".to_owned(), true), ("ns-6".to_owned(), true)]
    );
    assert_eq!(
        stuck(UpdateStrategyType::RollingUpdate),
        [("ns-5".to_owned(), true), ("ns-6".to_owned(), false)]
    );
    assert!(
        plan.counts.not_usable[2]
            .why
            .contains("not this SlurmNodeSet's")
    );
    // A pod that slurmd answers for but whose node Slurm has not registered.
    let unregistered = state(
        vec![
            idle("ns-0"),
            idle("ns-2"),
            idle("ns-4"),
            idle("ns-5"),
            idle("ns-6"),
        ],
        &[],
    );
    let plan = run(7, &p, Some(&unregistered));
    assert_eq!(listed(&plan), [("ns-1".to_owned(), false)]);
    assert_eq!(
        plan.counts.not_usable[0].why,
        "slurmd has not registered the node"
    );
    // Scaling in to 4: the victims (the not-ready ns-3, then the nodes down or refused, highest
    // ordinal first; not the one with a missed ping) are not among the nodes the set keeps.
    assert_eq!(
        listed(&run(4, &p, Some(&st))),
        [("ns-2".to_owned(), false), ("ns-5".to_owned(), true)]
    );
    // All up: nothing listed.
    let up = state((0..7).map(|i| idle(&format!("ns-{i}"))).collect(), &[]);
    assert!(run(7, &p, Some(&up)).counts.not_usable.is_empty());

    // No view: the pods' conditions as last written; none written: not known to be usable.
    let condition = |status: &str, reason: &str, message: &str| {
        Some((status.to_owned(), reason.to_owned(), message.to_owned()))
    };
    p[0].node_condition = condition("True", "Idle", "Slurm state IDLE");
    p[1].node_condition = condition(
        "False",
        "InvalidRegistration",
        "Slurm state DOWN+INVALID_REG",
    );
    p[2].node_condition = None;
    p[4].node_condition = condition("True", "Idle", "Slurm state IDLE");
    p[5].node_condition = condition("False", "Down", "Slurm state DOWN, reason: x");
    p[6].node_condition = condition("True", "Idle", "Slurm state IDLE");
    let plan = run(7, &p, None);
    let not_usable = |pod: &str, why: &str, stuck: bool| NotUsable {
        pod: pod.into(),
        why: why.into(),
        stuck,
    };
    assert_eq!(
        plan.counts.not_usable,
        [
            not_usable("ns-1", "Slurm state DOWN+INVALID_REG", true),
            not_usable("ns-2", NOT_SEEN_IN_SLURM, false),
            not_usable("ns-5", "Slurm state DOWN, reason: x", false),
        ]
    );
}

#[test]
fn drain_timeout_forces_only_our_recorded_drain() {
    let mut p = pods(2);
    let ours = Some("slurm-operator: scale-in");
    let st = state(
        vec![idle("ns-0"), node("ns-1", &["ALLOCATED", "DRAIN"], ours)],
        &[("ns-1", 1, None)],
    );
    let timeout = Some(std::time::Duration::from_secs(60));
    let strategy = UpdateStrategy::default();
    p[1].drain_started = Some(t(-30));
    assert!(structural(&run_with(1, &p, Some(&st), &strategy, timeout)).is_empty());
    p[1].drain_started = Some(t(-61));
    let forced = run_with(1, &p, Some(&st), &strategy, timeout);
    assert_eq!(
        structural(&forced),
        [delete_timed_out("ns-1", Leaving::ScaleIn)]
    );
    assert_eq!(
        forced.waiting,
        [Waiting {
            pod: "ns-1".into(),
            why: WAIT_CONFIRM_TIMED_OUT
        }],
        "leaving until slurmctld confirmed it"
    );
    // Without a view (a restart, an outage), the same delete, resting on slurmctld's word: an
    // admin may have drained the node since, keeping its jobs.
    let blind = run_with(1, &p, None, &strategy, timeout);
    assert_eq!(
        structural(&blind),
        [delete_timed_out("ns-1", Leaving::ScaleIn)]
    );
    assert_eq!(blind.waiting, forced.waiting);
    // Absent timeout: wait forever.
    assert!(structural(&run_with(1, &p, Some(&st), &strategy, None)).is_empty());
    assert!(structural(&run_with(1, &p, None, &strategy, None)).is_empty());
    // Someone else's drain is not ours to time out.
    let st = state(
        vec![
            idle("ns-0"),
            node("ns-1", &["ALLOCATED", "DRAIN"], Some("admin")),
        ],
        &[("ns-1", 1, None)],
    );
    assert!(structural(&run_with(1, &p, Some(&st), &strategy, timeout)).is_empty());
}

/// A drain undone after it was marked (an admin resumed the node, slurmctld lost its state) is
/// marked again as it is drained again: `scaleIn.drainTimeout` counts from the new drain, so
/// jobs started in between are not ended as soon as it shows. The mark comes first: a failed
/// mark skips the drain (same subject), so the old mark never times out a drain made since.
#[test]
fn a_drain_undone_restarts_the_drain_timeout() {
    let timeout = Some(std::time::Duration::from_secs(60));
    let strategy = UpdateStrategy::default();
    let mut p = pods(2);
    p[1].drain_started = Some(t(-61));
    // The node list (asked at t(-5)) shows the node running a job, not drained.
    let resumed = state(
        vec![idle("ns-0"), node("ns-1", &["ALLOCATED"], None)],
        &[("ns-1", 1, None)],
    );
    assert_eq!(
        structural(&run_with(1, &p, Some(&resumed), &strategy, timeout)),
        [
            Action::MarkDrainStarted { pod: "ns-1".into() },
            drain("ns-1"),
        ]
    );
    // A list asked before the mark may not show the drain yet: the mark stays.
    p[1].drain_started = Some(t(-3));
    assert_eq!(
        structural(&run_with(1, &p, Some(&resumed), &strategy, timeout)),
        [drain("ns-1")]
    );
    // Drained again, marked anew: its jobs are waited for, not timed out.
    let drained = state(
        vec![
            idle("ns-0"),
            node(
                "ns-1",
                &["ALLOCATED", "DRAIN"],
                Some("slurm-operator: scale-in"),
            ),
        ],
        &[("ns-1", 1, None)],
    );
    p[1].drain_started = Some(t(-1));
    let plan = run_with(1, &p, Some(&drained), &strategy, timeout);
    assert!(structural(&plan).is_empty(), "{:?}", plan.actions);
    assert_eq!(plan.waiting[0].why, WAIT_JOBS);
}

/// `scaleIn.drainTimeout` bounds the drain of a rolling update and of a deletion too (a job
/// that never ends must not hold the new template back for ever), and the delete says which.
#[test]
fn drain_timeout_bounds_an_update_and_a_deletion_too() {
    let ours = Some("slurm-operator: rolling update");
    let st = state(
        vec![idle("ns-0"), node("ns-1", &["ALLOCATED", "DRAIN"], ours)],
        &[("ns-1", 1, None)],
    );
    let mut p = pods(2);
    p[1].template_hash = Some("h0".into());
    p[1].drain_started = Some(t(-61));
    let timeout = Some(std::time::Duration::from_secs(60));
    let strategy = UpdateStrategy::default();
    assert!(
        structural(&run_with(2, &p, Some(&st), &strategy, None)).is_empty(),
        "without a timeout the update waits"
    );
    assert_eq!(
        structural(&run_with(2, &p, Some(&st), &strategy, timeout)),
        [delete_timed_out("ns-1", Leaving::Update)]
    );
    let only = state(
        vec![node("ns-1", &["ALLOCATED", "DRAIN"], ours)],
        &[("ns-1", 1, None)],
    );
    let deleting = plan(&Input {
        drain_timeout: timeout,
        deleting: true,
        ..input(2, &p[1..], Some(&only))
    });
    assert_eq!(
        structural(&deleting),
        [delete_timed_out("ns-1", Leaving::SetDeleted)]
    );
}

/// Scaled back out during a rolling update (every pod outdated), the nodes the scale-in drained
/// are kept: only as many stay drained as `maxUnavailable` lets the update take (they are next
/// in its line), the others are resumed. Counting every drain of ours as the update's kept them
/// all drained, far past the budget, until their jobs ended.
#[test]
fn scaled_back_out_during_an_update_resumes_the_drains_past_the_budget() {
    let mut p = pods(4);
    for pod in &mut p {
        pod.template_hash = Some("h0".into());
    }
    let scale_in = Some("slurm-operator: scale-in");
    for pod in &mut p[1..] {
        pod.drain_started = Some(t(-600));
    }
    let st = state(
        vec![
            idle("ns-0"),
            node("ns-1", &["ALLOCATED", "DRAIN"], scale_in),
            node("ns-2", &["ALLOCATED", "DRAIN"], scale_in),
            node("ns-3", &["ALLOCATED", "DRAIN"], scale_in),
        ],
        &[("ns-1", 1, None), ("ns-2", 1, None), ("ns-3", 1, None)],
    );
    let plan = run(4, &p, Some(&st));
    let resumed: Vec<String> = structural(&plan)
        .into_iter()
        .filter_map(|a| match a {
            Action::Resume { node } => Some(node),
            _ => None,
        })
        .collect();
    // maxUnavailable 1: the update keeps the first in its line (the highest ordinal).
    assert_eq!(resumed, ["ns-1", "ns-2"], "{:?}", plan.actions);
    assert_eq!(
        plan.waiting,
        [Waiting {
            pod: "ns-3".into(),
            why: WAIT_JOBS
        }]
    );
    assert!(
        !structural(&plan)
            .iter()
            .any(|a| matches!(a, Action::Drain { .. }) || a.is_destructive()),
        "{:?}",
        plan.actions
    );
    // The update's own drain is the update's, resumed by nothing.
    let update = Some("slurm-operator: rolling update");
    let st = state(
        vec![
            idle("ns-0"),
            idle("ns-1"),
            idle("ns-2"),
            node("ns-3", &["ALLOCATED", "DRAIN"], update),
        ],
        &[("ns-3", 1, None)],
    );
    let mut p = pods(4);
    for pod in &mut p {
        pod.template_hash = Some("h0".into());
    }
    p[3].drain_started = Some(t(-600));
    let plan = run(4, &p, Some(&st));
    assert!(structural(&plan).is_empty(), "{:?}", plan.actions);
}

#[test]
fn rolling_update_goes_one_batch_at_a_time() {
    let mut p = pods(4);
    for pod in &mut p {
        pod.template_hash = Some("h0".into());
    }
    let st = state(
        vec![idle("ns-0"), idle("ns-1"), idle("ns-2"), idle("ns-3")],
        &[],
    );
    let update = |n| Action::Drain {
        node: format!("ns-{n}"),
        reason: drain_reason(WHY_UPDATE),
    };
    let drains = |plan: &NodeSetPlan| {
        structural(plan)
            .into_iter()
            .filter(|a| matches!(a, Action::Drain { .. }))
            .collect::<Vec<_>>()
    };
    // maxUnavailable 1 (default): one node, the highest ordinal.
    assert_eq!(drains(&run(4, &p, Some(&st))), [update(3)]);
    // maxUnavailable 50% of 4 = 2.
    let two = UpdateStrategy {
        rolling_update: Some(RollingUpdate {
            max_unavailable: Some(IntOrString::String("50%".into())),
        }),
        ..UpdateStrategy::default()
    };
    assert_eq!(
        drains(&run_with(4, &p, Some(&st), &two, None)),
        [update(2), update(3)]
    );
    // One already in progress (and a not-ready pod of the new template) use up the budget:
    // nothing new starts.
    p[3].drain_started = Some(t(-5));
    p[0].ready = false;
    p[0].template_hash = Some("h1".into());
    let ours = Some("slurm-operator: rolling update");
    let st2 = state(
        vec![
            idle("ns-0"),
            idle("ns-1"),
            idle("ns-2"),
            node("ns-3", &["ALLOCATED", "DRAIN"], ours),
        ],
        &[("ns-3", 1, None)],
    );
    assert!(drains(&run_with(4, &p, Some(&st2), &two, None)).is_empty());
    // Drained → deleted; then it is recreated from the new template under the same ordinal once
    // its record is gone.
    let st3 = state(
        vec![
            idle("ns-0"),
            idle("ns-1"),
            idle("ns-2"),
            node("ns-3", &["IDLE", "DRAIN", "DYNAMIC_NORM"], ours),
        ],
        &[],
    );
    assert!(
        structural(&run(4, &p, Some(&st3))).contains(&delete_drained("ns-3", DeleteWhy::Update))
    );
    let st4 = state(vec![idle("ns-0"), idle("ns-1"), idle("ns-2")], &[]);
    assert!(structural(&run(4, &p[..3], Some(&st4))).contains(&Action::CreatePod { ordinal: 3 }));
    // OnDelete: outdated pods stay.
    let on_delete = UpdateStrategy {
        type_: UpdateStrategyType::OnDelete,
        rolling_update: None,
    };
    assert!(drains(&run_with(4, &p, Some(&st), &on_delete, None)).is_empty());
}

/// A rolling update leaves an outdated pod whose node someone else drained (an admin's "bad
/// DIMM"): replacing it would register a fresh node of its name, taking jobs, the drain and its
/// reason gone. It says why it waits, and the update goes on with the others; once the admin
/// resumes the node, it is taken in its turn.
#[test]
fn a_rolling_update_leaves_a_node_drained_by_someone_else() {
    let mut p = pods(4);
    for pod in &mut p {
        pod.template_hash = Some("h0".into());
    }
    let admin = node("ns-3", &["IDLE", "DRAIN", "DYNAMIC_NORM"], Some("bad DIMM"));
    let st = state(vec![idle("ns-0"), idle("ns-1"), idle("ns-2"), admin], &[]);
    let plan = run(4, &p, Some(&st));
    let drains = |plan: &NodeSetPlan| {
        structural(plan)
            .into_iter()
            .filter(|a| matches!(a, Action::Drain { .. } | Action::DeletePod { .. }))
            .collect::<Vec<_>>()
    };
    // Without it, ns-3 (drained and idle, first in line) would be deleted at once.
    assert_eq!(
        drains(&plan),
        [Action::Drain {
            node: "ns-2".into(),
            reason: drain_reason(WHY_UPDATE),
        }],
        "{plan:?}"
    );
    assert!(
        plan.waiting
            .iter()
            .any(|w| w.pod == "ns-3" && w.why == WAIT_UPDATE_HELD),
        "{:?}",
        plan.waiting
    );
    // Resumed: taken in its turn (first in line, idle).
    let st = state(
        vec![idle("ns-0"), idle("ns-1"), idle("ns-2"), idle("ns-3")],
        &[],
    );
    assert_eq!(
        drains(&run(4, &p, Some(&st))),
        [Action::Drain {
            node: "ns-3".into(),
            reason: drain_reason(WHY_UPDATE),
        }]
    );
}

#[test]
fn finished_pods_are_replaced() {
    let mut p = pods(2);
    p[1].finished = true;
    let plan = run(2, &p, Some(&state(vec![], &[])));
    assert_eq!(
        structural(&plan),
        [
            delete("ns-1", DeleteWhy::Finished),
            Action::CreatePod { ordinal: 2 }
        ]
    );
    // Its node still registered (slurmctld counts it up until `SlurmdTimeout`, though its
    // slurmd is gone): drained first, so that no job is started there meanwhile.
    let plan = run(2, &p, Some(&state(vec![idle("ns-0"), idle("ns-1")], &[])));
    assert_eq!(
        structural(&plan),
        [
            Action::Drain {
                node: "ns-1".into(),
                reason: "slurm-operator: pod ended".into(),
            },
            delete("ns-1", DeleteWhy::Finished),
            Action::CreatePod { ordinal: 2 }
        ]
    );
    // Drained by someone else, or down: left so.
    for other in [
        node("ns-1", &["IDLE", "DRAIN"], Some("admin: check")),
        node("ns-1", &["DOWN", "NOT_RESPONDING"], None),
    ] {
        let plan = run(2, &p, Some(&state(vec![idle("ns-0"), other], &[])));
        assert!(
            !structural(&plan)
                .iter()
                .any(|a| matches!(a, Action::Drain { .. })),
            "{plan:?}"
        );
    }
}

#[test]
fn status_counts_and_projection() {
    let mut p = pods(6);
    p[5].template_hash = Some("old".into());
    p[4].ready = false;
    let st = state(
        vec![
            idle("ns-0"),
            node("ns-1", &["ALLOCATED"], None),
            node("ns-2", &["MIXED", "DRAIN"], Some("admin: later")),
            node("ns-3", &["IDLE", "DRAIN"], Some("admin")),
            node("ns-4", &["DOWN", "NOT_RESPONDING"], None),
        ],
        &[("ns-1", 1, None), ("ns-2", 1, None)],
    );
    let plan = run_with(
        6,
        &p,
        Some(&st),
        &UpdateStrategy {
            type_: UpdateStrategyType::OnDelete,
            rolling_update: None,
        },
        None,
    );
    assert_eq!(
        plan.counts,
        Counts {
            replicas: 6,
            ready: 5,
            available: 5,
            updated: 5,
            slurm: Some(NodeSetSlurmCounts {
                idle: 1,
                allocated: 1,
                mixed: 0,
                draining: 1,
                drained: 1,
                down: 1,
            }),
            leaving: LeavingCounts::default(),
            // ns-4 is down but its pod is not ready; ns-5's pod is, and Slurm has no node for it.
            not_usable: vec![NotUsable {
                pod: "ns-5".to_owned(),
                why: "slurmd has not registered the node".to_owned(),
                stuck: false,
            }],
        }
    );
    let busy: Vec<_> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::SetBusy { pod, busy: true } => Some(pod.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(busy, ["ns-1", "ns-2"]);
    let reasons: Vec<_> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::SetNodeCondition { reason, .. } => Some(reason.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        reasons,
        [
            "Idle",
            "Allocated",
            "Draining",
            "Drained",
            "Down",
            "NotRegistered"
        ]
    );
    // Unchanged projection: nothing to patch.
    let mut settled = p.clone();
    for (pod, a) in settled.iter_mut().zip(
        plan.actions
            .iter()
            .filter(|a| matches!(a, Action::SetNodeCondition { .. })),
    ) {
        if let Action::SetNodeCondition {
            status,
            reason,
            message,
            ..
        } = a
        {
            pod.node_condition = Some((
                if *status { "True" } else { "False" }.into(),
                reason.clone(),
                message.clone(),
            ));
        }
        pod.busy_label = matches!(pod.name.as_str(), "ns-1" | "ns-2");
    }
    let plan = run_with(
        6,
        &settled,
        Some(&st),
        &UpdateStrategy {
            type_: UpdateStrategyType::OnDelete,
            rolling_update: None,
        },
        None,
    );
    assert!(plan.actions.is_empty(), "{:?}", plan.actions);
    // A job starting on an idle node changes the reason, not the status: no transition. A
    // node back from DOWN is one.
    let mut moved = settled.clone();
    moved[1].node_condition = Some(("True".into(), "Idle".into(), "Slurm state IDLE".into()));
    moved[4].node_condition = Some(("True".into(), "Idle".into(), "Slurm state IDLE".into()));
    let plan = run_with(
        6,
        &moved,
        Some(&st),
        &UpdateStrategy {
            type_: UpdateStrategyType::OnDelete,
            rolling_update: None,
        },
        None,
    );
    let transitions: Vec<_> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::SetNodeCondition {
                pod,
                reason,
                transition,
                ..
            } => Some((pod.as_str(), reason.as_str(), *transition)),
            _ => None,
        })
        .collect();
    assert_eq!(
        transitions,
        [
            (moved[1].name.as_str(), "Allocated", false),
            (moved[4].name.as_str(), "Down", true)
        ]
    );
    // Without a view: no Slurm counts, no label removal.
    assert_eq!(run(6, &p, None).counts.slurm, None);
    // In an outage (the view once synced, now too old or its poller down), every scheduled pod
    // not labelled busy is labelled so: an idle node may run a job since. Not before the
    // first view after a start (nothing synced yet): the labels stay as they were.
    let busy_labels = |plan: &NodeSetPlan| -> Vec<(String, bool)> {
        plan.actions
            .iter()
            .filter_map(|a| match a {
                Action::SetBusy { pod, busy } => Some((pod.clone(), *busy)),
                _ => None,
            })
            .collect()
    };
    let mut unscheduled = settled.clone();
    unscheduled[5].scheduled = false;
    let expected: Vec<(String, bool)> = ["ns-0", "ns-3", "ns-4"]
        .map(|pod| (pod.to_owned(), true))
        .to_vec();
    let old = ClusterState {
        nodes_synced_at: Some(t(-61)),
        ..st.clone()
    };
    assert_eq!(busy_labels(&run(6, &unscheduled, Some(&old))), expected);
    // A poller that lists nodes every two minutes (`spec.pollInterval: 2m`): a view as old as
    // its interval is no outage; one older than two intervals is.
    let slow = |age: i64| ClusterState {
        nodes_synced_at: Some(t(-age)),
        poll_interval: std::time::Duration::from_secs(120),
        ..st.clone()
    };
    assert_eq!(busy_labels(&run(6, &unscheduled, Some(&slow(130)))), []);
    assert_eq!(
        busy_labels(&run(6, &unscheduled, Some(&slow(241)))),
        expected
    );
    let down = ClusterState {
        health: Health::Down {
            since: t(-5),
            reason: "Unreachable",
            message: String::new(),
        },
        ..st.clone()
    };
    assert_eq!(busy_labels(&run(6, &unscheduled, Some(&down))), expected);
    let starting = ClusterState {
        nodes_synced_at: None,
        ..st.clone()
    };
    assert_eq!(busy_labels(&run(6, &unscheduled, Some(&starting))), []);
    assert_eq!(busy_labels(&run(6, &unscheduled, None)), []);
    // Once a round of this process trusted a view, its client dropped (the SlurmCluster's
    // registration removed) or replaced by one not synced yet is an outage too.
    let after_a_view = |state: Option<&ClusterState>| {
        super::plan(&Input {
            slurm: SlurmView {
                had_view: true,
                ..input(6, &unscheduled, state).slurm
            },
            ..input(6, &unscheduled, state)
        })
    };
    assert_eq!(busy_labels(&after_a_view(None)), expected);
    assert_eq!(busy_labels(&after_a_view(Some(&starting))), expected);
    assert_eq!(busy_labels(&after_a_view(Some(&st))), []);
}

fn run_min_ready(
    replicas: i32,
    pods: &[PodView],
    state: Option<&ClusterState>,
    min_ready_seconds: i32,
) -> NodeSetPlan {
    plan(&Input {
        min_ready_seconds,
        ..input(replicas, pods, state)
    })
}

#[test]
fn available_means_ready_for_min_ready_seconds() {
    let ready_since = |since: Option<i64>, ready: bool| PodView {
        ready,
        ready_since: since.map(t),
        ..pod("ns-0", 0)
    };
    let cases = [
        // (ready, ready since, minReadySeconds, available)
        (false, None, 0, false),
        (false, Some(-100), 10, false),
        (true, None, 0, true),
        (true, Some(-1), 0, true),
        (true, None, 10, false),
        (true, Some(-5), 10, false),
        (true, Some(-10), 10, true),
        (true, Some(-11), 10, true),
        // A transition time in the future (clock skew) is not available yet.
        (true, Some(5), 10, false),
    ];
    for (ready, since, min, want) in cases {
        assert_eq!(
            is_available(&ready_since(since, ready), min, t(0)),
            want,
            "ready {ready} since {since:?} min {min}"
        );
    }
}

#[test]
fn min_ready_seconds_gates_availability_and_requeues_when_it_ends() {
    let mut p = pods(3);
    p[0].ready_since = Some(t(-100));
    p[1].ready_since = Some(t(-25)); // available in 5 s
    p[2].ready_since = Some(t(-10)); // available in 20 s
    let st = state(vec![idle("ns-0"), idle("ns-1"), idle("ns-2")], &[]);
    let plan = run_min_ready(3, &p, Some(&st), 30);
    assert_eq!(plan.counts.ready, 3);
    assert_eq!(plan.counts.available, 1);
    assert_eq!(
        plan.available_in,
        Some(std::time::Duration::from_secs(5)),
        "the earliest end of a window"
    );
    // minReadySeconds 0: every Ready pod is available at once, nothing to wait for.
    let plan = run_min_ready(3, &p, Some(&st), 0);
    assert_eq!(plan.counts.available, 3);
    assert_eq!(plan.available_in, None);
    // A window that ended between the pod event and now still requeues at least a second on.
    let mut late = pods(1);
    late[0].ready_since = Some(t(-30));
    assert_eq!(run_min_ready(1, &late, None, 30).available_in, None);
    late[0].ready_since = Some(t(1) - chrono::TimeDelta::seconds(30));
    assert_eq!(
        run_min_ready(1, &late, None, 30).available_in,
        Some(std::time::Duration::from_secs(1))
    );
}

#[test]
fn rolling_update_counts_pods_not_yet_available_as_unavailable() {
    // ns-3 was just replaced (new template, Ready 10 s ago); the others are outdated.
    let mut p = pods(4);
    for pod in &mut p[..3] {
        pod.template_hash = Some("h0".into());
        pod.ready_since = Some(t(-1000));
    }
    p[3].ready_since = Some(t(-10));
    let st = state(
        vec![idle("ns-0"), idle("ns-1"), idle("ns-2"), idle("ns-3")],
        &[],
    );
    // minReadySeconds 30: ns-3 is not available yet and uses up maxUnavailable 1.
    let plan = run_min_ready(4, &p, Some(&st), 30);
    assert!(drained_nodes(&plan).is_empty(), "{:?}", plan.actions);
    assert_eq!(plan.available_in, Some(std::time::Duration::from_secs(20)));
    // Without minReadySeconds (or once the window is over) the next outdated pod goes.
    assert_eq!(drained_nodes(&run_min_ready(4, &p, Some(&st), 0)), ["ns-2"]);
    p[3].ready_since = Some(t(-30));
    assert_eq!(
        drained_nodes(&run_min_ready(4, &p, Some(&st), 30)),
        ["ns-2"]
    );
}

/// A template Slurm refuses (more memory than the hosts have: slurmctld marks the node
/// `INVALID_REG` and drains it) with pods Ready all the same (their probe sees slurmd's port):
/// the replaced pod whose node takes no job counts as unavailable, and the update stops after
/// `maxUnavailable` pods instead of rolling the template over every node. So does one not
/// registered yet, or down; one Slurm runs jobs on lets the next go.
#[test]
fn a_template_slurm_refuses_stops_the_update() {
    let mut p = pods(4);
    for pod in &mut p[..3] {
        pod.template_hash = Some("h0".into());
    }
    let refused = node(
        "ns-3",
        &["IDLE", "DRAIN", "DYNAMIC_NORM", "INVALID_REG"],
        Some("Low RealMemory (reported:1024 < 100.00% of configured:4096)"),
    );
    let with = |ns3: Option<Node>| {
        let mut nodes = vec![idle("ns-0"), idle("ns-1"), idle("ns-2")];
        nodes.extend(ns3);
        state(nodes, &[])
    };
    for (ns3, why) in [
        (Some(refused), "registration refused"),
        (None, "not registered yet"),
        (
            Some(node("ns-3", &["DOWN", "NOT_RESPONDING"], None)),
            "down",
        ),
    ] {
        assert!(
            drained_nodes(&run(4, &p, Some(&with(ns3)))).is_empty(),
            "{why}: the update went on"
        );
    }
    assert_eq!(
        drained_nodes(&run(4, &p, Some(&with(Some(idle("ns-3")))))),
        ["ns-2"]
    );

    // The template fixed (h1): the refused pod, now outdated, goes first, though slurmctld's
    // drain on it is not the operator's.
    let refused = node(
        "ns-3",
        &["IDLE", "DRAIN", "DYNAMIC_NORM", "INVALID_REG"],
        Some("Low RealMemory (reported:1024 < 100.00% of configured:4096)"),
    );
    let mut fixed = p.clone();
    fixed[3].template_hash = Some("h-bad".into());
    let plan = run(4, &fixed, Some(&with(Some(refused))));
    assert!(
        structural(&plan).contains(&delete_drained("ns-3", DeleteWhy::Update)),
        "{plan:?}"
    );
    assert!(!plan.waiting.iter().any(|w| w.why == WAIT_UPDATE_HELD));
}

/// A template that never became Ready, fixed by a newer one: the pod of the broken template is
/// outdated and unavailable, and it is replaced first rather than using up `maxUnavailable`
/// (which stopped the update for good, as a Deployment's would not).
#[test]
fn an_unavailable_pod_of_an_older_template_does_not_hold_the_update() {
    let mut p = pods(4);
    for pod in &mut p[..3] {
        pod.template_hash = Some("h0".into());
    }
    // ns-3 runs the broken template h-bad: never Ready.
    p[3].template_hash = Some("h-bad".into());
    p[3].ready = false;
    let st = state(
        vec![idle("ns-0"), idle("ns-1"), idle("ns-2"), idle("ns-3")],
        &[],
    );
    // The fix (h1) goes first to the unavailable pod; the budget of 1 is then used.
    assert_eq!(drained_nodes(&run(4, &p, Some(&st))), ["ns-3"]);
    // Its replacement of the current template, not Ready yet, holds the rest back.
    p[3].template_hash = Some("h1".into());
    p[3].drain_started = None;
    assert!(drained_nodes(&run(4, &p, Some(&st))).is_empty());
    // An outdated pod Ready but inside minReadySeconds still counts (it is not first in victim
    // order, so taking another beside it would make two unavailable).
    let mut q = pods(4);
    for pod in &mut q {
        pod.template_hash = Some("h0".into());
        pod.ready_since = Some(t(-1000));
    }
    q[0].ready_since = Some(t(-10));
    assert!(drained_nodes(&run_min_ready(4, &q, Some(&st), 30)).is_empty());
}

#[test]
fn partition_misses_list_registered_nodes_outside_the_wanted_partitions() {
    let mut in_debug = idle("ns-0");
    in_debug.partitions = vec!["debug".into(), "gpu".into()];
    let mut only_debug = idle("ns-1");
    only_debug.partitions = vec!["debug".into()];
    let st = state(vec![in_debug, only_debug], &[]);
    let p = pods(3); // ns-2 is not registered: not counted.
    let wanted = vec!["gpu".to_owned(), "debug".to_owned()];
    let run = |state: Option<&ClusterState>| {
        plan(&Input {
            partitions: &wanted,
            ..input(3, &p, state)
        })
    };
    assert_eq!(
        run(Some(&st)).partition_misses,
        Some(vec![("ns-1".to_owned(), vec!["gpu".to_owned()])])
    );
    assert_eq!(run(None).partition_misses, None, "no view, no verdict");
    // Mid-update after `spec.slurm.partitions` changed (the template with it): a pod of the
    // template before carries the partitions before; it is replaced, not judged.
    let mut updating = p.clone();
    updating[1].template_hash = Some("h0".into());
    let mid_update = plan(&Input {
        partitions: &wanted,
        ..input(3, &updating, Some(&st))
    });
    assert_eq!(mid_update.partition_misses, Some(vec![]));
    assert_eq!(mid_update.partition_outdated, vec!["ns-1".to_owned()]);
    assert!(run(Some(&st)).partition_outdated.is_empty());
    let mut stale = st.clone();
    stale.nodes_synced_at = Some(t(-600));
    let plan = run(Some(&stale));
    assert_eq!(plan.partition_misses, None);
    assert_eq!(plan.view, ViewState::Untrusted);
    assert_eq!(run(None).view, ViewState::NoClient);
    assert_eq!(run(Some(&st)).view, ViewState::Trusted);
}

/// A node this set does not own, named like one of its pods.
fn foreign(name: &str, state: &[&str], owner: Option<NodeOwner>) -> Node {
    Node {
        owner,
        ..node(name, state, None)
    }
}

/// A static node (slurm.conf), named like one of the set's pods.
fn static_node(name: &str, state: &[&str]) -> Node {
    Node {
        owner: None,
        state: NodeState::from_strings(state),
        ..node(name, state, None)
    }
}

/// Node ownership: whatever the set wants (scale in, scale out, update, forget records), it
/// never drains, resumes or deletes a node it does not own, never gives a pod the name of such
/// a node, and names every such node as a conflict.
#[test]
fn nodes_of_others_are_never_touched_nor_their_names_taken() {
    let other_set = Some(NodeOwner::new("team-b", "ns"));
    let same_name_other_ns = Some(NodeOwner::new("team-b", "ns"));
    let ours_drain = Some("slurm-operator: scale-in");
    // (what, the node named ns-1, pods, replicas)
    let cases: Vec<(&str, Node)> = vec![
        ("static node", static_node("ns-1", &["IDLE"])),
        ("static node, drained by a set's prefix", {
            let mut n = static_node("ns-1", &["IDLE", "DRAIN"]);
            n.reason = ours_drain.map(Into::into);
            n
        }),
        ("static node carrying our owner record", {
            let mut n = static_node("ns-1", &["IDLE"]);
            n.owner = Some(owner());
            n
        }),
        (
            "another namespace's set",
            foreign("ns-1", &["IDLE"], same_name_other_ns.clone()),
        ),
        ("another set, drained with our prefix", {
            let mut n = foreign("ns-1", &["IDLE", "DRAIN"], other_set.clone());
            n.reason = ours_drain.map(Into::into);
            n
        }),
        (
            "a dynamic node without owner record",
            foreign("ns-1", &["ALLOCATED"], None),
        ),
        ("a garbled owner record", foreign("ns-1", &["IDLE"], None)),
    ];
    let touches = |plan: &NodeSetPlan| -> Vec<Action> {
        plan.actions
            .iter()
            .filter(|a| match a {
                Action::Drain { node, .. }
                | Action::Resume { node }
                | Action::DeleteNodeRecord { node } => node == "ns-1",
                Action::DeletePod { name, .. } => name == "ns-1",
                Action::CreatePod { ordinal } => *ordinal == 1,
                _ => false,
            })
            .cloned()
            .collect()
    };
    for (what, other) in cases {
        let st = state(vec![idle("ns-0"), other.clone(), idle("ns-2")], &[]);
        // Scale-out over a hole at ordinal 1: ordinal 1 is skipped.
        let mut holey = pods(3);
        holey.remove(1);
        let plan = run(3, &holey, Some(&st));
        assert_eq!(touches(&plan), [], "{what}: scale-out");
        assert_eq!(
            structural(&plan),
            [Action::CreatePod { ordinal: 3 }],
            "{what}: scale-out"
        );
        let conflicts = plan.conflicts.clone().unwrap();
        assert_eq!(conflicts.len(), 1, "{what}");
        assert_eq!(conflicts[0].node, "ns-1");
        assert_eq!(conflicts[0].is_static, !other.state.is_dynamic(), "{what}");
        // Its record without a pod is not ours to forget.
        let plan = run(2, &holey, Some(&st));
        assert_eq!(touches(&plan), [], "{what}: forget records");
        // A pod of ours named like it (made by an older operator): scale-in, update, scale back
        // out, drain timeout: none touches the node, and the scheduled pod waits.
        let mut p = pods(3);
        p[1].drain_started = Some(t(-10_000));
        p[1].template_hash = Some("old".into());
        for replicas in [0, 1, 2, 3] {
            let plan = run_with(
                replicas,
                &p,
                Some(&st),
                &UpdateStrategy::default(),
                Some(std::time::Duration::from_secs(1)),
            );
            assert_eq!(touches(&plan), [], "{what}: replicas {replicas}");
            if replicas < 3 {
                assert!(
                    plan.waiting
                        .iter()
                        .any(|w| w.pod == "ns-1" && w.why == WAIT_CONFLICT),
                    "{what}: replicas {replicas}: {:?}",
                    plan.waiting
                );
            }
            // Not counted as the set's node, and its pod says why.
            let condition = plan.actions.iter().find_map(|a| match a {
                Action::SetNodeCondition { pod, reason, .. } if pod == "ns-1" => Some(reason),
                _ => None,
            });
            assert_eq!(
                condition.map(String::as_str),
                Some("NodeNameConflict"),
                "{what}"
            );
        }
        let counts = run(3, &p, Some(&st)).counts.slurm.unwrap();
        assert_eq!(counts.idle, 2, "{what}: only the set's own nodes count");
    }
}

#[test]
fn conflicts_name_the_other_owner() {
    let st = state(
        vec![
            idle("ns-0"),
            static_node("ns-1", &["IDLE"]),
            foreign(
                "ns-2",
                &["IDLE", "DYNAMIC_NORM"],
                Some(NodeOwner::new("team-b", "ns")),
            ),
            foreign("ns-3", &["IDLE", "DYNAMIC_NORM"], None),
            // Not named like the set's: none of its business.
            static_node("n1", &["IDLE"]),
            static_node("ns-x", &["IDLE"]),
        ],
        &[],
    );
    let plan = run(1, &pods(1), Some(&st));
    let text: Vec<String> = plan
        .conflicts
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        text,
        [
            "ns-1 is a static node",
            "ns-2 belongs to SlurmNodeSet team-b/ns",
            "ns-3 is a dynamic node with no owner record",
        ]
    );
    assert_eq!(
        run(1, &pods(1), None).conflicts,
        None,
        "no view, no verdict"
    );
    assert_eq!(
        run(1, &pods(1), Some(&state(vec![idle("ns-0")], &[]))).conflicts,
        Some(vec![])
    );
}

/// An unscheduled pod never ran slurmd: it goes even when its name is held by another node.
#[test]
fn an_unscheduled_pod_goes_whatever_holds_its_name() {
    let st = state(vec![idle("ns-0"), static_node("ns-1", &["IDLE"])], &[]);
    let mut p = pods(2);
    p[1].scheduled = false;
    p[1].ready = false;
    assert_eq!(
        structural(&run(1, &p, Some(&st))),
        [delete("ns-1", DeleteWhy::ScaleIn)]
    );
}

/// A pod of one of the set's names that the set does not own (orphaned from an earlier set of
/// this name with `--cascade=orphan`; its slurmd registered with the same owner record): its
/// node record is not removed while that pod stands, the way a gone pod's is.
#[test]
fn an_orphaned_pods_node_record_is_kept() {
    let taken = BTreeSet::from([1]);
    let st = state(vec![idle("ns-0"), idle("ns-1"), idle("ns-2")], &[]);
    let p = pods(1);
    let plan = plan(&Input {
        taken: &taken,
        ..input(1, &p, Some(&st))
    });
    assert_eq!(
        structural(&plan),
        [Action::DeleteNodeRecord {
            node: "ns-2".into()
        }],
        "ns-2's pod is gone; ns-1's stands, not the set's"
    );
}

/// A pod someone else deleted (an eviction) runs its slurmd through its grace period: its node
/// is drained so that no job starts there meanwhile; not one already drained (ours or
/// another's), nor one of a pod that finished.
#[test]
fn a_terminating_pods_node_is_drained() {
    let mut p = pods(3);
    p[1].terminating = true;
    p[2].terminating = true;
    p[2].finished = true;
    let st = state(vec![idle("ns-0"), idle("ns-1"), idle("ns-2")], &[]);
    let drains: Vec<Action> = structural(&run(3, &p, Some(&st)))
        .into_iter()
        .filter(|a| matches!(a, Action::Drain { .. }))
        .collect();
    assert_eq!(
        drains,
        [
            Action::Drain {
                node: "ns-1".into(),
                reason: "slurm-operator: pod terminating".into(),
            },
            // Ended as well: its slurmd is gone.
            Action::Drain {
                node: "ns-2".into(),
                reason: "slurm-operator: pod ended".into(),
            }
        ]
    );
    let drained = state(
        vec![
            idle("ns-0"),
            node("ns-1", &["IDLE", "DRAIN"], Some("admin: check")),
        ],
        &[],
    );
    assert!(
        !structural(&run(3, &p, Some(&drained)))
            .iter()
            .any(|a| matches!(a, Action::Drain { .. }))
    );
    assert!(
        !structural(&run(3, &p, None))
            .iter()
            .any(|a| matches!(a, Action::Drain { .. })),
        "no view, no drain"
    );
}

/// The plan of a set being deleted (the rest as `run`), with `taken` ordinals.
fn run_deleting(
    replicas: i32,
    pods: &[PodView],
    state: Option<&ClusterState>,
    taken: &BTreeSet<u32>,
) -> NodeSetPlan {
    plan(&Input {
        taken,
        deleting: true,
        ..input(replicas, pods, state)
    })
}

/// A set being deleted leaves as a scale-in to 0 does, whatever `replicas` says: nodes not
/// drained are drained (saying why), a drained one's pod goes, a busy one waits, nothing is
/// created; and `remaining` names every pod and node of the set still there.
#[test]
fn a_deleted_set_drains_every_node_before_its_pods_go() {
    let mut p = pods(3);
    p.remove(1); // ns-1's pod is gone already; its node record is not.
    let st = state(
        vec![
            idle("ns-0"),
            idle("ns-1"),
            node(
                "ns-2",
                &["MIXED", "DRAIN", "DYNAMIC_NORM"],
                Some("slurm-operator: SlurmNodeSet deleted"),
            ),
        ],
        &[("ns-2", 1, None)],
    );
    let plan = run_deleting(5, &p, Some(&st), &BTreeSet::new());
    assert_eq!(
        structural(&plan),
        [
            Action::Drain {
                node: "ns-0".into(),
                reason: "slurm-operator: SlurmNodeSet deleted".into(),
            },
            Action::MarkDrainStarted { pod: "ns-0".into() },
            // Our drain, found without its start on the pod: recorded (for drainTimeout).
            Action::MarkDrainStarted { pod: "ns-2".into() },
            Action::DeleteNodeRecord {
                node: "ns-1".into()
            },
        ],
        "{plan:?}"
    );
    assert_eq!(
        plan.waiting
            .iter()
            .map(|w| (w.pod.as_str(), w.why))
            .collect::<Vec<_>>(),
        [("ns-0", WAIT_DRAIN_REQUESTED), ("ns-2", WAIT_JOBS)]
    );
    assert_eq!(
        plan.remaining,
        Some(vec!["ns-0".into(), "ns-1".into(), "ns-2".into()])
    );

    // Drained and idle: the pod goes (and it is the deletion that says so).
    let st = state(
        vec![node(
            "ns-0",
            &["IDLE", "DRAIN", "DYNAMIC_NORM"],
            Some("slurm-operator: SlurmNodeSet deleted"),
        )],
        &[],
    );
    let plan = run_deleting(1, &pods(1), Some(&st), &BTreeSet::new());
    assert_eq!(
        structural(&plan),
        [Action::DeletePod {
            name: "ns-0".into(),
            why: DeleteWhy::SetDeleted,
            confirm: Confirm::NodeDrained,
        }]
    );
    assert_eq!(plan.remaining, Some(vec!["ns-0".into()]));
}

/// What a deletion still waits for: nothing once no pod and no node record of the set is left
/// (a record of an ordinal whose pod is not the set's, orphaned from an earlier set of this
/// name, is not the set's to remove); unknown without a trusted view.
#[test]
fn a_deleted_set_is_gone_once_no_pod_and_no_node_of_it_is_left() {
    let none = BTreeSet::new();
    let empty = state(vec![], &[]);
    let plan = run_deleting(2, &[], Some(&empty), &none);
    assert_eq!(plan.remaining, Some(vec![]));
    assert!(plan.actions.is_empty(), "{plan:?}");

    // A record whose pod is gone is removed, and waited for until it is.
    let st = state(vec![idle("ns-3")], &[]);
    let plan = run_deleting(2, &[], Some(&st), &none);
    assert_eq!(
        structural(&plan),
        [Action::DeleteNodeRecord {
            node: "ns-3".into()
        }]
    );
    assert_eq!(plan.remaining, Some(vec!["ns-3".into()]));

    // An orphaned pod's node (ordinal taken) stays, and is not waited for.
    let plan = run_deleting(2, &[], Some(&st), &BTreeSet::from([3]));
    assert!(structural(&plan).is_empty(), "{plan:?}");
    assert_eq!(plan.remaining, Some(vec![]));

    // Another owner's node of a matching name is neither removed nor the set's.
    let mut foreign = idle("ns-4");
    foreign.owner = Some(NodeOwner::new("team-b", "ns"));
    let plan = run_deleting(2, &[], Some(&state(vec![foreign], &[])), &none);
    assert!(structural(&plan).is_empty(), "{plan:?}");
    assert_eq!(plan.remaining, Some(vec![]));

    // Without a trusted view nothing can be said to be gone, and nothing is deleted.
    let mut stale = empty.clone();
    stale.nodes_synced_at = Some(t(-3600));
    for view in [None, Some(&stale)] {
        let plan = run_deleting(2, &pods(1), view, &none);
        assert_eq!(plan.remaining, None);
        assert!(!plan.actions.iter().any(Action::is_destructive), "{plan:?}");
    }
}

/// A pod that stays on a cordoned Kubernetes node has its Slurm node drained (no new job starts
/// there; the running ones end as they would, and the PodDisruptionBudget holds `kubectl drain`'s
/// eviction until then), for that cause alone; uncordoned, the drain is resumed; while the
/// operator cannot tell (no complete view of the Kubernetes nodes), a drain for a cordon stays
/// and other drains of ours are resumed as before. Someone else's drain is never written over.
#[test]
fn a_cordoned_hosts_node_is_drained_and_resumed_once_uncordoned() {
    let cordoned = |host: &str| Host::Cordoned(host.into());
    let ours_cordon = Some("slurm-operator: cordoned: Kubernetes node k1");
    let ours_scale_in = Some("slurm-operator: scale-in");
    let drain_for = |host: &str| Action::Drain {
        node: "ns-0".into(),
        reason: cordon_reason(host),
    };
    let resume = Action::Resume {
        node: "ns-0".into(),
    };
    // (what, host, node state, reason, running jobs, actions on the staying pod)
    type Row<'a> = (
        &'a str,
        Host,
        &'a [&'a str],
        Option<&'a str>,
        u32,
        Vec<Action>,
    );
    let rows: Vec<Row> = vec![
        (
            "cordoned, idle",
            cordoned("k1"),
            &["IDLE"],
            None,
            0,
            vec![drain_for("k1")],
        ),
        (
            "cordoned, running a job: drained, not deleted",
            cordoned("k1"),
            &["ALLOCATED"],
            None,
            1,
            vec![drain_for("k1")],
        ),
        (
            "cordoned, already drained for it",
            cordoned("k1"),
            &["IDLE", "DRAIN"],
            ours_cordon,
            0,
            vec![],
        ),
        (
            "cordoned, our drain for another cause kept",
            cordoned("k1"),
            &["IDLE", "DRAIN"],
            ours_scale_in,
            0,
            vec![],
        ),
        (
            "cordoned, an admin's drain left alone",
            cordoned("k1"),
            &["IDLE", "DRAIN"],
            Some("disk"),
            0,
            vec![],
        ),
        (
            "cordoned, FAIL left alone",
            cordoned("k1"),
            &["IDLE", "FAIL"],
            None,
            0,
            vec![],
        ),
        (
            "cordoned, DOWN: nothing starts there",
            cordoned("k1"),
            &["DOWN"],
            None,
            0,
            vec![],
        ),
        (
            "uncordoned: our cordon drain resumed",
            Host::Open,
            &["IDLE", "DRAIN"],
            ours_cordon,
            0,
            vec![resume.clone()],
        ),
        (
            "uncordoned, busy: resumed too",
            Host::Open,
            &["ALLOCATED", "DRAIN"],
            ours_cordon,
            1,
            vec![resume.clone()],
        ),
        (
            "uncordoned, an admin's drain left alone",
            Host::Open,
            &["IDLE", "DRAIN"],
            Some("disk"),
            0,
            vec![],
        ),
        (
            "schedulable: nothing",
            Host::Open,
            &["IDLE"],
            None,
            0,
            vec![],
        ),
        (
            "unknown: the cordon drain stays",
            Host::Unknown,
            &["IDLE", "DRAIN"],
            ours_cordon,
            0,
            vec![],
        ),
        (
            "unknown: another drain of ours resumed as before",
            Host::Unknown,
            &["IDLE", "DRAIN"],
            ours_scale_in,
            0,
            vec![resume.clone()],
        ),
        (
            "unknown, not drained: nothing",
            Host::Unknown,
            &["IDLE"],
            None,
            0,
            vec![],
        ),
        (
            "a reason cut at Slurm's limit: still a cordon drain",
            Host::Unknown,
            &["IDLE", "DRAIN"],
            Some("slurm-operator: cordoned: Kubernetes node k"),
            0,
            vec![],
        ),
    ];
    for (what, host, node_state, reason, running, expected) in rows {
        let pods = vec![PodView {
            host,
            ..pod("ns-0", 0)
        }];
        let mut flags = node_state.to_vec();
        flags.push("DYNAMIC_NORM");
        let jobs = [("ns-0", running, None)];
        let view = state(
            vec![node("ns-0", &flags, reason)],
            &jobs[..usize::from(running > 0)],
        );
        let planned = run(1, &pods, Some(&view));
        assert_eq!(structural(&planned), expected, "{what}");
        assert!(
            planned.waiting.is_empty(),
            "{what}: a staying pod waits for nothing"
        );
    }
    // Not registered yet: nothing to drain (the next plan after its slurmd registers drains it).
    let pods = vec![PodView {
        host: cordoned("k1"),
        ..pod("ns-0", 0)
    }];
    assert_eq!(
        structural(&run(1, &pods, Some(&state(vec![], &[])))),
        vec![]
    );
    // Without a view of Slurm: nothing.
    assert_eq!(structural(&run(1, &pods, None)), vec![]);
}

/// The cordon's drain reason: recognisable whatever the Kubernetes node's name (cut at Slurm's
/// limit), and told apart from the other causes'.
#[test]
fn the_cordon_reason_names_the_node_and_stays_recognisable() {
    assert_eq!(
        cordon_reason("worker-7"),
        "slurm-operator: cordoned: Kubernetes node worker-7"
    );
    let long = "n".repeat(300);
    let cut = cordon_reason(&long);
    assert_eq!(cut.chars().count(), MAX_REASON_CHARS);
    let drained = |reason: &str| node("ns-0", &["IDLE", "DRAIN", "DYNAMIC_NORM"], Some(reason));
    assert!(is_cordon_drain(&drained(&cut)));
    assert!(is_cordon_drain(&drained(
        " slurm-operator: cordoned: Kubernetes node x"
    )));
    for other in [
        drain_reason(WHY_SCALE_IN),
        drain_reason(WHY_TERMINATING),
        "cordoned: Kubernetes node x".to_owned(),
        "slurm-operator: cordonedX".to_owned(),
    ] {
        assert!(!is_cordon_drain(&drained(&other)), "{other}");
    }
    let resumed = node(
        "ns-0",
        &["IDLE", "DYNAMIC_NORM"],
        Some("slurm-operator: cordoned: Kubernetes node x"),
    );
    assert!(
        !is_cordon_drain(&resumed),
        "a reason left over from a resumed drain"
    );
}

/// A pod that stays on a cordoned host forgets a drain start left by a scale-in or an update no
/// longer due (it would count against `scaleIn.drainTimeout` at the next scale-in), and a
/// drain for a cordon does not put its pod first in a scale-in's line: an idle pod goes first.
/// Chosen anyway (the only idle one), it leaves as any victim: our drain stands for the
/// scale-in's, and its pod goes once slurmctld confirms the node drained.
#[test]
fn a_cordon_is_no_scale_in_and_forgets_a_drain_start() {
    let cordon = Some("slurm-operator: cordoned: Kubernetes node k1");
    let cordoned = |mut p: PodView| {
        p.host = Host::Cordoned("k1".into());
        p
    };
    let started = |mut p: PodView| {
        p.drain_started = Some(t(-60));
        p
    };
    let clear = Action::ClearDrainStarted { pod: "ns-0".into() };
    let busy_drained: &[&str] = &["ALLOCATED", "DRAIN", "DYNAMIC_NORM"];
    for (what, host, reason) in [
        (
            "cordoned, drained for it",
            Host::Cordoned("k1".into()),
            cordon,
        ),
        (
            "cordoned, our scale-in's drain kept",
            Host::Cordoned("k1".into()),
            Some("slurm-operator: scale-in"),
        ),
        ("unknown host, drained for a cordon", Host::Unknown, cordon),
    ] {
        let pods = vec![PodView {
            host,
            ..started(pod("ns-0", 0))
        }];
        let view = state(
            vec![node("ns-0", busy_drained, reason)],
            &[("ns-0", 1, None)],
        );
        assert_eq!(
            structural(&run(1, &pods, Some(&view))),
            vec![clear.clone()],
            "{what}"
        );
    }

    // 2 → 1: ns-0 is cordon-drained and busy, ns-1 idle: ns-1 goes, ns-0 is not touched.
    let pods = vec![cordoned(pod("ns-0", 0)), pod("ns-1", 1)];
    let view = state(
        vec![node("ns-0", busy_drained, cordon), idle("ns-1")],
        &[("ns-0", 1, None)],
    );
    let planned = structural(&run(1, &pods, Some(&view)));
    assert!(
        planned.contains(&drain("ns-1")),
        "the idle pod goes: {planned:?}"
    );
    assert!(
        !planned.iter().any(|a| match a {
            Action::Drain { node, .. } | Action::Resume { node } => node == "ns-0",
            Action::DeletePod { name, .. } | Action::MarkDrainStarted { pod: name } =>
                name == "ns-0",
            _ => false,
        }),
        "the cordoned one keeps its drain and its pod: {planned:?}"
    );

    // 2 → 1 with the cordoned one idle and drained, the other busy: the cordoned one goes.
    let view = state(
        vec![
            node("ns-0", &["IDLE", "DRAIN", "DYNAMIC_NORM"], cordon),
            idle("ns-1"),
        ],
        &[("ns-1", 1, None)],
    );
    let planned = structural(&run(1, &pods, Some(&view)));
    assert!(
        planned.contains(&delete_drained("ns-0", DeleteWhy::ScaleIn)),
        "{planned:?}"
    );
    assert!(
        !planned
            .iter()
            .any(|a| matches!(a, Action::Drain { .. } | Action::Resume { .. })),
        "our cordon drain stands for the scale-in's: {planned:?}"
    );
}
