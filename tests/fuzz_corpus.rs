//! The fuzz harnesses (`fuzz/src/lib.rs`, included as is) in a plain `cargo test`, without
//! cargo-fuzz: every crash reproducer committed under `fuzz/regressions/<target>/`, every corpus
//! file a fuzz run left under `fuzz/corpus/<target>/`, and every recorded slurmrestd answer
//! (tests/fixtures) as the body of every call at every status. A harness panics when a property
//! breaks, so a fixed fuzz finding stays fixed.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../fuzz/src/lib.rs"]
mod harness;

use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The files of `dir`, sorted; none when it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Run `input` through the harness of `target`, naming the file if it panics.
fn replay(target: &str, file: &Path) {
    let input = std::fs::read(file).unwrap();
    let run: fn(&[u8]) = match target {
        "response" => harness::response,
        "state_mapping" => harness::state_mapping,
        other => panic!(
            "{}: no harness named {other:?}; add it to this test",
            file.display()
        ),
    };
    if std::panic::catch_unwind(|| run(&input)).is_err() {
        panic!("{target} fails on {}", file.display());
    }
}

/// Replay every `<base>/<target>/*`; the number of files replayed.
fn replay_all(base: &str) -> usize {
    let mut count = 0;
    let Ok(targets) = std::fs::read_dir(root().join(base)) else {
        return 0;
    };
    for dir in targets.map(|e| e.unwrap().path()).filter(|p| p.is_dir()) {
        let target = dir.file_name().unwrap().to_str().unwrap().to_owned();
        for file in files(&dir) {
            replay(&target, &file);
            count += 1;
        }
    }
    count
}

#[test]
fn committed_fuzz_findings_stay_fixed() {
    let count = replay_all("fuzz/regressions");
    eprintln!("replayed {count} regression inputs");
    assert!(
        count > 0,
        "fuzz/regressions holds the reproducers of fixed findings"
    );
}

#[test]
fn fuzz_corpora_replay() {
    // Git-ignored: present after a local `hack/fuzz.sh`, absent in a fresh clone.
    let count = replay_all("fuzz/corpus");
    eprintln!("replayed {count} corpus inputs");
}

#[test]
fn recorded_answers_decode_as_any_call_at_any_status() {
    let mut count = 0;
    for release in ["24.11", "26.05"] {
        for fixture in files(&root().join("tests/fixtures").join(release)) {
            let envelope: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&fixture).unwrap()).unwrap();
            let body = match &envelope["body"] {
                serde_json::Value::String(text) => text.clone().into_bytes(),
                json => serde_json::to_vec(json).unwrap(),
            };
            let calls =
                harness::STATUSES.len() * slurm_operator::slurm::fuzzing::Endpoint::ALL.len();
            for header in 0..calls {
                let mut input = vec![u8::try_from(header).unwrap()];
                input.extend_from_slice(&body);
                if std::panic::catch_unwind(|| harness::response(&input)).is_err() {
                    panic!(
                        "{} as call {:?}",
                        fixture.display(),
                        harness::header(input[0])
                    );
                }
                count += 1;
            }
        }
    }
    assert!(count > 2000, "{count} answers replayed");
}
