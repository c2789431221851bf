//! Outages of the real local Slurm (`hack/slurm-up.sh`) under a real poller (issue 7,
//! Reliability): slurmrestd killed and started again, slurmctld restarted with its saved state.
//!
//! The daemons are stopped and started through `hack/slurm-daemon.sh` (the command lines of
//! `hack/slurm-up.sh`, the same PID files), and a [`common::DaemonGuard`] starts what a test
//! stopped even when an assertion fails: every other suite shares this Slurm. The two tests take
//! [`SERIAL`] so they never take a daemon away from each other; other test binaries run before or
//! after this one (cargo runs test binaries one at a time).

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{scenario, wait_index};

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::runtime::reflector::ObjectRef;
use slurm_operator::crd::SlurmCluster;
use slurm_operator::metrics::Metrics;
use slurm_operator::slurm::types::JobBaseState;
use slurm_operator::slurm::{ClientConfig, RequestObserver, RetryPolicy, SlurmClient};
use slurm_operator::state::index::{Health, IndexReader, SlurmEvent};
use slurm_operator::state::poller::{self, PollerConfig, PollerHandle, strategy};
use tokio::sync::broadcast;

const INTERVAL: Duration = Duration::from_secs(1);
/// How long slurmrestd stays down (the 30 s): at a 1 s interval that spans the whole
/// backoff up to its cap, so a spinning retry loop would show in the request count.
const OUTAGE: Duration = Duration::from_secs(30);
/// The client's per-request timeout in the slurmrestd test: the bound on noticing the outage.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// With slurmctld away, slurmrestd keeps trying to connect to it for ~MessageTimeout (10 s by
/// default; 9 s measured) before it answers 502/500 with "Unable to contact slurm controller".
const SLURMRESTD_CTLD_WAIT: Duration = Duration::from_secs(10);
/// Waits for a state the test itself brought about (a job running, the recovery).
const TIMEOUT: Duration = Duration::from_secs(30);

/// One outage at a time in this binary.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Counts every request (retries included) and when it ended.
#[derive(Default)]
struct Requests(Mutex<Vec<Instant>>);

impl RequestObserver for Requests {
    fn observe(&self, _operation: &'static str, _status: Option<u16>, _elapsed: Duration) {
        self.0.lock().unwrap().push(Instant::now());
    }
}

impl Requests {
    fn between(&self, from: Instant, to: Instant) -> usize {
        let seen = self.0.lock().unwrap();
        seen.iter().filter(|t| **t >= from && **t < to).count()
    }
}

struct Running {
    _handle: PollerHandle,
    index: IndexReader,
    events: broadcast::Receiver<SlurmEvent>,
    requests: Arc<Requests>,
}

fn start(slurm: &common::LocalSlurm, config: ClientConfig) -> Running {
    let requests = Arc::new(Requests::default());
    let client =
        SlurmClient::with_observer(config, slurm.credentials(), Some(requests.clone())).unwrap();
    let (tx, events) = broadcast::channel(4096);
    let (handle, index) = poller::spawn(
        ObjectRef::new("local"),
        client,
        &PollerConfig { interval: INTERVAL },
        common::tag_key(),
        tx,
        Metrics::new(),
    );
    Running {
        _handle: handle,
        index,
        events,
        requests,
    }
}

/// Wait up to `timeout` for an index state that satisfies `pred`. A poller that panicked drops
/// its index writer: that fails here ("the poller is running").
async fn synced(index: &mut IndexReader) {
    wait_index(index, "a synced index", TIMEOUT, |s| {
        (s.health.is_up() && s.jobs_synced_at.is_some()).then_some(())
    })
    .await;
}

