//! The slurmrestd facade end-to-end against the real local Slurm (`hack/slurm-up.sh`).
//!
//! Tests run in parallel against one Slurm with three 1-CPU nodes, so none of them assumes the
//! cluster is idle: jobs that must run somewhere particular are pinned, node tests use their own
//! dynamic node, and "nothing changed" checks allow a few attempts for other tests' jobs to settle.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;
use slurm_operator::slurm::types::{Changes, Job, JobBaseState};
use slurm_operator::slurm::{Credentials, SlurmClient, SlurmError};

const JOB_TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);

async fn job_of(client: &SlurmClient, job_id: u32) -> Job {
    let mut records = client.job(job_id).await.unwrap();
    assert_eq!(records.len(), 1, "one record for a plain job: {records:?}");
    records.remove(0)
}

async fn wait_state(
    client: &SlurmClient,
    job_id: u32,
    what: &str,
    pred: impl Fn(&Job) -> bool,
) -> Job {
    common::wait_for(what, JOB_TIMEOUT, POLL, || async {
        let job = job_of(client, job_id).await;
        pred(&job).then_some(job)
    })
    .await
}

async fn wait_final(client: &SlurmClient, job_id: u32) -> Job {
    wait_state(client, job_id, "the job to finish", |j| j.state.is_final()).await
}

#[tokio::test]
async fn cluster_info_reports_release_and_api_version() {
    let slurm = require_slurm!();
    let info = slurm.client().cluster_info().await.unwrap();
    assert_eq!(info.cluster_name, slurm.cluster_name);
    assert!(
        slurm.release.contains(&info.release),
        "release {} vs env {}",
        info.release,
        slurm.release
    );
    // The newest version this slurmrestd serves (24.11: v0.0.42; 26.05: v0.0.45).
    let newest = slurm.data_parsers.last().unwrap();
    assert_eq!(&info.api_version, newest);
    assert_eq!(info.data_parser, format!("data_parser/{newest}"));
    assert!(info.controller_responding);
    assert!(slurm.client().ping().await.unwrap());
}

/// hack/ starts trixie's slurmrestd with Slurm's default JSON form (pretty-printed) and forky's
/// compact (`SLURMRESTD_JSON`, as the slurm-cluster chart runs it), so that every test of this
/// file reads both. The form is what the env file says, and the facade decodes it.
#[tokio::test]
async fn slurmrestd_answers_in_the_json_form_it_was_started_with() {
    let slurm = require_slurm!();
    let newest = slurm.data_parsers.last().unwrap();
    let body = slurm.get_raw(&format!("/slurm/{newest}/nodes/")).await;
    // JSON escapes a newline inside a string: a line break is layout.
    let lines = body.trim_end().lines().count();
    match slurm.rest_json.as_str() {
        "pretty" => assert!(lines > 100, "{lines} lines: {body:.300}"),
        "compact" => assert_eq!(lines, 1, "{body:.300}"),
        other => panic!("SLURM_REST_JSON={other}: want pretty or compact"),
    }
    let Changes::Changed { items, .. } = slurm.client().nodes(None).await.unwrap() else {
        panic!("a first node list without `since` is a full one");
    };
    assert!(items.iter().any(|n| n.name == "n1"), "{items:?}");
}

#[tokio::test]
async fn nodes_partitions_and_one_node() {
    let slurm = require_slurm!();
    let client = slurm.client();
    let nodes = client
        .nodes(None)
        .await
        .unwrap()
        .into_items()
        .expect("a full listing");
    for name in ["n1", "n2", "n3"] {
        let node = nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("{name} in {nodes:?}"));
        assert_eq!(node.cpus, Some(1));
        assert!(node.partitions.contains(&slurm.partition), "{node:?}");
    }
    let n1 = client.node("n1").await.unwrap();
    assert_eq!(n1.name, "n1");
    assert_eq!(n1.address.as_deref(), Some("127.0.0.1"));
    let partitions = client.partitions().await.unwrap();
    let debug = partitions
        .iter()
        .find(|p| p.name == slurm.partition)
        .expect("the debug partition");
    assert!(debug.total_nodes.unwrap_or_default() >= 3, "{debug:?}");
    assert!(debug.state.iter().any(|s| s == "UP"), "{debug:?}");
}

