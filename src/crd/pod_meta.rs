//! Pods as the operator's Pod watches read them: the metadata (asked for alone), without
//! `managedFields` ([`PodMeta`]); or that and the phase, of whole Pods ([`PodMetaPhase`]).
//!
//! Whoever may edit a namespace may create a Pod there with any labels, `slurm.rs/slurmjob` and
//! `slurm.rs/nodeset` included, and with a `managedFields` entry of their own whose `fieldsV1`
//! nests deeper than serde_json's 128 levels (the API server keeps it). Decoded as a
//! [`Pod`](k8s_openapi::api::core::v1::Pod) or kube's `PartialObjectMeta`, such a Pod failed every
//! list page it was on: the watches of the operator's output Pods and SlurmNodeSet pods, shared
//! by all namespaces, never filled, for any team. A [`PodMeta`] skips `managedFields` unread
//! (as [`WholeSlurmJob`](super::slurmjob::WholeSlurmJob) does) and the rest of the Pod with it.

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};

use super::slurmjob::wire::Metadata;

/// A Pod's metadata, as a watch of `Api<PodMeta>` lists it (`PartialObjectMetadata`; a whole
/// Pod decodes the same way).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodMeta {
    pub metadata: ObjectMeta,
}

/// A Pod's metadata and phase, as a watch of `Api<PodMetaPhase>` lists them: whole Pods (a
/// phase is not in a Pod's metadata), everything else skipped unread.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodMetaPhase {
    pub metadata: ObjectMeta,
    /// `status.phase`; `None` when the Pod has none yet, or one no Kubernetes version writes.
    pub phase: Option<PodPhase>,
}

/// A Pod's `status.phase`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl PodPhase {
    /// The phase a Pod's `status.phase` names; `None` for one Kubernetes does not write.
    pub fn parse(phase: &str) -> Option<Self> {
        Some(match phase {
            "Pending" => Self::Pending,
            "Running" => Self::Running,
            "Succeeded" => Self::Succeeded,
            "Failed" => Self::Failed,
            "Unknown" => Self::Unknown,
            _ => return None,
        })
    }

    /// The phase of `pod` as the API server returned it.
    pub fn of(pod: &Pod) -> Option<Self> {
        Self::parse(pod.status.as_ref()?.phase.as_deref()?)
    }
}

/// A Pod's metadata (without `managedFields`) and phase, from a Pod or its
/// `PartialObjectMetadata`: the rest is skipped unread.
fn decode<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<(ObjectMeta, Option<PodPhase>), D::Error> {
    /// Of a Pod's status, its phase alone.
    #[derive(Deserialize)]
    struct Status<'a> {
        #[serde(default, borrow)]
        phase: Option<Cow<'a, str>>,
    }
    struct Object;
    impl<'de> Visitor<'de> for Object {
        type Value = (ObjectMeta, Option<PodPhase>);

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a Pod")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut metadata = ObjectMeta::default();
            let mut phase = None;
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                match &*key {
                    "metadata" => metadata = map.next_value::<Metadata>()?.0,
                    "status" => {
                        phase = map
                            .next_value::<Option<Status<'de>>>()?
                            .and_then(|status| status.phase)
                            .and_then(|phase| PodPhase::parse(&phase));
                    }
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok((metadata, phase))
        }
    }
    deserializer.deserialize_map(Object)
}

impl<'de> Deserialize<'de> for PodMeta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        decode(deserializer).map(|(metadata, _)| PodMeta { metadata })
    }
}

impl<'de> Deserialize<'de> for PodMetaPhase {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        decode(deserializer).map(|(metadata, phase)| PodMetaPhase { metadata, phase })
    }
}

/// `Resource` for a Pod view: `$metadata_api`, whether its lists and watches ask for metadata
/// only.
macro_rules! pod_view_resource {
    ($view:ty, $metadata_api:expr) => {
        impl Resource for $view {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn metadata_api() -> bool {
                $metadata_api
            }

            fn kind(dt: &()) -> Cow<'_, str> {
                <Pod as Resource>::kind(dt)
            }
            fn group(dt: &()) -> Cow<'_, str> {
                <Pod as Resource>::group(dt)
            }
            fn version(dt: &()) -> Cow<'_, str> {
                <Pod as Resource>::version(dt)
            }
            fn api_version(dt: &()) -> Cow<'_, str> {
                <Pod as Resource>::api_version(dt)
            }
            fn plural(dt: &()) -> Cow<'_, str> {
                <Pod as Resource>::plural(dt)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

// Metadata only (`PartialObjectMetadata`, as kube's `PartialObjectMeta` asks): its items carry
// `managedFields` too, skipped the same way.
pod_view_resource!(PodMeta, true);
// Whole Pods: the phase is in their status.
pod_view_resource!(PodMetaPhase, false);

#[cfg(test)]
mod tests {
    use kube::core::{ObjectList, WatchEvent};
    use serde_json::{Value, json};

    use super::*;

