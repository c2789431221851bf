//! Shared helpers for tests against the real local Slurm from `hack/slurm-up.sh`.
//!
//! The env file written by `hack/slurm-up.sh` says where slurmrestd is. Without it the tests are
//! skipped — unless `SLURM_OPERATOR_REQUIRE_SLURM=1` (set by `hack/test.sh`, hence by CI), where a
//! missing Slurm is a failure: a suite that silently skips its integration tests proves nothing.

#![allow(dead_code)]
// each test binary uses its own subset
// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod e2e;
pub mod hostile;
pub mod proxy;
pub mod runner;
pub mod scenario;
pub mod tls;

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use slurm_operator::slurm::tag::{OwnerTag, TagKey};
use slurm_operator::slurm::types::SubmitRequest;
use slurm_operator::slurm::{ClientConfig, Credentials, SlurmClient};
use slurm_operator::state::index::{ClusterState, IndexReader};

pub struct LocalSlurm {
    pub flavour: String,
    pub url: String,
    pub key_path: PathBuf,
    pub user: String,
    pub root: PathBuf,
    pub partition: String,
    pub cluster_name: String,
    pub release: String,
    /// slurmdbd runs (job records outlive slurmctld's MinJobAge).
    pub accounting: bool,
    /// The REST API versions this Slurm's slurmrestd can serve (its data_parser plugins),
    /// oldest first.
    pub data_parsers: Vec<String>,
    /// The JSON form slurmrestd was started with (`SLURMRESTD_JSON`): `pretty` (Slurm's
    /// default; trixie) or `compact` (forky).
    pub rest_json: String,
    /// A QoS the tenant `alice` may use that no job fits (`MaxSubmitJobsPerUser=0`): every
    /// submit with it is refused over a limit (hack/ACCOUNTING.md, "Tenants").
    pub capped_qos: String,
}

/// The data_parser plugins installed in a Slurm root (`v0.0.40`, ...), oldest first.
fn data_parsers_in(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for lib in [
        "usr/lib/x86_64-linux-gnu/slurm-wlm",
        "usr/lib/aarch64-linux-gnu/slurm-wlm",
    ] {
        let Ok(entries) = std::fs::read_dir(root.join(lib)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(version) = name
                .strip_prefix("data_parser_")
                .and_then(|n| n.strip_suffix(".so"))
            {
                found.push(version.replace('_', "."));
            }
        }
    }
    found.sort_by_key(|v| v.rsplit('.').next().and_then(|m| m.parse::<u32>().ok()));
    found
}

fn env_file() -> PathBuf {
    if let Ok(path) = std::env::var("SLURM_ENV_FILE") {
        return PathBuf::from(path);
    }
    let flavour = std::env::var("SLURM_FLAVOUR").unwrap_or_else(|_| "trixie".into());
    PathBuf::from(format!("/var/tmp/slurm-operator/{flavour}/env"))
}

fn parse_env(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| {
            (
                k.trim().to_owned(),
                v.trim().trim_matches('"').trim_matches('\'').to_owned(),
            )
        })
        .collect()
}

/// The local Slurm, or `None` (test skipped) when it is not up and not required.
pub fn local_slurm() -> Option<LocalSlurm> {
    let required = std::env::var("SLURM_OPERATOR_REQUIRE_SLURM").is_ok_and(|v| v == "1");
    let path = env_file();
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if required => panic!(
            "SLURM_OPERATOR_REQUIRE_SLURM=1 but {} is unreadable: {error}",
            path.display()
        ),
        Err(_) => {
            eprintln!(
                "skipped: no local Slurm ({} missing); run hack/slurm-up.sh",
                path.display()
            );
            return None;
        }
    };
    let env = parse_env(&text);
    let get = |k: &str| {
        env.get(k).cloned().unwrap_or_else(|| {
            panic!(
                "{k} missing in {} (written by an older hack/slurm-up.sh: run it again)",
                path.display()
            )
        })
    };
    Some(LocalSlurm {
        flavour: get("SLURM_FLAVOUR"),
        url: get("SLURM_REST_URL"),
        key_path: PathBuf::from(get("SLURM_JWT_KEY")),
        user: get("SLURM_USER"),
        root: PathBuf::from(get("SLURM_ROOT")),
        partition: get("SLURM_PARTITION"),
        cluster_name: get("SLURM_CLUSTER_NAME"),
        release: get("SLURM_RELEASE"),
        accounting: env.get("SLURM_ACCOUNTING").is_some_and(|v| v == "1"),
        data_parsers: data_parsers_in(Path::new(&get("SLURM_ROOT"))),
        rest_json: get("SLURM_REST_JSON"),
        capped_qos: get("SLURM_CAPPED_QOS"),
    })
}

/// `let slurm = require_slurm!();` — returns from the test (skip) when no Slurm is up.
#[macro_export]
macro_rules! require_slurm {
    () => {
        match common::local_slurm() {
            Some(slurm) => slurm,
            None => return,
        }
    };
}

