//! `bench burst` (issue 19): the operator *binary* against the tests' in-memory API server and
//! the real local Slurm, as users meet it.
//!
//! 1. Bursts of SlurmJobs created at once (`--bursts`, 16 creates in flight): how fast the API
//!    server took them, and how long after the last one was created the last one was submitted
//!    (its `status.jobId` seen by a watch, so the status write is included), with each
//!    SlurmJob's own lag; bare REST submits of as many held jobs for comparison, 16 in flight
//!    and 4 (the operator's request slots per connection).
//!    The SlurmJobs are `suspend: true`: submitted held, they never run. `--create-rate` paces
//!    the creates instead (a real API server took `kubectl apply` at 45.5/s in the issue).
//! 2. The API writes the operator made per SlurmJob of the bursts (finalizer, status, Events).
//! 3. Status latency: `--cancels` of those held jobs cancelled from outside (a REST DELETE, as
//!    `scancel` would), one at a time at a random point of the poll cycle, until a watch of the
//!    API server sees the SlurmJob's phase `Cancelled`: poll, event, debounce, reconcile and the
//!    status write.
//!
//! `--debounce` and `--concurrency` are passed to the operator (`run --slurmjob-debounce`,
//! `--reconcile-concurrency`), to compare settings.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use slurm_operator::crd::slurmjob::{Phase, SlurmJob};
use slurm_operator::slurm::{ClientConfig, Credentials, SlurmClient};
use slurm_operator::state::registry::IO_PER_CONNECTION;

use super::{log, metric_sum, percentile, read_env, seed_api, spawn_operator};

const NS: &str = "burst";
/// Creates (and bare submits) in flight at once.
const IN_FLIGHT: usize = 16;
const TIMEOUT: Duration = Duration::from_secs(900);

/// When the watch first saw each SlurmJob submitted, and cancelled.
#[derive(Default)]
struct Seen {
    submitted: HashMap<String, Instant>,
    /// When the status first showed what the job's Slurm record says (its submit time).
    detailed: HashMap<String, Instant>,
    cancelled: HashMap<String, Instant>,
    job_ids: HashMap<String, u32>,
}

#[derive(clap::Args)]
pub struct Settings {
    /// The env file written by hack/slurm-up.sh.
    #[arg(long)]
    pub env_file: PathBuf,
    /// The `slurm-operator` binary to run.
    #[arg(long)]
    pub binary: PathBuf,
    /// Prefix of every SlurmJob and job name (for the cleanup).
    #[arg(long)]
    pub run: String,
    /// SlurmJobs per burst, one measurement each.
    #[arg(long, value_delimiter = ',', default_value = "200,2000")]
    pub bursts: Vec<usize>,
    /// Held jobs cancelled from outside, one at a time, for the status latency.
    #[arg(long, default_value_t = 40)]
    pub cancels: usize,
    /// The operator's `--slurmjob-debounce` (default: its own).
    #[arg(long)]
    pub debounce: Option<String>,
    /// The operator's `--reconcile-concurrency` (default: its own).
    #[arg(long)]
    pub concurrency: Option<u16>,
    /// The SlurmCluster's `pollInterval` (default: the operator's).
    #[arg(long)]
    pub poll_interval: Option<String>,
    /// Create the SlurmJobs of a burst at this rate (per second) rather than as fast as the
    /// API server takes them: a real API server took `kubectl apply` at 45.5/s on 2 cores
    /// (issue 19), the in-memory one of the tests takes them much faster.
    #[arg(long)]
    pub create_rate: Option<f64>,
}

