//! Per-cluster pollers: list Slurm jobs and nodes every poll interval, keep the cluster's index
//! current (single writer), and emit [`SlurmEvent`]s for what changed.
//!
//! One cycle, every `interval` (measured from the start of the previous one):
//! 1. `GET /nodes?update_time=T`: HTTP 304 when no node changed, else every node. After a
//!    list that changed, the next waits in proportion to the nodes it listed
//!    ([`Tuning::nodes_wait`]: a few dozen nodes are asked every cycle, 1 000 every 10 s while
//!    they keep changing); meanwhile the index keeps its nodes and their `nodes_synced_at`.
//! 2. A full cycle (the first, after a failure, and while a cluster is too small for
//!    incremental cycles to pay): `GET /jobs/state/`, every job's id and state (~80 bytes per
//!    job). An incremental cycle: `GET /jobs/state/?job_id=..` for only the jobs it follows and
//!    a window of ids above the highest seen ([`strategy::followed`], [`strategy::probe`]).
//!    Between incremental cycles, the same full listing runs [`Tuning::full_every`] after the
//!    previous one answered (and when a node of a SlurmNodeSet changed state) beside them, not
//!    in one: at 100 000 jobs slurmrestd takes 15–82 s to answer it (hence its own timeout,
//!    `ClientConfig::listing_timeout`), which a cycle would wait for. The first cycle
//!    after its answer merges it; what the cycles saw since it was asked wins
//!    ([`strategy::overlay`]).
//! 3. `GET /job/{id}` for the few jobs that need their full record, or one `GET /jobs` on a small
//!    cluster when many do ([`strategy`] has the rules and the measurements behind them).
//! 4. The new [`ClusterState`] is computed ([`strategy::apply`]), published, and compared with
//!    the previous one ([`diff::diff`]); the events go out after the index is updated, so a
//!    reconcile woken by an event reads at least that state.
//!
//! A cycle is all or nothing: any failed request leaves jobs and nodes as they were, marks the
//! cluster `Down` (one `HealthChanged{up:false}`, however many failures follow), and polls back
//! off (exponential with jitter, capped). The first successful cycle after that resyncs: nodes
//! without `update_time`, the (always complete) state list of every job, and our jobs' records
//! fetched again, so nothing missed while down stays missed. (Other users' jobs need no more:
//! started, ended, new and purged ones show in the state list; what it does not show is caught by
//! the periodic refresh, as while up.) The index counts as synced again only when that is done.
//!
//! The first listing of a cluster with accounting fetches none of the jobs it lists but those
//! holding nodes ([`strategy::skip`]): one request to find out whether accounting answers,
//! then the requests grow with the operator's jobs, not with the queue. Later, a burst of others'
//! submits larger than a cycle's `detail_budget` is skipped the same way once its older jobs are
//! older than [`Tuning::recent`] (a catch-up), instead of being resolved a record at a time.
//!
//! One exception to "all or nothing": a job record slurmrestd answered that cannot be read
//! (larger than `maxResponseSize`, or not decodable) is that job's failure, not the cycle's
//! ([`SlurmError::is_unreadable_answer`]). The cycle goes on without it (ours and others' known
//! jobs keep what the index knew of them; one whose owner is unknown keeps the index incomplete,
//! [`strategy::unread_blocks_sync`]); it is published in [`ClusterState::unreadable`] and asked
//! again after a delay that doubles up to the down backoff's cap. Before, one such record marked
//! the cluster down and held back every other job's update (a job name that is not UTF-8 did,
//! until it was repaired in transport).

pub mod diff;
pub mod hostlist;
pub mod strategy;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

use crate::crd::SlurmCluster;
use crate::error_chain::Chain;
use crate::metrics::Metrics;
use crate::slurm::tag::TagKey;
use crate::slurm::types::{Changes, Job, JobStateEntry, Node};
use crate::slurm::{SlurmClient, SlurmError};
use crate::state::index::{
    ClusterState, Health, IndexReader, IndexWriter, ListingFailure, SlurmEvent, Unreadable, Wants,
    new_index,
};

use strategy::{Fetch, Fetched, Limits, Listed, Scope, Tracker};

/// How long after accounting did not answer (slurmdbd restarting, a timeout) the catch-up asks
/// it again: a cycle that asked each time would wait on it each time.
const ACCOUNTING_RETRY: Duration = Duration::from_secs(60);

/// What one accounting request tells of the cluster's accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Accounting {
    /// It answered (a record, or none for that id): it is there.
    Answers,
    /// This slurmrestd serves no accounting.
    Absent,
    /// No answer: nothing is known, asked again later.
    Unknown,
}

fn accounting_of<T>(answer: &Result<Option<T>, SlurmError>) -> Accounting {
    match answer {
        Ok(Some(_)) | Err(SlurmError::NotFound { .. }) => Accounting::Answers,
        Ok(None) => Accounting::Absent,
        Err(_) => Accounting::Unknown,
    }
}

/// Keep what an accounting request told (the poller's `has_accounting` and
/// `accounting_retry_at`): only an answer that this slurmrestd serves no accounting turns the
/// catch-up off for good; no answer (slurmdbd restarting, a timeout) puts the next question
/// [`ACCOUNTING_RETRY`] off, so that a cycle does not wait on it each time.
fn learned_accounting(
    has_accounting: &mut Option<bool>,
    retry_at: &mut Option<Instant>,
    accounting: Accounting,
) {
    match accounting {
        Accounting::Answers => {
            *has_accounting = Some(true);
            *retry_at = None;
        }
        Accounting::Absent => *has_accounting = Some(false),
        Accounting::Unknown => *retry_at = Some(Instant::now() + ACCOUNTING_RETRY),
    }
}

/// How a poller runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollerConfig {
    pub interval: Duration,
}

/// Knobs below the user-facing interval; the defaults suit clusters up to MaxJobCount (10 000).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tuning {
    /// Most `/job/{id}` requests per cycle; more needed records wait for the next cycles.
    pub detail_budget: usize,
    /// How many of them are in flight at once.
    pub detail_concurrency: usize,
    /// When a cycle needs more records than this and slurmctld holds at most
    /// `full_list_max_jobs` jobs, it lists all jobs in one request instead.
    pub list_all_above: usize,
    /// Decoding a full listing costs ~11 MiB of memory per 1 000 jobs: above this many jobs,
    /// records are fetched one by one (within the budget) instead.
    pub full_list_max_jobs: usize,
    /// How often ours not finished and every running job have their record fetched again, for
    /// what the state list does not show (pending reason, time limit, comment); and the node
    /// list asked without `update_time`.
    pub refresh_every: Duration,
    /// How often some of our pending jobs have their record fetched again, for why they wait,
    /// their priority and estimated start (Slurm's schedulers revise those every 30 s or so by
    /// default): at most `pending_refresh_batch` each time, in turn, so that a queue of
    /// thousands costs a few requests a minute, not one per job per cycle.
    pub pending_refresh_every: Duration,
    pub pending_refresh_batch: usize,
    /// How often every job's state is listed (purged jobs, other users' jobs that started, a
    /// requeue of one of ours that had ended, ids out of sequence), beside the incremental
    /// cycles, which ask only about what they follow: it bounds how late those show. Counted
    /// from the previous listing's answer, not its start: a listing slurmrestd takes longer to
    /// build than this (82 s at 100 000 jobs on Slurm 26.05, 2 cores) is not asked again at once.
    pub full_every: Duration,
    /// How many ids above the highest seen an incremental cycle asks about.
    pub probe_width: u32,
    /// Most windows one incremental cycle probes (a burst of submissions): past them the cycle
    /// does not count as complete, and the next one goes on from where it stopped.
    pub probe_rounds: usize,
    /// Most ids in one `/jobs/state/?job_id=..` request (the URL grows with them).
    pub state_batch: usize,
    /// Whether the first listing may skip jobs when the cluster has accounting (else every job
    /// is fetched, as a cluster without accounting needs).
    pub skip_first_sync: bool,
    /// The first listing still fetches the jobs numbered this long before it: accounting may
    /// not know them yet (slurmctld tells slurmdbd of a submit asynchronously), so it could not
    /// find one an earlier incarnation submitted just before it died. When more than
    /// `detail_budget` jobs are that recent, nothing is skipped.
    pub recent: Duration,
    /// More of this process's submits than this between two cycles make a burst: the records
    /// of its jobs still pending wait until a cycle sees fewer ([`strategy::Asks::held`]).
    pub submit_burst: usize,
    /// The longest a pending job's record waits for a burst of submits to pause.
    pub submit_hold: Duration,
    /// After a node list that changed, the next node request waits this long for each node it
    /// listed, and at most `nodes_wait_max`: slurmrestd has no filter finer than "changed
    /// since", so one changed node sends them all (measured on 24.11 with 1 003 nodes: 2.3 KiB
    /// and 0.17 ms of slurmrestd's CPU a node), and on a busy cluster some node changes every
    /// cycle. An unchanged answer costs nothing and does not delay the next request.
    pub nodes_wait_per_node: Duration,
    pub nodes_wait_max: Duration,
    /// An incremental cycle asks about a record that answers with more `/jobs/state/` entries
    /// than this (a pending array's meta record: one a task still to run) only in one cycle of
    /// every `entries / follow_entries` ([`strategy::asked_in_cycle`]).
    pub follow_entries: usize,
}

