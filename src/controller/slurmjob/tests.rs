//! Mocked-API tests of the SlurmJob reconcile: each Kubernetes call asserted in order; Slurm is
//! the real local one (skipped, with a message, when it is not up).

use std::collections::BTreeMap;
use std::time::Instant;

use futures::channel::mpsc::UnboundedReceiver;
use http::{Method, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};

use super::*;
use crate::controller::kit::Backoffs;
use crate::controller::slurmjob::plan::to_cancel;
use crate::controller::slurmjob::status;
use crate::controller::slurmjob::submissions::{Doubt, Told};
use crate::controller::test_support::{ApiServerVerifier, Call, local_slurm};
use crate::crd::slurmjob::{Phase, RunOutput, SlurmJobSpec};
use crate::crd::{FIELD_MANAGER, FINALIZER};
use crate::slurm::tag::OwnerTag;
use crate::slurm::types::JobState;
use crate::slurm::{ClientConfig, Credentials, SlurmClient};
use crate::state::poller::PollerConfig;
use crate::state::registry::ConnectionSettings;

const NS: &str = "jobs";

fn slurm_job(name: &str, script: &str) -> SlurmJob {
    let spec: SlurmJobSpec = serde_json::from_value(json!({
        "clusterName": "local",
        "script": script,
        "environment": {"PATH": "/usr/bin:/bin"},
    }))
    .unwrap();
    let mut job = SlurmJob::new(name, spec);
    job.metadata.namespace = Some(NS.into());
    job.metadata.uid = Some(format!("uid-{}", uuid::Uuid::new_v4()));
    job.metadata.generation = Some(1);
    // Created now: after the test's operator started, so no predecessor's submit of it is
    // waited out (`act::takeover`).
    job.metadata.creation_timestamp = status::time(Some(Utc::now()));
    job
}

fn finalized(mut job: SlurmJob) -> SlurmJob {
    job.metadata.finalizers = Some(vec![FINALIZER.into()]);
    job
}

/// `Ready=Unknown/ClusterNotReady`: the SlurmCluster is not connected yet.
fn assert_cluster_not_ready(status: &SlurmJobStatus) {
    let ready = condition::find(&status.conditions, status::READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("Unknown", "ClusterNotReady")
    );
}

/// A job for the local Slurm's partition, held (begin time an hour ahead): one that started
/// between a test's reconciles would add a `Started` Event to the calls each one expects.
fn held_on_local(name: &str, slurm: &std::collections::HashMap<String, String>) -> SlurmJob {
    // A name of this run only: the local Slurm's accounting keeps earlier runs' jobs, which a
    // SlurmJob not fresh (created before the index's first listing) searches by name.
    let name = format!("{name}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mut job = slurm_job(&name, "#!/bin/sh\nsleep 120\n");
    job.spec.partition = Some(slurm["SLURM_PARTITION"].clone());
    let begin = chrono::Utc::now().timestamp() + 3600;
    job.spec.extra_options = Some(serde_json::Map::from_iter([(
        "begin_time".to_owned(),
        json!({"set": true, "number": begin}),
    )]));
    job
}

/// The SlurmJob controller's context: SlurmCluster `local` grants namespace [`NS`] to the local
/// Slurm's own user (named explicitly, as it must be).
fn data(ctx: Context) -> Arc<JobContext> {
    data_waking(ctx).0
}

/// [`data`], and what it asks the controller to reconcile again (`JobContext::wake`).
fn data_waking(
    ctx: Context,
) -> (
    Arc<JobContext>,
    UnboundedReceiver<ObjectRef<CachedSlurmJob>>,
) {
    let user = local_slurm().map_or_else(|| "slurm".to_owned(), |s| s["SLURM_USER"].clone());
    let local = cluster_granting(
        json!([{"namespaces": [NS], "slurmUser": user, "allowClusterUser": true}]),
    );
    context_with_cluster(ctx, local)
}

/// The SlurmJob controller's context with SlurmCluster `local` granting `access`.
fn data_with_access(ctx: Context, access: Value) -> Arc<JobContext> {
    data_with_cluster(ctx, cluster_granting(access))
}

/// SlurmCluster `local` granting `access`.
fn cluster_granting(access: Value) -> SlurmCluster {
    serde_json::from_value(json!({
        "apiVersion": "slurm.rs/v1alpha1",
        "kind": "SlurmCluster",
        "metadata": {"name": "local"},
        "spec": {
            "endpoint": "http://127.0.0.1:1",
            "allowInsecureHttp": true,
            "auth": {"jwt": {"keySecretRef": {"name": "jwt"}}},
            "access": access,
        },
    }))
    .unwrap()
}

/// The SlurmJob controller's context with `local` in its SlurmCluster cache.
fn data_with_cluster(ctx: Context, local: SlurmCluster) -> Arc<JobContext> {
    context_with_cluster(ctx, local).0
}

/// [`data_with_cluster`], and the receiving end of its `wake`.
fn context_with_cluster(
    ctx: Context,
    local: SlurmCluster,
) -> (
    Arc<JobContext>,
    UnboundedReceiver<ObjectRef<CachedSlurmJob>>,
) {
    let (wake, woken) = futures::channel::mpsc::unbounded();
    let (jobs, _writer) = reflector::store();
    let (slurm_clusters, mut clusters) = reflector::store();
    // As the SlurmCluster controller connects it: at its spec's endpoint (the local Slurm's,
    // where a test registered that). A test that gives another endpoint keeps it.
    let mut local = local;
    if local.spec.endpoint == UNREACHABLE
        && let Some(handle) = ctx.clusters.get(&ObjectRef::from_obj(&local))
    {
        local.spec.endpoint = handle.client.endpoint().to_string();
    }
    clusters.apply_watcher_event(&watcher::Event::Apply(local));
    let (namespaces, _writer) = reflector::store();
    let data = Arc::new(JobContext {
        ctx,
        jobs,
        submissions: Arc::default(),
        status_writes: Arc::default(),
        taken_on: Arc::default(),
        told: Arc::default(),
        output_image: output::DEFAULT_IMAGE.to_owned(),
        output_pods: reflector::store().0,
        output_replacements: Arc::default(),
        slurm_clusters,
        namespaces,
        wake,
        dependents: Arc::default(),
    });
    (data, woken)
}

/// `data` whose SlurmJob cache holds `job`, as the controller's does for every SlurmJob it
/// reconciles (`error_policy` forgets the failures of one the cache no longer holds).
fn cached_in(data: &Arc<JobContext>, job: &SlurmJob) -> Arc<JobContext> {
    let (jobs, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Apply(
        CachedSlurmJob::new(job.clone()).unwrap(),
    ));
    Arc::new(JobContext {
        ctx: data.ctx.clone(),
        jobs,
        submissions: Arc::clone(&data.submissions),
        status_writes: Arc::clone(&data.status_writes),
        taken_on: Arc::clone(&data.taken_on),
        told: Arc::clone(&data.told),
        output_image: data.output_image.clone(),
        output_pods: data.output_pods.clone(),
        output_replacements: Arc::clone(&data.output_replacements),
        slurm_clusters: data.slurm_clusters.clone(),
        namespaces: data.namespaces.clone(),
        wake: data.wake.clone(),
        dependents: Arc::clone(&data.dependents),
    })
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

/// The object as the controller's cache holds it: no script, environment or extraOptions.
fn cached(job: &SlurmJob) -> SlurmJob {
    CachedSlurmJob::new(job.clone()).unwrap().object().unwrap()
}

/// The read of the whole SlurmJob right before a submit (the cache holds no script), answered
/// with `stored`.
async fn expect_get_job(api: &mut ApiServerVerifier, stored: &SlurmJob) {
    let (call, send) = api.next().await;
    assert_eq!(call.method, Method::GET, "{call:?}");
    assert_eq!(call.path, job_path(stored));
    respond(send, StatusCode::OK, &serde_json::to_value(stored).unwrap());
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

/// The Warning a SlurmJob deleted without its cancel leaves on its (cluster-scoped) SlurmCluster,
/// in `default`: the SlurmJob's own namespace may be refusing Events.
/// A Warning on SlurmCluster `local`: its body.
async fn expect_cluster_event(api: &mut ApiServerVerifier, reason: &str) -> serde_json::Value {
    let (call, send) = api.next().await;
    assert_eq!(call.method, Method::POST, "{call:?}");
    assert_eq!(
        call.path,
        "/apis/events.k8s.io/v1/namespaces/default/events"
    );
    assert_eq!(call.body["type"], "Warning", "{:#}", call.body);
    assert_eq!(call.body["reason"], reason, "{:#}", call.body);
    assert_eq!(call.body["regarding"]["kind"], "SlurmCluster");
    assert_eq!(call.body["regarding"]["name"], "local");
    respond(send, StatusCode::CREATED, &call.body);
    call.body
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

/// A new SlurmJob gets the finalizer first, and the same reconcile goes on with the patch's
/// answer: here the SlurmCluster is not connected yet, which the status then says.
#[tokio::test]
async fn a_new_slurmjob_gets_the_finalizer_first() {
    let (ctx, mut api) = Context::test();
    let job = slurm_job("fresh", "#!/bin/sh\ntrue\n");
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_finalizer_patch(&mut api, &expected, true).await;
        let status = expect_status_apply(&mut api, &expected).await;
        api.expect_no_more_calls().await;
        status
    });
    let error = reconcile(Arc::new(cached(&job)), data(ctx))
        .await
        .unwrap_err();
    assert_eq!(error.category(), "ClusterNotReady");
    let status = server.await.unwrap();
    assert_cluster_not_ready(&status);
}

/// A SlurmJob with more finalizers than the cache keeps (a tenant's thousands) is cached with
/// only the operator's (none here), and its reconcile reads it first: the finalizer patch
/// `test`s the list as it is, which the cache no longer holds. The reconcile then goes on as
/// any (here: the cluster is not connected yet).
#[tokio::test]
async fn a_slurmjob_with_more_finalizers_than_the_cache_keeps_is_read_first() {
    let (ctx, mut api) = Context::test();
    let mut job = slurm_job("held", "#!/bin/sh\ntrue\n");
    let many: Vec<String> = (0..100).map(|i| format!("example.org/hold-{i}")).collect();
    job.metadata.finalizers = Some(many.clone());
    let stored = job.clone();
    let server = tokio::spawn(async move {
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::GET, "{call:?}");
        assert_eq!(call.path, job_path(&stored));
        respond(
            send,
            StatusCode::OK,
            &serde_json::to_value(&stored).unwrap(),
        );
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::PATCH, "{call:?}");
        assert_eq!(
            call.body,
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": many},
                {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
            ])
        );
        let mut answer = stored.clone();
        answer.metadata.finalizers = Some([many, vec![FINALIZER.to_owned()]].concat());
        respond(
            send,
            StatusCode::OK,
            &serde_json::to_value(&answer).unwrap(),
        );
        let status = expect_status_apply(&mut api, &stored).await;
        api.expect_no_more_calls().await;
        status
    });
    let cached = CachedSlurmJob::new(job).unwrap();
    assert!(cached.finalizers_cut());
    assert_eq!(cached.meta().finalizers, Some(vec![]));
    let error = reconcile_cached(Arc::new(cached), data(ctx))
        .await
        .unwrap_err();
    assert_eq!(error.category(), "ClusterNotReady");
    assert_cluster_not_ready(&server.await.unwrap());
}

/// The first reconcile of a new SlurmJob, which submits it: exactly one finalizer patch, one
/// status write and one Event (`event`: its type and reason). Returns its action, the status
/// written and the API server for what follows.
async fn submit_reconcile(
    mut api: ApiServerVerifier,
    job: &SlurmJob,
    data: &Arc<JobContext>,
    (kind, reason): (&'static str, &'static str),
) -> (Action, SlurmJobStatus, ApiServerVerifier) {
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_finalizer_patch(&mut api, &expected, true).await;
        let status = expect_status_apply(&mut api, &expected).await;
        expect_event(&mut api, &expected, kind, reason).await;
        api.expect_no_more_calls().await;
        (status, api)
    });
    let action = reconcile(Arc::new(cached(job)), data.clone())
        .await
        .unwrap();
    let (status, api) = server.await.unwrap();
    (action, status, api)
}

/// Against the real Slurm: the reconcile that adds the finalizer submits too, from the patch's
/// answer (the whole object; the cache holds no script), with no read of the spec: one
/// finalizer patch, one status write and the Submitted Event. A reconcile before the cache shows
/// that status write (the finalizer's change triggers one at once) writes nothing; one after it
/// finds nothing to write either.
#[tokio::test]
async fn a_new_slurmjob_is_submitted_by_the_reconcile_that_adds_its_finalizer() {
    let Some(slurm) = local_slurm() else { return };
    let (ctx, api) = Context::test();
    let client = register_local(&ctx, &slurm).await;
    let data = data(ctx);
    let job = held_on_local("fused", &slurm);
    let (action, status, mut api) =
        submit_reconcile(api, &job, &data, ("Normal", "Submitted")).await;
    assert_eq!(action, Action::requeue(RESYNC));
    assert_eq!(status.phase, Phase::Submitted);
    let job_id = u32::try_from(status.job_id.expect("jobId written")).unwrap();
    let records = client.job(job_id).await.unwrap();
    assert_eq!(
        records[0].ownership(&data.ctx.tag_key),
        crate::slurm::tag::Ownership::Proven
    );

    // The finalizer's change, before the status write reached the cache.
    let finalized_only = finalized(job.clone());
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
        api
    });
    let action = reconcile(Arc::new(cached(&finalized_only)), data.clone())
        .await
        .unwrap();
    let mut api = server.await.unwrap();
    assert_eq!(action, Action::requeue(CACHE_LAG_RETRY));
    assert_eq!(data.status_writes.len(), 1, "still waiting for the cache");

    // The status write's own change (its phase and job id trigger one more reconcile).
    let mut written = finalized_only;
    written.status = Some(status);
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(cached(&written)), data.clone())
        .await
        .unwrap();
    server.await.unwrap();
    assert!(
        data.status_writes.is_empty(),
        "forgotten once the cache shows it"
    );
    client.cancel_job(job_id).await.unwrap();
}

/// Against the real Slurm: a submit Slurm refuses (no such partition) in the reconcile that adds
/// the finalizer, then a reconcile before the cache shows the refusal (the finalizer's change
/// triggers one at once): it waits for the cache instead of submitting again (seen with the
/// operator binary in tests/lifecycle.rs, a second submit 7 ms after the first).
#[tokio::test]
async fn a_refused_submit_is_not_repeated_before_the_cache_shows_it() {
    let Some(slurm) = local_slurm() else { return };
    let (job, data, status, api) = refused_by_the_finalizers_reconcile("refused", &slurm).await;
    assert_eq!(status.rejected_generation, job.metadata.generation);
    assert_eq!(status.job_id, None);

    let action = reconcile_calling_nothing(&finalized(job.clone()), &data, api).await;
    assert_eq!(action, Action::requeue(CACHE_LAG_RETRY));
    assert_eq!(data.status_writes.len(), 1, "still waiting for the cache");
}

/// A SlurmJob (resourceVersion 7) of the local Slurm whose submit Slurm refuses (no such
/// partition), after the reconcile that gave it the finalizer, refused the submit and said so.
async fn refused_by_the_finalizers_reconcile(
    name: &str,
    slurm: &std::collections::HashMap<String, String>,
) -> (SlurmJob, Arc<JobContext>, SlurmJobStatus, ApiServerVerifier) {
    let (ctx, api) = Context::test();
    register_local(&ctx, slurm).await;
    let data = data(ctx);
    let mut job = held_on_local(name, slurm);
    job.metadata.resource_version = Some("7".into());
    job.spec.partition = Some("no-such-partition".into());
    let (_, status, api) =
        submit_reconcile(api, &job, &data, ("Warning", status::SUBMIT_REJECTED)).await;
    (job, data, status, api)
}

/// A reconcile of the cache's `job` that sends the API server nothing.
async fn reconcile_calling_nothing(
    job: &SlurmJob,
    data: &Arc<JobContext>,
    mut api: ApiServerVerifier,
) -> Action {
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
    });
    let action = reconcile(Arc::new(cached(job)), data.clone())
        .await
        .unwrap();
    server.await.unwrap();
    action
}

/// Against the real Slurm: the reconcile that adds the finalizer ends (here with a refused
/// submit; in a burst, often waiting for the namespace's search slot), and another reconcile of
/// the same version runs before the watch brings the patch back (a SlurmJob woken for a slot):
/// it waits for the cache instead of patching again, which the API server refuses (the patch
/// tests the finalizers it read) and counts as a write (seen in tests/api_writes.rs: 7
/// finalizer patches for 6 SlurmJobs, one `AddFinalizerFailed`).
#[tokio::test]
async fn a_finalizer_patch_is_not_repeated_before_the_cache_shows_it() {
    let Some(slurm) = local_slurm() else { return };
    let (job, data, _, api) = refused_by_the_finalizers_reconcile("patched", &slurm).await;
    // The version the finalizer was patched onto, without it: the cache lags.
    let action = reconcile_calling_nothing(&job, &data, api).await;
    assert_eq!(action, Action::requeue(CACHE_LAG_RETRY));
}

/// The submits the context's metrics counted against SlurmCluster `local` (any answer).
fn submits_counted(ctx: &Context) -> u64 {
    ctx.metrics
        .encode()
        .unwrap()
        .lines()
        .filter(|line| {
            line.starts_with("slurm_operator_slurmrestd_request_duration_seconds_count{")
        })
        .filter(|line| line.contains("operation=\"slurm_post_job_submit\""))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Against the real Slurm: a submit refused over a limit (the local Slurm's QoS that no job
/// fits) in the reconcile that adds the finalizer, then the reconcile the finalizer's change
/// triggers right after it, the refusal's status in the cache (its `Outcome` is unchanged, so
/// `StatusWrites` does not hold it back): it neither submits again nor touches the backoff, and
/// comes back when the backoff's first delay is over. Without this, each SlurmJob at a limit sent two submits
/// 10 ms apart (seen with the operator binary in tests/tenancy.rs).
#[tokio::test]
async fn a_submit_refused_over_a_limit_is_tried_again_only_after_the_backoff() {
    let Some(slurm) = local_slurm() else { return };
    let (ctx, api) = Context::test();
    register_local(&ctx, &slurm).await;
    let data = data(ctx);
    let mut job = held_on_local("capped", &slurm);
    let capped = slurm.get("SLURM_CAPPED_QOS").expect(
        "SLURM_CAPPED_QOS in the local Slurm's env file (an older hack/slurm-up.sh wrote it: \
         run it again)",
    );
    job.spec.qos = Some(capped.clone());
    let (action, status, mut api) =
        submit_reconcile(api, &job, &data, ("Warning", act::SUBMIT_LIMITED)).await;
    assert_eq!(
        action,
        Action::requeue(Backoffs::MIN),
        "the backoff's first delay"
    );
    assert_eq!(status.job_id, None);
    let ready = condition::find(&status.conditions, status::READY).unwrap();
    assert_eq!(ready.reason, act::SUBMIT_LIMITED, "{ready:?}");
    assert!(
        ready.message.contains("accounting/QOS policy"),
        "{}",
        ready.message
    );
    assert_eq!(submits_counted(&data.ctx), 1);
    let tag = OwnerTag::new(uid_of(&job), 1);
    let acting_since = data.ctx.acting_since();
    assert!(
        data.submissions.no_job_since(&tag, acting_since),
        "the refusal is recorded"
    );
    // As if the next reconcile came at once (it does, within milliseconds), whatever this
    // test's machine is busy with: the refusal's moment is set to now.
    data.submissions
        .record_no_job(&tag, acting_since, Instant::now());

    // The finalizer's change, run once the first reconcile has ended: the cache shows the
    // status write by then (the operator binary's case; one that does not yet waits for it).
    let mut written = finalized(job.clone());
    written.status = Some(status);
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
    });
    let action = reconcile(Arc::new(cached(&written)), data.clone())
        .await
        .unwrap();
    server.await.unwrap();
    // Come back within the backoff's first delay (what is left of it: `Submissions` tests).
    assert!(
        format!("{action:?}").contains("requeue_after: Some("),
        "{action:?}"
    );
    assert_ne!(action, Action::requeue(RESYNC));
    assert_eq!(submits_counted(&data.ctx), 1, "no second submit");
    assert_eq!(
        data.ctx.backoff.next(&backoff_key(&job)),
        Backoffs::MIN * 2,
        "the backoff went on from the refusal"
    );
}

/// An operator start reconciles every SlurmJob before the SlurmCluster's client is registered. A
/// finished one keeps its status untouched (no flip to Unknown and back) and waits quietly;
/// so does an unfinished one during `REGISTER_GRACE` after the start; after it, it says it waits
/// for the SlurmCluster and retries.
#[tokio::test]
async fn without_the_cluster_a_finished_job_keeps_its_status_an_active_one_waits() {
    let (ctx, mut api) = Context::test();
    let data = data(ctx);
    let mut done = finalized(slurm_job("done", "#!/bin/sh\ntrue\n"));
    done.status = Some(SlurmJobStatus {
        phase: Phase::Completed,
        job_id: Some(7),
        exit_code: Some(0),
        observed_generation: Some(1),
        submitted_generation: Some(1),
        ..Default::default()
    });
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
        api
    });
    let action = reconcile(Arc::new(done.clone()), data.clone())
        .await
        .unwrap();
    assert_eq!(action, Action::await_change());
    let mut api = server.await.unwrap();

    let mut running = done;
    running.status = Some(SlurmJobStatus {
        phase: Phase::Running,
        exit_code: None,
        ..running.status.clone().unwrap()
    });
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
        api
    });
    let action = reconcile(Arc::new(running.clone()), data.clone())
        .await
        .unwrap();
    let mut api = server.await.unwrap();
    // No write: back when what is left of the grace has passed, or when the cluster's first
    // poll says it is there.
    let waits = format!("{action:?}");
    assert!(waits.contains("requeue_after: Some("), "{waits}");
    *data.ctx.acting_since.lock().unwrap() =
        Utc::now() - chrono::TimeDelta::from_std(REGISTER_GRACE).unwrap();
    let expected = running.clone();
    let server = tokio::spawn(async move {
        let status = expect_status_apply(&mut api, &expected).await;
        api.expect_no_more_calls().await;
        status
    });
    let error = reconcile(Arc::new(running), data).await.unwrap_err();
    assert_eq!(error.category(), "ClusterNotReady");
    let status = server.await.unwrap();
    assert_eq!(status.phase, Phase::Running);
    assert_cluster_not_ready(&status);
}

