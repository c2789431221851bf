//! `slurm-operator job run`: a SlurmJob manifest through the operator's submit/mirror/cancel core
//! against the real local Slurm, as the README's main command runs it.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use base64::Engine as _;

/// A SlurmCluster manifest with its JWT-key Secret for the local Slurm.
fn cluster_manifest(slurm: &common::LocalSlurm, dir: &std::path::Path) -> std::path::PathBuf {
    cluster_manifest_at(slurm, &slurm.url, dir)
}

/// [`cluster_manifest`] with another slurmrestd URL (a proxy to the local one).
fn cluster_manifest_at(
    slurm: &common::LocalSlurm,
    endpoint: &str,
    dir: &std::path::Path,
) -> std::path::PathBuf {
    let key = base64::engine::general_purpose::STANDARD.encode(slurm.key());
    let path = dir.join("cluster.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: jwt, labels: {{slurm.rs/credentials: \"true\"}}}}\n\
             data: {{jwt_hs256.key: {key}}}\n---\n\
             apiVersion: slurm.rs/v1alpha1\nkind: SlurmCluster\nmetadata: {{name: local}}\n\
             spec:\n  endpoint: {}\n  allowInsecureHttp: true\n  auth: {{jwt: {{keySecretRef: {{name: jwt}}, user: {}}}}}\n",
            endpoint, slurm.user
        ),
    )
    .unwrap();
    path
}

fn job_manifest(dir: &std::path::Path, name: &str, script_body: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.yaml"));
    let script: String = format!("#!/bin/sh\n{script_body}\n")
        .lines()
        .map(|l| format!("    {l}\n"))
        .collect();
    std::fs::write(
        &path,
        format!(
            "apiVersion: slurm.rs/v1alpha1\nkind: SlurmJob\nmetadata: {{name: {name}}}\n\
             spec:\n  clusterName: local\n  script: |\n{script}"
        ),
    )
    .unwrap();
    path
}

fn job_run(cluster: &std::path::Path, job: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_slurm-operator"))
        .args(["job", "run", "--poll", "200ms", "--cluster"])
        .arg(cluster)
        .arg("-f")
        .arg(job)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_job_runs_to_completion_with_its_phases_printed() {
    let slurm = require_slurm!();
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster_manifest(&slurm, dir.path());
    let out = job_run(
        &cluster,
        &job_manifest(dir.path(), "ok", "echo hi; sleep 1"),
    )
    .wait_with_output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("ok: Submitted job "), "{stdout}");
    assert!(stdout.contains("ok: Completed job "), "{stdout}");
    assert!(
        stdout.contains("phase: Completed") && stdout.contains("exitCode: 0"),
        "{stdout}"
    );
}

#[test]
fn exit_3_fails_with_exit_code_3() {
    let slurm = require_slurm!();
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster_manifest(&slurm, dir.path());
    let out = job_run(&cluster, &job_manifest(dir.path(), "three", "exit 3"))
        .wait_with_output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("phase: Failed") && stdout.contains("exitCode: 3"),
        "{stdout}"
    );
    assert!(stdout.contains("stateReason: NonZeroExitCode"), "{stdout}");
}

#[test]
fn ctrl_c_cancels_the_running_job() {
    let slurm = require_slurm!();
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster_manifest(&slurm, dir.path());
    let mut child = job_run(&cluster, &job_manifest(dir.path(), "long", "sleep 300"));
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let started = Instant::now();
    let mut seen = Vec::new();
    loop {
        let line = lines
            .next()
            .expect("job run ended before the job ran")
            .unwrap();
        seen.push(line.clone());
        if line.starts_with("long: Running") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never running: {seen:?}"
        );
    }
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let exit = child.wait().unwrap();
    let text = rest.join("\n");
    assert_eq!(exit.code(), Some(1), "{text}");
    assert!(text.contains("cancel requested"), "{text}");
    assert!(text.contains("phase: Cancelled"), "{text}");
}

/// Reading the job's state fails for good (slurmrestd refuses the credentials, 403) after the
/// submit: `job run` ends with the error and names the job it leaves running, which Slurm
/// still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lasting_poll_error_names_the_job_left_behind() {
    let slurm = require_slurm!();
    slurm_operator::tls::install_crypto_provider();
    let is_job_read = |request: &axum::extract::Request| {
        request.method() == axum::http::Method::GET && request.uri().path().contains("/job/")
    };
    let (proxy, refusing) =
        common::proxy::refusing_with(slurm.url.clone(), is_job_read, StatusCode::FORBIDDEN).await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster_manifest_at(&slurm, &proxy, dir.path());
    let mut child = job_run(&cluster, &job_manifest(dir.path(), "left", "sleep 300"));
    let stdout = child.stdout.take().unwrap();
    let job_id: u32 = tokio::task::spawn_blocking(move || {
        let line = BufReader::new(stdout).lines().next().unwrap().unwrap();
        let rest = line.strip_prefix("left: Submitted job ").expect(&line);
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().expect(&line)
    })
    .await
    .unwrap();
    refusing.store(true, std::sync::atomic::Ordering::SeqCst);
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let client =
        slurm_operator::slurm::SlurmClient::new(slurm.config(), slurm.credentials()).unwrap();
    let still = client.job(job_id).await;
    client.cancel_job(job_id).await.unwrap();
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "left: cannot follow Slurm job {job_id} any more (it is left as it is; `scancel {job_id}`"
        )),
        "{stderr}"
    );
    let records = still.unwrap();
    assert!(
        records.iter().all(|r| !r.state.is_final()),
        "the job was left as it was: {records:?}"
    );
}

