//! When a SlurmJob submits, follows, ignores an edit, or re-runs; and its run history.

use crate::crd::slurmjob::{
    DependencyType, JobDependency, JobRun, MAX_HISTORY, Phase, SlurmJobStatus,
};

use super::submit::ResolvedDependency;

/// What to do with a SlurmJob at `generation` given its current status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing submitted for this generation: look for a job carrying this generation's tag,
    /// adopt it if there is one, else submit. `rerun` when an earlier run exists.
    Submit { rerun: bool },
    /// Follow the current Slurm job.
    Follow { job_id: i64 },
    /// The spec changed while the job is pending or running: apply what Slurm changes in place
    /// (`edit`), or tell the user the edit waits for the job's end; the job is followed either
    /// way.
    Edit { job_id: i64, generation: i64 },
    /// Slurm refused this generation's submit for a reason only a spec change fixes
    /// (`status.rejectedGeneration`): nothing to do until the spec changes.
    Rejected { generation: i64 },
}

/// The rules:
/// - never submitted → submit, unless Slurm refused this very generation (→ rejected);
/// - spec changed (generation past what the status observed) and the job had ended → re-run;
/// - spec changed while the job was pending or running → an edit: applied in place where Slurm
///   can, else ignored (either way recorded as observed, so the job does not re-run later when
///   it ends);
/// - otherwise follow the job.
pub fn decide(generation: i64, status: Option<&SlurmJobStatus>) -> Decision {
    let Some(status) = status else {
        return Decision::Submit { rerun: false };
    };
    let Some(job_id) = status.job_id else {
        if status.rejected_generation == Some(generation) {
            return Decision::Rejected { generation };
        }
        return Decision::Submit {
            rerun: !status.history.is_empty(),
        };
    };
    let edited = status
        .observed_generation
        .is_some_and(|observed| generation > observed);
    match (edited, status.phase.is_terminal()) {
        (true, true) => Decision::Submit { rerun: true },
        (true, false) => Decision::Edit { job_id, generation },
        (false, _) => Decision::Follow { job_id },
    }
}

/// Whether the SlurmJob's status already says everything: the job ended and no edit since asks
/// for another run, or Slurm refused this generation. Nothing about it needs Slurm any more.
pub fn settled(generation: i64, status: Option<&SlurmJobStatus>) -> bool {
    match decide(generation, status) {
        Decision::Follow { .. } => status.is_some_and(|s| s.phase.is_terminal()),
        Decision::Rejected { .. } => true,
        Decision::Submit { .. } | Decision::Edit { .. } => false,
    }
}

/// [`settled`] for a SlurmJob being deleted. The API server adds one to a custom resource's
/// generation when its deletion begins, so the generation the spec was last edited at is one
/// less: an edit since the run ended (a re-run whose submit a crash may have lost) still shows.
pub fn settled_when_deleted(generation: i64, status: Option<&SlurmJobStatus>) -> bool {
    settled(generation.saturating_sub(1), status)
}

/// The status a submit starts from, and the job of the run it ends: on a re-run (the spec changed
/// after a run ended) whose ended job is still in the status, that run moves to the history;
/// otherwise the status as it is. One rule for a submit and for a re-run refused by access.
pub fn submit_base(status: &SlurmJobStatus, rerun: bool) -> (SlurmJobStatus, Option<i64>) {
    match status.job_id {
        Some(ended) if rerun => (start_new_run(status), Some(ended)),
        _ => (status.clone(), None),
    }
}

/// The status for a new run: the finished run moves to the front of the history (bounded), and
/// the per-run fields are cleared. Conditions and generations are the caller's to set.
pub fn start_new_run(status: &SlurmJobStatus) -> SlurmJobStatus {
    let mut history = status.history.clone();
    if let Some(job_id) = status.job_id {
        history.insert(
            0,
            JobRun {
                job_id,
                phase: status.phase,
                exit_code: status.exit_code,
                submit_time: status.submit_time.clone(),
                end_time: status.end_time.clone(),
                generation: status.submitted_generation.unwrap_or_default(),
            },
        );
    }
    history.truncate(MAX_HISTORY);
    SlurmJobStatus {
        phase: Phase::Pending,
        history,
        conditions: status.conditions.clone(),
        ..Default::default()
    }
}

