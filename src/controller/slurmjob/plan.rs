//! What a SlurmJob step should do, as pure functions of plain data: whether to submit, adopt,
//! ask accounting first or wait ([`submit`]); what the index says of a submitted job
//! ([`follow`]); which Slurm jobs a deleted SlurmJob must cancel ([`to_cancel`]) and whether its
//! finalizer may go ([`cleanup`]). The I/O these decisions call for happens in `act` and the
//! driver, which feed their answers back here.
//!
//! Crash safety is decided here: a submit is planned only when
//! 1. the cluster's index was synced completely *after this process started* (so it has seen
//!    every job slurmctld holds, including any an earlier incarnation submitted before dying),
//! 2. neither that index nor this process's own submissions hold a job carrying this
//!    generation's tag — if one does, it is adopted, but only when the tag is provably ours
//!    ([`adoptable`]: signed with the operator's key for this uid, generation and the Slurm user
//!    the job runs as, and that user is the one this SlurmJob submits as). A forged, unsigned
//!    (legacy) or other user's tag is never adopted: it is reported and a job of our own is
//!    submitted. A job of an *earlier* generation that no status names and that has not ended
//!    ([`earlier_run`]: its submit's answer was lost, then the spec was edited) is adopted too,
//!    as that generation's run, and this generation is an edit of it, as had its status been
//!    written in time;
//! 3. unless the SlurmJob is fresh ([`FRESH`]), accounting has answered that it holds no job
//!    with this tag either (one that ran and left slurmctld while the operator was away).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::crd::slurmjob::{Phase, SlurmJobSpec, SlurmJobStatus};
use crate::slurm::tag::{OwnerTag, Ownership, TagKey};
use crate::slurm::types::{Job, JobBaseState, SubmitRequest};
use crate::state::index::{ClusterState, Unreadable};

pub use crate::controller::kit::release_at;

use super::lifecycle::{self, Dependee, DependencyWait};
use super::status;
use super::submissions::{Doubt, Submissions};
use super::submit::{self, SpecError};

/// How long after the submit a complete index sync must have begun before a job missing from
/// it counts as gone (`trackedSince` has whole seconds, cut down: one second of it, and one
/// of margin).
pub const GONE_GRACE: chrono::TimeDelta = chrono::TimeDelta::seconds(2);
/// Retry interval while waiting for the index, dependencies or accounting.
pub const WAIT_RETRY: Duration = Duration::from_secs(3);

/// A first-generation SlurmJob younger than this submits without asking the cluster's
/// accounting for an earlier submit: a job of it could leave slurmctld only after it ran and
/// then `MinJobAge` passed (300 s by default), so the index alone is complete. This keeps the
/// common path (apply, then submit at once) at one request per submit.
pub const FRESH: chrono::TimeDelta = chrono::TimeDelta::seconds(30);

/// Everything the submit decision depends on, read before it is made.
#[derive(Debug, Clone, Copy)]
pub struct SubmitFacts<'a> {
    /// The SlurmJob's name (the job name and output path default to it).
    pub name: &'a str,
    pub tag: &'a OwnerTag,
    /// The Slurm user the job is submitted as: signed into its tag.
    pub user: &'a str,
    /// The operator's tag key.
    pub key: &'a TagKey,
    pub generation: i64,
    pub spec: &'a SlurmJobSpec,
    /// Whether the index synced completely after this process started ([`index_trusted`]).
    pub index_trusted: bool,
    /// The jobs whose owner is unknown and whose record cannot be read: the index is not
    /// complete while there is one ([`ClusterState::unreadable_unresolved`]).
    pub unreadable: &'a BTreeMap<u32, &'a Unreadable>,
    /// The job this process submitted with this tag, if any (see `Submissions`).
    pub submitted_here: Option<u32>,
    /// The lowest job id in the index carrying this tag, provably ours ([`adoptable`]).
    pub indexed: Option<u32>,
    /// Whether accounting may be skipped ([`FRESH`]).
    pub fresh: bool,
    /// Accounting's answer, once it was asked ([`SubmitPlan::AskAccounting`]).
    pub accounting: Option<&'a AccountingAnswer>,
    /// This process's last submit of the tag, or of an earlier generation no status names, got
    /// no answer that says whether it made a job, and the index has not listed every job since
    /// ([`past_doubt`]): the generation of that submit, and the doubt.
    pub in_doubt: Option<(i64, &'a Doubt)>,
    /// A job of an earlier generation that no status names, still pending or running
    /// ([`earlier_run`]).
    pub earlier: Option<EarlierRun>,
    /// This replica took the leader Lease at this time, and the SlurmJob's generation may be
    /// older: the previous leader may have sent its submit right before, and the job it made
    /// may appear until [`Takeover::settles_at`]; the index has not listed every job since.
    pub takeover: Option<Takeover>,
    /// The cluster's listing of every job has failed since then: what waits for one waits on
    /// ([`ClusterState::listing_failure`]).
    pub listing_failing_since: Option<DateTime<Utc>>,
}

/// A gain of the leader Lease whose predecessor's submits may still land.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Takeover {
    pub at: DateTime<Utc>,
    /// How long the previous leader's request may have been on its way: its client's request
    /// timeout (after it, slurmrestd may still carry it out: [`SUBMIT_DOUBT_GRACE`] more).
    pub in_flight: chrono::TimeDelta,
}

impl Takeover {
    /// Whether an object created at `created` is newer than a gain (or start) at `at`, so that
    /// no predecessor can have submitted for it. `creationTimestamp` has whole seconds, cut
    /// down: one of the second `at` falls in is not newer (it may be older), and waits.
    pub fn newer(created: DateTime<Utc>, at: DateTime<Utc>) -> bool {
        created > at
    }