/// A job whose name is not UTF-8 (Latin-1 `M\xfcller`, as `sbatch -J` stores it from a Latin-1
/// terminal): slurmrestd writes the byte as it is, which made the job's record and the whole
/// listing undecodable. The facade reads both, the byte replaced by U+FFFD.
#[tokio::test]
async fn a_job_named_in_latin1_is_read_with_a_replacement_character() {
    let slurm = require_slurm!();
    let client = slurm.client();
    let mut request = slurm.job(&common::unique("latin1"), "true");
    request.hold = true;
    let job_id = client.submit_job(&request).await.unwrap().job_id;
    slurm.rename_job_raw(job_id, b"latin1-M\xfcller");
    let job = client.job(job_id).await;
    let listing = client.jobs(None).await;
    client.cancel_job(job_id).await.unwrap();

    let records = job.unwrap();
    assert_eq!(records[0].name, "latin1-M\u{FFFD}ller");
    let Changes::Changed { items, .. } = listing.unwrap() else {
        panic!("a listing without `since` is a full one");
    };
    let listed = items.iter().find(|j| j.job_id == job_id).expect("listed");
    assert_eq!(listed.name, "latin1-M\u{FFFD}ller");
}

#[tokio::test]
async fn unknown_node_and_job_are_not_found() {
    let slurm = require_slurm!();
    let client = slurm.client();
    let err = client.node("no-such-node").await.unwrap_err();
    assert!(
        matches!(&err, SlurmError::NotFound { kind: "node", name } if name == "no-such-node"),
        "{err}"
    );
    let err = client.job(999_999).await.unwrap_err();
    assert!(
        matches!(&err, SlurmError::NotFound { kind: "job", .. }),
        "{err}"
    );
    let err = client.cancel_job(999_999).await.unwrap_err();
    assert!(
        matches!(&err, SlurmError::NotFound { kind: "job", .. }),
        "{err}"
    );
    let err = client.resume_node("no-such-node").await.unwrap_err();
    assert!(
        matches!(&err, SlurmError::NotFound { kind: "node", .. }),
        "{err}"
    );
}

#[tokio::test]
async fn a_path_slurmrestd_does_not_serve_is_unsupported_version() {
    // The real slurmrestd answers every path it does not route, an API version it does not serve
    // (`/slurm/v0.0.39/...` on 24.11) as much as this prefix, with 404 text/plain "Unable find
    // requested URL" and no Slurm error number. The client must call that an unsupported API,
    // for job and node paths too: "job gone" or "node deleted" would be acted upon.
    let slurm = require_slurm!();
    let config = slurm_operator::slurm::ClientConfig::new(&format!("{}/no-such-api", slurm.url))
        .unwrap()
        .allow_plaintext(true);
    let client = SlurmClient::new(config, slurm.credentials()).unwrap();
    let unsupported = |what: &str, err: SlurmError| {
        assert!(
            matches!(err, SlurmError::UnsupportedVersion { .. }),
            "{what}: {err}"
        );
    };
    unsupported("cluster_info", client.cluster_info().await.unwrap_err());
    unsupported("nodes", client.nodes(None).await.unwrap_err());
    unsupported("job", client.job(1).await.unwrap_err());
    unsupported("node", client.node("n1").await.unwrap_err());
    unsupported("cancel_job", client.cancel_job(999_999).await.unwrap_err());
    unsupported("all_job_states", client.all_job_states().await.unwrap_err());
    // The same slurmrestd at its real address serves its newest version.
    assert_eq!(
        slurm.client().cluster_info().await.unwrap().data_parser,
        format!("data_parser/{}", slurm.data_parsers.last().unwrap())
    );
}

