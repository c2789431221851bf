//! One step of a SlurmJob against Slurm, shared by the controller and the integration tests:
//! decide ([`lifecycle::decide`]), then submit once (crash-safe) or mirror the index into the
//! status. No Kubernetes here: the caller writes the returned status and publishes the notices.
//!
//! Crash safety: a submit happens only when
//! 1. the decision is `Submit` for this generation (the status has no job for it),
//! 2. the cluster's index was synced completely *after this process started* (so it has seen
//!    every job slurmctld holds, including any an earlier incarnation submitted before dying),
//! 3. neither that index nor this process's own [`Submissions`] hold a job carrying this
//!    generation's tag — if one does, it is adopted.
//!
//! The job id is recorded in [`Submissions`] in the same poll as the submit's answer (no
//! `.await` in between, so a cancelled future cannot lose it), before the caller writes the
//! status. A submit is never retried: an error leaves the outcome unknown, and the next step
//! looks for the tag again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::crd::condition;
use crate::crd::slurmjob::{Phase, SlurmJobSpec, SlurmJobStatus};
use crate::leader::Leadership;
use crate::slurm::types::Job;
use crate::slurm::{SlurmClient, SlurmError};
use crate::state::index::ClusterState;

use super::lifecycle::{self, Decision, DependencyWait};
use super::notice::{self, Notice};
use super::{actions, status, submit};
use crate::slurm::tag;

/// Condition: Slurm accepted the job of the current generation.
pub const READY: &str = condition::READY;
/// Condition: the spec's latest generation is what the current run was submitted from.
pub const SPEC_APPLIED: &str = "SpecApplied";

/// How long after the submit a complete index sync must have happened before a job missing
/// from it counts as gone (Slurm timestamps and conditions have whole seconds).
pub const GONE_GRACE: chrono::TimeDelta = chrono::TimeDelta::seconds(2);
/// Retry interval while waiting for the index or for dependencies.
pub const WAIT_RETRY: Duration = Duration::from_secs(3);

/// Jobs this process submitted, by tag: covers the time between a submit and the next index
/// sync, when neither the status (not written yet) nor the index knows the job.
#[derive(Debug, Default)]
pub struct Submissions {
    by_tag: Mutex<HashMap<String, u32>>,
}

impl Submissions {
    pub fn get(&self, tag: &str) -> Option<u32> {
        let map = self.by_tag.lock().unwrap_or_else(|p| p.into_inner());
        map.get(tag).copied()
    }

    pub fn record(&self, tag: &str, job_id: u32) {
        let mut map = self.by_tag.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(tag.to_owned(), job_id);
    }

    /// Forget the tags of `uid` (the SlurmJob is gone).
    pub fn forget_uid(&self, uid: &str) {
        let mut map = self.by_tag.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|t, _| !tag::is_of(Some(t), uid));
    }

    pub fn len(&self) -> usize {
        self.by_tag.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

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
    /// When the SlurmJob was created, if known: see [`FRESH`].
    pub created: Option<DateTime<Utc>>,
}

/// A first-generation SlurmJob younger than this submits without asking the cluster's
/// accounting for an earlier submit: a job of it could leave slurmctld only after it ran and
/// then `MinJobAge` passed (300 s by default), so the index alone is complete. This keeps the
/// common path (apply, then submit at once) at one request per submit.
pub const FRESH: chrono::TimeDelta = chrono::TimeDelta::seconds(30);

/// What a step works with.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    pub client: &'a SlurmClient,
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
/// outcome is unknown; the next step resolves them through the tag.
pub async fn step(
    target: Target<'_>,
    env: Env<'_>,
    dependencies: impl Fn(&str) -> Option<Option<i64>>,
) -> Result<Step, SlurmError> {
    let current = target.status.cloned().unwrap_or_default();
    let now = status::time(Some(env.now)).unwrap_or_else(|| condition::Time(Default::default()));
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
            let (mut step, announced) = submit_step(target, env, base, now, dependencies).await?;
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
            Ok(step)
        }
        Decision::Follow { job_id } => {
            let (mut next, retry) = follow_or_account(&current, job_id, target.uid, env).await;
            if next.observed_generation.is_none() {
                next.observed_generation = Some(generation);
            }
            let notices = notice::transitions(&current, &next);
            Ok(Step {
                status: next,
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
                    now,
                ),
            );
            let mut notices = vec![Notice::warning("EditIgnored", message)];
            notices.extend(notice::transitions(&current, &next));
            Ok(Step {
                status: next,
                notices,
                retry,
                invalid: false,
            })
        }
    }
}

