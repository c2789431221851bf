//! `slurm-operator job run`: one SlurmJob manifest through the operator's submit / mirror /
//! cancel core, against a Slurm cluster, without Kubernetes.
//!
//! The SlurmCluster manifest's Secret references are resolved from Secret (and ConfigMap) documents
//! in the same files, exactly as the controller resolves them from the API.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde::Deserialize;
use tokio::signal::unix::{SignalKind, signal};

use super::CliError;
use crate::controller::cluster::config::{self, CaSource, Sources};
use crate::controller::slurmjob::{act, status, submit};
use crate::crd::slurmjob::{Phase, SlurmJobStatus};
use crate::crd::{SlurmCluster, SlurmJob};
use crate::slurm::tag::{OwnerTag, TagKey};
use crate::slurm::{SlurmClient, SlurmError};

#[derive(Debug, Args)]
pub struct JobArgs {
    #[command(subcommand)]
    pub command: JobCommand,
}

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Submit a SlurmJob manifest, follow it to the end (Ctrl-C cancels it, a second Ctrl-C
    /// stops following it: exit 130), print the status.
    Run(JobRunArgs),
}

#[derive(Debug, Args)]
pub struct JobRunArgs {
    /// The SlurmJob manifest (YAML).
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,
    /// Manifest(s) with the SlurmCluster and the Secrets/ConfigMaps it references (multi-document YAML).
    #[arg(long = "cluster", required = true)]
    pub cluster: Vec<PathBuf>,
    /// How often to ask Slurm for the job's state.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub poll: Duration,
    /// A file holding the key (at least 32 bytes) the job's ownership tag is signed with.
    /// Default: a random key for this run only, so no operator takes the job for its own.
    #[arg(long, env = "SLURM_OPERATOR_TAG_KEY_FILE")]
    pub tag_key_file: Option<PathBuf>,
}

impl JobArgs {
    pub async fn run(&self) -> Result<u8, CliError> {
        match &self.command {
            JobCommand::Run(args) => run(args).await,
        }
    }
}

/// Documents of the kinds the runner reads; anything else in the files is ignored.
#[derive(Default)]
struct Manifests {
    jobs: Vec<SlurmJob>,
    clusters: Vec<SlurmCluster>,
    secrets: Vec<Secret>,
    config_maps: Vec<ConfigMap>,
}

fn read_manifests(paths: &[PathBuf]) -> Result<Manifests, CliError> {
    #[derive(Deserialize)]
    struct Kind {
        kind: Option<String>,
    }
    let mut out = Manifests::default();
    for path in paths {
        let text = std::fs::read_to_string(path).map_err(|source| CliError::ReadFile {
            what: "manifest",
            path: path.clone(),
            source,
        })?;
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let value = serde_yaml_ng::Value::deserialize(document)
                .map_err(|e| CliError::Usage(format!("{}: invalid YAML: {e}", path.display())))?;
            if value.is_null() {
                continue;
            }
            let invalid = |kind: &str, e: serde_yaml_ng::Error| {
                CliError::Usage(format!("{}: invalid {kind}: {e}", path.display()))
            };
            let kind = serde_yaml_ng::from_value::<Kind>(value.clone())
                .map_err(|e| invalid("document", e))?
                .kind
                .unwrap_or_default();
            match kind.as_str() {
                "SlurmJob" => out
                    .jobs
                    .push(serde_yaml_ng::from_value(value).map_err(|e| invalid("SlurmJob", e))?),
                "SlurmCluster" => out.clusters.push(
                    serde_yaml_ng::from_value(value).map_err(|e| invalid("SlurmCluster", e))?,
                ),
                // serde's message quotes the offending value, which here is secret material.
                "Secret" => out
                    .secrets
                    .push(serde_yaml_ng::from_value(value).map_err(|_| {
                        CliError::Usage(format!(
                            "{}: invalid Secret: `data` must map keys to base64 values and \
                             `stringData` keys to strings (the parser's message is not shown: \
                             it would quote the Secret's data)",
                            path.display()
                        ))
                    })?),
                "ConfigMap" => out
                    .config_maps
                    .push(serde_yaml_ng::from_value(value).map_err(|e| invalid("ConfigMap", e))?),
                _ => {}
            }
        }
    }
    Ok(out)
}

