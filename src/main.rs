use std::process::ExitCode;

/// jemalloc, with one arena and freed pages returned at once (`.cargo/config.toml`): the
/// process's memory follows its caches instead of its peak.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use clap::Parser;
use slurm_operator::cli::{Cli, CliError, Command, check};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // Test builds only (the dev-dependency enables `fail`'s points): `FAILPOINTS` lets
    // tests/crash.rs stop the process at an exact point. A release build ignores it.
    let _failpoints = fail::has_failpoints().then(fail::FailScenario::setup);
    slurm_operator::telemetry::init(cli.log_format, "warn,slurm_operator=info");
    slurm_operator::tls::install_crypto_provider();
    let result = match &cli.command {
        Command::Check(args) => match check::run(args).await {
            Ok(report) => match slurm_operator::cli::print_out(&report.render()) {
                Ok(()) => return ExitCode::from(report.exit_code()),
                Err(error) => Err(error),
            },
            Err(error) => Err(error),
        },
        Command::Crd(args) => args.run(),
        Command::Job(args) => match args.run().await {
            Ok(code) => return ExitCode::from(code),
            Err(error) => Err(error),
        },
        Command::Sbatch(args) => match args.run().await {
            Ok(code) => return ExitCode::from(code),
            Err(error) => Err(error),
        },
        Command::Wait(args) => match args.run().await {
            Ok(code) => return ExitCode::from(code),
            Err(error) => Err(error),
        },
        Command::Logs(args) => match args.run().await {
            Ok(code) => return ExitCode::from(code),
            Err(error) => Err(error),
        },
        Command::Run(args) => slurm_operator::run::run(args).await.map_err(CliError::from),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}
