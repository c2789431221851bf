//! Slurm's reasons for a pending job, in words a researcher understands: what the job waits for
//! and what would let it start, for a SlurmJob's status.
//!
//! Most codes are listed by hand (`FIXED`). The QOS and association limit codes are not: Slurm
//! builds their names from parts (owner `QOS`/`Assoc`, or none for the QOS's per-account limits;
//! kind `Grp`/`Max`/`Min`; a resource; an optional `Minutes`/`RunMinutes`; a scope `PerJob`,
//! `PerNode`, `PerUser` or `PerAccount`; an optional `Limit`). There are well over a hundred, the
//! spellings drift (`Cpu`/`CPU`, `Mem`/`Memory`, `Minutes`/`Mins`) and releases add more, so
//! `Limit` parses the parts and composes the text. A new code of the same shape is then
//! explained without an operator release, and the answer to "whom am I waiting for" follows
//! from the parts: a group limit is shared with everyone in the account or QOS, a per-user limit
//! with one's own jobs, and a per-job limit is never met by waiting.

/// What a pending job's reason means and what would change it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// What Slurm is waiting for, in a sentence (no trailing period needed; be consistent).
    pub meaning: String,
    /// What would let the job start: what the user can change, or that it waits on its own, or
    /// whom to ask.
    pub remedy: String,
}

/// Slurm's reason code as reported by slurmrestd's `state_reason` (e.g. "Resources",
/// "QOSMaxJobsPerUserLimit", "ReqNodeNotAvail, UnavailableNodes:n[1-3]"); `None` for "None"/empty
/// (no reason) and for codes it does not know (callers then show Slurm's code alone with a link to
/// <https://slurm.schedmd.com/job_reason_codes.html>).
pub fn explain(reason: &str) -> Option<Explanation> {
    let code = code(reason);
    if code.is_empty() || code == "None" {
        return None;
    }
    if code == "ReqNodeNotAvail" {
        return Some(nodes_not_available(details(reason)));
    }
    if let Some((_, meaning, remedy)) = FIXED.iter().find(|(fixed, _, _)| *fixed == code) {
        return Some(text(*meaning, *remedy));
    }
    Limit::parse(code).map(Limit::explanation)
}

/// The reason's code without Slurm's details: "ReqNodeNotAvail, UnavailableNodes:n[1-3]" →
/// "ReqNodeNotAvail".
// A bare ',' counts too: scontrol prints "ReqNodeNotAvail,_Reserved_for_maintenance".
pub fn code(reason: &str) -> &str {
    let reason = reason.trim();
    reason
        .split_once([',', ':'])
        .map_or(reason, |(code, _)| code.trim_end())
}

/// One line for a status message: `"<meaning>; <remedy>"` bounded to `max` characters (cut on a
/// char boundary with '…').
pub fn sentence(explanation: &Explanation, max: usize) -> String {
    let line = format!("{}; {}", explanation.meaning, explanation.remedy);
    bounded(&line, max)
}

/// An explanation from its two texts.
fn text(meaning: impl Into<String>, remedy: impl Into<String>) -> Explanation {
    Explanation {
        meaning: meaning.into(),
        remedy: remedy.into(),
    }
}

/// `text` in at most `max` characters; a cut one ends in '…' (conditions and events count
/// characters, and a cut inside a UTF-8 sequence would not be a string).
pub fn bounded(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let Some(keep) = max.checked_sub(1) else {
        return String::new();
    };
    let head: String = text.chars().take(keep).collect();
    let head = head.trim_end_matches(|c: char| c.is_whitespace() || matches!(c, ';' | ',' | ':'));
    format!("{head}…")
}

/// Slurm's details after the code ("UnavailableNodes:n[1-3]"); "" when there are none.
fn details(reason: &str) -> &str {
    reason
        .trim()
        .split_once([',', ':'])
        .map_or("", |(_, rest)| {
            rest.trim_start_matches(|c: char| c == '_' || c.is_whitespace())
        })
}

const NODES_MEANING: &str = "Nodes it needs are unavailable (down, drained, reserved or in use)";
const NODES_REMEDY: &str =
    "waits until the nodes are back; down or drained nodes need an administrator";

/// ReqNodeNotAvail with what Slurm says about the nodes: the list of down or drained ones, or a
/// maintenance reservation, which a job that ends before it begins can still run around.
fn nodes_not_available(details: &str) -> Explanation {
    match details.strip_prefix("UnavailableNodes:").map(str::trim) {
        Some(nodes) if !nodes.is_empty() => text(
            format!(
                "Nodes it needs are down, drained or not responding: {}",
                bounded(nodes, 100)
            ),
            "waits until they are back, usually an administrator's work; \
             extraOptions.excluded_nodes can steer it elsewhere",
        ),
        Some(_) => text(NODES_MEANING, NODES_REMEDY),
        None if details.is_empty() => text(NODES_MEANING, NODES_REMEDY),
        None if details.to_ascii_lowercase().contains("maintenance") => text(
            "Its nodes are reserved for maintenance",
            "starts after the maintenance; a spec.timeLimit that ends before it begins may run \
             sooner",
        ),
        None => {
            let details = bounded(&details.replace('_', " "), 100);
            text(
                format!("Nodes it needs are unavailable: {details}"),
                NODES_REMEDY,
            )
        }
    }
}

