//! One step against an index and a slurmrestd that is never reached: what the step decides
//! before any request (the spec's own faults).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::*;
use crate::controller::slurmjob::status::READY;

fn state(synced: Option<i64>, jobs: Vec<Job>) -> ClusterState {
    ClusterState {
        jobs: Arc::new(jobs.into_iter().map(|j| (j.job_id, j)).collect()),
        jobs_synced_at: synced.and_then(|s| DateTime::from_timestamp(s, 0)),
        ..Default::default()
    }
}

/// What a step runs against: the cluster's client for `url` (v0.0.42 pinned: nothing asks
/// which versions it serves), an index synced at 101 s, nothing submitted, a leader.
struct World {
    client: SlurmClient,
    index: ClusterState,
    submissions: Submissions,
    leadership: Leadership,
    key: crate::slurm::tag::TagKey,
}

impl World {
    fn new(url: &str) -> Self {
        let config = crate::slurm::ClientConfig::new(url)
            .unwrap()
            .allow_plaintext(true)
            .with_api_version(Some(crate::slurm::ApiVersion::V0_0_42));
        let credentials = Arc::new(crate::slurm::Credentials::token("t", None).unwrap());
        Self {
            client: SlurmClient::new(config, credentials).unwrap(),
            index: state(Some(101), vec![]),
            submissions: Submissions::default(),
            leadership: Leadership::always(),
            key: crate::slurm::tag::TagKey::ephemeral(),
        }
    }

    /// A process started at 100 s, stepping at `now`.
    fn env(&self, now: DateTime<Utc>) -> Env<'_> {
        Env {
            client: &self.client,
            submitter: &self.client,
            job_user: None,
            state: &self.index,
            submissions: &self.submissions,
            started_at: DateTime::from_timestamp(100, 0).unwrap(),
            now,
            leadership: &self.leadership,
            took_over_at: None,
            acting_since: DateTime::from_timestamp(100, 0).unwrap(),
            key: &self.key,
            searches: None,
            still_granted: &|| true,
        }
    }
}

/// The cluster's client for the local real Slurm, as its own user.
fn local_client(slurm: &std::collections::HashMap<String, String>) -> SlurmClient {
    let key = std::fs::read(&slurm["SLURM_JWT_KEY"]).unwrap();
    let credentials = Arc::new(
        crate::slurm::Credentials::minted(
            key,
            slurm["SLURM_USER"].clone(),
            Duration::from_secs(300),
        )
        .unwrap(),
    );
    SlurmClient::new(
        crate::slurm::ClientConfig::new(&slurm["SLURM_REST_URL"])
            .unwrap()
            .allow_plaintext(true),
        credentials,
    )
    .unwrap()
}

/// `true` on the local Slurm's partition, held for an hour (it never runs while a test looks).
fn held_spec(slurm: &std::collections::HashMap<String, String>) -> SlurmJobSpec {
    serde_json::from_value(serde_json::json!({
        "clusterName": "local",
        "partition": slurm["SLURM_PARTITION"],
        "script": "#!/bin/sh\ntrue\n",
        "extraOptions": {"begin_time": {"set": true, "number": Utc::now().timestamp() + 3600}},
    }))
    .unwrap()
}

/// Never reached: a step that would call it fails.
const UNREACHABLE: &str = "http://127.0.0.1:1";

/// The plainest spec: `true` on cluster `local`.
fn true_spec() -> SlurmJobSpec {
    serde_json::from_value(serde_json::json!({
        "clusterName": "local",
        "script": "#!/bin/sh\ntrue\n",
    }))
    .unwrap()
}

/// SlurmJob `old` (uid `u`, generation 1, no status) created at `created`: not fresh once the
/// step's clock is past it by more than the fresh start, so accounting is asked first.
fn created_at(spec: &SlurmJobSpec, created: DateTime<Utc>) -> Target<'_> {
    Target {
        name: "old",
        uid: "u",
        generation: 1,
        spec,
        status: None,
        created: Some(created),
        refusal: None,
    }
}

/// SlurmJob `name` (uid `u`) at `generation`, whose status follows a job.
fn following<'a>(
    name: &'a str,
    generation: i64,
    spec: &'a SlurmJobSpec,
    status: &'a SlurmJobStatus,
) -> Target<'a> {
    Target {
        name,
        uid: "u",
        generation,
        spec,
        status: Some(status),
        created: None,
        refusal: None,
    }
}

/// A SlurmJob stored with itself in `dependsOn` (before admission refused that) is an
/// unsubmittable spec that waits for an edit, not a `WaitingForDependencies` retried forever
/// on a dependency that can never be submitted. Nothing is sent to slurmrestd.
#[tokio::test]
async fn depending_on_itself_is_an_invalid_spec_not_an_endless_wait() {
    let spec: SlurmJobSpec = serde_json::from_value(serde_json::json!({
        "clusterName": "local",
        "script": "#!/bin/sh\ntrue\n",
        "dependsOn": [{"name": "prepare"}, {"name": "train"}],
    }))
    .unwrap();
    let world = World::new(UNREACHABLE);
    let env = world.env(DateTime::from_timestamp(200, 0).unwrap());
    // `prepare` is submitted (job 5): only the self-reference stands in the way.
    let step = step_named(&spec, "train", env).await;
    let ready = condition::find(&step.status.conditions, READY).unwrap();
    assert_eq!(ready.reason, "InvalidSpec");
    assert!(
        ready
            .message
            .contains("dependsOn names the SlurmJob itself (train)"),
        "{}",
        ready.message
    );
    assert!(step.invalid);
    assert_eq!(step.retry, None, "waits for an edit");
    assert_eq!(step.status.job_id, None);
    assert_eq!(step.notices.len(), 1);
    assert_eq!(step.notices[0].reason, "InvalidSpec");
    assert!(world.submissions.is_empty());

    // Another SlurmJob with the same dependencies just waits for `train`, as before.
    let step = step_named(&spec, "other", env).await;
    let ready = condition::find(&step.status.conditions, READY).unwrap();
    assert_eq!(ready.reason, "WaitingForDependencies");
    assert!(!step.invalid);
}

/// Bob's pending job 9 with the tag of generation 1 of the SlurmJob of uid `uid`, signed for
/// bob: not adoptable for alice (`TagNotAdopted`).
fn bobs_job_tagged(world: &World, uid: &str) -> Job {
    Job {
        job_id: 9,
        state: crate::slurm::types::JobState::from_strings(&["PENDING"]),
        user_name: Some("bob".into()),
        ..Job::bare().with_comment(world.key.comment(&OwnerTag::new(uid, 1), "bob"))
    }
}

/// A SlurmJob waiting (here for a dependency) looks again now and then (for a dependency
/// rarely: a dependee's change wakes it): a Slurm job carrying its tag that is not adopted is
/// named once, when the wait begins, not at every look.
#[tokio::test]
async fn a_wait_that_goes_on_repeats_no_warning() {
    let spec: SlurmJobSpec = serde_json::from_value(serde_json::json!({
        "clusterName": "local",
        "script": "#!/bin/sh\ntrue\n",
        "dependsOn": [{"name": "missing"}],
    }))
    .unwrap();
    let mut world = World::new(UNREACHABLE);
    let alice = minted(UNREACHABLE);
    world.index = state(Some(101), vec![bobs_job_tagged(&world, "v")]);
    let env = Env {
        submitter: &alice,
        ..world.env(DateTime::from_timestamp(200, 0).unwrap())
    };
    let target = |status| Target {
        name: "train",
        uid: "v",
        generation: 1,
        spec: &spec,
        status,
        created: None,
        refusal: None,
    };
    let first = step(target(None), env, |_| None).await.unwrap();
    let ready = condition::find(&first.status.conditions, READY).unwrap();
    assert_eq!(ready.reason, "WaitingForDependencies");
    let reasons: Vec<&str> = first.notices.iter().map(|n| &*n.reason).collect();
    assert!(reasons.contains(&"TagNotAdopted"), "{reasons:?}");
    assert_eq!(first.retry, Some(DEPENDENCY_RECHECK));
    let env = Env {
        submitter: &alice,
        ..world.env(DateTime::from_timestamp(203, 0).unwrap())
    };
    let again = step(target(Some(&first.status)), env, |_| None)
        .await
        .unwrap();
    assert_eq!(again.status, first.status);
    assert!(again.notices.is_empty(), "{:?}", again.notices);
    assert_eq!(again.retry, Some(DEPENDENCY_RECHECK));
}

/// An edit of a finished SlurmJob that cannot be submitted: the finished run goes to the
/// history (nothing of it is lost), nothing is submitted, and the only Event is the
/// InvalidSpec Warning — not a "Resubmitted ... running it again" that never happens.
#[tokio::test]
async fn an_unsubmittable_edit_of_a_finished_job_announces_no_rerun() {
    let spec: SlurmJobSpec = serde_json::from_value(serde_json::json!({
        "clusterName": "local",
        "script": "echo no interpreter line",
    }))
    .unwrap();
    let world = World::new(UNREACHABLE);
    let env = world.env(DateTime::from_timestamp(200, 0).unwrap());
    let finished = SlurmJobStatus {
        phase: Phase::Completed,
        job_id: Some(41),
        exit_code: Some(0),
        observed_generation: Some(1),
        submitted_generation: Some(1),
        ..Default::default()
    };
    let target = Target {
        name: "edited",
        uid: "u",
        generation: 2,
        spec: &spec,
        status: Some(&finished),
        created: None,
        refusal: None,
    };
    let step = step(target, env, |_| None).await.unwrap();
    let reasons: Vec<_> = step.notices.iter().map(|n| n.reason.as_ref()).collect();
    assert_eq!(reasons, ["InvalidSpec"]);
    assert!(step.invalid);
    assert_eq!(step.status.job_id, None);
    assert_eq!(step.status.history.len(), 1);
    assert_eq!(step.status.history[0].job_id, 41);
    assert_eq!(step.status.history[0].phase, Phase::Completed);
    assert!(world.submissions.is_empty());
}

