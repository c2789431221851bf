//! The shared in-memory view of each Slurm cluster, and the change events derived from it.
//!
//! One writer per cluster (its poller) replaces the whole [`ClusterState`] behind an `Arc` on every
//! poll; readers (reconcilers) take the current `Arc` from a `watch` channel and never block on
//! I/O or on the writer. Controllers read Slurm state from here; only actions call slurmrestd.
//!
//! What the index holds, and why that much and no more (10 000 jobs and 1 000 nodes fit in a few
//! MiB):
//! - every node, in full ([`Node`] is small and the SlurmNodeSet controller needs all of it);
//! - the full record of every job that is **ours**: its comment is an ownership tag the
//!   operator's key proves ([`Job::ownership`]; an unsigned one only on a job a SlurmJob
//!   names), array tasks and a pending array's meta record included — of the jobs the poller
//!   resolved: all of them, except, on a cluster with accounting, the jobs of its first
//!   listing that nobody asked for ([`ClusterState::want`], [`ClusterState::unresolved`];
//!   issue 19);
//! - the record, as last read, of every job whose comment is a tag the key does not prove (a
//!   claim anyone can write): it costs the poller what an untagged job costs, and stays for
//!   the SlurmJob whose tag it copies to name (`TagNotAdopted`);
//! - of everyone else's jobs only what the SlurmNodeSet controller needs: per node, how many jobs run
//!   there and until when at the latest ([`NodeJobs`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::watch;

use crate::crd::SlurmCluster;
use crate::slurm::tag::OwnerTag;
use crate::slurm::types::{Job, Node};

/// What the poller of one cluster last saw.
#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    /// Every node slurmctld knows, by name.
    pub nodes: Arc<BTreeMap<String, Node>>,
    /// The jobs whose comment is an ownership tag, by Slurm job id: plain jobs, array task
    /// records and a pending array's meta record (whose `array_task_string` lists the tasks not
    /// started yet). Ours (the tag key proves them, or an unsigned tag on a job a SlurmJob
    /// names) are followed and up to date; the others are claims anyone can write, kept as
    /// last read with the state listed, for the SlurmJob whose tag they copy
    /// (`poller::strategy::Class`). Untagged jobs are not kept; see `node_jobs`.
    pub jobs: Arc<Jobs>,
    /// Per node, the jobs (anyone's) running on it. A node without an entry runs no job the
    /// poller knows of.
    pub node_jobs: Arc<BTreeMap<String, NodeJobs>>,
    /// How many job records slurmctld holds (anyone's, finished ones until MinJobAge included).
    pub jobs_total: usize,
    /// When the node list was last confirmed complete and error-free. Decisions that must fail
    /// closed (deleting a drained node's pod) require this to be recent.
    pub nodes_synced_at: Option<DateTime<Utc>>,
    /// When the job list was last confirmed complete and error-free: every job slurmctld holds
    /// was known, with its owner, and every one of ours up to date as of that time, but for jobs
    /// this process submitted and still pending, whose records may wait out a burst of submits
    /// ([`Self::submitted`]; they are in `unresolved` meanwhile). Looking for a job by its tag
    /// before submitting must wait for this (fail closed). It is when that listing *began*: a
    /// job submitted before it is in the listing.
    pub jobs_synced_at: Option<DateTime<Utc>>,
    /// `Some(n)`: the listing `jobs_synced_at` dates was incremental, and speaks only for the
    /// jobs the poller follows and the ids up to `n` (slurmctld numbers new jobs in sequence);
    /// a job above `n` it did not list may exist all the same. `None`: it spoke for every id.
    pub jobs_listed_up_to: Option<u32>,
    /// When the last complete listing of every job slurmctld holds began (not an incremental
    /// one): a job submitted before it is in the index, whatever its id (an incremental cycle
    /// speaks only for the ids it follows and probes). What a submit that got no answer may have
    /// made waits for one (`slurmjob::plan::past_doubt`).
    pub fully_listed_at: Option<DateTime<Utc>>,
    /// `Some(t)`: the poller's last listing that skipped other jobs instead of fetching them (the
    /// first, or a catch-up after a burst of others' submits; the cluster has accounting, which
    /// finds an earlier submit) began at `t`: a job submitted before `t` may carry our tag
    /// without being in `jobs`. Jobs submitted after it are resolved as they appear. `None`:
    /// every job was resolved.
    pub skipped_before: Option<DateTime<Utc>>,
    /// Ids slurmctld holds whose owner the poller has not resolved (skipped at the first sync,
    /// or not fetched yet): a SlurmJob naming one of them must wait for it ([`Self::want`]), not
    /// call its job gone.
    pub unresolved: Arc<BTreeSet<u32>>,
    /// Ids readers asked the poller for ([`Self::want`]); the same queue in every state the
    /// poller publishes.
    pub wants: Arc<Wants>,
    /// Jobs whose record slurmrestd answered but the operator could not read (too large, or
    /// not decodable), by id. The poller goes on without them, and tries each again later
    /// with a growing delay, rather than let one job's record stop every cycle.
    pub unreadable: Arc<BTreeMap<u32, Unreadable>>,
    /// The periodic listing of every job beside the incremental cycles has failed since it
    /// last answered: `fully_listed_at` stands still meanwhile, and what waits for it waits on
    /// while `health` may well be up.
    pub listing_failure: Option<ListingFailure>,
    pub health: Health,
    /// Poll cycles finished, successful or not, since the poller started.
    pub polls: u64,
    /// The poller's interval between cycles (the SlurmCluster's `spec.pollInterval`): the node
    /// list is never asked more often, so a view is as fresh as that allows.
    pub poll_interval: std::time::Duration,
}

