//! A SlurmJob's spec to the job description slurmrestd gets.

use std::time::Duration;

use crate::crd::slurmjob::{
    DependencyType, Exclusive, MAX_EXTRA_OPTION_DEPTH, NESTED_TOO_DEEP, SlurmJobSpec,
};
use crate::slurm::types::{self, SubmitRequest, extra_option_refusal};

use crate::crd::quantity::{self, QuantityError};

/// Working directory when the spec names none: exists on every Slurm node.
pub const DEFAULT_WORKING_DIRECTORY: &str = "/tmp";

/// Spec fields whose value Slurm cannot be given. Each is a clear message for a condition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("script must start with an interpreter line such as #!/bin/bash")]
    ScriptWithoutInterpreter,
    #[error("{field}: {source}")]
    Memory {
        field: &'static str,
        #[source]
        source: QuantityError,
    },
    /// Admission refuses these pairs too; an object stored before those rules gets this.
    #[error("{first} and {second} cannot both be set: {why}")]
    Conflict {
        first: &'static str,
        second: &'static str,
        why: &'static str,
    },
    #[error("{field} must be at least 1, got {value}")]
    NotPositive { field: &'static str, value: i32 },
    #[error(
        "nice must be 0 or more, got {0}: a negative nice raises a job's priority, which only \
         Slurm administrators may do"
    )]
    NegativeNice(i32),
    #[error("extraOptions.{key} {reason}")]
    ExtraOption { key: String, reason: &'static str },
    #[error(
        "dependsOn names the SlurmJob itself ({name}): it would wait for its own submission forever"
    )]
    DependsOnItself { name: String },
    #[error("name must not contain a comma: Slurm's accounting reads one as a list of job names")]
    NameWithComma,
    /// Admission refuses it too; an object stored before that rule gets this.
    #[error(
        "environment name {0:?} must not be empty or contain '=': Slurm reads each variable as \
         NAME=value"
    )]
    EnvironmentName(String),
    /// Refused before the submit, not a job that fails as slurmstepd cannot create its output
    /// file. Not an admission rule: a rule at the CRD's root is checked at every write of the
    /// object, its status and finalizers included, so a SlurmJob stored before it could no
    /// longer be written (its status, nor its finalizer removed).
    #[error(
        "with spec.output, metadata.name must be at most {MAX_OUTPUT_NAME} characters: the job's \
         output file, <name>-<job id>.out, must fit in a file name's 255 bytes"
    )]
    OutputNameTooLong,
}

/// The longest SlurmJob name with `spec.output`: `<name>-<job id>.out` within a file name's 255
/// bytes, for job ids up to 10 digits.
pub const MAX_OUTPUT_NAME: usize = 240;

/// With `spec.output`, the SlurmJob's name fits its output file's name ([`MAX_OUTPUT_NAME`]):
/// checked before its dependencies are waited for, so the refusal is not hours late.
pub fn check_output_name(spec: &SlurmJobSpec, object_name: &str) -> Result<(), SpecError> {
    if spec.output.is_some() && object_name.len() > MAX_OUTPUT_NAME {
        return Err(SpecError::OutputNameTooLong);
    }
    Ok(())
}

/// The checks that read only what the cache keeps of a spec (its names and `extraOptions`'
/// keys, not its script): what they refuse, the whole spec refuses too. Made before the wait
/// for `dependsOn`, so that such a refusal is said at once, not once the dependencies ran.
pub fn check_names(spec: &SlurmJobSpec, object_name: &str) -> Result<(), SpecError> {
    check_dependencies(spec, object_name)?;
    check_output_name(spec, object_name)?;
    check_extra_options(spec)
}

