//! Crash test (issue 7, Reliability): the operator *binary* is SIGKILLed at random points while
//! 100 SlurmJobs are being submitted, 50 times; afterwards every SlurmJob maps to exactly one Slurm
//! job and every status is right.
//!
//! Kubernetes is the in-memory API server of `testing/fake-apiserver` (it keeps everything
//! across the operator's deaths, as etcd would); Slurm is the real local one. Each round adds two
//! SlurmJobs, starts the operator and kills it: every other round after a random delay (start-up,
//! caches, the SlurmCluster's check), the others within 400 ms of a new SlurmJob's first status write,
//! which its submit follows — so some kills land between a submit and the status write that
//! records it (the test counts how often). A last run lets everything finish. Slurm's accounting
//! (slurmdbd) then says how many jobs carry each SlurmJob's ownership tag: a crash between a
//! submit and its status write must be repaired by adoption, never by a second submit.
//!
//! `CRASH_SEED` replays a run (the seed is printed); `CRASH_ROUNDS` changes the number of kills.
//!
//! Random kills land between a submit and its status write only sometimes, so a second test puts
//! the process's end exactly there, with the fail point `act::FAIL_AFTER_SUBMIT` (live in test
//! builds only).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use std::collections::HashSet;

use kube::api::Api;
use serde_json::json;
use slurm_operator::controller::slurmjob::act::{FAIL_AFTER_SUBMIT, FAIL_EXIT_CODE};
use slurm_operator::crd::SlurmJob;
use slurm_operator::slurm::SlurmClient;
use slurm_operator::slurm::types::Changes;

use common::e2e::Operator;
use common::scenario::{self, Harness};

const NAMESPACE: &str = "crash";
const JOBS_PER_ROUND: usize = 2;
/// Kills land between 0 and this long after the start: start-up (CRDs, caches, the SlurmCluster's
/// first check and poll) takes about a second, the submits follow.
const MAX_LIFETIME_MS: u64 = 3_000;

/// A small deterministic PRNG (xorshift64*), so a failing run can be replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Whether one of `names` has a status yet.
async fn any_status(jobs: &Api<SlurmJob>, names: &[String]) -> bool {
    for name in names {
        if let Ok(Some(job)) = jobs.get_opt(name).await
            && job.status.is_some()
        {
            return true;
        }
    }
    false
}

