//! Domain types of the slurmrestd facade: what the operator needs to know about Slurm, in our
//! own words, independent of the REST API version that carried it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::node_owner::NodeOwner;
use super::tag::{self, OwnerTag, Ownership, Seal, TagKey, parse_comment};

/// One kind of RPC slurmctld served, from its statistics (`sdiag`, `/diag`): how many, and the
/// time spent on them, since the statistics were last reset (midnight, or `sdiag --reset`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RpcStats {
    /// Slurm's name for it, e.g. `REQUEST_JOB_INFO`, `REQUEST_NODE_INFO`.
    pub message_type: String,
    pub count: u64,
    pub total_time: Duration,
}

/// Health and identity of a Slurm cluster, as slurmrestd reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterInfo {
    /// `ClusterName` from slurm.conf.
    pub cluster_name: String,
    /// Slurm release, e.g. "24.11.5".
    pub release: String,
    /// The data_parser plugin serving the API, e.g. "data_parser/v0.0.42".
    pub data_parser: String,
    /// The REST API version the facade speaks, e.g. "v0.0.42".
    pub api_version: String,
    /// Whether a slurmctld (the primary, or a backup in control) answered a ping.
    pub controller_responding: bool,
    /// Jobs submitted since the controller's daily statistics reset.
    pub jobs_submitted: Option<i64>,
    /// slurmctld's clock when it answered (`/diag`'s `req_time`, whole seconds).
    pub controller_time: Option<DateTime<Utc>>,
}

/// slurmctld's clock read once (`/diag`), and this machine's clock when the answer came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockReading {
    pub answered: DateTime<Utc>,
    /// `None` when the answer did not say.
    pub controller: Option<DateTime<Utc>>,
}

impl ClockReading {
    /// How far slurmctld's clock is ahead of this machine's (negative: behind), at least: it read
    /// `controller` (rounded down to the second) at some instant before `answered`. Adding it to
    /// a time on this machine's clock never overshoots slurmctld's.
    pub fn controller_ahead_at_least(&self) -> Option<chrono::TimeDelta> {
        Some(self.controller? - self.answered)
    }
}

/// A Slurm node state: one base state plus flags, as slurmrestd's `state` array
/// (e.g. `["IDLE","DRAIN"]`, `["ALLOCATED","DYNAMIC_NORM"]`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NodeState {
    pub base: NodeBaseState,
    /// Flags in upper case as Slurm spells them: DRAIN, COMPLETING, NOT_RESPONDING, DYNAMIC_NORM, ...
    pub flags: BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum NodeBaseState {
    Idle,
    Allocated,
    Mixed,
    Down,
    Error,
    Future,
    #[default]
    Unknown,
    /// A base state this version of the operator does not know.
    Other(String),
}

impl NodeState {
    pub fn from_strings<S: AsRef<str>>(values: &[S]) -> Self {
        let mut base = None;
        let mut flags = BTreeSet::new();
        for value in values {
            let upper = value.as_ref().trim().to_ascii_uppercase();
            let parsed = match upper.as_str() {
                "IDLE" => Some(NodeBaseState::Idle),
                "ALLOCATED" | "ALLOC" => Some(NodeBaseState::Allocated),
                "MIXED" => Some(NodeBaseState::Mixed),
                "DOWN" => Some(NodeBaseState::Down),
                "ERROR" => Some(NodeBaseState::Error),
                "FUTURE" => Some(NodeBaseState::Future),
                "UNKNOWN" => Some(NodeBaseState::Unknown),
                _ => None,
            };
            match parsed {
                Some(state) if base.is_none() => base = Some(state),
                _ if !upper.is_empty() => {
                    flags.insert(upper);
                }
                _ => {}
            }
        }
        // Slurm always puts the base state first; a lone unknown word is a new base state.
        let base = match base {
            Some(base) => base,
            None => match values
                .first()
                .map(|v| v.as_ref().trim().to_ascii_uppercase())
            {
                Some(first) if !first.is_empty() && flags.len() == 1 => {
                    flags.remove(&first);
                    NodeBaseState::Other(first)
                }
                _ => NodeBaseState::Unknown,
            },
        };
        Self { base, flags }
    }

    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.contains(flag)
    }

    /// DRAIN is set (whether jobs still run or not).
    pub fn is_drain(&self) -> bool {
        self.has_flag("DRAIN")
    }

    /// Jobs still hold or are leaving the node.
    pub fn is_busy(&self) -> bool {
        matches!(self.base, NodeBaseState::Allocated | NodeBaseState::Mixed)
            || self.has_flag("COMPLETING")
    }

    /// Drained: DRAIN set and nothing running or completing on it.
    pub fn is_drained(&self) -> bool {
        self.is_drain() && !self.is_busy()
    }

    /// Draining: DRAIN set while jobs are still on it.
    pub fn is_draining(&self) -> bool {
        self.is_drain() && self.is_busy()
    }

    pub fn is_down(&self) -> bool {
        matches!(self.base, NodeBaseState::Down)
    }

    pub fn is_not_responding(&self) -> bool {
        self.has_flag("NOT_RESPONDING")
    }

    /// FAIL set (`scontrol update state=FAIL`): no new jobs, like DRAIN, and the node is failing.
    pub fn is_fail(&self) -> bool {
        self.has_flag("FAIL")
    }

    /// A reboot is pending (`scontrol reboot`); a RESUME would cancel it.
    pub fn is_reboot_requested(&self) -> bool {
        self.has_flag("REBOOT_REQUESTED")
    }

    pub fn is_dynamic(&self) -> bool {
        self.has_flag("DYNAMIC_NORM") || self.has_flag("DYNAMIC_FUTURE")
    }

    /// The state as Slurm's array again (base first, then flags in a stable order).
    pub fn to_strings(&self) -> Vec<String> {
        let mut out = vec![self.base.to_string()];
        out.extend(self.flags.iter().cloned());
        out
    }
}