impl Tuning {
    /// How long the node list waits after one that listed `nodes` nodes.
    pub fn nodes_wait(&self, nodes: usize) -> Duration {
        self.nodes_wait_per_node
            .saturating_mul(u32::try_from(nodes).unwrap_or(u32::MAX))
            .min(self.nodes_wait_max)
    }
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            detail_budget: 256,
            detail_concurrency: 4,
            list_all_above: 16,
            full_list_max_jobs: 1_000,
            refresh_every: Duration::from_secs(300),
            pending_refresh_every: Duration::from_secs(30),
            pending_refresh_batch: 32,
            full_every: Duration::from_secs(60),
            probe_width: 64,
            probe_rounds: 16,
            state_batch: 256,
            skip_first_sync: true,
            recent: Duration::from_secs(60),
            submit_burst: 16,
            submit_hold: Duration::from_secs(10),
            // A few dozen nodes are listed every cycle at the default interval; 1 000 nodes every
            // 10 s when they keep changing; never older than the NodeSet controller's bound
            // on the index's age for a destructive decision (60 s).
            nodes_wait_per_node: Duration::from_millis(10),
            nodes_wait_max: Duration::from_secs(30),
            // About 5 KiB a cycle pretty-printed, 2.5 KiB compact: a pending array of 1 000
            // tasks asked every 15 cycles (7.5 s at the default interval).
            follow_entries: 64,
        }
    }
}

/// A running poller. Dropping it stops the poller (promptly: an ongoing request is abandoned).
#[derive(Debug)]
pub struct PollerHandle {
    cancel: CancellationToken,
}

impl Drop for PollerHandle {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Start the poller of `cluster`. Returns its handle and the read side of its index.
/// Must be called from within a Tokio runtime (without one, the index stays `Unknown`).
pub fn spawn(
    cluster: ObjectRef<SlurmCluster>,
    client: SlurmClient,
    config: &PollerConfig,
    key: TagKey,
    events: broadcast::Sender<SlurmEvent>,
    metrics: Arc<Metrics>,
) -> (PollerHandle, IndexReader) {
    spawn_tuned(
        cluster,
        client,
        config,
        key,
        Tuning::default(),
        events,
        metrics,
    )
}

/// [`spawn`] with explicit [`Tuning`].
pub fn spawn_tuned(
    cluster: ObjectRef<SlurmCluster>,
    client: SlurmClient,
    config: &PollerConfig,
    key: TagKey,
    tuning: Tuning,
    events: broadcast::Sender<SlurmEvent>,
    metrics: Arc<Metrics>,
) -> (PollerHandle, IndexReader) {
    let (writer, reader) = new_index();
    let cancel = CancellationToken::new();
    let span = tracing::info_span!(
        "poller",
        cluster = %cluster.name,
        namespace = cluster.namespace.as_deref().unwrap_or_default(),
    );
    let outputs = Outputs {
        writer,
        events,
        metrics,
    };
    let poller = Poller::new(cluster, client, config, key, tuning, outputs);
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(poller.run(cancel.clone()).instrument(span));
        }
        Err(error) => {
            span.in_scope(|| tracing::error!(%error, "no Tokio runtime: the poller cannot run"));
        }
    }
    (PollerHandle { cancel }, reader)
}

struct Poller {
    cluster: ObjectRef<SlurmCluster>,
    client: SlurmClient,
    interval: Duration,
    tuning: Tuning,
    writer: IndexWriter,
    events: broadcast::Sender<SlurmEvent>,
    metrics: Arc<Metrics>,
    /// Everyone's jobs as far as they are followed (the index holds only ours).
    tracker: Tracker,
    /// `update_time` for the next node list.
    nodes_since: Option<i64>,
    /// When the next node list may be asked.
    nodes_pace: NodePace,
    /// The next cycle must resync everything (startup, after a failure).
    resync: bool,
    refresh_due: Instant,
    pending_refresh_due: Instant,
    /// The highest id the last pending refresh marked: the next one goes on above it.
    pending_cursor: u32,
    /// Incremental cycles begun: whose turn it is among records of many entries
    /// ([`strategy::asked_in_cycle`]).
    cycles: u64,
    /// When the next cycle lists every job.
    full_due: Instant,
    /// A SlurmNodeSet's node changed state: the jobs on it may be other users' that the
    /// incremental cycles do not follow. The next job listing is full.
    full_now: bool,
    /// When the latest listing of every job began, until a complete cycle publishes it
    /// (`ClusterState::fully_listed_at`).
    full_pending: Option<DateTime<Utc>>,
    /// The listings beside the cycles have failed since the last that answered.
    listing_failure: Option<ListingFailure>,
    /// Where slurmctld's job numbering stands: incremental cycles probe above it.
    numbering: strategy::Numbering,
    /// How far slurmctld's clock is ahead of this machine's, at least, once read
    /// ([`controller_ahead`]).
    controller_ahead: Option<chrono::TimeDelta>,
    /// Whether the first listing is done.
    listed_once: bool,
    /// Whether the cluster's accounting answered the first listing's probe (`None`: that
    /// listing was empty, nothing asked, or no answer came). A catch-up skips jobs only when
    /// it answers (it asks again each time, or [`ACCOUNTING_RETRY`] after no answer), never on
    /// a cluster found without accounting.
    has_accounting: Option<bool>,
    /// When accounting may be asked again after it did not answer ([`ACCOUNTING_RETRY`]).
    accounting_retry_at: Option<Instant>,
    /// When the last listing that skipped jobs began (the first, or a catch-up after a burst).
    skipped_before: Option<DateTime<Utc>>,
    /// The readers' asks ([`ClusterState::want`]).
    wants: Arc<Wants>,
    /// Asks taken but not satisfied yet (a skipped job whose fetch was deferred).
    wanted: BTreeSet<u32>,
    /// The key tags are signed with: only a job it proves ours is followed as ours
    /// ([`strategy::Verdict`]).
    key: TagKey,
    /// Ids SlurmJobs follow through an unsigned, legacy tag (`ClusterState::follow_unsigned`),
    /// with their users, while slurmctld holds them: such a tag is taken for ours only on these
    /// ([`strategy::Verdict`]).
    named: strategy::Named,
    /// The ids this process's submits returned whose records were not read yet, and when the
    /// poller took each.
    submitted: BTreeMap<u32, Instant>,
    /// Delays while down; `None` while up.
    backoff: Option<ExponentialBackoff>,
    /// The periodic full listing, while it runs beside the incremental cycles.
    listing: Option<Listing>,
    /// Records that could not be read, and when each is asked again.
    unreadable: BTreeMap<u32, Unread>,
    /// Ids of a batch of records that failed to decode all together, and so failed a cycle
    /// ([`answers_unreadable`]): asked again, they are those jobs' failures, not the cycle's.
    failed_together: std::sync::Mutex<BTreeSet<u32>>,
    /// Whose arrays are whose, from their task records read
    /// ([`strategy::resolve_unreadable_arrays`]).
    array_owners: strategy::ArrayOwners,
}

/// Whether a batch of record reads says that this slurmrestd's answers, not some jobs' records,
/// cannot be read: several records failed to decode, and nothing else was `answered`. Not when
/// every one of them had failed before (`failed_before`: alone, or in such a batch): asked
/// again together (their retries fall due together, or they are new together, as a
/// heterogeneous job's parts), two jobs whose records cannot be read would take the cluster
/// down at every retry.
fn answers_unreadable(
    answered: bool,
    failed: &[(u32, SlurmError)],
    failed_before: impl Fn(u32) -> bool,
) -> bool {
    failed.len() > 1
        && !answered
        && failed
            .iter()
            .all(|(_, error)| matches!(error, SlurmError::Decode { .. }))
        && failed.iter().any(|(id, _)| !failed_before(*id))
}

/// [`answers_unreadable`] for a batch of record reads, the records that failed before being
/// those in `unreadable` and those of a batch judged so (`together`), which a batch judged so
/// joins: asked again, they are those jobs' failures.
fn judge_batch(
    answered: bool,
    failed: &[(u32, SlurmError)],
    unreadable: &BTreeMap<u32, Unread>,
    together: &mut BTreeSet<u32>,
) -> bool {
    let before = |id| unreadable.contains_key(&id) || together.contains(&id);
    if !answers_unreadable(answered, failed, before) {
        return false;
    }
    // Bounded: a slurmrestd whose answers cannot be read fails on every id.
    if together.len() > 4_096 {
        together.clear();
    }
    together.extend(failed.iter().map(|(id, _)| *id));
    true
}