impl ClusterState {
    /// How the periodic listing of every job fares.
    pub fn listing(&self) -> Listing {
        match (&self.listing_failure, self.fully_listed_at) {
            (Some(failure), _) => Listing::Failing(failure.clone()),
            (None, Some(_)) => Listing::Listed,
            (None, None) => Listing::NotYet,
        }
    }

    /// The jobs whose record cannot be read while their owner is unknown: while there is one,
    /// the job list is not complete (it may be an earlier submit of ours).
    pub fn unreadable_unresolved(&self) -> BTreeMap<u32, &Unreadable> {
        self.unreadable
            .iter()
            .filter(|(id, _)| self.unresolved.contains(id))
            .map(|(id, unread)| (*id, unread))
            .collect()
    }

    /// The records of job `job_id`: the job itself, and for an array (by its array job id) every
    /// task record and the meta record, by job id. Empty when the index does not hold it.
    pub fn job_records(&self, job_id: u32) -> Vec<&Job> {
        self.jobs.records(job_id)
    }

    /// The ids of our jobs carrying exactly `tag` (plain job ids, or array job ids), lowest first.
    pub fn tagged(&self, tag: &OwnerTag) -> Vec<u32> {
        self.jobs.tagged(tag).to_vec()
    }

    /// Our jobs carrying a tag of SlurmJob `uid` with a generation from `from` to `to`
    /// (inclusive), as (generation, job id), by generation then id: what [`Self::tagged`] gives
    /// for each of them, in one lookup however many generations the range spans.
    pub fn tagged_between(&self, uid: &str, from: i64, to: i64) -> Vec<(i64, u32)> {
        self.jobs.tagged_between(uid, from, to)
    }

    /// Ask the poller to follow job `job_id` from its next cycle on: fetch its record if it
    /// was skipped, and ask for its state even beyond the ids an incremental cycle probes (a
    /// job just submitted, or one a SlurmJob names after a restart).
    pub fn want(&self, job_id: u32) {
        self.wants.want(job_id);
    }

    /// [`Self::want`] for the id a submit of this process returned. The job is known to be
    /// ours without its record, so during a burst of submits the poller may read that record
    /// once the burst pauses (the job is in `unresolved` until then), sparing slurmctld and
    /// slurmrestd a request per job while they take the submits. `uid`: the SlurmJob it was
    /// submitted for.
    pub fn submitted(&self, job_id: u32, uid: &str) {
        self.wants.submitted(job_id, uid);
    }

    /// A SlurmJob follows `job_id` through an unsigned, legacy tag (a job the previous version
    /// submitted) as the Slurm user `user` its namespace runs as: the poller follows such a job
    /// as ours only once named so, and only while it runs as `user`; any Slurm user can write
    /// such a tag, so nothing else names it.
    pub fn follow_unsigned(&self, job_id: u32, user: &str) {
        self.wants.follow_unsigned(job_id, user);
    }

