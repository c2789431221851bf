//! Mocked-API tests of the SlurmJob reconcile: each Kubernetes call asserted in order; Slurm is
//! the real local one (skipped, with a message, when it is not up).

use std::collections::BTreeMap;

use http::{Method, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};

use super::*;
use crate::controller::test_support::{ApiServerVerifier, Call, local_slurm};
use crate::crd::slurmjob::{Phase, SlurmJobSpec};
use crate::poller::PollerConfig;
use crate::registry::ConnectionSettings;
use crate::slurm::types::JobState;
use crate::slurm::{ClientConfig, Credentials, SlurmClient};

const NS: &str = "jobs";

fn slurm_job(name: &str, script: &str) -> SlurmJob {
    let spec: SlurmJobSpec = serde_json::from_value(json!({
        "clusterRef": "local",
        "script": script,
        "environment": {"PATH": "/usr/bin:/bin"},
    }))
    .unwrap();
    let mut job = SlurmJob::new(name, spec);
    job.metadata.namespace = Some(NS.into());
    job.metadata.uid = Some(format!("uid-{}", uuid::Uuid::new_v4()));
    job.metadata.generation = Some(1);
    job
}

fn finalized(mut job: SlurmJob) -> SlurmJob {
    job.metadata.finalizers = Some(vec![FINALIZER.into()]);
    job
}

fn data(ctx: Context) -> Arc<Data> {
    let (jobs, _writer) = reflector::store();
    Arc::new(Data { ctx, jobs })
}

fn job_path(job: &SlurmJob) -> String {
    format!(
        "/apis/slurm.rs/v1alpha1/namespaces/{NS}/slurmjobs/{}",
        job.name_any()
    )
}

fn respond(
    send: tower_test::mock::SendResponse<http::Response<Body>>,
    code: StatusCode,
    body: &Value,
) {
    send.send_response(
        http::Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap(),
    );
}

async fn expect_status_apply(api: &mut ApiServerVerifier, job: &SlurmJob) -> SlurmJobStatus {
    let (call, send) = api.next().await;
    assert_eq!(call.method, Method::PATCH, "{call:?}");
    assert_eq!(call.path, format!("{}/status", job_path(job)));
    assert_eq!(call.content_type, "application/apply-patch+yaml");
    assert!(call.has_query("fieldManager", FIELD_MANAGER), "{call:?}");
    assert!(call.has_query("force", "true"), "{call:?}");
    assert_eq!(call.body["kind"], "SlurmJob");
    assert!(call.body.get("spec").is_none());
    let status: SlurmJobStatus = serde_json::from_value(call.body["status"].clone()).unwrap();
    let mut answer = job.clone();
    answer.status = Some(status.clone());
    respond(
        send,
        StatusCode::OK,
        &serde_json::to_value(&answer).unwrap(),
    );
    status
}

async fn expect_event(
    api: &mut ApiServerVerifier,
    job: &SlurmJob,
    type_: &str,
    reason: &str,
) -> Call {
    let (call, send) = api.next().await;
    assert_eq!(call.method, Method::POST, "{call:?}");
    assert_eq!(
        call.path,
        format!("/apis/events.k8s.io/v1/namespaces/{NS}/events")
    );
    assert_eq!(call.body["type"], type_, "{:#}", call.body);
    assert_eq!(call.body["reason"], reason, "{:#}", call.body);
    assert_eq!(call.body["regarding"]["kind"], "SlurmJob");
    assert_eq!(call.body["regarding"]["name"], job.name_any());
    respond(send, StatusCode::CREATED, &call.body);
    call
}

async fn expect_finalizer_patch(api: &mut ApiServerVerifier, job: &SlurmJob, add: bool) {
    let (call, send) = api.next().await;
    assert_eq!(call.method, Method::PATCH, "{call:?}");
    assert_eq!(call.path, job_path(job));
    assert_eq!(call.content_type, "application/json-patch+json");
    let want = if add {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ])
    } else {
        json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": FINALIZER},
            {"op": "remove", "path": "/metadata/finalizers/0"},
        ])
    };
    assert_eq!(call.body, want);
    let mut answer = job.clone();
    answer.metadata.finalizers = add.then(|| vec![FINALIZER.to_owned()]);
    respond(
        send,
        StatusCode::OK,
        &serde_json::to_value(&answer).unwrap(),
    );
}

#[tokio::test]
async fn a_new_slurmjob_gets_the_finalizer_first() {
    let (ctx, mut api) = Context::test();
    let job = slurm_job("fresh", "#!/bin/sh\ntrue\n");
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_finalizer_patch(&mut api, &expected, true).await;
        api.expect_no_more_calls().await;
    });
    let action = reconcile(Arc::new(job), data(ctx)).await.unwrap();
    assert_eq!(action, Action::await_change());
    server.await.unwrap();
}

