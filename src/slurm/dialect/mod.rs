//! The REST API versions behind the facade: one module per version, each the shared operations
//! and conversions (`shared.rs`, `include!`d) over that version's generated client, plus the few
//! functions where that version really differs. [`Dialect`] is one of them, chosen per
//! slurmrestd by negotiation (`super::client`).
//!
//! A new version: its spec in `openapi/`, an entry in `tools/gen-client`'s `VERSIONS`, a
//! variant of [`crate::slurm::ApiVersion`], and a module here (copy the nearest one; the
//! compiler names every difference).

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use super::error::SlurmError;
use super::types::{JobUpdate, SubmitRequest};
use super::version::ApiVersion;

pub(crate) mod replay;
pub(super) mod v0_0_40;
pub(super) mod v0_0_41;
pub(super) mod v0_0_42;
pub(super) mod v0_0_43;
pub(super) mod v0_0_44;
pub(super) mod v0_0_45;

/// One version's client.
#[derive(Debug, Clone)]
pub(super) enum Dialect {
    V0_0_40(v0_0_40::Api),
    V0_0_41(v0_0_41::Api),
    V0_0_42(v0_0_42::Api),
    V0_0_43(v0_0_43::Api),
    V0_0_44(v0_0_44::Api),
    V0_0_45(v0_0_45::Api),
}

/// Run `$body` with `$api` bound to the dialect's client and `$caller` to its [`Caller`]
/// (`crate::slurm::call::Caller`) for `$config`: each arm is compiled against its own version's
/// generated types.
macro_rules! dispatch {
    ($dialect:expr, $client:expr, |$api:ident, $caller:ident| $body:expr) => {{
        // Answers must come from the Slurm cluster this client was confirmed to reach.
        let identity: &$crate::slurm::identity::Identity = &$client.identity;
        let config: &$crate::slurm::ClientConfig = &$client.config;
        match $dialect {
            $crate::slurm::dialect::Dialect::V0_0_40($api) => {
                let $caller = $crate::slurm::dialect::v0_0_40::caller(config, Some(identity));
                $body
            }
            $crate::slurm::dialect::Dialect::V0_0_41($api) => {
                let $caller = $crate::slurm::dialect::v0_0_41::caller(config, Some(identity));
                $body
            }
            $crate::slurm::dialect::Dialect::V0_0_42($api) => {
                let $caller = $crate::slurm::dialect::v0_0_42::caller(config, Some(identity));
                $body
            }
            $crate::slurm::dialect::Dialect::V0_0_43($api) => {
                let $caller = $crate::slurm::dialect::v0_0_43::caller(config, Some(identity));
                $body
            }
            $crate::slurm::dialect::Dialect::V0_0_44($api) => {
                let $caller = $crate::slurm::dialect::v0_0_44::caller(config, Some(identity));
                $body
            }
            $crate::slurm::dialect::Dialect::V0_0_45($api) => {
                let $caller = $crate::slurm::dialect::v0_0_45::caller(config, Some(identity));
                $body
            }
        }
    }};
}
pub(super) use dispatch;

impl Dialect {
    pub(super) fn new(
        version: ApiVersion,
        base_url: &str,
        http: reqwest::Client,
        transport: std::sync::Arc<super::transport::Transport>,
    ) -> Self {
        match version {
            ApiVersion::V0_0_40 => Self::V0_0_40(v0_0_40::Api::new(base_url, http, transport)),
            ApiVersion::V0_0_41 => Self::V0_0_41(v0_0_41::Api::new(base_url, http, transport)),
            ApiVersion::V0_0_42 => Self::V0_0_42(v0_0_42::Api::new(base_url, http, transport)),
            ApiVersion::V0_0_43 => Self::V0_0_43(v0_0_43::Api::new(base_url, http, transport)),
            ApiVersion::V0_0_44 => Self::V0_0_44(v0_0_44::Api::new(base_url, http, transport)),
            ApiVersion::V0_0_45 => Self::V0_0_45(v0_0_45::Api::new(base_url, http, transport)),
        }
    }

