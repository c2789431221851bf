use std::sync::Arc;

use super::*;
use crate::crd::condition;
use crate::crd::slurmjob::Phase;
use crate::slurm::types::JobState;

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

/// A submit in doubt is past only once a listing of every job began more than the grace after
/// it; an incremental cycle, however recent, speaks only for the ids it asked.
#[test]
fn a_submit_in_doubt_is_past_only_after_a_full_listing_began_after_it() {
    let failed = DateTime::from_timestamp(100, 0).unwrap();
    let listed = |jobs: Option<i64>, full: Option<i64>| ClusterState {
        fully_listed_at: full.and_then(|s| DateTime::from_timestamp(s, 0)),
        ..state(jobs, vec![])
    };
    assert!(
        !past_doubt(&listed(Some(500), None), failed),
        "incremental cycles only"
    );
    assert!(
        !past_doubt(&listed(Some(500), Some(90)), failed),
        "listed before it"
    );
    assert!(
        !past_doubt(&listed(Some(500), Some(110)), failed),
        "within the grace"
    );
    assert!(past_doubt(&listed(Some(500), Some(111)), failed));
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
        let next = follow(
            &rerun,
            12,
            &state(Some(synced), vec![]),
            now,
            "u",
            &KEY,
            ALICE,
        );
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
        &state(Some(1601), vec![running(12, &tag)]),
        utc(1602),
        "u",
        &KEY,
        ALICE,
    );
    assert_eq!(listed.phase, Phase::Running);
    // Evidence: a listing that began well after the submit, without the job.
    let missed = follow(
        &listed,
        12,
        &state(Some(1603), vec![]),
        utc(1604),
        "u",
        &KEY,
        ALICE,
    );
    assert_eq!(missed.phase, Phase::Lost);
}

/// A job the index has not resolved (skipped at the first sync) or a listing did not ask about
/// (an incremental one, below the job's id) is not called lost: the caller asks for it.
#[test]
fn a_job_is_not_lost_while_the_index_cannot_speak_for_its_id() {
    let tag = OwnerTag::new("u", 1);
    let current = follow(
        &submitted_at(1000),
        12,
        &state(Some(1001), vec![running(12, &tag)]),
        utc(1001),
        "u",
        &KEY,
        ALICE,
    );
    assert_eq!(current.phase, Phase::Running);
    let synced_without = |unresolved: &[u32], up_to: Option<u32>| ClusterState {
        unresolved: Arc::new(unresolved.iter().copied().collect()),
        jobs_listed_up_to: up_to,
        ..state(Some(2000), vec![])
    };
    for (what, index, lost) in [
        ("resolved and listed: lost", synced_without(&[], None), true),
        (
            "skipped at the first sync",
            synced_without(&[12], None),
            false,
        ),
        (
            "an incremental listing up to 11",
            synced_without(&[], Some(11)),
            false,
        ),
        (
            "an incremental listing up to 12",
            synced_without(&[], Some(12)),
            true,
        ),
    ] {
        assert_eq!(resolved(&index, 12), lost, "{what}");
        let next = follow(&current, 12, &index, utc(2001), "u", &KEY, ALICE);
        assert_eq!(next.phase == Phase::Lost, lost, "{what}");
    }
    // Above what the incremental cycles probe (purged while the operator was away, above the
    // highest id slurmctld still holds): a listing of every job that began after it was tracked
    // speaks for it; one from before it was tracked does not, nor does any for an unresolved id.
    let fully_listed = |at: i64, unresolved: &[u32]| ClusterState {
        fully_listed_at: DateTime::from_timestamp(at, 0),
        ..synced_without(unresolved, Some(11))
    };
    for (what, index, lost) in [
        (
            "a full listing after it was tracked",
            fully_listed(1500, &[]),
            true,
        ),
        (
            "a full listing before it was tracked",
            fully_listed(999, &[]),
            false,
        ),
        ("within the grace", fully_listed(1001, &[]), false),
        ("unresolved", fully_listed(1500, &[12]), false),
    ] {
        assert!(!resolved(&index, 12), "{what}");
        let next = follow(&current, 12, &index, utc(2001), "u", &KEY, ALICE);
        assert_eq!(next.phase == Phase::Lost, lost, "{what}");
    }
}

