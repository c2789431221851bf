// The facade's operations and conversions, written once for every REST API version.
//
// `include!`d by each version's module in this directory, after that module has brought its
// generated client into scope as `Client` and its generated types as `api`: the unversioned type
// and method names (`tools/gen-client`, step 0) make this one source compile against each. What
// differs between versions is NOT here but in the including module, which defines:
//
// - `fn controller_responding(&api::OpenapiPingArrayResp) -> bool`
// - `type KillResp` (the answer to `DELETE /job/{id}`) and `fn cancel_failures(&KillResp)`
// - `fn accounting_output(&api::Job) -> (Option<String>, Option<String>)` (stdout, stderr)
// - `const VERSION: ApiVersion`
//
// `cargo fmt` does not reach an `include!`d file; `hack/test.sh` runs rustfmt on it directly.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::slurm::call::{Caller, Envelope, Idempotency};
use crate::slurm::dialect::{
    from_data_parser, minutes, non_empty, since_param, submit_body, text, typed_body, typed_update,
    update_body,
};
use crate::slurm::error::{ApiError, SlurmError, Subject, classify};
use crate::slurm::node_owner::NodeOwner;
use crate::slurm::transport::Transport;
use crate::slurm::types::{
    Changes, ClusterInfo, ExitStatus, Job, JobState, JobStateEntry, JobUpdate, Node, NodeState,
    Partition, RpcStats, SubmitRequest, Submitted, Tres, Usage,
};
use crate::slurm::version::ApiVersion;

/// This version's generated client.
#[derive(Debug, Clone)]
pub(crate) struct Api(Client);

impl Api {
    pub(crate) fn new(base_url: &str, http: reqwest::Client, transport: Arc<Transport>) -> Self {
        Self(Client::new_with_client(base_url, http, transport))
    }

    pub(crate) fn transport(&self) -> &Arc<Transport> {
        progenitor_client::ClientInfo::inner(&self.0)
    }

    pub(crate) fn http(&self) -> &reqwest::Client {
        progenitor_client::ClientInfo::client(&self.0)
    }

    /// Whether a slurmctld answers (the primary, or a backup that took over), and the data
    /// parser that rendered the answer.
    pub(crate) async fn ping(&self, c: &Caller<'_>) -> Result<(bool, String), SlurmError> {
        // Whether a controller answers, whichever cluster: `check` of a SlurmCluster asks it
        // beside `/diag` to find out whom the endpoint serves now.
        let resp = c
            .unchecked()
            .call("ping", Subject::None, Idempotency::Idempotent, || {
                self.0.slurm_get_ping()
            })
            .await?;
        Ok((controller_responding(&resp), data_parser(&resp.meta)))
    }

    /// Identity, release and data parser (`/diag`, which checks the token).
    pub(crate) async fn diag(
        &self,
        c: &Caller<'_>,
        controller_responding: bool,
    ) -> Result<ClusterInfo, SlurmError> {
        // The identity check itself: its answer says which cluster the endpoint serves now.
        let diag = c
            .unchecked()
            .call("diag", Subject::None, Idempotency::Idempotent, || {
                self.0.slurm_get_diag()
            })
            .await?;
        Ok(cluster_info(&diag, controller_responding))
    }

    /// slurmctld's RPC counters (`/diag`'s `rpcs_by_message_type`).
    pub(crate) async fn rpc_stats(&self, c: &Caller<'_>) -> Result<Vec<RpcStats>, SlurmError> {
        // The identity check itself: its answer says which cluster the endpoint serves now.
        let diag = c
            .unchecked()
            .call("diag", Subject::None, Idempotency::Idempotent, || {
                self.0.slurm_get_diag()
            })
            .await?;
        Ok(rpc_stats(&diag))
    }

    pub(crate) async fn nodes(
        &self,
        c: &Caller<'_>,
        since: Option<i64>,
    ) -> Result<Changes<Node>, SlurmError> {
        let since = since.map(|t| t.to_string());
        let resp = c
            .call("nodes", Subject::None, Idempotency::Idempotent, || {
                self.0.slurm_get_nodes(None, since.as_deref())
            })
            .await?;
        Ok(changes(nodes(resp.nodes), &resp.last_update))
    }

    pub(crate) async fn node(&self, c: &Caller<'_>, name: &str) -> Result<Vec<Node>, SlurmError> {
        let resp = c
            .call("node", Subject::Node(name), Idempotency::Idempotent, || {
                self.0.slurm_get_node(name, None, None)
            })
            .await?;
        Ok(nodes(resp.nodes))
    }

    /// Set node states (`DRAIN` with a reason, `RESUME`).
    pub(crate) async fn update_node(
        &self,
        c: &Caller<'_>,
        operation: &'static str,
        name: &str,
        states: &[&str],
        reason: Option<&str>,
    ) -> Result<(), SlurmError> {
        let body = api::UpdateNodeMsg {
            state: Some(api::NodeStates(
                states.iter().map(|s| (*s).to_owned()).collect(),
            )),
            reason: reason.map(str::to_owned),
            ..Default::default()
        };
        c.write()
            .call(
                operation,
                Subject::Node(name),
                Idempotency::Idempotent,
                || self.0.slurm_post_node(name, &body),
            )
            .await?;
        Ok(())
    }

