//! `SlurmJob`: one batch job (or job array) submitted to a SlurmCluster.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::{
    api::resource::Quantity,
    apis::meta::v1::{Condition, Time},
};
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use super::{POSITIVE_QUANTITY, condition, duration::Duration};

/// A quantity a tenant writes is short: Kubernetes' quantity syntax has no length limit, and a
/// megabyte of digits would be kept in every copy of the object (the operator's cache included)
/// and quoted in its conditions.
const SHORT_QUANTITY: &str = "size(string(self)) <= 64";

/// `kube::Resource` for a type that stands for a SlurmJob (its kind, group, version, plural and
/// scope), whose metadata is the field at the path given.
macro_rules! delegate_resource {
    ($ty:ty, $($field:tt).+) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;

            fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
                <super::SlurmJob as kube::Resource>::kind(dt)
            }
            fn group(dt: &()) -> std::borrow::Cow<'_, str> {
                <super::SlurmJob as kube::Resource>::group(dt)
            }
            fn version(dt: &()) -> std::borrow::Cow<'_, str> {
                <super::SlurmJob as kube::Resource>::version(dt)
            }
            fn api_version(dt: &()) -> std::borrow::Cow<'_, str> {
                <super::SlurmJob as kube::Resource>::api_version(dt)
            }
            fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
                <super::SlurmJob as kube::Resource>::plural(dt)
            }
            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.$($field).+
            }
            fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.$($field).+
            }
        }
    };
}
use delegate_resource;

mod cached;
pub(crate) mod wire;
pub use cached::{CacheError, CachedSlurmJob};
pub use wire::{MAX_EXTRA_OPTION_DEPTH, NESTED_TOO_DEEP, WholeSlurmJob};

/// Bound on `status.arrayTasks.tasks`; the operator keeps the most relevant entries.
pub const MAX_ARRAY_TASKS: usize = 100;
/// Bound on `status.history`; the operator drops the oldest runs first.
pub const MAX_HISTORY: usize = 10;
/// Bound on `spec.dependsOn`.
pub const MAX_DEPENDENCIES: usize = 32;

/// Most entries `spec.extraOptions` may hold.
pub const MAX_EXTRA_OPTIONS: usize = 64;

// Names of other objects are checked by CEL rather than a schema `pattern`: a pattern's error
// ("should match '^[a-z0-9]...'") does not say what is wrong. The same RFC 1123 subdomain as
// `crd::DNS_SUBDOMAIN`, with `[.]` for `\.` so that it needs no escape in a CEL string (the
// equivalence is a test).
pub(crate) const DNS_SUBDOMAIN_CEL: &str =
    "self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')";
/// `spec.nodes`: a count or a `min-max` range, each at most 9 digits (so `int()` cannot
/// overflow in the range rule).
const NODES_FORMAT: &str = "^[1-9][0-9]{0,8}(-[1-9][0-9]{0,8})?$";
/// `spec.nodes` as a range, whose ends the range rule compares.
const NODES_RANGE: &str = "^[1-9][0-9]{0,8}-[1-9][0-9]{0,8}$";
/// `spec.gpusPerNode`, `spec.gpusPerTask`: sbatch's `[type:]count`, e.g. `2` or `a100:2`.
const GPUS_FORMAT: &str = "^([A-Za-z0-9_.-]+:)?[1-9][0-9]{0,5}$";
/// `spec.array`: Slurm's `--array` index list with an optional `%N` throttle.
const ARRAY_FORMAT: &str = "^[0-9]+(-[0-9]+(:[0-9]+)?)?(,[0-9]+(-[0-9]+(:[0-9]+)?)?)*(%[0-9]+)?$";

fn matches(pattern: &str) -> String {
    format!("self.matches('{pattern}')")
}