pub async fn burst(settings: Settings) -> anyhow::Result<()> {
    let env = read_env(&settings.env_file)?;
    let get = |k: &str| env.get(k).cloned().with_context(|| format!("{k} missing"));
    let api = fake_apiserver::FakeApiServer::start_with_crds(slurm_operator::crd::all()).await;
    let dir = tempfile::tempdir()?;
    let kubeconfig = api.write_kubeconfig(dir.path());
    seed_api(&api, &env, NS, settings.poll_interval.as_deref())?;
    let mut extra = Vec::new();
    if let Some(debounce) = &settings.debounce {
        extra.extend(["--slurmjob-debounce".to_owned(), debounce.clone()]);
    }
    if let Some(concurrency) = settings.concurrency {
        extra.extend([
            "--reconcile-concurrency".to_owned(),
            concurrency.to_string(),
        ]);
    }
    let setting = format!(
        "debounce {}, {} reconciles at once, poll interval {}",
        settings.debounce.as_deref().unwrap_or("default"),
        settings
            .concurrency
            .map_or("default".to_owned(), |c| c.to_string()),
        settings.poll_interval.as_deref().unwrap_or("default"),
    );
    let (mut child, port) = spawn_operator(&settings.binary, &kubeconfig, NS, &extra)?;
    // The operator's own count of its SlurmJob reconciles, and of those it deferred for want of
    // a request slot: where a burst's time goes.
    let metrics_url = format!("http://127.0.0.1:{port}/metrics");
    let http = reqwest::Client::new();
    let reconciles = || async {
        let text = http.get(&metrics_url).send().await?.text().await?;
        let of = |series: &str| metric_sum(&text, series, "controller=\"slurmjob\"");
        anyhow::Ok((
            of("slurm_operator_reconciles_total{"),
            of("slurm_operator_reconciles_deferred_total{"),
        ))
    };
    let jobs: Api<SlurmJob> = Api::namespaced(api.client(), NS);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let watch = {
        let seen = Arc::clone(&seen);
        let stream = watcher(jobs.clone(), watcher::Config::default()).applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Ok(Some(job)) = stream.try_next().await {
                let at = Instant::now();
                let (Some(name), Some(status)) = (job.metadata.name, job.status) else {
                    continue;
                };
                let mut seen = seen.lock().unwrap();
                if let Some(id) = status.job_id.and_then(|id| u32::try_from(id).ok()) {
                    seen.submitted.entry(name.clone()).or_insert(at);
                    seen.job_ids.insert(name.clone(), id);
                }
                if status.submit_time.is_some() {
                    seen.detailed.entry(name.clone()).or_insert(at);
                }
                if status.phase == Phase::Cancelled {
                    seen.cancelled.entry(name).or_insert(at);
                }
            }
        })
    };
    let spec = |name: &str| -> SlurmJob {
        serde_json::from_value(json!({
            "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"clusterName": "local", "partition": get("SLURM_PARTITION").unwrap_or_default(),
                     "script": "#!/bin/sh\ntrue\n", "environment": {"PATH": "/usr/bin:/bin"},
                     "suspend": true},
        }))
        .unwrap()
    };

    // Warm-up: the operator is up and its index synced (a SlurmJob created before that waits
    // for it, which is start-up, not the burst).
    let warm = format!("{}-warm", settings.run);
    jobs.create(&PostParams::default(), &spec(&warm)).await?;
    wait_until("the warm-up SlurmJob submitted", &seen, |s| {
        s.submitted.contains_key(&warm)
    })
    .await?;

    // 0 (or less) means at once, as without the option.
    let create_rate = settings.create_rate.filter(|rate| *rate > 0.0);
    let mut rows = Vec::new();
    let mut burst_names = Vec::new();
    for &n in &settings.bursts {
        let before = api.requests();
        let (reconciles_before, deferred_before) = reconciles().await?;
        let names: Vec<String> = (0..n)
            .map(|i| format!("{}-b{n}-{i:05}", settings.run))
            .collect();
        let created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let start = Instant::now();
        let pace = create_rate.map(|rate| Duration::from_secs_f64(1.0 / rate));
        futures::stream::iter(names.clone().into_iter().enumerate())
            .map(|(i, name)| {
                let jobs = jobs.clone();
                let created = Arc::clone(&created);
                let object = spec(&name);
                // The i-th create starts no earlier than i paces after the first.
                let not_before = pace.map(|pace| start + pace * u32::try_from(i).unwrap());
                async move {
                    if let Some(at) = not_before {
                        tokio::time::sleep_until(at.into()).await;
                    }
                    jobs.create(&PostParams::default(), &object).await?;
                    created.lock().unwrap().insert(name, Instant::now());
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await?;
        let creating = start.elapsed();
        wait_until(&format!("{n} SlurmJobs submitted"), &seen, |s| {
            names.iter().all(|name| s.submitted.contains_key(name))
        })
        .await?;
        let created = created.lock().unwrap().clone();
        let (lags, last_lag) = {
            let seen = seen.lock().unwrap();
            let mut lags: Vec<f64> = names
                .iter()
                .map(|name| (seen.submitted[name] - created[name]).as_secs_f64())
                .collect();
            lags.sort_by(f64::total_cmp);
            let last_created = names.iter().map(|name| created[name]).max().unwrap();
            let last_submitted = names.iter().map(|name| seen.submitted[name]).max().unwrap();
            let last_lag = last_submitted.saturating_duration_since(last_created);
            (lags, last_lag)
        };
        // The writes settle after the last submit: the waiting jobs' details (read from Slurm
        // once a burst pauses, written DETAILS_AFTER their submit at the earliest), then Events.
        wait_until(&format!("{n} SlurmJobs detailed"), &seen, |s| {
            names.iter().all(|name| s.detailed.contains_key(name))
        })
        .await?;
        let last_detailed = {
            let seen = seen.lock().unwrap();
            let last_created = names.iter().map(|name| created[name]).max().unwrap();
            let last = names.iter().map(|name| seen.detailed[name]).max().unwrap();
            last.saturating_duration_since(last_created)
        };
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = api.requests();
        let (reconciles_after, deferred_after) = reconciles().await?;
        let delta = |key: &str| {
            after.get(key).copied().unwrap_or(0) - before.get(key).copied().unwrap_or(0)
        };
        let finalizers = delta("PATCH slurm.rs/v1alpha1/slurmjobs");
        let statuses = delta("PATCH slurm.rs/v1alpha1/slurmjobs/status");
        let events = delta("POST events.k8s.io/v1/events") + delta("PATCH events.k8s.io/v1/events");
        let per = |count: u64| count as f64 / n as f64;
        log(format!(
            "burst {n}: created in {creating:.2?}, last submitted {last_lag:.2?} after the last created"
        ));
        rows.push(format!(
            "| burst: {n} SlurmJobs created {} → submitted | created at {:.0}/s ({creating:.2?}); the last submitted {:.2} s after the last created; per SlurmJob p50 {:.2} s, p99 {:.2} s | operator binary ({setting}), the tests' in-memory API server, {IN_FLIGHT} creates in flight; submitted = `status.jobId` seen by a watch (the status write included); held jobs (`suspend: true`) |",
            create_rate.map_or("at once".to_owned(), |rate| format!("at {rate}/s")),
            n as f64 / creating.as_secs_f64(),
            last_lag.as_secs_f64(),
            percentile(&lags, 50.0),
            percentile(&lags, 99.0),
        ));
        rows.push(format!(
            "| API writes per SlurmJob (burst of {n}, held: submitted, then waiting) | {:.2} ({:.2} finalizer patches, {:.2} status writes, {:.2} Event writes); the last one's details (its Slurm record read, written at least 5 s after its submit) {:.2} s after the last created; {:.2} reconciles per SlurmJob, {:.0} deferred for want of a request slot | writes counted by the in-memory API server, reconciles by the operator's metrics, over the burst, until every status shows its job's details, and 2 s after |",
            per(finalizers + statuses + events),
            per(finalizers),
            per(statuses),
            per(events),
            last_detailed.as_secs_f64(),
            (reconciles_after - reconciles_before) / n as f64,
            deferred_after - deferred_before,
        ));
        burst_names.extend(names);
    }

    // Bare REST, the same number of held submits: at the creates' concurrency, and at the
    // operator's own bound per connection (its request slots).
    let credentials = Credentials::minted(
        std::fs::read(get("SLURM_JWT_KEY")?)?,
        &get("SLURM_USER")?,
        Duration::from_secs(600),
    )?;
    let client = SlurmClient::new(
        ClientConfig::new(&get("SLURM_REST_URL")?)?.allow_plaintext(true),
        Arc::new(credentials),
    )?;
    for (&n, in_flight) in settings
        .bursts
        .iter()
        .flat_map(|n| [(n, IN_FLIGHT), (n, IO_PER_CONNECTION)])
    {
        let start = Instant::now();
        futures::stream::iter(0..n)
            .map(|i| {
                let client = client.clone();
                let mut request = slurm_operator::slurm::types::SubmitRequest {
                    script: "#!/bin/sh\ntrue\n".into(),
                    name: Some(format!("{}-bare{n}-{in_flight}-{i:05}", settings.run)),
                    partition: get("SLURM_PARTITION").ok(),
                    working_directory: "/tmp".into(),
                    ..Default::default()
                };
                request.hold = true;
                async move { client.submit_job(&request).await }
            })
            .buffer_unordered(in_flight)
            .try_collect::<Vec<_>>()
            .await?;
        let took = start.elapsed();
        rows.push(format!(
            "| … bare REST: {n} held submits | {:.0}/s ({took:.2?}) | `SlurmClient::submit_job`, {in_flight} in flight, no Kubernetes{} |",
            n as f64 / took.as_secs_f64(),
            if in_flight == IO_PER_CONNECTION {
                " (the operator's request slots per connection)"
            } else {
                ""
            }
        ));
    }

    // Status latency: held jobs cancelled from outside, one at a time.
    let targets: Vec<(String, u32)> = {
        let seen = seen.lock().unwrap();
        burst_names
            .iter()
            .take(settings.cancels)
            .filter_map(|name| Some((name.clone(), *seen.job_ids.get(name)?)))
            .collect()
    };
    let mut latencies = Vec::new();
    for (name, job_id) in &targets {
        let pause = u64::from(uuid::Uuid::new_v4().as_bytes()[0]) * 1_000 / 256;
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let sent = Instant::now();
        client.cancel_job(*job_id).await?;
        wait_until(&format!("{name} Cancelled"), &seen, |s| {
            s.cancelled.contains_key(name)
        })
        .await?;
        let at = seen.lock().unwrap().cancelled[name];
        latencies.push(at.saturating_duration_since(sent).as_secs_f64());
    }
    latencies.sort_by(f64::total_cmp);
    rows.push(format!(
        "| status latency: external cancel → phase `Cancelled` read from the API server | p50 {:.3} s, p99 {:.3} s, max {:.3} s ({} cancels) | operator binary ({setting}); one REST DELETE at a time at a random point of the poll cycle, until a watch of the in-memory API server sees the phase (the status write included) |",
        percentile(&latencies, 50.0),
        percentile(&latencies, 99.0),
        latencies.last().copied().unwrap_or(f64::NAN),
        latencies.len()
    ));

    watch.abort();
    let _ = child.start_kill();
    for row in rows {
        println!("{row}");
    }
    Ok(())
}

/// Wait until `done` holds for what the watch saw (checked every 20 ms), or fail after
/// [`TIMEOUT`] naming `what`.
async fn wait_until(
    what: &str,
    seen: &Arc<Mutex<Seen>>,
    done: impl Fn(&Seen) -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if done(&seen.lock().unwrap()) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
