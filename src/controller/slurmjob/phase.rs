//! Slurm job states to SlurmJob phases.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use crate::crd::slurmjob::Phase;
use crate::slurm::types::{Job, JobBaseState, JobState};

/// The phase of one Slurm job record. `COMPLETING` does not hold back a final phase: the script
/// has ended and its outcome is known; only the node cleanup is still running.
pub fn of_state(state: &JobState) -> Phase {
    match state.base {
        JobBaseState::Pending => Phase::Submitted,
        // Suspended is still a started job (gang scheduling, admin suspend); the reason says why.
        JobBaseState::Running | JobBaseState::Suspended => Phase::Running,
        JobBaseState::Completed => Phase::Completed,
        JobBaseState::Failed | JobBaseState::BootFail => Phase::Failed,
        JobBaseState::Cancelled => Phase::Cancelled,
        JobBaseState::Timeout | JobBaseState::Deadline => Phase::TimedOut,
        JobBaseState::NodeFail => Phase::NodeFail,
        JobBaseState::Preempted => Phase::Preempted,
        JobBaseState::OutOfMemory => Phase::OutOfMemory,
        // A state this operator does not know: the job exists, so at least Submitted; never a
        // guessed ending.
        JobBaseState::Unknown => Phase::Submitted,
    }
}

/// Of `records`, the latest run of each job and array task: slurmdbd keeps a record of every
/// run of a requeued job (the run that ended `PENDING+REQUEUED`, `NODE_FAIL` or `PREEMPTED`,
/// then the new one, which Slurm gives a later submit time), and slurmrestd's accounting answers
/// list them all (Slurm 24.11, `/slurmdb/v0.0.42/job/{id}` of an array task requeued once: its
/// `PENDING+REQUEUED` run and its `COMPLETED` one). Kept in their order; the last of equal
/// submit times. Borrowed when each job and task has one record (slurmctld's answers).
pub fn latest_runs(records: &[Job]) -> Cow<'_, [Job]> {
    let mut latest: HashMap<(u32, Option<u32>), usize> = HashMap::with_capacity(records.len());
    for (i, record) in records.iter().enumerate() {
        let at = latest
            .entry((record.job_id, record.array_task_id))
            .or_insert(i);
        if records[*at].submit_time <= record.submit_time {
            *at = i;
        }
    }
    if latest.len() == records.len() {
        return Cow::Borrowed(records);
    }
    let kept: HashSet<usize> = latest.into_values().collect();
    Cow::Owned(
        records
            .iter()
            .enumerate()
            .filter(|(i, _)| kept.contains(i))
            .map(|(_, record)| record.clone())
            .collect(),
    )
}

/// How bad an ending is, to summarise an array by its worst task.
fn severity(phase: Phase) -> u8 {
    match phase {
        Phase::Completed => 0,
        Phase::Cancelled => 1,
        Phase::Preempted => 2,
        Phase::TimedOut => 3,
        Phase::Failed => 4,
        Phase::OutOfMemory => 5,
        Phase::NodeFail => 6,
        Phase::Lost => 7,
        Phase::Pending | Phase::Submitted | Phase::Running => 0,
    }
}

/// The phase of a whole job: a plain job's record, or every task record of an array (plus the
/// array's meta record for tasks not started yet).
///
/// Running while any task runs; Submitted while tasks wait and none runs; once every task has
/// ended, Completed if all completed, else the worst ending (a failed task fails the array).
pub fn of_records<'a>(records: impl IntoIterator<Item = &'a Job>) -> Option<Phase> {
    let phases: Vec<Phase> = records
        .into_iter()
        .map(|job| of_state(&job.state))
        .collect();
    if phases.is_empty() {
        return None;
    }
    if phases.contains(&Phase::Running) {
        return Some(Phase::Running);
    }
    if phases.iter().any(|p| !p.is_terminal()) {
        return Some(Phase::Submitted);
    }
    worst(phases)
}