impl fmt::Display for NodeBaseState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Self::Idle => "IDLE",
            Self::Allocated => "ALLOCATED",
            Self::Mixed => "MIXED",
            Self::Down => "DOWN",
            Self::Error => "ERROR",
            Self::Future => "FUTURE",
            Self::Unknown => "UNKNOWN",
            Self::Other(s) => s,
        };
        f.write_str(s)
    }
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_strings().join("+"))
    }
}

/// A Slurm node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    pub state: NodeState,
    /// Why the node is drained/down, if it is; Slurm keeps the text after a RESUME.
    pub reason: Option<String>,
    /// Who set `reason`.
    pub reason_set_by_user: Option<String>,
    pub cpus: Option<i64>,
    pub alloc_cpus: Option<i64>,
    /// Configured memory in MiB.
    pub real_memory: Option<i64>,
    pub features: Vec<String>,
    pub partitions: Vec<String>,
    pub address: Option<String>,
    pub hostname: Option<String>,
    pub port: Option<i64>,
    pub slurmd_version: Option<String>,
    /// The SlurmNodeSet that registered this node, from the record in its `extra` field
    /// ([`NodeOwner::from_extra`]); `None` for static nodes and nodes of anyone else.
    #[serde(default)]
    pub owner: Option<NodeOwner>,
}

/// A Slurm job state: base state plus flags (`["COMPLETED","COMPLETING"]`, `["PENDING","REQUEUED"]`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JobState {
    pub base: JobBaseState,
    pub flags: BTreeSet<String>,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, PartialOrd, Ord, Hash,
)]
pub enum JobBaseState {
    #[default]
    Pending,
    Running,
    Suspended,
    Completed,
    Cancelled,
    Failed,
    Timeout,
    NodeFail,
    Preempted,
    BootFail,
    Deadline,
    OutOfMemory,
    /// A state this version of the operator does not know; treated as not finished.
    Unknown,
}

impl JobBaseState {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "PENDING" => Self::Pending,
            "RUNNING" => Self::Running,
            "SUSPENDED" => Self::Suspended,
            "COMPLETED" => Self::Completed,
            "CANCELLED" => Self::Cancelled,
            "FAILED" => Self::Failed,
            "TIMEOUT" => Self::Timeout,
            "NODE_FAIL" => Self::NodeFail,
            "PREEMPTED" => Self::Preempted,
            "BOOT_FAIL" => Self::BootFail,
            "DEADLINE" => Self::Deadline,
            "OUT_OF_MEMORY" => Self::OutOfMemory,
            _ => return None,
        })
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Running => "RUNNING",
            Self::Suspended => "SUSPENDED",
            Self::Completed => "COMPLETED",
            Self::Cancelled => "CANCELLED",
            Self::Failed => "FAILED",
            Self::Timeout => "TIMEOUT",
            Self::NodeFail => "NODE_FAIL",
            Self::Preempted => "PREEMPTED",
            Self::BootFail => "BOOT_FAIL",
            Self::Deadline => "DEADLINE",
            Self::OutOfMemory => "OUT_OF_MEMORY",
            Self::Unknown => "UNKNOWN",
        }
    }

    /// The job will not run again on its own.
    pub fn is_finished(&self) -> bool {
        !matches!(
            self,
            Self::Pending | Self::Running | Self::Suspended | Self::Unknown
        )
    }
}