async fn step_named(spec: &SlurmJobSpec, name: &str, env: Env<'_>) -> Step {
    let target = Target {
        name,
        uid: "v",
        generation: 1,
        spec,
        status: None,
        created: None,
        refusal: None,
    };
    step(target, env, |dep: &str| {
        (dep == "prepare").then(|| Dependee::new(spec.cluster_name.clone(), Some(5)))
    })
    .await
    .unwrap()
}

/// Issue 15, item 2: a generation Slurm refused (`rejectedGeneration`, as a restarted operator
/// reads it) is not submitted again — the step asks slurmrestd nothing and waits for an edit —
/// while the next generation goes for a submit again.
#[tokio::test]
async fn a_rejected_generation_is_not_submitted_again_until_the_spec_changes() {
    let spec: SlurmJobSpec = serde_json::from_value(serde_json::json!({
        "clusterName": "local",
        "partition": "no-such-partition",
        "script": "#!/bin/sh\ntrue\n",
    }))
    .unwrap();
    let world = World::new(UNREACHABLE);
    let env = world.env(DateTime::from_timestamp(200, 0).unwrap());
    let rejected = status::rejected(
        SlurmJobStatus::default(),
        1,
        "invalid partition: Invalid partition name specified",
        status::time(DateTime::from_timestamp(150, 0)).unwrap(),
    );
    let target = |generation| Target {
        name: "bad",
        uid: "u",
        generation,
        spec: &spec,
        status: Some(&rejected),
        created: None,
        refusal: None,
    };
    let held = step(target(1), env, |_| None).await.unwrap();
    assert_eq!(held.status, rejected, "the status already says it all");
    assert!(held.notices.is_empty(), "no second Warning");
    assert!(held.invalid);
    assert_eq!(held.retry, None);
    let stalled = condition::find(&held.status.conditions, status::STALLED).unwrap();
    assert_eq!(stalled.reason, status::SUBMIT_REJECTED);
    assert!(stalled.message.contains("Invalid partition name specified"));

    // The edit: on its way to a submit again (an edited SlurmJob first asks accounting for an
    // earlier submit of the new generation, and this slurmrestd does not answer: it retries).
    let edited = step(target(2), env, |_| None).await.unwrap();
    assert!(!edited.invalid);
    assert_eq!(edited.retry, Some(WAIT_RETRY));
    assert!(edited.backoff, "a failed accounting check backs off");
    assert!(!held.backoff);
    assert!(condition::find(&edited.status.conditions, status::STALLED).is_none());
    let reconciling = condition::find(&edited.status.conditions, status::RECONCILING).unwrap();
    assert_eq!(reconciling.reason, "WaitingForAccounting");
    assert_eq!(edited.status.observed_generation, Some(2));
}

/// An edit in place is sent as the job's own Slurm user, never with the cluster's credentials:
/// with a ready token (no key to mint another user's) or a record naming no user, there is no
/// client to send it with, and the step says so (`CannotActAsUser`) instead of acting as the
/// administrator the cluster's token usually belongs to.
#[test]
fn an_edit_has_no_client_but_the_jobs_owner() {
    let config = crate::slurm::ClientConfig::new("http://127.0.0.1:1")
        .unwrap()
        .allow_plaintext(true);
    let record = |user: Option<&str>| Job {
        job_id: 7,
        user_name: user.map(str::to_owned),
        ..Job::bare()
    };
    let minted = SlurmClient::new(
        config.clone(),
        Arc::new(
            crate::slurm::Credentials::minted(vec![1; 32], "slurm", Duration::from_secs(60))
                .unwrap(),
        ),
    )
    .unwrap();
    assert!(as_owner(&minted, &record(Some("alice"))).is_ok());
    let why = as_owner(&minted, &record(None)).err().unwrap();
    assert!(why.contains("names no Slurm user"), "{why}");
    let token = SlurmClient::new(
        config,
        Arc::new(crate::slurm::Credentials::token("admin-token", None).unwrap()),
    )
    .unwrap();
    assert!(as_owner(&token, &record(Some("alice"))).is_err());
}

/// A busy slurmdbd does not hold up the write of a job's end: the step that sees the end waits
/// [`USAGE_WAIT_AT_END`] for accounting's usage, then goes on without it and asks again soon.
/// A slurmrestd whose accounting answer takes 30 s stands for the busy slurmdbd (the real one
/// cannot be made slow on demand).
#[tokio::test]
async fn the_end_of_a_job_is_not_held_up_by_a_slow_accounting() {
    use wiremock::matchers::{method, path_regex};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path_regex("^/slurmdb/v0.0.42/job/42/?$"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(30)))
        .expect(1)
        .mount(&server)
        .await;
    let world = World::new(&server.uri());
    let ended = DateTime::from_timestamp(1_000, 0).unwrap();
    let env = world.env(ended + chrono::TimeDelta::seconds(1));
    let status = SlurmJobStatus {
        phase: Phase::Cancelled,
        job_id: Some(42),
        end_time: status::time(Some(ended)),
        submitted_generation: Some(1),
        ..Default::default()
    };

    let asked = std::time::Instant::now();
    let (next, retry) = with_usage(status.clone(), "uid", env, Some(USAGE_WAIT_AT_END)).await;
    let took = asked.elapsed();
    assert!(
        took >= USAGE_WAIT_AT_END && took < Duration::from_secs(10),
        "waited {took:?}"
    );
    assert_eq!(next, status, "the end as seen, without usage");
    assert_eq!(
        retry,
        Some(Duration::from_secs(3)),
        "usage asked again soon"
    );
    server.verify().await;
}

/// Against the real Slurm: the id a submit returns is passed to the poller as this process's
/// submit (ours without its record: the poller may read that once a burst pauses), and named
/// like any other; a job adopted is only named (its record says whose it is).
#[tokio::test]
async fn a_submit_tells_the_poller_its_job_is_ours_an_adoption_only_names_it() {
    let Some(slurm) = crate::controller::test_support::local_slurm() else {
        return;
    };
    let mut world = World::new(UNREACHABLE);
    world.client = local_client(&slurm);
    let spec = held_spec(&slurm);
    let now = Utc::now();
    let target = Target {
        name: "told",
        uid: "told-uid",
        generation: 1,
        spec: &spec,
        status: None,
        created: Some(now - chrono::TimeDelta::seconds(1)),
        refusal: None,
    };
    let submitted = step(target, world.env(now), |_| None).await.unwrap();
    let job_id = u32::try_from(submitted.status.job_id.expect("submitted")).unwrap();
    assert_eq!(
        submitted.retry, None,
        "the poller reports a job it submitted"
    );
    assert_eq!(
        world.index.wants.take_submitted(),
        BTreeMap::from([(job_id, "told-uid".to_owned())])
    );
    assert_eq!(world.index.wants.take(), BTreeSet::from([job_id]));

    // A step that does not see the status written (a cache that lags) finds this process's
    // submit and adopts it: named only.
    let adopted = step(target, world.env(Utc::now()), |_| None).await.unwrap();
    assert_eq!(adopted.status.job_id, Some(i64::from(job_id)));
    // Not in the index: it may be a job slurmctld no longer holds, of which the poller says
    // nothing; the next step comes by itself.
    assert_eq!(adopted.retry, Some(WAIT_RETRY));
    assert!(world.index.wants.take_submitted().is_empty());
    assert_eq!(world.index.wants.take(), BTreeSet::from([job_id]));
    world.client.cancel_job(job_id).await.unwrap();
}

/// `trackedSince` dates Slurm's answer, not the step's start: a step that began long before
/// its submit was answered (an accounting lookup, a slow slurmctld) must not let a listing
/// that began in between, which cannot hold the job, prove it gone (`plan::gone`).
#[tokio::test]
async fn the_evidence_clock_starts_when_slurm_answered() {
    let Some(slurm) = crate::controller::test_support::local_slurm() else {
        return;
    };
    let mut world = World::new(UNREACHABLE);
    world.client = local_client(&slurm);
    let spec = held_spec(&slurm);
    // The step "began" a minute ago; a complete listing began 30 s ago, before the job existed.
    let began = Utc::now() - chrono::TimeDelta::seconds(60);
    world.index.jobs_synced_at = Some(began + chrono::TimeDelta::seconds(30));
    let target = Target {
        name: "slow",
        uid: "slow-uid",
        generation: 1,
        spec: &spec,
        status: None,
        created: Some(began - chrono::TimeDelta::seconds(1)),
        refusal: None,
    };
    let before_answer = Utc::now() - chrono::TimeDelta::seconds(1);
    let submitted = step(target, world.env(began), |_| None).await.unwrap();
    let job_id = submitted.status.job_id.expect("submitted");
    let tracked =
        crate::crd::time::to_utc(submitted.status.tracked_since.as_ref().unwrap()).unwrap();
    assert!(
        tracked >= before_answer,
        "trackedSince {tracked} is the step's start"
    );
    let now = Utc::now();
    let followed = plan::follow(
        &submitted.status,
        job_id,
        &world.index,
        now,
        "slow-uid",
        &world.key,
        None,
    );
    assert_ne!(
        followed.phase,
        Phase::Lost,
        "a listing from before the job proved it gone"
    );
    world
        .client
        .cancel_job(u32::try_from(job_id).unwrap())
        .await
        .unwrap();
}

