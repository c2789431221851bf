//! The shared in-memory view of each Slurm cluster, and the change events derived from it.
//!
//! One writer per cluster (its poller) replaces the whole [`ClusterState`] behind an `Arc` on every
//! poll; readers (reconcilers) take the current `Arc` from a `watch` channel and never block on
//! I/O or on the writer. Controllers read Slurm state from here; only actions call slurmrestd.
//!
//! What the index holds, and why that much and no more (10 000 jobs and 1 000 nodes fit in a few
//! MiB):
//! - every node, in full ([`Node`] is small and the NodeSet controller needs all of it);
//! - the full record of every job that is **ours**: its `comment` starts with [`JOB_TAG_PREFIX`]
//!   (the SlurmJob controller's ownership tag), array tasks and a pending array's meta record
//!   included;
//! - of everyone else's jobs only what the NodeSet controller needs: per node, how many jobs run
//!   there and until when at the latest ([`NodeJobs`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::watch;

use crate::crd::Cluster;
use crate::slurm::types::{Job, Node};

/// A job is **ours** (submitted for a SlurmJob) exactly when its `comment` starts with this. The
/// full tag is `slurm.rs/uid=<uid>,generation=<n>` (see `slurmjob::tag`).
pub const JOB_TAG_PREFIX: &str = "slurm.rs/uid=";

/// Whether a job with this comment is ours (see [`JOB_TAG_PREFIX`]).
pub fn is_ours(comment: Option<&str>) -> bool {
    comment.is_some_and(|c| c.starts_with(JOB_TAG_PREFIX))
}

/// What the poller of one cluster last saw.
#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    /// Every node slurmctld knows, by name.
    pub nodes: Arc<BTreeMap<String, Node>>,
    /// Our jobs (see [`is_ours`]), by Slurm job id: plain jobs, array task records and a pending
    /// array's meta record (whose `array_task_string` lists the tasks not started yet).
    /// Other users' jobs are not kept; see `node_jobs`.
    pub jobs: Arc<BTreeMap<u32, Job>>,
    /// Per node, the jobs (anyone's) running on it. A node without an entry runs no job the
    /// poller knows of.
    pub node_jobs: Arc<BTreeMap<String, NodeJobs>>,
    /// How many job records slurmctld holds (anyone's, finished ones until MinJobAge included).
    pub jobs_total: usize,
    /// When the node list was last confirmed complete and error-free. Decisions that must fail
    /// closed (deleting a drained node's pod) require this to be recent.
    pub nodes_synced_at: Option<DateTime<Utc>>,
    /// When the job list was last confirmed complete and error-free: every job slurmctld holds
    /// was known, with its owner, and every one of ours up to date as of that time. Looking for a
    /// job by its tag before submitting must wait for this (fail closed).
    pub jobs_synced_at: Option<DateTime<Utc>>,
    pub health: Health,
    /// Poll cycles finished, successful or not, since the poller started.
    pub polls: u64,
}

impl ClusterState {
    /// The records of job `job_id`: the job itself, and for an array (by its array job id) every
    /// task record and the meta record. Empty when the index does not hold it.
    pub fn job_records(&self, job_id: u32) -> Vec<&Job> {
        self.jobs
            .values()
            .filter(|j| j.job_id == job_id || j.array_job_id == Some(job_id))
            .collect()
    }

    /// The ids of our jobs carrying exactly `tag` (plain job ids, or array job ids), lowest first.
    pub fn tagged(&self, tag: &str) -> Vec<u32> {
        let mut ids: Vec<u32> = self
            .jobs
            .values()
            .filter(|j| j.comment.as_deref() == Some(tag))
            .map(|j| j.array_job_id.unwrap_or(j.job_id))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

/// The jobs running on one node, anyone's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeJobs {
    /// Jobs running (or suspended) on the node; at least 1.
    pub running: u32,
    /// When the last of them reaches its time limit: the maximum over the running jobs of
    /// start time + time limit. `None` when one of them has no time limit (it may run forever).
    pub deadline: Option<DateTime<Utc>>,
}

/// Whether the poller can talk to slurmrestd.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Health {
    /// No poll has finished yet.
    #[default]
    Unknown,
    Up {
        since: DateTime<Utc>,
    },
    /// The last poll failed. `reason` is a stable PascalCase category (`SlurmError::category`).
    Down {
        since: DateTime<Utc>,
        reason: &'static str,
        message: String,
    },
}