    /// The transport (credentials, observer) all of a client's dialects share.
    pub(super) fn transport(&self) -> &std::sync::Arc<super::transport::Transport> {
        match self {
            Self::V0_0_40(api) => api.transport(),
            Self::V0_0_41(api) => api.transport(),
            Self::V0_0_42(api) => api.transport(),
            Self::V0_0_43(api) => api.transport(),
            Self::V0_0_44(api) => api.transport(),
            Self::V0_0_45(api) => api.transport(),
        }
    }

    pub(super) fn http(&self) -> &reqwest::Client {
        match self {
            Self::V0_0_40(api) => api.http(),
            Self::V0_0_41(api) => api.http(),
            Self::V0_0_42(api) => api.http(),
            Self::V0_0_43(api) => api.http(),
            Self::V0_0_44(api) => api.http(),
            Self::V0_0_45(api) => api.http(),
        }
    }

    /// Decode an answer as this version's client does (`crate::slurm::fuzzing`).
    pub(super) fn decode(
        version: ApiVersion,
        endpoint: replay::Endpoint,
        status: u16,
        body: &[u8],
    ) -> Result<replay::Decoded, SlurmError> {
        match version {
            ApiVersion::V0_0_40 => v0_0_40::decode(endpoint, status, body),
            ApiVersion::V0_0_41 => v0_0_41::decode(endpoint, status, body),
            ApiVersion::V0_0_42 => v0_0_42::decode(endpoint, status, body),
            ApiVersion::V0_0_43 => v0_0_43::decode(endpoint, status, body),
            ApiVersion::V0_0_44 => v0_0_44::decode(endpoint, status, body),
            ApiVersion::V0_0_45 => v0_0_45::decode(endpoint, status, body),
        }
    }
}

/// `impl Envelope` for generated response types that carry `meta`, `errors` and `warnings`
/// (used inside the version modules, where `api_errors` and friends are in scope).
macro_rules! envelope {
    // A submit's answer: its `job_id` says which job was made, errors or not (`made`, in the
    // version's module).
    (submit: $ty:ty) => {
        impl $crate::slurm::call::Envelope for $ty {
            fn errors(&self) -> Vec<$crate::slurm::error::ApiError> {
                api_errors(&self.errors, from_slurmrestd(&self.meta))
            }
            fn warnings(&self) -> Vec<String> {
                api_warnings(&self.warnings, from_slurmrestd(&self.meta))
            }
            fn job_made(&self) -> Option<$crate::slurm::types::Submitted> {
                made(self)
            }
            fn served_cluster(&self) -> Option<String> {
                served_cluster(&self.meta)
            }
            const SUBMIT: bool = true;
        }
    };
    ($($ty:ty),* $(,)?) => {$(
        impl $crate::slurm::call::Envelope for $ty {
            fn errors(&self) -> Vec<$crate::slurm::error::ApiError> {
                api_errors(&self.errors, from_slurmrestd(&self.meta))
            }
            fn warnings(&self) -> Vec<String> {
                api_warnings(&self.warnings, from_slurmrestd(&self.meta))
            }
            fn served_cluster(&self) -> Option<String> {
                served_cluster(&self.meta)
            }
        }
    )*};
}
pub(crate) use envelope;

/// Whether a data parser name was given: every answer slurmrestd renders names one
/// (`data_parser/v0.0.42`); an unrelated service's JSON does not.
pub(crate) fn from_data_parser(name: &str) -> bool {
    !name.trim().is_empty()
}

/// slurmrestd's text, or nothing when the body is not slurmrestd's.
pub(crate) fn text(value: &Option<String>, slurmrestd: bool) -> String {
    match value {
        Some(text) if slurmrestd => text.clone(),
        _ => String::new(),
    }
}

