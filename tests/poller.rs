//! Pollers against the real local Slurm (`hack/slurm-up.sh`), and against a fake slurmrestd
//! (wiremock) for failures the real one cannot be made to show on demand.
//!
//! Tests here run in parallel with each other and with other suites against one Slurm: none
//! assumes the cluster is idle. Each test follows its own tagged jobs and its own dynamic node,
//! and the request-count test compares the quietest cycles it sees.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::wait_index;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};
use slurm_operator::crd::SlurmCluster;
use slurm_operator::metrics::Metrics;
use slurm_operator::slurm::tag::OwnerTag;
use slurm_operator::slurm::types::{Changes, JobBaseState, JobUpdate, SubmitRequest};
use slurm_operator::slurm::{ClientConfig, Credentials, RequestObserver, RetryPolicy, SlurmClient};
use slurm_operator::state::index::{Health, IndexReader, SlurmEvent};
use slurm_operator::state::poller::{self, PollerConfig, PollerHandle};
use tokio::sync::broadcast;
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};

const INTERVAL: Duration = Duration::from_secs(1);
const TIMEOUT: Duration = Duration::from_secs(60);
/// Held by the tests that submit bursts of jobs or count the requests a burst changes (the
/// first sync walks down the newest jobs: another test's burst a second earlier would be them).
static BURSTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// Held by the tests that make a record too large to read: one's tagged array, met by the
/// other's poller (which reads every job), would hold up that poller's sync.
static LARGE_RECORDS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A job of `slurm`'s user running `true`, with `comment`, held an hour from starting.
fn held_job(slurm: &common::LocalSlurm, name: &str, comment: Option<String>) -> SubmitRequest {
    let mut request = slurm.job(name, "true");
    request.comment = comment;
    request.extra.insert(
        "begin_time".into(),
        json!({"set": true, "number": epoch_now() + 3600}),
    );
    request
}

/// Counts requests by operation id.
#[derive(Default)]
struct Requests(Mutex<HashMap<&'static str, usize>>);

impl RequestObserver for Requests {
    fn observe(&self, operation: &'static str, _status: Option<u16>, _elapsed: Duration) {
        *self.0.lock().unwrap().entry(operation).or_default() += 1;
    }
}

impl Requests {
    fn snapshot(&self) -> HashMap<&'static str, usize> {
        self.0.lock().unwrap().clone()
    }
}

fn cluster() -> ObjectRef<SlurmCluster> {
    ObjectRef::new("local")
}

struct Running {
    _handle: PollerHandle,
    index: IndexReader,
    events: broadcast::Receiver<SlurmEvent>,
    requests: Arc<Requests>,
}

fn start(config: ClientConfig, credentials: Arc<Credentials>, interval: Duration) -> Running {
    let requests = Arc::new(Requests::default());
    let client = SlurmClient::with_observer(config, credentials, Some(requests.clone())).unwrap();
    let (tx, events) = broadcast::channel(4096);
    let (handle, index) = poller::spawn(
        cluster(),
        client,
        &PollerConfig { interval },
        common::tag_key(),
        tx,
        Metrics::new(),
    );
    Running {
        _handle: handle,
        index,
        events,
        requests,
    }
}

fn start_local(slurm: &common::LocalSlurm) -> Running {
    start(slurm.config(), slurm.credentials(), INTERVAL)
}

/// Wait for an index state that satisfies `pred`.
async fn synced(index: &mut IndexReader) {
    wait_index(index, "a synced index", TIMEOUT, |s| {
        (s.health.is_up() && s.jobs_synced_at.is_some() && s.nodes_synced_at.is_some())
            .then_some(())
    })
    .await;
    // What the SlurmNodeSets' trust in its node list follows.
    assert!(
        !index.borrow().poll_interval.is_zero(),
        "a synced state names its poller's interval"
    );
}

/// Removes a file when dropped (a job's gate), so a failing test leaves nothing behind.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Cancels jobs when dropped, so a failing test does not leave them behind.
struct CancelOnDrop {
    config: ClientConfig,
    credentials: Arc<Credentials>,
    ids: Vec<u32>,
}

impl CancelOnDrop {
    fn new(slurm: &common::LocalSlurm, ids: Vec<u32>) -> Self {
        Self {
            config: slurm.config(),
            credentials: slurm.credentials(),
            ids,
        }
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let (config, credentials) = (self.config.clone(), self.credentials.clone());
        let ids = std::mem::take(&mut self.ids);
        // Drop cannot await: cancel from a thread with its own runtime, and its own client (a
        // client's pooled connections belong to the runtime that opened them).
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let client = SlurmClient::new(config, credentials).unwrap();
            runtime.block_on(futures::stream::iter(ids).for_each_concurrent(4, |id| {
                let client = &client;
                async move {
                    let _ = client.cancel_job(id).await;
                }
            }));
        })
        .join();
    }
}

