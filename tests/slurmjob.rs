//! The SlurmJob core the controller runs (`slurmjob::act`), against the real local Slurm:
//! each test plays the controller's loop — sync an index of our jobs, step, keep the status —
//! without Kubernetes. Skipped (with a message) when no local Slurm is up.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::runner::{KEY, Runner, script, sync};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::json;
use slurm_operator::controller::slurmjob::act::{self, Env, Target};
use slurm_operator::controller::slurmjob::lifecycle::Dependee;
use slurm_operator::controller::slurmjob::plan::to_cancel;
use slurm_operator::controller::slurmjob::status;
use slurm_operator::controller::slurmjob::submissions::{Doubt, Submissions};
use slurm_operator::crd::condition;
use slurm_operator::crd::slurmjob::{Phase, SlurmJobStatus};
use slurm_operator::leader::Leadership;
use slurm_operator::slurm::SlurmClient;
use slurm_operator::slurm::tag::OwnerTag;
use slurm_operator::state::index::ClusterState;

const LONG: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_completes_with_its_events() {
    let slurm = require_slurm!();
    // Runs 3 s: long enough that a step sees it RUNNING (with `sleep 1` a loaded machine's
    // steps could see only PENDING and COMPLETED, and no `Started` Event).
    let mut job = Runner::new(&slurm, "ok", json!({"script": script("echo hi; sleep 3")}));
    job.step().await;
    assert_eq!(job.status().phase, Phase::Submitted);
    assert!(job.status().job_id.is_some());
    job.until("the end", LONG, |s| s.phase.is_terminal()).await;
    let status = job.status();
    assert_eq!(status.phase, Phase::Completed, "{status:?}");
    assert_eq!(status.exit_code, Some(0));
    assert!(status.end_time.is_some() && status.start_time.is_some());
    assert_eq!(job.events, ["Submitted", "Started", "Finished"]);
}