/// The reasons listed by hand: (code as Slurm spells it, meaning, remedy). Besides the codes of
/// Slurm's reason page this holds the text slurmctld puts in the reason after a failed launch,
/// newer codes of Slurm's source, and `PowerUpNode`/`Configuring` (job state flags, not reasons,
/// which a caller may show in the reason's place while nodes boot).
// One entry per code reads as a table; rustfmt would spread each over five lines.
#[rustfmt::skip]
const FIXED: &[(&str, &str, &str)] = &[
    ("Priority", "Jobs with higher priority are queued ahead of it",
     "starts on its own when its turn comes; its priority grows while it waits"),
    ("Resources", "Waiting for nodes, CPUs, memory or GPUs that running jobs are using",
     "starts on its own as running jobs end; a smaller or shorter request may backfill sooner"),
    ("Dependency", "Waiting for the jobs it depends on",
     "starts when the SlurmJobs in spec.dependsOn end as required"),
    ("DependencyNeverSatisfied", "A job it depends on ended in a way that can never satisfy it",
     "will never start: delete the SlurmJob (which cancels the job) and create it again once the SlurmJobs in spec.dependsOn have run as it requires"),
    ("BeginTime", "Waiting for its requested begin time",
     "starts on its own once its begin time (extraOptions.begin_time) has passed"),
    ("JobHeldUser", "Held by its owner or an account coordinator",
     "an edit setting spec.suspend to false releases it (the Suspended condition says how), as does scontrol release"),
    ("JobHeldAdmin", "Held by a Slurm administrator", "ask an administrator to release it"),
    ("launch failed requeued held", "Slurm could not launch it on a node, requeued it and held it",
     "an edit setting spec.suspend to false releases it (the Suspended condition says how), as does scontrol release; if it recurs, tell an administrator"),
    ("JobHoldMaxRequeue", "Held after being requeued as often as Slurm allows",
     "find out why it keeps failing, then release it (an edit setting spec.suspend to false: the Suspended condition says how; or scontrol release) or delete it"),
    ("PartitionTimeLimit", "Its time limit is longer than the partition allows",
     "lower spec.timeLimit or choose another spec.partition; it will not start as is"),
    ("PartitionNodeLimit",
     "Its node count is outside the partition's limits, or nodes it needs are down or drained",
     "fit spec.nodes to the partition or choose another one; down nodes need an administrator"),
    ("PartitionDown", "Its partition is down and starts no jobs",
     "waits until an administrator brings the partition up, or choose another spec.partition"),
    ("PartitionInactive", "Its partition is inactive and starts no jobs",
     "waits until an administrator activates the partition, or choose another spec.partition"),
    ("PartitionConfig", "It breaks one of the partition's limits",
     "compare the request with scontrol show partition, or choose another spec.partition"),
    ("AccountNotAllowed", "Its account may not use this partition",
     "choose another spec.account or spec.partition, or ask an administrator for access"),
    ("QOSNotAllowed", "Its QOS is not allowed for its account or partition",
     "choose a QOS the account may use (spec.qos) or another spec.partition"),
    ("InvalidAccount", "Its account does not exist or the user does not belong to it",
     "set spec.account to an account you belong to; it will not start as is"),
    ("InvalidQOS", "Its QOS does not exist or its account may not use it",
     "set spec.qos to a QOS the account may use; it will not start as is"),
    ("AccountingPolicy", "An accounting limit holds it back (Slurm does not say which)",
     "check the limits (sacctmgr show assoc, sacctmgr show qos) or ask an administrator"),
    ("AssociationJobLimit", "The account has reached its limit on jobs",
     "starts when other jobs in the account end"),
    ("AssociationResourceLimit", "The account has reached a limit on resources in use",
     "waits for other jobs in the account to end; a smaller request may fit sooner"),
    ("AssociationTimeLimit", "The account has reached a limit on time",
     "a shorter spec.timeLimit may fit; otherwise ask an administrator about the account's limits"),
    ("QOSJobLimit", "The QOS has reached its limit on jobs",
     "starts when other jobs in the QOS end, or use another spec.qos"),
    ("QOSResourceLimit", "The QOS has reached a limit on resources in use",
     "waits for other jobs in the QOS to end; a smaller request or another spec.qos may help"),
    ("QOSTimeLimit", "The QOS has reached a limit on time",
     "a shorter spec.timeLimit or another spec.qos may fit"),
    ("QOSUsageThreshold", "The account's past usage is above the QOS's usage threshold",
     "waits until the usage decays below it, or use another spec.qos or spec.account"),
    ("Reservation", "Waiting for its advanced reservation to become active",
     "starts on its own when the reservation begins"),
    ("ReservationDeleted", "The reservation it asked for no longer exists",
     "will not start as is: submit it again without the reservation, or ask an administrator"),
    ("ReservationInvalid", "The reservation it asked for cannot be used by this job",
     "will not start as is: submit it again without the reservation, or ask an administrator"),
    ("ReqNodeNotAvail", NODES_MEANING, NODES_REMEDY),
    ("NodeDown", "A node it needs is down", "waits until an administrator brings the node back"),
    ("BadConstraints", "No node can ever meet its requirements",
     "will not start as is: ask for less per node, relax spec.constraints or change partition"),
    ("Constraints", "Its constraints cannot be met at the moment",
     "waits for matching nodes; if it lasts, relax spec.constraints or ask an administrator"),
    ("Licenses", "Waiting for software licenses to become free",
     "starts on its own when other jobs release the licenses (extraOptions.licenses)"),
    ("FrontEndDown", "No front-end node is up to launch it",
     "waits until an administrator restores the front-end nodes"),
    ("Cleaning", "Requeued and still cleaning up after its previous run",
     "starts on its own once the cleanup finishes"),
    ("Prolog", "Its nodes are still running the prolog script",
     "starts on its own when the prolog finishes; if it hangs, ask an administrator"),
    ("BurstBufferResources", "Not enough burst buffer space is free",
     "starts on its own when other jobs free burst buffer space"),
    ("BurstBufferStageIn", "Its data is being staged into the burst buffer",
     "starts on its own when the stage-in finishes"),
    ("BurstBufferOperation", "A burst buffer operation for it failed",
     "ask an administrator; it may have to be re-run"),
    ("SystemFailure", "A failure of Slurm, a file system or the network hit it",
     "ask an administrator; if it does not recover, delete and re-create the SlurmJob"),
    ("JobArrayTaskLimit", "Its array already runs as many tasks at once as allowed",
     "starts on its own as other tasks of the array end; the %N in spec.array sets the limit"),
    ("JobLaunchFailure", "Slurm could not launch it (e.g. file system trouble or a bad path)",
     "check the script and its paths; if it recurs, ask an administrator"),
    ("NonZeroExitCode", "Its previous run exited with a non-zero code",
     "check the job's output, fix the cause and let it re-run"),
    ("RaisedSignal", "Its previous run was killed by a signal",
     "check the job's output, fix the cause and let it re-run"),
    ("TimeLimit", "Its previous run reached its time limit",
     "raise spec.timeLimit if the work needs longer"),
    ("OutOfMemory", "Its previous run ran out of memory",
     "raise spec.memoryPerNode or spec.memoryPerCpu and let it re-run"),
    ("InactiveLimit", "Its srun or salloc stopped responding (the cluster's InactiveLimit)",
     "let it re-run; if it recurs, ask an administrator"),
    ("DeadLine", "It cannot finish before its deadline",
     "will not start: set a later extraOptions.deadline or a shorter spec.timeLimit"),
    ("FedJobLock", "Waiting for the federation's clusters to agree where it runs",
     "starts on its own once the clusters are in sync"),
    ("SchedDefer", "It asks for an immediate start, which this cluster's scheduler defers",
     "remove extraOptions.immediate and let it queue"),
    ("MaxMemPerLimit", "Its memory request is over the per-CPU or per-node maximum",
     "lower spec.memoryPerCpu or spec.memoryPerNode; it will not start as is"),
    ("MaxPoweredUpNodes", "Starting it would power up more nodes than the cluster allows at once",
     "starts on its own when powered-up nodes become free"),
    ("MpiPortsBusy", "The MPI ports on its nodes are all in use",
     "starts on its own when other jobs release them"),
    ("PowerUpNode", "Its nodes are powering up", "starts on its own when the nodes have booted"),
    ("Configuring", "Its nodes are booting or being configured",
     "starts on its own when the nodes are ready"),
];