fn epoch_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A job's transitions reach the index, as JobChanged events carrying its tag, within two poll
/// intervals of Slurm showing them (seen by polling slurmrestd directly every 100 ms).
#[tokio::test]
async fn job_transitions_reach_the_index_within_two_intervals() {
    let slurm = require_slurm!();
    let client = slurm.client();
    // A node of its own, so that the job does not queue behind other tests' jobs.
    let (_stop, feature) = slurm.private_node("ptrans");
    let mut poller = start_local(&slurm);
    synced(&mut poller.index).await;

    let tag = slurm.our_tag(&common::unique("poller"), 1);
    let mut request = slurm.job("poller-transitions", "sleep 3");
    request.comment = Some(tag.clone());
    request.constraints = Some(feature);
    // Starting 2 s from now keeps it visibly PENDING for a couple of polls.
    request.extra.insert(
        "begin_time".into(),
        json!({"set": true, "number": epoch_now() + 2}),
    );
    let job_id = client.submit_job(&request).await.unwrap().job_id;
    let submitted = Instant::now();
    let _cancel = CancelOnDrop::new(&slurm, vec![job_id]);
    // As the SlurmJob controller does with the job id a submit returned: followed from the next
    // cycle, wherever the id falls. (Found by the probe above the highest id alone, a job can
    // wait for the next full listing, up to a minute: when the newest ids of the poller's first
    // listing had been purged, slurmctld's numbering is beyond what it saw.)
    poller.index.borrow().want(job_id);

    // When the job starts and ends is slurmctld's business (under load its scheduler has taken
    // most of a minute): both sides wait long enough for the whole run. What this test holds
    // the poller to is the lag between them, below.
    let whole_run = 3 * TIMEOUT;
    // Slurm's side: first sight of each base state, straight from slurmrestd.
    let watcher = {
        let client = client.clone();
        tokio::spawn(async move {
            let mut seen: BTreeMap<JobBaseState, Instant> = BTreeMap::new();
            seen.insert(JobBaseState::Pending, submitted);
            let started = Instant::now();
            while started.elapsed() < whole_run {
                if let Ok(records) = client.job(job_id).await {
                    let state = &records[0].state;
                    seen.entry(state.base).or_insert_with(Instant::now);
                    if state.is_final() {
                        break;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            seen
        })
    };

    // The index's side: first sight of each base state, on the events for this job.
    let mut indexed: BTreeMap<JobBaseState, Instant> = BTreeMap::new();
    let mut events = 0;
    let finished = tokio::time::timeout(whole_run, async {
        loop {
            match poller.events.recv().await {
                Ok(SlurmEvent::JobChanged {
                    job_id: id,
                    owner,
                    cluster: c,
                }) if id == job_id => {
                    assert_eq!(c, cluster());
                    assert_eq!(owner, OwnerTag::parse(&tag), "the event carries the tag");
                    events += 1;
                    let job = poller.index.borrow().jobs.get(&job_id).cloned();
                    let job = job.expect("the index holds the job when its event arrives");
                    assert_eq!(job.comment.as_deref(), Some(tag.as_str()));
                    indexed.entry(job.state.base).or_insert_with(Instant::now);
                    if job.state.is_final() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(n)) => panic!("lagged by {n} events"),
                Err(error) => panic!("{error}"),
            }
        }
    })
    .await;
    if let Err(elapsed) = finished {
        // What each side shows, for the failure message.
        let slurm_side = client.job(job_id).await;
        let index = poller.index.borrow().clone();
        panic!(
            "the job did not finish in the index ({elapsed}; events {events}, indexed \
             {indexed:?}): slurmctld shows {slurm_side:?}; the index holds {:?}, health \
             {:?}, synced at {:?}, listed up to {:?}, {} jobs in slurmctld, unresolved: {}",
            index.jobs.get(&job_id),
            index.health,
            index.jobs_synced_at,
            index.jobs_listed_up_to,
            index.jobs_total,
            index.unresolved.contains(&job_id),
        );
    }
    let seen = watcher.await.unwrap();

    let done = poller.index.borrow().jobs.get(&job_id).cloned().unwrap();
    assert_eq!(done.state.base, JobBaseState::Completed, "{done:?}");
    assert_eq!(done.exit.as_ref().and_then(|e| e.return_code), Some(0));
    assert!(done.nodes.is_some() && done.start_time.is_some() && done.end_time.is_some());
    for state in [
        JobBaseState::Pending,
        JobBaseState::Running,
        JobBaseState::Completed,
    ] {
        let slurm_at = seen
            .get(&state)
            .unwrap_or_else(|| panic!("Slurm never showed {state:?}"));
        let index_at = indexed
            .get(&state)
            .unwrap_or_else(|| panic!("the index never showed {state:?}: {indexed:?}"));
        let lag = index_at.saturating_duration_since(*slurm_at);
        eprintln!("{state:?}: in the index {lag:?} after Slurm showed it");
        assert!(
            lag <= 2 * INTERVAL,
            "{state:?} reached the index after {lag:?}"
        );
    }
    assert!(events >= 3, "one event per transition at least: {events}");
}

/// A drain reaches the index (node state DRAIN, reason) within two poll intervals, the job on the
/// node shows in its summary with its deadline, and a deleted node goes away. The node is a
/// SlurmNodeSet's (its owner record, as a pod's slurmd registers it): only those nodes' job
/// summaries are kept exact between full listings (their state changes force one; issue 19).
#[tokio::test]
async fn node_drain_and_deletion_reach_the_index_within_two_intervals() {
    let slurm = require_slurm!();
    let client = slurm.client();
    let node = common::unique("pdrain");
    let feature = node.replace('-', "");
    let owner = slurm_operator::slurm::node_owner::NodeOwner::new("poller", "drain");
    slurm.node_script(&[
        "start",
        &node,
        "--conf",
        &format!("CPUs=1 RealMemory=500 Feature={feature}"),
        "--extra",
        &owner.to_extra(),
    ]);
    let _stop = common::NodeGuard::new(&slurm, &node);
    let mut poller = start_local(&slurm);
    wait_index(&mut poller.index, "the node in the index", TIMEOUT, |s| {
        s.nodes.get(&node).map(|_| ())
    })
    .await;

    // Someone else's job (untagged) on the node: only the node summary shows it.
    let mut request = slurm.job("poller-node-job", "sleep 60");
    request.constraints = Some(feature.clone());
    request.time_limit = Some(Duration::from_secs(120));
    let job_id = client.submit_job(&request).await.unwrap().job_id;
    let _cancel = CancelOnDrop::new(&slurm, vec![job_id]);
    // Others' jobs may land on the node too (it is in the default partition): wait for ours.
    let job = common::wait_for(
        "the job to run",
        TIMEOUT,
        Duration::from_millis(200),
        || async {
            let job = client.job(job_id).await.unwrap().remove(0);
            (job.state.base == JobBaseState::Running).then_some(job)
        },
    )
    .await;
    let deadline = job.start_time.unwrap() + chrono::Duration::minutes(2);
    let summary = wait_index(
        &mut poller.index,
        "the job in the node's summary",
        TIMEOUT,
        |s| {
            s.node_jobs
                .get(&node)
                .filter(|j| j.deadline == Some(deadline))
                .copied()
        },
    )
    .await;
    assert_eq!(summary.running, 1, "a 1-CPU node runs one job");
    assert!(
        !poller.index.borrow().jobs.contains_key(&job_id),
        "others' jobs are not kept"
    );

    // Drain: measured from the moment slurmctld accepted it.
    client
        .drain_node(&node, "slurm-operator: poller test")
        .await
        .unwrap();
    let drained_at = Instant::now();
    let drained = wait_index(&mut poller.index, "DRAIN in the index", TIMEOUT, |s| {
        s.nodes.get(&node).filter(|n| n.state.is_drain()).cloned()
    })
    .await;
    let lag = drained_at.elapsed();
    eprintln!("drain reached the index after {lag:?}");
    assert!(lag <= 2 * INTERVAL, "drain reached the index after {lag:?}");
    assert!(drained.state.is_draining(), "{}", drained.state);
    assert_eq!(
        drained.reason.as_deref(),
        Some("slurm-operator: poller test")
    );
    let mut saw_event = false;
    while let Ok(event) = poller.events.try_recv() {
        saw_event |= event
            == SlurmEvent::NodeChanged {
                cluster: cluster(),
                node: node.clone(),
            };
    }
    assert!(saw_event, "a NodeChanged event for {node}");

    // The job ends: the summary entry goes; the node is drained.
    client.cancel_job(job_id).await.unwrap();
    wait_index(
        &mut poller.index,
        "the node drained and free",
        TIMEOUT,
        |s| {
            (s.nodes.get(&node).is_some_and(|n| n.state.is_drained())
                && !s.node_jobs.contains_key(&node))
            .then_some(())
        },
    )
    .await;

    // Deleted (as a pod going away would): NodeGone.
    slurm.node_script(&["stop", &node, "--delete"]);
    let deleted_at = Instant::now();
    tokio::time::timeout(TIMEOUT, async {
        loop {
            if let Ok(SlurmEvent::NodeGone { node: gone, .. }) = poller.events.recv().await
                && gone == node
            {
                break;
            }
        }
    })
    .await
    .expect("NodeGone");
    let lag = deleted_at.elapsed();
    eprintln!("deletion reached the index after {lag:?}");
    assert!(
        lag <= 2 * INTERVAL,
        "deletion reached the index after {lag:?}"
    );
    assert!(!poller.index.borrow().nodes.contains_key(&node));
}

/// Wait until the index is synced as of a moment after `t` (every job submitted before `t` known).
async fn known_since(index: &mut IndexReader, t: chrono::DateTime<chrono::Utc>) {
    wait_index(index, "an index synced after the submits", TIMEOUT, |s| {
        s.jobs_synced_at.filter(|at| *at > t).map(|_| ())
    })
    .await;
}

/// Requests of each of the next `cycles` cycles, by operation.
async fn per_cycle(poller: &mut Running, cycles: usize) -> Vec<HashMap<&'static str, usize>> {
    let mut out = Vec::new();
    poller.index.borrow_and_update();
    let mut before = poller.requests.snapshot();
    while out.len() < cycles {
        tokio::time::timeout(TIMEOUT, poller.index.changed())
            .await
            .unwrap()
            .unwrap();
        poller.index.borrow_and_update();
        let now = poller.requests.snapshot();
        let delta: HashMap<&'static str, usize> = now
            .iter()
            .map(|(op, n)| (*op, n - before.get(op).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect();
        out.push(delta);
        before = now;
    }
    out
}

fn total(cycle: &HashMap<&'static str, usize>) -> usize {
    cycle.values().sum()
}

/// A cycle in which nothing changed costs the same requests whether 1 or 200 jobs exist.
#[tokio::test]
async fn quiet_cycles_cost_the_same_with_1_or_200_jobs() {
    let slurm = require_slurm!();
    let _bursts = BURSTS.lock().await;
    let client = slurm.client();
    let mut poller = start_local(&slurm);
    synced(&mut poller.index).await;

    // Someone else's held jobs (untagged), an hour from starting.
    let name = common::unique("poller-held");
    let request = held_job(&slurm, &name, Some(name.clone()));
    let mut held = CancelOnDrop::new(
        &slurm,
        vec![client.submit_job(&request).await.unwrap().job_id],
    );
    known_since(&mut poller.index, chrono::Utc::now()).await;
    let one = per_cycle(&mut poller, 6).await;

    let more: Vec<u32> = futures::stream::iter(0..199)
        .map(|_| client.submit_job(&request))
        .buffer_unordered(4)
        .map(|r| r.unwrap().job_id)
        .collect()
        .await;
    held.ids.extend(more);
    known_since(&mut poller.index, chrono::Utc::now()).await;
    let two_hundred = per_cycle(&mut poller, 6).await;
    drop(held);

    eprintln!("1 job: {one:?}");
    eprintln!("200 jobs: {two_hundred:?}");
    // The job side of a cycle: node lists vary with what other tests do to nodes meanwhile.
    let quietest = |cycles: &[HashMap<&'static str, usize>]| {
        cycles
            .iter()
            .map(|c| total(c) - c.get("slurm_get_nodes").copied().unwrap_or(0))
            .min()
            .unwrap()
    };
    assert_eq!(
        quietest(&one),
        quietest(&two_hundred),
        "a quiet cycle costs the same whatever the job count"
    );
    assert_eq!(
        quietest(&one),
        1,
        "/jobs/state/ (all, or what is followed and the ids above)"
    );
    // Every cycle lists job states: once, or (an incremental cycle that finds others' new jobs
    // in the upper half of the ids it probes) once more per further window; the node list at
    // most twice (Slurm 24.11 fails an incremental node list when only nodes changed: the
    // facade asks again in full).
    for cycle in one.iter().chain(&two_hundred) {
        assert!(
            matches!(cycle.get("slurm_get_jobs_state"), Some(1..=3)),
            "{cycle:?}"
        );
        assert!(
            cycle.get("slurm_get_nodes").is_some_and(|n| *n <= 2),
            "{cycle:?}"
        );
    }
}

/// The index follows our jobs only: others' jobs are counted, not kept.
#[tokio::test]
async fn only_our_jobs_are_kept() {
    let slurm = require_slurm!();
    let client = slurm.client();
    let mut poller = start_local(&slurm);
    synced(&mut poller.index).await;
    let begin = json!({"set": true, "number": epoch_now() + 3600});
    let tag = slurm.our_tag(&common::unique("ours"), 3);
    let mut ours = slurm.job("poller-ours", "true");
    ours.comment = Some(tag.clone());
    ours.array = Some("0-2".into());
    ours.extra.insert("begin_time".into(), begin.clone());
    let mut theirs = slurm.job("poller-theirs", "true");
    theirs.comment = Some("slurm.rs/not-a-tag".into());
    theirs.extra.insert("begin_time".into(), begin);
    let ours = client.submit_job(&ours).await.unwrap().job_id;
    let theirs = client.submit_job(&theirs).await.unwrap().job_id;
    let _cancel = CancelOnDrop::new(&slurm, vec![ours, theirs]);
    let state = wait_index(&mut poller.index, "our array", TIMEOUT, |s| {
        (s.jobs.contains_key(&ours) && s.jobs_synced_at.is_some()).then(|| s.clone())
    })
    .await;
    assert!(!state.jobs.contains_key(&theirs));
    assert_eq!(state.tagged(&OwnerTag::parse(&tag).unwrap()), vec![ours]);
    let records = state.job_records(ours);
    assert_eq!(
        records.len(),
        1,
        "a pending array is one meta record: {records:?}"
    );
    assert_eq!(records[0].array_task_string.as_deref(), Some("0-2"));
    for id in [ours, theirs] {
        client.cancel_job(id).await.unwrap();
    }
    tokio::time::timeout(TIMEOUT, async {
        loop {
            if let Ok(SlurmEvent::JobChanged { job_id, .. }) = poller.events.recv().await
                && job_id == ours
                && poller.index.borrow().jobs[&ours].state.base == JobBaseState::Cancelled
            {
                break;
            }
        }
    })
    .await
    .expect("the cancel reached the index");
}

// ---------------------------------------------------------------------------------------------
// Against a fake slurmrestd: failures, backoff and recovery.

fn fixture_body(case: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/24.11/{case}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    fixture["body"].clone()
}

/// The claim of the fake's job of ours, signed for the recorded job's user (`slurm`).
fn fake_tag() -> OwnerTag {
    OwnerTag::new("fake", 1)
}

/// The fake's answers: every node, one running job of ours (id 7) with `time_limit` minutes.
async fn mount_healthy(server: &MockServer, time_limit: u64) {
    let nodes = fixture_body("nodes");
    let states =
        json!({"jobs": [{"job_id": "7", "state": ["RUNNING"]}], "errors": [], "warnings": []});
    let mut job = fixture_body("job_running");
    job["jobs"][0]["job_id"] = json!(7);
    job["jobs"][0]["comment"] = json!(common::tag_key().comment(&fake_tag(), "slurm"));
    job["jobs"][0]["time_limit"] = json!({"set": true, "infinite": false, "number": time_limit});
    for (path, body) in [
        ("/slurm/v0.0.42/nodes/?$", nodes),
        ("/slurm/v0.0.42/jobs/state/?$", states),
        ("/slurm/v0.0.42/job/7/?$", job),
    ] {
        Mock::given(method("GET"))
            .and(path_regex(path))
            .respond_with(ResponseTemplate::new(200).set_body_json(body))
            .mount(server)
            .await;
    }
}

async fn mount_failing(server: &MockServer) {
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(503).set_body_string("down for maintenance"))
        .mount(server)
        .await;
}

/// Down once however many polls fail, polls back off while down, and recovery resyncs: node
/// list without `update_time`, our job's record fetched again (its time limit changed while down,
/// which the state list cannot show).
/// A poller whose slurmrestd comes to answer for another Slurm cluster than the one its client
/// was confirmed to reach (an endpoint re-pointed at another cluster's slurmrestd) marks the
/// cluster down, reason `SlurmClusterChanged`, within a few intervals and keeps the index as it
/// was: that cluster's jobs and nodes are not taken for the first's until the SlurmCluster's
/// check decides. Confirmed again, it comes back up. The real local Slurm stands for "another":
/// the client expects `elsewhere`.
#[tokio::test]
async fn answers_of_another_slurm_cluster_mark_the_poller_down_and_keep_the_index() {
    let slurm = require_slurm!();
    let client = SlurmClient::new(slurm.config(), slurm.credentials()).unwrap();
    client.expect_cluster(&slurm.cluster_name);
    let (tx, _events) = broadcast::channel(4096);
    let (_handle, mut index) = poller::spawn(
        cluster(),
        client.clone(),
        &PollerConfig { interval: INTERVAL },
        common::tag_key(),
        tx,
        Metrics::new(),
    );
    synced(&mut index).await;

    client.expect_cluster("elsewhere");
    let (reason, message, down) = wait_index(&mut index, "Down", TIMEOUT, |s| match &s.health {
        Health::Down {
            reason, message, ..
        } => Some((*reason, message.clone(), s.clone())),
        _ => None,
    })
    .await;
    assert_eq!(reason, "SlurmClusterChanged", "{message}");
    assert!(
        message.contains("elsewhere") && message.contains(&slurm.cluster_name),
        "{message}"
    );
    assert!(down.nodes_synced_at.is_some() && !down.nodes.is_empty());
    // Several intervals on, every answer refused: the index is as it was.
    tokio::time::sleep(3 * INTERVAL).await;
    let later = index.borrow().clone();
    assert!(!later.health.is_up());
    assert_eq!(
        later.jobs_synced_at, down.jobs_synced_at,
        "the index is kept"
    );
    assert_eq!(
        later.nodes_synced_at, down.nodes_synced_at,
        "the index is kept"
    );
    assert_eq!(
        later.nodes.keys().collect::<Vec<_>>(),
        down.nodes.keys().collect::<Vec<_>>()
    );
    let before = down;

    client.expect_cluster(&slurm.cluster_name);
    wait_index(&mut index, "Up again", TIMEOUT, |s| {
        (s.health.is_up() && s.jobs_synced_at > before.jobs_synced_at).then_some(())
    })
    .await;
}

#[tokio::test]
async fn failures_mark_down_once_back_off_and_recovery_resyncs() {
    let server = MockServer::start().await;
    mount_healthy(&server, 10).await;
    // The mock serves v0.0.42's paths only: pinned, no negotiating `/ping`.
    let config = ClientConfig::new(&server.uri())
        .unwrap()
        .allow_plaintext(true)
        .with_api_version(Some(slurm_operator::slurm::ApiVersion::V0_0_42))
        .with_retry(RetryPolicy::none());
    let credentials =
        Arc::new(Credentials::minted(vec![1; 32], "slurm", Duration::from_secs(300)).unwrap());
    let interval = Duration::from_millis(100);
    let mut poller = start(config, credentials, interval);
    synced(&mut poller.index).await;
    assert_eq!(
        poller.index.borrow().jobs[&7].time_limit,
        Some(Duration::from_secs(600))
    );
    assert!(poller.index.borrow().nodes.contains_key("n1"));

    server.reset().await;
    mount_failing(&server).await;
    let failed_at = Instant::now();
    let health = wait_index(&mut poller.index, "Down", TIMEOUT, |s| {
        matches!(s.health, Health::Down { .. }).then(|| s.health.clone())
    })
    .await;
    let Health::Down {
        reason, message, ..
    } = health
    else {
        unreachable!()
    };
    assert_eq!(reason, "UnexpectedStatus");
    assert!(message.contains("503"), "{message}");
    // Stay down for 2 s: without backoff that would be 20 polls.
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(failed_at.elapsed())).await;
    let polls_while_down = server.received_requests().await.unwrap().len();
    assert!(
        (2..=8).contains(&polls_while_down),
        "{polls_while_down} requests in 2 s of failures at a 100 ms interval"
    );
    let before_recovery = poller.index.borrow().clone();
    assert!(!before_recovery.health.is_up());
    assert_eq!(
        before_recovery.jobs[&7].time_limit,
        Some(Duration::from_secs(600)),
        "kept while down"
    );

    server.reset().await;
    mount_healthy(&server, 20).await;
    let recovered = wait_index(
        &mut poller.index,
        "the changed job after recovery",
        TIMEOUT,
        |s| {
            (s.health.is_up() && s.jobs.get(&7)?.time_limit == Some(Duration::from_secs(1_200)))
                .then(|| s.clone())
        },
    )
    .await;
    assert!(recovered.jobs_synced_at > before_recovery.jobs_synced_at);
    let nodes_requests: Vec<Option<String>> = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.url.path().contains("/nodes"))
        .map(|r| r.url.query().map(str::to_owned))
        .collect();
    assert_eq!(
        nodes_requests.first(),
        Some(&None),
        "the first node list after recovery is a full one: {nodes_requests:?}"
    );

    let mut events = Vec::new();
    while let Ok(event) = poller.events.try_recv() {
        events.push(event);
    }
    let health_events: Vec<bool> = events
        .iter()
        .filter_map(|e| match e {
            SlurmEvent::HealthChanged { up, .. } => Some(*up),
            _ => None,
        })
        .collect();
    assert_eq!(health_events, vec![true, false, true], "{events:?}");
    let job_events = events
        .iter()
        .filter(|e| matches!(e, SlurmEvent::JobChanged { job_id: 7, owner: Some(c), .. } if *c == fake_tag()))
        .count();
    assert_eq!(
        job_events, 2,
        "appeared, then changed while down: {events:?}"
    );
}

/// Peak memory of one full job listing versus one state listing. A measurement, run by hand
/// with many jobs: `hack/measure-poll.sh --keep 5000`, then
/// `cargo test --test poller -- --ignored --nocapture`, then `hack/measure-poll.sh --cancel NAME`.
#[tokio::test]
#[ignore = "a measurement, run by hand"]
async fn measure_listing_memory() {
    let slurm = require_slurm!();
    let client = slurm.client();
    client.nodes(None).await.unwrap();
    let before = vm_hwm_kib();
    let states = client.all_job_states().await.unwrap();
    let after_states = vm_hwm_kib();
    let Changes::Changed { items, .. } = client.jobs(None).await.unwrap() else {
        panic!("a full listing")
    };
    let after_full = vm_hwm_kib();
    eprintln!(
        "{} state entries, {} jobs: VmHWM {before} KiB, +{} KiB after /jobs/state/, +{} KiB after /jobs",
        states.len(),
        items.len(),
        after_states - before,
        after_full - after_states,
    );
}

/// A poller's start against many jobs: time to a synced index, requests, peak memory. Run by
/// hand like `measure_listing_memory`.
#[tokio::test]
#[ignore = "a measurement, run by hand"]
async fn measure_poller_startup() {
    let slurm = require_slurm!();
    let before = vm_hwm_kib();
    let started = Instant::now();
    let mut poller = start_local(&slurm);
    loop {
        poller.index.changed().await.unwrap();
        let state = poller.index.borrow_and_update().clone();
        eprintln!(
            "{:>6.1} s: poll {}, {} requests so far, {} jobs, synced {}, {:?}",
            started.elapsed().as_secs_f64(),
            state.polls,
            total(&poller.requests.snapshot()),
            state.jobs_total,
            state.jobs_synced_at.is_some(),
            state.health,
        );
        if state.jobs_synced_at.is_some() || started.elapsed() > Duration::from_secs(120) {
            break;
        }
    }
    let quiet = per_cycle(&mut poller, 5).await;
    eprintln!(
        "synced after {:.1} s; VmHWM +{} KiB; next cycles: {quiet:?}",
        started.elapsed().as_secs_f64(),
        vm_hwm_kib() - before
    );
}

fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A poller with `tuning`, counting its requests.
fn start_tuned(slurm: &common::LocalSlurm, tuning: poller::Tuning) -> Running {
    start_tuned_every(slurm, tuning, INTERVAL)
}

/// [`start_tuned`], polling every `interval`.
fn start_tuned_every(
    slurm: &common::LocalSlurm,
    tuning: poller::Tuning,
    interval: Duration,
) -> Running {
    start_configured(slurm.config(), slurm.credentials(), tuning, interval)
}

/// [`start_tuned_every`], its client made with `config`.
fn start_configured(
    config: ClientConfig,
    credentials: Arc<Credentials>,
    tuning: poller::Tuning,
    interval: Duration,
) -> Running {
    let requests = Arc::new(Requests::default());
    let client = SlurmClient::with_observer(config, credentials, Some(requests.clone())).unwrap();
    let (tx, events) = broadcast::channel(4096);
    let (handle, index) = poller::spawn_tuned(
        cluster(),
        client,
        &PollerConfig { interval },
        common::tag_key(),
        tuning,
        tx,
        Metrics::new(),
    );
    Running {
        _handle: handle,
        index,
        events,
        requests,
    }
}

/// A poller of the local Slurm that reads answers of at most `limit` bytes.
fn start_limited(slurm: &common::LocalSlurm, limit: u64, tuning: poller::Tuning) -> Running {
    start_configured(
        slurm.config().with_max_response_bytes(limit),
        slurm.credentials(),
        tuning,
        INTERVAL,
    )
}

/// Held jobs (begin time a day ahead: none runs), `count` of them, tagged with `tag` or untagged.
async fn submit_held(
    slurm: &common::LocalSlurm,
    name: &str,
    count: usize,
    tag: Option<&str>,
) -> Vec<u32> {
    let client = slurm.client();
    let mut ids = Vec::new();
    for _ in 0..count {
        let mut request = slurm.job(name, "true");
        request.comment = tag.map(str::to_owned);
        request.extra.insert(
            "begin_time".into(),
            json!({"set": true, "number": epoch_now() + 86_400}),
        );
        ids.push(client.submit_job(&request).await.unwrap().job_id);
    }
    ids
}

/// Issue 19: the first sync of a cluster with accounting fetches no record of the jobs it lists
/// (but the running ones, and the newest down to one older than `recent`): with 200 foreign
/// held jobs queued, its record requests stay far below 200. A job of ours among the skipped
/// ones enters the index once asked for (`want`), as a SlurmJob naming it does.
#[tokio::test]
async fn the_first_sync_fetches_no_record_of_the_queue() {
    let slurm = require_slurm!();
    let _bursts = BURSTS.lock().await;
    let client = slurm.client();
    // Ours first: the newest jobs (a batch of 4, older than `recent`) are fetched all the same.
    let tag = slurm.our_tag(&common::unique("skip"), 1);
    let ours = submit_held(&slurm, "poller-skip-ours", 1, Some(&tag)).await[0];
    let foreign = submit_held(&slurm, "poller-skip-foreign", 200, None).await;
    let mut all = foreign.clone();
    all.push(ours);
    let _cancel = CancelOnDrop::new(&slurm, all);
    // Older than `recent` when the poller lists them: accounting had that long to learn of them.
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Jobs that hold nodes are fetched (the per-node counts): others' tests run some.
    let running = client
        .all_job_states()
        .await
        .unwrap()
        .iter()
        .filter(|e| e.state.base == JobBaseState::Running)
        .count();
    let mut poller = start_tuned(
        &slurm,
        poller::Tuning {
            recent: Duration::from_secs(2),
            ..poller::Tuning::default()
        },
    );
    synced(&mut poller.index).await;
    let requests = poller.requests.snapshot();
    let records = requests.get("slurm_get_job").copied().unwrap_or(0);
    eprintln!("first sync: {requests:?}; {running} jobs were running");
    let state = poller.index.borrow().clone();
    assert!(
        state.skipped_before.is_some(),
        "the local Slurm has accounting: the first sync skips"
    );
    assert_eq!(
        requests.get("slurmdb_get_job").copied(),
        Some(2),
        "one request finds out whether accounting answers, one that it shows where the walk stops"
    );
    // The walk down the newest jobs fetches one batch (4), then the jobs running (others'
    // tests start and end some meanwhile: a margin of 20).
    assert!(
        records <= 4 + running + 20,
        "{records} record requests with {running} jobs running"
    );
    assert!(records < 100, "{records} record requests");
    let skipped = foreign
        .iter()
        .filter(|id| state.unresolved.contains(id))
        .count();
    assert!(skipped >= foreign.len() - 4, "{skipped} of 200 skipped");
    assert!(state.unresolved.contains(&ours), "ours was skipped");
    assert!(!state.jobs.contains_key(&ours));
    // A SlurmJob names it: fetched, and ours.
    state.want(ours);
    let job = wait_index(&mut poller.index, "the wanted job", TIMEOUT, |s| {
        s.jobs.get(&ours).cloned()
    })
    .await;
    assert_eq!(job.comment.as_deref(), Some(tag.as_str()));
    assert!(!poller.index.borrow().unresolved.contains(&ours));
    // Others' jobs stay skipped.
    let still = foreign
        .iter()
        .filter(|id| poller.index.borrow().unresolved.contains(id))
        .count();
    assert_eq!(still, skipped);
}

/// A poller through the proxy at `url` whose first sync takes jobs older than 2 s as old enough
/// for accounting, and may read every record the shared Slurm holds (others' tests' jobs too).
fn start_reading_everything(slurm: &common::LocalSlurm, url: &str) -> Running {
    let tuning = poller::Tuning {
        recent: Duration::from_secs(2),
        detail_budget: 100_000,
        ..poller::Tuning::default()
    };
    let config = ClientConfig::new(url).unwrap().allow_plaintext(true);
    start_configured(config, slurm.credentials(), tuning, INTERVAL)
}

/// The newest job [`the_first_syncs_walk_skips_nothing_accounting_does_not_show`] submits:
/// accounting answers for it and newer ones (other tests' jobs), for no older one.
static ANSWERED_FROM: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(u32::MAX);

/// The first sync skips the jobs below its walk only once accounting shows the job the walk
/// stopped at: old enough is not enough while slurmdbd works off a backlog (it was down), and a
/// job of ours among the skipped would be searched for in accounting in vain and submitted again.
/// Here accounting answers for the newest job (so the walk is tried) and refuses to answer for
/// older ones: nothing is skipped, and a job of ours below the walk's first batch is resolved by
/// the first sync itself.
#[tokio::test]
async fn the_first_syncs_walk_skips_nothing_accounting_does_not_show() {
    use std::sync::atomic::Ordering::SeqCst;
    let slurm = require_slurm!();
    let _bursts = BURSTS.lock().await;
    let tag = slurm.our_tag(&common::unique("unconfirmed"), 1);
    let ours = submit_held(&slurm, "poller-unconfirmed-ours", 1, Some(&tag)).await[0];
    // Above ours and below the newest: the walk's first batch (4) ends among them.
    let older = submit_held(&slurm, "poller-unconfirmed-foreign", 5, None).await;
    // Older than `recent` when the poller lists them.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let newest = submit_held(&slurm, "poller-unconfirmed-newest", 1, None).await[0];
    ANSWERED_FROM.store(newest, SeqCst);
    let mut all = older.clone();
    all.extend([ours, newest]);
    let _cancel = CancelOnDrop::new(&slurm, all);
    let (url, refusing) = common::proxy::refusing_with(
        slurm.url.clone(),
        |request| {
            let path = request.uri().path().trim_end_matches('/');
            let id = path
                .contains("/slurmdb/")
                .then(|| path.rsplit_once("/job/"))
                .flatten()
                .and_then(|(_, id)| id.parse::<u32>().ok());
            id.is_some_and(|id| id < ANSWERED_FROM.load(SeqCst))
        },
        // Not a server error, which the client retries.
        reqwest::StatusCode::NOT_FOUND,
    )
    .await;
    refusing.store(true, SeqCst);
    let Running {
        _handle,
        mut index,
        requests,
        ..
    } = start_reading_everything(&slurm, &url);
    synced(&mut index).await;
    let state = index.borrow().clone();
    assert_eq!(
        requests.snapshot().get("slurmdb_get_job").copied(),
        Some(2),
        "accounting asked whether it answers (it does, for the newest), then for the job the walk \
         got down to (it does not)"
    );
    // (Every job listed was read: the budget covers them all, and nothing is left to skip.)
    assert!(
        !state.unresolved.contains(&ours),
        "job {ours} of ours was skipped though accounting did not show the walk's last job"
    );
    assert_eq!(
        state.jobs.get(&ours).and_then(|j| j.comment.clone()),
        Some(tag)
    );
}

/// The first sync reads job ages on slurmctld's clock (`/diag`); when that cannot be read, no
/// job counts as old enough to be skipped unfetched: a job of ours submitted before the
/// poller started (older than `recent` by any clock) is resolved by the first sync itself.
#[tokio::test]
async fn without_slurmctlds_clock_the_first_sync_skips_nothing_unfetched() {
    let slurm = require_slurm!();
    let _bursts = BURSTS.lock().await;
    let tag = slurm.our_tag(&common::unique("noclock"), 1);
    let ours = submit_held(&slurm, "poller-noclock", 1, Some(&tag)).await[0];
    let _cancel = CancelOnDrop::new(&slurm, vec![ours]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (url, refusing) = common::proxy::refusing(slurm.url.clone(), |request| {
        request
            .uri()
            .path()
            .trim_end_matches('/')
            .ends_with("/diag")
    })
    .await;
    refusing.store(true, std::sync::atomic::Ordering::SeqCst);
    let Running {
        _handle, mut index, ..
    } = start_reading_everything(&slurm, &url);
    synced(&mut index).await;
    let state = index.borrow().clone();
    assert!(state.health.is_up(), "{:?}", state.health);
    assert!(
        !state.unresolved.contains(&ours),
        "job {ours} of ours was skipped without slurmctld's clock"
    );
    assert_eq!(
        state.jobs.get(&ours).and_then(|j| j.comment.clone()),
        Some(tag)
    );
}

/// Issue 19: a burst of others' submits after the first sync, larger than a cycle's
/// `detail_budget`, is not resolved a record at a time (200 jobs at 8 records a cycle: 25
/// cycles, and a hundred thousand would take hours): once its older jobs are older than
/// `recent`, the poller skips them as its first listing does, and the index is complete again
/// within a few cycles. Ours among them is in the index, or found when a SlurmJob names it.
#[tokio::test]
async fn a_burst_of_others_jobs_is_skipped_once_old_enough() {
    let slurm = require_slurm!();
    let _bursts = BURSTS.lock().await;
    let budget = 8;
    let mut poller = start_tuned(
        &slurm,
        poller::Tuning {
            detail_budget: budget,
            // Not one listing of every record: the catch-up is for queues too large for it.
            full_list_max_jobs: 10,
            recent: Duration::from_secs(3),
            ..poller::Tuning::default()
        },
    );
    synced(&mut poller.index).await;
    let before = poller.requests.snapshot();
    let polls_before = poller.index.borrow().polls;

    let uid = common::unique("burst");
    let tag = slurm.our_tag(&uid, 1);
    let old_ours = submit_held(&slurm, "poller-burst-ours", 1, Some(&tag)).await[0];
    let burst = submit_held(&slurm, "poller-burst-others", 200, None).await;
    let new_ours = submit_held(&slurm, "poller-burst-ours", 1, Some(&tag)).await[0];
    let mut all = burst.clone();
    all.extend([old_ours, new_ours]);
    let _cancel = CancelOnDrop::new(&slurm, all);
    let submitted = chrono::Utc::now();
    let polls_submitted = poller.index.borrow().polls;

    let polls = wait_index(
        &mut poller.index,
        "an index complete after the burst",
        TIMEOUT,
        |s| {
            s.jobs_synced_at
                .is_some_and(|t| t > submitted)
                .then_some(s.polls)
        },
    )
    .await;
    let state = poller.index.borrow().clone();
    let after = poller.requests.snapshot();
    let records = after.get("slurm_get_job").copied().unwrap_or(0)
        - before.get("slurm_get_job").copied().unwrap_or(0);
    let cycles = (polls - polls_before) as usize;
    eprintln!(
        "complete {} cycles after the burst; {records} records fetched in {cycles} cycles",
        polls - polls_submitted
    );
    // Within recent (3 s) of the last submit and a cycle or two (1 s each), not 25 cycles.
    assert!(
        polls - polls_submitted <= 12,
        "complete only {} cycles after the burst",
        polls - polls_submitted
    );
    // Each cycle within its budget (the catch-up's walk takes half of it).
    assert!(
        records <= budget * cycles,
        "{records} records in {cycles} cycles"
    );
    assert!(
        records < burst.len(),
        "{records} records for a burst of 200"
    );
    let skipped = burst
        .iter()
        .filter(|id| state.unresolved.contains(id))
        .count();
    assert!(
        skipped >= burst.len() - records,
        "{skipped} of the burst skipped with {records} records fetched"
    );
    assert!(state.skipped_before.is_some_and(|t| t > submitted));
    // Ours, resolved by the walk (the newest of the burst, unless other tests' jobs came after
    // it), or skipped with the rest and found once a SlurmJob names it.
    for id in [new_ours, old_ours] {
        if state.unresolved.contains(&id) {
            eprintln!("job {id} of ours skipped: asked for");
            state.want(id);
        }
        let job = wait_index(
            &mut poller.index,
            &format!("job {id} of ours"),
            TIMEOUT,
            |s| s.jobs.get(&id).cloned(),
        )
        .await;
        assert_eq!(job.comment.as_deref(), Some(tag.as_str()));
    }
}

/// The index as the next cycle publishes it.
async fn next_cycle(index: &mut IndexReader) -> Arc<slurm_operator::state::index::ClusterState> {
    tokio::time::timeout(TIMEOUT, index.changed())
        .await
        .unwrap()
        .unwrap();
    index.borrow_and_update().clone()
}

/// Issue 19: the records of a burst of this process's submits are not read while the burst
/// goes on (the submit made them ours; pending, their record only says how they wait): the
/// cycle after 20 submits lists them, fetches none of their records, and still counts as
/// complete. The next cycle, with no new submit, reads them all. A few submits (no burst) are
/// read at once.
#[tokio::test]
async fn the_records_of_a_burst_of_submits_are_read_once_it_pauses() {
    let slurm = require_slurm!();
    let _bursts = BURSTS.lock().await;
    // Cycles 5 s apart: the 20 submits (~0.1 s) fit between two of them, so that one cycle
    // sees them all as a burst.
    let interval = Duration::from_secs(5);
    let mut poller = start_tuned_every(
        &slurm,
        poller::Tuning {
            submit_burst: 4,
            // No bound in this test: the pause alone releases them.
            submit_hold: Duration::from_secs(600),
            // Records one by one, as on a cluster too large for one listing of every record.
            full_list_max_jobs: 0,
            ..poller::Tuning::default()
        },
        interval,
    );
    synced(&mut poller.index).await;
    let tag = slurm.our_tag(&common::unique("burst-own"), 1);
    // As the SlurmJob controller tells the poller of each id its submit returned.
    let uid = OwnerTag::parse(&tag).unwrap().uid().to_owned();
    let submitted = |index: &IndexReader, ids: &[u32]| {
        let state = index.borrow().clone();
        for id in ids {
            state.submitted(*id, &uid);
        }
    };

    // Right after a cycle: the whole burst lands before the next one.
    next_cycle(&mut poller.index).await;
    let started = Instant::now();
    let mut burst = Vec::new();
    for _ in 0..20 {
        // Told at once, as the controller does after each submit.
        let id = submit_held(&slurm, "poller-own-burst", 1, Some(&tag)).await;
        submitted(&poller.index, &id);
        burst.extend(id);
    }
    let _cancel = CancelOnDrop::new(&slurm, burst.clone());
    let submitted_at = chrono::Utc::now();
    assert!(
        started.elapsed() < interval / 2,
        "the burst took {:?}, too long beside a {interval:?} cycle: the test cannot tell a held record",
        started.elapsed()
    );
    let before = poller.requests.snapshot();
    let during = next_cycle(&mut poller.index).await;
    let records = |snapshot: &HashMap<&'static str, usize>| {
        snapshot.get("slurm_get_job").copied().unwrap_or(0)
    };
    eprintln!(
        "the cycle after the burst: {} record requests (others' jobs included)",
        records(&poller.requests.snapshot()) - records(&before)
    );
    for id in &burst {
        assert!(
            during.unresolved.contains(id),
            "job {id} of the burst listed, its record not read"
        );
        assert!(!during.jobs.contains_key(id), "job {id}: record read");
    }
    assert!(
        during.jobs_synced_at.is_some_and(|t| t > submitted_at),
        "the held records do not hold up the sync: synced at {:?}",
        during.jobs_synced_at
    );

    // No submit since: the next cycle reads them all.
    let before = poller.requests.snapshot();
    let after = next_cycle(&mut poller.index).await;
    for id in &burst {
        let job = after
            .jobs
            .get(id)
            .unwrap_or_else(|| panic!("job {id} read"));
        assert_eq!(job.comment.as_deref(), Some(tag.as_str()));
        assert!(!after.unresolved.contains(id));
    }
    assert!(
        records(&poller.requests.snapshot()) - records(&before) >= burst.len(),
        "one record request each"
    );

    // Two submits are no burst: read by the first cycle that lists them.
    next_cycle(&mut poller.index).await;
    let few = submit_held(&slurm, "poller-own-burst", 2, Some(&tag)).await;
    let _cancel_few = CancelOnDrop::new(&slurm, few.clone());
    submitted(&poller.index, &few);
    let state = next_cycle(&mut poller.index).await;
    for id in &few {
        assert!(state.jobs.contains_key(id), "job {id} read at once");
    }
}

/// Issue 19: between full listings (here every 20 s) cycles ask only about the jobs they follow
/// and the ids above the highest seen. Against the real Slurm, a job submitted since is found,
/// changes (PENDING, RUNNING) and ends, a held job is cancelled, each reaching the index through
/// incremental cycles, and a node is deleted; the ended job, which cycles no longer follow once
/// it has settled, is purged (MinJobAge, 30 s in hack/) and leaves the index with a full
/// listing. At the end a fresh poller's full sync holds the same records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_cycles_follow_changes_ends_purges_and_node_deletions() {
    let slurm = require_slurm!();
    let client = slurm.client();
    let node = common::unique("pincr");
    let feature = node.replace('-', "");
    slurm.node_script(&[
        "start",
        &node,
        "--conf",
        &format!("CPUs=1 RealMemory=500 Feature={feature}"),
    ]);
    let _stop = common::NodeGuard::new(&slurm, &node);
    let uid = common::unique("incr");
    let tag = slurm.our_tag(&uid, 1);
    // Ours, held (one is cancelled below), and others' held jobs: enough for incremental cycles
    // to pay (they follow at most a quarter of the queue), whatever else the shared Slurm holds.
    let held = submit_held(&slurm, "poller-incr-held", 6, Some(&tag)).await;
    let filler = submit_held(&slurm, "poller-incr-others", 40, None).await;
    let mut cancel = CancelOnDrop::new(&slurm, held.iter().chain(&filler).copied().collect());
    let tuning = poller::Tuning {
        full_every: Duration::from_secs(20),
        // Several windows a cycle when jobs come in bursts, and a cycle still complete while
        // another test submits 200 jobs at once (16 windows of 16 ids: 256).
        probe_width: 16,
        // The jobs just submitted are among the newest: the first listing fetches them.
        recent: Duration::from_secs(30),
        ..poller::Tuning::default()
    };
    let mut poller = start_tuned(&slurm, tuning);
    // Longer than other tests allow: a shared Slurm busy with a burst of others' submits makes
    // the first listing fetch every record.
    wait_index(&mut poller.index, "a synced index", 5 * TIMEOUT, |s| {
        s.jobs_synced_at.map(|_| ())
    })
    .await;
    let incremental =
        |s: &slurm_operator::state::index::ClusterState| s.jobs_listed_up_to.is_some();
    for id in &held {
        assert!(poller.index.borrow().jobs.contains_key(id), "held job {id}");
    }

    // A job submitted since: found by the probe above the highest id, followed to its end. Each
    // state lasts until the test has seen it through an incremental cycle (held, then waiting
    // for a file): while another test's burst of submits is resolved, cycles are full listings
    // (incremental ones would not pay), and a job pending or running for a fixed few seconds
    // was once seen only by those.
    let gate = format!("/tmp/{uid}.go");
    let mut request = slurm.job(
        "poller-incr",
        &format!("while [ ! -e {gate} ]; do sleep 0.2; done"),
    );
    request.comment = Some(tag.clone());
    request.constraints = Some(feature);
    request.hold = true;
    let job_id = client.submit_job(&request).await.unwrap().job_id;
    cancel.ids.push(job_id);
    let gate = slurm.root.join(gate.trim_start_matches('/'));
    let _gate = RemoveOnDrop(gate.clone());
    for base in [
        JobBaseState::Pending,
        JobBaseState::Running,
        JobBaseState::Completed,
    ] {
        let (job, listed_up_to) = wait_index(
            &mut poller.index,
            &format!("job {job_id} {base:?} through an incremental cycle"),
            3 * TIMEOUT,
            |s| {
                s.jobs
                    .get(&job_id)
                    .filter(|j| j.state.base == base && incremental(s))
                    .map(|j| (j.clone(), s.jobs_listed_up_to))
            },
        )
        .await;
        eprintln!("{base:?} in the index, listed up to {listed_up_to:?}");
        match base {
            JobBaseState::Pending => {
                assert!(job.held, "{job:?}");
                let release = JobUpdate {
                    hold: Some(false),
                    ..JobUpdate::default()
                };
                client.update_job(job_id, &release).await.unwrap();
            }
            JobBaseState::Running => {
                assert!(job.nodes.is_some(), "{job:?}");
                std::fs::write(&gate, b"").unwrap();
            }
            _ => {}
        }
    }
    // A held job cancelled: its end shows too.
    client.cancel_job(held[0]).await.unwrap();
    wait_index(&mut poller.index, "the cancelled job", TIMEOUT, |s| {
        s.jobs
            .get(&held[0])
            .filter(|j| j.state.base == JobBaseState::Cancelled && incremental(s))
            .map(|_| ())
    })
    .await;

    // The node deleted (a pod gone): out of the node list.
    slurm.node_script(&["stop", &node, "--delete"]);
    wait_index(&mut poller.index, "the node gone", TIMEOUT, |s| {
        (!s.nodes.contains_key(&node)).then_some(())
    })
    .await;

    // Purged after MinJobAge (30 s in hack/, and slurmctld purges once a minute or so): gone from the
    // index with the full listing that no longer shows it, and a JobGone event.
    let purge = Duration::from_secs(480);
    wait_index(&mut poller.index, "the finished job purged", purge, |s| {
        (!s.jobs.contains_key(&job_id)).then_some(())
    })
    .await;
    assert!(
        matches!(
            client.job(job_id).await,
            Err(slurm_operator::slurm::SlurmError::NotFound { .. })
        ),
        "slurmctld no longer holds job {job_id}"
    );
    let mut gone = false;
    while let Ok(event) = poller.events.try_recv() {
        gone |= matches!(event, SlurmEvent::JobGone { job_id: id, .. } if id == job_id);
    }
    assert!(gone, "a JobGone event for job {job_id}");

    // A fresh poller's full sync agrees on every job of this test (asked for, as SlurmJobs
    // naming them would: its first listing skips what it does not know).
    let mut fresh = start_tuned(&slurm, poller::Tuning::default());
    synced(&mut fresh.index).await;
    for id in held.iter().chain([&job_id]) {
        fresh.index.borrow().want(*id);
    }
    wait_index(&mut fresh.index, "the wanted jobs resolved", TIMEOUT, |s| {
        held.iter()
            .all(|id| !s.unresolved.contains(id))
            .then_some(())
    })
    .await;
    synced(&mut poller.index).await;
    let ours = |s: &slurm_operator::state::index::ClusterState| -> BTreeMap<u32, JobBaseState> {
        s.jobs
            .values()
            .filter(|j| j.comment.as_deref() == Some(tag.as_str()))
            .map(|j| (j.job_id, j.state.base))
            .collect()
    };
    // Both are one cycle apart at most: compare until they agree (nothing of this test moves
    // any more), and fail on a disagreement that lasts.
    let agreed = common::wait_for(
        "the incremental and the full index to agree",
        TIMEOUT,
        Duration::from_millis(200),
        || {
            let (a, b) = (ours(&poller.index.borrow()), ours(&fresh.index.borrow()));
            async move { (a == b).then_some(a) }
        },
    )
    .await;
    // The held ones (the cancelled one until slurmctld purges it too), not the purged one.
    assert!(
        held[1..].iter().all(|id| agreed.contains_key(id)),
        "{agreed:?}"
    );
    assert!(agreed.keys().all(|id| held.contains(id)), "{agreed:?}");
    assert!(!fresh.index.borrow().nodes.contains_key(&node));
}

