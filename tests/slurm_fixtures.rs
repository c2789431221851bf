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
use slurm_operator::slurm::{
    ApiVersion, ClientConfig, Credentials, RetryPolicy, SlurmClient, SlurmError,
};
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
    query: Option<String>,
}

/// The recorded releases: the directories of `tests/fixtures` named like one (`24.11`); other
/// fixture folders (e.g. `sbatch/` scripts) are not recordings.
fn releases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let is_release = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split_once('.'))
            .is_some_and(|(major, minor)| {
                [major, minor]
                    .iter()
                    .all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_digit()))
            })
    };
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && is_release(p))
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

/// Whether `case` was recorded for this release (cases added later may exist for one only).
fn recorded(dir: &Path, case: &str) -> bool {
    dir.join(format!("{case}.json")).is_file()
}

/// The id at the end of a fixture's request path (`/job/{id}`, `/node/{name}`).
fn last_segment(dir: &Path, case: &str) -> String {
    load(dir, case)
        .request
        .path
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned()
}

fn job_id_of(dir: &Path, case: &str) -> u32 {
    last_segment(dir, case).parse().unwrap()
}

/// slurmrestd's recorded answer, byte for byte (status, content type, body).
fn response(fixture: &Fixture) -> ResponseTemplate {
    let body = match &fixture.body {
        Value::String(text) => text.clone().into_bytes(),
        other => serde_json::to_vec(other).unwrap(),
    };
    let mut response = ResponseTemplate::new(fixture.status);
    if !body.is_empty() {
        response = response.set_body_raw(body, &fixture.content_type);
    }
    response
}

/// A client pinned to v0.0.42, the version of the recorded answers (a pin makes no negotiating
/// request, so each call asks exactly the path its fixture answers).
fn client_for(server: &MockServer, retry: RetryPolicy) -> SlurmClient {
    let config = ClientConfig::new(&server.uri())
        .unwrap()
        .allow_plaintext(true)
        .with_api_version(Some(ApiVersion::V0_0_42))
        .with_retry(retry);
    let credentials = Arc::new(
        Credentials::minted(vec![1; 32], "slurm", std::time::Duration::from_secs(60)).unwrap(),
    );
    SlurmClient::new(config, credentials).unwrap()
}

/// A server answering each recorded case at its recorded method and path (the query is not
/// matched), or at `path` (a regex) when one is given.
async fn replay_server(dir: &Path, cases: &[(&str, Option<&str>)]) -> MockServer {
    let server = MockServer::start().await;
    for (case, at) in cases {
        let fixture = load(dir, case);
        // The client uses the spec's trailing-slash paths; recordings may not.
        let path = match at {
            Some(path) => (*path).to_owned(),
            None => format!(
                "^{}/?$",
                regex_escape(fixture.request.path.trim_end_matches('/'))
            ),
        };
        Mock::given(method(fixture.request.method.as_str()))
            .and(path_regex(path))
            .respond_with(response(&fixture))
            .mount(&server)
            .await;
    }
    server
}

/// A client of a server that answers exactly like slurmrestd did for the given recorded cases.
async fn replay(dir: &Path, cases: &[&str]) -> SlurmClient {
    let cases: Vec<(&str, Option<&str>)> = cases.iter().map(|c| (*c, None)).collect();
    let server = replay_server(dir, &cases).await;
    let client = client_for(&server, RetryPolicy::none());
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
        // No headers at all: 401 with a plain-text body, which no error repeats (only
        // slurmrestd's JSON answers are quoted: SECURITY.md, "The slurmrestd endpoint").
        let client = replay(dir, &["auth_missing_diag"]).await;
        let err = client.cluster_info().await.unwrap_err();
        assert!(
            matches!(&err, SlurmError::Unauthorized { status: 401, detail } if !detail.contains("Authentication")),
            "{err}"
        );
        // /ping answers 200 to a bad token, but slurmrestd cannot reach slurmctld with it and
        // reports the controller DOWN: ping is no proof of credentials either way.
        let client = replay(dir, &["auth_bad_token_ping"]).await;
        assert!(!client.ping().await.unwrap());
    });
}