    /// A gain at `at` whose predecessor's client gave up on a request after `request_timeout`.
    pub fn new(at: DateTime<Utc>, request_timeout: Duration) -> Self {
        Self {
            at,
            in_flight: chrono::TimeDelta::from_std(request_timeout)
                .unwrap_or(chrono::TimeDelta::MAX),
        }
    }

    /// When a job the previous leader's submit made is surely in slurmctld: a listing of every
    /// job that began after `settles_at + SUBMIT_DOUBT_GRACE` shows it ([`past_doubt`]).
    pub fn settles_at(&self) -> DateTime<Utc> {
        self.at + self.in_flight
    }
}

/// What accounting said of an earlier submit of this tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccountingAnswer {
    /// A job carrying the tag, provably ours (or none, or no accounting at all: nothing to
    /// adopt).
    Found(Option<u32>),
    /// None carries the tag in accounting, but these jobs of that name and user are still in
    /// slurmctld, whose owner the index has not resolved (skipped at the first sync): slurmdbd
    /// stores a job's comment only when it ends, so only slurmctld's record shows whether one
    /// of them is an earlier submit of this generation. The index is asked to fetch them.
    Unresolved(Vec<u32>),
    /// Accounting did not answer: `reason` is the error's category, `message` its text.
    Failed {
        reason: &'static str,
        message: String,
    },
}

/// The submit decision.
#[derive(Debug, Clone, PartialEq)]
pub enum SubmitPlan {
    /// Not now: the Ready condition says why (`reason`), and the step comes back after
    /// [`WAIT_RETRY`].
    Wait {
        reason: &'static str,
        message: String,
    },
    /// The spec cannot be submitted as it is; only an edit helps.
    Invalid(SpecError),
    /// A job carrying this generation's tag exists: adopt it. `announced` when this process
    /// submitted it (its `Submitted` Event went out then).
    Adopt { job_id: u32, announced: bool },
    /// A job of an earlier generation, whose submit's answer was lost, still runs: adopt it as
    /// that generation's run; this generation is then an edit of it.
    AdoptEarlier(EarlierRun),
    /// Ask the cluster's accounting for a job carrying the tag under this job name, then decide
    /// again with the answer.
    AskAccounting { name: String },
    /// Submit this request (the leader Lease is confirmed right before).
    Submit(Box<SubmitRequest>),
}

