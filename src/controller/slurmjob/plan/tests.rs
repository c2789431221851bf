use std::sync::Arc;

use super::*;
use crate::crd::condition;
use crate::crd::slurmjob::Phase;
use crate::slurm::types::JobState;

fn job(id: u32, tag: &OwnerTag, states: &[&str]) -> Job {
    Job {
        job_id: id,
        state: JobState::from_strings(states),
        ..Job::bare().with_comment(tag.to_string())
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
    let t = OwnerTag::new("u", 1);
    let subs = Submissions::default();
    let s = state(
        Some(1),
        vec![
            job(7, &t, &["PENDING"]),
            job(8, &OwnerTag::new("u", 2), &["PENDING"]),
        ],
    );
    assert_eq!(existing(&s, &subs, &t), Some(7));
    assert_eq!(existing(&s, &subs, &OwnerTag::new("u", 3)), None);
    subs.record(&OwnerTag::new("u", 3), 9);
    assert_eq!(existing(&s, &subs, &OwnerTag::new("u", 3)), Some(9));
    subs.record(&OwnerTag::new("v", 1), 10);
    subs.forget_uid("u");
    assert_eq!(subs.len(), 1);
    assert_eq!(
        existing(&state(None, vec![]), &subs, &OwnerTag::new("v", 1)),
        Some(10)
    );
}

fn submitted_at(secs: i64) -> SlurmJobStatus {
    status::submitted(
        SlurmJobStatus::default(),
        7,
        1,
        ("Submitted", String::new()),
        at(secs),
        &[],
    )
}

fn at(secs: i64) -> condition::Time {
    status::time(DateTime::from_timestamp(secs, 0)).unwrap()
}

fn utc(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, 0).unwrap()
}

/// Issue 15, item 1, as it happened: a Completed SlurmJob (job 11, submitted at 1000) is edited
/// and re-run at 1600 as job 12. The next reconcile, 0.2 s later, reads an index whose last
/// complete listing began at 1599 — before the submit — so job 12 is not in it. That is no
/// evidence: the job is followed, not `Lost` (and no `Failed` Event). Only a listing that began
/// after the submit and still misses the job makes it gone (then accounting is asked).
#[test]
fn a_rerun_is_not_lost_in_a_listing_that_predates_its_submit() {
    let mut first = submitted_at(1000);
    first.job_id = Some(11);
    first.phase = Phase::Completed;
    first.exit_code = Some(0);
    let ready_since = condition::find(&first.conditions, status::READY)
        .unwrap()
        .last_transition_time
        .clone();

    // The edit: a new run, submitted as job 12 at 1600.
    let rerun = status::submitted(
        lifecycle::start_new_run(&first),
        12,
        2,
        ("Submitted", "submitted as Slurm job 12".into()),
        at(1600),
        &[],
    );
    assert_eq!(
        condition::find(&rerun.conditions, status::READY)
            .unwrap()
            .last_transition_time,
        ready_since,
        "Ready stays True across the re-run: its time is the first run's (the old evidence)"
    );
    assert_eq!(rerun.tracked_since, Some(at(1600)));

    // The listing before the submit, and one that began in the same second as it.
    let now = DateTime::from_timestamp_millis(1_600_200).unwrap();
    for synced in [1599, 1600, 1601] {
        let next = follow(&rerun, 12, &state(Some(synced), vec![]), now);
        assert_eq!(next.phase, Phase::Submitted, "listing at {synced}");
        assert_eq!(next, rerun, "nothing changes");
        assert!(
            crate::controller::slurmjob::notice::transitions(&rerun, &next).is_empty(),
            "no Event"
        );
    }
    // Then the poll lists it: followed as usual.
    let tag = OwnerTag::new("u", 2);
    let listed = follow(
        &rerun,
        12,
        &state(Some(1601), vec![job(12, &tag, &["RUNNING"])]),
        utc(1602),
    );
    assert_eq!(listed.phase, Phase::Running);
    // Evidence: a listing that began well after the submit, without the job.
    let missed = follow(&listed, 12, &state(Some(1603), vec![]), utc(1604));
    assert_eq!(missed.phase, Phase::Lost);
}

/// A status written before `trackedSince` existed is never called lost on the old, shared
/// `Ready` time: the evidence clock starts at the first step that follows it.
#[test]
fn a_status_without_tracked_since_starts_its_evidence_clock_now() {
    let mut old = submitted_at(1000);
    old.tracked_since = None;
    let next = follow(&old, 7, &state(Some(5000), vec![]), utc(5001));
    assert_eq!(next.phase, Phase::Submitted);
    assert_eq!(next.tracked_since, Some(at(5001)));
    let later = follow(&next, 7, &state(Some(5010), vec![]), utc(5011));
    assert_eq!(later.phase, Phase::Lost);
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

    let lost = status::lost(&s, 7, DateTime::from_timestamp(2000, 0).unwrap());
    assert_eq!(lost.phase, Phase::Lost);
    assert!(
        lost.state_reason
            .unwrap()
            .contains("Slurm job 7 left slurmctld")
    );
}

