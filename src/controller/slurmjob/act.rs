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

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use tracing::{debug, info, warn};

use crate::controller::kit::Notice;
use crate::crd::condition;
use crate::crd::pod_meta::PodPhase;
use crate::crd::slurmjob::{Phase, RunOutput, SlurmJobSpec, SlurmJobStatus};
use crate::crd::{FIELD_MANAGER, SlurmJob};
use crate::leader::Leadership;
use crate::slurm::error::errno;
use crate::slurm::tag::{OwnerTag, Ownership, TagKey};
use crate::slurm::types::{Job, JobBaseState, SubmitRequest};
use crate::slurm::{SlurmClient, SlurmError};
use crate::state::index::{ClusterState, Unreadable};
use crate::state::slots::{RequestSlots, SearchSlots};

use super::dependents::{self, DEPENDENCY_RECHECK};
use super::lifecycle::{self, Decision, Dependee};
use super::notice;
use super::output;
use super::plan::{self, AccountingAnswer, Adoptable, SubmitFacts, SubmitPlan, WAIT_RETRY};
use super::status::{self, SPEC_APPLIED, STALLED, SUBMIT_REJECTED};
use super::submissions::{Doubt, Submissions, Submitted};
use super::{access, edit, usage};

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
    /// Why its access refuses the spec as edited (an edit of a submitted job changes its
    /// account, partition or QoS only within what the namespace is granted).
    pub refusal: Option<&'a access::Refusal>,
}

/// What a step works with.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    /// The cluster's own client: lookups (accounting) and cancels.
    pub client: &'a SlurmClient,
    /// The client acting as the Slurm user the SlurmJob's access grants: submits.
    pub submitter: &'a SlurmClient,
    /// The Slurm user the SlurmJob's namespace is granted now; `None` when no access entry
    /// grants it. Accounting records without a comment are taken for its jobs only when they
    /// are this user's, and an edit goes to Slurm only while the job runs as this user (never
    /// the cluster's own user, who polls).
    pub job_user: Option<&'a str>,
    pub state: &'a ClusterState,
    pub submissions: &'a Submissions,
    /// When this process (incarnation) started: the index must have synced after it.
    pub started_at: DateTime<Utc>,
    pub now: DateTime<Utc>,
    /// Whether this process may submit (leader election); checked right before the submit.
    pub leadership: &'a Leadership,
    /// When this replica began to act (`Context::acting_since`): its last gain of the leader
    /// Lease, or its start without an election. `None`: no predecessor's submit to wait out.
    pub took_over_at: Option<DateTime<Utc>>,
    /// When this replica began to act, whether or not there is a takeover to wait out: a
    /// submit it saw refused over a limit since then needs no accounting search before a retry.
    pub acting_since: DateTime<Utc>,
    /// The key ownership tags are signed and checked with.
    pub key: &'a TagKey,
    /// The accounting search slots on the connection, the SlurmJob's namespace's and the
    /// connection's (`ClusterHandle::searches`, `ClusterHandle::all_searches`): a step that must
    /// search by job name and finds one taken ends with [`StepError::SearchBusy`]. With the key
    /// the SlurmJob waits under (`SearchSlots::try_take_for`). `None`: no bound ([`step`]).
    pub searches: Option<(SearchSlots<'a>, &'a str)>,
    /// Whether the namespace is still granted what the step was decided with (the caches read
    /// again): asked right before a submit, which a step reaches only after reads that can
    /// take a while (the whole spec, an accounting search), during which an admin may have
    /// revoked or remapped the namespace's access.
    pub still_granted: &'a (dyn Fn() -> bool + Sync),
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
    /// The wait is for a Slurm request that failed (the accounting check before a submit or
    /// after a job left slurmctld unseen, an edit's read or update): the next step comes after
    /// the SlurmJob's growing backoff, not after `retry`, so that a request that keeps failing
    /// (unreachable, too large, too slow) is not sent again every few seconds for ever.
    pub backoff: bool,
}