/// Run `$body` for each release that recorded `$case`; fail unless at least one did, so a
/// renamed or lost fixture cannot turn the test into a no-op.
macro_rules! for_each_release_with {
    ($case:expr, |$dir:ident| $body:block) => {{
        let mut seen = 0;
        for $dir in releases() {
            let $dir: &Path = &$dir;
            if !recorded($dir, $case) {
                eprintln!("release {}: {} not recorded", $dir.display(), $case);
                continue;
            }
            eprintln!("release {}", $dir.display());
            seen += 1;
            $body
        }
        assert!(seen > 0, "no release recorded {}", $case);
    }};
}

fn assert_unsupported(result: Result<impl std::fmt::Debug, SlurmError>, what: &str) {
    let err = result.expect_err(what);
    assert!(
        matches!(err, SlurmError::UnsupportedVersion { .. }),
        "{what}: {err}"
    );
    assert!(!err.is_transient(), "{what}: {err}");
}

#[tokio::test]
async fn a_slurmrestd_without_v0042_is_unsupported_not_not_found() {
    // slurmrestd's real answer for a versioned path it does not serve (recorded at v0.0.39):
    // 404 text/plain, no Slurm error number. Served for EVERY v0.0.42 path, it is what a
    // slurmrestd without v0.0.42 answers this client.
    for_each_release_with!("unsupported_version_diag", |dir| {
        let fixture = load(dir, "unsupported_version_diag");
        assert_eq!(fixture.status, 404);
        assert!(
            fixture.content_type.starts_with("text/plain"),
            "{fixture:?}"
        );
        let server = MockServer::start().await;
        Mock::given(path_regex(r"^/slurm/v0\.0\.42/"))
            .respond_with(response(&fixture))
            .mount(&server)
            .await;
        let client = client_for(&server, RetryPolicy::none());
        assert_unsupported(client.cluster_info().await, "cluster_info");
        assert_unsupported(client.ping().await, "ping");
        assert_unsupported(client.nodes(None).await, "nodes");
        assert_unsupported(client.partitions().await, "partitions");
        assert_unsupported(client.jobs(Some(1)).await, "jobs");
        assert_unsupported(client.all_job_states().await, "all_job_states");
        assert_unsupported(client.submit_job(&submit_request()).await, "submit");
        // Not "job gone" / "node already deleted": callers act on those.
        assert_unsupported(client.job(5).await, "job");
        assert_unsupported(client.cancel_job(5).await, "cancel_job");
        assert_unsupported(client.node("n1").await, "node");
        assert_unsupported(client.delete_node("dyn1").await, "delete_node");
        assert_unsupported(client.drain_node("n1", "x").await, "drain_node");
        let err = client.cluster_info().await.unwrap_err();
        assert!(err.to_string().contains("v0.0.42 is not served"), "{err}");
        // Unpinned, negotiation finds none of the versions served (every path answers so).
        let config = ClientConfig::new(&server.uri())
            .unwrap()
            .allow_plaintext(true)
            .with_retry(RetryPolicy::none());
        let credentials = Arc::new(
            Credentials::minted(vec![1; 32], "slurm", std::time::Duration::from_secs(60)).unwrap(),
        );
        let negotiating = SlurmClient::new(config, credentials).unwrap();
        assert_unsupported(negotiating.cluster_info().await, "negotiation");
        // While a real unknown job (404 WITH error 2017) stays NotFound.
        let client = replay(dir, &["job_unknown"]).await;
        let err = client.job(job_id_of(dir, "job_unknown")).await.unwrap_err();
        assert!(
            matches!(err, SlurmError::NotFound { kind: "job", .. }),
            "{err}"
        );
    });
}

