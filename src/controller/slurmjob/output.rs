//! The output streamer: a small Pod, named after the SlurmJob and owned by it, that mounts the
//! output PersistentVolumeClaim read-only and streams the current run's output file, so that
//! `kubectl logs -f <slurmjob>` follows a running job and still shows its output after the end.
//!
//! The Pod ends by itself once the job has ended: the operator then sets [`ENDED_ANNOTATION`]
//! on it ([`ended_patch`]), the kubelet updates the Pod's downward-API copy of its annotations,
//! and the script stops following the file after a last read, so the Pod is `Succeeded` and
//! holds no node resources while `kubectl logs` still shows the whole output.
//!
//! A Pod that stops before its output is whole (evicted, its stream failed; or
//! told the end of a run that Slurm then requeued) is replaced ([`PodStep::Replace`]): the new
//! one prints the file again from its start.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, DownwardAPIVolumeFile, DownwardAPIVolumeSource, EnvVar,
    ObjectFieldSelector, PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec,
    ResourceRequirements, SeccompProfile, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use chrono::{DateTime, Utc};

use crate::crd::SlurmJob;
use crate::crd::pod_meta::PodPhase;
use crate::crd::slurmjob::{JobOutput, Phase, RunOutput, SlurmJobStatus};

/// Label on the streamer Pod naming its SlurmJob (orphans are found by it, not by memory): its
/// name, or its uid where the name is longer than a label value may be.
pub const LABEL: &str = "slurm.rs/slurmjob";
/// Annotation on the streamer Pod: the Slurm job id whose output it streams.
pub const JOB_ID_ANNOTATION: &str = "slurm.rs/job-id";
/// Annotation the operator sets to `"true"` on the streamer Pod once its job has ended: the
/// Pod drains the file and exits.
pub const ENDED_ANNOTATION: &str = "slurm.rs/job-ended";
/// Where the PVC is mounted in the Pod.
pub const MOUNT_PATH: &str = "/output";
/// Where the Pod sees its own annotations (downward API; the kubelet refreshes the file).
const PODINFO_PATH: &str = "/podinfo";
/// Resources of the streamer (`sh` + `cat`): requests and limits, so that namespaces with a
/// ResourceQuota accept the Pod (busybox `tail`, the follower before, stayed under 2 MiB;
/// `cat` keeps only its buffer).
const CPU_REQUEST: &str = "10m";
const CPU_LIMIT: &str = "100m";
const MEMORY_REQUEST: &str = "16Mi";
const MEMORY_LIMIT: &str = "32Mi";

/// Default image of the streamer (`--output-image`): anything with `sh`, `cat`, `grep`, `readlink`,
/// `sleep` and `stat`, on Linux (`/proc`).
pub const DEFAULT_IMAGE: &str = "docker.io/library/busybox:1.37";
/// How long after the Pod learns of the end a streamer still waiting to open its file (a FIFO)
/// is ended: an open that has not returned by then waits for a writer, not for the storage.
const OPEN_GRACE_SECONDS: u32 = 5;
/// How long after that a streamer still copying the file is ended (`$COPY_SECONDS`): a job's
/// output copies in far less (the kubelet keeps some 10 MiB of a container's log anyway).
const COPY_SECONDS: u32 = 120;
/// User the streamer runs as (`nobody`): it only reads.
const RUN_AS_USER: i64 = 65534;

/// The output file of Slurm job `job_id` relative to the root of the volume, as Slurm writes it
/// through `submit::output_path` (`<slurmPath>/<subPath>/<name>-%j.out`).
pub fn relative_file(output: &RunOutput, object_name: &str, job_id: i64) -> String {
    let file = format!("{object_name}-{job_id}.out");
    match &output.sub_path {
        Some(sub) => format!("{sub}/{file}"),
        None => file,
    }
}

/// What a run submitted with `output` records in `status.output`: where the Pod finds its file
/// whatever `spec.output` says later.
pub fn run_output(output: &JobOutput) -> RunOutput {
    RunOutput {
        volume: output.volume.clone(),
        sub_path: sub_dir(output),
    }
}

/// Where a run adopted from an earlier generation (its spec not known here) writes its output:
/// the current spec's output when the run's record shows it writes the file that spec names,
/// none when it shows another file, and the current spec's when no record says (the best word
/// there is).
/// `named`: the file the current spec names on the Slurm nodes (`submit::output_path`).
pub fn earlier_run_output(
    spec: &crate::crd::slurmjob::SlurmJobSpec,
    named: Option<&str>,
    job_id: u32,
    records: &[crate::slurm::types::Job],
) -> Option<RunOutput> {
    let current = spec.output.as_ref().map(run_output);
    let Some(written) = records.iter().find_map(|r| r.standard_output.as_deref()) else {
        return current;
    };
    // slurmrestd may show the path as submitted or with `%j` expanded.
    let named = named?;
    (named == written || named.replace("%j", &job_id.to_string()) == written)
        .then_some(current)
        .flatten()
}

/// Where the run `status` names writes its output: what its submit recorded.
pub fn current_run_output(job: &SlurmJob) -> Option<&RunOutput> {
    job.status.as_ref()?.output.as_ref()
}

