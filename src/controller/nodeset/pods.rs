//! Pure pod building and reading: a SlurmNodeSet's pod for an ordinal (labels, owner, the completed
//! slurmd container), the template hash, and the [`PodView`] the planner reads.
//!
//! **The slurmd container** (the container named `slurmd`, else the first one) is completed, not
//! replaced: the template keeps the command, image and `--conf-server` (configless registration
//! needs the slurmctld address; the `slurm-cluster` chart writes it, a hand-written template must
//! too). The operator owns three things in its `args`:
//! - `-Z` (dynamic registration) is added when missing;
//! - `-N <pod name>`: any `-N` in the template is replaced by the literal pod name;
//! - `--conf "<...>"`: the keys the spec sets (`Features`, `Gres`, `CPUs`, `RealMemory`,
//!   `Weight`, in that order — the chart's order) replace the same keys of the template's
//!   `--conf`; its other keys stay (e.g. `Port=`). `Features` is `slurm.features` followed by
//!   `partition-<name>` for each of `slurm.partitions` (see [`PARTITION_FEATURE_PREFIX`]); apart
//!   from those partition features the chart writes the same values.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use super::plan::{PodView, ordinal_of};
use crate::crd::quantity;
use crate::crd::{NodeSetSlurm, SlurmNodeSet};

pub const LABEL_NODESET: &str = "slurm.rs/nodeset";
pub const LABEL_HASH: &str = "slurm.rs/template-hash";
/// Set to `true` on pods whose node runs jobs; the set's PodDisruptionBudget selects it.
pub const LABEL_BUSY: &str = "slurm.rs/busy";
pub const ANNOTATION_DELETION_COST: &str = "slurm.rs/deletion-cost";
pub const ANNOTATION_DRAIN_STARTED: &str = "slurm.rs/drain-started";
/// The pod condition that mirrors the Slurm node state.
pub const CONDITION_NODE_STATE: &str = "SlurmNodeState";
/// Name of the container completed as slurmd when present.
pub const SLURMD_CONTAINER: &str = "slurmd";

/// Label selector of a set's pods.
pub fn selector(nodeset: &str) -> String {
    format!("{LABEL_NODESET}={nodeset}")
}

pub fn pod_name(nodeset: &str, ordinal: u32) -> String {
    format!("{nodeset}-{ordinal}")
}

/// FNV-1a 64 of the template and the Slurm settings (both end up in the pod), as 16 hex digits.
/// Stable across operator versions as long as the serialised spec is.
pub fn template_hash(nodeset: &SlurmNodeSet) -> String {
    let text =
        serde_json::to_string(&(&nodeset.spec.template, &nodeset.spec.slurm)).unwrap_or_default();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Prefix of the node feature added per entry of `spec.slurm.partitions`: slurm.conf selects the
/// nodes with `SlurmNodeSet=<set> Feature=partition-<name>` and `PartitionName=<name> Nodes=<set>`
/// (Slurm 24.11's REST API cannot change partition membership).
pub const PARTITION_FEATURE_PREFIX: &str = "partition-";

/// `slurm.features`, then one `partition-<name>` per partition (no duplicates).
pub fn features(slurm: &NodeSetSlurm) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let partitions = slurm
        .partitions
        .iter()
        .map(|p| format!("{PARTITION_FEATURE_PREFIX}{p}"));
    for feature in slurm.features.iter().cloned().chain(partitions) {
        if !out.contains(&feature) {
            out.push(feature);
        }
    }
    out
}

/// The `--conf` keys the spec sets, in the chart's order.
pub fn conf_entries(slurm: &NodeSetSlurm) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let features = features(slurm);
    if !features.is_empty() {
        out.push(("Features", features.join(",")));
    }
    if let Some(gres) = &slurm.gres {
        out.push(("Gres", gres.clone()));
    }
    if let Some(cpus) = slurm.cpus {
        out.push(("CPUs", cpus.to_string()));
    }
    if let Some(mib) = slurm
        .real_memory
        .as_ref()
        .and_then(|q| quantity::to_mib_floor(&q.0).ok())
    {
        out.push(("RealMemory", mib.to_string()));
    }
    if let Some(weight) = slurm.weight {
        out.push(("Weight", weight.to_string()));
    }
    out
}

