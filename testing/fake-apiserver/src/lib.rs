//! An in-memory Kubernetes API server for tests that run a controller *binary* (no real API server
//! can run on the machines the tests run on). It speaks the HTTP API that kube-rs clients use,
//! with the semantics such tests depend on; each point below is pinned by a test in
//! `tests/conformance/`:
//!
//! * every object gets `uid`, `resourceVersion` (one global counter) and `creationTimestamp`;
//!   custom resources, Pods, PodDisruptionBudgets and CRDs also a `generation`, bumped when
//!   anything but `metadata` changes (and but `status`, where `/status` is a subresource);
//! * list (paged with `limit`/`continue`: a page continues after the last object of the one
//!   before, and every page reports the first page's resourceVersion; a `resourceVersion=0` list
//!   is served whole, as the real server serves it from its watch cache) and watch: from a
//!   resourceVersion (the event log is never compacted) every later event in order; without one,
//!   or from `0`, first a synthetic `ADDED` for every object there is. Label selectors (`=`,
//!   `==`, `!=`, `in`, `notin`, `key`, `!key`) and `metadata.name`/`metadata.namespace` field
//!   selectors (`=`, `==`, `!=`; any other field is a 400, as for a custom resource) filter both;
//!   a watched object that starts or stops matching arrives as `ADDED` or `DELETED`. Lists,
//!   gets and watches can be metadata-only (`PartialObjectMetadata`);
//! * create (409 `AlreadyExists` for a name taken), replace (409 `Conflict` when the
//!   resourceVersion given is not the current one), JSON patch (with `test`; a failed one is a
//!   422), merge and strategic merge patches (as merge patches: enough for the patches of
//!   kube-rs and of controllers built on it), server-side apply with per-field managers: a field
//!   owned by another manager with a different value is a 409 conflict unless forced; a field a
//!   manager stops applying is removed unless another manager owns it too (a manager that applies
//!   the value a field already has shares it); `metadata.managedFields` is written as the real
//!   server writes it, so caches pay for it;
//! * status subresources: writes to the object keep its status, writes to `/status` change only
//!   the status, create drops it;
//! * delete: with finalizers the object gets `deletionTimestamp` (and a new `generation`) and goes
//!   when the last finalizer does; `uid`/`resourceVersion` preconditions (409);
//! * the garbage collector: an object goes (background propagation) once every object named by
//!   its `ownerReferences` is gone;
//! * the namespace controller: a deleted Namespace is `Terminating` (no new objects in it, 403)
//!   until everything in it is gone. Its Pods are deleted first (as the real controller does
//!   since Kubernetes 1.33) and nothing else while a Pod remains; then its Secrets, then all the
//!   rest in resource-then-name order. The real controller's order after the Pods is no order at
//!   all: Secrets, which no finalizer holds, are gone while custom resources wait for their
//!   finalizers, and a finalizer that needs a Secret of its namespace must cope; here the Secrets
//!   go first, so such a finalizer meets that case every time;
//! * RBAC only as far as a namespace the test forbids: every request in it is a 403
//!   (`FakeApiServer::forbid_namespace`), as when the client's Role there is deleted;
//! * a CustomResourceDefinition is established as soon as it exists, and its resources are
//!   served from then on.
//!
//! Not modelled: schema validation, CEL and admission, defaulting, pod scheduling (no kubelet),
//! discovery, `dryRun`, propagation policies other than background, list-type-aware apply
//! (a list is one field: two managers cannot own parts of one list), watch bookmarks and
//! compaction (no 410), deletion of a CRD's objects with the CRD, namespace existence for
//! objects created in one. See README.md.

mod fields;
mod http;
mod resources;
mod select;
mod store;
mod strategic;
mod watch;

use std::collections::HashMap;
use std::fmt::Display;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::Serialize;
use serde_json::{Value, json};

use crate::fields::Operation;
use crate::store::Store;

/// The store and a channel that tells watches the store's latest resourceVersion.
#[derive(Clone)]
pub(crate) struct Shared {
    store: Arc<Mutex<Store>>,
    latest: tokio::sync::watch::Sender<u64>,
}

impl Shared {
    /// The store (a panic while it was held leaves it usable: every write is whole or none).
    fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wake the watches after a write.
    fn written(&self, rv: u64) {
        self.latest.send_replace(rv);
    }
}

/// The running server; stops when dropped.
pub struct FakeApiServer {
    pub addr: SocketAddr,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Test support fails loudly: a server that cannot start, or a seed object it cannot take, is a
/// broken test setup, reported where it happens.
#[expect(
    clippy::panic,
    reason = "a broken test setup fails the test that made it"
)]
fn must<T, E: Display>(result: Result<T, E>, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(error) => panic!("fake API server: {what}: {error}"),
    }
}

impl FakeApiServer {
    /// Serve on a free local port, with the built-in resources only (Namespaces, Nodes, Pods,
    /// Secrets, ConfigMaps, Events, Leases, PodDisruptionBudgets, CustomResourceDefinitions).
    ///
    /// # Panics
    /// When no local port can be bound.
    pub async fn start() -> Self {
        Self::start_with_crds(Vec::<Value>::new()).await
    }