/// Whether to submit this generation now. `dependencies` looks a SlurmJob of the namespace up
/// by name (`None` when it does not exist).
pub fn submit(
    facts: SubmitFacts<'_>,
    dependencies: impl Fn(&str) -> Option<Dependee>,
) -> SubmitPlan {
    if !facts.index_trusted {
        let mut message = String::from(
            "waiting for a complete list of the cluster's jobs before submitting, so that a job \
             submitted before a restart is adopted instead of submitted twice",
        );
        // Any user's job: neither its id nor what reading it said is the tenant's to see.
        if let Some(unread) = facts.unreadable.values().next() {
            message.push_str(&format!(
                "; the list stays incomplete while a job whose owner is not known yet has a \
                 record that cannot be read ({}; since {}), which the SlurmCluster's \
                 administrator can look into (the operator's log names the job)",
                unread.reason,
                rfc3339(unread.since),
            ));
        }
        return SubmitPlan::Wait {
            reason: "WaitingForSlurmIndex",
            message,
        };
    }
    if let Some(job_id) = facts.submitted_here.or(facts.indexed) {
        return SubmitPlan::Adopt {
            job_id,
            announced: facts.submitted_here == Some(job_id),
        };
    }
    // Not the failure itself: it may name slurmrestd, which is not the tenant's to see.
    let failing = facts
        .listing_failing_since
        .map(|since| {
            format!(
                "; that listing has failed since {}, which the SlurmCluster's administrator can \
                 look into (its JobsListed condition says why)",
                rfc3339(since)
            )
        })
        .unwrap_or_default();
    if let Some(takeover) = facts.takeover {
        return SubmitPlan::Wait {
            reason: "WaitingForSlurmIndex",
            message: format!(
                "this operator replica began to act at {} (it started, or became the leader); \
                 the one before it may have submitted this generation right before, and Slurm \
                 may make that job up to {} s later: waiting for a listing of all the cluster's jobs that began after then, so \
                 that such a job is adopted by its tag instead of submitted twice{failing}",
                rfc3339(takeover.at),
                (takeover.in_flight + SUBMIT_DOUBT_GRACE).num_seconds(),
            ),
        };
    }
    if let Some((generation, doubt)) = facts.in_doubt {
        let within = if failing.is_empty() {
            " (within a minute or so while slurmrestd answers)"
        } else {
            ""
        };
        let edited = if generation < facts.generation {
            format!(
                " (the spec was edited since: generation {})",
                facts.generation
            )
        } else {
            String::new()
        };
        return SubmitPlan::Wait {
            reason: SUBMIT_FAILED,
            message: format!(
                "the submit of generation {generation} failed without saying whether Slurm made \
                 the job ({}){edited}; waiting for a listing of all the cluster's jobs that began \
                 after it, so that a job it made is adopted by its tag instead of submitted \
                 twice{within}{failing}",
                doubt.error
            ),
        };
    }
    if let Some(earlier) = facts.earlier {
        return SubmitPlan::AdoptEarlier(earlier);
    }
    if let Err(error) = submit::check_names(facts.spec, facts.name) {
        return SubmitPlan::Invalid(error);
    }
    let resolved = match lifecycle::resolve_dependencies(
        &facts.spec.depends_on,
        &facts.spec.cluster_name,
        dependencies,
    ) {
        Ok(resolved) => resolved,
        Err(wait) => {
            let message = match wait {
                DependencyWait::Missing(names) => format!(
                    "waiting for SlurmJobs that do not exist: {}",
                    names.join(", ")
                ),
                DependencyWait::OtherCluster(found) => format!(
                    "dependsOn names SlurmJobs of another cluster than this job's ({}): {}; a \
                     dependency must run on the same cluster: recreate it there or edit dependsOn",
                    facts.spec.cluster_name,
                    found
                        .iter()
                        .map(|(name, cluster)| format!("{name} (clusterName {cluster})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                DependencyWait::Cycle(chain) => format!(
                    "dependsOn makes a cycle: {name} → {} → {name} (each waits for the next to \
                     be submitted), so none of them can be: edit the dependsOn of one of them",
                    cycle_chain(&chain),
                    name = facts.name,
                ),
                DependencyWait::NotSubmitted(names) => format!(
                    "waiting for SlurmJobs to be submitted: {}",
                    names.join(", ")
                ),
                DependencyWait::Settling(names) => format!(
                    "waiting to learn how the Slurm jobs of these SlurmJobs ended (they left \
                     slurmctld; the cluster's accounting is asked): {}",
                    names.join(", ")
                ),
                DependencyWait::Lost(names) => format!(
                    "dependsOn names SlurmJobs whose Slurm job is lost: {}; how it ended is not \
                     known and its id may name another job now, so it is not depended on: edit \
                     them to run again (a new job), or edit dependsOn",
                    names.join(", ")
                ),
                DependencyWait::NeverSatisfied(ended) => {
                    return SubmitPlan::Wait {
                        reason: DEPENDENCY_NEVER_SATISFIED,
                        message: format!(
                            "dependsOn cannot be met: {}; this job is not submitted until they \
                             run again (edit them) or dependsOn changes",
                            ended
                                .iter()
                                .map(|(name, kind, phase)| format!(
                                    "{name} ended {phase}, which {} rules out",
                                    kind.as_str()
                                ))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    };
                }
            };
            return SubmitPlan::Wait {
                reason: WAITING_FOR_DEPENDENCIES,
                message,
            };
        }
    };
    let comment = facts.key.comment(facts.tag, facts.user);
    let request = match submit::request(facts.spec, facts.name, &comment, &resolved) {
        Ok(request) => request,
        Err(error) => return SubmitPlan::Invalid(error),
    };
    if facts.fresh {
        return SubmitPlan::Submit(Box::new(request));
    }
    // Not in slurmctld: it may still have run and left (down longer than MinJobAge).
    match facts.accounting {
        None => SubmitPlan::AskAccounting {
            name: request
                .name
                .clone()
                .unwrap_or_else(|| facts.name.to_owned()),
        },
        Some(AccountingAnswer::Found(Some(job_id))) => SubmitPlan::Adopt {
            job_id: *job_id,
            announced: false,
        },
        Some(AccountingAnswer::Found(None)) => SubmitPlan::Submit(Box::new(request)),
        Some(AccountingAnswer::Unresolved(ids)) => {
            let mut message = format!(
                "waiting for the records of Slurm jobs {} (same name and user in accounting, \
                 not yet read from slurmctld) to tell whether one is an earlier submit of \
                 generation {}",
                ids.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                facts.generation
            );
            // One named, the others counted: a condition's message is bounded (32 KiB).
            let mut unread = ids
                .iter()
                .filter_map(|id| facts.unreadable.get(id).map(|u| (*id, *u)));
            if let Some((id, first)) = unread.next() {
                message.push_str("; ");
                message.push_str(&unreadable(id, first));
                let more = unread.count();
                if more > 0 {
                    message.push_str(&format!(", and {more} more of them cannot be read either"));
                }
            }
            SubmitPlan::Wait {
                reason: "WaitingForSlurmIndex",
                message,
            }
        }
        Some(AccountingAnswer::Failed { reason, message }) => SubmitPlan::Wait {
            reason: "WaitingForAccounting",
            message: format!(
                "cannot check the cluster's accounting for an earlier submit of generation \
                 {} ({reason}): {message}; not submitting until it answers",
                facts.generation
            ),
        },
    }
}

/// What a wait says of job `job_id`, whose owner is unknown and whose record cannot be read: one
/// of the jobs accounting lists under the SlurmJob's own name and Slurm user.
fn unreadable(job_id: u32, unread: &Unreadable) -> String {
    format!(
        "Slurm job {job_id}'s record, whose owner is not known yet, cannot be read ({}: {}; \
         since {})",
        unread.reason,
        status::bounded(&unread.message, status::MAX_SLURM_MESSAGE),
        rfc3339(unread.since),
    )
}

fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Whether a SlurmJob created at `created` is still fresh at `now` in its first generation.
/// When the index skipped jobs (its first listing, or a catch-up after a burst of others'
/// submits: `ClusterState::skipped_before`), only a SlurmJob created after that listing began
/// (by more than [`GONE_GRACE`], for the two clocks) is: a job submitted for it then appeared
/// later, and the index resolved it.
pub fn fresh(
    generation: i64,
    created: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    skipped_before: Option<DateTime<Utc>>,
) -> bool {
    generation == 1
        && created.is_some_and(|at| {
            now - at < FRESH && skipped_before.is_none_or(|before| at > before + GONE_GRACE)
        })
}

/// The reason of a submit that failed without saying whether Slurm made the job.
pub const SUBMIT_FAILED: &str = "SubmitFailed";

/// `Ready=False` reason: a SlurmJob in `dependsOn` ended in a way its dependency rules out.
pub use super::status::DEPENDENCY_NEVER_SATISFIED;
/// The reason of a wait for SlurmJobs `dependsOn` names: to exist, to be submitted, to have
/// ended in a known way, or to be on this job's cluster.
pub const WAITING_FOR_DEPENDENCIES: &str = "WaitingForDependencies";

/// How many SlurmJobs of a dependency cycle its wait's message names.
const CYCLE_NAMED: usize = 8;

/// A dependency cycle's SlurmJobs ([`DependencyWait::Cycle`]) as its wait's message names them:
/// "a → b → c", at most [`CYCLE_NAMED`] of them and how many more there are.
fn cycle_chain(chain: &[String]) -> String {
    let named = chain
        .iter()
        .take(CYCLE_NAMED)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(" → ");
    if chain.len() > CYCLE_NAMED {
        format!("{named} → … ({} more)", chain.len() - CYCLE_NAMED)
    } else {
        named
    }
}

/// How long after a failed submit a job it made may still appear: slurmrestd may still be
/// sending the request when the operator gives up, and its RPC to slurmctld gives up after
/// `MessageTimeout` (10 s by default).
pub const SUBMIT_DOUBT_GRACE: chrono::TimeDelta = chrono::TimeDelta::seconds(10);

/// Whether the index has listed every job since a submit that failed at `since` without saying
/// whether it made a job: a job it made is then in the index, found by its tag.
pub fn past_doubt(state: &ClusterState, since: DateTime<Utc>) -> bool {
    state
        .fully_listed_at
        .is_some_and(|at| at > since + SUBMIT_DOUBT_GRACE)
}

/// A job submitted for an earlier generation of a SlurmJob than the one being submitted, which
/// no status names ([`earlier_run`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EarlierRun {
    pub job_id: u32,
    pub generation: i64,
}

/// The first generation whose submit `status` names no run of: the one after the last run it
/// records (a re-run's status has the run before it in its history), or any.
pub fn unrecorded_from(status: &SlurmJobStatus) -> i64 {
    status
        .submitted_generation
        .into_iter()
        .chain(status.history.first().map(|run| run.generation))
        .max()
        .map_or(i64::MIN, |g| g.saturating_add(1))
}

/// The latest job of SlurmJob `uid` submitted for a generation from `from` (the first one no
/// status names a run of) to `generation - 1` that has not ended: a submit whose answer was lost
/// (in doubt, or the process died, or its status write failed, before the status named it), then
/// the spec was edited. Submitting `generation` beside it would run two jobs where the user
/// expects one; it is adopted instead, and the edit treated as one of a running job.
///
/// What counts: the index's jobs carrying one of those tags, provably ours for `user`
/// ([`adoptable`]), not all of whose records ended; and `here`, this process's own submits of
/// those generations (generation, job id), unless the index shows that job ended, or its id
/// held by a job that is not ours (slurmctld lost its state and gave the id out again). One the
/// index has no record of counts as live (its submit may be too recent for any listing).
pub fn earlier_run(
    state: &ClusterState,
    here: &[(i64, u32)],
    uid: &str,
    from: i64,
    generation: i64,
    user: &str,
    key: &TagKey,
) -> Option<EarlierRun> {
    let to = generation.checked_sub(1)?;
    // `submitted`: one of this process's submits, whose records must be its own (the index's
    // were found by their tag and proven ours already).
    let live = |id: u32, submitted: bool| {
        let records = state.job_records(id);
        if records.is_empty() {
            return submitted;
        }
        records
            .iter()
            .any(|job| !job.state.base.is_finished() && (!submitted || is_ours(job, uid, key)))
    };
    let indexed = state
        .tagged_between(uid, from, to)
        .into_iter()
        .filter(|&(g, id)| {
            adoptable(state.job_records(id), &OwnerTag::new(uid, g), user, key).job_id == Some(id)
        })
        .filter(|&(_, id)| live(id, false));
    let submitted = here
        .iter()
        .copied()
        .filter(|&(g, _)| (from..=to).contains(&g))
        .filter(|&(_, id)| live(id, true));
    // The latest generation; of its jobs the lowest id, as [`adoptable`] picks.
    indexed
        .chain(submitted)
        .max_by_key(|&(generation, id)| (generation, std::cmp::Reverse(id)))
        .map(|(generation, job_id)| EarlierRun { job_id, generation })
}

/// Whether the index can be trusted to show every job, i.e. it synced after `started_at`.
pub fn index_trusted(state: &ClusterState, started_at: DateTime<Utc>) -> bool {
    state.jobs_synced_at.is_some_and(|t| t > started_at)
}

/// Why a job carrying a generation's tag is not adopted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotAdopted {
    /// The signature does not verify (guessed, copied onto another user's job, another key).
    Forged,
    /// A legacy tag, written before tags were signed: anyone could have written it.
    Unsigned,
    /// Signed by us, but for a Slurm user other than the one this SlurmJob submits as.
    OtherUser,
}

impl NotAdopted {
    /// Stable PascalCase name (log field, Event text).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Forged => "Forged",
            Self::Unsigned => "Unsigned",
            Self::OtherUser => "OtherUser",
        }
    }
}

