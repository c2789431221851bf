//! `slurm-operator wait` and `slurm-operator logs`: follow a SlurmJob from the command line, as
//! one follows a batch job with `sbatch --wait` and `tail -f` of its output.

use std::time::Duration;

use clap::Args;
use futures::{AsyncReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Api;
use kube::api::LogParams;
use kube::runtime::WatchStreamExt;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff, Event, watcher};

use super::CliError;
use crate::controller::kit;
use crate::controller::slurmjob::output::{self, LABEL};
use crate::controller::slurmjob::status::{
    COMPLETE, DEPENDENCY_NEVER_SATISFIED, FAILED, RECORD_UNREADABLE, STALLED,
};
use crate::crd::SlurmJob;
use crate::crd::slurmjob::WholeSlurmJob;

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Name of the SlurmJob.
    pub name: String,
    /// Namespace (default: the kubeconfig's).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub kube: super::KubeArgs,
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
    #[command(flatten)]
    pub kube: super::KubeArgs,
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
/// only while no job was submitted for it, or its job waits on a dependency Slurm deems never
/// satisfied (it never starts): a run with a job is otherwise `Stalled` only while its record
/// cannot be read, which passes, and that reason is skipped for a run still pending behind an
/// earlier generation's job too.
pub fn stalled(job: &SlurmJob) -> Option<&Condition> {
    let status = job.status.as_ref()?;
    // As the controller reads it (a SlurmJob from the API server always has one).
    let generation = job.metadata.generation.unwrap_or(1);
    // A submitted run is Stalled for good only when Slurm deems a dependency never satisfied.
    let submitted = status.submitted_generation == Some(generation);
    status.conditions.iter().find(|c| {
        c.type_ == STALLED
            && c.status == "True"
            && c.observed_generation == Some(generation)
            && c.reason != RECORD_UNREADABLE
            && (!submitted || c.reason == DEPENDENCY_NEVER_SATISFIED)
    })
}

/// Exit code of `wait` when it gives up (as timeout(1)).
const EXIT_TIMED_OUT: u8 = 124;
/// Exit code of `wait` when the job cannot be submitted ([`stalled`]): as a shell's 126 for a
/// command found but not runnable, next to timeout(1)'s 124, and apart from the usage error (2)
/// and the deleted SlurmJob (2). A batch script may exit 126 itself; the line on stderr tells.
pub const EXIT_STALLED: u8 = 126;
/// Exit code of `wait` when it could not follow the SlurmJob ([`FollowError`]): as timeout(1)'s
/// 125 for a failure of its own, not the job's, and apart from the usage error (2) that a
/// missing or deleted SlurmJob also is.
pub const EXIT_NOT_FOLLOWED: u8 = 125;

/// How long the watch may keep failing, with no answer in between, before `wait` gives up:
/// long enough for an API server to restart or a connection to come back, short enough that a
/// lasting refusal (no RBAC permission to watch SlurmJobs, say) is reported within minutes.
const FOLLOW_GIVE_UP: Duration = Duration::from_secs(300);

/// Why [`follow`] stopped without an answer.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error("cannot follow it: the watch kept failing for {}", humantime::format_duration(*.lasted))]
    Failing {
        lasted: Duration,
        #[source]
        source: watcher::Error,
    },
    #[error("cannot follow it: the watch ended")]
    Ended,
}

/// Follows SlurmJob `name` until `done` holds for it (`Some` with it then), or until it is gone
/// (`None`). The SlurmJob is the one of `uid`, or the first one seen: another of the same name
/// (deleted and created again while the watch was down) means that one is gone, not that it
/// ended as the new one does. kube's `await_condition` ends at its watch's first error, but a job that runs for
/// hours outlives many a dropped connection and API server restart: errors are retried after
/// `backoff` (kube's default: 0.8 s doubling up to 30 s), and only errors with no answer
/// between them for `give_up` end the follow.
pub async fn follow(
    api: Api<WholeSlurmJob>,
    name: &str,
    mut uid: Option<String>,
    done: impl Fn(&SlurmJob) -> bool,
    backoff: impl Backoff,
    give_up: Duration,
) -> Result<Option<SlurmJob>, FollowError> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher(api, config).backoff(backoff));
    // Whether the SlurmJob was in the latest (re)list: when not, it was deleted meanwhile (its
    // Delete event may have been missed while the watch was down).
    let mut listed = false;
    let mut failing_since = None;
    while let Some(event) = events.next().await {
        let event = match event {
            // `Init` is the watcher's own marker before each (re)list, not an answer.
            Ok(Event::Init) => {
                listed = false;
                continue;
            }
            Ok(event) => {
                failing_since = None;
                event
            }
            Err(source) => {
                let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                let lasted = since.elapsed();
                if lasted >= give_up {
                    return Err(FollowError::Failing { lasted, source });
                }
                tracing::warn!(
                    slurmjob = name,
                    error = %crate::error_chain::Chain(&source),
                    "cannot follow the SlurmJob for now; retrying"
                );
                continue;
            }
        };
        if let Event::InitApply(job) | Event::Apply(job) = &event {
            let seen = job.metadata.uid.as_deref();
            match uid.as_deref() {
                Some(followed) if seen != Some(followed) => return Ok(None),
                Some(_) => {}
                None => uid = seen.map(str::to_owned),
            }
        }
        match event {
            Event::Init => {}
            Event::InitApply(job) => {
                listed = true;
                if done(&job) {
                    return Ok(Some(job.0));
                }
            }
            Event::Apply(job) if done(&job) => return Ok(Some(job.0)),
            Event::Apply(_) => {}
            Event::Delete(_) => return Ok(None),
            Event::InitDone if !listed => return Ok(None),
            Event::InitDone => {}
        }
    }
    // A watcher never ends by itself, and the backoff never gives up.
    Err(FollowError::Ended)
}

