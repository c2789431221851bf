//! A SlurmJob's status as pure functions: what Slurm reports about the current run mirrored
//! into it ([`observe`]), the status after each outcome of a step (waiting, stalled, rejected,
//! submitted or adopted, lost), and the conditions that follow from it ([`summarize`]).
//!
//! The conditions, as `kubectl wait`, kstatus (Flux) and Argo CD read them:
//! - `Complete=True` once the run completed (every array task with exit code 0), `Failed=True`
//!   once it ended in any other way (reason: the phase: `Failed`, `Cancelled`, `TimedOut`,
//!   `NodeFail`, `Preempted`, `OutOfMemory`, `Lost`) — as for a batch/v1 Job. Both are absent
//!   while a run is pending or running (a re-run removes the previous run's).
//! - `Ready=True` while the latest spec runs or ran in Slurm and nothing went wrong: submitted
//!   (or adopted), running, or completed. `False` while it is not submitted yet, cannot be, or
//!   ended otherwise; the reason says which.
//! - `Reconciling=True` while the operator works towards a submit (waiting for the index,
//!   dependencies, accounting, the SlurmCluster); `Stalled=True` when it cannot go on until
//!   something changes (`SubmitRejected`, `InvalidSpec`, `NoAccess`, `ClusterNotFound`, ...).
//!   Both are removed when they no longer hold (kstatus' "abnormal-true" convention). A run with
//!   a job is `Stalled` only while its record cannot be read ([`RECORD_UNREADABLE`]).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::crd::condition;
use crate::crd::slurmjob::{
    ArrayTask, ArrayTasks, JobUsage, MAX_ARRAY_TASKS, PendingStatus, Phase, SlurmJobStatus,
};
use crate::slurm::reason;
use crate::slurm::types::{Job, JobBaseState, JobState};
use crate::state::index::Unreadable;

use super::{ended, phase, usage};

/// Condition: the latest spec runs or ran in Slurm and nothing went wrong (module docs).
pub const READY: &str = condition::READY;
/// Condition: the spec's latest generation is what the current run was submitted from.
pub const SPEC_APPLIED: &str = "SpecApplied";
/// Condition (batch/v1 Job's): the run completed.
pub const COMPLETE: &str = "Complete";
/// Condition (batch/v1 Job's): the run ended, and not by completing.
pub const FAILED: &str = "Failed";
/// Condition (kstatus): the operator works towards a submit.
pub const RECONCILING: &str = condition::RECONCILING;
/// Condition (kstatus): nothing happens until something changes.
pub const STALLED: &str = condition::STALLED;
/// Reason: Slurm refused the submit for a reason only a spec change fixes.
pub const SUBMIT_REJECTED: &str = "SubmitRejected";
/// Reason (`Stalled=True`): the current job's record cannot be read from slurmrestd; the
/// status is as last read ([`unreadable`]).
pub const RECORD_UNREADABLE: &str = "SlurmRecordUnreadable";
/// Why a SlurmJob's job never starts, or is not submitted: a dependee ended as its
/// dependency type rules out.
pub const DEPENDENCY_NEVER_SATISFIED: &str = "DependencyNeverSatisfied";
/// The most characters of Slurm's own message a condition or Event repeats.
pub const MAX_SLURM_MESSAGE: usize = 1024;

/// A Kubernetes time (whole seconds, as Slurm reports) from a Slurm timestamp.
pub fn time(t: Option<DateTime<Utc>>) -> Option<Time> {
    crate::crd::time::from_utc(t?)
}

/// The run fields of `status` updated from the Slurm records of its job: one record for a plain
/// job; for an array, the task records (and the meta record of tasks not started yet).
/// With no records (the job left slurmctld) the status is returned unchanged: the caller decides
/// between an accounting lookup and `Lost`.
///
/// A plain job id that slurmdbd holds more than once (reused after a controller reset) has
/// several records: the last submitted is the run, and the phase comes from it like every other
/// field (not a phase of all of them next to another record's exit code and end time).
pub fn observe(status: &SlurmJobStatus, records: &[Job]) -> SlurmJobStatus {
    // A requeued job's or task's earlier runs, which accounting lists beside the latest, are
    // not the run (a `PENDING+REQUEUED` run would keep an array `Submitted` for good).
    let records = &*phase::latest_runs(records);
    let mut next = status.clone();
    let is_array = records.iter().any(|r| r.array_job_id.is_some());
    if !is_array {
        // `max_by_key` keeps the last of equals: records in the order Slurm gave them.
        let Some(job) = records.iter().max_by_key(|r| r.submit_time) else {
            return next;
        };
        next.phase = phase::of_state(&job.state);
        next.slurm_state = job.state.to_strings();
        next.state_reason = job.state_reason.clone();
        next.nodes = job.nodes.clone();
        let ended = job.state.base.is_finished();
        next.exit_code = job
            .exit
            .as_ref()
            .and_then(|e| e.return_code)
            .filter(|_| ended);
        next.signal = job.exit.as_ref().and_then(|e| e.signal).filter(|_| ended);
        next.submit_time = time(job.submit_time);
        // A pending job's start time is Slurm's estimate: shown under `pending`.
        next.start_time = time(job.start_time.filter(|_| !pending(job)));
        // A running job reports start + time limit (or + 1 year) as its end: only an ended job has one.
        next.end_time = time(job.end_time.filter(|_| ended));
        next.array_tasks = None;
        next.pending = pending_status(job);
        if ended && let Some(usage) = job.usage.as_deref() {
            next.usage = Some(usage::of_job(usage, true));
        }
        return next;
    }
    // What the status knew of this very array: slurmctld forgets an ended task `MinJobAge`
    // after its end while the rest run on, and what it ended as must still count.
    let same_run = records
        .iter()
        .find_map(|r| r.array_job_id)
        .is_some_and(|id| status.job_id == Some(i64::from(id)));
    let memory = ended::Memory::of(status.array_tasks.as_ref().filter(|_| same_run), records);
    let Some(mut phase) = phase::of_records(records) else {
        return next;
    };
    if phase.is_terminal() {
        let endings = memory
            .ended
            .keys()
            .map(|state| phase::of_state(&JobState::from_strings(&[state])))
            .filter(|p| p.is_terminal());
        phase = phase::worst(endings.chain([phase])).unwrap_or(phase);
    }
    next.phase = phase;
    let forgotten_codes: Vec<i32> = memory.exit_codes().collect();
    let failures_unlisted = memory.failures_unlisted();
    let mut tasks = array_tasks(records, memory.forgotten_tasks);
    // Each ended state: its tasks with ids of their own, ever, and the tasks a meta record that
    // ended (an array cancelled before they started) still holds.
    for (state, ids) in &memory.ended {
        let in_meta = meta_tasks(records, state);
        tasks
            .counts
            .insert(state.clone(), ids.count().saturating_add(in_meta));
    }
    tasks.ended = ended::write(&memory.ended);
    // What accounting said a finished task used (`with_usage`, asked once per ended run) stays:
    // the records seen here carry none.
    if let Some(before) = &next.array_tasks {
        for task in tasks.tasks.iter_mut().filter(|t| t.exit_code.is_some()) {
            if task.usage.is_none() {
                task.usage = before
                    .tasks
                    .iter()
                    .find(|b| b.task_id == task.task_id && b.exit_code.is_some())
                    .and_then(|b| b.usage.clone());
            }
        }
    }
    next.array_tasks = Some(tasks);
    if let Some((summary, by_task)) = usage::of_records(records) {
        next = with_usage(next, summary, &by_task);
    }
    // The tasks still to start wait in one record (the meta record, or a requeued task's).
    next.pending = records.iter().find_map(pending_status);
    // The array as a whole: earliest submit and start (of tasks slurmctld forgot too), latest
    // end once all ended.
    let earlier = |t: Option<&Time>| t.filter(|_| same_run).and_then(crate::crd::time::to_utc);
    next.submit_time = time(
        records
            .iter()
            .filter_map(|r| r.submit_time)
            .chain(earlier(status.submit_time.as_ref()))
            .min(),
    );
    next.start_time = time(
        records
            .iter()
            .filter(|r| !pending(r))
            .filter_map(|r| r.start_time)
            .chain(earlier(status.start_time.as_ref()))
            .min(),
    );
    next.end_time = if phase.is_terminal() {
        time(records.iter().filter_map(|r| r.end_time).max())
    } else {
        None
    };
    let mut states: Vec<String> = records
        .iter()
        .map(|r| r.state.base.as_str().to_owned())
        .collect();
    states.sort();
    states.dedup();
    next.slurm_state = states;
    // The highest exit code among ended tasks tells whether any failed; the reason of a failed
    // task (or any task) explains.
    next.exit_code = records
        .iter()
        .filter(|r| r.state.base.is_finished())
        .filter_map(|r| r.exit.as_ref().and_then(|e| e.return_code))
        .chain(forgotten_codes)
        .chain(status.exit_code.filter(|_| failures_unlisted))
        .max();
    // A task a signal ended (killed, out of memory) has no exit code of its own (0): its signal
    // says why the array failed, where the exit code cannot.
    next.signal = records
        .iter()
        .filter(|r| r.state.base.is_finished())
        .filter_map(|r| r.exit.as_ref().and_then(|e| e.signal))
        .filter(|signal| *signal != 0)
        .max();
    next.state_reason = records
        .iter()
        .find(|r| phase::of_state(&r.state) == phase)
        .and_then(|r| r.state_reason.clone());
    let mut nodes: Vec<&str> = records.iter().filter_map(|r| r.nodes.as_deref()).collect();
    nodes.sort();
    nodes.dedup();
    next.nodes = if nodes.is_empty() {
        None
    } else {
        Some(nodes.join(","))
    };
    next
}