    /// Whether the last complete listing spoke for `job_id` (see `jobs_listed_up_to`).
    pub fn listed_up_to(&self, job_id: u32) -> bool {
        self.jobs_listed_up_to.is_none_or(|to| job_id <= to)
    }
}

/// Job ids readers want the poller to follow: a request queue from many readers to the one
/// writer, not state (the index stays single-writer). Bounded: past [`Wants::MAX`] ids a new
/// one is dropped, and its reader asks again on its next reconcile.
#[derive(Debug, Default)]
pub struct Wants(Mutex<Asked>);

#[derive(Debug, Default)]
struct Asked {
    wanted: BTreeSet<u32>,
    /// The ids this process's submits returned, with the uid of the SlurmJob each was
    /// submitted for, since the poller last took them.
    submitted: BTreeMap<u32, String>,
    /// The ids followed through an unsigned tag, with their users, since the poller last took
    /// them.
    unsigned: BTreeMap<u32, String>,
}

impl Wants {
    /// More than this many pending asks are not kept.
    pub const MAX: usize = 100_000;

    fn lock(&self) -> std::sync::MutexGuard<'_, Asked> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn want(&self, job_id: u32) {
        let mut asked = self.lock();
        if asked.wanted.len() < Self::MAX {
            asked.wanted.insert(job_id);
        }
    }

    /// A submit of this process for the SlurmJob `uid` returned `job_id`: wanted, and known to
    /// be ours.
    pub fn submitted(&self, job_id: u32, uid: &str) {
        let mut asked = self.lock();
        if asked.wanted.len() < Self::MAX {
            asked.wanted.insert(job_id);
        }
        if asked.submitted.len() < Self::MAX {
            asked.submitted.insert(job_id, uid.to_owned());
        }
    }

    /// See [`ClusterState::follow_unsigned`].
    pub fn follow_unsigned(&self, job_id: u32, user: &str) {
        let mut asked = self.lock();
        if asked.unsigned.len() < Self::MAX || asked.unsigned.contains_key(&job_id) {
            asked.unsigned.insert(job_id, user.to_owned());
        }
    }

    /// The ids followed through an unsigned tag, with their users, since the last take of them.
    pub fn take_unsigned(&self) -> BTreeMap<u32, String> {
        std::mem::take(&mut self.lock().unsigned)
    }

    /// Everything asked since the last take.
    pub fn take(&self) -> BTreeSet<u32> {
        std::mem::take(&mut self.lock().wanted)
    }

    /// The ids submitted since the last take of them, with their SlurmJobs' uids.
    pub fn take_submitted(&self) -> BTreeMap<u32, String> {
        std::mem::take(&mut self.lock().submitted)
    }
}

/// Our jobs by Slurm job id (read it as the map it derefs to), plus the two lookups every
/// SlurmJob step makes (by tag, by array job id), built once per poll that changed the jobs:
/// scanning the records instead cost each step O(jobs), so a resync of N SlurmJobs cost O(N²).
#[derive(Debug, Clone, Default)]
pub struct Jobs {
    by_id: BTreeMap<u32, Job>,
    /// Tag → the plain job ids and array job ids carrying it, sorted, no repeats. Ordered by
    /// uid, then generation: a SlurmJob's generations are one range ([`Jobs::tagged_between`]).
    by_tag: BTreeMap<OwnerTag, Vec<u32>>,
    /// Array job id → the job ids of its records (meta record and tasks), sorted.
    by_array: HashMap<u32, Vec<u32>>,
}

impl Jobs {
    /// See [`ClusterState::job_records`].
    pub fn records(&self, job_id: u32) -> Vec<&Job> {
        let mut ids: Vec<u32> = self.by_array.get(&job_id).cloned().unwrap_or_default();
        if let Err(at) = ids.binary_search(&job_id)
            && self.by_id.contains_key(&job_id)
        {
            ids.insert(at, job_id);
        }
        ids.iter().filter_map(|id| self.by_id.get(id)).collect()
    }

    /// See [`ClusterState::tagged`].
    pub fn tagged(&self, tag: &OwnerTag) -> &[u32] {
        self.by_tag.get(tag).map_or(&[], Vec::as_slice)
    }

