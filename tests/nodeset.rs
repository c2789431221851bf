//! The SlurmNodeSet controller's scale-in against the real local Slurm (`hack/slurm-up.sh`): the
//! planner and the Slurm half of the driver run for real (real poller and index, real
//! slurmrestd); the test plays the API server and the kubelet with an in-memory pod list: a
//! created pod starts a dynamic slurmd (`hack/slurm-node.sh start <pod> --conf ...`), a deleted
//! pod stops it.
//!
//! One scenario, in order: scale 3 → 1 while a job runs on the middle node (the idle ones go
//! first, the busy one stays); scale to 0 and back to 1 during the drain (the node is resumed
//! and keeps its pod); an admin drain (no prefix) is left alone; scale to 0 while the job runs
//! (the node stays DRAINING until the job ends, then its pod and record go). No job is killed.
//! Deleting a set does the same for all its nodes, and ends with nothing of it left in Slurm.
//! A delete planned on a view that showed the node drained does not go once slurmctld, asked
//! just before, shows it resumed and running a job. A node slurmctld sets DOWN while its pod
//! stays ready is listed as taking no job (the set is not `Ready`) until it is resumed (or
//! registers again: `ReturnToService=2`); one whose
//! registration slurmctld refuses (`INVALID_REG`) is listed as stuck; a scale-in takes such a
//! node before a sound one.
//!
//! Node ownership (issue 14): two sets of one name in two namespaces get distinct nodes, each
//! registered with its owner record (`slurmd --extra`, as the pods' slurmd is started), and
//! neither drains, resumes or deletes the other's, even when their names are made to collide; a
//! node named like a set's pod that is not the set's (a dynamic node without owner record, the
//! static node `n1`) is neither taken nor drained. Every Slurm action the stand-in carries out
//! is first checked not to target a static node (`n1`..`n3` are shared with other tests).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use slurm_operator::controller::nodeset::plan::{
    self, Action, Confirm, DeleteWhy, DrainOwner, Host, Input, PodView, SlurmView, drain_owner,
};
use slurm_operator::controller::nodeset::{SlurmOutcome, apply_slurm, pods, slurm_allows};
use slurm_operator::crd::{NodeSetSlurm, SlurmCluster, UpdateStrategy};
use slurm_operator::metrics::Metrics;
use slurm_operator::slurm::node_owner::NodeOwner;
use slurm_operator::slurm::types::JobBaseState;
use slurm_operator::slurm::{SlurmClient, SlurmError};
use slurm_operator::state::index::{ClusterState, IndexReader};
use slurm_operator::state::poller::{self, PollerConfig};
use tokio::sync::broadcast;

use common::{LocalSlurm, NodeGuard};

const HASH: &str = "h1";

/// The test's stand-in for the API server and the kubelet.
struct World<'a> {
    slurm: &'a LocalSlurm,
    client: SlurmClient,
    index: IndexReader,
    set: String,
    /// The set's node-name prefix (`<set>-<namespace tag>`).
    prefix: String,
    owner: NodeOwner,
    conf: String,
    pods: BTreeMap<String, PodView>,
    guards: Vec<NodeGuard<'a>>,
    /// Every action carried out, for assertions.
    log: Vec<Action>,
    /// The set is being deleted (`Input::deleting`).
    deleting: bool,
}

