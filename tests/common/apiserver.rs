//! An in-memory Kubernetes API server for tests that run the operator *binary* (no API server can
//! run on these machines). It speaks the HTTP API the operator and kube-rs use, with the semantics
//! the tests depend on:
//!
//! * every object gets `uid`, `resourceVersion` (one global counter), `generation` (bumped when
//!   anything but metadata/status changes) and `creationTimestamp`;
//! * list (paged with `limit`/`continue`; a `resourceVersion=0` list is served whole from the
//!   watch cache by the real server, and whole here), and watch from a
//!   resourceVersion (the event log is never compacted), with label and
//!   `metadata.name`/`metadata.namespace` field selectors, and metadata-only lists/watches;
//! * create, replace (with a resourceVersion precondition), JSON patch (with `test`), merge and
//!   strategic merge patches (as merge patches: enough for the operator's and kube-rs' patches),
//!   server-side apply with per-field managers: fields owned by another manager with a different
//!   value are a 409 conflict unless forced, fields a manager no longer applies are removed;
//!   `metadata.managedFields` is written as the real server does, so caches pay for it;
//! * status subresources: writes to the object keep its status, writes to `/status` change only
//!   the status, create drops it;
//! * delete with finalizers (sets `deletionTimestamp`; the object goes when the last finalizer
//!   does), uid/resourceVersion preconditions, garbage collection of owned objects, namespace
//!   deletion;
//! * CRDs are established as soon as they exist.
//!
//! Not modelled: schema validation and admission (CEL), defaulting, pod scheduling (no kubelet).

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

/// What a resource plural is: its kind, whether it lives in a namespace, whether `/status` is a
/// subresource.
#[derive(Debug, Clone, Copy)]
struct ResourceInfo {
    kind: &'static str,
    namespaced: bool,
    status_subresource: bool,
}

fn resource_info(plural: &str) -> Option<ResourceInfo> {
    let (kind, namespaced, status_subresource) = match plural {
        "pods" => ("Pod", true, true),
        "secrets" => ("Secret", true, false),
        "configmaps" => ("ConfigMap", true, false),
        "events" => ("Event", true, false),
        "leases" => ("Lease", true, false),
        "poddisruptionbudgets" => ("PodDisruptionBudget", true, true),
        "namespaces" => ("Namespace", false, true),
        "customresourcedefinitions" => ("CustomResourceDefinition", false, true),
        "clusters" => ("Cluster", true, true),
        "slurmjobs" => ("SlurmJob", true, true),
        "nodesets" => ("NodeSet", true, true),
        _ => return None,
    };
    Some(ResourceInfo {
        kind,
        namespaced,
        status_subresource,
    })
}

/// Where an object lives: `group/version/plural`, namespace ("" when cluster-scoped), name.
type Key = (String, String, String);

