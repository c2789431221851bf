//! The per-cluster map: which slurmrestd client, index and poller each `SlurmCluster` uses.
//!
//! SlurmClusters naming the same slurmrestd with the same connection settings and the same
//! credentials identity ([`Credentials::same_identity`]: Slurm user and key material) share one
//! **connection**: one client, one poller, one index, reference-counted and torn down with the
//! last SlurmCluster (eight objects on one slurmrestd made eight pollers before). Access grants
//! are per SlurmCluster and checked per SlurmJob, so sharing a poller across grants is fine; a
//! client is never shared across credentials.
//!
//! Each connection also bounds its concurrent Slurm requests from reconciles
//! ([`ClusterHandle::try_io`]): a slow or hostile slurmrestd holds at most
//! [`IO_PER_CONNECTION`] reconcile slots, never all of a controller's.
//!
//! The SlurmCluster controller is the only writer; other controllers look clients and indexes up by
//! the SlurmCluster they reference. The lock is a plain `std` lock, never held across an `.await`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

use kube::runtime::reflector::ObjectRef;
use tokio::sync::broadcast;

use crate::crd::SlurmCluster;
use crate::metrics::Metrics;
use crate::slurm::{ClientConfig, Credentials, SlurmClient, SlurmError};
use crate::state::events::{EventHub, Feed};
use crate::state::index::{IndexReader, SlurmEvent};
use crate::state::poller::{PollerConfig, PollerHandle};
use crate::state::slots::{RequestSlot, RequestSlots};

/// Slurm requests that reconciles may have in flight at once on one connection. A reconcile
/// that finds them all taken requeues instead of waiting in one of its controller's
/// `kit::MAX_CONCURRENT_RECONCILES` slots; with the client's request timeout this bounds what a
/// slurmrestd that never answers can hold: 4 of 16 slots, for at most one timeout each.
pub const IO_PER_CONNECTION: usize = 4;

/// How many deleted SlurmClusters' uids [`ClusterRegistry::gone`] remembers: SlurmClusters are
/// an admin's few objects, and a reconcile outlives its cluster's deletion by seconds.
pub const GONE_KEPT: usize = 256;

/// Accounting searches by job name one namespace may have in flight on one connection. Such a
/// search holds a request slot while slurmdbd answers, and its answer grows with how many jobs
/// carry the name, which a tenant chooses: without this bound, one namespace's SlurmJobs could
/// hold every slot of the connection, and every other team's requests would wait.
pub const SEARCHES_PER_NAMESPACE: usize = 1;

/// Accounting searches by job name every namespace together may have in flight on one
/// connection: one fewer than its request slots, so that a team with several namespaces, or
/// several teams, searching at once leave the other requests (submits, cancels) a slot.
pub const SEARCHES_PER_CONNECTION: usize = IO_PER_CONNECTION - 1;
const _: () = assert!(SEARCHES_PER_CONNECTION > 0 && SEARCHES_PER_CONNECTION < IO_PER_CONNECTION);

/// What a reconciler needs of one registered cluster.
#[derive(Debug, Clone)]
pub struct ClusterHandle {
    pub client: SlurmClient,
    pub index: IndexReader,
    /// The connection's request slots ([`IO_PER_CONNECTION`]), shared by the SlurmClusters on it.
    io: Arc<RequestSlots>,
    /// Each namespace's accounting search slots on this connection
    /// ([`SEARCHES_PER_NAMESPACE`]), made at its first search.
    searches: Arc<std::sync::Mutex<HashMap<String, Arc<RequestSlots>>>>,
    /// Every namespace's accounting searches on this connection ([`SEARCHES_PER_CONNECTION`]).
    all_searches: Arc<RequestSlots>,
    /// The Slurm cluster (`ClusterName`) the SlurmCluster controller found this connection to
    /// serve, by SlurmCluster (each judges for itself: those sharing the connection may have
    /// jobs in different places).
    identity: Arc<std::sync::Mutex<HashMap<String, String>>>,
}