impl World<'_> {
    /// An index snapshot taken after at least one complete poll that started after now.
    async fn fresh_state(&self) -> Arc<ClusterState> {
        let mut index = self.index.clone();
        let before = index.borrow().polls;
        // Generous: other tests on this machine restart slurmctld/slurmrestd at times.
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            {
                let state = index.borrow_and_update();
                if state.polls >= before + 2 && state.nodes_synced_at.is_some() {
                    return Arc::clone(&state);
                }
            }
            assert!(Instant::now() < deadline, "the poller made no progress");
            let _ = tokio::time::timeout(Duration::from_millis(500), index.changed()).await;
        }
    }

    /// One reconcile: plan on a fresh index, then carry the actions out.
    async fn step(&mut self, replicas: i32) -> plan::NodeSetPlan {
        let state = self.fresh_state().await;
        let plan = self.plan_on(&state, replicas);
        self.carry_out(&plan).await;
        plan
    }

    /// The plan for `replicas` on the index snapshot `state` (as fresh or as old as the test
    /// makes it).
    fn plan_on(&self, state: &ClusterState, replicas: i32) -> plan::NodeSetPlan {
        let views: Vec<PodView> = self.pods.values().cloned().collect();
        let strategy = UpdateStrategy::default();
        plan::plan(&Input {
            prefix: &self.prefix,
            owner: &self.owner,
            replicas,
            template_hash: HASH,
            strategy: &strategy,
            drain_timeout: None,
            min_ready_seconds: 0,
            partitions: &[],
            pods: &views,
            taken: &BTreeSet::new(),
            slurm: SlurmView {
                state: Some(state),
                now: Utc::now(),
                had_view: true,
            },
            deleting: self.deleting,
        })
    }

    /// Carry `plan`'s actions out as the driver does.
    async fn carry_out(&mut self, plan: &plan::NodeSetPlan) {
        for action in &plan.actions {
            match action {
                Action::CreatePod { ordinal } => {
                    let name = pods::pod_name(&self.prefix, *ordinal);
                    self.guards.push(NodeGuard::new(self.slurm, &name));
                    // As the pod's slurmd: registered with the set's owner record.
                    self.slurm.node_script(&[
                        "start",
                        &name,
                        "--conf",
                        &self.conf,
                        "--extra",
                        &self.owner.to_extra(),
                    ]);
                    self.pods.insert(
                        name.clone(),
                        PodView {
                            name,
                            ordinal: *ordinal,
                            scheduled: true,
                            ready: true,
                            template_hash: Some(HASH.into()),
                            ..PodView::default()
                        },
                    );
                }
                Action::DeletePod { name, .. } => {
                    // As the driver: a delete that rests on the node's state waits while
                    // slurmctld, asked now, no longer shows it (a slurmd registered since the
                    // view lacked its node, a node seen drained resumed since); `None`: gone.
                    if slurm_allows(&self.client, action, &self.owner)
                        .await
                        .unwrap_or_else(|e| panic!("{action:?}: {e}"))
                        == Some(false)
                    {
                        continue;
                    }
                    // Slurm itself, asked right now: the node runs nothing (or is gone).
                    if let Ok(node) = self.client.node(name).await {
                        assert!(
                            !node.state.is_busy(),
                            "pod {name} deleted while its node runs a job: {:?}",
                            node.state
                        );
                    }
                    // Only a slurmd this world started (a pod the test made up for another's
                    // node must never stop that node's slurmd).
                    assert!(
                        self.guards.iter().any(|g| g.name() == name),
                        "{action:?}: not a pod of this set's making"
                    );
                    self.slurm.node_script(&["stop", name]);
                    self.pods.remove(name);
                }
                Action::MarkDrainStarted { pod } => {
                    if let Some(p) = self.pods.get_mut(pod) {
                        p.drain_started = Some(Utc::now());
                    }
                }
                Action::ClearDrainStarted { pod } => {
                    if let Some(p) = self.pods.get_mut(pod) {
                        p.drain_started = None;
                    }
                }
                Action::SetBusy { pod, busy } => {
                    if let Some(p) = self.pods.get_mut(pod) {
                        p.busy_label = *busy;
                    }
                }
                Action::SetNodeCondition {
                    pod,
                    status,
                    reason,
                    message,
                    ..
                } => {
                    if let Some(p) = self.pods.get_mut(pod) {
                        let status = if *status { "True" } else { "False" };
                        p.node_condition = Some((status.into(), reason.clone(), message.clone()));
                    }
                }
                Action::Drain { node, .. }
                | Action::Resume { node }
                | Action::DeleteNodeRecord { node } => {
                    // Never let a wrong plan touch the shared static nodes.
                    let record = self.client.node(node).await;
                    assert!(
                        record.as_ref().is_ok_and(
                            |n| n.state.is_dynamic() && n.owner.as_ref() == Some(&self.owner)
                        ),
                        "{action:?} on a node that is not the set's: {record:?}"
                    );
                    let outcome = apply_slurm(&self.client, action, &self.owner)
                        .await
                        .unwrap_or_else(|e| panic!("{action:?}: {e}"));
                    assert_ne!(outcome, SlurmOutcome::AlreadyDone, "{action:?}");
                }
            }
            self.log.push(action.clone());
        }
    }

    /// Step until `done` holds (checked after each step), at most `timeout`.
    async fn until(
        &mut self,
        replicas: i32,
        what: &str,
        timeout: Duration,
        done: impl FnMut(&Self, &plan::NodeSetPlan) -> bool,
    ) {
        if let Err(plan) = self.within(replicas, timeout, done).await {
            panic!(
                "timed out waiting for {what}; pods {:?}, last plan {plan:?}",
                self.pods.keys().collect::<Vec<_>>()
            );
        }
    }

    /// Step the set at `replicas` until `done` holds (`Ok`) or `timeout` passes (`Err`: the
    /// last plan).
    async fn within(
        &mut self,
        replicas: i32,
        timeout: Duration,
        mut done: impl FnMut(&Self, &plan::NodeSetPlan) -> bool,
    ) -> Result<(), Box<plan::NodeSetPlan>> {
        let started = Instant::now();
        loop {
            let plan = self.step(replicas).await;
            if done(self, &plan) {
                return Ok(());
            }
            if started.elapsed() >= timeout {
                return Err(Box::new(plan));
            }
        }
    }

    /// Scale to 1 until the set's one pod is `ordinal`'s and its node registered as the set's.
    async fn until_one_node(&mut self, ordinal: u32) {
        self.until(1, "one node of the set", Duration::from_secs(90), |w, _| {
            let state = w.index.borrow();
            w.pods.len() == 1
                && state
                    .nodes
                    .get(&w.name(ordinal))
                    .is_some_and(|n| n.owner.as_ref() == Some(&w.owner))
        })
        .await;
    }

    /// Submit `script` as a job of the set's feature on `node`, and wait until it runs.
    async fn run_job_on(&self, node: &str, script: &str) -> u32 {
        let mut job = self.slurm.job(&format!("{}-job", self.set), script);
        job.constraints = Some(self.set.clone());
        job.extra.insert("required_nodes".into(), json!([node]));
        let job_id = self.client.submit_job(&job).await.unwrap().job_id;
        let client = &self.client;
        common::wait_for(
            "the job to run",
            Duration::from_secs(30),
            Duration::from_millis(300),
            || async move {
                (job_state(&client.job(job_id).await.ok()?) == JobBaseState::Running).then_some(())
            },
        )
        .await;
        job_id
    }

    /// Scale to 0 and step until the set has no pod and Slurm no record of `node`.
    async fn scale_to_zero(&mut self, node: &str, timeout: Duration) {
        self.until(0, "the set's node removed", timeout, |w, _| {
            w.pods.is_empty() && !w.index.borrow().nodes.contains_key(node)
        })
        .await;
    }

    /// Pods created from now on start a slurmd whose registration slurmctld refuses: it says
    /// the node has far more memory than it has (`INVALID_REG`).
    fn refuse_registrations(&mut self) {
        self.conf = format!(
            "Features={} CPUs=1 RealMemory=99999999 Weight=1000",
            self.set
        );
    }

    /// Nothing carried out so far deleted a pod or a node record.
    fn assert_nothing_destructive(&self) {
        assert!(
            !self.log.iter().any(Action::is_destructive),
            "nothing deleted: {:?}",
            self.log
        );
    }

    fn name(&self, ordinal: u32) -> String {
        pods::pod_name(&self.prefix, ordinal)
    }

    fn pod_names(&self) -> Vec<String> {
        self.pods.keys().cloned().collect()
    }
}

impl<'a> World<'a> {
    /// A world for a new SlurmNodeSet (its own feature, weight 1000 so other tests' jobs prefer the
    /// static nodes), with a real poller (0.5 s) on the local Slurm; keep the handle alive.
    fn new(slurm: &'a LocalSlurm) -> (Self, poller::PollerHandle) {
        Self::named(slurm, "tns-test", &common::unique("tns"))
    }