struct Stored {
    object: Value,
    /// Leaf field path → (manager, operation "Apply" | "Update").
    owners: BTreeMap<String, (String, &'static str)>,
}

struct Event {
    rv: u64,
    resource: String,
    namespace: String,
    kind: &'static str,
    object: Value,
}

#[derive(Default)]
struct Store {
    rv: u64,
    objects: BTreeMap<Key, Stored>,
    log: Vec<Event>,
    requests: HashMap<String, u64>,
}

#[derive(Clone)]
struct Shared {
    store: Arc<Mutex<Store>>,
    latest: watch::Sender<u64>,
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

impl FakeApiServer {
    /// Serve on a free local port, with the operator's CRDs (from `crds/`) established.
    pub async fn start() -> Self {
        let (latest, _) = watch::channel(0);
        let shared = Shared {
            store: Arc::new(Mutex::new(Store::default())),
            latest,
        };
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/crds");
        for entry in std::fs::read_dir(dir).expect("read crds/") {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                let text = std::fs::read_to_string(&path).unwrap();
                let crd: Value = serde_yaml_ng::from_str(&text).unwrap();
                let name = crd["metadata"]["name"].as_str().unwrap().to_owned();
                let key = (
                    "apiextensions.k8s.io/v1/customresourcedefinitions".to_owned(),
                    String::new(),
                    name,
                );
                let mut store = shared.store.lock().unwrap();
                create(
                    &mut store,
                    key,
                    crd,
                    "test-setup",
                    "CustomResourceDefinition",
                    true,
                )
                .unwrap();
            }
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, shared, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig for this server, written into `dir`.
    pub fn write_kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             users:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    \
             cluster: fake\n    user: fake\n    namespace: default\ncurrent-context: fake\n",
            self.url()
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A client for this server.
    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url().parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    /// Store `object` (with its status) directly, as if created earlier: for seeding thousands
    /// of objects without thousands of requests. `resource` is `group/version/plural`.
    pub fn insert(&self, resource: &str, namespace: &str, object: Value) {
        let plural = resource.rsplit('/').next().unwrap_or_default();
        let info = resource_info(plural).expect("a known resource");
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        let status = object.get("status").cloned();
        let key = (resource.to_owned(), namespace.to_owned(), name);
        let mut store = self.shared.store.lock().unwrap();
        let mut object = object;
        object["metadata"]["namespace"] = json!(namespace);
        create(
            &mut store,
            key.clone(),
            object,
            "seed",
            info.kind,
            info.status_subresource,
        )
        .unwrap();
        if let Some(status) = status {
            let stored = store.objects.get_mut(&key).unwrap();
            stored.object["status"] = status;
        }
        let _ = self.shared.latest.send(store.rv);
    }

    /// How many requests were made, by `METHOD group/version/plural[/subresource]`.
    pub fn requests(&self) -> HashMap<String, u64> {
        self.shared.store.lock().unwrap().requests.clone()
    }
}

// ---------------------------------------------------------------------------------------------
// Requests

struct Target {
    resource: String,
    info: ResourceInfo,
    api_version: String,
    namespace: String,
    name: Option<String>,
    subresource: Option<String>,
}

fn parse_path(path: &str) -> Option<Target> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (api_version, rest) = match segments.as_slice() {
        ["api", "v1", rest @ ..] => ("v1".to_owned(), rest),
        ["apis", group, version, rest @ ..] => (format!("{group}/{version}"), rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, rest @ ..] => ((*ns).to_owned(), {
            let mut v = vec![*plural];
            v.extend_from_slice(rest);
            v
        }),
        other => (String::new(), other.to_vec()),
    };
    let (plural, name, subresource) = match rest.as_slice() {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some((*name).to_owned()), None),
        [plural, name, sub] => (*plural, Some((*name).to_owned()), Some((*sub).to_owned())),
        _ => return None,
    };
    let info = resource_info(plural)?;
    Some(Target {
        resource: format!("{api_version}/{plural}"),
        info,
        api_version,
        namespace,
        name,
        subresource,
    })
}

fn query_map(query: Option<&str>) -> HashMap<String, String> {
    url::form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

fn status(code: StatusCode, reason: &str, message: impl Into<String>) -> Response {
    json_response(
        code,
        &json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message.into(), "reason": reason, "code": code.as_u16(),
        }),
    )
}

fn json_response(code: StatusCode, body: &Value) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

/// Errors of the store, as the API server reports them.
#[derive(Debug)]
enum Failure {
    NotFound(String),
    AlreadyExists(String),
    Conflict(String),
    Invalid(String),
}

impl Failure {
    fn response(self) -> Response {
        match self {
            Self::NotFound(m) => status(StatusCode::NOT_FOUND, "NotFound", m),
            Self::AlreadyExists(m) => status(StatusCode::CONFLICT, "AlreadyExists", m),
            Self::Conflict(m) => status(StatusCode::CONFLICT, "Conflict", m),
            Self::Invalid(m) => status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", m),
        }
    }
}