/// `extraOptions` by their keys: one outside the allowed ones, or nested too deep to have been
/// read (`crd::slurmjob::wire`), is refused naming it; so is `shared` beside `exclusive`.
/// Admission cannot read these keys (`crd::slurmjob`'s `free_form_object`).
fn check_extra_options(spec: &SlurmJobSpec) -> Result<(), SpecError> {
    let Some(extra) = &spec.extra_options else {
        return Ok(());
    };
    if spec.exclusive.is_some() && extra.contains_key("shared") {
        return Err(SpecError::Conflict {
            first: "exclusive",
            second: "extraOptions.shared",
            why: "both say how the nodes are shared",
        });
    }
    for key in extra.keys() {
        if let Some(key) = key.strip_suffix(NESTED_TOO_DEEP) {
            return Err(SpecError::ExtraOption {
                key: key.to_owned(),
                reason: NESTED_TOO_DEEP_REASON,
            });
        }
        if let Some(reason) = extra_option_refusal(key) {
            return Err(SpecError::ExtraOption {
                key: key.clone(),
                reason,
            });
        }
    }
    Ok(())
}

/// The dependencies' own problem, before any is looked up: a SlurmJob that depends on itself
/// would wait forever (admission refuses it too; an object stored before that rule gets
/// `InvalidSpec` instead of an endless `WaitingForDependencies`).
pub fn check_dependencies(spec: &SlurmJobSpec, object_name: &str) -> Result<(), SpecError> {
    if spec.depends_on.iter().any(|d| d.name == object_name) {
        return Err(SpecError::DependsOnItself {
            name: object_name.to_owned(),
        });
    }
    Ok(())
}

/// One resolved dependency: wait for Slurm job `job_id` in the given way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolvedDependency {
    pub kind: DependencyType,
    pub job_id: i64,
}

