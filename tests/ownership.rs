//! Ownership is proven, not assumed (issue 14, item 1): the operator binary (against the
//! in-memory API server) and the real local Slurm with its ordinary users `alice` and `bob`.
//!
//! - The operator creates its tag key Secret at start, and signs every job's tag with it.
//! - `bob` submits jobs carrying the victim SlurmJob's tags: the legacy text of its next
//!   generation, that text with a signature copied from its real job, a copy of its real tag,
//!   and the exact tag the operator writes for the next generation (made here with the key
//!   read from the Secret — what a leaked or guessed tag would be) on bob's own job. An edit of
//!   the victim adopts none of them: it submits and runs its own job. Deleting the victim
//!   cancels none of them.
//! - A SlurmJob whose `status.jobId` names bob's job (what a job id reused after slurmctld lost
//!   its state looks like) is deleted: bob's job keeps running, a `NotOwned` Warning names it,
//!   and the finalizer lets go.
//!
//! Every job of bob's this test makes is cancelled when it ends (`Foreign`), by id only.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use slurm_operator::crd::slurmjob::Phase;
use slurm_operator::crd::{SlurmCluster, SlurmJob};
use slurm_operator::slurm::tag::{OwnerTag, Ownership, TagKey};
use slurm_operator::slurm::types::JobBaseState;
use slurm_operator::slurm::{Credentials, SlurmClient};

use common::e2e::{MANAGER, Operator, eventually, free_port};
use common::scenario::CREDENTIALS_NAMESPACE as CREDENTIALS;

const TIMEOUT: Duration = Duration::from_secs(180);
const TEAM: &str = "team-a";

async fn apply<K>(api: &Api<K>, name: &str, object: Value)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    api.patch(name, &PatchParams::apply(MANAGER), &Patch::Apply(object))
        .await
        .unwrap_or_else(|e| panic!("apply {name}: {e}"));
}

fn slurmjob(name: &str, partition: &str, body: &str) -> Value {
    json!({"apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob", "metadata": {"name": name},
    "spec": {
        "clusterName": "main",
        "partition": partition,
        "script": format!("#!/bin/sh\n{body}\n"),
        "environment": {"PATH": "/usr/bin:/bin"},
        "workingDirectory": "/home/alice",
    }})
}

/// Bob's jobs made by this test: cancelled by id when the test ends, whatever happened.
struct Foreign {
    root: std::path::PathBuf,
    ids: Vec<u32>,
}

impl Drop for Foreign {
    fn drop(&mut self) {
        if self.ids.is_empty() {
            return;
        }
        let ids: Vec<String> = self.ids.iter().map(u32::to_string).collect();
        let status = std::process::Command::new("chroot")
            .arg(&self.root)
            .arg("scancel")
            .args(&ids)
            .status();
        eprintln!("cancelled bob's jobs {ids:?}: {status:?}");
    }
}

/// Bob, through slurmrestd with his own token (not the operator's): a job named `name`, held so
/// that it stays pending without taking a node from anyone (the shared Slurm has three CPUs).
async fn bob_submits(
    bob: &SlurmClient,
    slurm: &common::LocalSlurm,
    foreign: &mut Foreign,
    name: &str,
    comment: Option<String>,
) -> u32 {
    let mut request = slurm.job(name, "sleep 300");
    request.account = Some("team-b".into());
    request.working_directory = "/home/bob".into();
    request.standard_output = Some("/dev/null".into());
    request.comment = comment;
    request.hold = true;
    let id = bob.submit_job(&request).await.unwrap().job_id;
    foreign.ids.push(id);
    id
}

/// Slurm's state of `id`, once slurmctld shows it.
async fn state_of(admin: &SlurmClient, id: u32) -> JobBaseState {
    eventually(&format!("job {id} in slurmctld"), TIMEOUT, || async {
        admin
            .job(id)
            .await
            .ok()
            .and_then(|r| r.first().map(|j| j.state.base))
    })
    .await
}

/// Not cancelled, not ended: pending (held) or running.
async fn assert_untouched(admin: &SlurmClient, ids: &[u32], when: &str) {
    for id in ids {
        let state = state_of(admin, *id).await;
        assert!(
            matches!(state, JobBaseState::Pending | JobBaseState::Running),
            "{when}: bob's job {id} was touched: {state:?}"
        );
        let record = admin.job(*id).await.unwrap();
        assert_eq!(record[0].user_name.as_deref(), Some("bob"));
    }
}

