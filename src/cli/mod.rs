//! The `slurm-operator` command line.

pub mod check;
pub mod follow;
pub mod job;
pub mod sbatch;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use secrecy::{ExposeSecret, SecretString};

use crate::slurm::{ClientConfig, Credentials, SlurmClient, SlurmError, TlsOptions};
use crate::telemetry::LogFormat;

#[derive(Debug, Parser)]
#[command(
    name = "slurm-operator",
    version,
    about = "Drive Slurm from Kubernetes through slurmrestd"
)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t, env = "LOG_FORMAT")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Connect to a slurmrestd, authenticate, and print what the cluster looks like.
    Check(check::CheckArgs),
    /// Print the CustomResourceDefinitions as YAML (or write one file per CRD).
    Crd(CrdArgs),
    /// Work with one SlurmJob manifest without Kubernetes.
    Job(job::JobArgs),
    /// Run the operator until SIGTERM/SIGINT.
    Run(crate::run::RunArgs),
    /// Wait until a SlurmJob is Complete or Failed; exit with the job's exit code (126 when it
    /// cannot be submitted).
    Wait(follow::WaitArgs),
    /// Print a SlurmJob's output (with spec.output), following it with -f.
    Logs(follow::LogsArgs),
    /// Turn a batch script with #SBATCH lines into a SlurmJob (printed as YAML, or created with
    /// --apply); sbatch's own options may follow `--`. Every option it cannot carry is listed.
    Sbatch(sbatch::SbatchArgs),
}

#[derive(Debug, Args)]
pub struct CrdArgs {
    /// Write `<plural>.<group>.yaml` files into this directory instead of printing.
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
}

/// Writes `text` to standard output. A reader that stopped early (`| head`) has all it asked
/// for: not an error (Rust ignores SIGPIPE, so `print!` would panic there, exit 101, and `job
/// run` would leave its job unwatched). Any other failure to write (a full disk) is one.
pub fn print_out(text: &str) -> Result<(), CliError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(CliError::Usage(format!(
            "cannot write to standard output: {e}"
        ))),
        _ => Ok(()),
    }
}

impl CrdArgs {
    pub fn run(&self) -> Result<(), CliError> {
        match &self.out_dir {
            Some(dir) => crate::crd::write_all(dir)
                .map_err(|e| CliError::Usage(format!("cannot write CRDs: {e}"))),
            None => {
                let yaml = crate::crd::render_all()
                    .map_err(|e| CliError::Usage(format!("cannot render CRDs: {e}")))?;
                print_out(&yaml)
            }
        }
    }
}

/// Which Kubernetes API server, identity and namespace the commands that talk to Kubernetes
/// use, with kubectl's flags of the same names: kubectl passes its own flags to no plugin, so
/// `kubectl slurm wait train --context prod` reaches this command as they are.
#[derive(Debug, Clone, Default, Args)]
pub struct KubeArgs {
    /// The kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else the Pod's service
    /// account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

impl KubeArgs {
    /// The client configuration these flags name.
    pub async fn config(&self) -> Result<kube::Config, CliError> {
        let options = kube::config::KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        let cannot = |e: &(dyn std::error::Error + 'static)| {
            CliError::Usage(format!(
                "cannot reach Kubernetes: {}",
                crate::error_chain::Chain(e)
            ))
        };
        let unusable = |e: kube::config::KubeconfigError| match e {
            // kube says "failed to load current context" of the one asked for.
            kube::config::KubeconfigError::LoadContext(name) => CliError::Usage(format!(
                "cannot reach Kubernetes: the kubeconfig has no context {name:?} (kubectl \
                 config get-contexts lists them)"
            )),
            e => cannot(&e),
        };
        match (&self.kubeconfig, &self.context) {
            (Some(path), _) => {
                let file = kube::config::Kubeconfig::read_from(path).map_err(unusable)?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(unusable)
            }
            // A context names a kubeconfig's: no falling back to the Pod's service account.
            (None, Some(_)) => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(unusable),
            (None, None) => kube::Config::infer().await.map_err(|e| cannot(&e)),
        }
    }