impl JobState {
    pub fn from_strings<S: AsRef<str>>(values: &[S]) -> Self {
        let mut base = None;
        let mut flags = BTreeSet::new();
        for value in values {
            let upper = value.as_ref().trim().to_ascii_uppercase();
            match JobBaseState::parse(&upper) {
                Some(state) if base.is_none() => base = Some(state),
                _ if !upper.is_empty() => {
                    flags.insert(upper);
                }
                _ => {}
            }
        }
        Self {
            base: base.unwrap_or(JobBaseState::Unknown),
            flags,
        }
    }

    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.contains(flag)
    }

    /// Finished and done with its nodes: the base state is final and no COMPLETING flag is left.
    pub fn is_final(&self) -> bool {
        self.base.is_finished() && !self.has_flag("COMPLETING")
    }

    pub fn to_strings(&self) -> Vec<String> {
        let mut out = vec![self.base.as_str().to_owned()];
        out.extend(self.flags.iter().cloned());
        out
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_strings().join("+"))
    }
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExitStatus {
    /// The batch script's exit code, when it exited on its own.
    pub return_code: Option<i32>,
    /// The signal that ended it, when one did (e.g. 15 for a cancel or time limit).
    pub signal: Option<i32>,
    pub signal_name: Option<String>,
    /// Slurm's summary flags: SUCCESS, ERROR, SIGNALED, CORE_DUMPED, ...
    pub status: Vec<String>,
}

/// A Slurm job as slurmctld (or slurmdbd) reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub job_id: u32,
    pub name: String,
    pub state: JobState,
    /// Why it is pending or how it ended, e.g. "Resources", "NonZeroExitCode", "TimeLimit"; "None" is dropped.
    pub state_reason: Option<String>,
    pub user_name: Option<String>,
    /// Who cancelled the job (accounting only: slurmdbd's `kill_request_user`).
    pub cancelled_by: Option<String>,
    pub partition: Option<String>,
    pub comment: Option<String>,
    /// The ownership tag the comment is, parsed once here: `Some` for every job whose comment
    /// claims to be the operator's. A claim only: [`Job::ownership`] says whether it is proven.
    /// Set together with `comment` ([`Job::set_comment`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<OwnerTag>,
    /// What backs `owner`: a signature still to verify, or nothing (a legacy tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<Seal>,
    /// Allocated nodes as a Slurm hostlist (e.g. "n[1-2]").
    pub nodes: Option<String>,
    pub node_count: Option<i64>,
    pub exit: Option<ExitStatus>,
    pub submit_time: Option<DateTime<Utc>>,
    pub start_time: Option<DateTime<Utc>>,
    /// Meaningful only once the job has ended (a running job reports start + time limit or + 1 year).
    pub end_time: Option<DateTime<Utc>>,
    /// `None` means no limit.
    pub time_limit: Option<Duration>,
    pub array_job_id: Option<u32>,
    pub array_task_id: Option<u32>,
    /// For a pending array's meta record: the tasks still to run, e.g. "1-3%2".
    pub array_task_string: Option<String>,
    pub standard_output: Option<String>,
    pub standard_error: Option<String>,
    pub working_directory: Option<String>,
    /// Slurm's priority (higher starts first); 0 while held.
    pub priority: Option<i64>,
    /// Held by its user or an administrator: it does not start until released.
    pub held: bool,
    pub account: Option<String>,
    pub qos: Option<String>,
    /// The job's nice value (a positive one lowers its priority).
    pub nice: Option<i64>,
    /// Slurm's longer words for `state_reason`, when it has any (`state_description`).
    pub state_description: Option<String>,
    /// What the job used, from accounting (slurmdbd) only; boxed, as slurmctld's records (the
    /// index holds thousands) never carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Box<Usage>>,
}