/// Merge the spec's keys into a template `--conf` string.
pub fn merge_conf(template: Option<&str>, slurm: &NodeSetSlurm) -> String {
    let ours = conf_entries(slurm);
    let owned = |key: &str| {
        let key = key.to_ascii_lowercase();
        let key = if key == "feature" {
            "features".to_owned()
        } else {
            key
        };
        ours.iter().any(|(k, _)| k.to_ascii_lowercase() == key)
    };
    let mut parts: Vec<String> = ours.iter().map(|(k, v)| format!("{k}={v}")).collect();
    for token in template.unwrap_or_default().split_whitespace() {
        let key = token.split_once('=').map_or(token, |(k, _)| k);
        if !owned(key) {
            parts.push(token.to_owned());
        }
    }
    parts.join(" ")
}

/// Complete the slurmd container's args (see the module docs).
pub fn complete_slurmd(container: &mut Container, pod_name: &str, slurm: &NodeSetSlurm) {
    let args = container.args.take().unwrap_or_default();
    let mut out = Vec::with_capacity(args.len() + 5);
    let mut conf = None;
    let mut dynamic = false;
    let mut iter = args.into_iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "-N" => {
                iter.next();
            }
            "--conf" => conf = iter.next(),
            "-Z" => {
                dynamic = true;
                out.push(arg);
            }
            _ => {
                if let Some(value) = arg.strip_prefix("--conf=") {
                    conf = Some(value.to_owned());
                } else if arg.starts_with("-N") && arg.len() > 2 {
                    // `-Nname`
                } else {
                    out.push(arg);
                }
            }
        }
    }
    if !dynamic {
        out.push("-Z".into());
    }
    out.push("-N".into());
    out.push(pod_name.to_owned());
    let conf = merge_conf(conf.as_deref(), slurm);
    if !conf.is_empty() {
        out.push("--conf".into());
        out.push(conf);
    }
    container.args = Some(out);
}