/// What [`adoptable`] found among the jobs carrying a tag.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Adoptable {
    /// The job to adopt: the lowest id provably ours (an outside actor cannot duplicate it).
    pub job_id: Option<u32>,
    /// The jobs carrying the tag that are not adopted, and why, by id.
    pub refused: Vec<(u32, NotAdopted)>,
}

/// The job, among `jobs`, that carries exactly `tag` and is provably ours: its signature
/// verifies under `key` for the Slurm user the record says it runs as, and that user is `user`,
/// the one this SlurmJob submits as. The others carrying the tag are listed as refused.
pub fn adoptable<'a>(
    jobs: impl IntoIterator<Item = &'a Job>,
    tag: &OwnerTag,
    user: &str,
    key: &TagKey,
) -> Adoptable {
    let mut found = Adoptable::default();
    for job in jobs
        .into_iter()
        .filter(|job| job.owner.as_ref() == Some(tag))
    {
        let id = job.array_job_id.unwrap_or(job.job_id);
        let refusal = match job.ownership(key) {
            Ownership::Proven if job.user_name.as_deref() == Some(user) => {
                found.job_id = Some(found.job_id.map_or(id, |f| f.min(id)));
                continue;
            }
            Ownership::Proven => NotAdopted::OtherUser,
            Ownership::Legacy => NotAdopted::Unsigned,
            Ownership::Forged | Ownership::Untagged => NotAdopted::Forged,
        };
        if !found.refused.iter().any(|(r, _)| *r == id) {
            found.refused.push((id, refusal));
        }
    }
    let adopted = found.job_id;
    found.refused.retain(|(id, _)| Some(*id) != adopted);
    found.refused.sort_unstable_by_key(|(id, _)| *id);
    found
}