/// Submit a job of ours (tagged) running `body`, and wait until the index shows it in `until`.
async fn submit_ours(
    slurm: &common::LocalSlurm,
    poller: &mut Running,
    body: &str,
    until: &[JobBaseState],
) -> u32 {
    let tag = slurm.our_tag(&common::unique("outage"), 1);
    let mut request = slurm.job("outage", body);
    request.comment = Some(tag);
    request.time_limit = Some(Duration::from_secs(120));
    let job_id = slurm.client().submit_job(&request).await.unwrap().job_id;
    wait_index(&mut poller.index, "the job in the index", TIMEOUT, |s| {
        s.jobs
            .get(&job_id)
            .filter(|j| until.contains(&j.state.base))
            .map(|_| ())
    })
    .await;
    job_id
}

/// The most poll cycles that can start within `window` of the first failed one, given the
/// poller's backoff: delays of at least interval, 2×, 4×, … (jitter only lengthens them), capped.
fn max_failed_cycles(window: Duration) -> usize {
    let cap = strategy::backoff_cap(INTERVAL);
    let (mut at, mut delay, mut cycles) = (Duration::ZERO, INTERVAL, 1);
    loop {
        at += delay;
        if at > window {
            return cycles;
        }
        cycles += 1;
        delay = (delay * 2).min(cap);
    }
}

/// The longest a failing idempotent call waits between its attempts (jitter at most doubles).
fn retry_delays(retry: &RetryPolicy) -> Duration {
    (0..retry.max_retries)
        .map(|i| 2 * (retry.min_delay * 2u32.pow(i as u32)).min(retry.max_delay))
        .sum()
}

/// `HealthChanged` events received so far, `up` in order.
fn health_events(events: &mut broadcast::Receiver<SlurmEvent>) -> Vec<bool> {
    let mut seen = Vec::new();
    loop {
        match events.try_recv() {
            Ok(SlurmEvent::HealthChanged { up, .. }) => seen.push(up),
            Ok(_) => {}
            Err(broadcast::error::TryRecvError::Lagged(n)) => panic!("lagged by {n} events"),
            Err(_) => return seen,
        }
    }
}

/// slurmrestd killed for [`OUTAGE`] and started again (as `hack/slurm-up.sh` starts it): the
/// index goes down within one interval plus the request timeout, the poller backs off instead of
/// spinning, reports down once, keeps running, and after the restart is up again with the final
/// state of a job that ended during the outage.
#[tokio::test]
async fn slurmrestd_outage_goes_down_backs_off_and_recovers() {
    let slurm = require_slurm!();
    let _serial = SERIAL.lock().await;
    // The client as the SlurmCluster controller builds it (default retries), with a shorter timeout.
    let config = slurm.config().with_request_timeout(REQUEST_TIMEOUT);
    let retry = config.retry;
    let mut poller = start(&slurm, config);
    synced(&mut poller.index).await;

    // Ends about 3 s into the outage: only a recovered poller can show its final state.
    let job_id = submit_ours(&slurm, &mut poller, "sleep 3", &[JobBaseState::Running]).await;
    let polls_before = poller.index.borrow().polls;

    let mut restd = common::DaemonGuard::stop(&slurm, "slurmrestd");
    let killed = Instant::now();
    let down = wait_index(
        &mut poller.index,
        "Down",
        INTERVAL + REQUEST_TIMEOUT + retry_delays(&retry) + Duration::from_secs(5),
        |s| matches!(s.health, Health::Down { .. }).then(|| s.health.clone()),
    )
    .await;
    let down_after = killed.elapsed();
    let bound = INTERVAL + REQUEST_TIMEOUT + retry_delays(&retry);
    eprintln!("down {down_after:?} after the kill (bound {bound:?}): {down:?}");
    assert!(down_after <= bound, "down {down_after:?} after the kill");
    let Health::Down { reason, .. } = down else {
        unreachable!()
    };
    assert_eq!(reason, "Unreachable");

    tokio::time::sleep(OUTAGE.saturating_sub(killed.elapsed())).await;
    let restarting = Instant::now();
    let down_for = restarting - killed;
    let during = poller.index.borrow().clone();
    assert!(!during.health.is_up(), "still down: {:?}", during.health);
    assert_eq!(
        during.jobs[&job_id].state.base,
        JobBaseState::Running,
        "kept as last seen while down"
    );
    let cycles = during.polls - polls_before;
    let requests = poller.requests.between(killed, restarting);
    let max_cycles = max_failed_cycles(down_for);
    // One more cycle: the one in flight at the kill may end after it.
    let max_requests = (max_cycles + 1) * (1 + retry.max_retries);
    eprintln!(
        "{down_for:?} down: {cycles} cycles (backoff allows {max_cycles}, without it ~{}), \
         {requests} requests (bound {max_requests})",
        down_for.as_secs()
    );
    assert!(
        cycles as usize <= max_cycles + 1,
        "{cycles} poll cycles in {down_for:?} down"
    );
    assert!(
        requests <= max_requests,
        "{requests} requests in {down_for:?} down"
    );

    restd.start();
    // The poller waits out its current backoff delay (at most the cap) before it looks again.
    let recovered = wait_index(
        &mut poller.index,
        "up with the job's final state",
        strategy::backoff_cap(INTERVAL) + TIMEOUT,
        |s| {
            let job = s.jobs.get(&job_id)?;
            (s.health.is_up() && job.state.is_final()).then(|| (s.clone(), job.clone()))
        },
    )
    .await;
    let (state, job) = recovered;
    eprintln!("recovered {:?} after the restart", restarting.elapsed());
    assert_eq!(job.state.base, JobBaseState::Completed, "{job:?}");
    assert_eq!(job.exit.as_ref().and_then(|e| e.return_code), Some(0));
    assert!(state.jobs_synced_at > during.jobs_synced_at, "resynced");
    assert_eq!(
        health_events(&mut poller.events),
        vec![true, false, true],
        "down once, up again"
    );
    assert!(poller.index.has_changed().is_ok(), "the poller still runs");
}

