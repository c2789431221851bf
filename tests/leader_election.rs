//! Leader election with two replicas (issue 7): the Lease gates every write, and two operator
//! processes against the same API (the in-memory API server of `testing/fake-apiserver`) and
//! the real local Slurm never submit a job twice — not when the leader is killed, not when it is
//! frozen (SIGSTOP) past its Lease's expiry and wakes up believing it still leads.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use fake_apiserver::FakeApiServer;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::Api;
use slurm_operator::crd::SlurmJob;
use slurm_operator::leader::{self, LeaseConfig};
use tokio_util::sync::CancellationToken;

use common::e2e::{Operator, eventually, free_port, metric};
use common::scenario::{self, Harness};

const NAMESPACE: &str = "slurm-ops";
const LEASE: &str = "slurm-operator-leader";
const POLLERS: &str = "slurm_operator_pollers";

/// A Lease `name` in [`NAMESPACE`] for `identity` that lasts 3 s, renewed 1 s before it ends.
fn short_lease(name: &str, identity: &str) -> LeaseConfig {
    LeaseConfig {
        name: name.into(),
        namespace: NAMESPACE.into(),
        identity: identity.into(),
        duration: Duration::from_secs(3),
        grace: Duration::from_secs(1),
    }
}

/// Two candidates for a free Lease, started at the same moment, many times: never do both lead
/// (server-side apply's field-manager conflict on `holderIdentity` decides), and one does. With
/// one field manager shared by both replicas (the bug this guards against) both led within a
/// dozen trials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simultaneous_candidates_never_lead_together() {
    let api = FakeApiServer::start().await;
    for trial in 0..20 {
        let config = |identity: &str| short_lease(&format!("trial-{trial}"), identity);
        let shutdown = CancellationToken::new();
        let (config_a, config_b) = (config("a"), config("b"));
        let (a, b) = tokio::join!(
            leader::elect(api.client(), &config_a, shutdown.clone()),
            leader::elect(api.client(), &config_b, shutdown.clone()),
        );
        let ((a, a_task), (b, b_task)) = (a.unwrap(), b.unwrap());
        let mut led = BTreeSet::new();
        let until = Instant::now() + Duration::from_millis(1_500);
        while Instant::now() < until {
            let (a_leads, b_leads) = (a.is_leader(), b.is_leader());
            assert!(!(a_leads && b_leads), "trial {trial}: both replicas lead");
            led.extend(
                [("a", a_leads), ("b", b_leads)]
                    .iter()
                    .filter(|l| l.1)
                    .map(|l| l.0),
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert_eq!(
            led.len(),
            1,
            "trial {trial}: exactly one replica led: {led:?}"
        );
        // The Lease, read afresh, agrees with what each replica believes.
        assert_ne!(a.confirm().await, b.confirm().await, "trial {trial}");
        shutdown.cancel();
        a_task.await.unwrap();
        b_task.await.unwrap();
    }
}

/// A leader whose Lease is taken while its Lease manager still believes it holds it (its
/// renewals failing or hanging, as on a dead connection: the manager only retries them) stops
/// writing once its own read of the Lease sees another holder, long before the manager's next
/// renewal would tell it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stops_writing_when_its_own_read_sees_the_lease_taken() {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kube::api::{Patch, PatchParams};

    let api = FakeApiServer::start().await;
    let config = LeaseConfig {
        name: "taken".into(),
        namespace: NAMESPACE.into(),
        identity: "a".into(),
        // The manager renews 2 s before the expiry: 28 s after taking the Lease.
        duration: Duration::from_secs(30),
        grace: Duration::from_secs(2),
    };
    let shutdown = CancellationToken::new();
    let (a, a_task) = leader::elect(api.client(), &config, shutdown.clone())
        .await
        .unwrap();
    eventually("a to lead", Duration::from_secs(10), || async {
        a.is_leader().then_some(())
    })
    .await;

    // Another holder, freshly renewed, written past a's manager.
    let leases: Api<Lease> = Api::namespaced(api.client(), NAMESPACE);
    let taken = Lease {
        spec: Some(LeaseSpec {
            holder_identity: Some("b".into()),
            renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            lease_duration_seconds: Some(30),
            ..Default::default()
        }),
        ..Default::default()
    };
    leases
        .patch(
            "taken",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": taken.spec})),
        )
        .await
        .unwrap();
    // Its manager would notice at its renewal, ~28 s after taking the Lease; its own reads
    // (every second) see it at once.
    eventually(
        "a to stop writing with the Lease taken",
        Duration::from_secs(10),
        || async { (!a.is_leader()).then_some(()) },
    )
    .await;
    assert!(!a.confirm().await);
    shutdown.cancel();
    a_task.await.unwrap();
}