/// What an ended job used, as slurmdbd recorded it (sacct's numbers, from which seff computes
/// its efficiencies).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Wall-clock time from start to end.
    pub elapsed: Duration,
    /// CPU time (user + system) of all the job's steps. slurmdbd's job-level totals stay 0:
    /// they are the sum of the steps', which sacct adds up on its side too.
    pub cpu_time: Duration,
    /// The largest resident set size any step reached, in bytes (the steps' `TRESUsageInMax`
    /// `mem`); `None` when no step reported one (no job accounting gather plugin).
    pub max_rss_bytes: Option<u64>,
    /// The TRES allocated to the job, as slurmdbd lists them: type (`cpu`, `mem`, `node`,
    /// `billing`, `gres`, ...), name (`gpu` for `gres`) and count (`mem` in MiB).
    pub allocated: Vec<Tres>,
    /// The TRES the job asked for, in the same form (memory is here when the cluster does not
    /// allocate it: `SelectTypeParameters` without `CR_*_Memory`).
    pub requested: Vec<Tres>,
}

/// One trackable resource and its count.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Tres {
    pub kind: String,
    pub name: Option<String>,
    pub count: u64,
}

impl Tres {
    /// The first count of `kind` (and `name`, when given) in `list`.
    pub fn count_of(list: &[Tres], kind: &str, name: Option<&str>) -> Option<u64> {
        list.iter()
            .find(|t| t.kind == kind && (name.is_none() || t.name.as_deref() == name))
            .map(|t| t.count)
    }