/// The ids, among accounting's `records` of a job name, of jobs run by `user` whose record carries
/// no comment (slurmdbd stores comments only when a job ends): maybe an earlier submit still in
/// slurmctld, which only slurmctld's record can prove ours. An array by its array job id.
pub fn accounting_candidates(records: &[Job], user: &str) -> Vec<u32> {
    let mut ids: Vec<u32> = records
        .iter()
        .filter(|job| job.comment.is_none() && job.user_name.as_deref() == Some(user))
        .map(|job| job.array_job_id.unwrap_or(job.job_id))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// How far from the status's `trackedSince` (the operator's clock) a comment-less accounting
/// record's submit time (slurmctld's clock) may lie to be taken for the run's, when the status
/// has no submit time of Slurm's: clocks kept by NTP, and a submit answered in seconds.
pub const SUBMIT_CLOCK_SLACK: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// The accounting records of one job id that are the run `status` follows, of the SlurmJob
/// whose tag is `tag`. Records with a comment are ours when it is `tag`, [`is_followed`].
///
/// When no record carries any comment (slurmdbd stores it only at a job's end, and only with
/// `AccountingStoreFlags=job_comment`), the tag cannot tell: slurmctld reuses ids after a
/// reset, so the id may be another team's job too. Then only the run submitted when ours was
/// is taken: the records whose submit time is the status's `submitTime` (Slurm's own clock;
/// an array's earliest task), or, when Slurm's is not known (the job left before it was ever
/// observed), within [`SUBMIT_CLOCK_SLACK`] of `trackedSince`. Also the runs requeued since
/// (submitted later): an array's tasks; a plain job's under its name, each after a run that
/// ended requeued. Nothing without either time. And only records of `user`, the Slurm user the SlurmJob's jobs run as:
/// another user's job numbered with our id within
/// those minutes is not ours (nothing when the user is not known; a SlurmJob whose namespace
/// was mapped to another user since then reads its run as lost, never as someone else's).
pub fn accounting_ours(
    records: &[Job],
    tag: &OwnerTag,
    key: &TagKey,
    status: &SlurmJobStatus,
    user: Option<&str>,
) -> Vec<Job> {
    if records.iter().any(|job| job.comment.is_some()) {
        return records
            .iter()
            .filter(|job| {
                job.comment.is_some()
                    && job.owner.as_ref() == Some(tag)
                    && is_followed(job, tag.uid(), key, user)
            })
            .cloned()
            .collect();
    }
    let Some(user) = user else {
        return Vec::new();
    };
    let records: Vec<&Job> = records
        .iter()
        .filter(|job| job.user_name.as_deref() == Some(user))
        .collect();
    let submitted = |job: &Job| job.submit_time.map(|t| t.timestamp());
    let is_run = |t: i64| match (&status.submit_time, &status.tracked_since) {
        (Some(at), _) => t == at.0.as_second(),
        (None, Some(since)) => (t - since.0.as_second()).abs() <= SUBMIT_CLOCK_SLACK.num_seconds(),
        (None, None) => false,
    };
    let Some(first) = records
        .iter()
        .filter_map(|job| submitted(job))
        .filter(|t| is_run(*t))
        .min()
    else {
        return Vec::new();
    };
    let is_array = records.iter().any(|job| job.array_job_id.is_some());
    if is_array {
        return records
            .into_iter()
            .filter(|job| submitted(job).is_some_and(|at| at >= first))
            .cloned()
            .collect();
    }
    // The run itself (the first record that is: without Slurm's submit time, others within the
    // slack may be another job's), then the runs a requeue made of it, in submit order: each
    // record of its name right after a run taken that ended requeued (`PENDING+REQUEUED`,
    // `NODE_FAIL`, `PREEMPTED`), submitted when that run ended (Slurm submits the new run then;
    // a NODE_FAIL or PREEMPTED that was final has no such successor). Not any later record of
    // that user and name: after a reset, another namespace granted the same Slurm user may run
    // a job of that name under the reused id.
    let mut runs: Vec<&Job> = records
        .iter()
        .copied()
        .filter(|job| submitted(job).is_some_and(|at| at >= first))
        .collect();
    runs.sort_by_key(|job| submitted(job));
    let requeued = |job: &Job| {
        job.state.has_flag("REQUEUED")
            || matches!(
                job.state.base,
                JobBaseState::NodeFail | JobBaseState::Preempted
            )
    };
    let resubmitted = |run: &Job, job: &Job| {
        run.end_time
            .zip(job.submit_time)
            .is_some_and(|(end, at)| (at - end).abs() <= SUBMIT_CLOCK_SLACK)
    };
    let mut ours: Vec<Job> = Vec::new();
    // The record before, and whether it was taken.
    let mut before: Option<(&Job, bool)> = None;
    for job in runs {
        let follows_a_requeue = before.is_some_and(|(run, taken)| {
            taken && requeued(run) && run.name == job.name && resubmitted(run, job)
        });
        let take = submitted(job) == Some(first) || follows_a_requeue;
        if take {
            ours.push(job.clone());
        }
        before = Some((job, take));
    }
    ours
}

/// Whether `job` is provably the SlurmJob `uid`'s: a tag of that uid, signed with our key for
/// the job's own Slurm user.
pub fn is_ours(job: &Job, uid: &str, key: &TagKey) -> bool {
    job.owner.as_ref().is_some_and(|tag| tag.is_of(uid)) && job.ownership(key) == Ownership::Proven
}

/// Whether the SlurmJob `uid` follows (or cancels) `job`, reached through its own `status.jobId`:
/// a job that [`is_ours`], or one carrying the legacy, unsigned tag of that uid — a job the
/// previous version submitted, still followed and cancelled after an upgrade — and run by
/// `user`, the Slurm user the SlurmJob's jobs run as: anyone can write an unsigned tag on
/// their own job, and a job id reused after a state loss may be any user's. A legacy tag is
/// never adopted and never found by a scan of the index.
pub fn is_followed(job: &Job, uid: &str, key: &TagKey, user: Option<&str>) -> bool {
    is_ours(job, uid, key)
        || (job.owner.as_ref().is_some_and(|tag| tag.is_of(uid))
            && job.ownership(key) == Ownership::Legacy
            && user.is_some_and(|user| job.user_name.as_deref() == Some(user)))
}

/// Whether the SlurmJob `uid` follows job `job_id` through an unsigned, legacy tag
/// ([`is_followed`]): the poller follows such a job only for the ids SlurmJobs name, so the
/// step names it (`ClusterState::follow_unsigned`).
pub fn follows_unsigned(
    state: &ClusterState,
    job_id: u32,
    uid: &str,
    key: &TagKey,
    user: Option<&str>,
) -> bool {
    state
        .job_records(job_id)
        .into_iter()
        .any(|job| job.has_unsigned_tag() && is_followed(job, uid, key, user))
}

/// The status mirrored from the index; a job the index no longer holds (in a complete listing
/// that began after the job was submitted, see [`gone`]) that had not ended is `Lost` — until
/// the caller asked accounting. Only records that are ours ([`is_followed`] for `uid`) are
/// mirrored: a job id reused by someone else's job (after slurmctld lost its state) reads as
/// our job being gone.
pub fn follow(
    current: &SlurmJobStatus,
    job_id: i64,
    state: &ClusterState,
    now: DateTime<Utc>,
    uid: &str,
    key: &TagKey,
    user: Option<&str>,
) -> SlurmJobStatus {
    let mut base = current.clone();
    if base.tracked_since.is_none() {
        // A status written before `trackedSince` existed: the evidence clock starts now, so a
        // job already gone is called so after the next complete listing, never on a guess.
        base.tracked_since = status::time(Some(now));
    }
    let records: Vec<Job> = u32::try_from(job_id)
        .map(|id| {
            state
                .job_records(id)
                .into_iter()
                .filter(|job| is_followed(job, uid, key, user))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    if !records.is_empty() {
        return status::observe(&base, &records);
    }
    if base.phase.is_terminal() || !proven_gone(state, &base, job_id) {
        return base;
    }
    status::lost(&base, job_id, now)
}

/// The phase `dependsOn` judges the SlurmJob `uid` by, from its `status` and the index now: what
/// its own next reconcile would mirror ([`follow`]). Its status alone may be a cycle or an outage
/// old, and its job forgotten by slurmctld since (MinJobAge, lost state), its id given to another
/// job, another team's maybe, which a dependent must not be made to wait on. `Lost` when the index
/// holds that id for a job that is not this SlurmJob's; `None` when the index proves the job gone
/// but its own reconcile has not asked accounting how it ended yet (until then neither `Lost`
/// nor its id).
pub fn dependee_phase(
    uid: &str,
    status: &SlurmJobStatus,
    state: &ClusterState,
    now: DateTime<Utc>,
    key: &TagKey,
    user: Option<&str>,
) -> Option<Phase> {
    let Some(job_id) = status.job_id else {
        return Some(status.phase);
    };
    if status.phase.is_terminal() {
        return Some(status.phase);
    }
    let someone_elses = u32::try_from(job_id).is_ok_and(|id| {
        let records = state.job_records(id);
        !records.is_empty() && !records.iter().any(|job| is_followed(job, uid, key, user))
    });
    if someone_elses {
        return Some(Phase::Lost);
    }
    let followed = follow(status, job_id, state, now, uid, key, user).phase;
    (followed != Phase::Lost).then_some(followed)
}

/// Whether the index proves job `job_id` gone from slurmctld, holding no record of it: a
/// complete listing that spoke for its id ([`resolved`]) began after it was tracked
/// ([`gone`]), or a listing of every job did. The second is what shows an id above what the
/// incremental cycles probe: one purged while the operator was away, above the highest id
/// slurmctld still holds when it comes back.
fn proven_gone(state: &ClusterState, current: &SlurmJobStatus, job_id: i64) -> bool {
    let listed_all_since = || {
        let since = current
            .tracked_since
            .as_ref()
            .and_then(crate::crd::time::to_utc);
        match (state.fully_listed_at, since) {
            (Some(listed), Some(since)) => listed > since + GONE_GRACE,
            _ => false,
        }
    };
    let unresolved = u32::try_from(job_id).map_or(true, |id| state.unresolved.contains(&id));
    !unresolved && ((gone(state, current) && resolved(state, job_id)) || listed_all_since())
}

/// Whether the index can say job `job_id` is not ours or not there: its owner is resolved, and
/// the last complete listing spoke for its id. If not, the caller asks the index for it
/// (`ClusterState::want`) and waits.
pub fn resolved(state: &ClusterState, job_id: i64) -> bool {
    u32::try_from(job_id).is_ok_and(|id| !state.unresolved.contains(&id) && state.listed_up_to(id))
}

/// Whether the index proves the current job gone from slurmctld: its last complete listing
/// began after the operator submitted or adopted the job (`trackedSince`, by the same clock),
/// so the job would be in it if slurmctld still held it. Not the `Ready` condition's time: a
/// re-run keeps `Ready=True`, and with it the previous run's time (issue 15: a listing taken
/// before the re-run's submit called the new job `Lost`).
pub fn gone(state: &ClusterState, current: &SlurmJobStatus) -> bool {
    let Some(synced) = state.jobs_synced_at else {
        return false;
    };
    let Some(since) = current
        .tracked_since
        .as_ref()
        .and_then(crate::crd::time::to_utc)
    else {
        return false;
    };
    synced > since + GONE_GRACE
}

/// The Slurm jobs a deleted SlurmJob must cancel: its current job unless it ended, what this
/// process submitted for it, and every unfinished job in the index that is ours ([`is_ours`]).
/// A candidate, not a verdict: `act::cancel_owned` checks each id again right before the cancel.
pub fn to_cancel(
    uid: &str,
    status: &SlurmJobStatus,
    state: Option<&ClusterState>,
    submissions: &Submissions,
    key: &TagKey,
) -> Vec<u32> {
    let mut ids: Vec<u32> = Vec::new();
    // Unless the index shows it ended: a deletion that waits (`CleanupPlan::CancelKnown`) would
    // cancel it again at every look.
    let ended_in_index = |id: u32| {
        let records = state.map(|s| s.job_records(id)).unwrap_or_default();
        !records.is_empty() && records.iter().all(|j| j.state.base.is_finished())
    };
    if let Some(id) = status.job_id.and_then(|id| u32::try_from(id).ok())
        && !status.phase.is_terminal()
        && !ended_in_index(id)
    {
        ids.push(id);
    }
    // Every generation's from the one the status names on, not only that one: a status write
    // that failed after a submit (or a cache that does not show it yet) names an earlier
    // generation or none, and the index may not list the new job yet. Earlier runs, the
    // status's own run once it ended, and those the index shows ended need no cancel.
    // Not `observedGeneration`: it moves on without a submit (a wait after an edit).
    let from = status.submitted_generation.unwrap_or(i64::MIN);
    let ended = status.job_id.filter(|_| status.phase.is_terminal());
    ids.extend(
        submissions
            .jobs_of(uid, from)
            .into_iter()
            .filter(|&id| Some(i64::from(id)) != ended)
            .filter(|&id| {
                let records = state.map(|s| s.job_records(id)).unwrap_or_default();
                records.is_empty() || records.iter().any(|j| !j.state.base.is_finished())
            }),
    );
    if let Some(state) = state {
        ids.extend(
            state
                .jobs
                .values()
                .filter(|j| !j.state.base.is_finished())
                .filter(|j| is_ours(j, uid, key))
                .map(|j| j.array_job_id.unwrap_or(j.job_id)),
        );
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// A SlurmJob that names a SlurmCluster being deleted, as [`needs_cluster`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct ClusterUser<'a> {
    pub uid: &'a str,
    pub generation: i64,
    pub status: Option<&'a SlurmJobStatus>,
    /// Whether it carries the operator's finalizer: only then does its deletion cancel anything.
    pub finalized: bool,
    /// Whether its own deletion has begun (its generation is then one more than its spec's).
    pub deleting: bool,
}

/// The uids of the SlurmJobs with an unfinished job in `state` that is provably theirs
/// ([`is_ours`]): one pass over the index, for [`needs_cluster`] over many SlurmJobs.
pub fn live_owners(state: &ClusterState, key: &TagKey) -> BTreeSet<String> {
    state
        .jobs
        .values()
        .filter(|job| !job.state.base.is_finished())
        .filter_map(|job| {
            let uid = job.owner.as_ref()?.uid();
            is_ours(job, uid, key).then(|| uid.to_owned())
        })
        .collect()
}

/// Whether a SlurmJob still needs the client of the SlurmCluster it names, which is being
/// deleted: for its own deletion to cancel what it runs ([`to_cancel`] would find something). A
/// SlurmJob that never ran, whose run ended, or that only asks for a run the going cluster will
/// not submit does not: otherwise any tenant could keep any SlurmCluster from going away with
/// one SlurmJob naming it (one its access refuses from the start has no finalizer at all). `live` is [`live_owners`] of the cluster's job listing when it is
/// complete since this process started ([`index_trusted`]); without one, a job whose submit
/// answer a crash lost does not show, so a SlurmJob whose latest generation records no run
/// holds the cluster while `in_doubt_holds` (the cluster's deletion deadline has not passed).
pub fn needs_cluster(
    user: ClusterUser<'_>,
    live: Option<&BTreeSet<String>>,
    in_doubt_holds: bool,
) -> bool {
    if !user.finalized {
        return false;
    }
    if user
        .status
        .is_some_and(|s| s.job_id.is_some() && !s.phase.is_terminal())
    {
        return true;
    }
    if let Some(live) = live {
        return live.contains(user.uid);
    }
    let generation = if user.deleting {
        user.generation.saturating_sub(1)
    } else {
        user.generation
    };
    in_doubt_holds
        && !lifecycle::settled(generation, user.status)
        && user.status.and_then(|s| s.submitted_generation) != Some(generation)
}

/// Why a deleted SlurmJob cannot cancel its Slurm jobs now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocker {
    /// The SlurmCluster exists but no slurmrestd client is registered for it (the operator has
    /// just started, its credentials are gone, it is being deleted and cannot reconnect, ...).
    NotConnected,
    /// Connected, but the cluster's jobs have not been listed completely since this process
    /// started: only such a list shows a job whose submit answer a crash lost.
    IndexNotSynced,
    /// Only accounting can show whether a job of this SlurmJob is among those the index
    /// skipped, and every search slot it may take is held by other searches: it waits in
    /// their line (the driver's finding; the plan says `IndexNotSynced`).
    SearchBusy,
    /// A cancel failed (unreachable, unauthorized, ...): `reason` is the error's category.
    CancelFailed {
        job_id: u32,
        reason: &'static str,
        message: String,
    },
}

impl Blocker {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotConnected => "ClusterNotConnected",
            Self::IndexNotSynced => "WaitingForSlurmIndex",
            Self::SearchBusy => "WaitingForAccountingSearch",
            Self::CancelFailed { .. } => "CancelFailed",
        }
    }

    /// What it waits for, for people.
    pub fn describe(&self, cluster: &str) -> String {
        match self {
            Self::NotConnected => format!(
                "SlurmCluster {cluster:?} is not connected (see its status; a deleted one \
                 reconnects only while its credentials Secret exists)"
            ),
            Self::IndexNotSynced => format!(
                "a complete list of SlurmCluster {cluster:?}'s jobs, the only place that shows a \
                 job of this SlurmJob's whose submit answer was lost: none since the operator \
                 started, or none of every job since a submit of this SlurmJob got no answer, \
                 or since this replica started or became the leader and the previous one's \
                 submit could still land (one is due within a minute while slurmrestd answers), or the jobs \
                 accounting names under this SlurmJob's job name are not read yet"
            ),
            Self::SearchBusy => format!(
                "its turn to ask SlurmCluster {cluster:?}'s accounting for jobs of this \
                 SlurmJob's job name among those the operator's index skipped (one search at a \
                 time per namespace, a few per connection: other SlurmJobs search now; it goes \
                 on when one ends)"
            ),
            Self::CancelFailed {
                job_id,
                reason,
                message,
            } => format!(
                "SlurmCluster {cluster:?} to accept the cancel of Slurm job {job_id} ({reason}: \
                 {message})"
            ),
        }
    }
}

/// Where a deleted SlurmJob's SlurmCluster stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// A client is registered; `index_trusted` as [`index_trusted`] says.
    Connected { index_trusted: bool },
    /// The SlurmCluster exists, without a client.
    NotConnected,
    /// The SlurmCluster does not exist: nothing can cancel through it, ever.
    Gone,
}

