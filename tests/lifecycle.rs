//! A job's life as Kubernetes tools read it (issue 15), through the operator *binary*: the
//! in-memory API server of `testing/fake-apiserver` and the real local Slurm.
//!
//! A SlurmJob whose partition Slurm does not have says so at once (`Stalled=True` and
//! `Ready=False` with reason `SubmitRejected` and Slurm's own message, one Warning Event), and the
//! operator sends no further submit for it — also after a restart — until its spec changes;
//! then it is submitted and completes (`Complete=True`). Submits are counted on the operator's
//! `/metrics` (`slurm_operator_slurmrestd_request_duration_seconds_count` of the submit
//! operation), which counts every request its slurmrestd clients make.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use slurm_operator::controller::slurmjob::status::{
    COMPLETE, READY, RECONCILING, SPEC_APPLIED, STALLED, SUBMIT_REJECTED, SUSPENDED,
};
use slurm_operator::crd::SlurmJob;
use slurm_operator::crd::condition;
use slurm_operator::crd::slurmjob::Phase;

use common::e2e::{MANAGER, Operator, eventually};
use common::scenario::{self, Harness};

const NAMESPACE: &str = "lifecycle";
/// The SlurmCluster's `pollInterval` in `scenario::seed_cluster`.
const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// The operation label of `POST /job/submit` in the request metrics.
const SUBMIT_OPERATION: &str = "slurm_post_job_submit";

