//! What every reconcile gets: one cheap-to-clone `Context`, no globals.

use std::sync::Arc;

use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::broadcast;

use crate::index::SlurmEvent;
use crate::metrics::Metrics;
use crate::registry::ClusterRegistry;

/// The one field manager for every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "slurm-operator";

/// Capacity of the Slurm event channel; a consumer that falls this far behind resyncs everything.
pub const EVENT_CHANNEL_CAPACITY: usize = 4096;

#[derive(Clone)]
pub struct Context {
    pub client: kube::Client,
    pub recorder: Recorder,
    pub clusters: Arc<ClusterRegistry>,
    pub events: broadcast::Sender<SlurmEvent>,
    pub metrics: Arc<Metrics>,
}

impl Context {
    pub fn new(client: kube::Client, metrics: Arc<Metrics>) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let (events, _) = broadcast::channel(EVENT_CHANNEL_CAPACITY);
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            clusters: Arc::new(ClusterRegistry::default()),
            events,
            metrics,
        }
    }
}