/// Issue 19: the periodic full listing runs beside the incremental cycles. Behind a proxy that
/// holds every full `/jobs/state/` answer for 10 s (slurmrestd takes 20 s and more at 100 000
/// jobs), a job of ours cancelled while a listing is held reaches the index within two
/// intervals, before that listing is let go; and the listing, taken before the cancel, takes
/// nothing back when the next cycle merges it.
#[tokio::test]
async fn a_slow_full_listing_holds_up_no_change() {
    let slurm = require_slurm!();
    let client = slurm.client();
    let uid = common::unique("beside");
    let tag = slurm.our_tag(&uid, 1);
    // Ours, held, and others' held jobs: enough for incremental cycles to pay (they follow at
    // most a quarter of the queue), whatever else the shared Slurm holds.
    let ours = submit_held(&slurm, "poller-beside", 2, Some(&tag)).await;
    let filler = submit_held(&slurm, "poller-beside-others", 40, None).await;
    let _cancel = CancelOnDrop::new(&slurm, ours.iter().chain(&filler).copied().collect());
    let hold = Duration::from_secs(10);
    let (url, held) = common::proxy::slow_listings(slurm.url.clone(), hold).await;
    let config = ClientConfig::new(&url).unwrap().allow_plaintext(true);
    let poller_client = SlurmClient::new(config, slurm.credentials()).unwrap();
    let metrics = Metrics::new();
    let (tx, _events) = broadcast::channel(4096);
    let tuning = poller::Tuning {
        // A listing beside the cycles nearly all the time.
        full_every: Duration::from_secs(2),
        probe_width: 16,
        recent: Duration::from_secs(30),
        ..poller::Tuning::default()
    };
    let (_handle, mut index) = poller::spawn_tuned(
        cluster(),
        poller_client,
        &PollerConfig { interval: INTERVAL },
        common::tag_key(),
        tuning,
        tx,
        metrics.clone(),
    );
    // The first listing is in a cycle, held like the others.
    wait_index(&mut index, "a synced index", 2 * TIMEOUT, |s| {
        s.jobs_synced_at.map(|_| ())
    })
    .await;
    for id in &ours {
        index.borrow().want(*id);
    }
    wait_index(&mut index, "ours in the index", TIMEOUT, |s| {
        ours.iter().all(|id| s.jobs.contains_key(id)).then_some(())
    })
    .await;

    // The first listing was in a cycle: it dates the full listing as it dates the sync.
    let first = index
        .borrow()
        .fully_listed_at
        .expect("the first listing is a full one");

    // A listing asked from now on, passed on to slurmrestd at once and held.
    let from = Instant::now();
    let (asked, _) = common::wait_for(
        "a full listing beside the cycles",
        3 * hold,
        Duration::from_millis(20),
        || std::future::ready(held.first_after(from)),
    )
    .await;
    client.cancel_job(ours[0]).await.unwrap();
    let cancelled = Instant::now();
    wait_index(&mut index, "the cancel in the index", TIMEOUT, |s| {
        s.jobs
            .get(&ours[0])
            .filter(|j| j.state.base == JobBaseState::Cancelled)
            .map(|_| ())
    })
    .await;
    let seen = Instant::now();
    let lag = seen - cancelled;
    let (_, let_go) = held.first_after(asked).unwrap();
    eprintln!(
        "the cancel in the index after {lag:?}; the listing held since {:?}",
        seen - asked
    );
    assert!(
        lag <= 2 * INTERVAL,
        "the cancel reached the index after {lag:?}"
    );
    assert!(
        let_go.is_none_or(|at| at > seen),
        "the cancel was seen before the listing asked before it was let go"
    );

    // That listing let go, and the next cycle merges it: still cancelled, ours all there.
    let (_, let_go) = common::wait_for(
        "the listing let go",
        3 * hold,
        Duration::from_millis(20),
        || std::future::ready(held.first_after(asked).filter(|(_, go)| go.is_some())),
    )
    .await;
    assert!(let_go.is_some());
    let polls = index.borrow().polls;
    wait_index(&mut index, "two cycles after the listing", TIMEOUT, |s| {
        (s.polls >= polls + 2 && s.jobs_synced_at.is_some()).then_some(())
    })
    .await;
    let state = index.borrow().clone();
    assert_eq!(
        state.jobs.get(&ours[0]).map(|j| j.state.base),
        Some(JobBaseState::Cancelled),
        "the older listing took nothing back"
    );
    assert_eq!(
        state.jobs.get(&ours[1]).map(|j| j.state.base),
        Some(JobBaseState::Pending)
    );
    // The merged listing dates the full listing from when it was asked: later than the first,
    // earlier than the cycle that merged it (what a submit in doubt waits for).
    let merged = state.fully_listed_at.unwrap();
    let synced = state.jobs_synced_at.unwrap();
    assert!(
        merged > first && merged < synced,
        "{first} {merged} {synced}"
    );
    // Merged: the poll kind of a listing beside the cycles was timed.
    let text = metrics.encode().unwrap();
    assert!(
        text.lines().any(
            |l| l.starts_with("slurm_operator_poll_duration_seconds_count")
                && l.contains("kind=\"job_listing\"")
                && !l.ends_with(" 0")
        ),
        "{text}"
    );
}

