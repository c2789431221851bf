//! Every REST API version the facade speaks, against the real local Slurm: for each data_parser
//! plugin the flavour's slurmrestd has (trixie/24.11: v0.0.40, v0.0.41, v0.0.42; forky/26.05:
//! v0.0.42 to v0.0.45), a second slurmrestd loaded with only that plugin (`slurmrestd -d`, see
//! `hack/slurm-daemon.sh --data-parser`) is negotiated down to it and used to submit (an array
//! with typed options, then a job depending on it), mirror, cancel, drain, resume and delete a
//! node, and look a job up in accounting. Only slurmrestd is restarted between versions: one
//! slurmctld, one build. Negotiation against the main slurmrestd (several versions) and pins,
//! served or not, are checked too.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use slurm_operator::slurm::types::{Job, JobBaseState, JobUpdate, SubmitRequest, Tres};
use slurm_operator::slurm::{ApiVersion, ClientConfig, SlurmClient, SlurmError};

const JOB_TIMEOUT: Duration = Duration::from_secs(90);

/// The one-version slurmrestds are one per version on the machine: tests that start (and, when
/// done, stop) them take turns.
static ONE_VERSION_RESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const POLL: Duration = Duration::from_millis(200);

async fn records(client: &SlurmClient, job_id: u32) -> Vec<Job> {
    client.job(job_id).await.unwrap()
}

async fn wait_records(
    client: &SlurmClient,
    job_id: u32,
    what: &str,
    pred: impl Fn(&[Job]) -> bool,
) -> Vec<Job> {
    common::wait_for(what, JOB_TIMEOUT, POLL, || async {
        let jobs = records(client, job_id).await;
        pred(&jobs).then_some(jobs)
    })
    .await
}

fn served(slurm: &common::LocalSlurm) -> Vec<ApiVersion> {
    let versions: Vec<ApiVersion> = slurm
        .data_parsers
        .iter()
        .map(|v| {
            v.parse().unwrap_or_else(|e| {
                panic!("the local slurmrestd has a plugin we do not speak: {e}")
            })
        })
        .collect();
    // The flavours this project tests: 24.11 serves v0.0.40-v0.0.42, 26.05 v0.0.42-v0.0.45.
    let expected: &[ApiVersion] = match slurm.flavour.as_str() {
        "trixie" => &[
            ApiVersion::V0_0_40,
            ApiVersion::V0_0_41,
            ApiVersion::V0_0_42,
        ],
        "forky" => &[
            ApiVersion::V0_0_42,
            ApiVersion::V0_0_43,
            ApiVersion::V0_0_44,
            ApiVersion::V0_0_45,
        ],
        other => panic!("unknown flavour {other}"),
    };
    assert_eq!(
        versions, expected,
        "data_parser plugins of {}",
        slurm.flavour
    );
    versions
}

#[tokio::test]
async fn a_slurmrestd_serving_several_versions_gets_the_newest() {
    let slurm = require_slurm!();
    let newest = *served(&slurm).last().unwrap();
    let client = slurm.client();
    assert_eq!(
        client.api_version(),
        None,
        "nothing is asked before the first call"
    );
    let info = client.cluster_info().await.unwrap();
    assert_eq!(info.api_version, newest.as_str());
    assert_eq!(info.data_parser, newest.data_parser());
    assert_eq!(client.api_version(), Some(newest));
    // Clones and clients acting as another user share the outcome.
    assert_eq!(client.clone().api_version(), Some(newest));
    assert_eq!(client.as_user("alice").unwrap().api_version(), Some(newest));
}