#[tokio::test]
async fn another_data_parser_is_unsupported() {
    // slurmrestd's real /diag through another data_parser it serves (meta.plugin.data_parser
    // names it), answered where v0.0.42 was asked.
    for_each_release_with!("diag_other_data_parser", |dir| {
        let fixture = load(dir, "diag_other_data_parser");
        let other = fixture.body["meta"]["plugin"]["data_parser"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_ne!(other, "data_parser/v0.0.42");
        let server = replay_server(
            dir,
            &[
                ("diag_other_data_parser", Some(r"^/slurm/v0\.0\.42/diag/?$")),
                ("ping", None),
            ],
        )
        .await;
        let client = client_for(&server, RetryPolicy::none());
        let err = client.cluster_info().await.unwrap_err();
        assert!(
            matches!(&err, SlurmError::UnsupportedVersion { detail, .. } if detail.contains(&other)),
            "{err}"
        );
    });
}

#[tokio::test]
async fn a_submit_refused_with_http_200_is_rejected_with_slurms_reason() {
    // HTTP 200, no job_id, errors[] with error_number 0 and the reason.
    for_each_release_with!("submit_hetjob_empty", |dir| {
        assert_eq!(load(dir, "submit_hetjob_empty").status, 200);
        let client = replay(dir, &["submit_hetjob_empty"]).await;
        let err = client.submit_job(&submit_request()).await.unwrap_err();
        assert!(
            matches!(&err, SlurmError::Rejected { status: 200, errors, .. }
                if errors.iter().any(|e| e.description.contains("HetJob"))),
            "{err}"
        );
        assert!(!err.is_transient());
    });
}

/// What slurmrestd's parser says about a submit: a value it refuses (-1, the value's path as
/// source) made no job and always will be refused; an unknown flag (9207) made the job all the
/// same, which the submit returns; the same with slurmctld refusing after the parser, no job,
/// and slurmctld's refusal is what the error is about.
#[tokio::test]
async fn a_submit_the_parser_complained_about_is_judged_by_its_job_and_slurmctlds_words() {
    for_each_release_with!("submit_unknown_flag", |dir| {
        let client = replay(dir, &["submit_bad_value"]).await;
        let err = client.submit_job(&submit_request()).await.unwrap_err();
        assert_eq!(err.slurm_errno(), Some(-1), "{err}");
        assert!(err.refuses_job() && !err.outcome_unknown(), "{err}");

        let client = replay(dir, &["submit_unknown_flag"]).await;
        let made = client.submit_job(&submit_request()).await.unwrap();
        assert_eq!(
            i64::from(made.job_id),
            load(dir, "submit_unknown_flag").body["job_id"]
                .as_i64()
                .unwrap()
        );
        assert!(
            made.warnings.iter().any(|w| w.contains("BOGUS")),
            "{made:?}"
        );

        let client = replay(dir, &["submit_unknown_flag_refused"]).await;
        let err = client.submit_job(&submit_request()).await.unwrap_err();
        assert!(matches!(err, SlurmError::InvalidPartition { .. }), "{err}");
        assert!(err.refuses_job() && !err.outcome_unknown(), "{err}");
    });
}

#[tokio::test]
async fn more_submits_and_their_errors() {
    for_each_release!(|dir| {
        let client = replay(dir, &["submit_no_cwd"]).await;
        let err = client.submit_job(&submit_request()).await.unwrap_err();
        assert!(matches!(err, SlurmError::Rejected { .. }), "{err}");
        assert_eq!(err.slurm_errno(), Some(2063), "{err}");
        assert!(err.to_string().contains("working directory"), "{err}");
        assert!(!err.is_transient());

        // The ids the submits returned are the jobs recorded later on.
        let client = replay(dir, &["submit_time_limit"]).await;
        let submitted = client.submit_job(&submit_request()).await.unwrap();
        assert_eq!(submitted.job_id, job_id_of(dir, "job_timeout"));
        let client = replay(dir, &["array_submit"]).await;
        let submitted = client.submit_job(&submit_request()).await.unwrap();
        assert_eq!(submitted.job_id, job_id_of(dir, "array_job"));
    });
}

#[tokio::test]
async fn array_job_records_pending_then_per_task() {
    for_each_release!(|dir| {
        let id = job_id_of(dir, "array_job");
        // Right after submit: one meta record for the whole array, no task yet.
        let client = replay(dir, &["array_job_pending"]).await;
        let pending = client.job(id).await.unwrap();
        assert_eq!(pending.len(), 1, "{pending:?}");
        assert_eq!(pending[0].state.base, JobBaseState::Pending);
        assert_eq!(pending[0].array_job_id, Some(id));
        assert_eq!(pending[0].array_task_id, None);
        assert_eq!(pending[0].array_task_string.as_deref(), Some("0-3"));
        // Once ended: one record per task, task 2 failed with exit code 1.
        let client = replay(dir, &["array_job"]).await;
        let mut tasks = client.job(id).await.unwrap();
        tasks.sort_by_key(|t| t.array_task_id);
        let ids: Vec<_> = tasks.iter().map(|t| t.array_task_id).collect();
        assert_eq!(ids, vec![Some(0), Some(1), Some(2), Some(3)]);
        assert!(tasks.iter().all(|t| t.array_job_id == Some(id)));
        for task in &tasks {
            let want = if task.array_task_id == Some(2) {
                (JobBaseState::Failed, Some(1))
            } else {
                (JobBaseState::Completed, Some(0))
            };
            let got = (
                task.state.base,
                task.exit.as_ref().and_then(|e| e.return_code),
            );
            assert_eq!(got, want, "{task:?}");
        }
    });
}

#[tokio::test]
async fn job_states_of_array_tasks() {
    for_each_release!(|dir| {
        // `?job_id={array}` answers one entry per task, as "<task record id>_<task>" strings.
        let array = job_id_of(dir, "array_job");
        let client = replay(dir, &["array_jobs_state"]).await;
        let mut states = client.jobs_state(&[array]).await.unwrap();
        states.sort_by_key(|s| s.array_task_id);
        // Each entry names the same record, task and state as `GET /job/{array}`.
        let client = replay(dir, &["array_job"]).await;
        let mut records = client.job(array).await.unwrap();
        records.sort_by_key(|r| r.array_task_id);
        let from_states: Vec<_> = states
            .iter()
            .map(|s| (s.job_id, s.array_task_id, s.state.base))
            .collect();
        let from_records: Vec<_> = records
            .iter()
            .map(|r| (r.job_id, r.array_task_id, r.state.base))
            .collect();
        assert_eq!(from_states, from_records);
        assert_eq!(from_states.len(), 4);
        assert!(from_states.iter().all(|(_, task, _)| task.is_some()));
    });
}

/// A slurmrestd without `/jobs/state/` (Slurm 23.11, 24.05: 404): the states come from `/jobs`,
/// each under its own record's id as `/jobs/state/` files them (`job_states_of_array_tasks`),
/// so the poller finds a task record it asks for by that id.
#[tokio::test]
async fn job_states_from_the_job_list_are_filed_under_each_record() {
    for_each_release!(|dir| {
        let server = replay_server(dir, &[("array_jobs", None)]).await;
        Mock::given(method("GET"))
            .and(path_regex("/jobs/state/?$"))
            .respond_with(
                ResponseTemplate::new(404)
                    .insert_header("content-type", "text/plain")
                    .set_body_string("Unable find requested URL"),
            )
            .mount(&server)
            .await;
        let client = client_for(&server, RetryPolicy::none());
        let records = client.jobs(None).await.unwrap().into_items().unwrap();
        let tasks: Vec<_> = records
            .iter()
            .filter(|r| r.array_job_id.is_some())
            .collect();
        assert!(tasks.len() >= 4, "{tasks:?}");
        let ids: Vec<u32> = tasks.iter().map(|t| t.job_id).collect();
        assert!(client.serves_job_states(), "not known otherwise yet");
        let mut states = client.jobs_state(&ids).await.unwrap();
        // Known now: the poller lists every job once a cycle instead of asking about some
        // several times, each read from the whole list.
        assert!(!client.serves_job_states());
        states.sort_by_key(|s| s.job_id);
        let mut want: Vec<_> = tasks
            .iter()
            .map(|t| (t.job_id, t.array_task_id, t.state.base))
            .collect();
        want.sort();
        let got: Vec<_> = states
            .iter()
            .map(|s| (s.job_id, s.array_task_id, s.state.base))
            .collect();
        assert_eq!(got, want);
        // By the array's id: every task, each under its own record, as `/jobs/state/` answers
        // (`job_states_of_array_tasks`).
        let array = tasks[0].array_job_id.unwrap();
        let mut by_array = client.jobs_state(&[array]).await.unwrap();
        by_array.sort_by_key(|s| s.job_id);
        let by_array: Vec<_> = by_array
            .iter()
            .map(|s| (s.job_id, s.array_task_id, s.state.base))
            .collect();
        let of_array: Vec<_> = want
            .iter()
            .copied()
            .filter(|(id, _, _)| {
                tasks
                    .iter()
                    .any(|t| t.job_id == *id && t.array_job_id == Some(array))
            })
            .collect();
        assert_eq!(by_array, of_array);
        assert!(by_array.len() >= 4, "{by_array:?}");
        assert_eq!(client.all_job_states().await.unwrap().len(), records.len());
    });
}

#[tokio::test]
async fn all_job_states_lists_every_job_and_each_pending_array_task() {
    // What the poller calls: `/jobs/state/` without ids, recorded with a held array 0-2 queued.
    for_each_release_with!("jobs_state_all", |dir| {
        let fixture = load(dir, "jobs_state_all");
        assert_eq!(fixture.request.query, None, "recorded without ids");
        let raw = fixture.body["jobs"].as_array().unwrap().len();
        let client = replay(dir, &["jobs_state_all"]).await;
        let states = client.all_job_states().await.unwrap();
        assert_eq!(states.len(), raw, "every entry kept: {states:?}");
        let tasks: Vec<_> = states
            .iter()
            .filter(|s| s.array_task_id.is_some())
            .collect();
        let array = tasks.first().expect("the held array's tasks").job_id;
        let mut held: Vec<_> = tasks
            .iter()
            .filter(|s| s.job_id == array)
            .map(|s| (s.array_task_id, s.state.base))
            .collect();
        held.sort();
        // The meta record once per task still to run, all under the array's own id.
        assert_eq!(
            held,
            vec![
                (Some(0), JobBaseState::Pending),
                (Some(1), JobBaseState::Pending),
                (Some(2), JobBaseState::Pending)
            ]
        );
        assert!(
            states
                .iter()
                .any(|s| s.array_task_id.is_none() && s.job_id != array),
            "plain jobs have no task: {states:?}"
        );
    });
}

#[tokio::test]
async fn jobs_state_in_the_specs_csv_form_is_a_typed_refusal() {
    // What slurmrestd answers to `?job_id=A,B` (the form the spec documents, which the client
    // therefore does not send): 422 with error 9000. Not an empty list, and not retried.
    for_each_release!(|dir| {
        let client = replay(dir, &["jobs_state_csv"]).await;
        let err = client.jobs_state(&[2, 7]).await.unwrap_err();
        assert!(
            matches!(err, SlurmError::Rejected { status: 422, .. }),
            "{err}"
        );
        assert_eq!(err.slurm_errno(), Some(9000), "{err}");
        assert!(!err.is_transient());
    });
}

#[tokio::test]
async fn jobs_at_the_end_of_the_recording_are_all_final() {
    for_each_release!(|dir| {
        let client = replay(dir, &["jobs_final"]).await;
        let jobs = client.jobs(None).await.unwrap().into_items().unwrap();
        assert!(jobs.iter().all(|j| j.state.is_final()), "{jobs:?}");
        let find = |id: u32| jobs.iter().find(|j| j.job_id == id).unwrap();
        assert_eq!(
            find(job_id_of(dir, "job_timeout")).state.base,
            JobBaseState::Timeout
        );
        assert_eq!(
            find(job_id_of(dir, "job_failed_exit3")).state.base,
            JobBaseState::Failed
        );
        let array = job_id_of(dir, "array_job");
        assert_eq!(
            jobs.iter()
                .filter(|j| j.array_job_id == Some(array))
                .count(),
            4
        );
    });
}

#[tokio::test]
async fn more_node_answers() {
    for_each_release!(|dir| {
        // Draining a node that runs a job is accepted (the job keeps running).
        let client = replay(dir, &["drain_busy"]).await;
        client
            .drain_node(&last_segment(dir, "drain_busy"), "fixture: drain busy")
            .await
            .unwrap();
        // Right after RESUME: no DRAIN any more, NOT_RESPONDING until slurmd registers again.
        let client = replay(dir, &["node_after_resume"]).await;
        let node = client
            .node(&last_segment(dir, "node_after_resume"))
            .await
            .unwrap();
        assert!(!node.state.is_drain(), "{}", node.state);
        assert!(node.state.is_not_responding(), "{}", node.state);
        // A deleted dynamic node answers like an unknown one: 200 without `nodes`.
        let name = last_segment(dir, "node_deleted");
        assert_eq!(name, last_segment(dir, "delete_node_ok"));
        let client = replay(dir, &["node_deleted"]).await;
        let err = client.node(&name).await.unwrap_err();
        assert!(
            matches!(&err, SlurmError::NotFound { kind: "node", name: n } if *n == name),
            "{err}"
        );
    });
}

#[tokio::test]
async fn cancel_pending_and_list_jobs_without_credentials() {
    for_each_release!(|dir| {
        let client = replay(dir, &["cancel_pending_ok"]).await;
        client
            .cancel_job(job_id_of(dir, "cancel_pending_ok"))
            .await
            .unwrap();
        // No auth headers: 401 text/plain for /jobs as for /diag.
        let client = replay(dir, &["auth_missing_jobs"]).await;
        let err = client.jobs(None).await.unwrap_err();
        assert!(
            matches!(err, SlurmError::Unauthorized { status: 401, .. }),
            "{err}"
        );
    });
}

/// A loopback listener that accepts connections and closes them at once, counting them: a
/// transport failure (no HTTP answer at all), not a Slurm.
struct Dropper {
    url: String,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
}

impl Dropper {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(stream);
            }
        });
        Self { url, accepted }
    }

    fn take(&self) -> usize {
        self.accepted.swap(0, std::sync::atomic::Ordering::SeqCst)
    }

    fn client(&self, retry: RetryPolicy) -> SlurmClient {
        let credentials = Arc::new(
            Credentials::minted(vec![1; 32], "slurm", std::time::Duration::from_secs(60)).unwrap(),
        );
        SlurmClient::new(
            ClientConfig::new(&self.url)
                .unwrap()
                .allow_plaintext(true)
                .with_api_version(Some(ApiVersion::V0_0_42))
                .with_retry(retry),
            credentials,
        )
        .unwrap()
    }
}