/// Who set a limit: the QOS the job runs in, or its association (user and account).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Qos,
    Assoc,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Shared by every job of the QOS or account.
    Grp,
    /// A ceiling per job, node, user or account.
    Max,
    /// A floor every job must request.
    Min,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resource {
    Cpu,
    Mem,
    Node,
    Gres,
    License,
    BurstBuffer,
    Energy,
    Billing,
    /// A trackable resource Slurm does not name.
    Unknown,
    Jobs,
    SubmitJobs,
    Wall,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measure {
    InUse,
    /// Resource × time of past, running and future jobs: a budget that only decays or is reset.
    Minutes,
    /// Resource × remaining time of running jobs: frees up as they progress.
    RunMinutes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Unscoped,
    Job,
    Node,
    User,
    Account,
}

/// A QOS or association limit code taken apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Limit {
    owner: Owner,
    kind: Kind,
    resource: Resource,
    measure: Measure,
    scope: Scope,
}

// How Slurm spells the parts; where one spelling ends another, the longer comes first.
const KINDS: &[(&str, Kind)] = &[("Grp", Kind::Grp), ("Max", Kind::Max), ("Min", Kind::Min)];
#[rustfmt::skip]
const SCOPES: &[(&str, Scope)] = &[("PerJob", Scope::Job), ("PerNode", Scope::Node),
    ("PerUser", Scope::User), ("PerAccount", Scope::Account)];