    /// See [`ClusterState::tagged_between`].
    pub fn tagged_between(&self, uid: &str, from: i64, to: i64) -> Vec<(i64, u32)> {
        if from > to {
            return Vec::new();
        }
        self.by_tag
            .range(OwnerTag::new(uid, from)..=OwnerTag::new(uid, to))
            .flat_map(|(tag, ids)| ids.iter().map(|id| (tag.generation(), *id)))
            .collect()
    }
}

impl From<BTreeMap<u32, Job>> for Jobs {
    fn from(by_id: BTreeMap<u32, Job>) -> Self {
        let mut by_tag: BTreeMap<OwnerTag, Vec<u32>> = BTreeMap::new();
        let mut by_array: HashMap<u32, Vec<u32>> = HashMap::new();
        // Ascending job ids, so the lists of arrays' records come out sorted; a tag's ids (an
        // array's own id may be lower than a job listed before its tasks) are sorted and
        // deduplicated once at the end: anyone can write one tag on many jobs of their own,
        // and a search of the list at each push would cost the square of their number.
        for job in by_id.values() {
            if let Some(tag) = &job.owner {
                let ids = by_tag.entry(tag.clone()).or_default();
                let id = job.array_job_id.unwrap_or(job.job_id);
                if ids.last() != Some(&id) {
                    ids.push(id);
                }
            }
            if let Some(array) = job.array_job_id {
                by_array.entry(array).or_default().push(job.job_id);
            }
        }
        for ids in by_tag.values_mut() {
            ids.sort_unstable();
            ids.dedup();
        }
        Self {
            by_id,
            by_tag,
            by_array,
        }
    }
}

impl FromIterator<(u32, Job)> for Jobs {
    fn from_iter<I: IntoIterator<Item = (u32, Job)>>(iter: I) -> Self {
        BTreeMap::from_iter(iter).into()
    }
}

impl Deref for Jobs {
    type Target = BTreeMap<u32, Job>;

    fn deref(&self) -> &Self::Target {
        &self.by_id
    }
}

/// Equal when the records are: the lookups are derived from them.
impl PartialEq for Jobs {
    fn eq(&self, other: &Self) -> bool {
        self.by_id == other.by_id
    }
}

/// The jobs running on one node, anyone's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeJobs {
    /// Jobs running (or suspended) on the node; at least 1.
    pub running: u32,
    /// When the last of them reaches its time limit: the maximum over the running jobs of
    /// start time + time limit. `None` when one of them has no time limit (it may run forever).
    pub deadline: Option<DateTime<Utc>>,
}

/// Why one job's record could not be read ([`ClusterState::unreadable`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// A stable PascalCase category (`SlurmError::category`).
    pub reason: &'static str,
    pub message: String,
    /// The first failed read of this record, of the failures in a row.
    pub since: DateTime<Utc>,
}

/// How the poller's listing of every job fares ([`ClusterState::listing`]): what the
/// SlurmCluster's `JobsListed` condition says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listing {
    /// None has answered yet.
    NotYet,
    Listed,
    Failing(ListingFailure),
}

impl Listing {
    /// Whether the two say different things (a failure's time or text aside).
    pub fn differs(&self, other: &Self) -> bool {
        std::mem::discriminant(self) != std::mem::discriminant(other)
    }
}

/// Why the listing of every job has failed ([`ClusterState::listing_failure`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListingFailure {
    /// A stable PascalCase category (`SlurmError::category`) of the last failure.
    pub reason: &'static str,
    pub message: String,
    /// The first failure of those in a row.
    pub since: DateTime<Utc>,
}

/// Whether the poller can talk to slurmrestd.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Health {
    /// No poll has finished yet.
    #[default]
    Unknown,
    Up {
        since: DateTime<Utc>,
    },
    /// The last poll failed. `reason` is a stable PascalCase category (`SlurmError::category`).
    Down {
        since: DateTime<Utc>,
        reason: &'static str,
        message: String,
    },
}

impl Health {
    pub fn is_up(&self) -> bool {
        matches!(self, Self::Up { .. })
    }
}

/// Read side of one cluster's index. Cheap to clone.
pub type IndexReader = watch::Receiver<Arc<ClusterState>>;
/// Write side of one cluster's index: owned by exactly one poller.
pub type IndexWriter = watch::Sender<Arc<ClusterState>>;