#[tokio::test]
async fn submit_runs_to_completion_and_carries_its_tag() {
    let slurm = require_slurm!();
    let client = slurm.client();
    let tag = common::unique("tag");
    // Long enough that a 50 ms poll cannot miss RUNNING, however busy the cluster is.
    let mut request = slurm.job("complete", "echo hello; sleep 3");
    request.comment = Some(tag.clone());
    let submitted = client.submit_job(&request).await.unwrap();
    // Every distinct base state seen, in order, until the job is final.
    let seen: std::cell::RefCell<Vec<JobBaseState>> = Default::default();
    let done = common::wait_for(
        "the job to finish",
        JOB_TIMEOUT,
        Duration::from_millis(50),
        || async {
            let job = job_of(&client, submitted.job_id).await;
            let mut seen = seen.borrow_mut();
            if seen.last() != Some(&job.state.base) {
                seen.push(job.state.base);
            }
            job.state.is_final().then_some(job)
        },
    )
    .await;
    let seen = seen.into_inner();
    let after_pending: Vec<_> = seen
        .iter()
        .copied()
        .skip_while(|s| *s == JobBaseState::Pending)
        .collect();
    assert_eq!(
        after_pending,
        vec![JobBaseState::Running, JobBaseState::Completed],
        "states seen: {seen:?}"
    );
    assert_eq!(done.state.base, JobBaseState::Completed, "{done:?}");
    let exit = done.exit.clone().expect("an exit status");
    assert_eq!(exit.return_code, Some(0));
    assert_eq!(done.comment.as_deref(), Some(tag.as_str()));
    assert!(
        done.nodes.is_some() && done.start_time.is_some() && done.end_time.is_some(),
        "{done:?}"
    );
    assert!(done.submit_time <= done.start_time && done.start_time <= done.end_time);
}

#[tokio::test]
async fn exit_3_is_failed_with_exit_code_3() {
    let slurm = require_slurm!();
    let client = slurm.client();
    let submitted = client
        .submit_job(&slurm.job("exit3", "exit 3"))
        .await
        .unwrap();
    let done = wait_final(&client, submitted.job_id).await;
    assert_eq!(done.state.base, JobBaseState::Failed, "{done:?}");
    assert_eq!(
        done.exit.as_ref().and_then(|e| e.return_code),
        Some(3),
        "{done:?}"
    );
    assert_eq!(done.state_reason.as_deref(), Some("NonZeroExitCode"));
}

#[tokio::test]
async fn cancel_running_and_pending_jobs() {
    let slurm = require_slurm!();
    let client = slurm.client();
    let running = client
        .submit_job(&slurm.job("cancel-running", "sleep 300"))
        .await
        .unwrap();
    wait_state(&client, running.job_id, "RUNNING", |j| {
        j.state.base == JobBaseState::Running
    })
    .await;
    client.cancel_job(running.job_id).await.unwrap();
    let cancelled = wait_final(&client, running.job_id).await;
    assert_eq!(
        cancelled.state.base,
        JobBaseState::Cancelled,
        "{cancelled:?}"
    );
    // SIGTERM ends it. Slurm reports that as the signal, or, when the batch shell outlived its
    // child long enough to exit itself (a cancel in the second the job started), as the shell's
    // own 128 + 15.
    let exit = cancelled.exit.as_ref();
    let by_sigterm = (
        exit.and_then(|e| e.signal),
        exit.and_then(|e| e.return_code),
    );
    assert!(
        matches!(by_sigterm, (Some(15), _) | (None, Some(143))),
        "{cancelled:?}"
    );

    // A begin time an hour ahead keeps a job PENDING whatever the other tests do.
    let mut later = slurm.job("cancel-pending", "true");
    let begin = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    later
        .extra
        .insert("begin_time".into(), json!({"set": true, "number": begin}));
    let pending = client.submit_job(&later).await.unwrap();
    let job = job_of(&client, pending.job_id).await;
    assert_eq!(job.state.base, JobBaseState::Pending, "{job:?}");
    client.cancel_job(pending.job_id).await.unwrap();
    let cancelled = wait_final(&client, pending.job_id).await;
    assert_eq!(cancelled.state.base, JobBaseState::Cancelled);

    // Slurm answers 200 to cancelling a finished job; the facade says what happened.
    let err = client.cancel_job(pending.job_id).await.unwrap_err();
    assert!(
        matches!(err, SlurmError::AlreadyFinished { job_id } if job_id == pending.job_id),
        "{err}"
    );
}

