//! Not an API: the hook `fuzz/` and `tests/fuzz_corpus.rs` reach response decoding through,
//! because the generated types and `convert` are private to this module. It runs the steps
//! `SlurmClient` runs on a body — serde_json into the generated type (as progenitor does), the
//! `errors[]` check, `convert` — without HTTP. Not repeated: the client's fallbacks by HTTP status
//! alone when a failed answer holds no Slurm error number (`status_error`, which parses nothing).

use serde::de::DeserializeOwned;

use super::convert::{self, Envelope};
use super::error::{SlurmError, Subject, classify, decode_error};
use super::generated::types as api;
use super::types::{Changes, ClusterInfo, Job, JobStateEntry, Node, Partition, Submitted};

/// The job and node that the single-record calls ask for.
pub const JOB: u32 = 2;
pub const NODE: &str = "n1";

/// A slurmrestd call whose answer is decoded. `ALL`'s order is the fuzz input's header byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Ping,
    Diag,
    Nodes,
    Node,
    /// Drain, resume or delete a node: an answer with `errors[]` only.
    NodeUpdate,
    Partitions,
    Submit,
    Job,
    Jobs,
    JobsState,
    Cancel,
    Accounting,
}

impl Endpoint {
    pub const ALL: [Self; 12] = [
        Self::Ping,
        Self::Diag,
        Self::Nodes,
        Self::Node,
        Self::NodeUpdate,
        Self::Partitions,
        Self::Submit,
        Self::Job,
        Self::Jobs,
        Self::JobsState,
        Self::Cancel,
        Self::Accounting,
    ];
}

/// What a call decoded, in facade types.
#[derive(Debug)]
pub enum Decoded {
    Responding(bool),
    SlurmCluster(ClusterInfo),
    Nodes(Changes<Node>),
    Node(Box<Node>),
    Partitions(Vec<Partition>),
    Submitted(Submitted),
    Jobs(Vec<Job>),
    JobChanges(Changes<Job>),
    States(Vec<JobStateEntry>),
    /// A call that returns nothing went through (node update, cancel).
    Done,
    Accounting(Vec<Job>),
}

/// Decode `body`, an answer with HTTP `status` to `endpoint`, as the client does.
pub fn decode(endpoint: Endpoint, status: u16, body: &[u8]) -> Result<Decoded, SlurmError> {
    let none = Subject::None;
    let job = Subject::Job(JOB);
    Ok(match endpoint {
        Endpoint::Ping => {
            let resp: api::V0042OpenapiPingArrayResp = checked("ping", none, status, body)?;
            Decoded::Responding(convert::controller_responding(&resp))
        }
        Endpoint::Diag => {
            let resp: api::V0042OpenapiDiagResp = checked("diag", none, status, body)?;
            Decoded::SlurmCluster(convert::cluster_info(&resp, true))
        }
        Endpoint::Nodes => Decoded::Nodes(convert::node_changes(checked(
            "nodes", none, status, body,
        )?)?),
        Endpoint::Node => {
            let resp: api::V0042OpenapiNodesResp =
                checked("node", Subject::Node(NODE), status, body)?;
            let node = convert::nodes(resp.nodes)
                .into_iter()
                .find(|n| n.name == NODE)
                .ok_or_else(|| SlurmError::NotFound {
                    kind: "node",
                    name: NODE.to_owned(),
                })?;
            Decoded::Node(Box::new(node))
        }
        Endpoint::NodeUpdate => {
            let _: api::V0042OpenapiResp =
                checked("update_node", Subject::Node(NODE), status, body)?;
            Decoded::Done
        }
        Endpoint::Partitions => Decoded::Partitions(convert::partitions(checked(
            "partitions",
            none,
            status,
            body,
        )?)),
        Endpoint::Submit => Decoded::Submitted(convert::submitted(checked(
            "submit_job",
            none,
            status,
            body,
        )?)?),
        Endpoint::Job => {
            let resp: api::V0042OpenapiJobInfoResp = checked("job", job, status, body)?;
            let jobs = convert::jobs(resp.jobs);
            if jobs.is_empty() {
                return Err(SlurmError::NotFound {
                    kind: "job",
                    name: JOB.to_string(),
                });
            }
            Decoded::Jobs(jobs)
        }
        Endpoint::Jobs => {
            Decoded::JobChanges(convert::job_changes(checked("jobs", none, status, body)?)?)
        }
        Endpoint::JobsState => Decoded::States(convert::job_states(checked(
            "jobs_state",
            none,
            status,
            body,
        )?)),
        Endpoint::Cancel => {
            let resp: api::V0042OpenapiKillJobResp = checked("cancel_job", job, status, body)?;
            let failures = convert::cancel_failures(&resp);
            if !failures.is_empty() {
                return Err(classify("cancel_job", 200, job, failures));
            }
            Decoded::Done
        }
        Endpoint::Accounting => {
            let resp: api::V0042OpenapiSlurmdbdJobsResp =
                checked("accounting_job", job, status, body)?;
            Decoded::Accounting(convert::accounting_jobs(resp.jobs))
        }
    })
}

/// The body as `T` with its `errors[]` checked, or the error the client makes of it.
fn checked<T: DeserializeOwned + Envelope>(
    operation: &'static str,
    subject: Subject<'_>,
    status: u16,
    body: &[u8],
) -> Result<T, SlurmError> {
    let success = (200..300).contains(&status);
    match serde_json::from_slice::<T>(body) {
        Ok(value) if success => {
            let errors = value.errors();
            if errors.iter().any(|e| e.code != 0) {
                return Err(classify(operation, status, subject, errors));
            }
            let _ = value.warnings();
            Ok(value)
        }
        Ok(value) => Err(classify(operation, status, subject, value.errors())),
        Err(error) if success => Err(decode_error(operation, &error, Some(status))),
        Err(_) => Err(classify(
            operation,
            status,
            subject,
            convert::errors_from_bytes(body),
        )),
    }
}