    /// sacct's form: `billing=1,cpu=2,gres/gpu=1,mem=500M,node=1` (memory in MiB, `M`).
    pub fn list(list: &[Tres]) -> String {
        list.iter()
            .map(|t| {
                let key = match &t.name {
                    Some(name) => format!("{}/{name}", t.kind),
                    None => t.kind.clone(),
                };
                let unit = if t.kind == "mem" { "M" } else { "" };
                format!("{key}={}{unit}", t.count)
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Job {
    /// Set the comment and the owner tag it carries, as the conversion of a record does.
    pub fn set_comment(&mut self, comment: Option<String>) {
        let parsed = comment.as_deref().and_then(parse_comment);
        self.owner = parsed.as_ref().map(|(tag, _)| tag.clone());
        self.seal = parsed.map(|(_, seal)| seal);
        self.comment = comment;
    }

    /// Whether this record is provably ours under `key`: its tag's signature verifies for its
    /// claim and for the Slurm user slurmctld (or slurmdbd) says the job runs as.
    pub fn ownership(&self, key: &TagKey) -> Ownership {
        tag::ownership(
            key,
            self.owner.as_ref(),
            self.seal.as_ref(),
            self.user_name.as_deref(),
        )
    }

    /// Whether its comment is an unsigned (legacy) tag: [`Ownership::Legacy`] without the key.
    pub fn has_unsigned_tag(&self) -> bool {
        matches!(self.seal, Some(Seal::Legacy))
    }

    /// This record with `comment` (and the owner tag it carries).
    pub fn with_comment(mut self, comment: impl Into<String>) -> Self {
        self.set_comment(Some(comment.into()));
        self
    }
}

/// A record with every optional field empty: unit tests spell out only what they are about.
#[cfg(test)]
impl Job {
    pub(crate) fn bare() -> Self {
        Self {
            job_id: 0,
            name: String::new(),
            state: JobState::default(),
            state_reason: None,
            user_name: None,
            cancelled_by: None,
            partition: None,
            comment: None,
            owner: None,
            seal: None,
            nodes: None,
            node_count: None,
            exit: None,
            submit_time: None,
            start_time: None,
            end_time: None,
            time_limit: None,
            array_job_id: None,
            array_task_id: None,
            array_task_string: None,
            standard_output: None,
            standard_error: None,
            working_directory: None,
            priority: None,
            held: false,
            account: None,
            qos: None,
            nice: None,
            state_description: None,
            usage: None,
        }
    }
}

/// One entry of `/jobs/state/`: the cheapest way to follow jobs we already know.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStateEntry {
    /// The id of the job record the entry belongs to.
    pub job_id: u32,
    /// For an array: the task. A pending array's meta record has one entry per task still to run.
    pub array_task_id: Option<u32>,
    pub state: JobState,
}

/// A Slurm partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    pub name: String,
    pub state: Vec<String>,
    /// Configured nodes as a hostlist expression.
    pub nodes: String,
    pub total_nodes: Option<i64>,
    pub total_cpus: Option<i64>,
}

/// The answer to an incremental list call (`update_time`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Changes<T> {
    /// Nothing changed since the time given; keep what you have.
    Unchanged,
    /// Something changed: here is the full list (slurmrestd's `update_time` is a change flag, not
    /// a delta) and the server time to pass as `since` next time.
    Changed { items: Vec<T>, as_of: i64 },
}

impl<T> Changes<T> {
    pub fn into_items(self) -> Option<Vec<T>> {
        match self {
            Self::Unchanged => None,
            Self::Changed { items, .. } => Some(items),
        }
    }
}

/// The fields of slurmrestd's job description (`job_desc_msg`) that a submit may carry as given
/// ([`SubmitRequest::extra`], a SlurmJob's `extraOptions`): the shape, placement, timing and
/// notifications of the job — what `sbatch` lets any user choose for themselves, and Slurm
/// checks against their limits. Everything else is refused ([`extra_option_refusal`]): who the
/// job runs as, its priority, reservation or id, what it reports to the admins or to SPANK and
/// prolog scripts, security labels, containers and the clusters it is routed to, and the
/// fields the request sets itself.
pub const EXTRA_JOB_OPTIONS: &[&str] = &[
    "account_gather_frequency",
    "argv",
    "batch_features",
    "begin_time",
    "burst_buffer",
    "contiguous",
    "core_specification",
    "cpu_binding",
    "cpu_binding_flags",
    "cpu_frequency",
    "cpus_per_tres",
    "deadline",
    "delay_boot",
    "distribution",
    "distribution_plane_size",
    "excluded_nodes",
    "extra",
    "immediate",
    "kill_on_node_fail",
    "kill_warning_delay",
    "kill_warning_flags",
    "kill_warning_signal",
    "licenses",
    "mail_type",
    "mail_user",
    "maximum_cpus",
    "maximum_nodes",
    "memory_binding",
    "memory_binding_type",
    "memory_per_tres",
    "minimum_boards_per_node",
    "minimum_cpus",
    "minimum_cpus_per_node",
    "minimum_nodes",
    "minimum_sockets_per_board",
    "ntasks_per_tres",
    "oom_kill_step",
    "open_mode",
    "overcommit",
    "prefer",
    "profile",
    "required_nodes",
    "requeue",
    "segment_size",
    "shared",
    "sockets_per_node",
    "tasks_per_board",
    "tasks_per_core",
    "tasks_per_socket",
    "temporary_disk_per_node",
    "thread_specification",
    "threads_per_core",
    "time_minimum",
    "tres_bind",
    "tres_freq",
    "tres_per_job",
    "tres_per_socket",
    "wait_all_nodes",
    "wckey",
];

/// Job options refused for a reason more specific than "not a job option a submit may carry",
/// with that reason (read after the option's name: `extraOptions.user_id <reason>`).
pub const REFUSED_JOB_OPTIONS: &[(&str, &str)] = &[
    (
        "comment",
        "is set by the operator (it carries the job's ownership tag)",
    ),
    ("script", "is set by the operator; use spec.script"),
    (
        "standard_output",
        "has a typed field: use spec.standardOutput (or spec.output to collect the output)",
    ),
    (
        "standard_error",
        "has a typed field: use spec.standardError (or spec.output to collect the output)",
    ),
    ("standard_input", "is set by the operator"),
    (
        "user_id",
        "is refused: a job runs as the Slurm user its access grants",
    ),
    (
        "group_id",
        "is refused: a job runs as the Slurm user its access grants",
    ),
    (
        "priority",
        "is refused: only Slurm administrators set a job's priority",
    ),
    (
        "nice",
        "has a typed field: use spec.nice (0 or more: a negative nice value needs Slurm \
         administrator rights)",
    ),
    (
        "hold",
        "has a typed field: use spec.suspend (true submits the job held, and holds or \
         releases a pending job)",
    ),
    (
        "reservation",
        "is refused: reservations are granted by the Slurm administrators",
    ),
    ("job_id", "is refused: Slurm assigns job ids"),
    (
        "admin_comment",
        "is refused: it is the Slurm administrators' field",
    ),
    (
        "site_factor",
        "is refused: it is the Slurm administrators' field",
    ),
    (
        "spank_environment",
        "is refused: it reaches SPANK plugins and prolog scripts",
    ),
    (
        "selinux_context",
        "is refused: security labels are set by the site",
    ),
    (
        "mcs_label",
        "is refused: security labels are set by the site",
    ),
    (
        "container",
        "is refused: containers are not run through the operator",
    ),
    (
        "container_id",
        "is refused: containers are not run through the operator",
    ),
    (
        "clusters",
        "is refused: the SlurmJob's cluster is set by its access",
    ),
    (
        "cluster_constraint",
        "is refused: the SlurmJob's cluster is set by its access",
    ),
    ("name", "has a typed field: use spec.name"),
    ("partition", "has a typed field: use spec.partition"),
    ("account", "has a typed field: use spec.account"),
    ("qos", "has a typed field: use spec.qos"),
    ("nodes", "has a typed field: use spec.nodes"),
    ("tasks", "has a typed field: use spec.ntasks"),
    ("cpus_per_task", "has a typed field: use spec.cpusPerTask"),
    (
        "memory_per_node",
        "has a typed field: use spec.memoryPerNode",
    ),
    ("time_limit", "has a typed field: use spec.timeLimit"),
    ("constraints", "has a typed field: use spec.constraints"),
    ("tasks_per_node", "has a typed field: use spec.tasksPerNode"),
    ("memory_per_cpu", "has a typed field: use spec.memoryPerCpu"),
    (
        "tres_per_node",
        "has a typed field: use spec.gres or spec.gpusPerNode",
    ),
    (
        "tres_per_task",
        "has a typed field: use spec.tresPerTask or spec.gpusPerTask",
    ),
    ("array", "has a typed field: use spec.array"),
    ("dependency", "has a typed field: use spec.dependsOn"),
    ("environment", "has a typed field: use spec.environment"),
    (
        "current_working_directory",
        "has a typed field: use spec.workingDirectory",
    ),
];

/// Why `key` may not be carried as a job option ([`EXTRA_JOB_OPTIONS`]); `None` when it may.
pub fn extra_option_refusal(key: &str) -> Option<&'static str> {
    if EXTRA_JOB_OPTIONS.contains(&key) {
        return None;
    }
    Some(
        REFUSED_JOB_OPTIONS
            .iter()
            .find(|(refused, _)| *refused == key)
            .map_or(EXTRA_OPTION_UNKNOWN, |(_, reason)| reason),
    )
}

