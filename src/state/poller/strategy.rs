//! What a poll cycle fetches, and how the answers become the poller's view of the jobs. Pure.
//!
//! The strategy ("state first"), chosen by measuring slurmrestd 24.11 (`hack/measure-poll.sh`):
//! every cycle lists the state of ALL jobs with one `/jobs/state/` (about 80 bytes per job), and
//! fetches full records (`/job/{id}`, about 8 KiB each) only for jobs that need one:
//!
//! | why | which jobs |
//! |---|---|
//! | [`Why::OursChanged`] | ours, state changed (running, ended, requeued, ...) |
//! | [`Why::Wanted`] | skipped at the first sync, or someone else's, and a SlurmJob names it ([`Known::Skipped`], [`Class`]) |
//! | [`Why::New`] | not seen before, or never resolved: we do not know whose it is |
//! | [`Why::Started`] | someone else's (or skipped) that now holds nodes (for the per-node deadlines) |
//! | [`Why::Resync`] | everything after a failure (nothing missed stays missed) |
//! | [`Why::Submitted`] | this process submitted it, and it is still pending: ours, so whose it is needs no answer; its record tells how it waits |
//! | [`Why::Refresh`] | periodically, ours not finished and all running ones: what the state list does not show (pending reason, time limit, comment) |
//!
//! A few records ([`Limits::list_all_above`] or fewer) are fetched one by one. When more are
//! needed (startup, a burst of submissions) and slurmctld holds at most
//! [`Limits::full_list_max_jobs`] jobs, one full `/jobs` listing replaces them: one request, but
//! its size and the memory to decode it grow with the job count (~11 MiB per 1 000 jobs), hence
//! the bound. On a larger cluster at most [`Limits::detail_budget`] records are fetched per cycle,
//! most important first, and the rest wait for the next cycles. So a cycle costs 2 requests when
//! nothing changed (`/nodes?update_time`, `/jobs/state/`), and never more than 2 + budget however
//! many jobs and nodes there are. `/jobs?update_time=T` is never used: one changed job anywhere
//! makes it send every job (~37 MiB and 3.4 s for 5 000 jobs).
//!
//! **Ours is what the key proves** ([`Verdict`]). A comment shaped like an ownership tag is a
//! claim anyone can write on their own jobs; the poller follows a job as ours only when the
//! operator's key proves its tag for the job's user, or its tag is unsigned (a job the previous
//! version submitted) and a SlurmJob names its id for the Slurm user the job runs as. Any other claim ([`Class::Claim`]) costs
//! what someone else's job costs ([`Known::Foreign`]); its record stays in the index as last
//! read, with the listed state, for the SlurmJob whose tag it copies.
//!
//! **The first sync ignores what is not ours** (issue 19). When the cluster serves accounting,
//! the jobs of the poller's first listing are not fetched at all ([`skip`]): they become
//! [`Known::Skipped`], and only those a SlurmJob names ([`Why::Wanted`]) or that hold nodes
//! ([`Why::Started`]) are fetched. A job an earlier incarnation submitted without recording it
//! (a crash between the submit and the status write) is found by accounting instead, which the
//! SlurmJob controller asks for every SlurmJob not provably younger than that first listing
//! (`ClusterState::skipped_before`). Jobs that appear after the first listing are fetched as
//! before ([`Why::New`]): the index shows every tagged job submitted since, so a fresh SlurmJob
//! still submits without asking accounting. Nor are the newest jobs of the first listing
//! skipped: slurmctld tells slurmdbd of a submit a moment later, so the jobs numbered in the
//! last `Tuning::recent` before it are fetched, newest first, down to the first older one
//! ([`reached`]); "before it" on slurmctld's clock, read from `/diag` ([`walk_cutoff`]), since
//! this machine's may be minutes off. Without accounting every job is resolved, as before.
//!
//! **A burst of submits is not read back while it goes on** (issue 19). Each job the operator
//! submits is ours by that submit, and while it is pending its record adds only how it waits
//! (the reason, the priority). Reading it costs slurmctld and slurmrestd more than the submit
//! did (measured: 2.7 ms of their CPU for a `GET /job/{id}`, 1.6 ms for a submit). So while
//! more jobs are submitted between two cycles than a few, their records wait ([`Asks::held`]),
//! for at most a bound; a job of theirs that starts or ends is read at once
//! ([`Why::OursChanged`]), and none of them holds up the index's sync.
//!
//! **Incremental cycles** (issue 19). Between full listings, a cycle asks `/jobs/state/` only about
//! the jobs it follows ([`followed`]: ours that have not settled, the ones holding nodes, the
//! unresolved and the wanted; a pending array's meta record, which answers with an entry per
//! task still to run, only in its turn: [`asked_in_cycle`]) and a window of ids above the highest one seen ([`probe`]: slurmctld
//! numbers jobs in sequence), so its size grows with the operator's jobs and the submission rate,
//! not with the queue. An incremental answer is exact for what it asked (a followed job missing
//! from it is gone) and silent about the rest, which [`apply`] carries over ([`Scope::Only`]). What
//! it cannot show (other users' pending jobs that start, purged ones, a requeue of one of ours that
//! had ended, ids beyond the window or out of sequence) waits for the periodic full listing, which
//! runs beside the cycles and is merged by the first one after its answer ([`overlay`]: the ids the
//! cycles saw since it was asked keep what they saw). One case of ids beyond the window: after a
//! quiet spell longer than slurmctld's `MinJobAge`, the newest ids are purged, and a new poller's
//! first listing ends below slurmctld's numbering; the SlurmJob controller does not depend on the
//! probe for its own jobs (it asks for each id a submit returns, [`followed`]). A running poller
//! whose full listing ends so probes above the ids it saw before too ([`Numbering`]).
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::slurm::tag::{Ownership, TagKey};
use crate::slurm::types::{Job, JobBaseState, JobState, JobStateEntry, Node};
use crate::state::index::NodeJobs;

use super::hostlist;

/// Whose a record is, as far as the poller goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Provably the operator's (signed with its key for the job's own user), or an unsigned
    /// legacy tag on a job a SlurmJob names for the user it runs as: followed ([`Known::Ours`]).
    Ours,
    /// A tag-shaped comment that proves nothing: forged (anyone can write one on their own
    /// jobs), or an unsigned legacy tag no SlurmJob names for the user it runs as. It costs what someone else's job
    /// costs ([`Known::Foreign`]: not followed, not refreshed); its record, as last read, stays
    /// in the index's `jobs` so that the SlurmJob whose tag it copies can name it
    /// (`TagNotAdopted`).
    Claim,
    /// No tag: someone else's.
    Other,
}

/// Job ids SlurmJobs follow through an unsigned, legacy tag, each with the Slurm user the
/// SlurmJob's namespace runs as: the job is taken for ours only while it runs as that user (a
/// job id slurmctld reuses after losing its state may be anyone's, with a copied tag).
pub type Named = BTreeMap<u32, String>;

/// How the poller classes records ([`Class`]): the key tags are signed with, and the ids
/// SlurmJobs named (a job the previous version submitted with an unsigned tag is followed only
/// when its SlurmJob names it, by its id or its array's, and only as the user it named).
#[derive(Clone, Copy)]
pub struct Verdict<'a> {
    pub key: &'a TagKey,
    pub named: &'a Named,
}

impl Verdict<'_> {
    pub fn class(&self, record: &Job) -> Class {
        match record.ownership(self.key) {
            Ownership::Proven => Class::Ours,
            Ownership::Legacy if self.names(record) => Class::Ours,
            Ownership::Legacy | Ownership::Forged => Class::Claim,
            Ownership::Untagged => Class::Other,
        }
    }

    /// Whether a SlurmJob named `record`'s id, or its array's, for the user it runs as.
    fn names(&self, record: &Job) -> bool {
        let Some(user) = record.user_name.as_deref() else {
            return false;
        };
        std::iter::once(record.job_id)
            .chain(record.array_job_id)
            .any(|id| self.named.get(&id).is_some_and(|named| named == user))
    }
}

/// One job record as `/jobs/state/` lists it, its entries grouped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub state: JobState,
    /// Array task ids of its entries: one task for a task record, the tasks still to run for a
    /// pending array's meta record, none for a plain job.
    pub tasks: Vec<u32>,
}

impl Listed {
    fn entries(&self) -> usize {
        self.tasks.len().max(1)
    }
}

/// Group `/jobs/state/` entries by job record.
pub fn group(entries: Vec<JobStateEntry>) -> BTreeMap<u32, Listed> {
    let mut listed: BTreeMap<u32, Listed> = BTreeMap::new();
    for entry in entries {
        let slot = listed.entry(entry.job_id).or_insert_with(|| Listed {
            state: entry.state.clone(),
            tasks: Vec::new(),
        });
        if let Some(task) = entry.array_task_id {
            slot.tasks.push(task);
        }
    }
    listed
}

/// Where a running job holds nodes, and until when at the latest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// Slurm hostlist, e.g. "n[1-2]".
    pub nodes: Box<str>,
    /// Start time + time limit; `None` without a limit.
    pub deadline: Option<DateTime<Utc>>,
}

/// What the poller knows of a job beyond its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    /// Never fetched: whose it is is unknown, and it must be fetched.
    Unresolved,
    /// In the poller's first listing, and not fetched on purpose ([`skip`]): fetched
    /// only once a SlurmJob names it ([`Why::Wanted`]) or it holds nodes ([`Why::Started`]).
    Skipped,
    /// Ours: the full record is in the index's `jobs`.
    Ours,
    /// Someone else's, or a claim ([`Class::Claim`], whose record as last read stays in the
    /// index's `jobs`); `run` while it holds nodes (from the record fetched when it started).
    /// `run` boxed: most jobs hold no nodes, and a boxed run keeps every [`Tracked`] a
    /// quarter smaller (88 bytes to 64; 100 000 of them at a large site).
    Foreign { run: Option<Box<Run>> },
}

/// Whether a job's record is due for a fetch although its state did not change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Stale {
    #[default]
    No,
    /// Periodic refresh (does not hold up `jobs_synced_at`).
    Refresh,
    /// After a failure: must be fetched again before the index counts as synced.
    Resync,
}

/// The poller's bookkeeping for one job record slurmctld lists: 64 bytes, one for every job of
/// the cluster (in the map, ~70 bytes each as [`skip`] collects a first listing, ~130 inserted;
/// measured at 100 000).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracked {
    /// The state the index reflects (for ours: the state of the record in `jobs`).
    pub state: JobState,
    /// Entries in `/jobs/state/` (tasks still to run, for a pending array's meta record).
    pub entries: usize,
    pub known: Known,
    pub stale: Stale,
}

/// Everyone's jobs by id, as far as the poller follows them.
pub type Tracker = BTreeMap<u32, Tracked>;

/// Why a job's record is fetched; the order is the priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Why {
    OursChanged,
    Wanted,
    New,
    Started,
    Resync,
    Submitted,
    Refresh,
}

impl Why {
    /// Whether leaving it for a later cycle leaves the index incomplete. A started job of
    /// someone else only moves the per-node counts (`nodes_synced_at` is their clock), and a
    /// wanted one is waited for by the SlurmJob that named it, not by the whole index.
    fn blocks_sync(self) -> bool {
        !matches!(
            self,
            Self::Refresh | Self::Started | Self::Wanted | Self::Submitted
        )
    }
}

/// Bounds on what one cycle fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most `/job/{id}` requests in one cycle.
    pub detail_budget: usize,
    /// When more records than this are needed, a small cluster lists all its jobs instead.
    pub list_all_above: usize,
    /// "Small": at most this many jobs in slurmctld (decoding a listing costs ~11 MiB of memory
    /// per 1 000 jobs).
    pub full_list_max_jobs: usize,
}

/// What to fetch this cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetch {
    Nothing,
    /// `/job/{id}` for each, in this order.
    Details(Vec<u32>),
    /// One `/jobs` listing without `update_time`.
    Full,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollPlan {
    pub fetch: Fetch,
    /// Whether, once the fetch succeeds, the index is complete: nothing that blocks sync is left
    /// for a later cycle.
    pub complete: bool,
    /// Records needed but left for later cycles.
    pub deferred: usize,
}

/// A job holds nodes while it runs or is suspended.
pub fn holds_nodes(state: &JobState) -> bool {
    matches!(state.base, JobBaseState::Running | JobBaseState::Suspended)
}

/// What SlurmJobs asked of one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ask {
    #[default]
    None,
    /// A SlurmJob names it.
    Named,
    /// A submit of this process returned it: ours, whatever its record will say.
    Submitted,
}

/// What SlurmJobs asked of the poller, for one cycle's plan.
#[derive(Debug, Clone, Copy)]
pub struct Asks<'a> {
    /// Ids SlurmJobs named.
    pub wanted: &'a BTreeSet<u32>,
    /// Ids this process's submits returned whose records were not read yet.
    pub submitted: &'a BTreeSet<u32>,
    /// Those of `submitted` whose read waits this cycle: a burst of submits goes on.
    pub held: &'a BTreeSet<u32>,
    /// Ids whose record slurmrestd answered but could not be read
    /// ([`crate::state::index::Unreadable`]), until their next try is due: one job's record
    /// does not cost a request every cycle.
    pub waiting: &'a BTreeSet<u32>,
    /// Arrays some of whose task records read are ours ([`ArrayOwners`]): whose the array is
    /// is known from them, and they carry its tag in the index, also while the array's own
    /// record cannot be read (slurmctld answers it with every task record).
    pub arrays_of_ours: &'a BTreeSet<u32>,
}

impl Asks<'_> {
    pub fn of(&self, id: u32) -> Ask {
        if self.submitted.contains(&id) {
            Ask::Submitted
        } else if self.wanted.contains(&id) {
            Ask::Named
        } else {
            Ask::None
        }
    }
}