/// How many tasks the meta records among `records` (no task id of their own) hold in `state`.
fn meta_tasks(records: &[Job], state: &str) -> i32 {
    records
        .iter()
        .filter(|r| r.array_task_id.is_none() && r.state.base.as_str() == state)
        .filter_map(|r| r.array_task_string.as_deref())
        .map(count_indices)
        .fold(0, i32::saturating_add)
}

/// Whether Slurm's record is of a job (or tasks) still waiting to start.
fn pending(job: &Job) -> bool {
    job.state.base == JobBaseState::Pending
}

/// The most characters of an explained reason in a status.
const MAX_EXPLANATION: usize = 512;

/// Why `job` waits, when it does: Slurm's reason, what it means, the priority, and Slurm's
/// estimate of its start. A held job's estimate is an old one Slurm keeps (it starts only when
/// released), and a time before the submit is no estimate at all: neither is shown.
pub fn pending_status(job: &Job) -> Option<PendingStatus> {
    if !pending(job) {
        return None;
    }
    let message = match job.state_reason.as_deref() {
        None => "Slurm's scheduler has not looked at the job yet; it gives a reason on its next \
                 pass"
            .to_owned(),
        Some(reason) => {
            let explained = match reason::explain(reason) {
                Some(explanation) => reason::sentence(&explanation, MAX_EXPLANATION),
                None => format!(
                    "Slurm's reason {:?}: see https://slurm.schedmd.com/job_reason_codes.html",
                    bounded(reason::code(reason), 64)
                ),
            };
            match &job.state_description {
                Some(detail) if detail != reason => {
                    format!("{explained} (Slurm: {})", bounded(detail, 256))
                }
                _ => explained,
            }
        }
    };
    let estimate = job
        .start_time
        .filter(|_| !job.held)
        .filter(|start| job.submit_time.is_none_or(|submit| *start >= submit));
    Some(PendingStatus {
        reason: job.state_reason.as_deref().map(|r| bounded(r, 128)),
        message: Some(message),
        priority: job.priority,
        estimated_start_time: time(estimate),
    })
}

/// Counts by state for every task, and a bounded list with unfinished and failed tasks first.
fn array_tasks(records: &[Job], forgotten: Vec<ArrayTask>) -> ArrayTasks {
    let mut counts: BTreeMap<String, i32> = BTreeMap::new();
    let mut tasks: Vec<ArrayTask> = forgotten;
    for record in records {
        let state = record.state.base.as_str().to_owned();
        match record.array_task_id {
            Some(task_id) => {
                let count = counts.entry(state.clone()).or_default();
                *count = count.saturating_add(1);
                tasks.push(ArrayTask {
                    task_id: i32::try_from(task_id).unwrap_or(i32::MAX),
                    state,
                    exit_code: record
                        .exit
                        .as_ref()
                        .and_then(|e| e.return_code)
                        .filter(|_| record.state.base.is_finished()),
                    usage: None,
                });
            }
            // The meta record of tasks not started yet ("1-3%2"): count each pending task.
            None => {
                let pending = record
                    .array_task_string
                    .as_deref()
                    .map(count_indices)
                    .unwrap_or(0);
                if pending > 0 {
                    // Saturating: the expression is Slurm's text, and "0-4294967294" alone is
                    // already near i32::MAX tasks.
                    let count = counts.entry(state).or_default();
                    *count = count.saturating_add(pending);
                }
            }
        }
    }
    let rank =
        |task: &ArrayTask| match phase::of_state(&crate::slurm::types::JobState::from_strings(&[
            &task.state,
        ])) {
            Phase::Running | Phase::Submitted => 0,
            Phase::Completed => 2,
            _ => 1,
        };
    tasks.sort_by_key(|t| (rank(t), t.task_id));
    tasks.truncate(MAX_ARRAY_TASKS);
    ArrayTasks {
        counts,
        tasks,
        ended: BTreeMap::new(),
    }
}

/// How many indices an array task expression names: "1-3" → 3, "1,5,7-8" → 4, "0-15:4%2" → 4.
fn count_indices(expression: &str) -> i32 {
    let expression = expression.split('%').next().unwrap_or_default();
    expression
        .split(',')
        .map(|part| {
            let (range, step) = part.split_once(':').unwrap_or((part, "1"));
            let step: i64 = step.trim().parse().unwrap_or(1).max(1);
            match range.split_once('-') {
                Some((a, b)) => match (a.trim().parse::<i64>(), b.trim().parse::<i64>()) {
                    // Saturating: Slurm's text, not a count we trust ("0-9223372036854775807").
                    (Ok(a), Ok(b)) if b >= a => (b.saturating_sub(a) / step).saturating_add(1),
                    _ => 0,
                },
                None => i64::from(range.trim().parse::<i64>().is_ok()),
            }
        })
        .map(|n| i32::try_from(n).unwrap_or(i32::MAX))
        .fold(0i32, i32::saturating_add)
}

/// `base` (a pending run) with `Ready=False` and `Reconciling=True` saying why it is not
/// submitted yet: the operator is on it and comes back.
pub fn waiting(
    base: SlurmJobStatus,
    generation: i64,
    reason: &str,
    message: String,
    now: Time,
) -> SlurmJobStatus {
    let mut status = not_running(base, generation, reason, &message, now.clone());
    condition::remove(&mut status.conditions, STALLED);
    condition::upsert(
        &mut status.conditions,
        condition::new(RECONCILING, true, reason, message, Some(generation), now),
    );
    status
}

/// `base` (a pending run) with `Ready=False` and `Stalled=True`: it cannot be submitted until
/// something changes (the spec, or the SlurmCluster's access).
pub fn stalled(
    base: SlurmJobStatus,
    generation: i64,
    reason: &str,
    message: String,
    now: Time,
) -> SlurmJobStatus {
    let mut status = not_running(base, generation, reason, &message, now.clone());
    condition::remove(&mut status.conditions, RECONCILING);
    condition::upsert(
        &mut status.conditions,
        condition::new(STALLED, true, reason, message, Some(generation), now),
    );
    status
}

/// `base` (a pending run) once Slurm refused to submit `generation` for a reason only a spec
/// change fixes: stalled with reason [`SUBMIT_REJECTED`] and Slurm's own message (bounded),
/// recorded so that no later step (nor a restarted operator) submits that generation again.
pub fn rejected(
    base: SlurmJobStatus,
    generation: i64,
    slurm_message: &str,
    now: Time,
) -> SlurmJobStatus {
    let message = format!(
        "Slurm refused the job of generation {generation}: {}; it is not submitted again until \
         the spec changes",
        bounded(slurm_message, MAX_SLURM_MESSAGE)
    );
    let mut status = stalled(base, generation, SUBMIT_REJECTED, message, now);
    status.rejected_generation = Some(generation);
    status
}