/// After a gain of the leader Lease, a generation the previous leader may have submitted
/// waits for a listing of every job that began once its submit could have landed: one of a
/// SlurmJob created before the gain, or edited (when is not known); never one created after
/// it, and never without an election.
#[test]
fn a_generation_older_than_the_takeover_waits_out_the_predecessors_submit() {
    let world = World::new(UNREACHABLE);
    let gained = DateTime::from_timestamp(1_000, 0).unwrap();
    let spec = true_spec();
    let target = |generation, created: i64| Target {
        name: "t",
        uid: "u",
        generation,
        spec: &spec,
        status: None,
        created: DateTime::from_timestamp(created, 0),
        refusal: None,
    };
    let env = |took_over_at| Env {
        took_over_at,
        ..world.env(gained)
    };
    let waits = |target, env| takeover(target, env).map(|t| t.settles_at());
    // The client's request timeout (30 s) after the gain.
    let settles = gained + chrono::TimeDelta::seconds(30);
    assert_eq!(
        waits(target(1, 999), env(Some(gained))),
        Some(settles),
        "created before"
    );
    assert_eq!(
        waits(target(2, 1_001), env(Some(gained))),
        Some(settles),
        "edited"
    );
    assert_eq!(
        waits(target(1, 1_001), env(Some(gained))),
        None,
        "created after"
    );
    assert_eq!(waits(target(1, 999), env(None)), None, "no election");
    // Past once a listing of every job began after the settling and its grace.
    let mut listed = world.index.clone();
    listed.fully_listed_at = Some(gained + chrono::TimeDelta::seconds(41));
    assert!(plan::past_doubt(&listed, settles));
    listed.fully_listed_at = Some(gained + chrono::TimeDelta::seconds(39));
    assert!(!plan::past_doubt(&listed, settles));
}

/// A tenant's conditions never name where slurmrestd is: an accounting lookup that cannot
/// reach it says so without the address (`SlurmError::for_tenant`).
#[tokio::test]
async fn a_wait_on_an_unreachable_slurmrestd_does_not_name_it() {
    let world = World::new(UNREACHABLE);
    let spec = true_spec();
    // Not fresh: accounting is asked first.
    let target = created_at(&spec, DateTime::from_timestamp(1, 0).unwrap());
    let now = DateTime::from_timestamp(200, 0).unwrap();
    let step = step(target, world.env(now), |_| None).await.unwrap();
    let ready = step
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == READY)
        .expect("Ready");
    assert!(
        ready.message.contains("cannot reach slurmrestd"),
        "{}",
        ready.message
    );
    assert!(!ready.message.contains("127.0.0.1"), "{}", ready.message);
}

/// A running job of ours whose record the poller cannot read: the status stays as last read
/// and says so with `Stalled=True` (`SlurmRecordUnreadable`, since when and why, and what bounds
/// it); once the record is read again, the next step removes it. Nothing is sent to slurmrestd.
#[tokio::test]
async fn a_job_whose_record_cannot_be_read_is_stalled_until_it_can() {
    let spec: SlurmJobSpec = serde_json::from_value(serde_json::json!({
        "clusterName": "local",
        "script": "#!/bin/sh\nsleep 60\n",
    }))
    .unwrap();
    let mut world = World::new(UNREACHABLE);
    let tag = OwnerTag::new("u", 1);
    let mut record = Job::bare().with_comment(world.key.comment(&tag, "slurm"));
    record.job_id = 43;
    record.user_name = Some("slurm".into());
    record.state = crate::slurm::types::JobState::from_strings(&["RUNNING"]);
    let readable = state(Some(101), vec![record]);
    let since = DateTime::from_timestamp(150, 0).unwrap();
    world.index = ClusterState {
        unreadable: Arc::new(
            [(
                43,
                crate::state::index::Unreadable {
                    reason: "ResponseTooLarge",
                    message: "slurmrestd's answer to job is larger than the 33554432-byte limit"
                        .into(),
                    since,
                },
            )]
            .into(),
        ),
        ..readable.clone()
    };
    let running = SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(43),
        observed_generation: Some(1),
        submitted_generation: Some(1),
        ..Default::default()
    };
    let target = Target {
        name: "unread",
        uid: "u",
        generation: 1,
        spec: &spec,
        status: Some(&running),
        created: None,
        refusal: None,
    };
    let stalled = |status: &SlurmJobStatus| {
        condition::find(&status.conditions, status::STALLED)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    let env = world.env(DateTime::from_timestamp(200, 0).unwrap());
    let step = step(target, env, |_| None).await.unwrap();
    let (is, reason, message) = stalled(&step.status).expect("Stalled");
    assert_eq!(
        (is.as_str(), reason.as_str()),
        ("True", "SlurmRecordUnreadable")
    );
    for part in [
        "Slurm job 43's record",
        "since 1970-01-01T00:02:30Z",
        "ResponseTooLarge",
        "33554432-byte limit",
        "spec.maxResponseSize",
        "as last read",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    assert_eq!(step.status.phase, Phase::Running, "as last read");
    assert!(step.notices.is_empty(), "{:?}", step.notices);
    // Still unreadable at the next step: the same status, nothing to write again (the
    // condition's time is since when, not the step's).
    let written = step.status.clone();
    let again = super::step(
        Target {
            status: Some(&written),
            ..target
        },
        world.env(DateTime::from_timestamp(205, 0).unwrap()),
        |_| None,
    )
    .await
    .unwrap();
    assert_eq!(again.status, written);
    // Read again: the next step, from the status written, removes it.
    world.index = readable;
    let written = step.status;
    let target = Target {
        status: Some(&written),
        ..target
    };
    let env = world.env(DateTime::from_timestamp(210, 0).unwrap());
    let step = super::step(target, env, |_| None).await.unwrap();
    assert_eq!(stalled(&step.status), None);
    assert_eq!(step.status.phase, Phase::Running);
}

/// A submit (here: an adoption of what this process submitted) whose id the index still holds
/// as another SlurmJob's job (slurmctld lost its state and numbered a new job with an old id,
/// before the poller's next complete listing) mirrors nothing of that job: not its phase, its
/// nodes or its exit code, and no Event of its end.
#[tokio::test]
async fn a_submit_mirrors_no_record_of_another_slurmjob_under_its_id() {
    let spec = true_spec();
    let mut world = World::new(UNREACHABLE);
    world.submissions.record(&OwnerTag::new("v", 1), 9);
    let mut theirs = Job::bare().with_comment(world.key.comment(&OwnerTag::new("other", 1), "bob"));
    theirs.job_id = 9;
    theirs.user_name = Some("bob".into());
    theirs.state = crate::slurm::types::JobState::from_strings(&["FAILED"]);
    theirs.nodes = Some("n9".into());
    theirs.exit = Some(crate::slurm::types::ExitStatus {
        return_code: Some(3),
        ..Default::default()
    });
    world.index = state(Some(101), vec![theirs]);
    let step = step_named(
        &spec,
        "x",
        world.env(DateTime::from_timestamp(200, 0).unwrap()),
    )
    .await;
    assert_eq!(step.status.job_id, Some(9));
    assert_eq!(step.status.phase, Phase::Submitted);
    assert_eq!(step.status.nodes, None);
    assert_eq!(step.status.exit_code, None);
    let reasons: Vec<_> = step.notices.iter().map(|n| n.reason.as_ref()).collect();
    assert!(
        !reasons
            .iter()
            .any(|r| ["Failed", "Started", "Completed"].contains(r)),
        "{reasons:?}"
    );
}

/// A submit whose answer is lost (here one that cannot be read: slurmctld may have made the
/// job all the same) is not sent again until a listing of every job that began after it: the
/// steps meanwhile wait (`SubmitFailed`, saying why), however recent the incremental cycles;
/// once such a listing shows the job the lost submit made, it is adopted by its tag. The mock
/// takes exactly one submit.
#[tokio::test]
async fn a_submit_without_an_answer_is_not_sent_again_before_a_listing_past_it() {
    use wiremock::matchers::{method, path_regex};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path_regex("^/slurm/v0.0.42/job/submit/?$"))
        .respond_with(ResponseTemplate::new(200).set_body_string("{\"job_id\": "))
        .expect(1)
        .mount(&server)
        .await;
    let mut world = World::new(&server.uri());
    world.client = minted(&server.uri());
    let spec = true_spec();
    let at = |s| DateTime::from_timestamp(s, 0).unwrap();
    let target = Target {
        name: "train",
        uid: "u",
        generation: 1,
        spec: &spec,
        status: None,
        created: Some(at(195)),
        refusal: None,
    };
    let error = step(target, world.env(at(200)), |_| None)
        .await
        .expect_err("no answer to read");
    assert!(!error.refuses_job(), "{error}");
    let tag = OwnerTag::new("u", 1);
    let doubt = world.submissions.doubt(&tag).expect("in doubt");

    // Incremental cycles since, and a full listing from before it: wait.
    world.index.jobs_synced_at = Some(doubt.since + chrono::TimeDelta::seconds(60));
    world.index.fully_listed_at = Some(doubt.since - chrono::TimeDelta::seconds(1));
    let waiting = step(target, world.env(at(203)), |_| None).await.unwrap();
    let ready = condition::find(&waiting.status.conditions, READY).unwrap();
    assert_eq!(ready.reason, "SubmitFailed");
    assert!(
        ready
            .message
            .contains("failed without saying whether Slurm made the job (Decode"),
        "{}",
        ready.message
    );
    assert_eq!(waiting.status.job_id, None);
    assert_eq!(waiting.retry, Some(WAIT_RETRY));

    // A full listing past it shows the job the lost submit made: adopted, not submitted again.
    world.index.fully_listed_at = Some(doubt.since + chrono::TimeDelta::seconds(11));
    let made = Job {
        job_id: 9,
        state: crate::slurm::types::JobState::from_strings(&["PENDING"]),
        user_name: Some("alice".into()),
        ..Job::bare().with_comment(world.key.comment(&tag, "alice"))
    };
    world.index.jobs = Arc::new(BTreeMap::from([(9, made)]).into());
    let adopted = step(target, world.env(at(230)), |_| None).await.unwrap();
    assert_eq!(adopted.status.job_id, Some(9));
    let ready = condition::find(&adopted.status.conditions, READY).unwrap();
    assert_eq!(ready.reason, "Adopted", "{}", ready.message);
    assert_eq!(world.submissions.doubt(&tag), None, "no doubt left");

    // A submit refused before any job could be made (credentials Slurm does not take): no
    // doubt, the next attempt need not wait, and the status says why it failed.
    let refusing = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path_regex("^/slurm/v0.0.42/job/submit/?$"))
        .respond_with(ResponseTemplate::new(401))
        .expect(1)
        .mount(&refusing)
        .await;
    world.client = minted(&refusing.uri());
    world.submissions = Submissions::default();
    world.index = state(Some(101), vec![]);
    let refused = step(target, world.env(at(200)), |_| None).await.unwrap();
    assert_eq!(world.submissions.doubt(&tag), None);
    // Said in the status (an Event expires), and tried again with the SlurmJob's backoff.
    let ready = condition::find(&refused.status.conditions, READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "SubmitFailed")
    );
    assert!(
        ready.message.contains("(Unauthorized)") && ready.message.contains("no job was made"),
        "{}",
        ready.message
    );
    let reconciling = condition::find(&refused.status.conditions, "Reconciling").unwrap();
    assert_eq!(reconciling.status, "True");
    assert_eq!(refused.status.phase, Phase::Pending);
    assert_eq!(refused.status.job_id, None);
    assert!(refused.backoff, "retried with the backoff");
    let reasons: Vec<_> = refused.notices.iter().map(|n| n.reason.as_ref()).collect();
    assert_eq!(reasons, ["SubmitFailed"]);
    // Remembered as a try that made no job: the reconcile the status write triggers does not
    // submit again before the backoff's first delay.
    assert!(
        world
            .submissions
            .no_job_retry_in(&tag, at(100), std::time::Instant::now())
            .is_some()
    );
}

