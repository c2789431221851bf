//! `SlurmNodeSet`: a scalable set of pods that run slurmd and join a SlurmCluster as dynamic nodes.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::{
    api::resource::Quantity, apis::meta::v1::Condition, util::intstr::IntOrString,
};
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{DNS_SUBDOMAIN, POSITIVE_QUANTITY, condition, duration::Duration};

/// Desired state of a SlurmNodeSet: how many slurmd pods, from which template, with which Slurm node
/// settings.
// kube's `printcolumn(...)` lists repeat keys such as `type_`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "slurm.rs",
    version = "v1alpha1",
    kind = "SlurmNodeSet",
    plural = "slurmnodesets",
    namespaced,
    status = "SlurmNodeSetStatus",
    derive = "PartialEq",
    doc = "A set of pods running slurmd that register with a SlurmCluster as dynamic Slurm nodes. \
           Scaling in, and deleting the set, drain nodes in Slurm before their pods are deleted.",
    shortname = "sns",
    shortname = "snodeset",
    category = "slurm",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "Desired number of nodes"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "Pods ready"
    ),
    printcolumn(
        name = "Idle",
        type_ = "integer",
        json_path = ".status.slurm.idle",
        description = "Nodes idle in Slurm"
    ),
    printcolumn(
        name = "Allocated",
        type_ = "integer",
        json_path = ".status.slurm.allocated",
        description = "Nodes fully allocated in Slurm"
    ),
    printcolumn(
        name = "Mixed",
        type_ = "integer",
        json_path = ".status.slurm.mixed",
        description = "Nodes partly allocated in Slurm",
        priority = 1
    ),
    printcolumn(
        name = "Drain",
        type_ = "integer",
        json_path = ".status.slurm.drained",
        description = "Nodes drained in Slurm (no jobs left)"
    ),
    printcolumn(
        name = "Draining",
        type_ = "integer",
        json_path = ".status.slurm.draining",
        description = "Nodes draining in Slurm (jobs still running)",
        priority = 1
    ),
    printcolumn(
        name = "Down",
        type_ = "integer",
        json_path = ".status.slurm.down",
        description = "Nodes down in Slurm"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
// Pods and Slurm nodes are `<name>-<5-char namespace tag>-<ordinal>` and must be DNS labels
// (a pod's hostname); 46 is `pods::MAX_SET_NAME`.
#[kube(validation = Rule::new(
    "size(self.metadata.name) <= 46 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')"
).message("a SlurmNodeSet's name must be a DNS label of at most 46 characters (lowercase letters, digits and '-'): its pods and Slurm nodes are named <name>-<namespace tag>-<ordinal>"))]
#[serde(rename_all = "camelCase")]
pub struct SlurmNodeSetSpec {
    /// Name of the SlurmCluster (cluster-scoped) the nodes join. Immutable.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("clusterName is immutable"))]
    pub cluster_name: String,

    /// Number of nodes (pods). Defaults to 1.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0))]
    pub replicas: i32,

    /// Pod template for each node: a standard Pod template (see `kubectl explain pod.spec`; its
    /// field descriptions are left out of this CRD to keep it small). Its main container (the one
    /// named `slurmd`, else the first) runs slurmd; the operator adds the labels that tie pods to
    /// this SlurmNodeSet and completes that container's args: `-Z` (dynamic registration), `-N <pod
    /// name>` and `--conf` with the keys `slurm` sets. The slurmctld address is NOT filled in:
    /// the template's command or args must carry it (`--conf-server <host>[:port]` for
    /// configless registration, as the slurm-cluster chart writes it) or the image must ship a
    /// slurm.conf. The pods mount no ServiceAccount token unless the template sets
    /// `automountServiceAccountToken: true` (tenants' jobs run in them).
    #[schemars(schema_with = "pod_template_schema")]
    pub template: PodTemplateSpec,

    /// How the nodes appear in Slurm.
    #[serde(default)]
    pub slurm: NodeSetSlurm,

    /// How pods are replaced when the template changes. Defaults to `RollingUpdate`.
    #[serde(default)]
    pub update_strategy: UpdateStrategy,

    /// How nodes are removed: at scale-in, and also in a rolling update and at the set's
    /// deletion (both drain the same way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_in: Option<ScaleIn>,

    /// Seconds a pod must have been Ready (its Ready condition's `lastTransitionTime`) before it
    /// counts as available: in `status.availableReplicas`, in the `Ready` condition and in the
    /// rolling update's `maxUnavailable` budget, where a pod not available yet counts as
    /// unavailable. Defaults to 0.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub min_ready_seconds: i32,
}

fn default_replicas() -> i32 {
    1
}