/// `status` (of a run with a job) with `Stalled=True` while the poller cannot read that job's
/// record (`unread`): the rest of the status is as last read, and the condition says since when
/// and why. The next [`summarize`] after the record is read removes it.
pub fn unreadable(
    status: SlurmJobStatus,
    unread: Option<&Unreadable>,
    generation: i64,
    now: Time,
) -> SlurmJobStatus {
    let (Some(unread), Some(job_id)) = (unread, status.job_id) else {
        return status;
    };
    let bound = if matches!(unread.reason, "ResponseTooLarge" | "TooManyElements") {
        "; the SlurmCluster's spec.maxResponseSize, which its administrator sets, bounds what \
         the operator reads"
    } else {
        ""
    };
    let message = format!(
        "cannot read Slurm job {job_id}'s record from slurmrestd since {} ({}: {}){bound}; this \
         status is as last read, and is brought up to date once the record can be read",
        unread
            .since
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        unread.reason,
        bounded(&unread.message, MAX_SLURM_MESSAGE),
    );
    let mut status = status;
    condition::upsert(
        &mut status.conditions,
        condition::new(
            STALLED,
            true,
            RECORD_UNREADABLE,
            message,
            Some(generation),
            // Since the record could not be read: stable from one reconcile to the next (the
            // condition is made anew after `summarize`, and a new time was a status write at
            // every reconcile while it lasted).
            time(Some(unread.since)).unwrap_or(now),
        ),
    );
    status
}