/// The periodic listing of every job failing while the incremental cycles work is said in the
/// index (`listing_failure`, which the SlurmCluster's `JobsListed` condition shows; before, only
/// the log and a metric did), while health stays up and `fully_listed_at` stands still; the next
/// listing that answers clears it. Each change goes out as one `ListingChanged` event (the
/// SlurmCluster's status says it then, not at its next minutely check).
#[tokio::test]
async fn a_failing_listing_of_every_job_is_said_until_one_answers() {
    let slurm = require_slurm!();
    let uid = common::unique("listing-fails");
    let tag = slurm.our_tag(&uid, 1);
    // Enough others' jobs for incremental cycles to pay, as in the test above.
    let ours = submit_held(&slurm, "poller-listing-fails", 1, Some(&tag)).await;
    let filler = submit_held(&slurm, "poller-listing-fails-others", 40, None).await;
    let _cancel = CancelOnDrop::new(&slurm, ours.iter().chain(&filler).copied().collect());
    let (url, failing) = common::proxy::failing_listings(slurm.url.clone()).await;
    let tuning = poller::Tuning {
        full_every: Duration::from_secs(1),
        probe_width: 16,
        recent: Duration::from_secs(30),
        ..poller::Tuning::default()
    };
    let config = ClientConfig::new(&url).unwrap().allow_plaintext(true);
    let Running {
        _handle,
        mut index,
        mut events,
        ..
    } = start_configured(config, slurm.credentials(), tuning, INTERVAL);
    // The SlurmCluster is told each change of what its JobsListed says, once. A cycle's events
    // go out right after its index: wait for the next one, then see that none other came.
    async fn next_listing_event(events: &mut broadcast::Receiver<SlurmEvent>) -> bool {
        tokio::time::timeout(TIMEOUT, async {
            loop {
                if let SlurmEvent::ListingChanged { failing, .. } = events.recv().await.unwrap() {
                    return failing;
                }
            }
        })
        .await
        .expect("a ListingChanged event")
    }
    let no_more = |events: &mut broadcast::Receiver<SlurmEvent>| {
        while let Ok(event) = events.try_recv() {
            assert!(
                !matches!(event, SlurmEvent::ListingChanged { .. }),
                "{event:?}"
            );
        }
    };
    wait_index(&mut index, "a listing of every job", TIMEOUT, |s| {
        s.fully_listed_at.map(|_| ())
    })
    .await;
    assert_eq!(index.borrow().listing_failure, None);
    assert!(!next_listing_event(&mut events).await, "the first listing");

    failing.store(true, std::sync::atomic::Ordering::SeqCst);
    let failure = wait_index(&mut index, "the listing's failure", TIMEOUT, |s| {
        s.listing_failure.clone()
    })
    .await;
    eprintln!("{failure:?}");
    assert!(failure.message.contains("503"), "{failure:?}");
    assert!(next_listing_event(&mut events).await, "failing");
    let frozen = index.borrow().fully_listed_at;
    // Cycles go on, up, and the failure is kept with its first time while listings fail.
    let polls = index.borrow().polls;
    wait_index(&mut index, "more cycles", TIMEOUT, |s| {
        (s.polls >= polls + 3).then_some(())
    })
    .await;
    no_more(&mut events);
    let state = index.borrow().clone();
    assert!(state.health.is_up(), "{:?}", state.health);
    assert_eq!(state.fully_listed_at, frozen);
    assert_eq!(
        state.listing_failure.as_ref().map(|f| f.since),
        Some(failure.since)
    );

    failing.store(false, std::sync::atomic::Ordering::SeqCst);
    wait_index(&mut index, "a listing that answers", TIMEOUT, |s| {
        (s.listing_failure.is_none() && s.fully_listed_at > frozen).then_some(())
    })
    .await;
    assert!(!next_listing_event(&mut events).await, "answered again");
}