impl ClusterHandle {
    /// The Slurm cluster the SlurmCluster `cluster` found this connection to serve, if it looked.
    pub fn confirmed_cluster(&self, cluster: &str) -> Option<String> {
        self.identity
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(cluster)
            .cloned()
    }

    /// The SlurmCluster `cluster` found this connection to serve the Slurm cluster `name`.
    pub fn confirm_cluster(&self, cluster: &str, name: &str) {
        self.confirm_cluster_since(cluster, name, None);
    }

    /// [`Self::confirm_cluster`] with what `/diag` answered after
    /// `SlurmClient::identity_epoch` gave `epoch` (`SlurmClient::expect_cluster_since`).
    ///
    /// The client expects `name` (and sends writes again) only once every SlurmCluster on the
    /// connection that has judged says `name`: one that found its jobs elsewhere and refused
    /// the move keeps the writes held until its own check takes it off the connection, so that
    /// another's confirmation does not send its cancels and drains to another cluster.
    pub fn confirm_cluster_since(&self, cluster: &str, name: &str, epoch: Option<u64>) {
        let mut identity = self
            .identity
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        identity.insert(cluster.to_owned(), name.to_owned());
        if identity.values().all(|found| found == name) {
            match epoch {
                Some(epoch) => self.client.expect_cluster_since(name, epoch),
                None => self.client.expect_cluster(name),
            }
        }
    }

    /// A request slot on this cluster's connection, if one is free now. Hold it while calling
    /// slurmrestd; `None`: requeue and try again soon, do not wait in a reconcile slot.
    pub fn try_io(&self) -> Option<RequestSlot> {
        self.io.try_take()
    }

    /// A request slot, waiting at most `wait` for one to free up; `None`: requeue.
    pub async fn io_within(&self, wait: std::time::Duration) -> Option<RequestSlot> {
        self.io.take_within(wait).await
    }

    /// `namespace`'s accounting search slots on this connection: a search by job name takes
    /// one with one of the connection's ([`Self::all_searches`], `slots::SearchSlots`), or
    /// requeues with a waker (`wake_when_free`) in the line of the one it found taken.
    pub fn searches(&self, namespace: &str) -> Arc<RequestSlots> {
        let mut searches = self
            .searches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match searches.get(namespace) {
            Some(slots) => Arc::clone(slots),
            None => {
                // Only namespaces searching or queued now are kept: namespaces come and go.
                searches.retain(|_, slots| Arc::strong_count(slots) > 1 || slots.waiting() > 0);
                let slots = RequestSlots::turns(SEARCHES_PER_NAMESPACE);
                searches.insert(namespace.to_owned(), Arc::clone(&slots));
                slots
            }
        }
    }

    /// The connection's accounting search slots, which every namespace's searches share
    /// ([`SEARCHES_PER_CONNECTION`]): a search takes one and its namespace's
    /// (`slots::SearchSlots`).
    pub fn all_searches(&self) -> &Arc<RequestSlots> {
        &self.all_searches
    }

    /// `namespace`'s accounting search slots, if someone searches or waits: none made.
    pub fn searches_if_any(&self, namespace: &str) -> Option<Arc<RequestSlots>> {
        self.searches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(namespace)
            .cloned()
    }

    /// Call `wake` (which must not block) once one of the connection's request slots is free
    /// that nobody queues for, at once if one is now: a reconcile that requeued for want of a
    /// slot runs again then, not only when its backoff ends. One waker per `key`.
    pub fn wake_when_free(&self, key: String, wake: impl FnOnce() + Send + 'static) {
        self.io.wake_when_free(key, wake);
    }
}

/// How the client and poller of a cluster are set up, minus the credentials (which can rotate
/// in place). SlurmClusters share a connection only when these are equal (and their
/// credentials are the same identity).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// Everything in `ClientConfig` that matters, in a comparable form.
    pub fingerprint: String,
    pub poller: PollerConfig,
}