/// A status written before `trackedSince` existed is never called lost on the old, shared
/// `Ready` time: the evidence clock starts at the first step that follows it.
#[test]
fn a_status_without_tracked_since_starts_its_evidence_clock_now() {
    let mut old = submitted_at(1000);
    old.tracked_since = None;
    let next = follow(
        &old,
        7,
        &state(Some(5000), vec![]),
        utc(5001),
        "u",
        &KEY,
        ALICE,
    );
    assert_eq!(next.phase, Phase::Submitted);
    assert_eq!(next.tracked_since, Some(at(5001)));
    let later = follow(
        &next,
        7,
        &state(Some(5010), vec![]),
        utc(5011),
        "u",
        &KEY,
        ALICE,
    );
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

/// The Slurm user the SlurmJobs of these tests run as.
const ALICE: Option<&str> = Some("alice");

/// A RUNNING job of `tag`, ours (signed for user alice).
fn running(id: u32, tag: &OwnerTag) -> Job {
    let mut job = owned(id, tag, "alice", None);
    job.state = JobState::from_strings(&["RUNNING"]);
    job
}

fn owned(id: u32, tag: &OwnerTag, user: &str, array_job_id: Option<u32>) -> Job {
    let mut job = record(id, Some(&KEY.comment(tag, user)), array_job_id);
    job.user_name = Some(user.to_owned());
    job
}

/// Which generations an edited SlurmJob's status names no run of: after its own run, and for a
/// re-run after the run its history begins with.
#[test]
fn the_generations_no_status_names_a_run_of() {
    assert_eq!(unrecorded_from(&SlurmJobStatus::default()), i64::MIN);
    let ran = SlurmJobStatus {
        job_id: Some(7),
        phase: Phase::Completed,
        submitted_generation: Some(2),
        observed_generation: Some(2),
        ..Default::default()
    };
    assert_eq!(unrecorded_from(&ran), 3);
    let rerun = lifecycle::start_new_run(&ran);
    assert_eq!(rerun.submitted_generation, None);
    assert_eq!(unrecorded_from(&rerun), 3);
    let refused = SlurmJobStatus {
        rejected_generation: Some(4),
        ..rerun.clone()
    };
    assert_eq!(unrecorded_from(&refused), 3, "a refused submit made no job");
}

/// Which earlier generation's job an edited SlurmJob adopts instead of submitting beside it:
/// the latest that no status names, has not ended and is provably ours; or this process's own
/// submit of it, unless the index shows it ended.
#[test]
fn an_earlier_generations_unrecorded_job_that_runs_is_found() {
    let t = |generation| OwnerTag::new("u", generation);
    let ended = |id: u32, tag: &OwnerTag| {
        let mut job = running(id, tag);
        job.state = JobState::from_strings(&["COMPLETED"]);
        job
    };
    let bobs = |id: u32, tag: &OwnerTag| owned(id, tag, "bob", None);
    let forged = |id: u32, tag: &OwnerTag| {
        let mut job = running(id, tag);
        job.set_comment(Some(format!(
            "slurm.rs/uid={},generation={}",
            tag.uid(),
            tag.generation()
        )));
        job
    };
    let mut array_task_running = running(31, &t(3));
    array_task_running.array_job_id = Some(30);
    let mut array_meta_pending = owned(30, &t(3), "alice", Some(30));
    array_meta_pending.state = JobState::from_strings(&["PENDING"]);
    let mut array_task_done = ended(32, &t(3));
    array_task_done.array_job_id = Some(30);
    type Row<'a> = (
        &'a str,
        Vec<Job>,
        Vec<(i64, u32)>,
        i64,
        i64,
        Option<(u32, i64)>,
    );
    let rows: Vec<Row<'_>> = vec![
        (
            "nothing carries an earlier tag",
            vec![running(5, &OwnerTag::new("other", 1))],
            vec![],
            1,
            4,
            None,
        ),
        (
            "a running job of generation 2",
            vec![running(5, &t(2))],
            vec![],
            1,
            4,
            Some((5, 2)),
        ),
        (
            "the latest generation of several",
            vec![running(5, &t(1)), running(6, &t(3)), running(7, &t(2))],
            vec![],
            1,
            4,
            Some((6, 3)),
        ),
        (
            "two jobs of the latest generation: the lowest id, as the current one's are adopted",
            vec![running(9, &t(2)), running(6, &t(2)), running(5, &t(1))],
            vec![],
            1,
            4,
            Some((6, 2)),
        ),
        (
            "one that ended is not a run to adopt",
            vec![ended(5, &t(2))],
            vec![],
            1,
            4,
            None,
        ),
        (
            "the current generation's own is not earlier",
            vec![running(5, &t(4))],
            vec![],
            1,
            4,
            None,
        ),
        (
            "a generation the status names a run of is not unrecorded",
            vec![running(5, &t(2))],
            vec![],
            3,
            4,
            None,
        ),
        (
            "another Slurm user's, signed for them: not ours",
            vec![bobs(5, &t(2))],
            vec![],
            1,
            4,
            None,
        ),
        (
            "an unsigned claim: not ours",
            vec![forged(5, &t(2))],
            vec![],
            1,
            4,
            None,
        ),
        (
            "an array with a task still running",
            vec![
                array_meta_pending.clone(),
                array_task_running,
                array_task_done.clone(),
            ],
            vec![],
            1,
            4,
            Some((30, 3)),
        ),
        (
            "this process's submit, not listed yet",
            vec![],
            vec![(2, 40)],
            1,
            4,
            Some((40, 2)),
        ),
        (
            "this process's submit, listed as ended",
            vec![ended(40, &t(2))],
            vec![(2, 40)],
            1,
            4,
            None,
        ),
        (
            "this process's submit, its id now another SlurmJob's (slurmctld lost its state)",
            vec![running(40, &OwnerTag::new("other", 2))],
            vec![(2, 40)],
            1,
            4,
            None,
        ),
        (
            "this process's submit, its id now an unsigned claim's",
            vec![forged(40, &t(2))],
            vec![(2, 40)],
            1,
            4,
            None,
        ),
        (
            "this process's submit of a generation the status names",
            vec![],
            vec![(2, 40)],
            3,
            4,
            None,
        ),
        (
            "generation 1, nothing before it",
            vec![running(5, &t(1))],
            vec![],
            i64::MIN,
            1,
            None,
        ),
    ];
    for (row, jobs, here, from, generation, expect) in rows {
        let index = state(Some(100), jobs);
        assert_eq!(
            earlier_run(&index, &here, "u", from, generation, "alice", &KEY),
            expect.map(|(job_id, generation)| EarlierRun { job_id, generation }),
            "{row}"
        );
    }
}

#[test]
fn tagged_job_is_found_by_exact_tag_and_arrays_by_their_array_id() {
    let tag = |uid: &str, generation| OwnerTag::new(uid, generation);
    let jobs = [
        owned(3, &tag("a", 1), "alice", None),
        owned(4, &tag("a", 2), "alice", None),
        owned(5, &tag("a", 10), "alice", None),
        owned(9, &tag("b", 1), "alice", Some(8)),
        owned(8, &tag("b", 1), "alice", Some(8)),
    ];
    let find = |t: &OwnerTag| adoptable(&jobs, t, "alice", &KEY);
    assert_eq!(find(&tag("a", 1)).job_id, Some(3));
    assert_eq!(find(&tag("a", 2)).job_id, Some(4));
    assert_eq!(find(&tag("b", 1)).job_id, Some(8));
    assert_eq!(find(&tag("b", 1)).refused, vec![]);
    assert_eq!(find(&tag("c", 1)), Adoptable::default());
    assert_eq!(
        adoptable(&[], &tag("x", 1), "alice", &KEY),
        Adoptable::default()
    );
}