/// The reason for a key that is neither allowed nor specifically refused.
pub const EXTRA_OPTION_UNKNOWN: &str = "is not a job option a SlurmJob may set (see `kubectl \
                                        explain slurmjob.spec.extraOptions` for those it may)";

/// A batch job to submit. Field names follow sbatch; units are explicit.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SubmitRequest {
    /// The batch script, starting with `#!`.
    pub script: String,
    pub name: Option<String>,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    /// Node count or range, e.g. "2" or "1-4".
    pub nodes: Option<String>,
    pub tasks: Option<u32>,
    pub cpus_per_task: Option<u32>,
    /// `--ntasks-per-node`.
    pub tasks_per_node: Option<u32>,
    pub memory_per_node_mib: Option<u64>,
    /// `--mem-per-cpu`; Slurm refuses it together with a memory per node.
    pub memory_per_cpu_mib: Option<u64>,
    /// Rounded up to whole minutes (Slurm's unit).
    pub time_limit: Option<Duration>,
    /// Environment of the batch script. slurmrestd requires one; an empty map sends a minimal PATH.
    pub environment: BTreeMap<String, String>,
    /// slurmrestd requires a working directory.
    pub working_directory: String,
    pub constraints: Option<String>,
    pub gres: Option<String>,
    pub tres_per_node: Option<String>,
    /// e.g. "cpu=4,gres/gpu=1".
    pub tres_per_task: Option<String>,
    /// `--gpus-per-node`: a count, optionally typed (`"2"`, `"a100:2"`); joins `tres_per_node`.
    pub gpus_per_node: Option<String>,
    /// `--gpus-per-task`, the same form; joins `tres_per_task`.
    pub gpus_per_task: Option<String>,
    /// `--exclusive`: how the job's nodes are kept from other jobs.
    pub exclusive: Option<Exclusive>,
    /// e.g. "0-9%2".
    pub array: Option<String>,
    /// A Slurm dependency expression, e.g. "afterok:12:13".
    pub dependency: Option<String>,
    pub standard_output: Option<String>,
    pub standard_error: Option<String>,
    /// Free text stored with the job; the operator puts its ownership tag here.
    pub comment: Option<String>,
    /// Submit the job held (`sbatch --hold`): it waits, with reason `JobHeldUser`, until released.
    pub hold: bool,
    /// `--nice`: a positive value lowers the job's priority (a negative one needs an admin).
    pub nice: Option<u32>,
    /// Further fields of slurmrestd's job description, merged as given.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// Fields of a job to change in place (`POST /job/{id}`, `scontrol update job`); `None`