async fn handle(State(shared): State<Shared>, request: Request) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let query = query_map(request.uri().query());
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let metadata_only = request
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=PartialObjectMetadata"));
    let Some(target) = parse_path(&path) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("no route {path}"),
        );
    };
    let body = match axum::body::to_bytes(request.into_body(), 64 << 20).await {
        Ok(body) => body,
        Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", e.to_string()),
    };
    {
        let mut store = shared.store.lock().unwrap();
        let sub = target
            .subresource
            .as_deref()
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        *store
            .requests
            .entry(format!("{method} {}{sub}", target.resource))
            .or_default() += 1;
    }
    let watching = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    if method == Method::GET && watching {
        return watch_response(shared, target, query, metadata_only);
    }
    let manager = query
        .get("fieldManager")
        .cloned()
        .unwrap_or_else(|| "unknown".to_owned());
    let result = {
        let mut store = shared.store.lock().unwrap();
        let result = dispatch(
            &mut store,
            &method,
            &target,
            &query,
            &content_type,
            &body,
            &manager,
            metadata_only,
        );
        let _ = shared.latest.send(store.rv);
        result
    };
    match result {
        Ok((code, value)) => json_response(code, &value),
        Err(failure) => failure.response(),
    }
}

#[allow(clippy::too_many_arguments)]
fn dispatch(
    store: &mut Store,
    method: &Method,
    target: &Target,
    query: &HashMap<String, String>,
    content_type: &str,
    body: &[u8],
    manager: &str,
    metadata_only: bool,
) -> Result<(StatusCode, Value), Failure> {
    let parse = || -> Result<Value, Failure> {
        serde_json::from_slice(body).map_err(|e| Failure::Invalid(format!("body: {e}")))
    };
    let name = target.name.clone();
    let status_sub = target.subresource.as_deref() == Some("status");
    if let Some(sub) = target.subresource.as_deref().filter(|s| *s != "status") {
        return Err(Failure::NotFound(format!("subresource {sub} not served")));
    }
    let key = |name: String| (target.resource.clone(), target.namespace.clone(), name);
    match (method.clone(), name) {
        (Method::GET, None) => Ok((StatusCode::OK, list(store, target, query, metadata_only))),
        (Method::GET, Some(name)) => {
            let stored = store
                .objects
                .get(&key(name.clone()))
                .ok_or_else(|| not_found(target, &name))?;
            Ok((StatusCode::OK, stored.object.clone()))
        }
        (Method::POST, None) => {
            let mut object = parse()?;
            let name = match object["metadata"]["name"].as_str() {
                Some(n) if !n.is_empty() => n.to_owned(),
                _ => match object["metadata"]["generateName"].as_str() {
                    Some(prefix) => {
                        let suffix = uuid::Uuid::new_v4().simple().to_string();
                        let name = format!("{prefix}{}", &suffix[..5]);
                        object["metadata"]["name"] = json!(name);
                        name
                    }
                    None => return Err(Failure::Invalid("metadata.name required".into())),
                },
            };
            if target.info.namespaced {
                object["metadata"]["namespace"] = json!(target.namespace);
            }
            let created = create(
                store,
                key(name),
                object,
                manager,
                target.info.kind,
                target.info.status_subresource,
            )?;
            Ok((StatusCode::CREATED, created))
        }
        (Method::PUT, Some(name)) => {
            let new = parse()?;
            let key = key(name.clone());
            let current = current(store, &key, target, &name)?;
            precondition(&current, &new)?;
            let new = scoped(target, status_sub, &current, new);
            let written = update(store, &key, new, manager, "Update")?;
            Ok((StatusCode::OK, written))
        }
        (Method::PATCH, Some(name)) => {
            let key = key(name.clone());
            if content_type.starts_with("application/apply-patch") {
                let applied = parse()?;
                let force = query.get("force").is_some_and(|f| f == "true");
                return apply(store, target, key, applied, manager, force, status_sub);
            }
            let current = current(store, &key, target, &name)?;
            let mut new = current.clone();
            if content_type.starts_with("application/json-patch") {
                let mut patch: json_patch::Patch = serde_json::from_slice(body)
                    .map_err(|e| Failure::Invalid(format!("JSON patch: {e}")))?;
                // As the real server (evanphx/json-patch): `test` of a missing path against
                // null passes (kube-rs' finalizer helper sends one for an object without any).
                patch.0.retain(|op| match op {
                    json_patch::PatchOperation::Test(t) => {
                        !(t.value.is_null() && new.pointer(t.path.as_str()).is_none())
                    }
                    _ => true,
                });
                json_patch::patch(&mut new, &patch)
                    .map_err(|e| Failure::Invalid(format!("JSON patch failed: {e}")))?;
            } else {
                let patch = parse()?;
                precondition(&current, &patch)?;
                json_patch::merge(&mut new, &patch);
            }
            let new = scoped(target, status_sub, &current, new);
            let written = update(store, &key, new, manager, "Update")?;
            Ok((StatusCode::OK, written))
        }
        (Method::DELETE, Some(name)) => {
            let key = key(name.clone());
            let current = current(store, &key, target, &name)?;
            if !body.is_empty() {
                let options: Value = parse()?;
                let pre = &options["preconditions"];
                for field in ["uid", "resourceVersion"] {
                    if let Some(want) = pre[field].as_str()
                        && current["metadata"][field].as_str() != Some(want)
                    {
                        return Err(Failure::Conflict(format!(
                            "Precondition failed: {field} in precondition: {want}, \
                             {field} in object meta: {}",
                            current["metadata"][field]
                        )));
                    }
                }
            }
            let deleted = delete(store, &key);
            Ok((StatusCode::OK, deleted.unwrap_or(current)))
        }
        _ => Err(Failure::Invalid(format!("{method} not served here"))),
    }
}

