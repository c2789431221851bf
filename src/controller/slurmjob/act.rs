//! The SlurmJob controller's side effects on Slurm, in one place: one [`step`] of a SlurmJob asks
//! the pure decisions (`lifecycle::decide`, `plan::submit`, `plan::follow`) what to do and
//! performs what they return — an accounting lookup, the leader check and the submit, an
//! accounting lookup for a job that left slurmctld — then builds the status with `status`.
//! No Kubernetes here: the driver writes the returned status and publishes the notices; the
//! integration tests and benchmarks run the same step without Kubernetes. Also here: the
//! cancel of a deleted SlurmJob's jobs ([`cancel`]) and the output streamer Pod
//! ([`ensure_output_pod`]).
//!
//! The job id is recorded in [`Submissions`] in the same poll as the submit's answer (no
//! `.await` in between, so a cancelled future cannot lose it), before the caller writes the
//! status. A submit is never retried: an error leaves the outcome unknown, and the next step
//! looks for the tag again.

use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use tracing::{info, warn};

use crate::controller::kit::Notice;
use crate::crd::SlurmJob;
use crate::crd::condition;
use crate::crd::slurmjob::{Phase, SlurmJobSpec, SlurmJobStatus};
use crate::leader::Leadership;
use crate::slurm::tag::OwnerTag;
use crate::slurm::types::{Job, SubmitRequest};
use crate::slurm::{SlurmClient, SlurmError};
use crate::state::index::ClusterState;

use super::lifecycle::{self, Decision};
use super::notice;
use super::output;
use super::plan::{self, AccountingAnswer, SubmitFacts, SubmitPlan, WAIT_RETRY};
use super::status::{self, SPEC_APPLIED, STALLED, SUBMIT_REJECTED};
use super::submissions::Submissions;

/// Fail point (test builds): right after Slurm accepted a submit, before anything records it
/// in the SlurmJob's status. `FAILPOINTS=slurmjob-after-submit=return` makes the process exit
/// there with [`FAIL_EXIT_CODE`].
pub const FAIL_AFTER_SUBMIT: &str = "slurmjob-after-submit";
/// The exit code of a process stopped by a fail point.
pub const FAIL_EXIT_CODE: i32 = 86;

/// The SlurmJob being stepped.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub name: &'a str,
    pub uid: &'a str,
    pub generation: i64,
    pub spec: &'a SlurmJobSpec,
    pub status: Option<&'a SlurmJobStatus>,
    /// When the SlurmJob was created, if known: see [`plan::FRESH`].
    pub created: Option<DateTime<Utc>>,
}

/// What a step works with.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    /// The cluster's own client: lookups (accounting) and cancels.
    pub client: &'a SlurmClient,
    /// The client acting as the Slurm user the SlurmJob's access grants: submits.
    pub submitter: &'a SlurmClient,
    pub state: &'a ClusterState,
    pub submissions: &'a Submissions,
    /// When this process (incarnation) started: the index must have synced after it.
    pub started_at: DateTime<Utc>,
    pub now: DateTime<Utc>,
    /// Whether this process may submit (leader election); checked right before the submit.
    pub leadership: &'a Leadership,
}

/// What a step decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub status: SlurmJobStatus,
    pub notices: Vec<Notice>,
    /// Come back after this long (waiting for the index or dependencies); `None` when Slurm
    /// events (or a spec change) will trigger the next step.
    pub retry: Option<Duration>,
    /// The spec cannot be submitted as it is: only an edit helps.
    pub invalid: bool,
}