/// A client of `url` acting as Slurm user `alice` (minted tokens).
fn minted(url: &str) -> SlurmClient {
    let config = crate::slurm::ClientConfig::new(url)
        .unwrap()
        .allow_plaintext(true)
        .with_api_version(Some(crate::slurm::ApiVersion::V0_0_42));
    let credentials =
        crate::slurm::Credentials::minted(vec![1; 32], "alice", Duration::from_secs(60)).unwrap();
    SlurmClient::new(config, Arc::new(credentials)).unwrap()
}

/// A world whose slurmrestd (`server`) answers job 7's record: alice's, pending, carrying
/// SlurmJob `u`'s tag of generation 1; the index holds it too. Returns the world, the status of a
/// SlurmJob that submitted it from `true_spec()`, and that spec edited (a 2 h time limit).
async fn pending_job_to_edit(
    server: &wiremock::MockServer,
    client: Option<SlurmClient>,
) -> (World, SlurmJobStatus, SlurmJobSpec) {
    job_to_edit(server, client, "job_pending.json", |_, _| {}).await
}

/// As [`pending_job_to_edit`], slurmctld answering the record of `fixture` (a recorded 24.11
/// answer), changed by `more` (given the tag's comment), while the index still says pending.
async fn job_to_edit(
    server: &wiremock::MockServer,
    client: Option<SlurmClient>,
    fixture: &str,
    more: impl FnOnce(&mut serde_json::Value, &str),
) -> (World, SlurmJobStatus, SlurmJobSpec) {
    use wiremock::matchers::{method, path_regex};
    use wiremock::{Mock, ResponseTemplate};

    let mut world = World::new(&server.uri());
    if let Some(client) = client {
        world.client = client;
    }
    let tag = OwnerTag::new("u", 1);
    let comment = world.key.comment(&tag, "alice");
    let fixture = format!(
        "{}/tests/fixtures/24.11/{fixture}",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut answer: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let record = &mut answer["body"]["jobs"][0];
    record["job_id"] = 7.into();
    record["user_name"] = "alice".into();
    record["comment"] = comment.clone().into();
    more(&mut answer["body"], &comment);
    Mock::given(method("GET"))
        .and(path_regex("^/slurm/v0.0.42/job/7/?$"))
        .respond_with(ResponseTemplate::new(200).set_body_json(&answer["body"]))
        .mount(server)
        .await;
    let pending = Job {
        job_id: 7,
        state: crate::slurm::types::JobState::from_strings(&["PENDING"]),
        user_name: Some("alice".into()),
        ..Job::bare().with_comment(comment)
    };
    world.index.jobs = Arc::new(BTreeMap::from([(7, pending)]).into());
    let submitted = true_spec();
    let edited = SlurmJobSpec {
        time_limit: Some(serde_json::from_value(serde_json::json!("2h")).unwrap()),
        ..submitted.clone()
    };
    let status = SlurmJobStatus {
        phase: Phase::Submitted,
        job_id: Some(7),
        observed_generation: Some(1),
        submitted_generation: Some(1),
        submitted_spec_hash: Some(crate::controller::slurmjob::edit::spec_hash(&submitted)),
        ..Default::default()
    };
    (world, status, edited)
}

/// An edit of a pending job whose namespace was mapped to another Slurm user since its submit
/// is not sent: the operator would act as a user the namespace is no longer granted (release
/// that user's hold, move its job). `SpecApplied=False/UserChanged` and a Warning say so; the
/// mock takes no update.
#[tokio::test]
async fn an_edit_is_not_sent_as_a_user_the_namespace_is_no_longer_granted() {
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    let server = MockServer::start().await;
    let (world, status, edited) = pending_job_to_edit(&server, None).await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    let target = following("train", 2, &edited, &status);
    let env = Env {
        job_user: Some("bob"),
        ..world.env(DateTime::from_timestamp(200, 0).unwrap())
    };
    let step = step(target, env, |_| None).await.unwrap();
    let applied = condition::find(&step.status.conditions, SPEC_APPLIED).unwrap();
    assert_eq!(
        (applied.status.as_str(), applied.reason.as_str()),
        ("False", "UserChanged"),
        "{}",
        applied.message
    );
    assert!(
        applied
            .message
            .contains("it runs as Slurm user \"alice\", and the namespace is now granted \"bob\""),
        "{}",
        applied.message
    );
    assert!(step.notices.iter().any(|n| n.reason == "UserChanged"));
    assert_eq!(step.status.job_id, Some(7));
}

/// An edit that reaches slurmctld after the job ended there, while the index (a cycle behind)
/// still says it runs: neither ignored as an edit of a running job nor sent as an update; the
/// generation stays unobserved, so the end's report re-runs the job with it. It comes back with
/// the SlurmJob's backoff, not every 3 s: a poller that is down (while the GET still answers)
/// had it read the job every 3 s for as long.
#[tokio::test]
async fn an_edit_that_finds_the_job_ended_waits_for_the_end_to_re_run_it() {
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    let server = MockServer::start().await;
    let (world, status, mut edited) =
        job_to_edit(&server, None, "job_completed.json", |_, _| {}).await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    for change in ["in place", "re-run"] {
        if change == "re-run" {
            edited.script = "#!/bin/sh\nfalse\n".into();
        }
        let target = following("train", 2, &edited, &status);
        let env = Env {
            job_user: Some("alice"),
            ..world.env(DateTime::from_timestamp(200, 0).unwrap())
        };
        let step = step(target, env, |_| None).await.unwrap();
        assert_eq!(step.status.observed_generation, Some(1), "{change}");
        assert!(
            condition::find(&step.status.conditions, SPEC_APPLIED).is_none(),
            "{change}: {:?}",
            step.status.conditions
        );
        assert!(step.notices.is_empty(), "{change}: {:?}", step.notices);
        assert_eq!((step.retry, step.backoff), (None, true), "{change}");
    }
}

/// A client of `url` with a ready token for Slurm user `alice`.
fn alice_token(url: &str) -> SlurmClient {
    SlurmClient::new(
        crate::slurm::ClientConfig::new(url)
            .unwrap()
            .allow_plaintext(true)
            .with_api_version(Some(crate::slurm::ApiVersion::V0_0_42)),
        Arc::new(crate::slurm::Credentials::token("t", Some("alice".into())).unwrap()),
    )
    .unwrap()
}

/// The step of generation 2 (`edited`) of SlurmJob `train`, as alice's, while slurmrestd
/// (`server`) fails every update of job 7 (at least one is expected).
async fn edit_with_failing_update(
    server: &wiremock::MockServer,
    world: &World,
    status: &SlurmJobStatus,
    edited: &SlurmJobSpec,
) -> Step {
    use wiremock::matchers::{method, path_regex};
    use wiremock::{Mock, ResponseTemplate};

    Mock::given(method("POST"))
        .and(path_regex("^/slurm/v0.0.42/job/7/?$"))
        .respond_with(ResponseTemplate::new(500))
        .expect(1..)
        .mount(server)
        .await;
    let target = following("train", 2, edited, status);
    let env = Env {
        job_user: Some("alice"),
        ..world.env(DateTime::from_timestamp(200, 0).unwrap())
    };
    step(target, env, |_| None).await.unwrap()
}

/// A pending array to edit (job 7, in `debug`) whose first record in slurmctld's answer is
/// alice's task 8 as `task_fixture` records it, in `debug` too.
async fn array_to_edit(
    server: &wiremock::MockServer,
    task_fixture: &str,
) -> (World, SlurmJobStatus, SlurmJobSpec) {
    let alice = alice_token(&server.uri());
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/24.11");
    let recorded: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{fixtures}/{task_fixture}")).unwrap(),
    )
    .unwrap();
    job_to_edit(server, Some(alice), "job_pending.json", |body, comment| {
        body["jobs"][0]["partition"] = "debug".into();
        let mut task = recorded["body"]["jobs"][0].clone();
        task["job_id"] = 8.into();
        task["user_name"] = "alice".into();
        task["comment"] = comment.into();
        task["partition"] = "debug".into();
        body["jobs"].as_array_mut().unwrap().insert(0, task);
    })
    .await
}