/// PodTemplateSpec's schema without field descriptions. With them the SlurmNodeSet CRD is ~370 KB of
/// JSON, over the 256 KiB limit of the annotation that client-side `kubectl apply` writes; without
/// them it is ~70 KB. (controller-gen users do the same with `crd:maxDescLen=0`.)
fn pod_template_schema(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = generator.subschema_for::<PodTemplateSpec>();
    if let Some(obj) = schema.as_object_mut() {
        strip_descriptions(obj);
        // On the template, not the object: the API server evaluates it again only when the
        // template changes (ratcheting), so a set stored before the rule keeps its status
        // writes and its finalizer's removal.
        obj.insert(
            "x-kubernetes-validations".into(),
            serde_json::json!([{
                "rule": RESTART_ALWAYS,
                "message": "spec.template.spec.restartPolicy must be Always or left out: the \
                    kubelet restarts a slurmd that exits, with a backoff, where a pod that ended \
                    would be replaced at once, again and again",
            }]),
        );
    }
    schema
}

/// A slurmd that exits is restarted in its pod by the kubelet, with its backoff; a pod that ends
/// (`Never`, `OnFailure`) would be replaced by the operator at once, in a loop with no backoff.
const RESTART_ALWAYS: &str =
    "!has(self.spec) || !has(self.spec.restartPolicy) || self.spec.restartPolicy == 'Always'";

/// Remove `description` from a schema object and every schema nested in it (not from property
/// *names*: a property called `description` stays).
fn strip_descriptions(schema: &mut Map<String, Value>) {
    schema.remove("description");
    let mut strip = |child: &mut Value| {
        if let Some(obj) = child.as_object_mut() {
            strip_descriptions(obj);
        }
    };
    for (key, child) in schema.iter_mut() {
        match key.as_str() {
            "properties" | "patternProperties" => {
                if let Some(map) = child.as_object_mut() {
                    map.values_mut().for_each(&mut strip);
                }
            }
            "items" | "additionalProperties" | "not" => strip(child),
            "allOf" | "anyOf" | "oneOf" => {
                if let Some(list) = child.as_array_mut() {
                    list.iter_mut().for_each(&mut strip);
                }
            }
            _ => {}
        }
    }
}

/// A partition name usable in a node feature (`partition-<name>`).
pub const PARTITION_NAME: &str = r"^[A-Za-z0-9_.]([A-Za-z0-9_.-]{0,62})$";

/// A node feature: one word of `Features=` (slurmd splits `--conf` at whitespace and features
/// at commas, so neither may appear: one would add or override other keys).
pub const NODE_FEATURE: &str = r"^[A-Za-z0-9_.-]{1,128}$";

/// A `Gres=` value: no whitespace (which would start another `--conf` key) and no `=`.
pub const GRES: &str = r"^[^\s=]+$";

/// Slurm node settings for every node of the set (passed to `slurmd -Z --conf`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeSetSlurm {
    /// Node features (`Features=`), usable in job constraints: letters, digits and `_.-`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(regex(pattern = NODE_FEATURE)))]
    pub features: Vec<String>,

    /// Generic resources (`Gres=`), e.g. `gpu:4` (no whitespace, no `=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024), regex(pattern = GRES))]
    pub gres: Option<String>,

    /// Partitions the nodes are meant for. Slurm 24.11 cannot add a node to a partition through
    /// its REST API, and a dynamic node joins only the partitions whose slurm.conf `Nodes=`
    /// selects it (or `Nodes=ALL`). So the operator does two things, no more: it adds the
    /// feature `partition-<name>` per entry to the node's `--conf` `Features=` (after
    /// `features`), so that slurm.conf can select the nodes with
    /// `NodeSet=<set> Feature=partition-<name>` and `PartitionName=<name> Nodes=<set>,...`; and
    /// it reports, in the `Partitions` status condition, registered nodes that are not in a
    /// listed partition (slurm.conf does not select them). The slurm.conf lines are yours to
    /// write (the slurm-cluster chart writes its own from its values). Changing the list
    /// replaces the pods (it changes `--conf`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(regex(pattern = PARTITION_NAME)))]
    pub partitions: Vec<String>,

    /// Scheduling weight (`Weight=`): Slurm prefers nodes with lower weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub weight: Option<i32>,

    /// CPUs per node (`CPUs=`). Defaults to what slurmd detects in the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub cpus: Option<i32>,

    /// Memory per node (`RealMemory=`) as a quantity such as `64Gi`; rounded down to whole MiB
    /// for Slurm. Defaults to what slurmd detects in the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(POSITIVE_QUANTITY)
        .message("realMemory must be a positive quantity such as 64Gi"))]
    pub real_memory: Option<Quantity>,
}

/// How pods are replaced when the template changes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.type == 'RollingUpdate' || !has(self.rollingUpdate)")
    .message("rollingUpdate may only be set when type is RollingUpdate"))]
pub struct UpdateStrategy {
    /// `RollingUpdate` (default): drain and replace outdated nodes a few at a time.
    /// `OnDelete`: replace a pod only when you delete it.
    #[serde(default, rename = "type")]
    pub type_: UpdateStrategyType,

    /// Settings for `RollingUpdate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdate>,
}

impl Default for UpdateStrategy {
    fn default() -> Self {
        Self {
            type_: UpdateStrategyType::RollingUpdate,
            rolling_update: None,
        }
    }
}