/// What `ClusterRegistry::upsert` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upserted {
    /// A new connection (client and poller) for a SlurmCluster that had none.
    Created,
    /// The SlurmCluster now shares the running connection of others (same slurmrestd,
    /// settings and credentials): no new poller.
    Joined,
    /// Nothing changed.
    Unchanged,
    /// Same connection, used by this SlurmCluster alone; new credentials swapped into its
    /// client.
    CredentialsRotated,
    /// Connection settings or credentials changed: the SlurmCluster moved to a new connection
    /// (its old one stops when nobody else uses it).
    Replaced,
}

/// One slurmrestd as one identity: a client, its poller and index, the SlurmClusters using it.
struct Connection {
    handle: ClusterHandle,
    settings: ConnectionSettings,
    credentials: Arc<Credentials>,
    feed: Feed,
    // Dropping the handle stops the poller.
    _poller: PollerHandle,
}

impl Connection {
    fn members(&self) -> usize {
        self.feed
            .members
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    fn matches(&self, settings: &ConnectionSettings, credentials: &Credentials) -> bool {
        self.settings == *settings && self.credentials.same_identity(credentials)
    }

    /// Tell `cluster`'s objects that this connection is up, when it is. They may wait for
    /// something no poll will announce: the first poll (a SlurmCluster joining a running
    /// poller), or the credentials their spec names (a submit waits for them; rotated in
    /// place, the poller goes on and says nothing).
    fn announce_up(&self, cluster: &ObjectRef<SlurmCluster>) {
        if self.handle.index.borrow().health.is_up() {
            let _ = self.feed.sender.send(SlurmEvent::HealthChanged {
                cluster: cluster.clone(),
                up: true,
            });
        }
    }
}

#[derive(Default)]
struct Connections {
    by_id: HashMap<u64, Connection>,
    /// Which connection each registered SlurmCluster uses.
    of_cluster: HashMap<ObjectRef<SlurmCluster>, u64>,
    next_id: u64,
}

impl Connections {
    /// Take `cluster` off its connection; the connection (and its poller) goes with its last
    /// SlurmCluster.
    fn leave(&mut self, cluster: &ObjectRef<SlurmCluster>) -> bool {
        let Some(id) = self.of_cluster.remove(cluster) else {
            return false;
        };
        if let Some(connection) = self.by_id.get(&id) {
            connection
                .feed
                .members
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|m| m != cluster);
            // Its word on whom the connection reaches goes with it (it would judge again). The
            // others' words are not acted on here: a word without a fresh `/diag` may be older
            // than the answers since (an endpoint that moved and came back); writes held only
            // by its word go out at their next checks.
            connection
                .handle
                .identity
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&cluster.name);
            if connection.members() == 0 {
                self.by_id.remove(&id);
            }
        }
        true
    }

    fn join(&mut self, cluster: &ObjectRef<SlurmCluster>, id: u64) {
        if let Some(connection) = self.by_id.get(&id) {
            connection
                .feed
                .members
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .push(cluster.clone());
            self.of_cluster.insert(cluster.clone(), id);
            connection.announce_up(cluster);
        }
    }
}

/// Clients, indexes and pollers by SlurmCluster.
pub struct ClusterRegistry {
    connections: RwLock<Connections>,
    /// The uids of SlurmClusters whose deletion the watch has seen (or a re-list), newest last, at most
    /// [`GONE_KEPT`]: a reconcile under way when its SlurmCluster went (its finalizer removed
    /// by hand) registers after the deletion's removal, and would leave a poller running with
    /// the deleted cluster's credentials (`gone`, after its `upsert`).
    gone: Mutex<VecDeque<String>>,
    events: Arc<EventHub>,
    /// Sees every slurmrestd request of every client made here (the request metrics), and
    /// counts the pollers.
    metrics: Option<Arc<Metrics>>,
}

impl Default for ClusterRegistry {
    fn default() -> Self {
        Self::new(Arc::new(EventHub::new(1024)), None)
    }
}

impl std::fmt::Debug for ClusterRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (clusters, connections) = self
            .connections
            .read()
            .map(|c| (c.of_cluster.len(), c.by_id.len()))
            .unwrap_or_default();
        f.debug_struct("ClusterRegistry")
            .field("clusters", &clusters)
            .field("connections", &connections)
            .finish()
    }
}

