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
    self, Action, DrainOwner, Input, PodView, SlurmView, drain_owner,
};
use slurm_operator::controller::nodeset::{SlurmOutcome, apply_slurm, pods};
use slurm_operator::crd::{NodeSetSlurm, SlurmCluster, UpdateStrategy};
use slurm_operator::metrics::Metrics;
use slurm_operator::slurm::SlurmClient;
use slurm_operator::slurm::types::JobBaseState;
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
    conf: String,
    pods: BTreeMap<String, PodView>,
    guards: Vec<NodeGuard<'a>>,
    /// Every action carried out, for assertions.
    log: Vec<Action>,
}

impl World<'_> {
    /// An index snapshot taken after at least one complete poll that started after now.
    async fn fresh_state(&self) -> Arc<ClusterState> {
        let mut index = self.index.clone();
        let before = index.borrow().polls;
        let deadline = Instant::now() + Duration::from_secs(20);
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
        let views: Vec<PodView> = self.pods.values().cloned().collect();
        let strategy = UpdateStrategy::default();
        let plan = plan::plan(&Input {
            name: &self.set,
            replicas,
            template_hash: HASH,
            strategy: &strategy,
            drain_timeout: None,
            min_ready_seconds: 0,
            partitions: &[],
            pods: &views,
            taken: &BTreeSet::new(),
            slurm: SlurmView {
                state: Some(&state),
                now: Utc::now(),
            },
        });
        for action in &plan.actions {
            match action {
                Action::CreatePod { ordinal } => {
                    let name = pods::pod_name(&self.set, *ordinal);
                    self.guards.push(NodeGuard::new(self.slurm, &name));
                    self.slurm
                        .node_script(&["start", &name, "--conf", &self.conf]);
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
                    // Slurm itself, asked right now: the node runs nothing (or is gone).
                    if let Ok(node) = self.client.node(name).await {
                        assert!(
                            !node.state.is_busy(),
                            "pod {name} deleted while its node runs a job: {:?}",
                            node.state
                        );
                    }
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
                } => {
                    if let Some(p) = self.pods.get_mut(pod) {
                        let status = if *status { "True" } else { "False" };
                        p.node_condition = Some((status.into(), reason.clone(), message.clone()));
                    }
                }
                Action::Drain { .. } | Action::Resume { .. } | Action::DeleteNodeRecord { .. } => {
                    let outcome = apply_slurm(&self.client, action)
                        .await
                        .unwrap_or_else(|e| panic!("{action:?}: {e}"));
                    assert_ne!(outcome, SlurmOutcome::AlreadyDone, "{action:?}");
                }
            }
            self.log.push(action.clone());
        }
        plan
    }

    /// Step until `done` holds (checked after each step), at most `timeout`.
    async fn until(
        &mut self,
        replicas: i32,
        what: &str,
        timeout: Duration,
        mut done: impl FnMut(&Self, &plan::NodeSetPlan) -> bool,
    ) {
        let started = Instant::now();
        loop {
            let plan = self.step(replicas).await;
            if done(self, &plan) {
                return;
            }
            assert!(
                started.elapsed() < timeout,
                "timed out waiting for {what}; pods {:?}, last plan {plan:?}",
                self.pods.keys().collect::<Vec<_>>()
            );
        }
    }

    fn name(&self, ordinal: u32) -> String {
        pods::pod_name(&self.set, ordinal)
    }

    fn pod_names(&self) -> Vec<String> {
        self.pods.keys().cloned().collect()
    }
}

impl<'a> World<'a> {
    /// A world for a new SlurmNodeSet (its own feature, weight 1000 so other tests' jobs prefer the
    /// static nodes), with a real poller (0.5 s) on the local Slurm; keep the handle alive.
    fn new(slurm: &'a LocalSlurm) -> (Self, poller::PollerHandle) {
        let client = slurm.client();
        let (events, _) = broadcast::channel(1024);
        let (handle, index) = poller::spawn(
            ObjectRef::<SlurmCluster>::new("local"),
            client.clone(),
            &PollerConfig {
                interval: Duration::from_millis(500),
            },
            events,
            Metrics::new(),
        );
        let set = common::unique("tns");
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
            set,
            conf,
            pods: BTreeMap::new(),
            guards: Vec::new(),
            log: Vec::new(),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_in_drains_before_deleting_and_never_kills_a_job() {
    let slurm = require_slurm!();
    let started = Instant::now();
    let (mut world, _poller) = World::new(&slurm);
    let client = world.client.clone();
    let set = world.set.clone();
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
    let mut job = slurm.job(&format!("{set}-job"), "sleep 25");
    job.constraints = Some(set.clone());
    job.extra
        .insert("required_nodes".into(), json!(std::slice::from_ref(&n1)));
    let job_id = client.submit_job(&job).await.unwrap().job_id;
    common::wait_for(
        "the job to run",
        Duration::from_secs(30),
        Duration::from_millis(300),
        || {
            let client = client.clone();
            async move {
                (job_state(&client.job(job_id).await.ok()?) == JobBaseState::Running).then_some(())
            }
        },
    )
    .await;

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
