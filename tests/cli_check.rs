//! `slurm-operator check` as a user runs it, against the real local Slurm.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::{Command, Output};

fn check(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_slurm-operator"))
        .arg("check")
        .args(args)
        .env_remove("SLURM_REST_URL")
        .env_remove("SLURM_JWT_KEY")
        .env_remove("SLURM_USER")
        .env_remove("SLURM_JWT")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn check_prints_the_cluster_with_a_minted_token() {
    let slurm = require_slurm!();
    let key = slurm.key_path.to_str().unwrap();
    let out = check(&["--url", &slurm.url, "--jwt-key", key, "--user", &slurm.user]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!("cluster:     {}", slurm.cluster_name)),
        "{stdout}"
    );
    // The newest version this slurmrestd serves (24.11: v0.0.42; 26.05: v0.0.45).
    let newest = slurm.data_parsers.last().unwrap();
    assert!(
        stdout.contains(&format!("api:         {newest} (data_parser/{newest})")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("partitions:  {} (UP", slurm.partition)),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("nodes:") && l.contains("total")),
        "{stdout}"
    );
    let release = stdout
        .lines()
        .find_map(|l| l.strip_prefix("slurm:"))
        .unwrap()
        .trim()
        .to_owned();
    assert!(
        slurm.release.ends_with(&release),
        "{release} vs {}",
        slurm.release
    );
}

#[test]
fn check_fails_with_one_line_and_an_exit_code_per_reason() {
    let slurm = require_slurm!();
    let key = slurm.key_path.to_str().unwrap();
    let unserved = format!("{}/no-such-api", slurm.url);
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["--url", &slurm.url, "--token", "garbage"],
            5,
            "rejected the credentials",
        ),
        (
            &["--url", "http://127.0.0.1:9", "--token", "x"],
            3,
            "cannot reach slurmrestd",
        ),
        (
            &["--url", "not a url", "--token", "x"],
            2,
            "invalid slurmrestd endpoint",
        ),
        (
            &[
                "--url",
                &slurm.url,
                "--jwt-key",
                "/nonexistent/key",
                "--user",
                "slurm",
            ],
            2,
            "cannot read JWT key",
        ),
        (&["--url", &slurm.url], 2, "give --jwt-key"),
        (
            // The real slurmrestd's 404 for a path it does not serve (as for an API version it
            // does not serve): unsupported, exit 6.
            &["--url", &unserved, "--jwt-key", key, "--user", &slurm.user],
            6,
            "does not serve a supported API",
        ),
    ];
    for (args, code, message) in cases {
        let out = check(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(out.stdout.is_empty());
    }
    // HTTPS against the plain-HTTP slurmrestd: a TLS failure.
    let https = slurm.url.replacen("http://", "https://", 1);
    let out = check(&["--url", &https, "--token", "x"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
}

/// A flag on the command line wins over the environment: `--jwt-key` with a (bad) `SLURM_JWT`
/// exported, as it is after `scontrol token`, and `--token` with `SLURM_JWT_KEY` pointing at a
/// wrong key. Without flags the environment is used, and both variables at once is a usage error
/// that names them.
#[test]
fn flags_win_over_the_environment() {
    let slurm = require_slurm!();
    let key = slurm.key_path.to_str().unwrap();
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_slurm-operator"));
        command
            .arg("check")
            .args(args)
            .env_remove("SLURM_JWT_KEY")
            .env_remove("SLURM_USER")
            .env_remove("SLURM_JWT");
        for (name, value) in env {
            command.env(name, value);
        }
        command.output().unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let wrong_key = dir.path().join("wrong.key");
    std::fs::write(&wrong_key, [7u8; 32]).unwrap();
    let token = slurm_operator::slurm::Credentials::minted(
        slurm.key(),
        &slurm.user,
        std::time::Duration::from_secs(300),
    )
    .unwrap()
    .token_at(std::time::SystemTime::now())
    .unwrap();
    use secrecy::ExposeSecret;
    let token = token.expose_secret().to_owned();

    let out = run(
        &["--url", &slurm.url, "--jwt-key", key, "--user", &slurm.user],
        &[("SLURM_JWT", "not-a-token")],
    );
    assert!(out.status.success(), "--jwt-key: {}", text(&out.stderr));
    let out = run(
        &["--url", &slurm.url, "--token", &token],
        &[
            ("SLURM_JWT_KEY", wrong_key.to_str().unwrap()),
            ("SLURM_USER", &slurm.user),
        ],
    );
    assert!(out.status.success(), "--token: {}", text(&out.stderr));
    let out = run(
        &["--url", &slurm.url],
        &[("SLURM_JWT_KEY", key), ("SLURM_USER", &slurm.user)],
    );
    assert!(out.status.success(), "SLURM_JWT_KEY: {}", text(&out.stderr));
    let out = run(
        &["--url", &slurm.url],
        &[("SLURM_JWT_KEY", key), ("SLURM_JWT", &token)],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("both SLURM_JWT_KEY and SLURM_JWT are set"),
        "{stderr}"
    );
    assert!(!stderr.contains(&token), "the token is never printed");
}