/// `subPath` normalised (`/a//./b/` is `a/b`), `None` when it names no directory: the streamer
/// compares the path it opened with the one built from it, so both sides use this form.
pub fn sub_dir(output: &JobOutput) -> Option<String> {
    let parts: Vec<&str> = output
        .sub_path
        .as_deref()?
        .split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect();
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// How long after its job's end a missing output Pod is still created: long enough for an
/// operator restart or a short outage around the end, and not more, so that a finished job's
/// Pod that is gone (deleted by the tenant, or by the Pod garbage collector, which keeps a
/// bounded number of terminated Pods) is not created again and again, at every operator start
/// or slurmrestd recovery, for every finished SlurmJob; nor retried for good when the
/// namespace's quota refuses it.
pub const CREATE_AFTER_END: chrono::TimeDelta = chrono::TimeDelta::minutes(15);

/// How long a Pod whose run has ended may stay `Pending` (never started) before it is deleted
/// ([`PodStep::Abandon`]).
pub const ABANDON_AFTER: chrono::TimeDelta = chrono::TimeDelta::minutes(15);

/// How long a streamer Pod has existed at least before it is replaced for having stopped
/// early ([`PodStep::Replace`]), the first time for its run: one that stops at once (an image
/// without `sh`, a node that evicts it on arrival, a job that makes its file unreadable
/// mid-run) is not replaced as fast as Pods start. Doubled at each replacement of the same run
/// ([`replace_after`]).
pub const REPLACE_AFTER: chrono::TimeDelta = chrono::TimeDelta::minutes(1);

/// The age a streamer Pod must reach before it is replaced, for a run whose Pod was replaced
/// `replaced` times already: [`REPLACE_AFTER`], doubled each time, at most 32 minutes.
pub fn replace_after(replaced: u32) -> chrono::TimeDelta {
    REPLACE_AFTER * (1_i32 << replaced.min(5))
}

/// How often each SlurmJob's current run had its output Pod replaced ([`PodStep::Replace`]),
/// by SlurmJob uid: what [`replace_after`] doubles. In memory only (an operator restart starts
/// again at one minute); past [`Replacements::MAX`] SlurmJobs it forgets them all.
#[derive(Debug, Default)]
pub struct Replacements(std::sync::Mutex<std::collections::HashMap<String, (i64, u32)>>);

impl Replacements {
    pub const MAX: usize = 10_000;

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, (i64, u32)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How often run `job_id` of the SlurmJob of uid `uid` had its Pod replaced.
    pub fn of(&self, uid: Option<&str>, job_id: i64) -> u32 {
        uid.and_then(|uid| self.lock().get(uid).copied())
            .filter(|(run, _)| *run == job_id)
            .map_or(0, |(_, count)| count)
    }

    /// Run `job_id` of SlurmJob `uid` had its Pod replaced once more.
    pub fn record(&self, uid: &str, job_id: i64) {
        let mut all = self.lock();
        let count = all
            .get(uid)
            .filter(|(run, _)| *run == job_id)
            .map_or(0, |(_, count)| *count);
        // Bounded: forgetting only shortens the waits.
        if all.len() >= Self::MAX && !all.contains_key(uid) {
            all.clear();
        }
        all.insert(uid.to_owned(), (job_id, count.saturating_add(1)));
    }
}

/// Whether a missing output Pod is created for the run `status` describes at `now`: once it
/// has started, and within [`CREATE_AFTER_END`] of its end if it ran (Slurm gave it nodes; an
/// ended run without an end time, `Lost`, gets none). Not while it waits in the queue, nor
/// for a job cancelled there: a team's thousands of queued jobs would each hold a Pod
/// (requests, a Pod of the quota, a look at the storage every second) for nothing, and a
/// cancel of them all would make as many at once; the streamer prints the file from its start
/// whenever it comes.
pub fn may_create(status: &SlurmJobStatus, now: DateTime<Utc>) -> bool {
    if !status.phase.is_terminal() {
        return status.phase == Phase::Running;
    }
    if status.nodes.is_none() {
        return false;
    }
    status
        .end_time
        .as_ref()
        .and_then(crate::crd::time::to_utc)
        .is_some_and(|end| now - end < CREATE_AFTER_END)
}

/// The streamer Pod for `job`'s run `job_id`, which writes its output where `output` says (the
/// run's `status.output`), or `None` when the job has no name/uid yet. The PVC is mounted whole
/// and read-only; the file path below the mount is the one the job writes.
/// `ended`: the job has already ended (the Pod is created marked, see [`ENDED_ANNOTATION`]).
pub fn pod(
    job: &SlurmJob,
    output: &RunOutput,
    job_id: i64,
    image: &str,
    ended: bool,
) -> Option<Pod> {
    let name = job.metadata.name.clone()?;
    let uid = job.metadata.uid.clone()?;
    let file = format!("{MOUNT_PATH}/{}", relative_file(output, &name, job_id));
    let owner = OwnerReference {
        api_version: "slurm.rs/v1alpha1".into(),
        kind: "SlurmJob".into(),
        name: name.clone(),
        uid: uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let script = streamer_script();
    let quantities = |cpu: &str, memory: &str| {
        BTreeMap::from([
            ("cpu".to_owned(), Quantity(cpu.to_owned())),
            ("memory".to_owned(), Quantity(memory.to_owned())),
        ])
    };
    Some(Pod {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: job.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([(
                LABEL.to_owned(),
                label_value(&name, &uid),
            )])),
            annotations: Some(
                [(JOB_ID_ANNOTATION, job_id.to_string())]
                    .into_iter()
                    .chain(ended.then(|| (ENDED_ANNOTATION, "true".to_owned())))
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect(),
            ),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(1),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(RUN_AS_USER),
                run_as_group: Some(RUN_AS_USER),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            containers: vec![Container {
                name: "output".into(),
                image: Some(image.to_owned()),
                command: Some(vec!["sh".into(), "-c".into(), script]),
                env: Some(vec![
                    EnvVar {
                        name: "OUTPUT_FILE".into(),
                        value: Some(file),
                        ..Default::default()
                    },
                    EnvVar {
                        name: "COPY_SECONDS".into(),
                        value: Some(COPY_SECONDS.to_string()),
                        ..Default::default()
                    },
                    EnvVar {
                        name: "ANNOTATIONS_FILE".into(),
                        value: Some(format!("{PODINFO_PATH}/annotations")),
                        ..Default::default()
                    },
                ]),
                volume_mounts: Some(vec![
                    VolumeMount {
                        name: "output".into(),
                        mount_path: MOUNT_PATH.into(),
                        read_only: Some(true),
                        ..Default::default()
                    },
                    VolumeMount {
                        name: "podinfo".into(),
                        mount_path: PODINFO_PATH.into(),
                        read_only: Some(true),
                        ..Default::default()
                    },
                ]),
                resources: Some(ResourceRequirements {
                    requests: Some(quantities(CPU_REQUEST, MEMORY_REQUEST)),
                    limits: Some(quantities(CPU_LIMIT, MEMORY_LIMIT)),
                    ..Default::default()
                }),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    privileged: Some(false),
                    read_only_root_filesystem: Some(true),
                    run_as_non_root: Some(true),
                    capabilities: Some(Capabilities {
                        drop: Some(vec!["ALL".into()]),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            volumes: Some(vec![
                Volume {
                    name: "output".into(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: output.volume.clone(),
                        read_only: Some(true),
                    }),
                    ..Default::default()
                },
                Volume {
                    name: "podinfo".into(),
                    downward_api: Some(DownwardAPIVolumeSource {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "annotations".into(),
                            field_ref: Some(ObjectFieldSelector {
                                field_path: "metadata.annotations".into(),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
        status: None,
    })
}

/// The [`LABEL`] value for SlurmJob `name` (uid `uid`): a name is a DNS subdomain, so it is a
/// valid label value up to 63 characters; a longer one is not, and the uid stands for it.
pub fn label_value(name: &str, uid: &str) -> String {
    if name.len() <= 63 {
        name.to_owned()
    } else {
        uid.to_owned()
    }
}

/// What the streamer Pod asks for, as a tenant reads it in a refusal.
pub fn resources_note() -> String {
    format!("cpu {CPU_REQUEST} to {CPU_LIMIT}, memory {MEMORY_REQUEST} to {MEMORY_LIMIT}")
}

/// The Slurm job id a streamer Pod streams (from its annotation).
pub fn streamed_job_id(pod: &Pod) -> Option<i64> {
    meta_job_id(&pod.metadata)
}

fn meta_job_id(meta: &ObjectMeta) -> Option<i64> {
    meta.annotations
        .as_ref()?
        .get(JOB_ID_ANNOTATION)?
        .parse()
        .ok()
}

/// The streamer's `sh` script: wait for `$OUTPUT_FILE` (the job may still be pending), print it
/// from the start and follow it, also across truncation; once the Pod's own annotations
/// (`$ANNOTATIONS_FILE`, downward-API format `key="value"`) say the job ended, read a last time
/// and exit 0. A job that ended before writing anything leaves a note instead.
///
/// The job's script, run as the tenant's Slurm user, controls that path, and the Pod reads with
/// its own identity, not the job's: so the file is opened once (fd 3), and streamed only when
/// what was opened is that very path (no symbolic link on the way: `/proc/self/fd/3` names
/// where the open ended), a regular file with one link (no hard link to someone else's file);
/// then followed by that descriptor (`cat` from where the last one stopped, once a second; a
/// file shorter than that position was truncated, and is read again from its start), so
/// replacing the path later shows nothing new. Once the end is announced, one last `cat`
/// copies what is left, however long it takes to get through a slow log pipeline (a timed
/// drain lost the end of a file still being caught up on), up to the watchdog's bound. The link count is read before the path: a hard link removed between the two
/// leaves a count of one, but its path then reads as deleted. A file the Pod cannot open (its
/// uid may not read it) is said so, and the Pod ends: `command exec` keeps a failed open from
/// ending the shell before it can say why. So is one that others may not read, even though the
/// Pod could open it: the Pod's uid (or gid) may own it, as on storage that squashes uids to
/// 65534, and the job's script may rename any such file into its output path (a rename needs no
/// right to read): the Pod shows only what any user may read. A Pod that starts after its job
/// ended (created late, or again) copies the whole file and ends at its end, rather than follow
/// it for a timed drain.
///
/// The Pod ends after the job's end whatever the script left at the path: the open and the
/// streaming run in a child (`worker`), which the container's PID 1, this shell, can end, and a
/// watchdog ends it once it sees the end announced (it looks every 2 s): [`OPEN_GRACE_SECONDS`]
/// later if it still waits to open (a FIFO waits for a writer, maybe for good; no check before
/// the open can close that race, the script may swap the path in between), and `$COPY_SECONDS`
/// after that if it still copies (a sparse file of terabytes, or one another job keeps
/// writing). The Pod says which (only for a worker the watchdog ended). A worker that died
/// otherwise (a failed reopen, a failed fork, killed before the end was announced) fails the
/// Pod at once, saying so: its log did not end with the job, and a replacement prints the file
/// again. Fd 3 is closed first: the watchdog reads an open fd 3 as the worker's open done.
fn streamer_script() -> String {
    format!(
        "exec 3<&-; ended() {{ grep -q '^{ENDED_ANNOTATION}=\"true\"' \"$ANNOTATIONS_FILE\" 2>/dev/null; }}; \
         until [ -e \"$OUTPUT_FILE\" ] || ended; do sleep 1; done; \
         if [ ! -e \"$OUTPUT_FILE\" ]; then echo \"no output: $OUTPUT_FILE was never written\"; exit 0; fi; \
         ( if ! {{ command exec 3< \"$OUTPUT_FILE\"; }} 2>/dev/null; then \
           echo \"not streamed: the output Pod (uid {RUN_AS_USER}) cannot open $OUTPUT_FILE: \
the job's script must leave it readable by others (e.g. umask 022)\"; exit 0; fi; \
         if [ ! -f /proc/self/fd/3 ] || [ \"$(stat -L -c %h /proc/self/fd/3)\" != 1 ] \
            || [ \"$(readlink /proc/self/fd/3)\" != \"$OUTPUT_FILE\" ]; then \
           echo \"not streamed: $OUTPUT_FILE is a link or not a regular file\"; exit 0; fi; \
         if [ $(( 0$(stat -L -c %a /proc/self/fd/3) & 4 )) = 0 ]; then \
           echo \"not streamed: $OUTPUT_FILE is not readable by others: the job's script must \
leave it readable by others (e.g. umask 022)\"; exit 0; fi; \
         if ended; then exec cat <&3; fi; \
         follow() {{ cat <&3; size=$(stat -L -c %s /proc/self/fd/3); pos=0; \
           while read -r key value; do if [ \"$key\" = pos: ]; then pos=$value; fi; done < /proc/self/fdinfo/3; \
           if [ \"$size\" -lt \"$pos\" ]; then exec 3< /proc/self/fd/3; cat <&3; fi; }}; \
         until ended; do follow; sleep 1; done; follow; exit 0 ) & worker=$!; \
         ( alive() {{ line=; read -r line < /proc/$worker/stat; case $line in ''|*') Z '*) return 1;; esac; }}; \
           until ended; do sleep 2; done; i=0; \
           while alive && [ $i -lt {OPEN_GRACE_SECONDS} ]; do sleep 1; i=$((i+1)); done; alive || exit 0; \
           [ -L /proc/$worker/fd/3 ] || {{ kill -9 $worker && exit 1; exit 0; }}; i=0; \
           while alive && [ $i -lt \"$COPY_SECONDS\" ]; do sleep 1; i=$((i+1)); done; \
           alive && kill -9 $worker && exit 2; exit 0 ) >/dev/null 2>&1 & watchdog=$!; \
         wait $worker 2>/dev/null; status=$?; why=0; \
         if [ $status -gt 128 ] && ended; then wait $watchdog; why=$?; else kill $watchdog 2>/dev/null; fi; \
         if [ $why = 1 ]; then echo \"not streamed: $OUTPUT_FILE could not be opened by the \
job's end (a FIFO?)\"; fi; \
         if [ $why = 2 ]; then echo \"cut short: $OUTPUT_FILE was still being copied \
$COPY_SECONDS s after the job's end\"; fi; \
         if [ $status != 0 ] && [ $why = 0 ]; then echo \"cut short: the copy of $OUTPUT_FILE \
stopped ($status)\"; exit 1; fi; \
         exit 0"
    )
}

/// The merge patch that tells the streamer Pod of run `job_id` its job has ended, or `None`
/// when there is nothing to tell: the job has not ended, the Pod streams another run, or it
/// already knows.
pub fn ended_patch(pod: &Pod, job_id: i64, ended: bool) -> Option<serde_json::Value> {
    to_tell(&pod.metadata, job_id, ended).then(told_patch)
}

/// The merge patch that tells a streamer Pod its job has ended ([`PodStep::TellEnded`]).
pub fn told_patch() -> serde_json::Value {
    serde_json::json!({ "metadata": { "annotations": { ENDED_ANNOTATION: "true" } } })
}

/// Whether the operator told the Pod (its metadata) that its job ended: its log then ends with
/// the job's output, not with the Pod's or its node's end.
pub fn told(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(ENDED_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// Whether the Pod (its metadata) streams run `job_id`, which has ended, and was not told yet.
fn to_tell(meta: &ObjectMeta, job_id: i64, ended: bool) -> bool {
    ended && !told(meta) && meta_job_id(meta) == Some(job_id)
}

/// The longest annotation value the Pod cache keeps: a job id or `true` is far shorter.
const CACHED_VALUE_MAX: usize = 32;
/// The longest owner reference name, kind and API version the Pod cache keeps (an object name's
/// bound), and uid (a UUID is 36 bytes).
const CACHED_NAME_MAX: usize = 253;
const CACHED_UID_MAX: usize = 64;

/// A streamer Pod's metadata as the operator's Pod cache keeps it: only what [`pod_step`] and
/// the watch's mapping to the owning SlurmJob read (name, namespace, uid, the creation time,
/// the deletion mark, the controller owner reference, the two annotations of ours, short). Anyone who may create Pods
/// can label one `slurm.rs/slurmjob`: their labels, annotations and finalizers are not kept.
pub fn trim_for_cache(meta: &mut ObjectMeta) {
    let annotations = meta.annotations.take().map(|all| {
        all.into_iter()
            .filter(|(k, v)| {
                (k == JOB_ID_ANNOTATION || k == ENDED_ANNOTATION) && v.len() <= CACHED_VALUE_MAX
            })
            .collect::<BTreeMap<_, _>>()
    });
    // Its fields bounded too: Kubernetes does not bound them, and one the operator wrote
    // (a SlurmJob's) is far shorter.
    let owner = meta
        .owner_references
        .take()
        .into_iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .filter(|o| {
            o.uid.len() <= CACHED_UID_MAX
                && o.name.len() <= CACHED_NAME_MAX
                && o.kind.len() <= CACHED_NAME_MAX
                && o.api_version.len() <= CACHED_NAME_MAX
        });
    *meta = ObjectMeta {
        name: meta.name.take(),
        namespace: meta.namespace.take(),
        uid: meta.uid.take(),
        resource_version: meta.resource_version.take(),
        creation_timestamp: meta.creation_timestamp.take(),
        deletion_timestamp: meta.deletion_timestamp.take(),
        annotations: annotations.filter(|a| !a.is_empty()),
        owner_references: owner.map(|o| vec![o]),
        ..ObjectMeta::default()
    };
}

/// An output Pod as the operator knows it: its metadata (whole, or as the Pod cache keeps it)
/// and its phase.
#[derive(Clone, Copy, Debug)]
pub struct KnownPod<'a> {
    pub meta: &'a ObjectMeta,
    pub phase: Option<PodPhase>,
}

/// What the output Pod of run `job_id` needs ([`pod_step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodStep {
    /// Nothing: the run's Pod as it should be; a previous run's on its way out; none, and
    /// none to create ([`may_create`]).
    Nothing,
    /// A Pod of the SlurmJob's name that it does not own: left alone.
    NotOurs,
    /// The run ended, and its Pod, still streaming, has not been told ([`ended_patch`]).
    TellEnded,
    /// A previous run's Pod: deleted, and the new one created once it is gone.
    DeleteOld,
    /// The run's Pod stopped before its output was whole: it failed before it was told the
    /// end (evicted, its stream broken), or it was told the end of a run that
    /// has not ended (Slurm requeued the job). Deleted, and a new one created once it is gone,
    /// while one may be ([`may_create`]).
    Replace,
    /// Nothing yet, looked at again after this long: a Pod to replace younger than its run's
    /// [`replace_after`], or one that never started whose run has ended, until it is
    /// [`ABANDON_AFTER`] old.
    LookAgain(std::time::Duration),
    /// The run has ended and its Pod, told so, never started (`Pending`: a claim that does not
    /// exist or never binds, an image that cannot be pulled) though created [`ABANDON_AFTER`]
    /// ago, and none would be made again for the run ([`may_create`]): deleted. It would hold its requests and a Pod of the namespace's
    /// quota for as long as the SlurmJob exists.
    Abandon,
    Create,
}

impl PodStep {
    /// Whether the step writes to the API server.
    pub fn acts(self) -> bool {
        matches!(
            self,
            Self::TellEnded | Self::DeleteOld | Self::Replace | Self::Abandon | Self::Create
        )
    }
}

/// How long until the Pod is `age` old at `now`; `None` once it is, or when its creation time
/// is not known.
fn younger_by(
    pod: &ObjectMeta,
    age: chrono::TimeDelta,
    now: DateTime<Utc>,
) -> Option<std::time::Duration> {
    let created = pod
        .creation_timestamp
        .as_ref()
        .and_then(crate::crd::time::to_utc)?;
    let left = created + age - now;
    (left > chrono::TimeDelta::zero()).then(|| left.to_std().unwrap_or_default())
}

/// How soon a Pod of the SlurmJob's name that is going ([`pod_step`]) is looked at again if its
/// deletion brought no reconcile.
const PASSING_POD_RECHECK: std::time::Duration = std::time::Duration::from_secs(30);
/// How long a Pod of the SlurmJob's name that is being deleted is waited for before it is told
/// as a name taken (a finalizer may hold it).
const PASSING_POD_PATIENCE: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// What the output Pod of run `job_id` of the SlurmJob `owner` (its uid) needs at `now`, from
/// the Pod of the SlurmJob's name as known (`None`: there is none). `min_age`: how old a Pod
/// that stopped early must be to be replaced ([`replace_after`]).
pub fn pod_step(
    existing: Option<KnownPod<'_>>,
    owner: Option<&str>,
    job_id: i64,
    ended: bool,
    may_create: bool,
    min_age: chrono::TimeDelta,
    now: DateTime<Utc>,
) -> PodStep {
    let Some(KnownPod { meta: pod, phase }) = existing else {
        return if may_create {
            PodStep::Create
        } else {
            PodStep::Nothing
        };
    };
    // Ours: the SlurmJob is its controller, as in every Pod `pod` builds (and what the Pod
    // cache keeps); a Pod that only refers to it is someone else's.
    let ours = pod
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == owner);
    if !ours {
        // Going: being deleted (for at most a few minutes: one held longer by a finalizer is
        // in the way), or controlled by an earlier SlurmJob of this name (gone, as this one
        // has the name now: the garbage collector deletes it, and its deletion brings a
        // reconcile). Looked at again, not told as a name taken.
        let earlier = pod.owner_references.iter().flatten().any(|o| {
            o.controller == Some(true)
                && o.kind == "SlurmJob"
                && o.api_version == "slurm.rs/v1alpha1"
                && pod.name.as_deref() == Some(o.name.as_str())
        });
        let deleting = pod
            .deletion_timestamp
            .as_ref()
            .and_then(crate::crd::time::to_utc)
            .is_some_and(|since| now - since < PASSING_POD_PATIENCE);
        if deleting || earlier {
            PodStep::LookAgain(PASSING_POD_RECHECK)
        } else {
            PodStep::NotOurs
        }
    } else if meta_job_id(pod) == Some(job_id) {
        // A Pod that ended by itself while its job ran (`Succeeded`, untold) said why in its
        // log ("not streamed: …"): another would say the same.
        let stopped_early = match phase {
            // The streamer exits 0 on each end it chooses (the watchdog's included): a Pod
            // that failed, told or not, stopped with its copy (killed, evicted).
            Some(PodPhase::Failed) => true,
            Some(PodPhase::Succeeded) => told(pod) && !ended,
            _ => false,
        };
        let stopped = matches!(phase, Some(PodPhase::Failed | PodPhase::Succeeded));
        if stopped_early && may_create && pod.deletion_timestamp.is_none() {
            match younger_by(pod, min_age, now) {
                Some(left) => PodStep::LookAgain(left),
                None => PodStep::Replace,
            }
        } else if !stopped && to_tell(pod, job_id, ended) {
            PodStep::TellEnded
        } else if ended && phase == Some(PodPhase::Pending) && pod.deletion_timestamp.is_none() {
            match younger_by(pod, ABANDON_AFTER, now) {
                Some(left) => PodStep::LookAgain(left),
                // Not while a missing Pod would be made again for the run (within
                // `CREATE_AFTER_END` of its end): it would be, as stuck, for another while.
                None if may_create => PodStep::LookAgain(std::time::Duration::from_secs(60)),
                None => PodStep::Abandon,
            }
        } else {
            PodStep::Nothing
        }
    } else if pod.deletion_timestamp.is_none() {
        PodStep::DeleteOld
    } else {
        PodStep::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::slurmjob::{status, submit};
    use crate::crd::slurmjob::{Phase, SlurmJobSpec};

    /// The Pod cache keeps what the decision and the owner mapping read, and no more: a
    /// tenant's labels, annotations, finalizers and long values are dropped; the decision on the
    /// trimmed metadata is the decision on the whole.
    #[test]
    fn the_pod_cache_keeps_only_what_the_decision_reads() {
        let owner = OwnerReference {
            api_version: "slurm.rs/v1alpha1".into(),
            kind: "SlurmJob".into(),
            name: "told".into(),
            uid: "job-uid".into(),
            controller: Some(true),
            ..Default::default()
        };
        let other = OwnerReference {
            uid: "other".into(),
            ..Default::default()
        };
        let mut meta = ObjectMeta {
            name: Some("told".into()),
            namespace: Some("team-a".into()),
            uid: Some("pod-uid".into()),
            resource_version: Some("42".into()),
            creation_timestamp: crate::crd::time::from_utc(
                DateTime::from_timestamp(1_000, 0).unwrap(),
            ),
            labels: Some(BTreeMap::from([(LABEL.to_owned(), "told".to_owned())])),
            annotations: Some(BTreeMap::from([
                (JOB_ID_ANNOTATION.to_owned(), "7".to_owned()),
                (ENDED_ANNOTATION.to_owned(), "true".to_owned()),
                ("example.org/big".to_owned(), "x".repeat(100_000)),
            ])),
            finalizers: Some(vec!["example.org/hold".into()]),
            owner_references: Some(vec![other, owner.clone()]),
            ..Default::default()
        };
        let whole = meta.clone();
        trim_for_cache(&mut meta);
        assert_eq!(
            meta,
            ObjectMeta {
                name: Some("told".into()),
                namespace: Some("team-a".into()),
                uid: Some("pod-uid".into()),
                resource_version: Some("42".into()),
                creation_timestamp: whole.creation_timestamp.clone(),
                annotations: Some(BTreeMap::from([
                    (JOB_ID_ANNOTATION.to_owned(), "7".to_owned()),
                    (ENDED_ANNOTATION.to_owned(), "true".to_owned()),
                ])),
                owner_references: Some(vec![owner.clone()]),
                ..Default::default()
            }
        );
        let now = DateTime::from_timestamp(1_030, 0).unwrap();
        for (ended, may_create) in [(false, false), (true, false), (true, true), (false, true)] {
            for phase in [None, Some(PodPhase::Running), Some(PodPhase::Succeeded)] {
                let known = |meta| Some(KnownPod { meta, phase });
                assert_eq!(
                    pod_step(
                        known(&meta),
                        Some("job-uid"),
                        7,
                        ended,
                        may_create,
                        REPLACE_AFTER,
                        now
                    ),
                    pod_step(
                        known(&whole),
                        Some("job-uid"),
                        7,
                        ended,
                        may_create,
                        REPLACE_AFTER,
                        now
                    )
                );
            }
        }
        // The creation time is kept: a told Pod of a requeued run is replaced a minute after
        // its creation, which the decision reads from the cache alone.
        let known = |meta| {
            Some(KnownPod {
                meta,
                phase: Some(PodPhase::Succeeded),
            })
        };
        assert_eq!(
            pod_step(
                known(&meta),
                Some("job-uid"),
                7,
                false,
                true,
                REPLACE_AFTER,
                now
            ),
            PodStep::LookAgain(std::time::Duration::from_secs(30))
        );
        let mut long = ObjectMeta {
            annotations: Some(BTreeMap::from([(
                JOB_ID_ANNOTATION.to_owned(),
                "7".repeat(1_000),
            )])),
            ..Default::default()
        };
        trim_for_cache(&mut long);
        assert_eq!(long.annotations, None, "a value no job id is that long");
        // A controller reference no SlurmJob writes, its fields as long as a tenant likes.
        for long_field in [
            |o: &mut OwnerReference| o.name = "n".repeat(100_000),
            |o: &mut OwnerReference| o.kind = "K".repeat(100_000),
            |o: &mut OwnerReference| o.api_version = "a/v".repeat(30_000),
            |o: &mut OwnerReference| o.uid = "u".repeat(100_000),
        ] {
            let mut reference = owner.clone();
            long_field(&mut reference);
            let mut long = ObjectMeta {
                owner_references: Some(vec![reference]),
                ..Default::default()
            };
            trim_for_cache(&mut long);
            assert_eq!(long.owner_references, None);
        }
    }

    /// What the Pod of run 7 needs, from its metadata and phase as known: the decision both the
    /// Pod cache (whether to read the Pod at all) and the read Pod (what to do) are judged by.
    #[test]
    fn the_pod_step_follows_the_pods_owner_run_annotations_and_phase() {
        let now = DateTime::from_timestamp(10_000, 0).unwrap();
        let pod = |owner: &str, job_id: &str, told: bool, deleting: bool| {
            let mut annotations = BTreeMap::from([(JOB_ID_ANNOTATION.to_owned(), job_id.into())]);
            if told {
                annotations.insert(ENDED_ANNOTATION.into(), "true".into());
            }
            ObjectMeta {
                owner_references: Some(vec![OwnerReference {
                    uid: owner.into(),
                    controller: Some(true),
                    ..Default::default()
                }]),
                annotations: Some(annotations),
                creation_timestamp: crate::crd::time::from_utc(now - chrono::TimeDelta::minutes(5)),
                deletion_timestamp: deleting.then(crate::crd::condition::now),
                ..Default::default()
            }
        };
        let running = Some(PodPhase::Running);
        let step = |meta: Option<&ObjectMeta>, phase, ended, may_create| {
            let known = meta.map(|meta| KnownPod { meta, phase });
            pod_step(
                known,
                Some("job-uid"),
                7,
                ended,
                may_create,
                REPLACE_AFTER,
                now,
            )
        };
        assert_eq!(step(None, None, false, true), PodStep::Create);
        assert_eq!(
            step(None, None, true, false),
            PodStep::Nothing,
            "too late to create"
        );
        let streaming = pod("job-uid", "7", false, false);
        assert_eq!(
            step(Some(&streaming), running, false, true),
            PodStep::Nothing
        );
        assert_eq!(step(Some(&streaming), None, false, true), PodStep::Nothing);
        assert_eq!(
            step(Some(&streaming), running, true, false),
            PodStep::TellEnded
        );
        let told = pod("job-uid", "7", true, false);
        assert_eq!(step(Some(&told), running, true, false), PodStep::Nothing);
        let previous = pod("job-uid", "6", true, false);
        assert_eq!(
            step(Some(&previous), running, false, true),
            PodStep::DeleteOld
        );
        let leaving = pod("job-uid", "6", true, true);
        assert_eq!(step(Some(&leaving), running, false, true), PodStep::Nothing);
        let foreign = pod("someone-else", "7", false, false);
        assert_eq!(step(Some(&foreign), running, true, true), PodStep::NotOurs);
        // Going: not a name taken, looked at again.
        let mut deleted = foreign.clone();
        deleted.deletion_timestamp = Some(crate::crd::condition::now());
        assert_eq!(
            step(Some(&deleted), running, true, true),
            PodStep::LookAgain(PASSING_POD_RECHECK),
            "being deleted"
        );
        deleted.deletion_timestamp =
            crate::crd::time::from_utc(now - PASSING_POD_PATIENCE - chrono::TimeDelta::seconds(1));
        assert_eq!(
            step(Some(&deleted), running, true, true),
            PodStep::NotOurs,
            "held in its deletion past the patience (a finalizer)"
        );
        let mut earlier = foreign.clone();
        earlier.name = Some("train".into());
        let controller = &mut earlier.owner_references.as_mut().unwrap()[0];
        controller.kind = "SlurmJob".into();
        controller.api_version = "slurm.rs/v1alpha1".into();
        controller.name = "train".into();
        assert_eq!(
            step(Some(&earlier), running, true, true),
            PodStep::LookAgain(PASSING_POD_RECHECK),
            "an earlier SlurmJob's of this name, which the garbage collector deletes"
        );
        let mut unserved = earlier.clone();
        unserved.owner_references.as_mut().unwrap()[0].api_version = "slurm.rs/v9".into();
        assert_eq!(
            step(Some(&unserved), running, true, true),
            PodStep::NotOurs,
            "controlled by a version not served: the garbage collector leaves it"
        );
        earlier.owner_references.as_mut().unwrap()[0].name = "other".into();
        assert_eq!(
            step(Some(&earlier), running, true, true),
            PodStep::NotOurs,
            "controlled by a SlurmJob of another name: not going"
        );
        let mut referring = streaming.clone();
        referring.owner_references.as_mut().unwrap()[0].controller = None;
        assert_eq!(
            step(Some(&referring), running, true, true),
            PodStep::NotOurs,
            "refers to the SlurmJob without being controlled by it"
        );
        let known = KnownPod {
            meta: &streaming,
            phase: running,
        };
        assert_eq!(
            pod_step(Some(known), None, 7, true, true, REPLACE_AFTER, now),
            PodStep::NotOurs,
            "a SlurmJob without a uid owns nothing"
        );

        // Stopped before its output was whole: replaced while a Pod may be created.
        let failed = Some(PodPhase::Failed);
        let succeeded = Some(PodPhase::Succeeded);
        for (meta, phase, ended, may_create, expected, why) in [
            (
                &streaming,
                failed,
                false,
                true,
                PodStep::Replace,
                "failed mid-run",
            ),
            (
                &streaming,
                failed,
                true,
                true,
                PodStep::Replace,
                "failed before told the end",
            ),
            (
                &streaming,
                failed,
                true,
                false,
                PodStep::Nothing,
                "failed, too late to create",
            ),
            (
                &told,
                failed,
                true,
                true,
                PodStep::Replace,
                "failed after told the end (its copy killed or evicted: not whole)",
            ),
            (
                &told,
                failed,
                true,
                false,
                PodStep::Nothing,
                "failed after told the end, too late to create",
            ),
            (
                &told,
                succeeded,
                false,
                true,
                PodStep::Replace,
                "told, then the job requeued",
            ),
            (
                &told,
                succeeded,
                true,
                true,
                PodStep::Nothing,
                "told, and done",
            ),
            (
                &told,
                running,
                false,
                true,
                PodStep::Nothing,
                "told, the job requeued: not done yet",
            ),
            (
                &streaming,
                succeeded,
                false,
                true,
                PodStep::Nothing,
                "ended by itself: said why",
            ),
            (
                &streaming,
                succeeded,
                true,
                true,
                PodStep::Nothing,
                "ended by itself, not told",
            ),
            (
                &streaming,
                Some(PodPhase::Unknown),
                false,
                true,
                PodStep::Nothing,
                "node unknown",
            ),
            (
                &streaming,
                Some(PodPhase::Pending),
                false,
                true,
                PodStep::Nothing,
                "not started",
            ),
            (
                &pod("job-uid", "7", false, true),
                failed,
                false,
                true,
                PodStep::Nothing,
                "deleting",
            ),
            (
                &streaming,
                Some(PodPhase::Pending),
                true,
                true,
                PodStep::TellEnded,
                "not started, its run ended: told first",
            ),
            (
                &told,
                Some(PodPhase::Pending),
                true,
                true,
                // Created 5 minutes ago.
                PodStep::LookAgain(std::time::Duration::from_secs(600)),
                "not started, its run ended: looked at again once ABANDON_AFTER old",
            ),
            (
                &pod("job-uid", "7", true, true),
                Some(PodPhase::Pending),
                true,
                false,
                PodStep::Nothing,
                "not started, its run ended, deleting",
            ),
        ] {
            assert_eq!(
                step(Some(meta), phase, ended, may_create),
                expected,
                "{why}"
            );
        }
        // Never started, its run ended, told, and ABANDON_AFTER old: deleted once no Pod
        // would be made again for the run; until then looked at every minute.
        let mut stuck = told.clone();
        stuck.creation_timestamp = crate::crd::time::from_utc(now - ABANDON_AFTER);
        assert_eq!(
            step(Some(&stuck), Some(PodPhase::Pending), true, false),
            PodStep::Abandon
        );
        assert_eq!(
            step(Some(&stuck), Some(PodPhase::Pending), true, true),
            PodStep::LookAgain(std::time::Duration::from_secs(60)),
            "would be made again"
        );
        assert_eq!(
            step(Some(&stuck), Some(PodPhase::Pending), false, true),
            PodStep::Nothing,
            "its run not ended: waits for it"
        );
        // One that stops right after its creation is replaced a minute after it, not sooner;
        // one whose creation time is not known, at once.
        let mut young = streaming.clone();
        young.creation_timestamp = crate::crd::time::from_utc(now - chrono::TimeDelta::seconds(45));
        assert_eq!(
            step(Some(&young), failed, false, true),
            PodStep::LookAgain(std::time::Duration::from_secs(15))
        );
        young.creation_timestamp = crate::crd::time::from_utc(now - REPLACE_AFTER);
        assert_eq!(step(Some(&young), failed, false, true), PodStep::Replace);
        young.creation_timestamp = None;
        assert_eq!(step(Some(&young), failed, false, true), PodStep::Replace);
        for (step, acts) in [
            (PodStep::Nothing, false),
            (PodStep::NotOurs, false),
            (PodStep::LookAgain(std::time::Duration::from_secs(1)), false),
            (PodStep::TellEnded, true),
            (PodStep::DeleteOld, true),
            (PodStep::Replace, true),
            (PodStep::Create, true),
        ] {
            assert_eq!(step.acts(), acts, "{step:?}");
        }
    }

    /// Each replacement of a run's Pod doubles the age the next must reach, up to 32 minutes;
    /// another run (a re-run) starts again at one minute; the memory of it is bounded.
    #[test]
    fn replacements_back_off_per_run() {
        let minutes = |m| chrono::TimeDelta::minutes(m);
        assert_eq!(replace_after(0), minutes(1));
        assert_eq!(replace_after(1), minutes(2));
        assert_eq!(replace_after(5), minutes(32));
        assert_eq!(replace_after(u32::MAX), minutes(32));
        let replacements = Replacements::default();
        assert_eq!(replacements.of(Some("u"), 7), 0);
        replacements.record("u", 7);
        replacements.record("u", 7);
        assert_eq!(replacements.of(Some("u"), 7), 2);
        assert_eq!(replacements.of(None, 7), 0, "no uid, nothing known");
        assert_eq!(replacements.of(Some("u"), 8), 0, "another run");
        replacements.record("u", 8);
        assert_eq!(replacements.of(Some("u"), 8), 1);
        assert_eq!(replacements.of(Some("u"), 7), 0);
        for n in 0..Replacements::MAX {
            replacements.record(&format!("other-{n}"), 1);
        }
        assert!(replacements.lock().len() <= Replacements::MAX);
    }

    /// A missing Pod is created for a run that has started, and for one that ended within
    /// `CREATE_AFTER_END`; not for one that ended before, or whose end is not known.
    #[test]
    fn a_missing_pod_is_created_until_a_while_after_the_end() {
        let now = DateTime::from_timestamp(10_000, 0).unwrap();
        let run = |phase, ended_ago: Option<i64>| SlurmJobStatus {
            phase,
            end_time: status::time(ended_ago.map(|s| now - chrono::TimeDelta::seconds(s))),
            nodes: Some("n1".into()),
            ..Default::default()
        };
        let window = CREATE_AFTER_END.num_seconds();
        for (phase, ended_ago, created) in [
            // Not while it waits (not submitted yet, or queued in Slurm).
            (Phase::Pending, None, false),
            (Phase::Submitted, None, false),
            (Phase::Running, None, true),
            (Phase::Completed, Some(0), true),
            (Phase::Failed, Some(window - 1), true),
            (Phase::Completed, Some(window), false),
            (Phase::Cancelled, Some(24 * 3600), false),
            (Phase::Lost, None, false),
            (Phase::Completed, None, false),
        ] {
            assert_eq!(
                may_create(&run(phase, ended_ago), now),
                created,
                "{phase:?}, ended {ended_ago:?} s ago"
            );
        }
        // Cancelled while queued: Slurm gave it no nodes (and its start is its end).
        let never_ran = SlurmJobStatus {
            nodes: None,
            ..run(Phase::Cancelled, Some(0))
        };
        assert!(!may_create(&never_ran, now));
    }

    fn job(output: Option<JobOutput>) -> SlurmJob {
        let spec: SlurmJobSpec = serde_json::from_value(serde_json::json!({
            "clusterName": "hpc",
            "script": "#!/bin/sh\ntrue\n",
        }))
        .unwrap();
        let mut job = SlurmJob::new("train", SlurmJobSpec { output, ..spec });
        job.metadata.namespace = Some("ml".into());
        job.metadata.uid = Some("u-1".into());
        job
    }

    /// A run adopted from an earlier generation streams from the current spec's output only
    /// when its record shows it writes that very file.
    #[test]
    fn an_earlier_runs_output_is_the_specs_only_when_its_record_agrees() {
        let output = JobOutput {
            volume: "results".into(),
            slurm_path: "/shared".into(),
            sub_path: Some("b".into()),
        };
        let job = job(Some(output.clone()));
        let current = Some(run_output(&output));
        let record = |stdout: Option<&str>| crate::slurm::types::Job {
            job_id: 42,
            standard_output: stdout.map(str::to_owned),
            ..crate::slurm::types::Job::bare()
        };
        for (records, expected, why) in [
            (vec![], current.clone(), "no record: the current spec's"),
            (
                vec![record(None)],
                current.clone(),
                "a record that does not say",
            ),
            (
                vec![record(Some("/shared/b/train-%j.out"))],
                current.clone(),
                "as submitted",
            ),
            (
                vec![record(Some("/shared/b/train-42.out"))],
                current.clone(),
                "expanded",
            ),
            (
                vec![record(Some("/shared/a/train-42.out"))],
                None,
                "another directory (subPath edited since)",
            ),
            (
                vec![record(Some("/tmp/slurm-42.out"))],
                None,
                "submitted without spec.output",
            ),
        ] {
            assert_eq!(
                earlier_run_output(
                    &job.spec,
                    submit::output_path(&job.spec, "train").as_deref(),
                    42,
                    &records
                ),
                expected,
                "{why}"
            );
        }
        // Output added since: a run whose record names any file writes none the Pod would read.
        let without = self::job(None);
        assert_eq!(
            earlier_run_output(
                &without.spec,
                submit::output_path(&without.spec, "train").as_deref(),
                42,
                &[record(Some("/shared/b/train-42.out"))]
            ),
            None
        );
    }

    /// The Pod of a job as its spec asks for output now (a run submitted from that spec).
    fn spec_pod(job: &SlurmJob, job_id: i64, image: &str, ended: bool) -> Option<Pod> {
        pod(
            job,
            &run_output(job.spec.output.as_ref()?),
            job_id,
            image,
            ended,
        )
    }

    /// A run's Pod reads where the run was submitted to write (`status.output`), not where
    /// `spec.output` says since: an edit of it applies from the next run.
    #[test]
    fn the_pod_reads_where_the_run_writes_not_where_the_spec_says_since() {
        let submitted = JobOutput {
            volume: "results".into(),
            slurm_path: "/shared".into(),
            sub_path: Some("runs//a/".into()),
        };
        let recorded = run_output(&submitted);
        assert_eq!(
            recorded,
            RunOutput {
                volume: "results".into(),
                sub_path: Some("runs/a".into()),
            }
        );
        // Edited while the run is queued: another claim and directory.
        let mut job = job(Some(JobOutput {
            volume: "elsewhere".into(),
            slurm_path: "/mnt".into(),
            sub_path: Some("b".into()),
        }));
        job.status = Some(SlurmJobStatus {
            job_id: Some(42),
            output: Some(recorded.clone()),
            ..Default::default()
        });
        assert_eq!(current_run_output(&job), Some(&recorded));
        let spec = pod(&job, &recorded, 42, "img:1", false)
            .unwrap()
            .spec
            .unwrap();
        let claim = spec.volumes.as_ref().unwrap()[0]
            .persistent_volume_claim
            .as_ref()
            .unwrap();
        assert_eq!(claim.claim_name, "results");
        let env = spec.containers[0].env.as_ref().unwrap();
        let file = env.iter().find(|e| e.name == "OUTPUT_FILE").unwrap();
        assert_eq!(
            file.value.as_deref(),
            Some(format!("{MOUNT_PATH}/runs/a/train-42.out").as_str())
        );
        // And the spec's output removed since: the run still writes there.
        job.spec.output = None;
        assert_eq!(current_run_output(&job), Some(&recorded));
        // A run submitted without output has nothing recorded, whatever the spec says now.
        job.status.as_mut().unwrap().output = None;
        job.spec.output = Some(submitted);
        assert_eq!(current_run_output(&job), None);
    }

    /// A name longer than a label value may be (a SlurmJob's may have 253 characters) labels
    /// the Pod with the uid instead: the API server would refuse the Pod otherwise.
    #[test]
    fn a_long_name_labels_the_pod_with_the_uid() {
        let output = JobOutput {
            volume: "results".into(),
            slurm_path: "/shared".into(),
            sub_path: None,
        };
        let mut long = job(Some(output));
        let uid = long.metadata.uid.clone().unwrap();
        long.metadata.name = Some("a".repeat(64));
        let pod = spec_pod(&long, 42, "img:1", false).unwrap();
        assert_eq!(pod.metadata.labels.as_ref().unwrap()[LABEL], uid);
        assert_eq!(pod.metadata.name, long.metadata.name);
        assert_eq!(label_value(&"a".repeat(63), &uid), "a".repeat(63));
    }

    #[test]
    fn the_pod_streams_the_file_the_job_writes_from_the_claim() {
        for (sub_path, slurm_path, relative) in [
            (None, "/shared", "train-42.out"),
            (Some("runs/a"), "/shared/", "runs/a/train-42.out"),
            (Some("/runs/"), "/mnt/out", "runs/train-42.out"),
            (Some("runs//./b/"), "/shared", "runs/b/train-42.out"),
            (Some("/./"), "/shared", "train-42.out"),
        ] {
            let output = JobOutput {
                volume: "results".into(),
                slurm_path: slurm_path.into(),
                sub_path: sub_path.map(str::to_owned),
            };
            let job = job(Some(output.clone()));
            // The path Slurm writes, with %j replaced, lies below slurmPath at `relative`.
            let slurm_file = submit::output_path(&job.spec, "train")
                .unwrap()
                .replace("%j", "42");
            assert_eq!(
                slurm_file,
                format!("{}/{relative}", slurm_path.trim_end_matches('/'))
            );
            let pod = spec_pod(&job, 42, "img:1", false).unwrap();
            assert_eq!(pod.metadata.name.as_deref(), Some("train"));
            assert_eq!(pod.metadata.namespace.as_deref(), Some("ml"));
            assert_eq!(pod.metadata.labels.as_ref().unwrap()[LABEL], "train");
            assert_eq!(streamed_job_id(&pod), Some(42));
            let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
            assert_eq!(
                (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
                ("SlurmJob", "train", "u-1")
            );
            assert_eq!(owner.controller, Some(true));
            let spec = pod.spec.unwrap();
            let volume = &spec.volumes.as_ref().unwrap()[0];
            let claim = volume.persistent_volume_claim.as_ref().unwrap();
            assert_eq!(claim.claim_name, "results");
            assert_eq!(claim.read_only, Some(true));
            let container = &spec.containers[0];
            assert_eq!(container.image.as_deref(), Some("img:1"));
            let mount = &container.volume_mounts.as_ref().unwrap()[0];
            assert_eq!(
                (
                    mount.name.as_str(),
                    mount.mount_path.as_str(),
                    mount.read_only
                ),
                (volume.name.as_str(), MOUNT_PATH, Some(true))
            );
            let env = &container.env.as_ref().unwrap()[0];
            assert_eq!(
                env.value.as_deref(),
                Some(format!("{MOUNT_PATH}/{relative}").as_str())
            );
            assert!(container.command.as_ref().unwrap()[2].contains("cat <&3"));
            let security = container.security_context.as_ref().unwrap();
            assert_eq!(security.read_only_root_filesystem, Some(true));
            assert_eq!(security.allow_privilege_escalation, Some(false));
            assert_eq!(security.privileged, Some(false));
            assert_eq!(
                spec.security_context.as_ref().unwrap().run_as_non_root,
                Some(true)
            );
            assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        }
    }

    #[test]
    fn the_streamer_is_bounded_and_sees_its_annotations() {
        let pod = spec_pod(
            &job(Some(JobOutput {
                volume: "results".into(),
                slurm_path: "/shared".into(),
                sub_path: None,
            })),
            7,
            "img:1",
            true,
        )
        .unwrap();
        assert_eq!(
            pod.metadata.annotations.as_ref().unwrap()[ENDED_ANNOTATION],
            "true",
            "a Pod created after its job ended is created told"
        );
        let spec = pod.spec.unwrap();
        let container = &spec.containers[0];
        let resources = container.resources.as_ref().unwrap();
        for (kind, values) in [
            ("requests", &resources.requests),
            ("limits", &resources.limits),
        ] {
            let values = values.as_ref().unwrap_or_else(|| panic!("no {kind}"));
            assert!(
                values.contains_key("cpu") && values.contains_key("memory"),
                "{kind}: {values:?}"
            );
        }
        let env = container.env.as_ref().unwrap();
        let annotations_file = env.iter().find(|e| e.name == "ANNOTATIONS_FILE").unwrap();
        let mount = container
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.name == "podinfo")
            .unwrap();
        assert_eq!(
            annotations_file.value.as_deref(),
            Some(format!("{}/annotations", mount.mount_path).as_str())
        );
        let volume = spec
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == "podinfo")
            .unwrap();
        let item = &volume
            .downward_api
            .as_ref()
            .unwrap()
            .items
            .as_ref()
            .unwrap()[0];
        assert_eq!(item.path, "annotations");
        assert_eq!(
            item.field_ref.as_ref().unwrap().field_path,
            "metadata.annotations"
        );
        let untold = spec_pod(
            &job(Some(JobOutput {
                volume: "results".into(),
                slurm_path: "/shared".into(),
                sub_path: None,
            })),
            7,
            "img:1",
            false,
        )
        .unwrap();
        assert_eq!(ended_patch(&untold, 7, false), None, "not ended");
        assert_eq!(ended_patch(&untold, 8, true), None, "another run's Pod");
        assert_eq!(
            ended_patch(&untold, 7, true),
            Some(serde_json::json!({"metadata": {"annotations": {ENDED_ANNOTATION: "true"}}}))
        );
    }

    /// The toolboxes the script is run with: this machine's `sh` and coreutils, and, where
    /// `busybox` is installed, busybox's own applets only (the streamer image's: a directory of
    /// applet links is the whole `PATH`).
    fn toolboxes(dir: &std::path::Path) -> Vec<(&'static str, Option<std::path::PathBuf>)> {
        let mut boxes = vec![("host", None)];
        let busybox = std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join("busybox"))
                .find(|b| b.is_file())
        });
        if let Some(busybox) = busybox {
            let bin = dir.join("busybox-bin");
            std::fs::create_dir_all(&bin).unwrap();
            for applet in [
                "sh", "grep", "sleep", "readlink", "stat", "kill", "echo", "cat",
            ] {
                let link = bin.join(applet);
                if !link.exists() {
                    std::os::unix::fs::symlink(&busybox, &link).unwrap();
                }
            }
            boxes.push(("busybox", Some(bin)));
        }
        boxes
    }

    /// The script started with `toolbox`'s `sh` (the host's without one), its stdout piped, in
    /// a process group of its own ([`Deadline`]); a copy is cut `copy_seconds` after the grace.
    fn streamer(
        toolbox: &Option<std::path::PathBuf>,
        file: &std::path::Path,
        annotations: &std::path::Path,
        copy_seconds: u32,
    ) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};

        let mut command = match toolbox {
            Some(bin) => {
                let mut c = Command::new(bin.join("sh"));
                c.env("PATH", bin);
                c
            }
            None => Command::new("sh"),
        };
        command
            .args(["-c", &streamer_script()])
            .env("OUTPUT_FILE", file)
            .env("ANNOTATIONS_FILE", annotations)
            .env("COPY_SECONDS", copy_seconds.to_string())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap()
    }

    /// Kills `child`'s process group unless [`Deadline::fired`] is called within the time given:
    /// a broken script (or a process it left holding its stdout) then fails its test instead of
    /// hanging it, which a blocking read of its output would.
    struct Deadline {
        stop: Option<std::sync::mpsc::Sender<()>>,
        killer: Option<std::thread::JoinHandle<bool>>,
    }

    impl Deadline {
        fn arm(child: &std::process::Child, after: std::time::Duration) -> Self {
            let (stop, stopped) = std::sync::mpsc::channel::<()>();
            let group = format!("-{}", child.id());
            let killer = std::thread::spawn(move || {
                let late = matches!(
                    stopped.recv_timeout(after),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                );
                if late {
                    // Without it the test would hang: it must run.
                    std::process::Command::new("kill")
                        .args(["-9", "--", &group])
                        .status()
                        .expect("kill(1) kills the script's process group");
                }
                late
            });
            Self {
                stop: Some(stop),
                killer: Some(killer),
            }
        }

        /// Disarms it; whether it had killed the group.
        fn fired(mut self) -> bool {
            drop(self.stop.take());
            self.killer.take().unwrap().join().unwrap()
        }
    }

    /// The Pod's annotations once it has been told its job (7) ended.
    const TOLD: &str = "slurm.rs/job-ended=\"true\"\nslurm.rs/job-id=\"7\"\n";

    /// Runs the script until it exits (`during` runs while it streams, then the end is
    /// announced); its stdout.
    fn stream(
        toolbox: &Option<std::path::PathBuf>,
        file: &std::path::Path,
        annotations: &std::path::Path,
        during: impl FnOnce(),
    ) -> String {
        use std::io::Read;
        use std::time::Duration;

        std::fs::write(annotations, "slurm.rs/job-id=\"7\"\n").unwrap();
        let mut child = streamer(toolbox, file, annotations, COPY_SECONDS);
        during();
        std::fs::write(annotations, TOLD).unwrap();
        // A generous deadline only so that a broken script fails the test instead of hanging it.
        // Disarmed before the script is reaped: its process group cannot be another's yet.
        let deadline = Deadline::arm(&child, Duration::from_secs(120));
        let mut stdout = Vec::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_end(&mut stdout)
            .unwrap();
        let stdout = String::from_utf8_lossy(&stdout).into_owned();
        assert!(
            !deadline.fired(),
            "the streamer did not exit after the end was announced: {stdout:?}"
        );
        let status = child.wait().unwrap();
        assert!(status.success(), "{status:?}: {stdout:?}");
        stdout
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The script itself: it prints the whole file, including lines written just before the
    /// end was announced, and exits 0 once the annotations say so. A job that ended without
    /// ever writing its file ends the Pod with a note.
    #[test]
    fn the_streamer_drains_the_file_and_exits_when_told() {
        use std::io::Write;
        use std::time::Duration;

        let dir = scratch("streamer");
        for (name, toolbox) in toolboxes(&dir) {
            let file = dir.join(format!("{name}.out"));
            let annotations = dir.join("annotations");
            let text = stream(&toolbox, &file, &annotations, || {
                let mut out = std::fs::File::create(&file).unwrap();
                writeln!(out, "first line").unwrap();
                std::thread::sleep(Duration::from_millis(1500));
                writeln!(out, "last line").unwrap();
            });
            assert_eq!(text, "first line\nlast line\n", "{name}");

            // Never written: a note, exit 0.
            let missing = dir.join("never.out");
            let text = stream(&toolbox, &missing, &annotations, || {});
            assert!(text.contains("was never written"), "{name}: {text}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Everything `child` prints, read at `bytes_per_second` at most (a slow log pipeline). A
    /// generous deadline only so that a broken script fails the test instead of hanging it.
    fn read_paced(child: &mut std::process::Child, bytes_per_second: f64) -> Vec<u8> {
        use std::io::Read;
        use std::time::{Duration, Instant};

        let deadline = Deadline::arm(child, Duration::from_secs(120));
        let mut stdout = child.stdout.take().unwrap();
        let mut copied = Vec::new();
        let mut chunk = vec![0; 64 * 1024];
        let started = Instant::now();
        loop {
            let n = stdout.read(&mut chunk).unwrap();
            if n == 0 {
                assert!(
                    !deadline.fired(),
                    "the streamer was still running after 120 s, {} bytes printed",
                    copied.len()
                );
                return copied;
            }
            copied.extend_from_slice(&chunk[..n]);
            let due = Duration::from_secs_f64(copied.len() as f64 / bytes_per_second);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }

    /// 4 MiB of 64-byte lines: a file the streamer takes seconds to copy at a paced read.
    fn four_mib_of_lines() -> String {
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n".repeat(64 * 1024)
    }

    /// The streamer ended well, having printed exactly `text`.
    fn assert_copied_whole(child: &mut std::process::Child, copied: &[u8], text: &str, name: &str) {
        assert!(child.wait().unwrap().success(), "{name}");
        assert_eq!(copied.len(), text.len(), "{name}: the whole file");
        assert!(copied == text.as_bytes(), "{name}: the file as it is");
    }

    /// Started after its job ended, the streamer copies the whole file however slowly its
    /// output is read: the watchdog (its grace for the open is over long before this copy is)
    /// does not cut it short.
    #[test]
    fn a_streamer_started_after_the_end_copies_the_whole_file() {
        let dir = scratch("streamer-ended");
        let annotations = dir.join("annotations");
        std::fs::write(&annotations, TOLD).unwrap();
        let file = dir.join("ended.out");
        let text = four_mib_of_lines();
        std::fs::write(&file, &text).unwrap();
        for (name, toolbox) in toolboxes(&dir) {
            let mut child = streamer(&toolbox, &file, &annotations, COPY_SECONDS);
            // Read in ~9 s: longer than the grace, far shorter than the bound.
            let copied = read_paced(&mut child, text.len() as f64 / 9.0);
            assert_copied_whole(&mut child, &copied, &text, name);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A streamer still catching up when the end is announced (created late, or its log read
    /// slowly) copies the rest of the file: a timed drain after the end (3 s) killed the
    /// follower and lost the end of the output without a word.
    #[test]
    fn a_streamer_catching_up_at_the_end_copies_the_rest() {
        use std::io::Write;
        use std::time::Duration;

        let dir = scratch("streamer-catching-up");
        let annotations = dir.join("annotations");
        let text = four_mib_of_lines();
        for (name, toolbox) in toolboxes(&dir) {
            let file = dir.join(format!("{name}.out"));
            std::fs::write(&annotations, "slurm.rs/job-id=\"7\"\n").unwrap();
            let mut out = std::fs::File::create(&file).unwrap();
            let mut child = streamer(&toolbox, &file, &annotations, COPY_SECONDS);
            // Following (the file exists, the end not announced), then the job writes it all
            // and ends at once.
            std::thread::sleep(Duration::from_millis(1500));
            out.write_all(text.as_bytes()).unwrap();
            std::fs::write(&annotations, TOLD).unwrap();
            // Read in ~8 s: well past a 3 s drain.
            let copied = read_paced(&mut child, text.len() as f64 / 8.0);
            assert_copied_whole(&mut child, &copied, &text, name);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file truncated while followed (a requeued job's output starts again) is read again
    /// from its start.
    #[test]
    fn a_truncated_file_is_followed_from_its_start() {
        use std::io::Write;
        use std::time::Duration;

        let dir = scratch("streamer-truncated");
        for (name, toolbox) in toolboxes(&dir) {
            let file = dir.join(format!("{name}.out"));
            let annotations = dir.join("annotations");
            let text = stream(&toolbox, &file, &annotations, || {
                let mut out = std::fs::File::create(&file).unwrap();
                writeln!(out, "first run, a long line").unwrap();
                std::thread::sleep(Duration::from_millis(2500));
                let mut again = std::fs::File::create(&file).unwrap(); // truncates
                writeln!(again, "rerun").unwrap();
                std::thread::sleep(Duration::from_millis(2500));
            });
            assert_eq!(text, "first run, a long line\nrerun\n", "{name}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A copy that would not end (here a sparse file of 64 GiB) is cut `$COPY_SECONDS` after the
    /// grace, and the Pod says so.
    #[test]
    fn a_copy_that_does_not_end_is_cut_short() {
        let dir = scratch("streamer-endless");
        let annotations = dir.join("annotations");
        std::fs::write(&annotations, TOLD).unwrap();
        let file = dir.join("sparse.out");
        let size = 1 << 36;
        std::fs::File::create(&file).unwrap().set_len(size).unwrap();
        for (name, toolbox) in toolboxes(&dir) {
            let mut child = streamer(&toolbox, &file, &annotations, 1);
            let copied = read_paced(&mut child, 4.0 * 1024.0 * 1024.0);
            assert!(child.wait().unwrap().success(), "{name}");
            let note = format!(
                "cut short: {} was still being copied 1 s after the job's end\n",
                file.display()
            );
            assert!(
                copied.ends_with(note.as_bytes()),
                "{name}: {:?}",
                String::from_utf8_lossy(&copied[copied.len().saturating_sub(200)..])
            );
            let zeros = &copied[..copied.len() - note.len()];
            assert!((zeros.len() as u64) < size, "{name}");
            assert!(zeros.iter().all(|b| *b == 0), "{name}: only the file");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A copy killed by anything but the watchdog (e.g. the kernel's OOM killer) fails the
    /// script at once, saying so: the Pod fails and is replaced. Killed before the end was
    /// announced, it sat silent until the job's end; after, it waited out the watchdog's copy
    /// time (here 100 s: the test gives up after 30).
    #[test]
    fn a_killed_copy_fails_at_once() {
        use std::io::Read;
        use std::time::Duration;

        let dir = scratch("streamer-killed");
        let annotations = dir.join("annotations");
        let small = dir.join("killed.out");
        std::fs::write(&small, "hello\n").unwrap();
        // Copied slower than it is read here (nothing reads it): the copy is going when killed.
        let large = dir.join("large.out");
        std::fs::File::create(&large)
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        for (name, toolbox) in toolboxes(&dir) {
            for (announced, file) in [(false, &small), (true, &large)] {
                let what = format!("{name}, announced: {announced}");
                let told = if announced {
                    TOLD
                } else {
                    "slurm.rs/job-id=\"7\"\n"
                };
                std::fs::write(&annotations, told).unwrap();
                let mut child = streamer(&toolbox, file, &annotations, 100);
                let deadline = Deadline::arm(&child, Duration::from_secs(30));
                let mut stdout = child.stdout.take().unwrap();
                let mut seen = Vec::new();
                let mut chunk = [0u8; 256];
                while seen.is_empty() || (!announced && !seen.ends_with(b"hello\n")) {
                    let n = stdout.read(&mut chunk).unwrap();
                    assert!(n > 0, "{what}: ended before streaming");
                    seen.extend_from_slice(&chunk[..n]);
                }
                // The worker is the script's child holding the file open as fd 3.
                let worker = loop {
                    let children =
                        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id()))
                            .unwrap_or_default();
                    let found = children.split_whitespace().find(|pid| {
                        std::fs::read_link(format!("/proc/{pid}/fd/3")).is_ok_and(|p| p == *file)
                    });
                    if let Some(pid) = found {
                        break pid.to_owned();
                    }
                    std::thread::sleep(Duration::from_millis(50));
                };
                if announced {
                    // Past the open grace: the watchdog waits out the copy time.
                    std::thread::sleep(Duration::from_secs(u64::from(OPEN_GRACE_SECONDS) + 2));
                }
                let killed = std::process::Command::new("kill")
                    .args(["-9", &worker])
                    .status()
                    .unwrap();
                assert!(killed.success(), "{what}");
                stdout.read_to_end(&mut seen).unwrap();
                let status = child.wait().unwrap();
                assert!(!deadline.fired(), "{what}: waited");
                assert_eq!(status.code(), Some(1), "{what}");
                let note = format!("cut short: the copy of {} stopped (137)\n", file.display());
                assert!(
                    seen.ends_with(note.as_bytes()),
                    "{what}: {:?}",
                    String::from_utf8_lossy(&seen[seen.len().saturating_sub(200)..])
                );
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The job's script (the tenant's) controls its output path; the streamer reads with its
    /// own identity. A symbolic link (of the file or of a directory on the way), a hard link,
    /// or a path replaced by a link once streaming began shows nothing of the other file.
    #[test]
    fn the_streamer_reads_only_the_jobs_own_file() {
        use std::io::Write;
        use std::os::unix::fs::{PermissionsExt, symlink};
        use std::time::Duration;

        let dir = scratch("streamer-links");
        let secret = dir.join("someone-elses.txt");
        std::fs::write(&secret, "SECRET\n").unwrap();
        let refused = |text: &str, what: &str| {
            assert!(!text.contains("SECRET"), "{what}: {text}");
            assert!(text.contains("not streamed"), "{what}: {text}");
        };
        for (name, toolbox) in toolboxes(&dir) {
            let annotations = dir.join("annotations");
            let file = dir.join(format!("{name}-symlink.out"));
            symlink(&secret, &file).unwrap();
            refused(&stream(&toolbox, &file, &annotations, || {}), "a symlink");

            let linked_dir = dir.join(format!("{name}-dir"));
            symlink(&dir, &linked_dir).unwrap();
            let through = linked_dir.join("someone-elses.txt");
            refused(
                &stream(&toolbox, &through, &annotations, || {}),
                "a directory symlink",
            );

            let hard = dir.join(format!("{name}-hard.out"));
            std::fs::hard_link(&secret, &hard).unwrap();
            refused(&stream(&toolbox, &hard, &annotations, || {}), "a hard link");
            std::fs::remove_file(&hard).unwrap();

            // A file only its owner may read, which the Pod can open (here the test's uid owns
            // it, as 65534 owns files on storage that squashes uids), renamed into the path.
            let private = dir.join(format!("{name}-private.txt"));
            std::fs::write(&private, "SECRET\n").unwrap();
            std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
            let renamed = dir.join(format!("{name}-renamed.out"));
            std::fs::rename(&private, &renamed).unwrap();
            let text = stream(&toolbox, &renamed, &annotations, || {});
            refused(&text, "a file others may not read");
            assert!(text.contains("is not readable by others"), "{name}: {text}");

            // A FIFO: its open waits for a writer (here for good), and is ended once the end
            // is announced, with a note (a FIFO swapped in just before the open ends so too).
            let fifo = dir.join(format!("{name}.fifo"));
            let made = std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap();
            assert!(made.success());
            let text = stream(&toolbox, &fifo, &annotations, || {});
            refused(&text, "a FIFO");
            assert!(
                text.contains("could not be opened by the job's end"),
                "{name}: {text}"
            );

            // A path the Pod cannot open (a socket here: even root's open fails, as a file the
            // Pod's uid may not read does): said so, not the shell's bare error.
            let socket = dir.join(format!("{name}.sock"));
            let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
            let text = stream(&toolbox, &socket, &annotations, || {});
            assert!(
                text.contains("not streamed: the output Pod (uid 65534) cannot open"),
                "{name}: {text}"
            );

            // Streaming began on the job's own file; then the path became a link.
            let file = dir.join(format!("{name}-swapped.out"));
            let mut out = std::fs::File::create(&file).unwrap();
            writeln!(out, "mine").unwrap();
            let text = stream(&toolbox, &file, &annotations, || {
                std::thread::sleep(Duration::from_millis(1500));
                std::fs::rename(&file, dir.join(format!("{name}-moved.out"))).unwrap();
                symlink(&secret, &file).unwrap();
                writeln!(out, "still mine").unwrap();
                std::thread::sleep(Duration::from_millis(1500));
            });
            assert_eq!(text, "mine\nstill mine\n", "{name}: swapped");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
