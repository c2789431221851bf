//! What every reconcile gets: one cheap-to-clone `Context`, no globals. A controller with state
//! of its own (the SlurmJob controller's submissions) keeps it in its own context around this.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use kube::runtime::events::{Recorder, Reporter};

use super::kit::Backoffs;
use crate::crd::FIELD_MANAGER;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::state::events::EventHub;
use crate::state::registry::ClusterRegistry;

/// The namespace SlurmCluster credentials are read from when nothing else is said: the one the
/// chart installs the operator into by default.
pub const DEFAULT_CREDENTIALS_NAMESPACE: &str = "slurm-operator";

/// Capacity of each poller's event channel; a consumer that falls this far behind one poller
/// resyncs the objects of that poller's SlurmClusters (and no others).
pub const EVENT_CHANNEL_CAPACITY: usize = 4096;

#[derive(Clone)]
pub struct Context {
    pub client: kube::Client,
    pub recorder: Recorder,
    pub clusters: Arc<ClusterRegistry>,
    /// The pollers' event feeds, one per poller; controllers subscribe here.
    pub events: Arc<EventHub>,
    pub metrics: Arc<Metrics>,
    /// Per-object requeue delays after failed reconciles (all controllers).
    pub backoff: Arc<Backoffs>,
    /// When this process started: a submit waits for a cluster index synced after this.
    pub started_at: DateTime<Utc>,
    /// Whether this replica may write (always, without leader election).
    pub leadership: Leadership,
    /// The one namespace SlurmClusters' Secrets and ConfigMaps are read from (the platform
    /// admin's): tenants can neither name nor plant credentials.
    pub credentials_namespace: String,
    /// The slurmrestd origins (`scheme://host:port`) a SlurmCluster may name; empty: any.
    pub allowed_endpoints: Vec<url::Url>,
}

impl Context {
    pub fn new(client: kube::Client, metrics: Arc<Metrics>) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let events = Arc::new(EventHub::new(EVENT_CHANNEL_CAPACITY));
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            clusters: Arc::new(ClusterRegistry::new(events.clone(), Some(metrics.clone()))),
            events,
            metrics,
            backoff: Arc::default(),
            started_at: Utc::now(),
            leadership: Leadership::always(),
            credentials_namespace: DEFAULT_CREDENTIALS_NAMESPACE.to_owned(),
            allowed_endpoints: Vec::new(),
        }
    }
}