/// How long an id this process's submit returned, which the poller knows as someone else's job
/// (slurmctld reused it after losing its state), is asked about until its record is read.
const REUSED_ID_READ_WITHIN: Duration = Duration::from_secs(300);

/// One job's record that could not be read ([`ClusterState::unreadable`]), and its next try.
#[derive(Debug)]
struct Unread {
    record: Unreadable,
    delay: Duration,
    due: Instant,
}

/// What became of the records asked for one at a time in a cycle.
#[derive(Debug, Default)]
struct Reads {
    /// Ids asked for (answered, gone, or failed below).
    asked: Vec<u32>,
    /// The ids whose answer could not be read, with why.
    failed: Vec<(u32, SlurmError)>,
    /// A listing of every record was read: no record is unreadable.
    all: bool,
}

/// When the next node list may be asked: slurmrestd sends every node when one changed, so after
/// such an answer the next waits [`Tuning::nodes_wait`]; after an unchanged one (HTTP 304,
/// nothing sent), none.
#[derive(Debug, Default)]
struct NodePace {
    due: Option<Instant>,
}

impl NodePace {
    fn due(&self, now: Instant) -> bool {
        self.due.is_none_or(|due| now >= due)
    }

    /// A node list answered at `now`: `listed` nodes when it changed, `None` when not.
    fn answered(&mut self, now: Instant, listed: Option<usize>, tuning: &Tuning) {
        if let Some(nodes) = listed {
            self.due = Some(now + tuning.nodes_wait(nodes));
        }
    }
}

/// A full listing of every job's state, run beside the incremental cycles rather than in one:
/// at 100 000 jobs slurmrestd takes 20 s and more to answer it, and a cycle waiting for it would
/// hold back every change meanwhile (issue 19). The first cycle after it is answered merges it
/// ([`strategy::overlay`]).
struct Listing {
    task: AbortOnDropHandle<(Result<Vec<JobStateEntry>, SlurmError>, Duration)>,
    /// When it was asked (for the metrics of a task that ended without an answer).
    started: Instant,
    /// When it was asked, as the index dates listings (`ClusterState::fully_listed_at`).
    asked_at: DateTime<Utc>,
    /// The ids the cycles since saw (asked, listed or fetched): the index's word on them is at
    /// least as new as the listing's.
    seen: BTreeSet<u32>,
}

/// What a successful cycle brought back.
struct Polled {
    /// `None`: no node changed since the last list, or none was asked.
    nodes: Option<(Vec<Node>, i64)>,
    /// When the node list was confirmed; `None`: not asked in this cycle.
    nodes_at: Option<DateTime<Utc>>,
    jobs: JobsPolled,
}

/// What a cycle's job listing speaks for ([`Scope`]).
enum Spoken {
    /// Every job: a full listing in the cycle.
    All,
    /// The ids an incremental cycle asked about.
    Asked(BTreeSet<u32>),
    /// Every job but these: a full listing that ran beside the cycles, merged into this one.
    AllBut(BTreeSet<u32>),
}

impl Spoken {
    fn scope(&self) -> Scope<'_> {
        match self {
            Self::All => Scope::All,
            Self::Asked(asked) => Scope::Only(asked),
            Self::AllBut(unspoken) => Scope::AllBut(unspoken),
        }
    }
}

/// What a walk down the newest jobs brought back ([`Poller::walk`]).
#[derive(Debug, Default)]
struct Walked {
    /// The records read.
    records: Vec<Job>,
    /// Whether it got down to a job old enough for accounting to know every lower id, and
    /// accounting showed that job.
    reached: bool,
    /// The job it got down to, which accounting did not show: it is behind (or not answering),
    /// and is asked again only after [`ACCOUNTING_RETRY`].
    unconfirmed: Option<u32>,
    /// The requests made.
    requests: usize,
    /// The jobs whose record could not be read. Whose they are is unknown (one an earlier
    /// incarnation submitted, that accounting does not show yet, may be among them), so they
    /// are not skipped: left unresolved, the cycles ask for them, and the index is not complete
    /// while one of them is not read.
    unread: BTreeSet<u32>,
}

impl Walked {
    /// Of `ids`, those the skip may take: all but the unread.
    fn skippable<'a>(
        &'a self,
        ids: impl Iterator<Item = &'a u32> + 'a,
    ) -> impl Iterator<Item = u32> + 'a {
        ids.copied().filter(|id| !self.unread.contains(id))
    }
}

/// Whether an accounting answer for `job_id` shows that job. slurmrestd answers an id slurmdbd
/// has no record of with none (and a warning "found nothing"), not an error.
fn shows(answer: &Result<Option<Vec<Job>>, SlurmError>, job_id: u32) -> bool {
    matches!(answer, Ok(Some(jobs)) if jobs.iter().any(|job| job.job_id == job_id))
}

/// A walk that accounting did not confirm puts the catch-up's next walk off (the poller's
/// `accounting_retry_at`): it would be the same requests each cycle, while slurmdbd works off
/// its backlog.
fn put_off_unconfirmed(retry_at: &mut Option<Instant>, walked: &Walked) {
    if walked.unconfirmed.is_some() {
        *retry_at = Some(Instant::now() + ACCOUNTING_RETRY);
    }
}

/// The job half of a cycle.
struct JobsPolled {
    listed: BTreeMap<u32, Listed>,
    listed_at: DateTime<Utc>,
    fetched: Fetched,
    /// Nothing needed for a complete index was left for later cycles.
    complete: bool,
    /// Requests made for jobs.
    requests: usize,
    /// What the listing speaks for.
    spoken: Spoken,
    /// An incremental listing's highest probed id.
    probed_to: Option<u32>,
    /// Whether its probe got to the end of the ids (false: a burst goes on beyond).
    probe_complete: bool,
    /// When the full listing this cycle holds began: the cycle's own, or the one beside the
    /// cycles it merged. `None`: it holds none.
    fully_listed_at: Option<DateTime<Utc>>,
    /// The tracker the plan was made on, when it is not the poller's (the first listing of a
    /// poller that skips, or a catch-up that skipped a backlog of others' new jobs).
    base: Option<Tracker>,
    reads: Reads,
}

/// Where a poller's findings go: its index, the event channel, the metrics.
struct Outputs {
    writer: IndexWriter,
    events: broadcast::Sender<SlurmEvent>,
    metrics: Arc<Metrics>,
}

impl Poller {
    fn new(
        cluster: ObjectRef<SlurmCluster>,
        client: SlurmClient,
        config: &PollerConfig,
        key: TagKey,
        tuning: Tuning,
        outputs: Outputs,
    ) -> Self {
        let Outputs {
            writer,
            events,
            metrics,
        } = outputs;
        let interval = config.interval.max(Duration::from_millis(10));
        let wants = writer.borrow().wants.clone();
        Self {
            cluster,
            client,
            interval,
            refresh_due: Instant::now() + tuning.refresh_every,
            pending_refresh_due: Instant::now() + tuning.pending_refresh_every,
            pending_cursor: 0,
            cycles: 0,
            full_due: Instant::now() + tuning.full_every,
            full_now: true,
            full_pending: None,
            listing_failure: None,
            numbering: strategy::Numbering::default(),
            controller_ahead: None,
            listed_once: false,
            has_accounting: None,
            accounting_retry_at: None,
            skipped_before: None,
            wants,
            wanted: BTreeSet::new(),
            key,
            named: strategy::Named::new(),
            submitted: BTreeMap::new(),
            tuning,
            writer,
            events,
            metrics,
            tracker: Tracker::new(),
            nodes_since: None,
            nodes_pace: NodePace::default(),
            resync: true,
            backoff: None,
            listing: None,
            unreadable: BTreeMap::new(),
            failed_together: std::sync::Mutex::default(),
            array_owners: strategy::ArrayOwners::new(),
        }
    }