/// leaves a field as it is. slurmctld checks each against what the calling user may do: a user
/// may lower a running job's time limit but not raise it, hold and release their own pending
/// job (not one an administrator held), and use only their own accounts and QoS.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JobUpdate {
    /// Rounded up to whole minutes, as at submit.
    pub time_limit: Option<Duration>,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub nice: Option<u32>,
    /// `true` holds a pending job (a user hold when its own user asks), `false` releases it.
    pub hold: Option<bool>,
}

impl JobUpdate {
    /// Nothing to change.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The spec fields it changes, for messages (`timeLimit, suspend`).
    pub fn fields(&self) -> Vec<&'static str> {
        [
            ("timeLimit", self.time_limit.is_some()),
            ("partition", self.partition.is_some()),
            ("account", self.account.is_some()),
            ("qos", self.qos.is_some()),
            ("nice", self.nice.is_some()),
            ("suspend", self.hold.is_some()),
        ]
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(name, _)| name)
        .collect()
    }
}

/// `--exclusive[=user|mcs]`: with whom the job's nodes are shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Exclusive {
    /// No other job (`--exclusive`).
    Node,
    /// Only jobs of the same user (`--exclusive=user`).
    User,
    /// Only jobs with the same MCS label (`--exclusive=mcs`).
    Mcs,
}

impl Exclusive {
    /// The job description's `shared` flag for it. Every REST API version from v0.0.40 takes
    /// `shared` (v0.0.42 dropped `exclusive`): `["none"]` is what Slurm 24.11 reports back as
    /// `exclusive: ["true"]`.
    pub fn shared_flag(self) -> &'static str {
        match self {
            Self::Node => "none",
            Self::User => "user",
            Self::Mcs => "mcs",
        }
    }
}

/// What slurmctld answered to a submit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submitted {
    pub job_id: u32,
    /// `job_submit_user_msg`, when a job_submit plugin said something.
    pub user_message: Option<String>,
    /// slurmrestd's warnings (e.g. an ignored unknown field).
    pub warnings: Vec<String>,
}

/// Nodes counted by what matters to an operator. Each node counts once: down first, then drain
/// (draining or drained), then its base state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NodeCounts {
    pub total: u32,
    pub idle: u32,
    pub allocated: u32,
    pub mixed: u32,
    pub drain: u32,
    pub down: u32,
    /// FUTURE, UNKNOWN, ERROR or a state this operator does not know.
    pub other: u32,
}

impl NodeCounts {
    pub fn count<'a>(states: impl IntoIterator<Item = &'a NodeState>) -> Self {
        let mut counts = Self::default();
        for state in states {
            counts.total += 1;
            let bucket = if state.is_down() {
                &mut counts.down
            } else if state.is_drain() {
                &mut counts.drain
            } else {
                match state.base {
                    NodeBaseState::Idle => &mut counts.idle,
                    NodeBaseState::Allocated => &mut counts.allocated,
                    NodeBaseState::Mixed => &mut counts.mixed,
                    _ => &mut counts.other,
                }
            };
            *bucket += 1;
        }
        counts
    }
}