    /// A world for SlurmNodeSet `set` in `namespace`.
    fn named(slurm: &'a LocalSlurm, namespace: &str, set: &str) -> (Self, poller::PollerHandle) {
        let client = slurm.client();
        let (events, _) = broadcast::channel(1024);
        let (handle, index) = poller::spawn(
            ObjectRef::<SlurmCluster>::new("local"),
            client.clone(),
            &PollerConfig {
                interval: Duration::from_millis(500),
            },
            common::tag_key(),
            events,
            Metrics::new(),
        );
        let set = set.to_owned();
        let prefix = pods::node_prefix(namespace, &set).unwrap();
        let spec = NodeSetSlurm {
            features: vec![set.clone()],
            cpus: Some(1),
            real_memory: Some(Quantity("500Mi".into())),
            weight: Some(1000),
            ..NodeSetSlurm::default()
        };
        let conf = pods::merge_conf(None, &spec);
        assert_eq!(
            conf,
            format!("Features={set} CPUs=1 RealMemory=500 Weight=1000")
        );
        let world = World {
            slurm,
            client,
            index,
            owner: NodeOwner::new(namespace, &set),
            set,
            prefix,
            conf,
            pods: BTreeMap::new(),
            guards: Vec::new(),
            log: Vec::new(),
            deleting: false,
        };
        (world, handle)
    }
}

fn job_state(records: &[slurm_operator::slurm::types::Job]) -> JobBaseState {
    records
        .first()
        .map(|j| j.state.base)
        .unwrap_or(JobBaseState::Unknown)
}

/// How a job ended: slurmctld's record, or accounting's once slurmctld has forgotten the job
/// (after MinJobAge, 30 s here).
async fn final_job_state(client: &SlurmClient, job_id: u32) -> JobBaseState {
    let records = match client.job(job_id).await {
        Ok(records) => records,
        Err(_) => client
            .accounting_job(job_id)
            .await
            .unwrap()
            .unwrap_or_default(),
    };
    job_state(&records)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_in_drains_before_deleting_and_never_kills_a_job() {
    let slurm = require_slurm!();
    let started = Instant::now();
    let (mut world, _poller) = World::new(&slurm);
    let client = world.client.clone();
    let (n0, n1, n2) = (world.name(0), world.name(1), world.name(2));

    // Scale out to 3: three pods, three idle nodes.
    world
        .until(3, "3 idle nodes", Duration::from_secs(60), |w, _| {
            let state = w.index.borrow();
            w.pods.len() == 3
                && [&n0, &n1, &n2]
                    .iter()
                    .all(|n| state.nodes.get(*n).is_some_and(|n| !n.state.is_busy()))
        })
        .await;
    eprintln!("scaled out to 3 after {:?}", started.elapsed());

    // A job on the middle node (by ordinal alone, 2 and 1 would go first).
    let job_id = world.run_job_on(&n1, "sleep 25").await;

    // 3 → 1: the idle nodes go, the busy one stays and is not even drained.
    world
        .until(
            1,
            "the idle nodes removed",
            Duration::from_secs(60),
            |w, _| {
                let state = w.index.borrow();
                w.pods.len() == 1
                    && !state.nodes.contains_key(&n0)
                    && !state.nodes.contains_key(&n2)
            },
        )
        .await;
    assert_eq!(world.pod_names(), std::slice::from_ref(&n1));
    let node1 = client.node(&n1).await.unwrap();
    assert!(!node1.state.is_drain(), "{:?}", node1.state);
    assert_eq!(
        job_state(&client.job(job_id).await.unwrap()),
        JobBaseState::Running
    );
    for deleted in [&n0, &n2] {
        assert!(
            client.node(deleted).await.is_err(),
            "{deleted} record deleted"
        );
    }
    eprintln!("scaled in to 1 after {:?}", started.elapsed());

    // Scale to 0: the busy node drains (DRAINING) and keeps its pod.
    world
        .until(0, "node 1 draining", Duration::from_secs(30), |w, _| {
            w.index
                .borrow()
                .nodes
                .get(&n1)
                .is_some_and(|n| n.state.is_draining())
        })
        .await;
    for _ in 0..3 {
        world.step(0).await;
        assert_eq!(
            world.pod_names(),
            std::slice::from_ref(&n1),
            "kept while its job runs"
        );
    }
    // Scale back out to 1 during the drain: resumed, pod kept.
    world
        .until(1, "node 1 resumed", Duration::from_secs(30), |w, _| {
            w.index
                .borrow()
                .nodes
                .get(&n1)
                .is_some_and(|n| !n.state.is_drain())
        })
        .await;
    assert!(world.log.contains(&Action::Resume { node: n1.clone() }));
    assert_eq!(world.pod_names(), std::slice::from_ref(&n1));

    // An admin drain (no prefix) is left alone: not resumed, reason kept.
    client.drain_node(&n1, "admin: maintenance").await.unwrap();
    for _ in 0..3 {
        world.step(1).await;
    }
    let node1 = client.node(&n1).await.unwrap();
    assert_eq!(drain_owner(&node1), DrainOwner::Someone, "{node1:?}");
    assert_eq!(node1.reason.as_deref(), Some("admin: maintenance"));
    client.resume_node(&n1).await.unwrap();

    // Scale to 0 while the job runs: DRAINING until it ends, then pod and record go.
    let mut saw_draining = false;
    world
        .until(
            0,
            "the last node removed",
            Duration::from_secs(90),
            |w, _| {
                let state = w.index.borrow();
                if state.nodes.get(&n1).is_some_and(|n| n.state.is_draining()) {
                    saw_draining = true;
                }
                // While the job runs, the pod exists.
                if state.node_jobs.get(&n1).is_some_and(|j| j.running > 0) {
                    assert!(w.pods.contains_key(&n1), "pod deleted while its job ran");
                }
                w.pods.is_empty() && !state.nodes.contains_key(&n1)
            },
        )
        .await;
    assert!(saw_draining, "the busy node was seen DRAINING");
    assert_eq!(
        job_state(&client.job(job_id).await.unwrap()),
        JobBaseState::Completed,
        "the job ran to its end"
    );
    assert!(client.node(&n1).await.is_err(), "record deleted");
    // The drains were ours; the admin's was never overwritten.
    assert!(world.log.iter().all(|a| match a {
        Action::Drain { reason, .. } => reason.starts_with(plan::DRAIN_PREFIX),
        _ => true,
    }));
    eprintln!("scenario done in {:?}", started.elapsed());
}

/// `kubectl cordon` of the Kubernetes node a set's pod runs on (and `kubectl drain`, which
/// cordons before it evicts): its Slurm node is drained with the cordon's reason while its job
/// runs on, and the pod stays (the PodDisruptionBudget holds the eviction until the node is
/// idle); the job ends as it would, and a job that asks for that node meanwhile does not start
/// there. Uncordoned, the node is resumed and that job runs. No job is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordoned_hosts_node_starts_no_new_job_until_uncordoned() {
    let slurm = require_slurm!();
    let (mut world, _poller) = World::new(&slurm);
    let client = world.client.clone();
    let n0 = world.name(0);
    world.until_one_node(0).await;
    let first = world.run_job_on(&n0, "sleep 20").await;

    world.pods.get_mut(&n0).unwrap().host = Host::Cordoned("k8s-worker-1".into());
    world
        .until(
            1,
            "the node drained for the cordon",
            Duration::from_secs(30),
            |w, _| {
                w.index
                    .borrow()
                    .nodes
                    .get(&n0)
                    .is_some_and(plan::is_cordon_drain)
            },
        )
        .await;
    let node = client.node(&n0).await.unwrap();
    assert_eq!(
        node.reason.as_deref(),
        Some("slurm-operator: cordoned: Kubernetes node k8s-worker-1")
    );
    assert!(
        node.state.is_draining(),
        "its job runs on: {:?}",
        node.state
    );
    // A job for that node only, submitted during the drain.
    let mut job = world.slurm.job(&format!("{}-job", world.set), "sleep 1");
    job.constraints = Some(world.set.clone());
    job.extra.insert("required_nodes".into(), json!([n0]));
    let second = client.submit_job(&job).await.unwrap().job_id;

    // The first job ends as it would; the node is then drained and idle, and the second job
    // still waits; the pod stays throughout (it is not leaving: the eviction is kubectl's).
    world
        .until(1, "the first job's end", Duration::from_secs(60), |w, _| {
            assert_eq!(w.pod_names(), std::slice::from_ref(&n0), "the pod stays");
            w.index
                .borrow()
                .nodes
                .get(&n0)
                .is_some_and(|n| n.state.is_drained())
        })
        .await;
    assert_eq!(
        final_job_state(&client, first).await,
        JobBaseState::Completed
    );
    for _ in 0..3 {
        world.step(1).await;
    }
    assert_eq!(
        job_state(&client.job(second).await.unwrap()),
        JobBaseState::Pending,
        "no new job starts on the cordoned host's node"
    );
    assert_eq!(world.pod_names(), std::slice::from_ref(&n0));
    world.assert_nothing_destructive();

    // Uncordoned: resumed, and the waiting job runs there.
    world.pods.get_mut(&n0).unwrap().host = Host::Open;
    world
        .until(1, "the node resumed", Duration::from_secs(30), |w, _| {
            w.index
                .borrow()
                .nodes
                .get(&n0)
                .is_some_and(|n| !n.state.is_drain())
        })
        .await;
    assert!(world.log.contains(&Action::Resume { node: n0.clone() }));
    let slurm_client = &client;
    common::wait_for(
        "the waiting job to run and end",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async move {
            (final_job_state(slurm_client, second).await == JobBaseState::Completed).then_some(())
        },
    )
    .await;

    world.scale_to_zero(&n0, Duration::from_secs(60)).await;
}