async fn ended(jobs: &Api<SlurmJob>, name: &str, generation: i64) -> SlurmJob {
    eventually(
        &format!("{name} generation {generation} ended"),
        TIMEOUT,
        || async {
            let job = jobs.get_opt(name).await.ok()??;
            job.status
                .as_ref()
                .is_some_and(|s| {
                    s.phase.is_terminal() && s.submitted_generation == Some(generation)
                })
                .then_some(job)
        },
    )
    .await
}

async fn gone(jobs: &Api<SlurmJob>, name: &str) {
    eventually(&format!("{name} deleted"), TIMEOUT, || async {
        jobs.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// The note of the Event with `reason` about SlurmJob `name` that `matches`, once there is one.
async fn event(
    events: &Api<Event>,
    name: &str,
    reason: &str,
    matches: impl Fn(&str) -> bool,
) -> String {
    eventually(&format!("{reason} Event on {name}"), TIMEOUT, || async {
        let list = events.list(&Default::default()).await.ok()?;
        list.items.into_iter().find_map(|e| {
            let about = e.regarding.as_ref()?.name.as_deref() == Some(name);
            let note = e.note.clone().unwrap_or_default();
            (about && e.reason.as_deref() == Some(reason) && matches(&note)).then_some(note)
        })
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_tags_are_never_adopted_and_foreign_job_ids_never_cancelled() {
    let slurm = require_slurm!();
    slurm_operator::tls::install_crypto_provider();
    let api = fake_apiserver::FakeApiServer::start_with_crds(slurm_operator::crd::all()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = api.write_kubeconfig(dir.path());
    let client = api.client();
    let admin = slurm.client();
    let bob = SlurmClient::new(
        slurm.config(),
        Arc::new(Credentials::minted(slurm.key(), "bob", Duration::from_secs(900)).unwrap()),
    )
    .unwrap();
    let mut foreign = Foreign {
        root: slurm.root.clone(),
        ids: Vec::new(),
    };

    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in [CREDENTIALS, TEAM] {
        apply(
            &namespaces,
            name,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
        )
        .await;
    }
    common::scenario::seed_credentials(&client, &slurm).await;
    let clusters: Api<SlurmCluster> = Api::all(client.clone());
    apply(
        &clusters,
        "main",
        json!({
            "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmCluster", "metadata": {"name": "main"},
            "spec": {
                "endpoint": slurm.url,
                "allowInsecureHttp": true,
                "auth": {"jwt": {"keySecretRef": {"name": "slurm-jwt"}, "user": slurm.user}},
                "pollInterval": "1s",
                "access": [{"namespaces": [TEAM], "slurmUser": "alice", "accounts": ["team-a"]}],
            },
        }),
    )
    .await;
    let log = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("ownership-operator.log");
    eprintln!("operator log: {}", log.display());
    let metrics = format!("127.0.0.1:{}", free_port());
    let operator = Operator::spawn(
        &[
            "--namespace",
            TEAM,
            "--credentials-namespace",
            CREDENTIALS,
            "--metrics-addr",
            &metrics,
        ],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
        Some(&log),
    )
    .sigterm_on_drop(Duration::from_secs(10));

    // The operator made its key Secret, marked as credentials; the test reads it as only the
    // admin could.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), CREDENTIALS);
    let secret = eventually("the tag key Secret", TIMEOUT, || async {
        secrets.get_opt("slurm-operator-tag-key").await.ok()?
    })
    .await;
    assert_eq!(
        secret
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("slurm.rs/credentials"))
            .map(String::as_str),
        Some("true")
    );
    let key = TagKey::new(&secret.data.as_ref().unwrap()["tag.key"].0).unwrap();

    let jobs: Api<SlurmJob> = Api::namespaced(client.clone(), TEAM);
    let events: Api<Event> = Api::namespaced(client.clone(), TEAM);
    let run = common::unique("owner");

    // The victim's first run: a real, signed tag to copy.
    let victim = format!("{run}-victim");
    apply(
        &jobs,
        &victim,
        slurmjob(&victim, &slurm.partition, "echo one"),
    )
    .await;
    let first = ended(&jobs, &victim, 1).await;
    let uid = first.metadata.uid.clone().unwrap();
    let first_status = first.status.unwrap();
    assert_eq!(first_status.phase, Phase::Completed, "{first_status:?}");
    let first_id = u32::try_from(first_status.job_id.unwrap()).unwrap();
    let records = admin.job(first_id).await.unwrap();
    let real = records[0].comment.clone().unwrap();
    assert_eq!(records[0].user_name.as_deref(), Some("alice"));
    assert_eq!(records[0].ownership(&key), Ownership::Proven, "{real}");
    assert_eq!(real, key.comment(&OwnerTag::new(&uid, 1), "alice"));
    let signature = real.rsplit_once(",sig=").unwrap().1.to_owned();

    // Bob's forgeries, under the Slurm job name the victim uses.
    let next = OwnerTag::new(&uid, 2);
    let legacy_next =
        bob_submits(&bob, &slurm, &mut foreign, &victim, Some(next.to_string())).await;
    let copied_signature = bob_submits(
        &bob,
        &slurm,
        &mut foreign,
        &victim,
        Some(format!("{next},sig={signature}")),
    )
    .await;
    let replayed = bob_submits(&bob, &slurm, &mut foreign, &victim, Some(real.clone())).await;
    let exact_next = bob_submits(
        &bob,
        &slurm,
        &mut foreign,
        &victim,
        Some(key.comment(&next, "alice")),
    )
    .await;
    let forged = [legacy_next, copied_signature, replayed, exact_next];
    assert_untouched(&admin, &forged, "submitted").await;

    // A SlurmJob submitted after them is mirrored only from a poll that saw them too.
    let probe = format!("{run}-probe");
    apply(&jobs, &probe, slurmjob(&probe, &slurm.partition, "true")).await;
    ended(&jobs, &probe, 1).await;

    // The edit: generation 2 submits and runs its own job.
    apply(
        &jobs,
        &victim,
        slurmjob(&victim, &slurm.partition, "echo two"),
    )
    .await;
    let second = ended(&jobs, &victim, 2).await;
    let status = second.status.unwrap();
    assert_eq!(status.phase, Phase::Completed, "{status:?}");
    let second_id = u32::try_from(status.job_id.unwrap()).unwrap();
    assert!(
        !forged.contains(&second_id) && second_id != first_id,
        "adopted job {second_id}, one of bob's {forged:?}"
    );
    // The re-run's own Event (its action names the run, so it is not folded into the first
    // run's `Submitted` as a series).
    event(&events, &victim, "Submitted", |n| {
        n == format!("Slurm job {second_id} submitted")
    })
    .await;
    let records = admin.job(second_id).await.unwrap();
    assert_eq!(records[0].user_name.as_deref(), Some("alice"));
    assert_eq!(records[0].ownership(&key), Ownership::Proven);
    assert_eq!(records[0].owner.as_ref(), Some(&next));
    // Its script ran: the job went through RUNNING to COMPLETED on a node.
    assert!(records[0].start_time.is_some() && records[0].nodes.is_some());
    let note = event(&events, &victim, "TagNotAdopted", |n| {
        n.contains(&format!("{exact_next} (Forged)"))
    })
    .await;
    for (id, why) in [
        (legacy_next, "Unsigned"),
        (copied_signature, "Forged"),
        (exact_next, "Forged"),
    ] {
        assert!(note.contains(&format!("{id} ({why})")), "{note}");
    }
    assert_untouched(&admin, &forged, "after the edit").await;

    // Deleting the victim cancels none of bob's jobs carrying its tags.
    jobs.delete(&victim, &DeleteParams::default())
        .await
        .unwrap();
    gone(&jobs, &victim).await;
    assert_untouched(&admin, &forged, "after deleting the victim").await;

    // A status pointing at bob's job (a job id reused after a state loss), which carries the
    // SlurmJob's legacy (unsigned) tag, as anyone can write on their own job: deleting the
    // SlurmJob leaves bob's job running and says so (it was cancelled, as bob, when an unsigned
    // tag was followed whoever ran the job).
    let reused = format!("{run}-reused");
    apply(&jobs, &reused, slurmjob(&reused, &slurm.partition, "true")).await;
    let reused_uid = ended(&jobs, &reused, 1).await.uid().unwrap();
    let legacy = OwnerTag::new(&reused_uid, 1).to_string();
    let bobs = bob_submits(
        &bob,
        &slurm,
        &mut foreign,
        &format!("{run}-bob"),
        Some(legacy),
    )
    .await;
    // The status written and the SlurmJob deleted while the operator is stopped, so that it
    // meets both at once: running between the two, it would judge the status first (bob's job
    // is not provably this SlurmJob's: Lost, nothing to cancel at the deletion).
    operator.signal("STOP");
    let written = async {
        jobs.patch_status(
            &reused,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"jobId": bobs, "phase": "Running"}})),
        )
        .await?;
        jobs.delete(&reused, &DeleteParams::default())
            .await
            .map(drop)
    }
    .await;
    operator.signal("CONT");
    written.unwrap();
    gone(&jobs, &reused).await;
    let note = event(&events, &reused, "NotOwned", |n| {
        n.contains(&format!("Slurm job {bobs} "))
    })
    .await;
    assert!(note.contains("not cancelled"), "{note}");
    assert!(note.contains("unsigned tag"), "{note}");
    assert_untouched(&admin, &[bobs], "after deleting the SlurmJob naming it").await;
    assert!(
        events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .all(|e| !(e.reason.as_deref() == Some("Cancelled")
                && e.note
                    .as_deref()
                    .unwrap_or_default()
                    .contains(&format!("Slurm job {bobs} ")))),
        "a Cancelled Event names bob's job"
    );
}

/// The tag key Secret (no Slurm needed): two replicas starting at once make one key and both
/// use it; a later start reads it; a Secret that is missing (and not to be created), unmarked,
/// or too short stops the start with an error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tag_key_secret_is_made_once_and_shared() {
    use k8s_openapi::ByteString;
    use kube::api::PostParams;
    use slurm_operator::run::{Error, tag_key};

    slurm_operator::tls::install_crypto_provider();
    let api = fake_apiserver::FakeApiServer::start_with_crds(slurm_operator::crd::all()).await;
    let client = api.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    apply(
        &namespaces,
        "admin",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "admin"}}),
    )
    .await;
    let (a, b) = tokio::join!(
        tag_key(&client, "admin", "tag-key", true, &[None], Duration::ZERO),
        tag_key(&client, "admin", "tag-key", true, &[None], Duration::ZERO)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let tag = OwnerTag::new("u", 1);
    assert_eq!(a.comment(&tag, "alice"), b.comment(&tag, "alice"));
    let later = tag_key(&client, "admin", "tag-key", false, &[None], Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(later.comment(&tag, "alice"), a.comment(&tag, "alice"));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "admin");
    let secret = secrets.get("tag-key").await.unwrap();
    assert_eq!(secret.data.as_ref().unwrap()["tag.key"].0.len(), 32);
    assert_eq!(
        secret.metadata.labels.as_ref().unwrap()["slurm.rs/credentials"],
        "true"
    );

    let error = tag_key(&client, "admin", "missing", false, &[None], Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::TagKeyUnusable { .. }), "{error}");
    assert!(secrets.get_opt("missing").await.unwrap().is_none());
    for (name, labelled, bytes) in [("unmarked", false, 32), ("short", true, 16)] {
        let mut secret = Secret {
            data: Some([("tag.key".to_owned(), ByteString(vec![7; bytes]))].into()),
            ..Default::default()
        };
        secret.metadata.name = Some(name.into());
        if labelled {
            secret.metadata.labels =
                Some([("slurm.rs/credentials".to_owned(), "true".to_owned())].into());
        }
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        let error = tag_key(&client, "admin", name, true, &[None], Duration::ZERO)
            .await
            .unwrap_err();
        assert!(
            matches!(error, Error::TagKeyUnusable { .. }),
            "{name}: {error}"
        );
        eprintln!("{name}: {error}");
    }

    // The key lost (its Secret deleted, its namespace made again) while a job it signed runs:
    // no new key is made in its place (it would verify none of their tags); the error names
    // the SlurmJob and how to go on. Once that job has ended, a new key is made.
    secrets
        .delete("tag-key", &DeleteParams::default())
        .await
        .unwrap();
    apply(
        &namespaces,
        "team-a",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}),
    )
    .await;
    let jobs: Api<SlurmJob> = Api::namespaced(client.clone(), "team-a");
    apply(
        &jobs,
        "running",
        json!({"apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
               "metadata": {"name": "running", "namespace": "team-a"},
               "spec": {"clusterName": "main", "script": "#!/bin/sh\nsleep 600\n"}}),
    )
    .await;
    let status = |phase: &str| json!({"status": {"phase": phase, "jobId": 41}});
    jobs.patch_status(
        "running",
        &PatchParams::default(),
        &Patch::Merge(&status("Running")),
    )
    .await
    .unwrap();
    let error = tag_key(&client, "admin", "tag-key", true, &[None], Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::TagKeyUnusable { .. }), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("team-a/running") && message.contains("Restore the Secret"),
        "{message}"
    );
    assert!(secrets.get_opt("tag-key").await.unwrap().is_none());
    // Watching other namespaces only, the operator does not see it (nor would it follow it).
    tag_key(
        &client,
        "admin",
        "elsewhere",
        true,
        &[Some("admin")],
        Duration::ZERO,
    )
    .await
    .unwrap();
    jobs.patch_status(
        "running",
        &PatchParams::default(),
        &Patch::Merge(&status("Completed")),
    )
    .await
    .unwrap();
    let fresh = tag_key(&client, "admin", "tag-key", true, &[None], Duration::ZERO)
        .await
        .unwrap();
    assert_ne!(
        fresh.comment(&tag, "alice"),
        a.comment(&tag, "alice"),
        "a new random key"
    );
}