/// slurmctld stopped (it saves its state) and started again with StateSaveLocation intact: a
/// job running across the restart completes and its final state reaches the index, and while
/// slurmctld is away (slurmrestd answers errors) the poller reports down.
#[tokio::test]
async fn slurmctld_restart_keeps_a_running_job_and_reports_down_meanwhile() {
    let slurm = require_slurm!();
    let _serial = SERIAL.lock().await;
    // The client as the SlurmCluster controller builds it. slurmrestd's 502 (Slurm error 1800) while
    // slurmctld is away is `ControllerNotResponding`: transient, but not retried by the facade
    // (slurmrestd already waited ~9 s), so the first poll after the stop reports down.
    let config = slurm.config();
    let mut poller = start(&slurm, config);
    synced(&mut poller.index).await;

    // Runs across the restart: slurmrestd needs ~9 s to answer errors, slurmctld ~1 s to recover.
    let job_id = submit_ours(&slurm, &mut poller, "sleep 20", &[JobBaseState::Running]).await;

    let mut ctld = common::DaemonGuard::stop(&slurm, "slurmctld");
    let stopped = Instant::now();
    let bound = INTERVAL + SLURMRESTD_CTLD_WAIT + Duration::from_secs(2);
    let down = wait_index(&mut poller.index, "Down", bound, |s| {
        matches!(s.health, Health::Down { .. }).then(|| s.clone())
    })
    .await;
    eprintln!(
        "down {:?} after slurmctld stopped: {:?}",
        stopped.elapsed(),
        down.health
    );
    let Health::Down {
        message, reason, ..
    } = &down.health
    else {
        unreachable!()
    };
    assert_eq!(*reason, "ControllerNotResponding", "{message}");
    assert!(
        message.contains("Unable to contact slurm controller"),
        "slurmrestd answered an error: {message}"
    );
    // One node-list request that slurmrestd held for ~9 s (a poll possibly in flight at the stop
    // adds one): the facade did not retry it.
    let requests = poller.requests.between(stopped, Instant::now());
    assert!(requests <= 2, "{requests} requests before down");
    assert_eq!(
        down.jobs[&job_id].state.base,
        JobBaseState::Running,
        "kept as last seen while down"
    );

    ctld.start();
    let restarted = Instant::now();
    let (state, job) = wait_index(
        &mut poller.index,
        "up with the job's final state",
        strategy::backoff_cap(INTERVAL) + TIMEOUT,
        |s| {
            let job = s.jobs.get(&job_id)?;
            (s.health.is_up() && job.state.is_final()).then(|| (s.clone(), job.clone()))
        },
    )
    .await;
    eprintln!(
        "job {job_id} final {:?} after the restart",
        restarted.elapsed()
    );
    assert_eq!(job.state.base, JobBaseState::Completed, "{job:?}");
    assert_eq!(job.exit.as_ref().and_then(|e| e.return_code), Some(0));
    assert_eq!(state.job_records(job_id).len(), 1, "not requeued or split");
    let health = health_events(&mut poller.events);
    assert_eq!(
        health.iter().filter(|up| !**up).count(),
        1,
        "down once: {health:?}"
    );
    assert_eq!(health.last(), Some(&true));
    assert!(poller.index.has_changed().is_ok(), "the poller still runs");
}