impl WaitArgs {
    pub async fn run(&self) -> Result<u8, CliError> {
        let (client, namespace) = self.kube.client(self.namespace.as_deref()).await?;
        let api: Api<WholeSlurmJob> = Api::namespaced(client, &namespace);
        let what = format!("slurmjob {}/{}", namespace, self.name);
        wait(
            api,
            &self.name,
            &what,
            self.timeout,
            DefaultBackoff::default(),
        )
        .await
    }
}

/// `read`'s answer; a failure that may pass ([`kit::may_pass`]) is tried again every [`POD_POLL`]
/// until `deadline`, any other ends it (exit 2).
async fn read_until<T, F, Fut>(
    deadline: tokio::time::Instant,
    what: &str,
    read: F,
) -> Result<T, CliError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    loop {
        match read().await {
            Ok(answer) => return Ok(answer),
            Err(e) if kit::may_pass(&e) && tokio::time::Instant::now() < deadline => {
                tracing::warn!(error = %crate::error_chain::Chain(&e), "{what}: cannot read it for now; retrying");
                tokio::time::sleep(POD_POLL).await;
            }
            Err(e) => return Err(CliError::Usage(format!("{what}: {e}"))),
        }
    }
}

/// `wait` on SlurmJob `name` (`what` names it in messages): its exit code.
async fn wait(
    api: Api<WholeSlurmJob>,
    name: &str,
    what: &str,
    timeout: Option<Duration>,
    backoff: impl Backoff,
) -> Result<u8, CliError> {
    // `timeout` bounds the whole wait, its first read included (a request to an API server
    // that does not answer waits for the client's own timeouts and retries).
    let deadline = timeout.map(|limit| tokio::time::Instant::now() + limit);
    let first = match deadline {
        Some(deadline) => match tokio::time::timeout_at(deadline, api.get(name)).await {
            Ok(read) => read,
            Err(_) => {
                eprintln!(
                    "{what}: not read within {} (the API server did not answer)",
                    humantime::format_duration(timeout.unwrap_or_default())
                );
                return Ok(EXIT_TIMED_OUT);
            }
        },
        None => api.get(name).await,
    };
    // A missing SlurmJob is an error at once, not a wait for one to appear. A failure that may
    // pass is not: the watch below retries it as any other.
    let (confirmed, uid) = match first {
        Ok(job) => (true, job.metadata.uid.clone()),
        Err(e) if kit::may_pass(&e) => {
            tracing::warn!(
                slurmjob = name,
                error = %crate::error_chain::Chain(&e),
                "cannot read the SlurmJob for now; following it anyway"
            );
            (false, None)
        }
        Err(e) => return Err(CliError::Usage(format!("{what}: {e}"))),
    };
    let ended = follow(
        api,
        name,
        uid,
        |job| outcome(job).is_some(),
        backoff,
        FOLLOW_GIVE_UP,
    );
    let ended = match (timeout, deadline) {
        (Some(limit), Some(deadline)) => match tokio::time::timeout_at(deadline, ended).await {
            Ok(ended) => ended,
            Err(_) => {
                eprintln!(
                    "{what}: not finished after {}",
                    humantime::format_duration(limit)
                );
                return Ok(EXIT_TIMED_OUT);
            }
        },
        _ => ended.await,
    };
    let job = ended
        .map_err(|source| CliError::NotFollowed {
            what: what.to_owned(),
            source,
        })?
        .ok_or_else(|| {
            CliError::Usage(if confirmed {
                format!("{what} was deleted before it finished")
            } else {
                format!("{what} is not there (not found, or deleted before it finished)")
            })
        })?;
    if let Some(stalled) = stalled(&job) {
        let never = stalled.reason == DEPENDENCY_NEVER_SATISFIED;
        eprintln!(
            "{what}: {}: {}: {}",
            if never {
                "will never start"
            } else {
                "cannot be submitted"
            },
            printable(&stalled.reason),
            printable(&stalled.message)
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

/// `text` (a condition's, which may quote Slurm's error about what a tenant wrote) with its
/// control characters but newline and tab escaped: printed as it is, an escape sequence in it
/// would be run by the terminal of whoever follows the job (set its title, write its
/// clipboard). Its lines after the first are indented ([`CONTINUATION`]), so that none of them
/// reads as a line of this command's own (`slurmjob ns/name: Completed, ...`). A job's own
/// output (`logs`) stays raw, as `kubectl logs` prints it.
fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '\n' {
            out.push('\n');
            out.push_str(CONTINUATION);
        } else if c.is_control() && c != '\t' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// What starts each further line of a printed message.
const CONTINUATION: &str = "  | ";

impl LogsArgs {
    pub async fn run(&self) -> Result<u8, CliError> {
        let (client, namespace) = self.kube.client(self.namespace.as_deref()).await?;
        let what = format!("slurmjob {}/{}", namespace, self.name);
        let jobs: Api<WholeSlurmJob> = Api::namespaced(client.clone(), &namespace);
        let mut deadline = tokio::time::Instant::now() + self.pod_timeout;
        let job = read_until(deadline, &what, || jobs.get(&self.name)).await?;
        // A run's output is where it was submitted to write it (`status.output`): an edit of
        // `spec.output` applies from the next run.
        let run = job.status.as_ref().and_then(|status| status.job_id);
        if let Some(job_id) = run
            && output::current_run_output(&job).is_none()
            && job.spec.output.is_some()
        {
            return Err(CliError::Usage(format!(
                "{what}: its current run, Slurm job {job_id}, was submitted without spec.output: \
                 its output stays on the Slurm nodes; a spec.output set since applies from the \
                 next run"
            )));
        }
        let streams = match run {
            Some(_) => output::current_run_output(&job).is_some(),
            None => job.spec.output.is_some(),
        };
        if !streams {
            let file = job
                .spec
                .standard_output
                .clone()
                .unwrap_or_else(|| "slurm-<job id>.out".to_owned());
            // Whoever may write the SlurmJob chose these paths: escaped, as `wait` escapes a
            // condition's text, so that they cannot drive the reader's terminal.
            return Err(CliError::Usage(format!(
                "{what} has no spec.output: its output stays on the Slurm nodes ({file}, relative \
                 to {}); set spec.output to read it here",
                printable(
                    job.spec
                        .working_directory
                        .as_deref()
                        .unwrap_or(crate::controller::slurmjob::submit::DEFAULT_WORKING_DIRECTORY)
                ),
                file = printable(&file),
            )));
        }
        // The operator's streamer Pod, named after the SlurmJob, prints the output file. Right
        // after a re-run the previous run's Pod may still be there: only the one streaming the
        // job the status names will do.
        let pods: Api<Pod> = Api::namespaced(client, &namespace);
        let streamed = loop {
            let job = read_until(deadline, &what, || jobs.get(&self.name)).await?;
            let pod = read_until(deadline, &what, || pods.get_opt(&self.name)).await?;
            if let Some(pod) = pod.as_ref().filter(|pod| {
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                streams_current_run(pod, &job)
                    && matches!(phase, Some("Running" | "Succeeded" | "Failed"))
            }) {
                break pod.clone();
            }
            // A Pod of that name controlled by nothing (an earlier SlurmJob's deleted with
            // `--cascade=orphan`, or anyone's) is left alone by the operator, which makes no
            // streamer while it is there: said at once. One controlled by an earlier SlurmJob
            // of the name goes with it (the garbage collector).
            if pod.as_ref().is_some_and(|pod| {
                pod.metadata.deletion_timestamp.is_none()
                    && !pod
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|owner| owner.controller == Some(true))
            }) {
                return Err(CliError::Usage(format!(
                    "{what}: a Pod named {} is there and is not its output streamer (the \
                     operator leaves it alone, Warning OutputPodNameTaken): delete it, and the \
                     operator makes the streamer",
                    self.name
                )));
            }
            // A run that cannot be submitted, or whose job will never start, has no output to
            // wait for: said at once, as `wait` says it.
            if pod.is_none()
                && let Some(stalled) = stalled(&job)
            {
                eprintln!(
                    "{what}: no output: {}: {}: {}",
                    if stalled.reason == DEPENDENCY_NEVER_SATISFIED {
                        "its job will never start"
                    } else {
                        "it cannot be submitted"
                    },
                    printable(&stalled.reason),
                    printable(&stalled.message)
                );
                return Ok(EXIT_STALLED);
            }
            // The operator creates no Pod for a run that ended a while ago: none will come.
            // Not said of a status that is not the spec's yet (an edit re-runs the job).
            if pod.is_none()
                && let Some(status) = &job.status
                && status.job_id.is_some()
                && status.observed_generation >= job.metadata.generation
                && status.phase.is_terminal()
                && !output::may_create(status, chrono::Utc::now())
            {
                let claim = output::current_run_output(&job).map_or("", |o| o.volume.as_str());
                return Err(CliError::Usage(format!(
                    "{what}: its job has ended ({:?}) and has no output Pod; the operator \
                     creates that Pod only until {} min after the end (and none for a Lost \
                     job): the output is in PersistentVolumeClaim {claim}",
                    status.phase,
                    output::CREATE_AFTER_END.num_minutes(),
                )));
            }
            // Queued: the operator makes the Pod once the job starts (`output::may_create`).
            // `-f` waits for that, its Pod timeout counted from then; a plain `logs` says so.
            if pod.is_none()
                && let Some(status) = &job.status
                && status.job_id.is_some()
                && status.observed_generation >= job.metadata.generation
                && status.phase == crate::crd::slurmjob::Phase::Submitted
            {
                if !self.follow {
                    return Err(CliError::Usage(format!(
                        "{what}: its job waits in Slurm's queue, and its output Pod is made when \
                         it starts: `logs -f` waits for that"
                    )));
                }
                deadline = tokio::time::Instant::now() + self.pod_timeout;
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
        };
        let params = LogParams {
            follow: self.follow,
            ..LogParams::default()
        };
        let output = pods
            .log_stream(&self.name, &params)
            .await
            .map_err(|e| CliError::Usage(format!("{what}: cannot read the output: {e}")))?;
        // While following, a log that brings nothing for a while is checked on by reading the
        // Pod: a connection dropped on the way (a load balancer forgetting an idle flow) never
        // ends, while the Pod does.
        let quiet = self.follow.then_some(QUIET_CHECK);
        let still_streaming = async || match pods.get_opt(&self.name).await {
            Ok(now) => same_pod(&streamed, now.as_ref()) && !stopped(now.as_ref()),
            // Not known: go on waiting.
            Err(_) => true,
        };
        let copied = copy_output(
            output,
            &mut std::io::stdout().lock(),
            quiet,
            still_streaming,
        )
        .await
        .map_err(|e| match e {
            // The connection to the API server broke (restarting, a reset): not the user's
            // doing, and the output may be read again from its start.
            CopyError::Read(_) => CliError::LogCut(format!(
                "{what}: {e}; run logs again, it prints the output from the start"
            )),
            CopyError::Write(_) => CliError::Usage(format!("{what}: {e}")),
        })?;
        if !self.follow || copied == Copied::ReaderGone {
            return Ok(0);
        }
        // The Pod stopped, and its log never ended: what it wrote last may not have come
        // through, whatever way it ended.
        if copied == Copied::Quiet {
            return Err(CliError::LogCut(format!(
                "{what}: the output Pod's log brought nothing for {} s and the Pod has stopped: \
                 the connection was lost on the way, and its end may be missing; run logs \
                 again, it prints the output from the start",
                QUIET_CHECK.as_secs()
            )));
        }
        // A followed log also ends when the Pod does before the job: deleted (a drain), or its
        // node or kubelet gone. The streamer's own end is the job's (the operator told it), or
        // one it chose and said why ("not streamed: ..."): the Pod then succeeds, which its
        // status may show a moment after its log ended.
        let settle = tokio::time::Instant::now() + LOG_END_SETTLE;
        loop {
            match pods.get_opt(&self.name).await {
                Ok(now) if ended_with_its_job(&streamed, now.as_ref()) => return Ok(0),
                Ok(now) if !same_pod(&streamed, now.as_ref()) => break,
                Ok(_) | Err(_) if tokio::time::Instant::now() >= settle => break,
                Ok(_) | Err(_) => tokio::time::sleep(POD_POLL).await,
            }
        }
        Err(CliError::LogCut(format!(
            "{what}: the output Pod's log ended before the job did (the Pod was deleted or \
             restarted, or its node went away); run logs again, it prints the output from the start"
        )))
    }
}

/// How long `logs -f` waits, after the log ended, for the Pod's status to say how it ended.
const LOG_END_SETTLE: Duration = Duration::from_secs(5);

/// How long a followed log may bring nothing before the Pod is read again ([`copy_output`]).
const QUIET_CHECK: Duration = Duration::from_secs(30);

/// Whether the Pod read again (`now`) has stopped: it ended, or it is gone.
fn stopped(now: Option<&Pod>) -> bool {
    now.is_none_or(|pod| {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        matches!(phase, Some("Succeeded" | "Failed"))
    })
}

/// Whether `now` (the Pod read again) is the very Pod `streamed` was.
fn same_pod(streamed: &Pod, now: Option<&Pod>) -> bool {
    now.is_some_and(|now| now.metadata.uid.is_some() && now.metadata.uid == streamed.metadata.uid)
}

/// Whether the log of `streamed` ended with its streamer's own end: the Pod read again (`now`)
/// is that very Pod, and the operator told it that its job ended (and it did not fail: its copy
/// killed, it was cut short), or it succeeded (it ended by itself, saying why: a file it does
/// not stream).
fn ended_with_its_job(streamed: &Pod, now: Option<&Pod>) -> bool {
    same_pod(streamed, now)
        && now.is_some_and(|now| {
            let phase = now.status.as_ref().and_then(|s| s.phase.as_deref());
            (output::told(&now.metadata) && phase != Some("Failed")) || phase == Some("Succeeded")
        })
}

/// Why [`copy_output`] stopped.
#[derive(Debug, thiserror::Error)]
enum CopyError {
    #[error("reading the output: {0}")]
    Read(#[source] std::io::Error),
    #[error("writing the output: {0}")]
    Write(#[source] std::io::Error),
}

/// How [`copy_output`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Copied {
    /// The log ended.
    Whole,
    /// The reader went away (`logs job | head -1`).
    ReaderGone,
    /// Nothing came for a while, and the Pod has stopped since: the log will not end by itself.
    Quiet,
}

/// Copies a job's output to `to` as bytes, each chunk flushed as it comes (for `-f`). Bytes,
/// not lines: a job may write anything, and a line of text would end the copy at the first
/// byte that is not UTF-8. A reader that went away ends the copy as done, as it does `cat`'s.
/// With `quiet`: each time that long passes without a byte, `still_streaming` says whether to
/// wait on (the Pod still runs); if not, the copy ends (a read cancelled by the timeout takes
/// nothing from the stream).
async fn copy_output(
    mut from: impl futures::AsyncRead + Unpin,
    to: &mut impl std::io::Write,
    quiet: Option<Duration>,
    mut still_streaming: impl AsyncFnMut() -> bool,
) -> Result<Copied, CopyError> {
    let mut chunk = vec![0; 64 * 1024];
    loop {
        let read = match quiet {
            Some(quiet) => match tokio::time::timeout(quiet, from.read(&mut chunk)).await {
                Ok(read) => read,
                Err(_) if still_streaming().await => continue,
                Err(_) => return Ok(Copied::Quiet),
            },
            None => from.read(&mut chunk).await,
        }
        .map_err(CopyError::Read)?;
        let Some(bytes) = chunk.get(..read).filter(|b| !b.is_empty()) else {
            return Ok(Copied::Whole);
        };
        match to.write_all(bytes).and_then(|()| to.flush()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(Copied::ReaderGone),
            Err(e) => return Err(CopyError::Write(e)),
        }
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
    // A status not yet the spec's (an edit the operator has not taken up: a re-run to come)
    // names the previous run.
    // (A job not ended yet is the current run whatever the edit: only an ended one re-runs.)
    let current = job.status.as_ref().is_some_and(|s| {
        s.observed_generation >= job.metadata.generation || !s.phase.is_terminal()
    });
    let job_id = job.status.as_ref().and_then(|s| s.job_id);
    labelled && owned && current && job_id.is_some() && output::streamed_job_id(pod) == job_id
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::crd::slurmjob::SlurmJobStatus;

    /// A condition's message reaches the terminal without a control sequence it could run,
    /// and with no line that reads as one of the command's own; tabs and any other text stay
    /// as they are.
    #[test]
    fn a_message_is_printed_without_control_sequences() {
        let message =
            "bad value \u{1b}]52;c;ZWNobyBoaQ==\u{7}\u{9b}0m é\tend\r\nslurmjob ns/j: Completed";
        let printed = printable(message);
        assert_eq!(
            printed,
            "bad value \\u{1b}]52;c;ZWNobyBoaQ==\\u{7}\\u{9b}0m é\tend\\r\n  | slurmjob ns/j: Completed"
        );
        assert!(
            !printed
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t')
        );
        assert!(
            printed.lines().skip(1).all(|l| l.starts_with(CONTINUATION)),
            "{printed}"
        );
    }

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
        // The current run's job never starts: a dependency Slurm deems never satisfied.
        assert_eq!(
            stalled(2, Some(2), DEPENDENCY_NEVER_SATISFIED),
            Some(EXIT_STALLED)
        );
        assert_eq!(stalled(1, Some(1), DEPENDENCY_NEVER_SATISFIED), None);
        assert_eq!(outcome(&job(1, None)), None);
        // A status from before the latest edit describes the previous run.
        let stale = job(3, Some(status(&[("Complete", "True")], Some(0), 2)));
        assert_eq!(outcome(&stale), None);
    }

    /// A backoff of a fixed delay, so that the tests retry at once.
    struct Every(Duration);

    impl Iterator for Every {
        type Item = Duration;
        fn next(&mut self) -> Option<Duration> {
            Some(self.0)
        }
    }

    impl Backoff for Every {
        fn reset(&mut self) {}
    }

    type MockHandle = tower_test::mock::Handle<
        http::Request<kube::client::Body>,
        http::Response<kube::client::Body>,
    >;

    /// An API whose requests the returned handle answers.
    fn mocked() -> (Api<WholeSlurmJob>, MockHandle) {
        let (service, handle) = tower_test::mock::pair();
        let client = kube::Client::new(service, "default");
        (Api::namespaced(client, "team-a"), handle)
    }

    fn answer(code: u16, body: serde_json::Value) -> http::Response<kube::client::Body> {
        http::Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap()
    }

    /// The API server's answer while it cannot serve (restarting, overloaded).
    fn unavailable() -> http::Response<kube::client::Body> {
        answer(
            503,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "the server is currently unable to handle the request",
                   "reason": "ServiceUnavailable", "code": 503}),
        )
    }

    /// SlurmJob `j` of namespace team-a, complete with exit code 0.
    fn complete_in_team_a() -> SlurmJob {
        let mut ended = job(1, Some(status(&[("Complete", "True")], Some(0), 1)));
        ended.metadata.namespace = Some("team-a".into());
        ended
    }

    /// `wait` on SlurmJob team-a/j through `api`, its watch retried every 10 ms.
    async fn wait_for_j(
        api: Api<WholeSlurmJob>,
        timeout: Option<Duration>,
    ) -> Result<u8, CliError> {
        wait(
            api,
            "j",
            "slurmjob team-a/j",
            timeout,
            Every(Duration::from_millis(10)),
        )
        .await
    }

    /// A list of SlurmJobs holding `job` only.
    fn list_of(job: SlurmJob) -> http::Response<kube::client::Body> {
        answer(
            200,
            json!({"apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJobList",
                   "metadata": {"resourceVersion": "5"}, "items": [job]}),
        )
    }

    /// A watch error (here the first list failing) is retried, not the end of `wait`: the
    /// next list has the job, ended.
    #[tokio::test]
    async fn a_failing_watch_is_retried() {
        let (api, mut handle) = mocked();
        let ended = complete_in_team_a();
        let server = tokio::spawn(async move {
            let (request, send) = handle.next_request().await.unwrap();
            let query = request.uri().query().unwrap_or_default().to_owned();
            assert!(query.contains("fieldSelector=metadata.name%3Dj"), "{query}");
            send.send_response(unavailable());
            let (_, send) = handle.next_request().await.unwrap();
            send.send_response(list_of(ended));
        });
        let done = |job: &SlurmJob| outcome(job).is_some();
        let job = follow(
            api,
            "j",
            None,
            done,
            Every(Duration::from_millis(10)),
            FOLLOW_GIVE_UP,
        )
        .await
        .unwrap();
        assert_eq!(job.as_ref().and_then(outcome), Some(0));
        server.await.unwrap();
    }

    /// A SlurmJob deleted and created again under its name while the watch was down is not
    /// the one `wait` followed: its end is not the first one's, which is gone (exit 2), also
    /// when `wait` could not read the first one at its start (the first one seen counts).
    #[tokio::test]
    async fn a_slurmjob_made_again_under_its_name_is_not_followed_as_the_first() {
        let with_uid = |uid: &str| {
            let mut job = complete_in_team_a();
            job.metadata.uid = Some(uid.into());
            job.metadata.resource_version = Some("6".into());
            job
        };
        let (api, mut handle) = mocked();
        let mut running = with_uid("first");
        running.status = None;
        let server = tokio::spawn(async move {
            // Its read, then the watch's list: another SlurmJob of that name, ended.
            let (_, send) = handle.next_request().await.unwrap();
            send.send_response(answer(200, serde_json::to_value(&running).unwrap()));
            let (_, send) = handle.next_request().await.unwrap();
            send.send_response(list_of(with_uid("second")));
        });
        let error = wait_for_j(api, None).await.unwrap_err();
        assert!(
            matches!(&error, CliError::Usage(m) if m.contains("was deleted before it finished")),
            "{error:?}"
        );
        server.await.unwrap();

        // Not read at the start: the first one listed is followed, and a later one of the name
        // is not it.
        let (api, mut handle) = mocked();
        let mut first = with_uid("first");
        first.status = None;
        let server = tokio::spawn(async move {
            let (_, send) = handle.next_request().await.unwrap();
            send.send_response(list_of(first));
            // The watch brings another of that name, ended (the first one's deletion missed).
            let (request, send) = handle.next_request().await.unwrap();
            let query = request.uri().query().unwrap_or_default().to_owned();
            assert!(query.contains("watch=true"), "{query}");
            send.send_response(answer(
                200,
                json!({"type": "ADDED", "object": with_uid("second")}),
            ));
        });
        let followed = follow(
            api,
            "j",
            None,
            |job| outcome(job).is_some(),
            Every(Duration::from_millis(10)),
            FOLLOW_GIVE_UP,
        )
        .await
        .unwrap();
        assert!(followed.is_none(), "{followed:?}");
        server.await.unwrap();
    }

    /// A SlurmJob whose extraOptions nest deeper than serde_json's recursion limit, as its
    /// managedFields then do too (anyone who may write SlurmJobs in the namespace can make
    /// one), is read and followed as the operator reads it (`WholeSlurmJob`): `wait` ends with
    /// its outcome, not with a decoding error at every try.
    #[tokio::test]
    async fn wait_follows_a_slurmjob_nested_past_the_decoder_limit() {
        let (api, mut handle) = mocked();
        let deep = |leaf, levels| (0..levels).fold(leaf, |inner, _| json!({"a": inner}));
        let mut ended = serde_json::to_value(complete_in_team_a()).unwrap();
        ended["spec"]["extraOptions"] = json!({"comment": deep(json!("x"), 200)});
        ended["metadata"]["managedFields"] = json!([{
            "manager": "kubectl", "operation": "Apply", "apiVersion": "slurm.rs/v1alpha1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:extraOptions": deep(json!({}), 200)}},
        }]);
        let plain = serde_json::from_str::<SlurmJob>(&ended.to_string());
        assert!(plain.is_err(), "SlurmJob's own decoding refuses it");
        let server = tokio::spawn(async move {
            // Its read, then the watch's list.
            let (_, send) = handle.next_request().await.unwrap();
            send.send_response(answer(200, ended.clone()));
            let (_, send) = handle.next_request().await.unwrap();
            send.send_response(answer(
                200,
                json!({"apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJobList",
                       "metadata": {"resourceVersion": "5"}, "items": [ended]}),
            ));
        });
        let code = wait_for_j(api, None).await.unwrap();
        assert_eq!(code, 0);
        server.await.unwrap();
    }

    /// `wait` started while the API server cannot answer (restarting, overloaded) follows the
    /// SlurmJob as the watch's retries allow, instead of ending at once as for a missing one
    /// (exit 2); an answer that stays (404) still ends it at once.
    #[tokio::test]
    async fn wait_started_while_the_api_server_fails_goes_on() {
        let (api, mut handle) = mocked();
        let ended = complete_in_team_a();
        let server = tokio::spawn(async move {
            // The first read, then the watch's first list, fail; the next list has the job.
            let (request, send) = handle.next_request().await.unwrap();
            assert_eq!(
                request.uri().path(),
                "/apis/slurm.rs/v1alpha1/namespaces/team-a/slurmjobs/j"
            );
            send.send_response(unavailable());
            let (_, send) = handle.next_request().await.unwrap();
            send.send_response(unavailable());
            let (_, send) = handle.next_request().await.unwrap();
            send.send_response(list_of(ended));
        });
        let waited = |api| wait_for_j(api, None);
        let code = waited(api).await.unwrap();
        assert_eq!(code, 0);
        server.await.unwrap();

        let (api, mut handle) = mocked();
        let server = tokio::spawn(async move {
            let (_, send) = handle.next_request().await.unwrap();
            send.send_response(answer(
                404,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": "slurmjobs.slurm.rs \"j\" not found", "reason": "NotFound",
                       "code": 404}),
            ));
        });
        let error = waited(api).await.unwrap_err();
        assert!(matches!(error, CliError::Usage(_)), "{error:?}");
        assert!(error.to_string().contains("not found"), "{error}");
        server.await.unwrap();
    }

    /// `wait --timeout` bounds its first read too: an API server that never answers ends the
    /// wait at the timeout (124), not after the client's own timeouts and retries.
    #[tokio::test(start_paused = true)]
    async fn wait_timeout_bounds_the_first_read() {
        let (api, mut handle) = mocked();
        let server = tokio::spawn(async move {
            let (request, _never_answered) = handle.next_request().await.unwrap();
            assert_eq!(
                request.uri().path(),
                "/apis/slurm.rs/v1alpha1/namespaces/team-a/slurmjobs/j"
            );
            tokio::time::sleep(Duration::from_secs(3600)).await;
        });
        let started = tokio::time::Instant::now();
        let code = wait_for_j(api, Some(Duration::from_secs(5))).await.unwrap();
        assert_eq!(code, EXIT_TIMED_OUT);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        server.abort();
    }

    /// `logs` reads the SlurmJob and its Pod again while the API server cannot answer, until
    /// its Pod timeout; an answer that stays ends it at once.
    #[tokio::test]
    async fn logs_reads_again_while_the_api_server_fails_until_its_deadline() {
        let (api, mut handle) = mocked();
        let mut there = job(1, None);
        there.metadata.namespace = Some("team-a".into());
        let server = tokio::spawn(async move {
            for _ in 0..2 {
                let (_, send) = handle.next_request().await.unwrap();
                send.send_response(unavailable());
            }
            let (_, send) = handle.next_request().await.unwrap();
            send.send_response(answer(200, serde_json::to_value(&there).unwrap()));
            // Then one that stays; then failures past the deadline.
            let (_, send) = handle.next_request().await.unwrap();
            send.send_response(answer(
                403,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": "forbidden", "reason": "Forbidden", "code": 403}),
            ));
            let mut failed = 0;
            while let Some((_, send)) = handle.next_request().await {
                send.send_response(unavailable());
                failed += 1;
            }
            failed
        });
        let far = tokio::time::Instant::now() + Duration::from_secs(60);
        let read = read_until(far, "slurmjob team-a/j", || api.get("j")).await;
        assert_eq!(read.unwrap().metadata.name.as_deref(), Some("j"));
        let forbidden = read_until(far, "slurmjob team-a/j", || api.get("j")).await;
        assert!(
            matches!(&forbidden, Err(CliError::Usage(m)) if m.contains("forbidden")),
            "{forbidden:?}"
        );
        let soon = tokio::time::Instant::now() + Duration::from_millis(700);
        let late = read_until(soon, "slurmjob team-a/j", || api.get("j")).await;
        assert!(tokio::time::Instant::now() >= soon);
        assert!(
            matches!(&late, Err(CliError::Usage(m)) if m.contains("unable to handle")),
            "{late:?}"
        );
        drop(api);
        assert!(server.await.unwrap() >= 2, "tried again until the deadline");
    }

    /// Errors with no answer between them for the give-up time end `wait` with its own exit
    /// code, not the usage error's that a deleted SlurmJob has.
    #[tokio::test]
    async fn a_watch_failing_for_long_is_given_up() {
        let (api, mut handle) = mocked();
        let server = tokio::spawn(async move {
            let mut answered = 0;
            while let Some((_, send)) = handle.next_request().await {
                send.send_response(unavailable());
                answered += 1;
            }
            answered
        });
        let give_up = Duration::from_millis(300);
        let started = tokio::time::Instant::now();
        let error = follow(
            api,
            "j",
            None,
            |_| true,
            Every(Duration::from_millis(20)),
            give_up,
        )
        .await
        .unwrap_err();
        assert!(started.elapsed() >= give_up);
        assert!(
            matches!(&error, FollowError::Failing { lasted, .. } if *lasted >= give_up),
            "{error:?}"
        );
        let error = CliError::NotFollowed {
            what: "slurmjob team-a/j".into(),
            source: error,
        };
        assert_eq!(error.exit_code(), EXIT_NOT_FOLLOWED);
        assert_ne!(
            error.exit_code(),
            CliError::Usage(String::new()).exit_code()
        );
        assert!(
            error
                .to_string()
                .starts_with("slurmjob team-a/j: cannot follow it: the watch kept failing for 3"),
            "{error}"
        );
        assert!(
            error.to_string().contains("unable to handle the request"),
            "{error}"
        );
        // Retried all along (the client is gone once follow returned).
        assert!(server.await.unwrap() > 3);
    }

    /// A writer that takes `room` bytes, then finds its reader gone (`| head -c room`).
    struct Closes {
        taken: Vec<u8>,
        room: usize,
        error: std::io::ErrorKind,
    }

    impl std::io::Write for Closes {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            let room = self.room - self.taken.len();
            if room == 0 {
                return Err(self.error.into());
            }
            let n = bytes.len().min(room);
            self.taken.extend_from_slice(&bytes[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// `logs` prints the output's bytes as they are, past any that are not UTF-8, and a reader
    /// that stops reading (`| head`) ends it as done.
    #[tokio::test]
    async fn the_output_is_copied_as_bytes_until_the_reader_goes() {
        let output = b"one\n\xff\xfe binary\r\nlast, no newline".to_vec();
        let mut copied = Vec::new();
        let never = async || -> bool { panic!("no quiet check without `quiet`") };
        let copied_as = copy_output(
            futures::io::Cursor::new(output.clone()),
            &mut copied,
            None,
            never,
        )
        .await
        .unwrap();
        assert_eq!(copied, output);
        assert_eq!(copied_as, Copied::Whole, "the log ended, not the reader");

        let mut head = Closes {
            taken: Vec::new(),
            room: 4,
            error: std::io::ErrorKind::BrokenPipe,
        };
        let copied_as = copy_output(
            futures::io::Cursor::new(output.clone()),
            &mut head,
            None,
            never,
        )
        .await
        .unwrap();
        assert_eq!(head.taken, b"one\n");
        assert_eq!(copied_as, Copied::ReaderGone);
        // Any other failure to write is one.
        let mut full = Closes {
            error: std::io::ErrorKind::StorageFull,
            ..head
        };
        full.taken.clear();
        let error = copy_output(futures::io::Cursor::new(output), &mut full, None, never)
            .await
            .unwrap_err();
        assert!(matches!(error, CopyError::Write(_)), "{error:?}");
    }

    /// A followed log that brings nothing (a connection dropped on the way never ends) is
    /// checked on each `quiet` period: the copy goes on while the Pod streams, bytes that come
    /// meanwhile are copied whole, and it ends once the Pod has stopped.
    #[tokio::test(start_paused = true)]
    async fn a_quiet_follow_ends_once_the_pod_has_stopped() {
        use futures::TryStreamExt;
        let (send, receive) = futures::channel::mpsc::unbounded::<std::io::Result<Vec<u8>>>();
        let log = receive.into_async_read();
        let checks = std::cell::Cell::new(0);
        let feed = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(45)).await;
            send.unbounded_send(Ok(b"late line\n".to_vec())).unwrap();
            // Kept open, as a dead connection is: nothing more, and no end.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(send);
        });
        let mut copied = Vec::new();
        let started = tokio::time::Instant::now();
        // The Pod streams at the first two checks (30 s, and 30 s after the late line), and
        // has stopped at the third.
        let copied_as = copy_output(
            log,
            &mut copied,
            Some(Duration::from_secs(30)),
            async || {
                checks.set(checks.get() + 1);
                checks.get() < 3
            },
        )
        .await
        .unwrap();
        assert_eq!(copied_as, Copied::Quiet);
        assert_eq!(copied, b"late line\n");
        assert_eq!(checks.get(), 3);
        assert_eq!(started.elapsed(), Duration::from_secs(45 + 30 + 30));
        feed.abort();
    }

    /// `logs` reads only the Pod streaming the run the status names, of this very SlurmJob.
    #[test]
    fn only_the_current_runs_pod_is_read() {
        let mut job = job(2, None);
        job.metadata.uid = Some("uid-2".into());
        job.spec.output =
            Some(serde_json::from_value(json!({"volume": "out", "slurmPath": "/shared"})).unwrap());
        let pod_of = |job: &SlurmJob, id| {
            output::pod(
                job,
                &output::run_output(job.spec.output.as_ref().unwrap()),
                id,
                "busybox",
                false,
            )
            .unwrap()
        };
        let current = pod_of(&job, 77);
        // Not submitted yet: no run to read.
        assert!(!streams_current_run(&current, &job));
        job.status = Some(SlurmJobStatus {
            job_id: Some(77),
            observed_generation: Some(2),
            ..Default::default()
        });
        assert!(streams_current_run(&current, &job));
        // Edited since (generation 3), the run not ended: still the current run (an edit of a
        // job that has not ended does not re-run it).
        job.metadata.generation = Some(3);
        assert!(streams_current_run(&current, &job));
        // Ended: until the operator takes the edit up, the status names the run before the
        // re-run to come.
        job.status.as_mut().unwrap().phase = crate::crd::slurmjob::Phase::Completed;
        assert!(!streams_current_run(&current, &job));
        job.metadata.generation = Some(2);
        job.status.as_mut().unwrap().phase = crate::crd::slurmjob::Phase::Running;
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

    /// A followed log that ends is the job's end only when the operator told that very Pod
    /// that its job ended; a Pod deleted, replaced or not told ended early.
    #[test]
    fn a_followed_log_ends_with_its_job_only_when_the_pod_was_told() {
        let mut job = job(1, None);
        job.metadata.uid = Some("uid-1".into());
        job.spec.output =
            Some(serde_json::from_value(json!({"volume": "out", "slurmPath": "/shared"})).unwrap());
        let mut streamed = output::pod(
            &job,
            &output::run_output(job.spec.output.as_ref().unwrap()),
            77,
            "busybox",
            false,
        )
        .unwrap();
        streamed.metadata.uid = Some("pod-1".into());
        assert!(!ended_with_its_job(&streamed, Some(&streamed)), "not told");
        assert!(!ended_with_its_job(&streamed, None), "deleted");
        let mut told = streamed.clone();
        told.metadata
            .annotations
            .get_or_insert_default()
            .insert(output::ENDED_ANNOTATION.into(), "true".into());
        assert!(ended_with_its_job(&streamed, Some(&told)));
        let mut replaced = told.clone();
        replaced.metadata.uid = Some("pod-2".into());
        assert!(
            !ended_with_its_job(&streamed, Some(&replaced)),
            "another Pod"
        );
        // Not told, but it succeeded: it ended by itself ("not streamed: ..."). Failed (evicted,
        // its node gone) is not.
        let with_phase = |phase: &str| {
            let mut pod = streamed.clone();
            pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            });
            pod
        };
        assert!(ended_with_its_job(
            &streamed,
            Some(&with_phase("Succeeded"))
        ));
        assert!(!ended_with_its_job(&streamed, Some(&with_phase("Failed"))));
        assert!(!ended_with_its_job(&streamed, Some(&with_phase("Running"))));
        // Told, then failed: its copy was killed (the streamer exits 0 at each end it
        // chooses), its log is not whole.
        let mut told_failed = told.clone();
        told_failed.status = with_phase("Failed").status;
        assert!(!ended_with_its_job(&streamed, Some(&told_failed)));
        // A Pod created after the end is created told.
        let created_told = output::pod(
            &job,
            &output::run_output(job.spec.output.as_ref().unwrap()),
            77,
            "busybox",
            true,
        )
        .unwrap();
        let mut created_told_read = created_told.clone();
        created_told_read.metadata.uid = Some("pod-3".into());
        assert!(ended_with_its_job(
            &created_told_read,
            Some(&created_told_read)
        ));
    }
}
