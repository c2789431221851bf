//! The output streamer: a small Pod, named after the SlurmJob and owned by it, that mounts the
//! output PersistentVolumeClaim read-only and streams the current run's output file, so that
//! `kubectl logs -f <slurmjob>` follows a running job and still shows its output after the end.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext,
    PodSpec, SeccompProfile, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::crd::SlurmJob;
use crate::crd::slurmjob::JobOutput;

/// Label on the streamer Pod naming its SlurmJob (orphans are found by it, not by memory).
pub const LABEL: &str = "slurm.rs/slurmjob";
/// Annotation on the streamer Pod: the Slurm job id whose output it streams.
pub const JOB_ID_ANNOTATION: &str = "slurm.rs/job-id";
/// Where the PVC is mounted in the Pod.
pub const MOUNT_PATH: &str = "/output";
/// Default image of the streamer (`--output-image`): anything with `sh` and `tail -F`.
pub const DEFAULT_IMAGE: &str = "busybox:1.37";
/// User the streamer runs as (`nobody`): it only reads.
const RUN_AS_USER: i64 = 65534;

/// The output file of Slurm job `job_id` relative to the root of the volume, as Slurm writes it
/// through `submit::output_path` (`<slurmPath>/<subPath>/<name>-%j.out`).
pub fn relative_file(output: &JobOutput, object_name: &str, job_id: i64) -> String {
    let file = format!("{object_name}-{job_id}.out");
    match output
        .sub_path
        .as_deref()
        .map(|s| s.trim_matches('/'))
        .filter(|s| !s.is_empty())
    {
        Some(sub) => format!("{sub}/{file}"),
        None => file,
    }
}

/// The streamer Pod for `job`'s run `job_id`, or `None` when the job has no `spec.output` (or
/// no name/uid yet). The PVC is mounted whole and read-only; the file path below the mount is
/// the one the job writes.
pub fn pod(job: &SlurmJob, job_id: i64, image: &str) -> Option<Pod> {
    let output = job.spec.output.as_ref()?;
    let name = job.metadata.name.clone()?;
    let uid = job.metadata.uid.clone()?;
    let file = format!("{MOUNT_PATH}/{}", relative_file(output, &name, job_id));
    let owner = OwnerReference {
        api_version: "slurm.rs/v1alpha1".into(),
        kind: "SlurmJob".into(),
        name: name.clone(),
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    // Wait for the file (the job may still be pending), then print it from the start and
    // follow it, also across truncation or re-creation.
    let script = "until [ -e \"$OUTPUT_FILE\" ]; do sleep 1; done; \
                  exec tail -n +1 -F \"$OUTPUT_FILE\"";
    Some(Pod {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: job.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([(LABEL.to_owned(), name)])),
            annotations: Some(BTreeMap::from([(
                JOB_ID_ANNOTATION.to_owned(),
                job_id.to_string(),
            )])),
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
                command: Some(vec!["sh".into(), "-c".into(), script.into()]),
                env: Some(vec![EnvVar {
                    name: "OUTPUT_FILE".into(),
                    value: Some(file),
                    ..Default::default()
                }]),
                volume_mounts: Some(vec![VolumeMount {
                    name: "output".into(),
                    mount_path: MOUNT_PATH.into(),
                    read_only: Some(true),
                    ..Default::default()
                }]),
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
            volumes: Some(vec![Volume {
                name: "output".into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: output.volume.clone(),
                    read_only: Some(true),
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    })
}

/// The Slurm job id a streamer Pod streams (from its annotation).
pub fn streamed_job_id(pod: &Pod) -> Option<i64> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(JOB_ID_ANNOTATION)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::slurmjob::submit;
    use crate::crd::slurmjob::SlurmJobSpec;

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

    #[test]
    fn no_output_no_pod() {
        assert_eq!(pod(&job(None), 5, DEFAULT_IMAGE), None);
    }

    #[test]
    fn the_pod_streams_the_file_the_job_writes_from_the_claim() {
        for (sub_path, slurm_path, relative) in [
            (None, "/shared", "train-42.out"),
            (Some("runs/a"), "/shared/", "runs/a/train-42.out"),
            (Some("/runs/"), "/mnt/out", "runs/train-42.out"),
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
            let pod = pod(&job, 42, "img:1").unwrap();
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
            assert!(container.command.as_ref().unwrap()[2].contains("tail -n +1 -F"));
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
}
