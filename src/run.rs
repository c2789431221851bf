//! `slurm-operator run`: the operator process.
//!
//! 1. Install the SIGTERM/SIGINT handlers: the first signal cancels one [`CancellationToken`]
//!    that every task watches (graceful stop); a second one exits at once.
//! 2. Build the kube client (kubeconfig, else the in-cluster service account).
//! 3. Serve `/healthz`, `/readyz` and `/metrics` (not ready yet).
//! 4. Wait until the CRDs are established, saying so in the log while waiting.
//! 5. Run the controllers; the pollers run under the registry, started and stopped by the SlurmCluster
//!    controller. `/readyz` turns ready once the controllers' caches are filled.
//! 6. On the signal: `/readyz` says 503, the controllers stop taking new work and finish running
//!    reconciles, the pollers are stopped, the Lease is released, then the HTTP server drains
//!    (it serves `/readyz` and `/metrics` through the whole stop), and the process exits 0.

use std::net::SocketAddr;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::wait::{Condition, await_condition, conditions};
use kube::{Api, ResourceExt};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, PostParams};
use secrecy::{ExposeSecret, SecretBox};

use crate::controller::context::{Context, RefusedNamespaces, SLURMJOBS, SLURMNODESETS};
use crate::controller::kit;
use crate::crd::CREDENTIALS_LABEL;
use crate::crd::slurmjob::CachedSlurmJob;
use crate::http::{self, Readiness};
use crate::leader::{self, LeaseConfig};
use crate::metrics::{Metrics, ObjectSources};
use crate::slurm::tag::TagKey;

/// The default name of the tag key's Secret (`--tag-key-secret`).
pub const DEFAULT_TAG_KEY_SECRET: &str = "slurm-operator-tag-key";
/// The data key of the tag key in its Secret.
pub const TAG_KEY_DATA_KEY: &str = "tag.key";

/// How often readiness looks at the controllers' caches until they are filled.
const READY_POLL: Duration = Duration::from_millis(250);

/// How often a namespace that refuses the operator is asked whether it still does.
const REFUSED_PROBE: Duration = Duration::from_secs(30);

/// How often the log repeats that the operator still waits for its CRDs.
const CRD_WAIT_REMINDER: Duration = Duration::from_secs(30);

/// Flags of `slurm-operator run`. The log format is the global `--log-format` (env `LOG_FORMAT`);
/// the log filter is `RUST_LOG`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Watch only these namespaces (comma-separated or repeated): their Clusters, SlurmJobs,
    /// NodeSets and the Secrets, ConfigMaps and Pods these use. Default: all namespaces.
    #[arg(long = "namespace", env = "WATCH_NAMESPACE", value_delimiter = ',')]
    pub namespaces: Vec<String>,
    /// The namespace SlurmClusters' Secrets (labelled `slurm.rs/credentials=true`) and CA
    /// ConfigMaps are read from: the platform admin's, normally the operator's own. Default: the
    /// operator's namespace (`POD_NAMESPACE`), else `slurm-operator`.
    #[arg(long, env = "CREDENTIALS_NAMESPACE")]
    pub credentials_namespace: Option<String>,
    /// The slurmrestd endpoints SlurmClusters may name, as origins (`https://host:port`;
    /// comma-separated or repeated). A SlurmCluster naming another gets `EndpointNotAllowed`.
    /// Default: any.
    #[arg(
        long = "allowed-endpoint",
        env = "ALLOWED_ENDPOINTS",
        value_delimiter = ','
    )]
    pub allowed_endpoints: Vec<url::Url>,
    /// The Secret, in the credentials namespace, holding the key that signs the ownership tags
    /// of submitted jobs (data key `tag.key`; labelled `slurm.rs/credentials=true`). Every
    /// replica and restart must use the same one.
    #[arg(long, env = "TAG_KEY_SECRET", default_value = DEFAULT_TAG_KEY_SECRET)]
    pub tag_key_secret: String,
    /// Create that Secret with a random key at start when it does not exist. Off: it must exist
    /// (e.g. one the admin provides).
    #[arg(long, env = "CREATE_TAG_KEY", default_value_t = true, action = clap::ArgAction::Set)]
    pub create_tag_key: bool,
    /// Where to serve /healthz, /readyz and /metrics.
    /// The default, `[::]`, takes IPv6 and IPv4 (on a host without IPv6, IPv4 alone).
    #[arg(long, env = "METRICS_ADDR", default_value = "[::]:8080")]
    pub metrics_addr: SocketAddr,
    /// Image of the Pods that stream SlurmJob output (`kubectl logs <slurmjob>`): any image
    /// with `sh`, `cat`, `grep`, `readlink`, `sleep` and `stat`.
    #[arg(long, env = "OUTPUT_IMAGE", default_value = crate::controller::slurmjob::output::DEFAULT_IMAGE)]
    pub output_image: String,
    /// How long a deleted SlurmJob waits for a Slurm cluster it cannot reach (not connected,
    /// unreachable, its SlurmCluster being deleted without credentials) before its finalizer
    /// goes without the cancel, with a Warning naming the Slurm jobs that may still run. Counts
    /// from the deletion, or from this replica's start or takeover when later. `0s`: wait for
    /// ever (the SlurmJob's `DeletionBlocked` condition says why). A deleted SlurmNodeSet waits
    /// as long for its nodes to drain and leave Slurm; then it goes, its pods with it.
    #[arg(long, env = "DELETION_DEADLINE", default_value = "15m", value_parser = humantime::parse_duration)]
    pub deletion_deadline: Duration,
    /// Run as one of several replicas: only the holder of a Kubernetes Lease writes (to
    /// Kubernetes and to Slurm); the others keep their caches warm and take over when it goes.
    #[arg(long, env = "LEADER_ELECTION")]
    pub leader_election: bool,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "LEADER_ELECTION_LEASE",
        default_value = "slurm-operator-leader"
    )]
    pub leader_election_lease: String,
    /// Namespace of the Lease. Default: the operator's own (`POD_NAMESPACE`).
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// The operator's own namespace (the chart sets it from the downward API): the default of
    /// the Lease's and of the credentials namespace.
    #[arg(long, env = "POD_NAMESPACE", hide = true)]
    pub pod_namespace: Option<String>,
    /// This replica's identity in the Lease (default: the pod name, else the host name).
    #[arg(long, env = "POD_NAME")]
    pub leader_election_identity: Option<String>,
    /// How long the Lease lasts without renewal: how long the replicas wait before taking over
    /// from a leader that died without releasing it.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub lease_duration: Duration,
    /// How long before expiry the leader renews the Lease (a quarter of it is the clock skew
    /// tolerated: the leader stops writing that long before the expiry it last read).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub lease_grace: Duration,
    /// How long the SlurmJob controller lets further changes of an object come in before it
    /// reconciles it (none by default: what `hack/bench.sh`'s burst measurement chose).
    #[arg(long, env = "SLURMJOB_DEBOUNCE", default_value = "0s", value_parser = humantime::parse_duration)]
    pub slurmjob_debounce: Duration,
    /// How many objects each controller reconciles at once (Slurm requests are limited per
    /// cluster anyway: at most 4 in flight per slurmrestd connection).
    #[arg(long, env = "RECONCILE_CONCURRENCY", default_value_t = kit::MAX_CONCURRENT_RECONCILES)]
    pub reconcile_concurrency: u16,
    /// How long a watched namespace in which the API server refuses the operator's watches
    /// (403: its Role or RoleBinding there deleted) may hold up readiness at start. After it,
    /// the namespace counts as listed and empty (a SlurmCluster being deleted no longer waits
    /// for its SlurmJobs), the others are served, and `slurm_operator_namespace_refused` names
    /// it until its rights are back.
    #[arg(long, env = "REFUSED_NAMESPACE_GRACE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub refused_namespace_grace: Duration,
}