fn named<'a, T: kube::Resource>(objects: &'a [T], name: &str) -> Option<&'a T> {
    objects
        .iter()
        .find(|o| o.meta().name.as_deref() == Some(name))
}

/// The client for the SlurmCluster `name`, with its Secrets taken from the manifests.
fn cluster_client(manifests: &Manifests, name: &str) -> Result<SlurmClient, CliError> {
    let cluster = named(&manifests.clusters, name).ok_or_else(|| {
        CliError::Usage(format!(
            "no SlurmCluster named {name:?} in the --cluster manifests (the SlurmJob's clusterName)"
        ))
    })?;
    let plan = config::plan(&cluster.spec)
        .map_err(|e| CliError::Usage(format!("SlurmCluster {name}: {e}")))?;
    let sources = Sources {
        auth: named(&manifests.secrets, &plan.auth.secret().name).cloned(),
        ca_secret: match &plan.ca {
            Some(CaSource::Secret(r)) => named(&manifests.secrets, &r.name).cloned(),
            _ => None,
        },
        ca_config_map: match &plan.ca {
            Some(CaSource::ConfigMap(r)) => named(&manifests.config_maps, &r.name).cloned(),
            _ => None,
        },
    };
    let validated = plan
        .build(&sources)
        .map_err(|e| CliError::Usage(format!("SlurmCluster {name}: {e}")))?;
    Ok(SlurmClient::new(validated.client, validated.credentials)?)
}

/// A line of what `job run` sees. Following goes on if no one reads them any more (`| head`):
/// the job's outcome is still the exit code, and Ctrl-C still cancels it; a line that cannot
/// be written for another reason is said on stderr.
fn say(line: &str) {
    if let Err(error) = super::print_out(&format!("{line}\n")) {
        eprintln!("{error}");
    }
}

/// Exit code of `job run` when a second Ctrl-C stops it following the job: 128 + SIGINT, as
/// a shell reports a command that SIGINT ended.
pub const EXIT_INTERRUPTED: u8 = 130;

/// How long reading the job's state may keep failing with errors that may pass (slurmrestd
/// unreachable, timing out) before `job run` gives up and names the job it leaves.
const FOLLOW_GIVE_UP: Duration = Duration::from_secs(300);

/// Ask Slurm to cancel `job_id` on a Ctrl-C; whether it was asked (`false`: the cancel
/// failed, and the job goes on).
async fn request_cancel(client: &SlurmClient, name: &str, job_id: u32) -> bool {
    match act::cancel(client, job_id).await {
        Ok(outcome) => {
            say(&format!(
                "{name}: cancel requested ({outcome:?}); Ctrl-C again stops following the job"
            ));
            true
        }
        Err(error) => {
            eprintln!(
                "{name}: cancel failed: {error}; Ctrl-C again stops following the job (it goes \
                 on: `scancel {job_id}` ends it)"
            );
            false
        }
    }
}

/// [`request_cancel`], unless another Ctrl-C comes first: `None`, to leave at once.
async fn cancel_or_leave(
    client: &SlurmClient,
    name: &str,
    job_id: u32,
    interrupts: &mut tokio::signal::unix::Signal,
) -> Option<bool> {
    tokio::select! {
        asked = request_cancel(client, name, job_id) => Some(asked),
        _ = interrupts.recv() => None,
    }
}

