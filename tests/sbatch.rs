//! `slurm-operator sbatch` on real-world job scripts (`tests/fixtures/sbatch/`): what each
//! becomes, that every option it cannot carry is reported (and fails the command unless
//! `--allow-unknown`), and, against the real local Slurm, that a converted script's options
//! reach slurmctld through every REST API version it serves.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use slurm_operator::cli::sbatch::convert;
use slurm_operator::controller::slurmjob::submit;
use slurm_operator::crd::SlurmJob;
use slurm_operator::slurm::{ApiVersion, SlurmClient};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sbatch")
        .join(name)
}

fn read(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap()
}

/// The spec as JSON without what every conversion keeps as given.
fn options_of(name: &str) -> (Value, Vec<(usize, String)>) {
    let c = convert(&read(name), "main").unwrap();
    assert_eq!(
        c.spec.script,
        read(name),
        "{name}: the script is kept as it is"
    );
    let mut spec = serde_json::to_value(&c.spec).unwrap();
    let map = spec.as_object_mut().unwrap();
    assert_eq!(map.remove("clusterName"), Some(json!("main")));
    map.remove("script");
    let unconverted = c
        .unconverted
        .iter()
        .map(|u| (u.origin.line().unwrap(), u.option.clone()))
        .collect();
    (spec, unconverted)
}

fn lines(list: &[(usize, &str)]) -> Vec<(usize, String)> {
    list.iter().map(|(l, o)| (*l, (*o).to_owned())).collect()
}

#[test]
fn an_array_sweep_with_output_patterns_converts_entirely() {
    let (spec, unconverted) = options_of("array_sweep.sh");
    assert_eq!(unconverted, lines(&[]));
    assert_eq!(
        spec,
        json!({
            "name": "sweep",
            "array": "1-100%4",
            "timeLimit": "2h30m",
            "ntasks": 1,
            "cpusPerTask": 2,
            "memoryPerCpu": "1500Mi",
            "standardOutput": "logs/%x_%A_%a.out",
            "standardError": "logs/%x_%A_%a.err",
            "extraOptions": {"mail_type": ["END", "FAIL"], "mail_user": "alice@example.org"},
        })
    );
}

