//! What a SlurmJob tells about its job (issue 18), against the real local Slurm through the
//! controller's own core (`slurmjob::act`, stepped by `common::runner`), as a tenant (`alice`):
//!
//! - why it waits: Slurm's reason explained, its priority, Slurm's estimated start;
//! - what it used: accounting's usage and seff's efficiencies, per array task and summed, also
//!   once slurmctld has forgotten the job (the local Slurm's MinJobAge is 30 s);
//! - edits Slurm applies to a submitted job in place: a new time limit keeps the job id, and
//!   `suspend` holds and releases it.
//!
//! The waiting jobs ask for a dynamic node of their own (a feature only it has), so they wait for
//! each other and not for the rest of the suite.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::runner::{Runner, script};
use serde_json::json;
use slurm_operator::controller::slurmjob::lifecycle::Dependee;
use slurm_operator::controller::slurmjob::status;
use slurm_operator::crd::condition;
use slurm_operator::crd::quantity;
use slurm_operator::crd::slurmjob::{Phase, SlurmJobStatus};
use slurm_operator::slurm::SlurmError;
use slurm_operator::slurm::reason;

/// The tenant the jobs run as (namespace team-a's Slurm user in the local Slurm).
const TENANT: &str = "alice";
const LONG: Duration = Duration::from_secs(120);

/// What `status.pending` says, for assertions and messages.
fn pending(s: &SlurmJobStatus) -> (Option<&str>, Option<i64>, bool) {
    s.pending.as_ref().map_or((None, None, false), |p| {
        (
            p.reason.as_deref(),
            p.priority,
            p.estimated_start_time.is_some(),
        )
    })
}

/// The explanation the status must carry for `code`.
fn explained(code: &str) -> String {
    reason::sentence(&reason::explain(code).unwrap(), 512)
}