    async fn run(mut self, cancel: CancellationToken) {
        tracing::debug!(interval = ?self.interval, "poller started");
        let mut next = Instant::now();
        loop {
            tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                () = tokio::time::sleep_until(next) => {}
            }
            let started = Instant::now();
            let outcome = tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                outcome = self.cycle() => outcome,
            };
            let delay = self.settle(outcome, started);
            next = (started + delay).max(Instant::now());
        }
        self.metrics
            .unreadable_job_records(&self.cluster.name, None);
        tracing::debug!("poller stopped");
    }

    /// One poll: nodes, then jobs. Nothing is applied here.
    async fn cycle(&mut self) -> Result<Polled, SlurmError> {
        if Instant::now() >= self.refresh_due {
            strategy::mark_refresh(&mut self.tracker);
            // The node list unfiltered too: slurmrestd weighs `update_time` against slurmctld's
            // clock, and a change made while that clock was behind the last answer's (stepped
            // back, a backup controller taking over) is hidden from every filtered question
            // until some later change, while each "unchanged" answer confirms the old list.
            self.nodes_since = None;
            self.refresh_due = Instant::now() + self.tuning.refresh_every;
        }
        if Instant::now() >= self.pending_refresh_due {
            self.pending_cursor = strategy::mark_pending_refresh(
                &mut self.tracker,
                self.pending_cursor,
                self.tuning.pending_refresh_batch,
            );
            self.pending_refresh_due = Instant::now() + self.tuning.pending_refresh_every;
        }
        let (nodes, nodes_at) = if self.resync || self.nodes_pace.due(Instant::now()) {
            let (nodes, at) = self.poll_nodes().await?;
            (nodes, Some(at))
        } else {
            (None, None)
        };

        let started = Instant::now();
        let jobs = self.poll_jobs().await;
        self.metrics
            .polled_cluster(&self.cluster.name, "jobs", started.elapsed(), jobs.is_ok());
        Ok(Polled {
            nodes,
            nodes_at,
            jobs: jobs?,
        })
    }

    /// The node list if any node changed since the last one, and when it was confirmed.
    async fn poll_nodes(
        &mut self,
    ) -> Result<(Option<(Vec<Node>, i64)>, DateTime<Utc>), SlurmError> {
        let since = if self.resync { None } else { self.nodes_since };
        // Taken before the request: the list shows every node change made before this instant
        // (a drain the NodeSet controller marked before it: `plan::leave`).
        let asked_at = Utc::now();
        let started = Instant::now();
        let nodes = self.client.nodes(since).await;
        self.metrics.polled_cluster(
            &self.cluster.name,
            "nodes",
            started.elapsed(),
            nodes.is_ok(),
        );
        let nodes = match nodes? {
            Changes::Unchanged => None,
            Changes::Changed { items, as_of } => {
                if strategy::owned_nodes_moved(&self.writer.borrow().nodes, &items) {
                    self.full_now = true;
                }
                Some((items, as_of))
            }
        };
        let listed = nodes.as_ref().map(|(items, _)| items.len());
        self.nodes_pace
            .answered(Instant::now(), listed, &self.tuning);
        Ok((nodes, asked_at))
    }

    async fn poll_jobs(&mut self) -> Result<JobsPolled, SlurmError> {
        self.wanted.extend(self.wants.take());
        let unsigned = self.wants.take_unsigned();
        // New, or given for another user (the namespace remapped).
        let new_names = unsigned
            .iter()
            .filter(|(id, user)| self.named.get(id) != Some(user));
        if new_names.clone().next().is_some() {
            let index = self.writer.borrow().clone();
            let tasks = strategy::renamed_arrays(new_names, &index.jobs, &mut self.array_owners);
            self.wanted.extend(tasks);
        }
        self.wanted.extend(unsigned.keys());
        self.named.extend(unsigned);
        // A full listing in the cycle: the first, after a failure, on a cluster too small (or
        // with too many of ours) for incremental cycles to pay, and where slurmrestd does not
        // serve `/jobs/state/` (each incremental question would read every job). The periodic
        // one runs beside the cycles ([`Listing`]).
        let full = self.resync
            || !self.listed_once
            || !self.client.serves_job_states()
            || !strategy::incremental_pays(
                &self.tracker,
                strategy::followed(&self.tracker, &self.wanted).len(),
                self.tuning.probe_width,
            );
        // Taken before the request: a job submitted before this instant is in the listing, so
        // a job missing from it was gone when the listing began (`plan::gone` relies on it).
        let listed_at = Utc::now();
        let (listed, spoken, probed_to, mut requests, probe_complete, fully_listed_at) = if full {
            // One running beside is older than this one.
            self.listing = None;
            let listed = strategy::group(self.client.all_job_states().await?);
            (listed, Spoken::All, None, 1, true, Some(listed_at))
        } else {
            if self.listing.is_none() && (self.full_now || Instant::now() >= self.full_due) {
                self.start_listing();
            }
            self.cycles = self.cycles.wrapping_add(1);
            let (listed, asked, probed_to, requests, complete) = self.list_followed().await?;
            match self.landed().await {
                Some((full, seen, asked_at)) => {
                    // Every id up to the listing's highest was listed: a probe that stopped
                    // below it goes on above it.
                    let probed_to = probed_to.max(full.keys().next_back().copied().unwrap_or(0));
                    let (listed, unspoken) = strategy::overlay(full, listed, &seen, &asked);
                    let spoken = Spoken::AllBut(unspoken);
                    let at = Some(asked_at);
                    (listed, spoken, Some(probed_to), requests + 1, complete, at)
                }
                None => (
                    listed,
                    Spoken::Asked(asked),
                    Some(probed_to),
                    requests,
                    complete,
                    None,
                ),
            }
        };
        // Taken after the listing: a job it shows whose submit has returned meanwhile is
        // known to be ours.
        let (submitted, held) = self.take_submitted();
        let now = Instant::now();
        let waiting: BTreeSet<u32> = self
            .unreadable
            .iter()
            .filter(|(_, unread)| unread.due > now)
            .map(|(id, _)| *id)
            .collect();
        let arrays_of_ours = strategy::arrays_of_ours(&self.array_owners);
        let asks = strategy::Asks {
            wanted: &self.wanted,
            submitted: &submitted,
            held: &held,
            waiting: &waiting,
            arrays_of_ours: &arrays_of_ours,
        };
        let mut base = None;
        let mut recent = Vec::new();
        let mut budget = self.tuning.detail_budget;
        if !self.listed_once
            && self.tuning.skip_first_sync
            && let Some(highest) = listed.keys().next_back()
        {
            requests += 1;
            let answers = self.accounting_answers(*highest).await;
            learned_accounting(
                &mut self.has_accounting,
                &mut self.accounting_retry_at,
                answers,
            );
            if answers == Accounting::Answers {
                let newest: Vec<u32> = listed
                    .keys()
                    .rev()
                    .take(self.tuning.detail_budget.max(1))
                    .copied()
                    .collect();
                let (ahead, read) =
                    controller_ahead(&self.client, &mut self.controller_ahead).await;
                requests += read;
                let walked = self.walk(&newest, listed_at, ahead).await?;
                requests += walked.requests;
                put_off_unconfirmed(&mut self.accounting_retry_at, &walked);
                // Every listed job is recent: nothing to skip, and every record fetched.
                if walked.reached || newest.len() == listed.len() {
                    let mut tracker = self.tracker.clone();
                    strategy::skip(&mut tracker, &listed, walked.skippable(listed.keys()));
                    base = Some(tracker);
                    recent = walked.records;
                }
            }
        } else if self.listed_once
            && self.has_accounting != Some(false)
            && self.tuning.skip_first_sync
            && self
                .accounting_retry_at
                .is_none_or(|at| Instant::now() >= at)
        {
            // A burst of others' submits beyond what one cycle fetches: resolved one by one, a
            // hundred thousand of them would take minutes of cycles (and hold off every
            // submit: the index is not complete meanwhile). Once the older ones are older than
            // `recent`, they are skipped as the first listing skips, on the same grounds.
            // (Not on a small cluster: one listing of every record resolves them all.)
            let backlog = strategy::backlog(&self.tracker, &listed, asks);
            let large = self.tracker.len().max(listed.len()) > self.tuning.full_list_max_jobs;
            if large && backlog.len() > self.tuning.detail_budget {
                requests += 1;
                let answer = self.client.accounting_job(backlog[0]).await;
                let answers = accounting_of(&answer);
                if let Err(error) = &answer
                    && answers == Accounting::Unknown
                {
                    tracing::warn!(%error, "accounting did not answer: others' new jobs are resolved one by one meanwhile");
                }
                learned_accounting(
                    &mut self.has_accounting,
                    &mut self.accounting_retry_at,
                    answers,
                );
                if answers == Accounting::Answers {
                    // Half the budget for the walk: the plan below keeps the rest, for ours.
                    let half = (self.tuning.detail_budget / 2).max(1);
                    let newest = &backlog[..half.min(backlog.len())];
                    let (ahead, read) =
                        controller_ahead(&self.client, &mut self.controller_ahead).await;
                    requests += read;
                    let walked = self.walk(newest, listed_at, ahead).await?;
                    requests += walked.requests;
                    put_off_unconfirmed(&mut self.accounting_retry_at, &walked);
                    budget = budget.saturating_sub(walked.requests).max(1);
                    if walked.reached {
                        let mut tracker = self.tracker.clone();
                        strategy::skip(&mut tracker, &listed, walked.skippable(backlog.iter()));
                        base = Some(tracker);
                        tracing::info!(
                            skipped = backlog.len(),
                            "others' new jobs beyond the cycle's budget skipped; accounting finds ours among them"
                        );
                    }
                    // Not reached (the burst is still recent): the records resolve the newest.
                    recent = walked.records;
                }
            }
        }
        let tracker = base.as_ref().unwrap_or(&self.tracker);
        let limits = Limits {
            detail_budget: budget,
            // Not while a record is unreadable: the listing of every record holds it too.
            list_all_above: if self.unreadable.is_empty() {
                self.tuning.list_all_above
            } else {
                usize::MAX
            },
            full_list_max_jobs: self.tuning.full_list_max_jobs,
        };
        let mut plan = strategy::plan(tracker, &listed, asks, limits, tracker.len());
        if plan.deferred > 0 {
            tracing::debug!(
                deferred = plan.deferred,
                held = held.len(),
                "job records left for the next cycles"
            );
        }
        let mut reads = Reads::default();
        let mut fetched = Fetched::Nothing;
        let mut fetches = 0;
        if plan.fetch == Fetch::Full {
            fetches += 1;
            match self.client.jobs(None).await {
                Ok(Changes::Changed { items, .. }) => {
                    reads.all = true;
                    fetched = Fetched::Full(items);
                }
                Ok(Changes::Unchanged) => {
                    return Err(SlurmError::Decode {
                        operation: "jobs",
                        detail: "a listing without update_time answered \"unchanged\"".into(),
                    });
                }
                // One large record (an array's finished tasks) makes the listing of every record
                // too large: read them one at a time, and so find which.
                Err(error) if error.is_unreadable_answer() => {
                    tracing::debug!(%error, "the listing of every job's record cannot be read; reading the records one by one");
                    let one_by_one = Limits {
                        list_all_above: usize::MAX,
                        ..limits
                    };
                    plan = strategy::plan(tracker, &listed, asks, one_by_one, tracker.len());
                }
                Err(error) => return Err(error),
            }
        }
        if let Fetch::Details(ids) = &plan.fetch {
            fetches += ids.len();
            reads.asked.clone_from(ids);
            let (details, failed) = self.details(ids.clone()).await?;
            reads.failed = failed;
            fetched = details;
        }
        let unread_blocks = reads
            .failed
            .iter()
            .any(|(id, _)| strategy::unread_blocks_sync(tracker, asks, *id));
        // The walk's records join the fetch (a full listing has them already).
        if !recent.is_empty() {
            fetched = match fetched {
                Fetched::Nothing => Fetched::Details {
                    records: recent,
                    missing: Vec::new(),
                },
                Fetched::Details {
                    mut records,
                    missing,
                } => {
                    records.extend(recent);
                    Fetched::Details { records, missing }
                }
                full @ Fetched::Full(_) => full,
            };
        }
        Ok(JobsPolled {
            listed,
            listed_at,
            fetched,
            complete: plan.complete && probe_complete && !unread_blocks,
            requests: requests + fetches,
            spoken,
            probed_to,
            probe_complete,
            fully_listed_at,
            base,
            reads,
        })
    }

    /// The ids this process submitted whose records were not read yet, and those of them whose
    /// read waits this cycle: while more submits than `submit_burst` came since the last cycle,
    /// those taken less than `submit_hold` ago.
    fn take_submitted(&mut self) -> (BTreeSet<u32>, BTreeSet<u32>) {
        let now = Instant::now();
        let fresh = self.wants.take_submitted();
        let burst = fresh.len() > self.tuning.submit_burst;
        let index = self.writer.borrow().clone();
        for (id, uid) in &fresh {
            strategy::submit_returned(&mut self.tracker, &index.jobs, *id, uid);
            self.submitted.entry(*id).or_insert(now);
        }
        let held = if burst {
            self.submitted
                .iter()
                .filter(|(_, at)| now.duration_since(**at) < self.tuning.submit_hold)
                .map(|(id, _)| *id)
                .collect()
        } else {
            BTreeSet::new()
        };
        (self.submitted.keys().copied().collect(), held)
    }

    /// Ask for every job's state, beside the cycles ([`Listing`]).
    fn start_listing(&mut self) {
        // Before the request can go out: a job submitted before it is in the listing.
        let asked_at = Utc::now();
        let client = self.client.clone();
        let task = tokio::spawn(
            async move {
                let started = Instant::now();
                (client.all_job_states().await, started.elapsed())
            }
            .instrument(tracing::Span::current()),
        );
        self.listing = Some(Listing {
            task: AbortOnDropHandle::new(task),
            started: Instant::now(),
            asked_at,
            seen: BTreeSet::new(),
        });
        // The next is due from when this one answers ([`Self::landed`]): a listing slower
        // than `full_every` is not asked again the moment it lands.
        self.full_now = false;
    }

    /// The listing running beside the cycles, once answered, with the ids the cycles saw since
    /// it was asked. The next is due `full_every` from now. A failed one is only logged: the
    /// cycles go on, and the next is due as usual.
    async fn landed(&mut self) -> Option<(BTreeMap<u32, Listed>, BTreeSet<u32>, DateTime<Utc>)> {
        if !self.listing.as_ref()?.task.is_finished() {
            return None;
        }
        let Listing {
            task,
            started,
            asked_at,
            seen,
        } = self.listing.take()?;
        self.full_due = Instant::now() + self.tuning.full_every;
        let (answer, elapsed) = match task.await {
            Ok(done) => done,
            Err(error) => {
                // A panic: counted as a failed listing, as an error answer is.
                self.metrics.polled_cluster(
                    &self.cluster.name,
                    "job_listing",
                    started.elapsed(),
                    false,
                );
                tracing::warn!(%error, "the full job listing's task failed");
                self.listing_failed(
                    "InternalError",
                    format!("the listing's task failed: {error}"),
                );
                return None;
            }
        };
        self.metrics
            .polled_cluster(&self.cluster.name, "job_listing", elapsed, answer.is_ok());
        match answer {
            Ok(entries) => {
                self.listing_failure = None;
                Some((strategy::group(entries), seen, asked_at))
            }
            Err(error) => {
                tracing::warn!(%error, "the periodic full job listing failed; the next is due as usual");
                self.listing_failed(error.category(), Chain(&error).to_string());
                None
            }
        }
    }

    /// Note a failed listing of every job ([`ClusterState::listing_failure`]).
    fn listing_failed(&mut self, reason: &'static str, message: String) {
        let since = self
            .listing_failure
            .as_ref()
            .map_or_else(Utc::now, |f| f.since);
        self.listing_failure = Some(ListingFailure {
            reason,
            message,
            since,
        });
    }

    /// Whether the cluster's accounting answers (one request): only then may the first sync
    /// skip jobs, since accounting is what finds a job an earlier incarnation submitted without
    /// recording it. Anything but an answer means no skip this time.
    async fn accounting_answers(&self, job_id: u32) -> Accounting {
        let answer = self.client.accounting_job(job_id).await;
        let accounting = accounting_of(&answer);
        match (accounting, answer) {
            (Accounting::Absent, _) => {
                tracing::info!("no accounting: the first sync fetches every job's record");
            }
            (Accounting::Unknown, Err(error)) => {
                tracing::warn!(%error, "accounting did not answer: the first sync fetches every job's record");
            }
            _ => {}
        }
        accounting
    }

    /// The records of `newest` (job ids, newest first), fetched in that order down to one
    /// numbered longer than `recent` before `listed_at` on slurmctld's clock
    /// ([`strategy::walk_cutoff`], [`strategy::reached`]): accounting has had time to learn of
    /// every lower id, and is asked to show that one.
    async fn walk(
        &self,
        newest: &[u32],
        listed_at: DateTime<Utc>,
        controller_ahead: Option<chrono::TimeDelta>,
    ) -> Result<Walked, SlurmError> {
        // slurmctld's clock unknown: no job is old enough to stop at, every one is fetched.
        let cutoff = strategy::walk_cutoff(listed_at, controller_ahead, self.tuning.recent)
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let mut walked = Walked::default();
        for chunk in newest.chunks(self.tuning.detail_concurrency.max(1)) {
            walked.requests += chunk.len();
            let (fetched, failed) = self.details(chunk.to_vec()).await?;
            walked.unread.extend(failed.into_iter().map(|(id, _)| id));
            let Fetched::Details { records: found, .. } = fetched else {
                continue;
            };
            // Accounting is asked once: not confirmed, the walk reads on (every record of
            // `newest`, as one that stops nowhere).
            let stop = strategy::reached(&found, cutoff).filter(|_| walked.unconfirmed.is_none());
            walked.records.extend(found);
            if let Some(stop) = stop {
                // Old enough is not enough: slurmdbd may be working off a backlog (it was
                // down), and a job of ours among those skipped, which no listing shows again,
                // would be searched for in accounting in vain and submitted twice. Accounting
                // learns of jobs in the order slurmctld numbers them: if it shows this one, it
                // knows every lower id.
                walked.requests += 1;
                let answer = self.client.accounting_job(stop).await;
                if shows(&answer, stop) {
                    walked.reached = true;
                    return Ok(walked);
                }
                walked.unconfirmed = Some(stop);
                let error = answer.err();
                tracing::warn!(
                    job_id = stop,
                    error = error.as_ref().map(tracing::field::display),
                    "accounting does not show a job older than the walk's cut-off (behind, or not answering): nothing is skipped, every record is read"
                );
            }
        }
        Ok(walked)
    }

    /// An incremental listing: the states of the jobs followed and of the ids above the highest
    /// seen, window after window while the upper half of one holds jobs. Returns the listing,
    /// the ids asked, the highest probed, the requests made, and whether the probing ended
    /// (false: a burst of jobs is still beyond, for the next cycle).
    async fn list_followed(
        &self,
    ) -> Result<(BTreeMap<u32, Listed>, BTreeSet<u32>, u32, usize, bool), SlurmError> {
        let width = self.tuning.probe_width.max(2);
        let batch = self.tuning.state_batch.max(1);
        let mut numbering = self.numbering;
        numbering.seen(self.tracker.keys().next_back().copied().unwrap_or(0));
        let mut asked = strategy::asked_in_cycle(
            &self.tracker,
            &self.wanted,
            self.cycles,
            self.tuning.follow_entries,
        );
        let (mut window, before) = numbering.windows(width);
        asked.extend(window.clone());
        asked.extend(before.into_iter().flatten());
        let mut requests = 0;
        let mut entries = Vec::new();
        let ids: Vec<u32> = asked.iter().copied().collect();
        for chunk in ids.chunks(batch) {
            entries.extend(self.client.jobs_state(chunk).await?);
            requests += 1;
        }
        let mut rounds = 1;
        let complete = loop {
            let top = entries
                .iter()
                .map(|e| e.job_id)
                .filter(|id| window.contains(id))
                .max();
            // The upper half of the window is empty: the sequence ends there.
            if top.is_none_or(|top| top < window.start().saturating_add(width / 2)) {
                break true;
            }
            if rounds >= self.tuning.probe_rounds.max(1) || *window.end() == u32::MAX {
                break false;
            }
            window = strategy::probe(*window.end(), width);
            asked.extend(window.clone());
            let ids: Vec<u32> = window.clone().collect();
            entries.extend(self.client.jobs_state(&ids).await?);
            requests += 1;
            rounds += 1;
        };
        Ok((
            strategy::group(entries),
            asked,
            *window.end(),
            requests,
            complete,
        ))
    }

    /// The records of `ids`, a few requests at a time. A job slurmctld no longer knows is missing,
    /// not an error. A record slurmrestd answered that cannot be read
    /// ([`SlurmError::is_unreadable_answer`]) is returned beside them: one job's failure, not
    /// the cycle's. Any other error fails the cycle.
    async fn details(
        &self,
        ids: Vec<u32>,
    ) -> Result<(Fetched, Vec<(u32, SlurmError)>), SlurmError> {
        type Answer = Result<Option<Vec<Job>>, SlurmError>;
        let answers: Vec<(u32, Answer)> = futures::stream::iter(ids)
            .map(|id| async move {
                match self.client.job(id).await {
                    Ok(records) => Ok((id, Ok(Some(records)))),
                    Err(SlurmError::NotFound { .. }) => Ok((id, Ok(None))),
                    Err(error) if error.is_unreadable_answer() => Ok((id, Err(error))),
                    Err(error) => Err(error),
                }
            })
            .buffer_unordered(self.tuning.detail_concurrency.max(1))
            .try_collect()
            .await?;
        let mut records = Vec::new();
        let mut missing = Vec::new();
        let mut failed = Vec::new();
        for (id, answer) in answers {
            match answer {
                Ok(Some(found)) => records.extend(found),
                Ok(None) => missing.push(id),
                Err(error) => failed.push((id, error)),
            }
        }
        let answered = !records.is_empty() || !missing.is_empty();
        let unreadable_answers = judge_batch(
            answered,
            &failed,
            &self.unreadable,
            &mut self
                .failed_together
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        if unreadable_answers {
            return Err(failed.swap_remove(0).1);
        }
        failed.sort_unstable_by_key(|(id, _)| *id);
        Ok((Fetched::Details { records, missing }, failed))
    }

    /// Apply a cycle's outcome: publish the new index, then its events. Returns the delay until
    /// the next cycle.
    fn settle(&mut self, outcome: Result<Polled, SlurmError>, started: Instant) -> Duration {
        let old = self.writer.borrow().clone();
        let now = Utc::now();
        let (new, delay) = match outcome {
            Ok(polled) => {
                let was_resync = self.resync;
                let JobsPolled {
                    listed,
                    listed_at,
                    fetched,
                    complete,
                    requests,
                    spoken,
                    probed_to,
                    probe_complete,
                    fully_listed_at,
                    base,
                    reads,
                } = polled.jobs;
                let full = matches!(spoken, Spoken::All);
                let skipped = base.is_some();
                if let Some(at) = fully_listed_at {
                    self.full_pending = Some(self.full_pending.map_or(at, |p| p.max(at)));
                }
                // Moved, not copied: `apply` updates it in place.
                let previous = base.unwrap_or_else(|| std::mem::take(&mut self.tracker));
                if let Some(running) = &mut self.listing {
                    // What this cycle saw is newer than what the listing beside it may say.
                    let asked = match &spoken {
                        Spoken::Asked(asked) => Some(asked),
                        Spoken::All | Spoken::AllBut(_) => None,
                    };
                    strategy::saw(asked, &listed, &fetched, &mut running.seen);
                }
                let verdict = strategy::Verdict {
                    key: &self.key,
                    named: &self.named,
                };
                strategy::note_array_owners(&fetched, &mut self.array_owners, verdict);
                let (tracker, jobs) = strategy::apply(
                    previous,
                    &old.jobs,
                    &listed,
                    fetched,
                    spoken.scope(),
                    verdict,
                );
                let node_jobs = strategy::node_jobs(&tracker, &jobs);
                self.tracker = tracker;
                note_reads(
                    &mut self.unreadable,
                    reads,
                    &self.tracker,
                    self.interval,
                    (now, Instant::now()),
                );
                for id in strategy::resolve_unreadable_arrays(
                    &mut self.tracker,
                    self.unreadable.keys().copied(),
                    &self.array_owners,
                ) {
                    tracing::info!(
                        job_id = id,
                        "the array's record is too large to read, but its tasks are someone \
                         else's: so is the array"
                    );
                    self.unreadable.remove(&id);
                }
                strategy::keep_array_owners(&mut self.array_owners, &self.tracker, &jobs);
                let unreadable: BTreeMap<u32, Unreadable> = self
                    .unreadable
                    .iter()
                    .map(|(id, unread)| (*id, unread.record.clone()))
                    .collect();
                self.metrics
                    .unreadable_job_records(&self.cluster.name, Some(unreadable.len()));
                let tracker = &self.tracker;
                strategy::keep_named(&mut self.named, tracker, &jobs);
                // Asks are done once the job is resolved, or slurmctld does not hold it; one
                // named through an unsigned tag, once read as ours.
                let verdict = strategy::Verdict {
                    key: &self.key,
                    named: &self.named,
                };
                self.wanted
                    .retain(|id| strategy::still_wanted(*id, tracker, &jobs, verdict));
                // A submitted job not listed yet (its submit returned after the listing) is
                // kept for as long as its record could be held. One known as someone else's
                // (slurmctld reused the id) is kept until its record is read, which a cycle
                // short of budget may leave for later: for a while, not for good.
                let hold = self.tuning.submit_hold;
                self.submitted.retain(|id, at| match self.tracker.get(id) {
                    Some(t) => match t.known {
                        strategy::Known::Unresolved => true,
                        strategy::Known::Foreign { .. } => at.elapsed() < REUSED_ID_READ_WITHIN,
                        _ => false,
                    },
                    None => at.elapsed() < hold,
                });
                self.listed_once = true;
                if skipped {
                    self.skipped_before = Some(listed_at);
                }
                if full {
                    self.listing_failure = None;
                    self.full_now = false;
                    self.full_due = Instant::now() + self.tuning.full_every;
                }
                if !matches!(spoken, Spoken::Asked(_)) {
                    // From the listing itself: lower after a wrap of slurmctld's ids, or after
                    // the newest jobs were purged.
                    self.numbering
                        .listed(listed.keys().next_back().copied().unwrap_or(0));
                }
                self.numbering
                    .seen(self.tracker.keys().next_back().copied().unwrap_or(0));
                if let Some(to) = probed_to {
                    self.numbering.probed(to, probe_complete);
                }
                let unresolved = strategy::unresolved(&self.tracker);
                let nodes = match polled.nodes {
                    Some((items, as_of)) => {
                        // `as_of` is slurmctld's "now"; a change later in the same second would
                        // not count as newer than it: ask from a second earlier (a repeat is
                        // harmless, the diff is client-side).
                        self.nodes_since = Some(as_of.saturating_sub(1)).filter(|t| *t > 0);
                        Arc::new(items.into_iter().map(|n| (n.name.clone(), n)).collect())
                    }
                    None => old.nodes.clone(),
                };
                let health = match &old.health {
                    Health::Up { since } => Health::Up { since: *since },
                    _ => Health::Up { since: now },
                };
                if !old.health.is_up() {
                    tracing::info!(resync = was_resync, "slurmrestd is reachable");
                }
                self.resync = false;
                self.backoff = None;
                let new = ClusterState {
                    nodes,
                    // Unchanged maps keep their `Arc`: readers can tell cheaply.
                    jobs: if **old.jobs == jobs {
                        old.jobs.clone()
                    } else {
                        Arc::new(jobs.into())
                    },
                    node_jobs: if *old.node_jobs == node_jobs {
                        old.node_jobs.clone()
                    } else {
                        Arc::new(node_jobs)
                    },
                    jobs_total: self.tracker.len(),
                    nodes_synced_at: polled.nodes_at.or(old.nodes_synced_at),
                    poll_interval: self.interval,
                    jobs_synced_at: if complete {
                        Some(listed_at)
                    } else {
                        old.jobs_synced_at
                    },
                    jobs_listed_up_to: if complete {
                        probed_to
                    } else {
                        old.jobs_listed_up_to
                    },
                    // A listing's date waits for the first complete cycle from it on: that one
                    // has resolved every job the listing brought in.
                    fully_listed_at: if complete {
                        self.full_pending.take().or(old.fully_listed_at)
                    } else {
                        old.fully_listed_at
                    },
                    skipped_before: self.skipped_before,
                    unresolved: if *old.unresolved == unresolved {
                        old.unresolved.clone()
                    } else {
                        Arc::new(unresolved)
                    },
                    wants: old.wants.clone(),
                    unreadable: if *old.unreadable == unreadable {
                        old.unreadable.clone()
                    } else {
                        Arc::new(unreadable)
                    },
                    listing_failure: self.listing_failure.clone(),
                    health,
                    polls: old.polls + 1,
                };
                tracing::debug!(
                    // The node list's one or two requests are not counted here.
                    job_requests = requests,
                    full,
                    nodes_changed = !Arc::ptr_eq(&new.nodes, &old.nodes),
                    jobs_total = new.jobs_total,
                    tagged = new.jobs.len(),
                    complete,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "polled"
                );
                (new, self.interval)
            }
            Err(error) => {
                let reason = error.category();
                let message = error.to_string();
                let health = match &old.health {
                    Health::Down { since, .. } => {
                        tracing::debug!(%error, "slurmrestd still failing");
                        Health::Down {
                            since: *since,
                            reason,
                            message,
                        }
                    }
                    _ => {
                        tracing::warn!(%error, reason, "poll failed: cluster marked down");
                        Health::Down {
                            since: now,
                            reason,
                            message,
                        }
                    }
                };
                if !self.resync {
                    strategy::mark_resync(&mut self.tracker);
                    self.resync = true;
                }
                let cap = strategy::backoff_cap(self.interval);
                let delay = self
                    .backoff
                    .get_or_insert_with(|| {
                        ExponentialBuilder::default()
                            .with_min_delay(self.interval)
                            .with_max_delay(cap)
                            .with_jitter()
                            .without_max_times()
                            .build()
                    })
                    .next()
                    .unwrap_or(cap)
                    .min(cap);
                let new = ClusterState {
                    health,
                    polls: old.polls + 1,
                    poll_interval: self.interval,
                    ..(*old).clone()
                };
                (new, delay)
            }
        };
        let events = diff::diff(&self.cluster, &old, &new);
        self.writer.send_replace(Arc::new(new));
        for event in events {
            // No receiver is not an error: nobody is interested yet.
            let _ = self.events.send(event);
        }
        delay
    }
}