/// Relative output files resolve under the job's working directory, which is /tmp without an
/// absolute --chdir (not where sbatch ran); an --export list leaves out the login environment
/// sbatch adds: reported, not refused.
#[test]
fn relative_output_files_are_reported_unless_the_script_gives_a_directory() {
    for (name, want) in [
        (
            "array_sweep.sh",
            &[
                (11, "--output=logs/%x_%A_%a.out"),
                (12, "--error=logs/%x_%A_%a.err"),
            ][..],
        ),
        ("pipeline_step.sh", &[(8, "--output=post-%j.log")]),
        (
            "short_options.sh",
            &[(5, "-o %x-%j.out"), (5, "-e %x-%j.err")],
        ),
        // Absolute --chdir, absolute output, no output option; its --export leaves out the
        // login environment sbatch would add.
        ("mpi_layout.sh", &[]),
        (
            "pytorch_ddp.sh",
            &[(15, "--export=NONE,NCCL_DEBUG=INFO,OMP_NUM_THREADS=12")],
        ),
        ("gpu_per_task.sh", &[]),
    ] {
        let c = convert(&read(name), "main").unwrap();
        let got: Vec<_> = c
            .caveats
            .iter()
            .map(|c| (c.origin.line().unwrap(), c.option.clone()))
            .collect();
        assert_eq!(got, lines(want), "{name}");
    }
    // The command goes on (exit 0), with each on stderr.
    let (code, stdout, stderr) = sbatch(&[
        "--cluster",
        "main",
        fixture("array_sweep.sh").to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("standardOutput: logs/%x_%A_%a.out"),
        "{stdout}"
    );
    for line in [
        "warning: ",
        "array_sweep.sh: line 11: --output=logs/%x_%A_%a.out: is relative to the job's working \
         directory, which without an absolute --chdir is /tmp on the Slurm nodes",
        "array_sweep.sh: line 12: --error=logs/%x_%A_%a.err: ",
    ] {
        assert!(stderr.contains(line), "{line} missing in:\n{stderr}");
    }
}

#[test]
fn a_multi_node_gpu_training_job() {
    let (spec, unconverted) = options_of("pytorch_ddp.sh");
    assert_eq!(unconverted, lines(&[(16, "--signal=B:USR1@300")]));
    assert_eq!(
        spec,
        json!({
            "name": "llm-finetune",
            "partition": "gpu",
            "account": "ml-team",
            "qos": "high",
            "nodes": "2",
            "tasksPerNode": 4,
            "gpusPerNode": "a100:4",
            "cpusPerTask": 12,
            "memoryPerNode": "480Gi",
            "exclusive": "node",
            "constraints": "a100&nvlink",
            "timeLimit": "48h",
            "standardOutput": "/shared/ml/logs/%x-%j.out",
            "environment": {"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "12"},
            "extraOptions": {"requeue": true},
        })
    );
}

#[test]
fn an_mpi_task_layout() {
    let (spec, unconverted) = options_of("mpi_layout.sh");
    assert_eq!(
        unconverted,
        lines(&[
            (11, "--hint=nomultithread"),
            (12, "--distribution=block:block")
        ])
    );
    assert_eq!(
        spec,
        json!({
            "nodes": "4",
            "ntasks": 128,
            "tasksPerNode": 32,
            "cpusPerTask": 1,
            "memoryPerCpu": "2Gi",
            "timeLimit": "12h",
            "partition": "compute",
            "account": "proj042",
            "exclusive": "user",
            "workingDirectory": "/scratch/proj042/run7",
        })
    );
}

#[test]
fn gpus_per_task_with_other_resources() {
    let (spec, unconverted) = options_of("gpu_per_task.sh");
    assert_eq!(unconverted, lines(&[]));
    assert_eq!(
        spec,
        json!({
            "name": "inference",
            "nodes": "1",
            "ntasks": 4,
            "gpusPerTask": "1",
            "tresPerTask": "cpu=8",
            "memoryPerNode": "64Gi",
            "timeLimit": "45m",
            "gres": "nvme:1",
        })
    );
}

/// A pipeline step: its dependency names a Slurm job id, its environment is the submitter's,
/// its comment is the operator's, `--parsable` is for the sbatch command: each is reported.
/// The `#SBATCH` line after the first command is not an option at all, as for sbatch.
#[test]
fn a_pipeline_step_reports_what_a_slurmjob_cannot_carry() {
    let (spec, unconverted) = options_of("pipeline_step.sh");
    assert_eq!(
        unconverted,
        lines(&[
            (5, "--dependency=afterok:41234"),
            (6, "--kill-on-invalid-dep=yes"),
            (9, "--export=ALL"),
            (10, "--comment=pipeline 2024-06"),
            (11, "--parsable"),
        ])
    );
    assert_eq!(
        spec,
        json!({"name": "postprocess", "timeLimit": "15m", "standardOutput": "post-%j.log"})
    );
}

#[test]
fn short_options_grouped_and_attached() {
    let (spec, unconverted) = options_of("short_options.sh");
    assert_eq!(unconverted, lines(&[]));
    assert_eq!(
        spec,
        json!({
            "name": "short",
            "partition": "debug",
            "account": "root",
            "nodes": "1",
            "ntasks": 2,
            "cpusPerTask": 1,
            "timeLimit": "5m",
            "standardOutput": "%x-%j.out",
            "standardError": "%x-%j.err",
            "suspend": true,
        })
    );
}

fn sbatch(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_slurm-operator"))
        .arg("sbatch")
        .args(args)
        .env_remove("SLURM_OPERATOR_CLUSTER")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// A reader that stops early (`slurm-operator crd | head -1`) ends the command quietly with
/// exit 0, as `logs` does: Rust ignores SIGPIPE, and `print!` panicked there (exit 101).
#[test]
fn a_reader_that_stops_early_ends_the_command_quietly() {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_slurm-operator"))
        .arg("crd")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read a little, as `head -1` does, then go away: the CRDs (hundreds of KiB) fill the pipe
    // long before the command is done writing them.
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 64];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(String::from_utf8_lossy(&first).contains("apiVersion"));
}

/// `sbatch --apply` that cannot reach the API server says so with its own exit code (125: try
/// again), not the usage error's 2, and says the SlurmJob may have been made.
#[test]
fn an_api_server_out_of_reach_is_not_a_usage_error() {
    // A port nothing listens on: every connection is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster:\n    server: \
             http://127.0.0.1:{port}\nusers:\n- name: gone\n  user: {{}}\ncontexts:\n- name: \
             gone\n  context:\n    cluster: gone\n    user: gone\n    namespace: team-a\n\
             current-context: gone\n"
        ),
    )
    .unwrap();
    let sweep = fixture("array_sweep.sh");
    let out = Command::new(env!("CARGO_BIN_EXE_slurm-operator"))
        .args(["sbatch", "--apply", "--cluster", "main"])
        .arg(&sweep)
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("SLURM_OPERATOR_CLUSTER")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("cannot create the SlurmJob")
            && stderr.contains("kubectl get slurmjob sweep -n team-a"),
        "{stderr}"
    );
}