/// Starts the poller of a new connection: its label (the first SlurmCluster), client, settings
/// and the channel for its events. Returns the poller's handle and its index.
pub trait SpawnPoller:
    FnOnce(
    ObjectRef<SlurmCluster>,
    SlurmClient,
    &PollerConfig,
    broadcast::Sender<SlurmEvent>,
) -> (PollerHandle, IndexReader)
{
}

impl<F> SpawnPoller for F where
    F: FnOnce(
        ObjectRef<SlurmCluster>,
        SlurmClient,
        &PollerConfig,
        broadcast::Sender<SlurmEvent>,
    ) -> (PollerHandle, IndexReader)
{
}

impl ClusterRegistry {
    /// A registry whose pollers send on feeds of `events`, and whose clients report each
    /// request to `metrics`.
    pub fn new(events: Arc<EventHub>, metrics: Option<Arc<Metrics>>) -> Self {
        Self {
            connections: RwLock::default(),
            gone: Mutex::default(),
            events,
            metrics,
        }
    }

    /// The SlurmCluster of `uid` is deleted: the watch saw it go, or a re-list no longer
    /// shows it.
    pub fn bury(&self, uid: &str) {
        let mut gone = self.gone.lock().unwrap_or_else(|p| p.into_inner());
        if !gone.iter().any(|g| g == uid) {
            if gone.len() == GONE_KEPT {
                gone.pop_front();
            }
            gone.push_back(uid.to_owned());
        }
    }

    /// The SlurmCluster of `uid` exists after all: the watch (an event, or a list) shows it
    /// again after a re-list that did not (a list from an API server's cache that lagged).
    pub fn unbury(&self, uid: &str) {
        let mut gone = self.gone.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = gone.iter().position(|g| g == uid) {
            gone.remove(at);
        }
    }