/// What `dependsOn` finds under a name in the namespace: the SlurmJob's cluster, its Slurm
/// job id if it has one yet, and that job's phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependee {
    pub cluster_name: String,
    pub job_id: Option<i64>,
    pub phase: Option<Phase>,
    /// Its job left slurmctld, and how it ended is being asked of accounting: neither its id
    /// nor a verdict yet.
    pub settling: bool,
    /// Not submitted, and waiting itself for the dependent, directly or through SlurmJobs that
    /// wait too: the SlurmJobs of that cycle from this one on, the dependent left out (empty:
    /// no cycle). None of them can be submitted before the others.
    pub cycle: Vec<String>,
}

impl Dependee {
    pub fn new(cluster_name: impl Into<String>, job_id: Option<i64>) -> Self {
        Self {
            cluster_name: cluster_name.into(),
            job_id,
            phase: None,
            settling: false,
            cycle: Vec::new(),
        }
    }

    /// It waits for the dependent through `path` ([`Dependee::cycle`]).
    pub fn in_cycle(self, path: Vec<String>) -> Self {
        Self {
            cycle: path,
            ..self
        }
    }

    /// Its job left slurmctld and its end is not known yet ([`Dependee::settling`]).
    pub fn settling(self) -> Self {
        Self {
            settling: true,
            ..self
        }
    }

    /// The phase of the SlurmJob's job (its status).
    pub fn in_phase(self, phase: Option<Phase>) -> Self {
        Self { phase, ..self }
    }
}

/// Whether a dependency of `kind` on a job that ended in `phase` lets the dependent run, as
/// slurmctld decides it: `afterok` only after success (an array: every task), `afternotok` only
/// after any other ending, `afterany` after every ending.
fn satisfied_by(kind: DependencyType, phase: Phase) -> bool {
    match kind {
        DependencyType::AfterAny => true,
        DependencyType::AfterOk => phase == Phase::Completed,
        DependencyType::AfterNotOk => phase != Phase::Completed,
    }
}

/// Why a job cannot be submitted yet because of its dependencies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DependencyWait {
    /// These SlurmJobs do not exist (yet) in the namespace.
    Missing(Vec<String>),
    /// These exist but run on another cluster (name, their `clusterName`): their job ids mean
    /// nothing to this job's cluster, or name someone else's job there.
    OtherCluster(Vec<(String, String)>),
    /// These exist but have no Slurm job id yet.
    NotSubmitted(Vec<String>),
    /// A dependee waits for this job, directly or through others ([`Dependee::cycle`]). Only
    /// an edit of one's `dependsOn` ends it.
    Cycle(Vec<String>),
    /// These SlurmJobs' jobs left slurmctld, and how they ended is not known yet.
    Settling(Vec<String>),
    /// These SlurmJobs' jobs are lost: their ids are never handed to Slurm (they may name
    /// another job now); an edit that runs them again gives them a new one.
    Lost(Vec<String>),
    /// These SlurmJobs' jobs ended in a way the dependency rules out (name, how it asks, the
    /// phase it ended in): the job cannot run unless they run again.
    NeverSatisfied(Vec<(String, DependencyType, Phase)>),
}