#[test]
fn the_command_fails_on_unconverted_options_unless_allowed() {
    let script = fixture("pipeline_step.sh");
    let script = script.to_str().unwrap();
    let (code, stdout, stderr) = sbatch(&["--cluster", "main", script]);
    assert_eq!(code, Some(3), "{stderr}");
    assert_eq!(stdout, "", "nothing to apply by mistake");
    for option in [
        "line 5: --dependency=afterok:41234: ",
        "line 6: --kill-on-invalid-dep=yes: ",
        "line 9: --export=ALL: ",
        "line 10: --comment=pipeline 2024-06: ",
        "line 11: --parsable: ",
    ] {
        assert!(stderr.contains(option), "{option} missing in:\n{stderr}");
    }
    assert!(
        stderr.contains("5 #SBATCH option(s) not converted"),
        "{stderr}"
    );

    let (code, stdout, stderr) = sbatch(&[
        "-n",
        "team-a",
        "--cluster",
        "main",
        "--allow-unknown",
        "--depends-on",
        "preprocess:afterany",
        script,
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("line 5: --dependency"),
        "still listed: {stderr}"
    );
    let job: SlurmJob = serde_yaml_ng::from_str(&stdout).unwrap();
    assert_eq!(job.metadata.name.as_deref(), Some("postprocess"));
    assert_eq!(job.metadata.namespace.as_deref(), Some("team-a"));
    assert_eq!(job.spec.cluster_name, "main");
    assert_eq!(job.spec.depends_on.len(), 1);
    assert_eq!(job.spec.depends_on[0].name, "preprocess");
    assert_eq!(job.spec.depends_on[0].type_.as_str(), "afterany");
    assert_eq!(job.spec.script, read("pipeline_step.sh"));
    assert!(
        stdout.starts_with("apiVersion: slurm.rs/v1alpha1\nkind: SlurmJob\n"),
        "{stdout}"
    );
    assert!(!stdout.contains("status"), "{stdout}");

    // Fully converted: no flag needed; the name comes from the file without a job name.
    let (code, stdout, stderr) = sbatch(&[
        "--cluster",
        "main",
        fixture("mpi_layout.sh").to_str().unwrap(),
        "--allow-unknown",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let job: SlurmJob = serde_yaml_ng::from_str(&stdout).unwrap();
    assert_eq!(job.metadata.name.as_deref(), Some("mpi-layout"));
    let (code, _, stderr) = sbatch(&[
        "--cluster",
        "main",
        fixture("gpu_per_task.sh").to_str().unwrap(),
    ]);
    assert_eq!((code, stderr.as_str()), (Some(0), ""));

    // Usage errors: no cluster, no such file, not a script.
    let (code, _, stderr) = sbatch(&[fixture("gpu_per_task.sh").to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--cluster NAME is required"), "{stderr}");
    let (code, _, stderr) = sbatch(&["--cluster", "main", "/nonexistent/job.sh"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("/nonexistent/job.sh"), "{stderr}");
    let (code, _, stderr) = sbatch(&["--cluster", "main", fixture("README.md").to_str().unwrap()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("interpreter line"), "{stderr}");
}

/// sbatch's own options on the command line, after `--` (our `-n` is the namespace, sbatch's
/// the task count): they win over the script's `#SBATCH` lines, as in sbatch; what they cannot
/// carry is reported as from the command line; arguments for the script are refused.
#[test]
fn sbatch_options_on_the_command_line() {
    let short = fixture("short_options.sh");
    let short = short.to_str().unwrap();
    // The script says -p debug -n2 -t 5.
    let (code, stdout, stderr) = sbatch(&[
        "-n",
        "team-a",
        "--cluster",
        "main",
        "--",
        "-p",
        "gpu",
        "-n",
        "4",
        "-t",
        "10",
        short,
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let job: SlurmJob = serde_yaml_ng::from_str(&stdout).unwrap();
    assert_eq!(job.metadata.name.as_deref(), Some("short"));
    assert_eq!(job.metadata.namespace.as_deref(), Some("team-a"));
    assert_eq!(job.spec.partition.as_deref(), Some("gpu"));
    assert_eq!(job.spec.ntasks, Some(4));
    assert!(stdout.contains("\n  timeLimit: 10m\n"), "{stdout}");
    assert_eq!(
        job.spec.account.as_deref(),
        Some("root"),
        "the script's rest"
    );
    assert_eq!(job.spec.script, read("short_options.sh"));

    // The script before `--`, only options after it: the same.
    let (code, stdout, stderr) = sbatch(&["--cluster", "main", short, "--", "-t", "10"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("\n  timeLimit: 10m\n"), "{stdout}");

    // An option the SlurmJob cannot carry: reported from the command line, exit 3.
    let (code, stdout, stderr) = sbatch(&[
        "--cluster",
        "main",
        "--",
        "--signal=B:USR1@300",
        "-t",
        "10",
        short,
    ]);
    assert_eq!(code, Some(3), "{stderr}");
    assert_eq!(stdout, "");
    assert!(
        stderr.contains("warning: command line: --signal=B:USR1@300: has no SlurmJob field"),
        "{stderr}"
    );
    assert!(
        stderr.contains("error: 1 sbatch option(s) not converted (1 on the command line)"),
        "{stderr}"
    );

    // Usage errors (2): arguments for the script, the script twice, no script.
    for (args, want) in [
        (
            &["--", "-t", "10", short, "input.dat"][..],
            "a SlurmJob has no field for a script's arguments",
        ),
        (
            &[short, "--", "-t", "10", short],
            "the script is given before --",
        ),
        (&["--", "-t", "10"], "no script"),
        // Refused by sbatch: said as such, not as a script `100` with arguments.
        (
            &["--", "--mem-per", "100", short],
            "command line: --mem-per: is an ambiguous abbreviation of several sbatch options",
        ),
        (
            &["--", "--no-such-option", short],
            "command line: --no-such-option: is not an sbatch option",
        ),
        (&["--", "--wrap", "echo hi"], "--wrap has no SlurmJob form"),
    ] {
        let mut all = vec!["--cluster", "main"];
        all.extend(args);
        let (code, stdout, stderr) = sbatch(&all);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?}");
        assert!(
            stderr.contains(want),
            "{args:?}: {want} missing in:\n{stderr}"
        );
    }
}

/// `#SBATCHX` makes sbatch refuse the script ("Invalid directive"): reported, exit 3. DOS line
/// breaks make it refuse the script too: a usage error naming the line.
#[test]
fn scripts_sbatch_refuses_are_not_converted() {
    let dir = tempfile::tempdir().unwrap();
    let glued = dir.path().join("glued.sh");
    std::fs::write(
        &glued,
        "#!/bin/bash\n#SBATCH--time=7\n#SBATCHX --job-name=weird\ntrue\n",
    )
    .unwrap();
    let (code, stdout, stderr) = sbatch(&["--cluster", "main", glued.to_str().unwrap()]);
    assert_eq!(code, Some(3), "{stderr}");
    assert_eq!(stdout, "");
    assert!(
        stderr.contains("glued.sh: line 3: X: is not an option"),
        "{stderr}"
    );
    let (code, stdout, stderr) = sbatch(&[
        "--cluster",
        "main",
        "--allow-unknown",
        glued.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("\n  timeLimit: 7m\n"), "{stdout}");

    let dos = dir.path().join("dos.sh");
    std::fs::write(&dos, "#!/bin/bash\r\n#SBATCH -t 5\r\ntrue\r\n").unwrap();
    let (code, stdout, stderr) = sbatch(&["--cluster", "main", dos.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("dos.sh: line 1 ends in \\r\\n"), "{stderr}");
    assert!(stderr.contains("dos2unix"), "{stderr}");
}

/// The job as slurmctld holds it, in the oldest REST API's rendering (raw JSON: the facade's
/// `Job` does not carry the layout fields). Not the newest: Slurm 26.05's v0.0.45 renders
/// `shared` as `[]` whatever the job has (its v0.0.42 to v0.0.44 show what was submitted,
/// through any version).
async fn raw_job(slurm: &common::LocalSlurm, job_id: u32) -> Value {
    let oldest = slurm.data_parsers.first().unwrap();
    let body = slurm
        .get_raw(&format!("/slurm/{oldest}/job/{job_id}"))
        .await;
    let body: Value = serde_json::from_str(&body).unwrap();
    body["jobs"][0].clone()
}

/// A converted script through the operator's own mapping (`submit::request`) to the real
/// slurmctld, once per REST API version it serves; held, so it only waits, then cancelled.
#[tokio::test]
async fn a_converted_script_reaches_slurm_with_its_options() {
    let slurm = require_slurm!();
    let script = format!(
        "#!/bin/sh\n\
         #SBATCH --job-name={name}\n\
         #SBATCH -p {partition} -N1 --ntasks-per-node=1 -c 1\n\
         #SBATCH --mem-per-cpu=100M --time=1-00:30 --exclusive --hold\n\
         #SBATCH -o /tmp/%x-%j.out --export=NONE,STEP=convert\n\
         echo converted\n",
        name = common::unique("sbatch"),
        partition = slurm.partition,
    );
    let c = convert(&script, &slurm.cluster_name).unwrap();
    assert!(c.unconverted.is_empty(), "{:?}", c.unconverted);
    let request = submit::request(&c.spec, "converted", "slurm.rs/test", &[]).unwrap();
    assert!(!slurm.data_parsers.is_empty(), "no REST API version found");
    for version in &slurm.data_parsers {
        eprintln!("submitting through {version}");
        let version: ApiVersion = version.parse().unwrap();
        let config = slurm.config().with_api_version(Some(version));
        let client = SlurmClient::new(config, slurm.credentials()).unwrap();
        let submitted = client.submit_job(&request).await.unwrap();
        let job = raw_job(&slurm, submitted.job_id).await;
        client.cancel_job(submitted.job_id).await.unwrap();

        assert_eq!(job["name"], json!(c.spec.name), "{version}: {job}");
        assert_eq!(job["partition"], json!(slurm.partition), "{version}");
        assert_eq!(
            job["time_limit"]["number"],
            json!(24 * 60 + 30),
            "{version}: 1-00:30"
        );
        assert_eq!(job["tasks_per_node"]["number"], json!(1), "{version}");
        assert_eq!(job["cpus_per_task"]["number"], json!(1), "{version}");
        assert_eq!(job["memory_per_cpu"]["number"], json!(100), "{version}");
        assert_eq!(job["shared"], json!(["none"]), "{version}: --exclusive");
        assert_eq!(job["node_count"]["number"], json!(1), "{version}");
        // Held by the user, or as an admin's hold when the test's Slurm user is SlurmUser.
        let held = job["job_state"]
            .as_array()
            .unwrap()
            .contains(&json!("PENDING"))
            && [json!("JobHeldUser"), json!("JobHeldAdmin")].contains(&job["state_reason"]);
        assert!(held, "{version}: --hold: {job}");
        assert_eq!(
            job["standard_output"],
            json!(format!(
                "/tmp/{}-{}.out",
                c.spec.name.as_deref().unwrap(),
                submitted.job_id
            )),
            "{version}: the %x-%j pattern, expanded by Slurm"
        );
        // The facade reads the same limit back.
        let record = client.job(submitted.job_id).await.unwrap();
        assert_eq!(
            record[0].time_limit,
            Some(Duration::from_secs((24 * 60 + 30) * 60)),
            "{version}"
        );
    }
}

/// The kubectl-plugin commands against an API server: `sbatch --apply` creates the SlurmJob,
/// `wait` follows it to its end and exits with its exit code, `logs` says where output without
/// `spec.output` is, and with it waits for the streamer Pod and prints its output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_wait_and_logs_against_an_api_server() {
    use fake_apiserver::FakeApiServer;
    use kube::api::{Api, Patch, PatchParams};

    let server = FakeApiServer::start_with_crds(slurm_operator::crd::all()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.write_kubeconfig(dir.path());
    let run = |args: Vec<String>| {
        let kubeconfig = kubeconfig.clone();
        async move {
            let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_slurm-operator"))
                .args(&args)
                .env("KUBECONFIG", kubeconfig)
                .output()
                .await
                .unwrap();
            (
                out.status.code(),
                String::from_utf8(out.stdout).unwrap(),
                String::from_utf8(out.stderr).unwrap(),
            )
        }
    };
    let args = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    // `logs <name>` ends at once (not after its 5-minute Pod timeout) with `code`, saying `text`.
    let said_at_once = |name: &'static str, code: i32, text: &'static str| {
        let run = &run;
        async move {
            let started = std::time::Instant::now();
            let (exit, _, stderr) = run(args(&["logs", name, "-n", "team-a"])).await;
            assert_eq!(exit, Some(code), "{stderr}");
            assert!(stderr.contains(text), "{stderr}");
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "not after the Pod timeout: {text}"
            );
        }
    };
    let sweep = fixture("array_sweep.sh");
    let sweep = sweep.to_str().unwrap();

    let (code, stdout, stderr) = run(args(&[
        "sbatch",
        "--apply",
        "-n",
        "team-a",
        "--cluster",
        "main",
        sweep,
    ]))
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        "slurmjob.slurm.rs/sweep created in namespace team-a\n"
    );
    let jobs: Api<SlurmJob> = Api::namespaced(server.client(), "team-a");
    let created = jobs.get("sweep").await.unwrap();
    assert_eq!(created.spec.array.as_deref(), Some("1-100%4"));
    assert_eq!(created.spec.script, read("array_sweep.sh"));
    // Without -n: the kubeconfig's namespace.
    let (code, stdout, stderr) = run(args(&[
        "sbatch",
        "--apply",
        "--cluster",
        "main",
        "--name",
        "sweep-2",
        sweep,
    ]))
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("in namespace default"), "{stdout}");
    // Created once: a second apply of the same name is refused, not overwritten.
    let (code, _, stderr) = run(args(&[
        "sbatch",
        "--apply",
        "-n",
        "team-a",
        "--cluster",
        "main",
        sweep,
    ]))
    .await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("cannot create the SlurmJob"), "{stderr}");
    // With what to do about it.
    for advice in [
        "slurmjob team-a/sweep already exists",
        "--name",
        "kubectl delete slurmjob sweep -n team-a",
        "kubectl edit slurmjob sweep -n team-a",
    ] {
        assert!(stderr.contains(advice), "{advice} missing in: {stderr}");
    }

    // Not finished: wait gives up after its timeout.
    let (code, _, stderr) = run(args(&["wait", "sweep", "-n", "team-a", "--timeout", "1s"])).await;
    assert_eq!(code, Some(124), "{stderr}");

    // Failed with exit code 3 while wait waits: wait exits 3.
    let waiting = tokio::spawn(run(args(&["wait", "sweep", "-n", "team-a"])));
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!waiting.is_finished(), "wait returned before the job ended");
    let failed = json!({"status": {
        "phase": "Failed", "jobId": 77, "exitCode": 3, "observedGeneration": 1,
        "conditions": [{"type": "Failed", "status": "True", "reason": "Failed", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }});
    jobs.patch_status("sweep", &PatchParams::default(), &Patch::Merge(&failed))
        .await
        .unwrap();
    let (code, _, stderr) = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("Failed, Slurm job 77, exit code 3"),
        "{stderr}"
    );

    // Complete: 0 at once.
    let complete = json!({"status": {
        "phase": "Completed", "exitCode": 0, "observedGeneration": 1,
        "conditions": [{"type": "Complete", "status": "True", "reason": "Completed", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }});
    Api::<SlurmJob>::namespaced(server.client(), "default")
        .patch_status("sweep-2", &PatchParams::default(), &Patch::Merge(&complete))
        .await
        .unwrap();
    let (code, _, stderr) = run(args(&["wait", "sweep-2"])).await;
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, stderr) = run(args(&["wait", "no-such-job"])).await;
    assert_eq!(code, Some(2), "{stderr}");

    // Cannot be submitted: Stalled for the current spec, which never ends in Complete or
    // Failed; wait says why and exits 126 instead of waiting for ever.
    jobs.patch(
        "refused",
        &PatchParams::apply("test"),
        &Patch::Apply(json!({
            "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
            "metadata": {"name": "refused"},
            "spec": {"clusterName": "main", "script": "#!/bin/sh\ntrue\n"},
        })),
    )
    .await
    .unwrap();
    let stalled = json!({"status": {
        "phase": "Pending", "observedGeneration": 1, "rejectedGeneration": 1,
        "conditions": [{"type": "Stalled", "status": "True", "reason": "SubmitRejected",
                        "message": "Slurm refused the job of generation 1: Invalid partition",
                        "observedGeneration": 1,
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }});
    jobs.patch_status("refused", &PatchParams::default(), &Patch::Merge(&stalled))
        .await
        .unwrap();
    let (code, _, stderr) = run(args(&[
        "wait",
        "refused",
        "-n",
        "team-a",
        "--timeout",
        "20s",
    ]))
    .await;
    assert_eq!(code, Some(126), "{stderr}");
    assert!(
        stderr.contains("cannot be submitted: SubmitRejected: Slurm refused the job of generation 1: Invalid partition"),
        "{stderr}"
    );

    // Without spec.output, logs says where the output is.
    let (code, _, stderr) = run(args(&["logs", "sweep", "-n", "team-a"])).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("has no spec.output") && stderr.contains("logs/%x_%A_%a.out"),
        "{stderr}"
    );

    // With spec.output but Stalled: no output will come, and logs says why at once (exit 126,
    // as wait), not after its 5 minute Pod timeout.
    jobs.patch(
        "refused-out",
        &PatchParams::apply("test"),
        &Patch::Apply(json!({
            "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
            "metadata": {"name": "refused-out"},
            "spec": {"clusterName": "main", "script": "#!/bin/sh\ntrue\n",
                     "output": {"volume": "shared", "slurmPath": "/shared"}},
        })),
    )
    .await
    .unwrap();
    jobs.patch_status(
        "refused-out",
        &PatchParams::default(),
        &Patch::Merge(&stalled),
    )
    .await
    .unwrap();
    said_at_once(
        "refused-out",
        126,
        "no output: it cannot be submitted: SubmitRejected: Slurm refused",
    )
    .await;

    // With spec.output: the streamer Pod the operator makes for it (created here, as the
    // operator would), and what it prints, as its container's log (the kubelet's part, which
    // the in-memory API server takes from the test).
    let apply_streamed = |script: &str| {
        let object = json!({
            "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
            "metadata": {"name": "streamed"},
            "spec": {
                "clusterName": "main", "script": script,
                "output": {"volume": "shared", "slurmPath": "/shared"},
            },
        });
        let jobs = jobs.clone();
        async move {
            jobs.patch(
                "streamed",
                &PatchParams::apply("test"),
                &Patch::Apply(object),
            )
            .await
            .unwrap();
        }
    };
    apply_streamed("#!/bin/sh\necho one\necho two\n").await;
    let streamed = jobs.get("streamed").await.unwrap();
    let pod = slurm_operator::controller::slurmjob::output::pod(
        &streamed,
        &slurm_operator::controller::slurmjob::output::run_output(
            streamed.spec.output.as_ref().unwrap(),
        ),
        77,
        "streamer",
        false,
    )
    .unwrap();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(server.client(), "team-a");
    pods.create(&Default::default(), &pod).await.unwrap();
    let generation = streamed.metadata.generation;
    // As the operator's submit records it: the run writes its output to claim `shared`.
    let job_id = |id: i64| {
        json!({"status": {
            "jobId": id, "observedGeneration": generation, "output": {"volume": "shared"},
        }})
    };
    let logs_within_1s = || args(&["logs", "streamed", "-n", "team-a", "--pod-timeout", "1s"]);
    // Re-run since: that Pod streams the earlier run, not the job the status names.
    jobs.patch_status(
        "streamed",
        &PatchParams::default(),
        &Patch::Merge(&job_id(78)),
    )
    .await
    .unwrap();
    let (code, _, stderr) = run(logs_within_1s()).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("the Pod there streams Slurm job 77, an earlier run"),
        "{stderr}"
    );
    // Queued in Slurm, no Pod yet (the operator makes it when the job starts): said at once.
    pods.delete("streamed", &Default::default()).await.unwrap();
    let queued = json!({"status": {"phase": "Submitted"}});
    jobs.patch_status("streamed", &PatchParams::default(), &Patch::Merge(&queued))
        .await
        .unwrap();
    said_at_once("streamed", 2, "waits in Slurm's queue").await;
    let not_queued = json!({"status": {"phase": "Pending"}});
    jobs.patch_status(
        "streamed",
        &PatchParams::default(),
        &Patch::Merge(&not_queued),
    )
    .await
    .unwrap();
    jobs.patch_status(
        "streamed",
        &PatchParams::default(),
        &Patch::Merge(&job_id(77)),
    )
    .await
    .unwrap();
    // A Pod of the name that nothing controls (an earlier SlurmJob's, orphaned): the operator
    // leaves it alone and makes no streamer, which logs says at once.
    let mut foreign = pod.clone();
    foreign.metadata.owner_references = None;
    pods.create(&Default::default(), &foreign).await.unwrap();
    said_at_once(
        "streamed",
        2,
        "a Pod named streamed is there and is not its output streamer",
    )
    .await;
    pods.delete("streamed", &Default::default()).await.unwrap();
    // A run submitted without `spec.output` (set since): its output stays on the Slurm nodes
    // whatever the spec says now, said at once.
    let without = json!({"status": {"output": null}});
    jobs.patch_status("streamed", &PatchParams::default(), &Patch::Merge(&without))
        .await
        .unwrap();
    said_at_once(
        "streamed",
        2,
        "its current run, Slurm job 77, was submitted without spec.output",
    )
    .await;
    pods.create(&Default::default(), &pod).await.unwrap();
    jobs.patch_status(
        "streamed",
        &PatchParams::default(),
        &Patch::Merge(&job_id(77)),
    )
    .await
    .unwrap();
    // Not started: logs waits for it, up to its --pod-timeout.
    let (code, _, stderr) = run(logs_within_1s()).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("did not start within 1s"), "{stderr}");
    assert!(!stderr.contains("earlier run"), "{stderr}");
    // Started, its container not yet: the API server's refusal is passed on.
    let running = json!({"status": {"phase": "Running"}});
    pods.patch_status("streamed", &PatchParams::default(), &Patch::Merge(&running))
        .await
        .unwrap();
    let (code, _, stderr) = run(args(&["logs", "streamed", "-n", "team-a"])).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot read the output") && stderr.contains("waiting to start"),
        "{stderr}"
    );
    // The output, line by line, with and without -f.
    server.set_pod_log("team-a", "streamed", "one\ntwo\n");
    let (code, stdout, stderr) = run(args(&["logs", "streamed", "-n", "team-a"])).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "one\ntwo\n");
    // Followed, a log that ends before the operator told the Pod its job ended was cut (the Pod
    // deleted, its node gone): said, with the "could not follow" exit code, not 0.
    let follow = || args(&["logs", "streamed", "-n", "team-a", "-f"]);
    let (code, stdout, stderr) = run(follow()).await;
    assert_eq!(code, Some(125), "{stderr}");
    assert_eq!(stdout, "one\ntwo\n");
    assert!(stderr.contains("log ended before the job did"), "{stderr}");
    pods.patch(
        "streamed",
        &PatchParams::default(),
        &Patch::Merge(slurm_operator::controller::slurmjob::output::told_patch()),
    )
    .await
    .unwrap();
    let (code, stdout, stderr) = run(follow()).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "one\ntwo\n");
    // Its job ended an hour ago and the Pod is gone: the operator creates none so long after
    // the end, which logs says at once (not "did not start within" its --pod-timeout).
    pods.delete("streamed", &Default::default()).await.unwrap();
    let ended = chrono::Utc::now() - chrono::TimeDelta::hours(1);
    let generation = jobs.get("streamed").await.unwrap().metadata.generation;
    jobs.patch_status(
        "streamed",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {
            "phase": "Completed", "endTime": ended.to_rfc3339(), "observedGeneration": generation,
        }})),
    )
    .await
    .unwrap();
    let (code, _, stderr) = run(args(&["logs", "streamed", "-n", "team-a"])).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("has no output Pod") && stderr.contains("PersistentVolumeClaim shared"),
        "{stderr}"
    );
    // Edited since (a re-run the operator has not taken up yet): its Pod will come, so logs
    // waits for it as before.
    apply_streamed("#!/bin/sh\necho three\n").await;
    let (code, _, stderr) = run(logs_within_1s()).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("did not start within 1s"), "{stderr}");
}

