//! Pure pod building and reading: a SlurmNodeSet's pod for an ordinal (labels, owner, the completed
//! slurmd container), the template hash, and the [`PodView`] the planner reads.
//!
//! **The slurmd container** (the container named `slurmd`, else the first one) is completed, not
//! replaced: the template keeps the command, image and `--conf-server` (configless registration
//! needs the slurmctld address; the `slurm-cluster` chart writes it, a hand-written template must
//! too). The operator owns three things in its `args`:
//! - `-Z` (dynamic registration) is added when missing;
//! - `-N <pod name>`: any `-N` in the template is replaced by the literal pod name;
//! - `--extra <owner record>`: any `--extra` in the template is replaced by the set's owner
//!   record ([`NodeOwner::to_extra`]), which Slurm stores with the node at registration;
//! - `--conf "<...>"`: the keys the spec sets (`Features`, `Gres`, `CPUs`, `RealMemory`,
//!   `Weight`, in that order — the chart's order) replace the same keys of the template's
//!   `--conf`; its other keys stay (e.g. `Port=`). `Features` is `slurm.features` followed by
//!   `partition-<name>` for each of `slurm.partitions` (see [`PARTITION_FEATURE_PREFIX`]); apart
//!   from those partition features the chart writes the same values.
//!
//! **Names.** A pod and its Slurm node share one name, `<set>-<tag>-<ordinal>`
//! ([`node_prefix`]): `<tag>` is five characters derived from the namespace alone, so sets of
//! one name in two namespaces never ask Slurm for the same node name, and an admin reading
//! `sinfo` sees which nodes go together (`cpu-x7k2q-[0-3]`). The owner record says which
//! namespace a tag is (`scontrol show node` prints it as `Extra=`). A node name is a DNS label
//! (it is the pod's hostname too), so the set's name is one of at most [`MAX_SET_NAME`]
//! characters.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use super::plan::{PodView, ordinal_of};
use crate::crd::quantity;
use crate::crd::{NodeSetSlurm, SlurmNodeSet};
use crate::slurm::node_owner::NodeOwner;

pub const LABEL_NODESET: &str = "slurm.rs/nodeset";
pub const LABEL_HASH: &str = "slurm.rs/template-hash";
/// Set to `true` on pods whose node runs jobs; the set's PodDisruptionBudget selects it.
pub const LABEL_BUSY: &str = "slurm.rs/busy";
/// Scale-in order among pods otherwise alike: lower goes first, as for a ReplicaSet's pods.
pub const ANNOTATION_POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// The operator's own deletion cost: wins over [`ANNOTATION_POD_DELETION_COST`] when both are set.
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

/// The pod (and Slurm node) of `ordinal`, for a set whose [`node_prefix`] is `prefix`.
pub fn pod_name(prefix: &str, ordinal: u32) -> String {
    format!("{prefix}-{ordinal}")
}

/// Longest SlurmNodeSet name: `<name>-<tag>-<ordinal>` stays within a DNS label's 63
/// characters for every ordinal (10 digits at most).
pub const MAX_SET_NAME: usize = 63 - 1 - NAMESPACE_TAG_CHARS - 1 - 10;
/// Length of the namespace's tag in node names.
pub const NAMESPACE_TAG_CHARS: usize = 5;
/// The tag's characters: Kubernetes' own for generated names (no vowels, so no words; no
/// characters that read alike).
const TAG_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The namespace's tag in node names: five characters of its FNV-1a 64 hash. Stable forever
/// (node names in Slurm depend on it); 27^5 ≈ 14 million values, and two namespaces that share
/// one still cannot take each other's nodes (the owner record decides, see `plan`).
pub fn namespace_tag(namespace: &str) -> String {
    let mut hash = fnv1a64(namespace.as_bytes());
    let base = TAG_ALPHABET.len() as u64;
    (0..NAMESPACE_TAG_CHARS)
        .map(|_| {
            let c = TAG_ALPHABET[(hash % base) as usize];
            hash /= base;
            char::from(c)
        })
        .collect()
}

/// `<name>-<tag>`, the prefix of the set's pod and node names; `None` when `name` cannot make
/// node names that are DNS labels (not a DNS label itself, or longer than [`MAX_SET_NAME`]).
pub fn node_prefix(namespace: &str, name: &str) -> Option<String> {
    let label = !name.is_empty()
        && name.len() <= MAX_SET_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    label.then(|| format!("{name}-{}", namespace_tag(namespace)))
}