/// The SlurmCluster's `Ready` condition as (status, reason), from the API.
async fn cluster_ready(clusters: &kube::Api<SlurmCluster>) -> Option<(String, String)> {
    let cluster = clusters.get_opt(scenario::CLUSTER).await.ok()??;
    let ready = cluster
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")?;
    Some((ready.status, ready.reason))
}

/// The same slurmrestd outage seen from Kubernetes: the operator binary (against the in-memory
/// API server) sets the SlurmCluster `Ready=False` within one poll interval plus the request timeout
/// (and the facade's retries) of the kill, and `Ready=True` again once slurmrestd is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_goes_not_ready_within_one_poll_and_recovers() {
    let slurm = require_slurm!();
    let _serial = SERIAL.lock().await;
    slurm_operator::tls::install_crypto_provider();
    const NAMESPACE: &str = "outage";
    let api = fake_apiserver::FakeApiServer::start_with_crds(slurm_operator::crd::all()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = api.write_kubeconfig(dir.path());
    let client = api.client();
    scenario::seed_cluster(&client, NAMESPACE, &slurm).await;
    let clusters: kube::Api<SlurmCluster> = kube::Api::all(client);
    let metrics = format!("127.0.0.1:{}", common::e2e::free_port());
    let _operator = common::e2e::Operator::spawn(
        &[
            "--namespace",
            NAMESPACE,
            "--credentials-namespace",
            scenario::CREDENTIALS_NAMESPACE,
            "--metrics-addr",
            &metrics,
        ],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
        Some(&std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("outage-operator.log")),
    )
    .sigterm_on_drop(Duration::from_secs(10));
    common::e2e::eventually("Ready=True", TIMEOUT, || async {
        cluster_ready(&clusters)
            .await
            .filter(|(status, _)| status == "True")
    })
    .await;

    // The SlurmCluster's client has the default settings; the poll interval is 1 s.
    let defaults = slurm.config();
    let mut restd = common::DaemonGuard::stop(&slurm, "slurmrestd");
    let killed = Instant::now();
    let bound = INTERVAL + defaults.request_timeout + retry_delays(&defaults.retry);
    let (_, reason) = common::e2e::eventually("Ready=False", bound + TIMEOUT, || async {
        cluster_ready(&clusters)
            .await
            .filter(|(status, _)| status == "False")
    })
    .await;
    let after = killed.elapsed();
    eprintln!("Ready=False ({reason}) {after:?} after the kill (bound {bound:?})");
    assert!(after <= bound + Duration::from_secs(1), "{after:?}");
    assert_eq!(reason, "Unreachable");

    restd.start();
    let restarted = Instant::now();
    common::e2e::eventually(
        "Ready=True again",
        strategy::backoff_cap(INTERVAL) + TIMEOUT,
        || async {
            cluster_ready(&clusters)
                .await
                .filter(|(status, _)| status == "True")
        },
    )
    .await;
    eprintln!("Ready=True {:?} after the restart", restarted.elapsed());
}
