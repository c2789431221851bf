//! The per-cluster map: one slurmrestd client, one index and one poller per `SlurmCluster` object.
//!
//! The SlurmCluster controller is the only writer; other controllers look clients and indexes up by
//! the SlurmCluster they reference. The lock is a plain `std` lock, never held across an `.await`.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kube::runtime::reflector::ObjectRef;

use crate::crd::SlurmCluster;
use crate::slurm::{ClientConfig, Credentials, RequestObserver, SlurmClient, SlurmError};
use crate::state::index::IndexReader;
use crate::state::poller::{PollerConfig, PollerHandle};

/// What a reconciler needs of one registered cluster.
#[derive(Debug, Clone)]
pub struct ClusterHandle {
    pub client: SlurmClient,
    pub index: IndexReader,
}

/// How the client and poller of a cluster are set up, minus the credentials (which can rotate
/// in place). A change here rebuilds the client and restarts the poller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// Everything in `ClientConfig` that matters, in a comparable form.
    pub fingerprint: String,
    pub poller: PollerConfig,
}

/// What `ClusterRegistry::upsert` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upserted {
    Created,
    /// Same connection; new credentials swapped into the existing client.
    CredentialsRotated,
    /// Connection settings changed: a new client and poller replaced the old ones.
    Replaced,
}

struct Entry {
    handle: ClusterHandle,
    settings: ConnectionSettings,
    // Dropping the handle stops the poller.
    _poller: PollerHandle,
}

/// Clients, indexes and pollers by SlurmCluster.
#[derive(Default)]
pub struct ClusterRegistry {
    entries: RwLock<HashMap<ObjectRef<SlurmCluster>, Entry>>,
    /// Sees every slurmrestd request of every client made here (the request metrics).
    observer: Option<Arc<dyn RequestObserver>>,
}

impl std::fmt::Debug for ClusterRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = self.entries.read().map(|e| e.len()).unwrap_or_default();
        f.debug_struct("ClusterRegistry")
            .field("clusters", &count)
            .finish()
    }
}

impl ClusterRegistry {
    /// A registry whose clients report each request to `observer`.
    pub fn with_observer(observer: Arc<dyn RequestObserver>) -> Self {
        Self {
            entries: RwLock::default(),
            observer: Some(observer),
        }
    }

    pub fn get(&self, cluster: &ObjectRef<SlurmCluster>) -> Option<ClusterHandle> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        entries.get(cluster).map(|e| e.handle.clone())
    }

    pub fn contains(&self, cluster: &ObjectRef<SlurmCluster>) -> bool {
        self.get(cluster).is_some()
    }

    /// Register `cluster` with these settings and credentials, or update its registration:
    /// credentials alone are swapped in place; other changes replace client and poller.
    /// `spawn` starts a poller for a new client.
    pub fn upsert(
        &self,
        cluster: &ObjectRef<SlurmCluster>,
        config: ClientConfig,
        settings: ConnectionSettings,
        credentials: Arc<Credentials>,
        spawn: impl FnOnce(SlurmClient, &PollerConfig) -> (PollerHandle, IndexReader),
    ) -> Result<Upserted, SlurmError> {
        {
            let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
            if let Some(entry) = entries.get(cluster)
                && entry.settings == settings
            {
                entry.handle.client.set_credentials(credentials);
                return Ok(Upserted::CredentialsRotated);
            }
        }
        let client = SlurmClient::with_observer(config, credentials, self.observer.clone())?;
        let (poller, index) = spawn(client.clone(), &settings.poller);
        let entry = Entry {
            handle: ClusterHandle { client, index },
            settings,
            _poller: poller,
        };
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        let previous = entries.insert(cluster.clone(), entry);
        Ok(if previous.is_some() {
            Upserted::Replaced
        } else {
            Upserted::Created
        })
    }

    /// Forget `cluster`: its poller stops. Returns whether it was registered.
    pub fn remove(&self, cluster: &ObjectRef<SlurmCluster>) -> bool {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        entries.remove(cluster).is_some()
    }

    pub fn clusters(&self) -> Vec<ObjectRef<SlurmCluster>> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        entries.keys().cloned().collect()
    }
}
