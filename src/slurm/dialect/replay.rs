//! Decoding a recorded answer without HTTP, as a dialect's client would (for
//! `crate::slurm::fuzzing`, which re-exports it): what each version's `decode` in `shared.rs`
//! is written against. Here, not in `fuzzing`, so that the dialects do not depend on the module
//! that depends on them.

use serde::de::DeserializeOwned;

use crate::slurm::call::{Envelope, made_in_bytes, made_or};
use crate::slurm::error::{ApiError, SlurmError, Subject, classify, decode_error};
use crate::slurm::types::{Changes, ClusterInfo, Job, JobStateEntry, Node, Partition, Submitted};
use crate::slurm::version::ApiVersion;

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
                    return Err(made_or(operation, status, value.job_made(), || {
                        classify(operation, status, subject, errors)
                    }));
                }
                let _ = value.warnings();
                Ok(value)
            }
            Ok(value) => Err(made_or(operation, status, value.job_made(), || {
                classify(operation, status, subject, value.errors())
            })),
            Err(error) if success => {
                Err(decode_error(operation, self.version, &error, Some(status)))
            }
            Err(_) => {
                let errors = (self.errors_from_bytes)(self.body);
                Err(made_or(
                    operation,
                    status,
                    made_in_bytes::<T>(self.body, &errors),
                    || classify(operation, status, subject, errors),
                ))
            }
        }
    }
}
