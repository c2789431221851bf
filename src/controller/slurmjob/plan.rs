//! What a SlurmJob step should do, as pure functions of plain data: whether to submit, adopt,
//! ask accounting first or wait ([`submit`]); what the index says of a submitted job
//! ([`follow`]); which Slurm jobs a deleted SlurmJob must cancel ([`to_cancel`]). The I/O these
//! decisions call for happens in `act`, which feeds its answers back here.
//!
//! Crash safety is decided here: a submit is planned only when
//! 1. the cluster's index was synced completely *after this process started* (so it has seen
//!    every job slurmctld holds, including any an earlier incarnation submitted before dying),
//! 2. neither that index nor this process's own submissions hold a job carrying this
//!    generation's tag — if one does, it is adopted;
//! 3. unless the SlurmJob is fresh ([`FRESH`]), accounting has answered that it holds no job
//!    with this tag either (one that ran and left slurmctld while the operator was away).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::crd::slurmjob::{SlurmJobSpec, SlurmJobStatus};
use crate::slurm::tag::OwnerTag;
use crate::slurm::types::{Job, SubmitRequest};
use crate::state::index::ClusterState;

use super::lifecycle::{self, DependencyWait};
use super::status;
use super::submissions::Submissions;
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
    pub generation: i64,
    pub spec: &'a SlurmJobSpec,
    /// Whether the index synced completely after this process started ([`index_trusted`]).
    pub index_trusted: bool,
    /// The job this process submitted with this tag, if any (see `Submissions`).
    pub submitted_here: Option<u32>,
    /// The lowest job id carrying this tag in the index.
    pub indexed: Option<u32>,
    /// Whether accounting may be skipped ([`FRESH`]).
    pub fresh: bool,
    /// Accounting's answer, once it was asked ([`SubmitPlan::AskAccounting`]).
    pub accounting: Option<&'a AccountingAnswer>,
}

/// What accounting said of an earlier submit of this tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccountingAnswer {
    /// A job carrying the tag (or none, or no accounting at all: nothing to adopt).
    Found(Option<u32>),
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
    /// Ask the cluster's accounting for a job carrying the tag under this job name, then decide
    /// again with the answer.
    AskAccounting { name: String },
    /// Submit this request (the leader Lease is confirmed right before).
    Submit(Box<SubmitRequest>),
}

/// Whether to submit this generation now. `dependencies` looks a SlurmJob of the namespace up
/// by name: `None` when it does not exist, `Some(None)` when it has no job id yet.
pub fn submit(
    facts: SubmitFacts<'_>,
    dependencies: impl Fn(&str) -> Option<Option<i64>>,
) -> SubmitPlan {
    if !facts.index_trusted {
        return SubmitPlan::Wait {
            reason: "WaitingForSlurmIndex",
            message: "waiting for a complete list of the cluster's jobs before submitting, so \
                      that a job submitted before a restart is adopted instead of submitted twice"
                .into(),
        };
    }
    if let Some(job_id) = facts.submitted_here.or(facts.indexed) {
        return SubmitPlan::Adopt {
            job_id,
            announced: facts.submitted_here == Some(job_id),
        };
    }
    if let Err(error) = submit::check_dependencies(facts.spec, facts.name) {
        return SubmitPlan::Invalid(error);
    }
    let resolved = match lifecycle::resolve_dependencies(&facts.spec.depends_on, dependencies) {
        Ok(resolved) => resolved,
        Err(wait) => {
            let message = match wait {
                DependencyWait::Missing(names) => format!(
                    "waiting for SlurmJobs that do not exist: {}",
                    names.join(", ")
                ),
                DependencyWait::NotSubmitted(names) => format!(
                    "waiting for SlurmJobs to be submitted: {}",
                    names.join(", ")
                ),
            };
            return SubmitPlan::Wait {
                reason: "WaitingForDependencies",
                message,
            };
        }
    };
    let request = match submit::request(facts.spec, facts.name, facts.tag, &resolved) {
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

/// Whether a SlurmJob created at `created` is still fresh at `now` in its first generation.
pub fn fresh(generation: i64, created: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    generation == 1 && created.is_some_and(|at| now - at < FRESH)
}

/// The existing job of `tag`: submitted by this process, or seen by the index.
pub fn existing(state: &ClusterState, submissions: &Submissions, tag: &OwnerTag) -> Option<u32> {
    submissions
        .get(tag)
        .or_else(|| state.tagged(tag).first().copied())
}

/// Whether the index can be trusted to show every job, i.e. it synced after `started_at`.
pub fn index_trusted(state: &ClusterState, started_at: DateTime<Utc>) -> bool {
    state.jobs_synced_at.is_some_and(|t| t > started_at)
}

/// The job, among `jobs`, that carries exactly `tag` in its comment (the lowest id when an
/// outside actor duplicated it: the first one is the one we submitted).
pub fn find_tagged<'a>(jobs: impl IntoIterator<Item = &'a Job>, tag: &OwnerTag) -> Option<u32> {
    jobs.into_iter()
        .filter(|job| job.owner.as_ref() == Some(tag))
        .map(|job| job.array_job_id.unwrap_or(job.job_id))
        .min()
}

/// The status mirrored from the index; a job the index no longer holds (in a complete listing
/// that began after the job was submitted, see [`gone`]) that had not ended is `Lost` — until
/// the caller asked accounting.
pub fn follow(
    current: &SlurmJobStatus,
    job_id: i64,
    state: &ClusterState,
    now: DateTime<Utc>,
) -> SlurmJobStatus {
    let mut base = current.clone();
    if base.tracked_since.is_none() {
        // A status written before `trackedSince` existed: the evidence clock starts now, so a
        // job already gone is called so after the next complete listing, never on a guess.
        base.tracked_since = status::time(Some(now));
    }
    let records: Vec<Job> = u32::try_from(job_id)
        .map(|id| state.job_records(id).into_iter().cloned().collect())
        .unwrap_or_default();
    if !records.is_empty() {
        return status::observe(&base, &records);
    }
    if base.phase.is_terminal() || !gone(state, &base) {
        return base;
    }
    status::lost(&base, job_id, now)
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
        .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0))
    else {
        return false;
    };
    synced > since + GONE_GRACE
}

/// The Slurm jobs a deleted SlurmJob must cancel: its current job unless it ended, what this
/// process submitted for it, and every unfinished job in the index carrying its uid.
pub fn to_cancel(
    uid: &str,
    status: &SlurmJobStatus,
    state: Option<&ClusterState>,
    submissions: &Submissions,
) -> Vec<u32> {
    let mut ids: Vec<u32> = Vec::new();
    if let Some(id) = status.job_id.and_then(|id| u32::try_from(id).ok())
        && !status.phase.is_terminal()
    {
        ids.push(id);
    }
    for generation in [status.submitted_generation, status.observed_generation]
        .into_iter()
        .flatten()
    {
        if let Some(id) = submissions.get(&OwnerTag::new(uid, generation)) {
            ids.push(id);
        }
    }
    if let Some(state) = state {
        ids.extend(
            state
                .jobs
                .values()
                .filter(|j| !j.state.base.is_finished())
                .filter(|j| j.owner.as_ref().is_some_and(|o| o.is_of(uid)))
                .map(|j| j.array_job_id.unwrap_or(j.job_id)),
        );
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

#[cfg(test)]
mod tests;