fn dedup(notices: &mut Vec<Notice>) {
    let mut seen = Vec::new();
    notices.retain(|n| {
        if seen.contains(&n.reason) {
            false
        } else {
            seen.push(n.reason);
            true
        }
    });
}

/// The existing job of `tag`: submitted by this process, or seen by the index.
pub fn existing(state: &ClusterState, submissions: &Submissions, tag: &str) -> Option<u32> {
    submissions
        .get(tag)
        .or_else(|| state.tagged(tag).first().copied())
}

/// Whether the index can be trusted to show every job, i.e. it synced after `started_at`.
pub fn index_trusted(state: &ClusterState, started_at: DateTime<Utc>) -> bool {
    state.jobs_synced_at.is_some_and(|t| t > started_at)
}

async fn submit_step(
    target: Target<'_>,
    env: Env<'_>,
    mut base: SlurmJobStatus,
    now: condition::Time,
    dependencies: impl Fn(&str) -> Option<Option<i64>>,
) -> Result<(Step, bool), SlurmError> {
    let generation = target.generation;
    let waiting = |mut status: SlurmJobStatus, reason: &str, message: String, invalid: bool| {
        condition::upsert(
            &mut status.conditions,
            condition::new(READY, false, reason, message, Some(generation), now.clone()),
        );
        Step {
            status,
            notices: Vec::new(),
            retry: (!invalid).then_some(WAIT_RETRY),
            invalid,
        }
    };
    let invalid = |status: SlurmJobStatus, error: &submit::SpecError| {
        let message = format!("the spec cannot be submitted: {error}");
        let mut step = waiting(status, "InvalidSpec", message.clone(), true);
        step.notices.push(Notice::warning("InvalidSpec", message));
        step
    };
    base.phase = Phase::Pending;
    if !index_trusted(env.state, env.started_at) {
        return Ok((
            waiting(
                base,
                "WaitingForSlurmIndex",
                "waiting for a complete list of the cluster's jobs before submitting, so that a \
                 job submitted before a restart is adopted instead of submitted twice"
                    .into(),
                false,
            ),
            false,
        ));
    }
    let tag = tag::tag(target.uid, generation);
    let found = existing(env.state, env.submissions, &tag);
    let announced = found.is_some() && env.submissions.get(&tag) == found;
    let mut found = found;
    let mut request = if found.is_some() {
        None
    } else {
        if let Err(error) = submit::check_dependencies(target.spec, target.name) {
            return Ok((invalid(base, &error), false));
        }
        let resolved = match lifecycle::resolve_dependencies(&target.spec.depends_on, dependencies)
        {
            Ok(resolved) => resolved,
            Err(wait) => {
                let message = match wait {
                    DependencyWait::Missing(names) => {
                        format!(
                            "waiting for SlurmJobs that do not exist: {}",
                            names.join(", ")
                        )
                    }
                    DependencyWait::NotSubmitted(names) => format!(
                        "waiting for SlurmJobs to be submitted: {}",
                        names.join(", ")
                    ),
                };
                return Ok((
                    waiting(base, "WaitingForDependencies", message, false),
                    false,
                ));
            }
        };
        match submit::request(target.spec, target.name, &tag, &resolved) {
            Ok(request) => Some(request),
            Err(error) => return Ok((invalid(base, &error), false)),
        }
    };
    let fresh = generation == 1 && target.created.is_some_and(|at| env.now - at < FRESH);
    if let Some(submit) = request.as_ref().filter(|_| !fresh) {
        // Not in slurmctld: it may still have run and left (down longer than MinJobAge).
        let name = submit.name.as_deref().unwrap_or(target.name);
        match actions::find_in_accounting(env.client, name, &tag).await {
            Ok(Some(job_id)) => {
                found = Some(job_id);
                request = None;
            }
            Ok(None) => {}
            Err(error) => {
                let message = format!(
                    "cannot check the cluster's accounting for an earlier submit of generation \
                     {generation} ({}): {error}; not submitting until it answers",
                    error.category()
                );
                return Ok((waiting(base, "WaitingForAccounting", message, false), false));
            }
        }
    }
    if request.is_some() && !env.leadership.confirm().await {
        // Lost the Lease (or was paused past its expiry): the leader submits or adopts by tag.
        return Ok((
            waiting(
                base,
                "NotLeader",
                "this replica does not hold the leader Lease (read right before the submit); \
                 the leader submits"
                    .into(),
                false,
            ),
            false,
        ));
    }
    let submission = match &request {
        None => actions::Submission::Adopted {
            job_id: found.unwrap_or_default(),
        },
        Some(request) => {
            let submission = actions::submit_once(env.client, None, request).await?;
            // No await between the answer and this record: see the module docs.
            env.submissions.record(&tag, submission.job_id());
            // tests/crash.rs ends the process here: Slurm has the job, the status never says so.
            fail::fail_point!(FAIL_AFTER_SUBMIT, |_| std::process::exit(FAIL_EXIT_CODE));
            submission
        }
    };
    let job_id = submission.job_id();
    let mut next = base;
    next.phase = Phase::Submitted;
    next.job_id = Some(i64::from(job_id));
    next.submitted_generation = Some(generation);
    next.observed_generation = Some(generation);
    let (reason, message) = match &submission {
        actions::Submission::Adopted { .. } => (
            "Adopted",
            format!("adopted Slurm job {job_id}, which already carried this generation's tag"),
        ),
        actions::Submission::Submitted { warnings, .. } if !warnings.is_empty() => (
            "Submitted",
            format!(
                "submitted as Slurm job {job_id} (slurmrestd: {})",
                warnings.join("; ")
            ),
        ),
        actions::Submission::Submitted { .. } => {
            ("Submitted", format!("submitted as Slurm job {job_id}"))
        }
    };
    condition::upsert(
        &mut next.conditions,
        condition::new(READY, true, reason, message, Some(generation), now.clone()),
    );
    condition::upsert(
        &mut next.conditions,
        condition::new(
            SPEC_APPLIED,
            true,
            "Submitted",
            format!("Slurm job {job_id} runs generation {generation}"),
            Some(generation),
            now,
        ),
    );
    let records: Vec<Job> = env.state.job_records(job_id).into_iter().cloned().collect();
    let next = status::observe(&next, &records);
    let step = Step {
        status: next,
        notices: Vec::new(),
        retry: None,
        invalid: false,
    };
    Ok((step, announced))
}