    /// A client, and the namespace to work in: `namespace` when given, else the context's.
    pub async fn client(
        &self,
        namespace: Option<&str>,
    ) -> Result<(kube::Client, String), CliError> {
        let config = self.config().await?;
        let namespace = namespace.map_or_else(|| config.default_namespace.clone(), str::to_owned);
        let client = kube::Client::try_from(config).map_err(|e| {
            CliError::Usage(format!(
                "cannot reach Kubernetes: {}",
                crate::error_chain::Chain(&e)
            ))
        })?;
        Ok((client, namespace))
    }
}

/// How to reach and authenticate to one slurmrestd from the command line.
#[derive(Debug, Clone, Args)]
pub struct ConnectArgs {
    /// slurmrestd base URL, e.g. http://127.0.0.1:6820
    #[arg(long, env = "SLURM_REST_URL")]
    pub url: String,
    /// File with the cluster's jwt_hs256.key: tokens are minted from it. Without any of
    /// --jwt-key, --token-file and --token, env SLURM_JWT_KEY (or SLURM_JWT) is used: a flag on
    /// the command line always wins over the environment (e.g. SLURM_JWT after `scontrol token`).
    #[arg(long, conflicts_with_all = ["token", "token_file"])]
    pub jwt_key: Option<PathBuf>,
    /// Slurm user the minted tokens name (`sun`); must be a Slurm admin (root or SlurmUser) for node operations.
    #[arg(long, env = "SLURM_USER")]
    pub user: Option<String>,
    /// Lifetime of minted tokens (30s..15m).
    #[arg(long, default_value = "15m", value_parser = humantime::parse_duration)]
    pub token_lifetime: Duration,
    /// A ready JWT (prefer --token-file: arguments are visible in the process list).
    // A SecretString, not a String: the derived `Debug` of the parsed command line (and of
    // anything holding it) then prints `[REDACTED]` instead of the token.
    #[arg(long, conflicts_with = "token_file")]
    pub token: Option<SecretString>,
    /// File holding a ready JWT.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// PEM CA bundle to verify an https:// endpoint with (instead of the system roots).
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// Do not verify the server certificate. Dangerous; for tests only.
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
    /// Per-request timeout.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// slurmrestd REST API version (v0.0.40 to v0.0.45), or `auto` for the newest both sides
    /// speak.
    #[arg(long, default_value = "auto", value_parser = parse_rest_api_version)]
    pub rest_api_version: RestApiVersion,
}

/// `--rest-api-version`: a pin, or negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestApiVersion(pub Option<crate::slurm::ApiVersion>);

fn parse_rest_api_version(text: &str) -> Result<RestApiVersion, String> {
    if text == "auto" {
        return Ok(RestApiVersion(None));
    }
    text.parse()
        .map(|v| RestApiVersion(Some(v)))
        .map_err(|e: crate::slurm::UnknownVersion| e.to_string())
}

/// A failure the CLI reports as one line, with an exit code per kind.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    // With its causes: "cannot build credentials" alone would not say which setting was refused.
    #[error("{}", crate::error_chain::Chain(.0))]
    Slurm(#[from] SlurmError),
    #[error("cannot read {what} {path}: {source}")]
    ReadFile {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Usage(String),
    #[error("{}", crate::error_chain::Chain(.0))]
    Run(#[from] crate::run::Error),
    /// `logs -f` lost the output Pod's log before the job ended, or reading it failed.
    #[error("{0}")]
    LogCut(String),
    /// The Kubernetes API server could not be asked (out of reach, failing for now): not a
    /// usage error; the same command may work later.
    #[error("{0}")]
    Unavailable(String),
    /// `wait` lost sight of the SlurmJob: not the job's outcome, nor a usage error.
    #[error("{what}: {}", crate::error_chain::Chain(.source))]
    NotFollowed {
        what: String,
        #[source]
        source: follow::FollowError,
    },
}

impl CliError {
    /// Distinct exit codes so scripts can tell failures apart (2 is clap's usage error).
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) | Self::ReadFile { .. } => 2,
            Self::Run(_) => 1,
            Self::NotFollowed { .. } | Self::LogCut(_) | Self::Unavailable(_) => {
                follow::EXIT_NOT_FOLLOWED
            }
            // A ready token past its `exp` is refused as slurmrestd would refuse it.
            Self::Slurm(SlurmError::Credentials(crate::slurm::auth::AuthError::TokenExpired {
                ..
            })) => 5,
            // What was given cannot be used as it is (an endpoint, a key, a token lifetime).
            Self::Slurm(SlurmError::Credentials(_) | SlurmError::InvalidEndpoint { .. }) => 2,
            Self::Slurm(e) => match e.category() {
                "Unreachable" | "Timeout" => 3,
                "TLSError" | "InvalidCA" => 4,
                "Unauthorized" | "PermissionDenied" => 5,
                "UnsupportedVersion" => 6,
                _ => 1,
            },
        }
    }
}

fn read_file(what: &'static str, path: &PathBuf) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|source| CliError::ReadFile {
        what,
        path: path.clone(),
        source,
    })
}

