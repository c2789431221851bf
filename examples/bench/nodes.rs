//! `bench nodes` (issue 19): the poller's node list on a cluster whose nodes keep changing.
//!
//! slurmrestd has no node filter finer than "changed since" (`update_time`): one changed node
//! sends them all. `--nodes` extra nodes (CLOUD, in no partition: nothing runs there) are created
//! in slurmctld, and one of them is drained and resumed in turn every `--change-every` (as job
//! starts and ends change nodes on a busy cluster). A poller at the default interval then runs
//! for `--seconds` through a counting proxy, once with the default `Tuning` (a changed list
//! delays the next one, `Tuning::nodes_wait`) and once asking every cycle, as before that
//! (`nodes_wait_per_node` zero). For each: node requests, bytes received, slurmrestd's and
//! slurmctld's CPU time (from `/proc/<pid>/stat`, with the pids `hack/slurm-up.sh` records), and
//! how old the index's node list was (`nodes_synced_at`, sampled every 100 ms).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chrono::Utc;
use kube::runtime::reflector::ObjectRef;
use slurm_operator::metrics::Metrics;
use slurm_operator::slurm::{ClientConfig, Credentials, SlurmClient};
use slurm_operator::state::poller::{self, PollerConfig, Tuning};
use tokio::sync::broadcast;
use tokio_util::task::AbortOnDropHandle;

use super::{
    ExtraNodes, INTERVAL, Requests, counted_client, host_port, kib, log, read_env, wait_index,
};

#[derive(clap::Args)]
pub struct Settings {
    /// The env file written by hack/slurm-up.sh.
    #[arg(long)]
    pub env_file: PathBuf,
    /// Extra nodes created for the measurement (deleted after it).
    #[arg(long, default_value_t = 1_000)]
    pub nodes: u32,
    /// How long each poller is measured.
    #[arg(long, default_value_t = 30)]
    pub seconds: u64,
    /// One node is drained or resumed this often (milliseconds).
    #[arg(long, default_value_t = 250)]
    pub change_every: u64,
}

/// CPU seconds (user + system) a process has used, from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("a /proc stat line")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime, the 14th and 15th fields of the line, in clock ticks (100 a second on
    // Linux).
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    Ok(ticks as f64 / 100.0)
}

fn pid(state_dir: &Path, daemon: &str) -> anyhow::Result<u32> {
    let file = state_dir.join(format!("{daemon}.pid"));
    std::fs::read_to_string(&file)
        .with_context(|| format!("read {}", file.display()))?
        .trim()
        .parse()
        .with_context(|| format!("a pid in {}", file.display()))
}

pub async fn nodes(settings: Settings) -> anyhow::Result<()> {
    let env = read_env(&settings.env_file)?;
    let get = |k: &str| {
        env.get(k)
            .cloned()
            .with_context(|| format!("{k} missing in {}", settings.env_file.display()))
    };
    let url = get("SLURM_REST_URL")?;
    let credentials = Arc::new(Credentials::minted(
        std::fs::read(get("SLURM_JWT_KEY")?)?,
        get("SLURM_USER")?,
        Duration::from_secs(900),
    )?);
    let state_dir = PathBuf::from(get("SLURM_STATE_DIR")?);
    let (restd, ctld) = (
        pid(&state_dir, "slurmrestd")?,
        pid(&state_dir, "slurmctld")?,
    );
    let target = host_port(&url)?;

    let prefix = "benchpace";
    let _extra = ExtraNodes::create(&get("SLURM_ROOT")?, prefix, settings.nodes)?;
    let user = SlurmClient::new(
        ClientConfig::new(&url)?.allow_plaintext(true),
        credentials.clone(),
    )?;
    let changes = Arc::new(AtomicU64::new(0));
    let churn = {
        let (node, changes) = (format!("{prefix}1"), changes.clone());
        let every = Duration::from_millis(settings.change_every);
        AbortOnDropHandle::new(tokio::spawn(async move {
            let mut drained = false;
            loop {
                tokio::time::sleep(every).await;
                let result = if drained {
                    user.resume_node(&node).await
                } else {
                    user.drain_node(&node, "slurm-operator: bench nodes").await
                };
                match result {
                    Ok(()) => {
                        drained = !drained;
                        changes.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => log(format!("changing {node}: {error}")),
                }
            }
        }))
    };

    let before = Tuning {
        nodes_wait_per_node: Duration::ZERO,
        ..Tuning::default()
    };
    let mut rows = Vec::new();
    for (what, tuning) in [
        ("paced (`Tuning::nodes_wait`, default)", Tuning::default()),
        ("asked every cycle (before)", before),
    ] {
        let (client, requests, bytes) = counted_client(&target, credentials.clone()).await?;
        let (events, _) = broadcast::channel(65_536);
        let started_at = Utc::now();
        let (handle, mut index) = poller::spawn_tuned(
            ObjectRef::new("local"),
            client,
            &PollerConfig { interval: INTERVAL },
            slurm_operator::slurm::tag::TagKey::ephemeral(),
            tuning,
            events,
            Metrics::new(),
        );
        wait_index(&mut index, "a synced index with the extra nodes", |s| {
            s.health.is_up()
                && s.nodes.len() >= settings.nodes as usize
                && s.jobs_synced_at.is_some_and(|t| t > started_at)
        })
        .await?;
        let node_requests =
            |r: &Requests| r.snapshot().get("slurm_get_nodes").copied().unwrap_or(0);
        let (requests0, down0, polls0, changes0) = (
            node_requests(&requests),
            bytes.down.load(Ordering::Relaxed),
            index.borrow().polls,
            changes.load(Ordering::Relaxed),
        );
        let (restd0, ctld0) = (cpu_seconds(restd)?, cpu_seconds(ctld)?);
        let start = Instant::now();
        let window = Duration::from_secs(settings.seconds);
        let mut ages = Vec::new();
        while start.elapsed() < window {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if let Some(at) = index.borrow().nodes_synced_at {
                ages.push((Utc::now() - at).to_std().unwrap_or_default().as_secs_f64());
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        let (restd1, ctld1) = (cpu_seconds(restd)?, cpu_seconds(ctld)?);
        let node_count = node_requests(&requests) - requests0;
        let down = bytes.down.load(Ordering::Relaxed) - down0;
        let cycles = index.borrow().polls - polls0;
        let total_nodes = index.borrow().nodes.len();
        let changed = changes.load(Ordering::Relaxed) - changes0;
        drop(handle);
        ages.sort_by(f64::total_cmp);
        let mean = ages.iter().sum::<f64>() / ages.len().max(1) as f64;
        let max = ages.last().copied().unwrap_or(0.0);
        let result = format!(
            "{:.2} node requests/s; {}/s received (all requests); slurmrestd {:.1} %, slurmctld {:.1} % of a core",
            node_count as f64 / seconds,
            kib(down as f64 / seconds),
            (restd1 - restd0) * 100.0 / seconds,
            (ctld1 - ctld0) * 100.0 / seconds,
        );
        let how = format!(
            "{seconds:.0} s, {cycles} poll cycles at {INTERVAL:?}, {changed} node changes (one node drained or resumed every {} ms); \
             the index's node list was {mean:.2} s old on average, {max:.2} s at most (sampled every 100 ms)",
            settings.change_every,
        );
        let row = format!("| node list, {total_nodes} nodes changing, {what} | {result} | {how} |");
        log(&row);
        rows.push(row);
    }
    drop(churn);
    for row in rows {
        println!("{row}");
    }
    Ok(())
}