#[cfg(test)]
impl<'a> Asks<'a> {
    /// Names only: nothing submitted, nothing held.
    pub(crate) fn named(wanted: &'a BTreeSet<u32>) -> Self {
        static NONE: BTreeSet<u32> = BTreeSet::new();
        Self {
            wanted,
            submitted: &NONE,
            held: &NONE,
            waiting: &NONE,
            arrays_of_ours: &NONE,
        }
    }
}

/// A submit of this process for the SlurmJob `uid` returned `id`. Tracked as ours with a
/// record of another SlurmJob's (`jobs`), the record is another job's: slurmctld lost its
/// state and numbered again from where it was (it never hands a live id to a new job). It is
/// read again before the index speaks for the id, the old record dropped meanwhile: kept as
/// ours, an unchanged state would never be read again, and the new job's SlurmJob would find
/// no record of its own under the id and take its job for gone. This very job's record, read
/// by a cycle before its submit returned (common in a burst), is kept.
pub fn submit_returned(tracker: &mut Tracker, jobs: &BTreeMap<u32, Job>, id: u32, uid: &str) {
    let anothers = jobs
        .get(&id)
        .is_none_or(|record| record.owner.as_ref().is_none_or(|tag| tag.uid() != uid));
    if let Some(tracked) = tracker.get_mut(&id)
        && tracked.known == Known::Ours
        && anothers
    {
        tracked.known = Known::Unresolved;
    }
}

/// Why `listed` needs its record fetched, given what is known (`None`: it does not) and what
/// SlurmJobs asked of it.
pub fn needs(known: Option<&Tracked>, listed: &Listed, ask: Ask) -> Option<Why> {
    let unresolved = known.is_none_or(|t| t.known == Known::Unresolved);
    if ask == Ask::Submitted && unresolved {
        // Ours, as submitted: until it leaves the queue, its record only says how it waits.
        return Some(if listed.state.base == JobBaseState::Pending {
            Why::Submitted
        } else {
            Why::OursChanged
        });
    }
    let Some(tracked) = known else {
        return Some(Why::New);
    };
    let changed = tracked.state != listed.state;
    match &tracked.known {
        Known::Unresolved => Some(Why::New),
        Known::Skipped if ask != Ask::None => Some(Why::Wanted),
        Known::Skipped if holds_nodes(&listed.state) => Some(Why::Started),
        Known::Skipped => None,
        Known::Ours if changed => Some(Why::OursChanged),
        // A SlurmJob names it: an unsigned legacy tag is followed once named ([`Verdict`]).
        // A submit of ours returned it: slurmctld reused the id (it lost its state), and the
        // someone else's job known under it is gone.
        Known::Foreign { .. } if ask != Ask::None => Some(Why::Wanted),
        Known::Foreign { .. } if changed && holds_nodes(&listed.state) => Some(Why::Started),
        _ => match tracked.stale {
            Stale::Resync => Some(Why::Resync),
            Stale::Refresh => Some(Why::Refresh),
            Stale::No => None,
        },
    }
}

/// Decide what this cycle fetches. `asks`: what SlurmJobs asked for; `total`: how many jobs
/// slurmctld holds, as far as known (an incremental listing shows only some of them, and the
/// one-request listing of every job is for small clusters only).
pub fn plan(
    tracker: &Tracker,
    listed: &BTreeMap<u32, Listed>,
    asks: Asks<'_>,
    limits: Limits,
    total: usize,
) -> PollPlan {
    let mut held = 0;
    let mut unread_blocks = false;
    let mut needed: Vec<(Why, u32)> = listed
        .iter()
        .filter_map(|(id, l)| {
            let why = needs(tracker.get(id), l, asks.of(*id))?;
            if asks.waiting.contains(id) {
                held += 1;
                unread_blocks |= unread_blocks_sync(tracker, asks, *id);
                return None;
            }
            if why == Why::Submitted && asks.held.contains(id) {
                held += 1;
                return None;
            }
            Some((why, *id))
        })
        .collect();
    if needed.is_empty() {
        return PollPlan {
            fetch: Fetch::Nothing,
            complete: !unread_blocks,
            deferred: held,
        };
    }
    if needed.len() > limits.list_all_above && total.max(listed.len()) <= limits.full_list_max_jobs
    {
        return PollPlan {
            fetch: Fetch::Full,
            complete: true,
            deferred: 0,
        };
    }
    needed.sort_unstable();
    let budget = limits.detail_budget.max(1);
    let later = needed.split_off(needed.len().min(budget));
    PollPlan {
        fetch: Fetch::Details(needed.into_iter().map(|(_, id)| id).collect()),
        complete: !unread_blocks && !later.iter().any(|(why, _)| why.blocks_sync()),
        deferred: later.len() + held,
    }
}

/// Whether job `id`'s record, needed and unreadable, leaves the index incomplete: only while its
/// owner is unknown (it may be an earlier submit of ours that a SlurmJob must adopt, not submit
/// again). Ours (or one this process submitted, or an array whose tasks read are ours: they
/// show its tag) and others' that are known keep what the index knew of them; the index tells
/// that record is unreadable ([`crate::state::index::Unreadable`]), and one job's record does
/// not hold back every team's submits.
pub fn unread_blocks_sync(tracker: &Tracker, asks: Asks<'_>, id: u32) -> bool {
    asks.of(id) != Ask::Submitted
        && !asks.arrays_of_ours.contains(&id)
        && tracker
            .get(&id)
            .is_none_or(|t| t.known == Known::Unresolved)
}

/// What the fetch brought back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    Nothing,
    /// Records of the ids asked for (an array's id brings all its records); `missing`: ids
    /// slurmctld no longer knows (ended and purged between the two calls).
    Details {
        records: Vec<Job>,
        missing: Vec<u32>,
    },
    /// Every job slurmctld holds, at a moment after the state list.
    Full(Vec<Job>),
}

/// Start time + time limit, when both are known.
pub fn deadline(job: &Job) -> Option<DateTime<Utc>> {
    let limit = chrono::Duration::from_std(job.time_limit?).ok()?;
    job.start_time?.checked_add_signed(limit)
}

/// Where and until when a job runs, if it holds nodes.
pub fn run_of(job: &Job) -> Option<Run> {
    if !holds_nodes(&job.state) {
        return None;
    }
    Some(Run {
        nodes: job.nodes.as_deref()?.into(),
        deadline: deadline(job),
    })
}

/// Which jobs a state listing speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Every job slurmctld holds (`/jobs/state/` without ids): a job missing from it is gone.
    All,
    /// Only these ids (an incremental listing): one of them missing from the answer is gone,
    /// every other job is as it was. Ids the answer brings although not asked (the task records
    /// of an asked array) count as asked.
    Only(&'a BTreeSet<u32>),
    /// Every job but these: a full listing that ran beside incremental cycles ([`overlay`]).
    /// The ids those cycles saw meanwhile are newer in the index than in the listing; missing
    /// from it, they may have been submitted after it was taken.
    AllBut(&'a BTreeSet<u32>),
}

impl Scope<'_> {
    fn covers(&self, id: u32) -> bool {
        match self {
            Self::All => true,
            Self::Only(asked) => asked.contains(&id),
            Self::AllBut(seen) => !seen.contains(&id),
        }
    }
}

/// Adds to `seen` the ids a cycle's answers speak of (listed, fetched, or found missing): what
/// a full listing running beside the cycles must not overrule ([`overlay`]). The ids the cycle
/// asked about go there too (`asked`: none for a full listing).
pub fn saw(
    asked: Option<&BTreeSet<u32>>,
    listed: &BTreeMap<u32, Listed>,
    fetched: &Fetched,
    seen: &mut BTreeSet<u32>,
) {
    seen.extend(asked.into_iter().flatten());
    seen.extend(listed.keys());
    match fetched {
        Fetched::Nothing => {}
        Fetched::Details { records, missing } => {
            seen.extend(records.iter().map(|r| r.job_id));
            seen.extend(missing);
        }
        Fetched::Full(records) => seen.extend(records.iter().map(|r| r.job_id)),
    }
}

/// A full listing that ran beside the incremental cycles (asked before them, answered after
/// some), made one with this cycle's incremental listing: what a cycle saw since the full one
/// was asked (`seen`) or asks now (`asked`, answered in `now`) is newer than what the full
/// listing says of it, so those ids keep the index's state or take this cycle's; every other id
/// takes the full listing's, and missing from it, is gone (the index knew it before the
/// listing was asked, so it was there to be listed). Returns the listing and its scope's
/// exceptions: the ids neither listing speaks for.
pub fn overlay(
    full: BTreeMap<u32, Listed>,
    now: BTreeMap<u32, Listed>,
    seen: &BTreeSet<u32>,
    asked: &BTreeSet<u32>,
) -> (BTreeMap<u32, Listed>, BTreeSet<u32>) {
    let mut listed: BTreeMap<u32, Listed> = full
        .into_iter()
        .filter(|(id, _)| !seen.contains(id) && !asked.contains(id))
        .collect();
    let unspoken: BTreeSet<u32> = seen
        .iter()
        .filter(|id| !asked.contains(id) && !now.contains_key(id))
        .copied()
        .collect();
    listed.extend(now);
    (listed, unspoken)
}

/// The poller's new view: from the previous one, the state list and what was fetched.
/// Jobs the listing speaks for ([`Scope`]) and does not list are gone; a full `/jobs` listing
/// speaks for every job (its newer jobs are kept). The tracker is updated in place: at 100 000
/// jobs a second copy of it was the largest part of a cycle's peak memory (issue 19).
pub fn apply(
    mut tracker: Tracker,
    jobs: &BTreeMap<u32, Job>,
    listed: &BTreeMap<u32, Listed>,
    fetched: Fetched,
    scope: Scope<'_>,
    verdict: Verdict<'_>,
) -> (Tracker, BTreeMap<u32, Job>) {
    let (records, missing, full) = match fetched {
        Fetched::Nothing => (Vec::new(), Vec::new(), false),
        Fetched::Details { records, missing } => (records, missing, false),
        Fetched::Full(records) => (records, Vec::new(), true),
    };
    let mut fresh: BTreeMap<u32, Job> = records.into_iter().map(|j| (j.job_id, j)).collect();
    let mut next_jobs = BTreeMap::new();
    if full {
        // A full `/jobs` listing: only its records count.
        tracker.clear();
    } else {
        // Gone: what the listing speaks for but does not list, and what slurmctld no longer
        // knows. What it does not speak for stays as it was (an incremental listing's silence
        // says nothing); fresh records below still replace it.
        tracker.retain(|id, _| {
            !missing.contains(id) && (listed.contains_key(id) || !scope.covers(*id))
        });
        for id in tracker.keys().filter(|id| !listed.contains_key(id)) {
            if let Some(record) = jobs.get(id) {
                next_jobs.insert(*id, record.clone());
            }
        }
    }
    for (id, l) in listed {
        if missing.contains(id) {
            continue;
        }
        if let Some(record) = fresh.remove(id) {
            resolve(&mut tracker, &mut next_jobs, record, l.entries(), verdict);
            continue;
        }
        if full {
            // Listed, then gone by the time of the full listing.
            continue;
        }
        let Some(tracked) = tracker.get_mut(id) else {
            tracker.insert(
                *id,
                Tracked {
                    state: l.state.clone(),
                    entries: l.entries(),
                    known: Known::Unresolved,
                    stale: Stale::No,
                },
            );
            continue;
        };
        let changed = tracked.state != l.state;
        match &tracked.known {
            Known::Ours => {
                // A changed state whose record was not fetched keeps the old state, so the next
                // cycle fetches it: marked, so that incremental cycles follow it until then
                // even when the old state is settled (a requeue beyond one cycle's budget).
                // Tasks leaving a pending meta record only shorten its list.
                let Some(mut record) = jobs.get(id).cloned() else {
                    tracked.known = Known::Unresolved;
                    continue;
                };
                if changed {
                    tracked.stale = tracked.stale.max(Stale::Refresh);
                }
                if !changed && tracked.entries != l.entries() && !l.tasks.is_empty() {
                    record.array_task_string = record
                        .array_task_string
                        .as_deref()
                        .map(|old| with_tasks(old, &l.tasks));
                }
                next_jobs.insert(*id, record);
            }
            // Its record would tell nothing the state does not: no read due any more. A
            // claim's record ([`Class::Claim`]) takes the listed state.
            Known::Foreign { .. } if changed && !holds_nodes(&l.state) => {
                tracked.state = l.state.clone();
                tracked.known = Known::Foreign { run: None };
                tracked.stale = Stale::No;
                if let Some(record) = jobs.get(id) {
                    let mut record = record.clone();
                    record.state = l.state.clone();
                    next_jobs.insert(*id, record);
                }
            }
            // Foreign and started (record deferred): keep the old state to fetch it later,
            // marked so that incremental cycles follow it until then.
            Known::Foreign { .. } => {
                if changed {
                    tracked.stale = tracked.stale.max(Stale::Refresh);
                }
                if let Some(record) = jobs.get(id) {
                    next_jobs.insert(*id, record.clone());
                }
            }
            Known::Unresolved | Known::Skipped => tracked.state = l.state.clone(),
        }
        tracked.entries = l.entries();
    }
    // Records of jobs the state list did not have yet (newer than it), or did not ask about.
    for (_, record) in fresh {
        resolve(&mut tracker, &mut next_jobs, record, 1, verdict);
    }
    (tracker, next_jobs)
}

/// Others' jobs the index has not resolved yet, newest first: ids listed but not known, or known
/// only as new (their records not fetched yet), and neither asked for by a SlurmJob nor
/// submitted by this process. After a burst of submits larger than one cycle's `detail_budget`,
/// a catch-up may skip the older ones as the first listing does ([`skip`]).
pub fn backlog(tracker: &Tracker, listed: &BTreeMap<u32, Listed>, asks: Asks<'_>) -> Vec<u32> {
    listed
        .keys()
        .rev()
        .filter(|id| {
            asks.of(**id) == Ask::None
                && tracker
                    .get(id)
                    .is_none_or(|t| matches!(t.known, Known::Unresolved))
        })
        .copied()
        .collect()
}