/// `--kubeconfig` and `--context` pick the API server and the namespace, as kubectl's flags of
/// those names do (kubectl passes none of its own flags to a plugin): here the kubeconfig's
/// current context points at nothing, and the `fake` context at the API server, namespace
/// `team-b`. `--kubeconfig` wins over `KUBECONFIG`; `--context` alone reads `KUBECONFIG`'s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_and_context_flags_choose_the_api_server_and_namespace() {
    use fake_apiserver::FakeApiServer;

    let server = FakeApiServer::start_with_crds(slurm_operator::crd::all()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n\
             - name: nowhere\n  cluster: {{server: 'http://127.0.0.1:1'}}\n\
             - name: fake\n  cluster: {{server: '{}'}}\n\
             users:\n- name: u\n  user: {{}}\ncontexts:\n\
             - name: nowhere\n  context: {{cluster: nowhere, user: u, namespace: team-a}}\n\
             - name: fake\n  context: {{cluster: fake, user: u, namespace: team-b}}\n\
             current-context: nowhere\n",
            server.url()
        ),
    )
    .unwrap();
    let kubeconfig = kubeconfig.to_str().unwrap().to_owned();
    // The command with `--kubeconfig` (unless `file` is None) and `--context` (unless None),
    // KUBECONFIG set to `env`.
    let run = |args: &[&str], file: Option<&str>, context: Option<&str>, env: &str| {
        let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        for (flag, value) in [("--kubeconfig", file), ("--context", context)] {
            if let Some(value) = value {
                all.extend([flag.to_owned(), value.to_owned()]);
            }
        }
        let env = env.to_owned();
        async move {
            let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_slurm-operator"))
                .args(&all)
                .env("KUBECONFIG", env)
                .output();
            let out = tokio::time::timeout(Duration::from_secs(60), out)
                .await
                .expect("the command ends")
                .unwrap();
            (
                out.status.code(),
                String::from_utf8(out.stdout).unwrap(),
                String::from_utf8(out.stderr).unwrap(),
            )
        }
    };
    let sweep = fixture("array_sweep.sh");
    let sweep = sweep.to_str().unwrap();
    let elsewhere = dir.path().join("no-such-config");
    let elsewhere = elsewhere.to_str().unwrap();

    let (code, stdout, stderr) = run(
        &["sbatch", "--apply", "--cluster", "main", sweep],
        Some(&kubeconfig),
        Some("fake"),
        elsewhere,
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        "slurmjob.slurm.rs/sweep created in namespace team-b\n"
    );
    let jobs: kube::Api<SlurmJob> = kube::Api::namespaced(server.client(), "team-b");
    assert!(jobs.get_opt("sweep").await.unwrap().is_some());

    // Found there (not finished: the timeout's 124, where a job not found is 2).
    let wait = ["wait", "sweep", "--timeout", "1s"];
    let (code, _, stderr) = run(&wait, Some(&kubeconfig), Some("fake"), elsewhere).await;
    assert_eq!(code, Some(124), "{stderr}");
    let (code, _, stderr) = run(&wait, None, Some("fake"), &kubeconfig).await;
    assert_eq!(
        code,
        Some(124),
        "--context with KUBECONFIG's file: {stderr}"
    );
    // The current context is used without --context: nothing answers there.
    let (code, stdout, stderr) = run(
        &[
            "sbatch",
            "--apply",
            "--cluster",
            "main",
            "--name",
            "other",
            sweep,
        ],
        Some(&kubeconfig),
        None,
        elsewhere,
    )
    .await;
    // Out of reach: not a usage error, a try-again (125).
    assert_eq!(code, Some(125), "{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("cannot create the SlurmJob"), "{stderr}");
    assert!(jobs.get_opt("other").await.unwrap().is_none());
    let (code, _, stderr) = run(
        &["wait", "sweep"],
        Some(&kubeconfig),
        Some("nope"),
        elsewhere,
    )
    .await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("the kubeconfig has no context \"nope\""),
        "{stderr}"
    );
}