#[tokio::test]
async fn a_pin_is_honoured_and_a_pin_not_served_names_what_is() {
    let slurm = require_slurm!();
    let versions = served(&slurm);
    let oldest = versions[0];
    let pinned = |version| {
        let config = slurm.config().with_api_version(Some(version));
        SlurmClient::new(config, slurm.credentials()).unwrap()
    };

    let client = pinned(oldest);
    let info = client.cluster_info().await.unwrap();
    assert_eq!(info.api_version, oldest.as_str());
    assert_eq!(info.data_parser, oldest.data_parser());
    client.all_job_states().await.unwrap();
    assert_eq!(client.api_version(), Some(oldest));

    let missing = ApiVersion::ALL
        .into_iter()
        .find(|v| !versions.contains(v))
        .unwrap();
    let err = pinned(missing).cluster_info().await.unwrap_err();
    let SlurmError::UnsupportedVersion { detail, .. } = &err else {
        panic!("expected UnsupportedVersion, got {err}");
    };
    assert!(detail.contains(&format!("pins {missing}")), "{detail}");
    assert!(detail.contains("restApiVersion"), "{detail}");
    // What it serves, from its own /openapi/v3.
    let list = versions
        .iter()
        .map(|v| v.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    assert!(detail.contains(&format!("serves {list}")), "{detail}");
}

#[tokio::test]
async fn a_slurmrestd_serving_none_of_ours_is_unsupported_and_says_so() {
    // A path prefix under which nothing is served, as behind a proxy that routes nothing of ours:
    // every version's ping is a plain 404, and no /openapi/v3 is readable there either.
    let slurm = require_slurm!();
    let config = ClientConfig::new(&format!("{}/elsewhere", slurm.url))
        .unwrap()
        .allow_plaintext(true);
    let client = SlurmClient::new(config, slurm.credentials()).unwrap();
    let err = client.negotiate().await.unwrap_err();
    let SlurmError::UnsupportedVersion { detail, .. } = &err else {
        panic!("expected UnsupportedVersion, got {err}");
    };
    assert!(detail.contains("speaks v0.0.40 to v0.0.45"), "{detail}");
    assert_eq!(client.api_version(), None);
}

/// Submit, mirror, cancel, drain and accounting through a slurmrestd that serves `version` only.
async fn exercise(slurm: &common::LocalSlurm, version: ApiVersion) {
    let rest = common::VersionRest::start(slurm, version.as_str());
    let client = rest.client(None);
    let context = |what: &str| format!("{version}: {what}");

    // Negotiated down to the one version it serves.
    assert_eq!(client.negotiate().await.unwrap(), version);
    let info = client.cluster_info().await.unwrap();
    assert_eq!(
        info.api_version,
        version.as_str(),
        "{}",
        context("negotiated")
    );
    assert_eq!(info.data_parser, version.data_parser());
    assert!(info.controller_responding, "{}", context("ping"));
    // slurmctld's clock (the first sync reads job ages on it): the same machine's here.
    let clock = client.controller_clock().await.unwrap();
    let ahead = clock
        .controller_ahead_at_least()
        .expect("/diag says its time");
    assert!(
        (-2..=1).contains(&ahead.num_seconds()),
        "{}",
        context(&format!("slurmctld's clock {ahead} ahead"))
    );
    assert!(
        client
            .partitions()
            .await
            .unwrap()
            .iter()
            .any(|p| p.name == slurm.partition)
    );

    // An array with typed options, and a job that waits for it.
    let tag = common::unique(&format!("ver{}", version.as_str().replace('.', "")));
    let mut array = slurm.job(&tag, "sleep 1");
    array.array = Some("0-1".into());
    array.comment = Some(tag.clone());
    array.time_limit = Some(Duration::from_secs(120));
    array.memory_per_node_mib = Some(100);
    array.cpus_per_task = Some(1);
    array.tasks = Some(1);
    array.standard_output = Some("/tmp/%x-%A_%a.out".into());
    let submitted = client.submit_job(&array).await.unwrap();
    let array_id = submitted.job_id;
    let mut dependent = slurm.job(&format!("{tag}-after"), "true");
    dependent.dependency = Some(format!("afterok:{array_id}"));
    let after = client.submit_job(&dependent).await.unwrap().job_id;

    // Mirror: by id, in the full list, and by state.
    let tasks = wait_records(
        &client,
        array_id,
        &context("both tasks to finish"),
        |jobs| {
            jobs.iter().filter(|j| j.array_task_id.is_some()).count() == 2
                && jobs.iter().all(|j| j.state.is_final())
        },
    )
    .await;
    for task in &tasks {
        assert_eq!(
            task.state.base,
            JobBaseState::Completed,
            "{}: {task:?}",
            context("task")
        );
        assert_eq!(task.array_job_id, Some(array_id));
        assert_eq!(task.comment.as_deref(), Some(tag.as_str()));
        assert_eq!(task.time_limit, Some(Duration::from_secs(120)));
        assert_eq!(task.partition.as_deref(), Some(slurm.partition.as_str()));
        assert!(task.end_time.is_some(), "{task:?}");
    }
    let last_end = tasks.iter().filter_map(|t| t.end_time).max().unwrap();
    let dependent_done = wait_records(&client, after, &context("the dependent job"), |jobs| {
        jobs.iter().all(|j| j.state.is_final())
    })
    .await;
    assert_eq!(dependent_done[0].state.base, JobBaseState::Completed);
    assert!(
        dependent_done[0].start_time.unwrap() >= last_end,
        "{}: the dependent job started before the array ended",
        context("dependency")
    );
    let listed = client.jobs(None).await.unwrap().into_items().unwrap();
    assert!(
        listed
            .iter()
            .any(|j| j.job_id == after && j.name.ends_with("-after"))
    );
    let states = client.jobs_state(&[after]).await.unwrap();
    assert!(
        states
            .iter()
            .any(|s| s.job_id == after && s.state.base == JobBaseState::Completed),
        "{}: {states:?}",
        context("jobs_state")
    );

    // Accounting's usage of the array's tasks: each ended, with its elapsed time and its TRES.
    if slurm.accounting {
        let records = common::wait_for(&context("the tasks' usage"), JOB_TIMEOUT, POLL, || async {
            let records = client.accounting_job(array_id).await.unwrap()?;
            (records.len() == 2 && records.iter().all(|r| r.state.is_final())).then_some(records)
        })
        .await;
        for record in &records {
            let usage = record.usage.as_deref().unwrap();
            assert!(
                usage.elapsed >= Duration::from_secs(1),
                "{}: {usage:?}",
                context("elapsed")
            );
            assert_eq!(
                Tres::count_of(&usage.allocated, "cpu", None),
                Some(1),
                "{}: {usage:?}",
                context("allocated TRES")
            );
            assert_eq!(
                Tres::count_of(&usage.requested, "mem", None),
                Some(100),
                "{}: {usage:?}",
                context("requested TRES")
            );
        }
    }

    // In place: a held job, its time limit changed, released; the same id throughout.
    let mut held = slurm.job(&format!("{tag}-held"), "sleep 300");
    held.hold = true;
    held.time_limit = Some(Duration::from_secs(600));
    let held = client.submit_job(&held).await.unwrap().job_id;
    let record = |id| {
        let client = client.clone();
        async move { records(&client, id).await.remove(0) }
    };
    let before = record(held).await;
    assert!(before.held, "{}: {before:?}", context("submitted held"));
    assert_eq!(before.priority, Some(0));
    let update = JobUpdate {
        time_limit: Some(Duration::from_secs(300)),
        nice: Some(10),
        ..JobUpdate::default()
    };
    client.update_job(held, &update).await.unwrap();
    let changed = record(held).await;
    assert_eq!(
        changed.time_limit,
        Some(Duration::from_secs(300)),
        "{}",
        context("limit")
    );
    assert_eq!(changed.nice, Some(10), "{}", context("nice"));
    assert!(changed.held);
    let release = JobUpdate {
        hold: Some(false),
        ..JobUpdate::default()
    };
    client.update_job(held, &release).await.unwrap();
    let released = record(held).await;
    assert!(!released.held, "{}: {released:?}", context("released"));
    assert_eq!(released.job_id, held);
    client.cancel_job(held).await.unwrap();

    // Cancel.
    let long = client
        .submit_job(&slurm.job(&format!("{tag}-cancel"), "sleep 300"))
        .await
        .unwrap()
        .job_id;
    client.cancel_job(long).await.unwrap();
    let cancelled = wait_records(&client, long, &context("the cancel"), |jobs| {
        jobs.iter().all(|j| j.state.is_final())
    })
    .await;
    assert_eq!(cancelled[0].state.base, JobBaseState::Cancelled);

    // An incremental node list, as every poll cycle asks it (v0.0.40 and v0.0.41 refuse a UNIX
    // timestamp as `update_time`: the client lists every node instead).
    let listed = client
        .nodes(Some(chrono::Utc::now().timestamp() - 60))
        .await;
    assert!(
        listed.is_ok(),
        "{}: {listed:?}",
        context("an incremental node list")
    );

    // Drain, resume and delete a node of its own.
    let node = common::unique(&format!("v{}", &version.as_str()[5..]));
    slurm.node_script(&["start", &node, "--conf", "CPUs=1 RealMemory=500"]);
    let _stop = common::NodeGuard::new(slurm, &node);
    let reason = format!("slurm-operator: {version} test");
    client.drain_node(&node, &reason).await.unwrap();
    let drained = common::wait_for(&context("drained"), JOB_TIMEOUT, POLL, || async {
        let n = client.node(&node).await.unwrap();
        n.state.is_drained().then_some(n)
    })
    .await;
    assert_eq!(drained.reason.as_deref(), Some(reason.as_str()));
    client.resume_node(&node).await.unwrap();
    assert!(!client.node(&node).await.unwrap().state.is_drain());
    client.delete_node(&node).await.unwrap();
    let gone = client.node(&node).await.unwrap_err();
    assert!(
        matches!(gone, SlurmError::NotFound { .. }),
        "{}: {gone}",
        context("deleted")
    );

    // Accounting knows the cancelled job (slurmdbd gets it at submit).
    if slurm.accounting {
        let found = common::wait_for(&context("accounting"), JOB_TIMEOUT, POLL, || async {
            let records = client.accounting_job(long).await.unwrap()?;
            records.into_iter().find(|j| j.job_id == long)
        })
        .await;
        assert_eq!(found.name, format!("{tag}-cancel"));
        let named = client
            .accounting_jobs_named(&format!("{tag}-cancel"), None, None)
            .await
            .unwrap()
            .unwrap();
        assert!(
            named.iter().any(|j| j.job_id == long),
            "{}: {named:?}",
            context("accounting by name")
        );

        // A job not eligible yet (held: no eligible time) has a record too, and the search by
        // name finds it, from a time on and as its user: an earlier submit a crash left
        // unrecorded must be found, or it would be submitted twice.
        let name = format!("{tag}-held-search");
        let mut request = slurm.job(&name, "true");
        request.hold = true;
        let submitted_at = chrono::Utc::now();
        let held = client.submit_job(&request).await.unwrap().job_id;
        let recorded = tokio::time::timeout(JOB_TIMEOUT, async {
            loop {
                if let Ok(Some(records)) = client.accounting_job(held).await
                    && records.iter().any(|j| j.job_id == held)
                {
                    break;
                }
                tokio::time::sleep(POLL).await;
            }
        })
        .await;
        let named = client
            .accounting_jobs_named(
                &name,
                Some(submitted_at - chrono::TimeDelta::seconds(60)),
                client.user().as_deref(),
            )
            .await;
        // Cancelled before any assertion: a held job left behind would wait for ever.
        client.cancel_job(held).await.unwrap();
        assert!(recorded.is_ok(), "{}", context("held in accounting"));
        let named = named.unwrap().unwrap();
        assert!(
            named.iter().any(|j| j.job_id == held),
            "{}: {named:?}",
            context("a held job by name")
        );
    }
}

#[tokio::test]
async fn every_served_version_submits_mirrors_cancels_and_drains() {
    let slurm = require_slurm!();
    let _turn = ONE_VERSION_RESTS.lock().await;
    for version in served(&slurm) {
        exercise(&slurm, version).await;
    }
}

/// A job option the connected version does not know is refused by name, not dropped.
#[tokio::test]
async fn an_option_the_version_lacks_is_refused_by_name() {
    let slurm = require_slurm!();
    let versions = served(&slurm);
    // `oom_kill_step` arrived with v0.0.42 (Slurm 24.11).
    let Some(old) = versions.iter().find(|v| **v < ApiVersion::V0_0_42) else {
        // 26.05 serves nothing older; the same refusal is unit-tested on every version.
        let config = slurm.config().with_api_version(Some(versions[0]));
        let client = SlurmClient::new(config, slurm.credentials()).unwrap();
        let mut request: SubmitRequest = slurm.job("unknown-option", "true");
        request
            .extra
            .insert("no_such_option".into(), serde_json::json!(1));
        let err = client.submit_job(&request).await.unwrap_err();
        assert!(err.to_string().contains("no_such_option"), "{err}");
        return;
    };
    let config = slurm.config().with_api_version(Some(*old));
    let client = SlurmClient::new(config, slurm.credentials()).unwrap();
    let mut request = slurm.job("old-option", "true");
    request
        .extra
        .insert("oom_kill_step".into(), serde_json::json!(1));
    let err = client.submit_job(&request).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("oom_kill_step") && text.contains(old.as_str()),
        "{text}"
    );
}

