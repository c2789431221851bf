//! `slurm-operator wait` and `slurm-operator logs`: follow a SlurmJob from the command line, as
//! one follows a batch job with `sbatch --wait` and `tail -f` of its output.

use std::time::Duration;

use clap::Args;
use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::LogParams;
use kube::runtime::wait::await_condition;
use kube::{Api, Client};

use super::CliError;
use crate::controller::slurmjob::output::{self, LABEL};
use crate::controller::slurmjob::status::{COMPLETE, FAILED, RECORD_UNREADABLE, STALLED};
use crate::crd::SlurmJob;

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Name of the SlurmJob.
    pub name: String,
    /// Namespace (default: the kubeconfig's).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Give up after this long (exit 124, as timeout(1)); default: wait as long as it takes.
    /// A job that cannot be submitted (`Stalled`) ends the wait at once (exit 126).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// Name of the SlurmJob.
    pub name: String,
    /// Namespace (default: the kubeconfig's).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Keep printing while the job writes, until it ends.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Give up waiting for the output Pod to start after this long.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub pod_timeout: Duration,
}

/// The exit code a finished run stands for: 0 when `Complete`, the batch script's exit code
/// when `Failed` with one (1 when it ended otherwise: cancelled, timed out, node failure,
/// signal), [`EXIT_STALLED`] when the current spec cannot be submitted ([`stalled`]); `None`
/// while it has not finished, or while the status is older than the spec.
pub fn outcome(job: &SlurmJob) -> Option<u8> {
    if stalled(job).is_some() {
        return Some(EXIT_STALLED);
    }
    let status = job.status.as_ref()?;
    // A status computed for an earlier generation may describe the previous run.
    if let Some(generation) = job.metadata.generation
        && status
            .observed_generation
            .is_none_or(|seen| seen < generation)
    {
        return None;
    }
    let holds = |kind: &str| {
        status
            .conditions
            .iter()
            .any(|c| c.type_ == kind && c.status == "True")
    };
    if holds(COMPLETE) {
        Some(0)
    } else if holds(FAILED) {
        Some(
            status
                .exit_code
                .and_then(|code| u8::try_from(code).ok())
                .filter(|code| *code != 0)
                .unwrap_or(1),
        )
    } else {
        None
    }
}

/// The `Stalled=True` condition of a SlurmJob whose current spec is not submitted and will not
/// be until something changes (Slurm refused it, the spec is invalid, the namespace has no
/// access, ...): the operator never sets `Complete` or `Failed` for such a run, so without this
/// `wait` would wait for ever. Only for the current generation (an edit may have fixed it), and
/// only while no job was submitted for it: a run with a job is `Stalled` only while its record
/// cannot be read, which passes, and that reason is skipped for a run still pending behind an
/// earlier generation's job too.
pub fn stalled(job: &SlurmJob) -> Option<&Condition> {
    let status = job.status.as_ref()?;
    // As the controller reads it (a SlurmJob from the API server always has one).
    let generation = job.metadata.generation.unwrap_or(1);
    if status.submitted_generation == Some(generation) {
        return None;
    }
    status.conditions.iter().find(|c| {
        c.type_ == STALLED
            && c.status == "True"
            && c.observed_generation == Some(generation)
            && c.reason != RECORD_UNREADABLE
    })
}

/// Exit code of `wait` when it gives up (as timeout(1)).
const EXIT_TIMED_OUT: u8 = 124;
/// Exit code of `wait` when the job cannot be submitted ([`stalled`]): as a shell's 126 for a
/// command found but not runnable, next to timeout(1)'s 124, and apart from the usage error (2)
/// and the deleted SlurmJob (2). A batch script may exit 126 itself; the line on stderr tells.
pub const EXIT_STALLED: u8 = 126;

async fn client_and_namespace(namespace: &Option<String>) -> Result<(Client, String), CliError> {
    let client = Client::try_default()
        .await
        .map_err(|e| CliError::Usage(format!("cannot reach Kubernetes: {e}")))?;
    let namespace = namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    Ok((client, namespace))
}