/// Desired state of a SlurmJob: the batch script and its sbatch options.
// kube's `printcolumn(...)` lists repeat keys such as `type_`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "slurm.rs",
    version = "v1alpha1",
    kind = "SlurmJob",
    plural = "slurmjobs",
    namespaced,
    status = "SlurmJobStatus",
    derive = "PartialEq",
    doc = "A Slurm batch job submitted to a SlurmCluster through slurmrestd. Deleting the SlurmJob \
           cancels the job if it is still pending or running.",
    shortname = "sjob",
    category = "slurm",
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Lifecycle phase"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        description = "Why the job is in its phase (the Ready condition's reason)"
    ),
    printcolumn(
        name = "Waiting",
        type_ = "string",
        json_path = ".status.pending.reason",
        description = "Why Slurm has not started the job yet (Slurm's reason code)"
    ),
    printcolumn(
        name = "Partition",
        type_ = "string",
        json_path = ".spec.partition",
        description = "Partition asked for (empty: the cluster's default)"
    ),
    printcolumn(
        name = "JobID",
        type_ = "integer",
        json_path = ".status.jobId",
        description = "Slurm job id",
        priority = "1"
    ),
    printcolumn(
        name = "SlurmCluster",
        type_ = "string",
        json_path = ".spec.clusterName",
        description = "SlurmCluster the job runs on",
        priority = "1"
    ),
    printcolumn(
        name = "Nodes",
        type_ = "string",
        json_path = ".status.nodes",
        description = "Nodes allocated to the job"
    ),
    printcolumn(
        name = "Exit",
        type_ = "integer",
        json_path = ".status.exitCode",
        description = "Exit code of the batch script"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
// At the root of a resource a rule may read `metadata.name` (a rule on `spec` cannot).
#[kube(validation = Rule::new(
    "!has(self.spec.dependsOn) || self.spec.dependsOn.all(d, d.name != self.metadata.name)"
).message("dependsOn cannot name the SlurmJob itself: it would wait for its own submission forever"))]
#[serde(rename_all = "camelCase")]
// Pairs sbatch itself refuses, or that would say the same thing twice.
#[x_kube(
    validation = Rule::new("!(has(self.memoryPerNode) && has(self.memoryPerCpu))")
        .message("memoryPerNode and memoryPerCpu exclude each other (as sbatch's --mem and \
                  --mem-per-cpu): set one")
        .field_path(".memoryPerCpu"),
    validation = Rule::new("!(has(self.tres) && has(self.tresPerTask))")
        .message("tres is the old name of tresPerTask: set only tresPerTask")
        .field_path(".tres"),
    validation = Rule::new(
        "!has(self.gpusPerNode) || !has(self.gres) || !self.gres.contains('gpu')"
    )
        .message("gpusPerNode and a gpu entry in gres both ask for GPUs per node: set one")
        .field_path(".gpusPerNode"),
    validation = Rule::new(
        "!has(self.gpusPerTask) || ((!has(self.tresPerTask) || !self.tresPerTask.contains('gpu')) \
         && (!has(self.tres) || !self.tres.contains('gpu')))"
    )
        .message("gpusPerTask and a gpu entry in tresPerTask both ask for GPUs per task: set one")
        .field_path(".gpusPerTask"),
    validation = Rule::new(
        "!has(self.output) || (!has(self.standardOutput) && !has(self.standardError))"
    )
        .message("standardOutput and standardError cannot be set with output: with output, \
                  the operator names the file it streams")
        .field_path(".output"),
    validation = Rule::new("!(has(self.output) && has(self.array))")
        .message("output cannot be set with array: it streams one file, and each task of an \
                  array writes its own")
        .field_path(".output")
)]
pub struct SlurmJobSpec {
    /// Name of the SlurmCluster (cluster-scoped) to run the job on; its `access` decides
    /// whether this namespace may, and as which Slurm user. Immutable.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(
        validation = Rule::new(DNS_SUBDOMAIN_CEL).message(
            "clusterName must be the name of a SlurmCluster: lowercase letters, digits, '-' and '.', \
             starting and ending with a letter or digit"
        ),
        validation = Rule::new("self == oldSelf").message("clusterName is immutable")
    )]
    pub cluster_name: String,

    /// The batch script, starting with an interpreter line such as `#!/bin/bash`. slurmrestd
    /// does not read `#SBATCH` lines (only the sbatch command does): every option goes in a
    /// field of this spec; `slurm-operator sbatch` converts a script's `#SBATCH` lines to them.
    #[schemars(length(max = 1_048_576))]
    #[x_kube(validation = Rule::new("self.startsWith('#!')")
        .message("script must start with an interpreter line such as #!/bin/bash"))]
    pub script: String,

    /// Job name shown by squeue (`--job-name`). Defaults to the SlurmJob's name. No comma: the
    /// operator looks the name up in Slurm's accounting, which reads a comma as a list of names
    /// (everyone's jobs of each).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 200))]
    #[x_kube(validation = Rule::new("!self.contains(',')").message(
        "name must not contain a comma: Slurm's accounting reads one as a list of job names"
    ))]
    pub name: Option<String>,

    /// Partition to submit to (`--partition`); a comma-separated list lets Slurm pick. Defaults
    /// to the cluster's default partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub partition: Option<String>,

    /// Account to charge (`--account`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub account: Option<String>,

    /// Quality of service (`--qos`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub qos: Option<String>,

    /// Number of nodes (`--nodes`): a count such as `"2"` or a range such as `"1-4"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(
        validation = Rule::new(matches(NODES_FORMAT))
            .message("nodes must be a node count such as 2 or a range such as 1-4"),
        validation = Rule::new(format!(
            "!{} || int(self.split('-')[0]) <= int(self.split('-')[1])",
            matches(NODES_RANGE)
        ))
        .message("the nodes range must not end below its start: 1-4, not 4-1")
    )]
    pub nodes: Option<String>,

    /// Number of tasks (`--ntasks`), at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub ntasks: Option<i32>,

    /// CPUs per task (`--cpus-per-task`), at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub cpus_per_task: Option<i32>,

    /// Tasks on each node (`--ntasks-per-node`), at least 1: the layout of an MPI job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1")
        .message("tasksPerNode must be at least 1"))]
    pub tasks_per_node: Option<i32>,

    /// GPUs on each node (`--gpus-per-node`): a count such as `"2"`, or a type and a count such
    /// as `"a100:2"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    #[x_kube(validation = Rule::new(matches(GPUS_FORMAT)).message(
        "gpusPerNode must be a GPU count such as 2, or a type and a count such as a100:2"
    ))]
    pub gpus_per_node: Option<String>,

    /// GPUs for each task (`--gpus-per-task`), in the form of `gpusPerNode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    #[x_kube(validation = Rule::new(matches(GPUS_FORMAT)).message(
        "gpusPerTask must be a GPU count such as 1, or a type and a count such as a100:1"
    ))]
    pub gpus_per_task: Option<String>,

    /// Keep the job's nodes from other jobs (`--exclusive`): `node` (no other job), `user`
    /// (only this user's jobs) or `mcs` (only jobs with the same MCS label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "exclusive_schema")]
    pub exclusive: Option<Exclusive>,

    /// Memory per node (`--mem`) as a Kubernetes quantity such as `4Gi` or `512Mi`; rounded up
    /// to whole MiB for Slurm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(POSITIVE_QUANTITY)
        .message("memoryPerNode must be a positive quantity such as 4Gi or 512Mi"))]
    #[x_kube(validation = Rule::new(SHORT_QUANTITY)
        .message("memoryPerNode must be at most 64 characters, such as 4Gi or 512Mi"))]
    pub memory_per_node: Option<Quantity>,

    /// Memory per allocated CPU (`--mem-per-cpu`) as a quantity such as `2Gi`; rounded up to
    /// whole MiB. Excludes `memoryPerNode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(POSITIVE_QUANTITY)
        .message("memoryPerCpu must be a positive quantity such as 2Gi or 512Mi"))]
    #[x_kube(validation = Rule::new(SHORT_QUANTITY)
        .message("memoryPerCpu must be at most 64 characters, such as 2Gi or 512Mi"))]
    pub memory_per_cpu: Option<Quantity>,

    /// Wall-clock limit (`--time`) as a duration such as `30m` or `2h`; at least 1m. Slurm counts
    /// whole minutes, so the value is rounded up to the next minute. Defaults to the partition's
    /// limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("duration(self) >= duration('1m')")
        .message("timeLimit must be at least 1m (Slurm counts time limits in whole minutes)"))]
    pub time_limit: Option<Duration>,

    /// Niceness (`--nice`): a positive value lowers the job's priority among the cluster's
    /// pending jobs, to let others go first. 0 or more: a negative one (a higher priority) is
    /// for Slurm administrators only. Changed in place on a submitted job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 2147483645").message(
        "nice must be between 0 and 2147483645: a negative nice raises a job's priority, which \
         only Slurm administrators may do"
    ))]
    pub nice: Option<i32>,

    /// Hold the job (as batch/v1 Job's `suspend`): `true` submits it held (`sbatch --hold`) or
    /// holds it while it is pending in Slurm, `false` releases it. A running job is not
    /// stopped: Slurm lets only its administrators suspend running jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,

    /// Environment variables for the batch script. Slurm's own `SLURM_*` variables are added by
    /// Slurm. A name is not empty and has no `=` (Slurm takes each as `NAME=value`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 1024))]
    #[x_kube(validation = Rule::new("self.all(k, size(k) > 0 && !k.contains('='))")
        .message("environment names must not be empty or contain '=': Slurm reads each \
                  variable as NAME=value"))]
    pub environment: BTreeMap<String, String>,

    /// Working directory of the batch script on the Slurm nodes (`--chdir`), an absolute path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    #[x_kube(validation = Rule::new("self.startsWith('/')")
        .message("workingDirectory must be an absolute path such as /home/alice/run"))]
    pub working_directory: Option<String>,

    /// Required node features (`--constraint`), e.g. `"gpu&nvlink"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub constraints: Option<String>,

    /// Generic resources per node (`--gres`), e.g. `"gpu:2"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub gres: Option<String>,

    /// Trackable resources per task (`--tres-per-task`), e.g. `"cpu=4,gres/gpu=1"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub tres_per_task: Option<String>,

    /// Deprecated: the old name of `tresPerTask`, still honoured (not together with it).
    // Kept in the schema, not a serde alias: the API server prunes fields its schema lacks, so
    // objects stored with `tres` would silently lose it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub tres: Option<String>,

    /// Submit a job array (`--array`): indices such as `"0-9"`, `"1,3,5"` or `"0-15:4"`,
    /// optionally with `%N` to run at most N tasks at once (`"0-9%2"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    #[x_kube(validation = Rule::new(matches(ARRAY_FORMAT)).message(
        "array must list indices such as 0-9, 1,3,5 or 0-15:4, optionally followed by %N to run \
         at most N tasks at once (0-9%2)"
    ))]
    pub array: Option<String>,

    /// Other SlurmJobs in this namespace, on the same cluster, this job waits for
    /// (`--dependency`). Each entry names a SlurmJob once. One whose job has ended already is
    /// judged by the operator, not handed to Slurm: if it ended in a way its type rules out,
    /// this job is not submitted until it runs again (`DependencyNeverSatisfied`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_DEPENDENCIES))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub depends_on: Vec<JobDependency>,

    /// File for the batch script's stdout on the Slurm nodes (`--output`), a Slurm filename
    /// pattern such as `/home/alice/logs/%x-%j.out` (`%j` job id, `%x` job name, `%A`/`%a`
    /// array job and task, ...); relative to `workingDirectory` unless absolute. Defaults to
    /// Slurm's `slurm-%j.out`. Not with `output`, which names the file itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub standard_output: Option<String>,

    /// File for the batch script's stderr (`--error`), a pattern as for `standardOutput`.
    /// Defaults to the stdout file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub standard_error: Option<String>,

    /// Where Slurm writes the job's stdout/stderr so the operator can read it: a
    /// PersistentVolumeClaim that is also mounted on the Slurm nodes. The file is
    /// `<name>-<job id>.out`, so the SlurmJob's name is then at most 240 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<JobOutput>,

    /// Further slurmrestd job-description fields (v0.0.42 `job_desc_msg`, snake_case keys),
    /// passed through as given: only options any Slurm user may choose for their own job
    /// (shape, placement, timing, notifications). Who the job runs as,
    /// its priority, reservation, nice value or id, admin fields, SPANK environment, security
    /// labels, containers, cluster routing and the fields with a typed field in this spec are
    /// refused, and so is a value that nests lists or objects more than 8 levels deep
    /// (`InvalidSpec`, from the operator: the API server cannot check these keys).
    /// The options it may carry: `account_gather_frequency`, `argv`, `batch_features`,
    /// `begin_time`, `burst_buffer`, `contiguous`, `core_specification`, `cpu_binding`,
    /// `cpu_binding_flags`, `cpu_frequency`, `cpus_per_tres`, `deadline`, `delay_boot`,
    /// `distribution`, `distribution_plane_size`, `excluded_nodes`, `extra`, `immediate`,
    /// `kill_on_node_fail`, `kill_warning_delay`, `kill_warning_flags`, `kill_warning_signal`,
    /// `licenses`, `mail_type`, `mail_user`, `maximum_cpus`, `maximum_nodes`, `memory_binding`,
    /// `memory_binding_type`, `memory_per_tres`, `minimum_boards_per_node`, `minimum_cpus`,
    /// `minimum_cpus_per_node`, `minimum_nodes`, `minimum_sockets_per_board`, `ntasks_per_tres`,
    /// `oom_kill_step`, `open_mode`, `overcommit`, `prefer`, `profile`, `required_nodes`,
    /// `requeue`, `segment_size`, `shared`, `sockets_per_node`, `tasks_per_board`,
    /// `tasks_per_core`, `tasks_per_socket`, `temporary_disk_per_node`, `thread_specification`,
    /// `threads_per_core`, `time_minimum`, `tres_bind`, `tres_freq`, `tres_per_job`,
    /// `tres_per_socket`, `wait_all_nodes`, `wckey`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "wire::extra_options"
    )]
    #[schemars(schema_with = "free_form_object")]
    pub extra_options: Option<serde_json::Map<String, serde_json::Value>>,
}