/// One line per change a person cares about.
fn describe(status: &SlurmJobStatus) -> String {
    let mut line = format!("{}", status.phase);
    if let Some(id) = status.job_id {
        line.push_str(&format!(" job {id}"));
    }
    if !status.slurm_state.is_empty() {
        line.push_str(&format!(" [{}]", status.slurm_state.join("+")));
    }
    if let Some(reason) = &status.state_reason {
        line.push_str(&format!(" reason={reason}"));
    }
    if let Some(nodes) = &status.nodes {
        line.push_str(&format!(" nodes={nodes}"));
    }
    if let Some(code) = status.exit_code {
        line.push_str(&format!(" exit={code}"));
    }
    if let Some(signal) = status.signal {
        line.push_str(&format!(" signal={signal}"));
    }
    if let Some(tasks) = &status.array_tasks {
        let counts: Vec<String> = tasks
            .counts
            .iter()
            .map(|(s, n)| format!("{s}={n}"))
            .collect();
        line.push_str(&format!(" tasks: {}", counts.join(" ")));
    }
    line
}

async fn run(args: &JobRunArgs) -> Result<u8, CliError> {
    let jobs = read_manifests(std::slice::from_ref(&args.file))?.jobs;
    let [job] = jobs.as_slice() else {
        return Err(CliError::Usage(format!(
            "{} must hold exactly one SlurmJob",
            args.file.display()
        )));
    };
    if !job.spec.depends_on.is_empty() {
        return Err(CliError::Usage(
            "dependsOn refers to other SlurmJobs: it needs the operator".into(),
        ));
    }
    let manifests = read_manifests(&args.cluster)?;
    let client = cluster_client(&manifests, &job.spec.cluster_name)?;
    let name = job
        .metadata
        .name
        .clone()
        .unwrap_or_else(|| "slurmjob".to_owned());
    // Without an API server there is no UID: a fresh one makes this run's tag unique.
    let uid = job
        .metadata
        .uid
        .clone()
        .unwrap_or_else(|| format!("local-{}", uuid::Uuid::new_v4()));
    let generation = job.metadata.generation.unwrap_or(1);
    let tag = OwnerTag::new(uid, generation);
    let key = match &args.tag_key_file {
        Some(path) => {
            let bytes = std::fs::read(path).map_err(|source| CliError::ReadFile {
                what: "tag key",
                path: path.clone(),
                source,
            })?;
            TagKey::new(&bytes).map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?
        }
        None => TagKey::generate()
            .map_err(|e| CliError::Usage(format!("cannot make a tag key: {e}")))?,
    };
    // Signed for the user the credentials act as. This run follows the job id the submit
    // returns, so the tag is only a record here; it proves ownership to whoever holds the key.
    let comment = key.comment(&tag, &client.user().unwrap_or_default());
    let request = submit::request(&job.spec, &name, &comment, &[])
        .map_err(|e| CliError::Usage(format!("SlurmJob {name}: {e}")))?;

    // Listening from before the submit: a Ctrl-C while it is in flight must not kill the
    // process with the job accepted and its id unsaid (the signal's default action).
    let mut interrupts = signal(SignalKind::interrupt())
        .map_err(|e| CliError::Usage(format!("cannot listen for Ctrl-C: {e}")))?;
    let (submitted, interrupted) = {
        let mut submit = std::pin::pin!(client.submit_job(&request));
        let mut interrupted = false;
        loop {
            tokio::select! {
                result = &mut submit => break (result?, interrupted),
                _ = interrupts.recv() => {
                    if interrupted {
                        eprintln!(
                            "{name}: left during the submit: if it went through, its Slurm job \
                             runs (`squeue --name {name}` shows it, `scancel` ends it)"
                        );
                        return Ok(EXIT_INTERRUPTED);
                    }
                    interrupted = true;
                    eprintln!(
                        "{name}: interrupted during the submit: the job is cancelled as soon \
                         as it is submitted (Ctrl-C again leaves at once)"
                    );
                }
            }
        }
    };
    let job_id = submitted.job_id;
    for warning in &submitted.warnings {
        eprintln!("slurmrestd: {warning}");
    }
    let mut current = SlurmJobStatus {
        phase: Phase::Submitted,
        job_id: Some(i64::from(job_id)),
        submitted_generation: Some(generation),
        observed_generation: Some(generation),
        ..Default::default()
    };
    say(&format!("{name}: {}", describe(&current)));
    if let Some(path) = submit::output_path(&job.spec, &name) {
        say(&format!(
            "{name}: output in {}",
            path.replace("%j", &job_id.to_string())
        ));
    }

    // The first Ctrl-C cancels the job; the next one stops following it, whatever the cancel
    // did (a job stuck completing, or slurmrestd unreachable, must not hold the terminal).
    // Each request races the next Ctrl-C: a hanging slurmrestd (up to the request timeout, and
    // its retries) must not hold the terminal either.
    let leave = |cancel: Option<bool>| {
        let left = match cancel {
            Some(true) => "its cancel was requested",
            _ => "it is left as it is",
        };
        eprintln!(
            "{name}: stopped following Slurm job {job_id} ({left}; `scancel {job_id}` ends it, \
             `scontrol show job {job_id}` shows it)"
        );
        Ok(EXIT_INTERRUPTED)
    };
    let mut cancel = None;
    if interrupted {
        match cancel_or_leave(&client, &name, job_id, &mut interrupts).await {
            Some(asked) => cancel = Some(asked),
            None => return leave(None),
        }
    }
    let mut failing_since: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = interrupts.recv() => match cancel {
                None => match cancel_or_leave(&client, &name, job_id, &mut interrupts).await {
                    Some(asked) => cancel = Some(asked),
                    None => return leave(None),
                },
                Some(requested) => return leave(Some(requested)),
            },
            () = tokio::time::sleep(args.poll) => {}
        }
        let read = tokio::select! {
            read = client.job(job_id) => read,
            _ = interrupts.recv() => {
                match cancel {
                    None => match cancel_or_leave(&client, &name, job_id, &mut interrupts).await {
                        Some(asked) => cancel = Some(asked),
                        None => return leave(None),
                    },
                    Some(requested) => return leave(Some(requested)),
                }
                continue;
            }
        };
        if !matches!(&read, Err(e) if e.is_transient()) {
            failing_since = None;
        }
        let next = match read {
            Ok(records) => status::observe(&current, &records),
            // slurmctld forgot the job before we saw it end (MinJobAge passed).
            Err(SlurmError::NotFound { .. }) if !current.phase.is_terminal() => SlurmJobStatus {
                phase: Phase::Lost,
                state_reason: Some("JobVanished".into()),
                ..current.clone()
            },
            Err(SlurmError::NotFound { .. }) => current.clone(),
            Err(error)
                if error.is_transient()
                    && failing_since.get_or_insert_with(Instant::now).elapsed()
                        < FOLLOW_GIVE_UP =>
            {
                eprintln!("{name}: {error} (retrying)");
                continue;
            }
            // The job goes on without us: say which it is, so that it is not left unnoticed.
            Err(error) => {
                eprintln!(
                    "{name}: cannot follow Slurm job {job_id} any more ({}; `scancel \
                     {job_id}` ends it, `scontrol show job {job_id}` shows it)",
                    match cancel {
                        Some(true) => "its cancel was requested",
                        _ => "it is left as it is",
                    }
                );
                return Err(error.into());
            }
        };
        if describe(&next) != describe(&current) {
            say(&format!("{name}: {}", describe(&next)));
        }
        current = next;
        if current.phase.is_terminal() {
            break;
        }
    }
    let yaml = serde_yaml_ng::to_string(&current)
        .map_err(|e| CliError::Usage(format!("cannot print status: {e}")))?;
    super::print_out(&format!("---\n{yaml}\n"))?;
    Ok(if current.phase == Phase::Completed {
        0
    } else {
        1
    })
}