pub(crate) fn non_empty(value: &Option<String>) -> Option<String> {
    value
        .as_ref()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// A time limit in minutes (a uint32 in Slurm). A number outside u32 is not one Slurm sends: no
/// limit known, rather than an overflowing `minutes * 60`.
pub(crate) fn minutes(value: Option<i64>) -> Option<std::time::Duration> {
    let minutes = u32::try_from(value?).ok()?;
    Some(std::time::Duration::from_secs(u64::from(minutes) * 60))
}

/// slurmdbd's `start_time` for a search from `since` on, relative to slurmrestd's clock
/// (`now-<seconds>`, or `now+<seconds>` for a time ahead, which the query encodes as `%2B`):
/// v0.0.40 and v0.0.41 refuse a UNIX timestamp there (HTTP 422, "Parsing of … for timestamp
/// failed", measured on 24.11), every version takes this (24.11 and 26.05), and it needs no
/// time zone (a date would be read in slurmrestd's).
pub(crate) fn since_param(since: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let age = (now - since).num_seconds();
    if age >= 0 {
        format!("now-{age}")
    } else {
        format!("now+{}", age.unsigned_abs())
    }
}

/// slurmrestd's job description as JSON: typed fields first, then `extra` on top. The same in
/// every version; [`typed_body`] decodes it into one version's type.
pub(crate) fn submit_body(request: &SubmitRequest) -> Result<Value, SlurmError> {
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
    // sbatch's --gres and --gpus-per-node are tres_per_node entries ("gres/"-prefixed), its
    // --gpus-per-task a tres_per_task one: each list is joined from every field that adds to it.
    let gres = request.gres.as_deref().map(|gres| {
        gres.split(',')
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
            .join(",")
    });
    let gpus = |count: &Option<String>| count.as_ref().map(|n| format!("gres/gpu:{n}"));
    let tres_lists = [
        (
            "tres_per_node",
            [
                request.tres_per_node.clone(),
                gres,
                gpus(&request.gpus_per_node),
            ],
        ),
        (
            "tres_per_task",
            [
                request.tres_per_task.clone(),
                None,
                gpus(&request.gpus_per_task),
            ],
        ),
    ];
    for (key, parts) in tres_lists {
        let list: Vec<String> = parts
            .into_iter()
            .flatten()
            .filter(|part| !part.trim().is_empty())
            .collect();
        if !list.is_empty() {
            put(key, json!(list.join(",")));
        }
    }
    if let Some(tasks) = request.tasks {
        put("tasks", json!(tasks));
    }
    if let Some(cpus) = request.cpus_per_task {
        put("cpus_per_task", json!(cpus));
    }
    if let Some(tasks) = request.tasks_per_node {
        put("tasks_per_node", json!(tasks));
    }
    if let Some(exclusive) = request.exclusive {
        if request.extra.contains_key("shared") {
            return Err(invalid(
                "job option shared and exclusive both say how the nodes are shared: set one".into(),
            ));
        }
        put("shared", json!([exclusive.shared_flag()]));
    }
    if let Some(mib) = request.memory_per_cpu_mib {
        if request.memory_per_node_mib.is_some() {
            // sbatch refuses --mem with --mem-per-cpu; slurmctld would keep only one.
            return Err(invalid(
                "memory per node and memory per CPU exclude each other: set one".into(),
            ));
        }
        put(
            "memory_per_cpu",
            json!({"set": true, "infinite": false, "number": mib}),
        );
    }
    if let Some(mib) = request.memory_per_node_mib {
        put(
            "memory_per_node",
            json!({"set": true, "infinite": false, "number": mib}),
        );
    }
    if let Some(limit) = request.time_limit {
        put("time_limit", time_limit(limit));
    }
    if request.hold {
        put("hold", json!(true));
    }
    if let Some(nice) = request.nice {
        put("nice", json!(nice));
    }
    for (key, value) in &request.extra {
        // Whoever builds the request, privileged fields never reach slurmrestd.
        if let Some(reason) = super::types::extra_option_refusal(key) {
            return Err(invalid(format!("job option {key} {reason}")));
        }
        job.insert(key.clone(), value.clone());
    }
    Ok(json!({ "job": Value::Object(job) }))
}

/// A time limit as slurmrestd takes it: whole minutes, rounded up, at least one.
fn time_limit(limit: std::time::Duration) -> Value {
    let minutes = limit.as_secs().div_ceil(60).max(1);
    json!({"set": true, "infinite": false, "number": minutes})
}

/// The job description of an in-place update (`POST /job/{id}`): only the fields it changes,
/// bare (slurmrestd ignores a `{"job": ...}` wrapper here, with a warning).
pub(crate) fn update_body(update: &JobUpdate) -> Map<String, Value> {
    let mut job = Map::new();
    if let Some(limit) = update.time_limit {
        job.insert("time_limit".into(), time_limit(limit));
    }
    for (key, value) in [
        ("partition", &update.partition),
        ("account", &update.account),
        ("qos", &update.qos),
    ] {
        if let Some(value) = value {
            job.insert(key.into(), json!(value));
        }
    }
    if let Some(nice) = update.nice {
        job.insert("nice".into(), json!(nice));
    }
    if let Some(hold) = update.hold {
        job.insert("hold".into(), json!(hold));
    }
    job
}

/// `body` (an [`update_body`]) decoded into `version`'s job description; a field this version
/// does not take is refused by name rather than dropped.
pub(crate) fn typed_update<T>(
    body: Map<String, Value>,
    version: ApiVersion,
) -> Result<T, SlurmError>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let wrapped = json!({ "job": Value::Object(body) });
    let typed: Wrapped<T> = typed_body(wrapped, &SubmitRequest::default(), version)?;
    Ok(typed.job)
}