/// The tag key of the pollers tests start themselves (tests that run the controllers use
/// their context's).
pub fn tag_key() -> TagKey {
    static KEY: std::sync::LazyLock<TagKey> =
        std::sync::LazyLock::new(|| TagKey::new(b"the tests' own tag key, 32 bytes+").unwrap());
    KEY.clone()
}

impl LocalSlurm {
    /// The comment of a job of the SlurmJob `uid`'s, as the operator would sign it with
    /// [`tag_key`] for this Slurm's user (the jobs' user).
    pub fn our_tag(&self, uid: &str, generation: i64) -> String {
        tag_key().comment(&OwnerTag::new(uid, generation), &self.user)
    }

    pub fn key(&self) -> Vec<u8> {
        std::fs::read(&self.key_path)
            .unwrap_or_else(|e| panic!("read {}: {e}", self.key_path.display()))
    }

    pub fn credentials(&self) -> Arc<Credentials> {
        Arc::new(Credentials::minted(self.key(), &self.user, Duration::from_secs(300)).unwrap())
    }

    pub fn config(&self) -> ClientConfig {
        ClientConfig::new(&self.url).unwrap().allow_plaintext(true)
    }

    pub fn client(&self) -> SlurmClient {
        SlurmClient::new(self.config(), self.credentials()).unwrap()
    }

    /// A batch job running `body` (a shell snippet), with a name for finding it in logs.
    pub fn job(&self, name: &str, body: &str) -> SubmitRequest {
        SubmitRequest {
            script: format!("#!/bin/sh\n{body}\n"),
            name: Some(name.to_owned()),
            partition: Some(self.partition.clone()),
            working_directory: "/tmp".into(),
            environment: [("PATH".to_owned(), "/usr/bin:/bin".to_owned())].into(),
            ..SubmitRequest::default()
        }
    }

    /// The body of an authenticated GET of `path` (below the endpoint, such as
    /// `/slurm/v0.0.42/nodes/`) as the cluster's user: slurmrestd's answer as it was sent, for
    /// what the facade does not show.
    pub async fn get_raw(&self, path: &str) -> String {
        slurm_operator::tls::install_crypto_provider();
        let token = self
            .credentials()
            .token_at(std::time::SystemTime::now())
            .unwrap();
        reqwest::Client::new()
            .get(format!("{}{path}", self.url))
            .header("X-SLURM-USER-NAME", &self.user)
            .header(
                "X-SLURM-USER-TOKEN",
                secrecy::ExposeSecret::expose_secret(&token),
            )
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Rename job `job_id` to `name`, its bytes as they are, with `scontrol update` as root in
    /// the Slurm root: the REST API takes only UTF-8, while a user's `sbatch -J` in a Latin-1
    /// terminal stores any bytes.
    pub fn rename_job_raw(&self, job_id: u32, name: &[u8]) {
        use std::os::unix::ffi::OsStringExt;
        let mut arg = b"JobName=".to_vec();
        arg.extend_from_slice(name);
        let status = Command::new("chroot")
            .arg(&self.root)
            .args(["env", "-i", "PATH=/usr/bin:/bin", "scontrol", "update"])
            .arg(format!("JobId={job_id}"))
            .arg(std::ffi::OsString::from_vec(arg))
            .status()
            .unwrap();
        assert!(status.success(), "scontrol update JobId={job_id}: {status}");
    }

    /// Run `scontrol` with `args` as root in the Slurm root (what an admin, or a job's owner
    /// on their own job, may do that the REST API does not offer).
    pub fn scontrol(&self, args: &[&str]) {
        let status = Command::new("chroot")
            .arg(&self.root)
            .args(["env", "-i", "PATH=/usr/bin:/bin", "scontrol"])
            .args(args)
            .status()
            .unwrap();
        assert!(status.success(), "scontrol {args:?}: {status}");
    }

    /// Run a `hack/slurm-node.sh` subcommand for this flavour (dynamic slurmd standing in for a pod).
    pub fn node_script(&self, args: &[&str]) -> String {
        self.hack_script("slurm-node.sh", args)
    }

    /// A dynamic node of one CPU with a feature only it has (its name without dashes), stopped
    /// and deleted when the guard drops: jobs constrained to the feature queue behind each
    /// other only, not behind the rest of the suite's jobs.
    pub fn private_node(&self, prefix: &str) -> (NodeGuard<'_>, String) {
        let node = unique(prefix);
        let feature = node.replace('-', "");
        self.node_script(&[
            "start",
            &node,
            "--conf",
            &format!("CPUs=1 RealMemory=500 Feature={feature}"),
        ]);
        (NodeGuard::new(self, &node), feature)
    }
}

/// Poll `probe` every `every` until it yields `Some`, or panic after `timeout` with `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, every: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            started.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(every).await;
    }
}

/// A name unique to this test run, for jobs and nodes.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

/// Stops a dynamic slurmd started by a test (and removes its node record) when dropped, so a
/// failing test does not leave nodes behind.
pub struct NodeGuard<'a> {
    slurm: &'a LocalSlurm,
    name: String,
}