    pub(crate) async fn delete_node(&self, c: &Caller<'_>, name: &str) -> Result<(), SlurmError> {
        c.write()
            .call(
                "delete_node",
                Subject::Node(name),
                Idempotency::Idempotent,
                || self.0.slurm_delete_node(name),
            )
            .await?;
        Ok(())
    }

    pub(crate) async fn partitions(&self, c: &Caller<'_>) -> Result<Vec<Partition>, SlurmError> {
        let resp = c
            .call("partitions", Subject::None, Idempotency::Idempotent, || {
                self.0.slurm_get_partitions(None, None)
            })
            .await?;
        Ok(partitions(resp))
    }

    /// Never retried: the caller must look for its tag before trying again.
    pub(crate) async fn submit_job(
        &self,
        c: &Caller<'_>,
        request: &SubmitRequest,
    ) -> Result<Submitted, SlurmError> {
        let body = submit_request(request)?;
        let resp = c
            .write()
            .call("submit_job", Subject::None, Idempotency::Once, || {
                self.0.slurm_post_job_submit(&body)
            })
            .await;
        submit_result(resp)
    }

    pub(crate) async fn job(&self, c: &Caller<'_>, job_id: u32) -> Result<Vec<Job>, SlurmError> {
        let id = job_id.to_string();
        let resp = c
            .call("job", Subject::Job(job_id), Idempotency::Idempotent, || {
                self.0.slurm_get_job(&id, None, None)
            })
            .await?;
        Ok(jobs(resp.jobs))
    }

    /// `/jobs`: every job's record (with `since`, all of them or none): a listing.
    pub(crate) async fn jobs(
        &self,
        c: &Caller<'_>,
        since: Option<i64>,
    ) -> Result<Changes<Job>, SlurmError> {
        let since = since.map(|t| t.to_string());
        let resp = c
            .listing()
            .call("jobs", Subject::None, Idempotency::Idempotent, || {
                self.0.slurm_get_jobs(None, since.as_deref())
            })
            .await?;
        Ok(changes(jobs(resp.jobs), &resp.last_update))
    }

    pub(crate) async fn accounting_job(
        &self,
        c: &Caller<'_>,
        job_id: u32,
    ) -> Result<Vec<Job>, SlurmError> {
        let id = job_id.to_string();
        let resp = c
            .call(
                "accounting_job",
                Subject::Job(job_id),
                Idempotency::Idempotent,
                || self.0.slurmdb_get_job(&id),
            )
            .await?;
        Ok(accounting_jobs(resp.jobs, &resp.meta))
    }

    pub(crate) async fn accounting_jobs_named(
        &self,
        c: &Caller<'_>,
        name: &str,
        since: Option<DateTime<Utc>>,
        user: Option<&str>,
    ) -> Result<Vec<Job>, SlurmError> {
        let since = since.map(|at| since_param(at, Utc::now()));
        // The window on the submit time: without it slurmdbd leaves out every job not eligible
        // yet (held, waiting on a dependency or a begin time: no eligible time), which has a
        // record all the same (measured on 24.11 and 26.05). Jobs that ended before `since`
        // stay out. `scheduler_unset` is its default, said: Slurm before 24.05.4 dropped that
        // default when another flag was given (its release notes), leaving out every job that
        // ran; 24.11 and 26.05 answer the same with it or without.
        let resp = c
            .call(
                "accounting_jobs",
                Subject::None,
                Idempotency::Idempotent,
                || {
                    self.0.slurmdb_get_jobs(
                        Some(name),
                        Some("true"),
                        since.as_deref(),
                        Some("true"),
                        user,
                    )
                },
            )
            .await?;
        Ok(accounting_jobs(resp.jobs, &resp.meta))
    }

    /// `/jobs/state/` for `ids` (repeated `job_id` parameters), or for every job without.
    pub(crate) async fn jobs_state(
        &self,
        c: &Caller<'_>,
        ids: Option<&[String]>,
    ) -> Result<Vec<JobStateEntry>, SlurmError> {
        // Without ids, every job: a listing.
        let c = if ids.is_none() { c.listing() } else { *c };
        let ids = ids.map(<[String]>::to_vec);
        let resp = c
            .call("jobs_state", Subject::None, Idempotency::Idempotent, || {
                self.0.slurm_get_jobs_state(ids.as_ref())
            })
            .await?;
        Ok(job_states(resp))
    }

    /// `POST /job/{id}` with a bare job description. slurmrestd answers 200 with a warning
    /// when it ignores a field, having changed nothing: a warning is a failure here.
    pub(crate) async fn update_job(
        &self,
        c: &Caller<'_>,
        job_id: u32,
        update: &JobUpdate,
    ) -> Result<(), SlurmError> {
        let body: api::JobDescMsg = typed_update(update_body(update), VERSION)?;
        let id = job_id.to_string();
        let resp = c
            .write()
            .call(
                "update_job",
                Subject::Job(job_id),
                Idempotency::Idempotent,
                || self.0.slurm_post_job(&id, &body),
            )
            .await?;
        let warnings = resp.warnings();
        if warnings.is_empty() {
            Ok(())
        } else {
            Err(SlurmError::InvalidRequest {
                detail: format!(
                    "slurmrestd did not apply the update of job {job_id}: {}",
                    warnings.join("; ")
                ),
            })
        }
    }