/// A job of `slurm`'s user that stays PENDING an hour (a begin time ahead).
fn held(slurm: &common::LocalSlurm, name: &str) -> slurm_operator::slurm::types::SubmitRequest {
    let mut request = slurm.job(name, "true");
    let begin = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    request
        .extra
        .insert("begin_time".into(), json!({"set": true, "number": begin}));
    request
}

/// Once a client expects a Slurm cluster, an answer rendered for another one is refused
/// (`SlurmClusterChanged`), error answers included, as when its endpoint comes to reach another
/// cluster's slurmrestd (a DNS name moved): job ids and node names of that cluster are not read
/// as the first's, nor its refusals taken for the first's. From that answer on, no write is
/// sent (a cancel there would reach another cluster's job of that id) until the cluster is
/// confirmed again. `/diag` and `/ping`, which find out whom the endpoint serves, still answer.
/// The real local Slurm stands for "another": the client expects `elsewhere`.
#[tokio::test]
async fn answers_of_another_slurm_cluster_are_refused_once_one_is_expected() {
    let slurm = require_slurm!();
    let client = slurm.client();
    let first = client
        .submit_job(&held(&slurm, "other-cluster-1"))
        .await
        .unwrap();
    let made_elsewhere = common::unique("other-cluster-2");

    client.expect_cluster("elsewhere");
    // The first write after it goes out (nothing said otherwise yet); its answer is refused,
    // so whether it did anything is unknown here (the job it made is not followed).
    let error = client
        .submit_job(&held(&slurm, &made_elsewhere))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, SlurmError::OtherCluster { .. }),
        "{error:?}"
    );
    assert!(error.outcome_unknown());
    // From then on, writes are not sent: provably nothing done, and it lifts by itself.
    let held_write = client.cancel_job(first.job_id).await.unwrap_err();
    assert!(
        matches!(&held_write, SlurmError::WritesHeld { expected, served, .. }
            if expected == "elsewhere" && *served == slurm.cluster_name),
        "{held_write:?}"
    );
    assert!(!held_write.outcome_unknown() && held_write.is_transient());
    assert_eq!(held_write.category(), "SlurmClusterChanged");

    let as_user = client.as_user(&slurm.user).unwrap();
    let refused = [
        client.jobs_state(&[first.job_id]).await.err(),
        client.job(first.job_id).await.err(),
        // An error answer (no such job) is that cluster's word too.
        client.job(999_999).await.err(),
        client.nodes(None).await.err(),
        client.partitions().await.err(),
        // Clones and clients acting as a user expect what their client expects.
        client.clone().jobs_state(&[first.job_id]).await.err(),
        as_user.jobs_state(&[first.job_id]).await.err(),
    ];
    for error in refused {
        let error = error.expect("an answer of another Slurm cluster is refused");
        assert!(
            matches!(&error, SlurmError::OtherCluster { expected, served, .. }
                if expected == "elsewhere" && *served == slurm.cluster_name),
            "{error:?}"
        );
        assert_eq!(error.category(), "SlurmClusterChanged");
        let tenant = error.for_tenant();
        assert!(
            !tenant.contains("elsewhere") && !tenant.contains(&slurm.cluster_name),
            "cluster names are the platform's: {tenant}"
        );
    }
    let info = client.cluster_info().await.unwrap();
    assert_eq!(info.cluster_name, slurm.cluster_name);
    assert!(client.ping().await.unwrap(), "a controller answers");

    // Confirmed to be this cluster: its answers are read, and writes go out, again. The
    // cancel held above was not sent: the job still waits.
    client.expect_cluster(&slurm.cluster_name);
    let states = client.jobs_state(&[first.job_id]).await.unwrap();
    assert_eq!(states.len(), 1, "{states:?}");
    assert_eq!(states[0].state.base, JobBaseState::Pending, "{states:?}");
    let second = match client.jobs(None).await.unwrap() {
        Changes::Changed { items, .. } => items
            .into_iter()
            .find(|job| job.name == made_elsewhere)
            .expect("the refused submit's job was made"),
        Changes::Unchanged => panic!("a full listing is never unchanged"),
    };
    for id in [first.job_id, second.job_id] {
        client.cancel_job(id).await.unwrap();
    }
}