fn not_found(target: &Target, name: &str) -> Failure {
    Failure::NotFound(format!(
        "{} \"{name}\" not found",
        target.resource.rsplit('/').next().unwrap_or_default()
    ))
}

fn current(store: &Store, key: &Key, target: &Target, name: &str) -> Result<Value, Failure> {
    store
        .objects
        .get(key)
        .map(|s| s.object.clone())
        .ok_or_else(|| not_found(target, name))
}

/// A write that names a resourceVersion must name the current one.
fn precondition(current: &Value, new: &Value) -> Result<(), Failure> {
    match new["metadata"]["resourceVersion"].as_str() {
        Some(rv) if Some(rv) != current["metadata"]["resourceVersion"].as_str() => {
            Err(Failure::Conflict(format!(
                "Operation cannot be fulfilled on {}: the object has been modified; please \
                 apply your changes to the latest version and try again",
                current["metadata"]["name"]
            )))
        }
        _ => Ok(()),
    }
}

/// A write to the object keeps its status; a write to `/status` changes only the status.
fn scoped(target: &Target, status_sub: bool, current: &Value, mut new: Value) -> Value {
    if !target.info.status_subresource {
        return new;
    }
    if status_sub {
        let mut kept = current.clone();
        match new.get_mut("status").map(Value::take) {
            Some(status) => kept["status"] = status,
            None => {
                if let Some(map) = kept.as_object_mut() {
                    map.remove("status");
                }
            }
        }
        kept
    } else {
        match current.get("status") {
            Some(status) => new["status"] = status.clone(),
            None => {
                if let Some(map) = new.as_object_mut() {
                    map.remove("status");
                }
            }
        }
        new
    }
}

// ---------------------------------------------------------------------------------------------
// Field ownership (server-side apply)

/// Paths the server owns, never a manager.
fn server_field(path: &str) -> bool {
    matches!(
        path,
        ".apiVersion" | ".kind" | ".metadata.name" | ".metadata.namespace"
    ) || [
        ".metadata.resourceVersion",
        ".metadata.uid",
        ".metadata.managedFields",
        ".metadata.creationTimestamp",
        ".metadata.generation",
        ".metadata.deletionTimestamp",
    ]
    .iter()
    .any(|p| path.starts_with(p))
}