impl Health {
    pub fn is_up(&self) -> bool {
        matches!(self, Self::Up { .. })
    }
}

/// Read side of one cluster's index. Cheap to clone.
pub type IndexReader = watch::Receiver<Arc<ClusterState>>;
/// Write side of one cluster's index: owned by exactly one poller.
pub type IndexWriter = watch::Sender<Arc<ClusterState>>;

/// A new, empty index.
pub fn new_index() -> (IndexWriter, IndexReader) {
    watch::channel(Arc::new(ClusterState::default()))
}

/// A change in a Slurm cluster that may need a reconcile. Emitted by the pollers on one broadcast
/// channel, after the index shows the change; each controller maps the events it cares about to
/// its own objects. Exactly when each fires: `poller::diff`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlurmEvent {
    /// One of our jobs (see [`is_ours`]) appeared, or changed in a way a controller would see
    /// (state, reason, exit, nodes, times, limit, comment, array tasks). `comment` carries the
    /// operator's ownership tag. Other users' jobs produce no job events.
    JobChanged {
        cluster: ObjectRef<Cluster>,
        job_id: u32,
        comment: Option<String>,
    },
    /// One of our jobs left the index: slurmctld no longer reports it (purged after MinJobAge),
    /// or its comment no longer carries our tag. `comment` is the last one seen.
    JobGone {
        cluster: ObjectRef<Cluster>,
        job_id: u32,
        comment: Option<String>,
    },
    /// A node appeared, its record changed (state, reason, resources, ...), or the jobs running
    /// on it changed ([`NodeJobs`]: count or deadline).
    NodeChanged {
        cluster: ObjectRef<Cluster>,
        node: String,
    },
    /// A node is no longer in slurmctld's node list.
    NodeGone {
        cluster: ObjectRef<Cluster>,
        node: String,
    },
    /// The poller reached slurmrestd for the first time (`up: true`) or failed to at first
    /// (`up: false`), or lost or regained it; never repeated while it stays down. Regaining it
    /// means every object of the cluster should be reconciled (its events may have been missed).
    HealthChanged {
        cluster: ObjectRef<Cluster>,
        up: bool,
    },
}

impl SlurmEvent {
    pub fn cluster(&self) -> &ObjectRef<Cluster> {
        match self {
            Self::JobChanged { cluster, .. }
            | Self::JobGone { cluster, .. }
            | Self::NodeChanged { cluster, .. }
            | Self::NodeGone { cluster, .. }
            | Self::HealthChanged { cluster, .. } => cluster,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::types::JobState;

    fn job(id: u32, array_job_id: Option<u32>, comment: &str) -> Job {
        Job {
            job_id: id,
            state: JobState::from_strings(&["PENDING"]),
            comment: Some(comment.to_owned()),
            array_job_id,
            ..Job::bare()
        }
    }

    #[test]
    fn ours_is_the_slurmjob_tag_prefix() {
        assert_eq!(JOB_TAG_PREFIX, crate::slurmjob::tag::TAG_PREFIX);
        assert!(is_ours(Some(&crate::slurmjob::tag::tag("u", 1))));
        for foreign in [None, Some(""), Some("slurm.rs/"), Some(" slurm.rs/uid=x")] {
            assert!(!is_ours(foreign), "{foreign:?}");
        }
    }

    #[test]
    fn records_and_tags_of_plain_jobs_and_arrays() {
        let a = "slurm.rs/uid=a,generation=1";
        let b = "slurm.rs/uid=b,generation=1";
        let state = ClusterState {
            jobs: Arc::new(
                [
                    job(3, None, a),
                    job(10, Some(10), b),
                    job(11, Some(10), b),
                    job(12, Some(10), b),
                    job(13, None, a),
                ]
                .into_iter()
                .map(|j| (j.job_id, j))
                .collect(),
            ),
            ..ClusterState::default()
        };
        let ids = |records: Vec<&Job>| records.iter().map(|j| j.job_id).collect::<Vec<_>>();
        assert_eq!(ids(state.job_records(3)), vec![3]);
        assert_eq!(ids(state.job_records(10)), vec![10, 11, 12]);
        assert_eq!(ids(state.job_records(11)), vec![11]);
        assert!(state.job_records(99).is_empty());
        assert_eq!(
            state.tagged(a),
            vec![3, 13],
            "a duplicated tag shows both, lowest first"
        );
        assert_eq!(state.tagged(b), vec![10]);
        assert!(state.tagged("slurm.rs/uid=c,generation=1").is_empty());
    }
}
