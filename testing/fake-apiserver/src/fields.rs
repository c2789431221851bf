//! Field ownership: which manager owns which field, server-side apply, and
//! `metadata.managedFields` as the real server writes it.
//!
//! A field is a leaf of the object: objects recurse, everything else (scalars, lists, empty
//! objects) is one field. A field may have several owners (managers that applied the value it
//! has); an update (PUT, PATCH, create) that changes a field makes its manager the only owner.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::store::Failure;

/// A field's path: the keys from the object's root (keys may hold dots: label names do).
pub(crate) type FieldPath = Vec<String>;

/// Field → manager → how the manager last wrote it.
pub(crate) type Owners = BTreeMap<FieldPath, BTreeMap<String, Operation>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Self::Apply => "Apply",
            Self::Update => "Update",
        }
    }
}

/// Which part of an object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The resource has no status subresource: all of it.
    All,
    /// A write to the object of a resource with a status subresource: all but the status.
    Main,
    /// A write to `/status`: the status.
    Status,
}

impl Scope {
    pub fn new(status_subresource: bool, to_status: bool) -> Self {
        match (status_subresource, to_status) {
            (false, _) => Self::All,
            (true, false) => Self::Main,
            (true, true) => Self::Status,
        }
    }

    pub fn covers(self, path: &[String]) -> bool {
        match self {
            Self::All => true,
            Self::Main => !is_status(path),
            Self::Status => is_status(path),
        }
    }

    /// `new` cut to this scope: what is outside comes from `current`.
    pub fn cut(self, current: &Value, new: Value) -> Value {
        let keep_status = |mut object: Value, status: Option<&Value>| {
            match (status, object.as_object_mut()) {
                (Some(status), Some(map)) => {
                    map.insert("status".to_owned(), status.clone());
                }
                (None, Some(map)) => {
                    map.remove("status");
                }
                _ => {}
            }
            object
        };
        match self {
            Self::All => new,
            Self::Main => keep_status(new, current.get("status")),
            Self::Status => keep_status(current.clone(), new.get("status")),
        }
    }
}

fn is_status(path: &[String]) -> bool {
    path.first().is_some_and(|k| k == "status")
}

/// Fields the server owns, never a manager.
fn server_field(path: &[String]) -> bool {
    match path {
        [one] => one == "apiVersion" || one == "kind",
        [meta, field, ..] if meta == "metadata" => matches!(
            field.as_str(),
            "name"
                | "namespace"
                | "uid"
                | "resourceVersion"
                | "generation"
                | "creationTimestamp"
                | "deletionTimestamp"
                | "deletionGracePeriodSeconds"
                | "managedFields"
        ),
        _ => false,
    }
}

/// The fields of `value` that managers own, and their values.
pub(crate) fn leaves(value: &Value) -> BTreeMap<FieldPath, Value> {
    fn walk(path: &mut FieldPath, value: &Value, out: &mut BTreeMap<FieldPath, Value>) {
        if server_field(path) {
            return;
        }
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (k, v) in map {
                    path.push(k.clone());
                    walk(path, v, out);
                    path.pop();
                }
            }
            other if !path.is_empty() => {
                out.insert(path.clone(), other.clone());
            }
            _ => {}
        }
    }
    let mut out = BTreeMap::new();
    walk(&mut Vec::new(), value, &mut out);
    out
}

pub(crate) fn remove_path(value: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = value;
    for part in parents {
        match node.get_mut(part.as_str()) {
            Some(next) => node = next,
            None => return,
        }
    }
    if let Some(map) = node.as_object_mut() {
        map.remove(last.as_str());
    }
}

