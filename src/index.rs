//! The shared in-memory view of each Slurm cluster, and the change events derived from it.
//!
//! One writer per cluster (its poller) replaces the whole [`ClusterState`] behind an `Arc` on every
//! change; readers (reconcilers) take the current `Arc` from a `watch` channel and never block on
//! I/O or on the writer. Controllers read Slurm state from here; only actions call slurmrestd.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::watch;

use crate::crd::Cluster;
use crate::slurm::types::{Job, Node};

/// What the poller of one cluster last saw.
#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    /// Every node slurmctld knows, by name.
    pub nodes: Arc<BTreeMap<String, Node>>,
    /// Jobs the index keeps (see the poller for which), by Slurm job id.
    pub jobs: Arc<BTreeMap<u32, Job>>,
    /// When the node list was last confirmed complete and error-free. Decisions that must fail
    /// closed (deleting a drained node's pod) require this to be recent.
    pub nodes_synced_at: Option<DateTime<Utc>>,
    /// When the job list was last confirmed complete and error-free.
    pub jobs_synced_at: Option<DateTime<Utc>>,
    pub health: Health,
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
/// channel; each controller maps the events it cares about to its own objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlurmEvent {
    /// A job appeared or changed. `comment` carries the operator's ownership tag, if any.
    JobChanged {
        cluster: ObjectRef<Cluster>,
        job_id: u32,
        comment: Option<String>,
    },
    /// A job the index held is no longer reported by slurmctld (e.g. after MinJobAge).
    JobGone {
        cluster: ObjectRef<Cluster>,
        job_id: u32,
        comment: Option<String>,
    },
    /// A node appeared or its state, reason or resources changed.
    NodeChanged {
        cluster: ObjectRef<Cluster>,
        node: String,
    },
    /// A node is no longer in slurmctld's node list.
    NodeGone {
        cluster: ObjectRef<Cluster>,
        node: String,
    },
    /// The poller lost or regained slurmrestd. Regaining it means every object of the cluster
    /// should be reconciled (its events may have been missed).
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