/// How far slurmctld's clock is ahead of this machine's, at least ([`ClockReading`]): read
/// once per poller into `cached` (clocks drift slowly), again after a read that told nothing.
/// Returns it and the requests made. A failed read is only logged: the walk then fetches every
/// record it may, as if nothing were old enough.
///
/// [`ClockReading`]: crate::slurm::types::ClockReading
async fn controller_ahead(
    client: &SlurmClient,
    cached: &mut Option<chrono::TimeDelta>,
) -> (Option<chrono::TimeDelta>, usize) {
    if cached.is_some() {
        return (*cached, 0);
    }
    match client.controller_clock().await {
        Ok(reading) => {
            let ahead = reading.controller_ahead_at_least();
            match ahead {
                // Worth an admin's look (NTP): job ages are read on slurmctld's clock.
                Some(a) if a.abs() >= chrono::TimeDelta::seconds(10) => tracing::warn!(
                    controller_ahead_s = a.num_seconds(),
                    "slurmctld's clock and this machine's differ: job ages are read on slurmctld's"
                ),
                Some(_) => {}
                None => tracing::warn!(
                    "slurmctld did not say its time: no job is skipped as old enough"
                ),
            }
            *cached = ahead;
            (ahead, 1)
        }
        Err(error) => {
            tracing::warn!(%error, "cannot read slurmctld's clock: no job is skipped as old enough");
            (None, 1)
        }
    }
}