/// A TCP forwarder whose upstream can be switched: slurmrestd "restarted with other plugins"
/// behind one address. A switch closes the connections open to the old upstream.
struct Switch {
    url: String,
    upstream: std::sync::Arc<std::sync::Mutex<String>>,
    connections: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    _accept: tokio::task::JoinHandle<()>,
}

impl Switch {
    async fn start(upstream: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let target = std::sync::Arc::new(std::sync::Mutex::new(upstream.to_owned()));
        let connections = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (accept_target, accept_connections) = (target.clone(), connections.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let address = accept_target.lock().unwrap().clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(address).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                accept_connections.lock().unwrap().push(task);
            }
        });
        Self {
            url,
            upstream: target,
            connections,
            _accept: accept,
        }
    }

    fn switch_to(&self, upstream: &str) {
        *self.upstream.lock().unwrap() = upstream.to_owned();
        for task in self.connections.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

/// slurmrestd replaced behind the same address by one serving another version: the first call
/// finds its version unserved (and fails with UnsupportedVersion, never "not found"), the next
/// one negotiates again and works.
#[tokio::test]
async fn a_slurmrestd_that_stops_serving_the_version_in_use_is_negotiated_again() {
    let slurm = require_slurm!();
    let _turn = ONE_VERSION_RESTS.lock().await;
    let versions = served(&slurm);
    let (older, newer) = (versions[0], versions[1]);
    let old_rest = common::VersionRest::start(&slurm, older.as_str());
    let new_rest = common::VersionRest::start(&slurm, newer.as_str());
    let address = |rest: &common::VersionRest| rest.url.trim_start_matches("http://").to_owned();
    let switch = Switch::start(&address(&new_rest)).await;
    let config = ClientConfig::new(&switch.url)
        .unwrap()
        .allow_plaintext(true);
    let client = SlurmClient::new(config, slurm.credentials()).unwrap();

    assert_eq!(
        client.cluster_info().await.unwrap().api_version,
        newer.as_str()
    );
    assert_eq!(client.api_version(), Some(newer));

    switch.switch_to(&address(&old_rest));
    let err = client.job(1).await.unwrap_err();
    assert!(
        matches!(err, SlurmError::UnsupportedVersion { .. }),
        "{newer} gone: {err}"
    );
    assert_eq!(client.api_version(), None, "forgotten after the 404");
    let info = client.cluster_info().await.unwrap();
    assert_eq!(info.api_version, older.as_str());
    assert_eq!(client.api_version(), Some(older));
    assert!(
        client
            .partitions()
            .await
            .unwrap()
            .iter()
            .any(|p| p.name == slurm.partition)
    );
}
