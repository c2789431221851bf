//! Memory bounded whatever tenants create (issue 14, item 4): the operator *binary*'s peak
//! resident memory (`VmHWM` in `/proc/<pid>/status`), measured, against a stated bound.
//!
//! * Many SlurmJobs with large scripts: the SlurmJob cache keeps no scripts (nor environment,
//!   extraOptions, tenant labels and annotations), lists come in small pages, and each submit
//!   reads its one object's whole spec right before it. The jobs still submit with their own
//!   script, checked in slurmctld.
//! * A slurmrestd answering `{"jobs":[{},{},…]}` (under the byte limit, each `{}` a whole job
//!   record once decoded) is refused while the body streams in, before serde decodes it.
//!
//! Kubernetes is the in-memory API server (`testing/fake-apiserver`), Slurm the real local one
//! for the first test; the second needs no Slurm (a hostile endpoint, as in
//! `tests/hostile_responses.rs`). Peak memory, not time, is asserted: the bounds hold under any
//! CPU load.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use slurm_operator::crd::{SlurmCluster, SlurmJob};
use wiremock::matchers::path_regex;
use wiremock::{Mock, MockServer, ResponseTemplate};

use common::e2e::{MANAGER, Operator, eventually};
use common::hostile::recorded;
use common::scenario::{CLUSTER, CREDENTIALS_NAMESPACE, Harness};

const MIB: u64 = 1024 * 1024;

/// The process's peak resident memory so far, in bytes (`VmHWM`).
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("VmHWM in /proc/<pid>/status");
    kib * 1024
}

/// SlurmJobs in the large-scripts test.
const JOBS: usize = 300;
/// Bytes of each one's script.
const SCRIPT_BYTES: usize = 512 * 1024;
/// The operator binary's peak RSS with [`JOBS`] SlurmJobs of [`SCRIPT_BYTES`] each, from its
/// start until all are submitted. Measured on the 2-core test machine (debug build, shared with
/// other test runs): 353 MiB before the cache dropped scripts (one list page held all 300
/// objects, then the cache kept them whole: over the chart's 256 MiB limit at every start),
/// 84 MiB after (pages of 25, and up to 16 submits at once each holding one whole spec and its
/// request). The bound leaves room for what else a busy operator holds.
const MAX_PEAK_WITH_LARGE_SCRIPTS: u64 = 128 * MIB;