/// The edit's update went out (slurmrestd failed it: `SpecApplied=False/UpdateFailed`).
fn assert_update_sent(step: &Step) {
    let applied = condition::find(&step.status.conditions, SPEC_APPLIED).unwrap();
    assert_eq!(
        (applied.status.as_str(), applied.reason.as_str()),
        ("False", "UpdateFailed"),
        "the update was sent: {}",
        applied.message
    );
}

/// An edit of an array whose first record in slurmctld's answer is a task that ended (still
/// listed: `MinJobAge`) is applied to the tasks still waiting, not taken for the array's end.
#[tokio::test]
async fn an_edit_of_an_array_with_an_ended_task_reaches_the_waiting_ones() {
    let server = wiremock::MockServer::start().await;
    let (world, status, edited) = array_to_edit(&server, "job_completed.json").await;
    assert_update_sent(&edit_with_failing_update(&server, &world, &status, &edited).await);
}

/// An edit of an array whose first record in slurmctld's answer is a running task is judged
/// against the waiting tasks' record: a partition added to the list (`debug` → `debug,long`)
/// is sent, not taken as unchanged because the running task runs in one asked (review
/// finding).
#[tokio::test]
async fn an_edit_of_an_array_with_a_running_task_reaches_the_waiting_ones() {
    let server = wiremock::MockServer::start().await;
    let (world, status, mut edited) = array_to_edit(&server, "job_running.json").await;
    // Only the partition list changes.
    edited.time_limit = None;
    edited.partition = Some("debug,long".into());
    assert_update_sent(&edit_with_failing_update(&server, &world, &status, &edited).await);
}

/// An edit whose update slurmrestd fails (not refuses) is tried again after the SlurmJob's
/// growing backoff, not every 10 s with it reset: each try is a read and a write of slurmrestd
/// for as long as it fails.
#[tokio::test]
async fn a_failing_edit_backs_off() {
    let server = wiremock::MockServer::start().await;
    let alice = alice_token(&server.uri());
    let (world, status, edited) = pending_job_to_edit(&server, Some(alice)).await;
    let step = edit_with_failing_update(&server, &world, &status, &edited).await;
    assert_update_sent(&step);
    assert!(step.backoff, "{step:?}");
    assert_eq!(step.retry, None);
}

/// An edit whose namespace's access changed while it was prepared is not sent (as a submit is
/// not): `SpecApplied=False/AccessChanged`, the generation left unobserved, and a step soon
/// decides it again under the new access. The mock takes no update.
#[tokio::test]
async fn an_edit_whose_access_changed_meanwhile_is_not_sent() {
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    let server = MockServer::start().await;
    let alice = alice_token(&server.uri());
    let (world, status, edited) = pending_job_to_edit(&server, Some(alice)).await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .expect(0)
        .mount(&server)
        .await;
    let target = following("train", 2, &edited, &status);
    let revoked = || false;
    let env = Env {
        job_user: Some("alice"),
        still_granted: &revoked,
        ..world.env(DateTime::from_timestamp(200, 0).unwrap())
    };
    let step = step(target, env, |_| None).await.unwrap();
    let applied = condition::find(&step.status.conditions, SPEC_APPLIED).unwrap();
    assert_eq!(
        (applied.status.as_str(), applied.reason.as_str()),
        ("False", "AccessChanged"),
        "{}",
        applied.message
    );
    assert_eq!(step.status.observed_generation, Some(1));
    assert_eq!(step.retry, Some(WAIT_RETRY));
    server.verify().await;
}

/// A job that left slurmctld unseen, whose accounting record carries no comment (slurmdbd
/// without `AccountingStoreFlags=job_comment`): its record is taken for the run only when it
/// is the job's Slurm user's as the namespace's access grants it (`Env::job_user`), never the
/// cluster's own user's. `slurmdb_job_uncommented.json` is slurmrestd 24.11's answer for a job
/// user `slurm` submitted with `sbatch` (no comment), recorded from the local Slurm.
#[tokio::test]
async fn a_comment_less_accounting_record_is_the_jobs_only_for_its_granted_user() {
    let recorded: serde_json::Value =
        serde_json::from_str(include_str!("slurmdb_job_uncommented.json")).unwrap();
    let server = wiremock::MockServer::start().await;
    let (world, status, submitted) = gone_with_accounting(&server, &recorded).await;
    let spec = true_spec();
    let target = following("plainname", 1, &spec, &status);
    let now = DateTime::from_timestamp(submitted + 70, 0).unwrap();
    let phase = |user| {
        let env = Env {
            job_user: user,
            ..world.env(now)
        };
        async move { step(target, env, |_| None).await.unwrap().status.phase }
    };
    assert_eq!(phase(Some("slurm")).await, Phase::Completed);
    assert_eq!(
        phase(Some("alice")).await,
        Phase::Lost,
        "another user's record"
    );
    assert_eq!(phase(None).await, Phase::Lost, "no user granted");
}

/// A job (id 1) gone from slurmctld (a complete listing after it was tracked, without it), of
/// which slurmrestd (`server`) answers accounting's `recorded` records. Returns the world, the
/// status of the SlurmJob that followed it as running, and the records' submit time.
async fn gone_with_accounting(
    server: &wiremock::MockServer,
    recorded: &serde_json::Value,
) -> (World, SlurmJobStatus, i64) {
    use wiremock::matchers::{method, path_regex};
    use wiremock::{Mock, ResponseTemplate};

    let submitted = recorded["jobs"][0]["time"]["submission"].as_i64().unwrap();
    Mock::given(method("GET"))
        .and(path_regex("^/slurmdb/v0.0.42/job/1/?$"))
        .respond_with(ResponseTemplate::new(200).set_body_json(recorded))
        .mount(server)
        .await;
    let mut world = World::new(&server.uri());
    world.index.jobs_synced_at = DateTime::from_timestamp(submitted + 60, 0);
    let status = SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(1),
        observed_generation: Some(1),
        submitted_generation: Some(1),
        submit_time: status::time(DateTime::from_timestamp(submitted, 0)),
        tracked_since: status::time(DateTime::from_timestamp(submitted, 0)),
        ..Default::default()
    };
    (world, status, submitted)
}

/// A job that left slurmctld while accounting lists it running with no end (slurmdbd has not
/// received the end, or never will: a runaway record): it stays as accounting says, and the
/// status says what it waits for and what to do if that never comes.
#[tokio::test]
async fn a_job_gone_from_slurmctld_that_accounting_lists_running_says_so() {
    let mut recorded: serde_json::Value =
        serde_json::from_str(include_str!("slurmdb_job_uncommented.json")).unwrap();
    recorded["jobs"][0]["state"]["current"] = serde_json::json!(["RUNNING"]);
    recorded["jobs"][0]["time"]["end"] = 0.into();
    let server = wiremock::MockServer::start().await;
    let (world, status, submitted) = gone_with_accounting(&server, &recorded).await;
    let spec = true_spec();
    let target = following("plainname", 1, &spec, &status);
    let env = Env {
        job_user: Some("slurm"),
        ..world.env(DateTime::from_timestamp(submitted + 70, 0).unwrap())
    };
    let step = step(target, env, |_| None).await.unwrap();
    assert_eq!(step.status.phase, Phase::Running);
    let reason = step.status.state_reason.unwrap_or_default();
    assert!(
        reason.contains("still lists it Running with no end") && reason.contains("runawayjobs"),
        "{reason}"
    );
}