/// `exclusive`'s values without the `null` schemars adds to an optional enum, which a
/// structural schema refuses (`nullable` says the same).
fn exclusive_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "enum": ["node", "user", "mcs"],
        "nullable": true,
    })
}

/// A map from job option to any JSON value (`x-kubernetes-preserve-unknown-fields` on the map's
/// values, the only one in these CRDs outside k8s-openapi's own types); slurmrestd checks the
/// values. No CEL rule can read it: the API server gives CEL no type for a value without one,
/// nor for a map of such values, and refuses a CRD whose rule reads one ("failed to construct
/// type information"). So the keys outside [`crate::slurm::types::EXTRA_JOB_OPTIONS`] (and
/// `shared` beside `exclusive`) are refused by the operator (`InvalidSpec`), not at admission.
fn free_form_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "nullable": true,
        "maxProperties": MAX_EXTRA_OPTIONS,
        "additionalProperties": {"x-kubernetes-preserve-unknown-fields": true},
    })
}

/// A dependency on another SlurmJob.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct JobDependency {
    /// Name of the SlurmJob (in this namespace, with the same `clusterName`) to wait for. The
    /// job is held until that SlurmJob has been submitted.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new(DNS_SUBDOMAIN_CEL).message(
        "dependsOn name must be the name of a SlurmJob: lowercase letters, digits, '-' and '.', \
         starting and ending with a letter or digit"
    ))]
    pub name: String,

    /// When this job may start: `afterok` (the other job succeeded; the default), `afterany`
    /// (it ended in any way) or `afternotok` (it failed).
    #[serde(default, rename = "type")]
    pub type_: DependencyType,
}

