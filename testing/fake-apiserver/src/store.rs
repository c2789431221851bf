//! The objects, the event log, and the writes: create, update, delete; and the controllers that
//! act on what a write leaves behind (garbage collector, namespace controller), run to a fixed
//! point after every request.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde_json::{Value, json};

use crate::fields::{self, Operation, Owners, Scope};
use crate::resources::ResourceInfo;

pub(crate) const CRDS: &str = "apiextensions.k8s.io/v1/customresourcedefinitions";
pub(crate) const NAMESPACES: &str = "v1/namespaces";
const PODS: &str = "v1/pods";
const SECRETS: &str = "v1/secrets";

/// Where an object lives: `group/version/plural`, namespace (`""` when cluster-scoped), name.
pub(crate) type Key = (String, String, String);

pub(crate) struct Stored {
    pub object: Value,
    pub owners: Owners,
    status_subresource: bool,
    generation: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

pub(crate) struct Event {
    pub rv: u64,
    pub resource: String,
    pub namespace: String,
    pub kind: EventType,
    pub object: Value,
    /// The object before a `MODIFIED` (a filtered watch turns a change of match into `ADDED` or
    /// `DELETED`).
    pub previous: Option<Value>,
}

/// Errors, as the API server reports them.
#[derive(Debug)]
pub(crate) enum Failure {
    BadRequest(String),
    Forbidden(String),
    NotFound(String),
    MethodNotAllowed(String),
    AlreadyExists(String),
    Conflict(String),
    Invalid(String),
    UnsupportedMediaType(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (Self::BadRequest(m)
        | Self::Forbidden(m)
        | Self::NotFound(m)
        | Self::MethodNotAllowed(m)
        | Self::AlreadyExists(m)
        | Self::Conflict(m)
        | Self::Invalid(m)
        | Self::UnsupportedMediaType(m)) = self;
        f.write_str(m)
    }
}

#[derive(Default)]
pub(crate) struct Store {
    /// The latest resourceVersion (one counter for every object, as etcd's revision).
    pub rv: u64,
    pub objects: BTreeMap<Key, Stored>,
    /// Every event since the start, in resourceVersion order.
    pub log: Vec<Event>,
    pub requests: HashMap<String, u64>,
    /// Requests naming one object, by `METHOD group/version/plural/namespace/name[/subresource]`.
    pub object_requests: HashMap<String, u64>,
    /// What `pods/{name}/log` answers, by (namespace, pod): the kubelet's part, set by the test
    /// (`FakeApiServer::set_pod_log`).
    pub pod_logs: HashMap<(String, String), String>,
    /// Namespaces in which every request is refused (403), as RBAC refuses a client whose
    /// Role there was deleted (`FakeApiServer::forbid_namespace`).
    pub forbidden_namespaces: std::collections::BTreeSet<String>,
    /// uid → key of every object.
    uids: HashMap<String, Key>,
    /// (uid, namespace) of objects removed since the garbage collector last looked.
    removed: VecDeque<(String, String)>,
}

fn now() -> Value {
    json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

fn has_finalizers(object: &Value) -> bool {
    object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

fn deleting(object: &Value) -> bool {
    object["metadata"].get("deletionTimestamp").is_some()
}

/// What `generation` follows: all but metadata, and but status where it is a subresource.
fn spec_part(object: &Value, status_subresource: bool) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("metadata");
        if status_subresource {
            map.remove("status");
        }
    }
    copy
}

impl Store {
    pub fn get(&self, key: &Key) -> Option<&Stored> {
        self.objects.get(key)
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn log(&mut self, kind: EventType, key: &Key, object: &Value, previous: Option<Value>) {
        self.log.push(Event {
            rv: self.rv,
            resource: key.0.clone(),
            namespace: key.1.clone(),
            kind,
            object: object.clone(),
            previous,
        });
    }

    /// The Namespace `name` is being deleted.
    pub fn namespace_terminating(&self, name: &str) -> bool {
        let key = (NAMESPACES.to_owned(), String::new(), name.to_owned());
        self.objects.get(&key).is_some_and(|s| deleting(&s.object))
    }

    /// Create the object at `key`: POST, apply to a missing object, seeding.
    pub fn create(
        &mut self,
        key: Key,
        mut object: Value,
        manager: &str,
        operation: Operation,
        info: &ResourceInfo,
    ) -> Result<Value, Failure> {
        if self.objects.contains_key(&key) {
            return Err(Failure::AlreadyExists(format!(
                "{} \"{}\" already exists",
                key.0.rsplit('/').next().unwrap_or_default(),
                key.2
            )));
        }
        if info.namespaced && self.namespace_terminating(&key.1) {
            return Err(Failure::Forbidden(format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {} because \
                 it is being terminated",
                key.0.rsplit('/').next().unwrap_or_default(),
                key.2,
                key.1
            )));
        }
        if !object.is_object() {
            return Err(Failure::BadRequest("the body is not an object".into()));
        }
        if info.status_subresource
            && let Some(map) = object.as_object_mut()
        {
            map.remove("status");
        }
        if key.0 == CRDS {
            let spec = &object["spec"];
            let expected = format!(
                "{}.{}",
                spec["names"]["plural"].as_str().unwrap_or_default(),
                spec["group"].as_str().unwrap_or_default()
            );
            if key.2 != expected {
                return Err(Failure::Invalid(format!(
                    "CustomResourceDefinition \"{}\" is invalid: metadata.name: must be \
                     spec.names.plural+\".\"+spec.group ({expected})",
                    key.2
                )));
            }
        }
        if object.get("kind").is_none() {
            object["kind"] = json!(info.kind);
        }
        if object.get("apiVersion").is_none() {
            let api_version = key.0.rsplit_once('/').map_or("", |(v, _)| v);
            object["apiVersion"] = json!(api_version);
        }
        let meta = &mut object["metadata"];
        if let Some(map) = meta.as_object_mut() {
            for field in [
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                map.remove(field);
            }
        }
        meta["name"] = json!(key.2);
        if info.namespaced {
            if meta["namespace"]
                .as_str()
                .is_some_and(|ns| !ns.is_empty() && ns != key.1)
            {
                return Err(Failure::BadRequest(
                    "the namespace of the provided object does not match the namespace sent \
                     on the request"
                        .into(),
                ));
            }
            meta["namespace"] = json!(key.1);
        } else if let Some(map) = meta.as_object_mut() {
            map.remove("namespace");
        }
        let scope = Scope::new(info.status_subresource, false);
        let owners = fields::on_create(&object, manager, operation, scope);
        // What controllers of the real cluster would have written by the time anyone looks.
        if key.0 == CRDS {
            object["status"] = json!({
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                     "message": "no conflicts found"},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                     "message": "the initial names have been accepted"},
                ],
                "acceptedNames": object["spec"]["names"].clone(),
                "storedVersions": object["spec"]["versions"].as_array()
                    .into_iter().flatten()
                    .filter(|v| v["storage"] == true)
                    .map(|v| v["name"].clone())
                    .collect::<Vec<_>>(),
            });
        }
        if key.0 == NAMESPACES {
            object["spec"]["finalizers"] = json!(["kubernetes"]);
            object["status"] = json!({"phase": "Active"});
        }
        let rv = self.next_rv();
        let uid = uuid::Uuid::new_v4().to_string();
        let managed_fields = fields::managed_fields(
            &owners,
            &object["apiVersion"],
            info.status_subresource,
            &Value::Null,
        );
        let meta = &mut object["metadata"];
        meta["uid"] = json!(uid);
        meta["resourceVersion"] = json!(rv.to_string());
        if info.generation {
            meta["generation"] = json!(1);
        }
        meta["creationTimestamp"] = now();
        meta["managedFields"] = managed_fields;
        self.log(EventType::Added, &key, &object, None);
        self.uids.insert(uid, key.clone());
        self.objects.insert(
            key,
            Stored {
                object: object.clone(),
                owners,
                status_subresource: info.status_subresource,
                generation: info.generation,
            },
        );
        Ok(object)
    }

    /// Set the status of a just-seeded object, as if written before anyone watched.
    pub fn set_status_unlogged(&mut self, key: &Key, status: Value) {
        if let Some(stored) = self.objects.get_mut(key) {
            stored.object["status"] = status;
            let object = stored.object.clone();
            if let Some(event) = self.log.last_mut()
                && event.object["metadata"]["uid"] == object["metadata"]["uid"]
            {
                event.object = object;
            }
        }
    }

    /// Store `new` as the object at `key` (which exists): `manager`'s update (it owns what it
    /// changed), or an apply that computed `owners`. Returns the object as stored.
    pub fn update(
        &mut self,
        key: &Key,
        mut new: Value,
        manager: &str,
        applied: Option<Owners>,
    ) -> Result<Value, Failure> {
        let Some(stored) = self.objects.get(key) else {
            return Err(Failure::NotFound(format!("\"{}\" not found", key.2)));
        };
        let old = &stored.object;
        if !new.is_object() {
            return Err(Failure::BadRequest("the body is not an object".into()));
        }
        // What the server owns stays the server's.
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "resourceVersion",
            "managedFields",
        ] {
            match old["metadata"].get(field) {
                Some(v) => new["metadata"][field] = v.clone(),
                None => fields::remove_path(&mut new, &["metadata".into(), field.into()]),
            }
        }
        for field in ["apiVersion", "kind"] {
            if new.get(field).is_none() {
                new[field] = old[field].clone();
            }
        }
        if deleting(old) {
            let had = old["metadata"]["finalizers"].as_array();
            let added: Vec<String> = new["metadata"]["finalizers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|f| had.is_none_or(|had| !had.contains(f)))
                .map(|f| format!("{:?}", f.as_str().unwrap_or_default()))
                .collect();
            if !added.is_empty() {
                return Err(Failure::Invalid(format!(
                    "{} \"{}\" is invalid: metadata.finalizers: Forbidden: no new finalizers \
                     can be added if the object is being deleted, found new finalizers \
                     []string{{{}}}",
                    old["kind"].as_str().unwrap_or("object"),
                    key.2,
                    added.join(", ")
                )));
            }
        }
        let owners = match applied {
            Some(owners) => owners,
            None => fields::on_update(&stored.owners, old, &new, manager),
        };
        if new == *old && owners == stored.owners {
            return Ok(new);
        }
        if stored.generation
            && spec_part(&new, stored.status_subresource)
                != spec_part(old, stored.status_subresource)
        {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
            new["metadata"]["generation"] = json!(generation + 1);
        }
        new["metadata"]["managedFields"] = fields::managed_fields(
            &owners,
            &new["apiVersion"],
            stored.status_subresource,
            &old["metadata"]["managedFields"],
        );
        if deleting(&new) && !has_finalizers(&new) && key.0 != NAMESPACES {
            // The real server never stores the emptied object: the update becomes the deletion
            // (no MODIFIED), whose DELETED event carries the object as last stored, its last
            // finalizers still listed; the answer is the object as the request made it
            // (`deleteWithoutFinalizers`).
            if let Some(gone) = self.remove(key) {
                new["metadata"]["resourceVersion"] = gone["metadata"]["resourceVersion"].clone();
            }
            return Ok(new);
        }
        let previous = old.clone();
        let rv = self.next_rv();
        new["metadata"]["resourceVersion"] = json!(rv.to_string());
        if let Some(stored) = self.objects.get_mut(key) {
            stored.object = new.clone();
            stored.owners = owners;
        }
        self.log(EventType::Modified, key, &new, Some(previous));
        Ok(new)
    }

    /// DELETE: an object with finalizers (and every Namespace) only gets its
    /// `deletionTimestamp`; the rest goes at once. Returns the object as it is now.
    pub fn delete(&mut self, key: &Key) -> Option<Value> {
        let stored = self.objects.get(key)?;
        if deleting(&stored.object) {
            return Some(stored.object.clone());
        }
        if !has_finalizers(&stored.object) && key.0 != NAMESPACES {
            return self.remove(key);
        }
        let previous = stored.object.clone();
        let mut new = previous.clone();
        let meta = &mut new["metadata"];
        meta["deletionTimestamp"] = now();
        meta["deletionGracePeriodSeconds"] = json!(0);
        if let Some(generation) = meta.get("generation").and_then(Value::as_i64) {
            meta["generation"] = json!(generation + 1);
        }
        if key.0 == NAMESPACES {
            new["status"]["phase"] = json!("Terminating");
        }
        let rv = self.next_rv();
        new["metadata"]["resourceVersion"] = json!(rv.to_string());
        if let Some(stored) = self.objects.get_mut(key) {
            stored.object = new.clone();
        }
        self.log(EventType::Modified, key, &new, Some(previous));
        Some(new)
    }

    /// Remove the object for good.
    fn remove(&mut self, key: &Key) -> Option<Value> {
        let stored = self.objects.remove(key)?;
        let mut object = stored.object;
        let rv = self.next_rv();
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.log(EventType::Deleted, key, &object, None);
        let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
        self.uids.remove(uid);
        self.removed.push_back((uid.to_owned(), key.1.clone()));
        Some(object)
    }

    /// Run the garbage collector and the namespace controller until they have nothing to do.
    pub fn settle(&mut self) {
        loop {
            let mut progress = false;
            while let Some((uid, namespace)) = self.removed.pop_front() {
                self.collect_dependents(&uid, &namespace);
                progress = true;
            }
            progress |= self.sweep_namespaces();
            if !progress {
                return;
            }
        }
    }

    /// The garbage collector (background propagation): delete what `uid` owned and nothing else
    /// that exists owns. A namespaced owner owns only objects of its namespace.
    fn collect_dependents(&mut self, uid: &str, namespace: &str) {
        let orphans: Vec<Key> = self
            .objects
            .iter()
            .filter(|((_, ns, _), s)| {
                let refs = s.object["metadata"]["ownerReferences"].as_array();
                (namespace.is_empty() || ns == namespace)
                    && !deleting(&s.object)
                    && refs.is_some_and(|refs| {
                        refs.iter().any(|r| r["uid"] == uid)
                            && refs.iter().all(|r| {
                                r["uid"]
                                    .as_str()
                                    .is_none_or(|owner| !self.uids.contains_key(owner))
                            })
                    })
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in orphans {
            self.delete(&key);
        }
    }

    /// The namespace controller: in each Namespace being deleted, delete its Pods; once none is
    /// left, its Secrets, then everything else (in key order: resource, then name); once nothing
    /// is left, the Namespace (when no finalizer of its own holds it). Whether it did anything.
    fn sweep_namespaces(&mut self) -> bool {
        let first = (NAMESPACES.to_owned(), String::new(), String::new());
        let terminating: Vec<String> = self
            .objects
            .range(first..)
            .take_while(|(k, _)| k.0 == NAMESPACES)
            .filter(|(_, s)| deleting(&s.object))
            .map(|(k, _)| k.2.clone())
            .collect();
        let mut progress = false;
        for namespace in terminating {
            let content: Vec<Key> = self
                .objects
                .keys()
                .filter(|k| k.1 == namespace)
                .cloned()
                .collect();
            if content.is_empty() {
                let key = (NAMESPACES.to_owned(), String::new(), namespace);
                let held = self
                    .objects
                    .get(&key)
                    .is_some_and(|s| has_finalizers(&s.object));
                if !held {
                    self.remove(&key);
                    progress = true;
                }
                continue;
            }
            let pods: Vec<Key> = content.iter().filter(|k| k.0 == PODS).cloned().collect();
            let batch = if pods.is_empty() {
                let (mut first, rest): (Vec<Key>, Vec<Key>) =
                    content.into_iter().partition(|k| k.0 == SECRETS);
                first.extend(rest);
                first
            } else {
                pods
            };
            for key in batch {
                if self.objects.get(&key).is_some_and(|s| !deleting(&s.object)) {
                    self.delete(&key);
                    progress = true;
                }
            }
        }
        progress
    }
}
