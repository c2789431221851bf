//! The measurements behind `hack/bench.sh` (see there for how to run them). Prints Markdown table
//! rows; measures, never asserts a time.
//!
//! `bench slurm` runs against the local Slurm of `hack/slurm-up.sh`, with the operator's own
//! code and no Kubernetes (as `tests/slurmjob.rs` and `tests/poller.rs` do):
//! 1. submit throughput: N SlurmJobs through `slurmjob::act::step` (index check, tag lookup,
//!    the accounting check, `actions::submit_once`) vs a bare loop of the same REST submit;
//! 2. status latency: the real poller (`poller::spawn`, at the default poll interval), its
//!    events, the SlurmJob controller's debounce and a step, from the moment a DELETE of the job
//!    is sent (`bench burst` measures it through the operator binary and the API server);
//! 3. request cost of the poller's cycles with 10, 1 000 and 10 000 jobs in slurmctld, counted
//!    with the client's `RequestObserver`; bytes through a counting TCP proxy in front of
//!    slurmrestd. The held jobs are others' (no ownership tag), so the cycles between full
//!    listings are incremental (issue 19); one full state listing's size is shown next to them.
//!    The largest point comes after steps 1 and 2, whose SlurmJobs stay pending and are followed
//!    by every cycle; it is measured again once they are cancelled (ended, no longer followed,
//!    still listed by slurmctld until `MinJobAge`) and once they are purged;
//! 4. a restarted poller's first sync (issue 19) against the jobs then held, which no SlurmJob
//!    names: requests, seconds and bytes until its index is synced, skipping them (a cluster
//!    with accounting) and fetching every record (as before issue 19, and without accounting).
//!
//! Every job it submits is held (`begin_time` a day ahead, so none runs) and named after
//! `--run`; `hack/bench.sh` cancels them all afterwards by that prefix.
//!
//! `bench memory` builds, in a fresh process, the operator's index (`index::ClusterState`) with
//! 10 000 of our jobs and 1 000 nodes, the poller's per-job bookkeeping, and 10 000 SlurmJob
//! objects with a status (what the controller's reflector holds), all synthetic, and reports
//! `/proc/self/status` VmRSS after each.
//!
//! `bench operator` measures the operator *binary* (`--binary`, the release build in
//! `hack/bench.sh`): it runs against the in-memory API server of the tests
//! (`testing/fake-apiserver`, which sends `managedFields` as the real one does) holding
//! 100 000 finished SlurmJobs and a SlurmCluster for the local slurmrestd, to which it adds 1 000
//! CLOUD nodes (in no partition, deleted afterwards) and 100 000 others' held jobs (cancelled
//! afterwards), and reports the process's VmRSS/VmHWM once its caches are filled, its index
//! holds the nodes, every SlurmJob has been reconciled and three job polls have ended.
//!
//! `bench nodes` (`bench/nodes.rs`) measures the poller's node list while 1 000 extra nodes keep
//! changing: paced as it is now, and asked every cycle as before.

// Measurement code: a failed unwrap is a failed run with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "bench/burst.rs"]
mod burst;
#[path = "bench/nodes.rs"]
mod nodes;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand};
use futures::StreamExt;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use slurm_operator::controller::slurmjob::act::{self, Env, Target};
use slurm_operator::controller::slurmjob::submissions::Submissions;
use slurm_operator::controller::slurmjob::submit;
use slurm_operator::crd::SlurmCluster;
use slurm_operator::crd::slurmjob::{Phase, SlurmJob, SlurmJobSpec, SlurmJobStatus};
use slurm_operator::leader::Leadership;
use slurm_operator::metrics::Metrics;
use slurm_operator::slurm::tag::{OwnerTag, TagKey};
use slurm_operator::slurm::types::{
    ExitStatus, Job, JobBaseState, JobState, Node, NodeBaseState, NodeState, RpcStats,
    SubmitRequest,
};
use slurm_operator::slurm::{ClientConfig, Credentials, RequestObserver, SlurmClient};
use slurm_operator::state::index::{ClusterState, IndexReader, NodeJobs, SlurmEvent};
use slurm_operator::state::poller::strategy::{self, Known, Stale, Tracked, Tracker};
use slurm_operator::state::poller::{self, PollerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, mpsc};

/// The default `pollInterval` of a SlurmCluster.
const INTERVAL: Duration = Duration::from_millis(500);
/// First syncs are timed at each job count from this many on.
const FIRST_SYNC_FROM: usize = 10_000;
/// Above this many jobs the first sync that fetches every record is not timed.
const FETCH_ALL_UP_TO: usize = 20_000;
/// The SlurmJob controller's debounce (`controller::Config::debounce` in `controller/slurmjob.rs`).
const DEBOUNCE: Duration = slurm_operator::controller::slurmjob::DEBOUNCE;
const TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// Submit throughput, status latency and request cost against a real slurmrestd.
    Slurm {
        /// The env file written by hack/slurm-up.sh.
        #[arg(long)]
        env_file: PathBuf,
        /// Prefix of every job name (for the cleanup).
        #[arg(long)]
        run: String,
        /// SlurmJobs per submit measurement (and cancellations timed for the latency).
        #[arg(long, default_value_t = 500)]
        jobs: usize,
        /// Submits in flight at once, one measurement each.
        #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
        concurrency: Vec<usize>,
        /// Jobs in slurmctld at which a poll cycle is measured.
        #[arg(long, value_delimiter = ',', default_value = "10,1000,10000,100000")]
        tracked: Vec<usize>,
        /// Poll cycles measured at each job count.
        #[arg(long, default_value_t = 10)]
        cycles: usize,
    },
    /// RSS of the operator binary with many SlurmJobs in its caches.
    Operator {
        /// The env file written by hack/slurm-up.sh.
        #[arg(long)]
        env_file: PathBuf,
        /// The `slurm-operator` binary to run.
        #[arg(long)]
        binary: PathBuf,
        #[arg(long, default_value_t = 100_000)]
        slurmjobs: u32,
        /// Extra Slurm nodes (CLOUD, powered down, in no partition: nothing runs there) created
        /// in slurmctld for the measurement, so that the operator's index holds them.
        #[arg(long, default_value_t = 1_000)]
        nodes: u32,
        /// Others' held jobs queued in slurmctld for the measurement (named `<run>-queued`,
        /// cancelled after it), which the operator's poller lists but does not resolve.
        #[arg(long, default_value_t = 100_000)]
        queued: u32,
        /// Names the queued jobs.
        #[arg(long, default_value = "bench-operator")]
        run: String,
    },
    /// Queue others' held jobs in slurmctld and leave them there (for a measurement by hand with
    /// a large queue); `scancel --name <run>-queued` removes them.
    Queue {
        /// The env file written by hack/slurm-up.sh.
        #[arg(long)]
        env_file: PathBuf,
        #[arg(long)]
        count: u32,
        /// Names the jobs `<run>-queued`.
        #[arg(long)]
        run: String,
    },
    /// The operator binary against the tests' API server: bursts of SlurmJobs, API writes per
    /// SlurmJob, status latency (`bench/burst.rs`).
    Burst(burst::Settings),
    /// The poller's node list while nodes keep changing, paced and asked every cycle
    /// (`bench/nodes.rs`).
    Nodes(nodes::Settings),
    /// RSS of the index with synthetic records.
    Memory {
        #[arg(long, default_value_t = 10_000)]
        jobs: u32,
        #[arg(long, default_value_t = 1_000)]
        nodes: u32,
    },
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    // The client picks the process-wide rustls provider (main.rs installs it too).
    let _ = rustls::crypto::ring::default_provider().install_default();
    match Args::parse().what {
        What::Slurm {
            env_file,
            run,
            jobs,
            concurrency,
            tracked,
            cycles,
        } => {
            let bench = Bench::start(&env_file, run).await?;
            let result = bench.run(jobs, &concurrency, &tracked, cycles).await;
            bench.print_rows();
            result
        }
        What::Memory { jobs, nodes } => {
            memory(jobs, nodes);
            Ok(())
        }
        What::Operator {
            env_file,
            binary,
            slurmjobs,
            nodes,
            queued,
            run,
        } => operator_memory(&env_file, &binary, slurmjobs, nodes, queued, &run).await,
        What::Queue {
            env_file,
            count,
            run,
        } => {
            let queued = QueuedJobs::submit(&read_env(&env_file)?, &run, count).await?;
            // Left queued on purpose.
            std::mem::forget(queued);
            Ok(())
        }
        What::Burst(settings) => burst::burst(settings).await,
        What::Nodes(settings) => nodes::nodes(settings).await,
    }
}