/// `--exclusive`: `node`, `user` or `mcs` (the schema: `exclusive_schema`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Exclusive {
    // Variant docs are plain comments: documented variants would make schemars emit `oneOf`.
    // No other job on the nodes (`--exclusive`).
    Node,
    // Only jobs of the same user (`--exclusive=user`).
    User,
    // Only jobs with the same MCS label (`--exclusive=mcs`).
    Mcs,
}

/// Slurm dependency type: `afterok`, `afterany` or `afternotok`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DependencyType {
    // Variant docs are plain comments: documented variants would make schemars emit `oneOf`.
    // Start after the other job completed successfully.
    #[default]
    AfterOk,
    // Start after the other job ended, whatever the outcome.
    AfterAny,
    // Start after the other job failed.
    AfterNotOk,
}

impl DependencyType {
    /// The sbatch spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AfterOk => "afterok",
            Self::AfterAny => "afterany",
            Self::AfterNotOk => "afternotok",
        }
    }
}

/// A path Slurm takes literally in `--output`: no `%` pattern, no `\` (which disables them).
const NO_FILENAME_PATTERN_CEL: &str = "!self.contains('%') && !self.contains('\\\\')";

/// Where job output goes: a PVC that the Slurm nodes see at `slurmPath`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct JobOutput {
    /// Name of a PersistentVolumeClaim in this namespace holding the output.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new(DNS_SUBDOMAIN_CEL).message(
        "output volume must be the name of a PersistentVolumeClaim: lowercase letters, digits, \
         '-' and '.', starting and ending with a letter or digit"
    ))]
    pub volume: String,

    /// Absolute path at which that volume is mounted on the Slurm nodes, e.g. `/shared`.
    #[schemars(length(min = 1, max = 4096))]
    #[x_kube(validation = Rule::new("self.startsWith('/')").message(
        "output slurmPath must be the absolute path where the volume is mounted on the Slurm \
         nodes, e.g. /shared"
    ))]
    // Slurm expands `%` patterns in the whole output path and `\` turns that off: either way
    // the file would not be where the output Pod looks.
    #[x_kube(validation = Rule::new(NO_FILENAME_PATTERN_CEL).message(
        "output slurmPath cannot contain '%' or '\\': Slurm would read them as a filename \
         pattern"
    ))]
    pub slurm_path: String,

    /// Directory inside the volume for this job's files, relative and without `..`. Defaults to
    /// the volume's root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    #[x_kube(validation = Rule::new(
        "!self.startsWith('/') && self != '..' && !self.startsWith('../') \
         && !self.endsWith('/..') && !self.contains('/../')"
    ).message("subPath must be a relative path without '..'"))]
    #[x_kube(validation = Rule::new(NO_FILENAME_PATTERN_CEL).message(
        "subPath cannot contain '%' or '\\': Slurm would read them as a filename pattern"
    ))]
    pub sub_path: Option<String>,
}