/// `{"job": T}`, to check an update's fields as a submit's are.
#[derive(serde::Serialize, serde::Deserialize)]
struct Wrapped<T> {
    job: T,
}

/// `body` decoded into `version`'s generated job description, so a wrongly typed extra field
/// fails here, with its name, not in Slurm; a field this version does not know (an option a
/// newer Slurm added, or a typo) is refused by name rather than dropped silently.
pub(crate) fn typed_body<T>(
    body: Value,
    request: &SubmitRequest,
    version: ApiVersion,
) -> Result<T, SlurmError>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let invalid = |detail: String| SlurmError::InvalidRequest { detail };
    let sent: Vec<String> = body
        .get("job")
        .and_then(Value::as_object)
        .map(|job| {
            job.iter()
                .filter(|(_, value)| !value.is_null())
                .map(|(key, _)| key.clone())
                .collect()
        })
        .unwrap_or_default();
    let typed: T = serde_json::from_value(body)
        .map_err(|e| invalid(format!("invalid job description: {e}")))?;
    let round_trip = serde_json::to_value(&typed).map_err(|e| invalid(e.to_string()))?;
    let known = round_trip.get("job").and_then(Value::as_object);
    for key in sent {
        if known.is_none_or(|k| !k.contains_key(&key)) {
            // A typed option is the operator's own field; an extra one is the user's.
            let whose = if request.extra.contains_key(&key) {
                "unknown job description field"
            } else {
                "job option not supported by this slurmrestd:"
            };
            return Err(invalid(format!("{whose} {key:?} (REST API {version})")));
        }
    }
    Ok(typed)
}