/// Jobs not fetched on purpose: each of `ids` that is listed and not known, or known only as
/// new, becomes [`Known::Skipped`] (what is resolved stays). The first listing of a poller that
/// may skip (the cluster has accounting) skips every job it lists; a catch-up, a [`backlog`].
pub fn skip(
    tracker: &mut Tracker,
    listed: &BTreeMap<u32, Listed>,
    ids: impl IntoIterator<Item = u32>,
) {
    let skipped = |l: &Listed| Tracked {
        state: l.state.clone(),
        entries: l.entries(),
        known: Known::Skipped,
        stale: Stale::No,
    };
    if tracker.is_empty() {
        // The first listing, every job of the cluster: collected, the map's nodes are built
        // full, where inserts in order leave them half empty (7 MiB against 12 at 100 000;
        // `apply` then keeps them).
        *tracker = ids
            .into_iter()
            .filter_map(|id| Some((id, skipped(listed.get(&id)?))))
            .collect();
        return;
    }
    for id in ids {
        let Some(l) = listed.get(&id) else { continue };
        let tracked = tracker.entry(id).or_insert_with(|| skipped(l));
        if tracked.known == Known::Unresolved {
            tracked.known = Known::Skipped;
        }
    }
}

/// When slurmctld gave job `job` its id, or later (never earlier): ids are handed out in
/// sequence, so they grow with this time. A job's submit time; but an array task's record gets
/// its own id when the task starts, or when an update splits it off the pending array
/// (`scontrol update jobid=A_T ...`), and its submit time is the array's: its start time, once
/// it has started, is no earlier than its id. A pending task record's start time is an estimate
/// (or its last run's), and its id may be minutes old: `None`, as when the record does not say.
pub fn numbered_at(job: &Job) -> Option<DateTime<Utc>> {
    let task_record = job.array_job_id.is_some_and(|array| array != job.job_id);
    if !task_record {
        job.submit_time
    } else if job.state.base == JobBaseState::Pending {
        None
    } else {
        job.start_time
    }
}

/// Where the walk down the newest jobs may stop ([`reached`]): `recent` before the listing
/// was asked, on slurmctld's clock, which numbered the jobs and dated their submits; this
/// machine's may be minutes ahead of it, and would then stop the walk above jobs accounting has
/// not heard of yet. `controller_ahead` is a lower bound ([`ClockReading`]); `None` (slurmctld's
/// clock unknown) stops nowhere.
///
/// [`ClockReading`]: crate::slurm::types::ClockReading
pub fn walk_cutoff(
    listed_at: DateTime<Utc>,
    controller_ahead: Option<chrono::TimeDelta>,
    recent: Duration,
) -> Option<DateTime<Utc>> {
    let recent = chrono::TimeDelta::from_std(recent).ok()?;
    listed_at
        .checked_add_signed(controller_ahead?)?
        .checked_sub_signed(recent)
}

/// Where the walk down from the newest skipped jobs ([`skip`]) may stop at these records: the
/// highest id among them numbered before `cutoff` (so every lower id was too). Accounting has
/// had time to learn of those, which the walk then asks it to show for that id; the newer ones
/// the index resolves itself. `None`: go on.
pub fn reached(records: &[Job], cutoff: DateTime<Utc>) -> Option<u32> {
    records
        .iter()
        .filter(|job| numbered_at(job).is_some_and(|at| at < cutoff))
        .map(|job| job.job_id)
        .max()
}

/// Ids named through an unsigned tag ([`Verdict::named`]) are kept while slurmctld holds the
/// job, or a task of the array in `jobs` (the array's own record, its last task to start, may
/// be purged before the others).
pub fn keep_named(named: &mut Named, tracker: &Tracker, jobs: &BTreeMap<u32, Job>) {
    if named.is_empty() {
        return;
    }
    let arrays: BTreeSet<u32> = jobs.values().filter_map(|j| j.array_job_id).collect();
    named.retain(|id, _| tracker.contains_key(id) || arrays.contains(id));
}

/// Whether an ask for `id` stands after a cycle: until the job is resolved (an ask of a skipped
/// one), or slurmctld no longer holds it; and for a job named through its unsigned tag, until it
/// was read as ours (that read may wait for the next cycles' budget, or a record that could not
/// be read), and only while its record, as last read, runs as the user it was named for (an id
/// slurmctld reused for another user's job is not asked for again). `jobs`: the index's records
/// after the cycle.
pub fn still_wanted(
    id: u32,
    tracker: &Tracker,
    jobs: &BTreeMap<u32, Job>,
    verdict: Verdict<'_>,
) -> bool {
    match tracker.get(&id).map(|t| &t.known) {
        Some(Known::Skipped) => true,
        Some(Known::Foreign { .. }) => jobs
            .get(&id)
            .is_some_and(|job| job.has_unsigned_tag() && verdict.class(job) == Class::Ours),
        Some(Known::Unresolved | Known::Ours) | None => false,
    }
}

/// The ids whose owner the poller does not know (skipped, or not fetched yet): a job the index
/// does not hold may still be ours if it is one of these.
pub fn unresolved(tracker: &Tracker) -> BTreeSet<u32> {
    tracker
        .iter()
        .filter(|(_, t)| matches!(t.known, Known::Unresolved | Known::Skipped))
        .map(|(id, _)| *id)
        .collect()
}

/// Whether a job has ended and nothing about it is still moving: a final base state and no flag
/// (COMPLETING, STAGE_OUT, REQUEUED, ...). Such a job of ours changes again only if someone
/// requeues it or slurmctld purges it, and the periodic full listing shows both; so incremental
/// cycles stop asking about it, and their cost grows with the operator's live jobs, not with
/// the ended ones slurmctld keeps until `MinJobAge`. The price: a job requeued by hand that
/// runs and ends again in the same state between two full listings keeps its first run's
/// record.
pub fn settled(state: &JobState) -> bool {
    state.base.is_finished() && state.flags.is_empty()
}

/// The jobs an incremental cycle asks about: ours that have not [`settled`] (a change or their
/// end must show at once), those holding nodes (the per-node counts), those not resolved yet,
/// those whose record is to be fetched again ([`Stale`]: a change a listing showed beyond one
/// cycle's budget, a refresh, a resync), and the ids SlurmJobs asked for (a job just
/// submitted, or one a SlurmJob names after a restart).
pub fn followed(tracker: &Tracker, wanted: &BTreeSet<u32>) -> BTreeSet<u32> {
    let mut ids: BTreeSet<u32> = tracker
        .iter()
        .filter(|(_, t)| {
            t.stale != Stale::No
                || match &t.known {
                    Known::Ours => !settled(&t.state),
                    Known::Unresolved => true,
                    Known::Foreign { .. } | Known::Skipped => holds_nodes(&t.state),
                }
        })
        .map(|(id, _)| *id)
        .collect();
    ids.extend(wanted);
    ids
}

/// The ids incremental cycle number `cycle` asks about besides its probe windows: the
/// [`followed`] ones, but a record that answers with many entries only in its turn. slurmrestd
/// answers a pending array's meta record with one entry per task still to run (50 000 for
/// `--array=0-49999%20`, ~80 bytes each pretty-printed), so one such SlurmJob asked every cycle
/// cost more than thousands of plain jobs. A record of `entries` entries is asked in one cycle of
/// every `entries / per_cycle` (spread by id): on average what `per_cycle` jobs cost. Its tasks
/// that start are records of their own under new ids, asked at once (the probe, then as ours);
/// a change of the meta record itself (the array cancelled, its last task started) shows up to
/// that many cycles later, or at the full listing. Only ours are paced: wanted ones, records to
/// fetch again ([`Stale`]) and any not known to be ours (an unresolved one keeps the index
/// incomplete until read) are asked every cycle.
pub fn asked_in_cycle(
    tracker: &Tracker,
    wanted: &BTreeSet<u32>,
    cycle: u64,
    per_cycle: usize,
) -> BTreeSet<u32> {
    let mut ids = followed(tracker, wanted);
    ids.retain(|id| {
        wanted.contains(id)
            || tracker.get(id).is_none_or(|t| {
                let every = u64::try_from(t.entries / per_cycle.max(1)).unwrap_or(u64::MAX);
                every <= 1
                    // Whose it is unknown: the index is incomplete until it is read.
                    || t.known != Known::Ours
                    || t.stale != Stale::No
                    || cycle.wrapping_add(u64::from(*id)) % every == 0
            })
    });
    ids
}

/// Whether an incremental listing may replace a full one, given how many jobs it would follow.
/// A full listing is one request of ~80 bytes a job; an incremental one asks about the followed
/// jobs (and a window of ids) by id, in requests of a few hundred ids. It pays only when it
/// follows at most a quarter of the jobs, and past `width` jobs: a full listing of a tiny queue
/// costs no more than the probe, and shows where slurmctld's numbering stands, which an empty
/// queue does not tell a probe.
pub fn incremental_pays(tracker: &Tracker, followed: usize, width: u32) -> bool {
    tracker.len() > width as usize && followed.saturating_mul(4) <= tracker.len()
}

/// The `width` ids above `highest`: where slurmctld's next jobs are (it numbers them in
/// sequence; ids that were never used, or are beyond the window, wait for the full listing).
pub fn probe(highest: u32, width: u32) -> std::ops::RangeInclusive<u32> {
    highest.saturating_add(1)..=highest.saturating_add(width.max(1))
}

/// Where slurmctld's job numbering stands, as far as the poller has seen: incremental cycles
/// probe above it ([`probe`]).
///
/// A listing of every job may end lower than the ids seen before, for one of two reasons: the
/// newest jobs were purged (a quiet spell longer than `MinJobAge`: the next job still gets the
/// next id above them), or slurmctld's ids wrapped at `MaxJobId` (the next job gets a low id).
/// The listing cannot tell which, so until a new job shows where the numbering went, the
/// cycles probe above both ([`Numbering::windows`]): one window more, not a minute's wait for
/// the next full listing to see others' new jobs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Numbering {
    /// The highest id seen, since the last listing of every job for the part before it.
    pub high_water: u32,
    /// Set when a listing of every job ended below the ids seen before: (the highest id seen
    /// before, the listing's highest).
    lowered: Option<(u32, u32)>,
    /// Where a probe that had to stop (a burst beyond its rounds) stopped: the next goes on
    /// from there, not from the highest id seen. A job above the burst (one this process
    /// submitted, or a SlurmJob names) is tracked before the probe gets to it, and probing
    /// above that would leave the ids between never listed, with the cycles counted complete.
    resume: Option<u32>,
}

impl Numbering {
    /// A listing of every job, whose highest id is `top` (0: none).
    pub fn listed(&mut self, top: u32) {
        // It listed what the probe had left.
        self.resume = None;
        if top < self.high_water {
            let before = self
                .lowered
                .map_or(self.high_water, |(b, _)| b.max(self.high_water));
            self.lowered = Some((before, top));
        }
        self.high_water = top;
    }

    /// The highest id the poller tracks after a cycle: a new job above the listing's highest
    /// shows where the numbering went on, above the ids seen before or not.
    pub fn seen(&mut self, highest_tracked: u32) {
        self.high_water = self.high_water.max(highest_tracked);
        if self.lowered.is_some_and(|(_, top)| self.high_water > top) {
            self.lowered = None;
        }
    }

    /// An incremental cycle probed up to `to`, and got to the end of the ids (`complete`) or
    /// had to stop there.
    pub fn probed(&mut self, to: u32, complete: bool) {
        self.resume = (!complete).then_some(to);
    }

    /// The windows an incremental cycle probes: above the highest id seen (or where the last
    /// probe stopped, below it), and above the one seen before a listing ended lower, while
    /// that is open.
    pub fn windows(
        &self,
        width: u32,
    ) -> (
        std::ops::RangeInclusive<u32>,
        Option<std::ops::RangeInclusive<u32>>,
    ) {
        let from = self
            .resume
            .map_or(self.high_water, |to| to.min(self.high_water));
        (
            probe(from, width),
            self.lowered.map(|(before, _)| probe(before, width)),
        )
    }
}

fn resolve(
    tracker: &mut Tracker,
    jobs: &mut BTreeMap<u32, Job>,
    record: Job,
    entries: usize,
    verdict: Verdict<'_>,
) {
    let class = verdict.class(&record);
    let known = if class == Class::Ours {
        Known::Ours
    } else {
        Known::Foreign {
            run: run_of(&record).map(Box::new),
        }
    };
    tracker.insert(
        record.job_id,
        Tracked {
            // The record is at least as new as the state list.
            state: record.state.clone(),
            entries,
            known,
            stale: Stale::No,
        },
    );
    if class == Class::Other {
        // It may have been carried over as ours, with the tag since removed.
        jobs.remove(&record.job_id);
    } else {
        jobs.insert(record.job_id, record);
    }
}

/// A meta record's task expression with these tasks, keeping a throttle (`"0-3%2"` → `"2-3%2"`).
fn with_tasks(old: &str, tasks: &[u32]) -> String {
    let ranges = hostlist::task_ranges(tasks);
    match old.split_once('%') {
        Some((_, throttle)) => format!("{ranges}%{throttle}"),
        None => ranges,
    }
}

/// Arrays some of whose task records were read, by the array's id (its meta record's):
/// `true` while every one read was someone else's. One entry per array, not per task.
pub type ArrayOwners = BTreeMap<u32, bool>;

