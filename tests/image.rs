//! The operator's OCI image as `hack/image.sh` builds it (here from this build's binary; a
//! release image is the same script over the release binary), unpacked the way a container
//! runtime unpacks it: the runtime config runs the binary as 65532 with no shell anywhere in
//! the image, and the binary inside it runs — `--version`, and `check` against the real local
//! Slurm with only the image's own libraries and CA bundle.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn run(what: &str, command: &mut Command) -> Output {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Every path below `dir`, recursively (symlinks not followed).
fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        found.push(path.clone());
        if meta.is_dir() {
            walk(&path, found);
        }
    }
}

#[test]
fn the_image_runs_the_operator_as_nonroot_without_a_shell() {
    let slurm = require_slurm!();
    // chroot and the apt-get install of umoci/skopeo need root, as hack/slurm-up.sh does.
    if !is_root() {
        assert!(
            std::env::var("SLURM_OPERATOR_REQUIRE_SLURM").as_deref() != Ok("1"),
            "the image test needs root (chroot)"
        );
        eprintln!("skipped: not root");
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("image-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let archive = dir.join("operator.oci.tar");

    run(
        "hack/image.sh",
        Command::new("bash")
            .current_dir(repo)
            .arg("hack/image.sh")
            .args(["--binary", env!("CARGO_BIN_EXE_slurm-operator")])
            .arg("--out")
            .arg(&archive)
            .args(["--tag", "test"]),
    );
    let layout = dir.join("layout");
    run(
        "skopeo copy",
        Command::new("skopeo")
            .arg("copy")
            .arg("--quiet")
            .arg(format!("oci-archive:{}:test", archive.display()))
            .arg(format!("oci:{}:test", layout.display())),
    );
    let bundle = dir.join("bundle");
    run(
        "umoci unpack",
        Command::new("umoci")
            .arg("unpack")
            .arg("--image")
            .arg(format!("{}:test", layout.display()))
            .arg(&bundle),
    );

    // The runtime config: entrypoint + cmd, non-root user.
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
    let process = &config["process"];
    assert_eq!(
        process["args"],
        serde_json::json!(["/usr/local/bin/slurm-operator", "run"])
    );
    assert_eq!(process["user"]["uid"], 65532);
    assert_eq!(process["user"]["gid"], 65532);

    // Nothing to run but the operator: no shell, no package manager.
    let rootfs = bundle.join("rootfs");
    let mut files = Vec::new();
    walk(&rootfs, &mut files);
    let names: Vec<String> = files
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    for forbidden in ["sh", "bash", "dash", "busybox", "apt", "dpkg"] {
        assert!(
            !names.iter().any(|n| n == forbidden),
            "/{forbidden} in the image"
        );
    }
    for needed in [
        "usr/local/bin/slurm-operator",
        "etc/ssl/certs/ca-certificates.crt",
        "etc/passwd",
        "usr/share/doc/libc6/copyright",
    ] {
        assert!(rootfs.join(needed).is_file(), "{needed} missing");
    }

    // The binary runs from the image, as the image's user, with the image's libraries only.
    let in_image = |args: &[&str]| {
        let mut command = Command::new("chroot");
        command
            .arg("--userspec=65532:65532")
            .arg(&rootfs)
            .arg("/usr/local/bin/slurm-operator")
            .args(args)
            // Nothing from this environment (SLURM_JWT, ...) reaches the binary; PATH only
            // finds chroot.
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        command
    };
    let out = run("slurm-operator --version", &mut in_image(&["--version"]));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(env!("CARGO_PKG_VERSION")),
        "{out:?}"
    );
    // `check` against the real Slurm: the key copied into the image's /tmp, readable by 65532.
    let key = rootfs.join("tmp/jwt.key");
    std::fs::write(&key, slurm.key()).unwrap();
    std::os::unix::fs::chown(&key, Some(65532), Some(65532)).unwrap();
    let out = run(
        "slurm-operator check",
        &mut in_image(&[
            "check",
            "--url",
            &slurm.url,
            "--jwt-key",
            "/tmp/jwt.key",
            "--user",
            &slurm.user,
        ]),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("cluster:     {}", slurm.cluster_name)),
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Whether this process runs as root (uid 0), from /proc (no libc call needed).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}