/// Every request of a poller, with when it was answered and its HTTP status.
#[derive(Default)]
struct Timeline(Mutex<Vec<(Instant, &'static str, Option<u16>)>>);

impl RequestObserver for Timeline {
    fn observe(&self, operation: &'static str, status: Option<u16>, _elapsed: Duration) {
        self.0
            .lock()
            .unwrap()
            .push((Instant::now(), operation, status));
    }
}

impl Timeline {
    /// The node requests so far: when each was answered, and its status.
    fn nodes(&self) -> Vec<(Instant, Option<u16>)> {
        let timeline = self.0.lock().unwrap();
        timeline
            .iter()
            .filter(|(_, op, _)| *op == "slurm_get_nodes")
            .map(|(at, _, status)| (*at, *status))
            .collect()
    }
}

/// Whether each node list a poller asked named an `update_time` (the recording proxy of
/// [`the_node_list_is_asked_unfiltered_at_each_refresh`]).
static NODE_QUERIES: Mutex<Vec<bool>> = Mutex::new(Vec::new());

/// Beside the node lists filtered by `update_time`, one unfiltered at each refresh
/// (`Tuning::refresh_every`): slurmrestd weighs the filter against slurmctld's clock, and a
/// change made while that clock was behind (stepped back, a backup controller taking over)
/// would be hidden from every filtered question until another change came.
#[tokio::test]
async fn the_node_list_is_asked_unfiltered_at_each_refresh() {
    let slurm = require_slurm!();
    let (url, _never) = common::proxy::refusing(slurm.url.clone(), |request| {
        if request
            .uri()
            .path()
            .trim_end_matches('/')
            .ends_with("/nodes")
        {
            let filtered = request
                .uri()
                .query()
                .is_some_and(|q| q.contains("update_time"));
            NODE_QUERIES.lock().unwrap().push(filtered);
        }
        false
    })
    .await;
    let tuning = poller::Tuning {
        refresh_every: Duration::from_secs(2),
        ..poller::Tuning::default()
    };
    let config = ClientConfig::new(&url).unwrap().allow_plaintext(true);
    let Running {
        _handle, mut index, ..
    } = start_configured(
        config,
        slurm.credentials(),
        tuning,
        Duration::from_millis(200),
    );
    synced(&mut index).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let asked = NODE_QUERIES.lock().unwrap().clone();
    let unfiltered = asked.iter().filter(|filtered| !**filtered).count();
    // The first (no `update_time` known yet), and one at each refresh: two in 5 s at least.
    assert!(
        unfiltered >= 3,
        "{unfiltered} unfiltered of {} node lists",
        asked.len()
    );
    assert!(
        asked.len() > unfiltered,
        "the cycles between ask with `update_time`: {asked:?}"
    );
}

/// Issue 19: slurmrestd sends every node when one changed, so a node list that changed is asked
/// again only after a wait in proportion to the nodes it sent (`Tuning::nodes_wait`; here at
/// least 3 s, whatever the nodes). The cycles between ask no node list and keep the index's
/// nodes and `nodes_synced_at`; a drain meanwhile reaches the index with the next list.
#[tokio::test]
async fn a_node_list_that_changed_is_asked_again_only_after_a_wait() {
    const WAIT: Duration = Duration::from_secs(3);
    let slurm = require_slurm!();
    let client = slurm.client();
    let node = common::unique("pwait");
    slurm.node_script(&["start", &node, "--conf", "CPUs=1 RealMemory=500"]);
    let _stop = common::NodeGuard::new(&slurm, &node);
    let timeline = Arc::new(Timeline::default());
    let poll_client =
        SlurmClient::with_observer(slurm.config(), slurm.credentials(), Some(timeline.clone()))
            .unwrap();
    let (tx, _events) = broadcast::channel(4096);
    let (_handle, mut index) = poller::spawn_tuned(
        cluster(),
        poll_client,
        &PollerConfig {
            interval: Duration::from_millis(200),
        },
        common::tag_key(),
        poller::Tuning {
            // Every node list counts as large.
            nodes_wait_per_node: Duration::from_secs(10),
            nodes_wait_max: WAIT,
            ..poller::Tuning::default()
        },
        tx,
        Metrics::new(),
    );
    wait_index(&mut index, "the node in the index", TIMEOUT, |s| {
        s.nodes.get(&node).map(|_| ())
    })
    .await;

    client
        .drain_node(&node, "slurm-operator: poller wait test")
        .await
        .unwrap();
    let drained_at = Instant::now();
    // Every cycle's word on the nodes, until one node request after the drain's list is
    // answered (at least WAIT after it).
    let mut synced_at = Vec::new();
    let mut cycles = 0;
    let mut drained_seen: Option<Instant> = None;
    let started = Instant::now();
    loop {
        let state = next_cycle(&mut index).await;
        cycles += 1;
        synced_at.push(state.nodes_synced_at);
        if drained_seen.is_none() && state.nodes.get(&node).is_some_and(|n| n.state.is_drain()) {
            drained_seen = Some(Instant::now());
        }
        if let Some(seen) = drained_seen
            && timeline.nodes().iter().any(|(at, _)| *at > seen)
        {
            break;
        }
        assert!(
            started.elapsed() < TIMEOUT,
            "no node list after the drain's (seen {drained_seen:?}): {:?}",
            timeline.nodes()
        );
    }
    let seen = drained_seen.unwrap();
    eprintln!(
        "drain reached the index after {:?}",
        seen.duration_since(drained_at)
    );

    let requests: Vec<_> = timeline
        .nodes()
        .into_iter()
        .filter(|(at, _)| *at >= drained_at)
        .collect();
    let mut waits = 0;
    for pair in requests.windows(2) {
        let ((answered, status), (next, _)) = (pair[0], pair[1]);
        if status == Some(200) {
            waits += 1;
            let gap = next.duration_since(answered);
            assert!(
                gap >= WAIT,
                "a node list that changed, asked again after {gap:?}"
            );
        }
    }
    assert!(
        waits >= 1,
        "the drain's node list and one after it: {requests:?}"
    );
    // The cycles between asked nothing: as many cycles as node requests would mean none waited.
    assert!(
        requests.len() < cycles,
        "{} node requests over {cycles} cycles",
        requests.len()
    );
    // `nodes_synced_at` moves only with a node request.
    let mut moved = synced_at.clone();
    moved.dedup();
    assert!(
        moved.len() <= requests.len() + 1,
        "nodes_synced_at took {} values over {} node requests",
        moved.len(),
        requests.len()
    );
    let drained = index.borrow().nodes.get(&node).cloned().unwrap();
    assert_eq!(
        drained.reason.as_deref(),
        Some("slurm-operator: poller wait test")
    );
}

/// One of our jobs renamed by its owner to a Latin-1 name (`scontrol update JobName=M\xfcller`,
/// which any job's owner may do, whatever submitted it): slurmrestd writes the byte as it is.
/// When the job ends, the poller reads its record; that read used to fail to decode, and with
/// it the cycle's update of every job (the end never reached the index). Now it does, the name
/// read with U+FFFD, and the poller stays up.
#[tokio::test]
async fn a_job_renamed_in_latin1_does_not_stop_the_poll() {
    let slurm = require_slurm!();
    let client = slurm.client();
    let mut poller = start_local(&slurm);
    synced(&mut poller.index).await;
    let tag = slurm.our_tag(&common::unique("latin1"), 1);
    let ours = held_job(&slurm, "poller-latin1", Some(tag));
    let ours = client.submit_job(&ours).await.unwrap().job_id;
    let _cancel = CancelOnDrop::new(&slurm, vec![ours]);
    wait_index(&mut poller.index, "our job", TIMEOUT, |s| {
        s.jobs.contains_key(&ours).then_some(())
    })
    .await;

    slurm.rename_job_raw(ours, b"poller-M\xfcller");
    client.cancel_job(ours).await.unwrap();
    let state = wait_index(&mut poller.index, "our job's end", TIMEOUT, |s| {
        (s.jobs
            .get(&ours)
            .is_some_and(|j| j.state.base == JobBaseState::Cancelled))
        .then(|| s.clone())
    })
    .await;
    assert!(state.health.is_up(), "{:?}", state.health);
    let records = state.job_records(ours);
    assert_eq!(records[0].name, "poller-M\u{FFFD}ller", "{records:?}");
}

/// One job's record that cannot be read is that job's failure, not the poll's. Here an array of
/// ours whose 19 held tasks each have their own record (~150 KB, pretty-printed 24.11) against a
/// 64 KiB response limit: before, every cycle that asked for it failed, the cluster went down,
/// and no other job's change reached the index. Now the index names the record and why, keeps
/// what it knew of the array, and goes on: another job of ours is seen, and its end, and the
/// index stays synced (the array's owner is known: it does not hold back submits).
/// The most bytes the pollers of the large-record tests read in one answer.
const LIMIT: u64 = 64 * 1024;

/// Holds each task of held `array` (0-19) but the last: each becomes a record of its own, and
/// slurmctld answers `GET /job/{array}` with all of them, past [`LIMIT`].
async fn split_past_the_limit(slurm: &common::LocalSlurm, array: u32) {
    slurm.scontrol(&["hold", &format!("{array}_[0-18]")]);
    let newest = slurm.data_parsers.last().unwrap();
    let body = slurm.get_raw(&format!("/slurm/{newest}/job/{array}")).await;
    assert!(body.len() as u64 > LIMIT, "{} bytes", body.len());
}

/// A held array 0-19 named `name`, its comment `comment`, cancelled when the guard drops.
async fn held_array(
    slurm: &common::LocalSlurm,
    name: &str,
    comment: Option<String>,
) -> (u32, CancelOnDrop) {
    let mut request = held_job(slurm, name, comment);
    request.array = Some("0-19".into());
    let array = slurm.client().submit_job(&request).await.unwrap().job_id;
    (array, CancelOnDrop::new(slurm, vec![array]))
}

#[tokio::test]
async fn a_record_too_large_to_read_is_that_jobs_failure_not_the_polls() {
    let slurm = require_slurm!();
    let _large = LARGE_RECORDS.lock().await;
    let client = slurm.client();
    let tuning = poller::Tuning {
        // Our pending jobs' records are read again every second: the array's, once its tasks
        // are held one by one (a change the state listing does not show).
        pending_refresh_every: Duration::from_secs(1),
        ..poller::Tuning::default()
    };
    let mut poller = start_limited(&slurm, LIMIT, tuning);
    synced(&mut poller.index).await;
    let tag = slurm.our_tag(&common::unique("unread"), 1);
    let held = |name: &str| held_job(&slurm, name, Some(tag.clone()));
    let (array, _cancel_array) =
        held_array(&slurm, "poller-unreadable-array", Some(tag.clone())).await;
    wait_index(&mut poller.index, "the array", TIMEOUT, |s| {
        s.jobs.contains_key(&array).then_some(())
    })
    .await;
    split_past_the_limit(&slurm, array).await;

    let state = wait_index(
        &mut poller.index,
        "the array's record unreadable",
        TIMEOUT,
        |s| s.unreadable.get(&array).map(|u| (u.clone(), s.clone())),
    )
    .await;
    let (unreadable, state) = state;
    assert_eq!(unreadable.reason, "ResponseTooLarge", "{unreadable:?}");
    assert!(
        unreadable.message.contains("65536-byte limit"),
        "{unreadable:?}"
    );
    assert!(state.health.is_up(), "{:?}", state.health);
    assert!(
        state.jobs.contains_key(&array),
        "what the index knew is kept"
    );

    let submitted_at = chrono::Utc::now();
    let other = client
        .submit_job(&held("poller-unreadable-other"))
        .await
        .unwrap()
        .job_id;
    let _cancel_other = CancelOnDrop::new(&slurm, vec![other]);
    wait_index(&mut poller.index, "the other job", TIMEOUT, |s| {
        s.jobs.contains_key(&other).then_some(())
    })
    .await;
    client.cancel_job(other).await.unwrap();
    let state = wait_index(
        &mut poller.index,
        "the other job's end, synced",
        TIMEOUT,
        |s| {
            let ended = s
                .jobs
                .get(&other)
                .is_some_and(|j| j.state.base == JobBaseState::Cancelled);
            let synced = s.jobs_synced_at.is_some_and(|t| t > submitted_at);
            (ended && synced).then(|| s.clone())
        },
    )
    .await;
    assert!(state.health.is_up(), "{:?}", state.health);
    assert!(
        state.unreadable.contains_key(&array),
        "the array's record is still too large: {:?}",
        state.unreadable
    );
}

/// Issue 19: an incremental cycle's probe above the highest id seen stops after its rounds when
/// a burst goes on beyond; the next cycle goes on where it stopped. Here a probe of 8 ids a
/// cycle meets a burst of 24 of our jobs, and the newest of them is tracked at once (a SlurmJob
/// names it): the cycles are counted complete again only once every id of the burst has been
/// listed, so each of them is in the index by then. Before, the next probe began above the
/// tracked one, and the ids between were never listed (until the listing of every job, a
/// minute later), with the cycles counted complete.
#[tokio::test]
async fn a_probe_that_had_to_stop_goes_on_where_it_stopped() {
    let slurm = require_slurm!();
    let _bursts = BURSTS.lock().await;
    // Others' held jobs: enough for incremental cycles to pay (they follow at most a quarter
    // of the queue), whatever else the shared Slurm holds.
    let filler = submit_held(&slurm, "poller-probe-resume-others", 100, None).await;
    let _cancel_filler = CancelOnDrop::new(&slurm, filler);
    let tuning = poller::Tuning {
        probe_width: 8,
        probe_rounds: 1,
        full_every: Duration::from_secs(3_600),
        ..poller::Tuning::default()
    };
    // 8 ids a second: behind the burst, and through other tests' jobs well within `TIMEOUT`.
    let mut poller = start_tuned(&slurm, tuning);
    synced(&mut poller.index).await;
    let tag = slurm.our_tag(&common::unique("probe-resume"), 1);
    let burst = submit_held(&slurm, "poller-probe-resume", 24, Some(&tag)).await;
    let _cancel = CancelOnDrop::new(&slurm, burst.clone());
    let submitted_at = chrono::Utc::now();
    let newest = *burst.last().unwrap();
    poller.index.borrow().want(newest);
    let state = wait_index(
        &mut poller.index,
        "a complete cycle after the burst",
        TIMEOUT,
        |s| {
            s.jobs_synced_at
                .is_some_and(|t| t > submitted_at)
                .then(|| s.clone())
        },
    )
    .await;
    assert!(
        state.jobs_listed_up_to.is_some(),
        "an incremental cycle (a full listing lists every id)"
    );
    let missing: Vec<u32> = burst
        .iter()
        .copied()
        .filter(|id| !state.jobs.contains_key(id))
        .collect();
    assert!(
        missing.is_empty(),
        "complete, but {missing:?} of {burst:?} were never listed (listed up to {:?})",
        state.jobs_listed_up_to
    );
}

/// Issue 19: the first sync's walk down the newest jobs (accounting answers, so the rest of the
/// listing is skipped unfetched) meets a job of ours whose record is too large to read: a
/// moment-old array an earlier incarnation submitted, its tasks held one by one. Whose it is
/// stays to be found, not skipped with the queue: it is in the index's jobs or said unreadable,
/// never left unresolved as if accounting would show it (it may not yet: a resubmit would make
/// a second one). Before, the walk dropped it and the skip took it with the queue. Its tasks
/// read show whose it is: the index syncs all the same.
#[tokio::test]
async fn the_first_syncs_walk_skips_no_job_it_could_not_read() {
    let slurm = require_slurm!();
    let _bursts = BURSTS.lock().await;
    let _large = LARGE_RECORDS.lock().await;
    let tag = slurm.our_tag(&common::unique("walk-unread"), 1);
    let (array, _cancel_array) =
        held_array(&slurm, "poller-walk-unreadable-array", Some(tag)).await;
    split_past_the_limit(&slurm, array).await;

    // The walk may read every listed job (so the rest is skipped whether or not it gets to an
    // old one: other tests' jobs may all be recent); newest first, it reads the array's
    // record before any older job's.
    let tuning = poller::Tuning {
        detail_budget: 100_000,
        ..poller::Tuning::default()
    };
    let mut poller = start_limited(&slurm, LIMIT, tuning);
    let state = wait_index(&mut poller.index, "a synced index", TIMEOUT, |s| {
        (s.health.is_up() && s.jobs_synced_at.is_some()).then(|| s.clone())
    })
    .await;
    assert!(
        state.skipped_before.is_some(),
        "the local Slurm has accounting: the first sync skips"
    );
    assert!(
        state.jobs.contains_key(&array) || state.unreadable.contains_key(&array),
        "the array is neither read nor said unreadable: unresolved {}, unreadable {:?}",
        state.unresolved.contains(&array),
        state.unreadable
    );
}

/// Someone else's array whose record is too large to read (its tasks split off into records of
/// their own: slurmctld answers `GET /job/{array}` with all of them), met by a new poller of a
/// cluster that resolves every job it lists (no accounting). Its owner is known from any of its
/// task records, which are read one by one: the index syncs. Before, the array's record stayed
/// unresolved, and the index never counted as synced: every new SlurmJob of that cluster waited
/// until the array ended and left slurmctld.
#[tokio::test]
async fn another_users_array_too_large_to_read_does_not_hold_up_the_sync() {
    let slurm = require_slurm!();
    let _large = LARGE_RECORDS.lock().await;
    let (array, _cancel_array) = held_array(&slurm, "poller-foreign-unreadable-array", None).await;
    split_past_the_limit(&slurm, array).await;

    let tuning = poller::Tuning {
        skip_first_sync: false,
        ..poller::Tuning::default()
    };
    let mut poller = start_limited(&slurm, LIMIT, tuning);
    let state = wait_index(&mut poller.index, "a synced index", TIMEOUT, |s| {
        (s.health.is_up() && s.jobs_synced_at.is_some()).then(|| s.clone())
    })
    .await;
    assert!(
        !state.jobs.contains_key(&array),
        "someone else's array is not in the index's jobs"
    );
    assert!(
        !state.unreadable.contains_key(&array),
        "its record is no longer needed: {:?}",
        state.unreadable
    );
}