/// A status computed for a SlurmJob that was deleted and made again under its name meanwhile
/// (its finalizer removed by hand) is not written once the cache shows the new one: a status
/// write is addressed by name, and the new SlurmJob would take the first one's job id for its
/// own. The same reconcile with the cache showing the first one writes it.
#[tokio::test]
async fn a_status_is_not_written_over_a_slurmjob_made_again_under_its_name() {
    let (ctx, mut api) = Context::test();
    *ctx.acting_since.lock().unwrap() =
        Utc::now() - chrono::TimeDelta::from_std(REGISTER_GRACE).unwrap();
    let mut first = finalized(slurm_job("again", "#!/bin/sh\ntrue\n"));
    first.status = Some(SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(7),
        observed_generation: Some(1),
        submitted_generation: Some(1),
        ..Default::default()
    });
    let second = finalized(slurm_job("again", "#!/bin/sh\ntrue\n"));
    assert_ne!(first.metadata.uid, second.metadata.uid);
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    writer.apply_watcher_event(&watcher::Event::InitApply(
        CachedSlurmJob::new(second).unwrap(),
    ));
    writer.apply_watcher_event(&watcher::Event::InitDone);
    ctx.slurmjobs
        .add(store, crate::controller::slurmjob::holding_cluster);
    ctx.slurmjobs.mark_listed();
    let data = data(ctx);

    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
        api
    });
    let error = reconcile(Arc::new(first.clone()), data.clone())
        .await
        .unwrap_err();
    let mut api = server.await.unwrap();
    assert!(
        matches!(&error, Error::Replaced { was, .. } if Some(was) == first.metadata.uid.as_ref()),
        "{error:?}"
    );
    assert_eq!(
        error_policy(Arc::new(first.clone()), &error, data.clone()),
        Action::await_change()
    );

    // The cache shows the first one: its status is written.
    writer.apply_watcher_event(&watcher::Event::Apply(
        CachedSlurmJob::new(first.clone()).unwrap(),
    ));
    let expected = first.clone();
    let server = tokio::spawn(async move {
        let status = expect_status_apply(&mut api, &expected).await;
        api.expect_no_more_calls().await;
        status
    });
    let error = reconcile(Arc::new(first), data).await.unwrap_err();
    assert_eq!(error.category(), "ClusterNotReady");
    assert_cluster_not_ready(&server.await.unwrap());
}

#[tokio::test]
async fn deleting_with_a_vanished_cluster_releases_the_finalizer_with_a_warning() {
    let (ctx, mut api) = Context::test();
    let mut job = finalized(slurm_job("orphan", "#!/bin/sh\nsleep 60\n"));
    job.metadata.deletion_timestamp = Some(crate::crd::condition::now());
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
            "/apis/slurm.rs/v1alpha1/slurmclusters/local".to_owned()
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

/// The SlurmCluster's answer to a GET: it exists.
fn cluster_found(send: tower_test::mock::SendResponse<http::Response<Body>>) {
    respond(
        send,
        StatusCode::OK,
        &json!({
            "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmCluster",
            "metadata": {"name": "local"},
            "spec": {"endpoint": "http://127.0.0.1:1", "auth": {"tokenSecretRef": {"name": "t"}}}
        }),
    );
}

/// The `DeletionBlocked` condition a blocked deletion writes, then its Warning.
async fn expect_blocked(api: &mut ApiServerVerifier, job: &SlurmJob, reason: &str) -> String {
    let status = expect_status_apply(api, job).await;
    let blocked = condition::find(&status.conditions, DELETION_BLOCKED).unwrap();
    assert_eq!(
        (blocked.status.as_str(), blocked.reason.as_str()),
        ("True", reason)
    );
    let event = expect_event(api, job, "Warning", DELETION_BLOCKED).await;
    assert_eq!(event.body["note"], blocked.message.as_str());
    blocked.message.clone()
}

#[tokio::test]
async fn deleting_with_an_unregistered_but_existing_cluster_keeps_the_finalizer_and_says_why() {
    let (ctx, mut api) = Context::test();
    let mut job = finalized(slurm_job("waits", "#!/bin/sh\nsleep 60\n"));
    job.metadata.deletion_timestamp = Some(crate::crd::condition::now());
    job.status = Some(SlurmJobStatus {
        phase: Phase::Submitted,
        job_id: Some(4243),
        ..Default::default()
    });
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::GET);
        cluster_found(send);
        let message = expect_blocked(&mut api, &expected, "ClusterNotConnected").await;
        api.expect_no_more_calls().await;
        message
    });
    let job = Arc::new(job);
    let data = data(ctx);
    let error = reconcile(job.clone(), data.clone()).await.unwrap_err();
    assert_eq!(error.category(), "DeletionBlocked");
    assert_eq!(
        error_policy(job.clone(), &error, cached_in(&data, &job)),
        Action::requeue(Backoffs::MIN)
    );
    let message = server.await.unwrap();
    for part in [
        "SlurmCluster \"local\" is not connected",
        "Slurm job 4243 not cancelled yet",
        "--deletion-deadline",
        "slurm.rs/skip-cancel=true",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
}

/// Past the deadline, a deletion that still cannot reach Slurm lets go with a Warning naming
/// the job that may still run.
#[tokio::test]
async fn past_the_deadline_a_blocked_deletion_lets_go_naming_the_job() {
    let (ctx, mut api) = Context::test();
    let mut job = finalized(slurm_job("late", "#!/bin/sh\nsleep 60\n"));
    let long_ago = Utc::now() - chrono::TimeDelta::hours(1);
    job.metadata.deletion_timestamp = status::time(Some(long_ago));
    job.status = Some(SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(4246),
        ..Default::default()
    });
    let data = data(ctx);
    *data.ctx.acting_since.lock().unwrap() = long_ago;
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::GET);
        cluster_found(send);
        let told = expect_cluster_event(&mut api, "CancelAbandoned").await;
        assert!(
            told["note"]
                .as_str()
                .unwrap()
                .starts_with(&format!("SlurmJob {NS}/late: ")),
            "{told}"
        );
        // A series of its own: another SlurmJob's would only count up this one's (kube's
        // Recorder keys a series on object, reason and action, not on the note).
        assert_eq!(told["action"], "Run4246", "{told}");
        let event = expect_event(&mut api, &expected, "Warning", "CancelAbandoned").await;
        let note = event.body["note"].as_str().unwrap().to_owned();
        expect_finalizer_patch(&mut api, &expected, false).await;
        api.expect_no_more_calls().await;
        note
    });
    reconcile(Arc::new(job), data).await.unwrap();
    let note = server.await.unwrap();
    assert!(note.contains("Slurm job 4246 may still run"), "{note}");
    assert!(note.contains("is not connected"), "{note}");
}

/// A replica that lost the Lease unseen (its renewal loop still says "leading": paused, its
/// renewals failing) reaches its own deadline first, counted from its own gain of the Lease:
/// it reads the Lease again before it lets go uncancelled, and keeps the finalizer for the
/// leader, whose deadline comes later and who may reach Slurm by then.
#[tokio::test]
async fn past_its_deadline_a_deposed_replica_keeps_the_finalizer() {
    let (mut ctx, mut api) = Context::test();
    let (leading, state) = tokio::sync::watch::channel(true);
    ctx.leadership = crate::leader::Leadership::with_lease(
        state,
        kube::Api::namespaced(ctx.client.clone(), "ops"),
        "lease",
        "a",
    );
    let mut job = finalized(slurm_job("late", "#!/bin/sh\nsleep 60\n"));
    let long_ago = Utc::now() - chrono::TimeDelta::hours(1);
    job.metadata.deletion_timestamp = status::time(Some(long_ago));
    job.status = Some(SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(4248),
        ..Default::default()
    });
    let data = data(ctx);
    *data.ctx.acting_since.lock().unwrap() = long_ago;
    let server = tokio::spawn(async move {
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::GET);
        cluster_found(send);
        let (call, send) = api.next().await;
        assert!(call.path.ends_with("/leases/lease"), "{call:?}");
        respond(
            send,
            StatusCode::OK,
            &json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "lease", "namespace": "ops"},
                "spec": {"holderIdentity": "b", "leaseDurationSeconds": 15,
                         "renewTime": Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)}
            }),
        );
        // No Warning, no finalizer patch.
        api.expect_no_more_calls().await;
    });
    let job = Arc::new(job);
    let error = reconcile(job.clone(), data.clone()).await.unwrap_err();
    assert!(matches!(error, Error::NotLeader), "{error:?}");
    server.await.unwrap();
    // Its own count still says "leading": the check is made again soon (nothing else would
    // bring the deletion back), and left to the next gain of the Lease once it says not.
    assert_eq!(
        error_policy(job.clone(), &error, cached_in(&data, &job)),
        Action::requeue(NOT_LEADER_RECHECK)
    );
    drop(leading);
    assert_eq!(
        error_policy(job.clone(), &error, cached_in(&data, &job)),
        Action::await_change()
    );
}

/// The deadline counts from this replica's start (or takeover) when that is later than the
/// deletion: an operator that was down first gets the whole deadline.
#[tokio::test]
async fn a_deletion_older_than_the_deadline_still_waits_after_a_start() {
    let (ctx, mut api) = Context::test();
    let mut job = finalized(slurm_job("restarted", "#!/bin/sh\nsleep 60\n"));
    job.metadata.deletion_timestamp = status::time(Some(Utc::now() - chrono::TimeDelta::hours(1)));
    job.status = Some(SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(4247),
        ..Default::default()
    });
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::GET);
        cluster_found(send);
        expect_blocked(&mut api, &expected, "ClusterNotConnected").await;
        api.expect_no_more_calls().await;
    });
    let error = reconcile(Arc::new(job), data(ctx)).await.unwrap_err();
    assert!(matches!(
        error,
        Error::DeletionBlocked {
            reason: "ClusterNotConnected",
            ..
        }
    ));
    server.await.unwrap();
}

/// A settled SlurmJob needs nothing from Slurm: no client, no read of its SlurmCluster, only the
/// finalizer's removal — also with the generation the deletion added.
#[tokio::test]
async fn deleting_a_settled_job_needs_nothing_from_slurm() {
    let (ctx, mut api) = Context::test();
    let mut job = finalized(slurm_job("settled", "#!/bin/sh\ntrue\n"));
    job.metadata.deletion_timestamp = Some(crate::crd::condition::now());
    job.metadata.generation = Some(2);
    job.status = Some(SlurmJobStatus {
        phase: Phase::Completed,
        job_id: Some(4248),
        exit_code: Some(0),
        observed_generation: Some(1),
        submitted_generation: Some(1),
        ..Default::default()
    });
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_finalizer_patch(&mut api, &expected, false).await;
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(job), data(ctx)).await.unwrap();
    server.await.unwrap();
}

/// Edited after its run ended, then deleted: the re-run's submit may have happened (its answer
/// lost to a crash), so it is not settled and waits for the cluster like a running one.
#[tokio::test]
async fn deleting_a_job_edited_after_its_end_is_not_settled() {
    let (ctx, mut api) = Context::test();
    let mut job = finalized(slurm_job("edited", "#!/bin/sh\ntrue\n"));
    job.metadata.deletion_timestamp = Some(crate::crd::condition::now());
    job.metadata.generation = Some(3);
    job.status = Some(SlurmJobStatus {
        phase: Phase::Completed,
        job_id: Some(4249),
        observed_generation: Some(1),
        submitted_generation: Some(1),
        ..Default::default()
    });
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::GET);
        cluster_found(send);
        let message = expect_blocked(&mut api, &expected, "ClusterNotConnected").await;
        api.expect_no_more_calls().await;
        message
    });
    reconcile(Arc::new(job), data(ctx)).await.unwrap_err();
    let message = server.await.unwrap();
    assert!(
        message.contains("no unfinished Slurm job of it is known yet"),
        "{message}"
    );
}

/// The skip-cancel annotation lets a deletion go at once, without a request to Slurm or a read
/// of the SlurmCluster, naming the job that may still run.
#[tokio::test]
async fn the_skip_cancel_annotation_lets_go_at_once() {
    let (ctx, mut api) = Context::test();
    let mut job = finalized(slurm_job("skipped", "#!/bin/sh\nsleep 60\n"));
    job.metadata.deletion_timestamp = Some(crate::crd::condition::now());
    job.metadata.annotations =
        Some([(SKIP_CANCEL_ANNOTATION.to_owned(), "true".to_owned())].into());
    job.status = Some(SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(4250),
        ..Default::default()
    });
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let told = expect_cluster_event(&mut api, "CancelSkipped").await;
        let note = told["note"].as_str().unwrap();
        assert!(note.contains("Slurm job 4250 may still run"), "{told}");
        assert_eq!(told["action"], "Run4250", "{told}");
        let event = expect_event(&mut api, &expected, "Warning", "CancelSkipped").await;
        let note = event.body["note"].as_str().unwrap().to_owned();
        expect_finalizer_patch(&mut api, &expected, false).await;
        api.expect_no_more_calls().await;
        note
    });
    reconcile(Arc::new(job), data(ctx)).await.unwrap();
    let note = server.await.unwrap();
    assert!(note.contains("Slurm job 4250 may still run"), "{note}");
    assert!(note.contains("slurm.rs/skip-cancel=true"), "{note}");

    // A SlurmJob that never ran (here: no status, as one refused `NoAccess` has no job) tells
    // only itself: a tenant cannot put Warnings on the SlurmCluster by deleting such ones.
    let (ctx, mut api) = Context::test();
    let mut job = finalized(slurm_job("never-ran", "#!/bin/sh\ntrue\n"));
    job.metadata.deletion_timestamp = Some(crate::crd::condition::now());
    job.metadata.annotations =
        Some([(SKIP_CANCEL_ANNOTATION.to_owned(), "true".to_owned())].into());
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_event(&mut api, &expected, "Warning", "CancelSkipped").await;
        expect_finalizer_patch(&mut api, &expected, false).await;
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(job), data(ctx)).await.unwrap();
    server.await.unwrap();
}

/// A namespace's skip-cancel deletions are told on the SlurmCluster (the admin's namespace) so
/// many times per window: the last says so, later ones tell only their SlurmJob. Not so for a
/// namespace being deleted, nor while the namespaces are not listed (it may be being deleted).
#[tokio::test]
async fn a_namespace_tells_the_slurm_cluster_so_many_orphans_per_window() {
    use crate::controller::kit::NamespaceBudget;
    let budget = Arc::new(NamespaceBudget::default());
    for _ in 1..NamespaceBudget::PER_WINDOW {
        budget.spend(NS, std::time::Instant::now());
    }
    let held = |name: &str, id: i64| {
        let mut job = finalized(slurm_job(name, "#!/bin/sh\nsleep 60\n"));
        job.metadata.deletion_timestamp = Some(crate::crd::condition::now());
        job.metadata.annotations =
            Some([(SKIP_CANCEL_ANNOTATION.to_owned(), "true".to_owned())].into());
        job.status = Some(SlurmJobStatus {
            phase: Phase::Pending,
            job_id: Some(id),
            ..Default::default()
        });
        job
    };
    // `data` whose namespace cache has listed NS (`deleting`: with a deletionTimestamp); its
    // writer, kept while the test runs.
    let listed = |ctx: Context, deleting: bool| {
        let (namespaces, mut writer) = reflector::store();
        let mut metadata = json!({"name": NS});
        if deleting {
            metadata["deletionTimestamp"] = json!("2026-12-06T10:00:00Z");
        }
        let ns = serde_json::from_value(json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": metadata,
        }))
        .unwrap();
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(ns),
            watcher::Event::InitDone,
        ] {
            writer.apply_watcher_event(&event);
        }
        let data = Arc::new(JobContext {
            namespaces,
            ..(*data(ctx)).clone()
        });
        (data, writer)
    };
    // Reconcile the deletion of `job` with `data`: the note of the SlurmCluster's Event, if
    // one is told.
    async fn deleted(
        job: SlurmJob,
        data: Arc<JobContext>,
        mut api: ApiServerVerifier,
        told: bool,
    ) -> Option<String> {
        let expected = job.clone();
        let server = tokio::spawn(async move {
            let note = if told {
                let event = expect_cluster_event(&mut api, "CancelSkipped").await;
                Some(event["note"].as_str().unwrap().to_owned())
            } else {
                None
            };
            let own = expect_event(&mut api, &expected, "Warning", "CancelSkipped").await;
            let id = expected.status.as_ref().unwrap().job_id.unwrap();
            let own = own.body["note"].as_str().unwrap().to_owned();
            assert!(
                own.contains(&format!("Slurm job {id} may still run")),
                "{own}"
            );
            expect_finalizer_patch(&mut api, &expected, false).await;
            api.expect_no_more_calls().await;
            note
        });
        reconcile(Arc::new(job), data).await.unwrap();
        server.await.unwrap()
    }
    let budgeted = || {
        let (mut ctx, api) = Context::test();
        ctx.cluster_events = Arc::clone(&budget);
        (ctx, api)
    };

    let (ctx, api) = budgeted();
    let (listed_data, _writer) = listed(ctx, false);
    let note = deleted(held("last-told", 4260), listed_data, api, true)
        .await
        .unwrap();
    assert!(
        note.starts_with(&format!(
            "SlurmJob {NS}/last-told: (the last of this namespace told here for "
        )),
        "{note}"
    );
    assert!(note.contains("Slurm job 4260 may still run"), "{note}");

    let (ctx, api) = budgeted();
    let (listed_data, _writer) = listed(ctx, false);
    assert_eq!(
        deleted(held("not-told", 4261), listed_data, api, false).await,
        None
    );

    // A namespace being deleted refuses the SlurmJob's own Event, and no SlurmJob can be made
    // in it: each of its orphans is told on the SlurmCluster, budget or not.
    let (ctx, api) = budgeted();
    let (listed_data, _writer) = listed(ctx, true);
    let note = deleted(held("in-deleted-namespace", 4262), listed_data, api, true)
        .await
        .unwrap();
    assert!(
        note.starts_with(&format!(
            "SlurmJob {NS}/in-deleted-namespace: deleted without"
        )),
        "{note}"
    );
    // Nor is it bounded before the namespaces are listed (a start during such a deletion).
    let (ctx, api) = budgeted();
    let note = deleted(held("not-listed-yet", 4263), data(ctx), api, true)
        .await
        .unwrap();
    assert!(
        note.starts_with(&format!("SlurmJob {NS}/not-listed-yet: deleted without")),
        "{note}"
    );
}

/// Register the local Slurm as SlurmCluster `local` in `ctx` (real client, real poller) and wait
/// until its index has synced after the context was created.
async fn register_local(
    ctx: &Context,
    slurm: &std::collections::HashMap<String, String>,
) -> SlurmClient {
    let key = std::fs::read(&slurm["SLURM_JWT_KEY"]).unwrap();
    let credentials = Arc::new(
        Credentials::minted(key, slurm["SLURM_USER"].clone(), Duration::from_secs(300)).unwrap(),
    );
    let config = ClientConfig::new(&slurm["SLURM_REST_URL"])
        .unwrap()
        .allow_plaintext(true);
    let cluster = ObjectRef::<SlurmCluster>::new("local");
    let settings = ConnectionSettings {
        fingerprint: "local".into(),
        poller: PollerConfig {
            interval: Duration::from_millis(300),
        },
    };
    let metrics = ctx.metrics.clone();
    let tag_key = ctx.tag_key.clone();
    ctx.clusters
        .upsert(
            &cluster,
            config,
            settings,
            credentials,
            |label, client, poller, events| {
                crate::state::poller::spawn(label, client, poller, tag_key, events, metrics)
            },
        )
        .unwrap();
    let handle = ctx.clusters.get(&cluster).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !plan::index_trusted(&handle.index.borrow(), ctx.started_at) {
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

/// The first reconcile of `job` (from the cache) on the local Slurm: it submits, writes the
/// status and announces `Submitted`. Returns its action, the status and the API server.
async fn submit_on_local(
    mut api: ApiServerVerifier,
    job: &SlurmJob,
    data: &Arc<JobContext>,
) -> (Action, SlurmJobStatus, ApiServerVerifier) {
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_get_job(&mut api, &expected).await;
        let status = expect_status_apply(&mut api, &expected).await;
        expect_event(&mut api, &expected, "Normal", "Submitted").await;
        api.expect_no_more_calls().await;
        (status, api)
    });
    // As the cache holds it: the script and options come from the read before the submit.
    let action = reconcile(Arc::new(cached(job)), data.clone())
        .await
        .unwrap();
    let (status, api) = server.await.unwrap();
    (action, status, api)
}

/// Until slurmctld says job `job_id` was cancelled (15 s at most).
async fn until_cancelled(client: &SlurmClient, job_id: u32) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let records = client.job(job_id).await.unwrap();
        if records[0].state.base == JobState::from_strings(&["CANCELLED"]).base {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "job {job_id} not cancelled: {:?}",
            records[0].state
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Submit against the real Slurm: the job id is written by SSA, then the Submitted Event; the
/// Slurm job carries the tag. Deleting it cancels the Slurm job, then removes the finalizer.
#[tokio::test]
async fn submit_then_delete_cancels_the_slurm_job() {
    let Some(slurm) = local_slurm() else { return };
    let (ctx, api) = Context::test();
    let client = register_local(&ctx, &slurm).await;
    let data = data(ctx);
    let mut job = finalized(held_on_local("mocked", &slurm));
    let (action, status, mut api) = submit_on_local(api, &job, &data).await;
    assert_eq!(action, Action::requeue(RESYNC));
    assert_eq!(status.phase, Phase::Submitted);
    assert_eq!(status.submitted_generation, Some(1));
    assert_eq!(status.observed_generation, Some(1));
    let job_id = u32::try_from(status.job_id.expect("jobId written")).unwrap();
    assert!(condition::is_true(&status.conditions, status::READY));
    let records = client.job(job_id).await.unwrap();
    // The tag is signed for the Slurm user the job runs as.
    let user = records[0].user_name.clone().unwrap();
    assert_eq!(
        records[0].comment.as_deref(),
        Some(
            data.ctx
                .tag_key
                .comment(
                    &OwnerTag::new(job.metadata.uid.as_deref().unwrap(), 1),
                    &user
                )
                .as_str()
        )
    );
    assert_eq!(
        records[0].ownership(&data.ctx.tag_key),
        crate::slurm::tag::Ownership::Proven
    );

    // A second reconcile before the status reached the cache, once the write is taken as lost
    // (until then it writes nothing: see the test of the fused submit above): adopted from this
    // process's submissions, never submitted twice.
    data.status_writes
        .forget_uid(job.metadata.uid.as_deref().unwrap());
    let expected = job.clone();
    let server = tokio::spawn(async move {
        // The whole spec, for what later edits are checked against.
        expect_get_job(&mut api, &expected).await;
        let status = expect_status_apply(&mut api, &expected).await;
        api.expect_no_more_calls().await;
        (status, api)
    });
    reconcile(Arc::new(cached(&job)), data.clone())
        .await
        .unwrap();
    let (again, mut api) = server.await.unwrap();
    assert_eq!(
        again.job_id,
        Some(i64::from(job_id)),
        "adopted, not resubmitted"
    );
    assert!(status.submitted_spec_hash.is_some());
    assert_eq!(
        again.submitted_spec_hash, status.submitted_spec_hash,
        "adopted with the spec it was submitted with"
    );
    assert_eq!(
        condition::find(&again.conditions, status::READY)
            .unwrap()
            .reason,
        "Adopted"
    );

    job.status = Some(status);
    job.metadata.deletion_timestamp = Some(crate::crd::condition::now());
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let event = expect_event(&mut api, &expected, "Normal", "Cancelled").await;
        let note = event.body["note"].as_str().unwrap();
        assert!(
            note.starts_with(&format!("Slurm job {job_id} cancelled")),
            "{note}"
        );
        expect_finalizer_patch(&mut api, &expected, false).await;
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(job), data.clone()).await.unwrap();
    server.await.unwrap();
    until_cancelled(&client, job_id).await;
    assert!(data.submissions.is_empty(), "forgotten after the delete");
}