fn record(id: u32, comment: Option<&str>, array_job_id: Option<u32>) -> Job {
    let mut record = Job {
        job_id: id,
        state: JobState::from_strings(&["PENDING"]),
        array_job_id,
        ..Job::bare()
    };
    record.set_comment(comment.map(str::to_owned));
    record
}

#[test]
fn tagged_job_is_found_by_exact_tag_and_arrays_by_their_array_id() {
    let jobs = [
        record(3, Some("slurm.rs/uid=a,generation=1"), None),
        record(4, Some("slurm.rs/uid=a,generation=2"), None),
        record(5, Some("slurm.rs/uid=a,generation=10"), None),
        record(9, Some("slurm.rs/uid=b,generation=1"), Some(8)),
        record(8, Some("slurm.rs/uid=b,generation=1"), Some(8)),
    ];
    assert_eq!(
        find_tagged(
            &jobs,
            &OwnerTag::parse("slurm.rs/uid=a,generation=1").unwrap()
        ),
        Some(3)
    );
    assert_eq!(
        find_tagged(
            &jobs,
            &OwnerTag::parse("slurm.rs/uid=a,generation=2").unwrap()
        ),
        Some(4)
    );
    assert_eq!(
        find_tagged(
            &jobs,
            &OwnerTag::parse("slurm.rs/uid=b,generation=1").unwrap()
        ),
        Some(8)
    );
    assert_eq!(
        find_tagged(
            &jobs,
            &OwnerTag::parse("slurm.rs/uid=c,generation=1").unwrap()
        ),
        None
    );
    assert_eq!(find_tagged(&[], &OwnerTag::new("x", 1)), None);
}

// The submit decision as a table over plain data: every row is a set of facts, the SlurmJobs
// `dependsOn` can find, and the plan expected for them.

static TAG: std::sync::LazyLock<OwnerTag> = std::sync::LazyLock::new(|| OwnerTag::new("u", 1));

fn spec(extra: serde_json::Value) -> SlurmJobSpec {
    let mut spec = serde_json::json!({"clusterName": "local", "script": "#!/bin/sh\ntrue\n"});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(spec).unwrap()
}

/// The facts of a fresh first generation whose index is trusted and holds nothing of it.
fn facts(spec: &SlurmJobSpec) -> SubmitFacts<'_> {
    SubmitFacts {
        name: "train",
        tag: &TAG,
        generation: 1,
        spec,
        index_trusted: true,
        submitted_here: None,
        indexed: None,
        fresh: true,
        accounting: None,
    }
}