/// A new, empty index.
pub fn new_index() -> (IndexWriter, IndexReader) {
    watch::channel(Arc::new(ClusterState::default()))
}

/// A change in a Slurm cluster that may need a reconcile. Emitted by each poller on its own
/// channel ([`crate::state::events`]), after the index shows the change; each controller maps the events it cares about to
/// its own objects. Exactly when each fires: `poller::diff`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlurmEvent {
    /// A job of `ClusterState::jobs` appeared, or changed in a way a controller would see
    /// (state, reason, exit, nodes, times, limit, comment, array tasks). `owner` is its
    /// ownership tag. Other users' jobs produce no job events.
    JobChanged {
        cluster: ObjectRef<SlurmCluster>,
        job_id: u32,
        owner: Option<OwnerTag>,
    },
    /// One of our jobs left the index: slurmctld no longer reports it (purged after MinJobAge),
    /// or its comment no longer carries our tag. `owner` is the last tag seen.
    JobGone {
        cluster: ObjectRef<SlurmCluster>,
        job_id: u32,
        owner: Option<OwnerTag>,
    },
    /// A node appeared, its record changed (state, reason, resources, ...), or the jobs running
    /// on it changed ([`NodeJobs`]: count or deadline).
    NodeChanged {
        cluster: ObjectRef<SlurmCluster>,
        node: String,
    },
    /// A node is no longer in slurmctld's node list.
    NodeGone {
        cluster: ObjectRef<SlurmCluster>,
        node: String,
    },
    /// The poller reached slurmrestd for the first time (`up: true`) or failed to at first
    /// (`up: false`), or lost or regained it; never repeated while it stays down. Regaining it
    /// means every object of the cluster should be reconciled (its events may have been missed).
    /// The registry sends `up: true` for one SlurmCluster too, when it joins a running poller or
    /// its credentials are rotated in place (`ClusterRegistry::upsert`).
    HealthChanged {
        cluster: ObjectRef<SlurmCluster>,
        up: bool,
    },
    /// The periodic listing of every job started failing (`failing: true`), or answered after
    /// failing or for the first time (`failing: false`): what the SlurmCluster's `JobsListed`
    /// condition says ([`ClusterState::listing_failure`]). Never repeated while it stays so.
    ListingChanged {
        cluster: ObjectRef<SlurmCluster>,
        failing: bool,
    },
}