/// A node Slurm sets DOWN while its pod stays ready (slurmd answering) is listed as taking no
/// job, with the state and the reason slurmctld shows (the set's `Ready` says
/// `SlurmNodesNotUsable`); resumed, it is usable again. Nothing is deleted for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_slurm_sets_down_is_not_ready_until_it_is_back() {
    let slurm = require_slurm!();
    let (mut world, _poller) = World::new(&slurm);
    let n0 = world.name(0);
    world.until_one_node(0).await;
    world
        .until(1, "the node usable", Duration::from_secs(30), |_, plan| {
            plan.counts.available == 1 && plan.counts.not_usable.is_empty()
        })
        .await;

    let why = "slurm-operator test: set down by an admin";
    let mut listed = String::new();
    // slurmctld itself may undo the DOWN: with `ReturnToService=2` the node's next registration
    // returns it to service, and slurmctld asks each node to register again every 20 pings
    // (about 200 s here). Seen so, the DOWN is set again (at most three times); a DOWN slurmctld
    // still shows that the plan does not list is the operator's failure.
    for attempt in 1.. {
        slurm.scontrol(&[
            "update",
            &format!("NodeName={n0}"),
            "State=DOWN",
            &format!("Reason={why}"),
        ]);
        let seen = world
            .within(1, Duration::from_secs(30), |_, plan| {
                match plan.counts.not_usable.as_slice() {
                    [node] if node.pod == n0 => {
                        listed = node.why.clone();
                        !node.stuck
                    }
                    _ => false,
                }
            })
            .await;
        let Err(plan) = seen else { break };
        let now = world.client.node(&n0).await.unwrap();
        assert!(
            !now.state.is_down() && attempt < 3,
            "timed out waiting for the node listed as taking no job (attempt {attempt}); \
             slurmctld shows {:?}; last plan {plan:?}",
            now.state
        );
        eprintln!(
            "slurmctld returned {n0} to service ({:?}): set DOWN again",
            now.state
        );
    }
    assert!(
        listed.contains("DOWN") && listed.contains(why),
        "Slurm's state and reason: {listed}"
    );
    assert_eq!(
        world.pod_names(),
        std::slice::from_ref(&n0),
        "the pod stays"
    );

    // Resumed by hand, unless its registration did so meanwhile (a RESUME of a node that is
    // not down is refused).
    if world.client.node(&n0).await.unwrap().state.is_down() {
        slurm.scontrol(&["update", &format!("NodeName={n0}"), "State=RESUME"]);
    }
    world
        .until(
            1,
            "the node usable again",
            Duration::from_secs(60),
            |_, plan| plan.counts.available == 1 && plan.counts.not_usable.is_empty(),
        )
        .await;
    world.assert_nothing_destructive();
    world.scale_to_zero(&n0, Duration::from_secs(60)).await;
}