/// Keeps `unreadable` up to date with a cycle's reads, at `now` (both clocks): a record read (or
/// gone) is no longer unreadable; one that failed again waits twice as long as before, from the
/// poll interval up to the down backoff's cap; jobs slurmctld no longer holds are forgotten.
fn note_reads(
    unreadable: &mut BTreeMap<u32, Unread>,
    reads: Reads,
    tracker: &Tracker,
    interval: Duration,
    now: (DateTime<Utc>, Instant),
) {
    let Reads { asked, failed, all } = reads;
    if all {
        unreadable.clear();
    }
    for id in asked {
        let failed_again = failed.iter().any(|(f, _)| *f == id);
        if !failed_again && unreadable.remove(&id).is_some() {
            tracing::info!(job_id = id, "a job record that could not be read was read");
        }
    }
    let cap = strategy::backoff_cap(interval);
    for (id, error) in failed {
        let reason = error.category();
        let message = error.to_string();
        let unread = unreadable.entry(id).or_insert_with(|| {
            tracing::warn!(
                job_id = id, reason, %error,
                "a job's record cannot be read: the poll goes on without it and asks again later"
            );
            Unread {
                record: Unreadable {
                    reason,
                    message: message.clone(),
                    since: now.0,
                },
                delay: Duration::ZERO,
                due: now.1,
            }
        });
        unread.record.reason = reason;
        unread.record.message = message;
        unread.delay = (unread.delay * 2).clamp(interval, cap);
        unread.due = now.1 + unread.delay;
    }
    unreadable.retain(|id, _| tracker.contains_key(id));
}