/// Where a submitted run writes its output (`status.output`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RunOutput {
    /// The PersistentVolumeClaim in this namespace holding the run's output file.
    pub volume: String,
    /// The directory inside the volume for the run's files (`spec.output.subPath`, normalised);
    /// absent: the volume's root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_path: Option<String>,
}

/// Lifecycle phase of a SlurmJob.
///
/// `Pending` (not yet submitted), `Submitted` (accepted by Slurm, waiting to start), `Running`,
/// then one terminal phase: `Completed`, `Failed`, `Cancelled`, `TimedOut`, `NodeFail`,
/// `Preempted`, `OutOfMemory`, or `Lost` (Slurm no longer knows the job and its outcome was not
/// observed).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Phase {
    // Variant docs are plain comments: documented variants would make schemars emit `oneOf`.
    // Not yet submitted to Slurm.
    #[default]
    Pending,
    // Accepted by Slurm, waiting to start.
    Submitted,
    // Running.
    Running,
    // Ended with exit code 0.
    Completed,
    // Ended with a non-zero exit code.
    Failed,
    // Cancelled by a user or the operator.
    Cancelled,
    // Reached its time limit.
    TimedOut,
    // A node it ran on failed.
    NodeFail,
    // Preempted by a higher-priority job.
    Preempted,
    // Killed for exceeding its memory.
    OutOfMemory,
    // Slurm no longer knows the job and its outcome was not observed.
    Lost,
}