    /// Serve on a free local port with `crds` (CustomResourceDefinitions, e.g. the caller's
    /// `CustomResourceDefinition` values) created and established, so their resources are
    /// served from the start.
    ///
    /// # Panics
    /// When no local port can be bound, or a CRD is not one (no `<plural>.<group>` name, say).
    pub async fn start_with_crds<T: Serialize>(crds: impl IntoIterator<Item = T>) -> Self {
        let (latest, _) = tokio::sync::watch::channel(0);
        let shared = Shared {
            store: Arc::new(Mutex::new(Store::default())),
            latest,
        };
        {
            let mut store = shared.lock();
            for crd in crds {
                let crd = must(serde_json::to_value(crd), "a CRD as JSON");
                let name = crd["metadata"]["name"].as_str().unwrap_or_default();
                let key = (store::CRDS.to_owned(), String::new(), name.to_owned());
                let info = resources::crd_resource();
                must(
                    store.create(key, crd, "test-setup", Operation::Update, &info),
                    "create a CRD",
                );
            }
        }
        let listener = must(
            tokio::net::TcpListener::bind("127.0.0.1:0").await,
            "bind a local port",
        );
        let addr = must(listener.local_addr(), "the bound address");
        let app = axum::Router::new()
            .fallback(http::handle)
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, shared, task }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig for this server (context namespace `default`), written into `dir`.
    ///
    /// # Panics
    /// When the file cannot be written.
    pub fn write_kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             users:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    \
             cluster: fake\n    user: fake\n    namespace: default\ncurrent-context: fake\n",
            self.url()
        );
        must(std::fs::write(&path, text), "write the kubeconfig");
        path
    }

    /// A client for this server (default namespace `default`).
    ///
    /// # Panics
    /// Never for the server's own URL.
    pub fn client(&self) -> kube::Client {
        let url = must(self.url().parse(), "the server's URL");
        must(
            kube::Client::try_from(kube::Config::new(url)),
            "a client for the server",
        )
    }

    /// Store `object` (with its status) directly, as if created earlier: for seeding thousands
    /// of objects without thousands of requests. `resource` is `group/version/plural` (`v1/...`
    /// for the core group); `namespace` is `""` for a cluster-scoped resource.
    ///
    /// # Panics
    /// When the resource is not served, or the object has no name or exists already.
    pub fn insert(&self, resource: &str, namespace: &str, mut object: Value) {
        let mut store = self.shared.lock();
        let (api_version, plural) = resource.rsplit_once('/').unwrap_or(("", resource));
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let info = must(
            resources::lookup(&store, group, version, plural)
                .ok_or_else(|| format!("{resource} is not served")),
            "seed an object",
        );
        let name = must(
            object["metadata"]["name"]
                .as_str()
                .map(str::to_owned)
                .ok_or("metadata.name missing"),
            "seed an object",
        );
        let status = object.get("status").cloned();
        if info.namespaced {
            object["metadata"]["namespace"] = json!(namespace);
        }
        let key = (resource.to_owned(), namespace.to_owned(), name);
        must(
            store.create(key.clone(), object, "seed", Operation::Update, &info),
            "seed an object",
        );
        if let Some(status) = status {
            store.set_status_unlogged(&key, status);
        }
        let rv = store.rv;
        drop(store);
        self.shared.written(rv);
    }

    /// What `GET pods/{pod}/log` answers in `namespace` from now on: the kubelet's part, which
    /// this server has not.
    pub fn set_pod_log(&self, namespace: &str, pod: &str, text: &str) {
        self.shared
            .lock()
            .pod_logs
            .insert((namespace.to_owned(), pod.to_owned()), text.to_owned());
    }

    /// Refuse (403 `Forbidden`) every request in `namespace` from now on, as RBAC does once
    /// the client's Role or RoleBinding there is deleted. Watches already open go on, as on the
    /// real server (authorization is checked when a request starts).
    pub fn forbid_namespace(&self, namespace: &str) {
        self.shared
            .lock()
            .forbidden_namespaces
            .insert(namespace.to_owned());
    }

    /// Serve `namespace` again (its Role restored).
    pub fn allow_namespace(&self, namespace: &str) {
        self.shared.lock().forbidden_namespaces.remove(namespace);
    }

    /// How many requests were made, by `METHOD group/version/plural[/subresource]`
    /// (`GET v1/secrets`, `PATCH slurm.rs/v1alpha1/slurmjobs/status`).
    pub fn requests(&self) -> HashMap<String, u64> {
        self.shared.lock().requests.clone()
    }

    /// How many requests named one object (a read, a write; not a list or watch), by
    /// `METHOD group/version/plural/namespace/name[/subresource]` (`GET v1/pods/team-a/streamed`).
    pub fn object_requests(&self) -> HashMap<String, u64> {
        self.shared.lock().object_requests.clone()
    }
}