/// How many SlurmJobs have a job in slurmctld (by their tag) that their status does not name:
/// the kill came between a submit and its status write.
async fn orphaned(jobs: &Api<SlurmJob>, slurm: &SlurmClient) -> usize {
    let Ok(Changes::Changed { items, .. }) = slurm.jobs(None).await else {
        panic!("cannot list slurmctld's jobs");
    };
    let tagged: HashSet<String> = items
        .iter()
        .filter_map(|j| j.owner.as_ref().map(|o| o.uid().to_owned()))
        .collect();
    jobs.list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|sj| sj.status.as_ref().is_none_or(|s| s.job_id.is_none()))
        .filter(|sj| {
            sj.metadata
                .uid
                .as_ref()
                .is_some_and(|uid| tagged.contains(uid))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_points_never_loses_or_doubles_a_job() {
    let slurm = require_slurm!();
    let seed = std::env::var("CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    let rounds: usize = std::env::var("CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    eprintln!("CRASH_SEED={seed} CRASH_ROUNDS={rounds}");
    let mut rng = Rng(seed);

    let harness = Harness::start(&slurm, NAMESPACE, "crash").await;
    let (kubeconfig, run, log) = (
        harness.kubeconfig.as_str(),
        &harness.run,
        harness.log.clone(),
    );
    let jobs: Api<SlurmJob> = Api::namespaced(harness.client.clone(), NAMESPACE);
    // Names unique to this run (`run`): accounting keeps every earlier run's jobs.
    let args = harness.args();
    let env = [("KUBECONFIG", kubeconfig)];

    let slurm_client = slurm.client();
    let mut names = Vec::new();
    let mut lifetimes = Vec::new();
    let mut orphans = 0;
    let started = Instant::now();
    for round in 0..rounds {
        let new: Vec<String> = (0..JOBS_PER_ROUND)
            .map(|i| format!("{run}-{round}-{i}"))
            .collect();
        for name in &new {
            scenario::apply_slurmjob(&jobs, name, &slurm.partition, "echo ran").await;
        }
        names.extend(new.iter().cloned());
        let mut operator = Operator::spawn(&args, &env, Some(&log));
        let born = Instant::now();
        if round % 2 == 0 {
            // Anywhere: start-up, caches, the SlurmCluster's check, a reconcile.
            tokio::time::sleep(Duration::from_millis(rng.below(MAX_LIFETIME_MS))).await;
        } else {
            // Around the submit: a new SlurmJob's first status (Pending) is written, and its
            // submit follows at once; the kill lands within 400 ms.
            let deadline = born + Duration::from_secs(5);
            while Instant::now() < deadline && !any_status(&jobs, &new).await {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(Duration::from_millis(rng.below(400))).await;
        }
        let status = operator.sigkill();
        lifetimes.push(born.elapsed());
        assert!(
            status.code().is_none(),
            "round {round}: the operator exited on its own ({status}) before the kill; log: {}",
            log.display()
        );
        orphans += orphaned(&jobs, &slurm_client).await;
    }
    let submitted_meanwhile = jobs
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|j| j.status.as_ref().is_some_and(|s| s.job_id.is_some()))
        .count();
    eprintln!(
        "{rounds} kills in {:?} (lifetimes {:?}..{:?}); {submitted_meanwhile} of {} SlurmJobs \
         had a job id in their status before the last run; {orphans} times a kill left a \
         submitted job without its status write (to be adopted by its tag)",
        started.elapsed(),
        lifetimes.iter().min(),
        lifetimes.iter().max(),
        names.len()
    );

    // The last run: everything must end, each SlurmJob Completed.
    let mut operator =
        Operator::spawn(&args, &env, Some(&log)).sigterm_on_drop(Duration::from_secs(10));
    let finished = scenario::all_ended(&jobs, &names, Duration::from_secs(300)).await;
    operator.terminate(Duration::from_secs(20));

    // Slurm's records: exactly one job per SlurmJob, the one its status names.
    scenario::assert_one_slurm_job_each(&slurm, &finished).await;
    eprintln!(
        "{} SlurmJobs, each exactly one Slurm job, all Completed with exit code 0",
        names.len()
    );
}

/// How many jobs slurmctld holds with the ownership tag of the SlurmJob `uid` (any generation).
async fn tagged_in_slurmctld(slurm: &SlurmClient, uid: &str) -> usize {
    let Ok(Changes::Changed { items, .. }) = slurm.jobs(None).await else {
        panic!("cannot list slurmctld's jobs");
    };
    items
        .iter()
        .filter(|j| j.owner.as_ref().is_some_and(|o| o.is_of(uid)))
        .count()
}

/// The process ends right after Slurm accepted a submit and before the status names the job,
/// three times (one new SlurmJob each); the next runs must adopt those jobs by their tags: in
/// the end each SlurmJob has exactly one Slurm job (slurmdbd's records) and Completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exit_right_after_a_submit_is_repaired_by_adoption() {
    let slurm = require_slurm!();
    let harness = Harness::start(&slurm, NAMESPACE, "crashpoint").await;
    let (kubeconfig, run, log) = (
        harness.kubeconfig.as_str(),
        &harness.run,
        harness.log.clone(),
    );
    let jobs: Api<SlurmJob> = Api::namespaced(harness.client.clone(), NAMESPACE);
    let args = harness.args();
    let failpoints = format!("{FAIL_AFTER_SUBMIT}=return");
    let failing = [
        ("KUBECONFIG", kubeconfig),
        ("FAILPOINTS", failpoints.as_str()),
    ];
    let slurm_client = slurm.client();

    let names: Vec<String> = (0..3).map(|i| format!("{run}-{i}")).collect();
    for name in &names {
        scenario::apply_slurmjob(&jobs, name, &slurm.partition, "echo ran").await;
        let mut operator = Operator::spawn(&args, &failing, Some(&log));
        let status = operator
            .exited_within(Duration::from_secs(60))
            .await
            .unwrap_or_else(|| {
                panic!(
                    "{name}: the operator did not reach {FAIL_AFTER_SUBMIT} within 60 s; log: {}",
                    log.display()
                )
            });
        assert_eq!(
            status.code(),
            Some(FAIL_EXIT_CODE),
            "{name}: not the fail point's exit; log: {}",
            log.display()
        );
        // The state a SIGKILL at that instant leaves: Slurm has the job, the status does not
        // name it.
        let sj = jobs.get(name).await.unwrap();
        assert!(
            sj.status.as_ref().is_none_or(|s| s.job_id.is_none()),
            "{name}: the status names a job although the process ended before writing it: {:?}",
            sj.status
        );
        let uid = sj.metadata.uid.as_deref().unwrap();
        assert_eq!(
            tagged_in_slurmctld(&slurm_client, uid).await,
            1,
            "{name}: one job with its tag in slurmctld"
        );
    }

    let mut operator = Operator::spawn(&args, &[("KUBECONFIG", kubeconfig)], Some(&log))
        .sigterm_on_drop(Duration::from_secs(10));
    let finished = scenario::all_ended(&jobs, &names, Duration::from_secs(120)).await;
    operator.terminate(Duration::from_secs(20));
    scenario::assert_one_slurm_job_each(&slurm, &finished).await;
}

/// A held SlurmJob (`suspend: true`) whose process ended right after Slurm accepted its submit,
/// taken over by a process that starts more than `recent` (60 s) later, with newer jobs of
/// others queued: that process's first sync skips the held job (the walk of the newest jobs
/// stops at others' older than a minute), so only the accounting search by name can show the
/// earlier submit. slurmdbd has the held job's record (no comment while it waits) but leaves a
/// job not eligible yet out of any search with a time window, unless the window is on the
/// submit time: without that, the SlurmJob was submitted a second time. It must be adopted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_job_before_a_late_restart_is_adopted_not_submitted_twice() {
    let slurm = require_slurm!();
    let harness = Harness::start(&slurm, NAMESPACE, "heldlate").await;
    let (kubeconfig, log) = (harness.kubeconfig.as_str(), harness.log.clone());
    let jobs: Api<SlurmJob> = Api::namespaced(harness.client.clone(), NAMESPACE);
    let args = harness.args();
    let failpoints = format!("{FAIL_AFTER_SUBMIT}=return");
    let slurm_client = slurm.client();
    let name = format!("{}-held", harness.run);
    let mut held = scenario::slurmjob(&name, &slurm.partition, "true");
    held["spec"]["suspend"] = json!(true);
    scenario::apply_manifest(&jobs, &name, held).await;
    let mut operator = Operator::spawn(
        &args,
        &[
            ("KUBECONFIG", kubeconfig),
            ("FAILPOINTS", failpoints.as_str()),
        ],
        Some(&log),
    );
    let status = operator.exited_within(Duration::from_secs(60)).await;
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(FAIL_EXIT_CODE),
        "the operator did not end at {FAIL_AFTER_SUBMIT}; log: {}",
        log.display()
    );
    let uid = jobs.get(&name).await.unwrap().metadata.uid.unwrap();
    let held = tagged_ids(&slurm_client, &uid).await;
    if held.len() != 1 {
        for id in &held {
            let _ = slurm_client.cancel_job(*id).await;
        }
        panic!("one job with its tag in slurmctld: {held:?}");
    }
    let submitted = Instant::now();

    // Others' jobs after it, held too (a begin time a day away), then more than `recent`.
    let mut others = Vec::new();
    for _ in 0..6 {
        let mut request = slurm.job(&format!("{}-other", harness.run), "true");
        let begin = chrono::Utc::now().timestamp() + 86_400;
        request.extra.insert(
            "begin_time".into(),
            serde_json::json!({"set": true, "number": begin}),
        );
        others.push(slurm_client.submit_job(&request).await.unwrap().job_id);
    }
    tokio::time::sleep(Duration::from_secs(75).saturating_sub(submitted.elapsed())).await;

    let mut operator = Operator::spawn(&args, &[("KUBECONFIG", kubeconfig)], Some(&log))
        .sigterm_on_drop(Duration::from_secs(10));
    // Nothing below panics before the cleanup: a held job left behind would wait for ever.
    let adopted = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            if let Ok(sj) = jobs.get(&name).await
                && let Some(id) = sj.status.and_then(|s| s.job_id)
            {
                break id;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    let tagged = tagged_ids(&slurm_client, &uid).await;
    // The SlurmJob's deletion cancels its job; read right after it, before slurmctld purges
    // the cancelled job (`MinJobAge` is 30 s here): gone counts as ended.
    let deleted = match jobs.delete(&name, &Default::default()).await {
        Ok(_) => {
            tokio::time::timeout(Duration::from_secs(60), async {
                while !matches!(jobs.get_opt(&name).await, Ok(None)) {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            })
            .await
        }
        Err(error) => panic!("deleting {name}: {error}"),
    };
    let ended = match slurm_client.job(held[0]).await {
        Ok(records) => records.iter().all(|j| j.state.is_final()),
        Err(error) => matches!(error, slurm_operator::slurm::SlurmError::NotFound { .. }),
    };
    operator.terminate(Duration::from_secs(20));
    for id in others.iter().chain(&tagged).chain(&held) {
        let _ = slurm_client.cancel_job(*id).await;
    }
    let adopted = adopted
        .unwrap_or_else(|_| panic!("no job in its status within 120 s; log: {}", log.display()));
    assert_eq!(
        tagged,
        held,
        "Slurm jobs carrying its tag (job {adopted} in its status); log: {}",
        log.display()
    );
    assert_eq!(i64::from(held[0]), adopted, "the status names the held job");
    assert!(deleted.is_ok(), "the SlurmJob was not deleted within 60 s");
    assert!(ended, "the held job is cancelled with its SlurmJob");
}

/// The ids of slurmctld's jobs that carry SlurmJob `uid`'s tag.
async fn tagged_ids(slurm: &SlurmClient, uid: &str) -> Vec<u32> {
    let Ok(Changes::Changed { items, .. }) = slurm.jobs(None).await else {
        panic!("cannot list slurmctld's jobs");
    };
    items
        .iter()
        .filter(|j| j.owner.as_ref().is_some_and(|o| o.is_of(uid)))
        .map(|j| j.job_id)
        .collect()
}