impl Phase {
    /// The wire form (same as the variant name).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Submitted => "Submitted",
            Self::Running => "Running",
            Self::Completed => "Completed",
            Self::Failed => "Failed",
            Self::Cancelled => "Cancelled",
            Self::TimedOut => "TimedOut",
            Self::NodeFail => "NodeFail",
            Self::Preempted => "Preempted",
            Self::OutOfMemory => "OutOfMemory",
            Self::Lost => "Lost",
        }
    }

    /// Whether the job has ended (no further Slurm state changes are expected).
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Pending | Self::Submitted | Self::Running)
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Observed state of a SlurmJob, written by the operator.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SlurmJobStatus {
    /// Lifecycle phase.
    // Not an `Option`: schemars would add `null` to the enum, which is best kept out of a CRD.
    #[serde(default)]
    pub phase: Phase,

    /// Slurm job id of the current run (for an array, the array's job id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<i64>,

    /// Slurm job state flags as reported, e.g. `["PENDING"]` or `["COMPLETED"]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slurm_state: Vec<String>,

    /// Slurm's reason for the current state, e.g. `Priority` or `Resources` while pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_reason: Option<String>,

    /// Nodes allocated to the job, in Slurm hostlist form (e.g. `node[01-04]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<String>,

    /// Exit code of the batch script, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,

    /// Signal that ended the batch script, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,

    /// When Slurm accepted the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submit_time: Option<Time>,

    /// When the job started running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,

    /// When the job ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,

    /// Per-task state of a job array.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub array_tasks: Option<ArrayTasks>,

    /// While the job waits in Slurm to start: why, in Slurm's words and in plain ones, its
    /// priority and when Slurm expects it to start. Refreshed with the job's record; gone once
    /// it runs.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub pending: Option<PendingStatus>,

    /// What the ended job used, from the cluster's accounting (also once slurmctld has
    /// forgotten the job): times, memory, TRES and the efficiencies `seff` prints. For an
    /// array: times and TRES summed over its tasks, memory that of its largest task.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub usage: Option<JobUsage>,

    /// A hash of the spec the current run was submitted from, but for the fields a submitted
    /// job changes in place (`timeLimit`, `partition`, `account`, `qos`, `nice`, `suspend`): an
    /// edit that keeps it is applied to the job in Slurm; any other edit runs again once the
    /// job has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_spec_hash: Option<String>,

    /// Where the current run writes its output: `spec.output` as that run was submitted (an
    /// edit of `spec.output` applies from the next run). The output Pod and `kubectl slurm logs`
    /// read the run's file there; absent for a run submitted without `spec.output`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<RunOutput>,

    /// Latest observations of the job's state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "condition::schema")]
    pub conditions: Vec<Condition>,

    /// The `.metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The `.metadata.generation` of the spec the current run was submitted from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_generation: Option<i64>,

    /// When the operator had the current run's job: Slurm's answer to its submit, or its
    /// adoption; by the operator's clock. A job
    /// slurmctld no longer lists is called `Lost` only when a complete listing of slurmctld's
    /// jobs that began after this time misses it and the cluster's accounting has no record of
    /// it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracked_since: Option<Time>,

    /// The `.metadata.generation` whose submit Slurm refused for a reason only a change of the
    /// spec can fix (condition `Stalled`, reason `SubmitRejected`): that generation is not
    /// submitted again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_generation: Option<i64>,

    /// Earlier runs of this SlurmJob (most recent first), at most 10.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_HISTORY))]
    pub history: Vec<JobRun>,
}

