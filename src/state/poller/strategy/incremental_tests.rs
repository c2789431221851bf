//! Incremental cycles against full listings, over random histories of a simulated slurmctld
//! (issue 19). The poller's own steps ([`followed`], [`probe`], [`plan`], [`apply`]) run against
//! a model cluster where jobs, ours and others', are submitted (with gaps in the id sequence,
//! as rejected submits leave), start, end and are purged; a quarter of them are job arrays,
//! whose tasks start as records of their own, numbered in sequence, out of a pending meta
//! record that lists the tasks still to start (the last task takes the meta record); some
//! ended jobs are requeued. Some of ours from before the operator started carry the previous
//! version's unsigned tag: a SlurmJob that names one, and finds its record, names it to the
//! poller (`ClusterState::follow_unsigned`). Two pollers watch each history: one lists every job's state every
//! cycle (the reference), one lists incrementally with a full listing every few cycles. The
//! properties:
//! - after every cycle, both hold the same records of our jobs (what SlurmJobs read): all of
//!   ours submitted since the first listing, and those of the skipped ones SlurmJobs named
//!   (a skipped job that starts unnamed is found by the next full listing: it may be ours,
//!   but a SlurmJob that follows it names it); but for ours that had settled ([`settled`]),
//!   which incremental cycles no longer follow: their requeue or purge is late ([`Late`]);
//! - after every full listing, those late records are the reference's again, but for a job
//!   requeued that ran and ended in the same state in between (the documented limit);
//! - after every full listing, the two views hold the same jobs in the same states, resolved
//!   alike (but skipped jobs nobody named), and the same per-node counts of other users' jobs,
//!   which only a full listing brings up to date;
//! - a legacy job named so is read as ours in the next cycle, and followed as ours from then on
//!   while slurmctld holds it; a claim (a tag-shaped comment that proves nothing) never is.
//!
//! A seeded generator, like `index.rs`'s lookup test: deterministic, no extra dependency.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::DateTime;

use super::*;
use crate::slurm::tag::{OwnerTag, Ownership};
use crate::slurm::types::{Job, JobState, JobStateEntry};

/// The user the jobs of the model run as, ours among them.
const USER: &str = "alice";

/// The user some of the others' jobs with an unsigned tag run as.
const OTHER_USER: &str = "mallory";

/// The operator's tag key in the model.
fn key() -> &'static TagKey {
    static KEY: std::sync::LazyLock<TagKey> =
        std::sync::LazyLock::new(|| TagKey::new(&[9; 32]).unwrap());
    &KEY
}

/// A small linear congruential generator.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n.max(1)
    }
}

#[derive(Debug, Clone, Default)]
struct SimJob {
    state: &'static str,
    ours: bool,
    node: Option<u32>,
    started: Option<i64>,
    /// For a job array's records: the array's job id (the meta record's own id).
    array: Option<u32>,
    /// A task record's index.
    task: Option<u32>,
    /// A pending meta record's tasks still to start.
    pending_tasks: Vec<u32>,
    /// Ours, submitted by the previous version: its tag is unsigned.
    legacy: bool,
}

/// slurmctld as far as the poller sees it.
#[derive(Debug, Default)]
struct Sim {
    jobs: BTreeMap<u32, SimJob>,
    next_id: u32,
    clock: i64,
    /// Jobs requeued after they had ended.
    moved: BTreeSet<u32>,
    /// Jobs (an array by its id) whose comment is tag-shaped but proves nothing: someone
    /// else's jobs with an unsigned tag, or with a tag signed for another user.
    claimed: BTreeSet<u32>,
    /// Before the operator started (the first listing): a third of ours were submitted by the
    /// previous version, with unsigned tags.
    legacy_era: bool,
}

impl Sim {
    fn state(s: &str) -> JobState {
        JobState::from_strings(&[s])
    }

    /// Whether job `id` (which slurmctld holds) carries a claim: its array's, for a task.
    fn is_claim(&self, id: u32) -> bool {
        self.jobs
            .get(&id)
            .is_some_and(|j| self.claimed.contains(&j.array.unwrap_or(id)))
    }

    fn record(&self, id: u32) -> Option<Job> {
        let sim = self.jobs.get(&id)?;
        let mut job = Job {
            job_id: id,
            name: format!("job{id}"),
            state: Self::state(sim.state),
            nodes: sim.node.map(|n| format!("n{n}")),
            start_time: sim.started.and_then(|s| DateTime::from_timestamp(s, 0)),
            time_limit: Some(Duration::from_secs(600)),
            array_job_id: sim.array,
            array_task_id: sim.task,
            array_task_string: (!sim.pending_tasks.is_empty())
                .then(|| super::hostlist::task_ranges(&sim.pending_tasks)),
            ..Job::bare()
        };
        // An array's records all carry the array's tag.
        let owner = sim.array.unwrap_or(id);
        job.user_name = Some(USER.to_owned());
        let tag = OwnerTag::new(format!("u{owner}"), 1);
        if sim.ours && sim.legacy {
            job.set_comment(Some(tag.to_string()));
        } else if sim.ours {
            job.set_comment(Some(key().comment(&tag, USER)));
        } else if self.claimed.contains(&owner) && owner % 4 == 0 {
            // Half of them run as another user than ours.
            if owner % 8 == 0 {
                job.user_name = Some(OTHER_USER.to_owned());
            }
            job.set_comment(Some(tag.to_string()));
        } else if self.claimed.contains(&owner) {
            job.set_comment(Some(key().comment(&tag, "mallory")));
        } else {
            job.set_comment(Some("someone else's".into()));
        }
        Some(job)
    }

    /// A record's `/jobs/state/` entries: one per task still to start for a pending meta
    /// record, else one.
    fn entries(&self, id: u32) -> Vec<JobStateEntry> {
        let Some(sim) = self.jobs.get(&id) else {
            return Vec::new();
        };
        let entry = |task| JobStateEntry {
            job_id: id,
            array_task_id: task,
            state: Self::state(sim.state),
        };
        if sim.pending_tasks.is_empty() {
            vec![entry(sim.task)]
        } else {
            sim.pending_tasks.iter().map(|t| entry(Some(*t))).collect()
        }
    }