/// `text` cut to at most `max` characters, `…` marking a cut.
pub fn bounded(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The part of [`waiting`] and [`stalled`] that is the same: `Ready=False`, and the generation
/// observed when no job runs (with a job, `observedGeneration` is what `lifecycle` compares
/// edits against, which only the step's own decision may move).
fn not_running(
    base: SlurmJobStatus,
    generation: i64,
    reason: &str,
    message: &str,
    now: Time,
) -> SlurmJobStatus {
    let mut status = base;
    if status.job_id.is_none() {
        status.observed_generation = Some(generation);
    }
    condition::upsert(
        &mut status.conditions,
        condition::new(READY, false, reason, message, Some(generation), now),
    );
    status
}

/// Whether `status`'s job waits on a dependency Slurm deems never satisfied: it never starts.
pub fn never_starts(status: &SlurmJobStatus) -> bool {
    status.job_id.is_some()
        && !status.phase.is_terminal()
        && status.state_reason.as_deref() == Some(DEPENDENCY_NEVER_SATISFIED)
}

/// What a submitted job that waits on a dependency Slurm deems never satisfied is told.
pub fn never_satisfied(job_id: i64) -> String {
    format!(
        "Slurm job {job_id} will never start: a job it depends on ended in a way its \
         dependency type rules out (Slurm: DependencyNeverSatisfied; the job was submitted \
         while that one ran). Delete this SlurmJob (which cancels the job) and create it again \
         once the SlurmJobs in spec.dependsOn have run as it requires"
    )
}

/// The conditions that follow from a job's phase (module docs), for a status whose run has a
/// job: `Ready`, `Complete` and `Failed` from the phase, no `Reconciling` or `Stalled` (the job
/// is Slurm's to run). Without a job (a pending run) only a previous run's `Complete` and
/// `Failed` go: the waiting or stalled state set the rest.
pub fn summarize(status: SlurmJobStatus, generation: i64, now: Time) -> SlurmJobStatus {
    let mut next = status;
    let Some(job_id) = next.job_id else {
        condition::remove(&mut next.conditions, COMPLETE);
        condition::remove(&mut next.conditions, FAILED);
        return next;
    };
    // Submitted while a dependee ran, and that dependee then ended as the dependency type rules
    // out: Slurm keeps the job pending for good (unless its admins set `kill_invalid_depend`).
    let never = never_starts(&next).then(|| never_satisfied(job_id));
    condition::remove(&mut next.conditions, RECONCILING);
    // Kept while it stays so: replaced below with its transition time, not written anew at each
    // reconcile.
    if never.is_none() {
        condition::remove(&mut next.conditions, STALLED);
    }
    let phase = next.phase;
    let observed = next.observed_generation.or(Some(generation));
    let ended = ending(&next, job_id);
    let ready = match phase {
        _ if let Some(message) = &never => {
            Some((false, DEPENDENCY_NEVER_SATISFIED, message.clone()))
        }
        // Set at the submit (`Submitted` or `Adopted`, with slurmrestd's warnings): kept. Not
        // a running or ended run's, which a requeue takes back to `Submitted`.
        // Its `observedGeneration` follows the status' (an edit applied in place, or ignored,
        // is observed): `kubectl wait --for=condition=Ready` skips a condition older than the
        // object.
        Phase::Submitted
            if condition::find(&next.conditions, READY).is_some_and(|c| {
                c.status == "True" && matches!(c.reason.as_str(), "Submitted" | "Adopted")
            }) =>
        {
            if let Some(ready) = next.conditions.iter_mut().find(|c| c.type_ == READY) {
                ready.observed_generation = observed;
            }
            None
        }
        Phase::Pending | Phase::Submitted => Some((
            true,
            "Submitted",
            format!("Slurm job {job_id} is waiting to start"),
        )),
        Phase::Running => Some((
            true,
            "Running",
            match &next.nodes {
                Some(nodes) => format!("Slurm job {job_id} is running on {nodes}"),
                None => format!("Slurm job {job_id} is running"),
            },
        )),
        Phase::Completed => Some((true, "Completed", ended.clone())),
        other => Some((false, other.as_str(), ended.clone())),
    };
    if let Some((ok, reason, message)) = ready {
        condition::upsert(
            &mut next.conditions,
            condition::new(READY, ok, reason, message, observed, now.clone()),
        );
    }
    if let Some(message) = never {
        condition::upsert(
            &mut next.conditions,
            condition::new(
                STALLED,
                true,
                DEPENDENCY_NEVER_SATISFIED,
                message,
                observed,
                now.clone(),
            ),
        );
    }
    let outcome = |conditions: &mut Vec<_>, type_: &str, holds: bool| {
        if holds {
            condition::upsert(
                conditions,
                condition::new(
                    type_,
                    true,
                    phase.as_str(),
                    ended.clone(),
                    observed,
                    now.clone(),
                ),
            );
        } else {
            condition::remove(conditions, type_);
        }
    };
    outcome(&mut next.conditions, COMPLETE, phase == Phase::Completed);
    outcome(
        &mut next.conditions,
        FAILED,
        phase.is_terminal() && phase != Phase::Completed,
    );
    next
}

/// "Slurm job 7 ended Failed, exit code 3: NonZeroExitCode".
fn ending(status: &SlurmJobStatus, job_id: i64) -> String {
    let exit = status
        .exit_code
        .map(|c| format!(", exit code {c}"))
        .unwrap_or_default();
    let signal = status
        .signal
        .filter(|s| *s != 0)
        .map(|s| format!(", signal {s}"))
        .unwrap_or_default();
    let reason = status
        .state_reason
        .as_deref()
        .filter(|r| !r.is_empty() && *r != "None")
        .map(|r| format!(": {}", bounded(r, MAX_SLURM_MESSAGE)))
        .unwrap_or_default();
    format!(
        "Slurm job {job_id} ended {}{exit}{signal}{reason}",
        status.phase
    )
}

/// `base` once Slurm job `job_id` runs `generation`: `Ready` (`reason`: `Submitted` or `Adopted`,
/// with `message`) and `SpecApplied`, then whatever the index already shows of the job.
pub fn submitted(
    base: SlurmJobStatus,
    job_id: u32,
    generation: i64,
    (reason, message): (&str, String),
    now: Time,
    records: &[Job],
) -> SlurmJobStatus {
    let mut next = base;
    if next.job_id != Some(i64::from(job_id)) {
        // An earlier job's tasks are not this one's.
        next.array_tasks = None;
    }
    next.phase = Phase::Submitted;
    next.job_id = Some(i64::from(job_id));
    next.submitted_generation = Some(generation);
    next.observed_generation = Some(generation);
    next.rejected_generation = None;
    // The evidence clock for `Lost` starts with this job, not with an earlier run's.
    next.tracked_since = Some(now.clone());
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
    observe(&next, records)
}

/// How long after its submit a waiting job's details alone ([`details_due`]) are written.
pub const DETAILS_AFTER: chrono::TimeDelta = chrono::TimeDelta::seconds(5);

/// When `next` differs from `current` only in the details of a job waiting to start (Slurm's
/// state words and reason, its submit time, `pending`) and the job was submitted less than
/// [`DETAILS_AFTER`] ago: how long until they are worth a write of their own. `None`: write now
/// (a transition, or details of a job that has waited a while).
pub fn details_due(
    current: &SlurmJobStatus,
    next: &SlurmJobStatus,
    now: DateTime<Utc>,
) -> Option<std::time::Duration> {
    let without_details = |s: &SlurmJobStatus| SlurmJobStatus {
        slurm_state: Vec::new(),
        state_reason: None,
        submit_time: None,
        pending: None,
        ..s.clone()
    };
    if next.phase != Phase::Submitted || without_details(current) != without_details(next) {
        return None;
    }
    let since = next
        .tracked_since
        .as_ref()
        .and_then(crate::crd::time::to_utc)?;
    (since + DETAILS_AFTER - now)
        .to_std()
        .ok()
        .filter(|left| !left.is_zero())
}

/// Condition (batch/v1 Job's): the job is held in Slurm, or `spec.suspend` asks for a hold
/// Slurm does not give a job that has started.
pub const SUSPENDED: &str = "Suspended";

/// `status` with its `Suspended` condition: `True` while Slurm holds the job (reason: Slurm's,
/// `JobHeldUser` or `JobHeldAdmin`, else `Held` for priority 0 under another reason); `False`
/// with reason `JobStarted` while `suspend` (the spec's) asks for a hold of a job that already
/// runs; absent otherwise. The message says what releases the hold: only an edit that changes
/// the spec sends a release (`edit`), so a hold the spec did not ask for (`scontrol hold`,
/// `scontrol requeuehold`) with `suspend` already false needs one that sets it to true and back.
pub fn suspension(status: SlurmJobStatus, suspend: Option<bool>, now: Time) -> SlurmJobStatus {
    let mut next = status;
    let job = next.job_id.unwrap_or_default();
    let held = next.pending.as_ref().and_then(|p| {
        let reason = p.reason.as_deref().map(reason::code);
        match reason {
            Some(code @ ("JobHeldUser" | "JobHeldAdmin")) => Some(code.to_owned()),
            _ if p.priority == Some(0) => Some("Held".to_owned()),
            _ => None,
        }
    });
    let observed = next.observed_generation;
    let wanted = match held {
        Some(reason) => {
            let message = match suspend {
                _ if reason == "JobHeldAdmin" => format!(
                    "Slurm job {job} is held by a Slurm administrator; only they can release it"
                ),
                Some(true) => format!(
                    "Slurm job {job} is held, as spec.suspend asks: to start it, set \
                     spec.suspend to false"
                ),
                None => format!(
                    "Slurm job {job} is held in Slurm, not by spec.suspend (e.g. `scontrol \
                     hold` or `scontrol requeuehold`): to start it, set spec.suspend to false, \
                     or run `scontrol release {job}` as the job's Slurm user"
                ),
                Some(false) => format!(
                    "Slurm job {job} is held in Slurm, not by spec.suspend (e.g. `scontrol \
                     hold` or `scontrol requeuehold`): to start it, as spec.suspend is false \
                     already, set it to true and then back to false (an edit sends the \
                     release), or run `scontrol release {job}` as the job's Slurm user"
                ),
            };
            Some((true, reason, message))
        }
        None if suspend == Some(true) && next.phase == Phase::Running => Some((
            false,
            "JobStarted".to_owned(),
            format!(
                "spec.suspend holds only a job that has not started: Slurm lets only its \
                 administrators suspend a running one, so Slurm job {job} runs on (deleting \
                 the SlurmJob cancels it)"
            ),
        )),
        None => None,
    };
    match wanted {
        Some((ok, reason, message)) => {
            condition::upsert(
                &mut next.conditions,
                condition::new(SUSPENDED, ok, &reason, message, observed, now),
            );
        }
        None => {
            condition::remove(&mut next.conditions, SUSPENDED);
        }
    }
    next
}

/// `status` with the usage of its ended job: the whole run's, and each listed array task's.
pub fn with_usage(
    status: SlurmJobStatus,
    summary: JobUsage,
    by_task: &BTreeMap<u32, JobUsage>,
) -> SlurmJobStatus {
    let mut next = status;
    if let Some(tasks) = next.array_tasks.as_mut() {
        for task in &mut tasks.tasks {
            task.usage = u32::try_from(task.task_id)
                .ok()
                .and_then(|id| by_task.get(&id).cloned());
        }
    }
    next.usage = Some(summary);
    next
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
    next.end_time = time(Some(now));
    next.pending = None;
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::types::{ExitStatus, JobState};

    fn job(states: &[&str]) -> Job {
        Job {
            job_id: 7,
            name: "n".into(),
            state: JobState::from_strings(states),
            submit_time: DateTime::from_timestamp(1_000, 0),
            ..Job::bare()
        }
    }

    fn exit(code: Option<i32>, signal: Option<i32>) -> Option<ExitStatus> {
        Some(ExitStatus {
            return_code: code,
            signal,
            signal_name: None,
            status: vec![],
        })
    }

    /// Task `id` of array 7, in `states`, with exit code `code`.
    fn array_task(id: u32, states: &[&str], code: Option<i32>) -> Job {
        Job {
            job_id: 7 + id,
            array_job_id: Some(7),
            array_task_id: Some(id),
            exit: exit(code, None),
            ..job(states)
        }
    }

    #[test]
    fn plain_job_lifecycle() {
        let base = SlurmJobStatus {
            job_id: Some(7),
            phase: Phase::Submitted,
            ..Default::default()
        };
        let mut pending = job(&["PENDING"]);
        pending.state_reason = Some("Resources".into());
        let s = observe(&base, &[pending]);
        assert_eq!(s.phase, Phase::Submitted);
        assert_eq!(s.state_reason.as_deref(), Some("Resources"));
        assert_eq!(s.slurm_state, vec!["PENDING"]);

        let mut running = job(&["RUNNING"]);
        running.nodes = Some("n1".into());
        running.start_time = DateTime::from_timestamp(1_001, 0);
        running.end_time = DateTime::from_timestamp(1_001 + 365 * 86_400, 0);
        running.exit = exit(Some(0), None);
        let s = observe(&s, &[running]);
        assert_eq!(s.phase, Phase::Running);
        assert_eq!(s.nodes.as_deref(), Some("n1"));
        assert_eq!(s.end_time, None, "a running job has no end time");
        assert_eq!(s.exit_code, None, "nor an exit code");
        assert_eq!(s.state_reason, None);

        let mut failed = job(&["FAILED"]);
        failed.state_reason = Some("NonZeroExitCode".into());
        failed.exit = exit(Some(3), None);
        failed.start_time = DateTime::from_timestamp(1_001, 0);
        failed.end_time = DateTime::from_timestamp(1_005, 0);
        let s = observe(&s, &[failed]);
        assert_eq!(s.phase, Phase::Failed);
        assert_eq!(s.exit_code, Some(3));
        assert_eq!(s.signal, None);
        assert_eq!(s.end_time, time(DateTime::from_timestamp(1_005, 0)));

        let mut cancelled = job(&["CANCELLED"]);
        cancelled.exit = exit(None, Some(15));
        let s = observe(&base, &[cancelled]);
        assert_eq!(
            (s.phase, s.exit_code, s.signal),
            (Phase::Cancelled, None, Some(15))
        );
    }

    /// Found by fuzzing (fuzz/regressions/): two records of one plain job id, one ended and
    /// one not, gave a phase from both (Submitted) next to the ended one's exit code and end.
    #[test]
    fn a_plain_job_with_several_records_is_its_last_submitted_run() {
        let mut old = job(&["TIMEOUT"]);
        old.exit = exit(Some(0), Some(9));
        old.end_time = DateTime::from_timestamp(2_000, 0);
        let mut current = job(&["PENDING"]);
        current.submit_time = DateTime::from_timestamp(3_000, 0);
        for records in [
            [old.clone(), current.clone()],
            [current.clone(), old.clone()],
        ] {
            let s = observe(&SlurmJobStatus::default(), &records);
            assert_eq!(s.phase, Phase::Submitted, "{records:?}");
            assert_eq!(s.slurm_state, vec!["PENDING"]);
            assert_eq!((s.exit_code, s.signal, s.end_time), (None, None, None));
            assert_eq!(s.submit_time, time(current.submit_time));
        }
        // Equal submit times (or none): the last record Slurm listed.
        let mut ended = job(&["COMPLETED"]);
        ended.exit = exit(Some(0), None);
        let s = observe(&SlurmJobStatus::default(), &[job(&["RUNNING"]), ended]);
        assert_eq!((s.phase, s.exit_code), (Phase::Completed, Some(0)));
    }

    fn at(secs: i64) -> Time {
        time(DateTime::from_timestamp(secs, 0)).unwrap()
    }

    /// (type, status, reason) of every condition, sorted by type.
    fn conditions(status: &SlurmJobStatus) -> Vec<(String, String, String)> {
        let mut all: Vec<_> = status
            .conditions
            .iter()
            .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
            .collect();
        all.sort();
        all
    }

    fn c(type_: &str, status: &str, reason: &str) -> (String, String, String) {
        (type_.into(), status.into(), reason.into())
    }

    /// The conditions of every phase (batch/v1 Job's `Complete`/`Failed`, `Ready`, kstatus'),
    /// for a plain job and an array.
    #[test]
    fn conditions_per_phase() {
        let submitted = submitted(
            SlurmJobStatus::default(),
            7,
            1,
            ("Submitted", "submitted as Slurm job 7".into()),
            at(10),
            &[],
        );
        let with = |phase: Phase| {
            let mut s = submitted.clone();
            s.phase = phase;
            s.exit_code = phase
                .is_terminal()
                .then_some(i32::from(phase != Phase::Completed));
            summarize(s, 1, at(20))
        };
        let spec_applied = c(SPEC_APPLIED, "True", "Submitted");
        type Expected<'a> = &'a [(&'a str, &'a str, &'a str)];
        let table: &[(Phase, Expected<'_>)] = &[
            (Phase::Submitted, &[(READY, "True", "Submitted")]),
            (Phase::Running, &[(READY, "True", "Running")]),
            (
                Phase::Completed,
                &[
                    (COMPLETE, "True", "Completed"),
                    (READY, "True", "Completed"),
                ],
            ),
            (
                Phase::Failed,
                &[(FAILED, "True", "Failed"), (READY, "False", "Failed")],
            ),
            (
                Phase::Cancelled,
                &[(FAILED, "True", "Cancelled"), (READY, "False", "Cancelled")],
            ),
            (
                Phase::TimedOut,
                &[(FAILED, "True", "TimedOut"), (READY, "False", "TimedOut")],
            ),
            (
                Phase::NodeFail,
                &[(FAILED, "True", "NodeFail"), (READY, "False", "NodeFail")],
            ),
            (
                Phase::Preempted,
                &[(FAILED, "True", "Preempted"), (READY, "False", "Preempted")],
            ),
            (
                Phase::OutOfMemory,
                &[
                    (FAILED, "True", "OutOfMemory"),
                    (READY, "False", "OutOfMemory"),
                ],
            ),
            (
                Phase::Lost,
                &[(FAILED, "True", "Lost"), (READY, "False", "Lost")],
            ),
        ];
        for (phase, want) in table {
            let s = with(*phase);
            let mut want: Vec<_> = want.iter().map(|(t, s, r)| c(t, s, r)).collect();
            want.push(spec_applied.clone());
            want.sort();
            assert_eq!(conditions(&s), want, "{phase}");
            for cond in &s.conditions {
                assert_eq!(cond.observed_generation, Some(1), "{phase} {}", cond.type_);
            }
        }
        let failed = with(Phase::Failed);
        assert_eq!(
            condition::find(&failed.conditions, FAILED).unwrap().message,
            "Slurm job 7 ended Failed, exit code 1"
        );

        // An array is Complete only when every task completed; one failed task fails it.
        let task = |id: u32, states: &[&str], code: i32| {
            let mut j = job(states);
            j.job_id = 7 + id;
            j.array_job_id = Some(7);
            j.array_task_id = Some(id);
            j.exit = exit(Some(code), None);
            j
        };
        let all_done = observe(
            &submitted,
            &[task(0, &["COMPLETED"], 0), task(1, &["COMPLETED"], 0)],
        );
        let s = summarize(all_done, 1, at(20));
        assert!(condition::is_true(&s.conditions, COMPLETE));
        assert!(condition::find(&s.conditions, FAILED).is_none());
        let one_failed = observe(
            &submitted,
            &[task(0, &["COMPLETED"], 0), task(1, &["FAILED"], 2)],
        );
        let s = summarize(one_failed, 1, at(20));
        assert!(condition::find(&s.conditions, COMPLETE).is_none());
        assert_eq!(
            condition::find(&s.conditions, FAILED).unwrap().reason,
            "Failed"
        );
        let running = observe(
            &submitted,
            &[task(0, &["COMPLETED"], 0), task(1, &["RUNNING"], 0)],
        );
        let s = summarize(running, 1, at(20));
        assert!(condition::find(&s.conditions, COMPLETE).is_none());
        assert!(condition::find(&s.conditions, FAILED).is_none());
        assert_eq!(
            condition::find(&s.conditions, READY).unwrap().reason,
            "Running"
        );

        // Requeued (running or ended, then back to waiting): Ready says it waits again; the
        // submit's own words stay only until the job first runs.
        for earlier in [Phase::Running, Phase::Completed] {
            let mut requeued = with(earlier);
            requeued.phase = Phase::Submitted;
            let s = summarize(requeued, 1, at(30));
            let ready = condition::find(&s.conditions, READY).unwrap();
            assert_eq!(
                (ready.reason.as_str(), ready.message.as_str()),
                ("Submitted", "Slurm job 7 is waiting to start"),
                "{earlier}"
            );
        }
        let kept = summarize(submitted.clone(), 1, at(30));
        assert_eq!(
            condition::find(&kept.conditions, READY).unwrap().message,
            "submitted as Slurm job 7"
        );
        // Slurm deems a dependency never satisfied: not Ready, Stalled (it never starts); once
        // Slurm says otherwise (an admin's `scontrol update Dependency=`), waiting again.
        let mut never = submitted.clone();
        never.state_reason = Some(DEPENDENCY_NEVER_SATISFIED.into());
        let s = summarize(never, 1, at(35));
        assert_eq!(
            conditions(&s),
            [
                (
                    "Ready".into(),
                    "False".into(),
                    DEPENDENCY_NEVER_SATISFIED.into()
                ),
                ("SpecApplied".into(), "True".into(), "Submitted".into()),
                (
                    "Stalled".into(),
                    "True".into(),
                    DEPENDENCY_NEVER_SATISFIED.into()
                ),
            ]
        );
        // Summarized again later: nothing changes (no status write at every reconcile).
        assert_eq!(summarize(s.clone(), 1, at(90)), s);
        let mut again = s.clone();
        again.state_reason = Some("Dependency".into());
        let s = summarize(again, 1, at(36));
        assert_eq!(
            conditions(&s),
            [
                ("Ready".into(), "True".into(), "Submitted".into()),
                ("SpecApplied".into(), "True".into(), "Submitted".into()),
            ]
        );
        // An edit observed while the job waits (applied in place, or ignored): the submit's
        // words stay, with the status' generation, and no new transition.
        let mut edited = submitted.clone();
        edited.observed_generation = Some(2);
        let s = summarize(edited, 2, at(40));
        let ready = condition::find(&s.conditions, READY).unwrap();
        let before = condition::find(&submitted.conditions, READY).unwrap();
        assert_eq!(
            (ready.message.as_str(), ready.observed_generation),
            ("submitted as Slurm job 7", Some(2))
        );
        assert_eq!(ready.last_transition_time, before.last_transition_time);
    }

    /// Not submitted yet: `Reconciling` while the operator waits, `Stalled` when only a change
    /// helps; a re-run drops the previous run's `Complete`; `observedGeneration` follows.
    #[test]
    fn pending_runs_are_reconciling_or_stalled() {
        let waiting = waiting(
            SlurmJobStatus::default(),
            1,
            "WaitingForDependencies",
            "waiting".into(),
            at(10),
        );
        let waiting = summarize(waiting, 1, at(10));
        assert_eq!(
            conditions(&waiting),
            vec![
                c(READY, "False", "WaitingForDependencies"),
                c(RECONCILING, "True", "WaitingForDependencies"),
            ]
        );
        assert_eq!(waiting.observed_generation, Some(1));

        let rejected = super::rejected(waiting, 1, &"x".repeat(5000), at(11));
        assert_eq!(
            conditions(&rejected),
            vec![
                c(READY, "False", SUBMIT_REJECTED),
                c(STALLED, "True", SUBMIT_REJECTED),
            ]
        );
        assert_eq!(rejected.rejected_generation, Some(1));
        let message = &condition::find(&rejected.conditions, STALLED)
            .unwrap()
            .message;
        assert!(
            message.len() < MAX_SLURM_MESSAGE + 200,
            "bounded: {}",
            message.len()
        );
        assert!(message.contains("x…"), "{message}");

        // The next generation is submitted: the stall and the record of it go.
        let resubmitted = summarize(
            submitted(rejected, 9, 2, ("Submitted", String::new()), at(12), &[]),
            2,
            at(12),
        );
        assert_eq!(resubmitted.rejected_generation, None);
        assert_eq!(
            conditions(&resubmitted),
            vec![
                c(READY, "True", "Submitted"),
                c(SPEC_APPLIED, "True", "Submitted"),
            ]
        );

        // A completed run edited: the new run waits; `Complete` belongs to the history.
        let mut done = resubmitted;
        done.phase = Phase::Completed;
        let done = summarize(done, 2, at(13));
        assert!(condition::is_true(&done.conditions, COMPLETE));
        let rerun = super::waiting(
            crate::controller::slurmjob::lifecycle::start_new_run(&done),
            3,
            "WaitingForSlurmIndex",
            "w".into(),
            at(14),
        );
        let rerun = summarize(rerun, 3, at(14));
        assert!(condition::find(&rerun.conditions, COMPLETE).is_none());
        assert!(condition::is_true(&rerun.conditions, RECONCILING));
        assert_eq!(rerun.observed_generation, Some(3));
    }

    #[test]
    fn vanished_job_leaves_status_for_the_caller() {
        let base = SlurmJobStatus {
            job_id: Some(7),
            phase: Phase::Running,
            ..Default::default()
        };
        assert_eq!(observe(&base, &[]), base);
    }

    /// Accounting lists every run of a requeued task (Slurm 24.11 showed a task requeued once
    /// as `PENDING+REQUEUED`, then `COMPLETED`, submitted later): the latest run is the task's,
    /// whatever the earlier ended as, and the task is counted once.
    #[test]
    fn an_array_task_requeued_counts_by_its_latest_run() {
        let base = SlurmJobStatus {
            job_id: Some(7),
            phase: Phase::Submitted,
            ..Default::default()
        };
        let run = |id: u32, states: &[&str], code: Option<i32>, submitted: i64| Job {
            submit_time: DateTime::from_timestamp(submitted, 0),
            ..array_task(id, states, code)
        };
        for earlier in [&["PENDING", "REQUEUED"][..], &["NODE_FAIL"], &["PREEMPTED"]] {
            let records = [
                run(0, &["COMPLETED"], Some(0), 1_000),
                run(1, earlier, None, 1_000),
                run(1, &["COMPLETED"], Some(0), 1_500),
            ];
            let s = observe(&base, &records);
            assert_eq!(s.phase, Phase::Completed, "{earlier:?}");
            let tasks = s.array_tasks.as_ref().unwrap();
            assert_eq!(
                tasks.counts,
                BTreeMap::from([("COMPLETED".into(), 2)]),
                "{earlier:?}"
            );
            assert_eq!(tasks.tasks.len(), 2, "{earlier:?}");
            // Listed the other way round, the same.
            let mut reversed = records.clone();
            reversed.reverse();
            assert_eq!(
                observe(&base, &reversed).phase,
                Phase::Completed,
                "{earlier:?}"
            );
        }
        // An earlier run that failed does not fail the task its later run completed.
        let records = [
            run(0, &["COMPLETED"], Some(0), 1_000),
            run(1, &["FAILED"], Some(3), 1_000),
            run(1, &["COMPLETED"], Some(0), 1_500),
        ];
        assert_eq!(observe(&base, &records).phase, Phase::Completed);
    }

    #[test]
    fn array_of_four_with_one_failing_task() {
        let base = SlurmJobStatus {
            job_id: Some(7),
            phase: Phase::Submitted,
            ..Default::default()
        };
        let task = |id: u32, states: &[&str], code: Option<i32>| Job {
            nodes: Some(format!("n{}", id % 2 + 1)),
            ..array_task(id, states, code)
        };
        let mut meta = job(&["PENDING"]);
        meta.array_job_id = Some(7);
        meta.array_task_string = Some("2-3".into());
        let running = [
            task(0, &["COMPLETED"], Some(0)),
            task(1, &["RUNNING"], Some(0)),
            meta,
        ];
        let s = observe(&base, &running);
        assert_eq!(s.phase, Phase::Running);
        let tasks = s.array_tasks.as_ref().unwrap();
        assert_eq!(
            tasks.counts,
            BTreeMap::from([
                ("COMPLETED".into(), 1),
                ("PENDING".into(), 2),
                ("RUNNING".into(), 1)
            ])
        );
        assert_eq!(tasks.tasks[0].task_id, 1, "unfinished tasks first");

        let done = [
            task(0, &["COMPLETED"], Some(0)),
            task(1, &["COMPLETED"], Some(0)),
            task(2, &["FAILED"], Some(1)),
            task(3, &["COMPLETED"], Some(0)),
        ];
        let s = observe(&s, &done);
        assert_eq!(s.phase, Phase::Failed);
        assert_eq!(s.exit_code, Some(1));
        assert_eq!(s.signal, None, "no task was signalled");
        // A task a signal ended: exit code 0 of its own, the signal says why the array failed.
        let killed = [
            task(0, &["COMPLETED"], Some(0)),
            Job {
                exit: exit(Some(0), Some(9)),
                ..task(1, &["FAILED"], Some(0))
            },
        ];
        let k = observe(&base, &killed);
        assert_eq!(
            (k.phase, k.exit_code, k.signal),
            (Phase::Failed, Some(0), Some(9))
        );
        let tasks = s.array_tasks.as_ref().unwrap();
        assert_eq!(
            tasks.counts,
            BTreeMap::from([("COMPLETED".into(), 3), ("FAILED".into(), 1)])
        );
        assert_eq!(
            tasks.tasks[0],
            ArrayTask {
                task_id: 2,
                state: "FAILED".into(),
                exit_code: Some(1),
                usage: None,
            }
        );
        assert_eq!(s.nodes.as_deref(), Some("n1,n2"));
        assert_eq!(s.slurm_state, vec!["COMPLETED", "FAILED"]);

        // Accounting's usage of each task (asked once, at the end) stays through the next
        // observation of the same records, which carry none; a task that runs again drops its.
        let used = |cpus: u32| crate::crd::slurmjob::JobUsage {
            allocated_tres: Some(format!("cpu={cpus}")),
            ..Default::default()
        };
        let by_task = BTreeMap::from([(0, used(10)), (2, used(20))]);
        let with = with_usage(s, used(30), &by_task);
        let again = observe(&with, &done);
        let usage_of = |s: &SlurmJobStatus, id: i32| {
            let tasks = s.array_tasks.as_ref().unwrap();
            tasks
                .tasks
                .iter()
                .find(|t| t.task_id == id)
                .unwrap()
                .usage
                .clone()
        };
        assert_eq!(usage_of(&again, 0), Some(used(10)));
        assert_eq!(usage_of(&again, 2), Some(used(20)));
        assert_eq!(usage_of(&again, 1), None);
        let requeued = [
            task(0, &["PENDING"], None),
            task(1, &["COMPLETED"], Some(0)),
            task(2, &["FAILED"], Some(1)),
            task(3, &["COMPLETED"], Some(0)),
        ];
        let s = observe(&again, &requeued);
        assert_eq!(usage_of(&s, 0), None);
        assert_eq!(usage_of(&s, 2), Some(used(20)));
    }

    /// slurmctld forgets an ended task `MinJobAge` after its end while the array runs on
    /// (observed on Slurm 24.11: `--array=0-1%1`, task 0 exiting 3 at once, was "not found" 36 s
    /// later while task 1 ran). Its ending still counts: the phase, the exit code, the counts,
    /// the task list and the start; a task listed again (requeued) no longer counts as ended.
    #[test]
    fn an_array_keeps_the_endings_of_tasks_slurmctld_forgot() {
        let base = SlurmJobStatus {
            job_id: Some(7),
            phase: Phase::Submitted,
            ..Default::default()
        };
        let task = |id: u32, states: &[&str], code: Option<i32>| Job {
            start_time: DateTime::from_timestamp(2_000 + i64::from(id), 0),
            end_time: DateTime::from_timestamp(3_000 + i64::from(id), 0),
            ..array_task(id, states, code)
        };
        let meta = |pending: &str| {
            let mut m = job(&["PENDING"]);
            m.array_job_id = Some(7);
            m.array_task_string = Some(pending.into());
            m
        };
        let s = observe(
            &base,
            &[
                task(0, &["FAILED"], Some(3)),
                task(1, &["RUNNING"], None),
                meta("2-3"),
            ],
        );
        assert_eq!(s.phase, Phase::Running);
        assert_eq!(
            s.array_tasks.as_ref().unwrap().ended,
            BTreeMap::from([("FAILED".into(), "0".into())])
        );
        // Task 0 is forgotten; task 1 ended.
        let s = observe(
            &s,
            &[
                task(1, &["COMPLETED"], Some(0)),
                task(2, &["RUNNING"], None),
                meta("3"),
            ],
        );
        let tasks = s.array_tasks.as_ref().unwrap();
        assert_eq!(
            tasks.counts,
            BTreeMap::from([
                ("COMPLETED".into(), 1),
                ("FAILED".into(), 1),
                ("PENDING".into(), 1),
                ("RUNNING".into(), 1)
            ])
        );
        assert!(
            tasks
                .tasks
                .iter()
                .any(|t| t.task_id == 0 && t.exit_code == Some(3)),
            "{tasks:?}"
        );
        // Only the last task is listed, the meta record that became it.
        let mut last = task(3, &["COMPLETED"], Some(0));
        last.job_id = 7;
        let s = observe(&s, &[task(2, &["COMPLETED"], Some(0)), last.clone()]);
        let s = observe(&s, &[last]);
        assert_eq!(s.phase, Phase::Failed, "task 0 failed");
        assert_eq!(s.exit_code, Some(3));
        let tasks = s.array_tasks.as_ref().unwrap();
        assert_eq!(
            tasks.counts,
            BTreeMap::from([("COMPLETED".into(), 3), ("FAILED".into(), 1)])
        );
        assert_eq!(
            tasks.ended,
            BTreeMap::from([
                ("COMPLETED".into(), "1-3".into()),
                ("FAILED".into(), "0".into())
            ])
        );
        assert_eq!(tasks.tasks[0].task_id, 0, "the failed task first");
        assert_eq!(s.start_time, time(DateTime::from_timestamp(2_000, 0)));
        assert_eq!(s.end_time, time(DateTime::from_timestamp(3_003, 0)));

        // A forgotten task that runs again (requeued) is what its record says, and its earlier
        // exit code no longer counts.
        let s = observe(&s, &[task(0, &["PENDING"], None)]);
        assert_eq!(s.phase, Phase::Submitted);
        assert_eq!(
            s.array_tasks.as_ref().unwrap().ended,
            BTreeMap::from([("COMPLETED".into(), "1-3".into())])
        );
        assert_eq!(s.exit_code, Some(0), "{s:?}");
        let again = observe(&s, &[task(0, &["COMPLETED"], Some(0))]);
        assert_eq!((again.phase, again.exit_code), (Phase::Completed, Some(0)));

        // Cancelled while tasks 2-3 waited in the meta record: they count as cancelled too.
        let mut cancelled_meta = meta("2-3");
        cancelled_meta.state = JobState::from_strings(&["CANCELLED"]);
        let s = observe(
            &base,
            &[
                task(0, &["COMPLETED"], Some(0)),
                task(1, &["CANCELLED"], None),
                cancelled_meta,
            ],
        );
        assert_eq!(s.phase, Phase::Cancelled);
        assert_eq!(
            s.array_tasks.as_ref().unwrap().counts,
            BTreeMap::from([("CANCELLED".into(), 3), ("COMPLETED".into(), 1)])
        );
        // Another job's status keeps nothing of this one's tasks.
        let other = SlurmJobStatus {
            job_id: Some(99),
            ..s.clone()
        };
        let s = observe(&other, &[task(1, &["COMPLETED"], Some(0))]);
        assert_eq!(s.phase, Phase::Completed);
        assert_eq!(
            s.array_tasks.as_ref().unwrap().counts,
            BTreeMap::from([("COMPLETED".into(), 1)])
        );
    }

    /// With more unfinished tasks than the task list holds, forgotten tasks drop from the list:
    /// a forgotten failure's exit code is then the status's earlier one, a forgotten completion's
    /// a 0.
    #[test]
    fn a_large_array_keeps_forgotten_exit_codes_beyond_its_task_list() {
        let base = SlurmJobStatus {
            job_id: Some(7),
            phase: Phase::Submitted,
            ..Default::default()
        };
        let running: Vec<Job> = (10..10 + u32::try_from(MAX_ARRAY_TASKS).unwrap())
            .map(|id| array_task(id, &["RUNNING"], None))
            .collect();
        let with =
            |ended: Vec<Job>| -> Vec<Job> { ended.into_iter().chain(running.clone()).collect() };
        let s = observe(
            &base,
            &with(vec![
                array_task(0, &["FAILED"], Some(3)),
                array_task(1, &["COMPLETED"], Some(0)),
            ]),
        );
        assert_eq!(s.exit_code, Some(3));
        let s = observe(&s, &running);
        assert_eq!(s.phase, Phase::Running);
        assert_eq!(s.exit_code, Some(3), "{:?}", s.array_tasks);
        let s = observe(&base, &with(vec![array_task(1, &["COMPLETED"], Some(0))]));
        let s = observe(&s, &running);
        assert_eq!(s.exit_code, Some(0), "{:?}", s.array_tasks);
    }

    #[test]
    fn array_task_expressions_are_counted() {
        for (expr, n) in [
            ("1-3", 3),
            ("1,5,7-8", 4),
            ("0-15:4%2", 4),
            ("4", 1),
            ("", 0),
            ("x", 0),
            ("5-1", 0),
            // Overflowed i64 (a panic in debug builds): seen reading the code for the fuzz
            // harness, then reproduced through it (fuzz/regressions/state_mapping/).
            ("0-9223372036854775807", i32::MAX),
            ("0-9223372036854775807:1,1", i32::MAX),
        ] {
            assert_eq!(count_indices(expr), n, "{expr}");
        }
    }

    /// Found by fuzzing (fuzz/regressions/state_mapping/array-task-count-overflow): a meta
    /// record naming i32::MAX pending tasks next to a task record in the same state overflowed
    /// the count (a panic in debug builds, a negative count in release ones).
    #[test]
    fn huge_array_task_counts_saturate() {
        let mut meta = job(&["PENDING"]);
        meta.array_job_id = Some(7);
        meta.array_task_string = Some("0-4294967294".into());
        let mut task = job(&["PENDING"]);
        task.array_job_id = Some(7);
        task.array_task_id = Some(0);
        for records in [[meta.clone(), task.clone()], [task, meta.clone()]] {
            let tasks = array_tasks(&records, Vec::new());
            assert_eq!(tasks.counts.get("PENDING"), Some(&i32::MAX), "{records:?}");
        }
        let tasks = array_tasks(&[meta.clone(), meta], Vec::new());
        assert_eq!(tasks.counts.get("PENDING"), Some(&i32::MAX));
    }

    #[test]
    fn array_task_list_is_bounded() {
        let records: Vec<Job> = (0..250)
            .map(|i| {
                let mut j = job(&["COMPLETED"]);
                j.array_job_id = Some(7);
                j.array_task_id = Some(i);
                j
            })
            .collect();
        let tasks = array_tasks(&records, Vec::new());
        assert_eq!(tasks.tasks.len(), MAX_ARRAY_TASKS);
        assert_eq!(tasks.counts.get("COMPLETED"), Some(&250));
    }

    fn pending_job(reason: Option<&str>) -> Job {
        Job {
            state_reason: reason.map(str::to_owned),
            priority: Some(4_294_901_758),
            start_time: DateTime::from_timestamp(5_000, 0),
            ..job(&["PENDING"])
        }
    }

    #[test]
    fn why_a_job_waits() {
        // Waiting for resources: Slurm's code, our words for it, the priority, the estimate.
        let p = pending_status(&pending_job(Some("Resources"))).unwrap();
        assert_eq!(p.reason.as_deref(), Some("Resources"));
        let want = reason::sentence(&reason::explain("Resources").unwrap(), MAX_EXPLANATION);
        assert_eq!(p.message.as_deref(), Some(want.as_str()));
        assert_eq!(p.priority, Some(4_294_901_758));
        assert_eq!(
            p.estimated_start_time,
            time(DateTime::from_timestamp(5_000, 0))
        );
        // Held: Slurm keeps an old estimate that means nothing until the release.
        let held = Job {
            held: true,
            priority: Some(0),
            ..pending_job(Some("JobHeldUser"))
        };
        let p = pending_status(&held).unwrap();
        assert_eq!((p.priority, p.estimated_start_time), (Some(0), None));
        // A start before the submit is no estimate (a requeued job's old start).
        let stale = Job {
            start_time: DateTime::from_timestamp(10, 0),
            ..pending_job(Some("Priority"))
        };
        assert_eq!(pending_status(&stale).unwrap().estimated_start_time, None);
        // Not looked at yet, an unknown code, and Slurm's own longer words.
        let fresh = pending_status(&pending_job(None)).unwrap();
        assert!(fresh.message.unwrap().contains("next pass"));
        let unknown = pending_status(&pending_job(Some("SomethingNew"))).unwrap();
        assert!(
            unknown.message.unwrap().contains("job_reason_codes.html"),
            "a link for what we cannot explain"
        );
        let described = Job {
            state_description: Some("ReqNodeNotAvail, Reserved for maintenance".into()),
            ..pending_job(Some("ReqNodeNotAvail"))
        };
        assert!(
            pending_status(&described)
                .unwrap()
                .message
                .unwrap()
                .ends_with("(Slurm: ReqNodeNotAvail, Reserved for maintenance)")
        );
        // A job that runs or ended waits for nothing; the status drops it, and shows the start
        // time only once it is one.
        assert_eq!(pending_status(&job(&["RUNNING"])), None);
        let mut s = observe(&SlurmJobStatus::default(), &[pending_job(Some("Priority"))]);
        assert!(s.pending.is_some());
        assert_eq!(s.start_time, None, "an estimate is not a start");
        let running = Job {
            start_time: DateTime::from_timestamp(6_000, 0),
            ..job(&["RUNNING"])
        };
        s = observe(&s, &[running]);
        assert_eq!(s.pending, None);
        assert_eq!(s.start_time, time(DateTime::from_timestamp(6_000, 0)));
    }

    #[test]
    fn suspended_says_whether_slurm_holds_the_job() {
        let now = at(1);
        let with = |reason: &str, priority: i64, phase: Phase| SlurmJobStatus {
            job_id: Some(7),
            phase,
            pending: (phase == Phase::Submitted).then(|| PendingStatus {
                reason: Some(reason.into()),
                priority: Some(priority),
                ..Default::default()
            }),
            ..Default::default()
        };
        let suspended = |s: SlurmJobStatus, suspend: Option<bool>| {
            let s = suspension(s, suspend, now.clone());
            condition::find(&s.conditions, SUSPENDED)
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        };
        let (status, reason, message) =
            suspended(with("JobHeldUser", 0, Phase::Submitted), Some(true)).unwrap();
        assert_eq!((status.as_str(), reason.as_str()), ("True", "JobHeldUser"));
        assert!(message.contains("as spec.suspend asks"), "{message}");
        assert!(message.ends_with("set spec.suspend to false"), "{message}");
        // Held in Slurm, not by the spec (`scontrol requeuehold` says JobHeldUser; a hold
        // without a code, priority 0): what releases it depends on what the spec says now. An
        // edit sends the release, so a spec that says false already needs two.
        for (reason, code) in [("JobHeldUser", "JobHeldUser"), ("job requeued", "Held")] {
            let (status, said, message) =
                suspended(with(reason, 0, Phase::Submitted), None).unwrap();
            assert_eq!((status.as_str(), said.as_str()), ("True", code));
            assert!(message.contains("not by spec.suspend"), "{message}");
            assert!(
                message.contains("set spec.suspend to false, or run `scontrol release 7`"),
                "{message}"
            );
            let (_, _, message) =
                suspended(with(reason, 0, Phase::Submitted), Some(false)).unwrap();
            assert!(
                message.contains("as spec.suspend is false already, set it to true and then back"),
                "{message}"
            );
        }
        // Held by an administrator, whatever the spec says.
        for suspend in [None, Some(false), Some(true)] {
            let (status, reason, message) =
                suspended(with("JobHeldAdmin", 0, Phase::Submitted), suspend).unwrap();
            assert_eq!((status.as_str(), reason.as_str()), ("True", "JobHeldAdmin"));
            assert!(message.contains("only they can release it"), "{message}");
        }
        // Asked of a running job: False, and why.
        let (status, reason, message) = suspended(with("", 1, Phase::Running), Some(true)).unwrap();
        assert_eq!((status.as_str(), reason.as_str()), ("False", "JobStarted"));
        assert!(message.contains("runs on"), "{message}");
        // Waiting unheld, or running unasked: no condition (and one there before goes).
        assert_eq!(
            suspended(with("Resources", 1, Phase::Submitted), Some(false)),
            None
        );
        assert_eq!(suspended(with("", 1, Phase::Running), None), None);
        assert_eq!(suspended(with("", 1, Phase::Running), Some(false)), None);
        let held = suspension(
            with("JobHeldUser", 0, Phase::Submitted),
            Some(true),
            now.clone(),
        );
        let released = SlurmJobStatus {
            pending: with("Priority", 1, Phase::Submitted).pending,
            ..held
        };
        assert_eq!(suspended(released, Some(false)), None);
    }

    #[test]
    fn a_waiting_jobs_first_details_wait_for_a_transition_or_five_seconds() {
        let submitted_at = DateTime::from_timestamp(1_000, 0).unwrap();
        let submitted = SlurmJobStatus {
            phase: Phase::Submitted,
            job_id: Some(7),
            tracked_since: time(Some(submitted_at)),
            ..Default::default()
        };
        let detailed = observe(&submitted, &[pending_job(Some("Priority"))]);
        assert_eq!(detailed.phase, Phase::Submitted);
        let after = |secs| submitted_at + chrono::TimeDelta::seconds(secs);
        assert_eq!(
            details_due(&submitted, &detailed, after(2)),
            Some(std::time::Duration::from_secs(3))
        );
        assert_eq!(details_due(&submitted, &detailed, after(5)), None);
        // A transition is written at once, details and all.
        let running = observe(&submitted, &[job(&["RUNNING"])]);
        assert_eq!(details_due(&submitted, &running, after(1)), None);
        // So is a condition's change.
        let mut held = detailed.clone();
        held.pending = Some(PendingStatus {
            reason: Some("JobHeldUser".into()),
            priority: Some(0),
            ..Default::default()
        });
        let held = suspension(held, Some(true), at(1));
        assert_eq!(details_due(&detailed, &held, after(1)), None);
    }
}
