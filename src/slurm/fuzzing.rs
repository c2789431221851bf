//! Not an API: the hook `fuzz/` and `tests/fuzz_corpus.rs` reach response decoding through,
//! because the generated types and the dialects are private to this module. It runs the steps
//! `SlurmClient` runs on a body — serde_json into the generated type (as progenitor does), the
//! `errors[]` check, the conversions — without HTTP. Not repeated: the client's fallbacks by HTTP status
//! alone when a failed answer holds no Slurm error number (`status_error`, which parses nothing).

use serde::de::DeserializeOwned;

use super::call::Envelope;
use super::dialect::Dialect;
use super::error::{ApiError, SlurmError, Subject, classify, decode_error};
use super::types::{Changes, ClusterInfo, Job, JobStateEntry, Node, Partition, Submitted};
use super::version::ApiVersion;

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

/// Decode `body`, an answer with HTTP `status` to `endpoint`, as the client does when it
/// speaks v0.0.42 (the version of the recorded fixtures in `tests/fixtures/`).
pub fn decode(endpoint: Endpoint, status: u16, body: &[u8]) -> Result<Decoded, SlurmError> {
    decode_as(ApiVersion::V0_0_42, endpoint, status, body)
}

/// [`decode`] as the client does when it speaks `version`.
pub fn decode_as(
    version: ApiVersion,
    endpoint: Endpoint,
    status: u16,
    body: &[u8],
) -> Result<Decoded, SlurmError> {
    Dialect::decode(version, endpoint, status, body)
}

/// One answer to decode, with what the client knows about it.
pub(crate) struct Check<'a> {
    pub status: u16,
    pub body: &'a [u8],
    pub version: ApiVersion,
    pub errors_from_bytes: fn(&[u8]) -> Vec<ApiError>,
}

impl Check<'_> {
    /// The body as `T` with its `errors[]` checked, or the error the client makes of it.
    pub(crate) fn decode<T: DeserializeOwned + Envelope>(
        &self,
        operation: &'static str,
        subject: Subject<'_>,
    ) -> Result<T, SlurmError> {
        let status = self.status;
        let success = (200..300).contains(&status);
        match serde_json::from_slice::<T>(self.body) {
            Ok(value) if success => {
                let errors = value.errors();
                if errors.iter().any(|e| e.code != 0) {
                    return Err(classify(operation, status, subject, errors));
                }
                let _ = value.warnings();
                Ok(value)
            }
            Ok(value) => Err(classify(operation, status, subject, value.errors())),
            Err(error) if success => {
                Err(decode_error(operation, self.version, &error, Some(status)))
            }
            Err(_) => Err(classify(
                operation,
                status,
                subject,
                (self.errors_from_bytes)(self.body),
            )),
        }
    }
}