/// A job that left slurmctld while accounting fails to answer (not "no such job", not "no
/// accounting"): the phase stays as it was, neither `Lost` nor guessed, the reason says what it
/// waits for, and the step comes
/// back after the SlurmJob's growing backoff, not every few seconds with a WARN each time.
#[tokio::test]
async fn a_failing_accounting_lookup_backs_off_and_says_so() {
    use wiremock::matchers::{method, path_regex};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path_regex("^/slurmdb/v0.0.42/job/1/?$"))
        .respond_with(ResponseTemplate::new(500))
        .expect(1..)
        .mount(&server)
        .await;
    let mut world = World::new(&server.uri());
    let at = |s| DateTime::from_timestamp(s, 0).unwrap();
    // A complete listing after the job was tracked, without it: gone from slurmctld.
    world.index.jobs_synced_at = Some(at(1_060));
    let status = SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(1),
        observed_generation: Some(1),
        submitted_generation: Some(1),
        submit_time: status::time(Some(at(1_000))),
        tracked_since: status::time(Some(at(1_000))),
        ..Default::default()
    };
    let spec = true_spec();
    let target = following("accounting-fails", 1, &spec, &status);
    let env = Env {
        job_user: Some("slurm"),
        ..world.env(at(1_070))
    };
    let step = step(target, env, |_| None).await.unwrap();
    // As it was, but for the conditions every step derives from the phase, and the reason
    // that says what it waits for.
    let reason = step.status.state_reason.clone().unwrap_or_default();
    assert!(
        reason.contains("asking the cluster's accounting (slurmdbd) how it ended failed"),
        "{reason}"
    );
    let unchanged = SlurmJobStatus {
        conditions: Vec::new(),
        state_reason: None,
        ..step.status.clone()
    };
    assert_eq!(unchanged, status);
    let ready = condition::find(&step.status.conditions, "Ready").unwrap();
    assert_eq!(ready.reason, "Running", "{ready:?}");
    assert!(step.backoff, "{step:?}");
    assert_eq!(step.retry, None);
}

/// A followed job above the ids the incremental cycles probe (purged while the operator was
/// away, above the highest id slurmctld still holds) is reported by no poller event: the step
/// comes back by itself until a listing of every job speaks for it (which then calls it lost:
/// `plan::tests::a_job_is_not_lost_while_the_index_cannot_speak_for_its_id`).
#[tokio::test]
async fn a_job_above_the_probed_ids_is_looked_at_again_until_a_full_listing() {
    let mut world = World::new(UNREACHABLE);
    let at = |s| DateTime::from_timestamp(s, 0).unwrap();
    world.index.jobs_synced_at = Some(at(2000));
    world.index.jobs_listed_up_to = Some(11);
    world.index.fully_listed_at = Some(at(900));
    let status = SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(12),
        observed_generation: Some(1),
        submitted_generation: Some(1),
        tracked_since: status::time(Some(at(1000))),
        ..Default::default()
    };
    let spec = true_spec();
    let target = following("purged", 1, &spec, &status);
    let waiting = step(target, world.env(at(2001)), |_| None).await.unwrap();
    assert_eq!(waiting.status.phase, Phase::Running);
    assert_eq!(waiting.retry, Some(WAIT_RETRY));
    // Not read yet (a submit of a burst): the poller reports it as ours once it reads it, so
    // the step looks again only now and then (it may read as another user's job).
    world.index.unresolved = Arc::new(BTreeSet::from([12]));
    let unread = step(target, world.env(at(2001)), |_| None).await.unwrap();
    assert_eq!(unread.status.phase, Phase::Running);
    assert_eq!(unread.retry, Some(UNRESOLVED_RETRY));
}

/// Accounting lists a job of the SlurmJob's name and Slurm user whose owner the index has not
/// resolved (skipped at its first listing): the poller is asked for its record, and the step
/// waits with the SlurmJob's growing backoff, not the wait's few seconds. A record that cannot
/// be read stays unresolved; each look searches accounting by name again.
#[tokio::test]
async fn an_unresolved_accounting_candidate_is_waited_for_with_backoff() {
    use wiremock::matchers::{method, path_regex, query_param};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    let mut recorded: serde_json::Value =
        serde_json::from_str(include_str!("slurmdb_job_uncommented.json")).unwrap();
    let record = &mut recorded["jobs"][0];
    record["job_id"] = 20.into();
    record["name"] = "waiting".into();
    record["user"] = "alice".into();
    record["state"]["current"] = serde_json::json!(["PENDING"]);
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path_regex("^/slurmdb/v0.0.42/jobs/?$"))
        .and(query_param("job_name", "waiting"))
        .respond_with(ResponseTemplate::new(200).set_body_json(&recorded))
        .expect(1)
        .mount(&server)
        .await;
    let mut world = World::new(&server.uri());
    world.index.unresolved = Arc::new(BTreeSet::from([20]));
    let alice = minted(&server.uri());
    let at = |s| DateTime::from_timestamp(s, 0).unwrap();
    let env = Env {
        submitter: &alice,
        ..world.env(at(1_000))
    };
    let spec = true_spec();
    let target = Target {
        name: "waiting",
        uid: "w",
        generation: 1,
        spec: &spec,
        status: None,
        // Older than a fresh SlurmJob: an earlier submit may have left slurmctld's listing.
        created: Some(at(500)),
        refusal: None,
    };
    let step = step(target, env, |_| None).await.unwrap();
    let ready = condition::find(&step.status.conditions, READY).unwrap();
    assert_eq!(ready.reason, "WaitingForSlurmIndex", "{ready:?}");
    assert!(
        ready.message.contains("Slurm jobs 20 "),
        "{}",
        ready.message
    );
    assert_eq!(step.status.job_id, None);
    assert!(step.backoff, "{step:?}");
    assert_eq!(world.index.wants.take(), BTreeSet::from([20]));
}

/// A slurmrestd that gives `answer` to each submit, expecting `times` of them.
async fn answering_submits(answer: wiremock::ResponseTemplate, times: u64) -> wiremock::MockServer {
    use wiremock::matchers::{method, path_regex};
    use wiremock::{Mock, MockServer};

    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path_regex("^/slurm/v0.0.42/job/submit/?$"))
        .respond_with(answer)
        .expect(times)
        .mount(&server)
        .await;
    server
}

/// slurmrestd's answer to a submit slurmctld refused over a limit (error 2050): the recorded
/// 24.11 submit-error body with 2050's number and text.
fn limit_refusal() -> serde_json::Value {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/24.11/submit_invalid_partition.json"
    );
    let recorded: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let mut body = recorded["body"].clone();
    body["errors"][0]["error_number"] = 2050.into();
    body["errors"][0]["error"] =
        "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"
            .into();
    body
}

/// A submit Slurm refuses by its accounting or QoS policy (here a user's `MaxSubmitJobs`,
/// error 2050 as slurmrestd answers it) made no job and may succeed once the user's jobs end:
/// the SlurmJob waits (`SubmitLimited`, Slurm's message) with its backoff, and its Warning goes
/// out once, when the wait begins, not at every try.
#[tokio::test]
async fn a_submit_over_a_slurm_limit_waits_with_backoff_and_warns_once() {
    use wiremock::ResponseTemplate;

    let server =
        answering_submits(ResponseTemplate::new(500).set_body_json(limit_refusal()), 2).await;
    let world = World::new(&server.uri());
    let alice = minted(&server.uri());
    let at = |s| DateTime::from_timestamp(s, 0).unwrap();
    let spec = true_spec();
    let target = |status| Target {
        name: "limited",
        uid: "l",
        generation: 1,
        spec: &spec,
        status,
        created: Some(at(199)),
        refusal: None,
    };
    let env = |now| Env {
        submitter: &alice,
        ..world.env(at(now))
    };
    let first = step(target(None), env(200), |_| None).await.unwrap();
    let ready = condition::find(&first.status.conditions, READY).unwrap();
    assert_eq!(ready.reason, SUBMIT_LIMITED, "{ready:?}");
    assert!(
        ready.message.contains("job submit limit") && ready.message.contains("no job was made"),
        "{}",
        ready.message
    );
    assert_eq!(first.status.job_id, None);
    assert!(first.backoff && !first.invalid, "{first:?}");
    let reasons: Vec<&str> = first.notices.iter().map(|n| &*n.reason).collect();
    assert_eq!(reasons, [SUBMIT_LIMITED]);
    assert!(
        world.submissions.jobs_of("l", 1).is_empty(),
        "nothing was made"
    );

    let again = step(target(Some(&first.status)), env(203), |_| None)
        .await
        .unwrap();
    assert_eq!(again.status, first.status);
    assert!(again.backoff);
    assert!(again.notices.is_empty(), "{:?}", again.notices);
}