/// The status mirrored from the index; a job the index no longer holds (long enough after the
/// submit for a complete sync to have seen it) that had not ended is `Lost`.
pub fn follow(current: &SlurmJobStatus, job_id: i64, env: Env<'_>) -> SlurmJobStatus {
    let records: Vec<Job> = u32::try_from(job_id)
        .map(|id| env.state.job_records(id).into_iter().cloned().collect())
        .unwrap_or_default();
    if !records.is_empty() {
        return status::observe(current, &records);
    }
    if current.phase.is_terminal() || !gone(env.state, current) {
        return current.clone();
    }
    lost(current, job_id, env.now)
}

/// [`follow`], and for a job that left slurmctld unseen, its end from the cluster's accounting
/// (slurmdbd) when it has one. An accounting error keeps the status as it was and asks to come
/// back (the job is not called lost while that is unknown).
pub async fn follow_or_account(
    current: &SlurmJobStatus,
    job_id: i64,
    uid: &str,
    env: Env<'_>,
) -> (SlurmJobStatus, Option<Duration>) {
    let next = follow(current, job_id, env);
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
    match actions::accounting_records(env.client, id, &tag::tag(uid, generation)).await {
        Ok(actions::Accounting::Records(records)) => (status::observe(current, &records), None),
        Ok(actions::Accounting::NoRecord) => (next, None),
        Ok(actions::Accounting::Unavailable) => {
            let mut next = next;
            next.state_reason = Some(format!(
                "Slurm job {job_id} left slurmctld (MinJobAge) while it was {} and the cluster \
                 serves no accounting (slurmdbd) to tell how it ended",
                current.phase
            ));
            (next, None)
        }
        Err(error) => {
            tracing::warn!(
                job_id,
                reason = error.category(),
                %error,
                "job left slurmctld; accounting did not answer, trying again"
            );
            (current.clone(), Some(WAIT_RETRY))
        }
    }
}