/// Why a step of a cached SlurmJob ([`step_loading`]) failed.
#[derive(Debug, thiserror::Error)]
pub enum StepError<E> {
    /// A Slurm error of a submit whose outcome is unknown; the next step resolves it through
    /// the tag.
    #[error(transparent)]
    Slurm(#[from] SlurmError),
    /// The whole spec could not be read before a submit; nothing was submitted.
    #[error("cannot read the SlurmJob's whole spec (with its script) to submit it")]
    LoadSpec(#[source] E),
    /// The step must search accounting by job name, and its namespace's search slot, or every
    /// one of the connection's, is taken ([`Env::searches`]): these slots free one; nothing was
    /// sent or written.
    #[error("other accounting searches are in flight on this connection")]
    SearchBusy(Arc<RequestSlots>),
}

/// The `load` of [`step`], whose spec is whole: never called.
type NoLoad = fn(i64) -> std::future::Ready<Result<Option<SlurmJobSpec>, Infallible>>;

/// One step: decide, then submit (or adopt) or follow, with `target.spec` whole (the script
/// included). Errors are Slurm errors of a submit whose outcome is unknown; the next step
/// resolves them through the tag. A submit Slurm refused for good
/// ([`SlurmError::refuses_job`]) is no error: the step says so (`SubmitRejected`).
pub async fn step(
    target: Target<'_>,
    env: Env<'_>,
    dependencies: impl Fn(&str) -> Option<Dependee>,
) -> Result<Step, SlurmError> {
    let env = Env {
        searches: None,
        ..env
    };
    step_whole(target, env, dependencies)
        .await
        .map_err(|error| match error {
            StepError::Slurm(error) => error,
            StepError::LoadSpec(never) => match never {},
            // Without search slots, no search waits for one.
            StepError::SearchBusy(_) => SlurmError::InvalidRequest {
                detail: "an accounting search found no search slot".into(),
            },
        })
}

/// [`step`] with `env`'s search slots: a step whose search finds none free says so
/// ([`StepError::SearchBusy`]) instead of searching.
pub async fn step_whole(
    target: Target<'_>,
    env: Env<'_>,
    dependencies: impl Fn(&str) -> Option<Dependee>,
) -> Result<Step, StepError<Infallible>> {
    step_inner(target, env, dependencies, None::<NoLoad>).await
}

/// [`step`] for a SlurmJob from the controller's cache, whose `target.spec` holds no script,
/// environment or extraOptions (the cache keeps none: they can be megabytes per SlurmJob).
/// What depends on them, a submit or the refusal of an unsubmittable spec, is decided on the
/// whole spec, which `load(generation)` reads then, once the plan has settled everything else
/// (index, adoption, dependencies): waits cost no read. `load` answers `None` when the object is
/// no longer that generation (edited, deleted, re-created): nothing is submitted, and the step
/// waits for the change to come in (the tag names the generation whose script it runs).
pub async fn step_loading<L, F, E>(
    target: Target<'_>,
    env: Env<'_>,
    dependencies: impl Fn(&str) -> Option<Dependee>,
    load: L,
) -> Result<Step, StepError<E>>
where
    L: FnOnce(i64) -> F,
    F: Future<Output = Result<Option<SlurmJobSpec>, E>>,
{
    step_inner(target, env, dependencies, Some(load)).await
}

async fn step_inner<L, F, E>(
    target: Target<'_>,
    env: Env<'_>,
    dependencies: impl Fn(&str) -> Option<Dependee>,
    load: Option<L>,
) -> Result<Step, StepError<E>>
where
    L: FnOnce(i64) -> F,
    F: Future<Output = Result<Option<SlurmJobSpec>, E>>,
{
    let current = target.status.cloned().unwrap_or_default();
    let generation = target.generation;
    match lifecycle::decide(generation, target.status) {
        Decision::Submit { rerun } => {
            let mut notices = Vec::new();
            let (base, ended) = lifecycle::submit_base(&current, rerun);
            if let Some(ended) = ended {
                notices.push(
                    Notice::normal(
                        "Resubmitted",
                        format!(
                            "the spec changed (generation {generation}) after Slurm job {ended} ended {}: running it again",
                            current.phase
                        ),
                    )
                    .about_run(ended),
                );
            }
            let (mut step, announced) = submit_step(target, env, base, dependencies, load).await?;
            if step.invalid {
                // Nothing runs again until the spec is fixed: only the InvalidSpec Warning.
                notices.clear();
            }
            if step.status.job_id.is_some() && step.status.submitted_generation != Some(generation)
            {
                // An earlier generation's job was adopted: this one does not run (EditIgnored).
                notices.retain(|n| n.reason != "Resubmitted");
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
            step.status = status::suspension(step.status, target.spec.suspend, now(env));
            step.status = status::summarize(step.status, generation, now(env));
            // The same wait again (every few seconds): what it found was said when it began
            // (a job carrying the tag that is not adopted is found again at every look).
            if step.status == current && step.retry.is_some() && !step.invalid {
                step.notices.clear();
            }
            Ok(step)
        }
        Decision::Rejected { .. } => Ok(Step {
            // Nothing is asked of Slurm: the status already says why (a restarted operator
            // reads it there), and only a spec change brings a new generation.
            status: status::summarize(current, generation, now(env)),
            notices: Vec::new(),
            retry: None,
            invalid: true,
            backoff: false,
        }),
        Decision::Follow { job_id } => {
            let (mut next, retry) = follow_or_account(&current, job_id, target.uid, env).await;
            if next.observed_generation.is_none() {
                next.observed_generation = Some(generation);
            }
            // The end of a job is written at once: accounting's usage joins that write when it
            // answers within `USAGE_WAIT_AT_END`, else it follows in a later one.
            let ending = next.phase.is_terminal() && !current.phase.is_terminal();
            let wait = ending.then_some(USAGE_WAIT_AT_END);
            let (next, usage_retry) = with_usage(next, target.uid, env, wait).await;
            let next = status::suspension(next, target.spec.suspend, now(env));
            let notices = notice::transitions(&current, &next);
            let next = status::summarize(next, generation, now(env));
            Ok(Step {
                status: status::unreadable(next, unread(env, job_id), generation, now(env)),
                notices,
                retry: retry.after().or(usage_retry),
                invalid: false,
                backoff: retry == Again::Backoff,
            })
        }
        Decision::Edit { job_id, generation } => {
            let (next, retry) = follow_or_account(&current, job_id, target.uid, env).await;
            if next.phase.is_terminal() {
                // It ended meanwhile: the edit runs it again, as any edit of an ended job (the
                // phase's change triggers that step).
                let notices = notice::transitions(&current, &next);
                return Ok(Step {
                    status: status::summarize(next, generation, now(env)),
                    notices,
                    retry: retry.after().or(Some(WAIT_RETRY)),
                    invalid: false,
                    backoff: retry == Again::Backoff,
                });
            }
            let (next, notices, again) =
                edit_step(target, env, &current, next, job_id, generation, load).await?;
            let next = status::suspension(next, target.spec.suspend, now(env));
            let mut notices = notices;
            notices.extend(notice::transitions(&current, &next));
            let next = status::summarize(next, generation, now(env));
            Ok(Step {
                status: status::unreadable(next, unread(env, job_id), generation, now(env)),
                notices,
                retry: retry.after().or(again.after()),
                invalid: false,
                backoff: retry == Again::Backoff || again == Again::Backoff,
            })
        }
    }
}

/// Why the poller cannot read job `job_id`'s record, if it cannot.
fn unread<'a>(env: Env<'a>, job_id: i64) -> Option<&'a Unreadable> {
    env.state.unreadable.get(&u32::try_from(job_id).ok()?)
}

/// Whether a step of `target` may call slurmrestd: a submit (and the accounting lookups before
/// it), an edit, a job that left slurmctld unseen (accounting), or an ended job's usage. A step
/// that only mirrors the index does not, and takes none of the cluster's request slots. Pure.
pub fn may_call_slurm(target: Target<'_>, env: Env<'_>) -> bool {
    match lifecycle::decide(target.generation, target.status) {
        Decision::Rejected { .. } => false,
        Decision::Submit { .. } | Decision::Edit { .. } => true,
        Decision::Follow { job_id } => {
            let current = target.status.cloned().unwrap_or_default();
            if usage_retry(&current, env.now).is_some() {
                return true;
            }
            let next = followed(&current, job_id, target.uid, env);
            // Lost: accounting is asked how it ended; ended now: for what it used.
            next.phase.is_terminal() && !current.phase.is_terminal()
        }
    }
}

/// The wait's reason after Slurm refused a submit by its accounting or QoS policy.
pub const SUBMIT_LIMITED: &str = "SubmitLimited";

/// Whether a submit step of `target` waits for the SlurmJobs `dependsOn` names (`dependencies`
/// as [`step`] takes it). Such a step asks Slurm nothing: the plan decides that wait before
/// anything it asks (accounting, the submit), so it needs none of the cluster's request slots.
pub fn waits_for_dependencies(
    target: Target<'_>,
    dependencies: impl Fn(&str) -> Option<Dependee>,
) -> bool {
    matches!(
        lifecycle::decide(target.generation, target.status),
        Decision::Submit { .. }
    ) && !target.spec.depends_on.is_empty()
        && lifecycle::resolve_dependencies(
            &target.spec.depends_on,
            &target.spec.cluster_name,
            dependencies,
        )
        .is_err()
}

/// What the index shows of job `job_id` of the SlurmJob `uid` now ([`plan::follow`]).
fn followed(current: &SlurmJobStatus, job_id: i64, uid: &str, env: Env<'_>) -> SlurmJobStatus {
    plan::follow(
        current,
        job_id,
        env.state,
        env.now,
        uid,
        env.key,
        env.job_user,
    )
}

/// How soon a step whose job id the index has not resolved yet looks again: the poller reads
/// such records within `submit_hold` (10 s) of a burst's pause, and reports ours.
const UNRESOLVED_RETRY: Duration = Duration::from_secs(30);

/// Whether a step of `target` asks accounting how its followed job ended (it left slurmctld
/// unseen): which of accounting's records without a comment are the job's depends on
/// [`Env::job_user`]. Pure.
pub fn asks_how_it_ended(target: Target<'_>, env: Env<'_>) -> bool {
    let Decision::Follow { job_id } = lifecycle::decide(target.generation, target.status) else {
        return false;
    };
    let current = target.status.cloned().unwrap_or_default();
    !current.phase.is_terminal() && followed(&current, job_id, target.uid, env).phase == Phase::Lost
}

/// An edit (`generation`) of Slurm job `job_id`, which runs `submitted_from` and has not ended,
/// that is not applied because of `why`: recorded as observed (so the job does not run again
/// when it ends), `SpecApplied=False/JobActive`, and the `EditIgnored` Warning.
fn ignore_edit(
    next: &mut SlurmJobStatus,
    generation: i64,
    job_id: i64,
    submitted_from: i64,
    why: &str,
    now: &condition::Time,
) -> Notice {
    let message = format!(
        "generation {generation} was not applied: {why}. Slurm job {job_id} runs on as \
         generation {submitted_from} was submitted; edit the SlurmJob again once it has ended to \
         run it again with the new spec",
    );
    spec_applied(next, generation, false, "JobActive", &message, now);
    Notice::warning("EditIgnored", message)
}

/// What became of the edit to `generation` (`SpecApplied`); it is observed either way, so the
/// job does not run again when it ends.
fn spec_applied(
    next: &mut SlurmJobStatus,
    generation: i64,
    ok: bool,
    reason: &str,
    message: &str,
    now: &condition::Time,
) {
    next.observed_generation = Some(generation);
    condition::upsert(
        &mut next.conditions,
        condition::new(
            SPEC_APPLIED,
            ok,
            reason,
            message.to_owned(),
            Some(generation),
            now.clone(),
        ),
    );
}

/// An edit of a job that has not ended ([`Decision::Edit`]): read the whole spec and the job's
/// record in slurmctld, ask [`edit::plan`], and send what it says as the job's own Slurm user.
/// Returns the status (with `SpecApplied` saying what became of the edit), its notices, and when
/// to come back (an update that could not reach Slurm).
async fn edit_step<L, F, E>(
    target: Target<'_>,
    env: Env<'_>,
    current: &SlurmJobStatus,
    mut next: SlurmJobStatus,
    job_id: i64,
    generation: i64,
    load: Option<L>,
) -> Result<(SlurmJobStatus, Vec<Notice>, Again), StepError<E>>
where
    L: FnOnce(i64) -> F,
    F: Future<Output = Result<Option<SlurmJobSpec>, E>>,
{
    let now = now(env);
    let applied = |next: &mut SlurmJobStatus, ok: bool, reason: &str, message: &str| {
        spec_applied(next, generation, ok, reason, message, &now);
    };
    let submitted_from = current.submitted_generation.unwrap_or_default();
    let ignored = |mut next: SlurmJobStatus, why: &str| {
        let notice = ignore_edit(&mut next, generation, job_id, submitted_from, why, &now);
        (next, vec![notice], Again::Not)
    };
    if current.submitted_spec_hash.is_none() {
        // Nothing to compare with: no request, no read of the spec.
        return Ok(ignored(next, edit::NO_HASH));
    }
    if let Some(refusal) = target.refusal {
        let message = format!(
            "generation {generation} was not applied to Slurm job {job_id}: {}; it runs on as \
             generation {submitted_from} was submitted",
            refusal.message
        );
        applied(&mut next, false, refusal.reason, &message);
        return Ok((
            next,
            vec![Notice::warning(refusal.reason, message)],
            Again::Not,
        ));
    }
    // The hash covers the script, environment and extra options, which the cache leaves out.
    let whole;
    let spec = match load {
        Some(load) => match load(generation).await.map_err(StepError::LoadSpec)? {
            Some(spec) => {
                whole = spec;
                &whole
            }
            // Edited again since: that generation is taken up next.
            None => return Ok((next, Vec::new(), Again::After(WAIT_RETRY))),
        },
        None => target.spec,
    };
    let Ok(id) = u32::try_from(job_id) else {
        return Ok((next, Vec::new(), Again::Not));
    };
    // slurmctld's own record, not the index's (which may be a cycle old): what is sent is
    // what differs from it.
    let records: Vec<Job> = match env.client.job(id).await {
        Ok(records) => records
            .into_iter()
            .filter(|job| plan::is_followed(job, target.uid, env.key, env.job_user))
            .collect(),
        Err(SlurmError::NotFound { .. }) => Vec::new(),
        Err(error) => {
            let message = format!(
                "generation {generation} is not applied to Slurm job {job_id} yet: reading the \
                 job failed ({}): {}; trying again",
                error.category(),
                error.for_tenant()
            );
            applied(&mut next, false, "UpdateFailed", &message);
            next.observed_generation = current.observed_generation;
            return Ok((next, Vec::new(), Again::Backoff));
        }
    };
    // Gone from slurmctld (ended and purged) or not ours: following it says which, at its own
    // pace (a job accounting still lists running would otherwise be read every few seconds).
    if records.is_empty() {
        return Ok((next, Vec::new(), Again::Not));
    }
    // Every record (an array's tasks) ended since the index's word (a cycle behind): no longer
    // an edit of a running job but a re-run, which the end's report starts with this
    // generation (still unobserved). With backoff, not every few seconds: the poller's word of
    // the end wakes it anyway, and a poller that is down (while this GET still answers) would
    // otherwise have it read the job every 3 s for as long.
    // An array's waiting tasks are its pending (meta) record, judged first: a running task's
    // record would take a change the waiting tasks can still take (a partition added) for one
    // a started job cannot.
    let mut records = records;
    let Some(record) = records
        .iter()
        .position(|job| job.state.base == JobBaseState::Pending)
        .or_else(|| records.iter().position(|job| !job.state.base.is_finished()))
        .map(|at| records.swap_remove(at))
    else {
        return Ok((next, Vec::new(), Again::Backoff));
    };
    // The namespace was mapped to another Slurm user since the submit: an edit would act as
    // a user the namespace is no longer granted.
    if let Some(granted) = env.job_user
        && record.user_name.as_deref() != Some(granted)
    {
        let message = format!(
            "generation {generation} was not applied to Slurm job {job_id}: it runs as Slurm \
             user {:?}, and the namespace is now granted {granted:?} on this SlurmCluster; the \
             job keeps its earlier values (edit it again once it has ended to run it as \
             {granted:?})",
            record.user_name.as_deref().unwrap_or_default()
        );
        applied(&mut next, false, "UserChanged", &message);
        return Ok((
            next,
            vec![Notice::warning("UserChanged", message)],
            Again::Not,
        ));
    }
    match edit::plan(current.submitted_spec_hash.as_deref(), spec, &record) {
        edit::EditPlan::Ignore { why } => Ok(ignored(next, &why)),
        edit::EditPlan::Update {
            update,
            not_applied,
        } => {
            let skipped = not_applied
                .iter()
                .map(|(field, why)| format!("{field} ({why})"))
                .collect::<Vec<_>>()
                .join(", ");
            if update.is_empty() && !not_applied.is_empty() {
                let message = format!(
                    "generation {generation} was not applied to Slurm job {job_id}: {skipped}"
                );
                applied(&mut next, false, "NotUpdatable", &message);
                return Ok((
                    next,
                    vec![Notice::warning("EditIgnored", message)],
                    Again::Not,
                ));
            }
            if !update.is_empty() {
                // As the job's own Slurm user: slurmctld allows no more than that user may do.
                // Never with the cluster's own credentials instead: as an administrator it would
                // release an administrator's hold or raise a time limit for the tenant.
                let as_owner = match as_owner(env.client, &record) {
                    Ok(client) => client,
                    Err(why) => {
                        let message = format!(
                            "generation {generation} was not applied to Slurm job {job_id}: the \
                             operator cannot act as the job's own Slurm user ({}) and does not \
                             change it with its own rights; the job keeps its earlier values",
                            status::bounded(&why, status::MAX_SLURM_MESSAGE)
                        );
                        applied(&mut next, false, "CannotActAsUser", &message);
                        return Ok((
                            next,
                            vec![Notice::warning("CannotActAsUser", message)],
                            Again::Not,
                        ));
                    }
                };
                if !(env.still_granted)() {
                    // As for a submit: the reads before (the whole spec, the job's record) can
                    // take a while, and the account, partition or QoS asked for may no longer
                    // be granted. Decided again under the access as it is now.
                    let message = format!(
                        "generation {generation} is not applied to Slurm job {job_id} yet: the \
                         SlurmCluster's access changed while the edit was prepared; it is \
                         decided again under the access as it is now"
                    );
                    applied(&mut next, false, "AccessChanged", &message);
                    next.observed_generation = current.observed_generation;
                    return Ok((next, Vec::new(), Again::After(WAIT_RETRY)));
                }
                let result = as_owner.update_job(id, &update).await;
                let fields = update.fields().join(", ");
                match result {
                    Ok(()) => {}
                    Err(error) if error.refuses_job() || is_refusal(&error) => {
                        let message = format!(
                            "Slurm refused to change {fields} of job {job_id} (generation \
                             {generation}): {}; the job keeps its earlier values",
                            status::bounded(&error.for_tenant(), status::MAX_SLURM_MESSAGE)
                        );
                        applied(&mut next, false, "UpdateRejected", &message);
                        return Ok((
                            next,
                            vec![Notice::warning("UpdateRejected", message)],
                            Again::Not,
                        ));
                    }
                    Err(error) => {
                        let message = format!(
                            "generation {generation} is not applied to Slurm job {job_id} yet: \
                             changing {fields} failed ({}): {}; trying again",
                            error.category(),
                            error.for_tenant()
                        );
                        applied(&mut next, false, "UpdateFailed", &message);
                        next.observed_generation = current.observed_generation;
                        return Ok((next, Vec::new(), Again::Backoff));
                    }
                }
                info!(
                    job_id,
                    fields, generation, "SlurmJob edit applied to its Slurm job in place"
                );
            }
            let mut message = if update.is_empty() {
                format!(
                    "generation {generation} applied: Slurm job {job_id} already has its values"
                )
            } else {
                format!(
                    "generation {generation} applied to Slurm job {job_id} in place: {}",
                    update.fields().join(", ")
                )
            };
            if !not_applied.is_empty() {
                message.push_str(&format!("; not applied: {skipped}"));
            }
            applied(&mut next, true, "UpdatedInPlace", &message);
            // The poller refreshes the record with its next cycles; until then the status shows
            // what the record said.
            if let Some(hold) = update.hold {
                hold_now(&mut next, hold);
            }
            Ok((
                next,
                vec![Notice::normal("UpdatedInPlace", message)],
                Again::Not,
            ))
        }
    }
}

/// When a step that is not done comes back by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Again {
    /// A change (of the spec, of the job) brings the next step.
    Not,
    After(Duration),
    /// A request failed, or what it found must wait for the index: after the SlurmJob's
    /// growing backoff, not at a fixed pace that would send a read and a write every few
    /// seconds for as long as slurmrestd fails (or the poller lags).
    Backoff,
}