/// The cancel fails (slurmrestd refuses it, 403): the first Ctrl-C says so, the second stops
/// following the job at once (exit 130) and names the job it leaves, which runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_ctrl_c_stops_following_a_job_whose_cancel_failed() {
    second_ctrl_c(false).await;
}

/// The cancel hangs (slurmrestd never answers it): the second Ctrl-C does not wait for it to
/// time out (no "cancel failed" before it leaves).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_ctrl_c_does_not_wait_for_a_hanging_cancel() {
    second_ctrl_c(true).await;
}

async fn second_ctrl_c(hang: bool) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let slurm = require_slurm!();
    slurm_operator::tls::install_crypto_provider();
    // Job cancels refused (403) or never answered; everything else passed on.
    let asked = Arc::new(AtomicBool::new(false));
    let app = {
        let (upstream, asked, http) = (slurm.url.clone(), asked.clone(), reqwest::Client::new());
        axum::Router::new().fallback(move |request: axum::extract::Request| {
            let (upstream, asked, http) = (upstream.clone(), asked.clone(), http.clone());
            async move {
                let cancel = request.method() == axum::http::Method::DELETE
                    && request.uri().path().contains("/job/");
                if !cancel {
                    return common::proxy::forward(&http, &upstream, request).await;
                }
                asked.store(true, Ordering::SeqCst);
                if hang {
                    std::future::pending::<()>().await;
                }
                axum::response::IntoResponse::into_response((
                    StatusCode::FORBIDDEN,
                    "refused by the test proxy",
                ))
            }
        })
    };
    let proxy = common::proxy::serve(app).await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster_manifest_at(&slurm, &proxy, dir.path());
    let mut child = job_run(&cluster, &job_manifest(dir.path(), "stuck", "sleep 300"));
    let pid = child.id().to_string();
    let stdout = child.stdout.take().unwrap();
    let (lines, errors) = std::sync::mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in stderr.lines() {
            let _ = lines.send(line.unwrap());
        }
    });
    let job_id: u32 = tokio::task::spawn_blocking(move || {
        let mut stdout = BufReader::new(stdout).lines();
        let line = stdout.next().unwrap().unwrap();
        // Read on: the runner prints its phases there.
        std::thread::spawn(move || stdout.for_each(drop));
        let rest = line.strip_prefix("stuck: Submitted job ").expect(&line);
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().expect(&line)
    })
    .await
    .unwrap();
    let interrupt = || {
        let status = Command::new("kill").args(["-INT", &pid]).status().unwrap();
        assert!(status.success());
    };
    interrupt();
    // The first Ctrl-C's cancel: refused (said on stderr), or hanging at the proxy.
    let mut seen = Vec::new();
    let (asked_now, errors) = (asked.clone(), errors);
    let (ready, mut seen, errors) = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if hang && asked_now.load(Ordering::SeqCst) {
                return (true, seen, errors);
            }
            if let Ok(line) = errors.recv_timeout(Duration::from_millis(50)) {
                let failed = line.contains("stuck: cancel failed");
                seen.push(line);
                if failed && !hang {
                    return (true, seen, errors);
                }
            }
        }
        (false, seen, errors)
    })
    .await
    .unwrap();
    if ready {
        interrupt();
    }
    let exit = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut done = child.try_wait().unwrap();
        while done.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            done = child.try_wait().unwrap();
        }
        if done.is_none() {
            let _ = child.kill();
        }
        done
    })
    .await
    .unwrap();
    // The rest of stderr: the child is gone, its pipe closes.
    while let Ok(line) = errors.recv_timeout(Duration::from_secs(5)) {
        seen.push(line);
    }
    let client =
        slurm_operator::slurm::SlurmClient::new(slurm.config(), slurm.credentials()).unwrap();
    let still = client.job(job_id).await;
    client.cancel_job(job_id).await.unwrap();
    let text = seen.join("\n");
    assert!(ready, "hang {hang}: the first cancel never came: {text}");
    assert_eq!(
        text.contains("stuck: cancel failed"),
        !hang,
        "hang {hang}: {text}"
    );
    assert_eq!(
        exit.and_then(|e| e.code()),
        Some(130),
        "hang {hang}: {text}"
    );
    assert!(
        text.contains(&format!(
            "stuck: stopped following Slurm job {job_id} (it is left as it is; `scancel {job_id}`"
        )),
        "hang {hang}: {text}"
    );
    let records = still.unwrap();
    assert!(
        records.iter().all(|r| !r.state.is_final()),
        "the job runs on: {records:?}"
    );
}

#[test]
fn bad_manifests_are_refused_before_anything_is_submitted() {
    let slurm = require_slurm!();
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster_manifest(&slurm, dir.path());
    let no_shebang = dir.path().join("bad.yaml");
    std::fs::write(
        &no_shebang,
        "apiVersion: slurm.rs/v1alpha1\nkind: SlurmJob\nmetadata: {name: bad}\nspec: {clusterName: local, script: 'echo hi'}\n",
    )
    .unwrap();
    let out = job_run(&cluster, &no_shebang).wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("#!"), "{stderr}");

    let other_cluster = dir.path().join("other.yaml");
    std::fs::write(
        &other_cluster,
        "apiVersion: slurm.rs/v1alpha1\nkind: SlurmJob\nmetadata: {name: x}\nspec: {clusterName: elsewhere, script: \"#!/bin/sh\"}\n",
    )
    .unwrap();
    let out = job_run(&cluster, &other_cluster)
        .wait_with_output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no SlurmCluster named \"elsewhere\""),
        "{stderr}"
    );
}