impl RunArgs {
    /// The scopes to watch: each named namespace once, or `[None]` for all namespaces (also
    /// when only empty names were given).
    pub fn scopes(&self) -> Vec<Option<&str>> {
        let mut named: Vec<&str> = self
            .namespaces
            .iter()
            .map(|ns| ns.trim())
            .filter(|ns| !ns.is_empty())
            .collect();
        named.sort_unstable();
        named.dedup();
        if named.is_empty() {
            vec![None]
        } else {
            named.into_iter().map(Some).collect()
        }
    }

    /// The credentials namespace: the flag, else the operator's own namespace, else the default.
    /// Never the Lease's: an admin who keeps Leases elsewhere (`kube-system`) did not ask for
    /// Secrets to be read, and the tag key created, there.
    pub fn credentials_namespace(&self) -> String {
        first_named([&self.credentials_namespace, &self.pod_namespace])
            .unwrap_or_else(|| crate::controller::context::DEFAULT_CREDENTIALS_NAMESPACE.to_owned())
    }

    /// The deletion deadline; `None` (`0s`): none, a blocked deletion waits for ever.
    pub fn deletion_deadline(&self) -> Option<Duration> {
        Some(self.deletion_deadline).filter(|d| !d.is_zero())
    }

    /// The Lease to take part in, when leader election is on.
    pub fn lease(&self) -> Option<LeaseConfig> {
        if !self.leader_election {
            return None;
        }
        let identity = self
            .leader_election_identity
            .clone()
            .filter(|id| !id.trim().is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        Some(LeaseConfig {
            name: self.leader_election_lease.clone(),
            namespace: first_named([&self.leader_election_namespace, &self.pod_namespace])
                .unwrap_or_default(),
            identity,
            duration: self.lease_duration,
            grace: self.lease_grace,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot install the signal handlers")]
    InstallSignalHandlers(#[source] std::io::Error),
    #[error("cannot create the Kubernetes client (from the kubeconfig or the in-cluster config)")]
    CreateClient(#[source] kube::Error),
    #[error("cannot read CustomResourceDefinition {name}")]
    ReadCrd {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("waiting for CustomResourceDefinition {name} failed")]
    WaitForCrd {
        name: String,
        #[source]
        source: kube::runtime::wait::Error,
    },
    #[error(transparent)]
    Http(#[from] http::Error),
    #[error(transparent)]
    Leader(#[from] crate::leader::Error),
    #[error("a controller task failed")]
    ControllerTask(#[source] tokio::task::JoinError),
    #[error("cannot read or create the tag key Secret {namespace}/{name}")]
    TagKeySecret {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("the tag key Secret {namespace}/{name} cannot be used: {problem}")]
    TagKeyUnusable {
        namespace: String,
        name: String,
        problem: String,
    },
}

impl Error {
    pub fn category(&self) -> &'static str {
        match self {
            Self::InstallSignalHandlers(_) => "InstallSignalHandlersFailed",
            Self::CreateClient(_) => "CreateClientFailed",
            Self::ReadCrd { .. } => "ReadCrdFailed",
            Self::WaitForCrd { .. } => "WaitForCrdFailed",
            Self::Http(e) => e.category(),
            Self::Leader(e) => e.category(),
            Self::ControllerTask(_) => "ControllerTaskFailed",
            Self::TagKeySecret { .. } => "TagKeySecretFailed",
            Self::TagKeyUnusable { .. } => "TagKeyUnusable",
        }
    }
}

/// Cancel `shutdown` on the first SIGTERM or SIGINT; exit on the second.
fn shutdown_on_signal(shutdown: CancellationToken) -> Result<(), Error> {
    let mut term = signal(SignalKind::terminate()).map_err(Error::InstallSignalHandlers)?;
    let mut int = signal(SignalKind::interrupt()).map_err(Error::InstallSignalHandlers)?;
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        info!(
            signal = name,
            "shutting down gracefully (send it again to exit at once)"
        );
        shutdown.cancel();
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        warn!("second signal: exiting without waiting for running work");
        std::process::exit(130);
    });
    Ok(())
}

/// Backoff of the reads at start that [`kit::may_pass`] errors retry: about two minutes in all.
fn start_backoff() -> backon::ExponentialBuilder {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(15))
        .with_max_times(12)
}

/// `read`, asked again with [`start_backoff`] while it fails with a [`kit::may_pass`] error.
async fn at_start<T, F, Fut>(what: &str, read: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    use backon::Retryable;
    read.retry(start_backoff())
        .when(kit::may_pass)
        .notify(|error, delay| warn!(%error, ?delay, "{what} failed; asking again"))
        .await
}

/// Wait until every CRD of the operator is established.
async fn wait_for_crds(client: kube::Client) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    for crd in crate::crd::all() {
        let name = crate::crd::crd_name(&crd).to_owned();
        let current = at_start("reading a CRD", || api.get_opt(&name))
            .await
            .map_err(|source| Error::ReadCrd {
                name: name.clone(),
                source,
            })?;
        if conditions::is_crd_established().matches_object(current.as_ref()) {
            continue;
        }
        loop {
            info!(
                crd = %name,
                "waiting for the CRD to be established; install the CRDs with \
                 `slurm-operator crd | kubectl apply --server-side -f -`"
            );
            let wait = await_condition(api.clone(), &name, conditions::is_crd_established());
            match tokio::time::timeout(CRD_WAIT_REMINDER, wait).await {
                Ok(Ok(_)) => break,
                // The watch ends at its first error (no backoff of its own): one that may pass
                // is waited out and the watch made again.
                Ok(Err(kube::runtime::wait::Error::ProbeFailed(error)))
                    if kit::watch_may_pass(&error) =>
                {
                    warn!(crd = %name, %error, "the CRD's watch failed; watching again");
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
                Ok(Err(source)) => {
                    return Err(Error::WaitForCrd {
                        name: name.clone(),
                        source,
                    });
                }
                Err(_elapsed) => continue,
            }
        }
        info!(crd = %name, "CRD established");
    }
    Ok(())
}

/// The key that signs ownership tags, from Secret `name` in the credentials `namespace`; with
/// `create`, a new random one when it does not exist. Two replicas starting together may both
/// try: the loser of the create reads the winner's Secret. Like SlurmClusters' credentials, the
/// Secret must carry `slurm.rs/credentials=true`.
pub async fn tag_key(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    create: bool,
    scopes: &[Option<&str>],
    refused_grace: Duration,
) -> Result<TagKey, Error> {
    load_tag_key(client, namespace, name, create, scopes, refused_grace)
        .await
        .map(|(key, _)| key)
}

/// [`tag_key`], and its bytes (kept to make the Secret again: [`keep_tag_key`]).
async fn load_tag_key(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    create: bool,
    scopes: &[Option<&str>],
    refused_grace: Duration,
) -> Result<(TagKey, SecretBox<[u8]>), Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let failed = |source| Error::TagKeySecret {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        source,
    };
    let unusable = |problem: String| Error::TagKeyUnusable {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        problem,
    };
    let secret = match at_start("reading the tag key Secret", || secrets.get_opt(name))
        .await
        .map_err(failed)?
    {
        Some(secret) => secret,
        None if !create => {
            return Err(unusable(
                "it does not exist (and --create-tag-key is off)".into(),
            ));
        }
        None => {
            // A key lost (its namespace deleted and made again, the Secret deleted) while jobs
            // it signed run: a new one would verify none of their tags, and their SlurmJobs
            // would call them Lost and never cancel them. Only where no such job is.
            let live = live_tagged_slurmjobs(client, scopes, refused_grace)
                .await
                .map_err(failed)?;
            if !live.is_empty() {
                return Err(unusable(format!(
                    "it does not exist, but SlurmJobs whose Slurm jobs it signed are still \
                     running ({}): a new key would lose them. Restore the Secret from a backup; \
                     or, to accept that, create it yourself (data key {TAG_KEY_DATA_KEY}, 32 \
                     random bytes or more, labelled {CREDENTIALS_LABEL}=true)",
                    live.join(", ")
                )));
            }
            let bytes = TagKey::generate_bytes().map_err(|e| unusable(e.to_string()))?;
            let new = tag_key_secret(namespace, name, bytes);
            match secrets.create(&PostParams::default(), &new).await {
                Ok(created) => {
                    info!(%namespace, %name, "created the tag key Secret with a new random key");
                    created
                }
                // Another replica created it first: use theirs.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    secrets.get(name).await.map_err(failed)?
                }
                Err(source) => return Err(failed(source)),
            }
        }
    };
    let marked = secret
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(CREDENTIALS_LABEL))
        .is_some_and(|v| v == "true");
    if !marked {
        return Err(unusable(format!(
            "it is not labelled {CREDENTIALS_LABEL}=true"
        )));
    }
    let bytes = secret
        .data
        .as_ref()
        .and_then(|data| data.get(TAG_KEY_DATA_KEY))
        .ok_or_else(|| unusable(format!("it has no data key {TAG_KEY_DATA_KEY:?}")))?;
    let key = TagKey::new(&bytes.0).map_err(|e| unusable(e.to_string()))?;
    Ok((key, SecretBox::from(bytes.0.clone().into_boxed_slice())))
}

/// The tag key Secret `namespace/name` holding `bytes`, labelled as credentials.
fn tag_key_secret(namespace: &str, name: &str, bytes: Vec<u8>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(
                [(CREDENTIALS_LABEL.to_owned(), "true".to_owned())]
                    .into_iter()
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        data: Some(
            [(TAG_KEY_DATA_KEY.to_owned(), ByteString(bytes))]
                .into_iter()
                .collect(),
        ),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}

/// How often the tag key Secret is looked at while the operator runs.
const TAG_KEY_CHECK: Duration = Duration::from_secs(60);

/// What a look at the tag key Secret found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeySecret {
    /// It holds the key this replica signs with.
    Same,
    /// It is gone, and this replica did not make it again.
    Gone,
    /// It holds another key, or none that can sign.
    Other,
}

/// Keep the tag key Secret holding the key this replica signs with. Read once at start, the
/// key lives on in every replica while the Secret may be deleted (an admin's cleanup) or
/// replaced: a replica started then would make or read another key, and the jobs signed with
/// the one in use would be lost to their SlurmJobs once it leads. A deleted Secret is made
/// again, by the leader, with the key in use (with `create`); another key is said, as an error,
/// each time it begins. One look every [`TAG_KEY_CHECK`]; a failed read waits for the next.
async fn keep_tag_key(
    client: kube::Client,
    namespace: String,
    name: String,
    (key, bytes): (TagKey, SecretBox<[u8]>),
    create: bool,
    leadership: crate::leader::Leadership,
    shutdown: CancellationToken,
) {
    let secrets: Api<Secret> = Api::namespaced(client, &namespace);
    let mut last = KeySecret::Same;
    loop {
        tokio::select! {
            () = tokio::time::sleep(TAG_KEY_CHECK) => {}
            () = shutdown.cancelled() => return,
        }
        let now = match look_at_tag_key(&secrets, &name, &key, &bytes, create, &leadership).await {
            Some(now) => now,
            None => continue,
        };
        if now != last {
            match now {
                KeySecret::Same => {
                    info!(%namespace, %name, "the tag key Secret holds the key in use again")
                }
                KeySecret::Gone => tracing::error!(
                    %namespace, %name,
                    "the tag key Secret is gone, and this replica cannot make it again (not the \
                     leader, or --create-tag-key off, or its create refused): restore it from a \
                     backup. A replica started without it makes a new key (or refuses to start), \
                     and the jobs signed with the key in use are then lost to their SlurmJobs"
                ),
                KeySecret::Other => tracing::error!(
                    %namespace, %name,
                    "the tag key Secret holds another key than the one this replica signs with \
                     (read at its start): put the old key back. Replicas started from now on \
                     sign with the new one, and the jobs signed with the old one are lost to \
                     their SlurmJobs once such a replica leads"
                ),
            }
        }
        last = now;
    }
}

/// One look of [`keep_tag_key`]; `None` when the Secret could not be read (or was made by
/// another meanwhile): nothing to say until the next look.
async fn look_at_tag_key(
    secrets: &Api<Secret>,
    name: &str,
    key: &TagKey,
    bytes: &SecretBox<[u8]>,
    create: bool,
    leadership: &crate::leader::Leadership,
) -> Option<KeySecret> {
    let secret = match secrets.get_opt(name).await {
        Ok(secret) => secret,
        Err(error) => {
            tracing::debug!(%error, "reading the tag key Secret failed; looked at again later");
            return None;
        }
    };
    if let Some(secret) = secret {
        let held = secret
            .data
            .as_ref()
            .and_then(|data| data.get(TAG_KEY_DATA_KEY))
            .and_then(|bytes| TagKey::new(&bytes.0).ok());
        return Some(if held.is_some_and(|held| held.same_as(key)) {
            KeySecret::Same
        } else {
            KeySecret::Other
        });
    }
    if !create || !leadership.is_leader() {
        return Some(KeySecret::Gone);
    }
    let namespace = secrets.namespace().unwrap_or_default();
    let again = tag_key_secret(namespace, name, bytes.expose_secret().to_vec());
    match secrets.create(&PostParams::default(), &again).await {
        Ok(_) => {
            warn!(
                %namespace, %name,
                "the tag key Secret was deleted while the operator ran: made again with the key in use"
            );
            Some(KeySecret::Same)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => None,
        Err(error) => {
            tracing::error!(%error, "making the tag key Secret again failed");
            Some(KeySecret::Gone)
        }
    }
}

/// Run the operator until SIGTERM/SIGINT.
pub async fn run(args: &RunArgs) -> Result<(), Error> {
    let shutdown = CancellationToken::new();
    shutdown_on_signal(shutdown.clone())?;
    info!(
        version = env!("CARGO_PKG_VERSION"),
        namespaces = %args
            .scopes()
            .iter()
            .map(|scope| scope.unwrap_or("(all)"))
            .collect::<Vec<_>>()
            .join(","),
        "starting slurm-operator"
    );
    let client = kube::Client::try_default()
        .await
        .map_err(Error::CreateClient)?;
    let metrics = Metrics::new();
    let readiness = Readiness::default();

    let listener = http::bind(args.metrics_addr).await?;
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "serving /healthz, /readyz and /metrics");
    }
    // Served through the whole stop, until the Lease is released: `/readyz` says 503 from the
    // first signal on, and the drain's last metrics can still be scraped.
    let served_until = CancellationToken::new();
    let server = tokio::spawn(http::serve(
        listener,
        http::router(metrics.clone(), readiness.clone()),
        served_until.clone(),
        http::Limits::default(),
    ));
    tokio::spawn({
        let (readiness, shutdown) = (readiness.clone(), shutdown.clone());
        async move {
            shutdown.cancelled().await;
            readiness.stop();
        }
    });

    let crds = tokio::select! {
        result = wait_for_crds(client.clone()) => result,
        () = shutdown.cancelled() => {
            info!("stopped before the CRDs were established");
            Ok(())
        }
    };
    if let Err(error) = crds {
        shutdown.cancel();
        served_until.cancel();
        let _ = server.await;
        return Err(error);
    }

    let mut ctx = Context::new(client.clone(), metrics);
    ctx.refused = std::sync::Arc::new(RefusedNamespaces::new(
        ctx.metrics.clone(),
        args.refused_namespace_grace,
    ));
    ctx.credentials_namespace = args.credentials_namespace();
    ctx.allowed_endpoints = args.allowed_endpoints.clone();
    ctx.deletion_deadline = args.deletion_deadline();
    ctx.slurmjob_debounce = args.slurmjob_debounce;
    ctx.reconcile_concurrency = args.reconcile_concurrency.max(1);
    info!(namespace = %ctx.credentials_namespace, "SlurmCluster credentials are read from this namespace only");
    let scopes = args.scopes();
    let key = tokio::select! {
        key = load_tag_key(
            &client,
            &ctx.credentials_namespace,
            &args.tag_key_secret,
            args.create_tag_key,
            &scopes,
            args.refused_namespace_grace,
        ) => Some(key),
        () = shutdown.cancelled() => None,
    };
    let key_bytes = match key {
        None => {
            info!("stopped before the tag key was read");
            served_until.cancel();
            let _ = server.await;
            return Ok(());
        }
        Some(Ok((key, bytes))) => {
            ctx.tag_key = key;
            bytes
        }
        Some(Err(error)) => {
            shutdown.cancel();
            served_until.cancel();
            let _ = server.await;
            return Err(error);
        }
    };
    // The Lease is kept until the controllers have stopped, not only until the shutdown began:
    // their reconciles under way finish as the leader's, and the next leader starts after them,
    // not beside them.
    let release = CancellationToken::new();
    let mut election = None;
    if let Some(lease) = args.lease().filter(|_| !shutdown.is_cancelled()) {
        match leader::elect(client, &lease, release.clone()).await {
            Ok((leadership, task)) => {
                info!(
                    lease = %format!("{}/{}", lease.namespace, lease.name),
                    identity = %lease.identity,
                    "leader election on: this replica writes only while it holds the Lease"
                );
                ctx.leadership = leadership;
                election = Some(task);
            }
            Err(error) => {
                shutdown.cancel();
                served_until.cancel();
                let _ = server.await;
                return Err(error.into());
            }
        }
    }
    let result = if shutdown.is_cancelled() {
        Ok(())
    } else {
        // One SlurmCluster controller (they are cluster-scoped), and one SlurmJob and
        // SlurmNodeSet controller per watched namespace (kube's reflector store is filled by
        // one watch, so several namespaces cannot share one); they share the Context.
        let mut drivers: Vec<BoxFuture<'static, ()>> = Vec::new();
        let mut stores = Vec::new();
        let (clusters, cluster_controller) =
            crate::controller::cluster::run(ctx.clone(), shutdown.clone());
        drivers.push(cluster_controller.boxed());
        // One watch of the Kubernetes nodes for every SlurmNodeSet controller.
        drivers.push(
            std::sync::Arc::clone(&ctx.cordons)
                .follow(ctx.client.clone(), shutdown.clone())
                .boxed(),
        );
        for scope in args.scopes() {
            let (slurmjobs, slurmjob_controller) = crate::controller::slurmjob::run(
                ctx.clone(),
                args.output_image.clone(),
                scope,
                shutdown.clone(),
            );
            let (nodesets, nodeset_controller) =
                crate::controller::nodeset::run(ctx.clone(), scope, shutdown.clone());
            drivers.extend([slurmjob_controller.boxed(), nodeset_controller.boxed()]);
            stores.push((scope.map(str::to_owned), slurmjobs, nodesets));
        }
        // The object gauges (cluster up, SlurmJobs by phase, ...) read the controllers' caches.
        ctx.metrics.watch_objects(ObjectSources {
            clusters: clusters.clone(),
            slurmjobs: stores.iter().map(|(_, j, _)| j.clone()).collect(),
            nodesets: stores.iter().map(|(_, _, n)| n.clone()).collect(),
            leadership: ctx.leadership.clone(),
        });
        let controllers = tokio::spawn(futures::future::join_all(drivers));
        tokio::spawn(keep_tag_key(
            ctx.client.clone(),
            ctx.credentials_namespace.clone(),
            args.tag_key_secret.clone(),
            (ctx.tag_key.clone(), key_bytes),
            args.create_tag_key,
            ctx.leadership.clone(),
            shutdown.clone(),
        ));
        // A replica that lost the Lease holds what a standby holds (`Context::lease_lost`).
        let mut lost = Box::pin(ctx.leadership.lost());
        let deposed = ctx.clone();
        tokio::spawn(async move {
            while futures::StreamExt::next(&mut lost).await.is_some() {
                let clusters = deposed.lease_lost();
                info!(
                    clusters,
                    "not the leader any more: dropped the SlurmCluster registrations and connections"
                );
            }
        });
        // A namespace refused, then served again, may say so to no watch (one that resumes
        // after its list brings no event): asked again at a steady pace while refused.
        let (probing, probe_client, stopping) =
            (ctx.refused.clone(), ctx.client.clone(), shutdown.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(REFUSED_PROBE) => probing.probe(&probe_client).await,
                    () = stopping.cancelled() => break,
                }
            }
        });
        let ready = readiness.clone();
        let slurmjob_caches = ctx.slurmjobs.clone();
        let refused = ctx.refused.clone();
        let grace = args.refused_namespace_grace;
        let stopping = shutdown.clone();
        tokio::spawn(async move {
            // Re-polled on a timer: kube's store readiness wakes only one waiter (the
            // controller's own), so a second waiter would sleep until something else wakes it.
            loop {
                let listings = futures::future::join_all(stores.iter().map(|(scope, j, n)| {
                    let refused_for = |kind| {
                        scope
                            .as_deref()
                            .and_then(|ns| refused.refused_for(ns, kind))
                    };
                    let (jobs_refused, sets_refused) =
                        (refused_for(SLURMJOBS), refused_for(SLURMNODESETS));
                    let clusters = &clusters;
                    async move {
                        let (clusters, slurmjobs, nodesets) = futures::join!(
                            listing(clusters, None),
                            listing(j, jobs_refused),
                            listing(n, sets_refused),
                        );
                        ScopeListings {
                            clusters,
                            slurmjobs,
                            nodesets,
                        }
                    }
                }));
                tokio::select! {
                    listings = listings => {
                        let scopes: Vec<_> = stores
                            .iter()
                            .map(|(scope, _, _)| scope.as_deref())
                            .zip(listings)
                            .collect();
                        match startup(&scopes, grace) {
                            Startup::Ready { refused } => {
                                if !refused.is_empty() {
                                    warn!(
                                        namespaces = %refused.join(","),
                                        "serving the other namespaces: the API server refuses the \
                                         operator's watches in these (403) for longer than \
                                         --refused-namespace-grace; they count as empty until \
                                         the operator's Role there is restored"
                                    );
                                }
                                slurmjob_caches.mark_listed();
                                // Not once the stop began: `/readyz` says 503 from the signal
                                // on (a select picks either of two ready arms).
                                if !stopping.is_cancelled() {
                                    ready.ready();
                                    info!("controllers running");
                                }
                                break;
                            }
                            Startup::Stopped => break,
                            Startup::Waiting => {}
                        }
                    },
                    () = stopping.cancelled() => break,
                }
            }
        });
        let result = controllers.await.map(drop).map_err(Error::ControllerTask);
        if !shutdown.is_cancelled() {
            warn!("the controllers stopped on their own; shutting down");
        }
        result
    };

    readiness.stop();
    shutdown.cancel();
    // Stop every poller: dropping a registration stops its poller.
    for cluster in ctx.clusters.clusters() {
        ctx.clusters.remove(&cluster);
    }
    release.cancel();
    if let Some(election) = election {
        // Releases the Lease: another replica takes it without forcing it.
        let _ = election.await;
    }
    served_until.cancel();
    let served = match server.await {
        Ok(served) => served.map_err(Error::from),
        Err(join) => Err(Error::ControllerTask(join)),
    };
    info!("stopped");
    result.and(served)
}