impl Again {
    fn after(self) -> Option<Duration> {
        match self {
            Self::After(delay) => Some(delay),
            Self::Not | Self::Backoff => None,
        }
    }
}

/// The cluster's client acting as the Slurm user who owns `record`: what an edit in place is
/// sent with. There is no fallback to the cluster's own credentials (an administrator's, as a
/// rule): when the operator cannot act as the owner, the edit is not made.
fn as_owner(client: &SlurmClient, record: &Job) -> Result<SlurmClient, String> {
    match record.user_name.as_deref() {
        Some(user) => client.as_user(user).map_err(|error| error.to_string()),
        None => Err("its record names no Slurm user".to_owned()),
    }
}

/// Errors of an update that Slurm answered with a refusal the same request would get again.
fn is_refusal(error: &SlurmError) -> bool {
    matches!(
        error,
        SlurmError::Rejected { .. } | SlurmError::AlreadyFinished { .. }
    )
}

/// The hold just set (or released) shown at once, before the poller reads the record again: a
/// hold as that read will show it (`stateReason` too), so that it writes nothing more. (A
/// release cannot be: Slurm gives the job a priority and, on its next pass, a reason.)
fn hold_now(next: &mut SlurmJobStatus, hold: bool) {
    if next.pending.is_some() {
        next.state_reason = if hold {
            Some("JobHeldUser".into())
        } else {
            next.state_reason
                .take()
                .filter(|r| {
                    !matches!(
                        crate::slurm::reason::code(r),
                        "JobHeldUser" | "JobHeldAdmin"
                    )
                })
                .filter(|_| next.pending.as_ref().is_none_or(|p| p.priority != Some(0)))
        };
    }
    if let Some(pending) = next.pending.as_mut() {
        if hold {
            pending.reason = Some("JobHeldUser".into());
            pending.priority = Some(0);
            pending.estimated_start_time = None;
            pending.message = crate::slurm::reason::explain("JobHeldUser")
                .map(|e| crate::slurm::reason::sentence(&e, 512));
        } else if pending.priority == Some(0)
            || matches!(
                pending.reason.as_deref().map(crate::slurm::reason::code),
                Some("JobHeldUser" | "JobHeldAdmin")
            )
        {
            // Whatever held it (the spec, `scontrol hold`, a requeue held): slurmctld took the
            // release.
            pending.reason = None;
            pending.priority = None;
            pending.message =
                Some("released; Slurm's scheduler gives a reason on its next pass".to_owned());
        }
    }
}