/// Everything the cleanup decision depends on.
#[derive(Debug, Clone, Copy)]
pub struct CleanupFacts<'a> {
    /// [`lifecycle::settled`]: the run is over and the status says so.
    pub settled: bool,
    /// The [`SKIP_CANCEL_ANNOTATION`](crate::crd::SKIP_CANCEL_ANNOTATION) is `"true"`.
    pub skip_cancel: bool,
    pub reach: Reach,
    /// [`to_cancel`]: the jobs known to need a cancel.
    pub to_cancel: &'a [u32],
    /// A cancel of this step failed (fed back by the driver).
    pub failed: Option<&'a Blocker>,
    /// When a blocked cleanup lets go without cancelling ([`release_at`]); `None`: never.
    pub release_at: Option<DateTime<Utc>>,
    pub now: DateTime<Utc>,
}

/// Why a finalizer goes although Slurm jobs may still run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Orphaned {
    /// The annotation asked for it.
    SkipCancel,
    /// The SlurmCluster no longer exists.
    ClusterGone,
    /// Blocked until the deletion deadline passed.
    Deadline(Blocker),
}

/// The cleanup decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CleanupPlan {
    /// Nothing of this SlurmJob runs in Slurm: let the object go.
    Release,
    /// Cancel these jobs, then let go (a failure comes back as [`CleanupFacts::failed`]).
    Cancel(Vec<u32>),
    /// Cancel these jobs, the ones known, then plan again without them: only a complete index
    /// shows whether there are more (a failure comes back as [`CleanupFacts::failed`]).
    CancelKnown(Vec<u32>),
    /// Let go without cancelling, with a Warning naming `ids`, which may still run.
    Orphan { why: Orphaned, ids: Vec<u32> },
    /// Keep the finalizer: a condition and a Warning say what it waits for, and until when.
    Wait {
        blocker: Blocker,
        release_at: Option<DateTime<Utc>>,
    },
}