/// Keep what `owners` says of the arrays the poller still tracks; of one whose tasks were ours,
/// only while a task record of it is in `jobs`: those records, with its tag, are what lets its
/// unreadable record not hold up the sync ([`Asks::arrays_of_ours`]). Once they are purged, the
/// array's owner is unknown again until a task of it is read.
pub fn keep_array_owners(owners: &mut ArrayOwners, tracker: &Tracker, jobs: &BTreeMap<u32, Job>) {
    let with_tasks: BTreeSet<u32> = jobs
        .values()
        .filter_map(|job| job.array_job_id.filter(|array| *array != job.job_id))
        .collect();
    owners.retain(|array, all_foreign| {
        tracker.contains_key(array) && (*all_foreign || with_tasks.contains(array))
    });
}

/// The arrays some of whose task records read are ours ([`Asks::arrays_of_ours`]).
pub fn arrays_of_ours(owners: &ArrayOwners) -> BTreeSet<u32> {
    owners
        .iter()
        .filter(|(_, all_foreign)| !**all_foreign)
        .map(|(array, _)| *array)
        .collect()
}

/// Learn from `fetched` whose arrays are whose: a task record carries its array's owner (the
/// tasks of an array share its user and comment).
pub fn note_array_owners(fetched: &Fetched, owners: &mut ArrayOwners, verdict: Verdict<'_>) {
    let records = match fetched {
        Fetched::Nothing => return,
        Fetched::Details { records, .. } | Fetched::Full(records) => records,
    };
    for record in records {
        let Some(array) = record.array_job_id.filter(|a| *a != record.job_id) else {
            continue;
        };
        let foreign = verdict.class(record) != Class::Ours;
        owners
            .entry(array)
            .and_modify(|all| *all &= foreign)
            .or_insert(foreign);
    }
}

/// Ids just named through an unsigned tag, with their users ([`Verdict::named`]): an array's
/// tasks read before were claims, and so was what they told of the array
/// ([`note_array_owners`]). For an array with tasks in `jobs` that run as the user it was named
/// for, forgets that, and returns those tasks to read again, as ours now.
pub fn renamed_arrays<'a>(
    named: impl IntoIterator<Item = (&'a u32, &'a String)>,
    jobs: &BTreeMap<u32, Job>,
    owners: &mut ArrayOwners,
) -> BTreeSet<u32> {
    let named: BTreeMap<u32, &str> = named
        .into_iter()
        .map(|(id, user)| (*id, user.as_str()))
        .collect();
    if named.is_empty() {
        return BTreeSet::new();
    }
    let mut tasks = BTreeSet::new();
    for job in jobs.values() {
        if let Some(array) = job.array_job_id.filter(|a| *a != job.job_id)
            && named
                .get(&array)
                .is_some_and(|user| job.user_name.as_deref() == Some(*user))
        {
            owners.remove(&array);
            tasks.insert(job.job_id);
        }
    }
    tasks
}

/// An array's meta record that cannot be read (slurmctld answers `GET /job/{array}` with every
/// record of the array: thousands of tasks past `maxResponseSize`) and whose owner is unknown
/// would keep the index incomplete for as long as the array stays in slurmctld, holding up every
/// new SlurmJob of the cluster ([`unread_blocks_sync`]). When the task records read so far are
/// all someone else's, so is the array: it becomes [`Known::Foreign`]. Only for a record whose
/// own read failed (`unreadable`), never in place of a read; one of ours is still read (its
/// SlurmJob needs the record). Returns the ids resolved so: their records are no longer needed
/// (one that holds nodes is read again only when its state changes, as any other's).
pub fn resolve_unreadable_arrays(
    tracker: &mut Tracker,
    unreadable: impl IntoIterator<Item = u32>,
    owners: &ArrayOwners,
) -> Vec<u32> {
    let mut resolved = Vec::new();
    for id in unreadable {
        let Some(tracked) = tracker.get_mut(&id) else {
            continue;
        };
        if tracked.known == Known::Unresolved && owners.get(&id) == Some(&true) {
            tracked.known = Known::Foreign { run: None };
            resolved.push(id);
        }
    }
    resolved
}

/// After a failure: our jobs' records must be fetched again before the index counts as synced.
/// Everyone else's need nothing more than the next state list (which is always complete): new
/// jobs, ended ones and started ones are fetched as usual, and what the state list does not show
/// is caught by the periodic refresh, as while up.
pub fn mark_resync(tracker: &mut Tracker) {
    for tracked in tracker.values_mut() {
        if tracked.known == Known::Ours {
            tracked.stale = Stale::Resync;
        }
    }
}

/// Mark ours not finished and every job holding nodes for a periodic refresh.
pub fn mark_refresh(tracker: &mut Tracker) {
    for tracked in tracker.values_mut() {
        let due = match &tracked.known {
            Known::Ours => !tracked.state.is_final(),
            Known::Foreign { .. } => holds_nodes(&tracked.state),
            Known::Unresolved | Known::Skipped => false,
        };
        if due && tracked.stale < Stale::Refresh {
            tracked.stale = Stale::Refresh;
        }
    }
}

/// Mark at most `max` of our pending jobs for a refresh of their record (why they wait, their
/// priority, Slurm's estimate of their start), the ones after id `after` first, wrapping
/// around: each pending job comes up in turn, however many there are. Returns where the next
/// round goes on.
pub fn mark_pending_refresh(tracker: &mut Tracker, after: u32, max: usize) -> u32 {
    let pending = |t: &Tracked| {
        t.known == Known::Ours && t.state.base == JobBaseState::Pending && t.stale == Stale::No
    };
    let ids: Vec<u32> = tracker
        .range(after.saturating_add(1)..)
        .chain(tracker.range(..=after))
        .filter(|(_, t)| pending(t))
        .map(|(id, _)| *id)
        .take(max)
        .collect();
    for id in &ids {
        if let Some(tracked) = tracker.get_mut(id) {
            tracked.stale = Stale::Refresh;
        }
    }
    ids.last().copied().unwrap_or(after)
}

/// Per node, the jobs running there: ours from their records, others from what was fetched when
/// they started.
pub fn node_jobs(tracker: &Tracker, jobs: &BTreeMap<u32, Job>) -> BTreeMap<String, NodeJobs> {
    let mut out: BTreeMap<String, NodeJobs> = BTreeMap::new();
    for (id, tracked) in tracker {
        let run = match &tracked.known {
            Known::Ours => jobs.get(id).and_then(run_of),
            Known::Foreign { run } => run.as_deref().cloned(),
            Known::Unresolved | Known::Skipped => None,
        };
        let Some(run) = run else { continue };
        for node in hostlist::expand(&run.nodes) {
            let entry = out.entry(node).or_default();
            entry.deadline = if entry.running == 0 {
                run.deadline
            } else {
                match (entry.deadline, run.deadline) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                }
            };
            entry.running += 1;
        }
    }
    out
}

/// Whether a node of a SlurmNodeSet appeared, left, or changed state or allocation between the
/// last node list and this one: the jobs on it may be other users' that incremental cycles do
/// not follow (pending when last listed, started since), so the job listing must be full.
/// Other nodes do not matter: only SlurmNodeSets read the per-node job counts.
pub fn owned_nodes_moved(old: &BTreeMap<String, Node>, new: &[Node]) -> bool {
    let mut owned = 0;
    for node in new.iter().filter(|n| n.owner.is_some()) {
        owned += 1;
        match old.get(&node.name) {
            Some(before)
                if before.owner == node.owner
                    && before.state == node.state
                    && before.alloc_cpus == node.alloc_cpus => {}
            _ => return true,
        }
    }
    owned != old.values().filter(|n| n.owner.is_some()).count()
}

/// How long the poller waits between cycles while slurmrestd fails: from `interval`, doubling
/// with jitter, up to `max(interval, min(10 × interval, 30 s))`.
pub fn backoff_cap(interval: Duration) -> Duration {
    interval.max((interval * 10).min(Duration::from_secs(30)))
}