/// Scale-in takes a broken node (here one whose registration slurmctld refused: it stays so,
/// where a node set DOWN may come back at its next registration) before a sound one, though by
/// ordinal the sound one would go first (the highest): its pod is deleted, the sound node keeps
/// its pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_in_removes_a_broken_node_first() {
    let slurm = require_slurm!();
    let (mut world, _poller) = World::new(&slurm);
    let (n0, n1) = (world.name(0), world.name(1));
    let sound = world.conf.clone();
    world.refuse_registrations();
    world
        .until(
            1,
            "the first node refused",
            Duration::from_secs(60),
            |_, plan| {
                plan.counts
                    .not_usable
                    .iter()
                    .any(|n| n.pod == n0 && n.stuck)
            },
        )
        .await;
    world.conf = sound;
    world
        .until(
            2,
            "the second node usable",
            Duration::from_secs(90),
            |w, plan| {
                w.pods.len() == 2
                    && plan.counts.available == 2
                    && plan.counts.not_usable.iter().all(|n| n.pod != n1)
            },
        )
        .await;
    world
        .until(
            1,
            "the refused node's pod gone",
            Duration::from_secs(60),
            |w, _| !w.pods.contains_key(&n0),
        )
        .await;
    assert_eq!(
        world.pod_names(),
        std::slice::from_ref(&n1),
        "the sound node stays"
    );
    world.scale_to_zero(&n1, Duration::from_secs(60)).await;
}

/// A node whose registration slurmctld refuses (its slurmd says it has less memory than the
/// set's `spec.slurm.realMemory`) is listed as taking no job, and as stuck (only a change of the
/// set helps: kstatus `Stalled`), with the reason slurmctld gives. Nothing is drained or deleted
/// for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_registration_slurmctld_refuses_is_stuck() {
    let slurm = require_slurm!();
    let (mut world, _poller) = World::new(&slurm);
    let n0 = world.name(0);
    world.refuse_registrations();
    let mut listed = None;
    world
        .until(
            1,
            "the node listed as refused",
            Duration::from_secs(60),
            |_, plan| {
                listed = plan.counts.not_usable.first().cloned();
                plan.counts.not_usable.len() == 1
            },
        )
        .await;
    let node = listed.unwrap();
    assert_eq!(node.pod, n0);
    assert!(node.stuck, "{node:?}");
    assert!(
        node.why.contains("INVALID_REG") && node.why.contains("RealMemory"),
        "Slurm's state and reason: {node:?}"
    );
    world.assert_nothing_destructive();
    world.scale_to_zero(&n0, Duration::from_secs(60)).await;
}

/// Scale-in storm (issue 7): 5 → 1 → 5, three times, each time with jobs running on three of the
/// set's nodes; scale-ins are cut short by the next scale-out while drains are under way. No job
/// is killed: every one runs to COMPLETED, and no pod goes while its node runs a job (checked
/// against slurmrestd at each deletion).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_in_storm_kills_no_job() {
    let slurm = require_slurm!();
    let started = Instant::now();
    let (mut world, _poller) = World::new(&slurm);
    let client = world.client.clone();
    let set = world.set.clone();
    let five_up = |w: &World<'_>, _: &plan::NodeSetPlan| {
        let state = w.index.borrow();
        w.pods.len() == 5
            && w.pods.keys().all(|name| {
                state
                    .nodes
                    .get(name)
                    .is_some_and(|n| !n.state.is_drain() && !n.state.has_flag("NOT_RESPONDING"))
            })
    };
    let mut jobs = Vec::new();
    for cycle in 0..3 {
        world
            .until(5, "5 nodes up", Duration::from_secs(90), five_up)
            .await;
        // One job per node on three of them (CPUs=1), long enough to span the storm.
        let mut batch = Vec::new();
        for i in 0..3 {
            let mut job = slurm.job(&format!("{set}-storm-{cycle}-{i}"), "sleep 8");
            job.constraints = Some(set.clone());
            batch.push(client.submit_job(&job).await.unwrap().job_id);
        }
        common::wait_for(
            "the batch running",
            Duration::from_secs(30),
            Duration::from_millis(300),
            || {
                let client = client.clone();
                let batch = batch.clone();
                async move {
                    for id in batch {
                        if job_state(&client.job(id).await.ok()?) != JobBaseState::Running {
                            return None;
                        }
                    }
                    Some(())
                }
            },
        )
        .await;
        // 5 → 1: the idle nodes go, the busy ones drain; cut short after a few steps.
        for _ in 0..4 {
            world.step(1).await;
        }
        jobs.extend(batch);
        eprintln!(
            "cycle {cycle}: scaled in to {} pods after {:?}",
            world.pods.len(),
            started.elapsed()
        );
    }
    // Back to 5 once more, then let every job end.
    world
        .until(5, "5 nodes up", Duration::from_secs(90), five_up)
        .await;
    let ended = common::wait_for(
        "every storm job ended",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            let client = client.clone();
            let jobs = jobs.clone();
            async move {
                let mut states = Vec::new();
                for id in jobs {
                    let records = client.job(id).await.ok()?;
                    let job = records.first()?;
                    if !job.state.is_final() {
                        return None;
                    }
                    states.push((id, job.state.base, job.exit.clone()));
                }
                Some(states)
            }
        },
    )
    .await;
    for (id, state, exit) in &ended {
        assert_eq!(*state, JobBaseState::Completed, "job {id}: {exit:?}");
    }
    let drains = world
        .log
        .iter()
        .filter(|a| matches!(a, Action::Drain { .. }))
        .count();
    let resumes = world
        .log
        .iter()
        .filter(|a| matches!(a, Action::Resume { .. }))
        .count();
    let deletes = world
        .log
        .iter()
        .filter(|a| matches!(a, Action::DeletePod { .. }))
        .count();
    eprintln!(
        "{} jobs, all COMPLETED; {drains} drains, {resumes} resumes, {deletes} pod deletions \
         in {:?}",
        ended.len(),
        started.elapsed()
    );
    assert!(
        drains > 0 && resumes > 0,
        "the storm drained and resumed nodes"
    );
    // Clean up: scale to 0.
    world
        .until(0, "all pods gone", Duration::from_secs(60), |w, _| {
            w.pods.is_empty()
        })
        .await;
}