    pub(crate) async fn cancel_job(&self, c: &Caller<'_>, job_id: u32) -> Result<(), SlurmError> {
        let id = job_id.to_string();
        let resp = c
            .write()
            .call(
                "cancel_job",
                Subject::Job(job_id),
                Idempotency::Idempotent,
                || self.0.slurm_delete_job(&id, None, None),
            )
            .await?;
        let failures = cancel_failures(&resp);
        if failures.is_empty() {
            Ok(())
        } else {
            Err(classify("cancel_job", 200, Subject::Job(job_id), failures))
        }
    }
}

/// Whether a JSON body is slurmrestd's: every answer it renders, error answers included, names
/// its data_parser plugin in `meta`. An unrelated service that a Cluster's endpoint points to
/// does not.
fn from_slurmrestd(meta: &Option<api::OpenapiMeta>) -> bool {
    from_data_parser(&data_parser(meta))
}

/// The Slurm cluster (`ClusterName`) whose slurmrestd rendered the answer
/// (`meta.slurm.cluster`), if it says.
fn served_cluster(meta: &Option<api::OpenapiMeta>) -> Option<String> {
    meta.as_ref()
        .and_then(|meta| meta.slurm.as_ref())
        .and_then(|slurm| non_empty(&slurm.cluster))
}

/// The data parser named in `meta` (`data_parser/v0.0.42`), or nothing.
fn data_parser(meta: &Option<api::OpenapiMeta>) -> String {
    meta.as_ref()
        .and_then(|meta| meta.plugin.as_ref())
        .and_then(|plugin| non_empty(&plugin.data_parser))
        .unwrap_or_default()
}

fn api_errors(errors: &Option<api::OpenapiErrors>, slurmrestd: bool) -> Vec<ApiError> {
    errors
        .iter()
        .flat_map(|list| list.0.iter())
        .map(|e| ApiError {
            code: e.error_number.unwrap_or_default(),
            error: text(&e.error, slurmrestd),
            description: text(&e.description, slurmrestd),
            source: text(&e.source, slurmrestd),
        })
        .collect()
}

fn api_warnings(warnings: &Option<api::OpenapiWarnings>, slurmrestd: bool) -> Vec<String> {
    if !slurmrestd {
        return Vec::new();
    }
    warnings
        .iter()
        .flat_map(|list| list.0.iter())
        .filter_map(|w| w.description.clone())
        .collect()
}

crate::slurm::dialect::envelope!(submit: api::OpenapiJobSubmitResponse);
crate::slurm::dialect::envelope!(
    api::OpenapiPingArrayResp,
    api::OpenapiDiagResp,
    api::OpenapiNodesResp,
    api::OpenapiPartitionResp,
    api::OpenapiJobPostResponse,
    api::OpenapiJobInfoResp,
    api::OpenapiJobStateResp,
    api::OpenapiResp,
    api::OpenapiSlurmdbdJobsResp,
);

/// Error entries from a body progenitor could not decode as its declared type (e.g. an error
/// response with a different shape). Not JSON at all: no entries.
pub(crate) fn errors_from_bytes(bytes: &[u8]) -> Vec<ApiError> {
    serde_json::from_slice::<api::OpenapiResp>(bytes)
        .map(|r| r.errors())
        .unwrap_or_default()
}

/// The [`Caller`] for this version.
pub(crate) fn caller<'a>(
    config: &'a crate::slurm::ClientConfig,
    identity: Option<&'a crate::slurm::identity::Identity>,
) -> Caller<'a> {
    Caller {
        config,
        version: VERSION,
        errors_from_bytes,
        timeout: config.request_timeout,
        identity,
        cluster_from_bytes,
        writes: false,
    }
}