/// How one cache's first list stands, for readiness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listing {
    Listed,
    /// Its writer is gone: its controller stopped.
    Stopped,
    /// Not yet; the API server has refused its watch (403) for this long, if it has.
    Waiting {
        refused_for: Option<Duration>,
    },
}

/// One watched scope's caches (the SlurmCluster cache is shared by every scope).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ScopeListings {
    clusters: Listing,
    slurmjobs: Listing,
    nodesets: Listing,
}

/// How `store`'s first list stands, waiting for it at most [`READY_POLL`].
async fn listing<K>(
    store: &kube::runtime::reflector::Store<K>,
    refused_for: Option<Duration>,
) -> Listing
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    match tokio::time::timeout(READY_POLL, store.wait_until_ready()).await {
        Ok(Ok(())) => Listing::Listed,
        Ok(Err(_dropped)) => Listing::Stopped,
        Err(_elapsed) => Listing::Waiting { refused_for },
    }
}

/// What readiness makes of every scope's [`Listing`].
#[derive(Debug, PartialEq, Eq)]
enum Startup<'a> {
    /// Every scope listed, or a namespace refused for longer than the grace (named here): the
    /// operator is ready, and such a namespace counts as empty. A namespace's admin can delete
    /// the operator's Role there; that must not hold up every other team.
    Ready {
        refused: Vec<&'a str>,
    },
    Waiting,
    /// A controller stopped: readiness will not come.
    Stopped,
}

