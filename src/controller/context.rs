//! What every reconcile gets: one cheap-to-clone `Context`, no globals.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::broadcast;

use crate::controller::Backoffs;
use crate::controller::slurmjob::drive::Submissions;
use crate::controller::slurmjob::output;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::state::index::SlurmEvent;
use crate::state::registry::ClusterRegistry;

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
    /// Per-object requeue delays after failed reconciles (all controllers).
    pub backoff: Arc<Backoffs>,
    /// Slurm jobs this process submitted, by ownership tag (SlurmJob controller; see
    /// `slurmjob::drive`).
    pub submissions: Arc<Submissions>,
    /// When this process started: a submit waits for a cluster index synced after this.
    pub started_at: DateTime<Utc>,
    /// Image of the SlurmJob output streamer Pods.
    pub output_image: String,
    /// Whether this replica may write (always, without leader election).
    pub leadership: Leadership,
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
            clusters: Arc::new(ClusterRegistry::with_observer(metrics.clone())),
            events,
            metrics,
            backoff: Arc::default(),
            submissions: Arc::default(),
            started_at: Utc::now(),
            output_image: output::DEFAULT_IMAGE.to_owned(),
            leadership: Leadership::always(),
        }
    }
}