/// The owner record Slurm holds for `node` (asked of slurmrestd itself, not the index).
async fn owner_in_slurm(client: &SlurmClient, node: &str) -> Option<NodeOwner> {
    client.node(node).await.ok().and_then(|n| n.owner)
}

/// Slurm actions of `log` on any of `nodes`.
fn actions_on<'l>(log: &'l [Action], nodes: &[String]) -> Vec<&'l Action> {
    log.iter()
        .filter(|a| match a {
            Action::Drain { node, .. }
            | Action::Resume { node }
            | Action::DeleteNodeRecord { node } => nodes.contains(node),
            Action::CreatePod { .. } | Action::DeletePod { .. } => false,
            _ => false,
        })
        .collect()
}

/// Issue 14: two SlurmNodeSets with one name in two namespaces on one Slurm cluster get
/// distinct Slurm nodes, each recorded in Slurm as its own; scaling one in removes only its own
/// nodes (the other's stay registered, undrained, with their owner record). Then a third set
/// whose names are made to collide with the second's (a tag collision, or names an older
/// operator gave out): it takes none of the second's names and, scaled in, touches none of its
/// nodes; its status names them as conflicts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sets_of_one_name_in_two_namespaces_never_touch_each_others_nodes() {
    let slurm = require_slurm!();
    let started = Instant::now();
    let set = common::unique("own");
    let (mut a, _poller_a) = World::named(&slurm, "team-a", &set);
    let (mut b, _poller_b) = World::named(&slurm, "team-b", &set);
    let client = a.client.clone();
    assert_ne!(a.prefix, b.prefix, "one name, two namespaces, two prefixes");

    let registered = |w: &World<'_>, n: usize| {
        let state = w.index.borrow();
        w.pods.len() == n
            && w.pods.keys().all(|p| {
                state
                    .nodes
                    .get(p)
                    .is_some_and(|node| node.owner.as_ref() == Some(&w.owner))
            })
    };
    a.until(2, "a's 2 nodes", Duration::from_secs(90), |w, _| {
        registered(w, 2)
    })
    .await;
    b.until(2, "b's 2 nodes", Duration::from_secs(90), |w, _| {
        registered(w, 2)
    })
    .await;
    let (a_nodes, b_nodes) = (a.pod_names(), b.pod_names());
    assert!(
        a_nodes.iter().all(|n| !b_nodes.contains(n)),
        "{a_nodes:?} {b_nodes:?}"
    );
    for (nodes, owner) in [(&a_nodes, &a.owner), (&b_nodes, &b.owner)] {
        for node in nodes {
            assert_eq!(
                owner_in_slurm(&client, node).await.as_ref(),
                Some(owner),
                "{node}"
            );
        }
    }
    eprintln!(
        "{a_nodes:?} and {b_nodes:?} registered after {:?}",
        started.elapsed()
    );

    // Each plans with the other's nodes in view: neither is a conflict of the other.
    let plan = a.step(2).await;
    assert_eq!(plan.conflicts, Some(vec![]));

    // Scale a in to 0: its nodes go; b's stay, untouched.
    a.until(0, "a's nodes removed", Duration::from_secs(90), |w, _| {
        let state = w.index.borrow();
        w.pods.is_empty() && a_nodes.iter().all(|n| !state.nodes.contains_key(n))
    })
    .await;
    for node in &b_nodes {
        let record = client.node(node).await.unwrap();
        assert!(!record.state.is_drain(), "{node}: {:?}", record.state);
        assert_eq!(record.owner.as_ref(), Some(&b.owner), "{node}");
    }
    assert_eq!(actions_on(&a.log, &b_nodes), Vec::<&Action>::new());
    let b_plan = b.step(2).await;
    assert!(
        b_plan.actions.iter().all(|x| !x.is_destructive()),
        "b is at its size: {:?}",
        b_plan.actions
    );

    // A third set whose names collide with b's: another owner, b's prefix.
    let (mut c, _poller_c) = World::named(&slurm, "team-c", &set);
    c.prefix = b.prefix.clone();
    let c_plan = c.step(1).await;
    let created: Vec<u32> = c_plan
        .actions
        .iter()
        .filter_map(|x| match x {
            Action::CreatePod { ordinal } => Some(*ordinal),
            _ => None,
        })
        .collect();
    assert_eq!(created, [2], "b's names 0 and 1 are not given out again");
    let conflicts: Vec<String> = c_plan
        .conflicts
        .unwrap()
        .iter()
        .map(|x| x.node.clone())
        .collect();
    assert_eq!(conflicts, b_nodes, "b's nodes are named as conflicts");
    c.until(1, "c's node registered", Duration::from_secs(90), |w, _| {
        registered(w, 1)
    })
    .await;
    // c's pod for one of b's names (as an older operator made them): scaled in, it waits.
    c.pods.insert(
        b_nodes[0].clone(),
        PodView {
            name: b_nodes[0].clone(),
            ordinal: 0,
            scheduled: true,
            ready: true,
            template_hash: Some(HASH.into()),
            ..PodView::default()
        },
    );
    c.until(
        0,
        "c's own node removed",
        Duration::from_secs(90),
        |w, plan| {
            let state = w.index.borrow();
            !w.pods.contains_key(&w.name(2))
                && !state.nodes.contains_key(&w.name(2))
                && plan
                    .waiting
                    .iter()
                    .any(|x| x.pod == b_nodes[0] && x.why == plan::WAIT_CONFLICT)
        },
    )
    .await;
    assert_eq!(actions_on(&c.log, &b_nodes), Vec::<&Action>::new());
    for node in &b_nodes {
        let record = client.node(node).await.unwrap();
        assert!(!record.state.is_drain(), "{node}: {:?}", record.state);
        assert_eq!(record.owner.as_ref(), Some(&b.owner), "{node}");
    }
    c.pods.clear();

    // b cleans up its own.
    b.until(0, "b's nodes removed", Duration::from_secs(90), |w, _| {
        let state = w.index.borrow();
        w.pods.is_empty() && b_nodes.iter().all(|n| !state.nodes.contains_key(n))
    })
    .await;
    eprintln!("done in {:?}", started.elapsed());
}