/// An object of the status the API server kept as `{}` reads as absent. A server-side apply
/// that stops applying a struct may leave it so once its fields are gone; read as present, the
/// next reconcile finds a difference from the status it applies (which has none) and writes the
/// same status again, once per transition.
fn empty_as_none<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default + PartialEq,
{
    Ok(Option::<T>::deserialize(deserializer)?.filter(|value| *value != T::default()))
}

/// Why a submitted job has not started yet.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PendingStatus {
    /// Slurm's reason code, e.g. `Priority`, `Resources`, `Dependency`, `JobHeldUser`,
    /// `QOSMaxJobsPerUserLimit` (`squeue`'s NODELIST(REASON)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,

    /// What the reason means and what would let the job start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// The job's priority in Slurm: among the jobs that could use the same resources, the
    /// highest starts first. 0 while held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,

    /// When Slurm's scheduler expects the job to start, computed from the running jobs' time
    /// limits (so often later than it will). Absent until the scheduler has estimated it, and
    /// for jobs that wait for a dependency or are held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_start_time: Option<Time>,
}

/// What an ended job (or array task) used, as the cluster's accounting recorded it.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobUsage {
    /// Wall-clock time from start to end (sacct's `Elapsed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed: Option<Duration>,

    /// CPU time, user and system, of all its steps (seff's "CPU Utilized").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_time: Option<Duration>,

    /// The largest resident memory a step reached (sacct's `MaxRSS`, seff's "Memory
    /// Utilized"); absent when the cluster gathers no job accounting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "maxRSS")]
    pub max_rss: Option<Quantity>,

    /// The TRES allocated to it (sacct's `AllocTRES`), e.g. `billing=1,cpu=2,node=1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "allocatedTRES")]
    pub allocated_tres: Option<String>,

    /// The TRES it asked for (sacct's `ReqTRES`), e.g. `billing=1,cpu=2,mem=4096M,node=1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "requestedTRES")]
    pub requested_tres: Option<String>,

    /// CPU time over allocated CPUs × elapsed time, in percent (seff's "CPU Efficiency").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_efficiency_percent: Option<i32>,

    /// Largest resident memory over the memory it was given (allocated, or requested where the
    /// cluster does not allocate memory), in percent (seff's "Memory Efficiency").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_efficiency_percent: Option<i32>,
}