/// Slurm's dependency expression: `afterok:12:13,afterany:14` (all must hold).
pub fn dependency_expression(dependencies: &[ResolvedDependency]) -> Option<String> {
    let mut groups: Vec<(DependencyType, Vec<i64>)> = Vec::new();
    for dep in dependencies {
        match groups.iter_mut().find(|(kind, _)| *kind == dep.kind) {
            Some((_, ids)) => ids.push(dep.job_id),
            None => groups.push((dep.kind, vec![dep.job_id])),
        }
    }
    if groups.is_empty() {
        return None;
    }
    Some(
        groups
            .into_iter()
            .map(|(kind, ids)| {
                let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
                format!("{}:{}", kind.as_str(), ids.join(":"))
            })
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// Where the job's output goes on the Slurm nodes when `spec.output` is set: one file with
/// stdout and stderr, named after the SlurmJob and the Slurm job id (`%j`).
pub fn output_path(spec: &SlurmJobSpec, object_name: &str) -> Option<String> {
    let output = spec.output.as_ref()?;
    let mut dir = output.slurm_path.trim_end_matches('/').to_owned();
    if let Some(sub) = super::output::sub_dir(output) {
        dir = format!("{dir}/{sub}");
    }
    Some(format!("{dir}/{object_name}-%j.out"))
}

/// The submit request for `spec` of the SlurmJob named `object_name`, whose comment is `comment`
/// (the signed ownership tag, `TagKey::comment`).
/// Typed fields win over the same keys in `extraOptions`.
pub fn request(
    spec: &SlurmJobSpec,
    object_name: &str,
    comment: &str,
    dependencies: &[ResolvedDependency],
) -> Result<SubmitRequest, SpecError> {
    if !spec.script.starts_with("#!") {
        return Err(SpecError::ScriptWithoutInterpreter);
    }
    check_names(spec, object_name)?;
    if let Some(name) = spec
        .environment
        .keys()
        .find(|name| name.is_empty() || name.contains('='))
    {
        return Err(SpecError::EnvironmentName(name.clone()));
    }
    let positive = |field: &'static str, value: Option<i32>| -> Result<Option<u32>, SpecError> {
        match value {
            None => Ok(None),
            Some(v) => u32::try_from(v)
                .ok()
                .filter(|v| *v > 0)
                .map(Some)
                .ok_or(SpecError::NotPositive { field, value: v }),
        }
    };
    let mib =
        |field: &'static str,
         value: &Option<k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
            value
                .as_ref()
                .map(|q| quantity::to_mib_ceil(&q.0))
                .transpose()
                .map_err(|source| SpecError::Memory { field, source })
        };
    let memory_per_node_mib = mib("memoryPerNode", &spec.memory_per_node)?;
    let memory_per_cpu_mib = mib("memoryPerCpu", &spec.memory_per_cpu)?;
    let conflict = |first, second, why| Err(SpecError::Conflict { first, second, why });
    if memory_per_node_mib.is_some() && memory_per_cpu_mib.is_some() {
        return conflict(
            "memoryPerNode",
            "memoryPerCpu",
            "Slurm takes memory per node or per CPU",
        );
    }
    if spec.tres.is_some() && spec.tres_per_task.is_some() {
        return conflict("tres", "tresPerTask", "tres is the old name of tresPerTask");
    }
    let time_limit = spec
        .time_limit
        .as_ref()
        .map(|d| round_up_to_minute(d.as_std()));
    let output = output_path(spec, object_name);
    if output.is_some() && (spec.standard_output.is_some() || spec.standard_error.is_some()) {
        return conflict(
            "output",
            "standardOutput/standardError",
            "with output, the operator names the file it streams",
        );
    }

    let nice = spec
        .nice
        .map(|n| u32::try_from(n).map_err(|_| SpecError::NegativeNice(n)))
        .transpose()?;
    // Admission refuses it too; the name is what accounting is searched for before a submit.
    if spec.name.as_deref().is_some_and(|n| n.contains(',')) {
        return Err(SpecError::NameWithComma);
    }
    let mut request = SubmitRequest {
        script: spec.script.clone(),
        name: Some(spec.name.clone().unwrap_or_else(|| object_name.to_owned())),
        partition: spec.partition.clone(),
        account: spec.account.clone(),
        qos: spec.qos.clone(),
        nodes: spec.nodes.clone(),
        tasks: positive("ntasks", spec.ntasks)?,
        cpus_per_task: positive("cpusPerTask", spec.cpus_per_task)?,
        tasks_per_node: positive("tasksPerNode", spec.tasks_per_node)?,
        memory_per_node_mib,
        memory_per_cpu_mib,
        time_limit,
        environment: spec.environment.clone(),
        working_directory: spec
            .working_directory
            .clone()
            .unwrap_or_else(|| DEFAULT_WORKING_DIRECTORY.to_owned()),
        constraints: spec.constraints.clone(),
        gres: spec.gres.clone(),
        tres_per_node: None,
        tres_per_task: spec.tres_per_task.clone().or_else(|| spec.tres.clone()),
        gpus_per_node: spec.gpus_per_node.clone(),
        gpus_per_task: spec.gpus_per_task.clone(),
        exclusive: spec.exclusive.map(|e| match e {
            Exclusive::Node => types::Exclusive::Node,
            Exclusive::User => types::Exclusive::User,
            Exclusive::Mcs => types::Exclusive::Mcs,
        }),
        array: spec.array.clone(),
        dependency: dependency_expression(dependencies),
        // With an output volume, stderr goes to the same file so `kubectl logs` shows both.
        standard_output: output.clone().or_else(|| spec.standard_output.clone()),
        standard_error: output.or_else(|| spec.standard_error.clone()),
        comment: Some(comment.to_owned()),
        hold: spec.suspend == Some(true),
        nice,
        extra: serde_json::Map::new(),
    };
    // Each key was checked (`check_names`, above).
    if let Some(extra) = &spec.extra_options {
        for (key, value) in extra {
            request.extra.insert(key.clone(), value.clone());
        }
    }
    Ok(request)
}