/// Issue 14: a node named like one of the set's pods that is not the set's is neither taken
/// nor drained. (1) A dynamic node registered without an owner record (a hand-started slurmd)
/// under the set's first name: scale-out skips that name, scale-in leaves the node registered
/// and undrained, and the plan names it. (2) The static node `n1`, given to a pod of the set (as
/// pods made while the SlurmCluster was not Ready could get a static node's name): scaled in,
/// the pod waits and `n1` is not drained, resumed or deleted; the pod's condition says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_is_not_the_sets_is_neither_taken_nor_drained() {
    let slurm = require_slurm!();
    let (mut world, _poller) = World::new(&slurm);
    let client = world.client.clone();
    let squatter = world.name(0);
    let _guard = NodeGuard::new(&slurm, &squatter);
    slurm.node_script(&["start", &squatter, "--conf", &world.conf]);

    // (1) Scale out to 1: ordinal 0 is held, 1 is used.
    world.until_one_node(1).await;
    assert_eq!(world.pod_names(), [world.name(1)]);
    let plan = world.step(1).await;
    let conflicts = plan.conflicts.clone().unwrap();
    assert_eq!(conflicts.len(), 1, "{conflicts:?}");
    assert_eq!(
        conflicts[0].to_string(),
        format!("{squatter} is a dynamic node with no owner record")
    );
    let removed = world.name(1);
    world.scale_to_zero(&removed, Duration::from_secs(90)).await;
    let record = client.node(&squatter).await.unwrap();
    assert!(!record.state.is_drain(), "{:?}", record.state);
    assert_eq!(record.owner, None);

    // (2) The static node n1 as a pod's name.
    let before = client.node("n1").await.unwrap();
    assert!(
        !before.state.is_dynamic(),
        "n1 is static: {:?}",
        before.state
    );
    world.pods.insert(
        "n1".into(),
        PodView {
            name: "n1".into(),
            ordinal: 1,
            scheduled: true,
            ready: true,
            template_hash: Some(HASH.into()),
            ..PodView::default()
        },
    );
    for _ in 0..3 {
        let plan = world.step(0).await;
        assert!(
            plan.waiting
                .iter()
                .any(|w| w.pod == "n1" && w.why == plan::WAIT_CONFLICT),
            "{:?}",
            plan.waiting
        );
        assert!(world.pods.contains_key("n1"), "the pod waits");
    }
    let condition = world.pods["n1"].node_condition.clone().unwrap();
    assert_eq!(condition.1, "NodeNameConflict", "{condition:?}");
    assert!(condition.2.contains("n1 is a static node"), "{condition:?}");
    assert_eq!(
        actions_on(&world.log, &["n1".to_owned(), squatter.clone()]),
        Vec::<&Action>::new()
    );
    let after = client.node("n1").await.unwrap();
    assert!(
        !after
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with(plan::DRAIN_PREFIX) && after.state.is_drain()),
        "n1 drained by us: {after:?}"
    );
    world.pods.clear();
}

/// The plan's view may be up to a minute old, so Slurm is asked again just before: an admin's
/// FAIL set since is neither overwritten by our drain nor cleared by our resume, and a pod whose
/// node the view lacked is not deleted while slurmctld has that node (its slurmd registered
/// since). Then the FAILed node, idle, goes with its pod at scale-in, never drained by us.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_is_asked_again_before_a_drain_a_resume_or_a_delete_of_an_unseen_node() {
    let slurm = require_slurm!();
    let (mut world, _poller) = World::new(&slurm);
    let client = world.client.clone();
    world.until_one_node(0).await;
    let node = world.name(0);
    // Another set's view of this node (its name registered by this one since): its drain and
    // its resume do not go through; this set's do. (A removal of the record: below.)
    let other = NodeOwner::new("elsewhere", "cpu");
    let drain = Action::Drain {
        node: node.clone(),
        reason: plan::drain_reason("scale-in"),
    };
    let resume = Action::Resume { node: node.clone() };
    let drained = |record: &slurm_operator::slurm::types::Node| record.state.is_drain();
    assert_eq!(
        apply_slurm(&client, &drain, &other).await.unwrap(),
        SlurmOutcome::Superseded
    );
    assert!(
        !drained(&client.node(&node).await.unwrap()),
        "drained for another set"
    );
    assert_eq!(
        apply_slurm(&client, &drain, &world.owner).await.unwrap(),
        SlurmOutcome::Done
    );
    assert!(drained(&client.node(&node).await.unwrap()));
    assert_eq!(
        apply_slurm(&client, &resume, &other).await.unwrap(),
        SlurmOutcome::Superseded
    );
    assert!(
        drained(&client.node(&node).await.unwrap()),
        "resumed for another set"
    );
    assert_eq!(
        apply_slurm(&client, &resume, &world.owner).await.unwrap(),
        SlurmOutcome::Done
    );
    let admin = "admin: failing DIMM";
    slurm.scontrol(&[
        "update",
        &format!("NodeName={node}"),
        "State=FAIL",
        &format!("Reason={admin}"),
    ]);
    let failed = |record: &slurm_operator::slurm::types::Node| {
        record.state.is_fail() && record.reason.as_deref() == Some(admin)
    };
    assert!(failed(&client.node(&node).await.unwrap()));

    // Planned on a view from before the FAIL: neither goes through.
    assert_eq!(
        apply_slurm(&client, &drain, &world.owner).await.unwrap(),
        SlurmOutcome::Superseded
    );
    assert_eq!(
        apply_slurm(&client, &resume, &world.owner).await.unwrap(),
        SlurmOutcome::Superseded
    );
    let record = client.node(&node).await.unwrap();
    assert!(failed(&record), "{:?} {:?}", record.state, record.reason);
    // Nor, from another set's view, a removal of the record.
    for action in [
        drain.clone(),
        resume.clone(),
        Action::DeleteNodeRecord { node: node.clone() },
    ] {
        assert_eq!(
            apply_slurm(&client, &action, &other).await.unwrap(),
            SlurmOutcome::Superseded,
            "{action:?}"
        );
    }
    assert!(failed(&client.node(&node).await.unwrap()), "untouched");

    // A delete planned because the view had no node of that name: slurmctld has one now.
    let delete = |name: &str| Action::DeletePod {
        name: name.to_owned(),
        why: DeleteWhy::ScaleIn,
        confirm: Confirm::NodeAbsent,
    };
    assert_eq!(
        slurm_allows(&client, &delete(&node), &world.owner)
            .await
            .unwrap(),
        Some(false)
    );
    assert_eq!(
        slurm_allows(&client, &delete(&world.name(9)), &world.owner)
            .await
            .unwrap(),
        None,
        "no such node: the delete may go"
    );

    // Scale in: the admin's FAIL closes the idle node like a drain; it goes undrained by us.
    world.scale_to_zero(&node, Duration::from_secs(90)).await;
    let ours: Vec<&Action> = actions_on(&world.log, std::slice::from_ref(&node))
        .into_iter()
        .filter(|a| matches!(a, Action::Drain { .. } | Action::Resume { .. }))
        .collect();
    assert_eq!(ours, Vec::<&Action>::new());
}