/// The worst of the endings `phases`: Completed only if all completed.
pub fn worst(phases: impl IntoIterator<Item = Phase>) -> Option<Phase> {
    phases.into_iter().max_by_key(|p| severity(*p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(states: &[&str]) -> Job {
        Job {
            job_id: 1,
            state: JobState::from_strings(states),
            ..Job::bare()
        }
    }

    /// The latest submit of each (job, task), in the records' order, the last of equals; the
    /// records themselves when none repeats.
    #[test]
    fn latest_runs_keep_each_runs_last_submit() {
        let run = |id: u32, task: Option<u32>, submitted: i64, states: &[&str]| Job {
            job_id: id,
            array_task_id: task,
            submit_time: chrono::DateTime::from_timestamp(submitted, 0),
            ..job(states)
        };
        let unique = [
            run(7, Some(0), 1, &["COMPLETED"]),
            run(8, Some(1), 1, &["RUNNING"]),
        ];
        assert!(matches!(latest_runs(&unique), Cow::Borrowed(_)));
        let records = [
            run(8, Some(1), 5, &["COMPLETED"]),
            run(7, Some(0), 1, &["PENDING", "REQUEUED"]),
            run(8, Some(1), 1, &["NODE_FAIL"]),
            run(7, Some(0), 3, &["RUNNING"]),
            run(9, None, 2, &["FAILED"]),
            run(9, None, 2, &["COMPLETED"]),
        ];
        let kept: Vec<_> = latest_runs(&records)
            .iter()
            .map(|r| (r.job_id, r.state.to_strings()))
            .collect();
        assert_eq!(
            kept,
            [
                (8, vec!["COMPLETED".to_owned()]),
                (7, vec!["RUNNING".to_owned()]),
                (9, vec!["COMPLETED".to_owned()]),
            ]
        );
    }

    #[test]
    fn every_observed_state_combination() {
        // Observed on Slurm 24.11 and 26.05 (tests/fixtures), plus the rest of Slurm's base states.
        let table: &[(&[&str], Phase)] = &[
            (&["PENDING"], Phase::Submitted),
            (&["PENDING", "REQUEUED"], Phase::Submitted),
            (&["RUNNING"], Phase::Running),
            (&["RUNNING", "CONFIGURING"], Phase::Running),
            (&["SUSPENDED"], Phase::Running),
            (&["COMPLETED"], Phase::Completed),
            (&["COMPLETED", "COMPLETING"], Phase::Completed),
            (&["FAILED"], Phase::Failed),
            (&["FAILED", "COMPLETING"], Phase::Failed),
            (&["CANCELLED"], Phase::Cancelled),
            (&["CANCELLED", "COMPLETING"], Phase::Cancelled),
            (&["TIMEOUT"], Phase::TimedOut),
            (&["DEADLINE"], Phase::TimedOut),
            (&["NODE_FAIL"], Phase::NodeFail),
            (&["PREEMPTED"], Phase::Preempted),
            (&["BOOT_FAIL"], Phase::Failed),
            (&["OUT_OF_MEMORY"], Phase::OutOfMemory),
            (&["SOMETHING_NEW"], Phase::Submitted),
            (&[], Phase::Submitted),
        ];
        for (states, phase) in table {
            assert_eq!(
                of_state(&JobState::from_strings(states)),
                *phase,
                "{states:?}"
            );
        }
    }

    #[test]
    fn arrays_summarise_their_tasks() {
        let table: &[(&[&[&str]], Option<Phase>)] = &[
            (&[], None),
            (&[&["PENDING"], &["PENDING"]], Some(Phase::Submitted)),
            (
                &[&["PENDING"], &["RUNNING"], &["COMPLETED"]],
                Some(Phase::Running),
            ),
            (&[&["PENDING"], &["COMPLETED"]], Some(Phase::Submitted)),
            (
                &[
                    &["COMPLETED"],
                    &["COMPLETED"],
                    &["COMPLETED"],
                    &["COMPLETED"],
                ],
                Some(Phase::Completed),
            ),
            (
                &[&["COMPLETED"], &["COMPLETED"], &["FAILED"], &["COMPLETED"]],
                Some(Phase::Failed),
            ),
            (&[&["COMPLETED"], &["CANCELLED"]], Some(Phase::Cancelled)),
            (&[&["FAILED"], &["TIMEOUT"]], Some(Phase::Failed)),
            (&[&["FAILED"], &["OUT_OF_MEMORY"]], Some(Phase::OutOfMemory)),
            (
                &[&["COMPLETED", "COMPLETING"], &["FAILED"]],
                Some(Phase::Failed),
            ),
        ];
        for (tasks, phase) in table {
            let jobs: Vec<Job> = tasks.iter().map(|s| job(s)).collect();
            assert_eq!(of_records(&jobs), *phase, "{tasks:?}");
        }
    }
}