fn startup<'a>(scopes: &[(Option<&'a str>, ScopeListings)], grace: Duration) -> Startup<'a> {
    let all = || {
        scopes
            .iter()
            .flat_map(|(_, l)| [l.clusters, l.slurmjobs, l.nodesets])
    };
    if all().any(|l| l == Listing::Stopped) {
        return Startup::Stopped;
    }
    let mut refused = Vec::new();
    for (scope, listings) in scopes {
        if listings.clusters != Listing::Listed {
            return Startup::Waiting;
        }
        let mut counted = false;
        for listing in [listings.slurmjobs, listings.nodesets] {
            match (scope, listing) {
                (_, Listing::Listed) => {}
                // Only the cache whose own watch is refused counts as listed.
                (
                    Some(_),
                    Listing::Waiting {
                        refused_for: Some(t),
                    },
                ) if t >= grace => {
                    counted = true;
                }
                _ => return Startup::Waiting,
            }
        }
        if let (true, Some(namespace)) = (counted, scope) {
            refused.push(*namespace);
        }
    }
    Startup::Ready { refused }
}

/// Whether a Slurm job `job`'s tag key signed may be running: its job was submitted and has not
/// ended, or a submit of its current generation may have been made and its answer lost (a crash
/// before the status write: the status names no job, or an earlier run's). The rule a going
/// SlurmCluster holds its SlurmJobs by ([`plan::needs_cluster`] without a job listing): an
/// in-place edit, or the generation the API server adds at a deletion, is no submit.
///
/// [`plan::needs_cluster`]: crate::controller::slurmjob::plan::needs_cluster
fn may_run_a_signed_job(job: &CachedSlurmJob) -> bool {
    use crate::controller::slurmjob::plan::{ClusterUser, needs_cluster};
    // With or without the operator's finalizer (an admin may have taken it off).
    if job.job_id().is_some() && job.phase().is_none_or(|p| !p.is_terminal()) {
        return true;
    }
    let meta = kube::Resource::meta(job);
    // Undecodable: counted (the safe side: the start asks for the key to be restored).
    let Ok(object) = job.object() else {
        return true;
    };
    needs_cluster(
        ClusterUser {
            uid: meta.uid.as_deref().unwrap_or_default(),
            generation: meta.generation.unwrap_or(1),
            status: object.status.as_ref(),
            finalized: job.finalizers().iter().any(|f| f == crate::crd::FINALIZER),
            deleting: meta.deletion_timestamp.is_some(),
        },
        None,
        true,
    )
}