/// Whether a complete sync happened late enough after the submit (or adoption) that the job
/// would be in the index if slurmctld still held it.
pub fn gone(state: &ClusterState, current: &SlurmJobStatus) -> bool {
    let Some(synced) = state.jobs_synced_at else {
        return false;
    };
    let Some(since) = condition::find(&current.conditions, READY)
        .filter(|c| c.status == "True")
        .and_then(|c| DateTime::from_timestamp(c.last_transition_time.0.as_second(), 0))
    else {
        return false;
    };
    synced > since + GONE_GRACE
}

/// The status of a job that left slurmctld before its end was observed (no accounting record).
pub fn lost(current: &SlurmJobStatus, job_id: i64, now: DateTime<Utc>) -> SlurmJobStatus {
    let mut next = current.clone();
    next.phase = Phase::Lost;
    next.state_reason = Some(format!(
        "Slurm job {job_id} left slurmctld (MinJobAge) while it was {} and the cluster's \
         accounting has no record of its end",
        current.phase
    ));
    next.end_time = status::time(Some(now));
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::slurm::types::JobState;

    fn job(id: u32, comment: &str, states: &[&str]) -> Job {
        Job {
            job_id: id,
            state: JobState::from_strings(states),
            comment: Some(comment.into()),
            ..Job::bare()
        }
    }

    fn state(synced: Option<i64>, jobs: Vec<Job>) -> ClusterState {
        ClusterState {
            jobs: Arc::new(jobs.into_iter().map(|j| (j.job_id, j)).collect()),
            jobs_synced_at: synced.and_then(|s| DateTime::from_timestamp(s, 0)),
            ..Default::default()
        }
    }

    #[test]
    fn the_index_is_trusted_only_after_a_sync_since_start() {
        let start = DateTime::from_timestamp(100, 0).unwrap();
        assert!(!index_trusted(&state(None, vec![]), start));
        assert!(!index_trusted(&state(Some(100), vec![]), start));
        assert!(!index_trusted(&state(Some(99), vec![]), start));
        assert!(index_trusted(&state(Some(101), vec![]), start));
    }

    #[test]
    fn an_existing_job_comes_from_this_process_or_the_index() {
        let t = tag::tag("u", 1);
        let subs = Submissions::default();
        let s = state(
            Some(1),
            vec![
                job(7, &t, &["PENDING"]),
                job(8, &tag::tag("u", 2), &["PENDING"]),
            ],
        );
        assert_eq!(existing(&s, &subs, &t), Some(7));
        assert_eq!(existing(&s, &subs, &tag::tag("u", 3)), None);
        subs.record(&tag::tag("u", 3), 9);
        assert_eq!(existing(&s, &subs, &tag::tag("u", 3)), Some(9));
        subs.record(&tag::tag("v", 1), 10);
        subs.forget_uid("u");
        assert_eq!(subs.len(), 1);
        assert_eq!(
            existing(&state(None, vec![]), &subs, &tag::tag("v", 1)),
            Some(10)
        );
    }

    fn submitted_at(secs: i64) -> SlurmJobStatus {
        let mut s = SlurmJobStatus {
            job_id: Some(7),
            phase: Phase::Submitted,
            ..Default::default()
        };
        condition::upsert(
            &mut s.conditions,
            condition::new(
                READY,
                true,
                "Submitted",
                "",
                Some(1),
                status::time(DateTime::from_timestamp(secs, 0)).unwrap(),
            ),
        );
        s
    }

    /// A SlurmJob stored with itself in `dependsOn` (before admission refused that) is an
    /// unsubmittable spec that waits for an edit, not a `WaitingForDependencies` retried forever
    /// on a dependency that can never be submitted. Nothing is sent to slurmrestd.
    #[tokio::test]
    async fn depending_on_itself_is_an_invalid_spec_not_an_endless_wait() {
        let spec: SlurmJobSpec = serde_json::from_value(serde_json::json!({
            "clusterRef": "local",
            "script": "#!/bin/sh\ntrue\n",
            "dependsOn": [{"name": "prepare"}, {"name": "train"}],
        }))
        .unwrap();
        let config = crate::slurm::ClientConfig::new("http://127.0.0.1:1").unwrap();
        let credentials = Arc::new(crate::slurm::Credentials::token("t", None).unwrap());
        let client = SlurmClient::new(config, credentials).unwrap();
        let started_at = DateTime::from_timestamp(100, 0).unwrap();
        let index = state(Some(101), vec![]);
        let submissions = Submissions::default();
        let leadership = Leadership::always();
        let env = Env {
            client: &client,
            state: &index,
            submissions: &submissions,
            started_at,
            now: DateTime::from_timestamp(200, 0).unwrap(),
            leadership: &leadership,
        };
        // `prepare` is submitted (job 5): only the self-reference stands in the way.
        let step = step_named(&spec, "train", env).await;
        let ready = condition::find(&step.status.conditions, READY).unwrap();
        assert_eq!(ready.reason, "InvalidSpec");
        assert!(
            ready
                .message
                .contains("dependsOn names the SlurmJob itself (train)"),
            "{}",
            ready.message
        );
        assert!(step.invalid);
        assert_eq!(step.retry, None, "waits for an edit");
        assert_eq!(step.status.job_id, None);
        assert_eq!(step.notices.len(), 1);
        assert_eq!(step.notices[0].reason, "InvalidSpec");
        assert!(submissions.is_empty());

        // Another SlurmJob with the same dependencies just waits for `train`, as before.
        let step = step_named(&spec, "other", env).await;
        let ready = condition::find(&step.status.conditions, READY).unwrap();
        assert_eq!(ready.reason, "WaitingForDependencies");
        assert!(!step.invalid);
    }

    /// An edit of a finished SlurmJob that cannot be submitted: the finished run goes to the
    /// history (nothing of it is lost), nothing is submitted, and the only Event is the
    /// InvalidSpec Warning — not a "Resubmitted ... running it again" that never happens.
    #[tokio::test]
    async fn an_unsubmittable_edit_of_a_finished_job_announces_no_rerun() {
        let spec: SlurmJobSpec = serde_json::from_value(serde_json::json!({
            "clusterRef": "local",
            "script": "echo no interpreter line",
        }))
        .unwrap();
        let config = crate::slurm::ClientConfig::new("http://127.0.0.1:1").unwrap();
        let credentials = Arc::new(crate::slurm::Credentials::token("t", None).unwrap());
        let client = SlurmClient::new(config, credentials).unwrap();
        let index = state(Some(101), vec![]);
        let submissions = Submissions::default();
        let leadership = Leadership::always();
        let env = Env {
            client: &client,
            state: &index,
            submissions: &submissions,
            started_at: DateTime::from_timestamp(100, 0).unwrap(),
            now: DateTime::from_timestamp(200, 0).unwrap(),
            leadership: &leadership,
        };
        let finished = SlurmJobStatus {
            phase: Phase::Completed,
            job_id: Some(41),
            exit_code: Some(0),
            observed_generation: Some(1),
            submitted_generation: Some(1),
            ..Default::default()
        };
        let target = Target {
            name: "edited",
            uid: "u",
            generation: 2,
            spec: &spec,
            status: Some(&finished),
            created: None,
        };
        let step = step(target, env, |_| None).await.unwrap();
        let reasons: Vec<_> = step.notices.iter().map(|n| n.reason).collect();
        assert_eq!(reasons, ["InvalidSpec"]);
        assert!(step.invalid);
        assert_eq!(step.status.job_id, None);
        assert_eq!(step.status.history.len(), 1);
        assert_eq!(step.status.history[0].job_id, 41);
        assert_eq!(step.status.history[0].phase, Phase::Completed);
        assert!(submissions.is_empty());
    }

    async fn step_named(spec: &SlurmJobSpec, name: &str, env: Env<'_>) -> Step {
        let target = Target {
            name,
            uid: "v",
            generation: 1,
            spec,
            status: None,
            created: None,
        };
        step(target, env, |dep: &str| {
            (dep == "prepare").then_some(Some(5))
        })
        .await
        .unwrap()
    }

    #[test]
    fn a_job_is_gone_only_after_a_sync_well_after_its_submit() {
        let s = submitted_at(1000);
        assert!(!gone(&state(None, vec![]), &s));
        assert!(
            !gone(&state(Some(1001), vec![]), &s),
            "sync may predate the submit"
        );
        assert!(!gone(&state(Some(1002), vec![]), &s));
        assert!(gone(&state(Some(1003), vec![]), &s));
        assert!(!gone(
            &state(Some(2000), vec![]),
            &SlurmJobStatus::default()
        ));

        let lost = lost(&s, 7, DateTime::from_timestamp(2000, 0).unwrap());
        assert_eq!(lost.phase, Phase::Lost);
        assert!(
            lost.state_reason
                .unwrap()
                .contains("Slurm job 7 left slurmctld")
        );
    }
}