/// The sum of the samples of the operator's Prometheus text `text` whose line starts with
/// `series` (a metric's name and `{`) and holds `label` (`name="value"`).
fn metric_sum(text: &str, series: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(series) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn log(message: impl AsRef<str>) {
    eprintln!("[bench] {}", message.as_ref());
}

/// Counts the poller's slurmrestd requests.
#[derive(Default)]
struct Requests(Mutex<HashMap<&'static str, u64>>);

impl RequestObserver for Requests {
    fn observe(&self, operation: &'static str, _status: Option<u16>, _elapsed: Duration) {
        *self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(operation)
            .or_default() += 1;
    }
}

impl Requests {
    fn snapshot(&self) -> HashMap<&'static str, u64> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Bytes through the proxy: requests up, responses down (HTTP headers included).
#[derive(Default)]
struct Bytes {
    up: AtomicU64,
    down: AtomicU64,
}

/// A TCP proxy to `target` that counts the bytes; returns its address.
async fn counting_proxy(target: String, bytes: Arc<Bytes>) -> anyhow::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let (target, bytes) = (target.clone(), bytes.clone());
            tokio::spawn(async move {
                let Ok(outbound) = TcpStream::connect(&target).await else {
                    return;
                };
                let (client_read, client_write) = inbound.into_split();
                let (server_read, server_write) = outbound.into_split();
                let up = pump(client_read, server_write, bytes.clone(), true);
                let down = pump(server_read, client_write, bytes, false);
                let _ = tokio::join!(up, down);
            });
        }
    });
    Ok(format!("http://{address}"))
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    bytes: Arc<Bytes>,
    up: bool,
) -> std::io::Result<()> {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buffer).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        to.write_all(&buffer[..n]).await?;
        let counter = if up { &bytes.up } else { &bytes.down };
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// `host:port` of slurmrestd's URL (what the counting proxy connects to).
fn host_port(url: &str) -> anyhow::Result<String> {
    let url = url::Url::parse(url)?;
    Ok(format!(
        "{}:{}",
        url.host_str().unwrap_or("127.0.0.1"),
        url.port_or_known_default().unwrap_or(80)
    ))
}

/// A client for slurmrestd at `target` (`host:port`) through a counting proxy of its own: its
/// requests by operation, and the bytes each way.
async fn counted_client(
    target: &str,
    credentials: Arc<Credentials>,
) -> anyhow::Result<(SlurmClient, Arc<Requests>, Arc<Bytes>)> {
    let bytes = Arc::new(Bytes::default());
    let proxy = counting_proxy(target.to_owned(), bytes.clone()).await?;
    let requests = Arc::new(Requests::default());
    let client = SlurmClient::with_observer(
        ClientConfig::new(&proxy)?.allow_plaintext(true),
        credentials,
        Some(requests.clone()),
    )?;
    Ok((client, requests, bytes))
}

/// One SlurmJob as the controller holds it.
struct Sj {
    name: String,
    uid: String,
    spec: SlurmJobSpec,
    status: Option<SlurmJobStatus>,
    created: chrono::DateTime<Utc>,
}

impl Sj {
    fn job_id(&self) -> Option<u32> {
        self.status
            .as_ref()
            .and_then(|s| s.job_id)
            .and_then(|id| u32::try_from(id).ok())
    }
}

struct Bench {
    run: String,
    partition: String,
    /// The "user": bare submits and the Slurm-side changes.
    user: SlurmClient,
    /// The operator's actions (the step's submits and lookups).
    operator: SlurmClient,
    /// The operator's action requests, by operation.
    operator_requests: Arc<Requests>,
    index: IndexReader,
    events: broadcast::Sender<SlurmEvent>,
    requests: Arc<Requests>,
    bytes: Arc<Bytes>,
    started_at: DateTime<Utc>,
    submissions: Submissions,
    leadership: Leadership,
    /// The operator's tag key (a fresh one per run).
    tag_key: TagKey,
    rows: Mutex<Vec<(usize, String)>>,
    /// slurmrestd's `host:port`, and the credentials, for pollers started later.
    target: String,
    credentials: Arc<Credentials>,
    _poller: poller::PollerHandle,
}

fn read_env(path: &PathBuf) -> anyhow::Result<HashMap<String, String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().trim_matches('"').to_owned()))
        .collect())
}