#[tokio::test]
async fn idempotent_calls_are_retried_with_bounded_backoff_and_submits_never() {
    use std::time::{Duration, Instant};
    let dropper = Dropper::start().await;
    let retry = RetryPolicy {
        max_retries: 3,
        min_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(150),
    };
    let client = dropper.client(retry);

    type Call<'a> = std::pin::Pin<Box<dyn Future<Output = Result<(), SlurmError>> + 'a>>;
    let idempotent: Vec<(&str, Call<'_>)> = vec![
        (
            "nodes",
            Box::pin(async { client.nodes(None).await.map(drop) }),
        ),
        ("job", Box::pin(async { client.job(5).await.map(drop) })),
        ("cancel_job", Box::pin(client.cancel_job(5))),
        ("drain_node", Box::pin(client.drain_node("n1", "x"))),
        ("delete_node", Box::pin(client.delete_node("dyn1"))),
    ];
    for (name, call) in idempotent {
        let started = Instant::now();
        let err = call.await.unwrap_err();
        let elapsed = started.elapsed();
        assert!(
            matches!(err, SlurmError::Unreachable { .. }),
            "{name}: {err}"
        );
        // One try and exactly max_retries more: bounded.
        assert_eq!(dropper.take(), 4, "{name}: attempts");
        // Backoff 50, 100, 150 (capped) ms; jitter only adds (at most as much again).
        assert!(
            elapsed >= Duration::from_millis(300),
            "{name}: retried without backing off ({elapsed:?})"
        );
        assert!(
            elapsed < Duration::from_secs(3),
            "{name}: backoff not bounded ({elapsed:?})"
        );
    }

    // A submit whose answer was lost may have created the job: one attempt, never repeated.
    let err = client.submit_job(&submit_request()).await.unwrap_err();
    assert!(matches!(err, SlurmError::Unreachable { .. }), "{err}");
    assert_eq!(dropper.take(), 1, "submit attempts");
    // The endpoint is named once (the admin's log), never with the request's path, and not at
    // all in what a tenant reads (a SlurmJob's Event or condition).
    let host = dropper.url.trim_start_matches("http://");
    let logged = slurm_operator::error_chain::Chain(&err).to_string();
    assert_eq!(logged.matches(host).count(), 1, "{logged}");
    assert!(!logged.contains("/slurm/"), "{logged}");
    let told = err.for_tenant();
    assert!(
        told.starts_with("cannot reach slurmrestd: ") && !told.contains(host),
        "{told}"
    );

    // No retries configured: one attempt for idempotent calls too.
    let client = dropper.client(RetryPolicy::none());
    client.nodes(None).await.unwrap_err();
    assert_eq!(dropper.take(), 1);
}