    /// The records an id names: an array's id brings every record of the array (its tasks'
    /// own ids included), as slurmrestd answers for it; another id, its one record.
    fn family(&self, id: u32) -> Vec<u32> {
        let members: Vec<u32> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.array == Some(id))
            .map(|(member, _)| *member)
            .collect();
        if members.is_empty() {
            self.jobs
                .contains_key(&id)
                .then_some(id)
                .into_iter()
                .collect()
        } else {
            members
        }
    }

    fn all_states(&self) -> Vec<JobStateEntry> {
        self.jobs.keys().flat_map(|id| self.entries(*id)).collect()
    }

    fn states(&self, ids: &BTreeSet<u32>) -> Vec<JobStateEntry> {
        let records: BTreeSet<u32> = ids.iter().flat_map(|id| self.family(*id)).collect();
        records.iter().flat_map(|id| self.entries(*id)).collect()
    }

    fn fetch(&self, fetch: Fetch) -> Fetched {
        match fetch {
            Fetch::Nothing => Fetched::Nothing,
            Fetch::Full => {
                Fetched::Full(self.jobs.keys().filter_map(|id| self.record(*id)).collect())
            }
            Fetch::Details(ids) => {
                let mut records = Vec::new();
                let mut missing = Vec::new();
                for id in ids {
                    let family = self.family(id);
                    if family.is_empty() {
                        missing.push(id);
                    }
                    records.extend(family.into_iter().filter_map(|m| self.record(m)));
                }
                records.sort_by_key(|r| r.job_id);
                records.dedup_by_key(|r| r.job_id);
                Fetched::Details { records, missing }
            }
        }
    }

    /// One random change.
    fn step(&mut self, rng: &mut Rng) {
        self.clock += 1;
        let ids: Vec<u32> = self.jobs.keys().copied().collect();
        let pick = |rng: &mut Rng| ids.get(rng.below(ids.len() as u64) as usize).copied();
        match rng.below(10) {
            0..=2 => {
                // Rejected submits use ids up: gaps of up to 3.
                self.next_id += 1 + rng.below(4) as u32;
                let ours = rng.below(3) == 0;
                // Half of the others' jobs carry a claim (from the id: the histories stay as
                // they were).
                if !ours && self.next_id.is_multiple_of(2) {
                    self.claimed.insert(self.next_id);
                }
                // One in four an array of 2 to 4 tasks: a meta record holding them all.
                let array = rng.below(4) == 0;
                self.jobs.insert(
                    self.next_id,
                    SimJob {
                        state: "PENDING",
                        ours,
                        legacy: ours && self.legacy_era && self.next_id.is_multiple_of(3),
                        array: array.then_some(self.next_id),
                        pending_tasks: if array {
                            (0..2 + rng.below(3) as u32).collect()
                        } else {
                            Vec::new()
                        },
                        ..SimJob::default()
                    },
                );
            }
            3..=4 => {
                let Some(id) = pick(rng) else { return };
                let node = Some(1 + rng.below(4) as u32);
                let clock = self.clock;
                let Some(job) = self.jobs.get_mut(&id).filter(|j| j.state == "PENDING") else {
                    return;
                };
                if job.pending_tasks.len() > 1 {
                    // A task starts as a record of its own, numbered in sequence; the meta
                    // record keeps the rest.
                    let task = job.pending_tasks.remove(0);
                    let started = SimJob {
                        state: "RUNNING",
                        node,
                        started: Some(clock),
                        task: Some(task),
                        pending_tasks: Vec::new(),
                        ..job.clone()
                    };
                    self.next_id += 1;
                    self.jobs.insert(self.next_id, started);
                } else {
                    // A plain job, or an array's last task, which takes the meta record.
                    if let Some(task) = job.pending_tasks.pop() {
                        job.task = Some(task);
                    }
                    job.state = "RUNNING";
                    job.node = node;
                    job.started = Some(clock);
                }
            }
            5..=6 => {
                if let Some(id) = pick(rng)
                    && let Some(job) = self.jobs.get_mut(&id)
                {
                    job.state = match job.state {
                        "RUNNING" => "COMPLETED",
                        "PENDING" => "CANCELLED",
                        other => other,
                    };
                    if job.state == "CANCELLED" && !job.pending_tasks.is_empty() {
                        // A cancelled meta record is one record of the tasks it held.
                        job.pending_tasks.clear();
                    }
                }
            }
            7 => {
                // An ended record is purged, or one in three requeued (not a meta record: a
                // cancelled array is one record of the tasks it held).
                if let Some(id) = pick(rng)
                    && let Some(job) = self
                        .jobs
                        .get_mut(&id)
                        .filter(|j| j.state != "PENDING" && j.state != "RUNNING")
                {
                    let meta = job.array == Some(id) && job.task.is_none();
                    if !meta && rng.below(3) == 0 {
                        job.state = "PENDING";
                        job.node = None;
                        job.started = None;
                        self.moved.insert(id);
                    } else {
                        self.jobs.remove(&id);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The pure half of a poller.
#[derive(Debug, Clone, Default, PartialEq)]
struct View {
    tracker: Tracker,
    jobs: BTreeMap<u32, Job>,
    numbering: Numbering,
    /// Ids of ours this poller's process submitted, records not read yet.
    submitted: BTreeSet<u32>,
    /// This cycle's submits make a burst: their records wait.
    hold: bool,
    /// Ids whose record cannot be read this cycle: asked for, neither answered nor missing
    /// (`Poller::details`).
    unreadable: BTreeSet<u32>,
    /// Ids whose record is not asked for this cycle: unreadable before, and their next try not
    /// due yet ([`Asks::waiting`]).
    waiting: BTreeSet<u32>,
    /// Records asked for that could not be read, over the view's life.
    failed: usize,
    /// Bounds other than [`LIMITS`].
    limits: Option<Limits>,
    /// Incremental cycles begun (`Poller::cycles`).
    cycles: u64,
    /// Whose arrays are whose, from their task records read (`Poller::array_owners`).
    array_owners: ArrayOwners,
    /// Unreadable meta records resolved from their tasks, over the view's life.
    resolved_arrays: usize,
    /// Ids SlurmJobs follow through an unsigned tag while the view tracks them
    /// (`Poller::named`): the legacy jobs of ours SlurmJobs named ([`View::name_unsigned`]).
    named: super::Named,
    /// Those asks still standing ([`still_wanted`]: until read as ours).
    unsigned_asks: BTreeSet<u32>,
    /// Every id ever named so (the model's record; the poller forgets a name once slurmctld
    /// no longer holds the job).
    ever_named: BTreeSet<u32>,
    /// Ids named for our user whose record runs as another ([`View::name_unsigned`]).
    stale_named: BTreeSet<u32>,
}

/// `Tuning::follow_entries`' default.
const FOLLOW_ENTRIES: usize = 64;

const LIMITS: Limits = Limits {
    detail_budget: 10_000,
    list_all_above: 10_000,
    full_list_max_jobs: 10_000,
};

impl View {
    /// The first listing of a poller that skips what it does not know.
    fn first(sim: &Sim) -> Self {
        let listed = group(sim.all_states());
        let mut tracker = Tracker::new();
        skip(&mut tracker, &listed, listed.keys().copied());
        let mut view = Self {
            tracker,
            ..Self::default()
        };
        view.settle(sim, listed, Scope::All, &BTreeSet::new());
        view
    }

    fn settle(
        &mut self,
        sim: &Sim,
        listed: BTreeMap<u32, Listed>,
        scope: Scope<'_>,
        wanted: &BTreeSet<u32>,
    ) {
        self.settle_seeing(sim, listed, scope, wanted, None);
    }

    /// [`View::settle`], adding what the cycle saw to `seen` (a full listing runs beside).
    fn settle_seeing(
        &mut self,
        sim: &Sim,
        listed: BTreeMap<u32, Listed>,
        scope: Scope<'_>,
        wanted: &BTreeSet<u32>,
        seen: Option<&mut BTreeSet<u32>>,
    ) {
        let held = if self.hold {
            self.submitted.clone()
        } else {
            BTreeSet::new()
        };
        let wanted = &wanted.union(&self.unsigned_asks).copied().collect();
        let arrays_of_ours = arrays_of_ours(&self.array_owners);
        let asks = Asks {
            wanted,
            submitted: &self.submitted,
            held: &held,
            waiting: &self.waiting,
            arrays_of_ours: &arrays_of_ours,
        };
        let limits = self.limits.unwrap_or(LIMITS);
        let mut p = plan(&self.tracker, &listed, asks, limits, self.tracker.len());
        if let Fetch::Details(ids) = &mut p.fetch {
            let asked = ids.len();
            ids.retain(|id| !self.unreadable.contains(id));
            self.failed += asked - ids.len();
        }
        let fetched = sim.fetch(p.fetch);
        if let Some(seen) = seen {
            let asked = match scope {
                Scope::Only(asked) => Some(asked),
                Scope::All | Scope::AllBut(_) => None,
            };
            saw(asked, &listed, &fetched, seen);
        }
        let verdict = Verdict {
            key: key(),
            named: &self.named,
        };
        note_array_owners(&fetched, &mut self.array_owners, verdict);
        let (tracker, jobs) = apply(
            std::mem::take(&mut self.tracker),
            &self.jobs,
            &listed,
            fetched,
            scope,
            verdict,
        );
        self.tracker = tracker;
        self.jobs = jobs;
        // As the poller: an unreadable meta record whose tasks read are someone else's is.
        let unread: Vec<u32> = self.unreadable.union(&self.waiting).copied().collect();
        for id in resolve_unreadable_arrays(&mut self.tracker, unread, &self.array_owners) {
            assert!(
                sim.jobs.get(&id).is_none_or(|job| !job.ours),
                "{id}: an array of ours resolved as someone else's"
            );
            self.resolved_arrays += 1;
        }
        let verdict = Verdict {
            key: key(),
            named: &self.named,
        };
        let (tracker, jobs) = (&self.tracker, &self.jobs);
        self.unsigned_asks
            .retain(|id| still_wanted(*id, tracker, jobs, verdict));
        keep_array_owners(&mut self.array_owners, tracker, jobs);
        keep_named(&mut self.named, tracker, jobs);
        // As the poller: kept while listed and not read, or not listed yet.
        self.submitted.retain(|id| {
            self.tracker
                .get(id)
                .is_none_or(|t| t.known == Known::Unresolved)
        });
        if !matches!(scope, Scope::Only(_)) {
            self.numbering
                .listed(listed.keys().next_back().copied().unwrap_or(0));
        }
        self.numbering
            .seen(self.tracker.keys().next_back().copied().unwrap_or(0));
    }

    fn full(&mut self, sim: &Sim, wanted: &BTreeSet<u32>) {
        let listed = group(sim.all_states());
        self.settle(sim, listed, Scope::All, wanted);
    }

    /// An incremental cycle.
    fn incremental(&mut self, sim: &Sim, wanted: &BTreeSet<u32>, width: u32) {
        self.incremental_seeing(sim, wanted, width, None);
    }

    fn incremental_seeing(
        &mut self,
        sim: &Sim,
        wanted: &BTreeSet<u32>,
        width: u32,
        seen: Option<&mut BTreeSet<u32>>,
    ) {
        self.cycles += 1;
        let (listed, asked) = self.list_followed(sim, wanted, width);
        self.settle_seeing(sim, listed, Scope::Only(&asked), wanted, seen);
    }

    /// An incremental cycle that merges a full listing run beside the cycles: `snapshot` is
    /// what it answered, `seen` what the cycles saw since it was asked.
    fn merged(
        &mut self,
        sim: &Sim,
        wanted: &BTreeSet<u32>,
        width: u32,
        snapshot: Vec<JobStateEntry>,
        seen: &BTreeSet<u32>,
    ) {
        self.cycles += 1;
        let (now, asked) = self.list_followed(sim, wanted, width);
        let (listed, unspoken) = overlay(group(snapshot), now, seen, &asked);
        self.settle(sim, listed, Scope::AllBut(&unspoken), wanted);
    }

    /// As `Poller::list_followed`, against the model: the listing and the ids asked.
    fn list_followed(
        &self,
        sim: &Sim,
        wanted: &BTreeSet<u32>,
        width: u32,
    ) -> (BTreeMap<u32, Listed>, BTreeSet<u32>) {
        // As the poller's own asks, those named through an unsigned tag are followed.
        let wanted = &wanted.union(&self.unsigned_asks).copied().collect();
        let mut asked = asked_in_cycle(&self.tracker, wanted, self.cycles, FOLLOW_ENTRIES);
        let (mut window, before) = self.numbering.windows(width);
        asked.extend(window.clone());
        asked.extend(before.into_iter().flatten());
        let mut entries = sim.states(&asked);
        for _ in 0..16 {
            let top = entries
                .iter()
                .map(|e| e.job_id)
                .filter(|id| window.contains(id))
                .max();
            if top.is_none_or(|top| top < window.start().saturating_add(width / 2)) {
                break;
            }
            window = probe(*window.end(), width);
            let ids: BTreeSet<u32> = window.clone().collect();
            asked.extend(&ids);
            entries.extend(sim.states(&ids));
        }
        (group(entries), asked)
    }

    fn node_jobs(&self) -> BTreeMap<String, crate::state::index::NodeJobs> {
        node_jobs(&self.tracker, &self.jobs)
    }

    /// As `act::follow_or_account` after the cycle: a SlurmJob that named a legacy job of ours
    /// (`ever_wanted`) and finds its record in the index with an unsigned tag names it to the
    /// poller for its user (`ClusterState::follow_unsigned`); the poller asks for it until it
    /// reads it as ours.
    fn name_unsigned(&mut self, ever_wanted: &BTreeSet<u32>, sim: &Sim) {
        for id in ever_wanted {
            let legacy = sim.jobs.get(id).is_some_and(|j| j.legacy);
            let unsigned = self
                .jobs
                .values()
                .any(|j| (j.job_id == *id || j.array_job_id == Some(*id)) && j.has_unsigned_tag());
            if legacy && unsigned && self.ever_named.insert(*id) {
                let user = USER.to_owned();
                let tasks = renamed_arrays([(id, &user)], &self.jobs, &mut self.array_owners);
                self.unsigned_asks.extend(tasks);
                self.named.insert(*id, USER.to_owned());
                self.unsigned_asks.insert(*id);
            }
        }
        // A name that outlived its job: slurmctld reused the id (after losing its state) for
        // another user's job with a copied unsigned tag. It stays a claim (`claims_kept`), and
        // is not asked for again once read.
        let stale: Vec<u32> = self
            .jobs
            .values()
            .filter(|j| j.has_unsigned_tag() && j.user_name.as_deref() == Some(OTHER_USER))
            .map(|j| j.job_id)
            .collect();
        for id in stale {
            if self.stale_named.insert(id) {
                self.named.insert(id, USER.to_owned());
                self.unsigned_asks.insert(id);
            }
        }
    }
}

/// The start of history `seed`: the model cluster after what happened before the operator
/// started, those jobs (skipped at its first listing), and the first listing's view.
fn history(seed: u64) -> (Rng, Sim, BTreeSet<u32>, View) {
    let mut rng = Rng(seed);
    let mut sim = Sim {
        next_id: rng.below(1_000) as u32,
        ..Sim::default()
    };
    sim.legacy_era = true;
    for _ in 0..rng.below(30) {
        sim.step(&mut rng);
    }
    sim.legacy_era = false;
    let baseline: BTreeSet<u32> = sim.jobs.keys().copied().collect();
    sim.moved.clear();
    let view = View::first(&sim);
    (rng, sim, baseline, view)
}

/// Now and then a SlurmJob names one of the skipped jobs: its own (a SlurmJob never names a
/// job whose tag proves nothing: its status names only what it submitted or adopted).
fn named_now(rng: &mut Rng, baseline: &BTreeSet<u32>, sim: &Sim) -> BTreeSet<u32> {
    let mut wanted = BTreeSet::new();
    if rng.below(5) == 0
        && let Some(id) = baseline
            .iter()
            .nth(rng.below(baseline.len() as u64) as usize)
        && !sim.is_claim(*id)
    {
        wanted.insert(*id);
    }
    wanted
}

/// Records of ours an incremental view shows late: those of jobs that had settled, which its
/// incremental cycles do not follow, and a full listing brings up to date.
#[derive(Debug, Default)]
struct Late {
    /// Ids whose record differed from the reference's since the last full listing.
    ids: BTreeSet<u32>,
    /// Jobs requeued that ran and ended in the same state between two full listings: the full
    /// listing shows no change, and the view keeps the first run's record.
    reruns_missed: BTreeSet<u32>,
    /// Records excused, cycle by cycle.
    seen: usize,
    /// Late records a full listing brought up to date.
    caught: usize,
}

impl Late {
    /// A record of `view` that differs from the reference's (`expected`): late only if the view
    /// holds it as settled.
    fn excused(&mut self, id: u32, got: Option<&Job>, expected: Option<&Job>, context: &str) {
        assert!(
            got.is_some_and(|job| settled(&job.state)),
            "job {id}: {got:?} where the reference holds {expected:?}: {context}"
        );
        self.ids.insert(id);
        self.seen += 1;
    }

    /// After a full listing: every late record is the reference's again, but for a requeued
    /// job that ended in the state the view holds.
    fn listed(&mut self, view: &View, reference: &View, sim: &Sim, context: &str) {
        for id in std::mem::take(&mut self.ids) {
            let (got, expected) = (view.jobs.get(&id), reference.jobs.get(&id));
            if got == expected {
                self.caught += 1;
                continue;
            }
            let same_state = got.zip(expected).is_some_and(|(g, e)| g.state == e.state);
            assert!(
                same_state && sim.moved.contains(&id),
                "job {id} still late after a full listing: {got:?}, reference {expected:?}: {context}"
            );
            self.reruns_missed.insert(id);
        }
    }
}

/// What SlurmJobs read of a view: the jobs of the first listing count only once named.
struct Named<'a> {
    /// The jobs of the first listing (skipped).
    baseline: &'a BTreeSet<u32>,
    /// Those a SlurmJob has named so far.
    ever_wanted: &'a BTreeSet<u32>,
}

impl Named<'_> {
    fn named(&self, view: &View, held: &BTreeSet<u32>) -> BTreeMap<u32, Job> {
        // A legacy (unsigned) tag is read by the SlurmJob that named it (the model names only
        // legacy jobs of ours, never claims: `named_now`).
        let named = |j: &Job| {
            std::iter::once(j.job_id)
                .chain(j.array_job_id)
                .any(|id| self.ever_wanted.contains(&id))
        };
        view.jobs
            .iter()
            .filter(|(_, j)| match j.ownership(key()) {
                Ownership::Proven => true,
                Ownership::Legacy => named(j),
                Ownership::Forged | Ownership::Untagged => false,
            })
            .filter(|(id, _)| !self.baseline.contains(id) || self.ever_wanted.contains(id))
            .filter(|(id, _)| !held.contains(id))
            .map(|(id, j)| (*id, j.clone()))
            .collect()
    }

    /// Both views hold the same records of ours (but those `late` excuses), and the reference
    /// every one of ours submitted since the first listing, up to date. Returns how many of
    /// ours, and of those array records, were compared. The records `view` holds back for a
    /// burst of submits (`held`) are of pending jobs, and missing from it.
    fn same_records(
        &self,
        view: &View,
        reference: &View,
        sim: &Sim,
        late: &mut Late,
        context: &str,
    ) -> (usize, usize) {
        let held = &view.submitted;
        for id in held {
            if let Some(job) = sim.jobs.get(id) {
                assert_eq!(job.state, "PENDING", "held job {id}: {context}");
                assert!(!view.jobs.contains_key(id), "held job {id}: {context}");
            }
        }
        let (got, expected) = (
            self.named(view, &BTreeSet::new()),
            self.named(reference, held),
        );
        let ids: BTreeSet<u32> = got.keys().chain(expected.keys()).copied().collect();
        for id in ids {
            let (g, e) = (got.get(&id), expected.get(&id));
            if g != e {
                late.excused(id, g, e, context);
            }
        }
        let ours_since: BTreeMap<u32, Job> = sim
            .jobs
            .iter()
            .filter(|(id, j)| j.ours && !self.baseline.contains(id))
            .filter_map(|(id, _)| sim.record(*id).map(|r| (*id, r)))
            .collect();
        for (id, record) in &ours_since {
            assert_eq!(reference.jobs.get(id), Some(record), "job {id}: {context}");
        }
        let arrays = ours_since
            .values()
            .filter(|r| r.array_job_id.is_some())
            .count();
        (ours_since.len(), arrays)
    }

    /// Both views hold every job with its state, and whose it is, but for skipped ones nobody
    /// named (the reference resolves those it happens to see running, the incremental one only
    /// those still running at a full listing); and the same per-node counts.
    fn same_jobs(&self, view: &View, reference: &View, context: &str) {
        let held = &view.submitted;
        let jobs = |view: &View| -> Vec<(u32, JobState, usize, Option<Known>)> {
            view.tracker
                .iter()
                .map(|(id, t)| {
                    let unnamed = (self.baseline.contains(id) && !self.ever_wanted.contains(id))
                        || held.contains(id);
                    let known = (!unnamed).then(|| t.known.clone());
                    (*id, t.state.clone(), t.entries, known)
                })
                .collect()
        };
        assert_eq!(jobs(view), jobs(reference), "tracker: {context}");
        assert_eq!(view.node_jobs(), reference.node_jobs(), "nodes: {context}");
    }
}

/// After a full listing: every job of `sim` whose claim the view has read costs what someone
/// else's costs ([`Known::Foreign`]: incremental cycles follow it only while it holds nodes),
/// and its record stays in the view's jobs with the state listed (so the SlurmJob whose tag it
/// copies can name it); no untagged job has a record there. Returns how many claims it saw.
fn claims_kept(view: &View, sim: &Sim, context: &str) -> usize {
    let mut claims = 0;
    for (id, tracked) in &view.tracker {
        if !sim.jobs.contains_key(id) || matches!(tracked.known, Known::Unresolved | Known::Skipped)
        {
            continue;
        }
        let record = view.jobs.get(id);
        if sim.is_claim(*id) {
            claims += 1;
            assert!(
                matches!(tracked.known, Known::Foreign { .. }),
                "claim {id} followed as {:?}: {context}",
                tracked.known
            );
            assert_eq!(
                record.map(|r| &r.state),
                Some(&tracked.state),
                "claim {id}'s record: {context}"
            );
        } else if !sim.jobs[id].ours {
            assert_eq!(record, None, "someone else's job {id}: {context}");
        }
    }
    claims
}

/// Every legacy job a SlurmJob named to the view (`View::name_unsigned`) whose ask no longer
/// stands, and that slurmctld still holds, is followed as ours. Returns how many.
fn legacy_followed(view: &View, sim: &Sim, context: &str) -> usize {
    let mut followed = 0;
    for id in &view.ever_named {
        if view.unsigned_asks.contains(id) || !sim.jobs.contains_key(id) {
            continue;
        }
        let Some(tracked) = view.tracker.get(id) else {
            continue;
        };
        assert_eq!(
            tracked.known,
            Known::Ours,
            "legacy job {id} named, not followed as ours: {context}"
        );
        assert!(
            view.jobs.contains_key(id),
            "legacy job {id}'s record: {context}"
        );
        followed += 1;
    }
    followed
}

#[test]
fn incremental_cycles_hold_what_full_listings_hold() {
    let mut held_seen = 0;
    let mut full_cycles = 0;
    let mut incremental_cycles = 0;
    let mut ours_seen = 0;
    let mut array_records_seen = 0;
    let mut claims_seen = 0;
    let mut legacy_seen = 0;
    let mut stale_seen = 0;
    let mut late = Late::default();
    for seed in 0..300u64 {
        let (mut rng, mut sim, baseline, mut reference) = history(seed);
        late.ids.clear();
        let mut incremental = reference.clone();
        let full_every = 2 + rng.below(6);
        let width = 8;
        let mut ever_wanted: BTreeSet<u32> = BTreeSet::new();
        for cycle in 1..=40u64 {
            let before = sim.next_id;
            for _ in 0..rng.below(4) {
                sim.step(&mut rng);
            }
            let wanted = named_now(&mut rng, &baseline, &sim);
            reference.full(&sim, &wanted);
            // Half of the histories' jobs of ours are this process's submits (their ids asked
            // for by the SlurmJob), and one cycle in two follows a burst of them.
            let submits: BTreeSet<u32> = sim
                .jobs
                .range(before + 1..)
                .filter(|(id, j)| j.ours && j.array.is_none_or(|a| a == **id) && **id % 2 == 0)
                .map(|(id, _)| *id)
                .collect();
            incremental.submitted.extend(&submits);
            incremental.hold = rng.below(2) == 0;
            let wanted_here: BTreeSet<u32> = wanted.union(&submits).copied().collect();
            // Which cycles are incremental is a cost rule; the property must hold whichever are.
            // Only the queue-size half of the rule is kept (with an empty first listing, the
            // probe would not know where the numbering stands); the cost half (a third of these
            // small queues is ours) would leave few incremental cycles to check.
            let full = cycle % full_every == 0 || !incremental_pays(&incremental.tracker, 0, width);
            if full {
                incremental.full(&sim, &wanted_here);
                full_cycles += 1;
            } else {
                incremental.incremental(&sim, &wanted_here, width);
                incremental_cycles += 1;
            }
            held_seen += incremental.submitted.len();
            if !incremental.hold {
                assert!(
                    incremental
                        .submitted
                        .iter()
                        .all(|id| !sim.jobs.contains_key(id)),
                    "a cycle after the burst reads every record: seed {seed}, cycle {cycle}"
                );
            }
            let context = format!("seed {seed}, cycle {cycle}, full {full}");
            ever_wanted.extend(&wanted);
            let named = Named {
                baseline: &baseline,
                ever_wanted: &ever_wanted,
            };
            let ours = named.same_records(&incremental, &reference, &sim, &mut late, &context);
            ours_seen += ours.0;
            array_records_seen += ours.1;
            if full {
                late.listed(&incremental, &reference, &sim, &context);
                named.same_jobs(&incremental, &reference, &context);
                claims_seen += claims_kept(&incremental, &sim, &context);
                claims_kept(&reference, &sim, &context);
                legacy_seen += legacy_followed(&incremental, &sim, &context);
                legacy_followed(&reference, &sim, &context);
            }
            // Every record readable: a job named after a cycle is read in the next one, as
            // ours if it runs as the user it was named for, and not asked for again.
            for view in [&incremental, &reference] {
                assert!(
                    view.unsigned_asks.is_empty(),
                    "an ask stands after the cycle that read it: {:?}: {context}",
                    view.unsigned_asks
                );
            }
            reference.name_unsigned(&ever_wanted, &sim);
            incremental.name_unsigned(&ever_wanted, &sim);
        }
        stale_seen += incremental.stale_named.len();
    }
    println!(
        "{} late records excused, {} brought up to date by a full listing, {} reruns missed",
        late.seen,
        late.caught,
        late.reruns_missed.len()
    );
    // The histories did exercise what they claim to.
    assert!(full_cycles > 1_000, "{full_cycles} full cycles");
    assert!(
        incremental_cycles > 3_000,
        "{incremental_cycles} incremental cycles"
    );
    assert!(ours_seen > 1_000, "{ours_seen} records of ours compared");
    assert!(held_seen > 200, "{held_seen} records held");
    assert!(
        array_records_seen > 200,
        "{array_records_seen} records of our arrays compared"
    );
    assert!(late.seen > 100, "{} late records", late.seen);
    assert!(late.caught > 50, "{} late ones caught up", late.caught);
    assert!(claims_seen > 1_000, "{claims_seen} claims checked");
    assert!(
        legacy_seen > 100,
        "{legacy_seen} named legacy jobs checked as followed"
    );
    assert!(
        stale_seen > 100,
        "{stale_seen} names for another user's job checked"
    );
}

/// A record that cannot be read (`Poller::details` leaves it out: neither a record nor missing)
/// or whose next try is not due ([`Asks::waiting`]) is only late. Over the same random
/// histories, each of the first 30 cycles fails a random sixth of slurmctld's records and holds
/// back another sixth. Meanwhile no job of ours leaves the index while slurmctld holds it; three
/// clean incremental cycles and a full listing later, the view holds what the reference (every
/// state listed every cycle, every record readable) holds.
#[test]
fn records_that_could_not_be_read_are_late_never_lost() {
    let mut failed = 0;
    let mut resolved = 0;
    let mut waited = 0;
    for seed in 0..200u64 {
        let (mut rng, mut sim, baseline, mut reference) = history(seed);
        let mut view = reference.clone();
        let mut ever_wanted: BTreeSet<u32> = BTreeSet::new();
        let mut asked: BTreeSet<u32> = BTreeSet::new();
        for cycle in 1..=34u64 {
            for _ in 0..rng.below(4) {
                sim.step(&mut rng);
            }
            let wanted = named_now(&mut rng, &baseline, &sim);
            ever_wanted.extend(&wanted);
            reference.full(&sim, &wanted);
            let sixth = |rng: &mut Rng| -> BTreeSet<u32> {
                if cycle > 30 {
                    return BTreeSet::new();
                }
                sim.jobs
                    .keys()
                    .filter(|_| rng.below(6) == 0)
                    .copied()
                    .collect()
            };
            view.unreadable = sixth(&mut rng);
            view.waiting = sixth(&mut rng);
            waited += view.waiting.len();
            // As the poller keeps an ask until its job is resolved (`Poller::wanted`).
            asked.extend(&wanted);
            let before: Vec<u32> = view.jobs.keys().copied().collect();
            if cycle % 5 == 0 || cycle == 34 {
                view.full(&sim, &asked);
            } else {
                view.incremental(&sim, &asked, 8);
            }
            // Late, never lost: a job of ours slurmctld still holds stays in the index.
            for id in before.iter().filter(|id| sim.jobs.contains_key(id)) {
                assert!(
                    view.jobs.contains_key(id),
                    "job {id} lost: seed {seed}, cycle {cycle}"
                );
            }
            asked.retain(|id| {
                view.tracker
                    .get(id)
                    .is_some_and(|t| t.known == Known::Skipped)
            });
            view.name_unsigned(&ever_wanted, &sim);
            reference.name_unsigned(&ever_wanted, &sim);
        }
        failed += view.failed;
        resolved += view.resolved_arrays;
        let named = Named {
            baseline: &baseline,
            ever_wanted: &ever_wanted,
        };
        let context = format!("seed {seed}");
        let mut late = Late::default();
        named.same_records(&view, &reference, &sim, &mut late, &context);
        late.listed(&view, &reference, &sim, &context);
        named.same_jobs(&view, &reference, &context);
    }
    assert!(failed > 500, "{failed} records failed");
    assert!(waited > 1_000, "{waited} records held back");
    assert!(
        resolved > 0,
        "{resolved} unreadable arrays resolved from their tasks"
    );
}

/// A full listing running beside the cycles (`Poller`'s `Listing`): asked in one cycle,
/// answered in the same or up to three later, with slurmctld's state at some moment between
/// (`snapshot`).
struct Flight {
    lands: u64,
    /// The cycle whose changes it was taken among, and after how many of them.
    capture: (u64, u64),
    snapshot: Option<Vec<JobStateEntry>>,
    /// What the cycles saw since it was asked.
    seen: BTreeSet<u32>,
    /// Whether slurmctld stays unchanged from its asking until it lands.
    quiet: bool,
}

/// Issue 19: the periodic full listing runs beside the incremental cycles, and the cycle after
/// its answer merges it ([`overlay`]), over the same random histories as above, the listing
/// taken at a random moment while the cycles go on. After every cycle the records of ours are
/// the reference's (which lists everything every cycle), and no job that is still in slurmctld
/// was lost (a job first seen after the listing was asked is missing from it, not gone). After
/// a listing asked and answered while slurmctld did not change, every job and per-node count
/// is the reference's, as after a full listing in a cycle.
#[test]
fn a_full_listing_beside_the_cycles_keeps_what_full_listings_hold() {
    let mut merges = 0;
    let mut quiet_merges = 0;
    let mut taken_among_changes = 0;
    let mut kept_though_missing = 0;
    let mut ours_seen = 0;
    for seed in 0..300u64 {
        let (mut rng, mut sim, baseline, mut reference) = history(seed ^ 0x5eed);
        let mut late = Late::default();
        let mut view = reference.clone();
        let width = 8;
        let mut ever_wanted: BTreeSet<u32> = BTreeSet::new();
        let mut flight: Option<Flight> = None;
        for cycle in 1..=60u64 {
            let quiet = flight.as_ref().is_some_and(|f| f.quiet);
            let changes = if quiet { 0 } else { rng.below(4) };
            for change in 0..changes {
                if let Some(f) = &mut flight
                    && f.snapshot.is_none()
                    && f.capture == (cycle, change)
                {
                    f.snapshot = Some(sim.all_states());
                    taken_among_changes += 1;
                }
                sim.step(&mut rng);
            }
            if let Some(f) = &mut flight
                && f.snapshot.is_none()
                && f.capture.0 == cycle
            {
                f.snapshot = Some(sim.all_states());
            }
            let wanted = named_now(&mut rng, &baseline, &sim);
            ever_wanted.extend(&wanted);
            reference.full(&sim, &wanted);
            let before: BTreeSet<u32> = view.tracker.keys().copied().collect();
            // Asked now, before this cycle's own listing.
            if flight.is_none() && rng.below(3) == 0 {
                let lands = cycle + rng.below(4);
                let quiet = rng.below(3) == 0;
                let capture = if quiet {
                    (cycle, 0)
                } else {
                    (cycle + rng.below(lands - cycle + 1), rng.below(3))
                };
                flight = Some(Flight {
                    lands,
                    capture,
                    snapshot: (capture.0 == cycle).then(|| sim.all_states()),
                    seen: BTreeSet::new(),
                    quiet,
                });
            }
            let mut merged_quietly = false;
            let mut full = false;
            if !incremental_pays(&view.tracker, 0, width) {
                // A full listing in the cycle; one running beside is dropped.
                flight = None;
                view.full(&sim, &wanted);
                full = true;
            } else if flight.as_ref().is_some_and(|f| f.lands == cycle) {
                let f = flight.take().expect("a flight lands");
                let snapshot = f.snapshot.expect("taken before it lands");
                let listed: BTreeSet<u32> = snapshot.iter().map(|e| e.job_id).collect();
                kept_though_missing += f
                    .seen
                    .iter()
                    .filter(|id| !listed.contains(id) && sim.jobs.contains_key(id))
                    .count();
                view.merged(&sim, &wanted, width, snapshot, &f.seen);
                merges += 1;
                merged_quietly = f.quiet;
            } else {
                let seen = flight.as_mut().map(|f| &mut f.seen);
                view.incremental_seeing(&sim, &wanted, width, seen);
            }
            let context = format!("seed {seed}, cycle {cycle}");
            let named = Named {
                baseline: &baseline,
                ever_wanted: &ever_wanted,
            };
            ours_seen += named
                .same_records(&view, &reference, &sim, &mut late, &context)
                .0;
            for id in &before {
                assert!(
                    !sim.jobs.contains_key(id) || view.tracker.contains_key(id),
                    "job {id} is still in slurmctld but was lost: {context}"
                );
            }
            if full || merged_quietly {
                late.listed(&view, &reference, &sim, &context);
            }
            if merged_quietly {
                quiet_merges += 1;
                named.same_jobs(&view, &reference, &context);
            }
            view.name_unsigned(&ever_wanted, &sim);
            reference.name_unsigned(&ever_wanted, &sim);
        }
    }
    // The histories did exercise what they claim to.
    assert!(merges > 2_500, "{merges} listings merged");
    assert!(quiet_merges > 800, "{quiet_merges} quiet ones");
    assert!(
        taken_among_changes > 300,
        "{taken_among_changes} taken between two changes"
    );
    assert!(
        kept_though_missing > 500,
        "{kept_though_missing} jobs kept though the listing missed them"
    );
    assert!(ours_seen > 1_000, "{ours_seen} records of ours compared");
}

#[test]
fn a_quiet_incremental_cycle_asks_about_ours_and_a_window_only() {
    // 100 000 jobs of others, skipped at the first listing, and 3 of ours submitted since.
    let mut sim = Sim {
        next_id: 100_000,
        ..Sim::default()
    };
    for id in 1..=100_000 {
        sim.jobs.insert(
            id,
            SimJob {
                state: "PENDING",
                ours: false,
                ..SimJob::default()
            },
        );
    }
    let mut view = View::first(&sim);
    assert!(view.jobs.is_empty());
    assert_eq!(unresolved(&view.tracker).len(), 100_000, "nothing fetched");
    for id in 100_001..=100_003 {
        sim.jobs.insert(
            id,
            SimJob {
                state: "PENDING",
                ours: true,
                ..SimJob::default()
            },
        );
    }
    view.incremental(&sim, &BTreeSet::new(), 64);
    assert_eq!(
        view.jobs.keys().copied().collect::<Vec<_>>(),
        vec![100_001, 100_002, 100_003]
    );
    let asked = followed(&view.tracker, &BTreeSet::new());
    assert_eq!(
        asked.len(),
        3,
        "a quiet cycle asks about ours and the window: {asked:?}"
    );
    assert_eq!(view.tracker.len(), 100_003);
}

/// A pending array of ours with 1 000 tasks still to run (slurmrestd answers its meta record
/// with 1 000 entries): asked about in one cycle of every 15 (1 000 / 64), not in every one (the
/// review finding: 50 000 entries a cycle for one SlurmJob of `--array=0-49999%20`); its
/// cancel still shows within that many cycles, and its tasks that start at once.
#[test]
fn a_pending_array_of_ours_is_asked_about_in_its_turn() {
    let mut sim = Sim {
        next_id: 10,
        ..Sim::default()
    };
    sim.jobs.insert(
        1,
        SimJob {
            state: "PENDING",
            ours: false,
            ..SimJob::default()
        },
    );
    let mut view = View::first(&sim);
    let array = |tasks: std::ops::Range<u32>| SimJob {
        state: "PENDING",
        ours: true,
        array: Some(11),
        pending_tasks: tasks.collect(),
        ..SimJob::default()
    };
    sim.jobs.insert(11, array(0..1_000));
    let none = BTreeSet::new();
    view.incremental(&sim, &none, 64);
    assert!(view.jobs.contains_key(&11), "found by the probe, ours");
    assert_eq!(view.tracker[&11].entries, 1_000);
    let mut turns = Vec::new();
    for _ in 0..45 {
        if asked_in_cycle(&view.tracker, &none, view.cycles + 1, FOLLOW_ENTRIES).contains(&11) {
            turns.push(view.cycles + 1);
        }
        view.incremental(&sim, &none, 64);
    }
    assert_eq!(turns.len(), 3, "one cycle in 15: {turns:?}");
    assert!(turns.windows(2).all(|w| w[1] - w[0] == 15), "{turns:?}");
    // Wanted (a SlurmJob asks for it), to be read again, or not known to be ours (unresolved:
    // a burst beyond the budget left it unread, and the index is incomplete until it is read):
    // every cycle.
    let every_cycle = |tracker: &Tracker, wanted: &BTreeSet<u32>| {
        (1..=15).all(|c| asked_in_cycle(tracker, wanted, c, FOLLOW_ENTRIES).contains(&11))
    };
    assert!(!every_cycle(&view.tracker, &none));
    assert!(every_cycle(&view.tracker, &BTreeSet::from([11])));
    let mut stale = view.tracker.clone();
    stale.get_mut(&11).unwrap().stale = Stale::Refresh;
    assert!(every_cycle(&stale, &none));
    let mut unresolved = view.tracker.clone();
    unresolved.get_mut(&11).unwrap().known = Known::Unresolved;
    assert!(every_cycle(&unresolved, &none));

    // A task starts: a record of its own, asked at once by the probe, ours.
    let mut started = array(0..1);
    started.state = "RUNNING";
    started.pending_tasks.clear();
    sim.jobs.insert(12, started);
    sim.jobs.get_mut(&11).unwrap().pending_tasks.remove(0);
    view.incremental(&sim, &none, 64);
    assert!(
        view.jobs.contains_key(&12),
        "the started task in the first cycle after"
    );

    // The array cancelled: the meta record shows it within 15 cycles.
    let meta = sim.jobs.get_mut(&11).unwrap();
    meta.state = "CANCELLED";
    meta.pending_tasks.clear();
    let mut cycles = 0;
    while view.jobs[&11].state.base != JobBaseState::Cancelled {
        view.incremental(&sim, &none, 64);
        cycles += 1;
        assert!(cycles <= 15, "the cancel not seen within 15 cycles");
    }
}

/// A full listing that shows more changes than one cycle fetches (a requeue of ours that had
/// ended, others' jobs starting): the rest are followed by the incremental cycles after it
/// until their records are read. They were not asked about again before the next full listing,
/// which on a busy cluster deferred them again; meanwhile the index held those requeued jobs as
/// ended, and no node counts for the others.
#[test]
fn changes_beyond_one_cycles_budget_are_followed_until_read() {
    let mut sim = Sim {
        next_id: 12,
        ..Sim::default()
    };
    for id in 1..=12 {
        let ours = id <= 6;
        sim.jobs.insert(
            id,
            SimJob {
                state: if ours { "COMPLETED" } else { "PENDING" },
                ours,
                ..SimJob::default()
            },
        );
    }
    let mut view = View::default();
    view.full(&sim, &BTreeSet::new());
    assert_eq!(view.jobs.len(), 6, "ours resolved");
    // Ours requeued, others' started.
    for (id, job) in sim.jobs.iter_mut() {
        if job.ours {
            job.state = "PENDING";
        } else {
            job.state = "RUNNING";
            job.node = Some(id % 3);
            job.started = Some(1);
        }
    }
    view.limits = Some(Limits {
        detail_budget: 2,
        list_all_above: 2,
        full_list_max_jobs: 0,
    });
    view.full(&sim, &BTreeSet::new());
    let behind = |view: &View| -> Vec<u32> {
        sim.jobs
            .iter()
            .filter(|(id, job)| view.tracker[*id].state != Sim::state(job.state))
            .map(|(id, _)| *id)
            .collect()
    };
    let deferred = behind(&view);
    assert_eq!(deferred.len(), 10, "two read, ten deferred: {deferred:?}");
    let asked = followed(&view.tracker, &BTreeSet::new());
    assert!(
        deferred.iter().all(|id| asked.contains(id)),
        "followed: {asked:?}, deferred: {deferred:?}"
    );
    for _ in 0..5 {
        view.incremental(&sim, &BTreeSet::new(), 8);
    }
    assert_eq!(
        behind(&view),
        Vec::<u32>::new(),
        "all read within five cycles"
    );
    for id in 1..=6 {
        assert_eq!(view.jobs[&id].state, Sim::state("PENDING"), "job {id}");
    }
    let on_nodes: u32 = view.node_jobs().values().map(|n| n.running).sum();
    assert_eq!(on_nodes, 6, "{:?}", view.node_jobs());
    // Read, they are followed no longer than their state says.
    let asked = followed(&view.tracker, &BTreeSet::new());
    assert_eq!(asked, (1..=12).collect(), "pending ours and running others");
}

/// A full listing that ends below the ids seen before: the newest jobs were purged (a quiet
/// spell longer than `MinJobAge`), and slurmctld numbers the next job above them. The next
/// incremental cycle sees it; its window began above the listing's highest id, and a new job
/// of someone else's waited for the next full listing.
#[test]
fn after_the_newest_jobs_are_purged_the_next_ones_are_still_probed() {
    let job = |state| SimJob {
        state,
        ours: false,
        ..SimJob::default()
    };
    let mut sim = Sim {
        next_id: 100,
        ..Sim::default()
    };
    sim.jobs.insert(5, job("PENDING"));
    for id in 90..=100 {
        sim.jobs.insert(id, job("COMPLETED"));
    }
    let mut view = View::default();
    view.full(&sim, &BTreeSet::new());
    assert_eq!(view.numbering.high_water, 100);
    // Purged, then listed: the listing ends at 5.
    sim.jobs.retain(|id, _| *id == 5);
    view.full(&sim, &BTreeSet::new());
    assert_eq!(view.numbering.high_water, 5);
    // Quiet cycles probe above both.
    view.incremental(&sim, &BTreeSet::new(), 8);
    sim.jobs.insert(101, job("PENDING"));
    view.incremental(&sim, &BTreeSet::new(), 8);
    assert!(view.tracker.contains_key(&101), "{:?}", view.tracker.keys());
    assert_eq!(view.numbering.windows(8), (probe(101, 8), None));
}

/// What the probe windows are as listings and cycles go: above the highest id seen, and, once a
/// listing of every job ended lower, above the one seen before too, until a new job shows
/// where slurmctld numbers (after a purge: above the old ids; after a wrap at `MaxJobId`: low).
#[test]
fn the_probe_follows_the_numbering_after_a_purge_or_a_wrap() {
    let mut n = Numbering::default();
    n.listed(50);
    n.seen(50);
    assert_eq!(n.windows(4), (probe(50, 4), None), "first listing");
    n.seen(60);
    assert_eq!(n.windows(4), (probe(60, 4), None), "a new job");
    n.listed(10);
    n.seen(10);
    assert_eq!(n.windows(4), (probe(10, 4), Some(probe(60, 4))), "lowered");
    let lowered = n;
    n.listed(10);
    n.seen(10);
    assert_eq!(n, lowered, "a listing the same: still open");
    n.listed(8);
    n.seen(8);
    assert_eq!(
        n.windows(4),
        (probe(8, 4), Some(probe(60, 4))),
        "lower again"
    );
    // After a purge: the next job above the old ids.
    let mut purged = n;
    purged.seen(61);
    assert_eq!(purged.windows(4), (probe(61, 4), None), "purge resolved");
    // After a wrap: the next job low.
    let mut wrapped = n;
    wrapped.seen(9);
    assert_eq!(wrapped.windows(4), (probe(9, 4), None), "wrap resolved");
}

/// A probe that had to stop (a burst beyond its rounds) goes on where it stopped, also when a
/// job above the burst is tracked meanwhile (one this process submitted): probing above that
/// one would leave the ids between never listed. A probe that got to the end, or a listing of
/// every job, goes back to the highest id seen.
#[test]
fn a_probe_that_had_to_stop_goes_on_where_it_stopped() {
    let mut n = Numbering::default();
    n.listed(1_000);
    n.seen(1_000);
    n.seen(3_001);
    n.probed(2_024, false);
    assert_eq!(n.windows(64), (probe(2_024, 64), None), "resumed");
    n.seen(3_001);
    n.probed(2_088, false);
    assert_eq!(
        n.windows(64),
        (probe(2_088, 64), None),
        "on from the next stop"
    );
    n.probed(3_065, true);
    assert_eq!(n.windows(64), (probe(3_001, 64), None), "at the end");
    n.probed(3_500, false);
    assert_eq!(
        n.windows(64),
        (probe(3_001, 64), None),
        "not above the highest seen"
    );
    n.probed(2_500, false);
    n.listed(3_100);
    assert_eq!(
        n.windows(64),
        (probe(3_100, 64), None),
        "a listing of every job"
    );
}