/// A Lease deleted by hand (as one ends an election that looks stuck) is made again, and a
/// replica leads again: the Lease manager makes it only when it starts, so without that both
/// replicas stayed alive and never led. The leader stops writing once it sees the Lease gone,
/// and at no moment do both lead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_lease_is_made_again_and_led() {
    let api = FakeApiServer::start().await;
    let config = |identity: &str| short_lease("deleted", identity);
    let shutdown = CancellationToken::new();
    let (config_a, config_b) = (config("a"), config("b"));
    let (a, a_task) = leader::elect(api.client(), &config_a, shutdown.clone())
        .await
        .unwrap();
    let (b, b_task) = leader::elect(api.client(), &config_b, shutdown.clone())
        .await
        .unwrap();
    let leader = || match (a.is_leader(), b.is_leader()) {
        (true, true) => panic!("both replicas lead"),
        (true, false) => Some("a"),
        (false, true) => Some("b"),
        (false, false) => None,
    };
    let first = eventually("a leader", Duration::from_secs(10), || async { leader() }).await;

    let leases: Api<Lease> = Api::namespaced(api.client(), NAMESPACE);
    leases.delete("deleted", &Default::default()).await.unwrap();
    // The leader stops writing (its reads, every half second, see the Lease gone) ...
    let until = Instant::now() + Duration::from_secs(10);
    while leader().is_some() {
        assert!(
            Instant::now() < until,
            "{first} still leads 10 s after the Lease was deleted"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // ... and one replica leads again, on a Lease made again that names it.
    let again = eventually("a leader again", Duration::from_secs(30), || async {
        leader()
    })
    .await;
    let lease = leases.get("deleted").await.unwrap();
    let holder = lease.spec.and_then(|spec| spec.holder_identity);
    assert_eq!(holder.as_deref(), Some(again), "the Lease names the leader");
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        leader();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shutdown.cancel();
    a_task.await.unwrap();
    b_task.await.unwrap();
}

/// An operator that cannot join the election (no Lease namespace: neither
/// `--leader-election-namespace` nor `POD_NAMESPACE`) exits with the error, serving nothing
/// further: its HTTP server, which otherwise serves until the Lease is released, stops with
/// it (it used to hang there, alive to its liveness probe).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_that_cannot_join_the_election_exits() {
    slurm_operator::tls::install_crypto_provider();
    let api = FakeApiServer::start_with_crds(slurm_operator::crd::all()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = api.write_kubeconfig(dir.path());
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut operator = Operator::spawn(
        &[
            "--namespace",
            NAMESPACE,
            "--credentials-namespace",
            NAMESPACE,
            "--create-tag-key",
            "true",
            "--metrics-addr",
            &metrics,
            "--leader-election",
        ],
        &[
            ("KUBECONFIG", kubeconfig.to_str().unwrap()),
            ("POD_NAMESPACE", ""),
        ],
        Some(&dir.path().join("operator.log")),
    )
    .sigterm_on_drop(Duration::from_secs(5));
    let status = operator.exited_within(Duration::from_secs(60)).await;
    let log = std::fs::read_to_string(dir.path().join("operator.log")).unwrap();
    let status = status.unwrap_or_else(|| panic!("still running: it hung on its way out; {log}"));
    assert!(!status.success(), "{status:?}: {log}");
    assert!(log.contains("needs a Lease namespace"), "{log}");
}

fn replica_args(identity: &str, metrics: &str) -> Vec<String> {
    [
        "--namespace",
        NAMESPACE,
        "--credentials-namespace",
        scenario::CREDENTIALS_NAMESPACE,
        "--metrics-addr",
        metrics,
        "--leader-election",
        "--leader-election-lease",
        LEASE,
        "--leader-election-namespace",
        NAMESPACE,
        "--leader-election-identity",
        identity,
        "--lease-duration",
        "3s",
        "--lease-grace",
        "1s",
    ]
    .map(str::to_owned)
    .to_vec()
}

struct Replicas {
    kubeconfig: String,
    log: std::path::PathBuf,
    ports: [String; 2],
    processes: [Option<Operator>; 2],
}

const IDENTITIES: [&str; 2] = ["replica-a", "replica-b"];

impl Replicas {
    fn start(&mut self, i: usize) {
        let metrics = format!("127.0.0.1:{}", self.ports[i]);
        let args = replica_args(IDENTITIES[i], &metrics);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env = [("KUBECONFIG", self.kubeconfig.as_str())];
        self.processes[i] = Some(
            Operator::spawn(&args, &env, Some(&self.log)).sigterm_on_drop(Duration::from_secs(10)),
        );
    }

    /// The metrics port of the replica `identity`.
    fn port(&self, identity: &str) -> String {
        let i = IDENTITIES.iter().position(|id| *id == identity).unwrap();
        self.ports[i].clone()
    }

    fn process(&mut self, identity: &str) -> &mut Operator {
        let i = IDENTITIES.iter().position(|id| *id == identity).unwrap();
        self.processes[i].as_mut().unwrap()
    }
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    let lease = leases.get_opt(LEASE).await.ok()??;
    lease.spec?.holder_identity
}

/// The replica holding the Lease once it is held by `other_than`'s rival (or anyone).
async fn wait_holder(leases: &Api<Lease>, other_than: Option<&str>) -> String {
    eventually("a Lease holder", Duration::from_secs(30), || async {
        holder(leases)
            .await
            .filter(|h| Some(h.as_str()) != other_than)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_operator_processes_never_submit_a_job_twice() {
    let slurm = require_slurm!();
    let harness = Harness::start(&slurm, NAMESPACE, "le").await;
    let run = &harness.run;
    let jobs: Api<SlurmJob> = Api::namespaced(harness.client.clone(), NAMESPACE);
    let leases: Api<Lease> = Api::namespaced(harness.client.clone(), NAMESPACE);
    let mut replicas = Replicas {
        kubeconfig: harness.kubeconfig.clone(),
        log: harness.log.clone(),
        ports: [free_port().to_string(), free_port().to_string()],
        processes: [None, None],
    };
    let mut names = Vec::new();
    let mut add = async |phase: &str, count: usize| {
        for i in 0..count {
            let name = format!("{run}-{phase}-{i}");
            scenario::apply_slurmjob(&jobs, &name, &slurm.partition, "echo ran").await;
            names.push(name);
        }
    };

    // SlurmJobs older than the first gain of the Lease, but that no operator has taken on (no
    // finalizer: every replica adds it before a submit): no previous leader can have submitted
    // them, so they do not wait out a takeover (the request timeout, 30 s, and
    // SUBMIT_DOUBT_GRACE, 10 s); they did before.
    add("early", 2).await;
    let started = chrono::Utc::now();
    replicas.start(0);
    replicas.start(1);

    // Both running: one leads and submits.
    add("both", 10).await;
    let first = wait_holder(&leases, None).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The leader killed while SlurmJobs arrive: the other takes over once the Lease expires.
    replicas.process(&first).sigkill();
    add("killed", 10).await;
    let second = wait_holder(&leases, Some(&first)).await;
    eprintln!("{first} killed, {second} took over");
    let i = IDENTITIES.iter().position(|id| *id == first).unwrap();
    replicas.start(i);
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The leader frozen past its Lease's expiry while SlurmJobs arrive: the other takes over,
    // and the frozen one wakes up still believing it leads, with work in its queues.
    replicas.process(&second).signal("STOP");
    add("frozen", 10).await;
    let third = wait_holder(&leases, Some(&second)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    replicas.process(&second).signal("CONT");
    eprintln!("{second} frozen, {third} took over; {second} woke up");
    add("woken", 10).await;
    // Woken and no longer leading, it lets go of its Slurm connections as a standby holds none;
    // the leader polls.
    let woken = replicas.port(&second);
    eventually(
        "the replica that lost the Lease to drop its pollers",
        Duration::from_secs(30),
        || async {
            (metric(&format!("127.0.0.1:{woken}"), POLLERS).await == Some(0.0)).then_some(())
        },
    )
    .await;
    let leading = replicas.port(&third);
    eventually("the leader's poller", Duration::from_secs(30), || async {
        (metric(&format!("127.0.0.1:{leading}"), POLLERS).await >= Some(1.0)).then_some(())
    })
    .await;

    let finished = scenario::all_ended(&jobs, &names, Duration::from_secs(300)).await;
    scenario::assert_one_slurm_job_each(&slurm, &finished).await;
    for early in finished.iter().filter(|j| j.name_any().contains("-early-")) {
        let submitted = early
            .status
            .as_ref()
            .and_then(|s| s.submit_time.as_ref())
            .map(|t| t.0.as_second())
            .expect("submitTime");
        // slurmctld's clock, whole seconds; this machine's.
        assert!(
            submitted < started.timestamp() + 40 - 1,
            "{} submitted {}s after the replicas started: it waited out a takeover, though no \
             replica had taken it on",
            early.name_any(),
            submitted - started.timestamp()
        );
    }
    let transitions = leases
        .get(LEASE)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0);
    assert!(transitions >= 2, "two takeovers: {transitions} transitions");
    eprintln!(
        "{} SlurmJobs, each exactly one Slurm job; {transitions} Lease transitions",
        names.len()
    );
}