#[tokio::test]
async fn retries_are_jittered() {
    use std::time::{Duration, Instant};
    // With jitter the waits vary between runs; without it, six runs would take the same time
    // to within a few ms. One retry of 100 ms: each run takes 100..200 ms plus connects.
    let dropper = Dropper::start().await;
    let client = dropper.client(RetryPolicy {
        max_retries: 1,
        min_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(100),
    });
    let mut elapsed = Vec::new();
    for _ in 0..6 {
        let started = Instant::now();
        client.ping().await.unwrap_err();
        elapsed.push(started.elapsed());
        assert_eq!(dropper.take(), 2);
    }
    let (min, max) = (elapsed.iter().min().unwrap(), elapsed.iter().max().unwrap());
    assert!(*min >= Duration::from_millis(100), "{elapsed:?}");
    assert!(
        *max - *min > Duration::from_millis(15),
        "no jitter in the backoff: {elapsed:?}"
    );
}

#[tokio::test]
async fn slurm_errors_are_not_retried() {
    // Refusals with a Slurm error number, including a busy node (transient for the reconciler,
    // which requeues), are answered once even by a retrying client.
    let retry = RetryPolicy {
        max_retries: 3,
        min_delay: std::time::Duration::from_millis(10),
        max_delay: std::time::Duration::from_millis(20),
    };
    for_each_release!(|dir| {
        let server = replay_server(
            dir,
            &[("delete_node_busy", None), ("resume_not_drained", None)],
        )
        .await;
        let client = client_for(&server, retry);
        let busy = last_segment(dir, "delete_node_busy");
        let err = client.delete_node(&busy).await.unwrap_err();
        assert!(matches!(err, SlurmError::NodeBusy { .. }), "{err}");
        let err = client.resume_node("n1").await.unwrap_err();
        assert!(matches!(err, SlurmError::InvalidNodeState { .. }), "{err}");
        assert_eq!(server.received_requests().await.unwrap().len(), 2);
    });
}