/// The pod for `ordinal`: the template, our labels, an owner reference, the completed slurmd.
pub fn build_pod(nodeset: &SlurmNodeSet, ordinal: u32, hash: &str) -> Pod {
    let name = pod_name(&nodeset.name_any(), ordinal);
    let template = &nodeset.spec.template;
    let meta = template.metadata.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = meta.labels.unwrap_or_default();
    labels.insert(LABEL_NODESET.into(), nodeset.name_any());
    labels.insert(LABEL_HASH.into(), hash.into());
    let mut spec = template.spec.clone().unwrap_or_default();
    let index = spec
        .containers
        .iter()
        .position(|c| c.name == SLURMD_CONTAINER)
        .unwrap_or(0);
    if let Some(container) = spec.containers.get_mut(index) {
        complete_slurmd(container, &name, &nodeset.spec.slurm);
    }
    // Resolvable as <pod>.<subdomain> when the template names a headless Service.
    spec.hostname = Some(name.clone());
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: nodeset.namespace(),
            labels: Some(labels),
            annotations: meta.annotations,
            owner_references: nodeset.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// What the planner needs of a pod; `None` for a pod not named like one of the set's.
pub fn view(nodeset: &str, pod: &Pod) -> Option<PodView> {
    let name = pod.name_any();
    let ordinal = ordinal_of(nodeset, &name)?;
    let labels = pod.labels();
    let annotations = pod.annotations();
    let status = pod.status.as_ref();
    let conditions = status
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let ready_condition = conditions
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True");
    let ready = ready_condition.is_some();
    let ready_since = ready_condition
        .and_then(|c| c.last_transition_time.as_ref())
        .and_then(|t| DateTime::<Utc>::from_timestamp(t.0.as_second(), 0));
    let node_condition = conditions
        .iter()
        .find(|c| c.type_ == CONDITION_NODE_STATE)
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        });
    let phase = status.and_then(|s| s.phase.as_deref());
    Some(PodView {
        ordinal,
        scheduled: pod
            .spec
            .as_ref()
            .is_some_and(|s| s.node_name.as_deref().is_some_and(|n| !n.is_empty())),
        ready,
        ready_since,
        finished: matches!(phase, Some("Failed" | "Succeeded")),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        deletion_cost: annotations
            .get(ANNOTATION_DELETION_COST)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0),
        template_hash: labels.get(LABEL_HASH).cloned(),
        busy_label: labels.get(LABEL_BUSY).is_some_and(|v| v == "true"),
        drain_started: annotations
            .get(ANNOTATION_DRAIN_STARTED)
            .and_then(|v| DateTime::parse_from_rfc3339(v).ok())
            .map(|t| t.with_timezone(&Utc)),
        node_condition,
        name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn slurm() -> NodeSetSlurm {
        NodeSetSlurm {
            features: vec!["cpu".into(), "x".into()],
            gres: Some("gpu:1".into()),
            cpus: Some(4),
            real_memory: Some(Quantity("2Gi".into())),
            weight: Some(10),
            ..NodeSetSlurm::default()
        }
    }

    #[test]
    fn conf_follows_the_chart_order_and_keeps_foreign_keys() {
        assert_eq!(
            merge_conf(Some("Features=old CPUs=1 Port=17001 feature=y"), &slurm()),
            "Features=cpu,x Gres=gpu:1 CPUs=4 RealMemory=2048 Weight=10 Port=17001"
        );
        assert_eq!(merge_conf(None, &NodeSetSlurm::default()), "");
    }

    #[test]
    fn slurmd_args_get_the_pod_name_dynamic_flag_and_conf() {
        let mut c = Container {
            name: "slurmd".into(),
            args: Some(
                [
                    "-D",
                    "--conf-server",
                    "ctld:6817",
                    "-N",
                    "$(POD_NAME)",
                    "--conf",
                    "Features=cpu,x CPUs=4",
                ]
                .map(String::from)
                .to_vec(),
            ),
            ..Container::default()
        };
        complete_slurmd(&mut c, "gpu-3", &slurm());
        assert_eq!(
            c.args.unwrap(),
            [
                "-D",
                "--conf-server",
                "ctld:6817",
                "-Z",
                "-N",
                "gpu-3",
                "--conf",
                "Features=cpu,x Gres=gpu:1 CPUs=4 RealMemory=2048 Weight=10"
            ]
        );
    }

    #[test]
    fn partitions_become_features_after_the_set_features() {
        let spec = NodeSetSlurm {
            features: vec!["cpu".into(), "partition-gpu".into()],
            partitions: vec!["gpu".into(), "debug".into()],
            ..NodeSetSlurm::default()
        };
        assert_eq!(
            merge_conf(Some("Features=old Port=1"), &spec),
            "Features=cpu,partition-gpu,partition-debug Port=1"
        );
        let only = NodeSetSlurm {
            partitions: vec!["debug".into()],
            ..NodeSetSlurm::default()
        };
        assert_eq!(merge_conf(None, &only), "Features=partition-debug");
    }

    #[test]
    fn ready_since_is_the_ready_conditions_transition_time() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cpu-2"},
            "status": {"conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-02T03:04:05Z"},
            ]},
        }))
        .unwrap();
        let v = view("cpu", &pod).unwrap();
        assert!(v.ready);
        assert_eq!(
            v.ready_since,
            Some(
                DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z")
                    .unwrap()
                    .with_timezone(&Utc)
            )
        );
        let not_ready: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cpu-2"},
            "status": {"conditions": [
                {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-02T03:04:05Z"},
            ]},
        }))
        .unwrap();
        let v = view("cpu", &not_ready).unwrap();
        assert!(!v.ready);
        assert_eq!(v.ready_since, None);
    }

    #[test]
    fn ordinals_parse_strictly() {
        assert_eq!(ordinal_of("a", "a-0"), Some(0));
        assert_eq!(ordinal_of("a", "a-12"), Some(12));
        assert_eq!(ordinal_of("a", "a-1-0"), None);
        assert_eq!(ordinal_of("a", "a-01"), None);
        assert_eq!(ordinal_of("a", "ab-1"), None);
        assert_eq!(ordinal_of("a", "a-"), None);
    }
}