#[cfg(test)]
mod incremental_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::types::ExitStatus;

    /// The user every test record runs as.
    const USER: &str = "alice";

    fn key() -> &'static TagKey {
        static KEY: std::sync::LazyLock<TagKey> =
            std::sync::LazyLock::new(|| TagKey::new(&[7; 32]).unwrap());
        &KEY
    }

    /// A tag of ours, signed for [`USER`].
    fn ours() -> &'static str {
        static OURS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            key().comment(&crate::slurm::tag::OwnerTag::new("u1", 1), USER)
        });
        &OURS
    }

    /// What the poller decides with the test key, no id named.
    fn verdict() -> Verdict<'static> {
        static NONE: Named = Named::new();
        Verdict {
            key: key(),
            named: &NONE,
        }
    }

    /// `ids` named for `user`.
    fn named(ids: &[u32], user: &str) -> Named {
        ids.iter().map(|id| (*id, user.to_owned())).collect()
    }

    fn state(s: &str) -> JobState {
        JobState::from_strings(&s.split('+').collect::<Vec<_>>())
    }

    fn listed(s: &str) -> Listed {
        Listed {
            state: state(s),
            tasks: vec![],
        }
    }

    fn t(epoch: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(epoch, 0).unwrap()
    }

    fn job(id: u32, s: &str, comment: Option<&str>) -> Job {
        let mut job = Job {
            job_id: id,
            name: format!("job{id}"),
            state: state(s),
            nodes: holds_nodes(&state(s)).then(|| "n1".to_owned()),
            submit_time: Some(t(1_000)),
            start_time: holds_nodes(&state(s)).then(|| t(2_000)),
            time_limit: Some(Duration::from_secs(600)),
            user_name: Some(USER.to_owned()),
            ..Job::bare()
        };
        job.set_comment(comment.map(str::to_owned));
        job
    }

    fn tracked(s: &str, known: Known) -> Tracked {
        Tracked {
            state: state(s),
            entries: 1,
            known,
            stale: Stale::No,
        }
    }

    fn foreign() -> Known {
        Known::Foreign { run: None }
    }

    fn limits(budget: usize, full_max: usize) -> Limits {
        Limits {
            detail_budget: budget,
            list_all_above: budget,
            full_list_max_jobs: full_max,
        }
    }

    /// An unreadable meta record of unknown owner is someone else's once every task record of
    /// its array read so far is; never one read fine, one skipped on purpose, one whose tasks
    /// include ours, nor one no task record speaks for.
    #[test]
    fn an_unreadable_array_is_someone_elses_when_its_tasks_are() {
        let task = |id: u32, array: u32, comment: Option<&str>| Job {
            array_job_id: Some(array),
            array_task_id: Some(id - array),
            ..job(id, "COMPLETED", comment)
        };
        let mut owners = ArrayOwners::new();
        note_array_owners(
            &Fetched::Details {
                records: vec![
                    task(11, 10, None),
                    task(12, 10, None),
                    task(21, 20, None),
                    task(22, 20, Some(ours())),
                    task(31, 30, None),
                    task(41, 40, None),
                    // A plain job, and a meta record read whole: no task of another record.
                    job(50, "PENDING", None),
                    Job {
                        array_job_id: Some(60),
                        ..job(60, "PENDING", None)
                    },
                ],
                missing: vec![],
            },
            &mut owners,
            verdict(),
        );
        assert_eq!(
            owners,
            [(10, true), (20, false), (30, true), (40, true)].into()
        );
        // A later read of an ours task of 30 keeps it from being anyone's but its own.
        note_array_owners(
            &Fetched::Full(vec![task(32, 30, Some(ours()))]),
            &mut owners,
            verdict(),
        );
        assert!(!owners[&30]);

        let mut tracker: Tracker = [
            (10, tracked("PENDING", Known::Unresolved)),
            (20, tracked("PENDING", Known::Unresolved)),
            (30, tracked("PENDING", Known::Unresolved)),
            (40, tracked("RUNNING", Known::Unresolved)),
            (45, tracked("PENDING", Known::Unresolved)),
            (50, tracked("PENDING", Known::Skipped)),
            (60, tracked("PENDING", Known::Unresolved)),
        ]
        .into();
        owners.insert(50, true);
        // 60 was read: not unreadable, so left to its read even were its tasks known.
        owners.insert(60, true);
        let resolved = resolve_unreadable_arrays(&mut tracker, [10, 20, 30, 40, 45, 50], &owners);
        assert_eq!(resolved, [10, 40]);
        assert_eq!(tracker[&10].known, foreign());
        assert_eq!(tracker[&10].stale, Stale::No);
        assert_eq!(tracker[&40].known, foreign());
        assert_eq!(
            tracker[&40].stale,
            Stale::No,
            "not asked again for its nodes"
        );
        for (id, known) in [
            (20, Known::Unresolved),
            (30, Known::Unresolved),
            (45, Known::Unresolved),
            (50, Known::Skipped),
            (60, Known::Unresolved),
        ] {
            assert_eq!(tracker[&id].known, known, "{id}");
        }
        // Now known: it holds up the sync no more.
        let none = BTreeSet::new();
        let asks = Asks {
            wanted: &none,
            submitted: &none,
            held: &none,
            waiting: &none,
            arrays_of_ours: &none,
        };
        assert!(!unread_blocks_sync(&tracker, asks, 10));
        assert!(unread_blocks_sync(&tracker, asks, 20));
        // An array whose tasks read are ours: known from them.
        let twenty: BTreeSet<u32> = [20].into();
        let ours = Asks {
            arrays_of_ours: &twenty,
            ..asks
        };
        assert!(!unread_blocks_sync(&tracker, ours, 20));
    }

    #[test]
    fn which_jobs_need_their_record() {
        let stale = |s: &str, known: Known, stale: Stale| Tracked {
            stale,
            ..tracked(s, known)
        };
        let table: Vec<(&str, Option<Tracked>, &str, Option<Why>)> = vec![
            ("never seen", None, "PENDING", Some(Why::New)),
            (
                "seen, never resolved",
                Some(tracked("PENDING", Known::Unresolved)),
                "PENDING",
                Some(Why::New),
            ),
            (
                "ours unchanged",
                Some(tracked("RUNNING", Known::Ours)),
                "RUNNING",
                None,
            ),
            (
                "ours started",
                Some(tracked("PENDING", Known::Ours)),
                "RUNNING",
                Some(Why::OursChanged),
            ),
            (
                "ours ended",
                Some(tracked("RUNNING", Known::Ours)),
                "COMPLETED",
                Some(Why::OursChanged),
            ),
            (
                "ours: flags count",
                Some(tracked("COMPLETED+COMPLETING", Known::Ours)),
                "COMPLETED",
                Some(Why::OursChanged),
            ),
            (
                "foreign started",
                Some(tracked("PENDING", foreign())),
                "RUNNING",
                Some(Why::Started),
            ),
            (
                "foreign ended: nothing to fetch",
                Some(tracked("RUNNING", foreign())),
                "COMPLETED",
                None,
            ),
            (
                "foreign pending reason or requeue flags: nothing to fetch",
                Some(tracked("PENDING", foreign())),
                "PENDING+REQUEUED",
                None,
            ),
            (
                "foreign unchanged",
                Some(tracked("PENDING", foreign())),
                "PENDING",
                None,
            ),
            (
                "after a failure, ours",
                Some(stale("PENDING", Known::Ours, Stale::Resync)),
                "PENDING",
                Some(Why::Resync),
            ),
            (
                "periodic refresh",
                Some(stale("RUNNING", Known::Ours, Stale::Refresh)),
                "RUNNING",
                Some(Why::Refresh),
            ),
            (
                "a change outranks a resync",
                Some(stale("PENDING", Known::Ours, Stale::Resync)),
                "RUNNING",
                Some(Why::OursChanged),
            ),
        ];
        for (what, known, now, want) in table {
            assert_eq!(
                needs(known.as_ref(), &listed(now), Ask::None),
                want,
                "{what}"
            );
        }
    }

    fn listing(jobs: &[(u32, &str)]) -> BTreeMap<u32, Listed> {
        jobs.iter().map(|(id, s)| (*id, listed(s))).collect()
    }

    #[test]
    fn a_quiet_cycle_fetches_nothing_and_is_complete() {
        let tracker: Tracker = [
            (1, tracked("PENDING", foreign())),
            (2, tracked("RUNNING", Known::Ours)),
        ]
        .into();
        let plan = plan(
            &tracker,
            &listing(&[(1, "PENDING"), (2, "RUNNING")]),
            Asks::named(&BTreeSet::new()),
            limits(4, 100),
            0,
        );
        assert_eq!(
            plan,
            PollPlan {
                fetch: Fetch::Nothing,
                complete: true,
                deferred: 0
            }
        );
    }

    #[test]
    fn a_job_this_process_submitted_needs_its_record_only_to_say_how_it_waits() {
        let table: Vec<(&str, Option<Tracked>, &str, Option<Why>)> = vec![
            ("never seen, pending", None, "PENDING", Some(Why::Submitted)),
            (
                "seen, not read, pending",
                Some(tracked("PENDING", Known::Unresolved)),
                "PENDING",
                Some(Why::Submitted),
            ),
            (
                "never seen, running",
                None,
                "RUNNING",
                Some(Why::OursChanged),
            ),
            (
                "seen pending, not read, started",
                Some(tracked("PENDING", Known::Unresolved)),
                "RUNNING",
                Some(Why::OursChanged),
            ),
            (
                "seen pending, not read, cancelled",
                Some(tracked("PENDING", Known::Unresolved)),
                "CANCELLED",
                Some(Why::OursChanged),
            ),
            (
                "read: as any of ours",
                Some(tracked("PENDING", Known::Ours)),
                "PENDING",
                None,
            ),
            (
                "skipped (named by a SlurmJob)",
                Some(tracked("PENDING", Known::Skipped)),
                "PENDING",
                Some(Why::Wanted),
            ),
            (
                "someone else's, ended, before slurmctld lost its state and reused the id",
                Some(tracked("COMPLETED", foreign())),
                "PENDING",
                Some(Why::Wanted),
            ),
        ];
        for (what, known, now, want) in table {
            assert_eq!(
                needs(known.as_ref(), &listed(now), Ask::Submitted),
                want,
                "{what}"
            );
        }
    }

    #[test]
    fn an_unreadable_record_waits_and_holds_up_the_sync_only_while_its_owner_is_unknown() {
        // 1: ours, changed; 2: someone else's, started; 3: new, owner unknown; 4: ours, as it was.
        let tracker: Tracker = [
            (1, tracked("PENDING", Known::Ours)),
            (2, tracked("PENDING", foreign())),
            (4, tracked("PENDING", Known::Ours)),
        ]
        .into();
        let listed = listing(&[
            (1, "RUNNING"),
            (2, "RUNNING"),
            (3, "PENDING"),
            (4, "PENDING"),
        ]);
        let none = BTreeSet::new();
        fn asks(waiting: &BTreeSet<u32>) -> Asks<'_> {
            static NONE: BTreeSet<u32> = BTreeSet::new();
            Asks {
                wanted: &NONE,
                submitted: &NONE,
                held: &NONE,
                waiting,
                arrays_of_ours: &NONE,
            }
        }
        let p = plan(&tracker, &listed, asks(&none), limits(16, 1_000), 4);
        assert_eq!(p.fetch, Fetch::Details(vec![1, 3, 2]), "by priority");
        assert!(p.complete);
        // Only the one whose owner is unknown holds up the sync.
        let table: [(&[u32], &[u32], bool); 5] = [
            (&[2], &[1, 3], true),
            (&[1], &[3, 2], true),
            (&[3], &[1, 2], false),
            // Not needed this cycle: it does not count.
            (&[4], &[1, 3, 2], true),
            (&[1, 2, 3], &[], false),
        ];
        for (waiting, fetched, complete) in table {
            let waiting: BTreeSet<u32> = waiting.iter().copied().collect();
            let p = plan(&tracker, &listed, asks(&waiting), limits(16, 1_000), 4);
            let want = if fetched.is_empty() {
                Fetch::Nothing
            } else {
                Fetch::Details(fetched.to_vec())
            };
            assert_eq!(p.fetch, want, "waiting {waiting:?}");
            assert_eq!(p.complete, complete, "waiting {waiting:?}");
            assert_eq!(
                p.deferred,
                waiting.len() - usize::from(waiting.contains(&4))
            );
        }
        // The same test for a record asked for and not read this cycle; one this process
        // submitted is known to be ours.
        let blocks: Vec<bool> = (1..=4)
            .map(|id| unread_blocks_sync(&tracker, asks(&none), id))
            .collect();
        assert_eq!(blocks, [false, false, true, false]);
        let three: BTreeSet<u32> = [3].into();
        let submitted = Asks {
            submitted: &three,
            ..asks(&none)
        };
        assert!(!unread_blocks_sync(&tracker, submitted, 3));
    }

    #[test]
    fn records_of_a_burst_of_submits_wait_without_holding_up_the_sync() {
        // 20 jobs of this process's burst (1..=20, one of which started), and someone else's
        // new job 30.
        let mut jobs: Vec<(u32, &str)> = (1..=20).map(|id| (id, "PENDING")).collect();
        jobs[6].1 = "RUNNING";
        jobs.push((30, "PENDING"));
        let listed = listing(&jobs);
        let submitted: BTreeSet<u32> = (1..=20).collect();
        let none = BTreeSet::new();
        let held = Asks {
            wanted: &submitted,
            submitted: &submitted,
            held: &submitted,
            waiting: &none,
            arrays_of_ours: &none,
        };
        // A small cluster: 21 needed records would make one full listing; the held ones do not
        // count toward it.
        let p = plan(&Tracker::new(), &listed, held, limits(16, 1_000), 0);
        assert_eq!(
            p.fetch,
            Fetch::Details(vec![7, 30]),
            "the started one, and whose 30 is"
        );
        assert!(p.complete, "held records do not hold up the sync");
        assert_eq!(p.deferred, 19);
        // The burst paused: every record is read, ours first, and the sync waits for none.
        let paused = Asks {
            wanted: &none,
            submitted: &submitted,
            held: &none,
            waiting: &none,
            arrays_of_ours: &none,
        };
        let p = plan(&Tracker::new(), &listed, paused, limits(64, 1_000), 0);
        let Fetch::Details(ids) = p.fetch else {
            panic!("within the budget: {:?}", p.fetch)
        };
        assert_eq!(ids[..2], [7, 30]);
        assert_eq!(ids.len(), 21);
        let p = plan(&Tracker::new(), &listed, paused, limits(4, 0), 0);
        assert_eq!(p.fetch, Fetch::Details(vec![7, 30, 1, 2]));
        assert!(
            p.complete,
            "only this process's pending jobs are left: {p:?}"
        );
        // Not submitted here, the same jobs are anyone's: each must be resolved for the sync.
        let p = plan(
            &Tracker::new(),
            &listed,
            Asks::named(&none),
            limits(4, 0),
            0,
        );
        assert!(!p.complete);
        // A catch-up never skips them.
        let mut tracker = Tracker::new();
        tracker.insert(30, tracked("PENDING", Known::Unresolved));
        assert_eq!(backlog(&tracker, &listed, held), vec![30]);
    }

    #[test]
    fn records_within_budget_are_fetched_most_important_first() {
        let tracker: Tracker = [
            (1, tracked("PENDING", foreign())),
            (2, tracked("PENDING", Known::Ours)),
            (
                3,
                Tracked {
                    stale: Stale::Refresh,
                    ..tracked("RUNNING", Known::Ours)
                },
            ),
        ]
        .into();
        let listed = listing(&[
            (1, "RUNNING"),
            (2, "RUNNING"),
            (3, "RUNNING"),
            (9, "PENDING"),
        ]);
        let p = plan(
            &tracker,
            &listed,
            Asks::named(&BTreeSet::new()),
            limits(4, 100),
            0,
        );
        assert_eq!(p.fetch, Fetch::Details(vec![2, 9, 1, 3]));
        assert!(p.complete);
    }

    #[test]
    fn beyond_budget_a_small_cluster_lists_everything_once() {
        let listed = listing(&[(1, "PENDING"), (2, "PENDING"), (3, "PENDING")]);
        let p = plan(
            &Tracker::new(),
            &listed,
            Asks::named(&BTreeSet::new()),
            limits(2, 3),
            0,
        );
        assert_eq!(p.fetch, Fetch::Full);
        assert!(p.complete);
    }

    #[test]
    fn beyond_budget_a_large_cluster_defers_the_rest() {
        let listed = listing(&[
            (1, "PENDING"),
            (2, "PENDING"),
            (3, "PENDING"),
            (4, "PENDING"),
        ]);
        let p = plan(
            &Tracker::new(),
            &listed,
            Asks::named(&BTreeSet::new()),
            limits(2, 3),
            0,
        );
        assert_eq!(p.fetch, Fetch::Details(vec![1, 2]));
        assert!(!p.complete, "unresolved jobs are left");
        assert_eq!(p.deferred, 2);
        // Refreshes left for later do not hold up the sync.
        let mut tracker: Tracker = (1..=4)
            .map(|id| (id, tracked("RUNNING", Known::Ours)))
            .collect();
        mark_refresh(&mut tracker);
        let listed = listing(&[
            (1, "RUNNING"),
            (2, "RUNNING"),
            (3, "RUNNING"),
            (4, "RUNNING"),
        ]);
        let p = plan(
            &tracker,
            &listed,
            Asks::named(&BTreeSet::new()),
            limits(2, 3),
            0,
        );
        assert_eq!(
            (p.fetch, p.complete, p.deferred),
            (Fetch::Details(vec![1, 2]), true, 2)
        );
    }

    #[test]
    fn requests_per_cycle_do_not_grow_with_jobs() {
        let limits = Limits {
            detail_budget: 256,
            list_all_above: 16,
            full_list_max_jobs: 1_000,
        };
        for count in [1u32, 10, 200, 5_000, 10_000] {
            let all: Vec<(u32, &str)> = (1..=count).map(|id| (id, "PENDING")).collect();
            let listed = listing(&all);
            // Nothing known yet (startup): one listing on a small cluster, else the budget.
            let p = plan(
                &Tracker::new(),
                &listed,
                Asks::named(&BTreeSet::new()),
                limits,
                0,
            );
            let requests = match &p.fetch {
                Fetch::Nothing => 0,
                Fetch::Full => 1,
                Fetch::Details(ids) => ids.len(),
            };
            let want = if count <= 16 {
                count as usize
            } else if count <= 1_000 {
                1
            } else {
                256
            };
            assert_eq!(requests, want, "{count} jobs");
            // Everything known and unchanged: nothing.
            let tracker: Tracker = (1..=count)
                .map(|id| (id, tracked("PENDING", foreign())))
                .collect();
            assert_eq!(
                plan(&tracker, &listed, Asks::named(&BTreeSet::new()), limits, 0).fetch,
                Fetch::Nothing
            );
        }
    }

    #[test]
    fn apply_resolves_owners_and_keeps_only_our_records() {
        let listed = listing(&[(1, "PENDING"), (2, "RUNNING"), (3, "PENDING")]);
        let fetched = Fetched::Details {
            records: vec![
                job(1, "PENDING", Some(ours())),
                job(2, "RUNNING", Some("mine")),
            ],
            missing: vec![],
        };
        let (tracker, jobs) = apply(
            Tracker::new(),
            &BTreeMap::new(),
            &listed,
            fetched,
            Scope::All,
            verdict(),
        );
        assert_eq!(jobs.keys().copied().collect::<Vec<_>>(), vec![1]);
        assert_eq!(tracker[&1].known, Known::Ours);
        assert_eq!(
            tracker[&2].known,
            Known::Foreign {
                run: Some(Box::new(Run {
                    nodes: "n1".into(),
                    deadline: Some(t(2_600))
                }))
            }
        );
        assert_eq!(tracker[&3].known, Known::Unresolved, "not fetched yet");
    }

    /// A submit that returns an id the tracker holds as ours (another SlurmJob's job, before
    /// slurmctld lost its state): its record is read again, and until then the index holds
    /// no record under the id and counts it unresolved (so neither SlurmJob takes it as read).
    #[test]
    fn an_id_a_submit_returns_again_is_read_again() {
        let mut tracker: Tracker = [
            (7, tracked("PENDING", Known::Ours)),
            (8, tracked("PENDING", foreign())),
        ]
        .into();
        let jobs: BTreeMap<u32, Job> = [(7, job(7, "PENDING", Some(ours())))].into();
        assert_eq!(
            needs(tracker.get(&7), &listed("PENDING"), Ask::Submitted),
            None,
            "as ours, the same state is not read again"
        );
        // This very job, read before its submit returned: kept as it is.
        let own = jobs[&7].owner.as_ref().unwrap().uid().to_owned();
        submit_returned(&mut tracker, &jobs, 7, &own);
        assert_eq!(tracker[&7].known, Known::Ours);
        submit_returned(&mut tracker, &jobs, 7, "another-slurmjob");
        // Someone else's under the id returned is read already (`Why::Wanted`): left as it is.
        submit_returned(&mut tracker, &jobs, 8, "another-slurmjob");
        assert_eq!(tracker[&8].known, foreign());
        assert_eq!(
            needs(tracker.get(&7), &listed("PENDING"), Ask::Submitted),
            Some(Why::Submitted)
        );
        // A cycle that could not read it yet: no record, unresolved.
        let (tracker, jobs) = apply(
            tracker,
            &jobs,
            &listing(&[(7, "PENDING"), (8, "PENDING")]),
            Fetched::Nothing,
            Scope::All,
            verdict(),
        );
        assert!(jobs.is_empty(), "{jobs:?}");
        assert!(unresolved(&tracker).contains(&7));
    }

    #[test]
    fn apply_drops_vanished_jobs() {
        let tracker: Tracker = [
            (1, tracked("RUNNING", Known::Ours)),
            (2, tracked("PENDING", foreign())),
        ]
        .into();
        let jobs: BTreeMap<u32, Job> = [(1, job(1, "RUNNING", Some(ours())))].into();
        let (tracker, jobs) = apply(
            tracker,
            &jobs,
            &listing(&[(2, "PENDING")]),
            Fetched::Nothing,
            Scope::All,
            verdict(),
        );
        assert!(jobs.is_empty());
        assert_eq!(tracker.keys().copied().collect::<Vec<_>>(), vec![2]);
        // Missing from /job/{id} (purged between the two calls): gone too.
        let fetched = Fetched::Details {
            records: vec![],
            missing: vec![2],
        };
        let (tracker, _) = apply(
            tracker,
            &BTreeMap::new(),
            &listing(&[(2, "RUNNING")]),
            fetched,
            Scope::All,
            verdict(),
        );
        assert!(tracker.is_empty());
    }

    /// A tag-shaped comment the key does not prove (forged, copied onto another user's job, or
    /// unsigned) costs what someone else's job costs: known as foreign, so neither followed by
    /// incremental cycles nor refreshed, nor read again but when it starts; its record stays
    /// in the index with the state listed, for the SlurmJob whose tag it copies. An unsigned
    /// tag on a job a SlurmJob names is followed as ours.
    #[test]
    fn a_claim_the_key_does_not_prove_costs_what_someone_elses_job_costs() {
        let tag = crate::slurm::tag::OwnerTag::new("u1", 1);
        let unsigned = tag.to_string();
        let for_mallory = key().comment(&tag, "mallory");
        let other_key = TagKey::new(&[8; 32]).unwrap().comment(&tag, USER);
        let records = [
            job(1, "PENDING", Some(ours())),
            job(2, "PENDING", Some(&unsigned)),
            job(3, "PENDING", Some(&for_mallory)),
            job(4, "PENDING", Some(&other_key)),
            job(5, "PENDING", Some("someone else's")),
            // An array's task: named by its array's id.
            Job {
                array_job_id: Some(60),
                array_task_id: Some(1),
                ..job(6, "PENDING", Some(&unsigned))
            },
        ];
        let classes = |named: &Named| -> Vec<Class> {
            let verdict = Verdict { key: key(), named };
            records.iter().map(|r| verdict.class(r)).collect()
        };
        use Class::{Claim, Other, Ours};
        assert_eq!(
            classes(&Named::new()),
            [Ours, Claim, Claim, Claim, Other, Claim]
        );
        assert_eq!(
            classes(&named(&[1, 2, 3, 4, 5, 60], USER)),
            [Ours, Ours, Claim, Claim, Other, Ours],
            "naming follows an unsigned tag, never a forged one"
        );
        // Named for another user (an id slurmctld reused after losing its state): the
        // unsigned tag on alice's job proves nothing.
        assert_eq!(
            classes(&named(&[1, 2, 3, 4, 5, 60], "mallory")),
            [Ours, Claim, Claim, Claim, Other, Claim],
            "a name holds only for the user it was given for"
        );
        let nameless = Job {
            user_name: None,
            ..records[1].clone()
        };
        assert_eq!(
            Verdict {
                key: key(),
                named: &named(&[2], USER)
            }
            .class(&nameless),
            Claim,
            "a record without its user is not the named one"
        );

        let listed = listing(&[
            (1, "PENDING"),
            (2, "PENDING"),
            (3, "PENDING"),
            (5, "PENDING"),
        ]);
        let fetched = Fetched::Details {
            records: records[..5].to_vec(),
            missing: vec![],
        };
        let (mut tracker, jobs) = apply(
            Tracker::new(),
            &BTreeMap::new(),
            &listed,
            fetched,
            Scope::All,
            verdict(),
        );
        assert_eq!(tracker[&1].known, Known::Ours);
        for claim in [2, 3, 4] {
            assert_eq!(tracker[&claim].known, foreign(), "{claim}");
        }
        assert_eq!(tracker[&5].known, foreign());
        assert_eq!(
            jobs.keys().copied().collect::<Vec<_>>(),
            [1, 2, 3, 4],
            "claims keep their records, someone else's does not"
        );
        // Followed and refreshed: ours only.
        assert_eq!(followed(&tracker, &BTreeSet::new()), BTreeSet::from([1]));
        mark_refresh(&mut tracker);
        mark_resync(&mut tracker);
        assert!(
            tracker
                .iter()
                .all(|(id, t)| (t.stale != Stale::No) == (*id == 1)),
            "{tracker:?}"
        );
        for t in tracker.values_mut() {
            t.stale = Stale::No;
        }

        // A claim ends unread: its record takes the listed state; one that starts is read.
        let listed = listing(&[
            (1, "PENDING"),
            (2, "CANCELLED"),
            (3, "RUNNING"),
            (4, "PENDING"),
        ]);
        assert_eq!(needs(tracker.get(&2), &listed[&2], Ask::None), None);
        assert_eq!(
            needs(tracker.get(&3), &listed[&3], Ask::None),
            Some(Why::Started)
        );
        let (tracker, next_jobs) = apply(
            tracker,
            &jobs,
            &listed,
            Fetched::Nothing,
            Scope::All,
            verdict(),
        );
        assert_eq!(next_jobs[&2].state, state("CANCELLED"));
        assert_eq!(next_jobs[&3].state, state("PENDING"), "read when fetched");
        assert_eq!(next_jobs[&4], jobs[&4]);

        // SlurmJobs name the unsigned one and the forged one: both read again; the unsigned
        // one is followed as ours from then on, the forged one stays a claim.
        for id in [2, 4] {
            assert_eq!(
                needs(tracker.get(&id), &listed[&id], Ask::Named),
                Some(Why::Wanted)
            );
        }
        let named = named(&[2, 4], USER);
        let (tracker, next_jobs) = apply(
            tracker,
            &next_jobs,
            &listed,
            Fetched::Details {
                records: vec![job(2, "CANCELLED", Some(&unsigned)), records[3].clone()],
                missing: vec![],
            },
            Scope::Only(&BTreeSet::from([2, 4])),
            Verdict {
                key: key(),
                named: &named,
            },
        );
        assert_eq!(tracker[&2].known, Known::Ours);
        assert_eq!(tracker[&4].known, foreign());
        assert_eq!(next_jobs[&2].state, state("CANCELLED"));
        assert!(next_jobs.contains_key(&4));
    }

    /// An ask stands while the job is skipped, and for a job named through its unsigned tag
    /// until it is read as ours: not for a claim nobody named, a forged one, one read as
    /// another user's than it was named for, one resolved, one gone.
    #[test]
    fn a_named_unsigned_tag_is_asked_for_until_read_as_ours() {
        let tag = crate::slurm::tag::OwnerTag::new("u1", 1);
        let tracker: Tracker = [
            (1, tracked("RUNNING", Known::Skipped)),
            (2, tracked("RUNNING", foreign())),
            (3, tracked("RUNNING", foreign())),
            (4, tracked("RUNNING", Known::Ours)),
            (5, tracked("RUNNING", foreign())),
            (6, tracked("RUNNING", Known::Unresolved)),
        ]
        .into();
        let jobs: BTreeMap<u32, Job> = [
            (2, job(2, "RUNNING", Some(&tag.to_string()))),
            (3, job(3, "RUNNING", Some(&key().comment(&tag, "mallory")))),
            (4, job(4, "RUNNING", Some(&tag.to_string()))),
            // Named for alice, read as mallory's (an id reused after a state loss).
            (
                5,
                Job {
                    user_name: Some("mallory".into()),
                    ..job(5, "RUNNING", Some(&tag.to_string()))
                },
            ),
        ]
        .into();
        let wanted = |named: &Named| -> Vec<u32> {
            let verdict = Verdict { key: key(), named };
            (1..=7)
                .filter(|id| still_wanted(*id, &tracker, &jobs, verdict))
                .collect()
        };
        assert_eq!(wanted(&named(&[1, 2, 3, 4, 5, 6, 7], USER)), [1, 2]);
        assert_eq!(wanted(&Named::new()), [1]);

        // Names are kept while slurmctld holds the job, or a task of the array whose own
        // record was purged (8: its task 9 runs on).
        let task = Job {
            array_job_id: Some(8),
            array_task_id: Some(0),
            ..job(9, "RUNNING", Some(&tag.to_string()))
        };
        let mut jobs = jobs;
        jobs.insert(9, task);
        let mut kept = named(&[2, 7, 8, 10], USER);
        keep_named(&mut kept, &tracker, &jobs);
        assert_eq!(kept, named(&[2, 8], USER));
    }

    /// What the task records read told of an array is kept while the array is tracked; that it
    /// is ours, only while a task record of it is in the index (what shows its tag).
    #[test]
    fn array_owners_are_kept_while_what_showed_them_is() {
        let tracker: Tracker = [
            (10, tracked("PENDING", Known::Unresolved)),
            (20, tracked("PENDING", Known::Unresolved)),
            (30, tracked("PENDING", Known::Unresolved)),
        ]
        .into();
        let task = Job {
            array_job_id: Some(10),
            array_task_id: Some(0),
            ..job(11, "RUNNING", None)
        };
        let jobs: BTreeMap<u32, Job> = [(11, task)].into();
        let mut owners: ArrayOwners = [(10, false), (20, false), (30, true), (40, true)].into();
        keep_array_owners(&mut owners, &tracker, &jobs);
        assert_eq!(owners, BTreeMap::from([(10, false), (30, true)]));
        assert_eq!(arrays_of_ours(&owners), BTreeSet::from([10]));
    }

    /// An array named through its unsigned tag after its tasks were read as claims: what they
    /// told of the array is forgotten, and they are read again, as ours now.
    #[test]
    fn an_array_named_late_has_its_tasks_read_again() {
        let unsigned = crate::slurm::tag::OwnerTag::new("u1", 1).to_string();
        let task = |id, array| Job {
            array_job_id: Some(array),
            array_task_id: Some(id - array),
            ..job(id, "RUNNING", Some(&unsigned))
        };
        let jobs: BTreeMap<u32, Job> = [
            (60, job(60, "PENDING", Some(&unsigned))),
            (61, task(61, 60)),
            (62, task(62, 60)),
            (71, task(71, 70)),
        ]
        .into();
        let mut owners = ArrayOwners::new();
        let read = Fetched::Details {
            records: vec![jobs[&61].clone(), jobs[&71].clone()],
            missing: vec![],
        };
        note_array_owners(&read, &mut owners, verdict());
        assert_eq!(owners, BTreeMap::from([(60, true), (70, true)]), "claims");

        // A stale name, for another user than the array's tasks run as: nothing.
        let stale = named(&[70], "mallory");
        assert!(renamed_arrays(&stale, &jobs, &mut owners).is_empty());
        assert_eq!(owners, BTreeMap::from([(60, true), (70, true)]));
        let named = named(&[60], USER);
        let again = renamed_arrays(&named, &jobs, &mut owners);
        assert_eq!(
            again,
            BTreeSet::from([61, 62]),
            "its tasks, not its own record"
        );
        assert_eq!(owners, BTreeMap::from([(70, true)]));
        let verdict = Verdict {
            key: key(),
            named: &named,
        };
        note_array_owners(&read, &mut owners, verdict);
        assert_eq!(
            owners,
            BTreeMap::from([(60, false), (70, true)]),
            "ours now"
        );
        assert!(renamed_arrays(&Named::new(), &jobs, &mut owners).is_empty());
    }

    #[test]
    fn apply_keeps_a_changed_state_until_its_record_is_fetched() {
        let tracker: Tracker = [
            (1, tracked("PENDING", Known::Ours)),
            (2, tracked("PENDING", foreign())),
            (3, tracked("RUNNING", foreign())),
        ]
        .into();
        let jobs: BTreeMap<u32, Job> = [(1, job(1, "PENDING", Some(ours())))].into();
        let listed = listing(&[(1, "RUNNING"), (2, "RUNNING"), (3, "COMPLETED")]);
        let (next, next_jobs) = apply(
            tracker,
            &jobs,
            &listed,
            Fetched::Nothing,
            Scope::All,
            verdict(),
        );
        assert_eq!(next[&1].state, state("PENDING"), "ours: fetched next cycle");
        assert_eq!(next_jobs[&1].state, state("PENDING"));
        assert_eq!(
            next[&2].state,
            state("PENDING"),
            "foreign start: fetched next cycle"
        );
        assert_eq!(
            next[&3].state,
            state("COMPLETED"),
            "foreign end: no fetch needed"
        );
        assert_eq!(next[&3].known, foreign());
        assert_eq!(
            needs(next.get(&1), &listed[&1], Ask::None),
            Some(Why::OursChanged)
        );
        assert_eq!(
            needs(next.get(&2), &listed[&2], Ask::None),
            Some(Why::Started)
        );
        assert_eq!(needs(next.get(&3), &listed[&3], Ask::None), None);
    }

    #[test]
    fn apply_takes_a_full_listing_as_the_truth() {
        let tracker: Tracker = [(1, tracked("PENDING", Known::Ours))].into();
        let jobs: BTreeMap<u32, Job> = [(1, job(1, "PENDING", Some(ours())))].into();
        // 1 was listed but is gone by the full listing; 7 is newer than the state list.
        let listed = listing(&[(1, "PENDING"), (2, "PENDING")]);
        let fetched = Fetched::Full(vec![
            job(2, "PENDING", Some(ours())),
            job(7, "PENDING", Some(ours())),
        ]);
        let (tracker, jobs) = apply(tracker, &jobs, &listed, fetched, Scope::All, verdict());
        assert_eq!(jobs.keys().copied().collect::<Vec<_>>(), vec![2, 7]);
        assert_eq!(tracker.keys().copied().collect::<Vec<_>>(), vec![2, 7]);
        assert!(tracker.values().all(|t| t.stale == Stale::No));
    }

    #[test]
    fn a_fresh_record_clears_staleness_and_takes_its_own_state() {
        let mut tracker: Tracker = [(1, tracked("PENDING", Known::Ours))].into();
        mark_resync(&mut tracker);
        let jobs: BTreeMap<u32, Job> = [(1, job(1, "PENDING", Some(ours())))].into();
        let fetched = Fetched::Details {
            records: vec![job(1, "RUNNING", Some(ours()))],
            missing: vec![],
        };
        let (tracker, jobs) = apply(
            tracker,
            &jobs,
            &listing(&[(1, "PENDING")]),
            fetched,
            Scope::All,
            verdict(),
        );
        assert_eq!(tracker[&1].stale, Stale::No);
        assert_eq!(
            tracker[&1].state,
            state("RUNNING"),
            "the record is newer than the list"
        );
        assert_eq!(jobs[&1].state, state("RUNNING"));
    }

    #[test]
    fn tasks_leaving_our_pending_array_shorten_its_task_list_without_a_fetch() {
        let mut meta = job(40, "PENDING", Some(ours()));
        meta.array_job_id = Some(40);
        meta.array_task_string = Some("0-5%2".into());
        let tracker: Tracker = [(
            40,
            Tracked {
                entries: 6,
                ..tracked("PENDING", Known::Ours)
            },
        )]
        .into();
        let jobs: BTreeMap<u32, Job> = [(40, meta)].into();
        let listed: BTreeMap<u32, Listed> = [(
            40,
            Listed {
                state: state("PENDING"),
                tasks: vec![2, 3, 4, 5],
            },
        )]
        .into();
        assert_eq!(
            plan(
                &tracker,
                &listed,
                Asks::named(&BTreeSet::new()),
                limits(4, 100),
                0
            )
            .fetch,
            Fetch::Nothing
        );
        let (tracker, jobs) = apply(
            tracker,
            &jobs,
            &listed,
            Fetched::Nothing,
            Scope::All,
            verdict(),
        );
        assert_eq!(jobs[&40].array_task_string.as_deref(), Some("2-5%2"));
        assert_eq!(tracker[&40].entries, 4);
    }

    /// The tracker holds one of these for every job of the cluster, everyone's: a field more, or
    /// an unboxed run, is paid 100 000 times at a large site.
    #[test]
    fn a_tracked_job_stays_within_64_bytes() {
        assert!(
            std::mem::size_of::<Tracked>() <= 64,
            "Tracked grew to {} bytes",
            std::mem::size_of::<Tracked>()
        );
    }

    #[test]
    fn group_folds_array_entries_into_their_record() {
        let entry = |job_id, task, s: &str| JobStateEntry {
            job_id,
            array_task_id: task,
            state: state(s),
        };
        let listed = group(vec![
            entry(7, None, "RUNNING"),
            entry(41, Some(0), "RUNNING"),
            entry(40, Some(3), "PENDING"),
            entry(40, Some(4), "PENDING"),
        ]);
        assert_eq!(listed.len(), 3);
        assert_eq!(listed[&40].tasks, vec![3, 4]);
        assert_eq!(listed[&40].entries(), 2);
        assert_eq!(listed[&7].entries(), 1);
        assert_eq!(listed[&41].tasks, vec![0]);
    }

    #[test]
    fn resync_marks_ours_only() {
        let mut tracker: Tracker = [
            (1, tracked("COMPLETED", Known::Ours)),
            (2, tracked("RUNNING", foreign())),
            (3, tracked("PENDING", Known::Unresolved)),
        ]
        .into();
        mark_resync(&mut tracker);
        let marks: Vec<Stale> = tracker.values().map(|t| t.stale).collect();
        assert_eq!(marks, vec![Stale::Resync, Stale::No, Stale::No]);
        let listed = listing(&[(1, "COMPLETED"), (2, "RUNNING"), (3, "PENDING")]);
        let p = plan(
            &tracker,
            &listed,
            Asks::named(&BTreeSet::new()),
            limits(4, 100),
            0,
        );
        assert_eq!(
            p.fetch,
            Fetch::Details(vec![3, 1]),
            "unresolved first, then ours"
        );
    }

    #[test]
    fn refresh_marks_unfinished_ours_and_running_jobs() {
        let mut tracker: Tracker = [
            (1, tracked("PENDING", Known::Ours)),
            (2, tracked("COMPLETED", Known::Ours)),
            (3, tracked("RUNNING", foreign())),
            (4, tracked("PENDING", foreign())),
            (5, tracked("PENDING", Known::Unresolved)),
            (
                6,
                Tracked {
                    stale: Stale::Resync,
                    ..tracked("PENDING", Known::Ours)
                },
            ),
        ]
        .into();
        mark_refresh(&mut tracker);
        let marks: Vec<(u32, Stale)> = tracker.iter().map(|(id, t)| (*id, t.stale)).collect();
        assert_eq!(
            marks,
            vec![
                (1, Stale::Refresh),
                (2, Stale::No),
                (3, Stale::Refresh),
                (4, Stale::No),
                (5, Stale::No),
                (6, Stale::Resync)
            ]
        );
    }

    #[test]
    fn node_deadlines_are_the_latest_limit_and_none_when_unlimited() {
        let run = |nodes: &str, deadline: Option<i64>| Known::Foreign {
            run: Some(Box::new(Run {
                nodes: nodes.into(),
                deadline: deadline.map(t),
            })),
        };
        let mut unlimited = job(5, "RUNNING", Some(ours()));
        unlimited.nodes = Some("n[3-4]".into());
        unlimited.time_limit = None;
        let mut finished = job(6, "COMPLETED", Some(ours()));
        finished.nodes = Some("n1".into());
        let tracker: Tracker = [
            (1, tracked("RUNNING", run("n[1-2]", Some(100)))),
            (2, tracked("RUNNING", run("n2", Some(300)))),
            (3, tracked("RUNNING", run("n3", Some(50)))),
            (4, tracked("PENDING", Known::Unresolved)),
            (5, tracked("RUNNING", Known::Ours)),
            (6, tracked("COMPLETED", Known::Ours)),
        ]
        .into();
        let jobs: BTreeMap<u32, Job> = [(5, unlimited), (6, finished)].into();
        let summary = node_jobs(&tracker, &jobs);
        let want: BTreeMap<String, NodeJobs> = [
            (
                "n1".to_owned(),
                NodeJobs {
                    running: 1,
                    deadline: Some(t(100)),
                },
            ),
            (
                "n2".to_owned(),
                NodeJobs {
                    running: 2,
                    deadline: Some(t(300)),
                },
            ),
            (
                "n3".to_owned(),
                NodeJobs {
                    running: 2,
                    deadline: None,
                },
            ),
            (
                "n4".to_owned(),
                NodeJobs {
                    running: 1,
                    deadline: None,
                },
            ),
        ]
        .into();
        assert_eq!(summary, want);
    }

    #[test]
    fn deadlines_need_a_start_and_a_limit() {
        let mut j = job(1, "RUNNING", None);
        assert_eq!(deadline(&j), Some(t(2_600)));
        j.time_limit = None;
        assert_eq!(deadline(&j), None);
        let mut j = job(1, "RUNNING", None);
        j.start_time = None;
        assert_eq!(deadline(&j), None);
        let mut pending = job(1, "PENDING", None);
        pending.exit = Some(ExitStatus::default());
        assert_eq!(run_of(&pending), None);
    }

    #[test]
    fn backoff_is_capped() {
        assert_eq!(backoff_cap(Duration::from_secs(1)), Duration::from_secs(10));
        assert_eq!(backoff_cap(Duration::from_secs(5)), Duration::from_secs(30));
        assert_eq!(
            backoff_cap(Duration::from_secs(60)),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn skipped_jobs_are_fetched_only_when_named_or_holding_nodes() {
        let mut tracker = Tracker::new();
        let listed = listing(&[(1, "PENDING"), (2, "RUNNING"), (3, "COMPLETED")]);
        skip(&mut tracker, &listed, listed.keys().copied());
        assert!(tracker.values().all(|t| t.known == Known::Skipped));
        assert_eq!(unresolved(&tracker).len(), 3);
        let table = [
            (1, "PENDING", false, None),
            (1, "PENDING", true, Some(Why::Wanted)),
            (1, "RUNNING", false, Some(Why::Started)),
            (3, "COMPLETED", false, None),
            (3, "COMPLETED", true, Some(Why::Wanted)),
        ];
        for (id, now, wanted, want) in table {
            assert_eq!(
                needs(
                    tracker.get(&id),
                    &listed_state(now),
                    if wanted { Ask::Named } else { Ask::None }
                ),
                want,
                "job {id} {now}, wanted {wanted}"
            );
        }
        // Nothing skipped blocks the sync: a quiet first sync is complete with 1 fetch.
        let wanted: BTreeSet<u32> = [3].into();
        let p = plan(&tracker, &listed, Asks::named(&wanted), limits(4, 100), 0);
        assert_eq!(p.fetch, Fetch::Details(vec![3, 2]), "wanted first");
        assert!(p.complete);
        let p = plan(
            &tracker,
            &listed,
            Asks::named(&BTreeSet::new()),
            limits(1, 0),
            0,
        );
        assert_eq!((p.fetch, p.complete), (Fetch::Details(vec![2]), true));
        // Skipping keeps what is known.
        let mut known: Tracker = [(1, tracked("PENDING", Known::Ours))].into();
        skip(&mut known, &listed, listed.keys().copied());
        assert_eq!(known[&1].known, Known::Ours);
        assert_eq!(known[&2].known, Known::Skipped);
        // A first listing (an empty tracker, collected) and a later one (inserted) skip alike.
        let mut first = Tracker::new();
        skip(&mut first, &listed, [3, 2, 99]);
        let mut later: Tracker = [(3, tracked("COMPLETED", Known::Unresolved))].into();
        skip(&mut later, &listed, [3, 2, 99]);
        assert_eq!(first, later);
        assert_eq!(
            first.keys().copied().collect::<Vec<_>>(),
            [2, 3],
            "99 is not listed"
        );
        assert!(first.values().all(|t| t.known == Known::Skipped));
    }

    #[test]
    fn a_backlog_is_others_unresolved_jobs_newest_first_and_skipping_it_keeps_the_rest() {
        let listed = listing(&[
            (1, "PENDING"),
            (2, "RUNNING"),
            (3, "PENDING"),
            (4, "PENDING"),
            (5, "PENDING"),
            (6, "PENDING"),
            (7, "PENDING"),
        ]);
        let mut tracker: Tracker = [
            (1, tracked("PENDING", Known::Ours)),
            (2, tracked("RUNNING", foreign())),
            (3, tracked("PENDING", Known::Unresolved)),
            (4, tracked("PENDING", Known::Skipped)),
            (5, tracked("PENDING", Known::Unresolved)),
        ]
        .into();
        // 6 and 7 never seen; 5 asked for by a SlurmJob: fetched, not skipped.
        let wanted: BTreeSet<u32> = [5].into();
        let ids = backlog(&tracker, &listed, Asks::named(&wanted));
        assert_eq!(ids, vec![7, 6, 3]);
        skip(&mut tracker, &listed, ids.iter().copied());
        let known: Vec<(u32, Known)> = tracker
            .iter()
            .map(|(id, t)| (*id, t.known.clone()))
            .collect();
        assert_eq!(
            known,
            vec![
                (1, Known::Ours),
                (2, foreign()),
                (3, Known::Skipped),
                (4, Known::Skipped),
                (5, Known::Unresolved),
                (6, Known::Skipped),
                (7, Known::Skipped),
            ]
        );
        assert_eq!(tracker[&7].state, state("PENDING"));
        // Nothing blocks the sync any more: the wanted one is fetched, the rest waits for asks.
        let p = plan(&tracker, &listed, Asks::named(&wanted), limits(4, 0), 0);
        assert_eq!((p.fetch, p.complete), (Fetch::Details(vec![5]), true));
        assert!(backlog(&tracker, &listed, Asks::named(&wanted)).is_empty());
    }

    fn listed_state(s: &str) -> Listed {
        listed(s)
    }

    #[test]
    fn an_incremental_listing_speaks_only_for_what_it_asked() {
        let tracker: Tracker = [
            (1, tracked("PENDING", Known::Skipped)),
            (2, tracked("PENDING", foreign())),
            (3, tracked("RUNNING", Known::Ours)),
            (4, tracked("RUNNING", Known::Ours)),
        ]
        .into();
        let jobs: BTreeMap<u32, Job> = [
            (3, job(3, "RUNNING", Some(ours()))),
            (4, job(4, "RUNNING", Some(ours()))),
        ]
        .into();
        // Asked: ours and a window 5..=8; 4 was purged, 6 is new.
        let asked: BTreeSet<u32> = [3, 4, 5, 6, 7, 8].into();
        let listed = listing(&[(3, "RUNNING"), (6, "PENDING")]);
        let (next, next_jobs) = apply(
            tracker.clone(),
            &jobs,
            &listed,
            Fetched::Nothing,
            Scope::Only(&asked),
            verdict(),
        );
        assert_eq!(next.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3, 6]);
        assert_eq!(next[&1], tracker[&1], "not asked: as it was");
        assert_eq!(next[&2], tracker[&2], "not asked: as it was");
        assert_eq!(next[&6].known, Known::Unresolved, "new: fetched next");
        assert_eq!(next_jobs.keys().copied().collect::<Vec<_>>(), vec![3]);
        // The same answer as a full listing: the jobs it does not list are gone.
        let (next, _) = apply(
            tracker.clone(),
            &jobs,
            &listed,
            Fetched::Nothing,
            Scope::All,
            verdict(),
        );
        assert_eq!(next.keys().copied().collect::<Vec<_>>(), vec![3, 6]);
        // A record fetched for a carried id replaces it (its tag was removed).
        let (next, next_jobs) = apply(
            tracker,
            &jobs,
            &BTreeMap::new(),
            Fetched::Details {
                records: vec![job(4, "RUNNING", Some("no longer a tag"))],
                missing: vec![],
            },
            Scope::Only(&BTreeSet::new()),
            verdict(),
        );
        assert!(matches!(next[&4].known, Known::Foreign { .. }));
        assert!(!next_jobs.contains_key(&4));
        assert!(next_jobs.contains_key(&3));
    }

    #[test]
    fn a_listing_run_beside_the_cycles_yields_to_what_they_saw() {
        let tracker: Tracker = [
            (1, tracked("PENDING", foreign())),
            (2, tracked("COMPLETED", foreign())),
            (3, tracked("PENDING", foreign())),
            (4, tracked("RUNNING", Known::Ours)),
            (5, tracked("RUNNING", Known::Ours)),
            (7, tracked("PENDING", foreign())),
        ]
        .into();
        let jobs: BTreeMap<u32, Job> = [
            (4, job(4, "RUNNING", Some(ours()))),
            (5, job(5, "RUNNING", Some(ours()))),
        ]
        .into();
        // The full listing, taken while the cycles went on: 1 cancelled, 2 still there (seen
        // since, as completed), 3 not there (submitted after it; seen since), 4 and 5
        // running, 7 not there (purged before it).
        let full = listing(&[
            (1, "CANCELLED"),
            (2, "RUNNING"),
            (4, "RUNNING"),
            (5, "RUNNING"),
        ]);
        let seen: BTreeSet<u32> = [2, 3].into();
        // This cycle asked about ours: 4 completed, 5 was purged.
        let asked: BTreeSet<u32> = [4, 5].into();
        let now = listing(&[(4, "COMPLETED")]);
        let (listed, unspoken) = overlay(full, now, &seen, &asked);
        assert_eq!(
            listed
                .iter()
                .map(|(id, l)| (*id, l.state.base))
                .collect::<Vec<_>>(),
            vec![(1, JobBaseState::Cancelled), (4, JobBaseState::Completed)],
            "the full listing for what nobody saw since, this cycle for what it asked"
        );
        assert_eq!(unspoken, [2, 3].into(), "what the cycles saw since");
        let (next, next_jobs) = apply(
            tracker.clone(),
            &jobs,
            &listed,
            Fetched::Details {
                records: vec![job(4, "COMPLETED", Some(ours()))],
                missing: vec![],
            },
            Scope::AllBut(&unspoken),
            verdict(),
        );
        assert_eq!(next.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3, 4]);
        assert_eq!(next[&1].state.base, JobBaseState::Cancelled);
        assert_eq!(
            next[&2], tracker[&2],
            "not taken back to the listing's older state"
        );
        assert_eq!(next[&3], tracker[&3], "not gone: newer than the listing");
        assert_eq!(next_jobs[&4].state.base, JobBaseState::Completed);
        assert!(!next.contains_key(&5) && !next.contains_key(&7), "gone");
    }

    #[test]
    fn an_incremental_cycle_follows_ours_the_busy_and_the_unknown() {
        let tracker: Tracker = [
            (1, tracked("PENDING", Known::Skipped)),
            (2, tracked("RUNNING", Known::Skipped)),
            (3, tracked("PENDING", foreign())),
            (4, tracked("RUNNING", foreign())),
            (5, tracked("RUNNING", Known::Ours)),
            (6, tracked("PENDING", Known::Unresolved)),
        ]
        .into();
        let wanted: BTreeSet<u32> = [1, 99].into();
        let ids: Vec<u32> = followed(&tracker, &wanted).into_iter().collect();
        assert_eq!(ids, vec![1, 2, 4, 5, 6, 99]);
        // Ours are followed until they have settled: ended, with nothing left moving.
        let table = [
            ("PENDING", true),
            ("PENDING+REQUEUED", true),
            ("RUNNING", true),
            ("SUSPENDED", true),
            ("COMPLETED+COMPLETING", true),
            ("CANCELLED+STAGE_OUT", true),
            ("NEW_STATE_FROM_A_LATER_SLURM", true),
            ("COMPLETED", false),
            ("CANCELLED", false),
            ("FAILED", false),
            ("TIMEOUT", false),
            ("OUT_OF_MEMORY", false),
        ];
        for (s, expected) in table {
            let tracker: Tracker = [(7, tracked(s, Known::Ours))].into();
            let none = BTreeSet::new();
            assert_eq!(followed(&tracker, &none).contains(&7), expected, "{s}");
            let wanted: BTreeSet<u32> = [7].into();
            assert!(followed(&tracker, &wanted).contains(&7), "{s}, wanted");
        }
        assert_eq!(probe(10, 4), 11..=14);
        assert_eq!(probe(u32::MAX - 1, 4), u32::MAX..=u32::MAX);
        assert!(!incremental_pays(&tracker, 1, 6), "a tiny queue");
        assert!(incremental_pays(&tracker, 1, 5));
        assert!(
            !incremental_pays(&tracker, 2, 5),
            "following a third of the queue"
        );
    }

    #[test]
    fn the_walk_down_the_newest_jobs_stops_at_one_numbered_before_the_cutoff() {
        let at = |id: u32, submit: i64, start: Option<i64>, array: Option<u32>| Job {
            job_id: id,
            submit_time: Some(t(submit)),
            start_time: start.map(t),
            array_job_id: array,
            state: JobState::from_strings(&[if start.is_some() {
                "RUNNING"
            } else {
                "PENDING"
            }]),
            ..Job::bare()
        };
        // A task split off its pending array by an update (`scontrol update jobid=98_2`, seen on
        // 24.11: job 100 for task 2 of array 98, its submit time the array's, no start): its id
        // is new, its times old.
        let split = |start: Option<i64>| Job {
            state: JobState::from_strings(&["PENDING"]),
            ..at(9, 10, start, Some(3))
        };
        let table = [
            ("a pending task record split off", split(None), false),
            (
                "a pending task record with an old estimate",
                split(Some(20)),
                false,
            ),
            ("a plain job submitted after", at(9, 150, None, None), false),
            ("a plain job submitted before", at(9, 50, None, None), true),
            (
                "an array's meta record, by its submit",
                at(9, 50, Some(150), Some(9)),
                true,
            ),
            (
                "a task record, by its start",
                at(9, 50, Some(150), Some(3)),
                false,
            ),
            (
                "a task record started before",
                at(9, 40, Some(50), Some(3)),
                true,
            ),
            ("no times at all", Job::bare(), false),
        ];
        for (what, record, stop) in table {
            assert_eq!(reached(&[record], t(100)).is_some(), stop, "{what}");
        }
    }

    /// The walk's cut-off is on slurmctld's clock: with this machine's clock two minutes ahead,
    /// a job submitted 10 s before the listing (by slurmctld) is not old enough to stop at,
    /// though it is 130 s old by this machine's clock.
    #[test]
    fn the_walk_reads_job_ages_on_slurmctlds_clock() {
        let recent = Duration::from_secs(60);
        let ahead = |secs: i64| {
            crate::slurm::types::ClockReading {
                answered: t(1_000),
                controller: Some(t(1_000 + secs)),
            }
            .controller_ahead_at_least()
        };
        let listed_at = t(1_000);
        let submitted = |by_slurmctld: i64| Job {
            job_id: 7,
            submit_time: Some(t(by_slurmctld)),
            ..Job::bare()
        };
        let table = [
            ("same clocks, 10 s old", ahead(0), submitted(990), false),
            ("same clocks, 70 s old", ahead(0), submitted(930), true),
            // This machine 120 s ahead: slurmctld's "now" is 880.
            ("ours ahead, 10 s old", ahead(-120), submitted(870), false),
            ("ours ahead, 70 s old", ahead(-120), submitted(810), true),
            // This machine 120 s behind: slurmctld's "now" is 1 120.
            ("ours behind, 10 s old", ahead(120), submitted(1_110), false),
            ("ours behind, 70 s old", ahead(120), submitted(1_050), true),
            ("slurmctld's clock unknown", None, submitted(0), false),
        ];
        for (what, ahead, record, stop) in table {
            let stops = walk_cutoff(listed_at, ahead, recent)
                .is_some_and(|c| reached(&[record], c).is_some());
            assert_eq!(stops, stop, "{what}");
        }
        // The reading is a lower bound: slurmctld's second had begun before the answer came.
        let reading = crate::slurm::types::ClockReading {
            answered: t(1_000) + chrono::TimeDelta::milliseconds(900),
            controller: Some(t(1_000)),
        };
        assert_eq!(
            reading.controller_ahead_at_least(),
            Some(chrono::TimeDelta::milliseconds(-900))
        );
    }

    #[test]
    fn a_nodeset_node_that_moves_forces_a_full_listing() {
        let node = |name: &str, owned: bool, state: &str, alloc: i64| Node {
            name: name.into(),
            state: crate::slurm::types::NodeState::from_strings(&[state]),
            reason: None,
            reason_set_by_user: None,
            cpus: Some(1),
            alloc_cpus: Some(alloc),
            real_memory: Some(1000),
            features: vec![],
            partitions: vec![],
            address: None,
            hostname: None,
            port: None,
            slurmd_version: None,
            owner: owned.then(|| crate::slurm::node_owner::NodeOwner::new("ns", "set")),
        };
        let old: BTreeMap<String, Node> = [
            ("a".to_owned(), node("a", true, "IDLE", 0)),
            ("b".to_owned(), node("b", false, "IDLE", 0)),
        ]
        .into();
        let table = [
            (
                "nothing changed",
                vec![node("a", true, "IDLE", 0), node("b", false, "IDLE", 0)],
                false,
            ),
            (
                "another node started a job",
                vec![node("a", true, "IDLE", 0), node("b", false, "ALLOCATED", 1)],
                false,
            ),
            (
                "a nodeset node started a job",
                vec![node("a", true, "ALLOCATED", 1), node("b", false, "IDLE", 0)],
                true,
            ),
            (
                "a nodeset node left",
                vec![node("b", false, "IDLE", 0)],
                true,
            ),
            (
                "a nodeset node came",
                vec![node("a", true, "IDLE", 0), node("c", true, "IDLE", 0)],
                true,
            ),
        ];
        for (what, new, want) in table {
            assert_eq!(owned_nodes_moved(&old, &new), want, "{what}");
        }
    }

    #[test]
    fn pending_refreshes_take_our_waiting_jobs_in_turn() {
        let mut tracker = Tracker::new();
        for id in 1..=6 {
            tracker.insert(id, tracked("PENDING", Known::Ours));
        }
        tracker.insert(7, tracked("RUNNING", Known::Ours));
        tracker.insert(8, tracked("PENDING", foreign()));
        let marked = |tracker: &Tracker| -> Vec<u32> {
            tracker
                .iter()
                .filter(|(_, t)| t.stale == Stale::Refresh)
                .map(|(id, _)| *id)
                .collect()
        };
        let clear = |tracker: &mut Tracker| {
            for t in tracker.values_mut() {
                t.stale = Stale::No;
            }
        };
        let next = mark_pending_refresh(&mut tracker, 0, 4);
        assert_eq!((marked(&tracker), next), (vec![1, 2, 3, 4], 4));
        clear(&mut tracker);
        // Then the rest, wrapping around to the first ones; never a running or foreign job.
        let next = mark_pending_refresh(&mut tracker, next, 4);
        assert_eq!((marked(&tracker), next), (vec![1, 2, 5, 6], 2));
        clear(&mut tracker);
        // A job already due keeps its reason (a resync is not downgraded).
        tracker.get_mut(&3).unwrap().stale = Stale::Resync;
        mark_pending_refresh(&mut tracker, 2, 1);
        assert_eq!(tracker[&3].stale, Stale::Resync);
        assert_eq!(marked(&tracker), vec![4]);
        // Nothing pending: the cursor stays.
        let mut empty = Tracker::new();
        assert_eq!(mark_pending_refresh(&mut empty, 9, 4), 9);
    }
}