/// Turn `dependsOn` into Slurm job ids, looking each SlurmJob up by name ([`Dependee`], `None`
/// for one that does not exist). Only SlurmJobs of `cluster_name`, the dependent's, resolve.
pub fn resolve_dependencies(
    depends_on: &[JobDependency],
    cluster_name: &str,
    lookup: impl Fn(&str) -> Option<Dependee>,
) -> Result<Vec<ResolvedDependency>, DependencyWait> {
    let mut resolved = Vec::new();
    let mut missing = Vec::new();
    let mut elsewhere = Vec::new();
    let mut not_submitted = Vec::new();
    let mut cycle = Vec::new();
    let mut settling = Vec::new();
    let mut lost = Vec::new();
    let mut never = Vec::new();
    for dep in depends_on {
        let found = match lookup(&dep.name) {
            None => {
                missing.push(dep.name.clone());
                continue;
            }
            Some(found) if found.cluster_name != cluster_name => {
                elsewhere.push((dep.name.clone(), found.cluster_name));
                continue;
            }
            Some(found) => found,
        };
        match (found.job_id, found.phase) {
            (None, _) if !found.cycle.is_empty() && cycle.is_empty() => {
                cycle = found.cycle;
                not_submitted.push(dep.name.clone());
            }
            (None, _) => not_submitted.push(dep.name.clone()),
            (Some(_), Some(Phase::Lost)) => lost.push(dep.name.clone()),
            // An ended job is judged here, its id not handed over: slurmctld forgets it after
            // MinJobAge and may give the id to another job, another team's maybe.
            (Some(_), Some(phase)) if phase.is_terminal() => {
                if !satisfied_by(dep.type_, phase) {
                    never.push((dep.name.clone(), dep.type_, phase));
                }
            }
            (Some(_), _) if found.settling => settling.push(dep.name.clone()),
            (Some(job_id), _) => resolved.push(ResolvedDependency {
                kind: dep.type_,
                job_id,
            }),
        }
    }
    if !missing.is_empty() {
        return Err(DependencyWait::Missing(missing));
    }
    if !elsewhere.is_empty() {
        return Err(DependencyWait::OtherCluster(elsewhere));
    }
    if !cycle.is_empty() {
        return Err(DependencyWait::Cycle(cycle));
    }
    if !not_submitted.is_empty() {
        return Err(DependencyWait::NotSubmitted(not_submitted));
    }
    if !settling.is_empty() {
        return Err(DependencyWait::Settling(settling));
    }
    if !lost.is_empty() {
        return Err(DependencyWait::Lost(lost));
    }
    if !never.is_empty() {
        return Err(DependencyWait::NeverSatisfied(never));
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every phase in which the job has ended.
    const ENDED: [Phase; 8] = [
        Phase::Completed,
        Phase::Failed,
        Phase::Cancelled,
        Phase::TimedOut,
        Phase::NodeFail,
        Phase::Preempted,
        Phase::OutOfMemory,
        Phase::Lost,
    ];

    fn status(job_id: Option<i64>, phase: Phase, observed: i64) -> SlurmJobStatus {
        SlurmJobStatus {
            phase,
            job_id,
            observed_generation: Some(observed),
            submitted_generation: job_id.map(|_| observed),
            ..Default::default()
        }
    }

    #[test]
    fn settled_means_ended_with_nothing_left_to_run() {
        for phase in ENDED {
            assert!(settled(1, Some(&status(Some(5), phase, 1))), "{phase}");
            // Edited since: it runs again.
            assert!(
                !settled(2, Some(&status(Some(5), phase, 1))),
                "{phase} edited"
            );
        }
        for phase in [Phase::Pending, Phase::Submitted, Phase::Running] {
            assert!(!settled(1, Some(&status(Some(5), phase, 1))), "{phase}");
        }
        assert!(!settled(1, None));
        // Never submitted (e.g. waiting for dependencies): not over.
        assert!(!settled(1, Some(&status(None, Phase::Pending, 1))));
    }

    #[test]
    fn a_deleted_job_is_settled_despite_the_deletions_generation() {
        for phase in ENDED {
            // Deleted: 1 → 2 by the deletion alone.
            assert!(
                settled_when_deleted(2, Some(&status(Some(5), phase, 1))),
                "{phase}"
            );
            // Edited (2), then deleted (3): the re-run may have been submitted.
            assert!(
                !settled_when_deleted(3, Some(&status(Some(5), phase, 1))),
                "{phase} edited"
            );
        }
        assert!(!settled_when_deleted(
            2,
            Some(&status(Some(5), Phase::Running, 1))
        ));
        assert!(!settled_when_deleted(2, None));
    }

    #[test]
    fn submit_follow_ignore_and_rerun() {
        use Decision::*;
        assert_eq!(decide(1, None), Submit { rerun: false });
        assert_eq!(
            decide(1, Some(&SlurmJobStatus::default())),
            Submit { rerun: false }
        );
        assert_eq!(
            decide(1, Some(&status(Some(5), Phase::Submitted, 1))),
            Follow { job_id: 5 }
        );
        assert_eq!(
            decide(1, Some(&status(Some(5), Phase::Running, 1))),
            Follow { job_id: 5 }
        );
        assert_eq!(
            decide(1, Some(&status(Some(5), Phase::Completed, 1))),
            Follow { job_id: 5 }
        );
        for active in [Phase::Submitted, Phase::Running] {
            assert_eq!(
                decide(2, Some(&status(Some(5), active, 1))),
                Edit {
                    job_id: 5,
                    generation: 2
                }
            );
        }
        for ended in ENDED {
            assert_eq!(
                decide(2, Some(&status(Some(5), ended, 1))),
                Submit { rerun: true },
                "{ended}"
            );
        }
        // An edit ignored while running was observed: the job does not re-run when it ends.
        assert_eq!(
            decide(2, Some(&status(Some(5), Phase::Completed, 2))),
            Follow { job_id: 5 }
        );
        // A re-run whose submit has not happened yet (history present, no job id).
        let pending_rerun = start_new_run(&status(Some(5), Phase::Failed, 1));
        assert_eq!(decide(2, Some(&pending_rerun)), Submit { rerun: true });
    }

    /// Issue 15: a generation Slurm refused is not submitted again — also by a restarted
    /// operator, which reads it from the status — and the next spec change is.
    #[test]
    fn a_rejected_generation_waits_for_a_spec_change() {
        use Decision::*;
        let rejected = SlurmJobStatus {
            rejected_generation: Some(1),
            observed_generation: Some(1),
            ..Default::default()
        };
        assert_eq!(decide(1, Some(&rejected)), Rejected { generation: 1 });
        assert!(settled(1, Some(&rejected)), "nothing to ask Slurm");
        assert_eq!(decide(2, Some(&rejected)), Submit { rerun: false });
        assert!(!settled(2, Some(&rejected)));
        // A re-run refused: the earlier run is history; the edit after it runs again.
        let mut rerun = start_new_run(&status(Some(5), Phase::Completed, 1));
        rerun.rejected_generation = Some(2);
        assert_eq!(decide(2, Some(&rerun)), Rejected { generation: 2 });
        assert_eq!(decide(3, Some(&rerun)), Submit { rerun: true });
    }

    #[test]
    fn history_keeps_the_previous_run_first_and_is_bounded() {
        let mut s = status(Some(1), Phase::Failed, 1);
        s.exit_code = Some(3);
        let next = start_new_run(&s);
        assert_eq!(next.phase, Phase::Pending);
        assert_eq!(next.job_id, None);
        assert_eq!(next.exit_code, None);
        assert_eq!(next.history.len(), 1);
        assert_eq!(next.history[0].job_id, 1);
        assert_eq!(next.history[0].phase, Phase::Failed);
        assert_eq!(next.history[0].exit_code, Some(3));
        assert_eq!(next.history[0].generation, 1);

        let mut s = SlurmJobStatus::default();
        for id in 1..=(MAX_HISTORY as i64 + 5) {
            s.job_id = Some(id);
            s.phase = Phase::Completed;
            s = start_new_run(&s);
        }
        assert_eq!(s.history.len(), MAX_HISTORY);
        assert_eq!(s.history[0].job_id, MAX_HISTORY as i64 + 5, "newest first");
    }

    #[test]
    fn dependencies_resolve_or_say_what_they_wait_for() {
        let deps = vec![
            JobDependency {
                name: "a".into(),
                type_: DependencyType::AfterOk,
            },
            JobDependency {
                name: "b".into(),
                type_: DependencyType::AfterAny,
            },
        ];
        let lookup = |name: &str| match name {
            "a" => Some(Dependee::new("c", Some(10))),
            "b" => Some(Dependee::new("c", Some(11))),
            _ => None,
        };
        let resolved = resolve_dependencies(&deps, "c", lookup).unwrap();
        assert_eq!(
            resolved,
            vec![
                ResolvedDependency {
                    kind: DependencyType::AfterOk,
                    job_id: 10
                },
                ResolvedDependency {
                    kind: DependencyType::AfterAny,
                    job_id: 11
                },
            ]
        );
        let unsubmitted = |name: &str| Some(Dependee::new("c", (name == "a").then_some(10)));
        assert_eq!(
            resolve_dependencies(&deps, "c", unsubmitted),
            Err(DependencyWait::NotSubmitted(vec!["b".into()]))
        );
        // One not submitted waits for this job (through x): the cycle is what the wait says,
        // not that the others are not submitted yet.
        let cycle = |name: &str| {
            let found = Dependee::new("c", None);
            Some(match name {
                "b" => found.in_cycle(vec!["b".into(), "x".into()]),
                _ => found,
            })
        };
        assert_eq!(
            resolve_dependencies(&deps, "c", cycle),
            Err(DependencyWait::Cycle(vec!["b".into(), "x".into()]))
        );
        // A job gone from slurmctld whose end is not known yet: neither its id nor a verdict.
        let settling = |name: &str| {
            let found = Dependee::new("c", Some(10)).in_phase(Some(Phase::Running));
            Some(if name == "b" { found.settling() } else { found })
        };
        assert_eq!(
            resolve_dependencies(&deps, "c", settling),
            Err(DependencyWait::Settling(vec!["b".into()]))
        );
        // A job id of another cluster is never handed to this one, submitted or not.
        assert_eq!(
            resolve_dependencies(&deps, "d", unsubmitted),
            Err(DependencyWait::OtherCluster(vec![
                ("a".into(), "c".into()),
                ("b".into(), "c".into())
            ]))
        );
        let mixed = |name: &str| match name {
            "a" => Some(Dependee::new("other", Some(10))),
            _ => Some(Dependee::new("c", None)),
        };
        assert_eq!(
            resolve_dependencies(&deps, "c", mixed),
            Err(DependencyWait::OtherCluster(vec![(
                "a".into(),
                "other".into()
            )]))
        );
        assert_eq!(
            resolve_dependencies(&deps, "c", |_| None),
            Err(DependencyWait::Missing(vec!["a".into(), "b".into()]))
        );
        assert_eq!(resolve_dependencies(&[], "c", |_| None), Ok(vec![]));
        // A lost job's id may name another job now: never handed to Slurm.
        let one_lost = |name: &str| {
            Some(Dependee::new("c", Some(10)).in_phase(Some(if name == "b" {
                Phase::Lost
            } else {
                Phase::Completed
            })))
        };
        assert_eq!(
            resolve_dependencies(&deps, "c", one_lost),
            Err(DependencyWait::Lost(vec!["b".into()]))
        );
    }

    #[test]
    fn an_ended_dependee_is_judged_here_and_its_id_never_handed_over() {
        let on = |type_| {
            vec![JobDependency {
                name: "a".into(),
                type_,
            }]
        };
        let ended = |phase| move |_: &str| Some(Dependee::new("c", Some(10)).in_phase(Some(phase)));
        use DependencyType::{AfterAny, AfterNotOk, AfterOk};
        // Every ending, every kind: satisfied means submitted without the id; otherwise the
        // dependent waits, naming the dependee, how it asks and how it ended.
        for phase in ENDED.into_iter().filter(|p| *p != Phase::Lost) {
            for kind in [AfterOk, AfterAny, AfterNotOk] {
                let satisfied = match kind {
                    AfterAny => true,
                    AfterOk => phase == Phase::Completed,
                    AfterNotOk => phase != Phase::Completed,
                };
                let expected = if satisfied {
                    Ok(vec![])
                } else {
                    Err(DependencyWait::NeverSatisfied(vec![(
                        "a".into(),
                        kind,
                        phase,
                    )]))
                };
                assert_eq!(
                    resolve_dependencies(&on(kind), "c", ended(phase)),
                    expected,
                    "{kind:?} on a job that ended {phase}"
                );
            }
        }
        // A job still queued or running is handed to Slurm by id, to wait on.
        for phase in [None, Some(Phase::Submitted), Some(Phase::Running)] {
            let live = |_: &str| Some(Dependee::new("c", Some(10)).in_phase(phase));
            assert_eq!(
                resolve_dependencies(&on(AfterOk), "c", live),
                Ok(vec![ResolvedDependency {
                    kind: AfterOk,
                    job_id: 10
                }]),
                "{phase:?}"
            );
        }
        // Beside a live one, a satisfied ended one adds nothing.
        let both = vec![
            JobDependency {
                name: "done".into(),
                type_: AfterOk,
            },
            JobDependency {
                name: "live".into(),
                type_: AfterAny,
            },
        ];
        let lookup = |name: &str| {
            Some(
                Dependee::new("c", Some(if name == "done" { 10 } else { 11 })).in_phase(Some(
                    if name == "done" {
                        Phase::Completed
                    } else {
                        Phase::Running
                    },
                )),
            )
        };
        assert_eq!(
            resolve_dependencies(&both, "c", lookup),
            Ok(vec![ResolvedDependency {
                kind: AfterAny,
                job_id: 11
            }])
        );
    }
}