/// A recorded 24.11 submit answer (`tests/fixtures/24.11/<case>.json`): its HTTP status and body.
fn recorded_submit(case: &str) -> (u16, serde_json::Value) {
    let fixture = format!(
        "{}/tests/fixtures/24.11/{case}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let recorded: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let status = u16::try_from(recorded["status"].as_u64().unwrap()).unwrap();
    (status, recorded["body"].clone())
}

/// slurmrestd's answers to a submit its parser complained about, through the step: an unknown
/// flag answered with the job made (and here a job_submit plugin's message) is that job,
/// `Submitted` with both in its message, recorded at once and never submitted again; a value
/// the parser refuses, no job, is `SubmitRejected` for the generation, not retried.
#[tokio::test]
async fn a_submit_the_parser_complained_about_is_its_job_or_a_refusal() {
    use wiremock::ResponseTemplate;

    let (status, mut made) = recorded_submit("submit_unknown_flag");
    assert_eq!(status, 500);
    let job_id = made["job_id"].as_i64().unwrap();
    made["job_submit_user_msg"] = "routed to partition debug".into();
    let server = answering_submits(ResponseTemplate::new(500).set_body_json(&made), 1).await;
    let world = World::new(&server.uri());
    let alice = minted(&server.uri());
    let at = |s| DateTime::from_timestamp(s, 0).unwrap();
    let spec = true_spec();
    let target = |name, uid| Target {
        name,
        uid,
        generation: 1,
        spec: &spec,
        status: None,
        created: Some(at(199)),
        refusal: None,
    };
    let env = Env {
        submitter: &alice,
        ..world.env(at(200))
    };
    let submitted = step(target("flagged", "f"), env, |_| None).await.unwrap();
    assert_eq!(submitted.status.job_id, Some(job_id));
    let ready = condition::find(&submitted.status.conditions, READY).unwrap();
    assert_eq!(ready.reason, "Submitted", "{ready:?}");
    assert!(
        ready.message.contains("BOGUS")
            && ready
                .message
                .contains("job_submit plugin says: routed to partition debug"),
        "{}",
        ready.message
    );
    assert_eq!(
        world.submissions.jobs_of("f", 1),
        [u32::try_from(job_id).unwrap()]
    );

    let (status, refused) = recorded_submit("submit_bad_value");
    let server = answering_submits(ResponseTemplate::new(status).set_body_json(&refused), 1).await;
    let world = World::new(&server.uri());
    let alice = minted(&server.uri());
    let env = Env {
        submitter: &alice,
        ..world.env(at(200))
    };
    let rejected = step(target("bad-value", "b"), env, |_| None).await.unwrap();
    assert_eq!(rejected.status.job_id, None);
    assert_eq!(rejected.status.rejected_generation, Some(1));
    let ready = condition::find(&rejected.status.conditions, READY).unwrap();
    assert_eq!(ready.reason, "SubmitRejected", "{ready:?}");
    assert!(
        ready.message.contains("Invalid cpu_frequency"),
        "{}",
        ready.message
    );
    assert!(world.submissions.jobs_of("b", 1).is_empty());
}

/// A submit refused over a limit keeps what the step found before it: a Slurm job under the
/// generation's tag that is not adopted (bob's, signed for bob) is named as the wait begins,
/// beside the refusal (review finding: the refusal's Warning replaced it, and the retries, the
/// same wait again, name nothing, so it was never told while the limit held).
#[tokio::test]
async fn a_submit_over_a_limit_still_names_a_tag_not_adopted() {
    use wiremock::ResponseTemplate;

    let server =
        answering_submits(ResponseTemplate::new(500).set_body_json(limit_refusal()), 1).await;
    let mut world = World::new(&server.uri());
    let alice = minted(&server.uri());
    world.index = state(Some(101), vec![bobs_job_tagged(&world, "l")]);
    let spec = true_spec();
    let target = Target {
        name: "limited",
        uid: "l",
        generation: 1,
        spec: &spec,
        status: None,
        created: Some(DateTime::from_timestamp(199, 0).unwrap()),
        refusal: None,
    };
    let env = Env {
        submitter: &alice,
        ..world.env(DateTime::from_timestamp(200, 0).unwrap())
    };
    let first = step(target, env, |_| None).await.unwrap();
    let ready = condition::find(&first.status.conditions, READY).unwrap();
    assert_eq!(ready.reason, SUBMIT_LIMITED, "{ready:?}");
    let reasons: Vec<&str> = first.notices.iter().map(|n| &*n.reason).collect();
    assert_eq!(reasons, ["TagNotAdopted", SUBMIT_LIMITED]);
}

/// A SlurmJob past its fresh start that Slurm refuses over a limit searches accounting by name
/// before its first try only: that try was checked as every try is, and made no job, so a
/// retry by the same process (acting since the same start or gain of the Lease) submits at
/// once. After a new gain another leader may have submitted meanwhile: accounting again.
#[tokio::test]
async fn a_retry_over_a_slurm_limit_does_not_search_accounting_again() {
    use wiremock::matchers::{method, path_regex};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    let refusal = limit_refusal();
    let mut nothing: serde_json::Value =
        serde_json::from_str(include_str!("slurmdb_job_uncommented.json")).unwrap();
    nothing["jobs"] = serde_json::json!([]);
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path_regex("^/slurm/v0.0.42/job/submit/?$"))
        .respond_with(ResponseTemplate::new(500).set_body_json(&refusal))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path_regex("^/slurmdb/v0.0.42/jobs/?$"))
        .respond_with(ResponseTemplate::new(200).set_body_json(&nothing))
        .mount(&server)
        .await;
    // (accounting searches, submits) the server has seen so far.
    let seen = || async {
        let requests = server.received_requests().await.unwrap();
        let count = |m: &str, p: &str| {
            requests
                .iter()
                .filter(|r| r.method.as_str() == m && r.url.path().starts_with(p))
                .count()
        };
        (
            count("GET", "/slurmdb/v0.0.42/jobs"),
            count("POST", "/slurm/v0.0.42/job/submit"),
        )
    };
    let world = World::new(&server.uri());
    let alice = minted(&server.uri());
    let at = |s| DateTime::from_timestamp(s, 0).unwrap();
    let spec = true_spec();
    let target = |status| Target {
        name: "limited",
        uid: "l",
        generation: 1,
        spec: &spec,
        status,
        // Not fresh: an earlier submit may have left slurmctld's listing.
        created: Some(at(500)),
        refusal: None,
    };
    let env = |now, acting_since| Env {
        submitter: &alice,
        acting_since: at(acting_since),
        ..world.env(at(now))
    };

    let first = step(target(None), env(1_000, 100), |_| None).await.unwrap();
    let ready = condition::find(&first.status.conditions, READY).unwrap();
    assert_eq!(ready.reason, SUBMIT_LIMITED, "{ready:?}");
    assert_eq!(seen().await, (1, 1), "accounting, then the submit");

    let again = step(target(Some(&first.status)), env(1_010, 100), |_| None)
        .await
        .unwrap();
    assert_eq!(again.status, first.status);
    assert_eq!(seen().await, (1, 2), "the retry only submits");

    // The Lease lost and gained again since: a leader in between may have submitted.
    let gained = step(target(Some(&first.status)), env(1_020, 1_015), |_| None)
        .await
        .unwrap();
    assert_eq!(gained.status, first.status);
    assert_eq!(seen().await, (2, 3), "accounting again after a new gain");
    assert_eq!(world.submissions.get(&OwnerTag::new("l", 1)), None);
    assert!(
        world.submissions.jobs_of("l", 1).is_empty(),
        "nothing was made"
    );
}

/// A SlurmJob that is not fresh asks accounting for its job name's records before a submit,
/// from a day before it was created on (`search_since`): no job of its ended earlier, and a
/// name's whole history (anyone may reuse a name) could fill the answer's bound.
#[tokio::test]
async fn an_accounting_search_begins_a_day_before_the_slurmjob_was_created() {
    use wiremock::matchers::{method, path_regex, query_param};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    let server = MockServer::start().await;
    let created = DateTime::from_timestamp(1_000_000, 0).unwrap();
    // As an age on slurmrestd's clock (`now-<seconds>`), give or take the test's own seconds;
    // the window on the submit time, so that held jobs are in the answer.
    let day_before = created - chrono::TimeDelta::days(1);
    let aged = move |request: &wiremock::Request| {
        let age = (Utc::now() - day_before).num_seconds();
        request.url.query_pairs().any(|(key, value)| {
            key == "start_time"
                && value
                    .strip_prefix("now-")
                    .and_then(|n| n.parse::<i64>().ok())
                    .is_some_and(|n| (age - 60..=age).contains(&n))
        })
    };
    Mock::given(method("GET"))
        .and(path_regex("^/slurmdb/v0.0.42/jobs/?$"))
        .and(query_param("job_name", "old"))
        .and(query_param("usage_time_as_submit_time", "true"))
        .and(query_param("scheduler_unset", "true"))
        .and(aged)
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({"jobs": []})))
        .expect(1)
        .mount(&server)
        .await;
    let world = World::new(&server.uri());
    let spec = true_spec();
    // Not fresh: accounting is asked first.
    let target = created_at(&spec, created);
    // Not fresh (created 200 s ago): accounting is asked first; the submit after it finds no
    // slurmrestd to take it, which is not what this test is about.
    let _ = step(
        target,
        world.env(created + chrono::TimeDelta::seconds(200)),
        |_| None,
    )
    .await;
    server.verify().await;
    assert_eq!(
        search_since(None),
        None,
        "no creation time: the whole history"
    );
}