/// One step: decide, then submit (or adopt) or follow. Errors are Slurm errors of a submit whose
/// outcome is unknown; the next step resolves them through the tag. A submit Slurm refused for
/// good ([`SlurmError::refuses_job`]) is no error: the step says so (`SubmitRejected`).
pub async fn step(
    target: Target<'_>,
    env: Env<'_>,
    dependencies: impl Fn(&str) -> Option<Option<i64>>,
) -> Result<Step, SlurmError> {
    let current = target.status.cloned().unwrap_or_default();
    let generation = target.generation;
    match lifecycle::decide(generation, target.status) {
        Decision::Submit { rerun } => {
            let mut notices = Vec::new();
            let mut base = current.clone();
            if rerun && current.job_id.is_some() {
                base = lifecycle::start_new_run(&current);
                notices.push(Notice::normal(
                    "Resubmitted",
                    format!(
                        "the spec changed (generation {generation}) after Slurm job {} ended {}: running it again",
                        current.job_id.unwrap_or_default(),
                        current.phase
                    ),
                ));
            }
            let (mut step, announced) = submit_step(target, env, base, dependencies).await?;
            if step.invalid {
                // Nothing runs again until the spec is fixed: only the InvalidSpec Warning.
                notices.clear();
            }
            notices.append(&mut step.notices);
            step.notices = notices;
            // A job this process submitted was announced when it was submitted (the status
            // this step started from was read before that write).
            step.notices.extend(
                notice::transitions(&current, &step.status)
                    .into_iter()
                    .filter(|n| !(announced && n.reason == "Submitted")),
            );
            dedup(&mut step.notices);
            step.status = status::summarize(step.status, generation, now(env));
            Ok(step)
        }
        Decision::Rejected { .. } => Ok(Step {
            // Nothing is asked of Slurm: the status already says why (a restarted operator
            // reads it there), and only a spec change brings a new generation.
            status: status::summarize(current, generation, now(env)),
            notices: Vec::new(),
            retry: None,
            invalid: true,
        }),
        Decision::Follow { job_id } => {
            let (mut next, retry) = follow_or_account(&current, job_id, target.uid, env).await;
            if next.observed_generation.is_none() {
                next.observed_generation = Some(generation);
            }
            let notices = notice::transitions(&current, &next);
            Ok(Step {
                status: status::summarize(next, generation, now(env)),
                notices,
                retry,
                invalid: false,
            })
        }
        Decision::IgnoreEdit { job_id, generation } => {
            let (mut next, retry) = follow_or_account(&current, job_id, target.uid, env).await;
            next.observed_generation = Some(generation);
            let message = format!(
                "generation {generation} was not applied: Slurm job {job_id} had already been \
                 submitted from generation {} and is {}; a submitted job cannot change. Edit the \
                 SlurmJob again once it has ended to run it again with the new spec",
                current.submitted_generation.unwrap_or_default(),
                current.phase
            );
            condition::upsert(
                &mut next.conditions,
                condition::new(
                    SPEC_APPLIED,
                    false,
                    "JobActive",
                    message.clone(),
                    Some(generation),
                    now(env),
                ),
            );
            let mut notices = vec![Notice::warning("EditIgnored", message)];
            notices.extend(notice::transitions(&current, &next));
            Ok(Step {
                status: status::summarize(next, generation, now(env)),
                notices,
                retry,
                invalid: false,
            })
        }
    }
}

/// The step's time as a condition time.
fn now(env: Env<'_>) -> condition::Time {
    status::time(Some(env.now)).unwrap_or_else(|| condition::Time(Default::default()))
}

fn dedup(notices: &mut Vec<Notice>) {
    let mut seen = Vec::new();
    notices.retain(|n| {
        if seen.contains(&n.reason) {
            false
        } else {
            seen.push(n.reason.clone());
            true
        }
    });
}

/// How a submit step ended in Slurm.
enum Outcome {
    Adopted { job_id: u32 },
    Submitted { job_id: u32, warnings: Vec<String> },
}