/// Where a body progenitor could not decode as its declared type says it was rendered.
pub(crate) fn cluster_from_bytes(bytes: &[u8]) -> Option<String> {
    // Only that field: a body whose other fields drifted from their types still says it.
    let body: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let name = body.pointer("/meta/slurm/cluster")?.as_str()?.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// Seconds since the epoch, with slurmrestd's `{set, infinite, number}` wrapper; unset, infinite
/// and 0 ("never") are `None`, and so is a negative or out-of-range number (no Slurm time is
/// before 1970; a status showing 1969 would only mislead).
fn time64(value: &Option<api::Uint64NoValStruct>) -> Option<DateTime<Utc>> {
    let value = value.as_ref()?;
    if value.set == Some(false) || value.infinite == Some(true) {
        return None;
    }
    value
        .number
        .filter(|secs| *secs > 0)
        .and_then(|secs| DateTime::from_timestamp(secs, 0))
}

fn number32(value: &Option<api::Uint32NoValStruct>) -> Option<i64> {
    let value = value.as_ref()?;
    if value.set == Some(false) || value.infinite == Some(true) {
        return None;
    }
    value.number
}

fn number16(value: &Option<api::Uint16NoValStruct>) -> Option<i32> {
    let value = value.as_ref()?;
    if value.set == Some(false) || value.infinite == Some(true) {
        return None;
    }
    value.number.and_then(|n| i32::try_from(n).ok())
}

fn rpc_stats(diag: &api::OpenapiDiagResp) -> Vec<RpcStats> {
    diag.statistics
        .as_ref()
        .and_then(|s| s.rpcs_by_message_type.as_ref())
        .map(|list| list.0.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(|rpc| {
            Some(RpcStats {
                message_type: non_empty(&rpc.message_type)?,
                count: u64::try_from(rpc.count?).ok()?,
                total_time: std::time::Duration::from_micros(
                    rpc.total_time
                        .and_then(|t| u64::try_from(t).ok())
                        .unwrap_or_default(),
                ),
            })
        })
        .collect()
}

fn cluster_info(diag: &api::OpenapiDiagResp, controller_responding: bool) -> ClusterInfo {
    let meta = diag.meta.as_ref();
    let slurm = meta.and_then(|m| m.slurm.as_ref());
    let release = slurm
        .and_then(|s| non_empty(&s.release))
        .unwrap_or_else(|| {
            slurm
                .and_then(|s| s.version.as_ref())
                .map(|v| {
                    let part = |p: &Option<String>| p.clone().unwrap_or_default();
                    format!("{}.{}.{}", part(&v.major), part(&v.minor), part(&v.micro))
                })
                .unwrap_or_default()
        });
    ClusterInfo {
        cluster_name: slurm
            .and_then(|s| non_empty(&s.cluster))
            .unwrap_or_default(),
        release,
        api_version: VERSION.as_str().to_owned(),
        data_parser: data_parser(&diag.meta),
        controller_responding,
        jobs_submitted: diag.statistics.as_ref().and_then(|s| s.jobs_submitted),
        controller_time: diag.statistics.as_ref().and_then(|s| time64(&s.req_time)),
    }
}

fn nodes(nodes: Option<api::Nodes>) -> Vec<Node> {
    nodes
        .map(|n| n.0)
        .unwrap_or_default()
        .into_iter()
        .map(node)
        .collect()
}

fn node(n: api::Node) -> Node {
    let strings = |list: Option<api::CsvString>| list.map(|l| l.0).unwrap_or_default();
    Node {
        name: n.name.unwrap_or_default(),
        state: NodeState::from_strings(&n.state.map(|s| s.0).unwrap_or_default()),
        reason: non_empty(&n.reason),
        reason_set_by_user: non_empty(&n.reason_set_by_user),
        cpus: n.cpus,
        alloc_cpus: n.alloc_cpus,
        real_memory: n.real_memory,
        features: strings(n.features),
        partitions: strings(n.partitions),
        address: non_empty(&n.address),
        hostname: non_empty(&n.hostname),
        port: n.port,
        slurmd_version: non_empty(&n.version),
        owner: n.extra.as_deref().and_then(NodeOwner::from_extra),
    }
}

/// `last_update` is 0 (with a "no changes" warning) exactly when nothing changed since `update_time`.
fn changes<T>(items: Vec<T>, last_update: &Option<api::Uint64NoValStruct>) -> Changes<T> {
    let as_of = last_update
        .as_ref()
        .and_then(|l| l.number)
        .unwrap_or_default();
    if as_of == 0 && items.is_empty() {
        Changes::Unchanged
    } else {
        Changes::Changed { items, as_of }
    }
}

fn partitions(resp: api::OpenapiPartitionResp) -> Vec<Partition> {
    resp.partitions
        .map(|p| p.0)
        .unwrap_or_default()
        .into_iter()
        .map(|p| {
            let flags = p
                .partition
                .as_ref()
                .and_then(|x| x.state.clone())
                .map(|s| s.0)
                .unwrap_or_default();
            Partition {
                name: p.name.unwrap_or_default(),
                state: flags,
                nodes: p
                    .nodes
                    .as_ref()
                    .and_then(|n| n.configured.clone())
                    .unwrap_or_default(),
                total_nodes: p.nodes.as_ref().and_then(|n| n.total),
                total_cpus: p.cpus.as_ref().and_then(|c| c.total),
            }
        })
        .collect()
}

fn jobs(jobs: Option<api::JobInfoMsg>) -> Vec<Job> {
    jobs.map(|j| j.0)
        .unwrap_or_default()
        .into_iter()
        .map(job)
        .collect()
}

fn exit_status(e: &api::ProcessExitCodeVerbose) -> ExitStatus {
    ExitStatus {
        return_code: number32(&e.return_code).and_then(|n| i32::try_from(n).ok()),
        signal: e.signal.as_ref().and_then(|s| number16(&s.id)),
        signal_name: e.signal.as_ref().and_then(|s| non_empty(&s.name)),
        status: e.status.clone().map(|s| s.0).unwrap_or_default(),
    }
}

fn job(j: api::JobInfo) -> Job {
    let comment = non_empty(&j.comment);
    let state = JobState::from_strings(&j.job_state.map(|s| s.0).unwrap_or_default());
    let id = |v: &Option<api::Uint32NoValStruct>| {
        number32(v)
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n != 0)
    };
    let mut record = Job {
        job_id: j
            .job_id
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or_default(),
        name: j.name.unwrap_or_default(),
        state,
        state_reason: non_empty(&j.state_reason).filter(|r| r != "None"),
        user_name: non_empty(&j.user_name),
        cancelled_by: None,
        partition: non_empty(&j.partition),
        comment: None,
        owner: None,
        seal: None,
        nodes: non_empty(&j.nodes),
        node_count: number32(&j.node_count),
        exit: j.exit_code.as_ref().map(exit_status),
        submit_time: time64(&j.submit_time),
        start_time: time64(&j.start_time),
        end_time: time64(&j.end_time),
        time_limit: minutes(number32(&j.time_limit)),
        array_job_id: id(&j.array_job_id),
        array_task_id: number32(&j.array_task_id).and_then(|n| u32::try_from(n).ok()),
        array_task_string: non_empty(&j.array_task_string),
        standard_output: non_empty(&j.standard_output),
        standard_error: non_empty(&j.standard_error),
        working_directory: non_empty(&j.current_working_directory),
        priority: number32(&j.priority),
        held: j.hold == Some(true),
        account: non_empty(&j.account),
        qos: non_empty(&j.qos),
        nice: j.nice,
        state_description: non_empty(&j.state_description),
        usage: None,
    };
    // The tag is parsed once, with the comment.
    record.set_comment(comment);
    record
}

/// Job records from slurmdbd (`/slurmdb/.../job(s)`), in the same domain type as slurmctld's.
/// slurmdbd's shape differs: `state: {current, reason}`, times under `time` as plain seconds,
/// the comment under `comment.job` (stored only with `AccountingStoreFlags=job_comment`).
///
/// Only the records of the Slurm cluster this slurmrestd serves (the answer's
/// `meta.slurm.cluster`): a slurmdbd that several clusters share keeps each one's jobs, and a
/// job id (or name) of another cluster names another job. A record or answer that names no
/// cluster is kept.
fn accounting_jobs(jobs: Option<api::JobList>, meta: &Option<api::OpenapiMeta>) -> Vec<Job> {
    let own = meta
        .as_ref()
        .and_then(|m| m.slurm.as_ref())
        .and_then(|s| non_empty(&s.cluster));
    jobs.map(|j| j.0)
        .unwrap_or_default()
        .into_iter()
        .filter(|j| match (&own, non_empty(&j.cluster)) {
            (Some(own), Some(theirs)) => own.eq_ignore_ascii_case(&theirs),
            _ => true,
        })
        .map(accounting_job)
        .collect()
}

fn accounting_job(j: api::Job) -> Job {
    let comment = j.comment.as_ref().and_then(|c| non_empty(&c.job));
    let seconds = |secs: Option<i64>| {
        secs.filter(|s| *s > 0)
            .and_then(|s| DateTime::from_timestamp(s, 0))
    };
    let (standard_output, standard_error) = accounting_output(&j);
    let usage = accounting_usage(&j);
    let time = j.time.as_ref();
    let state = j.state.as_ref();
    let array = j.array.as_ref();
    let array_job_id = array
        .and_then(|a| a.job_id)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n != 0);
    let mut record = Job {
        job_id: j
            .job_id
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or_default(),
        name: j.name.unwrap_or_default(),
        state: JobState::from_strings(
            &state
                .and_then(|s| s.current.clone())
                .map(|s| s.0)
                .unwrap_or_default(),
        ),
        state_reason: state
            .and_then(|s| non_empty(&s.reason))
            .filter(|r| r != "None"),
        user_name: non_empty(&j.user),
        cancelled_by: non_empty(&j.kill_request_user),
        partition: non_empty(&j.partition),
        comment: None,
        owner: None,
        seal: None,
        nodes: non_empty(&j.nodes).filter(|n| n != "None assigned"),
        node_count: j.allocation_nodes.filter(|n| *n > 0),
        exit: j.exit_code.as_ref().map(exit_status),
        submit_time: seconds(time.and_then(|t| t.submission)),
        start_time: seconds(time.and_then(|t| t.start)),
        end_time: seconds(time.and_then(|t| t.end)),
        time_limit: minutes(time.and_then(|t| number32(&t.limit))),
        array_job_id,
        array_task_id: array_job_id
            .and(array.and_then(|a| number32(&a.task_id)))
            .and_then(|n| u32::try_from(n).ok()),
        array_task_string: None,
        standard_output,
        standard_error,
        working_directory: non_empty(&j.working_directory),
        priority: number32(&j.priority),
        held: j.hold == Some(true),
        account: non_empty(&j.account),
        qos: non_empty(&j.qos),
        nice: None,
        state_description: None,
        usage: Some(Box::new(usage)),
    };
    // The tag is parsed once, with the comment.
    record.set_comment(comment);
    record
}