    /// Whether the SlurmCluster of `uid` was deleted ([`Self::bury`]).
    pub fn gone(&self, uid: &str) -> bool {
        self.gone
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|g| g == uid)
    }

    pub fn get(&self, cluster: &ObjectRef<SlurmCluster>) -> Option<ClusterHandle> {
        let connections = self.connections.read().unwrap_or_else(|p| p.into_inner());
        let id = connections.of_cluster.get(cluster)?;
        connections.by_id.get(id).map(|c| c.handle.clone())
    }

    pub fn contains(&self, cluster: &ObjectRef<SlurmCluster>) -> bool {
        self.get(cluster).is_some()
    }

    /// Register `cluster` with these settings and credentials, or update its registration: it
    /// joins a running connection with the same settings and credentials identity, keeps its
    /// own (rotating credentials in place when it is the connection's only user), or gets a
    /// new one. `spawn` starts the poller of a new connection.
    pub fn upsert(
        &self,
        cluster: &ObjectRef<SlurmCluster>,
        config: ClientConfig,
        settings: ConnectionSettings,
        credentials: Arc<Credentials>,
        spawn: impl SpawnPoller,
    ) -> Result<Upserted, SlurmError> {
        // One write lock for the whole decision: two SlurmClusters registered at once must not
        // both start a poller for the same connection. Nothing here awaits.
        let mut connections = self.connections.write().unwrap_or_else(|p| p.into_inner());
        let current = connections.of_cluster.get(cluster).copied();
        if let Some(id) = current
            && let Some(connection) = connections.by_id.get(&id)
            && connection.matches(&settings, &credentials)
        {
            return Ok(Upserted::Unchanged);
        }
        let shared = connections
            .by_id
            .iter()
            .find(|(id, c)| Some(**id) != current && c.matches(&settings, &credentials))
            .map(|(id, _)| *id);
        let outcome = if let Some(id) = shared {
            connections.leave(cluster);
            connections.join(cluster, id);
            Upserted::Joined
        } else if let Some(id) = current
            && let Some(connection) = connections.by_id.get_mut(&id)
            && connection.settings == settings
            && connection.members() == 1
        {
            // Alone on it: rotate in place, the poller and its index go on. Submits that wait
            // for credentials of another kind or user than the old ones are woken; a new key or
            // token for the same user changes nothing they wait for.
            let acts_otherwise = connection.credentials.is_ready_token()
                != credentials.is_ready_token()
                || connection.credentials.acting_user() != credentials.acting_user();
            connection
                .handle
                .client
                .set_credentials(Arc::clone(&credentials));
            connection.credentials = credentials;
            if acts_otherwise {
                connection.announce_up(cluster);
            }
            Upserted::CredentialsRotated
        } else {
            let observer = self.metrics.as_ref().map(|m| m.requests_of(&cluster.name));
            let client = SlurmClient::with_observer(config, Arc::clone(&credentials), observer)?;
            let feed = self.events.feed(cluster.clone());
            let (poller, index) = spawn(
                cluster.clone(),
                client.clone(),
                &settings.poller,
                feed.sender.clone(),
            );
            let was_registered = connections.leave(cluster);
            let id = connections.next_id;
            connections.next_id += 1;
            connections.by_id.insert(
                id,
                Connection {
                    handle: ClusterHandle {
                        client,
                        index,
                        io: RequestSlots::new(IO_PER_CONNECTION),
                        searches: Arc::default(),
                        all_searches: RequestSlots::turns(SEARCHES_PER_CONNECTION),
                        identity: Arc::default(),
                    },
                    settings,
                    credentials,
                    feed,
                    _poller: poller,
                },
            );
            connections.of_cluster.insert(cluster.clone(), id);
            if was_registered {
                Upserted::Replaced
            } else {
                Upserted::Created
            }
        };
        self.count_pollers(&connections);
        Ok(outcome)
    }

    /// Forget `cluster`: its connection's poller stops unless another SlurmCluster still uses
    /// it. Returns whether it was registered.
    pub fn remove(&self, cluster: &ObjectRef<SlurmCluster>) -> bool {
        let mut connections = self.connections.write().unwrap_or_else(|p| p.into_inner());
        let removed = connections.leave(cluster);
        self.count_pollers(&connections);
        removed
    }

    pub fn clusters(&self) -> Vec<ObjectRef<SlurmCluster>> {
        let connections = self.connections.read().unwrap_or_else(|p| p.into_inner());
        connections.of_cluster.keys().cloned().collect()
    }

    /// How many connections (so pollers) run.
    pub fn pollers(&self) -> usize {
        let connections = self.connections.read().unwrap_or_else(|p| p.into_inner());
        connections.by_id.len()
    }

    fn count_pollers(&self, connections: &Connections) {
        if let Some(metrics) = &self.metrics {
            metrics.set_pollers(connections.by_id.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use futures::StreamExt;

    use super::*;
    use crate::state::events::Delivery;
    use crate::state::index::{ClusterState, Health};

    fn settings(endpoint: &str) -> ConnectionSettings {
        ConnectionSettings {
            fingerprint: format!("endpoint={endpoint}"),
            poller: PollerConfig {
                interval: Duration::from_secs(3600),
            },
        }
    }

    fn jwt(key: u8, user: &str) -> Arc<Credentials> {
        Arc::new(Credentials::minted(vec![key; 32], user, Duration::from_secs(300)).unwrap())
    }

    /// A registry whose pollers are counted, and whose indexes read `health` (a real poller
    /// runs against a port nothing listens on, into an index nobody reads).
    struct Fixture {
        registry: ClusterRegistry,
        spawned: Arc<AtomicUsize>,
        health: Health,
    }

    impl Fixture {
        fn new(health: Health) -> Self {
            Self {
                registry: ClusterRegistry::default(),
                spawned: Arc::default(),
                health,
            }
        }

        /// Pollers that have already said their Slurm is up.
        fn up() -> Self {
            Self::new(Health::Up {
                since: chrono::Utc::now(),
            })
        }

        fn upsert(&self, name: &str, endpoint: &str, credentials: Arc<Credentials>) -> Upserted {
            let spawned = Arc::clone(&self.spawned);
            let state = ClusterState {
                health: self.health.clone(),
                ..ClusterState::default()
            };
            self.registry
                .upsert(
                    &ObjectRef::new(name),
                    ClientConfig::new(endpoint).unwrap().allow_plaintext(true),
                    settings(endpoint),
                    credentials,
                    move |label, client, config, events| {
                        spawned.fetch_add(1, Ordering::SeqCst);
                        let (poller, _) = crate::state::poller::spawn(
                            label,
                            client,
                            config,
                            crate::slurm::tag::TagKey::ephemeral(),
                            events,
                            Metrics::new(),
                        );
                        let (writer, reader) = tokio::sync::watch::channel(Arc::new(state));
                        std::mem::forget(writer);
                        (poller, reader)
                    },
                )
                .unwrap()
        }

        fn same_client(&self, a: &str, b: &str) -> bool {
            let (a, b) = (
                self.registry.get(&ObjectRef::new(a)).unwrap(),
                self.registry.get(&ObjectRef::new(b)).unwrap(),
            );
            Arc::ptr_eq(&a.io, &b.io)
        }
    }

    const ONE: &str = "http://127.0.0.1:1";
    const OTHER: &str = "http://127.0.0.1:2";

    #[tokio::test]
    async fn one_poller_per_endpoint_and_identity_until_the_last_cluster_goes() {
        let f = Fixture::new(Health::Unknown);
        assert_eq!(f.upsert("a", ONE, jwt(1, "slurm")), Upserted::Created);
        for name in ["b", "c", "d"] {
            assert_eq!(f.upsert(name, ONE, jwt(1, "slurm")), Upserted::Joined);
        }
        assert_eq!(f.upsert("b", ONE, jwt(1, "slurm")), Upserted::Unchanged);
        assert_eq!(f.spawned.load(Ordering::SeqCst), 1);
        assert_eq!(f.registry.pollers(), 1);
        assert!(f.same_client("a", "d"));

        // The first one going keeps the connection for the others, and its word on whom the
        // connection reaches goes with it.
        let shared = f.registry.get(&ObjectRef::new("b")).unwrap();
        shared.confirm_cluster("a", "main");
        shared.confirm_cluster("b", "main");
        assert!(f.registry.remove(&ObjectRef::new("a")));
        assert!(!f.registry.remove(&ObjectRef::new("a")));
        assert_eq!(f.registry.pollers(), 1);
        assert!(f.same_client("b", "d"));
        assert_eq!(shared.confirmed_cluster("a"), None);
        assert_eq!(shared.confirmed_cluster("b").as_deref(), Some("main"));
        assert_eq!(shared.client.expected_cluster().as_deref(), Some("main"));
        // One finding the connection elsewhere does not re-point the shared client while
        // another has judged it to serve `main` (that one refuses the move, its jobs there):
        // only once every judge agrees.
        shared.confirm_cluster("c", "main");
        shared.confirm_cluster("b", "other");
        assert_eq!(shared.client.expected_cluster().as_deref(), Some("main"));
        // The one holding out leaving releases nothing by itself: b's word may be older than
        // what answered since; b's next check (a fresh `/diag`) decides.
        assert!(f.registry.remove(&ObjectRef::new("c")));
        assert_eq!(shared.client.expected_cluster().as_deref(), Some("main"));
        shared.confirm_cluster("b", "other");
        assert_eq!(shared.client.expected_cluster().as_deref(), Some("other"));
        assert!(f.registry.remove(&ObjectRef::new("b")));
        assert_eq!(f.registry.pollers(), 1);
        assert!(f.registry.remove(&ObjectRef::new("d")));
        assert_eq!(f.registry.pollers(), 0);
        assert!(f.registry.clusters().is_empty());
    }

    #[tokio::test]
    async fn never_one_client_across_credentials_or_endpoints() {
        let f = Fixture::new(Health::Unknown);
        f.upsert("a", ONE, jwt(1, "slurm"));
        assert_eq!(
            f.upsert("other-user", ONE, jwt(1, "alice")),
            Upserted::Created
        );
        assert_eq!(
            f.upsert("other-key", ONE, jwt(2, "slurm")),
            Upserted::Created
        );
        let token = Arc::new(Credentials::token("t", Some("slurm".into())).unwrap());
        assert_eq!(f.upsert("token", ONE, token), Upserted::Created);
        assert_eq!(
            f.upsert("elsewhere", OTHER, jwt(1, "slurm")),
            Upserted::Created
        );
        assert_eq!(f.registry.pollers(), 5);
        for other in ["other-user", "other-key", "token", "elsewhere"] {
            assert!(!f.same_client("a", other), "{other}");
        }
    }

    #[tokio::test]
    async fn credentials_rotate_in_place_alone_and_move_when_shared() {
        let f = Fixture::new(Health::Unknown);
        f.upsert("a", ONE, jwt(1, "slurm"));
        assert_eq!(
            f.upsert("a", ONE, jwt(2, "slurm")),
            Upserted::CredentialsRotated
        );
        assert_eq!(f.spawned.load(Ordering::SeqCst), 1);

        assert_eq!(f.upsert("b", ONE, jwt(2, "slurm")), Upserted::Joined);
        // a's key rotates while b still uses the old one: a moves, b keeps its client.
        assert_eq!(f.upsert("a", ONE, jwt(3, "slurm")), Upserted::Replaced);
        assert_eq!(f.registry.pollers(), 2);
        assert!(!f.same_client("a", "b"));
        // b follows: it joins a's connection and its old one stops.
        assert_eq!(f.upsert("b", ONE, jwt(3, "slurm")), Upserted::Joined);
        assert_eq!(f.registry.pollers(), 1);
        assert!(f.same_client("a", "b"));
        // Other settings: a new connection, the shared one stays for b.
        assert_eq!(f.upsert("a", OTHER, jwt(3, "slurm")), Upserted::Replaced);
        assert_eq!(f.registry.pollers(), 2);
    }

    /// A SlurmJob whose submit waits for the credentials its SlurmCluster's spec names (another
    /// kind, or another user) is woken when they rotate in place: no poll would say anything
    /// (the poller goes on). A new key or token for the same user wakes nobody.
    #[tokio::test]
    async fn credentials_rotated_in_place_wake_the_clusters_objects() {
        let f = Fixture::up();
        let mut events = Box::pin(f.registry.events.subscribe());
        f.upsert("a", ONE, jwt(1, "slurm"));
        assert_eq!(f.upsert("a", ONE, jwt(1, "slurm")), Upserted::Unchanged);
        // A new key for the same user: nothing waits for it, nobody is woken.
        assert_eq!(
            f.upsert("a", ONE, jwt(2, "slurm")),
            Upserted::CredentialsRotated
        );
        // The key for another user, then a ready token: each is what submits may wait for.
        assert_eq!(
            f.upsert("a", ONE, jwt(2, "ops")),
            Upserted::CredentialsRotated
        );
        let token = Arc::new(Credentials::token("t", None).unwrap());
        assert_eq!(f.upsert("a", ONE, token), Upserted::CredentialsRotated);
        // The poller (port 1: nothing answers) never says it is up; the rotations do.
        let up = |delivery: &Delivery| {
            matches!(delivery, Delivery::Event(SlurmEvent::HealthChanged { cluster, up: true })
                if cluster.name == "a")
        };
        let mut seen = Vec::new();
        while let Ok(Some(delivery)) =
            tokio::time::timeout(Duration::from_millis(500), events.next()).await
        {
            seen.push(delivery);
        }
        assert_eq!(seen.iter().filter(|d| up(d)).count(), 2, "{seen:?}");
    }

    #[tokio::test]
    async fn request_slots_are_per_connection() {
        let f = Fixture::new(Health::Unknown);
        f.upsert("slow", ONE, jwt(1, "slurm"));
        f.upsert("slow-too", ONE, jwt(1, "slurm"));
        f.upsert("healthy", OTHER, jwt(1, "slurm"));
        let slow = f.registry.get(&ObjectRef::new("slow")).unwrap();
        let held: Vec<_> = (0..IO_PER_CONNECTION)
            .map(|_| slow.try_io().expect("a free slot"))
            .collect();
        assert!(slow.try_io().is_none());
        // The SlurmClusters sharing the connection share its slots ...
        let slow_too = f.registry.get(&ObjectRef::new("slow-too")).unwrap();
        assert!(slow_too.try_io().is_none());
        // ... and another connection is not affected.
        let healthy = f.registry.get(&ObjectRef::new("healthy")).unwrap();
        let healthy_slots: Vec<_> = (0..IO_PER_CONNECTION)
            .map(|_| healthy.try_io().expect("a free slot"))
            .collect();
        assert_eq!(healthy_slots.len(), IO_PER_CONNECTION);
        drop(held);
        assert!(slow.try_io().is_some());
    }

    /// Each namespace has its own search slot on a connection, shared by the SlurmClusters on
    /// it; the slots of a namespace nobody holds or waits for are forgotten when another
    /// namespace's are made (namespaces come and go).
    #[tokio::test]
    async fn search_slots_are_per_namespace_and_forgotten_unused() {
        let f = Fixture::new(Health::Unknown);
        f.upsert("one", ONE, jwt(1, "slurm"));
        f.upsert("one-too", ONE, jwt(1, "slurm"));
        let one = f.registry.get(&ObjectRef::new("one")).unwrap();
        let one_too = f.registry.get(&ObjectRef::new("one-too")).unwrap();
        let searching = one.searches("team-a").try_take().expect("free");
        assert!(one.searches("team-a").try_take().is_none());
        assert!(one_too.searches("team-a").try_take().is_none(), "shared");
        assert!(one.searches("team-b").try_take().is_some(), "per namespace");
        let count = |handle: &ClusterHandle| handle.searches.lock().unwrap().len();
        // Looking without searching makes none.
        assert!(one_too.searches_if_any("team-a").is_some());
        assert!(one.searches_if_any("team-z").is_none());
        assert_eq!(count(&one), 2);
        // team-b is held by nobody: forgotten when team-c's are made; team-a's slot is held.
        one.searches("team-c");
        assert_eq!(count(&one), 2);
        assert!(one.searches.lock().unwrap().contains_key("team-a"));
        drop(searching);
        one.searches("team-d");
        assert_eq!(count(&one), 1);
        assert!(one.searches("team-a").try_take().is_some());
    }

    #[tokio::test]
    async fn a_cluster_joining_a_running_poller_hears_it_is_up_and_follows_its_events() {
        let f = Fixture::up();
        let mut events = Box::pin(f.registry.events.subscribe());
        f.upsert("a", ONE, jwt(1, "slurm"));
        assert_eq!(f.upsert("b", ONE, jwt(1, "slurm")), Upserted::Joined);
        let next = tokio::time::timeout(Duration::from_secs(5), events.next()).await;
        assert_eq!(
            next.unwrap(),
            Some(Delivery::Event(SlurmEvent::HealthChanged {
                cluster: ObjectRef::new("b"),
                up: true,
            }))
        );
        // The poller's own events (labelled with its first SlurmCluster) reach both.
        let feed = {
            let connections = f.registry.connections.read().unwrap();
            connections
                .by_id
                .values()
                .next()
                .unwrap()
                .feed
                .sender
                .clone()
        };
        feed.send(SlurmEvent::NodeGone {
            cluster: ObjectRef::new("a"),
            node: "n1".into(),
        })
        .unwrap();
        let mut got = Vec::new();
        for _ in 0..2 {
            let next = tokio::time::timeout(Duration::from_secs(5), events.next()).await;
            got.push(next.unwrap().unwrap());
        }
        let gone = |name: &str| {
            Delivery::Event(SlurmEvent::NodeGone {
                cluster: ObjectRef::new(name),
                node: "n1".into(),
            })
        };
        assert_eq!(got, [gone("a"), gone("b")]);
    }
}