/// Leaf paths (objects recurse; arrays, scalars and empty objects are leaves) and their values.
fn leaves(value: &Value) -> BTreeMap<String, Value> {
    fn walk(prefix: String, value: &Value, out: &mut BTreeMap<String, Value>) {
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (k, v) in map {
                    walk(format!("{prefix}.{k}"), v, out);
                }
            }
            other => {
                if !server_field(&prefix) {
                    out.insert(prefix, other.clone());
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(String::new(), value, &mut out);
    out
}

fn remove_path(value: &mut Value, path: &str) {
    let parts: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let Some((last, parents)) = parts.split_last() else {
        return;
    };
    let mut node = value;
    for part in parents {
        match node.get_mut(*part) {
            Some(next) => node = next,
            None => return,
        }
    }
    if let Some(map) = node.as_object_mut() {
        map.remove(*last);
    }
}

/// Deep merge for apply: objects merge, everything else replaces.
fn merge_applied(target: &mut Value, applied: &Value) {
    match (target, applied) {
        (Value::Object(t), Value::Object(a)) => {
            for (k, v) in a {
                match t.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        merge_applied(existing, v)
                    }
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t, a) => *t = a.clone(),
    }
}

/// `metadata.managedFields` from the owners, as the API server writes it (FieldsV1).
fn managed_fields(owners: &BTreeMap<String, (String, &'static str)>, api_version: &Value) -> Value {
    let mut by_manager: BTreeMap<(String, &'static str), Map<String, Value>> = BTreeMap::new();
    for (path, (manager, operation)) in owners {
        let tree = by_manager.entry((manager.clone(), operation)).or_default();
        let mut node = tree;
        for part in path.trim_start_matches('.').split('.') {
            let next = node
                .entry(format!("f:{part}"))
                .or_insert_with(|| Value::Object(Map::new()));
            node = match next.as_object_mut() {
                Some(map) => map,
                None => break,
            };
        }
    }
    Value::Array(
        by_manager
            .into_iter()
            .map(|((manager, operation), fields)| {
                json!({
                    "manager": manager, "operation": operation, "apiVersion": api_version,
                    "time": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    "fieldsType": "FieldsV1", "fieldsV1": fields,
                })
            })
            .collect(),
    )
}

// ---------------------------------------------------------------------------------------------
// Writes

fn next_rv(store: &mut Store) -> u64 {
    store.rv += 1;
    store.rv
}

fn log(store: &mut Store, kind: &'static str, key: &Key, object: &Value, rv: u64) {
    store.log.push(Event {
        rv,
        resource: key.0.clone(),
        namespace: key.1.clone(),
        kind,
        object: object.clone(),
    });
}

/// The spec-like part of an object (all but metadata and status), for `generation`.
fn spec_part(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("metadata");
        map.remove("status");
    }
    copy
}

fn create(
    store: &mut Store,
    key: Key,
    mut object: Value,
    manager: &str,
    kind: &'static str,
    status_subresource: bool,
) -> Result<Value, Failure> {
    if store.objects.contains_key(&key) {
        return Err(Failure::AlreadyExists(format!(
            "\"{}\" already exists",
            key.2
        )));
    }
    if status_subresource
        && kind != "CustomResourceDefinition"
        && let Some(map) = object.as_object_mut()
    {
        map.remove("status");
    }
    if kind == "CustomResourceDefinition" {
        // The fake's "apiextensions controller": a CRD is established as soon as it exists.
        object["status"] = json!({"conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": ""},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": ""},
        ]});
    }
    if object.get("kind").is_none() {
        object["kind"] = json!(kind);
    }
    let rv = next_rv(store);
    let meta = &mut object["metadata"];
    meta["uid"] = json!(uuid::Uuid::new_v4().to_string());
    meta["resourceVersion"] = json!(rv.to_string());
    meta["generation"] = json!(1);
    meta["creationTimestamp"] =
        json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    let owners = leaves(&object)
        .into_keys()
        .filter(|p| !p.starts_with(".status"))
        .map(|p| (p, (manager.to_owned(), "Update")))
        .collect();
    let mut stored = Stored { object, owners };
    stored.object["metadata"]["managedFields"] =
        managed_fields(&stored.owners, &stored.object["apiVersion"]);
    let object = stored.object.clone();
    log(store, "ADDED", &key, &object, rv);
    store.objects.insert(key, stored);
    Ok(object)
}

/// Store `new` as the object at `key` (which exists), with `manager` owning what it changed.
fn update(
    store: &mut Store,
    key: &Key,
    mut new: Value,
    manager: &str,
    operation: &'static str,
) -> Result<Value, Failure> {
    let Some(stored) = store.objects.get(key) else {
        return Err(Failure::NotFound(format!("\"{}\" not found", key.2)));
    };
    let old = stored.object.clone();
    let mut owners = stored.owners.clone();
    // What the server owns stays the server's.
    for field in [
        "uid",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "name",
    ] {
        match old["metadata"].get(field) {
            Some(v) => new["metadata"][field] = v.clone(),
            None => remove_path(&mut new, &format!(".metadata.{field}")),
        }
    }
    if key.1.is_empty() {
        remove_path(&mut new, ".metadata.namespace");
    } else {
        new["metadata"]["namespace"] = json!(key.1);
    }
    new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
    new["metadata"]["managedFields"] = old["metadata"]["managedFields"].clone();
    if new == old {
        return Ok(old);
    }
    if operation == "Update" {
        let before = leaves(&old);
        let after = leaves(&new);
        for (path, value) in &after {
            if before.get(path) != Some(value) {
                owners.insert(path.clone(), (manager.to_owned(), "Update"));
            }
        }
        owners.retain(|path, _| after.contains_key(path));
    }
    if spec_part(&new) != spec_part(&old) {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        new["metadata"]["generation"] = json!(generation + 1);
    }
    let rv = next_rv(store);
    new["metadata"]["resourceVersion"] = json!(rv.to_string());
    new["metadata"]["managedFields"] = managed_fields(&owners, &new["apiVersion"]);
    let finalized = new["metadata"].get("deletionTimestamp").is_some()
        && new["metadata"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty);
    store.objects.insert(
        key.clone(),
        Stored {
            object: new.clone(),
            owners,
        },
    );
    log(store, "MODIFIED", key, &new, rv);
    if finalized {
        remove(store, key);
    }
    Ok(new)
}

#[allow(clippy::too_many_arguments)]
fn apply(
    store: &mut Store,
    target: &Target,
    key: Key,
    applied: Value,
    manager: &str,
    force: bool,
    status_sub: bool,
) -> Result<(StatusCode, Value), Failure> {
    let applied_leaves = leaves(&applied);
    let Some(stored) = store.objects.get(&key) else {
        if status_sub {
            return Err(not_found(target, &key.2));
        }
        let mut object = applied;
        if target.info.namespaced {
            object["metadata"]["namespace"] = json!(key.1);
        }
        let created = create(
            store,
            key.clone(),
            object,
            manager,
            target.info.kind,
            target.info.status_subresource,
        )?;
        let stored = store.objects.get_mut(&key).unwrap();
        for owner in stored.owners.values_mut() {
            *owner = (manager.to_owned(), "Apply");
        }
        stored.object["metadata"]["managedFields"] =
            managed_fields(&stored.owners, &stored.object["apiVersion"]);
        return Ok((StatusCode::CREATED, created));
    };
    precondition(&stored.object, &applied)?;
    let current = leaves(&stored.object);
    let conflicts: Vec<String> = applied_leaves
        .iter()
        .filter_map(|(path, value)| {
            let (owner, _) = stored.owners.get(path)?;
            (owner != manager && current.get(path) != Some(value))
                .then(|| format!("conflict with \"{owner}\": {path}"))
        })
        .collect();
    if !conflicts.is_empty() && !force {
        return Err(Failure::Conflict(format!(
            "Apply failed with {} conflict(s): {}",
            conflicts.len(),
            conflicts.join("; ")
        )));
    }
    let mut new = stored.object.clone();
    let mut owners = stored.owners.clone();
    // Fields this manager applied before and applies no more are removed (if it alone owns them).
    let dropped: Vec<String> = owners
        .iter()
        .filter(|(path, (owner, op))| {
            owner == manager && *op == "Apply" && !applied_leaves.contains_key(*path)
        })
        .map(|(path, _)| path.clone())
        .collect();
    for path in &dropped {
        remove_path(&mut new, path);
        owners.remove(path);
    }
    merge_applied(&mut new, &applied);
    for path in applied_leaves.keys() {
        owners.insert(path.clone(), (manager.to_owned(), "Apply"));
    }
    let new = scoped(target, status_sub, &stored.object, new);
    let after = leaves(&new);
    owners.retain(|path, _| after.contains_key(path));
    store.objects.get_mut(&key).unwrap().owners = owners;
    let written = update(store, &key, new, manager, "Apply")?;
    Ok((StatusCode::OK, written))
}

/// DELETE: with finalizers the object only gets its `deletionTimestamp`.
fn delete(store: &mut Store, key: &Key) -> Option<Value> {
    let stored = store.objects.get(key)?;
    let has_finalizers = stored.object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    if has_finalizers {
        if stored.object["metadata"].get("deletionTimestamp").is_some() {
            return Some(stored.object.clone());
        }
        let mut new = stored.object.clone();
        new["metadata"]["deletionTimestamp"] =
            json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        let rv = next_rv(store);
        new["metadata"]["resourceVersion"] = json!(rv.to_string());
        let stored = store.objects.get_mut(key).unwrap();
        stored.object = new.clone();
        log(store, "MODIFIED", key, &new, rv);
        if key.0 == "v1/namespaces" {
            terminate_namespace(store, &key.2);
        }
        Some(new)
    } else {
        if key.0 == "v1/namespaces" {
            terminate_namespace(store, &key.2);
        }
        remove(store, key)
    }
}

/// Remove the object for good, and what it owns (the garbage collector's part).
fn remove(store: &mut Store, key: &Key) -> Option<Value> {
    let stored = store.objects.remove(key)?;
    let mut object = stored.object;
    let rv = next_rv(store);
    object["metadata"]["resourceVersion"] = json!(rv.to_string());
    log(store, "DELETED", key, &object, rv);
    let uid = object["metadata"]["uid"].clone();
    let owned: Vec<Key> = store
        .objects
        .iter()
        .filter(|((_, ns, _), s)| {
            *ns == key.1
                && s.object["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
        })
        .map(|(k, _)| k.clone())
        .collect();
    for k in owned {
        delete(store, &k);
    }
    Some(object)
}

/// The namespace controller: everything in the namespace is deleted.
fn terminate_namespace(store: &mut Store, namespace: &str) {
    let keys: Vec<Key> = store
        .objects
        .keys()
        .filter(|(_, ns, _)| ns == namespace)
        .cloned()
        .collect();
    for key in keys {
        delete(store, &key);
    }
}

// ---------------------------------------------------------------------------------------------
// Reads

fn label_selector_matches(selector: &str, labels: &Value) -> bool {
    selector
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .all(|term| {
            if let Some((k, v)) = term.split_once("!=") {
                labels[k.trim()].as_str() != Some(v.trim())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                labels[k.trim()].as_str() == Some(v.trim())
            } else if let Some(k) = term.strip_prefix('!') {
                labels.get(k.trim()).is_none()
            } else {
                labels.get(term).is_some()
            }
        })
}

fn field_selector_matches(selector: &str, object: &Value) -> bool {
    selector
        .split(',')
        .filter(|t| !t.is_empty())
        .all(|term| match term.split_once('=') {
            Some(("metadata.name", v)) => object["metadata"]["name"].as_str() == Some(v),
            Some(("metadata.namespace", v)) => object["metadata"]["namespace"].as_str() == Some(v),
            _ => true,
        })
}

fn selected(
    target: &Target,
    query: &HashMap<String, String>,
    namespace: &str,
    object: &Value,
) -> bool {
    (target.namespace.is_empty() || target.namespace == namespace)
        && query
            .get("labelSelector")
            .is_none_or(|s| label_selector_matches(s, &object["metadata"]["labels"]))
        && query
            .get("fieldSelector")
            .is_none_or(|s| field_selector_matches(s, object))
}

fn metadata_view(object: &Value) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": object["metadata"],
    })
}