fn condition_of(s: &SlurmJobStatus, type_: &str) -> Option<(String, String)> {
    condition::find(&s.conditions, type_).map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_job_says_why_with_its_priority_and_estimated_start() {
    let slurm = require_slurm!();
    let (_node, feature) = slurm.private_node("wait");
    let on_node = |prefix: &str, body: &str, extra: serde_json::Value| {
        let mut spec = json!({"script": script(body), "constraints": feature, "timeLimit": "2m"});
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        Runner::new(&slurm, prefix, spec).run_as(TENANT)
    };

    // The node's one CPU taken for two minutes.
    let mut busy = on_node("busy", "sleep 120", json!({}));
    busy.until_phase(Phase::Running, LONG).await;
    let busy_id = busy.status().job_id.unwrap();
    let busy_started = busy.status().start_time.unwrap();

    let mut waiting = on_node("waits", "true", json!({}));
    let mut dependent = on_node("after", "true", json!({"dependsOn": [{"name": busy.name}]}));
    let mut held = on_node("held", "true", json!({"suspend": true}));
    waiting.step().await;
    dependent
        .step_with(|_| Some(Dependee::new("local", Some(busy_id))))
        .await;
    held.step().await;

    // Slurm's scheduler has looked at the waiting job (every 5 s here): the reason is one of
    // the two a job gets behind a busy node (Priority when another job of the partition was
    // found waiting for resources first), explained; a priority; and an estimate from the
    // running job's time limit.
    waiting
        .until("a reason and an estimate", LONG, |s| {
            matches!(pending(s), (Some("Resources" | "Priority"), Some(_), true))
        })
        .await;
    let s = waiting.status();
    let p = s.pending.clone().unwrap();
    eprintln!("waiting: {}", serde_json::to_string(&p).unwrap());
    let code = p.reason.clone().unwrap();
    assert_eq!(p.message.as_deref(), Some(explained(&code).as_str()));
    assert!(p.priority.unwrap() > 0, "{p:?}");
    let estimate = p.estimated_start_time.clone().unwrap();
    assert!(
        estimate.0 >= busy_started.0,
        "{estimate:?} before {busy_started:?}"
    );
    assert_eq!(s.phase, Phase::Submitted);
    assert_eq!(s.start_time, None, "an estimate is not a start");
    assert_eq!(condition_of(&s, status::SUSPENDED), None);

    // Waiting for the busy job: Dependency, no estimate, and what to do about it.
    dependent
        .until("the dependency reason", LONG, |s| {
            pending(s).0 == Some("Dependency")
        })
        .await;
    let p = dependent.status().pending.unwrap();
    eprintln!("dependent: {}", serde_json::to_string(&p).unwrap());
    assert_eq!(p.message.as_deref(), Some(explained("Dependency").as_str()));
    assert!(p.message.unwrap().contains("dependsOn"));
    assert_eq!(p.estimated_start_time, None);

    // Submitted held: held by its own user, priority 0, no estimate, Suspended=True.
    held.until("the hold", LONG, |s| pending(s).0 == Some("JobHeldUser"))
        .await;
    let s = held.status();
    assert_eq!(pending(&s), (Some("JobHeldUser"), Some(0), false));
    assert_eq!(
        condition_of(&s, status::SUSPENDED),
        Some(("True".into(), "JobHeldUser".into()))
    );

    // Released in place: the same job, no longer held (it waits for the node like the others).
    let held_id = held.job_id();
    held.edit(|spec| spec.suspend = Some(false));
    held.step().await;
    assert_eq!(held.job_id(), held_id);
    assert_eq!(
        condition_of(&held.status(), status::SPEC_APPLIED),
        Some(("True".into(), "UpdatedInPlace".into()))
    );
    assert!(held.events.contains(&"UpdatedInPlace"), "{:?}", held.events);
    held.until(
        "released",
        LONG,
        |s| matches!(pending(s), (Some("Resources" | "Priority"), Some(p), _) if p > 0),
    )
    .await;
    assert_eq!(condition_of(&held.status(), status::SUSPENDED), None);
    assert!(!slurm_held(&held).await);
    // And held again.
    held.edit(|spec| spec.suspend = Some(true));
    held.step().await;
    held.until("held again", LONG, |s| pending(s).0 == Some("JobHeldUser"))
        .await;
    assert_eq!(held.job_id(), held_id, "one job throughout");
    assert!(slurm_held(&held).await);

    // A new time limit for the waiting job: in place, the same job id.
    let waiting_id = waiting.job_id();
    waiting.edit(|spec| spec.time_limit = Some("1m".parse().unwrap()));
    waiting.step().await;
    assert_eq!(waiting.job_id(), waiting_id);
    let s = waiting.status();
    assert_eq!(
        condition_of(&s, status::SPEC_APPLIED),
        Some(("True".into(), "UpdatedInPlace".into()))
    );
    assert_eq!(s.observed_generation, Some(2));
    assert_eq!(
        s.submitted_generation,
        Some(1),
        "still the run of generation 1"
    );
    assert_eq!(
        slurm_record(&waiting).await.time_limit,
        Some(Duration::from_secs(60))
    );
    // A changed script is no edit in place: the job runs on as submitted, and says so.
    waiting.edit(|spec| spec.script = script("echo other"));
    waiting.step().await;
    assert_eq!(waiting.job_id(), waiting_id);
    assert_eq!(
        condition_of(&waiting.status(), status::SPEC_APPLIED),
        Some(("False".into(), "JobActive".into()))
    );
    assert!(waiting.events.contains(&"EditIgnored"));

    // A running job is not held: Slurm lets only administrators suspend it.
    busy.edit(|spec| spec.suspend = Some(true));
    busy.step().await;
    let s = busy.status();
    assert_eq!(
        condition_of(&s, status::SPEC_APPLIED),
        Some(("False".into(), "NotUpdatable".into()))
    );
    assert_eq!(
        condition_of(&s, status::SUSPENDED),
        Some(("False".into(), "JobStarted".into()))
    );
    assert_eq!(s.phase, Phase::Running);

    for job in [&mut busy, &mut waiting, &mut dependent, &mut held] {
        job.delete().await;
    }
}

/// slurmctld's record of the runner's job.
async fn slurm_record(job: &Runner) -> slurm_operator::slurm::types::Job {
    job.client
        .job(job.job_id())
        .await
        .unwrap()
        .into_iter()
        .next()
        .unwrap()
}

async fn slurm_held(job: &Runner) -> bool {
    slurm_record(job).await.held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_shows_its_usage_also_after_slurmctld_forgot_it() {
    let slurm = require_slurm!();
    // A 60 MB string held for a few seconds (its peak RSS shows), in 500 MiB asked for.
    let body = "x=$(head -c 60000000 /dev/zero | tr '\\0' a); sleep 4; echo ${#x}";
    let mut job = Runner::new(
        &slurm,
        "usage",
        json!({"script": format!("#!/bin/bash\n{body}\n"), "memoryPerNode": "500Mi"}),
    )
    .run_as(TENANT);
    job.until_phase(Phase::Running, LONG).await;
    let last_seen_running = job.status.clone();
    job.until("the end and its usage", LONG, |s| {
        s.phase.is_terminal() && s.usage.is_some()
    })
    .await;
    let s = job.status();
    assert_eq!(s.phase, Phase::Completed, "{s:?}");
    let usage = s.usage.clone().unwrap();
    eprintln!("usage: {}", serde_json::to_string(&usage).unwrap());
    let elapsed = usage.elapsed.as_ref().unwrap().as_std();
    assert!(elapsed >= Duration::from_secs(4), "{usage:?}");
    assert!(usage.cpu_time.is_some(), "{usage:?}");
    let rss = quantity::to_bytes(&usage.max_rss.as_ref().unwrap().0).unwrap();
    assert!(rss >= 60_000_000, "the string's 60 MB: {usage:?}");
    // seff's memory efficiency: the peak over the 500 MiB asked for (memory is not allocated
    // with CR_Core, so slurmdbd lists it among the requested TRES only).
    let want = (rss as f64 / (500.0 * 1024.0 * 1024.0) * 100.0).round() as i32;
    assert!(
        (usage.memory_efficiency_percent.unwrap() - want).abs() <= 1,
        "{usage:?}"
    );
    let cpu = usage.cpu_efficiency_percent.unwrap();
    assert!((0..=100).contains(&cpu), "{usage:?}");
    assert!(
        usage.allocated_tres.as_deref().unwrap().contains("cpu=1"),
        "{usage:?}"
    );
    assert!(
        usage
            .requested_tres
            .as_deref()
            .unwrap()
            .contains("mem=500M"),
        "{usage:?}"
    );

    // slurmctld forgets it (MinJobAge 30 s; it purges about once a minute).
    let id = job.job_id();
    let client = job.client.clone();
    common::wait_for(
        "slurmctld to forget the job",
        Duration::from_secs(240),
        Duration::from_secs(2),
        || {
            let client = client.clone();
            async move {
                matches!(client.job(id).await, Err(SlurmError::NotFound { .. })).then_some(())
            }
        },
    )
    .await;
    // An operator that last saw the job running (it was down meanwhile) finds its end and its
    // usage in accounting: the same numbers.
    job.status = last_seen_running;
    job.until("the end from accounting", LONG, |s| s.phase.is_terminal())
        .await;
    let s = job.status();
    assert_eq!(s.phase, Phase::Completed, "{s:?}");
    assert_eq!(s.usage, Some(usage));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_shows_each_tasks_usage_and_their_sum() {
    let slurm = require_slurm!();
    let mut job = Runner::new(
        &slurm,
        "usage-array",
        json!({"script": script("sleep 2"), "array": "0-2"}),
    )
    .run_as(TENANT);
    job.until("the end and its usage", LONG, |s| {
        s.phase.is_terminal() && s.usage.is_some()
    })
    .await;
    let s = job.status();
    assert_eq!(s.phase, Phase::Completed, "{s:?}");
    let tasks = s.array_tasks.clone().unwrap().tasks;
    assert_eq!(tasks.len(), 3);
    let mut summed = Duration::ZERO;
    for task in &tasks {
        let usage = task.usage.as_ref().unwrap_or_else(|| panic!("{task:?}"));
        let elapsed = usage.elapsed.as_ref().unwrap().as_std();
        assert!(elapsed >= Duration::from_secs(2), "{task:?}");
        summed += elapsed;
        assert_eq!(usage.allocated_tres, None, "the lists are the array's");
    }
    let usage = s.usage.unwrap();
    eprintln!("array usage: {}", serde_json::to_string(&usage).unwrap());
    assert_eq!(usage.elapsed.as_ref().unwrap().as_std(), summed);
    assert!(
        usage.allocated_tres.as_deref().unwrap().contains("cpu=3"),
        "three tasks of one CPU: {usage:?}"
    );
}