#[tokio::test]
async fn jobs_state_follows_several_jobs_in_one_request() {
    let slurm = require_slurm!();
    let client = slurm.client();
    let ok = client
        .submit_job(&slurm.job("state-ok", "true"))
        .await
        .unwrap();
    let bad = client
        .submit_job(&slurm.job("state-bad", "exit 1"))
        .await
        .unwrap();
    wait_final(&client, ok.job_id).await;
    wait_final(&client, bad.job_id).await;
    let states = client
        .jobs_state(&[ok.job_id, bad.job_id, 999_998])
        .await
        .unwrap();
    let state_of = |id| states.iter().find(|s| s.job_id == id).map(|s| s.state.base);
    assert_eq!(
        state_of(ok.job_id),
        Some(JobBaseState::Completed),
        "{states:?}"
    );
    assert_eq!(
        state_of(bad.job_id),
        Some(JobBaseState::Failed),
        "{states:?}"
    );
    assert_eq!(states.len(), 2, "unknown ids are left out: {states:?}");
    assert!(client.jobs_state(&[]).await.unwrap().is_empty());
}

#[tokio::test]
async fn bad_submits_get_typed_errors() {
    let slurm = require_slurm!();
    let client = slurm.client();
    let mut wrong_partition = slurm.job("bad-partition", "true");
    wrong_partition.partition = Some("no-such-partition".into());
    let err = client.submit_job(&wrong_partition).await.unwrap_err();
    assert!(matches!(err, SlurmError::InvalidPartition { .. }), "{err}");
    // slurmrestd's own words, from its JSON answer, reach the error (a foreign body's do not:
    // tests/security.rs `errors_never_carry_a_foreign_body`).
    assert!(
        err.to_string().contains("Invalid partition name specified"),
        "{err}"
    );

    let mut wrong_feature = slurm.job("bad-feature", "true");
    wrong_feature.constraints = Some("no-such-feature".into());
    let err = client.submit_job(&wrong_feature).await.unwrap_err();
    assert!(matches!(err, SlurmError::InvalidFeature { .. }), "{err}");
    assert!(
        err.to_string().contains("Invalid feature specification"),
        "{err}"
    );

    let mut unknown_field = slurm.job("bad-extra", "true");
    unknown_field
        .extra
        .insert("no_such_option".into(), json!(1));
    let err = client.submit_job(&unknown_field).await.unwrap_err();
    assert!(
        matches!(&err, SlurmError::InvalidRequest { detail } if detail.contains("no_such_option")),
        "{err}"
    );

    // A value slurmrestd's parser refuses without a number of its own (-1, its source the
    // value's path): no job was made, and the same submit is always refused. Before, such a
    // SlurmJob waited for a listing, searched accounting and submitted again, for ever.
    let mut bad_value = slurm.job("bad-cpu-frequency", "true");
    bad_value
        .extra
        .insert("cpu_frequency".into(), json!("bogus"));
    let err = client.submit_job(&bad_value).await.unwrap_err();
    assert_eq!(err.slurm_errno(), Some(-1), "{err}");
    assert!(err.refuses_job(), "{err}");
    assert!(!err.outcome_unknown(), "{err}");
    assert!(err.to_string().contains("cpu_frequency"), "{err}");

    // slurmrestd's parser answers some of its errors with the job made all the same (an
    // unknown flag, 9207): the submit's result is that job, the error a warning. Before, it
    // was an error, and the job was found only by its tag a listing later.
    let mut bad_flag = slurm.job("bad-mail-type", "true");
    bad_flag.hold = true;
    bad_flag.extra.insert("mail_type".into(), json!(["BOGUS"]));
    let made = client.submit_job(&bad_flag).await.unwrap();
    assert!(
        made.warnings.iter().any(|w| w.contains("BOGUS")),
        "{made:?}"
    );
    let job = job_of(&client, made.job_id).await;
    assert_eq!(job.name, "bad-mail-type", "{job:?}");
    client.cancel_job(made.job_id).await.unwrap();
}