/// How long the step that sees a job end waits for accounting's usage before it writes the end
/// without it (the usage is asked for again, [`usage::retry_after`]). slurmdbd answers in
/// milliseconds when idle, and in seconds when busy (a queue of 100 000 jobs being recorded):
/// the phase must not wait for it (issue 19: status latency p99 ≤ 1 s). Later asks wait for
/// the whole request: a slow slurmdbd still gives the usage.
pub const USAGE_WAIT_AT_END: Duration = Duration::from_millis(300);

/// With the usage of an ended job from the cluster's accounting, when the status has none yet
/// and it is still worth asking ([`usage::retry_after`]); when accounting does not have it all
/// yet, or did not answer within `wait`, when to ask again. One request per ended job, not per
/// poll.
pub async fn with_usage(
    mut next: SlurmJobStatus,
    uid: &str,
    env: Env<'_>,
    wait: Option<Duration>,
) -> (SlurmJobStatus, Option<Duration>) {
    let Some(retry) = usage_retry(&next, env.now) else {
        return (next, None);
    };
    let Some(id) = next.job_id.and_then(|id| u32::try_from(id).ok()) else {
        return (next, None);
    };
    let generation = next
        .submitted_generation
        .or(next.observed_generation)
        .unwrap_or(1);
    let tag = OwnerTag::new(uid, generation);
    let ask = accounting_records(env.client, id, &tag, env.key, &next, env.job_user);
    let answer = match wait {
        Some(wait) => match tokio::time::timeout(wait, ask).await {
            Ok(answer) => answer,
            Err(_) => {
                debug!(
                    job_id = id,
                    ?wait,
                    "accounting did not answer in time for the job's end: its usage follows"
                );
                return (next, Some(retry));
            }
        },
        None => ask.await,
    };
    match answer {
        Ok(Accounting::Records(records)) => match usage::of_records(&records) {
            Some((summary, tasks)) => {
                next = status::with_usage(next, summary, &tasks);
                (next, None)
            }
            None => (next, Some(retry)),
        },
        Ok(Accounting::NoRecord) => (next, Some(retry)),
        Ok(Accounting::Unavailable) => (next, None),
        Err(error) => {
            warn!(job_id = id, reason = error.category(), %error, "accounting did not answer for the job's usage; asking again");
            (next, Some(retry))
        }
    }
}

/// When the usage of the job `status` mirrors is still to be asked of accounting: it ended
/// (not `Lost`: no end was seen), has none yet, and ended recently enough.
pub fn usage_retry(status: &SlurmJobStatus, now: DateTime<Utc>) -> Option<Duration> {
    if !status.phase.is_terminal() || status.phase == Phase::Lost || status.usage.is_some() {
        return None;
    }
    let end = status
        .end_time
        .as_ref()
        .and_then(crate::crd::time::to_utc)?;
    usage::retry_after(now - end)
}

/// The step's time as a condition time.
/// The gain of the leader Lease (or the start) this generation's submit must wait out, if any:
/// a generation that may be older than it (its SlurmJob created before it, or edited since,
/// when is not known) may have been submitted by the previous leader (or incarnation).
fn takeover(target: Target<'_>, env: Env<'_>) -> Option<plan::Takeover> {
    let at = env.took_over_at?;
    let newer = target.generation == 1
        && target
            .created
            .is_some_and(|created| plan::Takeover::newer(created, at));
    (!newer).then(|| plan::Takeover::new(at, env.submitter.request_timeout()))
}

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
    Adopted {
        job_id: u32,
    },
    AdoptedEarlier(plan::EarlierRun),
    Submitted {
        job_id: u32,
        /// What the site's job_submit plugin told the user.
        user_message: Option<String>,
        warnings: Vec<String>,
    },
}

