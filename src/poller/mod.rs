//! Per-cluster pollers: list Slurm jobs and nodes every poll interval, keep the cluster's index
//! current (single writer), and emit [`SlurmEvent`]s for what changed.
//!
//! PLACEHOLDER: the interface is final; the body is being written (issue 3).

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::reflector::ObjectRef;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::crd::Cluster;
use crate::index::{IndexReader, SlurmEvent, new_index};
use crate::metrics::Metrics;
use crate::slurm::SlurmClient;

/// How a poller runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollerConfig {
    pub interval: Duration,
}

/// A running poller. Dropping it stops the poller.
#[derive(Debug)]
pub struct PollerHandle {
    cancel: CancellationToken,
}

impl Drop for PollerHandle {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Start the poller of `cluster`. Returns its handle and the read side of its index.
pub fn spawn(
    cluster: ObjectRef<Cluster>,
    client: SlurmClient,
    config: &PollerConfig,
    events: broadcast::Sender<SlurmEvent>,
    metrics: Arc<Metrics>,
) -> (PollerHandle, IndexReader) {
    let (_writer, reader) = new_index();
    let _ = (cluster, client, config, events, metrics);
    (
        PollerHandle {
            cancel: CancellationToken::new(),
        },
        reader,
    )
}