#[cfg(test)]
mod tests {
    /// Only an answer that there is no accounting turns the catch-up off for good: an error
    /// (slurmdbd restarting at the operator's start) leaves it to a later question.
    #[test]
    fn only_an_answer_says_there_is_no_accounting() {
        let unknown: Result<Option<()>, SlurmError> = Err(SlurmError::Timeout {
            operation: "slurmdb_job",
            timeout: Duration::from_secs(30),
        });
        assert_eq!(accounting_of(&unknown), Accounting::Unknown);
        assert_eq!(accounting_of(&Ok(None::<()>)), Accounting::Absent);
        assert_eq!(accounting_of(&Ok(Some(()))), Accounting::Answers);
        let not_found: Result<Option<()>, SlurmError> = Err(SlurmError::NotFound {
            kind: "job",
            name: "7".into(),
        });
        assert_eq!(accounting_of(&not_found), Accounting::Answers);

        // What the poller keeps: no answer changes nothing known, and puts the question off.
        let (mut has, mut retry_at) = (None, None);
        learned_accounting(&mut has, &mut retry_at, Accounting::Unknown);
        assert_eq!(has, None);
        assert!(retry_at.is_some_and(|at| at > Instant::now()));
        learned_accounting(&mut has, &mut retry_at, Accounting::Answers);
        assert_eq!((has, retry_at), (Some(true), None));
        learned_accounting(&mut has, &mut retry_at, Accounting::Unknown);
        assert_eq!(has, Some(true), "an answer from before stands");
        learned_accounting(&mut has, &mut retry_at, Accounting::Absent);
        assert_eq!(has, Some(false));
    }

    use super::*;