/// Deep merge for apply: objects merge, everything else replaces.
fn merge_applied(target: &mut Value, applied: &Value) {
    match (target, applied) {
        (Value::Object(t), Value::Object(a)) => {
            for (k, v) in a {
                match t.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        merge_applied(existing, v);
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

/// Owners of a new object: `manager` owns every field in `scope`.
pub(crate) fn on_create(
    object: &Value,
    manager: &str,
    operation: Operation,
    scope: Scope,
) -> Owners {
    leaves(object)
        .into_keys()
        .filter(|p| scope.covers(p))
        .map(|p| (p, BTreeMap::from([(manager.to_owned(), operation)])))
        .collect()
}

/// Owners after an update by `manager` from `old` to `new`: what it changed is its alone.
pub(crate) fn on_update(owners: &Owners, old: &Value, new: &Value, manager: &str) -> Owners {
    let before = leaves(old);
    let after = leaves(new);
    let mut owners = owners.clone();
    for (path, value) in &after {
        if before.get(path) != Some(value) {
            owners.insert(
                path.clone(),
                BTreeMap::from([(manager.to_owned(), Operation::Update)]),
            );
        }
    }
    owners.retain(|path, _| after.contains_key(path));
    owners
}

/// The object and its owners after `manager` applied `applied` (cut to `scope`) to `current`.
pub(crate) fn apply(
    current: &Value,
    owners: &Owners,
    applied: &Value,
    manager: &str,
    force: bool,
    scope: Scope,
) -> Result<(Value, Owners), Failure> {
    let applied_leaves: BTreeMap<FieldPath, Value> = leaves(applied)
        .into_iter()
        .filter(|(p, _)| scope.covers(p))
        .collect();
    let current_leaves = leaves(current);
    let mut conflicts = Vec::new();
    for (path, value) in &applied_leaves {
        if current_leaves.get(path) == Some(value) {
            continue;
        }
        for other in owners.get(path).into_iter().flatten().map(|(m, _)| m) {
            if other != manager {
                conflicts.push((path.clone(), other.clone()));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        let list: Vec<String> = conflicts
            .iter()
            .map(|(path, other)| format!("conflict with \"{other}\": .{}", path.join(".")))
            .collect();
        return Err(Failure::Conflict(format!(
            "Apply failed with {} conflict{}: {}",
            list.len(),
            if list.len() == 1 { "" } else { "s" },
            list.join("; ")
        )));
    }
    let mut new = current.clone();
    let mut owners = owners.clone();
    // Fields this manager applied before and applies no more: no longer its; gone if nobody
    // else owns them.
    for (path, managers) in &mut owners {
        if scope.covers(path)
            && managers.get(manager) == Some(&Operation::Apply)
            && !applied_leaves.contains_key(path)
        {
            managers.remove(manager);
            if managers.is_empty() {
                remove_path(&mut new, path);
            }
        }
    }
    owners.retain(|_, managers| !managers.is_empty());
    merge_applied(&mut new, applied);
    let new = scope.cut(current, new);
    for path in applied_leaves.keys() {
        let managers = owners.entry(path.clone()).or_default();
        if conflicts.iter().any(|(p, _)| p == path) {
            // Forced: the others lose the field.
            managers.clear();
        }
        managers.insert(manager.to_owned(), Operation::Apply);
    }
    let after = leaves(&new);
    owners.retain(|path, _| after.contains_key(path));
    Ok((new, owners))
}

/// `metadata.managedFields` from the owners, as the API server writes it (FieldsV1): one entry
/// per manager, operation and subresource. An entry whose fields did not change keeps its time.
pub(crate) fn managed_fields(
    owners: &Owners,
    api_version: &Value,
    scope_status: bool,
    previous: &Value,
) -> Value {
    type EntryKey<'a> = (&'a str, Operation, bool);
    let mut entries: BTreeMap<EntryKey<'_>, Map<String, Value>> = BTreeMap::new();
    for (path, managers) in owners {
        let subresource = scope_status && is_status(path);
        for (manager, operation) in managers {
            let mut node = entries
                .entry((manager.as_str(), *operation, subresource))
                .or_default();
            for part in path {
                let next = node
                    .entry(format!("f:{part}"))
                    .or_insert_with(|| Value::Object(Map::new()));
                node = match next.as_object_mut() {
                    Some(map) => map,
                    None => break,
                };
            }
        }
    }
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let previous = previous.as_array().map(Vec::as_slice).unwrap_or_default();
    Value::Array(
        entries
            .into_iter()
            .map(|((manager, operation, subresource), fields)| {
                let fields = Value::Object(fields);
                let same = |e: &&Value| {
                    e["manager"] == manager
                        && e["operation"] == operation.as_str()
                        && (e["subresource"] == "status") == subresource
                        && e["fieldsV1"] == fields
                };
                let time = previous
                    .iter()
                    .find(same)
                    .map_or_else(|| json!(now), |e| e["time"].clone());
                let mut entry = json!({
                    "manager": manager, "operation": operation.as_str(),
                    "apiVersion": api_version, "time": time,
                    "fieldsType": "FieldsV1", "fieldsV1": fields,
                });
                if subresource {
                    entry["subresource"] = json!("status");
                }
                entry
            })
            .collect(),
    )
}