impl SlurmEvent {
    pub fn cluster(&self) -> &ObjectRef<SlurmCluster> {
        match self {
            Self::JobChanged { cluster, .. }
            | Self::JobGone { cluster, .. }
            | Self::NodeChanged { cluster, .. }
            | Self::NodeGone { cluster, .. }
            | Self::HealthChanged { cluster, .. }
            | Self::ListingChanged { cluster, .. } => cluster,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::types::JobState;

    fn job(id: u32, array_job_id: Option<u32>, comment: &str) -> Job {
        Job {
            job_id: id,
            state: JobState::from_strings(&["PENDING"]),
            array_job_id,
            ..Job::bare().with_comment(comment)
        }
    }

    fn tag(text: &str) -> OwnerTag {
        OwnerTag::parse(text).unwrap()
    }

    #[test]
    fn records_and_tags_of_plain_jobs_and_arrays() {
        let a = "slurm.rs/uid=a,generation=1";
        let b = "slurm.rs/uid=b,generation=1";
        let state = ClusterState {
            jobs: Arc::new(
                [
                    job(3, None, a),
                    job(10, Some(10), b),
                    job(11, Some(10), b),
                    job(12, Some(10), b),
                    job(13, None, a),
                    // An array of a's whose own id is below its first task's, and tasks of it
                    // listed between other jobs: its id once, in order.
                    job(20, Some(2), a),
                    job(21, Some(9), b),
                    job(22, Some(2), a),
                ]
                .into_iter()
                .map(|j| (j.job_id, j))
                .collect(),
            ),
            ..ClusterState::default()
        };
        let ids = |records: Vec<&Job>| records.iter().map(|j| j.job_id).collect::<Vec<_>>();
        assert_eq!(ids(state.job_records(3)), vec![3]);
        assert_eq!(ids(state.job_records(10)), vec![10, 11, 12]);
        assert_eq!(ids(state.job_records(11)), vec![11]);
        assert!(state.job_records(99).is_empty());
        assert_eq!(
            state.tagged(&tag(a)),
            vec![2, 3, 13],
            "a duplicated tag shows each job once, lowest first"
        );
        assert_eq!(state.tagged(&tag(b)), vec![9, 10]);
        assert!(state.tagged(&tag("slurm.rs/uid=c,generation=1")).is_empty());
    }

    /// A SlurmJob's generations are one range of the tag lookup, and no other uid's, even one
    /// it is a prefix of.
    #[test]
    fn the_tags_of_a_range_of_generations() {
        let state = ClusterState {
            jobs: Arc::new(
                [
                    job(3, None, "slurm.rs/uid=a,generation=1"),
                    job(4, None, "slurm.rs/uid=a,generation=3"),
                    job(5, None, "slurm.rs/uid=ab,generation=2"),
                    job(6, None, "slurm.rs/uid=a,generation=3"),
                    job(7, Some(7), "slurm.rs/uid=a,generation=4"),
                    job(8, Some(7), "slurm.rs/uid=a,generation=4"),
                ]
                .into_iter()
                .map(|j| (j.job_id, j))
                .collect(),
            ),
            ..ClusterState::default()
        };
        assert_eq!(
            state.tagged_between("a", 1, 3),
            vec![(1, 3), (3, 4), (3, 6)]
        );
        assert_eq!(state.tagged_between("a", 2, 2), vec![]);
        assert_eq!(state.tagged_between("a", 4, 1), vec![]);
        assert_eq!(
            state.tagged_between("a", i64::MIN, i64::MAX),
            vec![(1, 3), (3, 4), (3, 6), (4, 7)],
            "an array once, by its array job id; not ab's"
        );
    }

    /// The precomputed lookups answer exactly what a scan of the records does, over many
    /// small job sets (plain jobs, arrays whose tasks have higher and lower ids than other
    /// jobs, shared and missing tags).
    #[test]
    fn lookups_agree_with_a_scan_of_the_records() {
        let scan_records = |jobs: &[Job], id: u32| -> Vec<u32> {
            let mut ids: Vec<u32> = jobs
                .iter()
                .filter(|j| j.job_id == id || j.array_job_id == Some(id))
                .map(|j| j.job_id)
                .collect();
            ids.sort_unstable();
            ids
        };
        let scan_tagged = |jobs: &[Job], tag: &str| -> Vec<u32> {
            let mut ids: Vec<u32> = jobs
                .iter()
                .filter(|j| j.comment.as_deref() == Some(tag))
                .map(|j| j.array_job_id.unwrap_or(j.job_id))
                .collect();
            ids.sort_unstable();
            ids.dedup();
            ids
        };
        let tags = ["slurm.rs/uid=a,generation=1", "slurm.rs/uid=b,generation=1"];
        // A small linear congruential generator: deterministic, no extra dependency.
        let mut seed: u64 = 7;
        let mut next = |below: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % below
        };
        for _ in 0..500 {
            let mut jobs: Vec<Job> = Vec::new();
            for _ in 0..next(8) {
                let id = 1 + next(12) as u32;
                if jobs.iter().any(|j| j.job_id == id) {
                    continue;
                }
                let array = match next(3) {
                    0 => Some(1 + next(12) as u32),
                    _ => None,
                };
                let mut record = job(id, array, tags[next(2) as usize]);
                if next(5) == 0 {
                    record.set_comment(None);
                }
                jobs.push(record);
            }
            let indexed: Jobs = jobs.iter().map(|j| (j.job_id, j.clone())).collect();
            for id in 0..=13 {
                let got: Vec<u32> = indexed.records(id).iter().map(|j| j.job_id).collect();
                assert_eq!(got, scan_records(&jobs, id), "records({id}) of {jobs:?}");
            }
            for tag in tags.iter().chain(&["slurm.rs/uid=c,generation=1"]) {
                assert_eq!(
                    indexed.tagged(&super::OwnerTag::parse(tag).unwrap()),
                    scan_tagged(&jobs, tag),
                    "{tag} in {jobs:?}"
                );
            }
        }
    }
}