#[tokio::test]
async fn deleting_with_a_vanished_cluster_releases_the_finalizer_with_a_warning() {
    let (ctx, mut api) = Context::test();
    let mut job = finalized(slurm_job("orphan", "#!/bin/sh\nsleep 60\n"));
    job.metadata.deletion_timestamp = Some(crate::controller::cluster::status::now());
    job.status = Some(SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(4242),
        ..Default::default()
    });
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::GET);
        assert_eq!(
            call.path,
            format!("/apis/slurm.rs/v1alpha1/namespaces/{NS}/clusters/local")
        );
        respond(
            send,
            StatusCode::NOT_FOUND,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found", "metadata": {}}),
        );
        let event = expect_event(&mut api, &expected, "Warning", "CancelSkipped").await;
        assert!(
            event.body["note"]
                .as_str()
                .unwrap()
                .contains("Slurm job 4242"),
            "{:#}",
            event.body
        );
        expect_finalizer_patch(&mut api, &expected, false).await;
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(job), data(ctx)).await.unwrap();
    server.await.unwrap();
}

#[tokio::test]
async fn deleting_with_an_unregistered_but_existing_cluster_keeps_the_finalizer() {
    let (ctx, mut api) = Context::test();
    let mut job = finalized(slurm_job("waits", "#!/bin/sh\nsleep 60\n"));
    job.metadata.deletion_timestamp = Some(crate::controller::cluster::status::now());
    job.status = Some(SlurmJobStatus {
        phase: Phase::Submitted,
        job_id: Some(4243),
        ..Default::default()
    });
    let server = tokio::spawn(async move {
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::GET);
        respond(
            send,
            StatusCode::OK,
            &json!({
                "apiVersion": "slurm.rs/v1alpha1", "kind": "Cluster",
                "metadata": {"name": "local", "namespace": NS},
                "spec": {"endpoint": "http://127.0.0.1:1", "auth": {"tokenSecretRef": {"name": "t"}}}
            }),
        );
        api.expect_no_more_calls().await;
    });
    let error = reconcile(Arc::new(job), data(ctx)).await.unwrap_err();
    assert_eq!(error.category(), "ClusterNotReady");
    server.await.unwrap();
}

/// Register the local Slurm as Cluster `local` in `ctx` (real client, real poller) and wait
/// until its index has synced after the context was created.
async fn register_local(
    ctx: &Context,
    slurm: &std::collections::HashMap<String, String>,
) -> SlurmClient {
    let key = std::fs::read(&slurm["SLURM_JWT_KEY"]).unwrap();
    let credentials = Arc::new(
        Credentials::minted(key, slurm["SLURM_USER"].clone(), Duration::from_secs(300)).unwrap(),
    );
    let config = ClientConfig::new(&slurm["SLURM_REST_URL"]).unwrap();
    let cluster = ObjectRef::<Cluster>::new("local").within(NS);
    let settings = ConnectionSettings {
        fingerprint: "local".into(),
        poller: PollerConfig {
            interval: Duration::from_millis(300),
        },
    };
    let events = ctx.events.clone();
    let metrics = ctx.metrics.clone();
    let key_ref = cluster.clone();
    ctx.clusters
        .upsert(&cluster, config, settings, credentials, |client, poller| {
            crate::poller::spawn(key_ref, client, poller, events, metrics)
        })
        .unwrap();
    let handle = ctx.clusters.get(&cluster).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !drive::index_trusted(&handle.index.borrow(), ctx.started_at) {
        let state = handle.index.borrow().clone();
        assert!(
            Instant::now() < deadline,
            "the poller never synced the jobs: polls {} health {:?} total {} synced {:?}",
            state.polls,
            state.health,
            state.jobs_total,
            state.jobs_synced_at
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    handle.client
}

/// Submit against the real Slurm: the job id is written by SSA, then the Submitted Event; the
/// Slurm job carries the tag. Deleting it cancels the Slurm job, then removes the finalizer.
#[tokio::test]
async fn submit_then_delete_cancels_the_slurm_job() {
    let Some(slurm) = local_slurm() else { return };
    let (ctx, mut api) = Context::test();
    let client = register_local(&ctx, &slurm).await;
    let data = data(ctx);
    let mut job = finalized(slurm_job("mocked", "#!/bin/sh\nsleep 120\n"));
    job.spec.partition = Some(slurm["SLURM_PARTITION"].clone());
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let status = expect_status_apply(&mut api, &expected).await;
        expect_event(&mut api, &expected, "Normal", "Submitted").await;
        api.expect_no_more_calls().await;
        (status, api)
    });
    let action = reconcile(Arc::new(job.clone()), data.clone())
        .await
        .unwrap();
    let (status, mut api) = server.await.unwrap();
    assert_eq!(action, Action::requeue(RESYNC));
    assert_eq!(status.phase, Phase::Submitted);
    assert_eq!(status.submitted_generation, Some(1));
    assert_eq!(status.observed_generation, Some(1));
    let job_id = u32::try_from(status.job_id.expect("jobId written")).unwrap();
    assert!(condition::is_true(&status.conditions, drive::READY));
    let records = client.job(job_id).await.unwrap();
    assert_eq!(
        records[0].comment.as_deref(),
        Some(tag::tag(job.metadata.uid.as_deref().unwrap(), 1).as_str())
    );

    // A second reconcile before the status reached the cache: adopted from this process's
    // submissions, never submitted twice.
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let status = expect_status_apply(&mut api, &expected).await;
        api.expect_no_more_calls().await;
        (status, api)
    });
    reconcile(Arc::new(job.clone()), data.clone())
        .await
        .unwrap();
    let (again, mut api) = server.await.unwrap();
    assert_eq!(
        again.job_id,
        Some(i64::from(job_id)),
        "adopted, not resubmitted"
    );
    assert_eq!(
        condition::find(&again.conditions, drive::READY)
            .unwrap()
            .reason,
        "Adopted"
    );

    job.status = Some(status);
    job.metadata.deletion_timestamp = Some(crate::controller::cluster::status::now());
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let event = expect_event(&mut api, &expected, "Normal", "Cancelled").await;
        assert!(
            event.body["note"]
                .as_str()
                .unwrap()
                .contains(&job_id.to_string())
        );
        expect_finalizer_patch(&mut api, &expected, false).await;
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(job), data.clone()).await.unwrap();
    server.await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let records = client.job(job_id).await.unwrap();
        if records[0].state.base == JobState::from_strings(&["CANCELLED"]).base {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "job {job_id} not cancelled: {:?}",
            records[0].state
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        data.ctx.submissions.is_empty(),
        "forgotten after the delete"
    );
}