/// Task states of a job array.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ArrayTasks {
    /// Number of tasks per Slurm state, e.g. `{"RUNNING": 2, "PENDING": 8}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub counts: BTreeMap<String, i32>,

    /// Ended tasks by Slurm state, their ids as Slurm writes them, e.g. `{"COMPLETED": "0-2,4-9",
    /// "FAILED": "3"}`. slurmctld forgets a task `MinJobAge` after its end while the array runs
    /// on; the status does not: `counts`, the phase and the exit code still count it. At most
    /// 4096 characters a state (the lowest ids).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ended: BTreeMap<String, String>,

    /// Individual tasks, at most 100 (unfinished and failed tasks are listed first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_ARRAY_TASKS))]
    pub tasks: Vec<ArrayTask>,
}

/// One task of a job array.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ArrayTask {
    /// Array index (`SLURM_ARRAY_TASK_ID`).
    pub task_id: i32,
    /// Slurm state, e.g. `RUNNING`.
    pub state: String,
    /// Exit code, once the task ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// What the task used, once the array ended (no TRES lists: see the status' `usage`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub usage: Option<JobUsage>,
}

/// A finished earlier run of a SlurmJob.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct JobRun {
    /// Slurm job id of that run.
    pub job_id: i64,
    /// Phase the run ended in.
    pub phase: Phase,
    /// Exit code of that run's batch script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// When Slurm accepted that run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submit_time: Option<Time>,
    /// When that run ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    /// The `.metadata.generation` that run was submitted from.
    pub generation: i64,
}