fn list(
    store: &Store,
    target: &Target,
    query: &HashMap<String, String>,
    metadata_only: bool,
) -> Value {
    // Pages as the real server's: `limit`, and a `continue` token that carries the offset and
    // the resourceVersion of the first page (every page reports that one, so a watch from it
    // misses nothing).
    let (offset, rv) = query
        .get("continue")
        .and_then(|c| c.split_once(':'))
        .and_then(|(o, rv)| Some((o.parse::<usize>().ok()?, rv.parse::<u64>().ok()?)))
        .unwrap_or((0, store.rv));
    let limit = query
        .get("limit")
        .filter(|_| query.get("resourceVersion").is_none_or(|rv| rv != "0"))
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let matching: Vec<&Stored> = store
        .objects
        .iter()
        .filter(|((resource, ns, _), s)| {
            *resource == target.resource && selected(target, query, ns, &s.object)
        })
        .map(|(_, s)| s)
        .collect();
    let page = matching.iter().skip(offset).take(limit);
    let items: Vec<Value> = page
        .map(|s| {
            if metadata_only {
                metadata_view(&s.object)
            } else {
                s.object.clone()
            }
        })
        .collect();
    let next = offset.saturating_add(limit);
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if next < matching.len() {
        meta["continue"] = json!(format!("{next}:{rv}"));
    }
    let (api_version, kind) = if metadata_only {
        (
            "meta.k8s.io/v1".to_owned(),
            "PartialObjectMetadataList".to_owned(),
        )
    } else {
        (
            target.api_version.clone(),
            format!("{}List", target.info.kind),
        )
    };
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": meta,
        "items": items,
    })
}