/// What slurmdbd recorded a job used. CPU time is the sum of its steps' (the job-level
/// `time.total` stays 0: sacct adds the steps up itself), the largest RSS the largest any step
/// reported (`tres.requested.max`, type `mem`, in bytes).
fn accounting_usage(j: &api::Job) -> Usage {
    let steps = j.steps.as_ref().map(|s| s.0.as_slice()).unwrap_or_default();
    let cpu_time = steps
        .iter()
        .filter_map(|step| step.time.as_ref()?.total.as_ref())
        .map(|t| seconds_micros(t.seconds, t.microseconds))
        .fold(
            std::time::Duration::ZERO,
            std::time::Duration::saturating_add,
        );
    let max_rss_bytes = steps
        .iter()
        .filter_map(|step| step.tres.as_ref()?.requested.as_ref()?.max.as_ref())
        .flat_map(|max| max.0.iter())
        .filter(|t| t.type_.as_deref() == Some("mem"))
        .filter_map(|t| t.count.and_then(|c| u64::try_from(c).ok()))
        .max();
    let tres = j.tres.as_ref();
    Usage {
        elapsed: std::time::Duration::from_secs(
            j.time
                .as_ref()
                .and_then(|t| t.elapsed)
                .and_then(|e| u64::try_from(e).ok())
                .unwrap_or_default(),
        ),
        cpu_time,
        max_rss_bytes,
        allocated: tres_list(tres.and_then(|t| t.allocated.as_ref())),
        requested: tres_list(tres.and_then(|t| t.requested.as_ref())),
    }
}