/// The submit path: ask [`plan::submit`], perform what it returns (asking accounting feeds the
/// answer back once), build the status. Returns the step and whether its job was announced.
async fn submit_step(
    target: Target<'_>,
    env: Env<'_>,
    mut base: SlurmJobStatus,
    dependencies: impl Fn(&str) -> Option<Option<i64>>,
) -> Result<(Step, bool), SlurmError> {
    let generation = target.generation;
    let now = now(env);
    base.phase = Phase::Pending;
    let wait = |base: SlurmJobStatus, reason: &str, message: String| Step {
        status: status::waiting(base, generation, reason, message, now.clone()),
        notices: Vec::new(),
        retry: Some(WAIT_RETRY),
        invalid: false,
    };
    let tag = OwnerTag::new(target.uid, generation);
    let index_trusted = plan::index_trusted(env.state, env.started_at);
    let facts = SubmitFacts {
        name: target.name,
        tag: &tag,
        generation,
        spec: target.spec,
        index_trusted,
        submitted_here: env.submissions.get(&tag),
        indexed: env.state.tagged(&tag).first().copied(),
        fresh: plan::fresh(generation, target.created, env.now),
        accounting: None,
    };
    let mut decision = plan::submit(facts, &dependencies);
    let answer;
    if let SubmitPlan::AskAccounting { name } = &decision {
        answer = match find_in_accounting(env.client, name, &tag).await {
            Ok(found) => AccountingAnswer::Found(found),
            Err(error) => AccountingAnswer::Failed {
                reason: error.category(),
                message: error.to_string(),
            },
        };
        let facts = SubmitFacts {
            accounting: Some(&answer),
            ..facts
        };
        decision = plan::submit(facts, &dependencies);
    }
    let (outcome, announced) = match decision {
        SubmitPlan::Wait { reason, message } => {
            return Ok((wait(base, reason, message), false));
        }
        SubmitPlan::Invalid(error) => {
            let message = format!("the spec cannot be submitted: {error}");
            let step = Step {
                status: status::stalled(base, generation, "InvalidSpec", message.clone(), now),
                notices: vec![Notice::warning("InvalidSpec", message)],
                retry: None,
                invalid: true,
            };
            return Ok((step, false));
        }
        // With accounting's answer the plan never asks again (plan's tests); were it to, the
        // step waits rather than loop.
        SubmitPlan::AskAccounting { .. } => {
            let message = "accounting was asked once already in this step".to_owned();
            return Ok((wait(base, "WaitingForAccounting", message), false));
        }
        SubmitPlan::Adopt { job_id, announced } => (Outcome::Adopted { job_id }, announced),
        SubmitPlan::Submit(request) => {
            if !env.leadership.confirm().await {
                // Lost the Lease (or was paused past its expiry): the leader submits or adopts
                // by tag.
                let message = "this replica does not hold the leader Lease (read right before \
                               the submit); the leader submits";
                return Ok((wait(base, "NotLeader", message.into()), false));
            }
            match submit_once(env, &tag, &request).await {
                Ok(outcome) => (outcome, false),
                // Slurm answered, and no job exists: safe to say so, and the same request would
                // only get the same answer. Recorded with its generation (see `lifecycle`).
                Err(error) if error.refuses_job() => {
                    let status = status::rejected(base, generation, &error.to_string(), now);
                    let message = condition::find(&status.conditions, STALLED)
                        .map(|c| c.message.clone())
                        .unwrap_or_default();
                    let step = Step {
                        status,
                        notices: vec![Notice::warning(SUBMIT_REJECTED, message)],
                        retry: None,
                        invalid: true,
                    };
                    return Ok((step, false));
                }
                Err(error) => return Err(error),
            }
        }
    };
    let (job_id, ready) = match &outcome {
        Outcome::Adopted { job_id } => (
            *job_id,
            (
                "Adopted",
                format!("adopted Slurm job {job_id}, which already carried this generation's tag"),
            ),
        ),
        Outcome::Submitted { job_id, warnings } if !warnings.is_empty() => (
            *job_id,
            (
                "Submitted",
                format!(
                    "submitted as Slurm job {job_id} (slurmrestd: {})",
                    warnings.join("; ")
                ),
            ),
        ),
        Outcome::Submitted { job_id, .. } => (
            *job_id,
            ("Submitted", format!("submitted as Slurm job {job_id}")),
        ),
    };
    let records: Vec<Job> = env.state.job_records(job_id).into_iter().cloned().collect();
    let step = Step {
        status: status::submitted(base, job_id, generation, ready, now, &records),
        notices: Vec::new(),
        retry: None,
        invalid: false,
    };
    Ok((step, announced))
}

/// Submit `request` once and record its job id at once. Never retried: a lost answer is
/// resolved by the next step's lookup of the tag.
async fn submit_once(
    env: Env<'_>,
    tag: &OwnerTag,
    request: &SubmitRequest,
) -> Result<Outcome, SlurmError> {
    let submitted = env.submitter.submit_job(request).await?;
    // No await between the answer and this record: see the module docs.
    env.submissions.record(tag, submitted.job_id);
    // tests/crash.rs ends the process here: Slurm has the job, the status never says so.
    fail::fail_point!(FAIL_AFTER_SUBMIT, |_| std::process::exit(FAIL_EXIT_CODE));
    Ok(Outcome::Submitted {
        job_id: submitted.job_id,
        warnings: submitted.warnings,
    })
}

/// [`plan::follow`], and for a job that left slurmctld unseen, its end from the cluster's
/// accounting (slurmdbd) when it has one. An accounting error keeps the status as it was and
/// asks to come back (the job is not called lost while that is unknown).
pub async fn follow_or_account(
    current: &SlurmJobStatus,
    job_id: i64,
    uid: &str,
    env: Env<'_>,
) -> (SlurmJobStatus, Option<Duration>) {
    let next = plan::follow(current, job_id, env.state, env.now);
    if next.phase != Phase::Lost || current.phase == Phase::Lost {
        return (next, None);
    }
    let Ok(id) = u32::try_from(job_id) else {
        return (next, None);
    };
    let generation = current
        .submitted_generation
        .or(current.observed_generation)
        .unwrap_or(1);
    match accounting_records(env.client, id, &OwnerTag::new(uid, generation)).await {
        Ok(Accounting::Records(records)) => (status::observe(current, &records), None),
        Ok(Accounting::NoRecord) => (next, None),
        Ok(Accounting::Unavailable) => {
            let mut next = next;
            next.state_reason = Some(format!(
                "Slurm job {job_id} left slurmctld (MinJobAge) while it was {} and the cluster \
                 serves no accounting (slurmdbd) to tell how it ended",
                current.phase
            ));
            (next, None)
        }
        Err(error) => {
            warn!(
                job_id,
                reason = error.category(),
                %error,
                "job left slurmctld; accounting did not answer, trying again"
            );
            (current.clone(), Some(WAIT_RETRY))
        }
    }
}