    /// The walk skips below its stop only when accounting shows that very job: slurmrestd
    /// answers an id slurmdbd has no record of yet (its backlog) with an empty list (200, the
    /// warning "found nothing": asked of 24.11 for an unknown id), which answers, but shows
    /// nothing.
    #[test]
    fn only_the_record_itself_confirms_the_walks_stop() {
        let record = |id| Job {
            job_id: id,
            ..Job::bare()
        };
        assert!(shows(&Ok(Some(vec![record(7)])), 7));
        assert!(!shows(&Ok(Some(vec![])), 7), "found nothing");
        assert!(!shows(&Ok(Some(vec![record(8)])), 7), "another job");
        assert!(!shows(&Ok(None), 7), "no accounting");
        let timeout = Err(SlurmError::Timeout {
            operation: "slurmdb_job",
            timeout: Duration::from_secs(30),
        });
        assert!(!shows(&timeout, 7));
        // Whereas for whether accounting is there at all, an empty answer is an answer.
        assert_eq!(
            accounting_of(&Ok::<_, SlurmError>(Some(Vec::<Job>::new()))),
            Accounting::Answers
        );
    }

    #[test]
    fn the_node_list_waits_in_proportion_to_the_nodes_it_sends() {
        let tuning = Tuning::default();
        // A SlurmCluster's default pollInterval.
        let interval = Duration::from_millis(500);
        // (nodes listed, the wait before the next node request)
        let table = [
            (0, Duration::ZERO),
            (3, Duration::from_millis(30)),
            (50, Duration::from_millis(500)),
            (1_000, Duration::from_secs(10)),
            (3_000, Duration::from_secs(30)),
            (100_000, Duration::from_secs(30)),
            (usize::MAX, Duration::from_secs(30)),
        ];
        for (nodes, wait) in table {
            assert_eq!(tuning.nodes_wait(nodes), wait, "{nodes} nodes");
        }
        // A small cluster's nodes are asked every cycle at the default interval.
        assert!(tuning.nodes_wait(50) <= interval);
    }

    #[test]
    fn only_a_node_list_that_changed_delays_the_next() {
        let tuning = Tuning::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut pace = NodePace::default();
        assert!(pace.due(t0), "the first list is asked at once");
        pace.answered(t0, Some(1_000), &tuning);
        assert!(!pace.due(t0 + ms(9_999)));
        assert!(pace.due(t0 + ms(10_000)));
        // Unchanged (nothing sent): the next cycle asks again.
        let t1 = t0 + ms(10_000);
        pace.answered(t1, None, &tuning);
        assert!(pace.due(t1 + ms(1)));
        // Three nodes changed: a wait shorter than any poll interval.
        pace.answered(t1, Some(3), &tuning);
        assert!(!pace.due(t1 + ms(29)));
        assert!(pace.due(t1 + ms(30)));
    }

    /// Several records that do not decode, and nothing else answered, is slurmrestd's answers
    /// failing; not when each of them had failed before (two jobs' bad records, retried
    /// together, took the cluster down at every retry).
    #[test]
    fn only_new_failures_to_decode_say_the_answers_cannot_be_read() {
        let decode = || SlurmError::Decode {
            operation: "job",
            detail: "expected value".into(),
        };
        let failed = [(5, decode()), (6, decode())];
        let never = |_| false;
        assert!(answers_unreadable(false, &failed, never));
        assert!(!answers_unreadable(true, &failed, never), "something read");
        assert!(!answers_unreadable(false, &failed[..1], never), "one job's");
        assert!(!answers_unreadable(false, &failed, |id| id == 5 || id == 6));
        assert!(answers_unreadable(false, &failed, |id| id == 5), "6 is new");
        let too_large = (
            7,
            SlurmError::ResponseTooLarge {
                operation: "job",
                limit: 1024,
            },
        );
        assert!(!answers_unreadable(
            false,
            &[(5, decode()), too_large],
            never
        ));
        // New together (a heterogeneous job's parts): the cycle fails once; asked again, they
        // are those jobs' failures.
        let mut together = BTreeSet::new();
        let none = BTreeMap::new();
        assert!(judge_batch(false, &failed, &none, &mut together));
        assert!(!judge_batch(false, &failed, &none, &mut together));
        let with_new = [(5, decode()), (9, decode())];
        assert!(
            judge_batch(false, &with_new, &none, &mut together),
            "9 is new"
        );
    }

    #[test]
    fn an_unreadable_record_is_asked_again_later_each_time_and_forgotten_once_read() {
        let interval = Duration::from_secs(1);
        let cap = strategy::backoff_cap(interval);
        let tracker: Tracker = [5, 6, 7]
            .into_iter()
            .map(|id| {
                let t = strategy::Tracked {
                    state: crate::slurm::types::JobState::default(),
                    entries: 1,
                    known: strategy::Known::Ours,
                    stale: strategy::Stale::No,
                };
                (id, t)
            })
            .collect();
        let too_large = || SlurmError::ResponseTooLarge {
            operation: "job",
            limit: 1024,
        };
        let failing = |ids: &[u32]| Reads {
            asked: ids.to_vec(),
            failed: ids.iter().map(|id| (*id, too_large())).collect(),
            all: false,
        };
        let (t0, i0) = (Utc::now(), Instant::now());
        let mut unreadable = BTreeMap::new();
        note_reads(
            &mut unreadable,
            failing(&[5, 6]),
            &tracker,
            interval,
            (t0, i0),
        );
        assert_eq!(unreadable.keys().copied().collect::<Vec<_>>(), [5, 6]);
        assert_eq!(unreadable[&5].record.reason, "ResponseTooLarge");
        assert!(unreadable[&5].record.message.contains("1024-byte limit"));
        assert_eq!(
            unreadable[&5].due,
            i0 + interval,
            "the first wait is one interval"
        );
        // Failing again: the wait doubles, up to the cap; `since` stays the first failure's.
        let mut waits = Vec::new();
        for n in 1..=8 {
            let at = i0 + interval * n;
            note_reads(
                &mut unreadable,
                failing(&[5]),
                &tracker,
                interval,
                (Utc::now(), at),
            );
            waits.push(unreadable[&5].due - at);
        }
        let s = Duration::from_secs;
        assert_eq!(waits[..4], [s(2), s(4), s(8), s(10)]);
        assert!(waits.iter().all(|w| *w <= cap), "{waits:?}");
        assert_eq!(unreadable[&5].record.since, t0);
        // Read (6), and gone from slurmctld (7 never failed; 5 leaves the tracker).
        let read = Reads {
            asked: vec![6, 7],
            ..Reads::default()
        };
        note_reads(&mut unreadable, read, &tracker, interval, (t0, i0));
        assert_eq!(unreadable.keys().copied().collect::<Vec<_>>(), [5]);
        let purged: Tracker = Tracker::new();
        note_reads(
            &mut unreadable,
            Reads::default(),
            &purged,
            interval,
            (t0, i0),
        );
        assert!(unreadable.is_empty());
        // A listing of every record read them all.
        note_reads(&mut unreadable, failing(&[6]), &tracker, interval, (t0, i0));
        let all = Reads {
            all: true,
            ..Reads::default()
        };
        note_reads(&mut unreadable, all, &tracker, interval, (t0, i0));
        assert!(unreadable.is_empty());
    }

    #[tokio::test]
    async fn dropping_the_handle_stops_the_poller() {
        // Nothing listens on port 9: every poll fails, and the task runs until cancelled.
        let config = crate::slurm::ClientConfig::new("http://127.0.0.1:9")
            .unwrap()
            .allow_plaintext(true)
            .with_retry(crate::slurm::RetryPolicy::none());
        let credentials = Arc::new(
            crate::slurm::Credentials::minted(vec![1; 32], "slurm", Duration::from_secs(60))
                .unwrap(),
        );
        let client = SlurmClient::new(config, credentials).unwrap();
        let (events, mut rx) = broadcast::channel(16);
        let (handle, mut index) = spawn(
            ObjectRef::new("c1"),
            client,
            &PollerConfig {
                interval: Duration::from_millis(20),
            },
            TagKey::ephemeral(),
            events,
            Metrics::new(),
        );
        index.changed().await.unwrap();
        assert!(matches!(
            index.borrow().health,
            Health::Down {
                reason: "Unreachable",
                ..
            }
        ));
        // The interval the SlurmNodeSets' trust in the node list follows.
        assert_eq!(index.borrow().poll_interval, Duration::from_millis(20));
        assert_eq!(
            rx.recv().await.unwrap(),
            SlurmEvent::HealthChanged {
                cluster: ObjectRef::new("c1"),
                up: false
            }
        );
        drop(handle);
        // The task ends and drops the index's writer.
        tokio::time::timeout(Duration::from_secs(2), async {
            while index.changed().await.is_ok() {}
        })
        .await
        .expect("the poller stopped");
        // It never reported down twice.
        while let Ok(event) = rx.try_recv() {
            assert!(
                !matches!(event, SlurmEvent::HealthChanged { up: false, .. }),
                "{event:?}"
            );
        }
    }
}