impl UpdateStrategy {
    /// `maxUnavailable` as written (1 when unset).
    pub fn max_unavailable(&self) -> IntOrString {
        self.rolling_update
            .as_ref()
            .and_then(|r| r.max_unavailable.clone())
            .unwrap_or_else(default_max_unavailable)
    }

    /// How many of `replicas` nodes may be unavailable at once: `maxUnavailable` as a number, or
    /// as a percentage of `replicas` rounded up; never less than 1. A value the schema would
    /// have rejected counts as 1.
    pub fn max_unavailable_count(&self, replicas: i32) -> i32 {
        let count = match self.max_unavailable() {
            IntOrString::Int(n) => i64::from(n),
            IntOrString::String(s) => match s.strip_suffix('%') {
                Some(pct) => pct
                    .parse::<i64>()
                    .map_or(1, |pct| (pct * i64::from(replicas.max(0)) + 99) / 100),
                None => s.parse().unwrap_or(1),
            },
        };
        i32::try_from(count.max(1)).unwrap_or(i32::MAX)
    }
}

/// `RollingUpdate` or `OnDelete`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UpdateStrategyType {
    // Variant docs are plain comments: documented variants would make schemars emit `oneOf`.
    // Drain and replace outdated nodes a few at a time.
    #[default]
    RollingUpdate,
    // Replace a pod only when it is deleted.
    OnDelete,
}

/// Rolling update parameters.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdate {
    /// Nodes that may be draining or being replaced at once: a number (at least 1) or a
    /// percentage of `replicas` such as `25%` (rounded up, so at least 1). Defaults to 1.
    // An `Option`: the schema generator makes an int-or-string field that is not required
    // nullable, and the API server stores a null there as it is (no default, no rule), which
    // a plain `IntOrString` cannot decode: one such set failed the list of every set. At most
    // nine digits, so that no admitted number is past what an `IntOrString` holds (int32).
    #[serde(default = "some_default_max_unavailable")]
    #[x_kube(validation = Rule::new("string(self).matches('^([1-9][0-9]{0,8}|(100|[1-9][0-9]?)%)$')")
        .message("maxUnavailable must be a number from 1 to 999999999 or a percentage from 1% to 100%"))]
    pub max_unavailable: Option<IntOrString>,
}

fn default_max_unavailable() -> IntOrString {
    IntOrString::Int(1)
}

fn some_default_max_unavailable() -> Option<IntOrString> {
    Some(default_max_unavailable())
}

/// Scale-in behaviour.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleIn {
    /// How long to wait for a draining node's jobs to finish before deleting its pod anyway
    /// (the jobs are then requeued or fail), at most 8760h (a year): for a scale-in, and also
    /// for a rolling update's replacement and the set's deletion, so that a job that never ends
    /// holds none of them up for ever (Warning `DrainTimeoutExceeded` names which). Unset: wait
    /// as long as it takes, but for the set's deletion, which lets go at the operator's
    /// `--deletion-deadline` (15 minutes by default, counted from the deletion) whatever this
    /// says.
    // The bound is what keeps a duration that overflows (`9999999999999999999h` matches the
    // duration pattern) from being stored: the operator could not read it, and one such SlurmNodeSet
    // would stop every SlurmNodeSet from being reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("duration(self) <= duration('8760h')")
        .message("drainTimeout must be at most 8760h (a year); leave it unset to wait as long as it takes"))]
    pub drain_timeout: Option<Duration>,
}

/// Observed state of a SlurmNodeSet, written by the operator.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SlurmNodeSetStatus {
    /// Pods that exist (read by the scale subresource).
    #[serde(default)]
    pub replicas: i32,

    /// Pods that are ready.
    #[serde(default)]
    pub ready_replicas: i32,

    /// Pods that have been ready for at least `spec.minReadySeconds`.
    #[serde(default)]
    pub available_replicas: i32,

    /// Pods created from the current template.
    #[serde(default)]
    pub updated_replicas: i32,

    /// The nodes' states in Slurm. Without a fresh view of Slurm these keep the last counts
    /// seen; the `SlurmSynced` condition then says so and since when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<NodeSetSlurmCounts>,

    /// Label selector of the pods, in string form (read by the scale subresource, e.g. for a
    /// HorizontalPodAutoscaler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,

    /// Latest observations, e.g. `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "condition::schema")]
    pub conditions: Vec<Condition>,

    /// The `.metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Counts of this set's nodes by Slurm state.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodeSetSlurmCounts {
    /// Nodes with no allocated CPUs.
    #[serde(default)]
    pub idle: i32,
    /// Nodes fully allocated.
    #[serde(default)]
    pub allocated: i32,
    /// Nodes partly allocated.
    #[serde(default)]
    pub mixed: i32,
    /// Nodes draining: no new jobs, some still running.
    #[serde(default)]
    pub draining: i32,
    /// Nodes drained: no new jobs, none running.
    #[serde(default)]
    pub drained: i32,
    /// Nodes down.
    #[serde(default)]
    pub down: i32,
}