/// A step that must search accounting by job name takes its namespace's search slot for the
/// search: with the slot taken it sends nothing and says so (`SearchBusy`); with it free it
/// searches (here slurmrestd cannot be reached: `WaitingForAccounting`) and gives it back.
#[tokio::test]
async fn a_search_by_name_waits_for_its_namespaces_slot() {
    use crate::state::slots::RequestSlots;
    let world = World::new(UNREACHABLE);
    let spec = true_spec();
    let created = DateTime::from_timestamp(1_000, 0).unwrap();
    // Not fresh: accounting is asked first.
    let target = created_at(&spec, created);
    let slots = RequestSlots::turns(1);
    let connection = RequestSlots::turns(3);
    let env = |namespace| Env {
        searches: Some((
            crate::state::slots::SearchSlots {
                namespace,
                connection: &connection,
            },
            "old",
        )),
        ..world.env(created + chrono::TimeDelta::seconds(200))
    };
    let taken = slots.try_take().unwrap();
    let busy = step_whole(target, env(&slots), |_| None).await;
    assert!(matches!(busy, Err(StepError::SearchBusy(_))), "{busy:?}");
    // Nor is the whole spec read for a search that must wait.
    let loads = std::sync::atomic::AtomicUsize::new(0);
    let load = |_| {
        loads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::future::ready(Ok::<_, Infallible>(Some(spec.clone())))
    };
    let busy = step_loading(target, env(&slots), |_| None, load).await;
    assert!(matches!(busy, Err(StepError::SearchBusy(_))), "{busy:?}");
    assert_eq!(loads.load(std::sync::atomic::Ordering::SeqCst), 0);
    // A whole spec that is invalid searches nothing: it waits for no slot.
    let invalid: SlurmJobSpec = serde_json::from_value(serde_json::json!({
        "clusterName": "local",
        "script": "#!/bin/sh\ntrue\n",
        "dependsOn": [{"name": "old"}],
    }))
    .unwrap();
    let invalid_target = Target {
        spec: &invalid,
        ..target
    };
    let step = step_whole(invalid_target, env(&slots), |_| None)
        .await
        .unwrap();
    let ready = condition::find(&step.status.conditions, READY).unwrap();
    assert_eq!(ready.reason, "InvalidSpec", "{ready:?}");
    // Nor a cached one (no script) invalid for what the cache keeps (its dependencies).
    let cached = SlurmJobSpec {
        script: String::new(),
        ..invalid.clone()
    };
    let cached_target = Target {
        spec: &cached,
        ..target
    };
    let load = |_| std::future::ready(Ok::<_, Infallible>(Some(invalid.clone())));
    let step = step_loading(cached_target, env(&slots), |_| None, load)
        .await
        .unwrap();
    let ready = condition::find(&step.status.conditions, READY).unwrap();
    assert_eq!(ready.reason, "InvalidSpec", "{ready:?}");

    drop(taken);
    let waited = step_whole(target, env(&slots), |_| None).await.unwrap();
    let reconciling = condition::find(&waited.status.conditions, status::RECONCILING).unwrap();
    assert_eq!(
        reconciling.reason, "WaitingForAccounting",
        "{reconciling:?}"
    );
    assert!(waited.backoff);
    assert!(slots.try_take().is_some(), "the slot is given back");
}

/// A job the previous version submitted with an unsigned tag is followed through
/// `status.jobId` only when it runs as the SlurmJob's user; the poller follows such a job only
/// for ids a SlurmJob names, so the step names it. A signed job of ours needs no naming, and
/// one carrying the SlurmJob's unsigned tag as someone else is neither followed nor named.
#[tokio::test]
async fn a_job_followed_by_its_unsigned_tag_is_named_to_the_poller() {
    let spec = true_spec();
    let tag = OwnerTag::new("legacy-uid", 1);
    let ended = |comment: String, user: &str| Job {
        job_id: 30,
        name: "legacy".into(),
        state: crate::slurm::types::JobState::from_strings(&["COMPLETED"]),
        user_name: Some(user.into()),
        ..Job::bare().with_comment(comment)
    };
    let status = SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(30),
        observed_generation: Some(1),
        submitted_generation: Some(1),
        tracked_since: crate::controller::slurmjob::status::time(DateTime::from_timestamp(150, 0)),
        ..Default::default()
    };
    let key = crate::slurm::tag::TagKey::ephemeral();
    for (record, named) in [
        (ended(tag.to_string(), "alice"), true),
        (ended(key.comment(&tag, "alice"), "alice"), false),
        (ended(tag.to_string(), "mallory"), false),
    ] {
        let mut world = World::new(UNREACHABLE);
        world.key = key.clone();
        world.index = state(Some(101), vec![record.clone()]);
        let env = Env {
            job_user: Some("alice"),
            ..world.env(DateTime::from_timestamp(200, 0).unwrap())
        };
        let target = Target {
            name: "legacy",
            uid: "legacy-uid",
            generation: 1,
            spec: &spec,
            status: Some(&status),
            created: None,
            refusal: None,
        };
        let step = step(target, env, |_| None).await.unwrap();
        let expected = if named {
            BTreeMap::from([(30, "alice".to_owned())])
        } else {
            BTreeMap::new()
        };
        assert_eq!(
            world.index.wants.take_unsigned(),
            expected,
            "{:?}",
            record.comment
        );
        assert!(world.index.wants.take().is_empty(), "{:?}", record.comment);
        // Mallory's job carries the SlurmJob's unsigned tag: not followed, its end not
        // mirrored (the index's listing began before the run was tracked: not Lost yet).
        let followed = record.user_name.as_deref() == Some("alice");
        assert_eq!(
            step.status.phase,
            if followed {
                Phase::Completed
            } else {
                Phase::Running
            },
            "{:?}",
            record.comment
        );
    }
}

/// A hold shown at once is what the poller's next read of the held job shows, `stateReason`
/// included: one status write for the transition, not a second one once the record is read.
#[test]
fn a_hold_shown_at_once_is_what_the_next_read_shows() {
    use crate::slurm::types::JobState;
    let waiting = crate::slurm::types::Job {
        job_id: 5,
        state: JobState::from_strings(&["PENDING"]),
        state_reason: Some("Priority".into()),
        priority: Some(1_000),
        submit_time: chrono::DateTime::from_timestamp(1_700_000_000, 0),
        ..crate::slurm::types::Job::bare()
    };
    let before = status::observe(&SlurmJobStatus::default(), std::slice::from_ref(&waiting));
    let mut shown = before.clone();
    hold_now(&mut shown, true);
    assert_ne!(shown, before);
    let held = crate::slurm::types::Job {
        state_reason: Some("JobHeldUser".into()),
        priority: Some(0),
        held: true,
        ..waiting
    };
    assert_eq!(status::observe(&shown, &[held]), shown);
}

/// A release slurmctld took shows at once whatever held the job: the spec's or its user's hold
/// (`JobHeldUser`), or a hold without a code (priority 0: a requeue held), which went on
/// reading as held, beside `SpecApplied` saying the release was sent.
#[test]
fn a_release_shows_at_once_whatever_held_the_job() {
    use crate::crd::slurmjob::PendingStatus;
    for (reason, priority) in [
        ("JobHeldUser", Some(0)),
        ("launch failed requeued held", Some(0)),
        ("JobHeldAdmin", Some(0)),
        // The priority not known (a status written before the record was read).
        ("JobHeldUser", None),
        ("JobHeldAdmin", None),
    ] {
        let mut status = SlurmJobStatus {
            pending: Some(PendingStatus {
                reason: Some(reason.into()),
                priority,
                ..Default::default()
            }),
            ..Default::default()
        };
        hold_now(&mut status, false);
        let pending = status.pending.unwrap();
        assert_eq!((pending.reason, pending.priority), (None, None), "{reason}");
    }
    // A job waiting unheld keeps its reason.
    let mut status = SlurmJobStatus {
        pending: Some(PendingStatus {
            reason: Some("Priority".into()),
            priority: Some(1_000),
            ..Default::default()
        }),
        ..Default::default()
    };
    hold_now(&mut status, false);
    assert_eq!(status.pending.unwrap().reason.as_deref(), Some("Priority"));
}

/// A job of this generation adopted from the controller's cache (its submit's status write was
/// lost, or the operator restarted before it): the whole spec is read for it, so that its
/// status records what later edits are checked against. Without it, every later edit was
/// ignored (`suspend: false` never released a held job).
#[tokio::test]
async fn an_adopted_job_records_the_spec_it_was_submitted_with() {
    let world = World::new(UNREACHABLE);
    let whole = true_spec();
    let cached = SlurmJobSpec {
        script: String::new(),
        ..whole.clone()
    };
    world.submissions.record(&OwnerTag::new("u", 1), 9);
    let target = Target {
        created: None,
        ..created_at(&cached, DateTime::from_timestamp(1_000, 0).unwrap())
    };
    let loads = std::sync::atomic::AtomicUsize::new(0);
    let load = |generation| {
        assert_eq!(generation, 1);
        loads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::future::ready(Ok::<_, Infallible>(Some(whole.clone())))
    };
    let now = DateTime::from_timestamp(1_010, 0).unwrap();
    let adopted = step_loading(target, world.env(now), |_| None, load)
        .await
        .unwrap();
    assert_eq!(adopted.status.job_id, Some(9));
    assert_eq!(loads.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(
        adopted.status.submitted_spec_hash,
        Some(crate::controller::slurmjob::edit::spec_hash(&whole))
    );
}

/// Access revoked or remapped while a step prepared its submit (the reads before it can take a
/// while): nothing is submitted, and the step waits to be decided again under the new access.
/// slurmrestd is never reached, so a submit would have failed the step.
#[tokio::test]
async fn a_submit_whose_access_changed_meanwhile_is_not_sent() {
    let mut world = World::new(UNREACHABLE);
    world.client = minted(UNREACHABLE);
    let spec = true_spec();
    let now = DateTime::from_timestamp(1_000, 0).unwrap();
    let target = created_at(&spec, now - chrono::TimeDelta::seconds(1));
    let asked = std::sync::atomic::AtomicUsize::new(0);
    let revoked = || {
        asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        false
    };
    let env = Env {
        still_granted: &revoked,
        ..world.env(now)
    };
    let waited = step(target, env, |_| None).await.unwrap();
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(waited.status.job_id, None);
    let reconciling = condition::find(&waited.status.conditions, status::RECONCILING).unwrap();
    assert_eq!(reconciling.reason, "AccessChanged", "{reconciling:?}");
    assert!(world.submissions.get(&OwnerTag::new("u", 1)).is_none());

    // Still granted: the submit is sent (and fails here, slurmrestd being unreachable).
    let sent = step(target, world.env(now), |_| None).await.unwrap();
    let ready = condition::find(&sent.status.conditions, READY).unwrap();
    assert_eq!(ready.reason, "SubmitFailed", "{ready:?}");
    assert!(ready.message.contains("Unreachable"), "{ready:?}");
}