/// Deleting a set (behind its finalizer) drains every node, waits for the running job, deletes
/// each pod once its node runs nothing, removes the records from Slurm, and then finds nothing
/// of the set left (`remaining` empty: the finalizer may go). The job is not killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_set_drains_its_nodes_and_leaves_nothing_in_slurm() {
    let slurm = require_slurm!();
    let (mut world, _poller) = World::new(&slurm);
    let client = world.client.clone();
    let (n0, n1) = (world.name(0), world.name(1));
    world
        .until(2, "2 idle nodes", Duration::from_secs(60), |w, _| {
            let state = w.index.borrow();
            w.pods.len() == 2
                && [&n0, &n1]
                    .iter()
                    .all(|n| state.nodes.get(*n).is_some_and(|n| !n.state.is_busy()))
        })
        .await;
    let job_id = world.run_job_on(&n1, "sleep 12").await;

    // Deleted (replicas still 2): the idle node goes, the busy one drains and keeps its pod.
    world.deleting = true;
    world
        .until(
            2,
            "node 0 gone, node 1 draining",
            Duration::from_secs(60),
            |w, _| {
                let state = w.index.borrow();
                !state.nodes.contains_key(&n0)
                    && state.nodes.get(&n1).is_some_and(|n| n.state.is_draining())
            },
        )
        .await;
    let node1 = client.node(&n1).await.unwrap();
    assert_eq!(
        node1.reason.as_deref(),
        Some("slurm-operator: SlurmNodeSet deleted")
    );
    assert_eq!(world.pod_names(), std::slice::from_ref(&n1));
    assert_eq!(
        job_state(&client.job(job_id).await.unwrap()),
        JobBaseState::Running
    );
    let plan = world.step(2).await;
    assert_eq!(plan.remaining, Some(vec![n1.clone()]), "{plan:?}");
    assert!(
        !plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::CreatePod { .. })),
        "{plan:?}"
    );

    // The job ends by itself; then the pod and the record go, and nothing is left.
    world
        .until(
            2,
            "nothing of the set left",
            Duration::from_secs(90),
            |_, plan| plan.remaining.as_ref().is_some_and(Vec::is_empty),
        )
        .await;
    assert!(world.pods.is_empty());
    for node in [&n0, &n1] {
        let record = client.node(node).await;
        assert!(
            matches!(record, Err(SlurmError::NotFound { .. })),
            "{node} still in Slurm: {record:?}"
        );
    }
    assert_eq!(
        final_job_state(&client, job_id).await,
        JobBaseState::Completed,
        "the job ran to its end"
    );
    assert!(world.log.contains(&Action::DeletePod {
        name: n1.clone(),
        why: DeleteWhy::SetDeleted,
        confirm: Confirm::NodeDrained,
    }));
}

/// A view that shows a node drained may be up to a minute old. Our drain (a scale-in), seen in
/// a snapshot; a scale back out resumes the node and a job starts there; a plan made on the
/// drained snapshot still says to delete the pod. Carried out, that delete asks slurmctld first
/// and does not go: the pod stays while the job runs, and the job runs to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_planned_on_a_stale_drained_view_waits_while_a_job_runs() {
    let slurm = require_slurm!();
    let (mut world, _poller) = World::new(&slurm);
    let client = world.client.clone();
    world.until_one_node(0).await;
    let node = world.name(0);

    // Drained by us, and a snapshot that shows it.
    client
        .drain_node(&node, &plan::drain_reason(plan::WHY_SCALE_IN))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let drained = loop {
        let state = world.fresh_state().await;
        if state
            .nodes
            .get(&node)
            .is_some_and(|n| plan::is_drained(n, state.node_jobs.get(&node)))
        {
            break state;
        }
        assert!(Instant::now() < deadline, "{node} never seen drained");
    };

    // Scaled back out: resumed; then a job starts on it.
    world
        .until(1, "the node resumed", Duration::from_secs(60), |w, _| {
            w.index
                .borrow()
                .nodes
                .get(&node)
                .is_some_and(|n| !n.state.is_drain())
        })
        .await;
    assert!(world.log.contains(&Action::Resume { node: node.clone() }));
    let job_id = world.run_job_on(&node, "sleep 15").await;

    // Scaled in again on the drained snapshot: the plan says delete; slurmctld says no.
    let stale = world.plan_on(&drained, 0);
    let delete = Action::DeletePod {
        name: node.clone(),
        why: DeleteWhy::ScaleIn,
        confirm: Confirm::NodeDrained,
    };
    assert!(stale.actions.contains(&delete), "{:?}", stale.actions);
    assert_eq!(
        slurm_allows(&client, &delete, &world.owner).await.unwrap(),
        Some(false)
    );
    world.carry_out(&stale).await;
    assert_eq!(world.pod_names(), std::slice::from_ref(&node), "pod kept");
    assert!(!world.log.contains(&delete), "{:?}", world.log);
    assert_eq!(
        job_state(&client.job(job_id).await.unwrap()),
        JobBaseState::Running
    );

    // With fresh views: drained, the job ends by itself, then the pod and the record go.
    world.scale_to_zero(&node, Duration::from_secs(90)).await;
    assert_eq!(
        final_job_state(&client, job_id).await,
        JobBaseState::Completed,
        "the job ran to its end"
    );
}