impl<'a> NodeGuard<'a> {
    pub fn new(slurm: &'a LocalSlurm, name: &str) -> Self {
        Self {
            slurm,
            name: name.to_owned(),
        }
    }

    /// The node this guard stops.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for NodeGuard<'_> {
    fn drop(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/slurm-node.sh");
        let _ = Command::new("bash")
            .arg(script)
            .args([
                "stop",
                &self.name,
                "--delete",
                "--flavour",
                &self.slurm.flavour,
            ])
            .output();
    }
}

impl LocalSlurm {
    /// Run `hack/<script> ARGS --flavour <this flavour>`; its stdout, or a failed test.
    fn hack_script(&self, script: &str, args: &[&str]) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("hack")
            .join(script);
        let output = Command::new("bash")
            .arg(&path)
            .args(args)
            .args(["--flavour", &self.flavour])
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", path.display()));
        assert!(
            output.status.success(),
            "{script} {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Run a `hack/slurm-daemon.sh` subcommand for this flavour (stop or start slurmctld or
    /// slurmrestd exactly as `hack/slurm-up.sh` does).
    pub fn daemon_script(&self, args: &[&str]) -> String {
        self.hack_script("slurm-daemon.sh", args)
    }
}

/// A second slurmrestd that serves only one REST API version (`slurmrestd -d <version>`,
/// through `hack/slurm-daemon.sh start slurmrestd --data-parser <version>`), beside the main
/// one; stopped when dropped.
pub struct VersionRest<'a> {
    slurm: &'a LocalSlurm,
    pub version: String,
    pub url: String,
}

impl<'a> VersionRest<'a> {
    pub fn start(slurm: &'a LocalSlurm, version: &str) -> Self {
        let out = slurm.daemon_script(&["start", "slurmrestd", "--data-parser", version]);
        let url = out
            .lines()
            .rev()
            .find(|l| l.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL from slurm-daemon.sh: {out}"))
            .to_owned();
        Self {
            slurm,
            version: version.to_owned(),
            url,
        }
    }

    /// A client for it; `pin` pins the version (`None`: negotiate).
    pub fn client(&self, pin: Option<slurm_operator::slurm::ApiVersion>) -> SlurmClient {
        let config = ClientConfig::new(&self.url)
            .unwrap()
            .allow_plaintext(true)
            .with_api_version(pin);
        SlurmClient::new(config, self.slurm.credentials()).unwrap()
    }
}

impl Drop for VersionRest<'_> {
    fn drop(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/slurm-daemon.sh");
        let _ = Command::new("bash")
            .arg(script)
            .args([
                "stop",
                "slurmrestd",
                "--data-parser",
                &self.version,
                "--flavour",
                &self.slurm.flavour,
            ])
            .output();
    }
}

/// A Slurm daemon stopped by a test: [`DaemonGuard::start`] brings it back, and so does dropping
/// the guard (a failed assertion included), since the rest of the suite shares this Slurm.
pub struct DaemonGuard<'a> {
    slurm: &'a LocalSlurm,
    daemon: &'static str,
    stopped: bool,
}

impl<'a> DaemonGuard<'a> {
    /// Stop `daemon` (`slurmctld` or `slurmrestd`) through `hack/slurm-daemon.sh`.
    pub fn stop(slurm: &'a LocalSlurm, daemon: &'static str) -> Self {
        // The guard exists before the stop: a stop that fails half-way is still undone.
        let guard = Self {
            slurm,
            daemon,
            stopped: true,
        };
        slurm.daemon_script(&["stop", daemon]);
        guard
    }

    /// Start it again (waits until it is ready) and disarm the guard.
    pub fn start(&mut self) {
        self.slurm.daemon_script(&["start", self.daemon]);
        self.stopped = false;
    }
}

impl Drop for DaemonGuard<'_> {
    fn drop(&mut self) {
        if !self.stopped {
            return;
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/slurm-daemon.sh");
        let output = Command::new("bash")
            .arg(script)
            .args(["start", self.daemon, "--flavour", &self.slurm.flavour])
            .output();
        match output {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "could not restart {}: {}",
                self.daemon,
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(error) => eprintln!("could not restart {}: {error}", self.daemon),
        }
    }
}

/// The first value `pred` finds in a poller's index, re-checked on every update it publishes;
/// panics naming `what` after `timeout`.
pub async fn wait_index<T>(
    index: &mut IndexReader,
    what: &str,
    timeout: Duration,
    mut pred: impl FnMut(&ClusterState) -> Option<T>,
) -> T {
    tokio::time::timeout(timeout, async {
        loop {
            if let Some(found) = pred(&index.borrow_and_update()) {
                return found;
            }
            index.changed().await.expect("the poller is running");
        }
    })
    .await
    .unwrap_or_else(|_| {
        let s = index.borrow();
        panic!(
            "timed out after {timeout:?} waiting for {what} (the index after {} polls: {} jobs \
             known, {} kept, listed up to {:?}, synced at {:?}, {:?})",
            s.polls,
            s.jobs_total,
            s.jobs.len(),
            s.jobs_listed_up_to,
            s.jobs_synced_at,
            s.health,
        )
    })
}