/// How many submits the operator process serving `metrics` has sent (any answer).
async fn submits(http: &reqwest::Client, metrics: &str) -> u64 {
    let text = http
        .get(format!("http://{metrics}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let prefix = "slurm_operator_slurmrestd_request_duration_seconds_count{";
    text.lines()
        .filter(|line| line.starts_with(prefix))
        .filter(|line| line.contains(&format!("operation=\"{SUBMIT_OPERATION}\"")))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Whether `/readyz` of the process serving `metrics` answers 200.
async fn ready(http: &reqwest::Client, metrics: &str) -> bool {
    http.get(format!("http://{metrics}/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status() == 200)
}

/// `(status, reason)` of the condition `type_` of the SlurmJob, if it has one.
fn reason(job: &SlurmJob, type_: &str) -> Option<(String, String)> {
    let status = job.status.as_ref()?;
    condition::find(&status.conditions, type_).map(|c| (c.status.clone(), c.reason.clone()))
}

fn stalled_as_rejected(job: &SlurmJob) -> bool {
    reason(job, STALLED) == Some(("True".into(), SUBMIT_REJECTED.into()))
}

/// The Warning Events `reason` about the SlurmJob `name`.
async fn warnings(events: &Api<Event>, name: &str, reason: &str) -> Vec<Event> {
    events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_partition_stalls_at_once_and_is_not_resubmitted_until_the_spec_changes() {
    let slurm = require_slurm!();
    let harness = Harness::start(&slurm, NAMESPACE, "reject").await;
    let args = harness.args();
    let metrics = args[5];
    let env = [("KUBECONFIG", harness.kubeconfig.as_str())];
    let jobs: Api<SlurmJob> = Api::namespaced(harness.client.clone(), NAMESPACE);
    let events: Api<Event> = Api::namespaced(harness.client.clone(), NAMESPACE);
    let http = reqwest::Client::new();
    let log = harness.log.clone();

    // The operator up, connected, its index synced: a good job is submitted first, so that the
    // clock below measures the rejection and not the start-up.
    let mut operator =
        Operator::spawn(&args, &env, Some(&log)).sigterm_on_drop(Duration::from_secs(10));
    let good = format!("{}-good", harness.run);
    scenario::apply_slurmjob(&jobs, &good, &slurm.partition, "true").await;
    scenario::all_ended(&jobs, std::slice::from_ref(&good), Duration::from_secs(120)).await;
    let before = submits(&http, metrics).await;
    assert_eq!(
        before,
        1,
        "one submit for the good job; log: {}",
        log.display()
    );

    let bad = format!("{}-bad", harness.run);
    let applied = Instant::now();
    scenario::apply_slurmjob(&jobs, &bad, "no-such-partition", "true").await;
    let sj = eventually("SubmitRejected", Duration::from_secs(60), || async {
        let sj = jobs.get(&bad).await.ok()?;
        stalled_as_rejected(&sj).then_some(sj)
    })
    .await;
    let took = applied.elapsed();
    eprintln!("SubmitRejected {took:?} after the apply");
    // The bound: within one poll interval plus a second.
    assert!(
        took <= POLL_INTERVAL + Duration::from_secs(1),
        "the rejection showed after {took:?}; log: {}",
        log.display()
    );
    let status = sj.status.as_ref().unwrap();
    assert_eq!(status.phase, Phase::Pending);
    assert_eq!(status.job_id, None);
    assert_eq!(status.rejected_generation, sj.metadata.generation);
    assert_eq!(status.observed_generation, sj.metadata.generation);
    assert_eq!(
        reason(&sj, READY),
        Some(("False".into(), SUBMIT_REJECTED.into()))
    );
    assert_eq!(reason(&sj, RECONCILING), None);
    let message = &condition::find(&status.conditions, STALLED)
        .unwrap()
        .message;
    assert!(
        message.contains("Invalid partition name specified"),
        "Slurm's own message: {message}"
    );

    // No further submit: several poll intervals and more than the first backoff steps.
    tokio::time::sleep(5 * POLL_INTERVAL).await;
    assert_eq!(
        submits(&http, metrics).await,
        before + 1,
        "exactly one submit for the rejected job; log: {}",
        log.display()
    );
    assert_eq!(warnings(&events, &bad, SUBMIT_REJECTED).await.len(), 1);
    assert!(stalled_as_rejected(&jobs.get(&bad).await.unwrap()));

    // A restart: the status says it all, and no submit is made (the new process counts from 0);
    // the condition never turns into ClusterNotReady meanwhile.
    operator.terminate(Duration::from_secs(20));
    let mut operator =
        Operator::spawn(&args, &env, Some(&log)).sigterm_on_drop(Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready(&http, metrics).await {
        assert!(
            Instant::now() < deadline,
            "not ready; log: {}",
            log.display()
        );
        assert!(stalled_as_rejected(&jobs.get(&bad).await.unwrap()));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for _ in 0..10 {
        tokio::time::sleep(POLL_INTERVAL / 2).await;
        let sj = jobs.get(&bad).await.unwrap();
        assert!(stalled_as_rejected(&sj), "{:?}", sj.status);
    }
    assert_eq!(
        submits(&http, metrics).await,
        0,
        "no submit after the restart; log: {}",
        log.display()
    );
    assert_eq!(warnings(&events, &bad, SUBMIT_REJECTED).await.len(), 1);

    // The fix: a partition that exists. Submitted once, and it completes.
    jobs.patch(
        &bad,
        &PatchParams::apply(MANAGER),
        &Patch::Apply(json!({
            "apiVersion": "slurm.rs/v1alpha1",
            "kind": "SlurmJob",
            "metadata": {"name": bad},
            "spec": {
                "clusterName": scenario::CLUSTER,
                "partition": slurm.partition,
                "script": "#!/bin/sh\ntrue\n",
                "environment": {"PATH": "/usr/bin:/bin"},
            },
        })),
    )
    .await
    .unwrap();
    let done = scenario::all_ended(&jobs, std::slice::from_ref(&bad), Duration::from_secs(120))
        .await
        .remove(0);
    let status = done.status.as_ref().unwrap();
    assert_eq!(status.phase, Phase::Completed, "{status:?}");
    assert_eq!(status.rejected_generation, None);
    assert_eq!(status.observed_generation, done.metadata.generation);
    assert_eq!(
        reason(&done, COMPLETE),
        Some(("True".into(), "Completed".into()))
    );
    assert_eq!(reason(&done, STALLED), None);
    assert_eq!(
        reason(&done, READY),
        Some(("True".into(), "Completed".into()))
    );
    assert_eq!(submits(&http, metrics).await, 1, "one submit after the fix");
    operator.terminate(Duration::from_secs(20));
}

/// Issue 18 through the operator binary and the API server: a SlurmJob applied with
/// `suspend: true` is submitted held (as its namespace's Slurm user, alice); one server-side
/// apply that sets `suspend: false` and a shorter `timeLimit` releases the same job and changes
/// its limit in place, leaving its account as it was though the grant's first account changed (`SpecApplied=True/UpdatedInPlace`, one submit in all); it runs, and its
/// status keeps what it used, from accounting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_job_is_released_and_edited_in_place_with_one_apply() {
    let slurm = require_slurm!();
    let harness = Harness::start(&slurm, NAMESPACE, "hold").await;
    // The namespace runs as alice, the tenant (not the cluster's own user).
    scenario::grant(
        &harness.client,
        &slurm,
        json!({"namespaces": [NAMESPACE], "slurmUser": "alice", "accounts": ["team-a"]}),
    )
    .await;
    let args = harness.args();
    let metrics = args[5];
    let env = [("KUBECONFIG", harness.kubeconfig.as_str())];
    let jobs: Api<SlurmJob> = Api::namespaced(harness.client.clone(), NAMESPACE);
    let http = reqwest::Client::new();
    let log = harness.log.clone();
    let mut operator =
        Operator::spawn(&args, &env, Some(&log)).sigterm_on_drop(Duration::from_secs(10));

    let name = format!("{}-job", harness.run);
    let apply = |suspend: bool, time_limit: &str| {
        json!({
            "apiVersion": "slurm.rs/v1alpha1",
            "kind": "SlurmJob",
            "metadata": {"name": name},
            "spec": {
                "clusterName": scenario::CLUSTER,
                "partition": slurm.partition,
                "script": "#!/bin/sh\nsleep 2\n",
                "environment": {"PATH": "/usr/bin:/bin"},
                "workingDirectory": "/home/alice",
                "timeLimit": time_limit,
                "suspend": suspend,
            },
        })
    };
    jobs.patch(
        &name,
        &PatchParams::apply(MANAGER),
        &Patch::Apply(apply(true, "10m")),
    )
    .await
    .unwrap();
    let held = eventually("the job held in Slurm", Duration::from_secs(60), || async {
        let sj = jobs.get(&name).await.ok()?;
        let reason = sj.status.as_ref()?.pending.as_ref()?.reason.clone();
        (reason.as_deref() == Some("JobHeldUser")).then_some(sj)
    })
    .await;
    let status = held.status.as_ref().unwrap();
    let job_id = status.job_id.unwrap();
    assert_eq!(status.phase, Phase::Submitted);
    assert_eq!(
        reason(&held, SUSPENDED),
        Some(("True".into(), "JobHeldUser".into()))
    );
    // The admin puts another account first in the grant meanwhile (one alice is not in): the
    // edit below, which names no account, leaves the job's account as it is (it moved the job
    // to the grant's new first account, which Slurm refused: UpdateRejected).
    scenario::grant(
        &harness.client,
        &slurm,
        json!({"namespaces": [NAMESPACE], "slurmUser": "alice", "accounts": ["team-b", "team-a"]}),
    )
    .await;
    scenario::cluster_observed(&harness.client).await;

    jobs.patch(
        &name,
        &PatchParams::apply(MANAGER),
        &Patch::Apply(apply(false, "5m")),
    )
    .await
    .unwrap();
    let done = scenario::all_ended(&jobs, std::slice::from_ref(&name), Duration::from_secs(120))
        .await
        .remove(0);
    let status = done.status.as_ref().unwrap();
    assert_eq!(status.phase, Phase::Completed, "{status:?}");
    assert_eq!(status.job_id, Some(job_id), "the same job, released");
    assert_eq!(status.submitted_generation, Some(1));
    assert_eq!(status.observed_generation, done.metadata.generation);
    assert_eq!(
        reason(&done, SPEC_APPLIED),
        Some(("True".into(), "UpdatedInPlace".into()))
    );
    assert_eq!(reason(&done, SUSPENDED), None);
    let records = slurm
        .client()
        .accounting_job(u32::try_from(job_id).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].user_name.as_deref(), Some("alice"));
    assert_eq!(records[0].account.as_deref(), Some("team-a"));
    assert_eq!(records[0].time_limit, Some(Duration::from_secs(300)));
    // What it used, once accounting has it (the same step as the end, or a few seconds on).
    let done = eventually("the job's usage", Duration::from_secs(60), || async {
        let sj = jobs.get(&name).await.ok()?;
        sj.status.as_ref()?.usage.is_some().then_some(sj)
    })
    .await;
    let usage = done.status.unwrap().usage.unwrap();
    assert!(
        usage.elapsed.as_ref().unwrap().as_std() >= Duration::from_secs(2),
        "{usage:?}"
    );
    assert_eq!(submits(&http, metrics).await, 1, "one submit in all");
    operator.terminate(Duration::from_secs(20));
}

/// A pipeline (`c` after `b` after `a`, created last first) is submitted link after link as
/// each SlurmJob before it gets its job id: a dependee's change wakes the SlurmJobs waiting for
/// it, not their own next look (every 30 s for a dependency wait). Both dependents have their
/// job ids while `a` (15 s) still runs; waking only at that look, `b` would be submitted 30 s
/// after its first wait, `a` long ended. Slurm then runs them in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_slurmjobs_is_submitted_as_each_link_gets_its_job_id() {
    let slurm = require_slurm!();
    let harness = Harness::start(&slurm, NAMESPACE, "chain").await;
    let args = harness.args();
    let env = [("KUBECONFIG", harness.kubeconfig.as_str())];
    let jobs: Api<SlurmJob> = Api::namespaced(harness.client.clone(), NAMESPACE);
    let log = harness.log.clone();
    let mut operator =
        Operator::spawn(&args, &env, Some(&log)).sigterm_on_drop(Duration::from_secs(10));

    let name = |link: &str| format!("{}-{link}", harness.run);
    let apply = |link: &str, body: &str, after: Option<&str>| {
        let mut spec = json!({
            "clusterName": scenario::CLUSTER,
            "partition": slurm.partition,
            "script": format!("#!/bin/sh\n{body}\n"),
            "environment": {"PATH": "/usr/bin:/bin"},
        });
        if let Some(after) = after {
            spec["dependsOn"] = json!([{"name": name(after), "type": "afterok"}]);
        }
        let object = json!({
            "apiVersion": "slurm.rs/v1alpha1",
            "kind": "SlurmJob",
            "metadata": {"name": name(link)},
            "spec": spec,
        });
        let jobs = jobs.clone();
        let link = name(link);
        async move {
            jobs.patch(&link, &PatchParams::apply(MANAGER), &Patch::Apply(object))
                .await
                .unwrap();
        }
    };
    apply("c", "true", Some("b")).await;
    apply("b", "true", Some("a")).await;
    // Both wait (for a SlurmJob that does not exist, then for one not submitted).
    let waiting = |sj: &SlurmJob| {
        reason(sj, READY).is_some_and(|(_, reason)| reason == "WaitingForDependencies")
    };
    eventually("b and c waiting", Duration::from_secs(60), || async {
        let (b, c) = (
            jobs.get(&name("b")).await.ok()?,
            jobs.get(&name("c")).await.ok()?,
        );
        (waiting(&b) && waiting(&c)).then_some(())
    })
    .await;
    apply("a", "sleep 15", None).await;
    let ids = eventually("b and c submitted", Duration::from_secs(60), || async {
        let a = jobs.get(&name("a")).await.ok()?;
        let phase = a.status.as_ref().map(|s| s.phase);
        assert!(
            !phase.is_some_and(|p| p.is_terminal()),
            "a ended ({phase:?}) before b and c had job ids; log: {}",
            log.display()
        );
        let id = |sj: SlurmJob| sj.status?.job_id;
        let b = id(jobs.get(&name("b")).await.ok()?)?;
        let c = id(jobs.get(&name("c")).await.ok()?)?;
        Some((b, c))
    })
    .await;
    eprintln!("b and c submitted as jobs {ids:?} while a runs");

    let names = [name("a"), name("b"), name("c")];
    let done = scenario::all_ended(&jobs, &names, Duration::from_secs(120)).await;
    let status = |i: usize| done[i].status.clone().unwrap();
    for (i, sj) in done.iter().enumerate() {
        assert_eq!(
            status(i).phase,
            Phase::Completed,
            "{}: {:?}",
            names[i],
            sj.status
        );
    }
    for i in 1..3 {
        let (before, after) = (
            status(i - 1).end_time.unwrap(),
            status(i).start_time.unwrap(),
        );
        assert!(
            before.0 <= after.0,
            "{} started before {} ended",
            names[i],
            names[i - 1]
        );
    }
    operator.terminate(Duration::from_secs(20));
}
