//! What is served: the built-in resources, and those of every CRD in the store; and which
//! resource (and object) a request's path names.

use serde_json::Value;

use crate::store::{CRDS, Store};

/// What a resource is: its kind, whether it lives in a namespace, whether `/status` is a
/// subresource, whether its objects have a `generation`.
#[derive(Debug, Clone)]
pub(crate) struct ResourceInfo {
    pub kind: String,
    pub namespaced: bool,
    pub status_subresource: bool,
    pub generation: bool,
    /// Served from a CRD (no strategic merge patch).
    pub custom: bool,
}

/// Built-in resources: group ("" for core), plural, kind, namespaced, `/status`, generation.
const BUILT_IN: &[(&str, &str, &str, bool, bool, bool)] = &[
    ("", "namespaces", "Namespace", false, true, false),
    ("", "nodes", "Node", false, true, false),
    ("", "pods", "Pod", true, true, true),
    ("", "secrets", "Secret", true, false, false),
    ("", "configmaps", "ConfigMap", true, false, false),
    ("", "events", "Event", true, false, false),
    ("events.k8s.io", "events", "Event", true, false, false),
    ("coordination.k8s.io", "leases", "Lease", true, false, false),
    (
        "policy",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
        true,
        true,
    ),
    (
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        true,
        true,
    ),
];

pub(crate) fn crd_resource() -> ResourceInfo {
    ResourceInfo {
        kind: "CustomResourceDefinition".to_owned(),
        namespaced: false,
        status_subresource: true,
        generation: true,
        custom: false,
    }
}

/// The resource `plural` of `group` (`""` for core) at `version`, if served.
pub(crate) fn lookup(
    store: &Store,
    group: &str,
    version: &str,
    plural: &str,
) -> Option<ResourceInfo> {
    if let Some((.., kind, namespaced, status_subresource, generation)) = BUILT_IN
        .iter()
        .find(|(g, p, ..)| *g == group && *p == plural)
    {
        return Some(ResourceInfo {
            kind: (*kind).to_owned(),
            namespaced: *namespaced,
            status_subresource: *status_subresource,
            generation: *generation,
            custom: false,
        });
    }
    // A custom resource: its CRD is named `<plural>.<group>` and serves `version`.
    let key = (CRDS.to_owned(), String::new(), format!("{plural}.{group}"));
    let crd = &store.get(&key)?.object;
    let spec = &crd["spec"];
    let served = spec["versions"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == version && v["served"] != Value::Bool(false))?;
    Some(ResourceInfo {
        kind: spec["names"]["kind"].as_str()?.to_owned(),
        namespaced: spec["scope"] == "Namespaced",
        status_subresource: served["subresources"].get("status").is_some(),
        generation: true,
        custom: true,
    })
}

/// A request's path, taken apart (not yet known to be served).
#[derive(Debug, Clone)]
pub(crate) struct Path {
    pub group: String,
    pub version: String,
    pub plural: String,
    /// `""` when the path names no namespace.
    pub namespace: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

impl Path {
    /// `group/version` (`version` for the core group).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `group/version/plural`: the first part of every key of this resource.
    pub fn resource(&self) -> String {
        format!("{}/{}", self.api_version(), self.plural)
    }

    pub fn parse(path: &str) -> Option<Self> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, version, rest) = match segments.as_slice() {
            ["api", "v1", rest @ ..] => ("", "v1", rest),
            ["apis", group, version, rest @ ..] => (*group, *version, rest),
            _ => return None,
        };
        let (namespace, rest): (&str, &[&str]) = match rest {
            // A Namespace's own subresources (no resource is called `status` or `finalize`).
            ["namespaces", _, "status" | "finalize"] => ("", rest),
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (ns, rest),
            other => ("", other),
        };
        let (plural, name, subresource) = match rest {
            [plural] => (*plural, None, None),
            [plural, name] => (*plural, Some(*name), None),
            [plural, name, sub] => (*plural, Some(*name), Some(*sub)),
            _ => return None,
        };
        Some(Self {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
            namespace: namespace.to_owned(),
            name: name.map(str::to_owned),
            subresource: subresource.map(str::to_owned),
        })
    }
}