fn tagged_record(id: u32, comment: &str, states: &[&str]) -> crate::slurm::types::Job {
    crate::slurm::types::Job {
        job_id: id,
        name: String::new(),
        state: JobState::from_strings(states),
        state_reason: None,
        user_name: None,
        partition: None,
        comment: Some(comment.into()),
        nodes: None,
        node_count: None,
        exit: None,
        submit_time: None,
        start_time: None,
        end_time: None,
        time_limit: None,
        array_job_id: None,
        array_task_id: None,
        array_task_string: None,
        standard_output: None,
        standard_error: None,
        working_directory: None,
    }
}

#[test]
fn delete_cancels_every_unfinished_job_of_the_uid() {
    let uid = "u1";
    let state = ClusterState {
        jobs: Arc::new(BTreeMap::from([
            (1, tagged_record(1, &tag::tag(uid, 1), &["COMPLETED"])),
            (2, tagged_record(2, &tag::tag(uid, 2), &["RUNNING"])),
            (3, tagged_record(3, &tag::tag("other", 1), &["RUNNING"])),
        ])),
        ..Default::default()
    };
    let submissions = drive::Submissions::default();
    submissions.record(&tag::tag(uid, 3), 7);
    let status = SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(5),
        submitted_generation: Some(3),
        observed_generation: Some(3),
        ..Default::default()
    };
    assert_eq!(
        to_cancel(uid, &status, Some(&state), &submissions),
        vec![2, 5, 7]
    );
    let ended = SlurmJobStatus {
        phase: Phase::Completed,
        ..status
    };
    assert_eq!(
        to_cancel(uid, &ended, None, &drive::Submissions::default()),
        Vec::<u32>::new()
    );
}

#[test]
fn slurm_events_map_to_slurmjobs_by_uid_and_health_to_all_of_the_cluster() {
    let mut a = slurm_job("a", "#!/bin/sh\n");
    a.metadata.uid = Some("ua".into());
    let mut b = slurm_job("b", "#!/bin/sh\n");
    b.metadata.uid = Some("ub".into());
    b.spec.cluster_ref = "other".into();
    let jobs = vec![Arc::new(a.clone()), Arc::new(b)];
    let cluster = ObjectRef::<Cluster>::new("local").within(NS);
    let changed = SlurmEvent::JobChanged {
        cluster: cluster.clone(),
        job_id: 1,
        comment: Some(tag::tag("ua", 3)),
    };
    assert_eq!(targets(&changed, &jobs), vec![ObjectRef::from_obj(&a)]);
    let gone = SlurmEvent::JobGone {
        cluster: cluster.clone(),
        job_id: 1,
        comment: Some("someone else's".into()),
    };
    assert!(targets(&gone, &jobs).is_empty());
    let up = SlurmEvent::HealthChanged {
        cluster: cluster.clone(),
        up: true,
    };
    assert_eq!(targets(&up, &jobs), vec![ObjectRef::from_obj(&a)]);
    let down = SlurmEvent::HealthChanged { cluster, up: false };
    assert!(targets(&down, &jobs).is_empty());
}