/// Against the real Slurm: a deletion that must wait for the index (here a submit of the
/// SlurmJob's next generation got no answer, and only a listing of every job past it shows
/// whether it made a job) cancels the job it knows first, then waits for the rest. Before, the
/// known job ran on through the wait, and past the deletion deadline was left running.
#[tokio::test]
async fn a_deletion_waiting_for_the_index_cancels_the_known_job_first() {
    let Some(slurm) = local_slurm() else { return };
    let (ctx, api) = Context::test();
    let client = register_local(&ctx, &slurm).await;
    let data = data(ctx);
    let mut job = finalized(held_on_local("known-first", &slurm));
    let (_, status, mut api) = submit_on_local(api, &job, &data).await;
    let job_id = u32::try_from(status.job_id.expect("jobId written")).unwrap();

    // A later submit in doubt, after any listing this test can see: the index cannot show
    // every job of this SlurmJob.
    let uid = uid_of(&job);
    data.submissions.record_doubt(
        &OwnerTag::new(&uid, 2),
        Doubt {
            since: Utc::now() + chrono::TimeDelta::hours(1),
            error: "Timeout".into(),
        },
    );
    job.status = Some(status);
    job.metadata.deletion_timestamp = Some(crate::crd::condition::now());
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let event = expect_event(&mut api, &expected, "Normal", "Cancelled").await;
        let note = event.body["note"].as_str().unwrap();
        assert!(
            note.starts_with(&format!("Slurm job {job_id} cancelled")),
            "{note}"
        );
        let message = expect_blocked(&mut api, &expected, "WaitingForSlurmIndex").await;
        api.expect_no_more_calls().await;
        message
    });
    let error = reconcile(Arc::new(job), data.clone()).await.unwrap_err();
    let message = server.await.unwrap();
    assert_eq!(error.category(), "DeletionBlocked", "{message}");
    // Not a search for the id's digits: a small job id (a fresh Slurm) is also in the deadline.
    assert!(
        message.contains("no unfinished Slurm job of it is known yet")
            && !message.contains("not cancelled yet"),
        "the cancelled job is not named as still running: {message}"
    );
    until_cancelled(&client, job_id).await;
}

/// A record of a job submitted for `tag` as Slurm user `slurm` (the test clients' user), signed
/// with [`Context::test`]'s key.
/// [`tagged_record`] of a job that completed with exit code 0.
fn completed_record(id: u32, tag: &OwnerTag) -> crate::slurm::types::Job {
    crate::slurm::types::Job {
        exit: Some(crate::slurm::types::ExitStatus {
            return_code: Some(0),
            ..Default::default()
        }),
        ..tagged_record(id, tag, &["COMPLETED"])
    }
}

fn tagged_record(id: u32, tag: &OwnerTag, states: &[&str]) -> crate::slurm::types::Job {
    let comment = crate::controller::test_support::test_tag_key().comment(tag, "slurm");
    crate::slurm::types::Job {
        job_id: id,
        state: JobState::from_strings(states),
        user_name: Some("slurm".into()),
        ..crate::slurm::types::Job::bare().with_comment(comment)
    }
}

#[test]
fn delete_cancels_every_unfinished_job_of_the_uid() {
    let uid = "u1";
    let state = ClusterState {
        jobs: Arc::new(
            BTreeMap::from([
                (1, tagged_record(1, &OwnerTag::new(uid, 1), &["COMPLETED"])),
                (2, tagged_record(2, &OwnerTag::new(uid, 2), &["RUNNING"])),
                (
                    3,
                    tagged_record(3, &OwnerTag::new("other", 1), &["RUNNING"]),
                ),
            ])
            .into(),
        ),
        ..Default::default()
    };
    let submissions = Submissions::default();
    submissions.record(&OwnerTag::new(uid, 3), 7);
    let status = SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(5),
        submitted_generation: Some(3),
        observed_generation: Some(3),
        ..Default::default()
    };
    assert_eq!(
        to_cancel(
            uid,
            &status,
            Some(&state),
            &submissions,
            &crate::controller::test_support::test_tag_key()
        ),
        vec![2, 5, 7]
    );
    let ended = SlurmJobStatus {
        phase: Phase::Completed,
        ..status
    };
    assert_eq!(
        to_cancel(
            uid,
            &ended,
            None,
            &Submissions::default(),
            &crate::controller::test_support::test_tag_key()
        ),
        Vec::<u32>::new()
    );
}

#[test]
fn slurm_events_map_to_slurmjobs_by_uid_and_health_to_all_of_the_cluster() {
    let mut a = slurm_job("a", "#!/bin/sh\n");
    a.metadata.uid = Some("ua".into());
    let mut b = slurm_job("b", "#!/bin/sh\n");
    b.metadata.uid = Some("ub".into());
    b.spec.cluster_name = "other".into();
    let a = CachedSlurmJob::new(a).unwrap();
    let b = CachedSlurmJob::new(b).unwrap();
    let (jobs, writer) = reflector::store();
    // The cache and its uid index as the controller fills them.
    let (by_uid, passed) = kit::reflect_changes(
        futures::stream::iter([a.clone(), b.clone()].map(|j| Ok(watcher::Event::Apply(j)))),
        writer,
        reacts_to,
        |_| {},
    );
    assert_eq!(futures::executor::block_on(passed.count()), 2);
    let cluster = ObjectRef::<SlurmCluster>::new("local");
    let changed = |uid: &str| SlurmEvent::JobChanged {
        cluster: cluster.clone(),
        job_id: 1,
        owner: Some(OwnerTag::new(uid, 3)),
    };
    assert_eq!(
        targets(&changed("ua"), &jobs, &by_uid, &Dependents::default()),
        vec![ObjectRef::from_obj(&a)]
    );
    // Those waiting for `a` (`dependsOn`) too: a live dependee is judged with the index.
    let waiting = Dependents::default();
    waiting.wait_for(NS, "after-a", ["a"]);
    assert_eq!(
        targets(&changed("ua"), &jobs, &by_uid, &waiting),
        vec![
            ObjectRef::from_obj(&a),
            ObjectRef::new("after-a").within(NS)
        ]
    );
    assert_eq!(
        targets(&changed("ub"), &jobs, &by_uid, &waiting),
        vec![ObjectRef::from_obj(&b)],
        "by uid, whatever the cluster"
    );
    assert!(
        targets(&changed("uc"), &jobs, &by_uid, &waiting).is_empty(),
        "no such SlurmJob"
    );
    let gone = SlurmEvent::JobGone {
        cluster: cluster.clone(),
        job_id: 1,
        owner: OwnerTag::parse("someone else's"),
    };
    assert!(targets(&gone, &jobs, &by_uid, &waiting).is_empty());
    let up = SlurmEvent::HealthChanged {
        cluster: cluster.clone(),
        up: true,
    };
    assert_eq!(
        targets(&up, &jobs, &by_uid, &waiting),
        vec![ObjectRef::from_obj(&a)]
    );
    let down = SlurmEvent::HealthChanged { cluster, up: false };
    assert!(targets(&down, &jobs, &by_uid, &waiting).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Reconciles against an index the test writes (`register_with_index`): what the controller does
// with what the pollers saw, without a real Slurm. The client points at http://127.0.0.1:1, so
// any slurmrestd call the reconcile makes fails.
// ---------------------------------------------------------------------------------------------

const UNREACHABLE: &str = "http://127.0.0.1:1";

/// An index synced after `ctx` started (so it is trusted) holding `jobs`.
fn trusted_index(ctx: &Context, jobs: Vec<crate::slurm::types::Job>) -> ClusterState {
    ClusterState {
        jobs: Arc::new(jobs.into_iter().map(|j| (j.job_id, j)).collect()),
        jobs_synced_at: Some(ctx.started_at + chrono::TimeDelta::seconds(1)),
        ..Default::default()
    }
}

/// SlurmCluster `local` connected (to nothing: a request to it fails) with a trusted index
/// that holds no job.
fn register_trusted_empty(ctx: &Context) -> tokio::sync::watch::Sender<Arc<ClusterState>> {
    register_trusted_empty_as(ctx, crate::controller::test_support::slurm_key())
}

/// [`register_trusted_empty`], its client acting with `credentials`.
fn register_trusted_empty_as(
    ctx: &Context,
    credentials: crate::slurm::Credentials,
) -> tokio::sync::watch::Sender<Arc<ClusterState>> {
    crate::controller::test_support::register_with_credentials(
        ctx,
        NS,
        "local",
        UNREACHABLE,
        trusted_index(ctx, vec![]),
        credentials,
    )
}

fn uid_of(job: &SlurmJob) -> String {
    job.metadata.uid.clone().unwrap()
}

fn running_record(id: u32, tag: &OwnerTag) -> crate::slurm::types::Job {
    let mut record = tagged_record(id, tag, &["RUNNING"]);
    record.nodes = Some("n1".into());
    record.submit_time = chrono::DateTime::from_timestamp(1_700_000_000, 0);
    record.start_time = chrono::DateTime::from_timestamp(1_700_000_010, 0);
    record
}

fn not_found_body(kind: &str, name: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("{kind} \"{name}\" not found"), "reason": "NotFound",
        "details": {"name": name, "kind": kind}, "code": 404
    })
}

/// The GET of SlurmCluster `ghost`, which does not exist.
async fn expect_no_cluster_ghost(api: &mut ApiServerVerifier) {
    let (call, send) = api.next().await;
    assert_eq!(call.method, Method::GET, "{call:?}");
    assert_eq!(call.path, "/apis/slurm.rs/v1alpha1/slurmclusters/ghost");
    respond(
        send,
        StatusCode::NOT_FOUND,
        &not_found_body("slurmclusters", "ghost"),
    );
}

fn pod_path(job: &SlurmJob) -> String {
    format!("/api/v1/namespaces/{NS}/pods/{}", job.name_any())
}

/// `GET` of the output Pod, answered with `pod` (or 404).
async fn expect_get_pod(api: &mut ApiServerVerifier, job: &SlurmJob, pod: Option<&Pod>) {
    let (call, send) = api.next().await;
    assert_eq!(call.method, Method::GET, "{call:?}");
    assert_eq!(call.path, pod_path(job));
    match pod {
        Some(pod) => respond(send, StatusCode::OK, &serde_json::to_value(pod).unwrap()),
        None => respond(
            send,
            StatusCode::NOT_FOUND,
            &not_found_body("pods", &job.name_any()),
        ),
    }
}

/// `POST` of the output Pod; returns it as sent.
async fn expect_create_pod(api: &mut ApiServerVerifier) -> Pod {
    let (call, send) = api.next().await;
    assert_eq!(call.method, Method::POST, "{call:?}");
    assert_eq!(call.path, format!("/api/v1/namespaces/{NS}/pods"));
    respond(send, StatusCode::CREATED, &call.body);
    serde_json::from_value(call.body).unwrap()
}

/// The reconcile finds no output Pod and creates one, and asks nothing more; the Pod created.
async fn expect_streamer_made(api: &mut ApiServerVerifier, job: &SlurmJob) -> Pod {
    expect_get_pod(api, job, None).await;
    let created = expect_create_pod(api).await;
    api.expect_no_more_calls().await;
    created
}

/// `record` of a job on `n1` that ended a minute ago, after a minute's run.
fn ended_a_minute_ago(mut record: crate::slurm::types::Job) -> crate::slurm::types::Job {
    record.nodes = Some("n1".into());
    record.start_time = Some(Utc::now() - chrono::TimeDelta::minutes(2));
    record.end_time = Some(Utc::now() - chrono::TimeDelta::minutes(1));
    record
}

/// A SlurmJob whose output goes to PVC `out`, mounted at `/shared` on the Slurm nodes.
fn with_output(mut job: SlurmJob) -> SlurmJob {
    job.spec.output =
        Some(serde_json::from_value(json!({"volume": "out", "slurmPath": "/shared"})).unwrap());
    job
}

/// Deleting while slurmrestd is unreachable and the index has never synced: cleanup tries the
/// cancel of the job it knows first, and waits for it and for a complete job list (it may show a
/// job whose id never reached the status) — no finalizer patch; the DeletionBlocked condition
/// and one Warning say why, and the backoff grows.
#[tokio::test]
async fn deleting_while_slurmrestd_is_unreachable_tries_the_known_cancel_and_waits() {
    let (ctx, mut api) = Context::test();
    let key = ObjectRef::<SlurmCluster>::new("local");
    let settings = ConnectionSettings {
        fingerprint: "unreachable".into(),
        poller: PollerConfig {
            interval: Duration::from_millis(200),
        },
    };
    let metrics = ctx.metrics.clone();
    let tag_key = ctx.tag_key.clone();
    ctx.clusters
        .upsert(
            &key,
            ClientConfig::new(UNREACHABLE)
                .unwrap()
                .allow_plaintext(true),
            settings,
            Arc::new(Credentials::token("t", None).unwrap()),
            |label, client, config, events| {
                crate::state::poller::spawn(label, client, config, tag_key, events, metrics)
            },
        )
        .unwrap();
    // Let the poller fail a few times: the index stays untrusted.
    let index = ctx.clusters.get(&key).unwrap().index;
    let deadline = Instant::now() + Duration::from_secs(10);
    while index.borrow().polls < 2 {
        assert!(Instant::now() < deadline, "the poller never polled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!plan::index_trusted(&index.borrow(), ctx.started_at));

    let mut job = finalized(slurm_job("unreachable", "#!/bin/sh\nsleep 60\n"));
    job.metadata.deletion_timestamp = Some(crate::crd::condition::now());
    job.status = Some(SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(4244),
        ..Default::default()
    });
    let data = data(ctx);
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let status = expect_status_apply(&mut api, &expected).await;
        expect_event(&mut api, &expected, "Warning", DELETION_BLOCKED).await;
        api.expect_no_more_calls().await;
        (status, api)
    });
    let error = reconcile(Arc::new(job.clone()), data.clone())
        .await
        .unwrap_err();
    let (status, mut api) = server.await.unwrap();
    let blocked = condition::find(&status.conditions, DELETION_BLOCKED).unwrap();
    assert_eq!(blocked.reason, "CancelFailed");
    assert!(
        blocked.message.contains("cancel of Slurm job 4244"),
        "{}",
        blocked.message
    );
    assert_eq!(
        error_policy(Arc::new(job.clone()), &error, cached_in(&data, &job)),
        Action::requeue(Backoffs::MIN)
    );
    // Again, with the condition written: nothing new to say, and the backoff grows.
    job.status = Some(status);
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
    });
    let job = Arc::new(job);
    let error = reconcile(job.clone(), data.clone()).await.unwrap_err();
    server.await.unwrap();
    assert_eq!(
        error_policy(job.clone(), &error, cached_in(&data, &job)),
        Action::requeue(Backoffs::MIN * 2),
        "the backoff grows"
    );
}

/// Deleting a running SlurmJob while slurmrestd is unreachable, with a trusted index: the cancel
/// fails, so the finalizer stays, the DeletionBlocked condition and a Warning say why, and it
/// comes back after a backoff — the Slurm job is never silently dropped.
#[tokio::test]
async fn deleting_while_the_cancel_cannot_reach_slurmrestd_keeps_the_finalizer() {
    let (ctx, mut api) = Context::test();
    let mut job = finalized(slurm_job("uncancelled", "#!/bin/sh\nsleep 60\n"));
    job.metadata.deletion_timestamp = Some(crate::crd::condition::now());
    let uid = uid_of(&job);
    let state = trusted_index(&ctx, vec![running_record(4245, &OwnerTag::new(&uid, 1))]);
    let _index =
        crate::controller::test_support::register_with_index(&ctx, NS, "local", UNREACHABLE, state);
    job.status = Some(SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(4245),
        submitted_generation: Some(1),
        observed_generation: Some(1),
        ..Default::default()
    });
    let data = data(ctx);
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let message = expect_blocked(&mut api, &expected, "CancelFailed").await;
        api.expect_no_more_calls().await;
        message
    });
    let job = Arc::new(job);
    let error = reconcile(job.clone(), data.clone()).await.unwrap_err();
    let message = server.await.unwrap();
    assert!(message.contains("cancel of Slurm job 4245"), "{message}");
    assert_eq!(error.category(), "DeletionBlocked");
    assert_eq!(
        error_policy(job.clone(), &error, cached_in(&data, &job)),
        Action::requeue(Backoffs::MIN)
    );
}

/// A deletion on an index that skipped jobs (a cluster with accounting) asks accounting for
/// earlier submits only while the status records no job of the spec's last generation. The API
/// server adds one to the generation when the deletion begins: the status's job of generation 1
/// is the spec's last (generation 2 is the deletion's), so the known job is cancelled at once,
/// not held up by an accounting that cannot answer (here the cancel fails: the slurmrestd is
/// unreachable, and the condition says so, not `WaitingForSlurmIndex`).
#[tokio::test]
async fn a_deletion_cancels_the_known_job_without_asking_accounting_again() {
    let (ctx, api) = Context::test();
    let mut job = finalized(slurm_job("known", "#!/bin/sh\nsleep 60\n"));
    job.metadata.deletion_timestamp = Some(crate::crd::condition::now());
    job.metadata.generation = Some(2);
    let uid = uid_of(&job);
    let state = ClusterState {
        skipped_before: Some(ctx.started_at),
        ..trusted_index(&ctx, vec![running_record(4247, &OwnerTag::new(&uid, 1))])
    };
    let _index =
        crate::controller::test_support::register_with_index(&ctx, NS, "local", UNREACHABLE, state);
    job.status = Some(SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(4247),
        submitted_generation: Some(1),
        observed_generation: Some(1),
        ..Default::default()
    });
    blocked_by_the_cancel_of(4247, job, data(ctx), api).await;
}

/// A reconcile of the deleted `job` that tries the cancel of Slurm job `job_id` (here it fails:
/// slurmrestd cannot be reached) and keeps the finalizer, saying so (`CancelFailed`, naming the
/// job), with no other request.
async fn blocked_by_the_cancel_of(
    job_id: u32,
    job: SlurmJob,
    data: Arc<JobContext>,
    mut api: ApiServerVerifier,
) -> ApiServerVerifier {
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let message = expect_blocked(&mut api, &expected, "CancelFailed").await;
        api.expect_no_more_calls().await;
        (message, api)
    });
    let error = reconcile(Arc::new(job), data).await.unwrap_err();
    let (message, api) = server.await.unwrap();
    assert_eq!(error.category(), "DeletionBlocked", "{message}");
    assert!(
        message.contains(&format!("cancel of Slurm job {job_id}")),
        "{message}"
    );
    api
}

/// A SlurmJob whose submit got no answer (slurmctld may have made the job) is not let go on an
/// index that cannot show that job yet, however recent its incremental cycles: the deletion
/// waits for a listing of every job that began after the failed submit, and then, with no job
/// of it there, lets go.
#[tokio::test]
async fn a_deletion_after_a_submit_in_doubt_waits_for_a_listing_past_it() {
    let (ctx, mut api) = Context::test();
    let mut job = finalized(slurm_job("in-doubt", "#!/bin/sh\ntrue\n"));
    job.metadata.deletion_timestamp = Some(crate::crd::condition::now());
    let uid = uid_of(&job);
    let failed = Utc::now();
    let state = ClusterState {
        fully_listed_at: Some(failed - chrono::TimeDelta::seconds(1)),
        jobs_synced_at: Some(failed + chrono::TimeDelta::seconds(30)),
        ..Default::default()
    };
    let index =
        crate::controller::test_support::register_with_index(&ctx, NS, "local", UNREACHABLE, state);
    let data = data(ctx);
    data.submissions.record_doubt(
        &OwnerTag::new(&uid, 1),
        Doubt {
            since: failed,
            error: "Timeout".into(),
        },
    );
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let message = expect_blocked(&mut api, &expected, "WaitingForSlurmIndex").await;
        api.expect_no_more_calls().await;
        (message, api)
    });
    let job = Arc::new(job);
    let error = reconcile(job.clone(), data.clone()).await.unwrap_err();
    let (message, mut api) = server.await.unwrap();
    assert!(
        message.contains("since a submit of this SlurmJob got no answer"),
        "{message}"
    );
    assert_eq!(error.category(), "DeletionBlocked");

    // A full listing past it, without a job of this SlurmJob: nothing to cancel, let go.
    index.send_modify(|state| {
        let mut next = (**state).clone();
        next.fully_listed_at = Some(failed + chrono::TimeDelta::seconds(11));
        *state = Arc::new(next);
    });
    let expected = job.as_ref().clone();
    let server = tokio::spawn(async move {
        expect_finalizer_patch(&mut api, &expected, false).await;
        api.expect_no_more_calls().await;
    });
    reconcile(job, data.clone()).await.unwrap();
    server.await.unwrap();
    assert!(data.submissions.is_empty(), "forgotten with the SlurmJob");
}

/// After a gain of the leader Lease, a SlurmJob deleted with no job recorded for its latest
/// generation may still get one from the previous leader's submit: the deletion waits for a
/// listing of every job that began once such a submit would show (the request timeout and
/// `SUBMIT_DOUBT_GRACE` after the gain), then lets go with nothing there.
#[tokio::test]
async fn a_deletion_after_a_takeover_waits_for_the_predecessors_submit() {
    let (mut ctx, api) = Context::test();
    let (_leading, state) = tokio::sync::watch::channel(true);
    ctx.leadership = crate::leader::Leadership::follow(state);
    deletion_waits_for_the_predecessors_submit(ctx, api).await;
}

/// Without an election, a start is a takeover from the process before (killed with a submit on
/// its way: OOM, a crash): the same wait.
#[tokio::test]
async fn a_deletion_after_a_restart_waits_for_the_predecessors_submit() {
    let (ctx, api) = Context::test();
    assert!(!ctx.leadership.elected());
    deletion_waits_for_the_predecessors_submit(ctx, api).await;
}