impl WaitArgs {
    pub async fn run(&self) -> Result<u8, CliError> {
        let (client, namespace) = client_and_namespace(&self.namespace).await?;
        let api: Api<SlurmJob> = Api::namespaced(client, &namespace);
        let what = format!("slurmjob {}/{}", namespace, self.name);
        // A missing SlurmJob is an error at once, not a wait for one to appear.
        api.get(&self.name)
            .await
            .map_err(|e| CliError::Usage(format!("{what}: {e}")))?;
        let ended = await_condition(api, &self.name, |job: Option<&SlurmJob>| {
            job.is_none_or(|job| outcome(job).is_some())
        });
        let ended = match self.timeout {
            Some(limit) => match tokio::time::timeout(limit, ended).await {
                Ok(ended) => ended,
                Err(_) => {
                    eprintln!(
                        "{what}: not finished after {}",
                        humantime::format_duration(limit)
                    );
                    return Ok(EXIT_TIMED_OUT);
                }
            },
            None => ended.await,
        };
        let job = ended
            .map_err(|e| CliError::Usage(format!("{what}: {e}")))?
            .ok_or_else(|| CliError::Usage(format!("{what} was deleted before it finished")))?;
        if let Some(stalled) = stalled(&job) {
            eprintln!(
                "{what}: cannot be submitted: {}: {}",
                stalled.reason, stalled.message
            );
            return Ok(EXIT_STALLED);
        }
        let code = outcome(&job).unwrap_or(1);
        let status = job.status.unwrap_or_default();
        let mut line = format!("{what}: {}", status.phase);
        if let Some(id) = status.job_id {
            line.push_str(&format!(", Slurm job {id}"));
        }
        if let Some(exit) = status.exit_code {
            line.push_str(&format!(", exit code {exit}"));
        }
        eprintln!("{line}");
        Ok(code)
    }
}

impl LogsArgs {
    pub async fn run(&self) -> Result<u8, CliError> {
        let (client, namespace) = client_and_namespace(&self.namespace).await?;
        let what = format!("slurmjob {}/{}", namespace, self.name);
        let jobs: Api<SlurmJob> = Api::namespaced(client.clone(), &namespace);
        let job = jobs
            .get(&self.name)
            .await
            .map_err(|e| CliError::Usage(format!("{what}: {e}")))?;
        if job.spec.output.is_none() {
            let file = job
                .spec
                .standard_output
                .clone()
                .unwrap_or_else(|| "slurm-<job id>.out".to_owned());
            return Err(CliError::Usage(format!(
                "{what} has no spec.output: its output stays on the Slurm nodes ({file}, relative \
                 to {}); set spec.output to read it here",
                job.spec
                    .working_directory
                    .as_deref()
                    .unwrap_or(crate::controller::slurmjob::submit::DEFAULT_WORKING_DIRECTORY)
            )));
        }
        // The operator's streamer Pod, named after the SlurmJob, prints the output file. Right
        // after a re-run the previous run's Pod may still be there: only the one streaming the
        // job the status names will do.
        let pods: Api<Pod> = Api::namespaced(client, &namespace);
        let deadline = tokio::time::Instant::now() + self.pod_timeout;
        loop {
            let job = jobs
                .get(&self.name)
                .await
                .map_err(|e| CliError::Usage(format!("{what}: {e}")))?;
            let pod = pods
                .get_opt(&self.name)
                .await
                .map_err(|e| CliError::Usage(format!("{what}: {e}")))?;
            if pod.as_ref().is_some_and(|pod| {
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                streams_current_run(pod, &job)
                    && matches!(phase, Some("Running" | "Succeeded" | "Failed"))
            }) {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                let earlier = pod
                    .as_ref()
                    .filter(|pod| !streams_current_run(pod, &job))
                    .and_then(output::streamed_job_id)
                    .map(|id| format!("; the Pod there streams Slurm job {id}, an earlier run"))
                    .unwrap_or_default();
                return Err(CliError::Usage(format!(
                    "{what}: its output Pod did not start within {}{earlier} (is the job \
                     submitted? kubectl describe pod {} -n {namespace})",
                    humantime::format_duration(self.pod_timeout),
                    self.name
                )));
            }
            tokio::time::sleep(POD_POLL).await;
        }
        let params = LogParams {
            follow: self.follow,
            ..LogParams::default()
        };
        let mut lines = pods
            .log_stream(&self.name, &params)
            .await
            .map_err(|e| CliError::Usage(format!("{what}: cannot read the output: {e}")))?
            .lines();
        while let Some(line) = lines
            .try_next()
            .await
            .map_err(|e| CliError::Usage(format!("{what}: reading the output: {e}")))?
        {
            println!("{line}");
        }
        Ok(0)
    }
}

/// How often `logs` looks for the output Pod of the current run.
const POD_POLL: Duration = Duration::from_millis(500);

