//! Conversions between the generated v0.0.42 types and the facade's domain types. With `client`,
//! the only code that names generated types: a new API version means a new copy of these two.

use chrono::{DateTime, Utc};

use super::error::{ApiError, SlurmError};
use super::generated::types as api;
use super::node_owner::NodeOwner;
use super::types::{
    Changes, ClusterInfo, ExitStatus, Job, JobState, JobStateEntry, Node, NodeState, Partition,
    SubmitRequest, Submitted,
};

/// Every slurmrestd response carries `errors[]` and `warnings[]`, whatever its HTTP status.
///
/// Their texts are kept only when the body is slurmrestd's (see [`from_slurmrestd`]): they end up
/// in errors, statuses and Events, and an endpoint that is not slurmrestd must not have its
/// answers read back that way. From any other JSON only the error numbers are kept.
pub(crate) trait Envelope {
    fn errors(&self) -> Vec<ApiError>;
    fn warnings(&self) -> Vec<String>;
}

/// Whether a JSON body is slurmrestd's: every answer it renders, error answers included, names
/// its data_parser plugin in `meta` (24.11 and 26.05 alike, `tests/fixtures`). An unrelated
/// service that a Cluster's endpoint points to does not.
fn from_slurmrestd(meta: &Option<api::V0042OpenapiMeta>) -> bool {
    meta.as_ref()
        .and_then(|meta| meta.plugin.as_ref())
        .and_then(|plugin| plugin.data_parser.as_deref())
        .is_some_and(|name| !name.trim().is_empty())
}

/// slurmrestd's text, or nothing when the body is not slurmrestd's.
fn text(value: &Option<String>, slurmrestd: bool) -> String {
    match value {
        Some(text) if slurmrestd => text.clone(),
        _ => String::new(),
    }
}