#[rustfmt::skip]
const MEASURES: &[(&str, Measure)] = &[("RunMinutes", Measure::RunMinutes),
    ("RunMins", Measure::RunMinutes), ("Minutes", Measure::Minutes), ("Mins", Measure::Minutes)];
#[rustfmt::skip]
const RESOURCES: &[(&str, Resource)] = &[
    ("Cpu", Resource::Cpu), ("CPU", Resource::Cpu), ("Mem", Resource::Mem),
    ("Memory", Resource::Mem), ("Node", Resource::Node), ("GRES", Resource::Gres),
    ("License", Resource::License), ("BB", Resource::BurstBuffer), ("Energy", Resource::Energy),
    ("Billing", Resource::Billing), ("Unknown", Resource::Unknown), ("Jobs", Resource::Jobs),
    ("Job", Resource::Jobs), ("SubmitJobs", Resource::SubmitJobs),
    ("SubmitJob", Resource::SubmitJobs), ("Wall", Resource::Wall),
    ("WallDuration", Resource::Wall),
];

fn strip_prefix_any<'a, T: Copy>(text: &'a str, parts: &[(&str, T)]) -> Option<(T, &'a str)> {
    parts
        .iter()
        .find_map(|(part, value)| text.strip_prefix(part).map(|rest| (*value, rest)))
}

fn strip_suffix_any<'a, T: Copy>(text: &'a str, parts: &[(&str, T)]) -> Option<(T, &'a str)> {
    parts
        .iter()
        .find_map(|(part, value)| text.strip_suffix(part).map(|rest| (*value, rest)))
}

impl Limit {
    fn parse(code: &str) -> Option<Self> {
        let (owner, rest) = strip_prefix_any(code, &[("QOS", Owner::Qos), ("Assoc", Owner::Assoc)])
            // `Max*PerAccount` and `Max*RunMinsPerUser` are QOS limits spelt without the prefix.
            .unwrap_or((Owner::Qos, code));
        let bare = rest.len() == code.len();
        let (kind, rest) = strip_prefix_any(rest, KINDS)?;
        let rest = rest
            .strip_suffix("Limit")
            .or_else(|| rest.strip_suffix("NotSatisfied"))
            .unwrap_or(rest);
        let (scope, rest) = strip_suffix_any(rest, SCOPES).unwrap_or((Scope::Unscoped, rest));
        let (measure, rest) = strip_suffix_any(rest, MEASURES).unwrap_or((Measure::InUse, rest));
        let (_, resource) = *RESOURCES.iter().find(|(spelling, _)| *spelling == rest)?;
        #[rustfmt::skip]
        let limit = Self { owner, kind, resource, measure, scope };
        let bare_ok = !bare || (kind == Kind::Max && matches!(scope, Scope::User | Scope::Account));
        (bare_ok && limit.is_coherent()).then_some(limit)
    }

    /// Whether the parts make a limit Slurm could have (no "jobs per node" or "wall-minutes").
    fn is_coherent(self) -> bool {
        let counts = matches!(self.resource, Resource::Jobs | Resource::SubmitJobs);
        let wall = self.resource == Resource::Wall;
        let in_use = self.measure == Measure::InUse;
        match self.kind {
            Kind::Grp => self.scope == Scope::Unscoped && (in_use || !(counts || wall)),
            Kind::Min => {
                in_use && !(counts || wall) && matches!(self.scope, Scope::Unscoped | Scope::Job)
            }
            Kind::Max if counts => {
                in_use && matches!(self.scope, Scope::Unscoped | Scope::User | Scope::Account)
            }
            Kind::Max if wall => in_use && matches!(self.scope, Scope::Unscoped | Scope::Job),
            Kind::Max => true,
        }
    }

    fn explanation(self) -> Explanation {
        let (noun, unit, fields) = self.resource.words();
        #[rustfmt::skip]
        let holes = match self.owner {
            Owner::Qos => [("{Whose}", "The QOS's"), ("{who}", "the QOS"),
                ("{shared}", "all jobs in the QOS"), ("{other}", "another spec.qos")],
            Owner::Assoc => [("{Whose}", "The account's"), ("{who}", "the account"),
                ("{shared}", "everyone in the account"), ("{other}", "another spec.account")],
        };
        let words = [("{noun}", noun), ("{unit}", unit), ("{fields}", fields)];
        let fill = |text: &str| {
            (holes.iter().chain(&words)).fold(text.to_owned(), |text, (hole, value)| {
                text.replace(hole, value)
            })
        };
        let (meaning, remedy) = self.templates();
        text(fill(meaning), fill(remedy))
    }