/// Adoption as a table: the jobs carrying this generation's claim, and what is adopted and
/// refused. The SlurmJob submits as alice.
#[test]
fn only_a_tag_signed_for_this_slurmjob_and_its_user_is_adopted() {
    let t = OwnerTag::new("u", 1);
    let other_key = TagKey::new(&[9; 32]).unwrap();
    let forged_by_other_key = {
        let mut job = record(21, Some(&other_key.comment(&t, "alice")), None);
        job.user_name = Some("alice".into());
        job
    };
    // Alice's real tag, copied onto bob's job (a replay).
    let replayed = {
        let mut job = record(22, Some(&KEY.comment(&t, "alice")), None);
        job.user_name = Some("bob".into());
        job
    };
    // The tag of the next generation, guessed: a signature made for generation 2 on a claim of 1.
    let next_signature = KEY.comment(&OwnerTag::new("u", 2), "alice");
    let guessed = {
        let sig = next_signature.rsplit_once(",sig=").unwrap().1;
        let mut job = record(23, Some(&format!("{t},sig={sig}")), None);
        job.user_name = Some("alice".into());
        job
    };
    let unsigned = {
        let mut job = record(24, Some(&t.to_string()), None);
        job.user_name = Some("alice".into());
        job
    };
    let no_user = record(25, Some(&KEY.comment(&t, "alice")), None);
    let signed_for_bob = owned(26, &t, "bob", None);
    let ours = owned(30, &t, "alice", None);
    type Row = (&'static str, Vec<Job>, Option<u32>, Vec<(u32, NotAdopted)>);
    let rows: Vec<Row> = vec![
        ("ours", vec![ours.clone()], Some(30), vec![]),
        (
            "another key",
            vec![forged_by_other_key.clone()],
            None,
            vec![(21, NotAdopted::Forged)],
        ),
        (
            "replayed on bob's job",
            vec![replayed.clone()],
            None,
            vec![(22, NotAdopted::Forged)],
        ),
        (
            "guessed generation",
            vec![guessed.clone()],
            None,
            vec![(23, NotAdopted::Forged)],
        ),
        (
            "unsigned (legacy)",
            vec![unsigned.clone()],
            None,
            vec![(24, NotAdopted::Unsigned)],
        ),
        (
            "no user in the record",
            vec![no_user],
            None,
            vec![(25, NotAdopted::Forged)],
        ),
        (
            "signed for another user",
            vec![signed_for_bob],
            None,
            vec![(26, NotAdopted::OtherUser)],
        ),
        (
            "forgeries with lower ids do not hide ours",
            vec![forged_by_other_key, replayed, guessed, unsigned, ours],
            Some(30),
            vec![
                (21, NotAdopted::Forged),
                (22, NotAdopted::Forged),
                (23, NotAdopted::Forged),
                (24, NotAdopted::Unsigned),
            ],
        ),
    ];
    for (row, jobs, adopted, refused) in rows {
        let found = adoptable(&jobs, &t, "alice", &KEY);
        assert_eq!(found.job_id, adopted, "{row}");
        assert_eq!(found.refused, refused, "{row}");
        // What the plan does with it: adopt only a proven job, else submit our own.
        let spec = spec(serde_json::json!({}));
        let plan = submit(
            SubmitFacts {
                indexed: found.job_id,
                ..facts(&spec)
            },
            |_| None,
        );
        match adopted {
            Some(id) => assert_eq!(
                plan,
                SubmitPlan::Adopt {
                    job_id: id,
                    announced: false
                },
                "{row}"
            ),
            None => assert!(matches!(plan, SubmitPlan::Submit(_)), "{row}: {plan:?}"),
        }
    }
}

#[test]
fn follow_and_cancel_see_only_jobs_that_are_ours() {
    let uid = "u";
    let t = OwnerTag::new(uid, 1);
    let ours = owned(1, &t, "alice", None);
    let legacy = {
        let mut job = record(2, Some(&t.to_string()), None);
        job.user_name = Some("alice".into());
        job
    };
    let replayed = {
        let mut job = record(3, Some(&KEY.comment(&t, "alice")), None);
        job.user_name = Some("bob".into());
        job
    };
    let other_slurmjob = owned(4, &OwnerTag::new("v", 1), "alice", None);
    let foreign = record(5, None, None);
    assert!(is_ours(&ours, uid, &KEY));
    assert!(is_followed(&ours, uid, &KEY, ALICE));
    // Upgrade: a job the previous version submitted is followed (and cancelled) through the
    // SlurmJob's own status.jobId, but is not provably ours: not found by a scan.
    assert!(!is_ours(&legacy, uid, &KEY));
    assert!(is_followed(&legacy, uid, &KEY, ALICE));
    // Anyone may write an unsigned tag on their own job: it is followed only when run by the
    // Slurm user the SlurmJob's jobs run as (a forger's job under a reused id is not).
    assert!(!is_followed(&legacy, uid, &KEY, Some("bob")));
    assert!(!is_followed(&legacy, uid, &KEY, None));
    let forged_legacy = Job {
        user_name: Some("bob".into()),
        ..legacy.clone()
    };
    assert!(!is_followed(&forged_legacy, uid, &KEY, ALICE));
    for not_ours in [&replayed, &other_slurmjob, &foreign] {
        assert!(!is_ours(not_ours, uid, &KEY), "{not_ours:?}");
        assert!(!is_followed(not_ours, uid, &KEY, ALICE), "{not_ours:?}");
    }
    let s = state(
        Some(1),
        vec![ours, legacy, replayed, other_slurmjob, foreign],
    );
    let status = SlurmJobStatus::default();
    assert_eq!(
        to_cancel(uid, &status, Some(&s), &Submissions::default(), &KEY),
        vec![1]
    );
    // What this process submitted, whatever generation the status names (its write failed, or
    // the cache lags): a job the index does not show yet is cancelled too; one it shows ended is
    // not, nor another SlurmJob's.
    let submitted = Submissions::default();
    submitted.record(&OwnerTag::new(uid, 7), 40);
    submitted.record(&OwnerTag::new(uid, 8), 41);
    submitted.record(&OwnerTag::new("v", 1), 42);
    // An earlier run (before the generation the status names): not looked at again.
    submitted.record(&OwnerTag::new(uid, 2), 30);
    let mut ended = owned(40, &OwnerTag::new(uid, 7), "alice", None);
    ended.state.base = crate::slurm::types::JobBaseState::Completed;
    let with_ended = state(Some(1), vec![s.job_records(1)[0].clone(), ended]);
    let written_before = SlurmJobStatus {
        submitted_generation: Some(6),
        observed_generation: Some(6),
        ..Default::default()
    };
    assert_eq!(
        to_cancel(uid, &written_before, Some(&with_ended), &submitted, &KEY),
        vec![1, 41]
    );
    assert_eq!(
        to_cancel(uid, &written_before, None, &submitted, &KEY),
        vec![40, 41],
        "no index: every job submitted since, for cancel_owned to look at"
    );
    // The status's own run, ended: not a candidate, whatever the index holds.
    let ended_run = SlurmJobStatus {
        job_id: Some(41),
        phase: Phase::Completed,
        submitted_generation: Some(8),
        observed_generation: Some(8),
        ..Default::default()
    };
    assert_eq!(
        to_cancel(uid, &ended_run, None, &submitted, &KEY),
        Vec::<u32>::new()
    );
    // The status's own run, not ended in the status but in the index (a deletion does not
    // write the status): not a candidate again, and without its records it still is.
    let running_run = SlurmJobStatus {
        job_id: Some(40),
        phase: Phase::Running,
        submitted_generation: Some(8),
        observed_generation: Some(8),
        ..Default::default()
    };
    assert_eq!(
        to_cancel(
            uid,
            &running_run,
            Some(&with_ended),
            &Submissions::default(),
            &KEY
        ),
        vec![1]
    );
    assert_eq!(
        to_cancel(uid, &running_run, Some(&s), &Submissions::default(), &KEY),
        vec![1, 40]
    );
    // A status pointing at someone else's job mirrors nothing of it.
    let current = SlurmJobStatus {
        job_id: Some(3),
        phase: Phase::Submitted,
        tracked_since: Some(at(10)),
        ..Default::default()
    };
    let now = DateTime::from_timestamp(10, 0).unwrap();
    assert_eq!(follow(&current, 3, &s, now, uid, &KEY, ALICE), current);
    assert_eq!(
        follow(&current, 1, &s, now, uid, &KEY, ALICE).slurm_state,
        vec!["PENDING"]
    );
    assert_eq!(
        follow(&current, 2, &s, now, uid, &KEY, ALICE).slurm_state,
        vec!["PENDING"],
        "a legacy job is followed through status.jobId"
    );
    // Bob's job under our id, with our unsigned tag: neither mirrored nor depended on.
    let forged = state(
        Some(1),
        vec![Job {
            job_id: 6,
            ..forged_legacy
        }],
    );
    let current = SlurmJobStatus {
        job_id: Some(6),
        ..current
    };
    assert_eq!(follow(&current, 6, &forged, now, uid, &KEY, ALICE), current);
    assert_eq!(
        dependee_phase(uid, &current, &forged, now, &KEY, ALICE),
        Some(Phase::Lost)
    );
}

/// A dependee is judged by what the index shows now, not only by its status: a job whose id
/// now names another SlurmJob's job is `Lost` (its id is never handed to Slurm); one slurmctld
/// forgot is not judged until its own reconcile asked accounting (`None`); one the index shows
/// ended is judged by how it ended.
#[test]
fn a_dependee_is_judged_by_the_index_now() {
    let uid = "dep";
    let tag = OwnerTag::new(uid, 1);
    let live = SlurmJobStatus {
        job_id: Some(12),
        phase: Phase::Running,
        tracked_since: Some(at(1000)),
        ..Default::default()
    };
    let ended = |state: &str| {
        let mut job = owned(12, &tag, "alice", None);
        job.state = JobState::from_strings(&[state]);
        job
    };
    let phase = |status: &SlurmJobStatus, s: &ClusterState| {
        dependee_phase(uid, status, s, utc(2000), &KEY, ALICE)
    };
    let theirs = owned(12, &OwnerTag::new("other", 1), "alice", None);
    for (what, status, index, expect) in [
        (
            "its job in the index",
            &live,
            state(Some(1500), vec![running(12, &tag)]),
            Some(Phase::Running),
        ),
        (
            "its job ended, its status not written yet",
            &live,
            state(Some(1500), vec![ended("COMPLETED")]),
            Some(Phase::Completed),
        ),
        (
            "its id names another SlurmJob's job",
            &live,
            state(Some(900), vec![theirs.clone()]),
            Some(Phase::Lost),
        ),
        (
            "its job missing from a listing that began after it: how it ended is not known yet",
            &live,
            state(Some(1500), vec![]),
            None,
        ),
        (
            "no listing since its submit: no evidence",
            &live,
            state(Some(1001), vec![]),
            Some(Phase::Running),
        ),
        (
            "ended: its own status is the verdict",
            &SlurmJobStatus {
                phase: Phase::Completed,
                ..live.clone()
            },
            state(Some(1500), vec![theirs.clone()]),
            Some(Phase::Completed),
        ),
        (
            "not submitted",
            &SlurmJobStatus::default(),
            state(Some(1500), vec![theirs]),
            Some(SlurmJobStatus::default().phase),
        ),
    ] {
        assert_eq!(phase(status, &index), expect, "{what}");
    }
}

/// Which SlurmJobs hold a SlurmCluster being deleted: only those whose own deletion may have
/// something to cancel through it. A tenant's SlurmJob that never ran (refused `NoAccess`, or
/// waiting for a submit the going cluster will not make), or whose run ended, does not.
#[test]
fn a_deleted_cluster_is_held_only_by_slurmjobs_that_may_run_something() {
    let uid = "u";
    let lost = state(
        Some(1),
        vec![owned(9, &OwnerTag::new(uid, 1), "alice", None)],
    );
    let others = state(
        Some(1),
        vec![owned(8, &OwnerTag::new("v", 1), "alice", None)],
    );
    let live = SlurmJobStatus {
        job_id: Some(5),
        phase: Phase::Running,
        submitted_generation: Some(1),
        observed_generation: Some(1),
        ..Default::default()
    };
    let ended = SlurmJobStatus {
        phase: Phase::Completed,
        ..live.clone()
    };
    // What a namespace without access gets: a status, never a run.
    let refused = SlurmJobStatus {
        observed_generation: Some(1),
        ..Default::default()
    };
    let user = |status, generation, finalized, deleting| ClusterUser {
        uid,
        generation,
        status,
        finalized,
        deleting,
    };
    let (none, live, ended, refused) = (None, Some(&live), Some(&ended), Some(&refused));
    // (row, the SlurmJob, index, in doubt holds, holds)
    let rows: Vec<(&str, ClusterUser<'_>, Option<&ClusterState>, bool, bool)> = vec![
        (
            "a live run",
            user(live, 1, true, false),
            Some(&others),
            true,
            true,
        ),
        (
            "a live run, no index",
            user(live, 1, true, false),
            None,
            false,
            true,
        ),
        (
            "a live run, deleting",
            user(live, 2, true, true),
            Some(&others),
            true,
            true,
        ),
        (
            "no finalizer: never taken on",
            user(live, 1, false, false),
            None,
            true,
            false,
        ),
        (
            "ended",
            user(ended, 1, true, false),
            Some(&others),
            true,
            false,
        ),
        (
            "ended, no index",
            user(ended, 1, true, false),
            None,
            true,
            false,
        ),
        (
            "ended, then edited: no submit comes",
            user(ended, 2, true, false),
            Some(&others),
            true,
            false,
        ),
        (
            "refused (NoAccess)",
            user(refused, 1, true, false),
            Some(&others),
            true,
            false,
        ),
        (
            "no status yet",
            user(none, 1, true, false),
            Some(&others),
            true,
            false,
        ),
        (
            "a submit whose answer was lost",
            user(none, 1, true, false),
            Some(&lost),
            true,
            true,
        ),
        (
            "no index: a lost submit may hide",
            user(refused, 1, true, false),
            None,
            true,
            true,
        ),
        (
            "no index, the deadline passed",
            user(refused, 1, true, false),
            None,
            false,
            false,
        ),
        (
            "edited after the end, no index",
            user(ended, 2, true, false),
            None,
            true,
            true,
        ),
        (
            "ended and deleting, no index",
            user(ended, 2, true, true),
            None,
            true,
            false,
        ),
    ];
    for (row, user, index, in_doubt_holds, holds) in rows {
        let live = index.map(|state| live_owners(state, &KEY));
        assert_eq!(
            needs_cluster(user, live.as_ref(), in_doubt_holds),
            holds,
            "{row}"
        );
    }
}

// The submit decision as a table over plain data: every row is a set of facts, the SlurmJobs
// `dependsOn` can find, and the plan expected for them.

static TAG: std::sync::LazyLock<OwnerTag> = std::sync::LazyLock::new(|| OwnerTag::new("u", 1));
static KEY: std::sync::LazyLock<TagKey> =
    std::sync::LazyLock::new(|| TagKey::new(&[7; 32]).unwrap());

fn spec(extra: serde_json::Value) -> SlurmJobSpec {
    let mut spec = serde_json::json!({"clusterName": "local", "script": "#!/bin/sh\ntrue\n"});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(spec).unwrap()
}

static NONE_UNREADABLE: BTreeMap<u32, &Unreadable> = BTreeMap::new();

/// The facts of a fresh first generation whose index is trusted and holds nothing of it.
fn facts(spec: &SlurmJobSpec) -> SubmitFacts<'_> {
    SubmitFacts {
        name: "train",
        tag: &TAG,
        user: "alice",
        key: &KEY,
        generation: 1,
        spec,
        index_trusted: true,
        unreadable: &NONE_UNREADABLE,
        submitted_here: None,
        indexed: None,
        fresh: true,
        accounting: None,
        in_doubt: None,
        earlier: None,
        takeover: None,
        listing_failing_since: None,
    }
}