/// The script of SlurmJob `name`: its own name, then comment lines up to [`SCRIPT_BYTES`].
fn large_script(name: &str) -> String {
    let mut script = format!("#!/bin/sh\n# {name}\ntrue\n");
    let line = format!("# {}\n", "x".repeat(98));
    while script.len() + line.len() <= SCRIPT_BYTES {
        script.push_str(&line);
    }
    script
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_slurmjobs_with_large_scripts_stay_within_the_memory_bound() {
    let slurm = require_slurm!();
    const NAMESPACE: &str = "memory";
    let harness = Harness::start(&slurm, NAMESPACE, "memory").await;
    let jobs: Api<SlurmJob> = Api::namespaced(harness.client.clone(), NAMESPACE);
    // Held an hour (begin time): nothing runs on the shared Slurm; cancelled at the end.
    let begin = chrono::Utc::now().timestamp() + 3600;
    let names: Vec<String> = (0..JOBS).map(|i| format!("{}-{i}", harness.run)).collect();
    // All there before the operator starts, as at every restart.
    for name in &names {
        let job: SlurmJob = serde_json::from_value(json!({
            "apiVersion": "slurm.rs/v1alpha1",
            "kind": "SlurmJob",
            "metadata": {"name": name, "labels": {"team": "memory"}},
            "spec": {
                "clusterName": CLUSTER,
                "partition": slurm.partition,
                "script": large_script(name),
                "environment": {"PATH": "/usr/bin:/bin"},
                "extraOptions": {"begin_time": {"set": true, "number": begin}},
            },
        }))
        .unwrap();
        jobs.create(&PostParams::default(), &job).await.unwrap();
    }

    let env = [("KUBECONFIG", harness.kubeconfig.as_str())];
    let operator =
        std::sync::Mutex::new(Operator::spawn(&harness.args(), &env, Some(&harness.log)));
    let (operator_ref, client_ref, run) = (&operator, &slurm.client(), harness.run.as_str());
    let client = slurm.client();
    // Counted in slurmctld (by the run's job names), not by listing 150 MiB of SlurmJobs.
    let submitted = eventually(
        "every SlurmJob submitted",
        Duration::from_secs(600),
        || async move {
            operator_ref.lock().unwrap().assert_running();
            let all = client_ref.jobs(None).await.ok()?;
            let slurm_operator::slurm::types::Changes::Changed { items, .. } = all else {
                return None;
            };
            let ours: Vec<(String, u32)> = items
                .into_iter()
                .filter(|j| j.name.starts_with(&format!("{run}-")))
                .map(|j| (j.name, j.job_id))
                .collect();
            (ours.len() >= JOBS).then_some(ours)
        },
    )
    .await;
    let operator = operator.into_inner().unwrap();
    let peak = peak_rss(operator.pid());
    eprintln!(
        "operator peak RSS with {JOBS} SlurmJobs of {} KiB scripts: {} MiB",
        SCRIPT_BYTES / 1024,
        peak / MIB
    );

    // One job's script in slurmctld is exactly its SlurmJob's.
    let (name, job_id) = submitted
        .iter()
        .find(|(name, _)| name.ends_with("-7"))
        .cloned()
        .unwrap();
    let output = Command::new("chroot")
        .arg(&slurm.root)
        .args(["env", "-i", "PATH=/usr/bin:/bin", "scontrol", "write"])
        .args(["batch_script", &job_id.to_string(), "-"])
        .output()
        .unwrap();
    let script = String::from_utf8_lossy(&output.stdout);
    let matches = script == large_script(&name);

    // Every SlurmJob's status names its job.
    let with_ids = jobs
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|j| j.status.as_ref().is_some_and(|s| s.job_id.is_some()))
        .count();
    drop(operator);
    for (_, job_id) in &submitted {
        let _ = client.cancel_job(*job_id).await;
    }

    assert!(
        matches,
        "Slurm job {job_id} runs the script of {name}: got {} bytes starting {:?} ({})",
        script.len(),
        script.chars().take(60).collect::<String>(),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(submitted.len(), JOBS, "one Slurm job per SlurmJob");
    assert_eq!(with_ids, JOBS, "every status names its job");
    assert!(
        peak < MAX_PEAK_WITH_LARGE_SCRIPTS,
        "peak RSS {} MiB, bound {} MiB",
        peak / MIB,
        MAX_PEAK_WITH_LARGE_SCRIPTS / MIB
    );
}

/// Bytes of the hostile answer: under the 32 MiB byte limit, so only the element bound stops it.
const BOMB_BYTES: usize = 30 * 1024 * 1024;
/// The operator binary's peak RSS while its only slurmrestd answers every list with
/// [`BOMB_BYTES`] of `{"jobs":[{},{},…]}`. Decoded, each `{}` is a job record of ~3.2 KiB
/// (measured through `slurm::fuzzing::decode`: 20 000 of them grew the process by 64 MB), so the
/// 10 million of them here would be ~32 GiB: the process could not survive one answer. Refused
/// while it streams in, the process stays at its usual size (measured: 46 MiB after 4 answers).
const MAX_PEAK_UNDER_ELEMENT_BOMB: u64 = 128 * MIB;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_element_bomb_from_slurmrestd_is_refused_without_growing_the_operator() {
    slurm_operator::tls::install_crypto_provider();
    let server = MockServer::start().await;
    for (path, case) in [("/diag/?$", "diag"), ("/ping/?$", "ping")] {
        Mock::given(path_regex(path))
            .respond_with(ResponseTemplate::new(200).set_body_json(recorded(case)))
            .mount(&server)
            .await;
    }
    let mut bomb = b"{\"jobs\":[".to_vec();
    while bomb.len() + 16 < BOMB_BYTES {
        bomb.extend_from_slice(b"{},{},{},{},");
    }
    bomb.extend_from_slice(b"{}],\"nodes\":[],\"partitions\":[]}");
    Mock::given(path_regex("."))
        .respond_with(ResponseTemplate::new(200).set_body_raw(bomb, "application/json"))
        .mount(&server)
        .await;

    const NAMESPACE: &str = "bomb";
    let api = fake_apiserver::FakeApiServer::start_with_crds(slurm_operator::crd::all()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = api.write_kubeconfig(dir.path());
    let client = api.client();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("slurm-jwt".into()),
            labels: Some([("slurm.rs/credentials".to_owned(), "true".to_owned())].into()),
            ..Default::default()
        },
        data: Some([("jwt_hs256.key".to_owned(), ByteString(vec![7; 32]))].into()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), CREDENTIALS_NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    Api::<SlurmCluster>::all(client.clone())
        .patch(
            CLUSTER,
            &PatchParams::apply(MANAGER),
            &Patch::Apply(json!({
                "apiVersion": "slurm.rs/v1alpha1",
                "kind": "SlurmCluster",
                "metadata": {"name": CLUSTER},
                "spec": {
                    "endpoint": server.uri(),
                    "allowInsecureHttp": true,
                    "auth": {"jwt": {"keySecretRef": {"name": "slurm-jwt", "key": "jwt_hs256.key"}}},
                    "pollInterval": "1s",
                    // Pinned: the bomb answers every path, negotiation's `/ping` too, and this
                    // test is about the list answers the poller asks for.
                    "restApiVersion": "v0.0.42",
                },
            })),
        )
        .await
        .unwrap();

    let log = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("memory-element-bomb.log");
    let _ = std::fs::remove_file(&log);
    let metrics = format!("127.0.0.1:{}", common::e2e::free_port());
    let operator = std::sync::Mutex::new(Operator::spawn(
        &[
            "--namespace",
            NAMESPACE,
            "--credentials-namespace",
            CREDENTIALS_NAMESPACE,
            "--metrics-addr",
            &metrics,
        ],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
        Some(&log),
    ));
    let (operator_ref, server_ref, log_ref) = (&operator, &server, &log);
    // Several bombs served (the poller tries again and again), each refused.
    let refused = eventually(
        "three element bombs refused",
        Duration::from_secs(300),
        || async move {
            operator_ref.lock().unwrap().assert_running();
            let text = std::fs::read_to_string(log_ref).unwrap_or_default();
            let refusals = text.matches("TooManyElements").count()
                + text.matches("holds more elements than").count();
            let served = server_ref
                .received_requests()
                .await
                .unwrap_or_default()
                .iter()
                .filter(|r| !r.url.path().ends_with("diag") && !r.url.path().ends_with("ping"))
                .count();
            (served >= 3 && refusals >= 1).then_some(served)
        },
    )
    .await;
    let mut operator = operator.into_inner().unwrap();
    let peak = peak_rss(operator.pid());
    eprintln!(
        "operator peak RSS after {refused} answers of {} MiB of empty job records: {} MiB (log: {})",
        BOMB_BYTES as u64 / MIB,
        peak / MIB,
        log.display()
    );
    operator.assert_running();
    assert!(
        peak < MAX_PEAK_UNDER_ELEMENT_BOMB,
        "peak RSS {} MiB, bound {} MiB",
        peak / MIB,
        MAX_PEAK_UNDER_ELEMENT_BOMB / MIB
    );
}