/// A restart without an election, for `job` (given the finalizer when `finalized`), created 5 s
/// before this process started: the index's last full listing began 5 s after the start, too
/// early to show a submit of the dead process. `taken_on`: this process gave it the finalizer.
/// Returns the index's sender too, which must live while the test does.
fn restarted(
    mut job: SlurmJob,
    finalized_here: bool,
    taken_on: bool,
) -> (
    Arc<JobContext>,
    ApiServerVerifier,
    SlurmJob,
    tokio::sync::watch::Sender<Arc<ClusterState>>,
) {
    let (ctx, api) = Context::test();
    assert!(!ctx.leadership.elected());
    if finalized_here {
        job = finalized(job);
    }
    job.metadata.creation_timestamp =
        status::time(Some(ctx.started_at - chrono::TimeDelta::seconds(5)));
    let state = ClusterState {
        fully_listed_at: Some(ctx.started_at + chrono::TimeDelta::seconds(5)),
        ..trusted_index(&ctx, vec![])
    };
    let index =
        crate::controller::test_support::register_with_index(&ctx, NS, "local", UNREACHABLE, state);
    let data = data(ctx);
    if taken_on {
        data.taken_on
            .record(&uid_of(&job), data.ctx.acting_since(), Utc::now());
    }
    (data, api, job, index)
}

/// After a restart, a SlurmJob this process gave the finalizer (created before the start, its
/// submit waiting) lets go at once when deleted: no process before it touched the SlurmJob.
#[tokio::test]
async fn after_a_restart_a_slurmjob_taken_on_here_is_deleted_at_once() {
    let job = slurm_job("taken-on-deleted", "#!/bin/sh\ntrue\n");
    let (data, mut api, mut job, _index) = restarted(job, true, true);
    job.metadata.deletion_timestamp = Some(crate::crd::condition::now());
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_finalizer_patch(&mut api, &expected, false).await;
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(job), data).await.unwrap();
    server.await.unwrap();
}

async fn deletion_waits_for_the_predecessors_submit(ctx: Context, mut api: ApiServerVerifier) {
    let gained = Utc::now();
    *ctx.acting_since.lock().unwrap() = gained;
    let mut job = finalized(slurm_job("taken-over", "#!/bin/sh\ntrue\n"));
    job.metadata.creation_timestamp = status::time(Some(gained - chrono::TimeDelta::seconds(5)));
    job.metadata.deletion_timestamp = Some(crate::crd::condition::now());
    let state = ClusterState {
        fully_listed_at: Some(gained + chrono::TimeDelta::seconds(5)),
        ..trusted_index(&ctx, vec![])
    };
    let index =
        crate::controller::test_support::register_with_index(&ctx, NS, "local", UNREACHABLE, state);
    let data = data(ctx);
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_blocked(&mut api, &expected, "WaitingForSlurmIndex").await;
        api.expect_no_more_calls().await;
        api
    });
    let job = Arc::new(job);
    let error = reconcile(job.clone(), data.clone()).await.unwrap_err();
    let mut api = server.await.unwrap();
    assert_eq!(error.category(), "DeletionBlocked");

    // A listing of every job past the request timeout (30 s) and the grace: let go.
    index.send_modify(|state| {
        let mut next = (**state).clone();
        next.fully_listed_at = Some(gained + chrono::TimeDelta::seconds(41));
        *state = Arc::new(next);
    });
    let expected = job.as_ref().clone();
    let server = tokio::spawn(async move {
        expect_finalizer_patch(&mut api, &expected, false).await;
        api.expect_no_more_calls().await;
    });
    reconcile(job, data).await.unwrap();
    server.await.unwrap();
}

/// Restarted without an election, a SlurmJob created before the start and never recorded as
/// submitted waits for a listing of every job that began once the dead process's submit would
/// show (the request timeout and `SUBMIT_DOUBT_GRACE` after the start): slurmrestd may still
/// make that job after the first listing began. Nothing is sent to Slurm meanwhile (the
/// unreachable client would fail a submit).
#[tokio::test]
async fn after_a_restart_an_older_slurmjob_waits_for_the_dead_processs_submit() {
    let job = slurm_job("older", "#!/bin/sh\ntrue\n");
    let (data, mut api, job, _index) = restarted(job, true, false);
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let status = expect_status_apply(&mut api, &expected).await;
        api.expect_no_more_calls().await;
        status
    });
    let action = reconcile(Arc::new(job), data).await.unwrap();
    let status = server.await.unwrap();
    assert_ne!(
        action,
        Action::await_change(),
        "it comes back to look again"
    );
    assert_eq!(status.job_id, None);
    let reconciling = condition::find(&status.conditions, status::RECONCILING).unwrap();
    assert_eq!(reconciling.reason, "WaitingForSlurmIndex");
    assert!(
        reconciling
            .message
            .contains("(it started, or became the leader)"),
        "{}",
        reconciling.message
    );

    // One that no process has taken on yet (no finalizer: every process adds it before a
    // submit) has no submit of the dead process to wait out: the reconcile that adds the
    // finalizer submits (here to the unreachable slurmrestd, which says no).
    let job = slurm_job("untouched", "#!/bin/sh\ntrue\n");
    let (data, mut api, job, _index) = restarted(job, false, false);
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_finalizer_patch(&mut api, &expected, true).await;
        expect_event(&mut api, &expected, "Warning", plan::SUBMIT_FAILED).await
    });
    let _ = reconcile(Arc::new(job), data).await;
    let event = server.await.unwrap();
    let note = event.body["note"].as_str().unwrap();
    assert!(
        note.contains("cannot reach slurmrestd"),
        "submitted: {note}"
    );

    // Nor one this process gave the finalizer in an earlier reconcile (whose submit waited,
    // e.g. for the SlurmCluster to connect).
    let job = slurm_job("taken-on-here", "#!/bin/sh\ntrue\n");
    let (data, mut api, job, _index) = restarted(job, true, true);
    let expected = job.clone();
    let server = tokio::spawn(async move {
        // The submit reads the whole spec (the cache has no script).
        expect_get_job(&mut api, &expected).await;
        expect_event(&mut api, &expected, "Warning", plan::SUBMIT_FAILED).await
    });
    let _ = reconcile(Arc::new(job), data).await;
    let event = server.await.unwrap();
    let note = event.body["note"].as_str().unwrap();
    assert!(note.contains("cannot reach slurmrestd"), "{note}");
}

/// A cluster whose request slots are all taken (its slurmrestd hangs): a delete and a running
/// job's reconcile make no request and hold no slot; they requeue soon, sooner than a failure
/// would, are woken (once) when a slot frees, and then the cancel goes out.
#[tokio::test]
async fn a_busy_cluster_requeues_soon_without_a_request() {
    let (ctx, mut api) = Context::test();
    let mut job = finalized(slurm_job("waits-for-a-slot", "#!/bin/sh\nsleep 60\n"));
    job.metadata.deletion_timestamp = Some(crate::crd::condition::now());
    let uid = uid_of(&job);
    let state = trusted_index(&ctx, vec![running_record(4246, &OwnerTag::new(&uid, 1))]);
    let _index =
        crate::controller::test_support::register_with_index(&ctx, NS, "local", UNREACHABLE, state);
    job.status = Some(SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(4246),
        submitted_generation: Some(1),
        observed_generation: Some(1),
        ..Default::default()
    });
    let handle = ctx.clusters.get(&ObjectRef::new("local")).unwrap();
    let taken: Vec<_> = std::iter::from_fn(|| handle.try_io()).collect();
    assert_eq!(taken.len(), crate::state::registry::IO_PER_CONNECTION);
    let (data, mut woken) = data_waking(ctx);
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
        api
    });
    let job = Arc::new(job);
    // An error, so the finalizer stays (no PATCH): the cancel is still to come.
    let error = reconcile(job.clone(), data.clone()).await.unwrap_err();
    assert!(matches!(error, Error::ClusterBusy(_)), "{}", Chain(&error));
    let first = error_policy(job.clone(), &error, cached_in(&data, &job));
    let error = reconcile(job.clone(), data.clone()).await.unwrap_err();
    let second = error_policy(job.clone(), &error, cached_in(&data, &job));
    let mut api = server.await.unwrap();
    // The same waits a fresh record of this key gives: BUSY_MIN, then twice that, spread.
    let reference = Backoffs::default();
    let key = backoff_key(job.as_ref());
    assert_eq!(first, Action::requeue(reference.next_busy(&key)));
    assert_eq!(second, Action::requeue(reference.next_busy(&key)));
    assert!(
        woken.try_recv().is_err(),
        "nothing is woken while no slot frees"
    );
    drop(taken);
    // The first slot given back wakes the SlurmJob, once however often it found none.
    let wake = woken.try_recv().expect("woken");
    assert_eq!(wake, ObjectRef::new("waits-for-a-slot").within(NS));
    assert!(woken.try_recv().is_err(), "woken once");
    // A free slot: the cancel is tried (and fails against the unreachable endpoint), which the
    // DeletionBlocked condition and its Warning say.
    let expected = (*job).clone();
    let server = tokio::spawn(async move {
        let message = expect_blocked(&mut api, &expected, "CancelFailed").await;
        api.expect_no_more_calls().await;
        message
    });
    let error = reconcile(job, data).await.unwrap_err();
    let message = server.await.unwrap();
    assert_eq!(error.category(), "DeletionBlocked", "{}", Chain(&error));
    assert!(message.contains("cancel of Slurm job 4246"), "{message}");
}

/// An edit while the job runs: the status keeps following the job, records the generation as
/// observed, says why with SpecApplied=False/JobActive, and a Warning Event tells the user.
#[tokio::test]
async fn an_edit_while_running_is_ignored_with_a_condition_and_a_warning() {
    let (ctx, mut api) = Context::test();
    let mut job = finalized(slurm_job("busy", "#!/bin/sh\nsleep 60\n"));
    let uid = uid_of(&job);
    let record = running_record(301, &OwnerTag::new(&uid, 1));
    let running = status::observe(
        &SlurmJobStatus {
            job_id: Some(301),
            submitted_generation: Some(1),
            observed_generation: Some(1),
            ..Default::default()
        },
        std::slice::from_ref(&record),
    );
    assert_eq!(running.phase, Phase::Running);
    job.status = Some(running);
    job.metadata.generation = Some(2);
    let index = crate::controller::test_support::register_with_index(
        &ctx,
        NS,
        "local",
        UNREACHABLE,
        trusted_index(&ctx, vec![record]),
    );
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let status = expect_status_apply(&mut api, &expected).await;
        let event = expect_event(&mut api, &expected, "Warning", "EditIgnored").await;
        api.expect_no_more_calls().await;
        (status, event, api)
    });
    let data = data(ctx);
    let action = reconcile(Arc::new(job.clone()), data.clone())
        .await
        .unwrap();
    let (status, event, mut api) = server.await.unwrap();
    assert_eq!(action, Action::requeue(RESYNC), "still following the job");
    assert_eq!(status.phase, Phase::Running);
    assert_eq!(status.job_id, Some(301), "not resubmitted");
    assert_eq!(status.submitted_generation, Some(1));
    assert_eq!(status.observed_generation, Some(2));
    let applied = condition::find(&status.conditions, status::SPEC_APPLIED).unwrap();
    assert_eq!(
        (applied.status.as_str(), applied.reason.as_str()),
        ("False", "JobActive")
    );
    assert_eq!(applied.observed_generation, Some(2));
    let note = event.body["note"].as_str().unwrap();
    assert!(
        note.contains("generation 2 was not applied") && note.contains("Slurm job 301"),
        "{note}"
    );

    // The job ends, and its change is reconciled before the cache shows that status write:
    // from the status before the edit, the edit would look like one of a finished job (run
    // again) and the status would go back to generation 1. It waits for the cache.
    let mut ended = tagged_record(301, &OwnerTag::new(&uid, 1), &["COMPLETED"]);
    ended.nodes = Some("n1".into());
    index.send_replace(Arc::new(trusted_index(&data.ctx, vec![ended])));
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
    });
    let action = reconcile(Arc::new(job), data.clone()).await.unwrap();
    server.await.unwrap();
    assert_eq!(action, Action::requeue(CACHE_LAG_RETRY));
    assert_eq!(data.status_writes.len(), 1, "still waiting for the cache");
}

/// A spec Slurm cannot be given (a reserved extraOptions key, stored before admission refused
/// it): Ready=False/InvalidSpec in the status, a Warning Event, and the reconcile waits for an
/// edit — nothing is submitted (the unreachable client would fail the reconcile).
#[tokio::test]
async fn an_unsubmittable_spec_is_reported_and_waits_for_an_edit() {
    let (ctx, mut api) = Context::test();
    let mut job = finalized(slurm_job("invalid", "#!/bin/sh\ntrue\n"));
    job.spec.extra_options = Some(
        json!({"comment": "mine", "mail_type": ["END"]})
            .as_object()
            .unwrap()
            .clone(),
    );
    let _index = crate::controller::test_support::register_with_index(
        &ctx,
        NS,
        "local",
        UNREACHABLE,
        trusted_index(&ctx, Vec::new()),
    );
    let expected = job.clone();
    let server = tokio::spawn(async move {
        // extraOptions are not cached: the verdict is the whole spec's.
        expect_get_job(&mut api, &expected).await;
        let status = expect_status_apply(&mut api, &expected).await;
        let event = expect_event(&mut api, &expected, "Warning", "InvalidSpec").await;
        api.expect_no_more_calls().await;
        (status, event)
    });
    let data = data(ctx);
    let action = reconcile(Arc::new(cached(&job)), data.clone())
        .await
        .unwrap();
    let (status, event) = server.await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(status.phase, Phase::Pending);
    assert_eq!(status.job_id, None);
    let ready = condition::find(&status.conditions, status::READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "InvalidSpec")
    );
    assert!(
        ready.message.contains("extraOptions.comment"),
        "{}",
        ready.message
    );
    assert!(
        event.body["note"]
            .as_str()
            .unwrap()
            .contains("extraOptions.comment"),
        "{:#}",
        event.body
    );
    assert!(data.submissions.is_empty(), "nothing submitted");
}

/// The namespace cache keeps what the controller reads of a namespace (its labels, for access
/// by label, and its deletion, for the orphan Warnings) and no annotations or field owners.
#[test]
fn the_namespace_cache_keeps_labels_and_deletion() {
    let mut ns: PartialObjectMeta<Namespace> = serde_json::from_value(json!({
        "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
        "metadata": {
            "name": "team-a",
            "labels": {"team": "a"},
            "annotations": {"note": "x".repeat(1000)},
            "deletionTimestamp": "2026-12-06T10:00:00Z",
            "managedFields": [{"manager": "kubectl", "operation": "Update"}],
        },
    }))
    .unwrap();
    namespace_for_cache(&mut ns);
    assert_eq!(
        ns.metadata.labels,
        Some([("team".to_owned(), "a".to_owned())].into())
    );
    assert!(ns.metadata.deletion_timestamp.is_some());
    assert!(ns.metadata.annotations.is_none());
    assert!(ns.metadata.managed_fields.unwrap_or_default().is_empty());
}

/// The cache holds no script, environment, extraOptions' values, tenant labels or annotations
/// (only `slurm.rs/` ones); what the driver reads outside a submit stays.
#[test]
fn the_cache_keeps_no_script_or_other_tenant_bulk() {
    let mut job = finalized(slurm_job(
        "big",
        &format!("#!/bin/sh\n#{}\n", "x".repeat(1 << 20)),
    ));
    job.spec.extra_options = Some(serde_json::Map::from_iter([("a".to_owned(), json!("b"))]));
    job.metadata.labels = Some(BTreeMap::from([("team".to_owned(), "x".repeat(63))]));
    job.metadata.annotations = Some(BTreeMap::from([
        ("team".to_owned(), "y".repeat(200_000)),
        ("slurm.rs/other".to_owned(), "z".repeat(200_000)),
        (SKIP_CANCEL_ANNOTATION.to_owned(), "true".to_owned()),
    ]));
    job.spec.depends_on = serde_json::from_value(json!([{"name": "first"}])).unwrap();
    let trimmed = cached(&job);
    assert!(trimmed.spec.script.is_empty());
    assert!(trimmed.spec.environment.is_empty());
    // extraOptions by their keys only (checked before a submit waits for its dependencies).
    assert_eq!(
        trimmed.spec.extra_options,
        Some(serde_json::Map::from_iter([("a".to_owned(), Value::Null)]))
    );
    assert_eq!(trimmed.metadata.labels, None);
    assert_eq!(
        trimmed.metadata.annotations,
        Some(BTreeMap::from([(
            SKIP_CANCEL_ANNOTATION.to_owned(),
            "true".to_owned()
        )]))
    );
    assert_eq!(trimmed.spec.cluster_name, job.spec.cluster_name);
    assert_eq!(trimmed.spec.depends_on, job.spec.depends_on);
    assert_eq!(trimmed.metadata.finalizers, job.metadata.finalizers);
    assert!(serde_json::to_vec(&trimmed).unwrap().len() < 2048);
}

/// A SlurmJob that must ask the cluster's accounting before it submits (not fresh: edited) and
/// gets no answer waits with `WaitingForAccounting`, and asks again after its growing backoff,
/// not every few seconds: a query that keeps failing (too large, too slow) is not a loop.
#[tokio::test]
async fn a_failing_accounting_check_backs_off() {
    let (ctx, mut api) = Context::test();
    let mut job = finalized(slurm_job("edited", "#!/bin/sh\ntrue\n"));
    job.metadata.generation = Some(2);
    // Every job listed since a predecessor's submit could land (an edit's time is not known).
    let state = ClusterState {
        fully_listed_at: Some(ctx.started_at + chrono::TimeDelta::seconds(41)),
        ..trusted_index(&ctx, Vec::new())
    };
    let _index =
        crate::controller::test_support::register_with_index(&ctx, NS, "local", UNREACHABLE, state);
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_get_job(&mut api, &expected).await;
        let status = expect_status_apply(&mut api, &expected).await;
        (api, status)
    });
    let data = data(ctx);
    let first = reconcile(Arc::new(cached(&job)), data.clone())
        .await
        .unwrap();
    let (mut api, status) = server.await.unwrap();
    let reconciling = condition::find(&status.conditions, status::RECONCILING).unwrap();
    assert_eq!(
        reconciling.reason, "WaitingForAccounting",
        "{reconciling:?}"
    );
    assert_eq!(first, Action::requeue(Backoffs::MIN));
    // The same answer again: a longer wait.
    job.status = Some(status);
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_get_job(&mut api, &expected).await;
        api
    });
    let second = reconcile(Arc::new(cached(&job)), data.clone())
        .await
        .unwrap();
    assert_eq!(second, Action::requeue(Backoffs::MIN * 2));
    let _ = server.await.unwrap();
}

/// The whole spec is read right before a submit; when the object moved on meanwhile (another
/// generation), nothing is submitted — slurmrestd is not even reachable here — and the step
/// waits for the change instead of running the new script under the old generation's tag.
#[tokio::test]
async fn a_spec_edited_before_its_submit_is_not_submitted_under_the_old_tag() {
    let (ctx, mut api) = Context::test();
    let job = finalized(slurm_job("edited", "#!/bin/sh\ntrue\n"));
    let _index = crate::controller::test_support::register_with_index(
        &ctx,
        NS,
        "local",
        UNREACHABLE,
        trusted_index(&ctx, Vec::new()),
    );
    let mut edited = job.clone();
    edited.spec.script = "#!/bin/sh\nfalse\n".into();
    edited.metadata.generation = Some(2);
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_get_job(&mut api, &edited).await;
        let status = expect_status_apply(&mut api, &expected).await;
        api.expect_no_more_calls().await;
        status
    });
    let data = data(ctx);
    let action = reconcile(Arc::new(cached(&job)), data.clone())
        .await
        .unwrap();
    let status = server.await.unwrap();
    assert_eq!(action, Action::requeue(plan::WAIT_RETRY));
    assert_eq!(status.job_id, None);
    let ready = condition::find(&status.conditions, status::READY).unwrap();
    assert_eq!(ready.reason, "SpecChanged", "{ready:?}");
    assert!(data.submissions.is_empty(), "nothing submitted");
}

/// The output Pod follows the run: an edit of a finished SlurmJob re-runs it (here the new
/// run's job is adopted from the index by its tag, as after a crash between submit and status
/// write), the old run's Pod is deleted, and once it is gone the next reconcile creates the
/// Pod for the new job id — owned by the SlurmJob, labelled, annotated with the job id, and
/// streaming the file the job writes.
#[tokio::test]
async fn the_output_pod_is_replaced_for_a_rerun() {
    let (ctx, mut api) = Context::test();
    let mut job = with_output(finalized(slurm_job("streamed", "#!/bin/sh\necho hi\n")));
    let uid = uid_of(&job);
    let first = completed_record(101, &OwnerTag::new(&uid, 1));
    let second = running_record(102, &OwnerTag::new(&uid, 2));
    let finished = status::observe(
        &SlurmJobStatus {
            job_id: Some(101),
            submitted_generation: Some(1),
            observed_generation: Some(1),
            ..Default::default()
        },
        std::slice::from_ref(&first),
    );
    assert_eq!(finished.phase, Phase::Completed);
    job.status = Some(finished);
    job.metadata.generation = Some(2);
    let _index = crate::controller::test_support::register_with_index(
        &ctx,
        NS,
        "local",
        UNREACHABLE,
        trusted_index(&ctx, vec![first, second]),
    );
    let data = data(ctx);
    // This process submitted the first run.
    data.submissions.record(&OwnerTag::new(&uid, 1), 101);
    let mut old_pod = output::pod(
        &job,
        &output::run_output(job.spec.output.as_ref().unwrap()),
        101,
        output::DEFAULT_IMAGE,
        true,
    )
    .unwrap();
    old_pod.metadata.uid = Some("pod-uid-101".into());

    // The re-run: status, Events, then the old run's Pod is deleted (not yet re-created).
    let expected = job.clone();
    let old = old_pod.clone();
    let server = tokio::spawn(async move {
        expect_get_job(&mut api, &expected).await;
        let status = expect_status_apply(&mut api, &expected).await;
        for reason in ["Resubmitted", "Submitted", "Started"] {
            expect_event(&mut api, &expected, "Normal", reason).await;
        }
        expect_get_pod(&mut api, &expected, Some(&old)).await;
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::DELETE, "{call:?}");
        assert_eq!(call.path, pod_path(&expected));
        // Only that very Pod: one re-created under the name meanwhile is not deleted.
        assert_eq!(call.body["preconditions"]["uid"], "pod-uid-101", "{call:?}");
        let mut terminating = old.clone();
        terminating.metadata.deletion_timestamp = Some(crate::crd::condition::now());
        respond(
            send,
            StatusCode::OK,
            &serde_json::to_value(&terminating).unwrap(),
        );
        api.expect_no_more_calls().await;
        (status, terminating, api)
    });
    let action = reconcile(Arc::new(job.clone()), data.clone())
        .await
        .unwrap();
    let (status, terminating, mut api) = server.await.unwrap();
    assert_eq!(action, Action::requeue(RESYNC));
    assert_eq!(status.job_id, Some(102));
    assert_eq!(status.phase, Phase::Running);
    assert_eq!(status.submitted_generation, Some(2));
    // The run's output as this generation asks for it: the Pod reads it there until the next
    // run, whatever `spec.output` says meanwhile.
    assert_eq!(
        status.output,
        Some(RunOutput {
            volume: "out".into(),
            sub_path: None
        })
    );
    assert_eq!(
        status.history.iter().map(|r| r.job_id).collect::<Vec<_>>(),
        vec![101]
    );
    // The status names the new run: the first run's submit is read no more, nor kept.
    assert_eq!(data.submissions.jobs_of(&uid, i64::MIN), Vec::<u32>::new());
    job.status = Some(status);

    // The old Pod is still terminating: nothing to do yet.
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_get_pod(&mut api, &expected, Some(&terminating)).await;
        api.expect_no_more_calls().await;
        api
    });
    reconcile(Arc::new(job.clone()), data.clone())
        .await
        .unwrap();
    let mut api = server.await.unwrap();

    // Gone (the Pod watch triggers this reconcile): the new run's Pod is created.
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_get_pod(&mut api, &expected, None).await;
        let pod = expect_create_pod(&mut api).await;
        api.expect_no_more_calls().await;
        (pod, api)
    });
    let action = reconcile(Arc::new(job.clone()), data.clone())
        .await
        .unwrap();
    let (pod, mut api) = server.await.unwrap();
    assert_eq!(action, Action::requeue(RESYNC));
    assert_eq!(pod.metadata.name.as_deref(), Some("streamed"));
    assert_eq!(output::streamed_job_id(&pod), Some(102));
    let owners = pod.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1);
    assert_eq!(
        (
            owners[0].kind.as_str(),
            owners[0].name.as_str(),
            owners[0].uid.as_str(),
            owners[0].controller
        ),
        ("SlurmJob", "streamed", uid.as_str(), Some(true))
    );
    assert_eq!(
        pod.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(output::LABEL))
            .map(String::as_str),
        Some("streamed")
    );
    let spec = pod.spec.clone().unwrap();
    let env = spec.containers[0].env.clone().unwrap_or_default();
    assert_eq!(
        env.iter()
            .find(|e| e.name == "OUTPUT_FILE")
            .and_then(|e| e.value.as_deref()),
        Some("/output/streamed-102.out"),
        "the file Slurm writes for job 102 (/shared/streamed-%j.out), under the Pod's mount"
    );
    assert_eq!(
        spec.volumes.unwrap()[0]
            .persistent_volume_claim
            .as_ref()
            .map(|c| c.claim_name.as_str()),
        Some("out")
    );

    // The Pod of the current run exists: left alone.
    let current = pod.clone();
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_get_pod(&mut api, &expected, Some(&current)).await;
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(job), data).await.unwrap();
    server.await.unwrap();
}