/// slurmdbd's `{seconds, microseconds}`; negative parts count as none.
fn seconds_micros(seconds: Option<i64>, micros: Option<i64>) -> std::time::Duration {
    let part = |n: Option<i64>| n.and_then(|n| u64::try_from(n).ok()).unwrap_or_default();
    std::time::Duration::from_secs(part(seconds))
        .saturating_add(std::time::Duration::from_micros(part(micros)))
}

/// A TRES list without the entries slurmdbd marks as not counted (a negative count: energy
/// without an energy plugin reads -2).
fn tres_list(list: Option<&api::TresList>) -> Vec<Tres> {
    list.map(|l| l.0.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(|t| {
            Some(Tres {
                kind: non_empty(&t.type_)?,
                name: non_empty(&t.name),
                count: u64::try_from(t.count?).ok()?,
            })
        })
        .collect()
}

/// Decoded straight into entries (`crate::slurm::job_states`): nothing to convert.
fn job_states(resp: api::OpenapiJobStateResp) -> Vec<JobStateEntry> {
    resp.jobs.map(|jobs| jobs.0).unwrap_or_default()
}

/// A submit's result: the job made, also when slurmrestd answered errors beside it (they are
/// among its warnings).
fn submit_result(
    resp: Result<api::OpenapiJobSubmitResponse, SlurmError>,
) -> Result<Submitted, SlurmError> {
    match resp {
        Ok(resp) => submitted(resp),
        Err(SlurmError::SubmitMade { submitted, .. }) => Ok(submitted),
        Err(error) => Err(error),
    }
}

/// The job a submit's answer names, with what slurmrestd said beside it: its warnings, then
/// its errors (an answer with a job is not a refusal).
fn made(resp: &api::OpenapiJobSubmitResponse) -> Option<Submitted> {
    let job_id = resp
        .job_id
        .and_then(|id| u32::try_from(id).ok())
        .filter(|id| *id != 0)?;
    let mut warnings = resp.warnings();
    warnings.extend(
        resp.errors()
            .iter()
            .filter(|e| e.code != 0)
            .map(ApiError::message),
    );
    Some(Submitted {
        job_id,
        user_message: non_empty(&resp.job_submit_user_msg),
        warnings,
    })
}

fn submitted(resp: api::OpenapiJobSubmitResponse) -> Result<Submitted, SlurmError> {
    made(&resp).ok_or_else(|| {
        // slurmrestd refuses some submits with HTTP 200, no job_id and only an "error_number 0"
        // entry saying why (e.g. "Refusing HetJob submission without any components"): a
        // refusal with Slurm's reason, not an undecodable answer.
        let errors = resp.errors();
        if errors.is_empty() {
            SlurmError::Decode {
                operation: "submit_job",
                detail: "the answer has no job_id".into(),
            }
        } else {
            SlurmError::Rejected {
                operation: "submit_job",
                status: 200,
                errors,
            }
        }
    })
}

/// slurmrestd's job description for `request`, typed as this version's (see [`typed_body`]).
fn submit_request(request: &SubmitRequest) -> Result<api::JobSubmitReq, SlurmError> {
    typed_body(submit_body(request)?, request, VERSION)
}

/// Decode `body`, an answer with HTTP `status` to `endpoint`, as the client does (for
/// `crate::slurm::fuzzing`, through `replay`).
pub(crate) fn decode(
    endpoint: crate::slurm::dialect::replay::Endpoint,
    status: u16,
    body: &[u8],
) -> Result<crate::slurm::dialect::replay::Decoded, SlurmError> {
    use crate::slurm::dialect::replay::{Check, Decoded, Endpoint, JOB, NODE};
    let none = Subject::None;
    let job_subject = Subject::Job(JOB);
    let check = Check {
        status,
        body,
        version: VERSION,
        errors_from_bytes,
    };
    Ok(match endpoint {
        Endpoint::Ping => {
            let resp: api::OpenapiPingArrayResp = check.decode("ping", none)?;
            Decoded::Responding(controller_responding(&resp))
        }
        Endpoint::Diag => {
            let resp: api::OpenapiDiagResp = check.decode("diag", none)?;
            Decoded::SlurmCluster(cluster_info(&resp, true))
        }
        Endpoint::Nodes => {
            let resp: api::OpenapiNodesResp = check.decode("nodes", none)?;
            Decoded::Nodes(changes(nodes(resp.nodes), &resp.last_update))
        }
        Endpoint::Node => {
            let resp: api::OpenapiNodesResp = check.decode("node", Subject::Node(NODE))?;
            let node = nodes(resp.nodes)
                .into_iter()
                .find(|n| n.name == NODE)
                .ok_or_else(|| SlurmError::NotFound {
                    kind: "node",
                    name: NODE.to_owned(),
                })?;
            Decoded::Node(Box::new(node))
        }
        Endpoint::NodeUpdate => {
            let _: api::OpenapiResp = check.decode("update_node", Subject::Node(NODE))?;
            Decoded::Done
        }
        Endpoint::Partitions => Decoded::Partitions(partitions(check.decode("partitions", none)?)),
        Endpoint::Submit => Decoded::Submitted(submit_result(check.decode("submit_job", none))?),
        Endpoint::Job => {
            let resp: api::OpenapiJobInfoResp = check.decode("job", job_subject)?;
            let jobs = jobs(resp.jobs);
            if jobs.is_empty() {
                return Err(SlurmError::NotFound {
                    kind: "job",
                    name: JOB.to_string(),
                });
            }
            Decoded::Jobs(jobs)
        }
        Endpoint::Jobs => {
            let resp: api::OpenapiJobInfoResp = check.decode("jobs", none)?;
            Decoded::JobChanges(changes(jobs(resp.jobs), &resp.last_update))
        }
        Endpoint::JobsState => Decoded::States(job_states(check.decode("jobs_state", none)?)),
        Endpoint::Cancel => {
            let resp: KillResp = check.decode("cancel_job", job_subject)?;
            let failures = cancel_failures(&resp);
            if !failures.is_empty() {
                return Err(classify("cancel_job", 200, job_subject, failures));
            }
            Decoded::Done
        }
        Endpoint::Accounting => {
            let resp: api::OpenapiSlurmdbdJobsResp = check.decode("accounting_job", job_subject)?;
            Decoded::Accounting(accounting_jobs(resp.jobs, &resp.meta))
        }
    })
}

#[cfg(test)]
mod shared_tests {
    use super::*;

    /// Every typed job option the operator sends exists in this version's job description, so
    /// no SlurmJob field is dropped on any version (a missing one would be refused by name).
    #[test]
    fn every_typed_option_reaches_this_versions_job_description() {
        let request = SubmitRequest {
            script: "#!/bin/sh\ntrue\n".into(),
            name: Some("n".into()),
            partition: Some("p".into()),
            account: Some("a".into()),
            qos: Some("q".into()),
            nodes: Some("1-2".into()),
            tasks: Some(2),
            cpus_per_task: Some(1),
            tasks_per_node: Some(4),
            memory_per_node_mib: Some(100),
            memory_per_cpu_mib: None,
            time_limit: Some(std::time::Duration::from_secs(90)),
            environment: [("A".to_owned(), "1".to_owned())].into(),
            working_directory: "/tmp".into(),
            constraints: Some("c".into()),
            gres: Some("mps:100".into()),
            tres_per_node: Some("gres/shard:1".into()),
            tres_per_task: Some("cpu=1".into()),
            gpus_per_node: Some("a100:2".into()),
            gpus_per_task: Some("1".into()),
            exclusive: Some(crate::slurm::types::Exclusive::User),
            array: Some("0-3%2".into()),
            dependency: Some("afterok:1".into()),
            standard_output: Some("/tmp/o".into()),
            standard_error: Some("/tmp/e".into()),
            comment: Some("slurm.rs/uid=x".into()),
            hold: true,
            nice: Some(100),
            extra: Default::default(),
        };
        let body = submit_request(&request).unwrap();
        let job = serde_json::to_value(&body).unwrap()["job"].clone();
        assert_eq!(job["time_limit"]["number"], 2, "{VERSION}: {job}");
        assert_eq!(job["memory_per_node"]["number"], 100, "{VERSION}");
        assert_eq!(job["array"], "0-3%2", "{VERSION}");
        assert_eq!(job["dependency"], "afterok:1", "{VERSION}");
        assert_eq!(job["comment"], "slurm.rs/uid=x", "{VERSION}");
        assert_eq!(job["tasks_per_node"], 4, "{VERSION}");
        assert_eq!(
            job["tres_per_node"], "gres/shard:1,gres/mps:100,gres/gpu:a100:2",
            "{VERSION}"
        );
        assert_eq!(job["tres_per_task"], "cpu=1,gres/gpu:1", "{VERSION}");
        assert_eq!(job["shared"], serde_json::json!(["user"]), "{VERSION}");
        assert_eq!(job["hold"], true, "{VERSION}");
        assert_eq!(job["nice"], 100, "{VERSION}");

        // Memory per CPU instead of per node (Slurm takes one of the two).
        let per_cpu = SubmitRequest {
            memory_per_node_mib: None,
            memory_per_cpu_mib: Some(250),
            exclusive: Some(crate::slurm::types::Exclusive::Node),
            ..request.clone()
        };
        let job = serde_json::to_value(submit_request(&per_cpu).unwrap()).unwrap()["job"].clone();
        assert_eq!(job["memory_per_cpu"]["number"], 250, "{VERSION}: {job}");
        assert_eq!(job["memory_per_cpu"]["set"], true, "{VERSION}");
        assert!(
            job.get("memory_per_node").is_none_or(|m| m.is_null()),
            "{VERSION}: {job}"
        );
        assert_eq!(job["shared"], serde_json::json!(["none"]), "{VERSION}");

        // An extra option this version does not know is refused by name, not dropped:
        // `oom_kill_step` arrived with v0.0.42.
        let mut newer = request.clone();
        newer
            .extra
            .insert("oom_kill_step".into(), serde_json::json!(1));
        match submit_request(&newer) {
            Ok(body) => {
                assert!(
                    VERSION >= ApiVersion::V0_0_42,
                    "{VERSION} took oom_kill_step"
                );
                let job = serde_json::to_value(&body).unwrap()["job"].clone();
                assert_eq!(job["oom_kill_step"], 1, "{VERSION}");
            }
            Err(err) => {
                let err = err.to_string();
                assert!(VERSION < ApiVersion::V0_0_42, "{VERSION}: {err}");
                assert!(
                    err.contains("oom_kill_step") && err.contains(VERSION.as_str()),
                    "{err}"
                );
            }
        }
    }

    #[test]
    fn every_update_field_reaches_this_versions_job_description() {
        let update = JobUpdate {
            time_limit: Some(std::time::Duration::from_secs(61)),
            partition: Some("p".into()),
            account: Some("a".into()),
            qos: Some("q".into()),
            nice: Some(10),
            hold: Some(false),
        };
        let body: api::JobDescMsg = typed_update(update_body(&update), VERSION).unwrap();
        // Bare, not under "job": slurmrestd ignores a wrapped update.
        let job = serde_json::to_value(&body).unwrap();
        assert_eq!(job["time_limit"]["number"], 2, "{VERSION}: {job}");
        assert_eq!(job["partition"], "p", "{VERSION}");
        assert_eq!(job["account"], "a", "{VERSION}");
        assert_eq!(job["qos"], "q", "{VERSION}");
        assert_eq!(job["nice"], 10, "{VERSION}");
        assert_eq!(job["hold"], false, "{VERSION}");
        assert!(job.get("job").is_none(), "{VERSION}: {job}");
        // Only what changes is sent.
        let hold = JobUpdate {
            hold: Some(true),
            ..JobUpdate::default()
        };
        let body: api::JobDescMsg = typed_update(update_body(&hold), VERSION).unwrap();
        let sent: Vec<String> = serde_json::to_value(&body)
            .unwrap()
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(sent, ["hold"], "{VERSION}");
    }

    #[test]
    fn error_texts_are_kept_only_from_slurmrestds_json() {
        let slurmrestd = br#"{"meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}},
            "errors": [{"error_number": 2000, "error": "Invalid partition name specified",
                        "description": "Batch job submission failed", "source": "slurm"}]}"#;
        let errors = errors_from_bytes(slurmrestd);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].code, 2000);
        assert!(
            errors[0].message().contains("Invalid partition"),
            "{errors:?}"
        );

        // The same shape from something that is not slurmrestd (no data_parser in `meta`): the
        // numbers still classify, the texts are not repeated.
        for other in [
            &br#"{"errors": [{"error_number": 2000, "error": "MARKER", "description": "MARKER"}]}"#
                [..],
            br#"{"meta": {"plugin": {}}, "errors": [{"error_number": 7, "source": "MARKER"}]}"#,
            br#"{"meta": {"plugin": {"data_parser": " "}}, "errors": [{"error": "MARKER"}]}"#,
        ] {
            let errors = errors_from_bytes(other);
            assert_eq!(errors.len(), 1);
            assert!(!format!("{errors:?}").contains("MARKER"), "{errors:?}");
        }
        let warned: api::OpenapiResp =
            serde_json::from_slice(br#"{"warnings": [{"description": "MARKER"}]}"#).unwrap();
        assert!(warned.warnings().is_empty());
    }
}