/// Installed as a kubectl plugin (`docs/sbatch.md`): a `kubectl-slurm` link to the binary is
/// what `kubectl slurm sbatch ...` runs, with the same arguments.
#[test]
fn the_binary_works_as_the_kubectl_slurm_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("kubectl-slurm");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_slurm-operator"), &plugin).unwrap();
    let out = Command::new(&plugin)
        .args(["sbatch", "--cluster", "main"])
        .arg(fixture("short_options.sh"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let job: SlurmJob = serde_yaml_ng::from_slice(&out.stdout).unwrap();
    assert_eq!(job.metadata.name.as_deref(), Some("short"));
}

/// Why the converter exists: slurmrestd submits the script as it is and reads none of its
/// `#SBATCH` lines (`docs/sbatch.md`). If a Slurm release starts honouring them, this fails and
/// the docs should say so.
#[tokio::test]
async fn slurmrestd_ignores_sbatch_lines() {
    let slurm = require_slurm!();
    let client = slurm.client();
    let mut request = slurm.job(
        &common::unique("ignored"),
        "#SBATCH --time=7\n#SBATCH --comment=from-the-script\ntrue",
    );
    // `job` puts the body after `#!/bin/sh`: the lines are directives as sbatch reads them.
    assert!(request.script.starts_with("#!/bin/sh\n#SBATCH --time=7\n"));
    request.hold = true;
    let submitted = client.submit_job(&request).await.unwrap();
    let record = client.job(submitted.job_id).await.unwrap();
    client.cancel_job(submitted.job_id).await.unwrap();
    assert_eq!(record[0].comment, None, "{record:?}");
    assert_ne!(
        record[0].time_limit,
        Some(Duration::from_secs(7 * 60)),
        "{record:?}"
    );
}