/// `job` as the poller shows it running (or ended) as Slurm job `record`: its status observed
/// from the record, the index (trusted, unreachable slurmrestd) holding it.
fn observed_as(
    ctx: &Context,
    job: &mut SlurmJob,
    record: crate::slurm::types::Job,
) -> tokio::sync::watch::Sender<Arc<crate::state::index::ClusterState>> {
    job.status = Some(status::observe(
        &SlurmJobStatus {
            job_id: Some(i64::from(record.job_id)),
            submitted_generation: Some(1),
            observed_generation: Some(1),
            ..Default::default()
        },
        std::slice::from_ref(&record),
    ));
    crate::controller::test_support::register_with_index(
        ctx,
        NS,
        "local",
        UNREACHABLE,
        trusted_index(ctx, vec![record]),
    )
}

/// A SlurmJob `name` with `spec.output` whose first generation was submitted as the job
/// `record` builds from its tag, its status observed from that job (`observed_as`).
fn observed_with_output(
    ctx: &Context,
    name: &str,
    script: &str,
    record: impl FnOnce(&OwnerTag) -> crate::slurm::types::Job,
) -> (
    SlurmJob,
    tokio::sync::watch::Sender<Arc<crate::state::index::ClusterState>>,
) {
    let mut job = with_output(finalized(slurm_job(name, script)));
    let record = record(&OwnerTag::new(uid_of(&job), 1));
    let index = observed_as(ctx, &mut job, record);
    // Where its submit recorded that the run writes.
    job.status.as_mut().unwrap().output = job.spec.output.as_ref().map(output::run_output);
    (job, index)
}

/// `data` with the Pod cache listed and showing `pods` (their metadata as the Pod watch keeps
/// them). `data(ctx)` has a cache whose first list has not completed.
fn with_pods(data: &Arc<JobContext>, pods: &[&Pod]) -> Arc<JobContext> {
    let (output_pods, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    for pod in pods {
        let mut meta = crate::crd::pod_meta::PodMetaPhase {
            metadata: pod.metadata.clone(),
            phase: crate::crd::pod_meta::PodPhase::of(pod),
        };
        output::trim_for_cache(&mut meta.metadata);
        writer.apply_watcher_event(&watcher::Event::InitApply(meta));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    Arc::new(JobContext {
        output_pods,
        ..(**data).clone()
    })
}

/// The output Pod of a job that has ended is told so once (a merge patch of its
/// `slurm.rs/job-ended` annotation, by the operator's field manager) so that it drains the
/// file and exits: the Pod cache shows it untold, so it is read and patched. One the cache shows
/// told already is not read at all. (Before the cache's first list, the Pod is read whatever
/// the cache shows: `a_finished_jobs_output_pod_is_not_created_again_long_after_the_end`.)
#[tokio::test]
async fn the_output_pod_is_told_when_its_job_ends() {
    let (ctx, mut api) = Context::test();
    let (mut job, _index) = observed_with_output(&ctx, "told", "#!/bin/sh\necho hi\n", |tag| {
        let mut record = completed_record(201, tag);
        // Ended a moment ago: a missing Pod would still be created, so a cache that did not
        // show the Pod below would make the reconcile read it.
        record.start_time = Some(Utc::now() - chrono::TimeDelta::minutes(2));
        record.end_time = Some(Utc::now() - chrono::TimeDelta::minutes(1));
        record
    });
    assert_eq!(job.status.as_ref().unwrap().phase, Phase::Completed);
    let mut streaming = output::pod(
        &job,
        &output::run_output(job.spec.output.as_ref().unwrap()),
        201,
        output::DEFAULT_IMAGE,
        false,
    )
    .unwrap();
    streaming.metadata.uid = Some("pod-uid-201".into());
    let data = with_pods(&data(ctx), &[&streaming]);

    let expected = job.clone();
    let running_pod = streaming.clone();
    let server = tokio::spawn(async move {
        // The status first gains what the controller derives from the phase (conditions).
        let settled = expect_status_apply(&mut api, &expected).await;
        expect_get_pod(&mut api, &expected, Some(&running_pod)).await;
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::PATCH, "{call:?}");
        assert_eq!(call.path, pod_path(&expected));
        assert!(
            call.query.contains("fieldManager=slurm-operator"),
            "{}",
            call.query
        );
        // The uid: a precondition, so that a Pod re-created under the name is not told.
        assert_eq!(
            call.body,
            json!({"metadata": {"annotations": {output::ENDED_ANNOTATION: "true"}, "uid": "pod-uid-201"}})
        );
        let mut told = running_pod.clone();
        told.metadata
            .annotations
            .get_or_insert_default()
            .insert(output::ENDED_ANNOTATION.into(), "true".into());
        respond(send, StatusCode::OK, &serde_json::to_value(&told).unwrap());
        api.expect_no_more_calls().await;
        (settled, told, api)
    });
    let action = reconcile(Arc::new(job.clone()), data.clone())
        .await
        .unwrap();
    let (settled, told, mut api) = server.await.unwrap();
    // Back for the job's usage, which accounting completes a while after the end.
    assert_ne!(action, Action::await_change());
    job.status = Some(settled);

    // Told already, as the cache shows once the patch comes back: nothing is read.
    let data = with_pods(&data, &[&told]);
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(job), data).await.unwrap();
    server.await.unwrap();
}

/// A run's output Pod follows where the run was submitted to write (`status.output`), not
/// `spec.output` as edited since: removed, the run's Pod is still told the end of its job (so
/// that it drains the file and exits) and made again if gone; added to a run submitted
/// without it, no Pod is made (the run writes no file there).
#[tokio::test]
async fn an_output_pod_follows_the_runs_output_not_the_spec_edited_since() {
    let (ctx, mut api) = Context::test();
    let (mut job, _index) = observed_with_output(&ctx, "removed", "#!/bin/sh\necho hi\n", |tag| {
        let mut record = completed_record(203, tag);
        record.start_time = Some(Utc::now() - chrono::TimeDelta::minutes(2));
        record.end_time = Some(Utc::now() - chrono::TimeDelta::minutes(1));
        record
    });
    let mut streaming = output::pod(
        &job,
        &output::run_output(job.spec.output.as_ref().unwrap()),
        203,
        output::DEFAULT_IMAGE,
        false,
    )
    .unwrap();
    streaming.metadata.uid = Some("pod-uid-203".into());
    job.spec.output = None;
    let with_streamer = with_pods(&data(ctx), &[&streaming]);
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let _ = expect_status_apply(&mut api, &expected).await;
        expect_get_pod(&mut api, &expected, Some(&streaming)).await;
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::PATCH, "{call:?}");
        assert_eq!(
            call.body,
            json!({"metadata": {"annotations": {output::ENDED_ANNOTATION: "true"}, "uid": "pod-uid-203"}})
        );
        respond(
            send,
            StatusCode::OK,
            &serde_json::to_value(&streaming).unwrap(),
        );
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(job.clone()), with_streamer)
        .await
        .unwrap();
    server.await.unwrap();

    // Gone (the Pod cache shows none) a minute after the end: made again, reading the claim
    // and file the run writes.
    let (ctx, mut api) = Context::test();
    let recorded = job.status.as_ref().unwrap().output.clone();
    assert!(recorded.is_some());
    let record = ended_a_minute_ago(completed_record(203, &OwnerTag::new(uid_of(&job), 1)));
    let _index = observed_as(&ctx, &mut job, record);
    job.status.as_mut().unwrap().output = recorded;
    let without_pod = with_pods(&data(ctx), &[]);
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let _ = expect_status_apply(&mut api, &expected).await;
        expect_streamer_made(&mut api, &expected).await
    });
    reconcile(Arc::new(job.clone()), without_pod).await.unwrap();
    let created = server.await.unwrap();
    assert_eq!(
        created.spec.unwrap().volumes.unwrap()[0]
            .persistent_volume_claim
            .as_ref()
            .unwrap()
            .claim_name,
        "out"
    );

    // A run submitted without output, `spec.output` added since: nothing is made, nothing
    // read.
    let (ctx, mut api) = Context::test();
    let mut job = with_output(job);
    let record = ended_a_minute_ago(completed_record(203, &OwnerTag::new(uid_of(&job), 1)));
    let _index = observed_as(&ctx, &mut job, record);
    assert_eq!(job.status.as_ref().unwrap().output, None);
    let data = with_pods(&data(ctx), &[]);
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let _ = expect_status_apply(&mut api, &expected).await;
        api.expect_no_more_calls().await;
    });
    reconcile(Arc::new(job), data).await.unwrap();
    server.await.unwrap();
}

/// A Pod of the SlurmJob's name that it does not control (an earlier SlurmJob's, orphaned) is
/// left alone and no streamer is made while it is there: the tenant is told once, by a Warning
/// naming what to do, not at every reconcile, and the reconcile does not fail for it (nothing
/// retried frees the name); the streamer is made once that Pod is gone.
#[tokio::test]
async fn a_pod_taking_the_output_pods_name_is_told_once() {
    let (ctx, mut api) = Context::test();
    let (mut job, _index) = observed_with_output(
        &ctx,
        "taken",
        "#!/bin/sh
sleep 600
",
        |tag| tagged_record(402, tag, &["RUNNING"]),
    );
    assert_eq!(job.status.as_ref().unwrap().phase, Phase::Running);
    let mut orphan = output::pod(
        &job,
        &output::run_output(job.spec.output.as_ref().unwrap()),
        402,
        output::DEFAULT_IMAGE,
        false,
    )
    .unwrap();
    orphan.metadata.owner_references = None;
    orphan.metadata.uid = Some("pod-uid-orphan".into());
    let data = with_pods(&data(ctx), &[&orphan]);
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let settled = expect_status_apply(&mut api, &expected).await;
        let event = expect_event(&mut api, &expected, "Warning", "OutputPodNameTaken").await;
        api.expect_no_more_calls().await;
        (settled, event, api)
    });
    reconcile(Arc::new(job.clone()), data.clone())
        .await
        .unwrap();
    let (settled, event, mut api) = server.await.unwrap();
    let note = event.body["note"].as_str().unwrap();
    assert!(
        note.contains("a Pod named taken exists and is not this SlurmJob's output streamer")
            && note.contains("kubectl delete pod taken"),
        "{note}"
    );
    job.status = Some(settled);

    // Again: not told again, nothing read or made.
    let expected = job.clone();
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
        api
    });
    reconcile(Arc::new(job.clone()), data.clone())
        .await
        .unwrap();
    let mut api = server.await.unwrap();

    // Gone: the streamer is made.
    let data = with_pods(&data, &[]);
    let server = tokio::spawn(async move { expect_streamer_made(&mut api, &expected).await });
    reconcile(Arc::new(job.clone()), data).await.unwrap();
    let created = server.await.unwrap();
    assert_eq!(output::streamed_job_id(&created), Some(402));
}

/// An output Pod that stopped while its job runs (here evicted: `Failed`, never told the end)
/// is replaced: the Pod cache shows it failed, so it is read, and deleted as that very Pod (its
/// uid a precondition); the Pod watch brings the reconcile that creates the new one. One that
/// failed less than `REPLACE_AFTER` after its creation is not touched yet: the reconcile comes
/// back when it is that old.
#[tokio::test]
async fn an_output_pod_that_stopped_mid_run_is_replaced() {
    let (ctx, mut api) = Context::test();
    let (mut job, _index) =
        observed_with_output(&ctx, "evicted", "#!/bin/sh\nsleep 600\n", |tag| {
            tagged_record(401, tag, &["RUNNING"])
        });
    let uid = uid_of(&job);
    assert_eq!(job.status.as_ref().unwrap().phase, Phase::Running);
    let streamer = output::pod(
        &job,
        &output::run_output(job.spec.output.as_ref().unwrap()),
        401,
        output::DEFAULT_IMAGE,
        false,
    )
    .unwrap();
    let failed_at = |age: chrono::TimeDelta| {
        let mut pod = streamer.clone();
        pod.metadata.uid = Some("pod-uid-401".into());
        pod.metadata.creation_timestamp = crate::crd::time::from_utc(Utc::now() - age);
        pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Failed".into()),
            reason: Some("Evicted".into()),
            ..Default::default()
        });
        pod
    };

    // Failed 40 s after it was created: left for now, looked at again within 20 s.
    let young = failed_at(chrono::TimeDelta::seconds(40));
    let data = with_pods(&data(ctx), &[&young]);
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let settled = expect_status_apply(&mut api, &expected).await;
        api.expect_no_more_calls().await;
        (settled, api)
    });
    let action = reconcile(Arc::new(job.clone()), data.clone())
        .await
        .unwrap();
    let (settled, mut api) = server.await.unwrap();
    job.status = Some(settled);
    let later = requeue_secs(&action);
    assert!((15.0..=20.0).contains(&later), "{action:?}");

    // Failed five minutes after it was created: read, and deleted.
    let old = failed_at(chrono::TimeDelta::minutes(5));
    let data = with_pods(&data, &[&old]);
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_get_pod(&mut api, &expected, Some(&old)).await;
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::DELETE, "{call:?}");
        assert_eq!(call.path, pod_path(&expected));
        assert_eq!(call.body["preconditions"]["uid"], "pod-uid-401", "{call:?}");
        respond(send, StatusCode::OK, &serde_json::to_value(&old).unwrap());
        api.expect_no_more_calls().await;
        api
    });
    let action = reconcile(Arc::new(job.clone()), data.clone())
        .await
        .unwrap();
    let mut api = server.await.unwrap();
    assert_eq!(action, Action::requeue(RESYNC));

    // Gone, as the Pod watch shows: a new one, of the same run, not told.
    let data = with_pods(&data, &[]);
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_get_pod(&mut api, &expected, None).await;
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::POST, "{call:?}");
        let created: Pod = serde_json::from_value(call.body.clone()).unwrap();
        assert_eq!(output::streamed_job_id(&created), Some(401));
        assert!(!output::told(&created.metadata));
        respond(send, StatusCode::CREATED, &call.body);
        api.expect_no_more_calls().await;
        api
    });
    reconcile(Arc::new(job.clone()), data.clone())
        .await
        .unwrap();
    let mut api = server.await.unwrap();

    // The new one fails too, 90 s after its creation: the second replacement of the run waits
    // for two minutes, not one.
    assert_eq!(data.output_replacements.of(Some(uid.as_str()), 401), 1);
    let again = failed_at(chrono::TimeDelta::seconds(90));
    let data = with_pods(&data, &[&again]);
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
    });
    let action = reconcile(Arc::new(job), data).await.unwrap();
    server.await.unwrap();
    let later = requeue_secs(&action);
    assert!((25.0..=30.0).contains(&later), "{action:?}");
}

/// The delay of a requeue, in seconds, read from what `Action` shows (it has no getter).
fn requeue_secs(action: &Action) -> f64 {
    let waits = format!("{action:?}");
    waits
        .split_once("requeue_after: Some(")
        .and_then(|(_, rest)| rest.split_once("s)"))
        .and_then(|(secs, _)| secs.parse().ok())
        .unwrap_or_else(|| panic!("no delay: {waits}"))
}

/// An output Pod the API server refuses (here a ResourceQuota) is told to the tenant: one
/// Warning naming the refusal and what the Pod asks for; the reconcile fails, to be retried.
#[tokio::test]
async fn a_refused_output_pod_is_told_to_the_tenant() {
    let (ctx, mut api) = Context::test();
    let (job, _index) = observed_with_output(&ctx, "refused", "#!/bin/sh\necho hi\n", |tag| {
        tagged_record(301, tag, &["RUNNING"])
    });
    let data = data(ctx);
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let _ = expect_status_apply(&mut api, &expected).await;
        expect_get_pod(&mut api, &expected, None).await;
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::POST, "{call:?}");
        respond(
            send,
            StatusCode::FORBIDDEN,
            &json!({
                "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden",
                "code": 403,
                "message": "pods \"refused\" is forbidden: exceeded quota: compute, requested: limits.cpu=100m",
            }),
        );
        let event = expect_event(&mut api, &expected, "Warning", "OutputPodFailed").await;
        api.expect_no_more_calls().await;
        (event, api)
    });
    let error = reconcile(Arc::new(job.clone()), data.clone())
        .await
        .unwrap_err();
    let (event, mut api) = server.await.unwrap();
    assert_eq!(error.category(), "OutputPodFailed");
    let note = event.body["note"].as_str().unwrap();
    assert!(
        note.contains("exceeded quota: compute") && note.contains("cpu 10m to 100m"),
        "{note}"
    );

    // Refused the same way on the retry: no second Warning (each would be an Event write, for
    // as long as the quota lasts).
    let answer = job.clone();
    let server = tokio::spawn(async move {
        loop {
            let (call, send) = api.next().await;
            assert!(!call.path.contains("/events"), "told again: {call:?}");
            match call.method {
                Method::POST => {
                    respond(
                        send,
                        StatusCode::FORBIDDEN,
                        &json!({
                            "kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "reason": "Forbidden", "code": 403,
                            "message": "pods \"refused\" is forbidden: exceeded quota: compute",
                        }),
                    );
                    break;
                }
                Method::GET => respond(
                    send,
                    StatusCode::NOT_FOUND,
                    &not_found_body("pods", "refused"),
                ),
                _ => {
                    let mut answer = answer.clone();
                    answer.status = serde_json::from_value(call.body["status"].clone()).ok();
                    respond(
                        send,
                        StatusCode::OK,
                        &serde_json::to_value(&answer).unwrap(),
                    );
                }
            }
        }
        api.expect_no_more_calls().await;
    });
    let error = reconcile(Arc::new(job), data.clone()).await.unwrap_err();
    server.await.unwrap();
    assert_eq!(error.category(), "OutputPodFailed");
}

#[test]
fn a_retried_failure_is_told_once_per_cause_until_its_topic_succeeds() {
    let told = Told::default();
    assert!(told.news("u1", "submit", "Unreachable"));
    assert!(!told.news("u1", "submit", "Unreachable"), "the same cause");
    assert!(told.news("u1", "submit", "Timeout"), "another cause");
    assert!(told.news("u1", "outputPod", "403"), "another topic");
    assert!(told.news("u2", "submit", "Timeout"), "another SlurmJob");
    told.succeeded("u1", "submit");
    assert!(
        told.news("u1", "submit", "Timeout"),
        "failing again after a success"
    );
    assert!(!told.news("u1", "outputPod", "403"), "the other topic kept");
    told.forget_uid("u1");
    assert_eq!(told.len(), 1);
    told.keep_only(|uid| uid != "u2");
    assert_eq!(told.len(), 0);
}

/// A namespace the operator's cache does not hold yet has unknown labels, not none: with an
/// access entry that selects by label (here every namespace not labelled `tier=restricted`),
/// nothing is submitted and the reconcile is retried (`NamespaceNotCached`); once the namespace
/// is cached with `tier=restricted`, it is refused (`NoAccess`).
#[tokio::test]
async fn a_namespace_not_cached_yet_is_not_taken_for_one_without_labels() {
    let (ctx, mut api) = Context::test();
    let _index = register_trusted_empty(&ctx);
    let data = data_with_access(
        ctx,
        json!([{
            "namespaceSelector": {"matchExpressions": [
                {"key": "tier", "operator": "NotIn", "values": ["restricted"]},
            ]},
            "slurmUser": "alice",
        }]),
    );
    let job = finalized(slurm_job("early", "#!/bin/sh\ntrue\n"));
    // A new one as well: no finalizer either (one it then refuses would keep it, and hold a
    // deletion of the SlurmCluster as one whose submit answer may be lost does).
    let new = slurm_job("early-new", "#!/bin/sh\ntrue\n");
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
        api
    });
    for job in [&job, &new] {
        let error = reconcile(Arc::new(job.clone()), data.clone())
            .await
            .unwrap_err();
        assert_eq!(error.category(), "NamespaceNotCached");
        assert!(
            error.to_string().contains(&format!("namespace \"{NS}\"")),
            "{error}"
        );
    }
    let mut api = server.await.unwrap();
    assert!(data.submissions.is_empty(), "nothing submitted");

    // Cached, labelled restricted: refused.
    let (namespaces, mut writer) = reflector::store();
    let mut restricted = PartialObjectMeta::<Namespace>::default();
    restricted.metadata.name = Some(NS.into());
    restricted.metadata.labels = Some([("tier".to_owned(), "restricted".to_owned())].into());
    writer.apply_watcher_event(&watcher::Event::Apply(restricted));
    let data = Arc::new(JobContext {
        namespaces,
        ..(*data).clone()
    });
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let status = expect_status_apply(&mut api, &expected).await;
        expect_event(&mut api, &expected, "Warning", "NoAccess").await;
        api.expect_no_more_calls().await;
        (status, api)
    });
    reconcile(Arc::new(job), data.clone()).await.unwrap();
    let (status, api) = server.await.unwrap();
    let ready = condition::find(&status.conditions, status::READY).unwrap();
    assert_eq!(ready.reason, "NoAccess");
    assert!(data.submissions.is_empty(), "nothing submitted");
    // The new one, refused now that the labels are known: still no finalizer.
    refused_alone(new, data.clone(), api, "NoAccess").await;
    assert!(data.submissions.is_empty(), "nothing submitted");
}