/// What a row expects, compared on what matters (a request is checked by its tag and name).
#[derive(Debug, PartialEq)]
enum Expect {
    Wait(&'static str, &'static str),
    Invalid(&'static str),
    Adopt(u32, bool),
    AskAccounting(&'static str),
    AdoptEarlier(u32, i64),
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
        (SubmitPlan::AdoptEarlier(earlier), Expect::AdoptEarlier(id, g)) => {
            earlier.job_id == *id && earlier.generation == *g
        }
        (SubmitPlan::Submit(request), Expect::Submit { name }) => {
            request.comment == Some(KEY.comment(&TAG, "alice"))
                && request.name.as_deref() == Some(*name)
        }
        _ => false,
    }
}

/// The wait for an index held back by some job's unreadable record names neither the job nor
/// what reading it said: it may be any user's, and the message is the tenant's to read.
#[test]
fn an_unreadable_record_of_an_unknown_owner_is_not_named_to_the_tenant() {
    let plain = spec(serde_json::json!({}));
    let unread = Unreadable {
        reason: "ResponseTooLarge",
        message: "slurmrestd's answer to job 48213 is larger than the 33554432-byte limit".into(),
        since: DateTime::from_timestamp(100, 0).unwrap(),
    };
    let unreadable = BTreeMap::from([(48213, &unread)]);
    let facts = SubmitFacts {
        index_trusted: false,
        unreadable: &unreadable,
        ..facts(&plain)
    };
    let SubmitPlan::Wait { reason, message } = submit(facts, |_| None) else {
        panic!("not a wait");
    };
    assert_eq!(reason, "WaitingForSlurmIndex");
    assert!(message.contains("ResponseTooLarge"), "{message}");
    for secret in ["48213", "33554432"] {
        assert!(!message.contains(secret), "{secret} in {message}");
    }
}

#[test]
fn the_submit_decision() {
    let plain = spec(serde_json::json!({}));
    let named = spec(serde_json::json!({"name": "nightly"}));
    let no_interpreter = spec(serde_json::json!({"script": "echo hi"}));
    let depends = spec(serde_json::json!({"dependsOn": [{"name": "prep"}]}));
    let on_itself = spec(serde_json::json!({"dependsOn": [{"name": "train"}]}));
    let long_output = spec(serde_json::json!({
        "dependsOn": [{"name": "prep"}],
        "output": {"volume": "results", "slurmPath": "/shared"},
    }));
    let long_name = "n".repeat(241);
    // As the cache keeps it: the keys of extraOptions, not their values.
    let refused_option = spec(serde_json::json!({
        "dependsOn": [{"name": "prep"}],
        "extraOptions": {"requeue": null, "reservation": null},
    }));
    let found = AccountingAnswer::Found(Some(41));
    let none = AccountingAnswer::Found(None);
    let unresolved = AccountingAnswer::Unresolved(vec![7, 20]);
    let unresolved_more = AccountingAnswer::Unresolved(vec![7, 20, 77]);
    let failed = AccountingAnswer::Failed {
        reason: "Unreachable",
        message: "connection refused".into(),
    };
    let submitted = |_: &str| Some(Dependee::new("local", Some(5)));
    let missing = |_: &str| None;
    let unsubmitted = |_: &str| Some(Dependee::new("local", None));
    let lost = |_: &str| Some(Dependee::new("local", Some(5)).in_phase(Some(Phase::Lost)));
    let settling = |_: &str| Some(Dependee::new("local", Some(5)).settling());
    let in_cycle =
        |_: &str| Some(Dependee::new("local", None).in_cycle(vec!["prep".into(), "fetch".into()]));
    let in_long_cycle = |_: &str| {
        let chain = (0..10).map(|i| format!("link-{i}")).collect();
        Some(Dependee::new("local", None).in_cycle(chain))
    };
    let failed_dependee =
        |_: &str| Some(Dependee::new("local", Some(5)).in_phase(Some(Phase::Failed)));
    let completed =
        |_: &str| Some(Dependee::new("local", Some(5)).in_phase(Some(Phase::Completed)));
    let elsewhere = |_: &str| Some(Dependee::new("other", Some(5)));
    let unread = Unreadable {
        reason: "DecodeError",
        message: "cannot decode".into(),
        since: DateTime::from_timestamp(100, 0).unwrap(),
    };
    let unreadable = BTreeMap::from([(20, &unread), (77, &unread)]);
    let doubt = Doubt {
        since: DateTime::from_timestamp(100, 0).unwrap(),
        error: "Timeout: slurmrestd did not answer within 30s".into(),
    };
    let takeover = Takeover {
        at: DateTime::from_timestamp(100, 0).unwrap(),
        in_flight: chrono::TimeDelta::seconds(30),
    };
    type Deps<'a> = &'a dyn Fn(&str) -> Option<Dependee>;
    let rows: Vec<(&str, SubmitFacts<'_>, Deps<'_>, Expect)> = vec![
        (
            "a submit of this process got no answer, and no listing of every job since: wait",
            SubmitFacts {
                in_doubt: Some((1, &doubt)),
                ..facts(&plain)
            },
            &submitted,
            Expect::Wait(
                "SubmitFailed",
                "the submit of generation 1 failed without saying whether Slurm made the job \
                 (Timeout: slurmrestd did not answer within 30s); waiting for a listing of all \
                 the cluster's jobs that began after it",
            ),
        ),
        (
            "in doubt, and the job it made in the index: adopted",
            SubmitFacts {
                in_doubt: Some((1, &doubt)),
                indexed: Some(8),
                ..facts(&plain)
            },
            &submitted,
            Expect::Adopt(8, false),
        ),
        (
            "a takeover of the leader Lease not yet past: wait for the predecessor's submit",
            SubmitFacts {
                takeover: Some(takeover),
                ..facts(&plain)
            },
            &submitted,
            Expect::Wait(
                "WaitingForSlurmIndex",
                "this operator replica began to act at 1970-01-01T00:01:40Z (it started, or \
                 became the leader); the one before it may have submitted this generation right \
                 before, and Slurm may make that job up to 40 s later",
            ),
        ),
        (
            "a takeover while the cluster's listing of every job fails: said, without why",
            SubmitFacts {
                takeover: Some(takeover),
                listing_failing_since: DateTime::from_timestamp(160, 0),
                ..facts(&plain)
            },
            &submitted,
            Expect::Wait(
                "WaitingForSlurmIndex",
                "submitted twice; that listing has failed since 1970-01-01T00:02:40Z, which the \
                 SlurmCluster's administrator can look into (its JobsListed condition says why)",
            ),
        ),
        (
            "in doubt while the cluster's listing of every job fails: said",
            SubmitFacts {
                in_doubt: Some((1, &doubt)),
                listing_failing_since: DateTime::from_timestamp(160, 0),
                ..facts(&plain)
            },
            &submitted,
            Expect::Wait(
                "SubmitFailed",
                "instead of submitted twice; that listing has failed since 1970-01-01T00:02:40Z",
            ),
        ),
        (
            "a takeover, and the predecessor's job in the index: adopted",
            SubmitFacts {
                takeover: Some(takeover),
                indexed: Some(8),
                ..facts(&plain)
            },
            &submitted,
            Expect::Adopt(8, false),
        ),
        (
            "in doubt, and the index not synced since the start: the index's wait first",
            SubmitFacts {
                in_doubt: Some((1, &doubt)),
                index_trusted: false,
                ..facts(&plain)
            },
            &submitted,
            Expect::Wait("WaitingForSlurmIndex", "complete list"),
        ),
        (
            "an earlier generation's submit in doubt, the spec edited since: wait, naming both",
            SubmitFacts {
                in_doubt: Some((1, &doubt)),
                generation: 2,
                ..facts(&plain)
            },
            &submitted,
            Expect::Wait(
                "SubmitFailed",
                "the submit of generation 1 failed without saying whether Slurm made the job \
                 (Timeout: slurmrestd did not answer within 30s) (the spec was edited since: \
                 generation 2); waiting for a listing",
            ),
        ),
        (
            "an earlier generation's job that no status names still runs: adopted as that run",
            SubmitFacts {
                earlier: Some(EarlierRun {
                    job_id: 9,
                    generation: 1,
                }),
                generation: 2,
                fresh: false,
                ..facts(&plain)
            },
            &submitted,
            Expect::AdoptEarlier(9, 1),
        ),
        (
            "this generation's own job comes before an earlier one's",
            SubmitFacts {
                earlier: Some(EarlierRun {
                    job_id: 9,
                    generation: 1,
                }),
                indexed: Some(12),
                generation: 2,
                ..facts(&plain)
            },
            &submitted,
            Expect::Adopt(12, false),
        ),
        (
            "an earlier run while a takeover is not past: the takeover's wait first (the \
             predecessor may have submitted this generation too)",
            SubmitFacts {
                earlier: Some(EarlierRun {
                    job_id: 9,
                    generation: 1,
                }),
                takeover: Some(takeover),
                generation: 2,
                ..facts(&plain)
            },
            &submitted,
            Expect::Wait("WaitingForSlurmIndex", "this operator replica began to act"),
        ),
        (
            "an earlier run, even of a spec that cannot be submitted now: adopted",
            SubmitFacts {
                earlier: Some(EarlierRun {
                    job_id: 9,
                    generation: 1,
                }),
                generation: 2,
                ..facts(&no_interpreter)
            },
            &submitted,
            Expect::AdoptEarlier(9, 1),
        ),
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
            "the index held back by a record that cannot be read, whose owner is unknown: said",
            SubmitFacts {
                index_trusted: false,
                unreadable: &unreadable,
                ..facts(&plain)
            },
            &submitted,
            Expect::Wait(
                "WaitingForSlurmIndex",
                "while a job whose owner is not known yet has a record that cannot be read \
                 (DecodeError; since 1970-01-01T00:01:40Z), which the SlurmCluster's \
                 administrator can look into (the operator's log names the job)",
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
            "with output, a name too long for its file: invalid before its dependencies",
            SubmitFacts {
                name: &long_name,
                ..facts(&long_output)
            },
            &missing,
            Expect::Invalid("metadata.name must be at most 240 characters"),
        ),
        (
            "an extraOptions key that is refused: invalid before its dependencies, not hours \
             later",
            facts(&refused_option),
            &missing,
            Expect::Invalid("extraOptions.reservation"),
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
            "a dependency that waits, through another, for this job: a cycle, named",
            facts(&depends),
            &in_cycle,
            Expect::Wait(
                "WaitingForDependencies",
                "dependsOn makes a cycle: train → prep → fetch → train (each waits for the next \
                 to be submitted), so none of them can be: edit the dependsOn of one of them",
            ),
        ),
        (
            "a long cycle: its first SlurmJobs named, and how many more",
            facts(&depends),
            &in_long_cycle,
            Expect::Wait(
                "WaitingForDependencies",
                "train → link-0 → link-1 → link-2 → link-3 → link-4 → link-5 → link-6 → link-7 \
                 → … (2 more) → train (each",
            ),
        ),
        (
            "a dependency whose job left slurmctld, its end not known yet: wait, no id sent",
            facts(&depends),
            &settling,
            Expect::Wait(
                "WaitingForDependencies",
                "waiting to learn how the Slurm jobs of these SlurmJobs ended (they left \
                 slurmctld; the cluster's accounting is asked): prep",
            ),
        ),
        (
            "a dependency whose job is lost: wait, its job id is not sent",
            facts(&depends),
            &lost,
            Expect::Wait(
                "WaitingForDependencies",
                "whose Slurm job is lost: prep; how it ended is not known",
            ),
        ),
        (
            "an afterok dependency that ended Failed: wait, the job could never run",
            facts(&depends),
            &failed_dependee,
            Expect::Wait(
                "DependencyNeverSatisfied",
                "dependsOn cannot be met: prep ended Failed, which afterok rules out",
            ),
        ),
        (
            "an afterok dependency that ended Completed: submitted without its id",
            facts(&depends),
            &completed,
            Expect::Submit { name: "train" },
        ),
        (
            "a dependency on another cluster: wait, its job id is not sent",
            facts(&depends),
            &elsewhere,
            Expect::Wait(
                "WaitingForDependencies",
                "another cluster than this job's (local): prep (clusterName other)",
            ),
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
            "accounting holds untagged jobs of that name the index skipped: wait for their \
             records in slurmctld (only they show the tag of a job not ended yet)",
            SubmitFacts {
                fresh: false,
                accounting: Some(&unresolved),
                ..facts(&plain)
            },
            &submitted,
            Expect::Wait(
                "WaitingForSlurmIndex",
                "Slurm jobs 7, 20 (same name and user",
            ),
        ),
        (
            "one of them cannot be read: said",
            SubmitFacts {
                fresh: false,
                accounting: Some(&unresolved),
                unreadable: &unreadable,
                ..facts(&plain)
            },
            &submitted,
            Expect::Wait(
                "WaitingForSlurmIndex",
                "earlier submit of generation 1; Slurm job 20's record, whose owner is not \
                 known yet, cannot be read (DecodeError",
            ),
        ),
        (
            "two of them cannot be read: one named, the other counted",
            SubmitFacts {
                fresh: false,
                accounting: Some(&unresolved_more),
                unreadable: &unreadable,
                ..facts(&plain)
            },
            &submitted,
            Expect::Wait(
                "WaitingForSlurmIndex",
                "Slurm job 20's record, whose owner is not known yet, cannot be read \
                 (DecodeError: cannot decode; since 1970-01-01T00:01:40Z), and 1 more of them \
                 cannot be read either",
            ),
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
    let SubmitPlan::Submit(request) =
        submit(facts(&depends), |_| Some(Dependee::new("local", Some(5))))
    else {
        panic!("no submit");
    };
    assert_eq!(request.comment, Some(KEY.comment(&TAG, "alice")));
    assert_eq!(request.dependency.as_deref(), Some("afterok:5"));
    // Met already: slurmctld is not asked about an id it may have given to another job since.
    let SubmitPlan::Submit(request) = submit(facts(&depends), |_| {
        Some(Dependee::new("local", Some(5)).in_phase(Some(Phase::Completed)))
    }) else {
        panic!("no submit");
    };
    assert_eq!(request.dependency, None);
}

#[test]
fn only_a_young_first_generation_is_fresh() {
    let at = |s| DateTime::from_timestamp(s, 0).unwrap();
    assert!(fresh(1, Some(at(1000)), at(1029), None));
    assert!(!fresh(1, Some(at(1000)), at(1030), None));
    assert!(
        !fresh(2, Some(at(1000)), at(1001), None),
        "an edit is never fresh"
    );
    assert!(!fresh(1, None, at(1001), None), "unknown creation time");
    // The index skipped the jobs listed at 990: a SlurmJob created before (or within the
    // clocks' margin of) that listing may have been submitted by an earlier incarnation into
    // the skipped jobs; only accounting can tell.
    for (created, skipped_before, want) in [
        (1000, 990, true),
        (1000, 998, false),
        (1000, 1000, false),
        (1000, 1010, false),
    ] {
        assert_eq!(
            fresh(1, Some(at(created)), at(1005), Some(at(skipped_before))),
            want,
            "created {created}, skipped before {skipped_before}"
        );
    }
}

#[test]
fn accounting_candidates_are_the_users_jobs_without_a_comment() {
    let record = |id: u32, array: Option<u32>, user: &str, comment: Option<&str>| {
        let mut job = Job {
            job_id: id,
            array_job_id: array,
            user_name: Some(user.into()),
            ..Job::bare()
        };
        job.set_comment(comment.map(str::to_owned));
        job
    };
    let records = [
        record(7, None, "alice", None),
        record(9, None, "bob", None),
        record(11, None, "alice", Some("ended: its comment is stored")),
        record(20, Some(20), "alice", None),
        record(21, Some(20), "alice", None),
        record(3, None, "alice", None),
    ];
    assert_eq!(accounting_candidates(&records, "alice"), vec![3, 7, 20]);
    assert!(accounting_candidates(&records, "carol").is_empty());
}

/// Accounting's records of one job id: with comments, ours by the tag; without (slurmdbd with no
/// `job_comment` flag), the run submitted when ours was, never a reused id's other job.
#[test]
fn accounting_records_are_the_followed_runs_own() {
    let t = OwnerTag::new("u", 1);
    let rec = |array: Option<u32>, user: &str, submitted: i64, comment: Option<String>| {
        let mut job = Job {
            job_id: 7,
            array_job_id: array,
            user_name: Some(user.into()),
            submit_time: Some(utc(submitted)),
            ..Job::bare()
        };
        job.set_comment(comment);
        job
    };
    let plain = |user: &str, submitted: i64| rec(None, user, submitted, None);
    // Run `states` of job "train", submitted at `submitted`; one that ended, 100 s later (a
    // requeue submits the next run then).
    let ended_as = |user: &str, submitted: i64, states: &[&str]| {
        let state = JobState::from_strings(states);
        Job {
            name: "train".into(),
            end_time: (state.base != JobBaseState::Running).then(|| utc(submitted + 100)),
            state,
            ..plain(user, submitted)
        }
    };
    let task = |user: &str, submitted: i64| rec(Some(7), user, submitted, None);
    let seen = |submitted: i64| SlurmJobStatus {
        job_id: Some(7),
        submit_time: Some(at(submitted)),
        tracked_since: Some(at(submitted + 1)),
        ..Default::default()
    };
    let unseen = |tracked: i64| SlurmJobStatus {
        job_id: Some(7),
        tracked_since: Some(at(tracked)),
        ..Default::default()
    };
    let ours_tagged = rec(None, "alice", 1_000, Some(KEY.comment(&t, "alice")));
    let theirs_tagged = rec(
        None,
        "bob",
        5_000,
        Some(KEY.comment(&OwnerTag::new("v", 1), "bob")),
    );
    let times = |records: Vec<Job>| -> Vec<(String, i64)> {
        records
            .iter()
            .map(|j| {
                (
                    j.user_name.clone().unwrap_or_default(),
                    j.submit_time.unwrap().timestamp(),
                )
            })
            .collect()
    };
    type Rows = Vec<(
        &'static str,
        Vec<Job>,
        SlurmJobStatus,
        Vec<(&'static str, i64)>,
    )>;
    let rows: Rows = vec![
        (
            "tagged: ours by the tag, another SlurmJob's record under the reused id left out",
            vec![ours_tagged.clone(), theirs_tagged.clone()],
            seen(1_000),
            vec![("alice", 1_000)],
        ),
        (
            "tagged beside comment-less: only the tagged one (the other is a reused id's)",
            vec![theirs_tagged, plain("alice", 9_000), ours_tagged.clone()],
            seen(1_000),
            vec![("alice", 1_000)],
        ),
        (
            "no comments: the record submitted when ours was, not a reused id's, earlier or later",
            vec![
                plain("carol", 100),
                plain("alice", 1_000),
                plain("bob", 9_000),
            ],
            seen(1_000),
            vec![("alice", 1_000)],
        ),
        (
            "no comments, requeued since (twice): each later run of its name after a requeue \
             (the latest is the run)",
            vec![
                ended_as("alice", 1_100, &["NODE_FAIL"]),
                ended_as("alice", 1_000, &["PENDING", "REQUEUED"]),
                ended_as("alice", 1_200, &["COMPLETED"]),
            ],
            seen(1_000),
            vec![("alice", 1_000), ("alice", 1_100), ("alice", 1_200)],
        ),
        (
            "no comments: a job of that name submitted long after the run's final NODE_FAIL is a \
             reused id's",
            vec![
                ended_as("alice", 1_000, &["NODE_FAIL"]),
                ended_as("alice", 9_000, &["COMPLETED"]),
            ],
            seen(1_000),
            vec![("alice", 1_000)],
        ),
        (
            "no comments: a requeue's chain ends at a record not taken (another job's between)",
            vec![
                ended_as("alice", 1_000, &["PENDING", "REQUEUED"]),
                Job {
                    name: "other".into(),
                    ..ended_as("alice", 1_100, &["COMPLETED"])
                },
                ended_as("alice", 1_200, &["COMPLETED"]),
            ],
            seen(1_000),
            vec![("alice", 1_000)],
        ),
        (
            "no comments, never observed: the first within the slack, not another job's after it",
            vec![
                ended_as("alice", 1_010, &["COMPLETED"]),
                Job {
                    name: "other".into(),
                    ..ended_as("alice", 1_200, &["COMPLETED"])
                },
            ],
            unseen(1_000),
            vec![("alice", 1_010)],
        ),
        (
            "no comments: a later job of the same user under another name is a reused id's",
            vec![
                ended_as("alice", 1_000, &["PENDING", "REQUEUED"]),
                Job {
                    name: "other".into(),
                    ..plain("alice", 1_500)
                },
            ],
            seen(1_000),
            vec![("alice", 1_000)],
        ),
        (
            "no comments: a later job of the same user and name after a run that was not \
             requeued (left running by a reset) is a reused id's, maybe another namespace's",
            vec![
                ended_as("alice", 1_000, &["RUNNING"]),
                ended_as("alice", 1_500, &["COMPLETED"]),
            ],
            seen(1_000),
            vec![("alice", 1_000)],
        ),
        (
            "no comments, a reused id's record only: none is ours",
            vec![plain("bob", 9_000)],
            seen(1_000),
            vec![],
        ),
        (
            "no comments, never observed: within the slack of trackedSince",
            vec![plain("bob", 100), plain("alice", 1_010)],
            unseen(1_000),
            vec![("alice", 1_010)],
        ),
        (
            "no comments, never observed: another user's job within the slack is not ours",
            vec![plain("bob", 1_200)],
            unseen(1_000),
            vec![],
        ),
        (
            "no comments, seen: another user's job submitted the same second is not ours",
            vec![plain("bob", 1_000)],
            seen(1_000),
            vec![],
        ),
        (
            "no comments, never observed: beyond the slack is another job",
            vec![plain("bob", 1_000 + SUBMIT_CLOCK_SLACK.num_seconds() + 1)],
            unseen(1_000),
            vec![],
        ),
        (
            "no comments and neither time known: nothing to tell ours by",
            vec![plain("alice", 1_000)],
            SlurmJobStatus::default(),
            vec![],
        ),
        (
            "an array: its tasks, requeued ones later, not an earlier array's nor another user's",
            vec![
                task("carol", 100),
                task("alice", 1_000),
                task("alice", 1_000),
                task("alice", 1_500),
                task("bob", 2_000),
            ],
            seen(1_000),
            vec![("alice", 1_000), ("alice", 1_000), ("alice", 1_500)],
        ),
    ];
    for (name, records, status, want) in rows {
        let want: Vec<(String, i64)> = want.into_iter().map(|(u, t)| (u.into(), t)).collect();
        assert_eq!(
            times(accounting_ours(&records, &t, &KEY, &status, Some("alice"))),
            want,
            "{name}"
        );
    }
    // Without the SlurmJob's Slurm user, a comment-less record cannot be told from another
    // user's; a tagged one still can.
    assert_eq!(
        times(accounting_ours(
            &[plain("alice", 1_000)],
            &t,
            &KEY,
            &seen(1_000),
            None
        )),
        vec![]
    );
    assert_eq!(
        times(accounting_ours(
            std::slice::from_ref(&ours_tagged),
            &t,
            &KEY,
            &seen(1_000),
            None
        )),
        vec![("alice".to_string(), 1_000)]
    );
}

#[test]
fn the_cleanup_decision() {
    let at = |s| DateTime::from_timestamp(s, 0).unwrap();
    let connected = Reach::Connected {
        index_trusted: true,
    };
    let unsynced = Reach::Connected {
        index_trusted: false,
    };
    let failed = Blocker::CancelFailed {
        job_id: 7,
        reason: "Unreachable",
        message: "connection refused".into(),
    };
    let running: &[u32] = &[7, 9];
    let base = CleanupFacts {
        settled: false,
        skip_cancel: false,
        reach: connected,
        to_cancel: running,
        failed: None,
        release_at: Some(at(1000)),
        now: at(500),
    };
    let wait = |blocker: Blocker| CleanupPlan::Wait {
        blocker,
        release_at: Some(at(1000)),
    };
    let orphan = |why| CleanupPlan::Orphan {
        why,
        ids: vec![7, 9],
    };
    let rows: Vec<(&str, CleanupFacts<'_>, CleanupPlan)> = vec![
        ("connected: cancel", base, CleanupPlan::Cancel(vec![7, 9])),
        (
            "connected, nothing unfinished: let go",
            CleanupFacts {
                to_cancel: &[],
                ..base
            },
            CleanupPlan::Release,
        ),
        (
            "settled: let go whatever the cluster",
            CleanupFacts {
                settled: true,
                reach: Reach::NotConnected,
                to_cancel: &[],
                now: at(5000),
                ..base
            },
            CleanupPlan::Release,
        ),
        (
            "settled wins over a broken cluster and the annotation",
            CleanupFacts {
                settled: true,
                skip_cancel: true,
                reach: unsynced,
                failed: Some(&failed),
                ..base
            },
            CleanupPlan::Release,
        ),
        (
            "the annotation: let go at once, naming the jobs",
            CleanupFacts {
                skip_cancel: true,
                ..base
            },
            orphan(Orphaned::SkipCancel),
        ),
        (
            "the annotation, not connected",
            CleanupFacts {
                skip_cancel: true,
                reach: Reach::NotConnected,
                ..base
            },
            orphan(Orphaned::SkipCancel),
        ),
        (
            "the SlurmCluster is gone: let go, naming the jobs",
            CleanupFacts {
                reach: Reach::Gone,
                ..base
            },
            orphan(Orphaned::ClusterGone),
        ),
        (
            "the SlurmCluster is gone, nothing known to run: let go quietly",
            CleanupFacts {
                reach: Reach::Gone,
                to_cancel: &[],
                ..base
            },
            CleanupPlan::Release,
        ),
        (
            "not connected: wait, saying until when",
            CleanupFacts {
                reach: Reach::NotConnected,
                ..base
            },
            wait(Blocker::NotConnected),
        ),
        (
            "not connected, nothing known: still wait (a lost submit shows only in the index)",
            CleanupFacts {
                reach: Reach::NotConnected,
                to_cancel: &[],
                ..base
            },
            wait(Blocker::NotConnected),
        ),
        (
            "index not synced since start: cancel what is known first",
            CleanupFacts {
                reach: unsynced,
                ..base
            },
            CleanupPlan::CancelKnown(vec![7, 9]),
        ),
        (
            "index not synced, the known jobs cancelled: wait for the rest",
            CleanupFacts {
                reach: unsynced,
                to_cancel: &[],
                ..base
            },
            wait(Blocker::IndexNotSynced),
        ),
        (
            "index not synced past the deadline: the known jobs are still cancelled first",
            CleanupFacts {
                reach: unsynced,
                now: at(5000),
                ..base
            },
            CleanupPlan::CancelKnown(vec![7, 9]),
        ),
        (
            "index not synced past the deadline, the known jobs cancelled: let go",
            CleanupFacts {
                reach: unsynced,
                to_cancel: &[],
                now: at(5000),
                ..base
            },
            CleanupPlan::Orphan {
                why: Orphaned::Deadline(Blocker::IndexNotSynced),
                ids: vec![],
            },
        ),
        (
            "index not synced and a cancel failed: wait",
            CleanupFacts {
                reach: unsynced,
                failed: Some(&failed),
                ..base
            },
            wait(failed.clone()),
        ),
        (
            "a cancel failed: wait",
            CleanupFacts {
                failed: Some(&failed),
                ..base
            },
            wait(failed.clone()),
        ),
        (
            "a cancel failed past the deadline: let go, naming the jobs",
            CleanupFacts {
                failed: Some(&failed),
                now: at(1000),
                ..base
            },
            orphan(Orphaned::Deadline(failed.clone())),
        ),
        (
            "not connected past the deadline: let go",
            CleanupFacts {
                reach: Reach::NotConnected,
                now: at(1001),
                ..base
            },
            orphan(Orphaned::Deadline(Blocker::NotConnected)),
        ),
        (
            "past the deadline but connected: the cancel is still tried first",
            CleanupFacts {
                now: at(5000),
                ..base
            },
            CleanupPlan::Cancel(vec![7, 9]),
        ),
        (
            "no deadline: wait for ever (with the condition)",
            CleanupFacts {
                reach: Reach::NotConnected,
                release_at: None,
                now: at(99_999),
                ..base
            },
            CleanupPlan::Wait {
                blocker: Blocker::NotConnected,
                release_at: None,
            },
        ),
    ];
    for (what, facts, expected) in rows {
        assert_eq!(cleanup(facts), expected, "{what}");
    }
}

#[test]
fn the_deadline_counts_from_the_deletion_or_from_when_this_replica_began_to_act() {
    let at = |s| DateTime::from_timestamp(s, 0).unwrap();
    let ten = Some(Duration::from_secs(10));
    assert_eq!(release_at(Some(at(100)), at(50), ten), Some(at(110)));
    // Deleted while the operator was down (or before this replica took over): the whole
    // deadline after it began to act.
    assert_eq!(release_at(Some(at(100)), at(500), ten), Some(at(510)));
    assert_eq!(release_at(None, at(500), ten), Some(at(510)));
    assert_eq!(release_at(Some(at(100)), at(50), None), None, "no deadline");
}

#[test]
fn a_blocker_says_what_it_waits_for() {
    assert_eq!(Blocker::NotConnected.reason(), "ClusterNotConnected");
    assert!(
        Blocker::NotConnected
            .describe("main")
            .contains("\"main\" is not connected")
    );
    assert_eq!(Blocker::IndexNotSynced.reason(), "WaitingForSlurmIndex");
    assert_eq!(Blocker::SearchBusy.reason(), "WaitingForAccountingSearch");
    assert!(
        Blocker::SearchBusy
            .describe("main")
            .contains("\"main\"'s accounting")
    );
    let failed = Blocker::CancelFailed {
        job_id: 7,
        reason: "Unreachable",
        message: "connection refused".into(),
    };
    assert_eq!(failed.reason(), "CancelFailed");
    assert!(
        failed
            .describe("main")
            .contains("Slurm job 7 (Unreachable: connection refused)"),
        "{}",
        failed.describe("main")
    );
}

/// `creationTimestamp` has whole seconds, cut down: a SlurmJob of the second the takeover (or
/// start) fell in may be older than it, and is not taken for newer.
#[test]
fn created_in_the_second_of_a_takeover_is_not_newer() {
    let at = DateTime::<Utc>::from_timestamp(100, 300_000_000).unwrap();
    let second = |s: i64| DateTime::<Utc>::from_timestamp(s, 0).unwrap();
    assert!(!Takeover::newer(second(100), at));
    assert!(Takeover::newer(second(101), at));
    assert!(!Takeover::newer(second(99), at));
}