/// The submit path: ask [`plan::submit`], perform what it returns (reading the whole spec and
/// asking accounting each feed the answer back once), build the status. Returns the step and
/// whether its job was announced.
async fn submit_step<L, F, E>(
    target: Target<'_>,
    env: Env<'_>,
    mut base: SlurmJobStatus,
    dependencies: impl Fn(&str) -> Option<Dependee>,
    load: Option<L>,
) -> Result<(Step, bool), StepError<E>>
where
    L: FnOnce(i64) -> F,
    F: Future<Output = Result<Option<SlurmJobSpec>, E>>,
{
    let whole: SlurmJobSpec;
    let generation = target.generation;
    let now = now(env);
    base.phase = Phase::Pending;
    let wait = |base: SlurmJobStatus, reason: &str, message: String| Step {
        status: status::waiting(base, generation, reason, message, now.clone()),
        notices: Vec::new(),
        retry: Some(WAIT_RETRY),
        invalid: false,
        backoff: false,
    };
    let tag = OwnerTag::new(target.uid, generation);
    // The tag is signed for the user the job runs as, and only that user's jobs are adopted.
    let user = env.submitter.user();
    let index_trusted = plan::index_trusted(env.state, env.started_at);
    let records = env
        .state
        .tagged(&tag)
        .into_iter()
        .flat_map(|id| env.state.job_records(id));
    let indexed = match &user {
        Some(user) => plan::adoptable(records, &tag, user, env.key),
        None => Adoptable::default(),
    };
    let user = user.unwrap_or_default();
    let mut notices = not_adopted(&indexed, "slurmctld");
    let unreadable = env.state.unreadable_unresolved();
    let doubt = env.submissions.doubt(&tag);
    let from = plan::unrecorded_from(&base);
    let mut here = Vec::new();
    let mut earlier_doubt = None;
    for (g, submitted) in env
        .submissions
        .between(target.uid, from, generation.saturating_sub(1))
    {
        match submitted {
            Submitted::Job(id) => here.push((g, id)),
            Submitted::InDoubt(doubt) if !plan::past_doubt(env.state, doubt.since) => {
                earlier_doubt = Some((g, doubt));
            }
            Submitted::InDoubt(_) | Submitted::NoJob { .. } => {}
        }
    }
    let earlier = plan::earlier_run(
        env.state, &here, target.uid, from, generation, &user, env.key,
    );
    let facts = SubmitFacts {
        name: target.name,
        tag: &tag,
        user: &user,
        key: env.key,
        generation,
        spec: target.spec,
        index_trusted,
        unreadable: &unreadable,
        submitted_here: env.submissions.get(&tag),
        indexed: indexed.job_id,
        // After a submit in doubt, accounting is asked too: a job it made that already ended
        // may have left slurmctld before the listing that would show it. After one Slurm
        // refused over a limit, it is not: that try was checked like this one, and made no job
        // (a tenant's SlurmJobs retrying at a limit would search accounting by name at each
        // try, issue 19).
        fresh: doubt.is_none()
            && (plan::fresh(
                generation,
                target.created,
                env.now,
                env.state.skipped_before,
            ) || env.submissions.no_job_since(&tag, env.acting_since)),
        accounting: None,
        // This generation's doubt first: the latest submit.
        in_doubt: doubt
            .as_ref()
            .filter(|doubt| !plan::past_doubt(env.state, doubt.since))
            .map(|doubt| (generation, doubt))
            .or(earlier_doubt.as_ref().map(|(g, doubt)| (*g, doubt))),
        earlier,
        takeover: takeover(target, env)
            .filter(|takeover| !plan::past_doubt(env.state, takeover.settles_at())),
        listing_failing_since: env.state.listing_failure.as_ref().map(|f| f.since),
    };
    let mut facts = facts;
    // What in-place edits are checked against: known only from the whole spec (a cached one
    // has no script). So it is read for an adopted job of this generation too (its tag names
    // this generation, so this spec is the one it was submitted with): without the hash, no
    // later edit (`suspend: false` among them) would ever reach the job.
    let mut spec_hash = load.is_none().then(|| edit::spec_hash(target.spec));
    let mut decision = plan::submit(facts, &dependencies);
    // One search by job name per namespace at a time on a connection: taken before the whole
    // spec is read for it (a step that must wait for the slot reads nothing), and held until
    // the search's answer is read.
    let take_search = || match env.searches {
        Some((slots, key)) => slots
            .try_take_for(key)
            .map(Some)
            .map_err(StepError::SearchBusy),
        None => Ok(None),
    };
    let mut search = None;
    // A cached spec has no script, so the plan before the read may call it invalid where the
    // whole one asks accounting: not fresh, not asked yet is what a search needs. Invalid for
    // what the cache keeps (`submit::check_names`), or with the whole spec, is final: it
    // searches nothing.
    if !facts.fresh
        && facts.accounting.is_none()
        && match decision {
            SubmitPlan::AskAccounting { .. } => true,
            SubmitPlan::Invalid(_) => {
                load.is_some() && super::submit::check_names(target.spec, target.name).is_ok()
            }
            _ => false,
        }
    {
        search = take_search()?;
    }
    if let Some(load) = load
        && !matches!(
            decision,
            SubmitPlan::Wait { .. } | SubmitPlan::AdoptEarlier(_)
        )
    {
        match load(generation).await.map_err(StepError::LoadSpec)? {
            Some(spec) => {
                whole = spec;
                spec_hash = Some(edit::spec_hash(&whole));
                facts.spec = &whole;
                decision = plan::submit(facts, &dependencies);
            }
            None => {
                let message = format!(
                    "the SlurmJob changed (or is being deleted) since generation {generation} was \
                     read: not submitted; the change is taken up next"
                );
                return Ok((wait(base, "SpecChanged", message), false));
            }
        }
    }
    let answer;
    let mut accounting_backs_off = false;
    if let SubmitPlan::AskAccounting { name } = &decision {
        let _search = match search.take() {
            Some(slot) => Some(slot),
            None => take_search()?,
        };
        answer = match find_in_accounting(
            env.client,
            name,
            search_since(target.created),
            &tag,
            &user,
            env.key,
        )
        .await
        {
            Ok(Some((found, _))) if found.job_id.is_some() => {
                notices.extend(not_adopted(&found, "accounting"));
                AccountingAnswer::Found(found.job_id)
            }
            Ok(Some((found, candidates))) => {
                notices.extend(not_adopted(&found, "accounting"));
                let unresolved: Vec<u32> = candidates
                    .into_iter()
                    .filter(|id| env.state.unresolved.contains(id))
                    .collect();
                for id in &unresolved {
                    env.state.want(*id);
                }
                if unresolved.is_empty() {
                    AccountingAnswer::Found(None)
                } else {
                    AccountingAnswer::Unresolved(unresolved)
                }
            }
            // No accounting: the index alone shows earlier submits, unless it skipped jobs
            // (it does so only when accounting answered; it has gone since).
            Ok(None) if env.state.skipped_before.is_some() => AccountingAnswer::Failed {
                reason: "NoAccounting",
                message: "the cluster's accounting stopped answering, and the index skipped \
                          jobs it did not need (its first listing, or a burst of others' submits)"
                    .into(),
            },
            Ok(None) => AccountingAnswer::Found(None),
            Err(error) => AccountingAnswer::Failed {
                reason: error.category(),
                message: error.for_tenant(),
            },
        };
        // Both are asked again with the SlurmJob's backoff, not every few seconds: a failing
        // slurmdbd, or a candidate's record that stays unreadable, would have accounting
        // searched by name for it forever at the wait's pace.
        accounting_backs_off = matches!(
            answer,
            AccountingAnswer::Failed { .. } | AccountingAnswer::Unresolved(_)
        );
        let facts = SubmitFacts {
            accounting: Some(&answer),
            ..facts
        };
        decision = plan::submit(facts, &dependencies);
    }
    // Taken for a search the whole spec then made needless: given back before the submit.
    drop(search);
    let wait = |base: SlurmJobStatus, reason: &str, message: String| Step {
        notices: notices.clone(),
        ..wait(base, reason, message)
    };
    let (outcome, announced) = match decision {
        SubmitPlan::Wait { reason, message } => {
            // A dependee's change wakes the job (`dependents`): it looks on its own rarely.
            let retry = if dependents::is_dependency_reason(reason) {
                DEPENDENCY_RECHECK
            } else {
                WAIT_RETRY
            };
            let step = Step {
                backoff: accounting_backs_off,
                retry: Some(retry),
                ..wait(base, reason, message)
            };
            return Ok((step, false));
        }
        SubmitPlan::Invalid(error) => {
            let message = format!("the spec cannot be submitted: {error}");
            let step = Step {
                status: status::stalled(base, generation, "InvalidSpec", message.clone(), now),
                notices: vec![Notice::warning("InvalidSpec", message)],
                retry: None,
                invalid: true,
                backoff: false,
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
        SubmitPlan::AdoptEarlier(earlier) => (Outcome::AdoptedEarlier(earlier), false),
        SubmitPlan::Submit(_) if user.is_empty() => {
            let message = "the SlurmCluster's credentials do not say which Slurm user they act \
                           as (a ready token without a `sun` claim): the job's ownership tag \
                           cannot be signed for it";
            return Ok((wait(base, "UnknownSlurmUser", message.into()), false));
        }
        SubmitPlan::Submit(request) => {
            // The version is agreed before the Lease is read, so that the submit leaves right
            // after that read: a negotiation (pings, each up to the request timeout) in between
            // would let it land later than a new leader waits for (`plan::Takeover`).
            env.submitter.ensure_version().await?;
            if !env.leadership.confirm().await {
                // Lost the Lease (or was paused past its expiry): the leader submits or adopts
                // by tag.
                let message = "this replica does not hold the leader Lease (read right before \
                               the submit); the leader submits";
                return Ok((wait(base, "NotLeader", message.into()), false));
            }
            if !(env.still_granted)() {
                // Decided again with the access as it is now (its change wakes the SlurmJob).
                let message = "the SlurmCluster's access changed while this submit was \
                               prepared: nothing was submitted, and the job is decided again \
                               under the access as it is now";
                return Ok((wait(base, "AccessChanged", message.into()), false));
            }
            match submit_once(env, &tag, &request).await {
                Ok(outcome) => (outcome, false),
                // Slurm answered, and no job exists: safe to say so, and the same request would
                // only get the same answer. Recorded with its generation (see `lifecycle`).
                Err(error) if error.refuses_job() => {
                    let status = status::rejected(base, generation, &error.for_tenant(), now);
                    let message = condition::find(&status.conditions, STALLED)
                        .map(|c| c.message.clone())
                        .unwrap_or_default();
                    // With what this step found before (a job under our tag not adopted).
                    let notices = notices
                        .iter()
                        .cloned()
                        .chain([Notice::warning(SUBMIT_REJECTED, message)])
                        .collect();
                    let step = Step {
                        status,
                        notices,
                        retry: None,
                        invalid: true,
                        backoff: false,
                    };
                    return Ok((step, false));
                }
                // A limit of Slurm's (a user's or QoS's MaxSubmitJobs): no job was made, and
                // the same request succeeds once the user's jobs end. Said in the status, its
                // Warning once as the wait begins (not an Event per try), and tried again with
                // the SlurmJob's backoff.
                Err(error) if error.slurm_errno() == Some(errno::ACCOUNTING_POLICY) => {
                    env.submissions.record_no_job(
                        &tag,
                        env.acting_since,
                        std::time::Instant::now(),
                    );
                    let message = format!(
                        "Slurm's accounting or QoS policy refused the submit: {}; no job was \
                         made. A limit on the jobs the Slurm user may have queued lifts as they \
                         end: it is tried again with a growing delay (up to 5 minutes); a limit \
                         the spec exceeds (time, size) needs an edit",
                        error.for_tenant()
                    );
                    let mut step = Step {
                        backoff: true,
                        ..wait(base, SUBMIT_LIMITED, message.clone())
                    };
                    step.notices.push(Notice::warning(SUBMIT_LIMITED, message));
                    return Ok((step, false));
                }
                // No answer that says whether a job was made: the next step waits for a
                // listing past it before it submits again (`plan::past_doubt`).
                Err(error) if error.outcome_unknown() => {
                    let doubt = Doubt {
                        since: Utc::now(),
                        error: format!("{}: {}", error.category(), error.for_tenant()),
                    };
                    env.submissions.record_doubt(&tag, doubt);
                    return Err(error.into());
                }
                // Nothing was made (credentials refused, an error of Slurm's that is not a
                // refusal of the job): said in the status, not only in an Event (which
                // expires), and tried again with the SlurmJob's backoff for as long as it lasts.
                // As for a limit, the next try waits for the backoff (the finalizer's change of
                // a new SlurmJob would trigger one at once) and needs no accounting search.
                Err(error) => {
                    env.submissions.record_no_job(
                        &tag,
                        env.acting_since,
                        std::time::Instant::now(),
                    );
                    tracing::warn!(error = %crate::error_chain::Chain(&error), "the submit failed and made no job");
                    let message = format!(
                        "submitting to SlurmCluster {} failed ({}): {}; no job was made: it is \
                         tried again with a growing delay (up to 5 minutes)",
                        target.spec.cluster_name,
                        error.category(),
                        error.for_tenant()
                    );
                    let mut step = Step {
                        backoff: true,
                        ..wait(base, plan::SUBMIT_FAILED, message.clone())
                    };
                    step.notices
                        .push(Notice::warning(plan::SUBMIT_FAILED, message));
                    return Ok((step, false));
                }
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
        Outcome::AdoptedEarlier(earlier) => (
            earlier.job_id,
            (
                "Adopted",
                format!(
                    "adopted Slurm job {}, submitted for generation {} (the answer to that \
                     submit was lost before the status named it) and not ended: generation \
                     {generation} is an edit of that run, not a second job",
                    earlier.job_id, earlier.generation
                ),
            ),
        ),
        Outcome::Submitted {
            job_id,
            user_message,
            warnings,
        } => {
            let mut message = format!("submitted as Slurm job {job_id}");
            if let Some(told) = user_message {
                message.push_str(&format!(
                    "; the site's job_submit plugin says: {}",
                    status::bounded(told, status::MAX_SLURM_MESSAGE)
                ));
            }
            if !warnings.is_empty() {
                message.push_str(&format!(
                    " (slurmrestd: {})",
                    status::bounded(&warnings.join("; "), status::MAX_SLURM_MESSAGE)
                ));
            }
            (*job_id, ("Submitted", message))
        }
    };
    // The poller follows it from its next cycle, wherever the id falls. A job of this
    // submit is ours without its record: the poller may read that once a burst pauses.
    let adopted = !matches!(outcome, Outcome::Submitted { .. });
    // The run's own generation: an earlier one's job runs as that generation was submitted.
    let mut run_generation = generation;
    match outcome {
        Outcome::Submitted { .. } => env.state.submitted(job_id, target.uid),
        Outcome::Adopted { .. } => {
            // A submit in doubt made it: nothing is in doubt any more.
            env.submissions.clear_doubt(&tag);
            env.state.want(job_id);
        }
        Outcome::AdoptedEarlier(earlier) => {
            env.submissions
                .clear_doubt(&OwnerTag::new(target.uid, earlier.generation));
            env.state.want(job_id);
            run_generation = earlier.generation;
            // Its spec is not this one: the edit is never applied in place (`edit::NO_HASH`).
            spec_hash = None;
        }
    }
    // Only records of this SlurmJob's: an index not yet past a slurmctld state loss may still
    // hold another job's record under the id the submit just returned.
    let records: Vec<Job> = env
        .state
        .job_records(job_id)
        .into_iter()
        .filter(|job| plan::is_ours(job, target.uid, env.key))
        .cloned()
        .collect();
    // An adopted job the index has no record of may be one slurmctld no longer holds (found in
    // accounting: it ran while the operator was away): the poller will say nothing of it, so
    // the next step comes by itself, and follows it (through accounting once a complete listing
    // misses it).
    let retry = (adopted && records.is_empty()).then_some(WAIT_RETRY);
    let mut status = status::submitted(base, job_id, run_generation, ready, now.clone(), &records);
    status.submitted_spec_hash = spec_hash;
    // Where this run writes its output, as submitted: an edit of `spec.output` applies from
    // the next run, and the run's Pod must read the file the run writes. An earlier
    // generation's run was submitted from a spec not known here: its record decides.
    status.output = if run_generation == generation {
        facts.spec.output.as_ref().map(output::run_output)
    } else {
        let named = super::submit::output_path(facts.spec, target.name);
        output::earlier_run_output(facts.spec, named.as_deref(), job_id, &records)
    };
    // An earlier generation's run: this generation is an edit of it, decided here (a step of
    // its own would write `observedGeneration` back to the earlier one first).
    if run_generation != generation {
        let why = format!(
            "it is an edit of Slurm job {job_id}, which was submitted for generation \
             {run_generation} (the answer to that submit was lost before the status named the \
             job) and has not ended; that job's spec is not known here, so nothing is changed in \
             place"
        );
        notices.push(ignore_edit(
            &mut status,
            generation,
            i64::from(job_id),
            run_generation,
            &why,
            &now,
        ));
    }
    // The evidence clock starts once Slurm answered, not when the step began: a listing that
    // began in between (during an accounting lookup, a slow submit) cannot hold the job, and
    // must not prove it gone (`plan::gone`: a live job called `Lost` right after its submit).
    if let Some(answered) = status::time(Some(Utc::now().max(env.now))) {
        status.tracked_since = Some(answered);
    }
    let step = Step {
        status,
        notices,
        retry,
        invalid: false,
        backoff: false,
    };
    Ok((step, announced))
}

/// The Warning for jobs that carry this generation's tag but are not provably ours (never an
/// error: the SlurmJob goes on and submits its own job), also logged.
fn not_adopted(found: &Adoptable, source: &str) -> Vec<Notice> {
    if found.refused.is_empty() {
        return Vec::new();
    }
    let jobs: Vec<String> = found
        .refused
        .iter()
        .map(|(id, why)| {
            warn!(
                job_id = id,
                why = why.as_str(),
                source,
                "a Slurm job carries this SlurmJob's tag but is not provably ours: not adopted"
            );
            format!("{id} ({})", why.as_str())
        })
        .collect();
    vec![Notice::warning(
        "TagNotAdopted",
        format!(
            "Slurm job {} in {source} carries this generation's ownership tag but is not provably \
             the operator's (Forged: its signature does not verify for this SlurmJob and the job's \
             Slurm user; Unsigned: a tag from before tags were signed; OtherUser: signed for \
             another Slurm user): not adopted",
            jobs.join(", ")
        ),
    )]
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
        user_message: submitted.user_message,
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
) -> (SlurmJobStatus, Again) {
    let next = followed(current, job_id, uid, env);
    if let Ok(id) = u32::try_from(job_id)
        && let Some(user) = env.job_user
        && plan::follows_unsigned(env.state, id, uid, env.key, Some(user))
    {
        // The poller follows a job with an unsigned tag only once a SlurmJob names it, as the
        // user it runs as (anyone may write one): until then its record is as first read.
        env.state.follow_unsigned(id, user);
    }
    let missing = u32::try_from(job_id).is_ok_and(|id| env.state.job_records(id).is_empty());
    if let Ok(id) = u32::try_from(job_id)
        && missing
        && !plan::resolved(env.state, job_id)
    {
        // Skipped at the first sync, or beyond what the last listing asked: fetch it.
        env.state.want(id);
    }
    if next.phase != Phase::Lost || current.phase == Phase::Lost {
        // A job the listings spoke for but hold no record of (one adopted from accounting
        // after it ran: slurmctld no longer has it) is called gone only by a complete listing
        // that began after it was tracked, and the poller reports nothing of it meanwhile: the
        // step comes back by itself. A fresh submit beyond the listings is the poller's to report.
        // Nor does it report one above the ids the incremental cycles probe (purged while the
        // operator was away): the next listing of every job speaks for it.
        // One submitted and not read yet is unresolved: the poller reports it once it reads it
        // as ours, but not if it reads another user's job under that id (a slurmctld state
        // loss), so it is looked at again too, less often.
        let unresolved = u32::try_from(job_id).is_ok_and(|id| env.state.unresolved.contains(&id));
        let retry = if !missing || next.phase.is_terminal() {
            Again::Not
        } else if plan::resolved(env.state, job_id) || (plan::gone(env.state, &next) && !unresolved)
        {
            Again::After(WAIT_RETRY)
        } else if unresolved {
            Again::After(UNRESOLVED_RETRY)
        } else {
            Again::Not
        };
        return (next, retry);
    }
    let Ok(id) = u32::try_from(job_id) else {
        return (next, Again::Not);
    };
    let generation = current
        .submitted_generation
        .or(current.observed_generation)
        .unwrap_or(1);
    let tag = OwnerTag::new(uid, generation);
    match accounting_records(env.client, id, &tag, env.key, current, env.job_user).await {
        Ok(Accounting::Records(records)) => {
            let mut observed = status::observe(current, &records);
            if !observed.phase.is_terminal() {
                // slurmctld no longer has it, and accounting has no end for it: slurmdbd has
                // not received the end yet (it was down), or never will (a runaway record).
                // Looked at again at the resync; the status says what it waits for.
                observed.state_reason = Some(format!(
                    "Slurm job {job_id} left slurmctld, and accounting (slurmdbd) still lists it \
                     {} with no end: waiting for slurmdbd to record how it ended. If it never \
                     does, the record is a runaway job (`sacctmgr show runawayjobs` lists and \
                     fixes them)",
                    observed.phase
                ));
            }
            (observed, Again::Not)
        }
        Ok(Accounting::NoRecord) => (next, Again::Not),
        Ok(Accounting::Unavailable) => {
            let mut next = next;
            next.state_reason = Some(format!(
                "Slurm job {job_id} left slurmctld (MinJobAge) while it was {} and the cluster \
                 serves no accounting (slurmdbd) to tell how it ended",
                current.phase
            ));
            (next, Again::Not)
        }
        Err(error) => {
            warn!(
                job_id,
                reason = error.category(),
                %error,
                "job left slurmctld; accounting did not answer, trying again"
            );
            // The phase stays as last seen (the job is not called lost while that is unknown),
            // but the status says what it waits for: an outage of slurmdbd may last hours.
            let mut kept = current.clone();
            kept.state_reason = Some(format!(
                "Slurm job {job_id} left slurmctld while it was {}; asking the cluster's \
                 accounting (slurmdbd) how it ended failed ({}): {}. Asking again with a growing \
                 delay",
                current.phase,
                error.category(),
                status::bounded(&error.for_tenant(), status::MAX_SLURM_MESSAGE)
            ));
            (kept, Again::Backoff)
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

/// The accounting records of `job_id` that are the run `status` follows ([`plan::accounting_ours`]:
/// carrying `tag`, or, where slurmdbd stores no comments, submitted when ours was; slurmctld
/// reuses ids after a reset). The SlurmCluster's `DuplicateProtection` condition says when
/// slurmdbd stores no comments.
pub async fn accounting_records(
    client: &SlurmClient,
    job_id: u32,
    tag: &OwnerTag,
    key: &TagKey,
    status: &SlurmJobStatus,
    user: Option<&str>,
) -> Result<Accounting, SlurmError> {
    let Some(records) = client.accounting_job(job_id).await? else {
        return Ok(Accounting::Unavailable);
    };
    let ours = plan::accounting_ours(&records, tag, key, status, user);
    Ok(if ours.is_empty() {
        Accounting::NoRecord
    } else {
        Accounting::Records(ours)
    })
}

/// How far before a SlurmJob's creation an accounting search by its job name looks: no job of
/// its can have ended before the SlurmJob existed, but slurmdbd's times are on Slurm's clock,
/// which may be off from the API server's. A day: a clock off by more than that would be seen
/// everywhere else first, and one job missed here runs twice (its submit answer lost).
pub const SEARCH_CLOCK_SLACK: chrono::TimeDelta = chrono::TimeDelta::days(1);

/// Where an accounting search for the jobs of a SlurmJob created at `created` begins: a name
/// is anyone's to reuse, and its whole history (every user's, every day's) could be large
/// enough to fill the answer's bound and hold a request slot for long (a tenant may pick the
/// name). `None` (the whole history) when the creation time is not known.
pub fn search_since(created: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    created.and_then(|at| at.checked_sub_signed(SEARCH_CLOCK_SLACK))
}

/// The job carrying `tag` in accounting, found by its name, that is provably ours
/// ([`plan::adoptable`]): what the index cannot show once slurmctld dropped the job
/// (`MinJobAge`). With it, the ids of the jobs of that name and `user` whose records carry no
/// comment (slurmdbd stores it only at a job's end): a job still in slurmctld, whose record
/// there shows whether it is ours. `None` when the cluster has no accounting. Only jobs that
/// had not ended by `since` ([`search_since`]) are asked for.
pub async fn find_in_accounting(
    client: &SlurmClient,
    name: &str,
    since: Option<DateTime<Utc>>,
    tag: &OwnerTag,
    user: &str,
    key: &TagKey,
) -> Result<Option<(Adoptable, Vec<u32>)>, SlurmError> {
    Ok(client
        .accounting_jobs_named(name, since, Some(user))
        .await?
        .map(|records| {
            let found = plan::adoptable(&records, tag, user, key);
            (found, plan::accounting_candidates(&records, user))
        }))
}

/// How a cancel ended; the first three mean "nothing of this job runs any more or will".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancellation {
    Cancelled,
    AlreadyFinished,
    /// slurmctld does not know the job (it ended long ago, or never existed).
    Gone,
    /// Not cancelled: the job is not provably ours ([`cancel_owned`]); how its tag stands.
    NotOwned(Ownership),
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

/// Cancel `job_id` for the SlurmJob `uid` only if it is ours (`plan::is_ours`): its records in the
/// index, or else slurmctld's answer to a GET of the job, must carry the SlurmJob's tag, signed
/// for the job's own Slurm user. With `status_job` (the SlurmJob's own `status.jobId`, and the
/// Slurm user its jobs run as) the legacy tag of a job the previous version submitted as that
/// user counts too (`plan::is_followed`). A job id can
/// name someone else's job (ids restart after slurmctld loses its state, or a status was
/// written by hand): that job is left alone ([`Cancellation::NotOwned`]). The cancel itself
/// goes out as the job's own Slurm user.
pub async fn cancel_owned(
    client: &SlurmClient,
    state: Option<&ClusterState>,
    uid: &str,
    key: &TagKey,
    job_id: u32,
    status_job: Option<Option<&str>>,
) -> Result<Cancellation, SlurmError> {
    let ours = |job: &Job| {
        if let Some(user) = status_job {
            plan::is_followed(job, uid, key, user)
        } else {
            plan::is_ours(job, uid, key)
        }
    };
    let indexed: Vec<Job> = state
        .map(|s| s.job_records(job_id).into_iter().cloned().collect())
        .unwrap_or_default();
    // The index holds only jobs whose comment claims to be ours, so a job missing from it may
    // still be a foreign job under that id: ask slurmctld.
    let records = if indexed.iter().any(ours) {
        indexed
    } else {
        match client.job(job_id).await {
            Ok(records) => records,
            Err(SlurmError::NotFound { .. }) => return Ok(Cancellation::Gone),
            Err(other) => return Err(other),
        }
    };
    if !records.iter().any(ours) {
        let ownership = records
            .iter()
            .map(|job| match job.ownership(key) {
                // A valid tag, but of another SlurmJob.
                Ownership::Proven => Ownership::Forged,
                other => other,
            })
            .min_by_key(|o| *o == Ownership::Untagged)
            .unwrap_or(Ownership::Untagged);
        warn!(
            job_id,
            uid,
            ownership = ownership.as_str(),
            "not cancelling a Slurm job that is not provably this SlurmJob's"
        );
        return Ok(Cancellation::NotOwned(ownership));
    }
    // Cancel as the job's own Slurm user, so that slurmctld itself allows no more than that
    // user may do; never with the cluster's own credentials (a ready token for that very user
    // acts as it). A job of ours always names its user: the tag is checked against it.
    let Some(owner) = records
        .iter()
        .find(|job| ours(job))
        .and_then(|job| job.user_name.as_deref())
    else {
        warn!(
            job_id,
            uid, "not cancelling a Slurm job whose record names no user"
        );
        return Ok(Cancellation::NotOwned(Ownership::Untagged));
    };
    cancel(&client.as_user(owner)?, job_id).await
}

/// The streamer Pod of run `job_id`: created when missing, replaced when it streams an earlier
/// run. A Pod of that name that is not ours is left alone.
/// How [`ensure_output_pod`] failed: creating the Pod (the API server refused or could not
/// take it), or reading, patching or deleting one.
#[derive(Debug)]
pub enum OutputPodError {
    Create(kube::Error),
    Other(kube::Error),
    /// A Pod of the SlurmJob's name exists and is not its streamer (left by an earlier
    /// SlurmJob of that name, or anyone's): left alone, and no streamer is made.
    NameTaken,
}

impl From<kube::Error> for OutputPodError {
    fn from(error: kube::Error) -> Self {
        Self::Other(error)
    }
}

/// The run whose output Pod [`ensure_output_pod`] looks after.
#[derive(Debug, Clone)]
pub struct OutputRun {
    pub job_id: i64,
    /// Where the run writes its output (`status.output`); `None`: it writes none the Pod could
    /// read (submitted without `spec.output`).
    pub output: Option<RunOutput>,
    /// The run has ended.
    pub ended: bool,
    /// A missing Pod is created ([`output::may_create`]).
    pub may_create: bool,
}

/// Brings the output Pod of `run` to what [`output::pod_step`] says of it as read from the API
/// server; a replacement is counted in `replacements`. Returns when to look at it again, if it
/// is to be replaced later ([`output::PodStep::LookAgain`]).
pub async fn ensure_output_pod(
    pods: &Api<Pod>,
    job: &SlurmJob,
    run: OutputRun,
    image: &str,
    replacements: &output::Replacements,
) -> Result<Option<Duration>, OutputPodError> {
    let OutputRun {
        job_id,
        output,
        ended,
        may_create,
    } = run;
    let name = job.name_any();
    let existing = pods.get_opt(&name).await?;
    // Acted on only as the very Pod read here (its uid a precondition): one re-created under
    // the name meanwhile is looked at again first.
    let uid = existing.as_ref().and_then(|pod| pod.uid());
    let step = output::pod_step(
        existing.as_ref().map(|pod| output::KnownPod {
            meta: &pod.metadata,
            phase: PodPhase::of(pod),
        }),
        job.metadata.uid.as_deref(),
        job_id,
        ended,
        may_create,
        output::replace_after(replacements.of(job.metadata.uid.as_deref(), job_id)),
        Utc::now(),
    );
    match step {
        output::PodStep::Nothing => {}
        output::PodStep::LookAgain(later) => return Ok(Some(later)),
        // Said while a streamer would be made: it is not, for that Pod.
        output::PodStep::NotOurs if may_create => return Err(OutputPodError::NameTaken),
        output::PodStep::NotOurs => {}
        output::PodStep::TellEnded => {
            let mut patch = output::told_patch();
            if let Some(uid) = &uid {
                patch["metadata"]["uid"] = uid.as_str().into();
            }
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            pods.patch(&name, &params, &Patch::Merge(patch)).await?;
            info!(pod = %name, job_id, "output Pod told that its job ended");
        }
        output::PodStep::DeleteOld | output::PodStep::Replace | output::PodStep::Abandon => {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid,
                    resource_version: None,
                }),
                ..Default::default()
            };
            pods.delete(&name, &params).await?;
            // Created on the next reconcile, once the old Pod is gone (the Pod watch triggers it).
            if step == output::PodStep::Replace {
                if let Some(uid) = job.metadata.uid.as_deref() {
                    replacements.record(uid, job_id);
                }
                let phase = existing.as_ref().and_then(PodPhase::of);
                info!(pod = %name, job_id, ?phase, "output Pod stopped before its output was whole; deleted, to be created again");
            } else if step == output::PodStep::Abandon {
                info!(pod = %name, job_id, "output Pod never started and its job has ended; deleted");
            } else {
                info!(pod = %name, "output Pod of the previous run deleted");
            }
        }
        output::PodStep::Create => {
            // None for a run submitted without `spec.output` (a Pod of an earlier run is still
            // told the end, and deleted at the next run, but none is made).
            let Some(desired) = output
                .as_ref()
                .and_then(|output| output::pod(job, output, job_id, image, ended))
            else {
                return Ok(None);
            };
            pods.create(&PostParams::default(), &desired)
                .await
                .map_err(OutputPodError::Create)?;
            info!(pod = %name, job_id, "output Pod created");
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests;