/// How many SlurmJobs [`live_tagged_slurmjobs`] names at most.
const NAMED_LIVE: usize = 5;

/// SlurmJobs (`namespace/name`, at most [`NAMED_LIVE`]) whose job was submitted and has not
/// ended: its ownership tag was signed with the tag key in use. Listed only when the key is
/// missing, in each watched namespace (or all; a watched namespace that refuses the operator
/// is skipped), in the controller's small pages and compact
/// form: a page's JSON is read whole, and scripts may be large (`tests/memory.rs`).
async fn live_tagged_slurmjobs(
    client: &kube::Client,
    scopes: &[Option<&str>],
    refused_grace: Duration,
) -> Result<Vec<String>, kube::Error> {
    let mut live = Vec::new();
    // One grace for every refused namespace together, not one each.
    let deadline = std::time::Instant::now() + refused_grace;
    for scope in scopes {
        let api: Api<CachedSlurmJob> = match scope {
            Some(namespace) => Api::namespaced(client.clone(), namespace),
            None => Api::all(client.clone()),
        };
        let mut params = ListParams::default().limit(crate::controller::slurmjob::LIST_PAGE);
        loop {
            let page = match api.list(&params).await {
                Ok(page) => page,
                // A namespace's admin can delete the operator's Role there: that must not stop
                // the operator for every team. Asked again for the grace (a Role made just
                // after the operator); then its SlurmJobs, if any ran with the lost key, will
                // call their jobs Lost.
                Err(kube::Error::Api(status)) if status.code == 403 && scope.is_some() => {
                    if std::time::Instant::now() < deadline {
                        tokio::time::sleep(READY_POLL.max(Duration::from_secs(1))).await;
                        continue;
                    }
                    warn!(
                        namespace = scope.unwrap_or_default(),
                        "not checked for SlurmJobs whose jobs the lost tag key signed: the API \
                         server refuses the operator there (403); SlurmJobs of it whose jobs \
                         the lost key signed will call them Lost"
                    );
                    break;
                }
                Err(error) => return Err(error),
            };
            live.extend(
                page.items
                    .iter()
                    .filter(|job| may_run_a_signed_job(job))
                    .map(|job| {
                        format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any())
                    }),
            );
            if live.len() >= NAMED_LIVE {
                live.truncate(NAMED_LIVE);
                return Ok(live);
            }
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => break,
            }
        }
    }
    Ok(live)
}