impl fmt::Display for NodeCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} total: {} idle, {} allocated, {} mixed, {} drain, {} down",
            self.total, self.idle, self.allocated, self.mixed, self.drain, self.down
        )?;
        if self.other > 0 {
            write!(f, ", {} other", self.other)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// State array, then: drain, busy, drained, draining, down, not responding.
    type NodeStateRow = (&'static [&'static str], bool, bool, bool, bool, bool, bool);

    #[test]
    fn node_states_observed_on_slurm_24_11() {
        let table: &[NodeStateRow] = &[
            (&["IDLE"], false, false, false, false, false, false),
            (&["ALLOCATED"], false, true, false, false, false, false),
            (&["MIXED"], false, true, false, false, false, false),
            (
                &["ALLOCATED", "DRAIN"],
                true,
                true,
                false,
                true,
                false,
                false,
            ),
            (&["MIXED", "DRAIN"], true, true, false, true, false, false),
            (&["IDLE", "DRAIN"], true, false, true, false, false, false),
            (
                &["IDLE", "COMPLETING", "DRAIN"],
                true,
                true,
                false,
                true,
                false,
                false,
            ),
            (
                &["IDLE", "NOT_RESPONDING"],
                false,
                false,
                false,
                false,
                false,
                true,
            ),
            (
                &["IDLE", "DYNAMIC_NORM"],
                false,
                false,
                false,
                false,
                false,
                false,
            ),
            (
                &["ALLOCATED", "DYNAMIC_NORM"],
                false,
                true,
                false,
                false,
                false,
                false,
            ),
            (
                &["IDLE", "NOT_RESPONDING", "DYNAMIC_NORM"],
                false,
                false,
                false,
                false,
                false,
                true,
            ),
            (
                &["DOWN", "NOT_RESPONDING", "DYNAMIC_NORM"],
                false,
                false,
                false,
                false,
                true,
                true,
            ),
            (&["DOWN", "DRAIN"], true, false, true, false, true, false),
        ];
        for (states, drain, busy, drained, draining, down, not_responding) in table {
            let s = NodeState::from_strings(states);
            assert_eq!(s.is_drain(), *drain, "{states:?} drain");
            assert_eq!(s.is_busy(), *busy, "{states:?} busy");
            assert_eq!(s.is_drained(), *drained, "{states:?} drained");
            assert_eq!(s.is_draining(), *draining, "{states:?} draining");
            assert_eq!(s.is_down(), *down, "{states:?} down");
            assert_eq!(
                s.is_not_responding(),
                *not_responding,
                "{states:?} not responding"
            );
        }
    }

    #[test]
    fn unknown_node_states_are_kept_not_dropped() {
        let s = NodeState::from_strings(&["IDLE", "SOMETHING_NEW"]);
        assert_eq!(s.base, NodeBaseState::Idle);
        assert!(s.has_flag("SOMETHING_NEW"));
        let s = NodeState::from_strings(&["BRAND_NEW_BASE"]);
        assert_eq!(s.base, NodeBaseState::Other("BRAND_NEW_BASE".into()));
        assert_eq!(s.to_string(), "BRAND_NEW_BASE");
        assert_eq!(
            NodeState::from_strings::<&str>(&[]).base,
            NodeBaseState::Unknown
        );
        assert_eq!(
            NodeState::from_strings(&["idle", "drain"]).to_string(),
            "IDLE+DRAIN"
        );
    }

    #[test]
    fn node_counts_put_each_node_in_one_bucket() {
        let states: Vec<NodeState> = [
            &["IDLE"][..],
            &["IDLE", "DYNAMIC_NORM"],
            &["ALLOCATED"],
            &["MIXED"],
            &["ALLOCATED", "DRAIN"],
            &["IDLE", "DRAIN"],
            &["DOWN", "DRAIN"],
            &["DOWN", "NOT_RESPONDING"],
            &["FUTURE"],
        ]
        .iter()
        .map(|s| NodeState::from_strings(s))
        .collect();
        let counts = NodeCounts::count(&states);
        assert_eq!(
            counts,
            NodeCounts {
                total: 9,
                idle: 2,
                allocated: 1,
                mixed: 1,
                drain: 2,
                down: 2,
                other: 1
            }
        );
        assert_eq!(
            counts.to_string(),
            "9 total: 2 idle, 1 allocated, 1 mixed, 2 drain, 2 down, 1 other"
        );
    }

    #[test]
    fn job_states_and_flags() {
        let s = JobState::from_strings(&["COMPLETED", "COMPLETING"]);
        assert_eq!(s.base, JobBaseState::Completed);
        assert!(s.has_flag("COMPLETING"));
        assert!(!s.is_final(), "still completing");
        assert!(JobState::from_strings(&["COMPLETED"]).is_final());
        assert!(JobState::from_strings(&["FAILED"]).is_final());
        assert!(!JobState::from_strings(&["RUNNING"]).is_final());
        let requeued = JobState::from_strings(&["PENDING", "REQUEUED"]);
        assert_eq!(requeued.base, JobBaseState::Pending);
        assert_eq!(requeued.to_string(), "PENDING+REQUEUED");
        let unknown = JobState::from_strings(&["NEW_STATE"]);
        assert_eq!(unknown.base, JobBaseState::Unknown);
        assert!(
            !unknown.is_final(),
            "an unknown state is never taken as the end"
        );
        for base in [
            JobBaseState::Pending,
            JobBaseState::Running,
            JobBaseState::Suspended,
            JobBaseState::Completed,
            JobBaseState::Cancelled,
            JobBaseState::Failed,
            JobBaseState::Timeout,
            JobBaseState::NodeFail,
            JobBaseState::Preempted,
            JobBaseState::BootFail,
            JobBaseState::Deadline,
            JobBaseState::OutOfMemory,
        ] {
            assert_eq!(JobBaseState::parse(base.as_str()), Some(base));
        }
    }
}