/// Whether `pod` streams `job`'s current run: the operator's streamer of this very SlurmJob
/// (its label, owned by its uid, not by an earlier SlurmJob of that name), for the Slurm job the
/// status names.
fn streams_current_run(pod: &Pod, job: &SlurmJob) -> bool {
    let labelled = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL))
        .is_some_and(|value| {
            let name = job.metadata.name.as_deref().unwrap_or_default();
            let uid = job.metadata.uid.as_deref().unwrap_or_default();
            *value == output::label_value(name, uid)
        });
    let owned = job.metadata.uid.as_ref().is_some_and(|uid| {
        pod.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|owner| owner.uid == *uid)
    });
    let job_id = job.status.as_ref().and_then(|s| s.job_id);
    labelled && owned && job_id.is_some() && output::streamed_job_id(pod) == job_id
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::crd::slurmjob::SlurmJobStatus;

    fn job(generation: i64, status: Option<SlurmJobStatus>) -> SlurmJob {
        let mut job: SlurmJob = serde_json::from_value(json!({
            "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
            "metadata": {"name": "j", "generation": generation},
            "spec": {"clusterName": "main", "script": "#!/bin/sh\ntrue\n"},
        }))
        .unwrap();
        job.status = status;
        job
    }

    fn status(conditions: &[(&str, &str)], exit: Option<i32>, seen: i64) -> SlurmJobStatus {
        SlurmJobStatus {
            exit_code: exit,
            observed_generation: Some(seen),
            conditions: conditions
                .iter()
                .map(|(kind, value)| Condition {
                    type_: (*kind).into(),
                    status: (*value).into(),
                    reason: "R".into(),
                    message: String::new(),
                    last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ),
                    observed_generation: Some(seen),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_exit_code_is_the_jobs() {
        for (conditions, exit, want) in [
            (&[("Complete", "True")][..], Some(0), Some(0)),
            (&[("Failed", "True")], Some(3), Some(3)),
            (&[("Failed", "True")], Some(255), Some(255)),
            // Ended without an exit code of its own (cancelled, timed out, signalled).
            (&[("Failed", "True")], None, Some(1)),
            (&[("Failed", "True")], Some(0), Some(1)),
            (&[("Failed", "True")], Some(300), Some(1)),
            (&[("Complete", "False"), ("Failed", "False")], None, None),
            (&[("Ready", "True")], None, None),
            (&[], None, None),
            // Cannot be submitted (refused, invalid, no access): never Complete nor Failed.
            (
                &[("Ready", "False"), ("Stalled", "True")],
                None,
                Some(EXIT_STALLED),
            ),
            (&[("Ready", "False"), ("Reconciling", "True")], None, None),
        ] {
            let got = outcome(&job(2, Some(status(conditions, exit, 2))));
            assert_eq!(got, want, "{conditions:?} exit {exit:?}");
        }
        let stalled = |seen, submitted, reason: &str| {
            let mut status = status(&[("Ready", "False"), ("Stalled", "True")], None, seen);
            status.submitted_generation = submitted;
            status.job_id = submitted.map(|_| 77);
            status.conditions[1].reason = reason.into();
            outcome(&job(2, Some(status)))
        };
        assert_eq!(stalled(2, None, "SubmitRejected"), Some(EXIT_STALLED));
        // Stalled before the latest edit, which may have fixed it.
        assert_eq!(stalled(1, None, "SubmitRejected"), None);
        // The current run's job exists; its record cannot be read for now.
        assert_eq!(stalled(2, Some(2), RECORD_UNREADABLE), None);
        // The previous run's record, while the edit waits for that job to end.
        assert_eq!(stalled(2, Some(1), RECORD_UNREADABLE), None);
        assert_eq!(stalled(2, Some(1), "NoAccess"), Some(EXIT_STALLED));
        assert_eq!(outcome(&job(1, None)), None);
        // A status from before the latest edit describes the previous run.
        let stale = job(3, Some(status(&[("Complete", "True")], Some(0), 2)));
        assert_eq!(outcome(&stale), None);
    }

    /// `logs` reads only the Pod streaming the run the status names, of this very SlurmJob.
    #[test]
    fn only_the_current_runs_pod_is_read() {
        let mut job = job(2, None);
        job.metadata.uid = Some("uid-2".into());
        job.spec.output =
            Some(serde_json::from_value(json!({"volume": "out", "slurmPath": "/shared"})).unwrap());
        let pod_of = |job: &SlurmJob, id| output::pod(job, id, "busybox", false).unwrap();
        let current = pod_of(&job, 77);
        // Not submitted yet: no run to read.
        assert!(!streams_current_run(&current, &job));
        job.status = Some(SlurmJobStatus {
            job_id: Some(77),
            ..Default::default()
        });
        assert!(streams_current_run(&current, &job));
        // The previous run's Pod, still there right after a re-run.
        assert!(!streams_current_run(&pod_of(&job, 76), &job));
        // A Pod of an earlier SlurmJob of the same name (another uid).
        let mut earlier = job.clone();
        earlier.metadata.uid = Some("uid-1".into());
        assert!(!streams_current_run(&pod_of(&earlier, 77), &job));
        // Not the operator's streamer of this name.
        let mut other = current.clone();
        other.metadata.labels = None;
        assert!(!streams_current_run(&other, &job));
    }
}