/// `DELETE /job/{id}` from v0.0.42 on: `openapi_kill_job_resp`, one `status[]` entry per job
/// with its own error (slurmrestd answers 200 even when the signal failed).
macro_rules! cancel_by_status {
    () => {
        type KillResp = api::OpenapiKillJobResp;

        $crate::slurm::dialect::envelope!(api::OpenapiKillJobResp);

        fn cancel_failures(resp: &KillResp) -> Vec<ApiError> {
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
    };
}
pub(crate) use cancel_by_status;

/// `DELETE /job/{id}` before v0.0.42: a plain `openapi_resp`, whose `errors[]` the call
/// already checked; there is no per-job status to read.
macro_rules! cancel_by_errors {
    () => {
        type KillResp = api::OpenapiResp;

        fn cancel_failures(_resp: &KillResp) -> Vec<ApiError> {
            Vec::new()
        }
    };
}
pub(crate) use cancel_by_errors;

/// `/ping` before v0.0.42: `pinged: "UP"` (no `responding`). Any controller that answers: a
/// backup that took over from a primary that is down serves as well.
macro_rules! responding_by_pinged {
    () => {
        fn controller_responding(resp: &api::OpenapiPingArrayResp) -> bool {
            resp.pings
                .iter()
                .flat_map(|p| p.0.iter())
                .any(|p| p.pinged.as_deref() == Some("UP"))
        }
    };
}
pub(crate) use responding_by_pinged;

/// `/ping` from v0.0.42 to v0.0.44: `responding`. Any controller, the primary or a backup that
/// took over from it.
macro_rules! responding_by_flag {
    () => {
        fn controller_responding(resp: &api::OpenapiPingArrayResp) -> bool {
            resp.pings
                .iter()
                .flat_map(|p| p.0.iter())
                .any(|p| p.responding == Some(true))
        }
    };
}
pub(crate) use responding_by_flag;

/// slurmdbd's job record from v0.0.41 on names the output files, expanded where it can.
macro_rules! accounting_output_files {
    () => {
        fn accounting_output(j: &api::Job) -> (Option<String>, Option<String>) {
            (
                non_empty(&j.stdout_expanded).or_else(|| non_empty(&j.stdout)),
                non_empty(&j.stderr_expanded).or_else(|| non_empty(&j.stderr)),
            )
        }
    };
}
pub(crate) use accounting_output_files;

#[cfg(test)]
mod tests {
    /// A search's start relative to slurmrestd's clock, either way.
    #[test]
    fn a_search_start_is_relative_to_slurmrestds_clock() {
        let now = DateTime::from_timestamp(1_000_000, 0).unwrap();
        let day = chrono::TimeDelta::days(1);
        assert_eq!(super::since_param(now - day, now), "now-86400");
        assert_eq!(super::since_param(now, now), "now-0");
        assert_eq!(super::since_param(now + day, now), "now+86400");
    }

    use super::*;
    use crate::slurm::types::Exclusive;

    /// With HA slurmctld, the primary down and a backup in control: slurmctld answers, in
    /// every version's words. Nobody answering is not responding.
    #[test]
    fn a_backup_controller_in_control_is_a_responding_controller() {
        let ping = |primary: bool, backup: bool| {
            let entry = |host: &str, up: bool, first: bool| {
                serde_json::json!({
                    "hostname": host, "pinged": if up { "UP" } else { "DOWN" },
                    "responding": up, "latency": 100,
                    "mode": if first { "primary" } else { "backup1" }, "primary": first,
                })
            };
            serde_json::to_vec(&serde_json::json!({
                "pings": [entry("ctl-a", primary, true), entry("ctl-b", backup, false)],
                "meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}},
                "errors": [], "warnings": [],
            }))
            .unwrap()
        };
        for version in ApiVersion::ALL {
            let responding = |body: Vec<u8>| match Dialect::decode(
                version,
                replay::Endpoint::Ping,
                200,
                &body,
            ) {
                Ok(replay::Decoded::Responding(r)) => r,
                other => panic!("{version}: {other:?}"),
            };
            assert!(responding(ping(true, false)), "{version}: primary");
            assert!(
                responding(ping(false, true)),
                "{version}: backup in control"
            );
            assert!(!responding(ping(false, false)), "{version}: none");
        }
    }

    fn request() -> SubmitRequest {
        SubmitRequest {
            script: "#!/bin/sh\ntrue\n".into(),
            working_directory: "/tmp".into(),
            ..SubmitRequest::default()
        }
    }

    /// Two fields for one job setting are refused rather than one silently winning.
    #[test]
    fn fields_that_say_one_thing_twice_are_refused() {
        let mut both_memories = request();
        both_memories.memory_per_node_mib = Some(1024);
        both_memories.memory_per_cpu_mib = Some(256);
        let mut exclusive_and_shared = request();
        exclusive_and_shared.exclusive = Some(Exclusive::Node);
        exclusive_and_shared
            .extra
            .insert("shared".into(), json!(["oversubscribe"]));
        for (bad, names) in [
            (both_memories, "memory per node and memory per CPU"),
            (exclusive_and_shared, "shared and exclusive"),
        ] {
            let err = submit_body(&bad).unwrap_err().to_string();
            assert!(err.contains(names), "{err}");
        }
        // Each alone is taken.
        let mut shared = request();
        shared
            .extra
            .insert("shared".into(), json!(["oversubscribe"]));
        assert_eq!(
            submit_body(&shared).unwrap()["job"]["shared"],
            json!(["oversubscribe"])
        );
        let mut per_cpu = request();
        per_cpu.memory_per_cpu_mib = Some(256);
        let job = submit_body(&per_cpu).unwrap()["job"].clone();
        assert_eq!(job["memory_per_cpu"]["number"], 256);
        assert!(job.get("memory_per_node").is_none());
    }

    /// Without GPUs or gres the tres lists are not sent at all (an empty string is not "none").
    #[test]
    fn empty_tres_lists_are_left_out() {
        let job = submit_body(&request()).unwrap()["job"].clone();
        assert!(job.get("tres_per_node").is_none(), "{job}");
        assert!(job.get("tres_per_task").is_none(), "{job}");
        let mut gpus = request();
        gpus.gpus_per_task = Some("2".into());
        let job = submit_body(&gpus).unwrap()["job"].clone();
        assert_eq!(job["tres_per_task"], "gres/gpu:2");
        assert!(job.get("tres_per_node").is_none(), "{job}");
    }
}

#[cfg(test)]
mod accounting_tests {
    use crate::slurm::fuzzing::{Decoded, Endpoint, decode};

    /// A slurmdbd several clusters share answers with each one's job of an id: only the records
    /// of the cluster this slurmrestd serves (`meta.slurm.cluster`) are its jobs. slurmrestd
    /// 24.11's recorded answer, with a second record made another cluster's.
    #[test]
    fn accounting_keeps_only_the_records_of_its_own_cluster() {
        let mut answer: serde_json::Value = serde_json::from_str(include_str!(
            "../../controller/slurmjob/act/slurmdb_job_uncommented.json"
        ))
        .unwrap();
        assert_eq!(answer["meta"]["slurm"]["cluster"], "local");
        let mut other = answer["jobs"][0].clone();
        other["cluster"] = "elsewhere".into();
        other["user"] = "mallory".into();
        answer["jobs"].as_array_mut().unwrap().push(other);
        let users = |answer: &serde_json::Value| {
            let body = serde_json::to_vec(answer).unwrap();
            let Ok(Decoded::Accounting(jobs)) = decode(Endpoint::Accounting, 200, &body) else {
                panic!("not decoded as accounting records");
            };
            jobs.into_iter()
                .map(|j| j.user_name.unwrap_or_default())
                .collect::<Vec<_>>()
        };
        assert_eq!(users(&answer), ["slurm"]);
        // An answer that does not say which cluster it serves keeps every record.
        answer["meta"]["slurm"]
            .as_object_mut()
            .unwrap()
            .remove("cluster");
        assert_eq!(users(&answer), ["slurm", "mallory"]);
    }
}