/// A SlurmCluster connected (so it exists) that the SlurmCluster cache does not show yet, at a
/// start: a new SlurmJob naming it is retried (`ClusterNotReady`), without the finalizer (its
/// access then may refuse it) and without a write.
#[tokio::test]
async fn a_new_slurmjob_waits_for_the_cluster_cache_without_its_finalizer() {
    let (ctx, mut api) = Context::test();
    let _index = register_trusted_empty(&ctx);
    let data = data_with_access(ctx, json!([{"namespaces": [NS], "slurmUser": "alice"}]));
    let (slurm_clusters, _writer) = reflector::store();
    let data = Arc::new(JobContext {
        slurm_clusters,
        ..(*data).clone()
    });
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
    });
    let job = slurm_job("early", "#!/bin/sh\ntrue\n");
    let error = reconcile(Arc::new(job.clone()), data.clone())
        .await
        .unwrap_err();
    server.await.unwrap();
    assert_eq!(error.category(), "ClusterNotReady");
    assert!(data.submissions.is_empty(), "nothing submitted");

    // Neither cached nor connected yet (the usual order at a cold start: a connection waits
    // for a Secret and slurmrestd): the SlurmCluster is read, and it exists: retried the same.
    let (ctx, mut api) = Context::test();
    let data = data_with_access(ctx, json!([{"namespaces": [NS], "slurmUser": "alice"}]));
    let (slurm_clusters, _writer) = reflector::store();
    let data = Arc::new(JobContext {
        slurm_clusters,
        ..(*data).clone()
    });
    let existing = serde_json::to_value(cluster_granting(json!([]))).unwrap();
    let server = tokio::spawn(async move {
        let (call, send) = api.next().await;
        assert_eq!(call.method, Method::GET, "{call:?}");
        assert_eq!(call.path, "/apis/slurm.rs/v1alpha1/slurmclusters/local");
        respond(send, StatusCode::OK, &existing);
        api.expect_no_more_calls().await;
    });
    let error = reconcile(Arc::new(job), data.clone()).await.unwrap_err();
    server.await.unwrap();
    assert_eq!(error.category(), "ClusterNotReady");
    assert!(data.submissions.is_empty(), "nothing submitted");
}

/// A new SlurmJob naming a SlurmCluster that does not exist is refused (`ClusterNotFound`)
/// without the finalizer: it has nothing for a deletion to wait for.
#[tokio::test]
async fn a_new_slurmjob_naming_no_cluster_gets_no_finalizer() {
    let (ctx, mut api) = Context::test();
    let data = data(ctx);
    let mut job = slurm_job("lost-new", "#!/bin/sh\ntrue\n");
    job.spec.cluster_name = "ghost".into();
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_no_cluster_ghost(&mut api).await;
        let status = expect_status_apply(&mut api, &expected).await;
        expect_event(&mut api, &expected, "Warning", "ClusterNotFound").await;
        api.expect_no_more_calls().await;
        status
    });
    let action = reconcile(Arc::new(job), data).await.unwrap();
    assert_eq!(action, Action::await_change());
    let status = server.await.unwrap();
    let ready = condition::find(&status.conditions, status::READY).unwrap();
    assert_eq!(ready.reason, "ClusterNotFound");
}

/// A followed job that left slurmctld unseen is looked up in accounting, whose records without
/// a comment are its own only when they are the namespace's granted user's. With an access
/// entry that selects by label and the namespace not cached yet, that user is unknown: the
/// reconcile is retried (`NamespaceNotCached`) rather than ask accounting without a user and
/// call the job lost for good.
#[tokio::test]
async fn a_lost_job_waits_for_its_namespace_to_know_whose_records_are_its() {
    let (ctx, mut api) = Context::test();
    let tracked = ctx.started_at - chrono::TimeDelta::seconds(10);
    let _index = register_trusted_empty(&ctx);
    let data = data_with_access(
        ctx,
        json!([{
            "namespaceSelector": {"matchLabels": {"tier": "batch"}},
            "slurmUser": "alice",
        }]),
    );
    let mut job = finalized(slurm_job("gone", "#!/bin/sh\ntrue\n"));
    job.status = Some(SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(4300),
        observed_generation: Some(1),
        submitted_generation: Some(1),
        tracked_since: status::time(Some(tracked)),
        ..Default::default()
    });
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
    });
    let error = reconcile(Arc::new(job), data).await.unwrap_err();
    server.await.unwrap();
    assert_eq!(error.category(), "NamespaceNotCached");
}

/// A followed job proven gone from slurmctld while the cluster's accounting cannot be asked
/// (slurmdbd down, here unreachable) keeps its phase, but its status says what it waits for,
/// written once: the same failure again writes nothing and waits longer.
#[tokio::test]
async fn a_lost_job_whose_accounting_fails_says_so_once() {
    let (ctx, mut api) = Context::test();
    let tracked = ctx.started_at - chrono::TimeDelta::seconds(10);
    let _index = register_trusted_empty(&ctx);
    let data = data_with_access(ctx, json!([{"namespaces": [NS], "slurmUser": "alice"}]));
    let mut job = finalized(slurm_job("gone", "#!/bin/sh\ntrue\n"));
    job.status = Some(SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(4300),
        observed_generation: Some(1),
        submitted_generation: Some(1),
        tracked_since: status::time(Some(tracked)),
        ..Default::default()
    });
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let status = expect_status_apply(&mut api, &expected).await;
        (api, status)
    });
    let first = reconcile(Arc::new(job.clone()), data.clone())
        .await
        .unwrap();
    let (mut api, status) = server.await.unwrap();
    assert_eq!(first, Action::requeue(Backoffs::MIN));
    assert_eq!(status.phase, Phase::Running, "not called lost meanwhile");
    let reason = status.state_reason.clone().unwrap_or_default();
    assert!(
        reason.contains("Slurm job 4300 left slurmctld")
            && reason.contains("accounting (slurmdbd) how it ended failed"),
        "{reason}"
    );
    job.status = Some(status);
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
    });
    let second = reconcile(Arc::new(job), data).await.unwrap();
    server.await.unwrap();
    assert_eq!(second, Action::requeue(Backoffs::MIN * 2));
}

/// A namespace no access entry grants: `Ready=False/NoAccess` saying what to do, one Warning
/// Event, no submit (slurmrestd is unreachable: a submit attempt would fail the reconcile), and
/// the next reconcile writes nothing again.
#[tokio::test]
async fn a_namespace_without_access_is_told_and_nothing_is_submitted() {
    let (ctx, api) = Context::test();
    let _index = register_trusted_empty(&ctx);
    let data = data_with_access(
        ctx,
        json!([{"namespaces": ["team-a"], "slurmUser": "alice"}]),
    );
    let job = finalized(slurm_job("denied", "#!/bin/sh\ntrue\n"));
    let (status, event) = refused_once(job, data.clone(), api, "NoAccess").await;
    let ready = condition::find(&status.conditions, status::READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "NoAccess")
    );
    assert!(
        ready.message.contains(&format!(
            "namespace \"{NS}\" may not use SlurmCluster \"local\""
        )),
        "{}",
        ready.message
    );
    assert_eq!(status.job_id, None);
    assert!(
        event.body["note"]
            .as_str()
            .unwrap()
            .contains("ask the platform admin")
    );
    assert!(data.submissions.is_empty(), "nothing submitted");

    // A new SlurmJob so refused gets no finalizer: its deletion needs nothing, and it cannot
    // hold the SlurmCluster's deletion as one whose submit answer a crash may have lost.
    let (ctx, api) = Context::test();
    let _index = register_trusted_empty(&ctx);
    let data = data_with_access(
        ctx,
        json!([{"namespaces": ["team-a"], "slurmUser": "alice"}]),
    );
    let job = slurm_job("new-denied", "#!/bin/sh\ntrue\n");
    assert!(kit::lacks_finalizer(&job));
    refused_alone(job, data, api, "NoAccess").await;
}

/// Reconcile finalized `job`, which is refused with `reason`: its status applied and a Warning;
/// then again with that status stored, which writes nothing and warns no more. The status and
/// the Event written.
async fn refused_once(
    mut job: SlurmJob,
    data: Arc<JobContext>,
    mut api: ApiServerVerifier,
    reason: &'static str,
) -> (SlurmJobStatus, Call) {
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let status = expect_status_apply(&mut api, &expected).await;
        let event = expect_event(&mut api, &expected, "Warning", reason).await;
        (status, event, api)
    });
    let action = reconcile(Arc::new(job.clone()), data.clone())
        .await
        .unwrap();
    assert_eq!(action, Action::await_change());
    let (status, event, mut api) = server.await.unwrap();
    // The same refusal again: no write, no Event.
    job.status = Some(status.clone());
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
    });
    let action = reconcile(Arc::new(job), data).await.unwrap();
    assert_eq!(action, Action::await_change());
    server.await.unwrap();
    (status, event)
}

/// Reconcile `job`, which is refused with `reason`: its status applied and a Warning, nothing
/// else (no finalizer patch, no read).
async fn refused_alone(
    job: SlurmJob,
    data: Arc<JobContext>,
    mut api: ApiServerVerifier,
    reason: &'static str,
) {
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let status = expect_status_apply(&mut api, &expected).await;
        expect_event(&mut api, &expected, "Warning", reason).await;
        api.expect_no_more_calls().await;
        status
    });
    let action = reconcile(Arc::new(job), data).await.unwrap();
    assert_eq!(action, Action::await_change());
    let status = server.await.unwrap();
    let ready = condition::find(&status.conditions, status::READY).unwrap();
    assert_eq!(ready.reason, reason);
}

/// A cluster authenticated by a ready token acts as that token's user, the one user it can act
/// as: a namespace granted that user is refused as one granted `auth.jwt.user` is, unless its
/// entry says `allowClusterUser` (the spec does not name the user: the registered client does).
/// For a key, the spec's user counts, whatever client is still registered.
#[tokio::test]
async fn a_token_clusters_own_user_is_granted_only_on_purpose() {
    use crate::controller::test_support::{slurm_key, slurm_token};
    let token_cluster = |allow: bool| -> SlurmCluster {
        let mut cluster = cluster_granting(
            json!([{"namespaces": [NS], "slurmUser": "slurm", "allowClusterUser": allow}]),
        );
        cluster.spec.auth =
            serde_json::from_value(json!({"tokenSecretRef": {"name": "token"}})).unwrap();
        cluster
    };
    let key_cluster = |user: &str| -> SlurmCluster {
        let mut cluster = token_cluster(false);
        cluster.spec.auth =
            serde_json::from_value(json!({"jwt": {"keySecretRef": {"name": "jwt"}, "user": user}}))
                .unwrap();
        cluster
    };
    let job = slurm_job("own", "#!/bin/sh\ntrue\n");
    // `cluster` as registered with `credentials` (`None`: not registered yet).
    let grant_on = |cluster: SlurmCluster, credentials: Option<crate::slurm::Credentials>| {
        let (ctx, _api) = Context::test();
        let index = credentials.map(|credentials| register_trusted_empty_as(&ctx, credentials));
        let data = data_with_cluster(ctx, cluster);
        let registered = data.ctx.clusters.get(&cluster_of(&job));
        let got = super::grant(&job, NS, &data, registered.as_ref().map(|h| &h.client))
            .unwrap()
            .map(|g| g.slurm_user)
            .map_err(|r| r.reason);
        drop(index);
        got
    };
    let refused = Err("ClusterUserNotAllowed");
    let granted = Ok("slurm".to_owned());
    let rows = [
        (
            "a token for slurm",
            token_cluster(false),
            Some(slurm_token()),
            refused.clone(),
        ),
        (
            "a token for slurm, allowed",
            token_cluster(true),
            Some(slurm_token()),
            granted.clone(),
        ),
        // Its user unknown until connected: the submit waits for the connection anyway.
        (
            "a token, not connected yet",
            token_cluster(false),
            None,
            granted.clone(),
        ),
        (
            "a key for slurm",
            key_cluster("slurm"),
            Some(slurm_key()),
            refused.clone(),
        ),
        (
            "a key, not connected yet",
            key_cluster("slurm"),
            None,
            refused.clone(),
        ),
        // A key for another user while the client of the token before is still in.
        (
            "a token becoming a key for ops",
            key_cluster("ops"),
            Some(slurm_token()),
            granted.clone(),
        ),
        (
            "a key becoming a token for slurm",
            token_cluster(false),
            Some(slurm_key()),
            refused.clone(),
        ),
    ];
    for (what, cluster, credentials, want) in rows {
        assert_eq!(grant_on(cluster, credentials), want, "{what}");
    }
    // A key for `ops`, the token's client (`slurm`) still in: the spec's user counts.
    let mut for_ops = key_cluster("ops");
    for_ops.spec.access[0].slurm_user = "ops".into();
    assert_eq!(grant_on(for_ops, Some(slurm_token())), refused);
    // A token for `slurm` (the entry's user, unflagged), the key's client (minting `ops`) still
    // in: the access check cannot tell yet, so the submit waits for the token
    // (`the_submit_waits_for_the_credentials_its_spec_names`).
    let ops_key =
        crate::slurm::Credentials::minted(b"k".to_vec(), "ops", Duration::from_secs(900)).unwrap();
    assert_eq!(grant_on(token_cluster(false), Some(ops_key)), granted);
    // The registration dropped (a Secret deleted, the Lease lost) after the reconcile took
    // its client: the user that client's token acts as still counts, not the empty registry.
    let (ctx, _api) = Context::test();
    let _index = register_trusted_empty_as(&ctx, slurm_token());
    let data = data_with_cluster(ctx, token_cluster(false));
    let taken = data.ctx.clusters.get(&cluster_of(&job)).unwrap();
    assert!(data.ctx.clusters.remove(&cluster_of(&job)));
    let got = super::grant(&job, NS, &data, Some(&taken.client))
        .unwrap()
        .map(|g| g.slurm_user)
        .map_err(|r| r.reason);
    assert_eq!(got, refused);

    // The whole reconcile: refused before its finalizer, nothing submitted.
    let (ctx, api) = Context::test();
    let _index = register_trusted_empty_as(&ctx, slurm_token());
    let data = data_with_cluster(ctx, token_cluster(false));
    refused_alone(job, data.clone(), api, "ClusterUserNotAllowed").await;
    assert!(data.submissions.is_empty(), "nothing submitted");
}

/// A submit goes out only at the endpoint, with the credentials, the SlurmCluster's spec names:
/// while the client
/// registered is still the one before (a key where the spec now says a token, or a key for
/// another user), the SlurmJob waits (`Ready=Unknown/ClusterNotReady`, retried), and nothing is
/// submitted with the old credentials, which may mint the very user the new setup refuses.
#[tokio::test]
async fn the_submit_waits_for_the_credentials_its_spec_names() {
    use crate::controller::test_support::{slurm_key, slurm_token};
    let allowed = json!([{"namespaces": [NS], "slurmUser": "slurm", "allowClusterUser": true}]);
    let mut token_cluster = cluster_granting(allowed.clone());
    token_cluster.spec.auth =
        serde_json::from_value(json!({"tokenSecretRef": {"name": "token"}})).unwrap();
    let mut ops_key_cluster = cluster_granting(allowed);
    ops_key_cluster.spec.auth =
        serde_json::from_value(json!({"jwt": {"keySecretRef": {"name": "jwt"}, "user": "ops"}}))
            .unwrap();
    // The pairing that matters: a token for `slurm`, its entry unflagged, the key for `ops`
    // still in (the access check weighs `ops` and grants; the old key would mint `slurm`).
    let mut unflagged_token_cluster = token_cluster.clone();
    unflagged_token_cluster.spec.access[0].allow_cluster_user = false;
    let ops_key =
        crate::slurm::Credentials::minted(b"k".to_vec(), "ops", Duration::from_secs(900)).unwrap();
    let mut moved_cluster = cluster_granting(
        json!([{"namespaces": [NS], "slurmUser": "slurm", "allowClusterUser": true}]),
    );
    moved_cluster.spec.endpoint = "http://127.0.0.1:2".into();
    for (what, cluster, credentials) in [
        (
            "an unflagged token, the key for ops still in",
            unflagged_token_cluster,
            ops_key,
        ),
        ("a token, the key still in", token_cluster, slurm_key()),
        (
            "a key for ops, the token still in",
            ops_key_cluster.clone(),
            slurm_token(),
        ),
        (
            "a key for ops, the key for slurm still in",
            ops_key_cluster,
            slurm_key(),
        ),
        (
            "another endpoint, the connection to the old one still in",
            moved_cluster,
            slurm_key(),
        ),
    ] {
        let (ctx, mut api) = Context::test();
        let _index = register_trusted_empty_as(&ctx, credentials);
        let data = data_with_cluster(ctx, cluster);
        let mut job = finalized(slurm_job("switching", "#!/bin/sh\ntrue\n"));
        // Refused before (a SlurmCluster edit reconciles it again): waiting, no longer stalled.
        job.status = Some(status::stalled(
            SlurmJobStatus::default(),
            1,
            "NoAccess",
            "refused before".into(),
            crate::crd::condition::now(),
        ));
        let expected = job.clone();
        let server = tokio::spawn(async move {
            let status = expect_status_apply(&mut api, &expected).await;
            api.expect_no_more_calls().await;
            status
        });
        let error = reconcile(Arc::new(job), data.clone()).await.unwrap_err();
        let status = server.await.unwrap();
        assert_eq!(error.category(), "ClusterNotReady", "{what}");
        let ready = condition::find(&status.conditions, status::READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("Unknown", "ClusterNotReady"),
            "{what}"
        );
        // It says what it waits for: not a connection (the SlurmCluster may well be Ready).
        assert!(
            ready.message.contains("credentials") && ready.message.contains("spec.auth"),
            "{what}: {}",
            ready.message
        );
        assert!(
            condition::find(&status.conditions, status::STALLED).is_none(),
            "{what}: {status:?}"
        );
        assert!(data.submissions.is_empty(), "{what}: nothing submitted");
    }
}

/// A refusal longer than a condition keeps (an entry granting 200 long account names): the
/// condition and the Event are cut to what the API server takes, and the next reconcile, which
/// finds the cut message, writes nothing and warns no more.
#[tokio::test]
async fn a_long_refusal_is_written_and_warned_once() {
    let (ctx, api) = Context::test();
    let _index = register_trusted_empty(&ctx);
    let accounts: Vec<String> = (0..200)
        .map(|i| format!("account-{i:03}-{}", "x".repeat(60)))
        .collect();
    let data = data_with_access(
        ctx,
        json!([{"namespaces": [NS], "slurmUser": "alice", "accounts": accounts}]),
    );
    let mut job = finalized(slurm_job("many", "#!/bin/sh\ntrue\n"));
    job.spec.account = Some("other".into());
    let (status, event) = refused_once(job, data, api, "AccountNotGranted").await;
    let ready = condition::find(&status.conditions, status::READY).unwrap();
    assert_eq!(ready.reason, "AccountNotGranted");
    assert!(ready.message.chars().count() <= crate::crd::condition::MAX_MESSAGE);
    assert!(ready.message.ends_with('…'), "{}", ready.message);
    let note = event.body["note"].as_str().unwrap();
    assert!(note.len() <= kit::EVENT_NOTE_MAX_BYTES, "{}", note.len());
    assert!(
        note.starts_with("spec.account \"other\" is not granted"),
        "{note}"
    );
}

/// A SlurmCluster being deleted takes no new submit: its deletion waits for the SlurmJobs that
/// name it, and a new one would keep it.
#[tokio::test]
async fn a_deleting_cluster_takes_no_new_submit() {
    let (ctx, mut api) = Context::test();
    let _index = register_trusted_empty(&ctx);
    let user = local_slurm().map_or_else(|| "slurm".to_owned(), |s| s["SLURM_USER"].clone());
    let mut local: SlurmCluster = serde_json::from_value(json!({
        "apiVersion": "slurm.rs/v1alpha1",
        "kind": "SlurmCluster",
        "metadata": {"name": "local"},
        "spec": {
            "endpoint": "http://127.0.0.1:1",
            "allowInsecureHttp": true,
            "auth": {"jwt": {"keySecretRef": {"name": "jwt"}}},
            "access": [{"namespaces": [NS], "slurmUser": user, "allowClusterUser": true}],
        },
    }))
    .unwrap();
    local.metadata.deletion_timestamp = Some(crate::crd::condition::now());
    let data = data_with_cluster(ctx, local);
    let job = finalized(slurm_job("late", "#!/bin/sh\ntrue\n"));
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let status = expect_status_apply(&mut api, &expected).await;
        expect_event(&mut api, &expected, "Warning", "ClusterDeleting").await;
        api.expect_no_more_calls().await;
        status
    });
    let action = reconcile(Arc::new(job), data.clone()).await.unwrap();
    assert_eq!(action, Action::await_change());
    let status = server.await.unwrap();
    let ready = condition::find(&status.conditions, status::READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "ClusterDeleting")
    );
    assert!(data.submissions.is_empty(), "nothing submitted");
}

/// A SlurmJob naming a SlurmCluster that does not exist says so (`Ready=False/ClusterNotFound`,
/// one Warning Event) instead of "not connected yet", and waits for a change (the SlurmCluster
/// watch reconciles it once the cluster is created).
#[tokio::test]
async fn a_missing_cluster_is_named_as_missing() {
    let (ctx, mut api) = Context::test();
    let data = data(ctx);
    let mut job = finalized(slurm_job("lost", "#!/bin/sh\ntrue\n"));
    job.spec.cluster_name = "ghost".into();
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_no_cluster_ghost(&mut api).await;
        let status = expect_status_apply(&mut api, &expected).await;
        let event = expect_event(&mut api, &expected, "Warning", "ClusterNotFound").await;
        api.expect_no_more_calls().await;
        (status, event)
    });
    let action = reconcile(Arc::new(job), data).await.unwrap();
    assert_eq!(action, Action::await_change());
    let (status, event) = server.await.unwrap();
    let ready = condition::find(&status.conditions, status::READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "ClusterNotFound")
    );
    assert!(
        ready
            .message
            .contains("SlurmCluster \"ghost\" does not exist"),
        "{}",
        ready.message
    );
    assert!(
        event.body["note"]
            .as_str()
            .unwrap()
            .contains("spec.clusterName")
    );
}

/// A `clusterName` that is not an object name (stored before admission refused it) never goes
/// into a request path: no read, the SlurmJob is told the cluster does not exist.
#[tokio::test]
async fn a_cluster_name_that_is_a_path_is_never_requested() {
    let (ctx, api) = Context::test();
    let data = data(ctx);
    let mut job = finalized(slurm_job("pathy", "#!/bin/sh\ntrue\n"));
    job.spec.cluster_name = "../../../api/v1/namespaces/kube-system/secrets/x".into();
    refused_alone(job, data, api, "ClusterNotFound").await;
}