/// The first of `names` that is set and not blank, trimmed.
fn first_named<const N: usize>(names: [&Option<String>; N]) -> Option<String> {
    names
        .into_iter()
        .flatten()
        .map(|name| name.trim())
        .find(|name| !name.is_empty())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct RunCommand {
        #[command(flatten)]
        run: RunArgs,
    }

    /// A lost tag key may have signed the job of a SlurmJob whose job runs, and of one whose
    /// current generation's submit answer a crash may have lost (its status names no job or an
    /// earlier run's); not of one without the operator's finalizer (never submitted), nor of one
    /// whose generation was submitted (and ended) or refused.
    #[test]
    fn a_submit_whose_answer_was_lost_counts_as_signed_by_the_key() {
        // A SlurmJob at `generation`, with or without the operator's finalizer, being deleted
        // or not, with `status`: may a job it runs carry the key's signature?
        let job = |generation: i64, finalizer: bool, deleting: bool, status: serde_json::Value| {
            let finalizers: Vec<&str> = if finalizer {
                vec![crate::crd::FINALIZER]
            } else {
                vec![]
            };
            let mut metadata = serde_json::json!({"name": "j", "namespace": "ns", "uid": "u",
                                                  "generation": generation,
                                                  "finalizers": finalizers});
            if deleting {
                metadata["deletionTimestamp"] = "2024-01-01T00:00:00Z".into();
            }
            let job: crate::crd::SlurmJob = serde_json::from_value(serde_json::json!({
                "apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmJob",
                "metadata": metadata,
                "spec": {"clusterName": "main", "script": "#!/bin/sh\n"},
                "status": status,
            }))
            .unwrap();
            may_run_a_signed_job(&CachedSlurmJob::new(job).unwrap())
        };
        let running = || serde_json::json!({"phase": "Running", "jobId": 7});
        let ended = || {
            serde_json::json!({"phase": "Completed", "jobId": 7, "submittedGeneration": 1,
                               "observedGeneration": 1})
        };
        let rows: &[(&str, i64, bool, bool, serde_json::Value, bool)] = &[
            ("running", 1, true, false, running(), true),
            (
                "ended, its generation submitted",
                1,
                true,
                false,
                ended(),
                false,
            ),
            (
                "edited: a re-run may have been submitted",
                2,
                true,
                false,
                ended(),
                true,
            ),
            (
                "a first submit may have been made",
                1,
                true,
                false,
                serde_json::json!({}),
                true,
            ),
            (
                "no finalizer: never submitted",
                1,
                false,
                false,
                serde_json::json!({}),
                false,
            ),
            (
                "running, its finalizer taken off",
                1,
                false,
                false,
                running(),
                true,
            ),
            // An in-place edit (a release, a new time limit) is no submit: once its job ended,
            // the SlurmJob runs nothing.
            (
                "edited in place, ended",
                2,
                true,
                false,
                serde_json::json!({"phase": "Completed", "jobId": 7,
                                   "submittedGeneration": 1, "observedGeneration": 2}),
                false,
            ),
            // Nor is the generation the API server adds when a deletion begins.
            ("deleted after its run ended", 2, true, true, ended(), false),
            (
                "its generation refused",
                2,
                true,
                false,
                serde_json::json!({"phase": "Completed", "jobId": 7,
                                   "submittedGeneration": 1, "rejectedGeneration": 2}),
                false,
            ),
        ];
        for (what, generation, finalizer, deleting, status, signed) in rows {
            assert_eq!(
                job(*generation, *finalizer, *deleting, status.clone()),
                *signed,
                "{what}"
            );
        }
    }

    /// A cache whose own watch has been refused past the grace counts as listed, in a named
    /// namespace; one refused for less, one merely slow, the shared SlurmCluster cache, or a
    /// watch of all namespaces (whose rights no tenant can take) are waited for.
    #[test]
    fn readiness_waits_for_every_cache_but_a_refused_ones() {
        let grace = Duration::from_secs(30);
        let waiting = |secs: Option<u64>| Listing::Waiting {
            refused_for: secs.map(Duration::from_secs),
        };
        let listed = Listing::Listed;
        let scope = |clusters, slurmjobs, nodesets| ScopeListings {
            clusters,
            slurmjobs,
            nodesets,
        };
        let all = scope(listed, listed, listed);
        let ready = |refused: &[&'static str]| Startup::Ready {
            refused: refused.to_vec(),
        };
        type Scopes<'a> = &'a [(Option<&'a str>, ScopeListings)];
        let rows: &[(&str, Scopes<'_>, Startup<'_>)] = &[
            (
                "all listed",
                &[(Some("a"), all), (Some("b"), all)],
                ready(&[]),
            ),
            (
                "one not listed yet",
                &[
                    (Some("a"), all),
                    (Some("b"), scope(listed, waiting(None), listed)),
                ],
                Startup::Waiting,
            ),
            (
                "refused for less than the grace",
                &[
                    (Some("a"), all),
                    (
                        Some("b"),
                        scope(listed, waiting(Some(29)), waiting(Some(29))),
                    ),
                ],
                Startup::Waiting,
            ),
            (
                "refused past the grace",
                &[
                    (Some("a"), all),
                    (
                        Some("b"),
                        scope(listed, waiting(Some(30)), waiting(Some(31))),
                    ),
                ],
                ready(&["b"]),
            ),
            (
                "one cache refused, the other still listing",
                &[(Some("b"), scope(listed, waiting(None), waiting(Some(60))))],
                Startup::Waiting,
            ),
            (
                "refused past the grace, another namespace still listing",
                &[
                    (Some("a"), scope(listed, waiting(None), listed)),
                    (Some("b"), scope(listed, waiting(Some(60)), listed)),
                ],
                Startup::Waiting,
            ),
            (
                "the SlurmCluster cache not listed",
                &[(
                    Some("b"),
                    scope(waiting(None), waiting(Some(60)), waiting(Some(60))),
                )],
                Startup::Waiting,
            ),
            (
                "all namespaces",
                &[(None, scope(listed, waiting(Some(600)), listed))],
                Startup::Waiting,
            ),
            (
                "a controller stopped",
                &[
                    (Some("a"), scope(listed, Listing::Stopped, listed)),
                    (Some("b"), scope(listed, waiting(Some(60)), listed)),
                ],
                Startup::Stopped,
            ),
        ];
        for (what, scopes, expected) in rows {
            assert_eq!(&startup(scopes, grace), expected, "{what}");
        }
    }

    /// The tag key Secret deleted while the operator runs is made again by the leader with the
    /// key in use (a standby, or without --create-tag-key, says it is gone); one holding another
    /// key is told apart from the key in use.
    #[tokio::test]
    async fn a_deleted_tag_key_secret_is_made_again_with_the_key_in_use() {
        use k8s_openapi::api::core::v1::Namespace;
        use kube::api::DeleteParams;
        let api = fake_apiserver::FakeApiServer::start_with_crds(crate::crd::all()).await;
        let client = api.client();
        let namespace: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "admin"}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
        let (key, bytes) = load_tag_key(&client, "admin", "tag-key", true, &[None], Duration::ZERO)
            .await
            .unwrap();
        let secrets: Api<Secret> = Api::namespaced(client.clone(), "admin");
        let leader = crate::leader::Leadership::always();
        let (_standby_state, standby) = {
            let (sender, state) = tokio::sync::watch::channel(false);
            (sender, crate::leader::Leadership::follow(state))
        };
        let look = |create: bool, leadership: &crate::leader::Leadership| {
            let (secrets, key, bytes, leadership) = (&secrets, &key, &bytes, leadership.clone());
            async move { look_at_tag_key(secrets, "tag-key", key, bytes, create, &leadership).await }
        };
        assert_eq!(look(true, &leader).await, Some(KeySecret::Same));

        secrets
            .delete("tag-key", &DeleteParams::default())
            .await
            .unwrap();
        assert_eq!(
            look(true, &standby).await,
            Some(KeySecret::Gone),
            "a standby makes none"
        );
        assert_eq!(
            look(false, &leader).await,
            Some(KeySecret::Gone),
            "nor without create"
        );
        assert!(secrets.get_opt("tag-key").await.unwrap().is_none());
        assert_eq!(
            look(true, &leader).await,
            Some(KeySecret::Same),
            "made again"
        );
        let again = tag_key(&client, "admin", "tag-key", false, &[None], Duration::ZERO)
            .await
            .unwrap();
        assert!(again.same_as(&key), "with the key in use");

        let other = TagKey::generate_bytes().unwrap();
        secrets
            .replace(
                "tag-key",
                &PostParams::default(),
                &tag_key_secret("admin", "tag-key", other),
            )
            .await
            .unwrap();
        assert_eq!(look(true, &leader).await, Some(KeySecret::Other));
    }

    /// The probe clears a pair the API server serves again whose watch had listed before (one
    /// refused mid-run), keeps one it still refuses, and leaves one never listed to its watch:
    /// its cache is still empty.
    #[tokio::test]
    async fn the_probe_clears_what_is_served_again_and_had_listed() {
        use crate::crd::SlurmJob;
        use kube::runtime::watcher::Event;
        let api = fake_apiserver::FakeApiServer::start_with_crds(crate::crd::all()).await;
        api.forbid_namespace("b");
        let refused = RefusedNamespaces::new(Metrics::new(), Duration::ZERO);
        for namespace in ["a", "b"] {
            refused.observe::<SlurmJob>(namespace, SLURMJOBS, &Ok(Event::InitDone));
            refused.set(namespace, SLURMJOBS, true);
        }
        refused.set("c", SLURMJOBS, true);
        refused.probe(&api.client()).await;
        assert_eq!(
            refused.marked(),
            [("b".to_owned(), SLURMJOBS), ("c".to_owned(), SLURMJOBS)]
        );
        api.allow_namespace("b");
        refused.probe(&api.client()).await;
        assert_eq!(refused.marked(), [("c".to_owned(), SLURMJOBS)]);
        refused.observe::<SlurmJob>("c", SLURMJOBS, &Ok(Event::InitDone));
        assert!(refused.marked().is_empty());
    }

    #[test]
    fn flags_default_to_all_namespaces_and_port_8080() {
        let cli = RunCommand::try_parse_from(["run"]).unwrap();
        assert_eq!(cli.run.scopes(), [None]);
        assert_eq!(cli.run.metrics_addr, "[::]:8080".parse().unwrap());
        assert_eq!(
            cli.run.refused_namespace_grace,
            crate::controller::context::DEFAULT_REFUSED_NAMESPACE_GRACE
        );
        let cli = RunCommand::try_parse_from([
            "run",
            "--namespace",
            "slurm",
            "--metrics-addr",
            "127.0.0.1:9",
        ])
        .unwrap();
        assert_eq!(cli.run.scopes(), [Some("slurm")]);
        assert_eq!(cli.run.metrics_addr.port(), 9);
        let cli = RunCommand::try_parse_from(["run", "--namespace", ""]).unwrap();
        assert_eq!(cli.run.scopes(), [None], "empty means all");
        let cli = RunCommand::try_parse_from([
            "run",
            "--namespace",
            "hpc,slurm",
            "--namespace",
            "ai",
            "--namespace",
            "hpc",
        ])
        .unwrap();
        assert_eq!(
            cli.run.scopes(),
            [Some("ai"), Some("hpc"), Some("slurm")],
            "comma-separated, repeated, each once"
        );
    }

    #[test]
    fn leader_election_is_off_by_default_and_takes_the_lease_settings() {
        let cli = RunCommand::try_parse_from(["run"]).unwrap();
        assert!(cli.run.lease().is_none());
        let cli = RunCommand::try_parse_from([
            "run",
            "--leader-election",
            "--leader-election-lease",
            "my-lease",
            "--leader-election-namespace",
            "slurm-system",
            "--leader-election-identity",
            "pod-0",
            "--lease-duration",
            "20s",
            "--lease-grace",
            "4s",
        ])
        .unwrap();
        let lease = cli.run.lease().unwrap();
        assert_eq!(lease.name, "my-lease");
        assert_eq!(lease.namespace, "slurm-system");
        assert_eq!(lease.identity, "pod-0");
        assert_eq!(lease.duration, Duration::from_secs(20));
        assert_eq!(lease.grace, Duration::from_secs(4));
    }

    /// The credentials namespace follows the operator's own, never the Lease's.
    #[test]
    fn the_credentials_namespace_is_the_flag_else_the_operators_own() {
        let parsed = |args: &[&str]| {
            let cli = RunCommand::try_parse_from(["run", "--leader-election"].iter().chain(args))
                .unwrap();
            (
                cli.run.credentials_namespace(),
                cli.run.lease().unwrap().namespace,
            )
        };
        let own = ["--pod-namespace", "slurm-operator-ns"];
        let lease = ["--leader-election-namespace", "kube-system"];
        let flag = ["--credentials-namespace", "slurm-admin"];
        let rows: [(Vec<&str>, (&str, &str)); 5] = [
            (own.to_vec(), ("slurm-operator-ns", "slurm-operator-ns")),
            ([own, lease].concat(), ("slurm-operator-ns", "kube-system")),
            (lease.to_vec(), ("slurm-operator", "kube-system")),
            ([own, lease, flag].concat(), ("slurm-admin", "kube-system")),
            (
                ["--credentials-namespace", " ", "--pod-namespace", "x"].to_vec(),
                ("x", "x"),
            ),
        ];
        for (args, (credentials, lease)) in rows {
            assert_eq!(
                parsed(&args),
                (credentials.to_owned(), lease.to_owned()),
                "{args:?}"
            );
        }
        assert_eq!(
            crate::controller::context::DEFAULT_CREDENTIALS_NAMESPACE,
            "slurm-operator"
        );
    }

    #[test]
    fn the_deletion_deadline_defaults_to_15_minutes_and_0s_means_none() {
        let cli = RunCommand::try_parse_from(["run"]).unwrap();
        assert_eq!(
            cli.run.deletion_deadline(),
            Some(Duration::from_secs(15 * 60))
        );
        assert_eq!(
            cli.run.deletion_deadline(),
            Some(crate::controller::context::DEFAULT_DELETION_DEADLINE)
        );
        let cli = RunCommand::try_parse_from(["run", "--deletion-deadline", "90s"]).unwrap();
        assert_eq!(cli.run.deletion_deadline(), Some(Duration::from_secs(90)));
        let cli = RunCommand::try_parse_from(["run", "--deletion-deadline", "0s"]).unwrap();
        assert_eq!(cli.run.deletion_deadline(), None);
    }
}