#[tokio::test]
async fn bad_tokens_are_unauthorized_expired_ones_refused_and_minted_ones_work() {
    let slurm = require_slurm!();
    let garbage = Arc::new(Credentials::token("not-a-jwt", Some(slurm.user.clone())).unwrap());
    let client = SlurmClient::new(slurm.config(), garbage).unwrap();
    let err = client.cluster_info().await.unwrap_err();
    assert!(matches!(err, SlurmError::Unauthorized { .. }), "{err}");
    let err = client.partitions().await.unwrap_err();
    assert!(matches!(err, SlurmError::Unauthorized { .. }), "{err}");

    // A token minted with the right key an hour ago, valid for 15 minutes: expired.
    let key = slurm.key();
    let minted = Credentials::minted(key.clone(), &slurm.user, Duration::from_secs(900)).unwrap();
    let expired = minted
        .token_at(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    let expired = secrecy::ExposeSecret::expose_secret(&expired).to_owned();
    let client = SlurmClient::new(
        slurm.config(),
        Arc::new(Credentials::token(expired, None).unwrap()),
    )
    .unwrap();
    // Refused from its exp claim before it is sent (slurmrestd would answer 401/511).
    let err = client.nodes(None).await.unwrap_err();
    assert!(
        matches!(
            err,
            SlurmError::Credentials(slurm_operator::slurm::auth::AuthError::TokenExpired { .. })
        ),
        "{err}"
    );

    // A token signed with another key.
    let other = Credentials::minted(vec![7; 32], &slurm.user, Duration::from_secs(300)).unwrap();
    let err = SlurmClient::new(slurm.config(), Arc::new(other))
        .unwrap()
        .cluster_info()
        .await
        .unwrap_err();
    assert!(matches!(err, SlurmError::Unauthorized { .. }), "{err}");

    // The same client recovers when its credentials are swapped: rotation needs no rebuild.
    client.set_credentials(slurm.credentials());
    assert!(client.nodes(None).await.is_ok());

    // A ready token without the user header works too (the token names the user).
    let fresh = minted.token_at(SystemTime::now()).unwrap();
    let fresh = secrecy::ExposeSecret::expose_secret(&fresh).to_owned();
    let client = SlurmClient::new(
        slurm.config(),
        Arc::new(Credentials::token(fresh, None).unwrap()),
    )
    .unwrap();
    client.cluster_info().await.unwrap();
}

#[tokio::test]
async fn unreachable_endpoint_is_a_typed_error() {
    let slurm = require_slurm!();
    // Port 9 (discard) on loopback: nothing listens there.
    let config = slurm_operator::slurm::ClientConfig::new("http://127.0.0.1:9")
        .unwrap()
        .allow_plaintext(true)
        .with_retry(slurm_operator::slurm::RetryPolicy::none());
    let err = SlurmClient::new(config, slurm.credentials())
        .unwrap()
        .cluster_info()
        .await
        .unwrap_err();
    assert!(matches!(err, SlurmError::Unreachable { .. }), "{err}");
    assert!(err.is_transient());
}

#[tokio::test]
async fn incremental_lists_report_unchanged_when_nothing_changed() {
    let slurm = require_slurm!();
    let client = slurm.client();
    // Other tests' jobs change state while this runs: allow a few rounds for a quiet second.
    let mut attempts = Vec::new();
    for _ in 0..20 {
        let Changes::Changed { as_of, .. } = client.jobs(None).await.unwrap() else {
            panic!("a full listing without update_time");
        };
        assert!(as_of > 0);
        let again = client.jobs(Some(as_of)).await.unwrap();
        let quiet = matches!(again, Changes::Unchanged);
        attempts.push(quiet);
        if quiet {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        attempts.last(),
        Some(&true),
        "jobs never reported unchanged: {attempts:?}"
    );

    let mut attempts = Vec::new();
    for _ in 0..20 {
        let Changes::Changed { as_of, items } = client.nodes(None).await.unwrap() else {
            panic!("a full listing without update_time");
        };
        assert!(!items.is_empty() && as_of > 0);
        let quiet = matches!(client.nodes(Some(as_of)).await.unwrap(), Changes::Unchanged);
        attempts.push(quiet);
        if quiet {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        attempts.last(),
        Some(&true),
        "nodes never reported unchanged: {attempts:?}"
    );
}

/// Drain a node under a running job: ALLOCATED+DRAIN (draining), then IDLE+DRAIN (drained) when
/// the job ends, then RESUME. Uses its own dynamic node so other tests are not disturbed.
#[tokio::test]
async fn drain_with_running_job_then_drained_then_resume() {
    let slurm = require_slurm!();
    let client = slurm.client();
    let (stop, feature) = slurm.private_node("drain");
    let node = stop.name().to_owned();

    let mut request = slurm.job("drain-victim", "sleep 4");
    request.constraints = Some(feature.clone());
    let job = client.submit_job(&request).await.unwrap();
    wait_state(&client, job.job_id, "RUNNING", |j| {
        j.state.base == JobBaseState::Running
    })
    .await;

    client
        .drain_node(&node, "slurm-operator: integration test")
        .await
        .unwrap();
    let draining = client.node(&node).await.unwrap();
    assert!(draining.state.is_draining(), "{}", draining.state);
    assert_eq!(
        draining.reason.as_deref(),
        Some("slurm-operator: integration test")
    );

    let drained = common::wait_for("the node to be drained", JOB_TIMEOUT, POLL, || async {
        let n = client.node(&node).await.unwrap();
        n.state.is_drained().then_some(n)
    })
    .await;
    assert!(!drained.state.is_busy(), "{}", drained.state);
    assert_eq!(
        job_of(&client, job.job_id).await.state.base,
        JobBaseState::Completed,
        "the job was not killed"
    );

    client.resume_node(&node).await.unwrap();
    let resumed = client.node(&node).await.unwrap();
    assert!(!resumed.state.is_drain(), "{}", resumed.state);
    // RESUME on a node that is not drained is refused with a typed error.
    let err = client.resume_node(&node).await.unwrap_err();
    assert!(matches!(err, SlurmError::InvalidNodeState { .. }), "{err}");
    assert!(
        client.drain_node(&node, "  ").await.is_err(),
        "a drain needs a reason"
    );
}

/// A dynamic node running a job cannot be deleted (typed NodeBusy); once idle it can, and then
/// it is gone.
#[tokio::test]
async fn delete_busy_dynamic_node_then_idle() {
    let slurm = require_slurm!();
    let client = slurm.client();
    let node = common::unique("busy");
    let feature = node.replace('-', "");
    slurm.node_script(&[
        "start",
        &node,
        "--conf",
        &format!("CPUs=1 RealMemory=500 Feature={feature}"),
    ]);
    let _stop = common::NodeGuard::new(&slurm, &node);
    let registered = client.node(&node).await.unwrap();
    assert!(registered.state.is_dynamic(), "{}", registered.state);

    let mut request = slurm.job("busy-node", "sleep 3");
    request.constraints = Some(feature);
    let job = client.submit_job(&request).await.unwrap();
    wait_state(&client, job.job_id, "RUNNING", |j| {
        j.state.base == JobBaseState::Running
    })
    .await;

    let err = client.delete_node(&node).await.unwrap_err();
    assert!(
        matches!(&err, SlurmError::NodeBusy { node: n } if *n == node),
        "{err}"
    );

    wait_final(&client, job.job_id).await;
    common::wait_for(
        "the node to be deleted once idle",
        JOB_TIMEOUT,
        POLL,
        || async {
            match client.delete_node(&node).await {
                Ok(()) => Some(()),
                Err(SlurmError::NodeBusy { .. }) => None,
                Err(other) => panic!("unexpected error deleting {node}: {other}"),
            }
        },
    )
    .await;
    let err = client.node(&node).await.unwrap_err();
    assert!(matches!(err, SlurmError::NotFound { .. }), "{err}");
}

/// slurmdbd keeps what slurmctld drops after MinJobAge: the finished job by id and by name, with
/// its end state, exit code and the comment (our tag; `AccountingStoreFlags=job_comment`), and
/// slurmctld's submit time to the second (what tells a run's records from a reused id's where
/// slurmdbd stores no comments: `plan::accounting_ours`).
#[tokio::test]
async fn accounting_keeps_the_finished_job_with_its_tag() {
    let slurm = require_slurm!();
    let client = slurm.client();
    let tag = common::unique("acct-tag");
    let name = common::unique("acct");
    let mut request = slurm.job(&name, "exit 3");
    request.comment = Some(tag.clone());
    let submitted = client.submit_job(&request).await.unwrap();
    let in_slurmctld = client.job(submitted.job_id).await.unwrap();
    let submit_time = in_slurmctld[0].submit_time;
    assert!(submit_time.is_some(), "{in_slurmctld:?}");
    let record = common::wait_for(
        "accounting to record the job's end",
        JOB_TIMEOUT,
        Duration::from_millis(250),
        || async {
            let records = client
                .accounting_job(submitted.job_id)
                .await
                .unwrap()
                .expect("the local Slurm serves accounting");
            records.into_iter().find(|r| r.state.base.is_finished())
        },
    )
    .await;
    assert_eq!(record.job_id, submitted.job_id);
    assert_eq!(record.state.base, JobBaseState::Failed, "{record:?}");
    assert_eq!(record.exit.as_ref().and_then(|e| e.return_code), Some(3));
    assert_eq!(record.comment.as_deref(), Some(tag.as_str()));
    assert_eq!(record.submit_time, submit_time, "{record:?}");
    assert_eq!(record.name, name);
    assert!(
        record.start_time.is_some() && record.end_time.is_some(),
        "{record:?}"
    );
    assert!(record.nodes.is_some(), "{record:?}");

    let named_as = |since, user: Option<String>| {
        let client = client.clone();
        let name = name.clone();
        async move {
            client
                .accounting_jobs_named(&name, since, user.as_deref())
                .await
                .unwrap()
                .expect("the local Slurm serves accounting")
                .iter()
                .map(|r| r.job_id)
                .collect::<Vec<_>>()
        }
    };
    let named = |since| named_as(since, None);
    assert_eq!(
        named(None).await,
        vec![submitted.job_id],
        "the name filter returns exactly this job"
    );
    // As one Slurm user, chosen by slurmdbd: the job's own user finds it, another user does
    // not; a user slurmrestd cannot resolve (HTTP 422) is asked again for every user's jobs.
    let user = record.user_name.clone().expect("accounting names the user");
    assert_eq!(
        named_as(None, Some(user.clone())).await,
        vec![submitted.job_id]
    );
    let other = ["alice", "bob"]
        .into_iter()
        .find(|u| *u != user)
        .unwrap()
        .to_owned();
    assert!(
        named_as(None, Some(other.clone())).await.is_empty(),
        "{other}'s jobs of that name: none"
    );
    assert_eq!(
        named_as(None, Some("no-such-user-here".into())).await,
        vec![submitted.job_id]
    );
    // From a time on: a job that ended before it is left out, one that ended after it is not
    // (slurmdbd's `start_time`, what a SlurmJob's search begins at: `act::search_since`).
    let ended = record.end_time.unwrap();
    assert_eq!(
        named(Some(ended - chrono::TimeDelta::seconds(60))).await,
        vec![submitted.job_id]
    );
    assert!(
        named(Some(ended + chrono::TimeDelta::seconds(60)))
            .await
            .is_empty()
    );
    // An id slurmdbd never saw has no record (not an error).
    let none = client.accounting_job(999_999).await.unwrap();
    assert_eq!(none.map(|r| r.len()), Some(0));
}