/// A job requeued while it runs (`scontrol requeue`) ends as its latest run did, with that
/// run's usage: accounting keeps the requeued run's record beside it, `PENDING+REQUEUED`, which
/// never ends (before, the usage waited for it for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeued_job_ends_with_its_latest_runs_usage() {
    let slurm = require_slurm!();
    let started = common::unique("requeue-started");
    let mut job = Runner::new(
        &slurm,
        "requeued",
        json!({"script": script(&format!("touch /tmp/{started}\nsleep 8"))}),
    );
    job.until_phase(Phase::Running, LONG).await;
    // Requeued once slurmd has launched it (its script runs): a requeue while the launch is on
    // its way revokes that launch's credential, and slurmctld then kills the job's next run too
    // ("Killing non-startable batch JobId: Job credential revoked", exit code 1).
    let marker = slurm.root.join("tmp").join(&started);
    common::wait_for(
        "the script to start",
        LONG,
        Duration::from_millis(200),
        || {
            let found = marker.exists();
            async move { found.then_some(()) }
        },
    )
    .await;
    let id = job.job_id().to_string();
    slurm.scontrol(&["requeue", &id]);
    // Requeued, it waits for a begin time two minutes on (set once the requeue is done): it is
    // started sooner, though not within the second slurmd revoked the first run's credential
    // (a launch signed that second counts as revoked: the run is killed at once, exit code 1).
    job.until("the requeue", LONG, |s| {
        s.state_reason.as_deref() == Some("BeginTime")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    slurm.scontrol(&["update", &format!("JobId={id}"), "StartTime=now"]);
    job.until("the end of the second run", LONG, |s| s.phase.is_terminal())
        .await;
    let _ = std::fs::remove_file(&marker);
    assert_eq!(job.status().phase, Phase::Completed, "{:?}", job.status());
    let records = job.client.accounting_job(job.job_id()).await.unwrap();
    let states: Vec<_> = records
        .unwrap_or_default()
        .iter()
        .map(|r| r.state.to_strings())
        .collect();
    assert!(
        states.iter().any(|s| s.contains(&"REQUEUED".to_owned())),
        "accounting lists the requeued run: {states:?}"
    );
    job.until("the usage", LONG, |s| s.usage.is_some()).await;
    let usage = job.status().usage.unwrap();
    assert!(
        usage
            .elapsed
            .as_ref()
            .is_some_and(|e| e.as_std() >= Duration::from_secs(8)),
        "the latest run's elapsed time: {usage:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_code_3_fails_the_job() {
    let slurm = require_slurm!();
    let mut job = Runner::new(&slurm, "exit3", json!({"script": script("exit 3")}));
    job.until("the end", LONG, |s| s.phase.is_terminal()).await;
    assert_eq!(job.status().phase, Phase::Failed);
    assert_eq!(job.status().exit_code, Some(3));
    assert_eq!(job.events.last(), Some(&"Failed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_while_running_cancels_and_edits_meanwhile_are_ignored() {
    let slurm = require_slurm!();
    let mut job = Runner::new(&slurm, "run-del", json!({"script": script("sleep 300")}));
    job.until_phase(Phase::Running, LONG).await;
    let first = job.job_id();

    // An edit while running is not applied, and said so; observedGeneration moves on.
    job.generation = 2;
    job.spec.script = script("sleep 1");
    let step = job.step().await;
    assert_eq!(job.job_id(), first, "no second job");
    let applied = condition::find(&step.status.conditions, status::SPEC_APPLIED).unwrap();
    assert_eq!(
        (applied.status.as_str(), applied.reason.as_str()),
        ("False", "JobActive")
    );
    assert_eq!(step.status.observed_generation, Some(2));
    assert!(job.events.contains(&"EditIgnored"));

    job.delete().await;
    job.until_phase(Phase::Cancelled, LONG).await;
    assert_eq!(job.job_id(), first);
    assert_eq!(job.events.last(), Some(&"Cancelled"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_while_pending_cancels() {
    let slurm = require_slurm!();
    // Held: it stays pending until released.
    let mut job = Runner::new(
        &slurm,
        "pend-del",
        json!({"script": script("true"), "suspend": true}),
    );
    job.step().await;
    job.step().await;
    let status = job.status();
    assert_eq!(status.phase, Phase::Submitted, "{status:?}");
    assert_eq!(
        status.slurm_state.first().map(String::as_str),
        Some("PENDING")
    );
    job.delete().await;
    job.until_phase(Phase::Cancelled, LONG).await;
    assert!(
        !job.events.contains(&"Started"),
        "it never ran: {:?}",
        job.events
    );
    assert_eq!(job.events.last(), Some(&"Cancelled"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_cancel_is_reflected() {
    let slurm = require_slurm!();
    let mut job = Runner::new(&slurm, "ext", json!({"script": script("sleep 300")}));
    job.until_phase(Phase::Running, LONG).await;
    job.client.cancel_job(job.job_id()).await.unwrap();
    job.until_phase(Phase::Cancelled, LONG).await;
}

/// Slurm counts whole minutes and checks limits about every 30 s: ~90 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_time_limit_times_the_job_out() {
    let slurm = require_slurm!();
    let mut job = Runner::new(
        &slurm,
        "limit",
        json!({"script": script("sleep 600"), "timeLimit": "1m"}),
    );
    job.until("the end", Duration::from_secs(240), |s| {
        s.phase.is_terminal()
    })
    .await;
    assert_eq!(job.status().phase, Phase::TimedOut, "{:?}", job.status);
    assert_eq!(job.events.last(), Some(&"Failed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_of_four_with_one_failing_task() {
    let slurm = require_slurm!();
    let mut job = Runner::new(
        &slurm,
        "array",
        json!({"script": script("[ \"$SLURM_ARRAY_TASK_ID\" = 2 ] && exit 4; exit 0"), "array": "0-3"}),
    );
    job.until("every task ended", LONG, |s| {
        s.phase.is_terminal()
            && s.array_tasks
                .as_ref()
                .is_some_and(|t| t.counts.values().sum::<i32>() == 4 && t.tasks.len() == 4)
    })
    .await;
    let status = job.status();
    assert_eq!(status.phase, Phase::Failed, "{status:?}");
    let tasks = status.array_tasks.unwrap();
    assert_eq!(tasks.counts.get("COMPLETED"), Some(&3), "{tasks:?}");
    assert_eq!(tasks.counts.get("FAILED"), Some(&1), "{tasks:?}");
    let failed = tasks.tasks.iter().find(|t| t.state == "FAILED").unwrap();
    assert_eq!((failed.task_id, failed.exit_code), (2, Some(4)));
}

/// slurmctld forgets an ended task `MinJobAge` after its end (30 s in hack/'s Slurm) while the
/// rest of the array runs on: the task that failed first still fails the array. Before the status
/// kept what its tasks ended as, this array ended `Completed` with exit code 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_keeps_a_failed_task_slurmctld_forgot() {
    let slurm = require_slurm!();
    let go = common::unique("array-go");
    let mut job = Runner::new(
        &slurm,
        "forgot",
        json!({
            "script": script(&format!(
                "[ \"$SLURM_ARRAY_TASK_ID\" = 0 ] && exit 3\n\
                 # Bounded: a failing test leaves no task running.\n\
                 i=0; while [ ! -e /tmp/{go} ] && [ $i -lt 300 ]; do sleep 1; i=$((i+1)); done"
            )),
            "array": "0-1%1",
        }),
    );
    let failed = |s: &SlurmJobStatus| {
        s.array_tasks
            .as_ref()
            .and_then(|t| t.counts.get("FAILED").copied())
    };
    job.until("task 0 failed and task 1 runs", LONG, |s| {
        s.phase == Phase::Running && failed(s) == Some(1)
    })
    .await;
    let array = job.job_id();
    common::wait_for(
        "slurmctld to forget task 0",
        Duration::from_secs(240),
        Duration::from_secs(1),
        || async {
            let records = job.client.job(array).await.unwrap();
            (!records.is_empty() && !records.iter().any(|r| r.array_task_id == Some(0)))
                .then_some(())
        },
    )
    .await;
    job.step().await;
    let status = job.status();
    assert_eq!(status.phase, Phase::Running, "{status:?}");
    assert_eq!(failed(&status), Some(1), "still counted: {status:?}");
    std::fs::write(slurm.root.join("tmp").join(&go), "").unwrap();
    job.until("the end", LONG, |s| s.phase.is_terminal()).await;
    let status = job.status();
    assert_eq!(status.phase, Phase::Failed, "{status:?}");
    assert_eq!(status.exit_code, Some(3), "{status:?}");
    let tasks = status.array_tasks.unwrap();
    assert_eq!(
        tasks.counts,
        std::collections::BTreeMap::from([("COMPLETED".into(), 1), ("FAILED".into(), 1)]),
        "{tasks:?}"
    );
    assert_eq!(
        tasks.ended.get("FAILED").map(String::as_str),
        Some("0"),
        "{tasks:?}"
    );
}

/// Submitted while its dependee ran, and the dependee then failed: Slurm keeps the dependent
/// pending for good (`DependencyNeverSatisfied`, without `kill_invalid_depend`). It says so,
/// `Ready=False` and `Stalled=True` (nothing the operator waits for will start it), with one
/// Warning; before, it stayed `Ready=True/Submitted` and `kubectl wait` never ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_that_fails_after_the_submit_stalls_the_dependent() {
    let slurm = require_slurm!();
    let mut first = Runner::new(
        &slurm,
        "dep-fail",
        json!({"script": script("sleep 2; exit 1")}),
    );
    let mut second = Runner::new(
        &slurm,
        "dep-never",
        json!({"script": script("true"), "dependsOn": [{"name": "dep-fail"}]}),
    );
    first.step().await;
    let first_id = first.status().job_id;
    second
        .step_with(|_| Some(Dependee::new("local", first_id)))
        .await;
    let job_id = second.job_id();
    first.until_phase(Phase::Failed, LONG).await;
    second
        .until("Slurm's verdict", LONG, |s| {
            s.state_reason.as_deref() == Some("DependencyNeverSatisfied")
        })
        .await;
    let status = second.status();
    assert_eq!(status.phase, Phase::Submitted, "{status:?}");
    for type_ in [status::READY, status::STALLED] {
        let c = condition::find(&status.conditions, type_).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            (
                if type_ == status::READY {
                    "False"
                } else {
                    "True"
                },
                "DependencyNeverSatisfied"
            ),
            "{type_}"
        );
        assert!(
            c.message
                .contains(&format!("Slurm job {job_id} will never start"))
                && c.message.contains("Delete this SlurmJob"),
            "{}",
            c.message
        );
    }
    // Stepped again later (conditions' times are seconds): the same status, no second Event.
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        second.step().await;
        assert_eq!(second.status(), status);
    }
    assert_eq!(
        second
            .events
            .iter()
            .filter(|e| **e == "DependencyNeverSatisfied")
            .count(),
        1,
        "{:?}",
        second.events
    );
    // Deleting it cancels the job that would never start.
    second.delete().await;
    second
        .until("the cancel", LONG, |s| s.phase == Phase::Cancelled)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn depends_on_afterok_runs_after_the_first_succeeded() {
    let slurm = require_slurm!();
    let mut first = Runner::new(&slurm, "dep-a", json!({"script": script("sleep 3")}));
    let mut second = Runner::new(
        &slurm,
        "dep-b",
        json!({"script": script("true"), "dependsOn": [{"name": "dep-a", "type": "afterok"}]}),
    );
    // The other SlurmJob does not exist yet, then has no job id: the dependent waits.
    let step = second.step_with(|_| None).await;
    assert_eq!(step.status.job_id, None);
    assert_eq!(
        condition::find(&step.status.conditions, status::READY)
            .unwrap()
            .reason,
        "WaitingForDependencies"
    );
    assert!(step.retry.is_some());
    let step = second
        .step_with(|_| Some(Dependee::new("local", None)))
        .await;
    assert_eq!(step.status.job_id, None);

    first.step().await;
    let first_id = first.status().job_id;
    // A SlurmJob of that name on another cluster: its job id is not this cluster's, not sent.
    let step = second
        .step_with(|_| Some(Dependee::new("elsewhere", first_id)))
        .await;
    assert_eq!(step.status.job_id, None);
    let ready = condition::find(&step.status.conditions, status::READY).unwrap();
    assert_eq!(ready.reason, "WaitingForDependencies");
    assert!(
        ready.message.contains("dep-a (clusterName elsewhere)"),
        "{}",
        ready.message
    );
    second
        .step_with(|_| Some(Dependee::new("local", first_id)))
        .await;
    assert!(second.status().job_id.is_some());
    first.until_phase(Phase::Completed, LONG).await;
    second.until_phase(Phase::Completed, LONG).await;
    let ended = first.status().end_time.unwrap().0;
    let started = second.status().start_time.unwrap().0;
    assert!(started >= ended, "afterok: {started} before {ended}");

    // Once it has ended, its id is no longer handed over (slurmctld may give it to another
    // job after MinJobAge): the operator judges the dependency itself.
    let done = |_: &str| Some(Dependee::new("local", first_id).in_phase(Some(Phase::Completed)));
    let mut never = Runner::new(
        &slurm,
        "dep-c",
        json!({"script": script("true"), "dependsOn": [{"name": "dep-a", "type": "afternotok"}]}),
    );
    let step = never.step_with(done).await;
    assert_eq!(
        step.status.job_id, None,
        "not submitted: it could never run"
    );
    let ready = condition::find(&step.status.conditions, status::READY).unwrap();
    assert_eq!(ready.reason, "DependencyNeverSatisfied");
    assert!(
        ready
            .message
            .contains("dep-a ended Completed, which afternotok rules out"),
        "{}",
        ready.message
    );
    let mut met = Runner::new(
        &slurm,
        "dep-d",
        json!({"script": script("true"), "dependsOn": [{"name": "dep-a"}]}),
    );
    met.step_with(done).await;
    assert!(met.status().job_id.is_some(), "{:?}", met.status);
    met.until_phase(Phase::Completed, LONG).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_after_the_end_re_runs_with_history() {
    let slurm = require_slurm!();
    let mut job = Runner::new(&slurm, "rerun", json!({"script": script("exit 1")}));
    job.until_phase(Phase::Failed, LONG).await;
    let first = job.job_id();
    job.generation = 2;
    job.spec.script = script("exit 0");
    job.events.clear();
    job.step().await;
    let second = job.job_id();
    assert_ne!(first, second);
    assert_eq!(job.events[..2], ["Resubmitted", "Submitted"]);
    let status = job.status();
    assert_eq!(status.submitted_generation, Some(2));
    assert_eq!(status.history.len(), 1);
    assert_eq!(status.history[0].job_id, i64::from(first));
    assert_eq!(status.history[0].phase, Phase::Failed);
    assert_eq!(status.history[0].exit_code, Some(1));
    job.until_phase(Phase::Completed, LONG).await;
    // Nothing more happens without a further edit.
    job.step().await;
    assert_eq!(job.job_id(), second);
}

/// A small deterministic generator (no extra dependency); the seed is printed.
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// Kill the "operator" between submit and status write at random points, many times: a fresh
/// incarnation (empty in-process map, index synced after its start, no status) must adopt the
/// job the killed one may have submitted — exactly one Slurm job per generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupted_submits_never_make_a_second_job() {
    let slurm = require_slurm!();
    let seed = u64::try_from(Utc::now().timestamp_nanos_opt().unwrap_or(1)).unwrap_or(1);
    eprintln!("crash test seed {seed}");
    let mut rng = Lcg(seed);
    let client = slurm.client();
    let template = Runner::new(&slurm, "crash", json!({"script": script("true")}));
    let (uid, name, spec) = (
        template.uid.clone(),
        template.name.clone(),
        template.spec.clone(),
    );
    const ROUNDS: i64 = 25;
    let mut adopted = 0;
    // Each round is an edit after the last one's run, which its status records (as ended): the
    // run of a generation no status names, still running, would be adopted instead
    // (`an_edit_after_a_lost_submit_runs_no_second_job`).
    let mut previous: Option<SlurmJobStatus> = None;
    for generation in 1..=ROUNDS {
        // Incarnation 1: step, killed after a random delay (often mid-submit).
        let delay = Duration::from_millis(rng.below(60));
        let state = sync(&client).await;
        let (c, u, n, s) = (client.clone(), uid.clone(), name.clone(), spec.clone());
        let before = previous.clone();
        let task = tokio::spawn(async move {
            let submissions = Submissions::default();
            let target = Target {
                name: &n,
                uid: &u,
                generation,
                spec: &s,
                status: before.as_ref(),
                created: None,
                refusal: None,
            };
            let env = Env {
                client: &c,
                submitter: &c,
                job_user: None,
                state: &state,
                submissions: &submissions,
                started_at: Utc::now() - chrono::TimeDelta::seconds(5),
                now: Utc::now(),
                leadership: &Leadership::always(),
                took_over_at: None,
                acting_since: Utc::now() - chrono::TimeDelta::seconds(5),
                key: &KEY,
                searches: None,
                still_granted: &|| true,
            };
            act::step(target, env, |_| None).await
        });
        tokio::time::sleep(delay).await;
        task.abort();
        let _ = task.await;
        // A restart takes time; a request already on the wire lands meanwhile. (The operator
        // itself waits for the request timeout and 10 s after a start: here a second, ample
        // for a submit that slurmrestd answers in milliseconds, even on a loaded machine.)
        tokio::time::sleep(Duration::from_secs(1)).await;

        // Incarnation 2: nothing in memory, no status written since the last round's.
        let started_at = Utc::now();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let state = sync(&client).await;
        let submissions = Submissions::default();
        let target = Target {
            name: &name,
            uid: &uid,
            generation,
            spec: &spec,
            status: previous.as_ref(),
            created: None,
            refusal: None,
        };
        let env = Env {
            client: &client,
            submitter: &client,
            job_user: None,
            state: &state,
            submissions: &submissions,
            started_at,
            now: Utc::now(),
            leadership: &Leadership::always(),
            took_over_at: None,
            acting_since: started_at,
            key: &KEY,
            searches: None,
            still_granted: &|| true,
        };
        let step = act::step(target, env, |_| None).await.unwrap();
        let job_id = step.status.job_id.expect("submitted or adopted");
        let reason = condition::find(&step.status.conditions, status::READY)
            .unwrap()
            .reason
            .clone();
        // Not submitted by this incarnation: the killed one's job, adopted (its reason says
        // how it is now, `Adopted` or, ended already, how it ended).
        if submissions.get(&OwnerTag::new(&uid, generation)).is_none() {
            adopted += 1;
        }

        let t = OwnerTag::new(&uid, generation);
        let state = sync(&client).await;
        let tagged = state.tagged(&t);
        assert_eq!(
            tagged,
            vec![u32::try_from(job_id).unwrap()],
            "generation {generation} (killed after {delay:?}, {reason}): exactly one job"
        );
        previous = Some(SlurmJobStatus {
            job_id: Some(job_id),
            phase: Phase::Completed,
            submitted_generation: Some(generation),
            observed_generation: Some(generation),
            ..Default::default()
        });
    }
    eprintln!("{ROUNDS} rounds, {adopted} adopted from a killed incarnation");
    assert!(
        adopted > 0,
        "no round was killed after its submit: the test proves little"
    );
    // Tidy up: every generation's job.
    let state = sync(&client).await;
    for job_id in to_cancel(
        &uid,
        &SlurmJobStatus::default(),
        Some(&state),
        &Submissions::default(),
        &KEY,
    ) {
        let _ = act::cancel(&client, job_id).await;
    }
}

/// Before the index synced after this incarnation started, nothing is submitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_submit_before_a_fresh_index_sync() {
    let slurm = require_slurm!();
    let mut job = Runner::new(&slurm, "fresh", json!({"script": script("true")}));
    let state = sync(&job.client).await;
    let started_at = Utc::now() + chrono::TimeDelta::seconds(1);
    let target = job.target(None);
    let env = Env {
        started_at,
        ..job.env(&state)
    };
    let step = act::step(target, env, |_| None).await.unwrap();
    assert_eq!(step.status.job_id, None);
    assert_eq!(
        condition::find(&step.status.conditions, status::READY)
            .unwrap()
            .reason,
        "WaitingForSlurmIndex"
    );
    assert!(job.submissions.is_empty());
    job.status = None;
}

/// A replica that does not hold the leader Lease never submits, even with a trusted index; the
/// leader (here: the same job once leading) submits exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_never_submits() {
    let slurm = require_slurm!();
    let mut job = Runner::new(&slurm, "follower", json!({"script": script("true")}));
    let started_at = Utc::now() - chrono::TimeDelta::seconds(5);
    let (lease, following) = tokio::sync::watch::channel(false);
    let leadership = Leadership::follow(following);
    let state = sync(&job.client).await;
    let target = job.target(None);
    let env = Env {
        started_at,
        leadership: &leadership,
        took_over_at: None,
        ..job.env(&state)
    };
    let step = act::step(target, env, |_| None).await.unwrap();
    assert_eq!(step.status.job_id, None);
    assert_eq!(
        condition::find(&step.status.conditions, status::READY)
            .unwrap()
            .reason,
        "NotLeader"
    );
    assert!(job.submissions.is_empty());
    let state = sync(&job.client).await;
    let tag = OwnerTag::new(&job.uid, 1);
    assert!(
        state.tagged(&tag).is_empty(),
        "a follower submitted a Slurm job"
    );

    // Gaining the Lease: the same step now submits, once.
    lease.send_replace(true);
    let target = job.target(None);
    let env = Env {
        started_at,
        leadership: &leadership,
        took_over_at: None,
        ..job.env(&state)
    };
    let step = act::step(target, env, |_| None).await.unwrap();
    let job_id = step.status.job_id.expect("the leader submits");
    let state = sync(&job.client).await;
    assert_eq!(state.tagged(&tag), vec![u32::try_from(job_id).unwrap()]);
    job.status = Some(step.status);
}

/// An index synced well after the job's submit that no longer holds it: what the poller shows
/// once slurmctld dropped the job (MinJobAge), without waiting the 300 s for it to happen.
fn index_after_min_job_age() -> ClusterState {
    ClusterState {
        jobs_synced_at: Some(Utc::now() + chrono::TimeDelta::seconds(10)),
        ..Default::default()
    }
}

/// A job that left slurmctld before its end was mirrored gets its end from the cluster's
/// accounting (slurmdbd), not `Lost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_gone_from_slurmctld_ends_as_accounting_recorded_it() {
    let slurm = require_slurm!();
    let mut job = Runner::new(&slurm, "acct", json!({"script": script("sleep 1; exit 3")}));
    job.step().await;
    let job_id = job.job_id();
    // Mirrored as running (or pending) only: the end has not been seen.
    let seen = job.status();
    assert!(!seen.phase.is_terminal(), "{seen:?}");
    // Let it end in Slurm, and accounting record it, without mirroring that.
    let deadline = Instant::now() + LONG;
    loop {
        let records = job.client.accounting_job(job_id).await.unwrap();
        let records = records.expect("the local Slurm serves accounting");
        if records.iter().any(|r| r.state.base.is_finished()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "accounting never saw job {job_id} end"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let state = index_after_min_job_age();
    let target = job.target(Some(&seen));
    let env = job.env(&state);
    let step = act::step(target, env, |_| None).await.unwrap();
    assert_eq!(step.status.phase, Phase::Failed, "{:?}", step.status);
    assert_eq!(step.status.exit_code, Some(3));
    assert_eq!(step.status.job_id, Some(i64::from(job_id)));
    assert!(step.status.end_time.is_some());
    job.status = Some(step.status);
}

/// The crash-safety hole slurmctld alone leaves: the operator submitted, lost the answer and
/// its status write, and came back after slurmctld dropped the finished job. Accounting still
/// has the job carrying the generation's tag: it is adopted, not submitted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_found_only_in_accounting_is_adopted() {
    let slurm = require_slurm!();
    let job = Runner::new(&slurm, "acct-adopt", json!({"script": script("true")}));
    let tag = OwnerTag::new(&job.uid, 1);
    let comment = KEY.comment(&tag, &slurm.user);
    let request =
        slurm_operator::controller::slurmjob::submit::request(&job.spec, &job.name, &comment, &[])
            .unwrap();
    let first = job.client.submit_job(&request).await.unwrap().job_id;
    let deadline = Instant::now() + LONG;
    while act::find_in_accounting(&job.client, &job.name, None, &tag, &slurm.user, &KEY)
        .await
        .unwrap()
        .and_then(|(found, _)| found.job_id)
        .is_none()
    {
        assert!(
            Instant::now() < deadline,
            "accounting never listed job {first}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A new incarnation: nothing recorded in memory, slurmctld's list without the job.
    let state = index_after_min_job_age();
    let submissions = Submissions::default();
    let target = job.target(None);
    let env = Env {
        submissions: &submissions,
        started_at: Utc::now() - chrono::TimeDelta::seconds(5),
        ..job.env(&state)
    };
    let step = act::step(target, env, |_| None).await.unwrap();
    assert_eq!(
        step.status.job_id,
        Some(i64::from(first)),
        "{:?}",
        step.status
    );
    let all = job.client.jobs(None).await.unwrap().into_items().unwrap();
    let tagged: Vec<u32> = all
        .iter()
        .filter(|j| j.owner.as_ref() == Some(&tag))
        .map(|j| j.job_id)
        .collect();
    assert_eq!(tagged, vec![first], "a second Slurm job was submitted");
}

/// A submit whose answer was lost (the process died before its status named the job), then an
/// edit: the new generation adopts that job, still pending, instead of submitting a second one
/// beside it, and the edit is one of a job that has not ended (not applied, said so). While an
/// earlier generation's submit is in doubt, the edited one waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_after_a_lost_submit_runs_no_second_job() {
    let slurm = require_slurm!();
    let held = || {
        let begin = Utc::now().timestamp() + 3600;
        json!({
            "script": script("sleep 120"),
            "extraOptions": {"begin_time": {"set": true, "number": begin}},
        })
    };

    // Generation 1's submit got no answer in this process; then the spec was edited.
    let mut doubted = Runner::new(&slurm, "doubt-edit", held());
    doubted.submissions.record_doubt(
        &OwnerTag::new(&doubted.uid, 1),
        Doubt {
            since: Utc::now() + chrono::TimeDelta::hours(1),
            error: "Timeout".into(),
        },
    );
    doubted.edit(|spec| spec.script = script("sleep 60"));
    let step = doubted.step().await;
    assert_eq!(step.status.job_id, None, "{:?}", step.status);
    let ready = condition::find(&step.status.conditions, status::READY).unwrap();
    assert_eq!(ready.reason, "SubmitFailed", "{}", ready.message);
    assert!(
        ready
            .message
            .starts_with("the submit of generation 1 failed without saying whether Slurm made the job (Timeout) (the spec was edited since: generation 2)"),
        "{}",
        ready.message
    );

    // Generation 1 submitted, and the process died before writing its status.
    let mut job = Runner::new(&slurm, "lost-edit", held());
    let first = job.step().await.status.job_id.expect("submitted");
    // The next incarnation: nothing in memory, no status; the spec edited meanwhile.
    job.status = None;
    job.events.clear();
    job.submissions = Submissions::default();
    job.started_at = Utc::now();
    tokio::time::sleep(Duration::from_millis(5)).await;
    job.edit(|spec| spec.script = script("sleep 60"));
    let step = job.step().await;
    assert_eq!(step.status.job_id, Some(first), "{:?}", step.status);
    assert_eq!(step.status.submitted_generation, Some(1));
    let ready = condition::find(&step.status.conditions, status::READY).unwrap();
    assert_eq!(ready.reason, "Adopted", "{}", ready.message);
    assert!(
        ready
            .message
            .contains("generation 2 is an edit of that run"),
        "{}",
        ready.message
    );
    // In the same step, generation 2 is the edit of a job that has not ended; that job's spec is
    // not known, so nothing is changed in place.
    assert_eq!(step.status.observed_generation, Some(2));
    let applied = condition::find(&step.status.conditions, status::SPEC_APPLIED).unwrap();
    assert_eq!(
        (applied.status.as_str(), applied.reason.as_str()),
        ("False", "JobActive"),
        "{}",
        applied.message
    );
    assert!(
        applied
            .message
            .contains("which was submitted for generation 1"),
        "{}",
        applied.message
    );
    assert_eq!(job.events, vec!["EditIgnored", "Submitted"]);

    // The next step follows that job, generation 2 observed.
    let step = job.step().await;
    assert_eq!(step.status.job_id, Some(first));
    assert_eq!(step.status.observed_generation, Some(2));

    // One job carries any of this SlurmJob's tags.
    let state = sync(&job.client).await;
    assert_eq!(
        state.tagged_between(&job.uid, i64::MIN, i64::MAX),
        vec![(1, u32::try_from(first).unwrap())]
    );
    job.delete().await;
    job.until_phase(Phase::Cancelled, LONG).await;
}

/// Operations the client sent, in order.
#[derive(Default)]
struct Operations(std::sync::Mutex<Vec<&'static str>>);

impl slurm_operator::slurm::RequestObserver for Operations {
    fn observe(&self, operation: &'static str, _status: Option<u16>, _elapsed: Duration) {
        self.0.lock().unwrap().push(operation);
    }
}

/// A SlurmJob applied just now submits with one request; one that has existed long enough for a
/// job of it to have left slurmctld (or of unknown age) first asks accounting for its tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_slurmjob_old_enough_asks_accounting_before_submitting() {
    let slurm = require_slurm!();
    let operations = Arc::new(Operations::default());
    let client = SlurmClient::with_observer(
        slurm.config(),
        slurm.credentials(),
        Some(operations.clone()),
    )
    .unwrap();
    let now = Utc::now();
    let cases = [
        ("fresh", Some(now), false),
        ("old", Some(now - chrono::TimeDelta::seconds(600)), true),
        ("unknown-age", None, true),
    ];
    for (what, created, asks) in cases {
        let mut job = Runner::new(&slurm, what, json!({"script": script("true")}));
        let state = sync(&job.client).await;
        operations.0.lock().unwrap().clear();
        let target = Target {
            created,
            ..job.target(None)
        };
        let env = Env {
            client: &client,
            submitter: &client,
            job_user: None,
            now,
            ..job.env(&state)
        };
        let step = act::step(target, env, |_| None).await.unwrap();
        assert!(step.status.job_id.is_some(), "{what}: {:?}", step.status);
        let sent = operations.0.lock().unwrap().clone();
        assert_eq!(
            sent.contains(&"slurmdb_get_jobs"),
            asks,
            "{what}: requests {sent:?}"
        );
        assert_eq!(
            sent.iter()
                .filter(|o| **o == "slurm_post_job_submit")
                .count(),
            1,
            "{what}: requests {sent:?}"
        );
        job.status = Some(step.status);
    }
}

/// A SlurmJob stored before admission refused privileged job options (or written past it)
/// never gets them to Slurm: the step refuses the spec without a request, and the facade
/// refuses the same options in any request, before sending. Either way slurmctld holds no job
/// of that name afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn privileged_job_options_never_reach_slurm() {
    let slurm = require_slurm!();
    let mut job = Runner::new(
        &slurm,
        "root",
        json!({"script": script("id -u"), "extraOptions": {"user_id": "0", "group_id": "0"}}),
    );
    let step = job.step().await;
    let ready = condition::find(&step.status.conditions, status::READY).unwrap();
    assert_eq!(ready.reason, "InvalidSpec", "{ready:?}");
    assert!(
        ready.message.contains("_id is refused"),
        "{}",
        ready.message
    );
    assert_eq!(step.status.job_id, None);
    assert!(step.invalid);

    let client = slurm.client();
    for (key, value) in [
        ("user_id", json!("0")),
        ("group_id", json!("0")),
        ("priority", json!({"set": true, "number": 100_000})),
        ("reservation", json!("maint")),
        ("spank_environment", json!(["X=1"])),
        ("admin_comment", json!("x")),
    ] {
        let mut request = slurm.job(&job.name, "id -u");
        request.extra.insert(key.into(), value);
        let error = client.submit_job(&request).await.unwrap_err();
        assert!(
            error.to_string().contains(&format!("job option {key} ")),
            "{key}: {error}"
        );
    }
    let jobs = client
        .jobs(None)
        .await
        .unwrap()
        .into_items()
        .unwrap_or_default();
    assert!(
        jobs.iter().all(|j| j.name != job.name),
        "a job named {} reached slurmctld",
        job.name
    );
}

/// Issue 15, item 2, against the real slurmctld: a partition, account, QoS, feature or node it
/// does not have is refused for good — `Stalled`/`SubmitRejected` with Slurm's own message, one
/// `SubmitRejected` Event, no job — and the next step sends nothing (no Event, the status as it
/// was). The partition fixed in a new generation, the job is submitted and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_slurm_refuses_for_good_stalls_until_its_spec_changes() {
    let slurm = require_slurm!();
    let cases = [
        (
            "partition",
            json!("no-such-partition"),
            "Invalid partition name",
        ),
        ("account", json!("no-such-account"), "Invalid account"),
        ("qos", json!("no-such-qos"), "Invalid qos"),
        ("constraints", json!("no-such-feature"), "Invalid feature"),
        // Slurm 24.11 answers HTTP 500 with error 2018 and makes no job.
        (
            "extraOptions",
            json!({"required_nodes": ["no-such-node"]}),
            "Invalid node name",
        ),
    ];
    for (field, value, says) in cases {
        let mut job = Runner::new(
            &slurm,
            "refused",
            json!({"script": script("true"), field: value}),
        );
        let step = job.step().await;
        assert!(step.invalid, "{field}: {:?}", step.status);
        assert_eq!(step.retry, None);
        assert_eq!(job.events, ["SubmitRejected"], "{field}");
        assert_eq!(step.status.job_id, None);
        assert_eq!(step.status.rejected_generation, Some(1));
        assert!(job.submissions.is_empty(), "{field}: no job");
        let stalled = condition::find(&step.status.conditions, status::STALLED).unwrap();
        assert_eq!(stalled.reason, status::SUBMIT_REJECTED);
        assert!(
            stalled.message.contains(says),
            "{field}: {}",
            stalled.message
        );
        let ready = condition::find(&step.status.conditions, status::READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "SubmitRejected")
        );

        let again = job.step().await;
        assert_eq!(again.status, step.status, "{field}: held");
        assert_eq!(job.events, ["SubmitRejected"], "{field}: no second Event");

        if field == "partition" {
            job.generation = 2;
            job.spec.partition = Some(slurm.partition.clone());
            job.until_phase(Phase::Completed, LONG).await;
            let done = job.status();
            assert_eq!(done.rejected_generation, None);
            assert_eq!(done.submitted_generation, Some(2));
            assert!(condition::is_true(&done.conditions, status::COMPLETE));
            assert!(condition::find(&done.conditions, status::STALLED).is_none());
            assert_eq!(job.submissions.len(), 1);
        }
    }
}