/// What a SlurmJob's watch event triggers: a change of generation, finalizers, the skip-cancel
/// annotation, phase or job id, and every SlurmJob new to the cache; not a status write that
/// changes none of them (the reconcile's own conditions, an Event's count) nor a tenant's label.
#[test]
fn a_slurmjob_event_triggers_only_on_what_the_reconcile_reacts_to() {
    let base = {
        let mut job = finalized(slurm_job("a", "#!/bin/sh\n"));
        job.status = Some(SlurmJobStatus {
            phase: Phase::Running,
            job_id: Some(7),
            ..Default::default()
        });
        job
    };
    let cached = CachedSlurmJob::new(base.clone()).unwrap();
    let edit = |change: fn(&mut SlurmJob)| {
        let mut job = base.clone();
        change(&mut job);
        CachedSlurmJob::new(job).unwrap()
    };
    type Edit = fn(&mut SlurmJob);
    let cases: [(&str, Edit, bool); 8] = [
        ("nothing", |_| {}, false),
        (
            "a status field that is neither phase nor job id",
            |j| j.status.as_mut().unwrap().nodes = Some("n1".into()),
            false,
        ),
        (
            "a label",
            |j| j.metadata.labels = Some([("team".into(), "a".into())].into()),
            false,
        ),
        ("the generation", |j| j.metadata.generation = Some(2), true),
        ("the finalizers", |j| j.metadata.finalizers = None, true),
        (
            "the skip-cancel annotation",
            |j| {
                j.metadata.annotations =
                    Some([(SKIP_CANCEL_ANNOTATION.into(), "true".into())].into())
            },
            true,
        ),
        (
            "the phase",
            |j| j.status.as_mut().unwrap().phase = Phase::Completed,
            true,
        ),
        (
            "the job id",
            |j| j.status.as_mut().unwrap().job_id = Some(8),
            true,
        ),
    ];
    for (what, change, triggers) in cases {
        assert_eq!(reacts_to(Some(&cached), &edit(change)), triggers, "{what}");
    }
    assert!(reacts_to(None, &cached), "new to the cache");
}

/// The controller's watch pipeline (`kit::reflect_changes` with [`reacts_to`]): every event
/// reaches the cache, and only those that change what the reconcile reacts to trigger one,
/// relists included.
#[test]
fn the_slurmjob_cache_sees_every_event_and_the_reconciles_only_the_changes() {
    let job = finalized(slurm_job("a", "#!/bin/sh\n"));
    let cached = |job: &SlurmJob| CachedSlurmJob::new(job.clone()).unwrap();
    let mut status_write = job.clone();
    status_write.status = Some(SlurmJobStatus {
        phase: Phase::Pending,
        ..Default::default()
    });
    let mut conditions_only = status_write.clone();
    conditions_only.status.as_mut().unwrap().state_reason = Some("Priority".into());
    let events = [
        watcher::Event::Init,
        watcher::Event::InitApply(cached(&job)),
        watcher::Event::InitDone,
        watcher::Event::Apply(cached(&status_write)),
        watcher::Event::Apply(cached(&conditions_only)),
        // A relist with nothing changed meanwhile.
        watcher::Event::Init,
        watcher::Event::InitApply(cached(&conditions_only)),
        watcher::Event::InitDone,
    ];
    let (store, writer) = reflector::store();
    let (by_uid, passed) = kit::reflect_changes(
        futures::stream::iter(events.map(Ok)),
        writer,
        reacts_to,
        |_| {},
    );
    let passed: Vec<CachedSlurmJob> =
        futures::executor::block_on(passed.map(Result::unwrap).collect());
    assert_eq!(passed, [cached(&job), cached(&status_write)]);
    assert_eq!(
        store
            .state()
            .iter()
            .map(|j| (**j).clone())
            .collect::<Vec<_>>(),
        [cached(&conditions_only)],
        "the cache holds the last event"
    );
    let uid = job.metadata.uid.as_deref().unwrap();
    assert_eq!(
        by_uid.get(uid).as_deref(),
        Some(&cached(&conditions_only)),
        "and so does its uid index"
    );
}

/// The driver's `dependsOn` lookup judges a live dependee with the index: its id, now held by
/// another SlurmJob's job, makes it `Lost` (never handed to Slurm); an edit not reconciled yet
/// waits as not submitted; one the index shows as its own keeps its id.
#[test]
fn a_dependee_whose_id_names_another_job_is_lost() {
    let key = crate::controller::test_support::test_tag_key();
    let mut prep = slurm_job("prep", "#!/bin/sh\ntrue\n");
    let uid = prep.metadata.uid.clone().unwrap();
    prep.status = Some(SlurmJobStatus {
        job_id: Some(12),
        phase: Phase::Running,
        observed_generation: Some(1),
        tracked_since: status::time(Some(Utc::now() - chrono::TimeDelta::seconds(60))),
        ..Default::default()
    });
    let record = |owner: &str| {
        let mut job = crate::slurm::types::Job {
            job_id: 12,
            state: JobState::from_strings(&["RUNNING"]),
            user_name: Some("alice".into()),
            ..crate::slurm::types::Job::bare()
        };
        job.set_comment(Some(key.comment(&OwnerTag::new(owner, 1), "alice")));
        job
    };
    let index = |job: crate::slurm::types::Job| ClusterState {
        jobs: Arc::new([(12, job)].into_iter().collect()),
        jobs_synced_at: Some(Utc::now()),
        ..Default::default()
    };
    let found = |job: &SlurmJob, state: &ClusterState| {
        dependee(
            &CachedSlurmJob::new(job.clone()).unwrap(),
            state,
            &key,
            Some("alice"),
        )
    };
    let ours = found(&prep, &index(record(&uid)));
    assert_eq!((ours.job_id, ours.phase), (Some(12), Some(Phase::Running)));
    let theirs = found(&prep, &index(record("someone-else")));
    assert_eq!((theirs.job_id, theirs.phase), (Some(12), Some(Phase::Lost)));
    // Gone from a listing that began after it: how it ended is asked of accounting first.
    let gone = found(
        &prep,
        &ClusterState {
            jobs_synced_at: Some(Utc::now()),
            ..Default::default()
        },
    );
    assert!(
        gone.settling && gone.phase == Some(Phase::Running),
        "{gone:?}"
    );
    prep.metadata.generation = Some(2);
    let edited = found(&prep, &index(record("someone-else")));
    assert_eq!(edited.job_id, None, "an edit not reconciled yet");
}

/// A SlurmJob waiting for another (`dependsOn`) is woken by the watch event of each change its
/// wait judges the other by (created, submitted, its phase, an edit not reconciled yet), once
/// the cache shows it; not by a status write of details. After a relist every waiting one is
/// woken; one deleted waits for nothing any more.
#[test]
fn a_dependee_change_wakes_its_dependents_once_the_cache_holds_it() {
    let dependents = Dependents::default();
    dependents.wait_for(NS, "train", ["prep"]);
    dependents.wait_for(NS, "eval", ["train"]);
    let prep = finalized(slurm_job("prep", "#!/bin/sh\n"));
    let with = |job: &SlurmJob, change: &dyn Fn(&mut SlurmJob)| {
        let mut job = job.clone();
        change(&mut job);
        job
    };
    let submitted = with(&prep, &|job| {
        job.status = Some(SlurmJobStatus {
            job_id: Some(7),
            phase: Phase::Pending,
            observed_generation: Some(1),
            ..Default::default()
        })
    });
    let details = with(&submitted, &|job| {
        job.status.as_mut().unwrap().state_reason = Some("Priority".into())
    });
    let running = with(&details, &|job| {
        job.status.as_mut().unwrap().phase = Phase::Running
    });
    let edited = with(&running, &|job| job.metadata.generation = Some(2));
    let unrelated = finalized(slurm_job("unrelated", "#!/bin/sh\n"));
    let train = finalized(slurm_job("train", "#!/bin/sh\n"));
    let cached = |job: &SlurmJob| CachedSlurmJob::new(job.clone()).unwrap();
    let events = [
        watcher::Event::Apply(cached(&prep)),
        watcher::Event::Apply(cached(&submitted)),
        watcher::Event::Apply(cached(&details)),
        watcher::Event::Apply(cached(&running)),
        watcher::Event::Apply(cached(&edited)),
        watcher::Event::Apply(cached(&unrelated)),
        watcher::Event::Init,
        watcher::Event::InitApply(cached(&edited)),
        watcher::Event::InitDone,
        watcher::Event::Delete(cached(&train)),
        watcher::Event::Apply(cached(&running)),
    ];
    let (store, writer) = reflector::store::<CachedSlurmJob>();
    let reader = store.clone();
    let seen = std::sync::Mutex::new(Vec::new());
    let (_, passed) = kit::reflect_changes(
        futures::stream::iter(events.map(Ok)),
        writer,
        reacts_to,
        |applied| {
            let mut woken: Vec<String> = dependents
                .woken_by(applied)
                .iter()
                .map(|r| r.name.clone())
                .collect();
            woken.sort();
            // What the woken reconcile reads of `prep`.
            let prep = reader
                .get(&ObjectRef::new("prep").within(NS))
                .map(|p| (p.job_id(), p.phase(), p.status_current()));
            seen.lock().unwrap().push((woken, prep));
        },
    );
    futures::executor::block_on(passed.count());
    let none: Vec<String> = Vec::new();
    let train_woken = vec!["train".to_owned()];
    assert_eq!(
        seen.into_inner().unwrap(),
        [
            (train_woken.clone(), Some((None, None, false))),
            (
                train_woken.clone(),
                Some((Some(7), Some(Phase::Pending), true))
            ),
            (none.clone(), Some((Some(7), Some(Phase::Pending), true))),
            (
                train_woken.clone(),
                Some((Some(7), Some(Phase::Running), true))
            ),
            (
                train_woken.clone(),
                Some((Some(7), Some(Phase::Running), false))
            ),
            (none.clone(), Some((Some(7), Some(Phase::Running), false))),
            // The relist: every waiting SlurmJob.
            (
                vec!["eval".to_owned(), "train".to_owned()],
                Some((Some(7), Some(Phase::Running), false))
            ),
            // `train` deleted: it waits for nothing.
            (none.clone(), Some((Some(7), Some(Phase::Running), false))),
            (none, Some((Some(7), Some(Phase::Running), true))),
        ]
    );
    assert!(dependents.of(NS, "prep").is_empty());
    assert_eq!(dependents.of(NS, "train"), ["eval"]);
}

/// `job` reconciled once: its status written, and a look again after `DEPENDENCY_RECHECK`.
async fn reconciled_to_a_dependency_wait(
    job: &SlurmJob,
    data: &Arc<JobContext>,
    mut api: ApiServerVerifier,
) -> (SlurmJobStatus, ApiServerVerifier) {
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let status = expect_status_apply(&mut api, &expected).await;
        (status, api)
    });
    let action = reconcile(Arc::new(cached(job)), data.clone())
        .await
        .unwrap();
    assert_eq!(action, Action::requeue(dependents::DEPENDENCY_RECHECK));
    server.await.unwrap()
}

/// A SlurmJob waiting for its dependencies asks Slurm nothing, so it takes none of the
/// cluster's request slots: with all of them taken (a pipeline's waiting links beside a hung
/// slurmrestd), it still says why it waits, is held to be woken by its dependee, and looks
/// again on its own only after `DEPENDENCY_RECHECK`. Once its dependee has a job id, the step
/// would submit: then it needs a slot like any submit.
#[tokio::test]
async fn a_dependency_wait_takes_no_request_slot_and_is_woken_by_its_dependee() {
    let (ctx, api) = Context::test();
    let mut job = finalized(slurm_job("train", "#!/bin/sh\ntrue\n"));
    job.spec.depends_on = serde_json::from_value(json!([{"name": "prep"}])).unwrap();
    let _index = register_trusted_empty(&ctx);
    let handle = ctx.clusters.get(&ObjectRef::new("local")).unwrap();
    let taken: Vec<_> = std::iter::from_fn(|| handle.try_io()).collect();
    assert_eq!(taken.len(), crate::state::registry::IO_PER_CONNECTION);
    let data = data(ctx);
    let (status, mut api) = reconciled_to_a_dependency_wait(&job, &data, api).await;
    let ready = condition::find(&status.conditions, status::READY).unwrap();
    assert_eq!(
        (ready.reason.as_str(), ready.message.as_str()),
        (
            plan::WAITING_FOR_DEPENDENCIES,
            "waiting for SlurmJobs that do not exist: prep"
        )
    );
    assert_eq!(data.dependents.of(NS, "prep"), ["train"]);

    // `prep` submitted (in the cache): `train` would submit now, which needs a slot.
    let mut prep = finalized(slurm_job("prep", "#!/bin/sh\ntrue\n"));
    prep.status = Some(SlurmJobStatus {
        job_id: Some(41),
        phase: Phase::Pending,
        observed_generation: Some(1),
        submitted_generation: Some(1),
        ..Default::default()
    });
    let (jobs, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Apply(CachedSlurmJob::new(prep).unwrap()));
    let data = Arc::new(JobContext {
        jobs,
        ..(*data).clone()
    });
    job.status = Some(status);
    let error = reconcile(Arc::new(cached(&job)), data.clone())
        .await
        .unwrap_err();
    assert!(matches!(error, Error::ClusterBusy(_)), "{}", Chain(&error));
    assert_eq!(data.dependents.of(NS, "prep"), ["train"], "still waiting");
    drop(taken);

    // Edited to depend on itself (stored before admission refused that): not a wait any more
    // but an invalid spec, and no longer held as waiting for `prep`.
    job.spec.depends_on =
        serde_json::from_value(json!([{"name": "prep"}, {"name": "train"}])).unwrap();
    job.metadata.generation = Some(2);
    // This process gave it the finalizer: no predecessor's submit of the edit is waited out.
    data.taken_on
        .record(&uid_of(&job), data.ctx.acting_since(), Utc::now());
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_get_job(&mut api, &expected).await;
        let status = expect_status_apply(&mut api, &expected).await;
        expect_event(&mut api, &expected, "Warning", "InvalidSpec").await;
        api.expect_no_more_calls().await;
        status
    });
    reconcile(Arc::new(cached(&job)), data.clone())
        .await
        .unwrap();
    let status = server.await.unwrap();
    let ready = condition::find(&status.conditions, status::READY).unwrap();
    assert_eq!(ready.reason, "InvalidSpec");
    assert!(data.dependents.is_empty(), "{:?}", data.dependents);
}

/// Three SlurmJobs that wait for each other (`train` for `prep`, not submitted, which waits
/// for `fetch`, which waits for `train`): `train` says so, naming the cycle and what ends it,
/// instead of waiting for `prep` to be submitted as if it could be. Once `fetch` is edited (its
/// status not yet of its new spec, which may no longer wait for `train`), no cycle is named:
/// `train` waits as for any dependee not submitted yet.
#[tokio::test]
async fn a_dependency_cycle_is_named_in_the_wait() {
    let (ctx, api) = Context::test();
    let mut job = finalized(slurm_job("train", "#!/bin/sh\ntrue\n"));
    job.spec.depends_on = serde_json::from_value(json!([{"name": "prep"}])).unwrap();
    let _index = register_trusted_empty(&ctx);
    // What their own reconciles wrote and registered: prep waits for fetch, fetch for train.
    let waiting = |name: &str, on: &str| {
        let mut waiting = finalized(slurm_job(name, "#!/bin/sh\ntrue\n"));
        waiting.spec.depends_on = serde_json::from_value(json!([{"name": on}])).unwrap();
        waiting.status = Some(status::waiting(
            SlurmJobStatus::default(),
            1,
            plan::WAITING_FOR_DEPENDENCIES,
            format!("waiting for SlurmJobs to be submitted: {on}"),
            condition::now(),
        ));
        CachedSlurmJob::new(waiting).unwrap()
    };
    let (jobs, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Apply(waiting("prep", "fetch")));
    writer.apply_watcher_event(&watcher::Event::Apply(waiting("fetch", "train")));
    let data = data(ctx);
    let data = Arc::new(JobContext {
        jobs,
        ..(*data).clone()
    });
    data.dependents.wait_for(NS, "prep", ["fetch"]);
    data.dependents.wait_for(NS, "fetch", ["train"]);
    let (status, mut api) = reconciled_to_a_dependency_wait(&job, &data, api).await;
    let ready = condition::find(&status.conditions, status::READY).unwrap();
    assert_eq!(
        (ready.reason.as_str(), ready.message.as_str()),
        (
            plan::WAITING_FOR_DEPENDENCIES,
            "dependsOn makes a cycle: train → prep → fetch → train (each waits for the next to \
             be submitted), so none of them can be: edit the dependsOn of one of them"
        )
    );
    assert_eq!(data.dependents.of(NS, "prep"), ["train"]);

    // fetch edited: generation 2, its status still of generation 1.
    let mut edited = waiting("fetch", "train").object().unwrap();
    edited.metadata.generation = Some(2);
    writer.apply_watcher_event(&watcher::Event::Apply(CachedSlurmJob::new(edited).unwrap()));
    job.status = Some(status);
    let expected = job.clone();
    let server = tokio::spawn(async move { expect_status_apply(&mut api, &expected).await });
    reconcile(Arc::new(cached(&job)), data.clone())
        .await
        .unwrap();
    let status = server.await.unwrap();
    let ready = condition::find(&status.conditions, status::READY).unwrap();
    assert_eq!(ready.message, "waiting for SlurmJobs to be submitted: prep");
}

/// The output Pod of a job that ended long ago, gone since (deleted by its tenant, or by the
/// Pod garbage collector), is not created again: a reconcile of every finished SlurmJob (an
/// operator start, a slurmrestd recovery) reads whether it is there (the Pod cache has not
/// listed yet) and creates nothing; once the cache has listed and shows none, it reads nothing.
#[tokio::test]
async fn a_finished_jobs_output_pod_is_not_created_again_long_after_the_end() {
    let (ctx, mut api) = Context::test();
    let (mut job, _index) =
        observed_with_output(&ctx, "long-done", "#!/bin/sh\necho hi\n", |tag| {
            let mut record = completed_record(202, tag);
            let ended = Utc::now() - output::CREATE_AFTER_END - chrono::TimeDelta::minutes(1);
            record.start_time = Some(ended - chrono::TimeDelta::minutes(5));
            record.end_time = Some(ended);
            record
        });
    assert_eq!(job.status.as_ref().unwrap().phase, Phase::Completed);
    let data = data(ctx);
    let expected = job.clone();
    let server = tokio::spawn(async move {
        let settled = expect_status_apply(&mut api, &expected).await;
        expect_get_pod(&mut api, &expected, None).await;
        api.expect_no_more_calls().await;
        (settled, api)
    });
    let action = reconcile(Arc::new(job.clone()), data.clone())
        .await
        .unwrap();
    let (settled, mut api) = server.await.unwrap();
    assert_eq!(action, Action::await_change());
    job.status = Some(settled);

    let data = with_pods(&data, &[]);
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
    });
    let action = reconcile(Arc::new(job), data).await.unwrap();
    server.await.unwrap();
    assert_eq!(action, Action::await_change());
}

/// Registers SlurmCluster `local` (unreachable) with a trusted index that skipped the records of
/// jobs no SlurmJob named, a minute before this process started; returns that moment and the
/// index's sender (keep it).
fn register_skipping_index(
    ctx: &Context,
) -> (DateTime<Utc>, tokio::sync::watch::Sender<Arc<ClusterState>>) {
    let skipped_before = ctx.started_at - chrono::TimeDelta::seconds(60);
    let state = ClusterState {
        skipped_before: Some(skipped_before),
        ..trusted_index(ctx, Vec::new())
    };
    let index =
        crate::controller::test_support::register_with_index(ctx, NS, "local", UNREACHABLE, state);
    (skipped_before, index)
}

/// A SlurmJob of generation `generation`, created at `created`, being deleted behind the
/// finalizer.
fn being_deleted(name: &str, generation: i64, created: DateTime<Utc>) -> SlurmJob {
    let mut job = finalized(slurm_job(name, "#!/bin/sh\ntrue\n"));
    job.metadata.deletion_timestamp = Some(crate::crd::condition::now());
    job.metadata.generation = Some(generation);
    job.metadata.creation_timestamp = status::time(Some(created));
    job
}

/// Deleting a SlurmJob that never recorded a job, on an index that skipped jobs: one created
/// after the index last skipped has every job made for it in the index, so it lets go without
/// asking accounting for earlier submits (a tenant's create-and-delete loop costs no search by
/// name); one created before waits for accounting (here unreachable), as a job made for it may
/// be among the skipped ones.
#[tokio::test]
async fn a_deletion_asks_accounting_only_for_a_slurmjob_older_than_what_the_index_skipped() {
    let (ctx, mut api) = Context::test();
    let (skipped_before, index) = register_skipping_index(&ctx);
    // A listing of every job long after this process began to act: no earlier incarnation's
    // submit can still land (the takeover wait is over), so what blocks the old one below is
    // the accounting search alone.
    let listed_at = ctx.started_at + chrono::TimeDelta::minutes(5);
    index.send_modify(|state| Arc::make_mut(state).fully_listed_at = Some(listed_at));
    let data = data(ctx);
    let deleted = |name: &str, created: DateTime<Utc>| being_deleted(name, 2, created);

    let young = deleted("young", Utc::now());
    let expected = young.clone();
    let server = tokio::spawn(async move {
        expect_finalizer_patch(&mut api, &expected, false).await;
        api.expect_no_more_calls().await;
        api
    });
    reconcile(Arc::new(young), data.clone()).await.unwrap();
    let mut api = server.await.unwrap();

    let old = deleted("old", skipped_before - chrono::TimeDelta::seconds(60));
    let expected = old.clone();
    let server = tokio::spawn(async move {
        let message = expect_blocked(&mut api, &expected, "WaitingForSlurmIndex").await;
        api.expect_no_more_calls().await;
        message
    });
    let error = reconcile(Arc::new(old), data).await.unwrap_err();
    let message = server.await.unwrap();
    assert_eq!(error.category(), "DeletionBlocked", "{message}");
}

