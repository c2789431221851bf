//! The Events a SlurmJob's status change is worth: a pure function of the status before and
//! after a reconcile, so every transition is reported exactly once whatever triggered it.

use super::status::{self, DEPENDENCY_NEVER_SATISFIED};
use crate::controller::kit::Notice;
use crate::crd::slurmjob::{Phase, SlurmJobStatus};
use crate::slurm::tag::Ownership;

/// The Warning of a deleted SlurmJob whose job id names a Slurm job that is not provably its
/// own: it is left running and the SlurmJob is released.
pub fn not_owned(job_id: u32, ownership: Ownership) -> Notice {
    let why = match ownership {
        Ownership::Untagged => "carries no ownership tag",
        Ownership::Legacy => {
            "carries an unsigned tag (an older operator's) of another SlurmJob, or runs as a \
             Slurm user this SlurmJob's namespace is not granted"
        }
        _ => "carries a tag that is not this SlurmJob's, signed for its Slurm user",
    };
    Notice::warning(
        "NotOwned",
        format!(
            "Slurm job {job_id} was not cancelled: it {why}, so it is not this SlurmJob's job (a \
             job id reused after slurmctld lost its state, or a status written by hand); the \
             SlurmJob is released without touching it"
        ),
    )
}

/// The Events for going from `before` to `after` (the same run, or a new one).
///
/// - a job id appears: `Submitted`;
/// - the job starts running (or ends having run, with no `Running` seen): `Started`;
/// - it ends: `Finished` (Completed), `Cancelled`, or a Warning `Failed` for every other end
///   (Failed, TimedOut, NodeFail, Preempted, OutOfMemory, Lost);
/// - Slurm deems a dependency of the waiting job never satisfied: a Warning
///   `DependencyNeverSatisfied` (it will never start).
pub fn transitions(before: &SlurmJobStatus, after: &SlurmJobStatus) -> Vec<Notice> {
    let mut notices = Vec::new();
    let Some(job_id) = after.job_id else {
        return notices;
    };
    let same_run = before.job_id == Some(job_id);
    let (phase_before, started_before) = if same_run {
        (before.phase, before.start_time.is_some())
    } else {
        notices.push(
            Notice::normal("Submitted", format!("Slurm job {job_id} submitted")).about_run(job_id),
        );
        (Phase::Submitted, false)
    };
    if status::never_starts(after) && !(same_run && status::never_starts(before)) {
        notices.push(
            Notice::warning(DEPENDENCY_NEVER_SATISFIED, status::never_satisfied(job_id))
                .about_run(job_id),
        );
    }
    if phase_before == after.phase && same_run {
        return notices;
    }
    if same_run && phase_before == Phase::Running && after.phase == Phase::Submitted {
        // Requeued (its node failed, preempted, `scontrol requeue`): the same job waits to run
        // again, its earlier start kept (no second `Started` when it does).
        let why = after
            .state_reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        notices.push(
            Notice::warning(
                "Requeued",
                format!("Slurm job {job_id} was requeued{why}: it waits to run again"),
            )
            .about_run(job_id),
        );
    }
    let was_running = phase_before == Phase::Running || started_before;
    // Slurm also gives a job cancelled while pending a start time, but no nodes.
    let now_started = after.phase == Phase::Running
        || (after.phase.is_terminal() && after.start_time.is_some() && after.nodes.is_some());
    if !was_running && !phase_before.is_terminal() && now_started {
        let on = after
            .nodes
            .as_deref()
            .map(|n| format!(" on {n}"))
            .unwrap_or_default();
        notices.push(
            Notice::normal("Started", format!("Slurm job {job_id} started{on}")).about_run(job_id),
        );
    }
    if after.phase.is_terminal() && !phase_before.is_terminal() {
        let exit = after
            .exit_code
            .map(|c| format!(", exit code {c}"))
            .unwrap_or_default();
        let signal = after
            .signal
            .filter(|s| *s != 0)
            .map(|s| format!(", signal {s}"))
            .unwrap_or_default();
        let note = format!("Slurm job {job_id} ended {}{exit}{signal}", after.phase);
        notices.push(
            match after.phase {
                Phase::Completed => Notice::normal("Finished", note),
                Phase::Cancelled => Notice::normal("Cancelled", note),
                _ => Notice::warning("Failed", note),
            }
            .about_run(job_id),
        );
    }
    notices
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn st(job_id: Option<i64>, phase: Phase, started: bool) -> SlurmJobStatus {
        SlurmJobStatus {
            job_id,
            phase,
            start_time: (started || phase.is_terminal())
                .then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            nodes: started.then(|| "n1".to_owned()),
            exit_code: phase
                .is_terminal()
                .then_some(if phase == Phase::Completed { 0 } else { 3 }),
            ..Default::default()
        }
    }

    fn reasons(before: &SlurmJobStatus, after: &SlurmJobStatus) -> Vec<String> {
        transitions(before, after)
            .iter()
            .map(|n| n.reason.to_string())
            .collect()
    }

    #[test]
    fn every_transition_is_reported_once() {
        use Phase::*;
        let none = SlurmJobStatus::default();
        let cases: &[(SlurmJobStatus, SlurmJobStatus, &[&str])] = &[
            (none.clone(), none.clone(), &[]),
            (none.clone(), st(Some(1), Submitted, false), &["Submitted"]),
            (
                none.clone(),
                st(Some(1), Running, true),
                &["Submitted", "Started"],
            ),
            (
                none.clone(),
                st(Some(1), Completed, true),
                &["Submitted", "Started", "Finished"],
            ),
            (
                st(Some(1), Submitted, false),
                st(Some(1), Submitted, false),
                &[],
            ),
            (
                st(Some(1), Submitted, false),
                st(Some(1), Running, true),
                &["Started"],
            ),
            (st(Some(1), Running, true), st(Some(1), Running, true), &[]),
            // Requeued: said; running again, its start was told already.
            (
                st(Some(1), Running, true),
                st(Some(1), Submitted, true),
                &["Requeued"],
            ),
            (
                st(Some(1), Submitted, true),
                st(Some(1), Running, true),
                &[],
            ),
            (
                st(Some(1), Running, true),
                st(Some(1), Completed, true),
                &["Finished"],
            ),
            (
                st(Some(1), Running, true),
                st(Some(1), Failed, true),
                &["Failed"],
            ),
            (
                st(Some(1), Running, true),
                st(Some(1), TimedOut, true),
                &["Failed"],
            ),
            (
                st(Some(1), Running, true),
                st(Some(1), Cancelled, true),
                &["Cancelled"],
            ),
            // Cancelled while pending: it never started.
            (
                st(Some(1), Submitted, false),
                st(Some(1), Cancelled, false),
                &["Cancelled"],
            ),
            (
                st(Some(1), Submitted, false),
                st(Some(1), Lost, false),
                &["Failed"],
            ),
            // Ended between two observations.
            (
                st(Some(1), Submitted, false),
                st(Some(1), Completed, true),
                &["Started", "Finished"],
            ),
            (
                st(Some(1), Completed, true),
                st(Some(1), Completed, true),
                &[],
            ),
            // A re-run: the new job id is a new submission.
            (
                st(Some(1), Completed, true),
                st(Some(2), Submitted, false),
                &["Submitted"],
            ),
        ];
        for (before, after, want) in cases {
            assert_eq!(
                reasons(before, after),
                *want,
                "{:?}/{:?} -> {:?}/{:?}",
                before.job_id,
                before.phase,
                after.job_id,
                after.phase
            );
        }
        let failed = transitions(&st(Some(1), Running, true), &st(Some(1), Failed, true));
        assert!(failed[0].warning);
        assert_eq!(failed[0].note, "Slurm job 1 ended Failed, exit code 3");
    }

    /// A waiting job Slurm deems never to start (a dependency ruled out) is told once, a Warning
    /// naming the job; not again while it stays so, nor for an ended job's reason.
    #[test]
    fn a_dependency_never_satisfied_is_told_once() {
        let never = |phase| SlurmJobStatus {
            state_reason: Some(DEPENDENCY_NEVER_SATISFIED.into()),
            ..st(Some(4), phase, false)
        };
        let told = transitions(
            &st(Some(4), Phase::Submitted, false),
            &never(Phase::Submitted),
        );
        assert_eq!(told.len(), 1, "{told:?}");
        assert!(told[0].warning);
        assert_eq!(told[0].reason, DEPENDENCY_NEVER_SATISFIED);
        assert!(
            told[0].note.starts_with("Slurm job 4 will never start"),
            "{}",
            told[0].note
        );
        assert!(transitions(&never(Phase::Submitted), &never(Phase::Submitted)).is_empty());
        // Seen at the submit's first observation too.
        let first = transitions(&SlurmJobStatus::default(), &never(Phase::Submitted));
        assert_eq!(
            first.iter().map(|n| n.reason.as_ref()).collect::<Vec<_>>(),
            ["Submitted", DEPENDENCY_NEVER_SATISFIED]
        );
        let cancelled = SlurmJobStatus {
            state_reason: Some(DEPENDENCY_NEVER_SATISFIED.into()),
            ..st(Some(4), Phase::Cancelled, false)
        };
        assert_eq!(
            transitions(&never(Phase::Submitted), &cancelled)
                .iter()
                .map(|n| n.reason.as_ref())
                .collect::<Vec<_>>(),
            ["Cancelled"]
        );
    }

    /// Each run's Events are their own: their action names the run, so a re-run's `Submitted`
    /// or `Finished` is a new Event, not a count on the first run's (events.k8s.io series).
    #[test]
    fn run_events_name_their_run() {
        let first = transitions(
            &st(None, Phase::Pending, false),
            &st(Some(1), Phase::Submitted, false),
        );
        let second = transitions(
            &st(Some(1), Phase::Completed, true),
            &st(Some(2), Phase::Submitted, false),
        );
        assert_eq!(first[0].action.as_deref(), Some("Run1"));
        assert_eq!(second[0].action.as_deref(), Some("Run2"));
        assert_eq!(
            (first[0].reason.as_ref(), second[0].reason.as_ref()),
            ("Submitted", "Submitted")
        );
    }
}