/// Whether a deleted SlurmJob's finalizer may go, and what to do first:
/// 1. a settled SlurmJob needs nothing from Slurm (no client, no index, no request): an edit
///    since its run ended (a re-run whose submit a crash may have lost) makes it unsettled;
/// 2. the skip-cancel annotation lets go at once, naming what may still run;
/// 3. a SlurmCluster that no longer exists lets go, naming what may still run;
/// 4. connected with a complete job list: cancel (nothing to cancel: let go);
/// 5. connected without one: cancel the jobs known, then as 6;
/// 6. otherwise wait, until [`CleanupFacts::release_at`], then let go naming what may still run.
pub fn cleanup(facts: CleanupFacts<'_>) -> CleanupPlan {
    let ids = || facts.to_cancel.to_vec();
    if facts.settled {
        return CleanupPlan::Release;
    }
    if facts.skip_cancel {
        return CleanupPlan::Orphan {
            why: Orphaned::SkipCancel,
            ids: ids(),
        };
    }
    let blocker = match (facts.failed, facts.reach) {
        (Some(failed), _) => failed.clone(),
        (None, Reach::Gone) if facts.to_cancel.is_empty() => return CleanupPlan::Release,
        (None, Reach::Gone) => {
            return CleanupPlan::Orphan {
                why: Orphaned::ClusterGone,
                ids: ids(),
            };
        }
        (
            None,
            Reach::Connected {
                index_trusted: true,
            },
        ) if facts.to_cancel.is_empty() => {
            return CleanupPlan::Release;
        }
        (
            None,
            Reach::Connected {
                index_trusted: true,
            },
        ) => return CleanupPlan::Cancel(ids()),
        // What is known to run goes now, before the wait for a complete index: the wait may be
        // long (an outage, an accounting search another team's jobs crowd), and a job this
        // SlurmJob provably made must not run on meanwhile.
        (
            None,
            Reach::Connected {
                index_trusted: false,
            },
        ) if !facts.to_cancel.is_empty() => return CleanupPlan::CancelKnown(ids()),
        (
            None,
            Reach::Connected {
                index_trusted: false,
            },
        ) => Blocker::IndexNotSynced,
        (None, Reach::NotConnected) => Blocker::NotConnected,
    };
    match facts.release_at {
        Some(at) if at <= facts.now => CleanupPlan::Orphan {
            why: Orphaned::Deadline(blocker),
            ids: ids(),
        },
        release_at => CleanupPlan::Wait {
            blocker,
            release_at,
        },
    }
}

#[cfg(test)]
mod tests;
