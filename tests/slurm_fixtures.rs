//! The facade over REAL slurmrestd responses recorded by `hack/record-fixtures.sh`
//! (`tests/fixtures/<release>/*.json`), replayed by a local HTTP server: every facade method and
//! every lying response (200 with errors, 200 cancel failures, 200 without nodes, 304, 401, 511,
//! 500 with error numbers) must come out as the right value or typed error, for every recorded
//! Slurm release. These run without a Slurm; the integration tests check the same against a live one.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use slurm_operator::slurm::types::{Changes, JobBaseState, NodeBaseState};
use slurm_operator::slurm::{ClientConfig, Credentials, RetryPolicy, SlurmClient, SlurmError};
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};

#[derive(Debug, Deserialize)]
struct Fixture {
    request: Request,
    status: u16,
    content_type: String,
    body: Value,
}

#[derive(Debug, Deserialize)]
struct Request {
    method: String,
    path: String,
}

fn releases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(
        !dirs.is_empty(),
        "no recorded fixtures under {}",
        root.display()
    );
    dirs
}

fn load(dir: &Path, case: &str) -> Fixture {
    let path = dir.join(format!("{case}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A server that answers exactly like slurmrestd did for the given recorded cases.
async fn replay(dir: &Path, cases: &[&str]) -> SlurmClient {
    let server = MockServer::start().await;
    for case in cases {
        let fixture = load(dir, case);
        let body = match &fixture.body {
            Value::String(text) => text.clone().into_bytes(),
            other => serde_json::to_vec(other).unwrap(),
        };
        let mut response = ResponseTemplate::new(fixture.status);
        if !body.is_empty() {
            response = response.set_body_raw(body, &fixture.content_type);
        }
        // The client uses the spec's trailing-slash paths; recordings may not.
        let path = format!(
            "^{}/?$",
            regex_escape(fixture.request.path.trim_end_matches('/'))
        );
        Mock::given(method(fixture.request.method.as_str()))
            .and(path_regex(path))
            .respond_with(response)
            .mount(&server)
            .await;
    }
    let config = ClientConfig::new(&server.uri())
        .unwrap()
        .with_retry(RetryPolicy::none());
    let credentials = Arc::new(
        Credentials::minted(vec![1; 32], "slurm", std::time::Duration::from_secs(60)).unwrap(),
    );
    let client = SlurmClient::new(config, credentials).unwrap();
    // The server must outlive the client's calls in the test: leak it (one per test, small).
    std::mem::forget(server);
    client
}

fn regex_escape(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '/' || c == '_' || c == '-' {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

/// Run `check` for every recorded release.
macro_rules! for_each_release {
    (|$dir:ident| $body:block) => {
        for $dir in releases() {
            let $dir: &Path = &$dir;
            eprintln!("release {}", $dir.display());
            $body
        }
    };
}

#[tokio::test]
async fn ping_and_cluster_info() {
    for_each_release!(|dir| {
        let client = replay(dir, &["ping", "diag"]).await;
        assert!(client.ping().await.unwrap());
        let info = client.cluster_info().await.unwrap();
        assert_eq!(info.cluster_name, "local");
        assert_eq!(info.api_version, "v0.0.42");
        assert_eq!(info.data_parser, "data_parser/v0.0.42");
        let release = dir.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            info.release.starts_with(&release),
            "{} vs {release}",
            info.release
        );
        assert!(info.controller_responding);
        assert!(info.jobs_submitted.is_some());
    });
}

#[tokio::test]
async fn nodes_listing_and_unchanged() {
    for_each_release!(|dir| {
        let client = replay(dir, &["nodes"]).await;
        let Changes::Changed { items, as_of } = client.nodes(None).await.unwrap() else {
            panic!("changed")
        };
        assert!(as_of > 0);
        let names: Vec<&str> = items.iter().map(|n| n.name.as_str()).collect();
        for name in ["n1", "n2", "n3"] {
            assert!(names.contains(&name), "{names:?}");
        }
        let n1 = items.iter().find(|n| n.name == "n1").unwrap();
        assert_eq!(n1.cpus, Some(1));
        assert_eq!(n1.real_memory, Some(1000));
        assert!(n1.port.is_some_and(|p| p > 0), "{n1:?}");
        assert!(n1.partitions.contains(&"debug".to_owned()));

        // slurmrestd answers 304 with an empty body when no node changed.
        let client = replay(dir, &["nodes_unchanged"]).await;
        assert_eq!(client.nodes(Some(1)).await.unwrap(), Changes::Unchanged);
    });
}

#[tokio::test]
async fn one_node_and_unknown_node() {
    for_each_release!(|dir| {
        let client = replay(dir, &["node_n1"]).await;
        let n1 = client.node("n1").await.unwrap();
        assert_eq!(n1.state.base, NodeBaseState::Idle);
        // 200 without `nodes` and an "error_number 0" entry: not found, not an empty success.
        let client = replay(dir, &["node_unknown"]).await;
        let err = client.node("nosuchnode").await.unwrap_err();
        assert!(
            matches!(err, SlurmError::NotFound { kind: "node", .. }),
            "{err}"
        );
    });
}

#[tokio::test]
async fn node_states_through_a_drain_and_a_dynamic_node() {
    for_each_release!(|dir| {
        type Check = dyn Fn(&slurm_operator::slurm::types::NodeState) -> bool;
        let cases: &[(&str, &Check)] = &[
            ("node_draining", &|s| s.is_draining() && !s.is_drained()),
            ("node_drained", &|s| s.is_drained()),
            ("node_drained_after_job", &|s| s.is_drained()),
            ("node_resumed_idle", &|s| {
                !s.is_drain() && s.base == NodeBaseState::Idle
            }),
            ("node_dynamic_idle", &|s| s.is_dynamic() && !s.is_busy()),
            ("node_dynamic_allocated", &|s| s.is_dynamic() && s.is_busy()),
        ];
        for (case, check) in cases {
            let fixture = load(dir, case);
            let name = fixture.request.path.rsplit('/').next().unwrap().to_owned();
            let client = replay(dir, &[case]).await;
            let node = client.node(&name).await.unwrap();
            assert!(check(&node.state), "{case}: {}", node.state);
        }
        let client = replay(dir, &["node_draining"]).await;
        let name = load(dir, "node_draining")
            .request
            .path
            .rsplit('/')
            .next()
            .unwrap()
            .to_owned();
        let node = client.node(&name).await.unwrap();
        assert!(
            node.reason.is_some() && node.reason_set_by_user.is_some(),
            "{node:?}"
        );
    });
}

#[tokio::test]
async fn node_updates_and_their_errors() {
    for_each_release!(|dir| {
        let client = replay(dir, &["drain_idle"]).await;
        client
            .drain_node("n1", "fixture: drain idle")
            .await
            .unwrap();
        let client = replay(dir, &["resume_ok"]).await;
        let node = load(dir, "resume_ok")
            .request
            .path
            .rsplit('/')
            .next()
            .unwrap()
            .to_owned();
        client.resume_node(&node).await.unwrap();

        let client = replay(dir, &["resume_not_drained"]).await;
        let err = client.resume_node("n1").await.unwrap_err();
        assert!(
            matches!(&err, SlurmError::InvalidNodeState { node, .. } if node == "n1"),
            "{err}"
        );

        let client = replay(dir, &["update_unknown_node"]).await;
        let err = client.drain_node("nosuchnode", "x").await.unwrap_err();
        assert!(
            matches!(err, SlurmError::NotFound { kind: "node", .. }),
            "{err}"
        );

        let busy = load(dir, "delete_node_busy")
            .request
            .path
            .rsplit('/')
            .next()
            .unwrap()
            .to_owned();
        let client = replay(dir, &["delete_node_busy"]).await;
        let err = client.delete_node(&busy).await.unwrap_err();
        assert!(
            matches!(&err, SlurmError::NodeBusy { node } if *node == busy),
            "{err}"
        );
        assert!(err.is_transient());
        let client = replay(dir, &["delete_node_ok"]).await;
        client.delete_node(&busy).await.unwrap();
    });
}

#[tokio::test]
async fn partitions() {
    for_each_release!(|dir| {
        let client = replay(dir, &["partitions"]).await;
        let partitions = client.partitions().await.unwrap();
        let debug = partitions
            .iter()
            .find(|p| p.name == "debug")
            .expect("debug partition");
        assert_eq!(debug.total_nodes, Some(3));
        assert!(debug.state.contains(&"UP".to_owned()), "{debug:?}");
    });
}

fn submit_request() -> slurm_operator::slurm::types::SubmitRequest {
    slurm_operator::slurm::types::SubmitRequest {
        script: "#!/bin/sh\ntrue\n".into(),
        working_directory: "/tmp".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn submit_and_its_errors() {
    for_each_release!(|dir| {
        let client = replay(dir, &["submit_ok"]).await;
        let submitted = client.submit_job(&submit_request()).await.unwrap();
        assert!(submitted.job_id > 0);

        let client = replay(dir, &["submit_invalid_partition"]).await;
        let err = client.submit_job(&submit_request()).await.unwrap_err();
        assert!(matches!(err, SlurmError::InvalidPartition { .. }), "{err}");

        let client = replay(dir, &["submit_invalid_feature"]).await;
        let err = client.submit_job(&submit_request()).await.unwrap_err();
        assert!(matches!(err, SlurmError::InvalidFeature { .. }), "{err}");

        let client = replay(dir, &["submit_no_environment"]).await;
        let err = client.submit_job(&submit_request()).await.unwrap_err();
        // "No environment": 2019 on 24.11, 2127 on 26.05; either way a refusal with Slurm's number.
        assert!(matches!(err, SlurmError::Rejected { .. }), "{err}");
        assert!(matches!(err.slurm_errno(), Some(2019 | 2127)), "{err}");

        let client = replay(dir, &["submit_unknown_field"]).await;
        let submitted = client.submit_job(&submit_request()).await.unwrap();
        assert!(
            submitted
                .warnings
                .iter()
                .any(|w| w.contains("bogus_field") || w.contains("Ignoring")),
            "{submitted:?}"
        );
    });
}

#[tokio::test]
async fn job_states_exit_codes_and_reasons() {
    for_each_release!(|dir| {
        /// Case, base state, return code, signal, reason.
        type Row = (
            &'static str,
            JobBaseState,
            Option<i32>,
            Option<i32>,
            Option<&'static str>,
        );
        let table: &[Row] = &[
            ("job_pending", JobBaseState::Pending, None, None, None),
            ("job_running", JobBaseState::Running, None, None, None),
            (
                "job_completed",
                JobBaseState::Completed,
                Some(0),
                None,
                None,
            ),
            (
                "job_failed_exit3",
                JobBaseState::Failed,
                Some(3),
                None,
                Some("NonZeroExitCode"),
            ),
            (
                "job_cancelled_running",
                JobBaseState::Cancelled,
                None,
                Some(15),
                None,
            ),
            (
                // Never started, so no signal: Slurm records return code 0 (and the pending reason).
                "job_cancelled_pending",
                JobBaseState::Cancelled,
                Some(0),
                None,
                Some("Resources"),
            ),
            (
                "job_timeout",
                JobBaseState::Timeout,
                None,
                Some(15),
                Some("TimeLimit"),
            ),
        ];
        for (case, base, return_code, signal, reason) in table {
            let fixture = load(dir, case);
            let id: u32 = fixture
                .request
                .path
                .rsplit('/')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            let client = replay(dir, &[case]).await;
            let jobs = client.job(id).await.unwrap();
            let job = &jobs[0];
            assert_eq!(job.job_id, id, "{case}");
            assert_eq!(job.state.base, *base, "{case}: {}", job.state);
            let exit = job.exit.as_ref();
            if return_code.is_some() {
                assert_eq!(
                    exit.and_then(|e| e.return_code),
                    *return_code,
                    "{case}: {exit:?}"
                );
            }
            assert_eq!(exit.and_then(|e| e.signal), *signal, "{case}: {exit:?}");
            if reason.is_some() {
                assert_eq!(job.state_reason.as_deref(), *reason, "{case}");
            }
            if base.is_finished() {
                assert!(job.state.is_final(), "{case}: {}", job.state);
            }
        }
        // Caught right after the end: a final base state (which one depends on the recording)
        // with COMPLETING still set, so not final yet.
        let fixture = load(dir, "job_completing");
        let id: u32 = fixture
            .request
            .path
            .rsplit('/')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let client = replay(dir, &["job_completing"]).await;
        let job = client.job(id).await.unwrap().remove(0);
        assert!(job.state.base.is_finished(), "{}", job.state);
        assert!(
            job.state.has_flag("COMPLETING") && !job.state.is_final(),
            "{}",
            job.state
        );

        let client = replay(dir, &["job_unknown"]).await;
        let id: u32 = load(dir, "job_unknown")
            .request
            .path
            .rsplit('/')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let err = client.job(id).await.unwrap_err();
        assert!(
            matches!(err, SlurmError::NotFound { kind: "job", .. }),
            "{err}"
        );
    });
}

#[tokio::test]
async fn jobs_listing_unchanged_and_states() {
    for_each_release!(|dir| {
        let client = replay(dir, &["jobs"]).await;
        let Changes::Changed { items, as_of } = client.jobs(None).await.unwrap() else {
            panic!("changed")
        };
        assert!(!items.is_empty() && as_of > 0);
        assert!(items.iter().all(|j| j.job_id > 0));

        let client = replay(dir, &["jobs_unchanged"]).await;
        assert_eq!(client.jobs(Some(1)).await.unwrap(), Changes::Unchanged);

        let client = replay(dir, &["jobs_state"]).await;
        let states = client.jobs_state(&[2, 7, 5]).await.unwrap();
        assert_eq!(states.len(), 3, "{states:?}");
        assert!(
            states
                .iter()
                .any(|s| s.state.base == JobBaseState::Completed)
        );
        assert!(states.iter().any(|s| s.state.base == JobBaseState::Failed));
    });
}

#[tokio::test]
async fn array_tasks_carry_their_ids() {
    for_each_release!(|dir| {
        let client = replay(dir, &["array_jobs"]).await;
        let jobs = client.jobs(None).await.unwrap().into_items().unwrap();
        let tasks: Vec<_> = jobs.iter().filter(|j| j.array_job_id.is_some()).collect();
        assert!(tasks.len() >= 4, "array tasks in the listing: {tasks:?}");
        let parent = tasks[0].array_job_id.unwrap();
        let mut ids: Vec<u32> = tasks
            .iter()
            .filter(|t| t.array_job_id == Some(parent))
            .filter_map(|t| t.array_task_id)
            .collect();
        ids.sort();
        assert_eq!(ids, vec![0, 1, 2, 3]);
        let failed: Vec<_> = tasks
            .iter()
            .filter(|t| t.state.base == JobBaseState::Failed)
            .collect();
        assert_eq!(failed.len(), 1, "one task fails: {failed:?}");
        assert_eq!(failed[0].array_task_id, Some(2));
    });
}

#[tokio::test]
async fn cancel_outcomes_hidden_behind_http_200() {
    for_each_release!(|dir| {
        let id = |case: &str| -> u32 {
            load(dir, case)
                .request
                .path
                .rsplit('/')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        let client = replay(dir, &["cancel_ok"]).await;
        client.cancel_job(id("cancel_ok")).await.unwrap();
        let client = replay(dir, &["cancel_completed"]).await;
        let err = client.cancel_job(id("cancel_completed")).await.unwrap_err();
        assert!(matches!(err, SlurmError::AlreadyFinished { .. }), "{err}");
        let client = replay(dir, &["cancel_unknown"]).await;
        let err = client.cancel_job(id("cancel_unknown")).await.unwrap_err();
        assert!(
            matches!(err, SlurmError::NotFound { kind: "job", .. }),
            "{err}"
        );
    });
}

#[tokio::test]
async fn bad_or_missing_credentials_are_unauthorized_everywhere() {
    for_each_release!(|dir| {
        let client = replay(dir, &["auth_bad_token_diag", "ping"]).await;
        let err = client.cluster_info().await.unwrap_err();
        assert!(
            matches!(err, SlurmError::Unauthorized { status: 511, .. }),
            "{err}"
        );
        let client = replay(dir, &["auth_bad_token_nodes"]).await;
        assert!(matches!(
            client.nodes(None).await.unwrap_err(),
            SlurmError::Unauthorized { .. }
        ));
        let client = replay(dir, &["auth_bad_token_jobs"]).await;
        assert!(matches!(
            client.jobs(None).await.unwrap_err(),
            SlurmError::Unauthorized { .. }
        ));
        // 511 with an empty errors[] and no `partitions`.
        let client = replay(dir, &["auth_bad_token_partitions"]).await;
        assert!(matches!(
            client.partitions().await.unwrap_err(),
            SlurmError::Unauthorized { status: 511, .. }
        ));
        let client = replay(dir, &["auth_bad_token_submit"]).await;
        assert!(matches!(
            client.submit_job(&submit_request()).await.unwrap_err(),
            SlurmError::Unauthorized { .. }
        ));
        // No headers at all: 401 with a plain-text body.
        let client = replay(dir, &["auth_missing_diag"]).await;
        let err = client.cluster_info().await.unwrap_err();
        assert!(
            matches!(&err, SlurmError::Unauthorized { status: 401, detail } if detail.contains("Authentication")),
            "{err}"
        );
        // /ping answers 200 to a bad token, but slurmrestd cannot reach slurmctld with it and
        // reports the controller DOWN: ping is no proof of credentials either way.
        let client = replay(dir, &["auth_bad_token_ping"]).await;
        assert!(!client.ping().await.unwrap());
    });
}