    /// The texts with holes such as `{who}`: one arm per shape of limit. Group limits wait for
    /// others' jobs, per-user ones for one's own, and per-job ones (and minimums) never pass by
    /// waiting; minutes are a budget (`Minutes`) or what running jobs still hold (`RunMinutes`).
    #[rustfmt::skip]
    fn templates(self) -> (&'static str, &'static str) {
        use Resource::{Jobs, SubmitJobs, Wall};
        use Scope::{Account, Node, User};
        let in_use = self.measure == Measure::InUse;
        match (self.kind, self.scope, self.resource) {
            (Kind::Grp, _, Jobs) => (
                "{Whose} group limit on running jobs is reached (shared by {shared})",
                "starts when other jobs in {who} end, or use {other}"),
            (Kind::Grp, _, SubmitJobs) => (
                "{Whose} group limit on queued and running jobs is reached (shared by {shared})",
                "starts as other jobs in {who} end; delete queued jobs that are not needed"),
            (Kind::Grp, _, Wall) => (
                "{Whose} group limit on wall time of running jobs is reached (shared by {shared})",
                "waits for other jobs in {who} to end; a shorter spec.timeLimit may fit sooner"),
            (Kind::Grp, _, _) => match self.measure {
                Measure::InUse => (
                    "{Whose} group limit on {noun} in use is reached (shared by {shared})",
                    "waits for other jobs in {who} to end; a smaller request may fit sooner, or \
                     use {other}"),
                Measure::Minutes => (
                    "{Whose} group budget of {unit}-minutes (past and running jobs) is used up",
                    "waits until the usage decays or an administrator raises or resets the \
                     budget, or use {other}"),
                Measure::RunMinutes => (
                    "{Whose} group limit on {unit}-minutes held by running jobs is reached (shared \
                     by {shared})",
                    "waits as running jobs in {who} progress or end; a shorter spec.timeLimit or \
                     smaller request needs less"),
            },
            (Kind::Min, _, _) => (
                "Its {unit} request is below the minimum {who} requires per job",
                "ask for at least the minimum{fields} or use {other}; it will not start as is"),
            (Kind::Max, Account, Jobs) => (
                "The account already runs as many jobs as {who} allows per account",
                "starts when other jobs of the account end"),
            (Kind::Max, Account, SubmitJobs) => (
                "The account already has as many queued and running jobs as {who} allows per \
                 account",
                "starts as other jobs of the account end; delete queued jobs that are not needed"),
            (Kind::Max, _, Jobs) => (
                "You already run as many jobs as {who} allows per user",
                "starts when one of your running jobs ends"),
            (Kind::Max, _, SubmitJobs) => (
                "You already have as many queued and running jobs as {who} allows per user",
                "starts as your other jobs end; delete queued jobs that are not needed"),
            (Kind::Max, _, Wall) => (
                "Its time limit is longer than {who} allows per job",
                "lower spec.timeLimit or use {other}; it will not start as is"),
            (Kind::Max, Node, _) => (
                "Its {unit} request per node is over what {who} allows",
                "ask for less per node{fields}, e.g. spread over more spec.nodes, or use {other}"),
            (Kind::Max, User, _) if in_use => (
                "Your running jobs already use the most {noun} {who} allows per user",
                "starts as your other jobs end; if this job alone is over the limit, ask for \
                 less{fields}"),
            (Kind::Max, User, _) => (
                "Your running jobs already hold the most {unit}-minutes {who} allows per user",
                "waits as your running jobs progress or end; a shorter spec.timeLimit needs less"),
            (Kind::Max, Account, _) if in_use => (
                "The account's running jobs already use the most {noun} {who} allows per account",
                "waits for other jobs of the account to end; if this job alone is over the limit, \
                 ask for less{fields}"),
            (Kind::Max, Account, _) => (
                "The account's running jobs already hold the most {unit}-minutes {who} allows per \
                 account",
                "waits as the account's running jobs progress or end; a shorter spec.timeLimit \
                 needs less"),
            (Kind::Max, _, _) if in_use => (
                "Its {unit} request is over what {who} allows per job",
                "ask for less{fields} or use {other}; it will not start as is"),
            (Kind::Max, _, _) => (
                "Its {unit}-minutes (request × time limit) are over what {who} allows per job",
                "lower spec.timeLimit or ask for less{fields}, or use {other}; it will not start \
                 as is"),
        }
    }
}