    /// A Pod as a tenant may make one: our label, and a managed field entry nested `levels`
    /// objects deep.
    fn pod(name: &str, levels: usize) -> Value {
        let nested = (0..levels).fold(json!({}), |inner, _| json!({"f:a": inner}));
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name, "namespace": "team-a", "uid": format!("uid-{name}"),
                "labels": {"slurm.rs/slurmjob": "x"},
                "ownerReferences": [{"apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
                    "name": "x", "uid": "u", "controller": true}],
                "managedFields": [{
                    "manager": "tenant", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": nested,
                }],
            },
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running"},
        })
    }

    /// A list page and a watch event holding a Pod nested past serde_json's limit decode, with
    /// every Pod's metadata but `managedFields`; as a Pod, the same page does not.
    #[test]
    fn a_pod_nested_too_deep_fails_no_page() {
        let page = json!({
            "apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "9"},
            "items": [pod("deep", 500), pod("plain", 1)],
        })
        .to_string();
        assert!(serde_json::from_str::<ObjectList<Pod>>(&page).is_err());
        let list: ObjectList<PodMeta> = serde_json::from_str(&page).unwrap();
        let names: Vec<_> = list.items.iter().map(|p| p.metadata.name.clone()).collect();
        assert_eq!(names, [Some("deep".to_owned()), Some("plain".to_owned())]);
        let deep = &list.items[0].metadata;
        assert_eq!(deep.managed_fields, None);
        assert_eq!(deep.uid.as_deref(), Some("uid-deep"));
        assert_eq!(
            deep.labels.as_ref().unwrap()["slurm.rs/slurmjob"],
            "x".to_owned()
        );
        assert_eq!(
            deep.owner_references.as_ref().unwrap()[0].controller,
            Some(true)
        );

        // As the API server writes it: the type first (serde reads the object straight on).
        let event = format!(r#"{{"type":"MODIFIED","object":{}}}"#, pod("deep", 500));
        let Ok(WatchEvent::Modified(pod)) = serde_json::from_str::<WatchEvent<PodMeta>>(&event)
        else {
            panic!("not decoded: {event:.80}");
        };
        assert_eq!(pod.metadata.name.as_deref(), Some("deep"));
        assert_eq!(<PodMeta as Resource>::plural(&()), "pods");
        assert_eq!(<PodMeta as Resource>::api_version(&()), "v1");
    }

    /// The phase view lists whole Pods, and keeps of them the metadata (without
    /// `managedFields`, nested too deep here) and the phase; a phase no Kubernetes writes is
    /// none.
    #[test]
    fn a_whole_pod_decodes_to_its_metadata_and_phase() {
        assert!(!PodMetaPhase::metadata_api());
        let mut odd = pod("odd", 1);
        odd["status"]["phase"] = json!("Exploded");
        let mut fresh = pod("fresh", 1);
        fresh.as_object_mut().unwrap().remove("status");
        let mut failed = pod("failed", 1);
        failed["status"] = json!({"phase": "Failed", "reason": "Evicted",
            "conditions": [{"type": "Ready", "status": "False"}]});
        let page = json!({
            "apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "9"},
            "items": [pod("deep", 500), odd, fresh, failed],
        })
        .to_string();
        let list: ObjectList<PodMetaPhase> = serde_json::from_str(&page).unwrap();
        let seen: Vec<_> = list
            .items
            .iter()
            .map(|p| {
                assert_eq!(p.metadata.managed_fields, None);
                (p.metadata.name.clone().unwrap(), p.phase)
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("deep".to_owned(), Some(PodPhase::Running)),
                ("odd".to_owned(), None),
                ("fresh".to_owned(), None),
                ("failed".to_owned(), Some(PodPhase::Failed)),
            ]
        );
        let whole: Pod = serde_json::from_value(pod("plain", 1)).unwrap();
        assert_eq!(PodPhase::of(&whole), Some(PodPhase::Running));
    }

    /// The watches ask for metadata only, and the API server's metadata page decodes the same
    /// way: `managedFields` are in it too.
    #[test]
    fn a_metadata_page_decodes_without_managed_fields() {
        assert!(PodMeta::metadata_api());
        let partial = |name: &str, levels: usize| {
            json!({
                "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                "metadata": pod(name, levels)["metadata"].clone(),
            })
        };
        let page = json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
            "metadata": {"resourceVersion": "9"},
            "items": [partial("deep", 500), partial("plain", 1)],
        })
        .to_string();
        assert!(
            serde_json::from_str::<ObjectList<kube::core::PartialObjectMeta<Pod>>>(&page).is_err()
        );
        let list: ObjectList<PodMeta> = serde_json::from_str(&page).unwrap();
        let names: Vec<_> = list
            .items
            .iter()
            .map(|p| (p.metadata.name.clone(), p.metadata.managed_fields.clone()))
            .collect();
        assert_eq!(
            names,
            [
                (Some("deep".to_owned()), None),
                (Some("plain".to_owned()), None)
            ]
        );
    }
}