/// What a row expects, compared on what matters (a request is checked by its tag and name).
#[derive(Debug, PartialEq)]
enum Expect {
    Wait(&'static str, &'static str),
    Invalid(&'static str),
    Adopt(u32, bool),
    AskAccounting(&'static str),
    Submit { name: &'static str },
}

fn matches(plan: &SubmitPlan, expect: &Expect) -> bool {
    match (plan, expect) {
        (SubmitPlan::Wait { reason, message }, Expect::Wait(r, m)) => {
            reason == r && message.contains(m)
        }
        (SubmitPlan::Invalid(error), Expect::Invalid(m)) => error.to_string().contains(m),
        (SubmitPlan::Adopt { job_id, announced }, Expect::Adopt(id, a)) => {
            job_id == id && announced == a
        }
        (SubmitPlan::AskAccounting { name }, Expect::AskAccounting(n)) => name == n,
        (SubmitPlan::Submit(request), Expect::Submit { name }) => {
            request.comment == Some(TAG.to_string()) && request.name.as_deref() == Some(*name)
        }
        _ => false,
    }
}

#[test]
fn the_submit_decision() {
    let plain = spec(serde_json::json!({}));
    let named = spec(serde_json::json!({"name": "nightly"}));
    let no_interpreter = spec(serde_json::json!({"script": "echo hi"}));
    let depends = spec(serde_json::json!({"dependsOn": [{"name": "prep"}]}));
    let on_itself = spec(serde_json::json!({"dependsOn": [{"name": "train"}]}));
    let found = AccountingAnswer::Found(Some(41));
    let none = AccountingAnswer::Found(None);
    let failed = AccountingAnswer::Failed {
        reason: "Unreachable",
        message: "connection refused".into(),
    };
    let submitted = |_: &str| Some(Some(5));
    let missing = |_: &str| None;
    let unsubmitted = |_: &str| Some(None);
    type Deps<'a> = &'a dyn Fn(&str) -> Option<Option<i64>>;
    let rows: Vec<(&str, SubmitFacts<'_>, Deps<'_>, Expect)> = vec![
        (
            "an index not synced since this process started: wait, even for a tagged job",
            SubmitFacts {
                index_trusted: false,
                indexed: Some(8),
                ..facts(&plain)
            },
            &submitted,
            Expect::Wait(
                "WaitingForSlurmIndex",
                "complete list of the cluster's jobs",
            ),
        ),
        (
            "submitted by this process: adopted, already announced",
            SubmitFacts {
                submitted_here: Some(7),
                ..facts(&plain)
            },
            &submitted,
            Expect::Adopt(7, true),
        ),
        (
            "in the index: adopted, not announced yet",
            SubmitFacts {
                indexed: Some(8),
                ..facts(&plain)
            },
            &submitted,
            Expect::Adopt(8, false),
        ),
        (
            "this process's own record wins over the index",
            SubmitFacts {
                submitted_here: Some(7),
                indexed: Some(8),
                ..facts(&plain)
            },
            &submitted,
            Expect::Adopt(7, true),
        ),
        (
            "an existing job is adopted whatever the spec says now",
            SubmitFacts {
                indexed: Some(8),
                ..facts(&no_interpreter)
            },
            &missing,
            Expect::Adopt(8, false),
        ),
        (
            "a script without an interpreter line: invalid",
            facts(&no_interpreter),
            &submitted,
            Expect::Invalid("#!"),
        ),
        (
            "dependsOn naming itself: invalid, not a wait",
            facts(&on_itself),
            &submitted,
            Expect::Invalid("dependsOn names the SlurmJob itself (train)"),
        ),
        (
            "a dependency that does not exist: wait",
            facts(&depends),
            &missing,
            Expect::Wait("WaitingForDependencies", "do not exist: prep"),
        ),
        (
            "a dependency without a job id: wait",
            facts(&depends),
            &unsubmitted,
            Expect::Wait("WaitingForDependencies", "to be submitted: prep"),
        ),
        (
            "fresh, nothing tagged: submit at once, without accounting",
            facts(&depends),
            &submitted,
            Expect::Submit { name: "train" },
        ),
        (
            "not fresh: ask accounting first, by the object's name",
            SubmitFacts {
                fresh: false,
                ..facts(&plain)
            },
            &submitted,
            Expect::AskAccounting("train"),
        ),
        (
            "not fresh: ask accounting by the job name the spec sets",
            SubmitFacts {
                fresh: false,
                ..facts(&named)
            },
            &submitted,
            Expect::AskAccounting("nightly"),
        ),
        (
            "accounting holds the tagged job: adopt it",
            SubmitFacts {
                fresh: false,
                accounting: Some(&found),
                ..facts(&plain)
            },
            &submitted,
            Expect::Adopt(41, false),
        ),
        (
            "accounting holds none: submit",
            SubmitFacts {
                fresh: false,
                accounting: Some(&none),
                ..facts(&named)
            },
            &submitted,
            Expect::Submit { name: "nightly" },
        ),
        (
            "accounting did not answer: wait, naming why",
            SubmitFacts {
                fresh: false,
                accounting: Some(&failed),
                ..facts(&plain)
            },
            &submitted,
            Expect::Wait(
                "WaitingForAccounting",
                "generation 1 (Unreachable): connection refused",
            ),
        ),
    ];
    for (what, facts, deps, expect) in rows {
        let plan = submit(facts, deps);
        assert!(
            matches(&plan, &expect),
            "{what}: expected {expect:?}, planned {plan:?}"
        );
        // Accounting is asked at most once: with its answer the plan never asks again.
        if facts.accounting.is_some() {
            assert!(!matches!(plan, SubmitPlan::AskAccounting { .. }), "{what}");
        }
    }
}

#[test]
fn a_submitted_request_carries_the_tag_and_the_dependencies() {
    let depends = spec(serde_json::json!({"dependsOn": [{"name": "prep"}]}));
    let SubmitPlan::Submit(request) = submit(facts(&depends), |_| Some(Some(5))) else {
        panic!("no submit");
    };
    assert_eq!(request.comment, Some(TAG.to_string()));
    assert_eq!(request.dependency.as_deref(), Some("afterok:5"));
}

#[test]
fn only_a_young_first_generation_is_fresh() {
    let at = |s| DateTime::from_timestamp(s, 0).unwrap();
    assert!(fresh(1, Some(at(1000)), at(1029)));
    assert!(!fresh(1, Some(at(1000)), at(1030)));
    assert!(
        !fresh(2, Some(at(1000)), at(1001)),
        "an edit is never fresh"
    );
    assert!(!fresh(1, None, at(1001)), "unknown creation time");
}