fn api_errors(errors: &Option<api::V0042OpenapiErrors>, slurmrestd: bool) -> Vec<ApiError> {
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

fn api_warnings(warnings: &Option<api::V0042OpenapiWarnings>, slurmrestd: bool) -> Vec<String> {
    if !slurmrestd {
        return Vec::new();
    }
    warnings
        .iter()
        .flat_map(|list| list.0.iter())
        .filter_map(|w| w.description.clone())
        .collect()
}

macro_rules! envelope {
    ($($ty:ty),* $(,)?) => {$(
        impl Envelope for $ty {
            fn errors(&self) -> Vec<ApiError> {
                api_errors(&self.errors, from_slurmrestd(&self.meta))
            }
            fn warnings(&self) -> Vec<String> {
                api_warnings(&self.warnings, from_slurmrestd(&self.meta))
            }
        }
    )*};
}

envelope!(
    api::V0042OpenapiPingArrayResp,
    api::V0042OpenapiDiagResp,
    api::V0042OpenapiNodesResp,
    api::V0042OpenapiPartitionResp,
    api::V0042OpenapiJobSubmitResponse,
    api::V0042OpenapiJobInfoResp,
    api::V0042OpenapiJobStateResp,
    api::V0042OpenapiKillJobResp,
    api::V0042OpenapiResp,
    api::V0042OpenapiSlurmdbdJobsResp,
);

/// Error entries from a body progenitor could not decode as its declared type (e.g. an error
/// response with a different shape). Not JSON at all: no entries.
pub(crate) fn errors_from_bytes(bytes: &[u8]) -> Vec<ApiError> {
    serde_json::from_slice::<api::V0042OpenapiResp>(bytes)
        .map(|r| r.errors())
        .unwrap_or_default()
}

/// Seconds since the epoch, with slurmrestd's `{set, infinite, number}` wrapper; unset, infinite
/// and 0 ("never") are `None`, and so is a negative or out-of-range number (no Slurm time is
/// before 1970; a status showing 1969 would only mislead).
fn time64(value: &Option<api::V0042Uint64NoValStruct>) -> Option<DateTime<Utc>> {
    let value = value.as_ref()?;
    if value.set == Some(false) || value.infinite == Some(true) {
        return None;
    }
    value
        .number
        .filter(|secs| *secs > 0)
        .and_then(|secs| DateTime::from_timestamp(secs, 0))
}

/// A time limit in minutes (a uint32 in Slurm). A number outside u32 is not one Slurm sends: no
/// limit known, rather than an overflowing `minutes * 60`.
fn minutes(value: Option<i64>) -> Option<std::time::Duration> {
    let minutes = u32::try_from(value?).ok()?;
    Some(std::time::Duration::from_secs(u64::from(minutes) * 60))
}

fn number32(value: &Option<api::V0042Uint32NoValStruct>) -> Option<i64> {
    let value = value.as_ref()?;
    if value.set == Some(false) || value.infinite == Some(true) {
        return None;
    }
    value.number
}

fn non_empty(value: &Option<String>) -> Option<String> {
    value
        .as_ref()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

pub(crate) fn controller_responding(resp: &api::V0042OpenapiPingArrayResp) -> bool {
    resp.pings.iter().flat_map(|p| p.0.iter()).any(|p| {
        p.responding == Some(true)
            && (p.primary == Some(true) || p.mode.as_deref() == Some("primary"))
    })
}

pub(crate) fn cluster_info(
    diag: &api::V0042OpenapiDiagResp,
    controller_responding: bool,
) -> ClusterInfo {
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
    let data_parser = meta
        .and_then(|m| m.plugin.as_ref())
        .and_then(|p| non_empty(&p.data_parser))
        .unwrap_or_default();
    ClusterInfo {
        cluster_name: slurm
            .and_then(|s| non_empty(&s.cluster))
            .unwrap_or_default(),
        release,
        api_version: super::version::API_VERSION.to_owned(),
        data_parser,
        controller_responding,
        jobs_submitted: diag.statistics.as_ref().and_then(|s| s.jobs_submitted),
    }
}

pub(crate) fn nodes(nodes: Option<api::V0042Nodes>) -> Vec<Node> {
    nodes
        .map(|n| n.0)
        .unwrap_or_default()
        .into_iter()
        .map(node)
        .collect()
}

fn node(n: api::V0042Node) -> Node {
    let strings = |list: Option<api::V0042CsvString>| list.map(|l| l.0).unwrap_or_default();
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
fn changes<T>(items: Vec<T>, last_update: &Option<api::V0042Uint64NoValStruct>) -> Changes<T> {
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

pub(crate) fn node_changes(resp: api::V0042OpenapiNodesResp) -> Result<Changes<Node>, SlurmError> {
    Ok(changes(nodes(resp.nodes), &resp.last_update))
}

pub(crate) fn partitions(resp: api::V0042OpenapiPartitionResp) -> Vec<Partition> {
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

pub(crate) fn jobs(jobs: Option<api::V0042JobInfoMsg>) -> Vec<Job> {
    jobs.map(|j| j.0)
        .unwrap_or_default()
        .into_iter()
        .map(job)
        .collect()
}

fn job(j: api::V0042JobInfo) -> Job {
    let comment = non_empty(&j.comment);
    let state = JobState::from_strings(&j.job_state.map(|s| s.0).unwrap_or_default());
    let exit = j.exit_code.as_ref().map(|e| ExitStatus {
        return_code: number32(&e.return_code).and_then(|n| i32::try_from(n).ok()),
        signal: e.signal.as_ref().and_then(|s| number16(&s.id)),
        signal_name: e.signal.as_ref().and_then(|s| non_empty(&s.name)),
        status: e.status.clone().map(|s| s.0).unwrap_or_default(),
    });
    let time_limit = minutes(number32(&j.time_limit));
    let id = |v: &Option<api::V0042Uint32NoValStruct>| {
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
        comment: non_empty(&j.comment),
        owner: None,
        seal: None,
        nodes: non_empty(&j.nodes),
        node_count: number32(&j.node_count),
        exit,
        submit_time: time64(&j.submit_time),
        start_time: time64(&j.start_time),
        end_time: time64(&j.end_time),
        time_limit,
        array_job_id: id(&j.array_job_id),
        array_task_id: number32(&j.array_task_id).and_then(|n| u32::try_from(n).ok()),
        array_task_string: non_empty(&j.array_task_string),
        standard_output: non_empty(&j.standard_output),
        standard_error: non_empty(&j.standard_error),
        working_directory: non_empty(&j.current_working_directory),
    };
    // The tag is parsed once, with the comment.
    record.set_comment(comment);
    record
}

/// Job records from slurmdbd (`/slurmdb/.../job(s)`), in the same domain type as slurmctld's.
/// slurmdbd's shape differs: `state: {current, reason}`, times under `time` as plain seconds,
/// the comment under `comment.job` (stored only with `AccountingStoreFlags=job_comment`).
pub(crate) fn accounting_jobs(jobs: Option<api::V0042JobList>) -> Vec<Job> {
    jobs.map(|j| j.0)
        .unwrap_or_default()
        .into_iter()
        .map(accounting_job)
        .collect()
}

fn accounting_job(j: api::V0042Job) -> Job {
    let comment = j.comment.as_ref().and_then(|c| non_empty(&c.job));
    let seconds = |secs: Option<i64>| {
        secs.filter(|s| *s > 0)
            .and_then(|s| DateTime::from_timestamp(s, 0))
    };
    let time = j.time.as_ref();
    let state = j.state.as_ref();
    let exit = j.exit_code.as_ref().map(|e| ExitStatus {
        return_code: number32(&e.return_code).and_then(|n| i32::try_from(n).ok()),
        signal: e.signal.as_ref().and_then(|s| number16(&s.id)),
        signal_name: e.signal.as_ref().and_then(|s| non_empty(&s.name)),
        status: e.status.clone().map(|s| s.0).unwrap_or_default(),
    });
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
        exit,
        submit_time: seconds(time.and_then(|t| t.submission)),
        start_time: seconds(time.and_then(|t| t.start)),
        end_time: seconds(time.and_then(|t| t.end)),
        time_limit: minutes(time.and_then(|t| number32(&t.limit))),
        array_job_id,
        array_task_id: array_job_id
            .and(array.and_then(|a| number32(&a.task_id)))
            .and_then(|n| u32::try_from(n).ok()),
        array_task_string: None,
        standard_output: non_empty(&j.stdout_expanded).or_else(|| non_empty(&j.stdout)),
        standard_error: non_empty(&j.stderr_expanded).or_else(|| non_empty(&j.stderr)),
        working_directory: non_empty(&j.working_directory),
    };
    // The tag is parsed once, with the comment.
    record.set_comment(comment);
    record
}

fn number16(value: &Option<api::V0042Uint16NoValStruct>) -> Option<i32> {
    let value = value.as_ref()?;
    if value.set == Some(false) || value.infinite == Some(true) {
        return None;
    }
    value.number.and_then(|n| i32::try_from(n).ok())
}

pub(crate) fn job_changes(resp: api::V0042OpenapiJobInfoResp) -> Result<Changes<Job>, SlurmError> {
    Ok(changes(jobs(resp.jobs), &resp.last_update))
}

/// Entries of `/jobs/state/`. Array tasks come as `"<job_id>_<task_id>"` (24.11: `"14_2"`), a
/// pending array's meta record once per task still to run (`"18_0"`, `"18_1"`, ...): each entry
/// is returned under the job id of the record it belongs to.
pub(crate) fn job_states(resp: api::V0042OpenapiJobStateResp) -> Vec<JobStateEntry> {
    resp.jobs
        .map(|j| j.0)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|entry| {
            let id = entry.job_id.as_deref()?.trim();
            let (record, task) = match id.split_once('_') {
                // A task part this version cannot read still names the record.
                Some((record, task)) => (record, task.parse().ok()),
                None => (id, None),
            };
            Some(JobStateEntry {
                job_id: record.parse().ok()?,
                array_task_id: task,
                state: JobState::from_strings(&entry.state.map(|s| s.0).unwrap_or_default()),
            })
        })
        .collect()
}

pub(crate) fn node_update(states: &[&str], reason: Option<&str>) -> api::V0042UpdateNodeMsg {
    api::V0042UpdateNodeMsg {
        state: Some(api::V0042NodeStates(
            states.iter().map(|s| (*s).to_owned()).collect(),
        )),
        reason: reason.map(str::to_owned),
        ..Default::default()
    }
}

pub(crate) fn cancel_failures(resp: &api::V0042OpenapiKillJobResp) -> Vec<ApiError> {
    let slurmrestd = from_slurmrestd(&resp.meta);
    resp.status
        .iter()
        .flat_map(|s| s.0.iter())
        .filter_map(|entry| entry.error.as_ref())
        .filter(|e| e.code.is_some_and(|c| c != 0))
        .map(|e| ApiError {
            code: e.code.unwrap_or_default(),
            error: text(&e.string, slurmrestd),
            description: text(&e.message, slurmrestd),
            source: "cancel".into(),
        })
        .collect()
}

pub(crate) fn submitted(resp: api::V0042OpenapiJobSubmitResponse) -> Result<Submitted, SlurmError> {
    let warnings = resp.warnings();
    let job_id = resp
        .job_id
        .and_then(|id| u32::try_from(id).ok())
        .filter(|id| *id != 0);
    let Some(job_id) = job_id else {
        // slurmrestd refuses some submits with HTTP 200, no job_id and only an "error_number 0"
        // entry saying why (e.g. "Refusing HetJob submission without any components"): a
        // refusal with Slurm's reason, not an undecodable answer.
        let errors = resp.errors();
        return Err(if errors.is_empty() {
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
        });
    };
    Ok(Submitted {
        job_id,
        user_message: non_empty(&resp.job_submit_user_msg),
        warnings,
    })
}

/// Build slurmrestd's job description: typed fields first, then `extra` on top, decoded into the
/// generated type so a wrongly typed extra field fails here, with its name, not in Slurm.
pub(crate) fn submit_request(
    request: &SubmitRequest,
) -> Result<api::V0042JobSubmitReq, SlurmError> {
    use serde_json::{Map, Value, json};
    let invalid = |detail: String| SlurmError::InvalidRequest { detail };
    if !request.script.starts_with("#!") {
        return Err(invalid(
            "the batch script must start with #! (e.g. #!/bin/bash)".into(),
        ));
    }
    if request.working_directory.trim().is_empty() {
        return Err(invalid("a working directory is required".into()));
    }
    let mut job = Map::new();
    let mut put = |key: &str, value: Value| {
        job.insert(key.to_owned(), value);
    };
    put("script", json!(request.script));
    put(
        "current_working_directory",
        json!(request.working_directory),
    );
    let mut environment: Vec<String> = request
        .environment
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if environment.is_empty() {
        // slurmrestd fails the submit (error 2019) without an environment.
        environment.push("PATH=/usr/local/bin:/usr/bin:/bin".to_owned());
    }
    put("environment", json!(environment));
    let optional_strings = [
        ("name", &request.name),
        ("partition", &request.partition),
        ("account", &request.account),
        ("qos", &request.qos),
        ("nodes", &request.nodes),
        ("constraints", &request.constraints),
        ("tres_per_node", &request.tres_per_node),
        ("tres_per_task", &request.tres_per_task),
        ("array", &request.array),
        ("dependency", &request.dependency),
        ("standard_output", &request.standard_output),
        ("standard_error", &request.standard_error),
        ("comment", &request.comment),
    ];
    for (key, value) in optional_strings {
        if let Some(value) = value {
            put(key, json!(value));
        }
    }
    if let Some(gres) = &request.gres {
        // sbatch's --gres is tres_per_node with a "gres/" prefix per entry.
        let per_node = gres
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(|g| {
                if g.starts_with("gres/") {
                    g.to_owned()
                } else {
                    format!("gres/{g}")
                }
            })
            .collect::<Vec<_>>()
            .join(",");
        put("tres_per_node", json!(per_node));
    }
    if let Some(tasks) = request.tasks {
        put("tasks", json!(tasks));
    }
    if let Some(cpus) = request.cpus_per_task {
        put("cpus_per_task", json!(cpus));
    }
    if let Some(mib) = request.memory_per_node_mib {
        put(
            "memory_per_node",
            json!({"set": true, "infinite": false, "number": mib}),
        );
    }
    if let Some(limit) = request.time_limit {
        let minutes = limit.as_secs().div_ceil(60).max(1);
        put(
            "time_limit",
            json!({"set": true, "infinite": false, "number": minutes}),
        );
    }
    for (key, value) in &request.extra {
        // Whoever builds the request, privileged fields never reach slurmrestd.
        if let Some(reason) = super::types::extra_option_refusal(key) {
            return Err(invalid(format!("job option {key} {reason}")));
        }
        job.insert(key.clone(), value.clone());
    }
    let body = json!({ "job": Value::Object(job) });
    let typed: api::V0042JobSubmitReq = serde_json::from_value(body.clone())
        .map_err(|e| invalid(format!("invalid job description: {e}")))?;
    // Fields the spec does not know would be dropped silently by the typed body: refuse them.
    let round_trip = serde_json::to_value(&typed).map_err(|e| invalid(e.to_string()))?;
    let known = round_trip.get("job").and_then(Value::as_object);
    for key in request.extra.keys() {
        if known.is_none_or(|k| !k.contains_key(key)) {
            return Err(invalid(format!("unknown job description field {key:?}")));
        }
    }
    Ok(typed)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let warned: api::V0042OpenapiResp =
            serde_json::from_slice(br#"{"warnings": [{"description": "MARKER"}]}"#).unwrap();
        assert!(warned.warnings().is_empty());
    }
}