impl ConnectArgs {
    /// The credentials: the command line's (--jwt-key, --token-file, --token), else the
    /// environment's (SLURM_JWT_KEY, SLURM_JWT). A flag always wins over the environment.
    pub fn credentials(&self) -> Result<Credentials, CliError> {
        let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let minted = |key: Vec<u8>, from: &str| {
            let Some(user) = self.user.clone() else {
                return Err(CliError::Usage(format!(
                    "{from} mints tokens for a Slurm user: give --user U (or SLURM_USER)"
                )));
            };
            Ok(Credentials::minted(key, user, self.token_lifetime))
        };
        let credentials = if let Some(path) = &self.jwt_key {
            minted(read_file("JWT key", path)?, "--jwt-key")?
        } else if let Some(path) = &self.token_file {
            let token = String::from_utf8_lossy(&read_file("token file", path)?).into_owned();
            Credentials::token(token, self.user.clone())
        } else if let Some(token) = &self.token {
            Credentials::token(token.expose_secret(), self.user.clone())
        } else {
            match (env("SLURM_JWT_KEY"), env("SLURM_JWT")) {
                (Some(_), Some(_)) => {
                    return Err(CliError::Usage(
                        "both SLURM_JWT_KEY and SLURM_JWT are set: give --jwt-key FILE or \
                         --token-file FILE to choose"
                            .into(),
                    ));
                }
                (Some(path), None) => {
                    minted(read_file("JWT key", &PathBuf::from(path))?, "SLURM_JWT_KEY")?
                }
                (None, Some(token)) => {
                    Credentials::token(token.to_string_lossy(), self.user.clone())
                }
                (None, None) => {
                    return Err(CliError::Usage(
                        "give --jwt-key FILE --user U, --token-file FILE or --token T (or set \
                         SLURM_JWT_KEY or SLURM_JWT)"
                            .into(),
                    ));
                }
            }
        };
        credentials.map_err(|e| CliError::Slurm(SlurmError::Credentials(e)))
    }

    pub fn client(&self) -> Result<SlurmClient, CliError> {
        let ca_pem = self
            .ca
            .as_ref()
            .map(|path| read_file("CA bundle", path))
            .transpose()?;
        // The URL is the one the person running the command typed: plain http is theirs to use.
        let config = ClientConfig::new(&self.url)?
            .allow_plaintext(true)
            .with_request_timeout(self.timeout)
            .with_api_version(self.rest_api_version.0)
            .with_tls(TlsOptions {
                ca_pem,
                insecure_skip_verify: self.insecure_skip_tls_verify,
            });
        Ok(SlurmClient::new(config, Arc::new(self.credentials()?))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exit codes the README names: what was given cannot be used (2), a refused or
    /// expired token (5).
    #[test]
    fn what_cannot_be_used_as_given_exits_2_a_refused_token_5() {
        let code = |e: SlurmError| CliError::Slurm(e).exit_code();
        assert_eq!(code(ClientConfig::new("not a url").unwrap_err()), 2);
        let lifetime = Credentials::minted(vec![7; 32], "slurm", Duration::from_secs(3600));
        assert_eq!(code(lifetime.unwrap_err().into()), 2);
        let expired = crate::slurm::auth::AuthError::TokenExpired { at: "then".into() };
        assert_eq!(code(expired.into()), 5);
        let unauthorized = SlurmError::Unauthorized {
            status: 401,
            detail: "Authentication failure".into(),
        };
        assert_eq!(code(unauthorized), 5);
    }

    /// Two contexts on two API servers, each with its namespace; `a` is the current one.
    const KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: 'https://a.example:6443'}
- name: b
  cluster: {server: 'https://b.example:6443'}
users:
- name: u
  user: {token: t}
contexts:
- name: a
  context: {cluster: a, user: u, namespace: team-a}
- name: b
  context: {cluster: b, user: u, namespace: team-b}
current-context: a
";

    #[tokio::test]
    async fn kube_flags_pick_the_kubeconfig_its_context_and_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(&path, KUBECONFIG).unwrap();
        let args = |context: Option<&str>| KubeArgs {
            kubeconfig: Some(path.clone()),
            context: context.map(str::to_owned),
        };
        for (context, host, namespace) in [
            (None, "a.example", "team-a"),
            (Some("a"), "a.example", "team-a"),
            (Some("b"), "b.example", "team-b"),
        ] {
            let config = args(context).config().await.unwrap();
            assert_eq!(config.cluster_url.host(), Some(host), "{context:?}");
            assert_eq!(config.default_namespace, namespace, "{context:?}");
            let (_, chosen) = args(context).client(None).await.unwrap();
            assert_eq!(chosen, namespace, "{context:?}");
        }
        let (_, chosen) = args(Some("b")).client(Some("mine")).await.unwrap();
        assert_eq!(chosen, "mine", "-n wins over the context's namespace");

        let err = args(Some("nope")).config().await.unwrap_err();
        assert!(matches!(err, CliError::Usage(_)), "{err:?}");
        assert!(
            err.to_string()
                .contains("the kubeconfig has no context \"nope\""),
            "{err}"
        );
        let missing = dir.path().join("missing");
        let err = KubeArgs {
            kubeconfig: Some(missing),
            context: None,
        }
        .config()
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("missing"), "{err}");
    }

    #[test]
    fn rest_api_version_is_auto_or_a_version_we_speak() {
        assert_eq!(parse_rest_api_version("auto"), Ok(RestApiVersion(None)));
        assert_eq!(
            parse_rest_api_version("v0.0.41"),
            Ok(RestApiVersion(Some(crate::slurm::ApiVersion::V0_0_41)))
        );
        let err = parse_rest_api_version("v0.0.39").unwrap_err();
        assert!(err.contains("v0.0.40 to v0.0.45"), "{err}");
    }
}