/// Why an `extraOptions` value nested deeper than [`MAX_EXTRA_OPTION_DEPTH`] is refused (it was
/// not read: `crd::slurmjob::wire`).
const NESTED_TOO_DEEP_REASON: &str = "nests lists or objects more than 8 levels deep: a job \
                                      option takes a value, or a list or object of values";
const _: () = assert!(
    MAX_EXTRA_OPTION_DEPTH == 8,
    "NESTED_TOO_DEEP_REASON names the depth"
);

fn round_up_to_minute(duration: Duration) -> Duration {
    Duration::from_secs(duration.as_secs().div_ceil(60).max(1) * 60)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use serde_json::json;

    use super::*;
    use crate::crd::slurmjob::{JobDependency, JobOutput};
    use crate::slurm::tag::OwnerTag;

    fn spec() -> SlurmJobSpec {
        serde_json::from_value(json!({
            "clusterName": "local",
            "script": "#!/bin/bash\necho hi\n",
        }))
        .unwrap()
    }

    #[test]
    fn a_self_dependency_is_refused_with_its_name() {
        let mut s = spec();
        s.depends_on = vec![JobDependency {
            name: "hello".into(),
            type_: DependencyType::AfterAny,
        }];
        let error = request(&s, "hello", &OwnerTag::new("u", 1).to_string(), &[]).unwrap_err();
        assert_eq!(
            error,
            SpecError::DependsOnItself {
                name: "hello".into()
            }
        );
        assert!(error.to_string().contains("(hello)"), "{error}");
        assert_eq!(check_dependencies(&s, "hello"), Err(error));
        assert_eq!(check_dependencies(&s, "other"), Ok(()));
    }

    #[test]
    fn minimal_spec_gets_defaults_and_the_tag() {
        let r = request(&spec(), "hello", &OwnerTag::new("u", 1).to_string(), &[]).unwrap();
        assert_eq!(r.script, "#!/bin/bash\necho hi\n");
        assert_eq!(r.name.as_deref(), Some("hello"));
        assert_eq!(r.working_directory, "/tmp");
        assert_eq!(r.comment.as_deref(), Some("slurm.rs/uid=u,generation=1"));
        assert_eq!(r.standard_output, None);
        assert_eq!(r.dependency, None);
        assert!(r.extra.is_empty());
    }

    #[test]
    fn every_typed_field_is_mapped() {
        let mut s = spec();
        s.name = Some("custom".into());
        s.partition = Some("debug".into());
        s.account = Some("acct".into());
        s.qos = Some("normal".into());
        s.nodes = Some("1-2".into());
        s.ntasks = Some(4);
        s.cpus_per_task = Some(2);
        s.memory_per_node = Some(Quantity("1.5Gi".into()));
        s.time_limit = Some("90s".parse().unwrap());
        s.environment = BTreeMap::from([("FOO".into(), "bar".into())]);
        s.working_directory = Some("/scratch".into());
        s.constraints = Some("gpu&nvlink".into());
        s.gres = Some("gpu:2".into());
        s.tres_per_task = Some("cpu=4".into());
        s.tasks_per_node = Some(2);
        s.gpus_per_node = Some("a100:2".into());
        s.gpus_per_task = Some("1".into());
        s.exclusive = Some(Exclusive::User);
        s.array = Some("0-9%2".into());
        s.depends_on = vec![JobDependency {
            name: "a".into(),
            type_: DependencyType::AfterOk,
        }];
        s.output = Some(JobOutput {
            volume: "out".into(),
            slurm_path: "/shared/".into(),
            sub_path: Some("runs/".into()),
        });
        let deps = [
            ResolvedDependency {
                kind: DependencyType::AfterOk,
                job_id: 12,
            },
            ResolvedDependency {
                kind: DependencyType::AfterAny,
                job_id: 14,
            },
            ResolvedDependency {
                kind: DependencyType::AfterOk,
                job_id: 13,
            },
        ];
        let r = request(&s, "obj", &OwnerTag::new("u", 1).to_string(), &deps).unwrap();
        assert_eq!(r.name.as_deref(), Some("custom"));
        assert_eq!(r.partition.as_deref(), Some("debug"));
        assert_eq!(r.account.as_deref(), Some("acct"));
        assert_eq!(r.qos.as_deref(), Some("normal"));
        assert_eq!(r.nodes.as_deref(), Some("1-2"));
        assert_eq!(r.tasks, Some(4));
        assert_eq!(r.cpus_per_task, Some(2));
        assert_eq!(r.memory_per_node_mib, Some(1536));
        assert_eq!(
            r.time_limit,
            Some(Duration::from_secs(120)),
            "90s rounds up to 2 minutes"
        );
        assert_eq!(r.environment.get("FOO").map(String::as_str), Some("bar"));
        assert_eq!(r.working_directory, "/scratch");
        assert_eq!(r.constraints.as_deref(), Some("gpu&nvlink"));
        assert_eq!(r.gres.as_deref(), Some("gpu:2"));
        assert_eq!(r.tres_per_task.as_deref(), Some("cpu=4"));
        assert_eq!(r.tasks_per_node, Some(2));
        assert_eq!(r.gpus_per_node.as_deref(), Some("a100:2"));
        assert_eq!(r.gpus_per_task.as_deref(), Some("1"));
        assert_eq!(r.exclusive, Some(types::Exclusive::User));
        assert_eq!(r.array.as_deref(), Some("0-9%2"));
        assert_eq!(r.dependency.as_deref(), Some("afterok:12:13,afterany:14"));
        assert_eq!(
            r.standard_output.as_deref(),
            Some("/shared/runs/obj-%j.out")
        );
        assert_eq!(r.standard_error, r.standard_output);

        // Without an output volume, Slurm filename patterns go through as written.
        s.output = None;
        s.standard_output = Some("logs/%x-%A_%a.out".into());
        s.standard_error = Some("/home/u/%j.err".into());
        let r = request(&s, "obj", &OwnerTag::new("u", 1).to_string(), &deps).unwrap();
        assert_eq!(r.standard_output.as_deref(), Some("logs/%x-%A_%a.out"));
        assert_eq!(r.standard_error.as_deref(), Some("/home/u/%j.err"));
        s.output = Some(JobOutput {
            volume: "out".into(),
            slurm_path: "/shared".into(),
            sub_path: None,
        });
        let err = request(&s, "obj", &OwnerTag::new("u", 1).to_string(), &deps).unwrap_err();
        assert!(
            err.to_string().starts_with("output and standardOutput"),
            "{err}"
        );
    }

    /// An option nested too deep to have been read (`crd::slurmjob::wire`) is refused naming
    /// it, as `InvalidSpec`, never submitted as the `null` kept in its place.
    #[test]
    fn an_extra_option_nested_too_deep_is_refused_naming_it() {
        let mut s = spec();
        let mut nested = json!("x");
        for _ in 0..200 {
            nested = json!([nested]);
        }
        let job = json!({"metadata": {"name": "j"}, "spec": {
            "clusterName": "c", "script": "#!/bin/sh\n", "extraOptions": {"argv": nested, "requeue": true},
        }});
        s.extra_options =
            serde_json::from_str::<crate::crd::slurmjob::WholeSlurmJob>(&job.to_string())
                .unwrap()
                .0
                .spec
                .extra_options;
        let err = request(&s, "obj", &OwnerTag::new("u", 1).to_string(), &[]).unwrap_err();
        assert!(
            matches!(&err, SpecError::ExtraOption { key, .. } if key == "argv"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "extraOptions.argv nests lists or objects more than 8 levels deep: a job option \
             takes a value, or a list or object of values"
        );
    }

    #[test]
    fn allowed_extra_options_pass_through_and_every_other_key_is_refused() {
        let mut s = spec();
        s.extra_options = Some(
            json!({"mail_type": ["END"], "requeue": true, "tres_per_job": "gres/gpu:4"})
                .as_object()
                .unwrap()
                .clone(),
        );
        let r = request(&s, "obj", &OwnerTag::new("u", 1).to_string(), &[]).unwrap();
        assert_eq!(r.extra.get("mail_type"), Some(&json!(["END"])));
        assert_eq!(r.extra.get("requeue"), Some(&json!(true)));
        assert_eq!(r.extra.len(), 3);

        // Identity, privilege, the operator's own fields, typed fields and unknown keys.
        for (key, reason) in [
            ("user_id", "runs as the Slurm user its access grants"),
            ("group_id", "runs as the Slurm user its access grants"),
            ("priority", "only Slurm administrators"),
            ("nice", "use spec.nice"),
            ("hold", "use spec.suspend"),
            ("reservation", "granted by the Slurm administrators"),
            ("job_id", "Slurm assigns job ids"),
            ("admin_comment", "administrators' field"),
            ("spank_environment", "SPANK"),
            ("selinux_context", "security labels"),
            ("container", "containers"),
            ("clusters", "cluster is set by its access"),
            ("comment", "ownership tag"),
            ("script", "use spec.script"),
            ("standard_output", "use spec.standardOutput"),
            ("partition", "use spec.partition"),
            ("current_working_directory", "use spec.workingDirectory"),
            ("tasks_per_node", "use spec.tasksPerNode"),
            ("memory_per_cpu", "use spec.memoryPerCpu"),
            ("tres_per_task", "use spec.tresPerTask"),
            ("exclusive", "not a job option a SlurmJob may set"),
        ] {
            let mut s = spec();
            s.extra_options = Some(
                json!({ key: "0", "requeue": true })
                    .as_object()
                    .unwrap()
                    .clone(),
            );
            let err = request(&s, "obj", &OwnerTag::new("u", 1).to_string(), &[]).unwrap_err();
            assert!(
                matches!(&err, SpecError::ExtraOption { key: k, .. } if k == key),
                "{key}: {err}"
            );
            assert!(
                err.to_string().starts_with(&format!("extraOptions.{key} ")),
                "{err}"
            );
            assert!(err.to_string().contains(reason), "{key}: {err}");
        }
    }

    #[test]
    fn invalid_values_are_errors_with_messages() {
        let mut s = spec();
        s.script = "echo no shebang".into();
        assert_eq!(
            request(&s, "o", &OwnerTag::new("u", 1).to_string(), &[]),
            Err(SpecError::ScriptWithoutInterpreter)
        );
        let mut s = spec();
        s.memory_per_node = Some(Quantity("lots".into()));
        let err = request(&s, "o", &OwnerTag::new("u", 1).to_string(), &[]).unwrap_err();
        assert!(err.to_string().starts_with("memoryPerNode: "), "{err}");
        let mut s = spec();
        s.ntasks = Some(0);
        assert_eq!(
            request(&s, "o", &OwnerTag::new("u", 1).to_string(), &[]),
            Err(SpecError::NotPositive {
                field: "ntasks",
                value: 0
            })
        );
        let mut s = spec();
        s.cpus_per_task = Some(-2);
        assert_eq!(
            request(&s, "o", &OwnerTag::new("u", 1).to_string(), &[]),
            Err(SpecError::NotPositive {
                field: "cpusPerTask",
                value: -2
            })
        );
        // Stored before admission refused them: `A=B` would reach the job as A="B=x".
        for name in ["A=B", ""] {
            let mut s = spec();
            s.environment = BTreeMap::from([(name.to_owned(), "x".to_owned())]);
            let err = request(&s, "o", &OwnerTag::new("u", 1).to_string(), &[]).unwrap_err();
            assert_eq!(err, SpecError::EnvironmentName(name.to_owned()));
            assert!(err.to_string().contains("NAME=value"), "{err}");
        }
    }

    #[test]
    fn memory_per_cpu_and_the_old_tres_name_are_mapped() {
        let tag = OwnerTag::new("u", 1).to_string();
        let mut s = spec();
        s.memory_per_cpu = Some(Quantity("1.5Gi".into()));
        s.tres = Some("cpu=2".into());
        let r = request(&s, "o", &tag, &[]).unwrap();
        assert_eq!(r.memory_per_cpu_mib, Some(1536));
        assert_eq!(r.memory_per_node_mib, None);
        assert_eq!(
            r.tres_per_task.as_deref(),
            Some("cpu=2"),
            "tres still counts"
        );

        // Pairs admission refuses, for objects stored before those rules.
        let mut both_memories = s.clone();
        both_memories.tres = None;
        both_memories.memory_per_node = Some(Quantity("1Gi".into()));
        let mut both_tres = spec();
        both_tres.tres = Some("cpu=2".into());
        both_tres.tres_per_task = Some("cpu=1".into());
        let mut exclusive_and_shared = spec();
        exclusive_and_shared.exclusive = Some(Exclusive::Node);
        exclusive_and_shared.extra_options =
            Some(json!({"shared": ["user"]}).as_object().unwrap().clone());
        for (bad, names) in [
            (both_memories, "memoryPerNode and memoryPerCpu"),
            (both_tres, "tres and tresPerTask"),
            (exclusive_and_shared, "exclusive and extraOptions.shared"),
        ] {
            let err = request(&bad, "o", &tag, &[]).unwrap_err();
            assert!(
                matches!(err, SpecError::Conflict { .. }) && err.to_string().starts_with(names),
                "{err}"
            );
        }

        let mut s = spec();
        s.memory_per_cpu = Some(Quantity("a lot".into()));
        let err = request(&s, "o", &tag, &[]).unwrap_err();
        assert!(err.to_string().starts_with("memoryPerCpu: "), "{err}");
        let mut s = spec();
        s.tasks_per_node = Some(0);
        assert_eq!(
            request(&s, "o", &tag, &[]),
            Err(SpecError::NotPositive {
                field: "tasksPerNode",
                value: 0
            })
        );
    }

    /// A name too long for its output file (`<name>-<job id>.out`, 255 bytes) is refused
    /// before a submit (`InvalidSpec`), not failed by slurmstepd.
    #[test]
    fn a_name_too_long_for_its_output_file_is_refused() {
        let mut s = spec();
        s.script = "#!/bin/sh\ntrue\n".into();
        s.output = Some(JobOutput {
            volume: "v".into(),
            slurm_path: "/shared".into(),
            sub_path: None,
        });
        let longest = "n".repeat(MAX_OUTPUT_NAME);
        assert!(request(&s, &longest, "c", &[]).is_ok());
        assert!(format!("{longest}-4294967295.out").len() <= 255);
        let err = request(&s, &format!("{longest}n"), "c", &[]).unwrap_err();
        assert!(matches!(err, SpecError::OutputNameTooLong), "{err}");
        assert!(err.to_string().contains("metadata.name"), "{err}");
        s.output = None;
        assert!(request(&s, &format!("{longest}n"), "c", &[]).is_ok());
    }

    #[test]
    fn output_path_joins_volume_mount_and_sub_path() {
        let mut s = spec();
        assert_eq!(output_path(&s, "j"), None);
        s.output = Some(JobOutput {
            volume: "v".into(),
            slurm_path: "/shared".into(),
            sub_path: None,
        });
        assert_eq!(output_path(&s, "j").as_deref(), Some("/shared/j-%j.out"));
        s.output = Some(JobOutput {
            volume: "v".into(),
            slurm_path: "/".into(),
            sub_path: Some("a/b".into()),
        });
        assert_eq!(output_path(&s, "j").as_deref(), Some("/a/b/j-%j.out"));
    }
}
