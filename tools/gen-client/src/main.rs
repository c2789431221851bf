//! `gen-client [--check] [--root DIR]`: writes the generated slurmrestd client (and the
//! processed spec) into the repository, or with `--check` only compares and exits 1 when the
//! committed files are stale. Usually run through `hack/gen-client.sh`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str = "\
Usage: gen-client [--check] [--root DIR]

Generates the slurmrestd clients from openapi/slurmrestd-<version>.json.

  --check      only compare with the committed files; exit 1 and name the stale ones
  --root DIR   the repository root (default: two levels above this tool's Cargo.toml)";

struct Args {
    check: bool,
    root: PathBuf,
}

fn parse_args() -> Result<Option<Args>, String> {
    // The tool lives in <root>/tools/gen-client, so its manifest directory (fixed at compile
    // time) finds the root wherever cargo is run from.
    let mut args = Args {
        check: false,
        root: Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
    };
    let mut argv = std::env::args().skip(1);
    while let Some(arg) = argv.next() {
        match arg.as_str() {
            "--check" => args.check = true,
            "--root" => match argv.next() {
                Some(root) => args.root = PathBuf::from(root),
                None => return Err("--root needs a directory".into()),
            },
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument: {other}")),
        }
    }
    Ok(Some(args))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("gen-client: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("gen-client: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> gen_client::Result<ExitCode> {
    let generated = gen_client::generate_all(&args.root)?;
    for warning in &generated.warnings {
        eprintln!("gen-client: warning: {warning}");
    }

    if args.check {
        let stale = gen_client::stale(&args.root, &generated.outputs)?;
        for output in &stale {
            eprintln!(
                "gen-client: {} is stale: run {}",
                output.path,
                gen_client::REGENERATE
            );
        }
        if !stale.is_empty() {
            return Ok(ExitCode::FAILURE);
        }
        println!(
            "gen-client: {} generated files up to date",
            generated.outputs.len()
        );
        return Ok(ExitCode::SUCCESS);
    }

    let written = gen_client::write_changed(&args.root, &generated.outputs)?;
    for output in &generated.outputs {
        let state = if written.contains(&args.root.join(&output.path)) {
            "wrote"
        } else {
            "unchanged"
        };
        println!(
            "gen-client: {state} {} ({} bytes)",
            output.path,
            output.contents.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}