fn held_until() -> i64 {
    Utc::now().timestamp() + 86_400
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn kib(bytes: f64) -> String {
    if bytes >= 1024.0 * 1024.0 {
        format!("{:.2} MiB", bytes / 1024.0 / 1024.0)
    } else {
        format!("{:.1} KiB", bytes / 1024.0)
    }
}

impl Bench {
    async fn start(env_file: &PathBuf, run: String) -> anyhow::Result<Self> {
        let env = read_env(env_file)?;
        let get = |k: &str| {
            env.get(k)
                .cloned()
                .with_context(|| format!("{k} missing in {}", env_file.display()))
        };
        let url = get("SLURM_REST_URL")?;
        let key = std::fs::read(get("SLURM_JWT_KEY")?)?;
        let credentials = Arc::new(Credentials::minted(
            key,
            get("SLURM_USER")?,
            Duration::from_secs(900),
        )?);
        let credentials_for_later = Arc::clone(&credentials);
        let target = host_port(&url)?;
        let (poll_client, requests, bytes) = counted_client(&target, credentials.clone()).await?;
        let operator_requests = Arc::new(Requests::default());
        let (events, _) = broadcast::channel(65_536);
        let started_at = Utc::now();
        // The steps' tag key: the poller follows as ours what they submit.
        let tag_key = TagKey::ephemeral();
        let (handle, mut index) = poller::spawn(
            ObjectRef::<SlurmCluster>::new("local"),
            poll_client,
            &PollerConfig { interval: INTERVAL },
            tag_key.clone(),
            events.clone(),
            Metrics::new(),
        );
        wait_index(&mut index, "a synced index", |s| {
            s.health.is_up() && s.jobs_synced_at.is_some_and(|t| t > started_at)
        })
        .await?;
        Ok(Self {
            run,
            partition: get("SLURM_PARTITION")?,
            user: SlurmClient::new(
                ClientConfig::new(&url)?.allow_plaintext(true),
                credentials.clone(),
            )?,
            operator: SlurmClient::with_observer(
                ClientConfig::new(&url)?.allow_plaintext(true),
                credentials,
                Some(operator_requests.clone()),
            )?,
            operator_requests,
            index,
            events,
            requests,
            bytes,
            started_at,
            submissions: Submissions::default(),
            leadership: Leadership::always(),
            tag_key,
            rows: Mutex::new(Vec::new()),
            target,
            credentials: Arc::clone(&credentials_for_later),
            _poller: handle,
        })
    }

    /// A table row; `order` sorts the rows (they are printed at the end).
    fn row(&self, order: usize, what: &str, result: String, detail: String) {
        let line = format!("| {what} | {result} | {detail} |");
        log(&line);
        self.rows.lock().unwrap().push((order, line));
    }

    fn print_rows(&self) {
        let mut rows = self.rows.lock().unwrap().clone();
        rows.sort_by_key(|(order, _)| *order);
        for (_, line) in rows {
            println!("{line}");
        }
    }

    fn spec(&self) -> SlurmJobSpec {
        serde_json::from_value(json!({
            "clusterName": "local",
            "script": "#!/bin/sh\ntrue\n",
            "partition": self.partition,
            "environment": {"PATH": "/usr/bin:/bin"},
            "extraOptions": {"begin_time": {"set": true, "number": held_until()}},
        }))
        .unwrap()
    }

    async fn run(
        &self,
        jobs: usize,
        concurrency: &[usize],
        tracked: &[usize],
        cycles: usize,
    ) -> anyhow::Result<()> {
        let mut tracked = tracked.to_vec();
        tracked.sort_unstable();
        // Jobs an earlier step cancelled (the operator-memory step's queue of 100 000) stay in
        // slurmctld until it purges them (MinJobAge, then in batches): the smallest point must
        // not count them (a run measured "10 jobs" with 71 071 still there).
        if let Some(&smallest) = tracked.first() {
            let mut index = self.index.clone();
            let started = Instant::now();
            let purged = wait_index(&mut index, "earlier steps' jobs purged", |s| {
                s.jobs_total <= smallest
            })
            .await;
            let total = index.borrow().jobs_total;
            log(match purged {
                Ok(()) => format!(
                    "{total} jobs in slurmctld after {:.0} s",
                    started.elapsed().as_secs_f64()
                ),
                Err(_) => format!("still {total} jobs in slurmctld: the first point counts them"),
            });
        }
        // All but the largest job count before the submit measurements add their jobs (which
        // stay, held, and count towards the next points); the largest after them.
        let (last, first) = tracked
            .split_last()
            .map_or((None, &[][..]), |(l, f)| (Some(*l), f));
        for &count in first {
            self.request_cost(count, cycles, Pass::First).await?;
            if count >= FIRST_SYNC_FROM {
                self.first_syncs().await?;
            }
        }
        let mut latency_jobs = Vec::new();
        for &c in concurrency {
            // Interleaved in rounds, alternating which goes first, so both pay the same growth
            // of slurmctld and the same background load.
            const ROUNDS: usize = 5;
            let before = self.operator_requests.snapshot();
            let (mut bare_secs, mut op_secs, mut sjs) = (0.0, 0.0, Vec::new());
            for round in 0..ROUNDS {
                let n = jobs / ROUNDS + usize::from(round < jobs % ROUNDS);
                if round % 2 == 0 {
                    bare_secs += self.submit_bare(n, c).await?;
                }
                let (secs, mut done) = self.submit_operator(n, c, round).await?;
                op_secs += secs;
                sjs.append(&mut done);
                if round % 2 == 1 {
                    bare_secs += self.submit_bare(n, c).await?;
                }
            }
            let (bare, op) = (jobs as f64 / bare_secs, jobs as f64 / op_secs);
            let per_job: Vec<String> = self
                .operator_requests
                .snapshot()
                .into_iter()
                .map(|(o, n)| (o, n - before.get(o).copied().unwrap_or(0)))
                .filter(|(_, n)| *n > 0)
                .map(|(o, n)| {
                    format!(
                        "{} {:.2}",
                        o.replace("slurmdb_", "slurmdb ").replace("slurm_", ""),
                        n as f64 / jobs as f64
                    )
                })
                .collect();
            self.row(
                c,
                &format!("submit throughput, {c} in flight"),
                format!(
                    "operator {op:.1}/s, bare REST {bare:.1}/s, ratio {:.2}",
                    op / bare
                ),
                format!(
                    "{jobs} held jobs each, in {ROUNDS} interleaved rounds; operator = `act::step` (index check, tag lookup, \
                     accounting lookup by name unless the SlurmJob is under 30 s old, `submit_once`): requests per SlurmJob: {}",
                    per_job.join(", ")
                ),
            );
            latency_jobs = sjs;
        }
        if !latency_jobs.is_empty() {
            self.latency(latency_jobs).await?;
        }
        let largest = match last {
            Some(count) => Some(self.request_cost(count, cycles, Pass::First).await?),
            None => None,
        };
        self.first_syncs().await?;
        let state = self.index.borrow().clone();
        self.row(
            300_000,
            &format!(
                "memory: this bench process, real poller + index ({} jobs in slurmctld, {} ours, {} nodes)",
                state.jobs_total,
                state.jobs.len(),
                state.nodes.len()
            ),
            format!(
                "VmRSS {:.1} MiB, VmHWM {:.1} MiB",
                status_kib("VmRSS:") as f64 / 1024.0,
                status_kib("VmHWM:") as f64 / 1024.0
            ),
            format!(
                "measured, {} build; also holds the bench's own SlurmJobs and HTTP clients; the \
                 peak includes decoding the full job records while the index synced",
                if cfg!(debug_assertions) { "dev" } else { "release" }
            ),
        );
        // The largest point again once ours have ended (slurmctld still lists them until
        // MinJobAge, incremental cycles no longer follow them), and once they are purged: what
        // a quiet cycle costs at that queue size alone, apart from following our own jobs.
        if let (Some(count), Some(first)) = (last, largest) {
            let cancelled = self.cancel_ours().await?;
            self.request_cost(count, cycles.min(5), Pass::Ended(first))
                .await?;
            self.purged(cancelled).await?;
            self.request_cost(count, cycles, Pass::Purged(first))
                .await?;
        }
        Ok(())
    }

    /// Cancels every job of ours the index holds and waits until the index holds each as
    /// settled (ended, nothing left moving: no cycle follows it any more). Returns when the
    /// cancels began.
    async fn cancel_ours(&self) -> anyhow::Result<Instant> {
        let mut index = self.index.clone();
        let ours: Vec<u32> = index.borrow().jobs.keys().copied().collect();
        let started = Instant::now();
        let failed = futures::stream::iter(&ours)
            .map(|id| self.user.cancel_job(*id))
            .buffer_unordered(16)
            .filter(|r| std::future::ready(r.is_err()))
            .count()
            .await;
        // Slurm refuses to cancel a job that has ended; it is purged all the same.
        log(format!(
            "cancelled {} of our {} jobs ({failed} refused)",
            ours.len() - failed,
            ours.len()
        ));
        wait_index(&mut index, "our jobs ended", |s| {
            s.jobs.values().all(|j| strategy::settled(&j.state))
        })
        .await?;
        log(format!(
            "our jobs ended in the index {:.1} s after the first cancel",
            started.elapsed().as_secs_f64()
        ));
        Ok(started)
    }

    /// Waits until slurmctld has purged our jobs (MinJobAge) and the index has seen it (the
    /// periodic full listing: cycles no longer follow ended jobs of ours).
    async fn purged(&self, cancelled: Instant) -> anyhow::Result<()> {
        let mut index = self.index.clone();
        wait_index(&mut index, "our jobs purged", |s| s.jobs.is_empty()).await?;
        log(format!(
            "our jobs purged {:.0} s after the first cancel",
            cancelled.elapsed().as_secs_f64()
        ));
        Ok(())
    }

    /// Issue 19: a restart's first sync against the jobs held now (no SlurmJob names them),
    /// skipping them; and, up to [`FETCH_ALL_UP_TO`] jobs, fetching every record as before (past
    /// that it is one GET per job: half an hour at 100 000).
    async fn first_syncs(&self) -> anyhow::Result<()> {
        self.first_sync(true).await?;
        let total = self.index.borrow().jobs_total;
        if total <= FETCH_ALL_UP_TO {
            self.first_sync(false).await?;
        } else {
            log(format!(
                "not timing a first sync that fetches all {total} records (one GET each)"
            ));
        }
        Ok(())
    }

    /// Seconds for `n` bare REST submits.
    async fn submit_bare(&self, n: usize, concurrency: usize) -> anyhow::Result<f64> {
        let spec = self.spec();
        let name = format!("{}-bare", self.run);
        // A comment that is no tag: bare REST jobs are nobody's.
        let mut request: SubmitRequest =
            submit::request(&spec, &name, &OwnerTag::new(&name, 1).to_string(), &[])?;
        request.comment = Some(name.clone());
        let started = Instant::now();
        let results: Vec<_> = futures::stream::iter(0..n)
            .map(|_| self.user.submit_job(&request))
            .buffer_unordered(concurrency)
            .collect()
            .await;
        let secs = started.elapsed().as_secs_f64();
        let failed = results.iter().filter(|r| r.is_err()).count();
        if failed > 0 {
            bail!(
                "{failed} bare submits failed: {:?}",
                results.into_iter().find(|r| r.is_err())
            );
        }
        log(format!(
            "bare: {n} submits, {concurrency} in flight: {secs:.2} s"
        ));
        Ok(secs)
    }

    async fn step(&self, sj: &Sj) -> anyhow::Result<SlurmJobStatus> {
        let state: Arc<ClusterState> = self.index.borrow().clone();
        let target = Target {
            name: &sj.name,
            uid: &sj.uid,
            generation: 1,
            spec: &sj.spec,
            status: sj.status.as_ref(),
            // As with `kubectl apply`: each SlurmJob is created right before its first step.
            created: Some(sj.created),
            refusal: None,
        };
        let env = Env {
            client: &self.operator,
            submitter: &self.operator,
            job_user: None,
            state: &state,
            submissions: &self.submissions,
            started_at: self.started_at,
            now: Utc::now(),
            leadership: &self.leadership,
            took_over_at: None,
            acting_since: self.started_at,
            key: &self.tag_key,
            searches: None,
            still_granted: &|| true,
        };
        Ok(act::step(target, env, |_| None).await?.status)
    }

    /// Seconds for `n` SlurmJobs through the operator's submit path, and the SlurmJobs.
    async fn submit_operator(
        &self,
        n: usize,
        concurrency: usize,
        round: usize,
    ) -> anyhow::Result<(f64, Vec<Sj>)> {
        let sjs: Vec<Sj> = (0..n)
            .map(|i| Sj {
                name: format!("{}-op{concurrency}-{round}-{i}", self.run),
                uid: uuid::Uuid::new_v4().to_string(),
                spec: self.spec(),
                status: None,
                created: Utc::now(),
            })
            .collect();
        let started = Instant::now();
        let sjs: Vec<Sj> = futures::stream::iter(sjs)
            .map(|mut sj| async move {
                sj.status = Some(self.step(&sj).await?);
                anyhow::Ok(sj)
            })
            .buffer_unordered(concurrency)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<_, _>>()?;
        let secs = started.elapsed().as_secs_f64();
        let submitted = sjs
            .iter()
            .filter(|sj| {
                sj.status
                    .as_ref()
                    .is_some_and(|s| s.phase == Phase::Submitted)
            })
            .count();
        if submitted != n {
            let odd = sjs
                .iter()
                .find(|sj| sj.job_id().is_none())
                .map(|sj| &sj.status);
            bail!("{submitted} of {n} SlurmJobs submitted; e.g. {odd:?}");
        }
        log(format!(
            "operator: {n} SlurmJobs, {concurrency} in flight: {secs:.2} s"
        ));
        Ok((secs, sjs))
    }

    /// Cancel each job (the Slurm-side change) at a random moment relative to the poll cycle and
    /// time until the event, and until the stepped status, say Cancelled.
    async fn latency(&self, sjs: Vec<Sj>) -> anyhow::Result<()> {
        let ids: BTreeSet<u32> = sjs.iter().filter_map(Sj::job_id).collect();
        let mut index = self.index.clone();
        let since = Utc::now();
        wait_index(&mut index, "the SlurmJobs' jobs in the index", |s| {
            s.jobs_synced_at.is_some_and(|t| t > since)
                && ids.iter().all(|id| s.jobs.contains_key(id))
        })
        .await?;
        let mut rx = self.events.subscribe();
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(Duration, Duration)>();
        let mut inboxes: HashMap<String, mpsc::UnboundedSender<Msg>> = HashMap::new();
        let mut cancels = Vec::new();
        let sjs: Vec<Arc<tokio::sync::Mutex<Sj>>> = sjs
            .into_iter()
            .map(|sj| Arc::new(tokio::sync::Mutex::new(sj)))
            .collect();
        let n = sjs.len();
        let mut tasks = Vec::new();
        for sj in &sjs {
            let (tx, inbox) = mpsc::unbounded_channel();
            let guard = sj.lock().await;
            inboxes.insert(guard.uid.clone(), tx.clone());
            cancels.push((guard.job_id().unwrap_or_default(), tx));
            drop(guard);
            tasks.push(self.follow(sj.clone(), inbox, done_tx.clone()));
        }
        drop(done_tx);
        // The controller's trigger: events carrying a SlurmJob's tag wake its reconcile.
        let dispatch = async {
            loop {
                match rx.recv().await {
                    Ok(
                        SlurmEvent::JobChanged { owner, .. } | SlurmEvent::JobGone { owner, .. },
                    ) => {
                        let at = Instant::now();
                        if let Some(owner) = &owner
                            && let Some(inbox) = inboxes.get(owner.uid())
                        {
                            let _ = inbox.send(Msg::Event(at));
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        log(format!("the event receiver lagged by {missed}"));
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        };
        // Shuffled with uuid randomness (no rand dependency).
        let mut keyed: Vec<_> = cancels
            .into_iter()
            .map(|c| (uuid::Uuid::new_v4(), c))
            .collect();
        keyed.sort_by_key(|(key, _)| *key);
        let order: Vec<(u32, mpsc::UnboundedSender<Msg>)> =
            keyed.into_iter().map(|(_, c)| c).collect();
        let delete_times = Mutex::new(Vec::new());
        let cancel = async {
            for (job_id, inbox) in &order {
                let pause = u64::from(uuid::Uuid::new_v4().as_bytes()[0]) % 100;
                tokio::time::sleep(Duration::from_millis(pause)).await;
                let t0 = Instant::now();
                let _ = inbox.send(Msg::Changed(t0));
                if let Err(error) = self.user.cancel_job(*job_id).await {
                    log(format!("cancel {job_id}: {error}"));
                }
                delete_times
                    .lock()
                    .unwrap()
                    .push(t0.elapsed().as_secs_f64());
            }
        };
        let collect = async {
            let mut out = Vec::new();
            while let Some(sample) = done_rx.recv().await {
                out.push(sample);
                if out.len() == n {
                    break;
                }
            }
            out
        };
        let started = Instant::now();
        let all = async {
            let (_, samples, _) = tokio::join!(cancel, collect, futures::future::join_all(tasks));
            samples
        };
        let samples = tokio::select! {
            samples = tokio::time::timeout(TIMEOUT, all) => samples.unwrap_or_default(),
            () = dispatch => Vec::new(),
        };
        log(format!(
            "latency: {} of {n} transitions seen in {:.1} s",
            samples.len(),
            started.elapsed().as_secs_f64()
        ));
        let stats = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            format!(
                "p50 {:.3} s, p99 {:.3} s, max {:.3} s",
                percentile(&v, 50.0),
                percentile(&v, 99.0),
                v.last().copied().unwrap_or(f64::NAN)
            )
        };
        let status: Vec<f64> = samples.iter().map(|(_, s)| s.as_secs_f64()).collect();
        let event: Vec<f64> = samples.iter().map(|(e, _)| e.as_secs_f64()).collect();
        let deletes = delete_times.into_inner().unwrap();
        self.row(
            100_000,
            "status latency (DELETE sent → status Cancelled)",
            stats(status),
            format!(
                "{} of {n} transitions, poll interval {INTERVAL:?}; includes the debounce ({DEBOUNCE:?}) and the \
                 step, not the status PATCH",
                samples.len()
            ),
        );
        self.row(
            100_001,
            "… of which DELETE sent → poller's JobChanged event",
            stats(event),
            format!("DELETE itself: {}", stats(deletes)),
        );
        Ok(())
    }

    /// One SlurmJob's reconciles: debounced steps on its events until its status says Cancelled.
    async fn follow(
        &self,
        sj: Arc<tokio::sync::Mutex<Sj>>,
        mut inbox: mpsc::UnboundedReceiver<Msg>,
        done: mpsc::UnboundedSender<(Duration, Duration)>,
    ) {
        let mut changed: Option<Instant> = None;
        let mut first_event: Option<Instant> = None;
        while let Some(msg) = inbox.recv().await {
            match msg {
                Msg::Changed(t0) => {
                    changed = Some(t0);
                    continue;
                }
                Msg::Event(at) => {
                    if changed.is_some_and(|t0| at >= t0) && first_event.is_none() {
                        first_event = Some(at);
                    }
                }
            }
            // Debounce: run once no event came for DEBOUNCE.
            loop {
                match tokio::time::timeout(DEBOUNCE, inbox.recv()).await {
                    Ok(Some(Msg::Changed(t0))) => changed = Some(t0),
                    Ok(Some(Msg::Event(at))) => {
                        if changed.is_some_and(|t0| at >= t0) && first_event.is_none() {
                            first_event = Some(at);
                        }
                    }
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            let mut guard = sj.lock().await;
            match self.step(&guard).await {
                Ok(status) => {
                    let cancelled = status.phase == Phase::Cancelled;
                    guard.status = Some(status);
                    if cancelled && let (Some(t0), Some(event)) = (changed, first_event) {
                        let _ = done.send((event - t0, t0.elapsed()));
                        return;
                    }
                }
                Err(error) => log(format!("step {}: {error}", guard.name)),
            }
        }
    }

    /// A client for slurmrestd through a counting proxy of its own.
    async fn counted_client(&self) -> anyhow::Result<(SlurmClient, Arc<Requests>, Arc<Bytes>)> {
        counted_client(&self.target, self.credentials.clone()).await
    }

    /// Issue 19: a fresh poller's first sync, until its index counts as synced, against the jobs
    /// slurmctld holds now (the held jobs of the request-cost points, which no SlurmJob names):
    /// `skip` as this version does on a cluster with accounting, else every job's record
    /// fetched (as before, and still without accounting). `recent` is 5 s, not the default
    /// 60 s: the bench's held jobs were submitted a minute ago, and with 60 s the walk down the
    /// newest would find more than its budget and skip nothing.
    async fn first_sync(&self, skip: bool) -> anyhow::Result<()> {
        let (client, requests, bytes) = self.counted_client().await?;
        let (events, _) = broadcast::channel(65_536);
        let started = Instant::now();
        let since = Utc::now();
        let (_handle, mut index) = poller::spawn_tuned(
            ObjectRef::<SlurmCluster>::new("first-sync"),
            client,
            &PollerConfig { interval: INTERVAL },
            self.tag_key.clone(),
            poller::Tuning {
                skip_first_sync: skip,
                recent: Duration::from_secs(5),
                ..poller::Tuning::default()
            },
            events,
            Metrics::new(),
        );
        wait_index(&mut index, "a first sync", |s| {
            s.jobs_synced_at.is_some_and(|t| t > since)
        })
        .await?;
        let secs = started.elapsed().as_secs_f64();
        let state = index.borrow().clone();
        let ops = requests.snapshot();
        let total: u64 = ops.values().sum();
        let mut ops: Vec<String> = ops
            .into_iter()
            .map(|(op, n)| format!("{}×{n}", op.replace("slurm_", "")))
            .collect();
        ops.sort();
        self.row(
            150_000 + 2 * index.borrow().jobs_total + usize::from(!skip),
            &format!(
                "first sync, {} jobs in slurmctld that no SlurmJob names, {}",
                state.jobs_total,
                if skip {
                    "skipping (accounting answers)"
                } else {
                    "every record fetched (no accounting; before issue 19)"
                }
            ),
            format!(
                "{total} requests, {secs:.1} s, {} down",
                kib(bytes.down.load(Ordering::Relaxed) as f64)
            ),
            format!(
                "a new poller through its own counting proxy, until its index is synced; {} left unresolved; {}",
                state.unresolved.len(),
                ops.join(", ")
            ),
        );
        Ok(())
    }

    /// Top the jobs in slurmctld up to `count` (held, and not ours: no ownership tag, as at a
    /// site where most of the queue is other users'), then measure `cycles` poll cycles.
    /// Returns the number of jobs in slurmctld it measured at. `pass`: whether this is the
    /// point's first pass, or a later one (ours ended, ours purged), whose rows go beside the
    /// first's.
    async fn request_cost(&self, count: usize, cycles: usize, pass: Pass) -> anyhow::Result<usize> {
        let mut index = self.index.clone();
        let total = index.borrow().jobs_total;
        if count > total {
            let missing = count - total;
            let spec = self.spec();
            let name = format!("{}-held", self.run);
            let started = Instant::now();
            let results: Vec<_> = futures::stream::iter(0..missing)
                .map(|i| {
                    let request = submit::request(
                        &spec,
                        &name,
                        &format!("{}-held-{i}: someone else's", self.run),
                        &[],
                    );
                    async move {
                        self.user
                            .submit_job(&request?)
                            .await
                            .map_err(anyhow::Error::from)
                    }
                })
                .buffer_unordered(16)
                .collect()
                .await;
            let failed = results.iter().filter(|r| r.is_err()).count();
            if failed > 0 {
                bail!(
                    "{failed} held submits failed: {:?}",
                    results.into_iter().find(|r| r.is_err())
                );
            }
            log(format!(
                "submitted {missing} held jobs in {:.1} s",
                started.elapsed().as_secs_f64()
            ));
        }
        let since = Utc::now();
        let synced_from = Instant::now();
        wait_index(&mut index, "an index synced after the submits", |s| {
            s.jobs_synced_at.is_some_and(|t| t > since)
        })
        .await?;
        log(format!(
            "index synced {:.1} s after the last submit",
            synced_from.elapsed().as_secs_f64()
        ));
        // Let the cycles that still fetch the new records pass.
        tokio::time::sleep(2 * INTERVAL).await;
        let rpcs_before = self.user.rpc_stats().await?;
        let mut per_cycle: Vec<(u64, u64, u64, HashMap<&'static str, u64>)> = Vec::new();
        index.borrow_and_update();
        let mut before = (
            self.requests.snapshot(),
            self.bytes.up.load(Ordering::Relaxed),
            self.bytes.down.load(Ordering::Relaxed),
            index.borrow().polls,
        );
        while per_cycle.len() < cycles {
            tokio::time::timeout(TIMEOUT, index.changed()).await??;
            let polls = index.borrow_and_update().polls;
            let now = (
                self.requests.snapshot(),
                self.bytes.up.load(Ordering::Relaxed),
                self.bytes.down.load(Ordering::Relaxed),
                polls,
            );
            if polls == before.3 + 1 {
                let ops: HashMap<&'static str, u64> = now
                    .0
                    .iter()
                    .map(|(op, n)| (*op, n - before.0.get(op).copied().unwrap_or(0)))
                    .filter(|(_, n)| *n > 0)
                    .collect();
                per_cycle.push((ops.values().sum(), now.1 - before.1, now.2 - before.2, ops));
            }
            before = now;
        }
        let rpcs = rpc_delta(&rpcs_before, &self.user.rpc_stats().await?);
        let state = index.borrow().clone();
        let (order, label) = match pass {
            Pass::First => (state.jobs_total, ""),
            Pass::Ended(first) => (first, ", ours cancelled, not purged yet"),
            Pass::Purged(first) => (first, ", after ours were cancelled and purged"),
        };
        // What one full state listing costs now (the cycles between full listings do not list).
        let (lister, _, listed) = self.counted_client().await?;
        let before_full = self.user.rpc_stats().await?;
        lister.all_job_states().await?;
        let full_rpcs = rpc_delta(&before_full, &self.user.rpc_stats().await?);
        let full_listing = listed.down.load(Ordering::Relaxed);
        let mut requests: Vec<u64> = per_cycle.iter().map(|c| c.0).collect();
        requests.sort_unstable();
        let mut down: Vec<u64> = per_cycle.iter().map(|c| c.2).collect();
        down.sort_unstable();
        let median = |v: &[u64]| v[v.len() / 2];
        let ops: BTreeSet<String> = per_cycle
            .iter()
            .flat_map(|c| {
                c.3.iter()
                    .map(|(op, n)| format!("{}×{n}", op.trim_start_matches("slurm_")))
            })
            .collect();
        self.row(
            200_000 + order,
            &format!(
                "requests per poll cycle, {} jobs in slurmctld{label}",
                state.jobs_total
            ),
            format!(
                "min {} / median {} / max {} requests; median {} down, {} up",
                requests[0],
                median(&requests),
                requests[requests.len() - 1],
                kib(median(&down) as f64),
                kib(median(&per_cycle.iter().map(|c| c.1).collect::<Vec<_>>()) as f64),
            ),
            format!(
                "{} cycles (incremental but every 60 s, when the queue holds more than 64 jobs); {} of them ours; \
                 operations seen: {}; one full /jobs/state/ listing: {} down",
                per_cycle.len(),
                state.jobs.len(),
                ops.into_iter().collect::<Vec<_>>().join(", "),
                kib(full_listing as f64)
            ),
        );
        let cycles = per_cycle.len() as f64;
        let rpc_count: u64 = rpcs.values().map(|(n, _)| n).sum();
        let rpc_time: Duration = rpcs.values().map(|(_, t)| *t).sum();
        let full_time: Duration = full_rpcs.values().map(|(_, t)| *t).sum();
        self.row(
            200_001 + order,
            &format!(
                "slurmctld's RPCs per poll cycle, {} jobs in slurmctld{label}",
                state.jobs_total
            ),
            format!(
                "{:.2} RPCs, {:.2} ms of slurmctld's time per cycle; one full state listing: {:.2} ms",
                rpc_count as f64 / cycles,
                rpc_time.as_secs_f64() * 1_000.0 / cycles,
                full_time.as_secs_f64() * 1_000.0,
            ),
            format!(
                "sdiag's counters (`/diag`) over the {} cycles above, without the statistics \
                 requests themselves: {}",
                per_cycle.len(),
                rpcs.iter()
                    .map(|(kind, (n, t))| format!(
                        "{kind} {:.2}× ({:.2} ms)",
                        *n as f64 / cycles,
                        t.as_secs_f64() * 1_000.0 / cycles
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
        Ok(state.jobs_total)
    }
}

/// slurmctld's RPCs between two snapshots of its statistics, by type: count and time, without
/// the statistics requests themselves.
fn rpc_delta(before: &[RpcStats], after: &[RpcStats]) -> BTreeMap<String, (u64, Duration)> {
    after
        .iter()
        .filter(|rpc| rpc.message_type != "REQUEST_STATS_INFO")
        .filter_map(|rpc| {
            let (count, time) = before
                .iter()
                .find(|b| b.message_type == rpc.message_type)
                .map_or((0, Duration::ZERO), |b| (b.count, b.total_time));
            let n = rpc.count.saturating_sub(count);
            (n > 0).then(|| {
                (
                    rpc.message_type.clone(),
                    (n, rpc.total_time.saturating_sub(time)),
                )
            })
        })
        .collect()
}

enum Msg {
    /// The Slurm-side change was sent at this instant.
    Changed(Instant),
    /// An event for this SlurmJob arrived.
    Event(Instant),
}

/// Which pass of `request_cost` at a point: the first, or again once ours have ended or been
/// purged (the first pass's job count, so that their rows go beside its own).
#[derive(Debug, Clone, Copy)]
enum Pass {
    First,
    Ended(usize),
    Purged(usize),
}

async fn wait_index(
    index: &mut IndexReader,
    what: &str,
    pred: impl Fn(&ClusterState) -> bool,
) -> anyhow::Result<()> {
    tokio::time::timeout(TIMEOUT, async {
        loop {
            if pred(&index.borrow_and_update()) {
                return Ok(());
            }
            index.changed().await?;
        }
    })
    .await
    .with_context(|| format!("timed out waiting for {what}"))?
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Synthetic but realistic records: the field sizes of what slurmrestd returns for a held job
/// of the operator's, and of a node of the local Slurm.
fn memory(jobs: u32, nodes: u32) {
    let base = status_kib("VmRSS:");
    let now = Utc::now();
    let node_names: Vec<String> = (0..nodes).map(|i| format!("node-{i:05}")).collect();
    let job = |id: u32| {
        let running = id.is_multiple_of(4);
        let owner = OwnerTag::new(uuid::Uuid::new_v4().to_string(), 1);
        Job {
            job_id: 100_000 + id,
            name: format!("slurmjob-name-{id:06}"),
            state: JobState {
                base: if running {
                    JobBaseState::Running
                } else {
                    JobBaseState::Pending
                },
                flags: BTreeSet::new(),
            },
            state_reason: (!running).then(|| "BeginTime".to_owned()),
            user_name: Some("slurm".into()),
            cancelled_by: None,
            partition: Some("debug".into()),
            comment: Some(owner.to_string()),
            owner: Some(owner),
            seal: None,
            nodes: running.then(|| node_names[(id % nodes) as usize].clone()),
            node_count: Some(1),
            exit: Some(ExitStatus {
                return_code: Some(0),
                signal: None,
                signal_name: None,
                status: vec!["SUCCESS".into()],
            }),
            submit_time: Some(now),
            start_time: running.then_some(now),
            end_time: None,
            time_limit: Some(Duration::from_secs(3600)),
            array_job_id: None,
            array_task_id: None,
            array_task_string: None,
            standard_output: Some(format!("/tmp/slurmjob-name-{id:06}-%j.out")),
            standard_error: None,
            working_directory: Some("/tmp".into()),
            priority: Some(1),
            held: false,
            account: Some("root".into()),
            qos: Some("normal".into()),
            nice: Some(0),
            state_description: None,
            usage: None,
        }
    };
    let state = ClusterState {
        nodes: Arc::new(
            node_names
                .iter()
                .map(|name| {
                    let node = Node {
                        name: name.clone(),
                        state: NodeState {
                            base: NodeBaseState::Mixed,
                            flags: BTreeSet::new(),
                        },
                        reason: None,
                        reason_set_by_user: None,
                        cpus: Some(64),
                        alloc_cpus: Some(10),
                        real_memory: Some(256_000),
                        features: vec!["nodeset-a".into(), "gpu".into()],
                        partitions: vec!["debug".into()],
                        address: Some("10.0.0.1".into()),
                        hostname: Some(format!("{name}.slurm.svc")),
                        port: Some(6818),
                        slurmd_version: Some("24.11.5".into()),
                        owner: None,
                    };
                    (name.clone(), node)
                })
                .collect(),
        ),
        jobs: Arc::new((0..jobs).map(|i| (100_000 + i, job(i))).collect()),
        node_jobs: Arc::new(
            node_names
                .iter()
                .map(|n| {
                    (
                        n.clone(),
                        NodeJobs {
                            running: 3,
                            deadline: Some(now),
                        },
                    )
                })
                .collect(),
        ),
        jobs_total: jobs as usize,
        nodes_synced_at: Some(now),
        jobs_synced_at: Some(now),
        ..Default::default()
    };
    let tracker: Tracker = state
        .jobs
        .values()
        .map(|j| {
            (
                j.job_id,
                Tracked {
                    state: j.state.clone(),
                    entries: 1,
                    known: Known::Ours,
                    stale: Stale::No,
                },
            )
        })
        .collect();
    let with_index = status_kib("VmRSS:");
    // What the SlurmJob controller's reflector holds: the objects (no managedFields) with status.
    let objects: Vec<Arc<SlurmJob>> = state
        .jobs
        .values()
        .map(|j| {
            let spec: SlurmJobSpec = serde_json::from_value(json!({
                "clusterName": "local",
                "script": "#!/bin/sh\nsrun hostname\nsleep 600\n",
                "partition": "debug",
                "environment": {"PATH": "/usr/bin:/bin"},
            }))
            .unwrap();
            let mut object = SlurmJob::new(&j.name, spec);
            object.metadata.namespace = Some("default".into());
            object.metadata.uid = Some(uuid::Uuid::new_v4().to_string());
            object.metadata.generation = Some(1);
            object.metadata.resource_version = Some("123456789".into());
            object.status = Some(slurm_operator::controller::slurmjob::status::observe(
                &SlurmJobStatus {
                    job_id: Some(i64::from(j.job_id)),
                    submitted_generation: Some(1),
                    observed_generation: Some(1),
                    ..Default::default()
                },
                std::slice::from_ref(j),
            ));
            Arc::new(object)
        })
        .collect();
    let with_objects = status_kib("VmRSS:");
    std::hint::black_box((&state, &tracker, &objects));
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "| memory: index with {jobs} jobs (ours) + {nodes} nodes, and the poller's tracker | \
         +{:.1} MiB RSS | synthetic records in the index types, one process; VmRSS {:.1} → {:.1} MiB |",
        mib(with_index - base),
        mib(base),
        mib(with_index)
    );
    println!(
        "| memory: + {jobs} SlurmJob objects with status (the reflector's cache) | +{:.1} MiB RSS \
         | total VmRSS {:.1} MiB, VmHWM {:.1} MiB (no Kubernetes client or poller running) |",
        mib(with_objects - with_index),
        mib(with_objects),
        mib(status_kib("VmHWM:"))
    );
}

/// `count` CLOUD nodes named `<prefix>1..` in slurmctld while this lives (`scontrol` in the
/// local Slurm's root); deleted on drop, also on failure.
struct ExtraNodes {
    root: String,
    names: String,
}

impl ExtraNodes {
    fn create(root: &str, prefix: &str, count: u32) -> anyhow::Result<Option<Self>> {
        if count == 0 {
            return Ok(None);
        }
        let nodes = Self {
            root: root.to_owned(),
            names: format!("{prefix}[1-{count}]"),
        };
        nodes.scontrol(&[
            "create",
            &format!("NodeName={}", nodes.names),
            "CPUs=1",
            "RealMemory=100",
            "State=CLOUD",
        ])?;
        Ok(Some(nodes))
    }

    fn scontrol(&self, args: &[&str]) -> anyhow::Result<()> {
        let out = std::process::Command::new("chroot")
            .arg(&self.root)
            .arg("scontrol")
            .args(args)
            .output()
            .context("run scontrol in the Slurm root")?;
        if !out.status.success() {
            bail!(
                "scontrol {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }
}

impl Drop for ExtraNodes {
    fn drop(&mut self) {
        let names = format!("NodeName={}", self.names);
        if let Err(error) = self.scontrol(&["delete", &names]) {
            log(format!(
                "could not delete the bench's nodes {}: {error:#}",
                self.names
            ));
        }
    }
}

/// Others' held jobs in slurmctld, cancelled on drop.
struct QueuedJobs {
    root: String,
    name: String,
}

impl QueuedJobs {
    async fn submit(
        env: &HashMap<String, String>,
        run: &str,
        count: u32,
    ) -> anyhow::Result<Option<Self>> {
        if count == 0 {
            return Ok(None);
        }
        let get = |k: &str| env.get(k).cloned().with_context(|| format!("{k} missing"));
        let queued = Self {
            root: get("SLURM_ROOT")?,
            name: format!("{run}-queued"),
        };
        let credentials = Arc::new(Credentials::minted(
            std::fs::read(get("SLURM_JWT_KEY")?)?,
            get("SLURM_USER")?,
            Duration::from_secs(900),
        )?);
        let user = SlurmClient::new(
            ClientConfig::new(&get("SLURM_REST_URL")?)?.allow_plaintext(true),
            credentials,
        )?;
        let spec: SlurmJobSpec = serde_json::from_value(json!({
            "clusterName": "local", "script": "#!/bin/sh\ntrue\n", "partition": get("SLURM_PARTITION")?,
            "extraOptions": {"begin_time": {"set": true, "number": held_until()}},
        }))?;
        let mut request = submit::request(&spec, &queued.name, "someone else's", &[])?;
        request.comment = Some(queued.name.clone());
        let started = Instant::now();
        let failed = futures::stream::iter(0..count)
            .map(|_| user.submit_job(&request))
            .buffer_unordered(16)
            .filter(|r| futures::future::ready(r.is_err()))
            .count()
            .await;
        if failed > 0 {
            bail!("{failed} of {count} held submits failed");
        }
        log(format!(
            "queued {count} held jobs in {:.1} s",
            started.elapsed().as_secs_f64()
        ));
        Ok(Some(queued))
    }
}

impl Drop for QueuedJobs {
    fn drop(&mut self) {
        let out = std::process::Command::new("chroot")
            .arg(&self.root)
            .args(["scancel", "--name", &self.name])
            .output();
        if !out.is_ok_and(|o| o.status.success()) {
            log(format!("could not cancel the jobs named {}", self.name));
        }
    }
}

/// The operator binary's memory with `count` finished SlurmJobs, a connected SlurmCluster and
/// `nodes` extra Slurm nodes in its index.
async fn operator_memory(
    env_file: &PathBuf,
    binary: &PathBuf,
    count: u32,
    nodes: u32,
    queued: u32,
    run: &str,
) -> anyhow::Result<()> {
    const NS: &str = "bench";
    let env = read_env(env_file)?;
    let get = |k: &str| env.get(k).cloned().with_context(|| format!("{k} missing"));
    let _nodes = ExtraNodes::create(&get("SLURM_ROOT")?, "benchnode", nodes)?;
    let _queued = QueuedJobs::submit(&env, run, queued).await?;
    let api = fake_apiserver::FakeApiServer::start_with_crds(slurm_operator::crd::all()).await;
    let dir = tempfile::tempdir()?;
    let kubeconfig = api.write_kubeconfig(dir.path());
    seed_api(&api, &env, NS, None)?;
    let started = Instant::now();
    for i in 0..count {
        // As a finished SlurmJob looks after a run: finalizer, full status (as this operator
        // writes it: a start writes nothing), a few labels.
        api.insert(
            "slurm.rs/v1alpha1/slurmjobs",
            NS,
            json!({
                "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
                "metadata": {"name": format!("job-{i:05}"), "finalizers": [slurm_operator::crd::FINALIZER],
                             "labels": {"app": "bench", "team": "hpc"}},
                "spec": {"clusterName": "local", "partition": "debug",
                         "script": "#!/bin/sh\nsrun hostname\n",
                         "environment": {"PATH": "/usr/bin:/bin"}},
                "status": {
                    "phase": "Completed", "jobId": 100_000 + i, "slurmState": ["COMPLETED"],
                    "nodes": "n1", "exitCode": 0, "observedGeneration": 1, "submittedGeneration": 1,
                    "submitTime": "2026-11-22T10:00:00Z", "startTime": "2026-11-22T10:00:01Z",
                    "endTime": "2026-11-22T10:00:02Z", "trackedSince": "2026-11-22T10:00:00Z",
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Completed",
                                    "message": format!("Slurm job {} ended Completed, exit code 0", 100_000 + i),
                                    "observedGeneration": 1,
                                    "lastTransitionTime": "2026-11-22T10:00:02Z"},
                                   {"type": "Complete", "status": "True", "reason": "Completed",
                                    "message": format!("Slurm job {} ended Completed, exit code 0", 100_000 + i),
                                    "observedGeneration": 1,
                                    "lastTransitionTime": "2026-11-22T10:00:02Z"}],
                },
            }),
        );
    }
    log(format!(
        "seeded {count} SlurmJobs in {:?}",
        started.elapsed()
    ));
    let (mut child, port) = spawn_operator(binary, &kubeconfig, NS, &[])?;
    let pid = child.id().context("no pid")?;
    let clusters: kube::Api<SlurmCluster> = kube::Api::all(api.client());
    let http = reqwest::Client::new();
    let ready_url = format!("http://127.0.0.1:{port}/readyz");
    let metrics_url = format!("http://127.0.0.1:{port}/metrics");
    let deadline = Instant::now() + TIMEOUT;
    let reconciled = |text: &str| {
        metric_sum(
            text,
            "slurm_operator_reconciles_total{",
            "controller=\"slurmjob\"",
        )
    };
    // Three job polls ended: the first (its first sync, through the queued jobs) and two more.
    let job_polls = |text: &str| {
        metric_sum(
            text,
            "slurm_operator_poll_duration_seconds_count{",
            "kind=\"jobs\"",
        )
    };
    loop {
        let ready = http
            .get(&ready_url)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        let (done, polls) = match http.get(&metrics_url).send().await {
            Ok(r) => {
                let text = r.text().await.unwrap_or_default();
                (reconciled(&text), job_polls(&text))
            }
            Err(_) => (0.0, 0.0),
        };
        // The SlurmCluster's status counts the nodes of the poller's index.
        let indexed_nodes = clusters
            .get("local")
            .await
            .ok()
            .and_then(|c| c.status?.nodes)
            .map_or(0, |n| i64::from(n.total));
        if ready && done >= f64::from(count) && indexed_nodes >= i64::from(nodes) && polls >= 3.0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("the operator did not reconcile {count} SlurmJobs in time ({done} so far)");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let settled = started.elapsed();
    // A few poll cycles more, then read the kernel's numbers for the process.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |field: &str| -> f64 {
        status
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0.0)
    };
    let _ = child.start_kill();
    let kinds: Vec<(String, u64)> = api
        .requests()
        .into_iter()
        .filter(|(k, _)| k.starts_with("PATCH") || k.starts_with("POST") || k.starts_with("PUT"))
        .map(|(k, n)| (k.to_string(), n))
        .collect();
    let writes: u64 = kinds.iter().map(|(_, n)| n).sum();
    log(format!("API writes by kind: {kinds:?}"));
    println!(
        "| memory: the operator binary, {count} finished SlurmJobs + a connected SlurmCluster with {nodes} extra Slurm nodes and {queued} others' held jobs queued | VmRSS {:.1} MiB (anonymous {:.1}, file-backed {:.1}), VmHWM {:.1} MiB | release binary against the tests' in-memory API server (sends managedFields; the caches drop them); read {:.0?} after start, once /readyz was ready, every SlurmJob reconciled and three job polls done, plus 5 s; {writes} API writes meanwhile |",
        kib("VmRSS:") / 1024.0,
        kib("RssAnon:") / 1024.0,
        kib("RssFile:") / 1024.0,
        kib("VmHWM:") / 1024.0,
        settled
    );
    Ok(())
}

/// A Secret with the local Slurm's JWT key in `namespace` (which doubles as the credentials
/// namespace) and the SlurmCluster `local` for its slurmrestd (polled every `poll_interval`), granting `namespace`
/// to the local Slurm's own user: seeded without requests.
fn seed_api(
    api: &fake_apiserver::FakeApiServer,
    env: &HashMap<String, String>,
    namespace: &str,
    poll_interval: Option<&str>,
) -> anyhow::Result<()> {
    let get = |k: &str| env.get(k).cloned().with_context(|| format!("{k} missing"));
    let key = std::fs::read(get("SLURM_JWT_KEY")?)?;
    let b64 = |bytes: &[u8]| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(bytes)
    };
    api.insert(
        "v1/secrets",
        namespace,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "jwt", "labels": {"slurm.rs/credentials": "true"}},
               "data": {"jwt_hs256.key": b64(&key)}}),
    );
    let mut cluster = json!({"apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmCluster", "metadata": {"name": "local"},
           "spec": {"endpoint": get("SLURM_REST_URL")?, "allowInsecureHttp": true,
                    "auth": {"jwt": {"keySecretRef": {"name": "jwt", "key": "jwt_hs256.key"},
                                     "user": get("SLURM_USER")?}},
                    "access": [{"namespaces": [namespace], "slurmUser": get("SLURM_USER")?,
                                "allowClusterUser": true}]}});
    // Without one, the operator's default (the API server stores the CRD's).
    if let Some(interval) = poll_interval {
        cluster["spec"]["pollInterval"] = json!(interval);
    }
    api.insert("slurm.rs/v1alpha1/slurmclusters", "", cluster);
    Ok(())
}

/// `binary run` for `namespace` (also its credentials namespace) against the API server of
/// `kubeconfig`, with `extra` arguments; its metrics port.
fn spawn_operator(
    binary: &PathBuf,
    kubeconfig: &std::path::Path,
    namespace: &str,
    extra: &[String],
) -> anyhow::Result<(tokio::process::Child, u16)> {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.port()
    };
    let child = tokio::process::Command::new(binary)
        .args([
            "run",
            "--namespace",
            namespace,
            "--credentials-namespace",
            namespace,
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .args(extra)
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("start {}", binary.display()))?;
    Ok((child, port))
}