fn watch_response(
    shared: Shared,
    target: Target,
    query: HashMap<String, String>,
    metadata_only: bool,
) -> Response {
    let mut since: u64 = query
        .get("resourceVersion")
        .and_then(|rv| rv.parse().ok())
        .unwrap_or_else(|| shared.store.lock().unwrap().rv);
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map_or(Duration::from_secs(300), Duration::from_secs);
    let deadline = tokio::time::Instant::now() + timeout;
    let mut latest = shared.latest.subscribe();
    let stream = async_stream_lines(move |tx| async move {
        loop {
            let lines: Vec<String> = {
                let store = shared.store.lock().unwrap();
                let start = store.log.partition_point(|e| e.rv <= since);
                let lines = store.log[start..]
                    .iter()
                    .filter(|e| {
                        e.resource == target.resource
                            && selected(&target, &query, &e.namespace, &e.object)
                    })
                    .map(|e| {
                        let object = if metadata_only {
                            metadata_view(&e.object)
                        } else {
                            e.object.clone()
                        };
                        format!("{}\n", json!({"type": e.kind, "object": object}))
                    })
                    .collect();
                since = store.rv;
                lines
            };
            for line in lines {
                if tx.send(line).await.is_err() {
                    return;
                }
            }
            tokio::select! {
                changed = latest.changed() => if changed.is_err() { return },
                () = tokio::time::sleep_until(deadline) => return,
            }
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// A body stream fed by a task through a channel; the task stops when the client goes.
fn async_stream_lines<F, Fut>(
    produce: F,
) -> impl futures::Stream<Item = Result<String, std::io::Error>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<String>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(produce(tx));
    futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|line| (Ok(line), rx))
    })
}