/// A deletion that must search accounting for skipped records while other namespaces' searches
/// hold every one of the connection's search slots does not wait idle behind them: it cancels
/// the jobs it knows first (here slurmrestd cannot be reached: `CancelFailed`, naming the job);
/// one with none to cancel waits in the slots' line (`SearchBusy`, no request to Slurm), says so
/// once (`DeletionBlocked=True/WaitingForAccountingSearch`: a deletion that waited there showed
/// nothing), and is woken when a search ends.
#[tokio::test]
async fn a_deletion_waiting_for_a_search_slot_cancels_the_known_job_first() {
    let (ctx, api) = Context::test();
    let (skipped_before, _index) = register_skipping_index(&ctx);
    let handle = ctx.clusters.get(&ObjectRef::new("local")).unwrap();
    let others = other_namespaces_searching(&handle);
    let (data, mut woken) = data_waking(ctx);
    // Created before the index skipped, and edited since its run was recorded: a job of its
    // latest generation may be among the skipped.
    let deleted = |name: &str, status: Option<SlurmJobStatus>| SlurmJob {
        status,
        ..being_deleted(name, 3, skipped_before - chrono::TimeDelta::seconds(60))
    };

    let known = deleted(
        "known",
        Some(SlurmJobStatus {
            phase: Phase::Running,
            job_id: Some(4245),
            submitted_generation: Some(1),
            observed_generation: Some(2),
            ..Default::default()
        }),
    );
    let mut api = blocked_by_the_cancel_of(4245, known, data.clone(), api).await;

    let unknown = deleted("unknown", None);
    let expected = unknown.clone();
    let server = tokio::spawn(async move {
        let status = expect_status_apply(&mut api, &expected).await;
        let event = expect_event(&mut api, &expected, "Warning", DELETION_BLOCKED).await;
        api.expect_no_more_calls().await;
        (status, event, api)
    });
    let error = reconcile(Arc::new(unknown.clone()), data.clone())
        .await
        .unwrap_err();
    let (status, event, mut api) = server.await.unwrap();
    assert!(matches!(error, Error::SearchBusy(_)), "{}", Chain(&error));
    let blocked = condition::find(&status.conditions, DELETION_BLOCKED).unwrap();
    assert_eq!(
        (blocked.status.as_str(), blocked.reason.as_str()),
        ("True", "WaitingForAccountingSearch")
    );
    assert_eq!(event.body["note"], blocked.message.as_str());
    for part in [
        "its turn to ask SlurmCluster \"local\"'s accounting",
        "no unfinished Slurm job of it is known yet",
        SKIP_CANCEL_ANNOTATION,
    ] {
        assert!(
            blocked.message.contains(part),
            "{part}: {}",
            blocked.message
        );
    }
    assert!(woken.try_recv().is_err(), "not woken while they search");
    // Woken for nothing while they still search: nothing written again. Nor when a search of
    // its own left it waiting for the index (whose message names the search) and it is back in
    // the line: the two are not traded at every turn.
    let mut waiting_for_index = status.clone();
    for c in &mut waiting_for_index.conditions {
        if c.type_ == DELETION_BLOCKED {
            c.reason = "WaitingForSlurmIndex".into();
        }
    }
    for status in [status, waiting_for_index] {
        let server = tokio::spawn(async move {
            api.expect_no_more_calls().await;
            api
        });
        let again = SlurmJob {
            status: Some(status),
            ..unknown.clone()
        };
        let error = reconcile(Arc::new(again), data.clone()).await.unwrap_err();
        api = server.await.unwrap();
        assert!(matches!(error, Error::SearchBusy(_)), "{}", Chain(&error));
    }
    drop(others);
    assert_eq!(woken.try_recv().unwrap().name, "unknown");
}

/// As many other namespaces' accounting searches on `handle`'s connection as it allows at once
/// (`registry::SEARCHES_PER_CONNECTION`), as it were: every search slot of the connection.
fn other_namespaces_searching(handle: &ClusterHandle) -> Vec<crate::state::slots::SearchSlot> {
    (0..crate::state::registry::SEARCHES_PER_CONNECTION)
        .map(|i| {
            let namespace = handle.searches(&format!("team-{i}"));
            SearchSlots {
                namespace: &namespace,
                connection: handle.all_searches(),
            }
            .try_take_for(&format!("team-{i}/job"))
            .unwrap()
        })
        .collect()
}

/// Cluster `local`, reached at no address, with a complete index listed after the start, and
/// namespace `NS`'s accounting search slot on it taken (by another SlurmJob, as it were).
fn searching_cluster(
    ctx: &Context,
) -> (
    tokio::sync::watch::Sender<Arc<ClusterState>>,
    ClusterHandle,
    crate::state::slots::RequestSlot,
) {
    let state = ClusterState {
        fully_listed_at: Some(ctx.started_at + chrono::TimeDelta::seconds(41)),
        ..trusted_index(ctx, Vec::new())
    };
    let index =
        crate::controller::test_support::register_with_index(ctx, NS, "local", UNREACHABLE, state);
    let handle = ctx.clusters.get(&ObjectRef::new("local")).unwrap();
    let searching = handle.searches(NS).try_take().unwrap();
    (index, handle, searching)
}

/// One accounting search by job name per namespace at a time on a connection: a SlurmJob that
/// must search while another of its namespace does is requeued (`SearchBusy`) without a
/// request or a write, and woken when the search is done (other namespaces have slots of their
/// own: `registry::tests::search_slots_are_per_namespace_and_forgotten_unused`).
#[tokio::test]
async fn a_namespace_searches_accounting_one_slurmjob_at_a_time() {
    let (ctx, mut api) = Context::test();
    let mut job = finalized(slurm_job("edited", "#!/bin/sh\ntrue\n"));
    job.metadata.generation = Some(2);
    let (_index, _, searching) = searching_cluster(&ctx);
    // Nothing read either: the whole spec is read for the search only once it may run.
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
        api
    });
    let (data, mut woken) = data_waking(ctx);
    let (error, api) = waits_for_a_search_slot(&job, &data, server).await;
    let data_for_policy = data.clone();
    assert_eq!(
        error_policy(
            Arc::new(job.clone()),
            &error,
            cached_in(&data_for_policy, &job)
        ),
        Action::requeue(Backoffs::BUSY_MAX),
        "a bound, not a failure's backoff"
    );
    assert!(woken.try_recv().is_err(), "not woken while the search runs");
    drop(searching);
    let object = woken.try_recv().unwrap();
    assert_eq!(object.name, "edited");
    searches_in_its_turn(&job, data, api).await;
}

/// A reconcile of `job` (edited, so not fresh) that must search accounting by job name and
/// finds no search slot: `SearchBusy`, without a request or a write (`server` expects none).
async fn waits_for_a_search_slot(
    job: &SlurmJob,
    data: &Arc<JobContext>,
    server: tokio::task::JoinHandle<ApiServerVerifier>,
) -> (Error, ApiServerVerifier) {
    // Bounded: a reconcile that searched would wait for ever for the status write it then
    // makes, which the server refuses to answer.
    let error = tokio::time::timeout(
        Duration::from_secs(30),
        reconcile(Arc::new(cached(job)), data.clone()),
    )
    .await
    .expect("the reconcile returns without searching")
    .unwrap_err();
    let api = server.await.unwrap();
    assert!(matches!(error, Error::SearchBusy(_)), "{}", Chain(&error));
    (error, api)
}

/// `job`'s turn, once woken: it searches (slurmrestd cannot be reached here) and waits for
/// accounting.
async fn searches_in_its_turn(job: &SlurmJob, data: Arc<JobContext>, mut api: ApiServerVerifier) {
    let expected = job.clone();
    let server = tokio::spawn(async move {
        expect_get_job(&mut api, &expected).await;
        expect_status_apply(&mut api, &expected).await
    });
    reconcile(Arc::new(cached(job)), data).await.unwrap();
    let status = server.await.unwrap();
    let reconciling = condition::find(&status.conditions, status::RECONCILING).unwrap();
    assert_eq!(reconciling.reason, "WaitingForAccounting");
}

/// Every namespace's searches together hold fewer of a connection's request slots than it has
/// (`registry::SEARCHES_PER_CONNECTION`): a team with several namespaces, or several teams,
/// searching at once leave submits and cancels a slot. A SlurmJob of a namespace that searches
/// nothing waits (`SearchBusy`) while the others' searches hold them, without a request or a
/// write, and is woken when one ends.
#[tokio::test]
async fn the_searches_of_every_namespace_leave_the_connection_a_request_slot() {
    let (ctx, mut api) = Context::test();
    let mut job = finalized(slurm_job("edited", "#!/bin/sh\ntrue\n"));
    job.metadata.generation = Some(2);
    let (_index, handle, own) = searching_cluster(&ctx);
    drop(own);
    let others = other_namespaces_searching(&handle);
    let server = tokio::spawn(async move {
        api.expect_no_more_calls().await;
        api
    });
    let (data, mut woken) = data_waking(ctx);
    let (_, api) = waits_for_a_search_slot(&job, &data, server).await;
    assert!(woken.try_recv().is_err(), "not woken while they search");
    drop(others);
    assert_eq!(woken.try_recv().unwrap().name, "edited");
    searches_in_its_turn(&job, data, api).await;
}

/// A SlurmJob woken for its namespace's search slot that returns without searching (here its
/// last status write has not reached the cache yet) passes the slot on to the next in line at
/// once: the others do not wait out their busy bound (30 s). One whose object is gone leaves
/// the line: no wake is spent on it.
#[tokio::test]
async fn a_woken_slurmjob_that_does_not_search_passes_the_slot_on() {
    let (ctx, api) = Context::test();
    let (_index, handle, searching) = searching_cluster(&ctx);
    // The only requests: the reads of "second" and "fourth", whose cache cut their finalizers;
    // the first fails, the other finds it deleted.
    let server = tokio::spawn(async move {
        let mut api = api;
        for (name, status) in [
            ("second", StatusCode::INTERNAL_SERVER_ERROR),
            ("fourth", StatusCode::NOT_FOUND),
        ] {
            let (call, send) = api.next().await;
            assert_eq!(call.method, Method::GET, "{call:?}");
            assert_eq!(
                call.path,
                format!("/apis/slurm.rs/v1alpha1/namespaces/{NS}/slurmjobs/{name}")
            );
            let body = if status == StatusCode::NOT_FOUND {
                not_found_body("slurmjobs", name)
            } else {
                json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Failure", "message": "etcd is gone",
                    "reason": "InternalError", "code": status.as_u16(),
                })
            };
            respond(send, status, &body);
        }
        api.expect_no_more_calls().await
    });
    let (data, mut woken) = data_waking(ctx);
    let edited = |name: &str| {
        let mut job = finalized(slurm_job(name, "#!/bin/sh\ntrue\n"));
        job.metadata.generation = Some(2);
        job
    };
    // As the cache holds it when the object has more finalizers than it keeps: read first.
    let cut = |job: &SlurmJob| {
        let mut job = job.clone();
        job.metadata.finalizers = Some(
            (0..100)
                .map(|i| format!("example.org/hold-{i}"))
                .chain([FINALIZER.to_owned()])
                .collect(),
        );
        let cached = CachedSlurmJob::new(job).unwrap();
        assert!(cached.finalizers_cut());
        Arc::new(cached)
    };
    let jobs = ["first", "second", "third", "fourth"].map(edited);
    for job in &jobs {
        let error = tokio::time::timeout(
            Duration::from_secs(30),
            reconcile(Arc::new(cached(job)), data.clone()),
        )
        .await
        .expect("the reconcile returns without searching")
        .unwrap_err();
        assert!(matches!(error, Error::SearchBusy(_)), "{}", Chain(&error));
    }
    let [first, second, _, fourth] = &jobs;
    let searches = handle.searches(NS);
    assert_eq!(searches.waiting(), 4);
    drop(searching);
    assert_eq!(woken.try_recv().unwrap().name, "first");
    assert!(woken.try_recv().is_err(), "one slot wakes one");

    // Woken, "first" finds its last status write not in the cache yet: it asks nothing.
    let written = submissions::Outcome {
        job_id: Some(7),
        ..Default::default()
    };
    let uid = first.metadata.uid.as_deref().unwrap();
    data.status_writes
        .record(uid, written, std::time::Instant::now());
    let action = reconcile(Arc::new(cached(first)), data.clone())
        .await
        .unwrap();
    assert_eq!(action, Action::requeue(CACHE_LAG_RETRY));
    assert_eq!(woken.try_recv().unwrap().name, "second", "passed on");
    assert!(woken.try_recv().is_err(), "to one");

    // "second" cannot be read (the API server fails): passed on again.
    let error = reconcile_cached(cut(second), data.clone())
        .await
        .unwrap_err();
    assert!(matches!(error, Error::ReadSlurmJob(_)), "{}", Chain(&error));
    assert_eq!(woken.try_recv().unwrap().name, "third", "passed on");
    assert_eq!(searches.waiting(), 1);

    // "fourth" is deleted while it waits, with the slot held: the read of its object finds it
    // gone; it leaves the line, and no wake goes to a reconcile that would never run.
    let held = searches.try_take().unwrap();
    let action = reconcile_cached(cut(fourth), data.clone()).await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(searches.waiting(), 0);
    drop(held);
    assert!(woken.try_recv().is_err(), "nobody waits: {searches:?}");
    // Its client gone, the API server has seen the last request.
    drop(data);
    tokio::time::timeout(Duration::from_secs(30), server)
        .await
        .expect("the client is gone")
        .unwrap();
}

/// A SlurmJob cache with the controller's hook on it (`after_cache_change`, for a controller
/// watching `scope`, remembering into `remembered`), and what sends it a batch of watch events:
/// each is applied, hook and all, by the time it returns.
fn hooked_cache(
    remembered: &Remembered,
    scope: Option<String>,
) -> (
    Store<CachedSlurmJob>,
    impl FnMut(Vec<watcher::Event<CachedSlurmJob>>),
) {
    let (events, stream) = futures::channel::mpsc::unbounded();
    let (store, writer) = reflector::store();
    let (wake, _) = futures::channel::mpsc::unbounded();
    let (_, changes) = kit::reflect_changes(
        stream,
        writer,
        reacts_to,
        after_cache_change(
            Arc::default(),
            wake,
            store.clone(),
            remembered.clone(),
            scope,
        ),
    );
    let mut changes = Box::pin(changes);
    let send = move |batch: Vec<watcher::Event<CachedSlurmJob>>| {
        for event in batch {
            events.unbounded_send(Ok(event)).unwrap();
        }
        // Every event sent is applied once the stream waits for more.
        while let Some(Some(_)) = futures::FutureExt::now_or_never(changes.next()) {}
    };
    (store, send)
}

/// What this process remembers of a SlurmJob goes with it from the cache, also when no cleanup
/// of its ran here (a finalizer someone else removed, another leader's cleanup): by its Delete
/// event, or by the relist that no longer lists it. Finalizer patches of other kinds stay while
/// the cache may still lag them.
#[test]
fn what_is_remembered_of_a_slurmjob_goes_with_it() {
    let remembered = Remembered::default();
    let (a, b, c) = (
        slurm_job("a", "#!/bin/sh\n"),
        slurm_job("b", "#!/bin/sh\n"),
        slurm_job("c", "#!/bin/sh\n"),
    );
    let now = Instant::now();
    let acting = Utc::now();
    for job in [&a, &b, &c] {
        let uid = job.uid().unwrap();
        remembered.submissions.record(&OwnerTag::new(&uid, 1), 7);
        remembered.submissions.record(&OwnerTag::new(&uid, 2), 8);
        remembered
            .status_writes
            .record(&uid, submissions::Outcome::default(), now);
        remembered.taken_on.record(&uid, acting, acting);
        remembered
            .finalizer_writes
            .record(&uid, "1".to_owned(), now);
        remembered.backoff.next(&backoff_key(job));
    }
    remembered
        .finalizer_writes
        .record("a-nodeset", "1".to_owned(), now);
    // Another controller's object of the same namespace and name: not a SlurmJob's.
    let nodeset_key = Backoffs::key("nodeset", &a.namespace().unwrap(), "a");
    remembered.backoff.next(&nodeset_key);
    // A SlurmJob of a namespace another controller of this process watches (one per watched
    // namespace, sharing the counts): not this cache's to forget.
    let elsewhere = Backoffs::key(CONTROLLER, "another-namespace", "a");
    remembered.backoff.next(&elsewhere);
    let expired = now
        .checked_sub(StatusWrites::LAG_LIMIT + std::time::Duration::from_secs(1))
        .expect("the clock has run for half a minute");
    remembered
        .finalizer_writes
        .record("an-old-nodeset", "1".to_owned(), expired);
    let of = |job: &SlurmJob| {
        let uid = job.uid().unwrap();
        (
            remembered.submissions.between(&uid, 1, 2).len(),
            remembered
                .status_writes
                .lags(&uid, now, |_| true)
                .then_some(()),
            remembered.taken_on.since(&uid, acting),
            // Counted failures: a SlurmJob of that name created again starts afresh.
            remembered.backoff.counts(&backoff_key(job)),
        )
    };
    let all = (2, Some(()), true, true);
    let none = (0, None, false, false);

    let (store, mut send) = hooked_cache(&remembered, a.namespace());
    let cached = |job: &SlurmJob| CachedSlurmJob::new(job.clone()).unwrap();

    send(vec![
        watcher::Event::Init,
        watcher::Event::InitApply(cached(&a)),
        watcher::Event::InitApply(cached(&b)),
        watcher::Event::InitApply(cached(&c)),
        watcher::Event::InitDone,
    ]);
    assert_eq!(store.state().len(), 3, "listed");
    assert_eq!(
        [of(&a), of(&b), of(&c)],
        [all, all, all],
        "all listed: kept"
    );
    assert_eq!(
        remembered.finalizer_writes.len(),
        4,
        "the finalizer patches of the live SlurmJobs and the nodeset's young one kept; the \
         expired one forgotten"
    );

    send(vec![watcher::Event::Delete(cached(&a))]);
    assert_eq!([of(&a), of(&b), of(&c)], [none, all, all], "a deleted");

    // b deleted while the watch was away: the relist no longer lists it; c changed.
    let mut changed = c.clone();
    changed.metadata.generation = Some(2);
    send(vec![
        watcher::Event::Init,
        watcher::Event::InitApply(cached(&changed)),
        watcher::Event::InitDone,
    ]);
    assert_eq!(
        [of(&a), of(&b), of(&c)],
        [none, none, all],
        "b not relisted"
    );
    assert_eq!(
        remembered.finalizer_writes.len(),
        3,
        "a's forgotten by its Delete, the expired one by the relist; the young ones kept (b's \
         too: the map is every kind's, and its patch is younger than the cache's lag limit)"
    );
    send(vec![watcher::Event::Apply(cached(&changed))]);
    assert_eq!(of(&c), all, "an update forgets nothing");
    assert_eq!(
        remembered.len(),
        2 + 1 + 1 + 3 + 3,
        "c's two submits, status write, finalizer taken and patch; b's and the nodeset's patch; \
         the failures counted for c, for the NodeSet and for the other namespace's SlurmJob"
    );
    assert!(
        remembered.backoff.counts(&elsewhere),
        "another namespace's count is kept through this namespace's relist"
    );

    // A controller of every namespace (no scope): a relist that lists no SlurmJob of that
    // namespace forgets its count.
    let (_, mut send) = hooked_cache(&remembered, None);
    send(vec![watcher::Event::Init, watcher::Event::InitDone]);
    assert!(!remembered.backoff.counts(&elsewhere), "listed by no one");
    assert!(
        remembered.backoff.counts(&nodeset_key),
        "another controller's"
    );
    assert_eq!(
        remembered.backoff.next(&nodeset_key),
        Backoffs::MIN * 2,
        "another controller's count of the same namespace and name is its own: kept"
    );
}

/// A reconcile that fails after its SlurmJob left the cache (deleted meanwhile, its Delete event
/// applied first) counts no failure: its retry never runs, and the count would pass to the
/// next SlurmJob of that name. One the cache holds counts as before.
#[tokio::test]
async fn a_failure_of_a_slurmjob_gone_from_the_cache_is_not_counted() {
    let (ctx, _api) = Context::test();
    let data = data(ctx);
    let job = Arc::new(finalized(slurm_job("gone", "#!/bin/sh\ntrue\n")));
    let key = backoff_key(job.as_ref());
    let error = Error::MissingMetadata("name");
    assert_eq!(
        error_policy(job.clone(), &error, data.clone()),
        Action::await_change()
    );
    assert!(!data.ctx.backoff.counts(&key), "not counted");
    // Counted while cached; its deletion then forgets the count on the next failure too.
    data.ctx.backoff.next(&key);
    assert_eq!(
        error_policy(job.clone(), &error, cached_in(&data, &job)),
        Action::requeue(Backoffs::MIN * 2)
    );
    assert_eq!(
        error_policy(job.clone(), &error, data.clone()),
        Action::await_change()
    );
    assert!(!data.ctx.backoff.counts(&key), "forgotten once gone");
    // Gone, and another SlurmJob of that name created since: not its failure either (a count
    // left from before is forgotten too).
    data.ctx.backoff.next(&key);
    let mut again = (*job).clone();
    again.metadata.uid = Some("another-uid".into());
    assert_eq!(
        error_policy(job.clone(), &error, cached_in(&data, &again)),
        Action::await_change()
    );
    assert!(!data.ctx.backoff.counts(&key), "not passed to the new one");
}

/// A re-run its access refuses (the spec edited after the run ended, to a partition the grant
/// does not list): the ended run goes to the history and the status is this generation's, as
/// for a re-run refused as `InvalidSpec`; not the old run's `Complete` and generation next to
/// the refusal (kstatus and Argo read `observedGeneration` first, and waited for good).
#[test]
fn a_refused_rerun_shows_the_new_run_not_the_ended_one() {
    let now = crate::crd::condition::now();
    let mut done = SlurmJobStatus {
        phase: Phase::Completed,
        job_id: Some(4250),
        exit_code: Some(0),
        observed_generation: Some(1),
        submitted_generation: Some(1),
        ..Default::default()
    };
    done = status::summarize(done, 1, now.clone());
    assert!(condition::is_true(&done.conditions, status::COMPLETE));

    let refused = refused_status(
        Some(&done),
        2,
        "PartitionNotGranted",
        "spec.partition \"gpu\" is not granted".into(),
        now.clone(),
    );
    assert_eq!(refused.job_id, None);
    assert_eq!(refused.phase, Phase::Pending);
    assert_eq!(refused.observed_generation, Some(2));
    assert_eq!(refused.history.first().map(|run| run.job_id), Some(4250));
    assert!(condition::find(&refused.conditions, status::COMPLETE).is_none());
    assert!(condition::find(&refused.conditions, status::FAILED).is_none());
    let ready = condition::find(&refused.conditions, status::READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "PartitionNotGranted")
    );
    assert!(condition::is_true(&refused.conditions, status::STALLED));
    // Refused again (nothing changed): the same status, no second history entry.
    let again = refused_status(
        Some(&refused),
        2,
        "PartitionNotGranted",
        "spec.partition \"gpu\" is not granted".into(),
        now.clone(),
    );
    assert_eq!(again.history, refused.history);
    assert_eq!(again.observed_generation, Some(2));

    // A refusal of a job that runs (not a re-run) keeps the job.
    let running = SlurmJobStatus {
        phase: Phase::Running,
        job_id: Some(4251),
        observed_generation: Some(1),
        submitted_generation: Some(1),
        ..Default::default()
    };
    let kept = refused_status(Some(&running), 1, "NoAccess", "m".into(), now);
    assert_eq!(kept.job_id, Some(4251));
    assert!(kept.history.is_empty());
}