/// The owner record of `nodeset`'s nodes.
pub fn owner(nodeset: &SlurmNodeSet) -> NodeOwner {
    NodeOwner::new(nodeset.namespace().unwrap_or_default(), nodeset.name_any())
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// FNV-1a 64 of the template and the Slurm settings (both end up in the pod), as 16 hex digits.
/// Stable across operator versions as long as the serialised spec is.
pub fn template_hash(nodeset: &SlurmNodeSet) -> String {
    let text =
        serde_json::to_string(&(&nodeset.spec.template, &nodeset.spec.slurm)).unwrap_or_default();
    format!("{:016x}", fnv1a64(text.as_bytes()))
}

/// Prefix of the node feature added per entry of `spec.slurm.partitions`: slurm.conf selects the
/// nodes with `NodeSet=<set> Feature=partition-<name>` and `PartitionName=<name> Nodes=<set>`
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

/// Complete the slurmd container's args (see the module docs); `extra` is the owner record.
pub fn complete_slurmd(
    container: &mut Container,
    pod_name: &str,
    extra: &str,
    slurm: &NodeSetSlurm,
) {
    // A `--conf` in the template's command counts too (before the args': slurmd keeps the last
    // one it reads, and ours comes last): its keys merge, or ours would silently drop them.
    let mut conf = None;
    if let Some(command) = container.command.as_mut() {
        let mut kept = Vec::with_capacity(command.len());
        let mut iter = std::mem::take(command).into_iter();
        while let Some(arg) = iter.next() {
            if arg == "--conf" {
                conf = iter.next();
            } else if let Some(value) = arg.strip_prefix("--conf=") {
                conf = Some(value.to_owned());
            } else {
                kept.push(arg);
            }
        }
        *command = kept;
    }
    let args = container.args.take().unwrap_or_default();
    let mut out = Vec::with_capacity(args.len() + 5);
    let mut dynamic = false;
    let mut iter = args.into_iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "-N" => {
                iter.next();
            }
            "--conf" => conf = iter.next(),
            "--extra" => {
                iter.next();
            }
            "-Z" => {
                dynamic = true;
                out.push(arg);
            }
            _ => {
                if let Some(value) = arg.strip_prefix("--conf=") {
                    conf = Some(value.to_owned());
                } else if arg.starts_with("--extra=") {
                    // Ours (the owner record).
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
    out.push("--extra".into());
    out.push(extra.to_owned());
    let conf = merge_conf(conf.as_deref(), slurm);
    if !conf.is_empty() {
        out.push("--conf".into());
        out.push(conf);
    }
    container.args = Some(out);
}

/// The pod for `ordinal` of the set whose [`node_prefix`] is `prefix`: the template, our
/// labels, an owner reference, the completed slurmd.
pub fn build_pod(nodeset: &SlurmNodeSet, prefix: &str, ordinal: u32, hash: &str) -> Pod {
    let name = pod_name(prefix, ordinal);
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
        complete_slurmd(
            container,
            &name,
            &owner(nodeset).to_extra(),
            &nodeset.spec.slurm,
        );
    }
    // Resolvable as <pod>.<subdomain> when the template names a headless Service.
    spec.hostname = Some(name.clone());
    // Tenants' jobs run in the slurmd container as their own users and could read a mounted
    // ServiceAccount token (mode 0644 without an fsGroup): none unless the template asks.
    spec.automount_service_account_token.get_or_insert(false);
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

/// Phase Failed or Succeeded: its slurmd is gone for good.
pub fn is_finished(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Failed" | "Succeeded"))
}

/// What the planner needs of a pod; `None` for a pod not named like one of the set's
/// (`<prefix>-<ordinal>`).
pub fn view(prefix: &str, pod: &Pod, cordons: &super::cordons::Cordons) -> Option<PodView> {
    let name = pod.name_any();
    let ordinal = ordinal_of(prefix, &name)?;
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
        .and_then(crate::crd::time::to_utc);
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
    Some(PodView {
        ordinal,
        scheduled: pod
            .spec
            .as_ref()
            .is_some_and(|s| s.node_name.as_deref().is_some_and(|n| !n.is_empty())),
        host: cordons.host(pod.spec.as_ref().and_then(|s| s.node_name.as_deref())),
        ready,
        ready_since,
        finished: is_finished(pod),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        // The operator's own annotation, when set, says it for this operator alone.
        deletion_cost: annotations
            .get(ANNOTATION_DELETION_COST)
            .or_else(|| annotations.get(ANNOTATION_POD_DELETION_COST))
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
    use super::super::cordons::Cordons;
    use super::super::plan::Host;
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
        c.args
            .as_mut()
            .unwrap()
            .extend(["--extra".into(), "forged".into()]);
        complete_slurmd(&mut c, "gpu-3", r#"{"k":"v"}"#, &slurm());
        assert_eq!(
            c.args.unwrap(),
            [
                "-D",
                "--conf-server",
                "ctld:6817",
                "-Z",
                "-N",
                "gpu-3",
                "--extra",
                r#"{"k":"v"}"#,
                "--conf",
                "Features=cpu,x Gres=gpu:1 CPUs=4 RealMemory=2048 Weight=10"
            ]
        );
    }

    /// A template's `--conf` in `command` (no args) keeps its keys: merged into ours, and taken
    /// out of the command (slurmd would read only the last).
    #[test]
    fn a_conf_in_the_template_command_is_merged_not_dropped() {
        let mut c = Container {
            name: "slurmd".into(),
            command: Some(
                [
                    "slurmd",
                    "-D",
                    "--conf",
                    "Port=17001",
                    "--conf-server",
                    "ctld",
                ]
                .map(String::from)
                .to_vec(),
            ),
            ..Container::default()
        };
        let spec = NodeSetSlurm {
            features: vec!["cpu".into()],
            ..NodeSetSlurm::default()
        };
        complete_slurmd(&mut c, "n-0", "{}", &spec);
        assert_eq!(
            c.command.unwrap(),
            ["slurmd", "-D", "--conf-server", "ctld"]
        );
        let args = c.args.unwrap();
        let conf = &args[args.iter().position(|a| a == "--conf").unwrap() + 1];
        assert!(
            conf.contains("Port=17001") && conf.contains("Features=cpu"),
            "{conf}"
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

    /// A pod's host is its `spec.nodeName` as the cordons know it: unknown until they are
    /// listed, and for a pod not scheduled.
    #[test]
    fn a_pods_host_is_its_node_as_the_cordons_know_it() {
        use k8s_openapi::api::core::v1::Node;
        use kube::runtime::watcher::Event;
        let pod = |node: Option<&str>| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "cpu-2"},
                "spec": {"containers": [], "nodeName": node},
            }))
            .unwrap()
        };
        let cordons = Cordons::default();
        let host = |node: Option<&str>| view("cpu", &pod(node), &cordons).unwrap().host;
        assert_eq!(host(Some("k1")), Host::Unknown, "not listed yet");
        let k1: Node = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "k1"}, "spec": {"unschedulable": true}}),
        )
        .unwrap();
        let k2: Node =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "k2"}})).unwrap();
        for event in [
            Event::Init,
            Event::InitApply(k1),
            Event::InitApply(k2),
            Event::InitDone,
        ] {
            cordons.apply(&event);
        }
        assert_eq!(host(Some("k1")), Host::Cordoned("k1".into()));
        assert_eq!(host(Some("k2")), Host::Open);
        assert_eq!(host(Some("k3")), Host::Unknown, "no such node");
        assert_eq!(host(None), Host::Unknown, "not scheduled");
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
        let v = view("cpu", &pod, &Cordons::default()).unwrap();
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
        let v = view("cpu", &not_ready, &Cordons::default()).unwrap();
        assert!(!v.ready);
        assert_eq!(v.ready_since, None);
    }

    /// Kubernetes' `controller.kubernetes.io/pod-deletion-cost`, as a ReplicaSet reads it;
    /// `slurm.rs/deletion-cost` wins when both are set; absent or not a number: 0.
    #[test]
    fn deletion_cost_is_read_from_the_kubernetes_annotation() {
        let cost = |annotations: serde_json::Value| {
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "cpu-2", "annotations": annotations},
            }))
            .unwrap();
            view("cpu", &pod, &Cordons::default())
                .unwrap()
                .deletion_cost
        };
        let k8s = "controller.kubernetes.io/pod-deletion-cost";
        assert_eq!(cost(serde_json::json!({k8s: "-50"})), -50);
        assert_eq!(cost(serde_json::json!({k8s: " 7 "})), 7);
        assert_eq!(cost(serde_json::json!({"slurm.rs/deletion-cost": "3"})), 3);
        assert_eq!(
            cost(serde_json::json!({k8s: "-50", "slurm.rs/deletion-cost": "3"})),
            3
        );
        assert_eq!(cost(serde_json::json!({k8s: "high"})), 0);
        assert_eq!(cost(serde_json::json!({})), 0);
    }

    #[test]
    fn node_names_are_distinct_per_namespace_stable_and_dns_labels() {
        // Pinned: node names in Slurm depend on these values, so they may never change.
        let pinned: Vec<(&str, String)> = ["team-a", "team-b", "slurm", "default"]
            .into_iter()
            .map(|ns| (ns, namespace_tag(ns)))
            .collect();
        assert_eq!(
            pinned,
            PINNED_TAGS
                .iter()
                .map(|(ns, t)| (*ns, (*t).to_owned()))
                .collect::<Vec<_>>()
        );
        let a = node_prefix("team-a", "cpu").unwrap();
        let b = node_prefix("team-b", "cpu").unwrap();
        assert_ne!(a, b, "one name in two namespaces");
        assert!(a.starts_with("cpu-") && a.len() == "cpu-".len() + NAMESPACE_TAG_CHARS);
        for tag in pinned.iter().map(|(_, t)| t) {
            assert!(tag.bytes().all(|b| TAG_ALPHABET.contains(&b)), "{tag}");
        }
        // The CRD's CEL rule on metadata.name says the same.
        let crd =
            serde_json::to_string(&<crate::crd::SlurmNodeSet as kube::CustomResourceExt>::crd())
                .unwrap();
        let rule = format!("size(self.metadata.name) <= {MAX_SET_NAME} &&");
        assert!(crd.contains(&rule), "no {rule:?} in the CRD");
        // Longest name, highest ordinal: still a DNS label.
        let longest = "a".repeat(MAX_SET_NAME);
        let name = pod_name(&node_prefix("ns", &longest).unwrap(), u32::MAX);
        assert_eq!(name.len(), 63);
        // Names that cannot make DNS labels are refused, not cut.
        for bad in [
            "a".repeat(MAX_SET_NAME + 1).as_str(),
            "",
            "cpu.v2",
            "-cpu",
            "cpu-",
            "CPU",
        ] {
            assert_eq!(node_prefix("ns", bad), None, "{bad:?}");
        }
        // A tag never makes a static-looking suffix parse as an ordinal of another set.
        assert_eq!(ordinal_of("cpu", &pod_name(&a, 0)), None);
        assert_eq!(ordinal_of(&a, &pod_name(&a, 7)), Some(7));
    }

    const PINNED_TAGS: [(&str, &str); 4] = [
        ("team-a", "k959s"),
        ("team-b", "tn86x"),
        ("slurm", "6q7xk"),
        ("default", "qb5rb"),
    ];

    #[test]
    fn the_pod_registers_its_node_with_the_owner_record() {
        let nodeset: SlurmNodeSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmNodeSet",
            "metadata": {"name": "cpu", "namespace": "team-a", "uid": "u1"},
            "spec": {"clusterName": "c", "template": {"spec": {"containers": [
                {"name": "slurmd", "args": ["-D", "-N", "$(POD_NAME)", "--extra", "x"]}
            ]}}},
        }))
        .unwrap();
        let prefix = node_prefix("team-a", "cpu").unwrap();
        let pod = build_pod(&nodeset, &prefix, 2, "h");
        let name = pod.name_any();
        assert_eq!(name, format!("{prefix}-2"));
        let spec = pod.spec.unwrap();
        assert_eq!(spec.hostname.as_deref(), Some(name.as_str()));
        assert_eq!(
            spec.containers[0].args.as_deref().unwrap(),
            [
                "-D",
                "-Z",
                "-N",
                name.as_str(),
                "--extra",
                r#"{"slurm.rs/nodeset":"team-a/cpu"}"#
            ]
        );
    }

    /// The jobs in a slurmd pod run as tenants' users: no ServiceAccount token for them to read
    /// unless the template asks for one.
    #[test]
    fn a_pod_mounts_no_service_account_token_unless_its_template_asks() {
        let set = |automount: Option<bool>| -> SlurmNodeSet {
            let mut spec = serde_json::json!({"containers": [{"name": "slurmd"}]});
            if let Some(automount) = automount {
                spec["automountServiceAccountToken"] = automount.into();
            }
            serde_json::from_value(serde_json::json!({
                "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmNodeSet",
                "metadata": {"name": "cpu", "namespace": "team-a", "uid": "u1"},
                "spec": {"clusterName": "c", "template": {"spec": spec}},
            }))
            .unwrap()
        };
        for (template, mounted) in [(None, false), (Some(false), false), (Some(true), true)] {
            let pod = build_pod(&set(template), "p", 0, "h");
            assert_eq!(
                pod.spec.unwrap().automount_service_account_token,
                Some(mounted),
                "template: {template:?}"
            );
        }
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