/// What the cluster's accounting (slurmdbd) knows of a job slurmctld no longer holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Accounting {
    /// Its records (an array: one per task).
    Records(Vec<Job>),
    /// Accounting answers, but has no record of this job carrying our tag.
    NoRecord,
    /// This slurmrestd serves no accounting.
    Unavailable,
}

/// The accounting records of `job_id` that carry `tag` (slurmctld reuses ids after a reset, so
/// the tag tells ours apart). Records without any comment (a cluster that does not store them,
/// `AccountingStoreFlags=job_comment`) are taken when none carries a comment at all.
pub async fn accounting_records(
    client: &SlurmClient,
    job_id: u32,
    tag: &OwnerTag,
) -> Result<Accounting, SlurmError> {
    let Some(records) = client.accounting_job(job_id).await? else {
        return Ok(Accounting::Unavailable);
    };
    let ours = |job: &Job| match &job.comment {
        Some(_) => job.owner.as_ref() == Some(tag),
        None => records.iter().all(|r| r.comment.is_none()),
    };
    let ours: Vec<Job> = records.iter().filter(|job| ours(job)).cloned().collect();
    Ok(if ours.is_empty() {
        Accounting::NoRecord
    } else {
        Accounting::Records(ours)
    })
}

/// The job carrying `tag` in accounting, found by its name: what the index cannot show once
/// slurmctld dropped the job (`MinJobAge`). `None` also when the cluster has no accounting.
pub async fn find_in_accounting(
    client: &SlurmClient,
    name: &str,
    tag: &OwnerTag,
) -> Result<Option<u32>, SlurmError> {
    Ok(client
        .accounting_jobs_named(name)
        .await?
        .and_then(|records| plan::find_tagged(&records, tag)))
}

/// How a cancel ended; all three mean "nothing of this job runs any more or will".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancellation {
    Cancelled,
    AlreadyFinished,
    /// slurmctld does not know the job (it ended long ago, or never existed).
    Gone,
}

/// Cancel `job_id`, treating "already finished" and "unknown" as done. Errors are only those
/// that leave the job's fate unknown (unreachable, unauthorized, ...): the caller must retry.
pub async fn cancel(client: &SlurmClient, job_id: u32) -> Result<Cancellation, SlurmError> {
    match client.cancel_job(job_id).await {
        Ok(()) => Ok(Cancellation::Cancelled),
        Err(SlurmError::AlreadyFinished { .. }) => Ok(Cancellation::AlreadyFinished),
        Err(SlurmError::NotFound { .. }) => Ok(Cancellation::Gone),
        Err(other) => Err(other),
    }
}

/// The streamer Pod of run `job_id`: created when missing, replaced when it streams an earlier
/// run. A Pod of that name that is not ours is left alone.
pub async fn ensure_output_pod(
    pods: &Api<Pod>,
    job: &SlurmJob,
    job_id: i64,
    image: &str,
) -> kube::Result<()> {
    let Some(desired) = output::pod(job, job_id, image) else {
        return Ok(());
    };
    let name = job.name_any();
    if let Some(existing) = pods.get_opt(&name).await? {
        let ours = existing
            .owner_references()
            .iter()
            .any(|o| Some(&o.uid) == job.metadata.uid.as_ref());
        if !ours {
            warn!(pod = %name, "a Pod with the SlurmJob's name exists and is not its output streamer; not touching it");
            return Ok(());
        }
        if output::streamed_job_id(&existing) == Some(job_id) {
            return Ok(());
        }
        if existing.metadata.deletion_timestamp.is_none() {
            pods.delete(&name, &DeleteParams::default()).await?;
            info!(pod = %name, "output Pod of the previous run deleted");
        }
        // Created on the next reconcile, once the old Pod is gone (the Pod watch triggers it).
        return Ok(());
    }
    pods.create(&PostParams::default(), &desired).await?;
    info!(pod = %name, job_id, "output Pod created");
    Ok(())
}

#[cfg(test)]
mod tests;