impl Resource {
    /// As an amount ("the most {noun}"), as a qualifier ("its {unit} request", "{unit}-minutes"),
    /// and where a SlurmJob asks for it (" (...)", or "" where its spec cannot).
    #[rustfmt::skip]
    fn words(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::Cpu => ("CPUs", "CPU", " (spec.ntasks, spec.cpusPerTask)"),
            Self::Mem => ("memory", "memory", " (spec.memoryPerNode or spec.memoryPerCpu)"),
            Self::Node => ("nodes", "node", " (spec.nodes)"),
            Self::Gres => ("GPUs/GRES", "GPU/GRES", " (spec.gpusPerNode, spec.gres)"),
            Self::License => ("licenses", "license", " (extraOptions.licenses)"),
            Self::BurstBuffer => ("burst buffer", "burst-buffer", " (extraOptions.burst_buffer)"),
            Self::Energy => ("energy", "energy", ""),
            Self::Billing => ("billing units", "billing", " (CPUs, memory, GPUs)"),
            Self::Unknown => ("TRES", "TRES", ""),
            Self::Jobs | Self::SubmitJobs => ("jobs", "job", ""),
            Self::Wall => ("wall time", "wall-time", ""),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Every code on Slurm's reason page except "None", plus the newer ones of its source.
    const SLURM_CODES: &str = "
        AccountingPolicy AccountNotAllowed AssocGrpBB AssocGrpBBMinutes AssocGrpBBRunMinutes
        AssocGrpBilling AssocGrpBillingMinutes AssocGrpBillingRunMinutes AssocGrpCpuLimit
        AssocGrpCPUMinutesLimit AssocGrpCPURunMinutesLimit AssocGrpEnergy AssocGrpEnergyMinutes
        AssocGrpEnergyRunMinutes AssocGrpGRES AssocGrpGRESMinutes AssocGrpGRESRunMinutes
        AssocGrpJobsLimit AssocGrpLicense AssocGrpLicenseMinutes AssocGrpLicenseRunMinutes
        AssocGrpMemLimit AssocGrpMemMinutes AssocGrpMemRunMinutes AssocGrpNodeLimit
        AssocGrpNodeMinutes AssocGrpNodeRunMinutes AssocGrpSubmitJobsLimit AssocGrpUnknown
        AssocGrpUnknownMinutes AssocGrpUnknownRunMinutes AssocGrpWallLimit AssocMaxBBMinutesPerJob
        AssocMaxBBPerJob AssocMaxBBPerNode AssocMaxBillingMinutesPerJob AssocMaxBillingPerJob
        AssocMaxBillingPerNode AssocMaxCpuMinutesPerJobLimit AssocMaxCpuPerJobLimit
        AssocMaxCpuPerNode AssocMaxEnergyMinutesPerJob AssocMaxEnergyPerJob AssocMaxEnergyPerNode
        AssocMaxGRESMinutesPerJob AssocMaxGRESPerJob AssocMaxGRESPerNode AssocMaxJobsLimit
        AssocMaxLicenseMinutesPerJob AssocMaxLicensePerJob AssocMaxMemMinutesPerJob
        AssocMaxMemPerJob AssocMaxMemPerNode AssocMaxNodeMinutesPerJob AssocMaxNodePerJobLimit
        AssocMaxSubmitJobLimit AssocMaxUnknownMinutesPerJob AssocMaxUnknownPerJob
        AssocMaxUnknownPerNode AssocMaxWallDurationPerJobLimit AssociationJobLimit
        AssociationResourceLimit AssociationTimeLimit BadConstraints BeginTime
        BurstBufferOperation BurstBufferResources BurstBufferStageIn Cleaning Constraints DeadLine
        Dependency DependencyNeverSatisfied FedJobLock InactiveLimit InvalidAccount InvalidQOS
        JobArrayTaskLimit JobHeldAdmin JobHeldUser JobHoldMaxRequeue JobLaunchFailure Licenses
        MaxBBPerAccount MaxBillingPerAccount MaxCpuPerAccount MaxEnergyPerAccount MaxGRESPerAccount
        MaxJobsPerAccount MaxLicensePerAccount MaxMemoryPerAccount MaxMemPerLimit MaxNodePerAccount
        MaxSubmitJobsPerAccount MaxUnknownPerAccount NodeDown NonZeroExitCode OutOfMemory
        PartitionConfig PartitionDown PartitionInactive PartitionNodeLimit PartitionTimeLimit
        Priority Prolog QOSGrpBB QOSGrpBBMinutes QOSGrpBBRunMinutes QOSGrpBilling
        QOSGrpBillingMinutes QOSGrpBillingRunMinutes QOSGrpCpuLimit QOSGrpCPUMinutesLimit
        QOSGrpCPURunMinutesLimit QOSGrpEnergy QOSGrpEnergyMinutes QOSGrpEnergyRunMinutes QOSGrpGRES
        QOSGrpGRESMinutes QOSGrpGRESRunMinutes QOSGrpJobsLimit QOSGrpLicense QOSGrpLicenseMinutes
        QOSGrpLicenseRunMinutes QOSGrpMemLimit QOSGrpMemoryMinutes QOSGrpMemoryRunMinutes
        QOSGrpNodeLimit QOSGrpNodeMinutes QOSGrpNodeRunMinutes QOSGrpSubmitJobsLimit QOSGrpUnknown
        QOSGrpUnknownMinutes QOSGrpUnknownRunMinutes QOSGrpWallLimit QOSJobLimit
        QOSMaxBBMinutesPerJob QOSMaxBBPerJob QOSMaxBBPerNode QOSMaxBBPerUser
        QOSMaxBillingMinutesPerJob QOSMaxBillingPerJob QOSMaxBillingPerNode QOSMaxBillingPerUser
        QOSMaxCpuMinutesPerJobLimit QOSMaxCpuPerJobLimit QOSMaxCpuPerNode QOSMaxCpuPerUserLimit
        QOSMaxEnergyMinutesPerJob QOSMaxEnergyPerJob QOSMaxEnergyPerNode QOSMaxEnergyPerUser
        QOSMaxGRESMinutesPerJob QOSMaxGRESPerJob QOSMaxGRESPerNode QOSMaxGRESPerUser
        QOSMaxJobsPerUserLimit QOSMaxLicenseMinutesPerJob QOSMaxLicensePerJob QOSMaxLicensePerUser
        QOSMaxMemoryMinutesPerJob QOSMaxMemoryPerJob QOSMaxMemoryPerNode QOSMaxMemoryPerUser
        QOSMaxNodeMinutesPerJob QOSMaxNodePerJobLimit QOSMaxNodePerUserLimit
        QOSMaxSubmitJobPerUserLimit QOSMaxUnknownMinutesPerJob QOSMaxUnknownPerJob
        QOSMaxUnknownPerNode QOSMaxUnknownPerUser QOSMaxWallDurationPerJobLimit QOSMinBB
        QOSMinBilling QOSMinCpuNotSatisfied QOSMinEnergy QOSMinGRES QOSMinLicense QOSMinMemory
        QOSMinNode QOSMinUnknown QOSNotAllowed QOSResourceLimit QOSTimeLimit QOSUsageThreshold
        ReqNodeNotAvail Reservation ReservationDeleted Resources SchedDefer SystemFailure TimeLimit
        ReservationInvalid RaisedSignal FrontEndDown MaxPoweredUpNodes MpiPortsBusy
        MaxCpuRunMinsPerAccount MaxMemoryRunMinsPerAccount MaxGRESRunMinsPerUser
        MaxBillingRunMinsPerUser MaxNodeRunMinsPerUser MaxUnknownRunMinsPerAccount";

    /// Short, non-empty, and one style: "Meaning; remedy" without periods or double spaces.
    fn assert_well_formed(code: &str, e: &Explanation) {
        let (m, r) = (&e.meaning, &e.remedy);
        assert!((1..=120).contains(&m.chars().count()), "{code}: {m:?}");
        assert!((1..=160).contains(&r.chars().count()), "{code}: {r:?}");
        assert!(m.starts_with(char::is_uppercase) && !r.starts_with(char::is_uppercase));
        assert!(!(m.ends_with('.') || r.ends_with('.') || (m.clone() + r).contains("  ")));
    }

    #[test]
    fn every_listed_and_documented_code_is_explained_briefly() {
        let listed = FIXED.iter().map(|(code, _, _)| *code);
        let brief = ["launch failed requeued held", "PowerUpNode", "Configuring"];
        for code in listed.chain(SLURM_CODES.split_whitespace()).chain(brief) {
            let e = explain(code).unwrap_or_else(|| panic!("{code} is not explained"));
            assert_well_formed(code, &e);
        }
        let unique: BTreeSet<_> = FIXED.iter().map(|(code, _, _)| code).collect();
        assert_eq!(unique.len(), FIXED.len(), "a code is listed twice");
    }

    #[test]
    fn limit_codes_say_whose_limit_and_which_resource() {
        // (code, words in the meaning, words in the remedy), words separated by '|'.
        #[rustfmt::skip]
        let cases = [
            ("AssocGrpCpuLimit", "group|CPUs|account", "other jobs"),
            ("QOSGrpMemRunMinutes", "group|memory-minutes|QOS", "running jobs"),
            ("AssocGrpGRESRunMinutes", "group|GPU|account", "spec.timeLimit"),
            ("QOSMaxNodePerUserLimit", "per user|nodes", "your other jobs"),
            ("QOSMaxJobsPerUserLimit", "per user|jobs", "your running jobs"),
            ("QOSMaxSubmitJobPerUserLimit", "per user|queued", "delete"),
            ("QOSMaxWallDurationPerJobLimit", "time limit|per job", "spec.timeLimit"),
            ("QOSMaxCpuPerJobLimit", "CPU|per job", "spec.cpusPerTask|spec.qos"),
            ("AssocMaxMemPerNode", "memory|per node", "spec.memoryPerNode"),
            ("QOSMinGRES", "minimum|GPU", "spec.gpusPerNode|will not start"),
            ("AssocGrpCPUMinutesLimit", "CPU-minutes|account", "administrator"),
            ("MaxJobsPerAccount", "per account|QOS", "other jobs of the account"),
            ("AssocMaxJobsLimit", "per user|account", "your running jobs"),
            ("MaxCpuRunMinsPerUser", "CPU-minutes|per user", "spec.timeLimit"),
            ("AssocGrpBillingMinutes", "billing|group", "administrator"),
        ];
        let mut meanings = BTreeSet::new();
        for (code, in_meaning, in_remedy) in cases {
            let e = explain(code).unwrap_or_else(|| panic!("{code} is not explained"));
            assert_well_formed(code, &e);
            for word in in_meaning.split('|') {
                assert!(e.meaning.contains(word), "{code}: {word:?} in {e:?}");
            }
            for word in in_remedy.split('|') {
                assert!(e.remedy.contains(word), "{code}: {word:?} in {e:?}");
            }
            assert!(meanings.insert(e.meaning), "{code} reads like another code");
        }
        // Slurm spells one limit in several ways, and one shape reads alike for each resource.
        let memory = explain("QOSGrpMemoryRunMinutes");
        assert_eq!(explain("QOSGrpMemRunMinutes"), memory);
        let cpu = explain("AssocGrpCpuLimit").map(|e| e.meaning.replace("CPUs", "_"));
        let mem = explain("AssocGrpMemLimit").map(|e| e.meaning.replace("memory", "_"));
        assert_eq!(cpu, mem);
    }

    #[test]
    fn no_reason_and_unknown_codes_are_not_explained() {
        let unknown = "Bogus resources QOS Assoc QOSGrpFooLimit AssocMaxJobsPerNodeLimit \
                       QOSGrpCpuPerUserLimit QOSMinWallLimit QOSGrpJobsMinutes MaxCpuPerJob \
                       GrpCpuLimit BlockMaxError";
        for reason in ["", "   ", "None"]
            .into_iter()
            .chain(unknown.split_whitespace())
        {
            assert_eq!(explain(reason), None, "{reason:?}");
        }
    }

    #[test]
    fn code_drops_slurms_details() {
        assert_eq!(
            code("ReqNodeNotAvail, UnavailableNodes:n[1-3]"),
            "ReqNodeNotAvail"
        );
        assert_eq!(
            code("ReqNodeNotAvail,_Reserved_for_maintenance"),
            "ReqNodeNotAvail"
        );
        assert_eq!(code("ReqNodeNotAvail"), "ReqNodeNotAvail");
        assert_eq!(code(" Priority "), "Priority");
        assert_eq!(
            code("launch failed requeued held"),
            "launch failed requeued held"
        );
        assert_eq!(code(""), "");
    }

    #[test]
    fn unavailable_nodes_are_named_within_bounds() {
        let bare = explain("ReqNodeNotAvail").unwrap();
        let empty = explain("ReqNodeNotAvail, UnavailableNodes:").unwrap();
        assert_eq!(empty, bare);
        let listed = explain("ReqNodeNotAvail, UnavailableNodes:n[1-3]").unwrap();
        assert!(listed.meaning.ends_with(": n[1-3]"), "{listed:?}");
        let many = "ReqNodeNotAvail, UnavailableNodes:".to_owned() + &"gpu-node-17,".repeat(40);
        let long = explain(&many).unwrap().meaning;
        assert!(
            long.ends_with('…') && long.chars().count() < 160,
            "{long:?}"
        );
        let maint = explain("ReqNodeNotAvail,_Reserved_for_maintenance").unwrap();
        assert!(maint.meaning.contains("maintenance") && maint.remedy.contains("spec.timeLimit"));
        let other = explain("ReqNodeNotAvail, Some_other_words").unwrap();
        assert!(other.meaning.ends_with("Some other words"), "{other:?}");
        for e in [bare, listed, maint, other] {
            assert_well_formed("ReqNodeNotAvail", &e);
        }
    }

    #[test]
    fn sentence_joins_and_cuts_on_char_boundaries() {
        let e = text("Wärme ist größer", "warte ☕ lange");
        assert_eq!(sentence(&e, 100), "Wärme ist größer; warte ☕ lange");
        assert_eq!(sentence(&e, 31), "Wärme ist größer; warte ☕ lange");
        assert_eq!(sentence(&e, 30), "Wärme ist größer; warte ☕ lan…");
        assert_eq!(sentence(&e, 26), "Wärme ist größer; warte ☕…");
        assert_eq!(sentence(&e, 18), "Wärme ist größer…");
        assert_eq!(sentence(&e, 10), "Wärme ist…");
        assert_eq!(sentence(&e, 1), "…");
        assert_eq!(sentence(&e, 0), "");
        for max in 0..40 {
            assert!(sentence(&e, max).chars().count() <= max, "{max}");
        }
        let p = explain("Priority").unwrap();
        assert_eq!(sentence(&p, 1000), format!("{}; {}", p.meaning, p.remedy));
    }
}
